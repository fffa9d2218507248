"""Fill the README's papers table with the default scale's verdicts per paper, in the four states:
"holds / does not hold / inconclusive / not measured" counts.

Run after `make run`: `.venv/bin/python scripts/readme_claims.py`. Reads results/default/summary.csv (written
by the workflow); rewrites only the fourth column of the rows of README.md's papers table.
"""
from __future__ import annotations

import csv
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| (P\d+) \| `(\w+)` \| ([^|]*) \| [^|]* \| (.*)$")


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
    for line in readme.read_text().splitlines():
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
