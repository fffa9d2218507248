"""Does a fresh run reproduce a reference run? Verdicts and intervals, not bytes.

On one machine, reruns give identical tables (tests/workflow/test_dag.py checks it). On another
machine, floating-point paths differ (BLAS kernels, thread counts, CPU instruction sets), training
trajectories drift, and numbers move, sometimes well past the last digits. What must agree there is
what a run concludes: each claim's verdict, and its control's, with the intervals of the two runs
overlapping (a measured effect that moved further than the two intervals allow is flagged even
when the verdict stayed). Timed evidence (wall-clock exponents) is compared by verdict only.

Used by scripts/compare_results.py:
``python scripts/compare_results.py results/default results/<fresh run>``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Difference:
    """One way in which a claim of the fresh run departs from the reference."""

    paper: str
    claim: str
    what: str

    def __str__(self) -> str:
        return f"{self.paper} ({self.claim}): {self.what}"


def _tests(evidence: dict | None) -> list[dict]:
    """The evidence and its parts, each with a name ('' for the whole)."""
    if not evidence:
        return []
    return [{"name": "", **evidence}, *evidence.get("parts", [])]


def _numeric(interval) -> bool:
    return interval is not None and all(isinstance(x, (int, float)) for x in interval)


def _overlap(a, b) -> bool:
    """Two intervals overlap; two missing ones (e.g. too few replicates for an interval) agree too."""
    if _numeric(a) and _numeric(b):
        return a[0] <= b[1] and b[0] <= a[1]
    return not _numeric(a) and not _numeric(b)


def _compare_evidence(ref: dict | None, new: dict | None, where: str) -> list[str]:
    found = []
    new_tests = {t.get("name", ""): t for t in _tests(new)}
    for r in _tests(ref):
        n = new_tests.get(r.get("name", ""))
        label = f"{where}{' part ' + repr(r['name']) if r.get('name') else ''}"
        if n is None:
            found.append(f"{label}: missing in the fresh run")
        elif not (r.get("timed") or n.get("timed")) and not _overlap(r.get("interval"), n.get("interval")):
            found.append(f"{label}: interval {_fmt(n.get('interval'))} does not overlap the reference's "
                         f"{_fmt(r.get('interval'))}")
    return found


def _fmt(interval) -> str:
    return f"[{interval[0]:.4g}, {interval[1]:.4g}]" if _numeric(interval) else str(interval)


def compare_paper(reference: dict, fresh: dict, paper: str) -> tuple[int, list[Difference]]:
    """(claims compared, differences) between two claims.json documents of one paper."""
    fresh_claims = {c["id"]: c for c in fresh["claims"]}
    found = []
    for ref in reference["claims"]:
        new = fresh_claims.pop(ref["id"], None)
        if new is None:
            found.append(Difference(paper, ref["id"], "missing in the fresh run"))
            continue
        if new["verdict"] != ref["verdict"]:
            found.append(Difference(paper, ref["id"], f"verdict '{new['verdict']}', reference '{ref['verdict']}'"))
        ref_control, new_control = ref.get("control") or {}, new.get("control") or {}
        if new_control.get("verdict") != ref_control.get("verdict"):
            found.append(Difference(paper, ref["id"], f"control verdict '{new_control.get('verdict')}', "
                                                      f"reference '{ref_control.get('verdict')}'"))
        ref_pos, new_pos = ref.get("positive_control") or {}, new.get("positive_control") or {}
        if new_pos.get("verdict") != ref_pos.get("verdict"):
            found.append(Difference(paper, ref["id"], f"positive control verdict '{new_pos.get('verdict')}', "
                                                      f"reference '{ref_pos.get('verdict')}'"))
        unmet = lambda c: sorted(g["name"] for g in c.get("premise", []) if not g["met"])  # noqa: E731
        if unmet(new) != unmet(ref):
            found.append(Difference(paper, ref["id"], f"premise gates unmet {unmet(new)}, reference {unmet(ref)}"))
        found += [Difference(paper, ref["id"], w) for w in
                  _compare_evidence(ref.get("evidence"), new.get("evidence"), "evidence")
                  + _compare_evidence(ref_control.get("evidence"), new_control.get("evidence"), "control")]
    found += [Difference(paper, cid, "not in the reference") for cid in fresh_claims]
    return len(reference["claims"]), found


def scales(folder: Path) -> set[str]:
    """The scales of the claims files in a results folder (one, unless the folder mixes runs)."""
    return {json.loads(f.read_text()).get("scale") for f in Path(folder).glob("*/claims.json")}


def compare_runs(reference: Path, fresh: Path) -> tuple[list[str], int, list[Difference]]:
    """(papers compared, claims compared, differences) for every paper the fresh run has. Raises ValueError
    when the two folders hold results of different scales: their verdicts are not meant to agree."""
    ref_scales, new_scales = scales(reference), scales(fresh)
    if ref_scales and new_scales and ref_scales != new_scales:
        raise ValueError(f"{reference} holds the {', '.join(sorted(ref_scales))} scale and {fresh} the "
                         f"{', '.join(sorted(new_scales))} scale: compare runs of one scale")
    papers, claims, found = [], 0, []
    for new_file in sorted(Path(fresh).glob("*/claims.json")):
        paper = new_file.parent.name
        ref_file = Path(reference) / paper / "claims.json"
        if not ref_file.is_file():
            found.append(Difference(paper, "-", f"no reference {ref_file}"))
            continue
        n, diffs = compare_paper(json.loads(ref_file.read_text()), json.loads(new_file.read_text()), paper)
        papers.append(paper)
        claims += n
        found += diffs
    return papers, claims, found
