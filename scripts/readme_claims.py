"""Fill the README's papers table with the default scale's verdicts per paper, in the four states:
"holds / does not hold / inconclusive / not measured" counts, and its cost sentence with the CPU time per paper.

Run after `make run`: `.venv/bin/python scripts/readme_claims.py`. Reads results/default/summary.csv and
results/default/job_times.csv (written by the workflow); rewrites only the fourth column of the rows of README.md's
papers table and the text between the README's COST markers.
"""
from __future__ import annotations

import csv
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| (P\d+) \| `(\w+)` \| ([^|]*) \| [^|]* \| (.*)$")
COST = re.compile(r"<!-- COST -->.*?<!-- /COST -->", re.S)
CORES, WALL_TARGET_MIN = 2, 60  # DEVELOPERS.md: the whole default scale under 60 min of wall time on 2 cores


def cost_sentence(job_times: Path) -> str:
    """The README's cost sentence from the summary's job_times.csv (paper, cpu_seconds, budget_seconds): the summed
    CPU time, the wall time it needs at best on CORES free cores, and every paper over its budget in CPU time."""
    with open(job_times, newline="") as f:
        rows = list(csv.DictReader(f))
    total = sum(float(r["cpu_seconds"]) for r in rows)
    wall = total / CORES / 60
    over = [r for r in rows if float(r["cpu_seconds"]) > float(r["budget_seconds"])]
    text = (f"{total:,.0f} s ({total / 60:.0f} min) in all, so the whole default scale needs at least {wall:.0f} min "
            f"of wall time on {CORES} free cores ({'within' if wall <= WALL_TARGET_MIN else 'over'} the "
            f"{WALL_TARGET_MIN}-minute target). ")
    if not over:
        return text + "Every paper is within its budget in CPU time."
    return text + (f"{len(over)} of {len(rows)} papers are over their budget in CPU time: " + ", ".join(
        f"{r['paper']} {float(r['cpu_seconds']):,.0f} s of {float(r['budget_seconds']):,.0f}" for r in over) + ".")


def main(summary: Path = ROOT / "results" / "default" / "summary.csv", readme: Path = ROOT / "README.md") -> None:
    states = ("holds", "does not hold", "inconclusive", "not measured")
    counts, total = {}, Counter()
    with open(summary, newline="") as f:
        for row in csv.DictReader(f):
            if row["verdict"] not in states:
                sys.exit(f"{summary}: claim {row['paper']}/{row['claim']} has verdict {row['verdict']!r}")
            total[row["paper"]] += 1
            counts.setdefault(row["paper"], Counter())[row["verdict"]] += 1
    lines = []
    text = readme.read_text()
    if COST.search(text):
        sentence = cost_sentence(summary.with_name("job_times.csv"))
        text = COST.sub(lambda _: f"<!-- COST -->{sentence}<!-- /COST -->", text)
    for line in text.splitlines():
        m = ROW.match(line)
        if m and m.group(2) in total:
            slug = m.group(2)
            cell = " / ".join(str(counts[slug][s]) for s in states)
            line = f"| {m.group(1)} | `{slug}` | {m.group(3)} | {cell} | {m.group(4)}"
        lines.append(line)
    readme.write_text("\n".join(lines) + "\n")
    missing = [line for line in lines if "CLAIMS_" in line]
    if missing:
        sys.exit(f"{summary}: no claims for {len(missing)} README rows (run the default scale first)")


if __name__ == "__main__":
    main()
