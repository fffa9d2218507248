"""A paper's section of the summary (``report.md``): what was run, the table, the figures, the
claim verdicts, the run time, and what differs from the paper, in plain words."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from papers.common.claims import HOLDS, Claim, describe, states_text
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


def verdict_cell(verdict: str) -> str:
    """Bold for every state but "holds", so that what is not evidence for a claim stands out."""
    return verdict if verdict == HOLDS else f"**{verdict}**"


def claims_markdown(claims: list[Claim]) -> str:
    """The claims table: the measured values, the evidence (effect [interval] vs threshold, replicates),
    the verdict and the negative control's verdict; notes below (why a claim does not hold)."""
    lines = ["| id | claim | paper | measured | criterion | evidence | verdict | negative control |",
             "|---|---|---|---|---|---|---|---|"]
    for c in claims:
        control = f"{c.control.verdict}: {c.control.description}"
        if c.control.evidence is not None:
            control += f" ({describe(c.control.evidence)})"
        cells = [c.id, c.statement, c.paper, short(c.measured), c.criterion, c.describe_evidence(),
                 verdict_cell(c.verdict), control]
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    notes = [f"- ({c.id}) {c.note}" for c in claims if c.note]
    return "\n".join(lines) + "\n" + ("\nNotes:\n" + "\n".join(notes) + "\n" if notes else "")


def write_report(path, *, title: str, scale: str, what_was_run: str, table_md, figures, claims: list[Claim],
                 benchmarks, differences: str) -> None:
    """Write `report.md` for one paper. `figures` are paths; links are made relative to `path`."""
    path = ensure_parent(path)
    seconds, jobs = run_time(benchmarks)
    figure_lines = [f"![{Path(f).stem}]({os.path.relpath(f, path.parent)})" for f in figures]
    from papers.common import provenance

    head = provenance.markdown()
    caveat = ("> Smoke scale: a run of seconds that checks the pipeline end to end. Its tiny models and few "
              "replicates are not evidence for or against any claim; see the default scale.\n\n" if scale == "smoke" else "")
    text = "\n".join([
        f"## {title}",
        "",
        caveat + head + ("\n" if head else ""),
        f"Scale `{scale}`; of {len(claims)} claims: {states_text(c.verdict for c in claims)}. Run time: {seconds:.1f} s summed over "
        f"{jobs} jobs (Snakemake benchmarks; wall time is lower when jobs run side by side).",
        "",
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
        claims_markdown(claims),
        "### What differs from the paper",
        "",
        differences.strip(),
        "",
    ])
    path.write_text(text)
