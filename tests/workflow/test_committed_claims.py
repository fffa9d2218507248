"""The committed default-scale verdicts (results/default/*/claims.json) keep the contract: each is
what its own evidence and control give, so none can have been edited by hand or left stale."""
import json

import pytest

from papers.common.claims import (FAILS, HOLDS, INCONCLUSIVE, MIN_REPLICATES, NOT_MEASURED, all_of, decide,
                                  validate_claims)
from smk import PAPERS, ROOT

COMMITTED = ROOT / "results" / "default"


def _recomputed(test: dict) -> str:
    interval = [float("nan") if x is None else x for x in test["interval"]]
    threshold = float("nan") if test["threshold"] is None else test["threshold"]
    raw = decide(interval, threshold, test["direction"])
    return INCONCLUSIVE if raw in (HOLDS, FAILS) and test["replicates"] < MIN_REPLICATES else raw


def _verdict_of(evidence: dict | None) -> str:
    if evidence is None:
        return NOT_MEASURED
    parts = evidence.get("parts") or [evidence]
    for part in parts:
        assert part["verdict"] == _recomputed(part), part
    return all_of([p["verdict"] for p in parts])


@pytest.mark.parametrize("slug", PAPERS)
def test_committed_verdicts_follow_from_their_evidence(slug):
    path = COMMITTED / slug / "claims.json"
    data = json.loads(path.read_text())
    validate_claims(data)
    assert data["paper"] == slug and data["scale"] == "default" and data["scope"] in ("replication", "analogue")
    for claim in data["claims"]:
        where = f"{slug}/{claim['id']}"
        raw = _verdict_of(claim.get("evidence"))
        control = claim["control"]
        assert control["verdict"] == _verdict_of(control.get("evidence")), where
        expected = INCONCLUSIVE if raw == HOLDS and control["verdict"] == HOLDS else raw
        positive = claim.get("positive_control")
        if positive is not None:
            assert positive["verdict"] == _verdict_of(positive.get("evidence")), where
        blocked = not all(g["met"] for g in claim["premise"]) or (positive is not None and positive["verdict"] != HOLDS)
        if blocked and expected != NOT_MEASURED:
            expected = INCONCLUSIVE  # a premise unmet or an analysis blind where the effect is planted decides nothing
        assert claim["verdict"] == expected, f"{where}: {claim['verdict']} but its evidence gives {expected}"
        if claim["verdict"] != HOLDS:
            assert claim.get("note"), f"{where}: a claim that does not hold says why"


def test_summary_counts_every_committed_claim():
    import csv

    with open(COMMITTED / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    per_paper = {slug: len(json.loads((COMMITTED / slug / "claims.json").read_text())["claims"]) for slug in PAPERS}
    assert {r["paper"] for r in rows} == set(PAPERS)
    assert len(rows) == sum(per_paper.values())
    for r in rows:
        assert r["verdict"] in (HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED)


def test_the_readme_table_gives_each_papers_committed_verdict_counts():
    """README's Papers table (holds / does not hold / inconclusive / not measured) is the committed claims.json's count,
    so the page a user reads first cannot lag behind a rerun."""
    import re

    rows = {m.group(1): tuple(int(n) for n in m.group(2).split(" / ")) for m in re.finditer(
        r"^\| P\d+ \| `(\w+)` \|[^|]*\| (\d+ / \d+ / \d+ / \d+) \|", (ROOT / "README.md").read_text(), re.M)}
    assert set(rows) == set(PAPERS)
    for slug in PAPERS:
        verdicts = [c["verdict"] for c in json.loads((COMMITTED / slug / "claims.json").read_text())["claims"]]
        counted = tuple(verdicts.count(v) for v in (HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED))
        assert rows[slug] == counted, f"README's row for {slug} says {rows[slug]}, its claims.json {counted}"
