"""Measure what SLURM costs the smoke DAG: wall time locally, through SLURM job by job, and through
SLURM with each paper grouped into one job; and the per-job overhead (a SLURM job's elapsed time
minus the time its rule spent working, from Snakemake's benchmark files).

    sudo scripts/slurm-local.sh up
    .venv/bin/python scripts/slurm_overhead.py --papers welfare uv_sharpness
    sudo scripts/slurm-local.sh down

Prints a table; writes nothing into the checkout (runs happen in a temporary directory).
"""
from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
JOBCOMP = Path("/var/lib/slurm-local/jobcomp.txt")


def run(workdir: Path, papers: list[str], extra: list[str]) -> float:
    cmd = ["timeout", "-k", "10", "3000", SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory",
           str(workdir), "--configfile", str(ROOT / "config" / "smoke.yaml"),
           "--config", f"papers=[{','.join(papers)}]", *extra]
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"run failed: {' '.join(cmd)}\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return time.perf_counter() - start


def groups(workdir: Path, papers: list[str]) -> list[str]:
    out = subprocess.run([SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
                          "--list-rules"], capture_output=True, text=True).stdout.split()
    return [f"{r}={s}" for r in out for s in papers if r.startswith(f"{s}_")]


def slurm_elapsed(workdir: Path) -> list[float]:
    """Elapsed seconds of every SLURM job that ran in `workdir` (from the jobcomp file)."""
    times = []
    for line in JOBCOMP.read_text().splitlines():
        f = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if f.get("WorkDir") == str(workdir):
            start, end = (dt.datetime.fromisoformat(f[k]) for k in ("StartTime", "EndTime"))
            times.append((end - start).total_seconds())
    return times


def work_seconds(workdir: Path) -> list[float]:
    """Seconds each rule spent working (Snakemake benchmark files, column `s`)."""
    return [float(p.read_text().splitlines()[1].split("\t")[0]) for p in (workdir / "benchmarks").rglob("*.tsv")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--papers", nargs="+", default=["welfare", "uv_sharpness"])
    args = ap.parse_args()
    profile = ["--profile", str(ROOT / "profiles" / "ci-slurm")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in [("local, 2 cores", ["--cores", "2"]),
                            ("SLURM, one job per rule", profile),
                            ("SLURM, one job per paper", None)]:
            workdir = Path(tmp) / name.replace(" ", "_").replace(",", "")
            workdir.mkdir()
            if extra is None:
                extra = [*profile, "--groups", *groups(workdir, args.papers)]
            wall = run(workdir, args.papers, extra)
            work = work_seconds(workdir)
            elapsed = slurm_elapsed(workdir) if "SLURM" in name else []
            rows.append((name, wall, len(work), sum(work), len(elapsed), sum(elapsed)))
    print(f"smoke DAG of {', '.join(args.papers)}")
    print(f"{'run':28s} {'wall s':>8s} {'rules':>6s} {'work s':>8s} {'SLURM jobs':>10s} {'job s':>8s} {'overhead/job s':>15s}")
    for name, wall, n_rules, work, n_jobs, job_s in rows:
        overhead = (job_s - work) / n_jobs if n_jobs else float("nan")
        print(f"{name:28s} {wall:8.1f} {n_rules:6d} {work:8.1f} {n_jobs:10d} {job_s:8.1f} {overhead:15.1f}")


if __name__ == "__main__":
    main()
