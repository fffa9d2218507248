"""Does this machine reproduce the committed results? Compares verdicts and intervals, not bytes.

    make check        # = a fresh default-scale run into results/check/, then:
    .venv/bin/python scripts/compare_results.py results/default results/check

For each paper of the fresh run, each claim's verdict, its controls' verdicts and its unmet premise gates
must equal the reference's, and each interval (of the evidence and of every part) must overlap the reference's;
timed evidence is compared by verdict only (papers.common.compare explains why). Prints every
difference and exits 1 if there is one, 0 otherwise; refuses (exit 2) two folders of different scales.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from papers.common.compare import compare_runs  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path, help="the reference results, e.g. results/default")
    parser.add_argument("fresh", type=Path, help="the fresh run's results, e.g. results/check")
    args = parser.parse_args(argv)
    for folder in (args.reference, args.fresh):
        if not folder.is_dir():
            parser.error(f"{folder}: no such folder")
    try:
        papers, claims, found = compare_runs(args.reference, args.fresh)
    except ValueError as e:
        parser.error(str(e))
    if not papers and not found:
        parser.error(f"{args.fresh}: no <paper>/claims.json in it")
    for difference in found:
        print(f"DIFFERS  {difference}")
    print(f"{len(papers)} papers, {claims} claims compared: "
          + ("every verdict and control verdict the same, every interval overlapping the reference's"
             if not found else f"{len(found)} differences"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
