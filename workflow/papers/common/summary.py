"""The cross-paper summary: one row per claim of every selected paper, with its verdict, the evidence
behind it, its negative control, and links to the paper's report and table."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from papers.common.claims import STATES, count_states
from papers.common.io import ensure_parent, read_json
from papers.common.records import JOB_TIMES, complete_job_times
from papers.common.report import premise_cell, short, verdict_cell


def _evidence_cell(ev: dict | None) -> str:
    if not ev:
        return "not measured"
    lo, hi = ev["interval"]
    fmt = lambda x: "n/a" if x is None else f"{x:.4g}"  # noqa: E731
    return f"{fmt(ev['effect'])} [{fmt(lo)}, {fmt(hi)}] {ev['direction']} {fmt(ev['threshold'])} (n={ev['replicates']})"


def time_table(job_benchmarks: dict, time_budget: dict, recorded: dict | None = None) -> pd.DataFrame:
    """Per paper: its jobs' summed wall and CPU time (benchmark files, `job_benchmarks` = {slug: paths})
    against its budget (`time_budget`: seconds by slug, `default` for the others; none: no budget). A paper
    whose benchmark files are not all here (a clone: benchmarks/ is not committed) takes the sums its own run
    recorded beside its results (`recorded`: {slug: job_times.csv}, see papers.common.records); with neither,
    it has no row."""
    rows = []
    for slug, paths in job_benchmarks.items():
        t = complete_job_times(paths)
        if t is None and recorded and Path(recorded.get(slug, "")).is_file():
            row = pd.read_csv(recorded[slug]).iloc[0]
            t = {"jobs": int(row["jobs"]), "seconds": float(row["seconds"]), "cpu_seconds": float(row["cpu_seconds"])}
        if t is None:
            continue
        budget = time_budget.get(slug, time_budget.get("default"))
        if budget is None:
            within = "no budget"
        elif t["seconds"] <= budget:
            within = "yes"
        elif t["cpu_seconds"] <= budget:  # the wall time includes waiting for cores other work held
            within = "over in wall time, within in CPU time"
        else:
            within = "over"
        rows.append({"paper": slug, "jobs": t["jobs"], "seconds": t["seconds"], "cpu_seconds": t["cpu_seconds"],
                     "budget_seconds": budget, "within_budget": within})
    return pd.DataFrame(rows, columns=["paper", "jobs", "seconds", "cpu_seconds", "budget_seconds", "within_budget"])


def _time_lines(times: pd.DataFrame) -> list[str]:
    if times.empty:
        return []
    fmt = lambda x: "-" if x is None or pd.isna(x) else f"{x:.0f}"  # noqa: E731
    lines = ["", "## Run time per paper", "",
             "Summed over each paper's jobs, from Snakemake's benchmark files: the wall time each job ran (`s`) "
             "and the CPU time its processes used (`cpu_time`). Wall time above CPU time means the job waited for "
             "cores that other work held, so it overstates the paper's cost. Budgets: `time_budget` in the config. "
             "A paper not rerun where this summary was written (a clone) keeps the sums its own run recorded beside its "
             "results (<paper>/job_times.csv).",
             "", "| paper | jobs | summed job time (s) | CPU time (s) | budget (s) | within budget |",
             "|---|---|---|---|---|---|"]
    for r in times.itertuples(index=False):
        lines.append(f"| {r.paper} | {r.jobs} | {fmt(r.seconds)} | {fmt(r.cpu_seconds)} | {fmt(r.budget_seconds)} | "
                     f"{r.within_budget} |")
    return lines


def write_summary(*, claims, reports, summary_md, summary_csv, scale: str, job_benchmarks=None,
                  time_budget=None, job_times_csv=None, verdicts_figure=None) -> None:
    """Aggregate the papers' ``claims.json`` files (list `claims`, same order as `reports`), and their
    run time against the budget (`job_benchmarks`: {slug: benchmark files}, read where they are complete; a
    paper without them, as on a clone, takes the sums its run recorded beside its claims, see time_table)."""
    rows, plotted, checks = [], [], []
    # A run of a subset of papers must not silently shrink a fuller summary: papers already in this
    # results folder but not selected now are kept, marked as not rerun.
    selected = {Path(c).resolve() for c in claims}
    kept = sorted(p for p in Path(summary_md).parent.glob("*/claims.json") if p.resolve() not in selected)
    sources = [(c, r, True) for c, r in zip(claims, reports)] + [(p, p.with_name("report.md"), False) for p in kept]
    claims_of = {}  # slug: its claims.json
    for claims_path, report_path, rerun in sources:
        data = read_json(claims_path)
        claims_of[data["paper"]] = Path(claims_path)
        scope = data.get("scope", "")
        checks += [{"paper": data["paper"], **k} for k in data.get("checks", [])]
        for c in data["claims"]:
            ev = c.get("evidence")
            pos = c.get("positive_control")
            plotted.append({"paper": data["paper"], **c})
            rows.append({
                "paper": data["paper"],
                "scope": scope,
                "claim": c["id"],
                "statement": c["statement"],
                "paper_value": c["paper"],
                "measured": short(c["measured"]),
                "verdict": c["verdict"],
                "effect": ev["effect"] if ev else None,
                "low": ev["interval"][0] if ev else None,
                "high": ev["interval"][1] if ev else None,
                "threshold": ev["threshold"] if ev else None,
                "direction": ev["direction"] if ev else None,
                "replicates": ev["replicates"] if ev else 0,
                "evidence": _evidence_cell(ev),
                "threshold_source": (c.get("threshold_source") or {}).get("kind", ""),
                "premise": premise_cell(c.get("premise", [])),
                "premise_met": all(g["met"] for g in c.get("premise", [])),
                "control": c["control"]["description"],
                "control_kind": c["control"].get("kind", ""),
                "control_verdict": c["control"]["verdict"],
                "positive_control_verdict": pos["verdict"] if pos else "none",
                "note": c.get("note", ""),
                "scale": c["scale"],
                "rerun": rerun,
                "report": os.path.relpath(report_path, Path(summary_md).parent),
                "table": os.path.relpath(Path(claims_path).with_name("table.md"), Path(summary_md).parent),
            })
    df = pd.DataFrame(rows)
    df.to_csv(ensure_parent(summary_csv), index=False, float_format="%.6g")

    counts = count_states(df["verdict"])
    papers = list(dict.fromkeys(df["paper"]))
    old = list(dict.fromkeys(df.loc[~df["rerun"], "paper"]))
    run = Path(summary_md).parent.name
    lines = [
        f"# Summary: run `{run}`" + (f" (scale `{scale}`)" if run != scale else ""),
        "",
        f"{len(df)} claims across {len(papers)} papers ({', '.join(papers)}): "
        + ", ".join(f"**{counts[s]} {s}**" for s in STATES) + ".",
        "",
        f"Premise gates: {int(df['premise_met'].sum() - (df['premise'] == 'none stated').sum())} claims with their "
        f"premise met, {int((~df['premise_met']).sum())} with a gate unmet, {int((df['premise'] == 'none stated').sum())} "
        f"stating none; {int((df['positive_control_verdict'] != 'none').sum())} with a positive control. Scope: "
        + ", ".join(f"{k} {v}" for k, v in df.drop_duplicates('paper')['scope'].replace('', 'unstated')
                    .value_counts().items()) + " papers.",
        "",
        *([f"Kept from an earlier run in this folder (not selected now): {', '.join(old)}.", ""] if old else []),
        "Each verdict is computed from measured data: a claim **holds** when the whole interval of its effect "
        "(over independent replicates) clears the threshold fixed in the config, **does not hold** when the whole "
        "interval misses it, and is **inconclusive** otherwise, or when fewer than 3 replicates stand behind it, or "
        "when the same criterion also holds on its negative control (a run where the paper's mechanism is absent), "
        "or when a **premise** gate is unmet (the setting lacks what the claim presupposes: the model did not learn, "
        "the arms did not converge), or when its **positive control** (the same analysis where the effect is "
        "planted) does not hold. **Not measured** (e.g. a GPU-only figure on a CPU) is not a failure. **Scope**: "
        "`replication` runs the paper's data and method at reduced size; `analogue` a named stand-in, where a claim "
        "that does not hold is *not reproduced in this analogue*, not refuted. The threshold's source is the paper, "
        "a reference measured in the same run (`derived`) or a `convention` (a sign, a tolerance). Each paper's "
        "report gives the criterion, the evidence, the premise gates, the controls and, for a claim that does not "
        "hold, why.",
        "",
        *([f"![verdicts]({os.path.relpath(verdicts_figure, Path(summary_md).parent)})", "",
           "Every claim's effect as its signed distance from its threshold, in half-widths of its own interval (right "
           "of the dashed line: the side the claim asks for; green: holds, red: does not hold, orange: "
           "inconclusive).", ""] if verdicts_figure else []),
        "| paper | scope | claim | statement | paper says | evidence: effect [interval] vs threshold (replicates) | "
        "threshold source | premise | verdict | negative control | positive control | table |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if scale == "smoke":
        lines[2:2] = ["> The smoke scale checks that the pipeline runs end to end; its tiny runs are not evidence for "
                      "or against any claim.", ""]
    for r in df.itertuples(index=False):
        cells = [f"[{r.paper}]({r.report})", r.scope, r.claim, r.statement, r.paper_value, r.evidence,
                 r.threshold_source, r.premise, verdict_cell(r.verdict, r.scope),
                 f"{r.control_verdict} ({r.control_kind})" if r.control_kind else r.control_verdict,
                 r.positive_control_verdict, f"[table]({r.table})"]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    if checks:
        lines += ["", "## Checks (true by construction or self-consistency; not counted as claims)", "",
                  f"{sum(k['passed'] for k in checks)} of {len(checks)} pass.", "",
                  "| paper | check | statement | measured | requirement | passed |", "|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in
                                    (k["paper"], k["id"], k["statement"], short(k["measured"]), k["requirement"],
                                     "yes" if k["passed"] else "**no**")) + " |" for k in checks]
    if verdicts_figure:
        from papers.common.forest import summary_forest_plot

        summary_forest_plot(plotted, verdicts_figure)
    recorded = {slug: path.with_name(JOB_TIMES) for slug, path in claims_of.items()}
    benchmarks = {slug: (job_benchmarks or {}).get(slug, []) for slug in papers}
    times = time_table(benchmarks, dict(time_budget or {}), recorded)
    times["within_budget"] = times["within_budget"].where(~times["paper"].isin(old),
                                                          times["within_budget"] + " (earlier run)")
    if job_times_csv:
        times.to_csv(ensure_parent(job_times_csv), index=False, float_format="%.6g")
    lines += _time_lines(times)
    ensure_parent(summary_md).write_text("\n".join(lines) + "\n")
