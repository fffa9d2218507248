"""A paper's section of the summary (``report.md``): what was run, the table, the figures, the
claim verdicts, the run time, and what differs from the paper, in plain words."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd

from papers.common.claims import FAILS, HOLDS, Check, Claim, Scope, describe, states_text
from papers.common.io import ensure_parent


def job_times(benchmarks) -> dict:
    """Summed job time from Snakemake `benchmark:` files (TSV): `seconds`, the wall time each job ran
    (column `s`); `cpu_seconds`, the CPU time its processes used (`cpu_time`); and the job count.
    Wall time exceeds CPU time when other work shares the cores (or a job waits on I/O)."""
    seconds, cpu, jobs = 0.0, 0.0, 0
    for path in benchmarks:
        df = pd.read_csv(path, sep="\t")
        seconds += float(df["s"].iloc[0])
        cpu += float(df["cpu_time"].iloc[0]) if "cpu_time" in df else float("nan")
        jobs += 1
    return {"seconds": seconds, "cpu_seconds": cpu, "jobs": jobs}


def run_time(benchmarks) -> tuple[float, int]:
    """Total wall time (s) and job count from Snakemake `benchmark:` files (TSV with a column `s`)."""
    t = job_times(benchmarks)
    return t["seconds"], t["jobs"]


def short(value) -> str:
    """A measured value in one table cell."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "; ".join(f"{k}={short(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(short(v) for v in value) + "]"
    return json.dumps(value) if not isinstance(value, str) else value


def _cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def verdict_cell(verdict: str, scope: str = "") -> str:
    """Bold for every state but "holds", so that what is not evidence for a claim stands out. In an analogue,
    "does not hold" reads as what it is: not reproduced in this stand-in, not a refutation of the paper."""
    if verdict == HOLDS:
        return verdict
    if verdict == FAILS and scope == "analogue":
        return f"**{verdict}** (not reproduced in this analogue)"
    return f"**{verdict}**"


def premise_cell(premise) -> str:
    """'met (2 gates)', 'NOT met: name (measured, requires ...)' or 'none stated' (Premise objects or dicts)."""
    gates = [g if isinstance(g, dict) else g.to_json() for g in premise]
    if not gates:
        return "none stated"
    unmet = [g for g in gates if not g["met"]]
    if not unmet:
        return f"met ({len(gates)} gate{'s' if len(gates) > 1 else ''})"
    return "NOT met: " + "; ".join(f"{g['name']} ({short(g['measured'])}, requires {g['requirement']})" for g in unmet)


def verdict_table(claims: list[Claim], scope: Scope) -> str:
    """The short table a report opens with: per claim its verdict, the deciding evidence, its premise and
    both controls' verdicts."""
    lines = ["| claim | verdict | effect [95% interval] vs threshold (source) | premise | negative control | "
             "positive control |", "|---|---|---|---|---|---|"]
    for c in claims:
        pos = c.positive_control.verdict if c.positive_control is not None else "none"
        cells = [f"({c.id}) {c.statement}", verdict_cell(c.verdict, scope.kind),
                 f"{c.describe_evidence()} ({c.threshold_source.kind})", premise_cell(c.premise),
                 f"{c.control.verdict} ({c.control.kind})", pos]
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return "\n".join(lines) + "\n"


def claims_markdown(claims: list[Claim], scope: Scope | None = None) -> str:
    """The claims table in full: the measured values, the criterion and where its threshold comes from, the
    evidence, the premise gates, the verdict and both controls; notes below (why a claim does not hold)."""
    lines = ["| id | claim | paper | measured | criterion (threshold source) | evidence | premise | verdict | "
             "negative control | positive control |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in claims:
        control = f"{c.control.verdict} ({c.control.kind}): {c.control.description}"
        if c.control.evidence is not None:
            control += f" ({describe(c.control.evidence)})"
        if c.positive_control is not None:
            positive = f"{c.positive_control.verdict}: {c.positive_control.description}"
            if c.positive_control.evidence is not None:
                positive += f" ({describe(c.positive_control.evidence)})"
        else:
            positive = f"none: {c.no_positive_control}" if c.no_positive_control else "none"
        gates = "; ".join(("met" if g.met else "NOT met") + f": {g.describe()}" for g in c.premise) or "none stated"
        source = f"{c.threshold_source.kind}: {c.threshold_source.detail}"
        cells = [c.id, c.statement, c.paper, short(c.measured), f"{c.criterion} ({source})", c.describe_evidence(),
                 gates, verdict_cell(c.verdict, scope.kind if scope else ""), control, positive]
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    notes = [f"- ({c.id}) {c.note}" for c in claims if c.note]
    powers = []
    for c in claims:
        pw = c.power()
        if pw and "paper_effect" in pw:
            powers.append(f"- ({c.id}) half-width {pw['half_width']:.3g} against the paper's effect {pw['paper_effect']:.3g}, "
                          f"{pw['paper_effect_to_threshold']:.3g} from the threshold: the design "
                          + ("can" if pw["resolves_paper_effect"] else "cannot") + " tell the paper's effect from it")
    return ("\n".join(lines) + "\n" + ("\nNotes:\n" + "\n".join(notes) + "\n" if notes else "")
            + ("\nPower (the deciding interval's half-width beside the paper's effect):\n" + "\n".join(powers) + "\n"
               if powers else ""))


def checks_markdown(checks) -> str:
    """The checks (true by construction or self-consistency): shown, never counted as claims."""
    if not checks:
        return ""
    lines = ["| check | statement | measured | requirement | passed |", "|---|---|---|---|---|"]
    for k in checks:
        lines.append("| " + " | ".join(_cell(x) for x in (k.id, k.statement, short(k.measured), k.requirement,
                                                             "yes" if k.passed else "**no**")) + " |")
    return "\n".join(lines) + "\n"


def write_report(path, *, title: str, scale: str, what_was_run: str, table_md, figures, claims: list[Claim],
                 benchmarks, differences: str, scope: Scope, verdicts_figure, checks: list[Check] = ()) -> None:
    """Write `report.md` for one paper: a verdict table and the forest plot (`verdicts_figure`, drawn here)
    first, then what was run, the results, the claims in full, the checks and what differs from the paper.
    `figures` are paths; links are made relative to `path`."""
    from papers.common import provenance
    from papers.common.forest import forest_plot

    path = ensure_parent(path)
    seconds, jobs = run_time(benchmarks)
    forest_plot(claims, verdicts_figure)
    link = lambda f: f"![{Path(f).stem}]({os.path.relpath(f, path.parent)})"  # noqa: E731
    figure_lines = [link(f) for f in figures]
    head = provenance.markdown()
    caveat = ("> Smoke scale: a run of seconds that checks the pipeline end to end. Its tiny models and few "
              "replicates are not evidence for or against any claim; see the default scale.\n\n" if scale == "smoke" else "")
    scope_line = (f"Scope: **{scope.kind}**: {scope.detail}"
                  + (" A claim that does not hold here is not reproduced in this analogue; it does not refute the "
                     "paper." if scope.kind == "analogue" else ""))
    checks_part = ["### Checks (true by construction or self-consistency; not claims)", "", checks_markdown(checks)] \
        if checks else []
    text = "\n".join([
        f"## {title}",
        "",
        caveat + f"Scale `{scale}`; of {len(claims)} claims: {states_text(c.verdict for c in claims)}"
        + (f"; {sum(k.passed for k in checks)} of {len(checks)} checks pass" if checks else "")
        + f". Run time: {seconds:.1f} s summed over {jobs} jobs (Snakemake benchmarks; wall time is lower when jobs "
        "run side by side).",
        "",
        scope_line,
        "",
        verdict_table(claims, scope),
        link(verdicts_figure),
        "",
        *([head, ""] if head else []),
        "### What was run",
        "",
        what_was_run.strip(),
        "",
        "### Results",
        "",
        Path(table_md).read_text().strip(),
        "",
        *figure_lines,
        "",
        "### Claims",
        "",
        claims_markdown(claims, scope),
        *checks_part,
        "### What differs from the paper",
        "",
        differences.strip(),
        "",
    ])
    path.write_text(text)
    write_page(path, verdicts_figure, claims, scope)
    write_verdicts_caption(verdicts_figure, claims, checks, scope)


def _rst(text: str) -> str:
    """Plain text as reStructuredText (no markup read into it)."""
    for char in ("\\", "|", "*", "`", "_"):
        text = text.replace(char, "\\" + char)
    return text


def write_verdicts_caption(verdicts_figure, claims: list[Claim], checks, scope: Scope) -> Path:
    """The forest plot's caption for the HTML report, computed from this run (reStructuredText beside the figure,
    ``figures/verdicts.rst``; workflow/report/verdicts.rst includes it)."""
    lines = [_rst(f"Scope: {scope.kind} ({scope.detail}). Of {len(claims)} claims: "
                  f"{states_text(c.verdict for c in claims)}"
                  + (f"; {sum(k.passed for k in checks)} of {len(checks)} checks pass" if checks else "") + "."), ""]
    for c in claims:
        detail = (f"{c.describe_evidence()}; premise {premise_cell(c.premise)}; negative control ({c.control.kind}) "
                  f"{c.control.verdict}" + (f"; positive control {c.positive_control.verdict}"
                                            if c.positive_control is not None else ""))
        lines.append(f"- claim {_rst(c.id)}: **{c.verdict}**: {_rst(detail)}")
    out = Path(verdicts_figure).with_suffix(".rst")
    out.write_text("\n".join(lines) + "\n")
    return out


PAGE_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:1em auto;line-height:1.45;font-size:14px}"
              "table{border-collapse:collapse;margin:.6em 0;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;"
              "vertical-align:top}th{background:#f3f3f3}img{max-width:100%}code{background:#f6f6f6}")


def write_page(report_md, verdicts_figure, claims: list[Claim], scope: Scope) -> Path:
    """``report.html`` beside ``report.md``: the same text rendered, for the HTML report (`make report`), where it
    opens the paper's section. The forest plot is embedded (the HTML report shows a page on its own, without the
    files around it); the other figures are items of the section and are named here, not embedded."""
    import base64

    import markdown

    report_md = Path(report_md)
    text = report_md.read_text()
    forest = os.path.relpath(verdicts_figure, report_md.parent)
    data = base64.b64encode(Path(verdicts_figure).read_bytes()).decode()
    text = text.replace(f"]({forest})", f"](data:image/png;base64,{data})")
    text = re.sub(r"!\[([^\]]*)\]\((?!data:)([^)]+)\)", r"*(figure `\2`: an item of this section)*", text)
    body = markdown.markdown(text, extensions=["tables"])
    counts = states_text(c.verdict for c in claims)
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{report_md.parent.name}: {counts}</title>"
            f"<style>{PAGE_STYLE}</style></head><body>{body}</body></html>\n")
    out = report_md.with_suffix(".html")
    out.write_text(page)
    return out
