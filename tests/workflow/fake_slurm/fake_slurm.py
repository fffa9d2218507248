#!/usr/bin/env python3
"""A stand-in for SLURM's client commands, for tests/workflow/test_cluster_submission.py.

Linked under the names sbatch, sacct, squeue, sacctmgr, sshare, sinfo, scontrol and scancel in a folder put first
on PATH, it answers as SLURM would, with no cluster behind it:

* ``sbatch`` records its arguments (one JSON list per line in $FAKE_SLURM_DIR/submissions.jsonl), "runs" the job by
  creating the output files the job would write (from $FAKE_SLURM_DIR/outputs.json, keyed by the
  ``--target-jobs`` spec of the wrapped Snakemake command: rule and wildcards), and prints a job id (``--parsable``);
* ``sacct`` / ``squeue`` report every submitted job as COMPLETED;
* ``sacctmgr`` / ``sshare`` know no accounts; the others print nothing.

So a real Snakemake run through the real executor plugin and the real profile submits every job of a DAG in
seconds, and the test reads exactly what each job asked SLURM for.
"""
import fcntl
import json
import os
import re
import shlex
import sys
from pathlib import Path

STATE = Path(os.environ["FAKE_SLURM_DIR"])


def _next_id() -> int:
    with open(STATE / "ids.lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = len(f.read().split()) + 1000
        f.write(f"{n}\n")
        return n


def sbatch(args: list[str]) -> None:
    sys.stdin.read() if not sys.stdin.isatty() else None
    wrapped = next((a.split("=", 1)[1] for a in args if a.startswith("--wrap=")), "")
    spec = re.search(r"--target-jobs '([^']*)'", wrapped)
    outputs = json.loads((STATE / "outputs.json").read_text())
    rule, _, wildcards = (spec.group(1) if spec else "").partition(":")
    key = f"{rule}:{','.join(sorted(w for w in wildcards.split(',') if w))}"  # as the test keys the dry run's jobs
    workdir = Path(args[args.index("-D") + 1]) if "-D" in args else Path.cwd()
    for out in outputs.get(key, []):
        path = workdir / out
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    job = _next_id()
    with open(STATE / "submissions.jsonl", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps({"id": job, "target": key, "args": args, "known": key in outputs}) + "\n")
    print(job)


def completed() -> None:
    ids = (STATE / "ids.lock").read_text().split() if (STATE / "ids.lock").exists() else []
    print("\n".join(f"{i}|COMPLETED" for i in ids))


def main() -> None:
    name, args = Path(sys.argv[0]).name, sys.argv[1:]
    with open(STATE / "calls.log", "a") as f:
        f.write(shlex.join([name, *args])[:300] + "\n")
    if name == "sbatch":
        sbatch(args)
    elif name in ("sacct", "squeue"):
        completed()


if __name__ == "__main__":
    main()
