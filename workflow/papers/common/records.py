"""Snakemake's records of the committed results, kept beside them, so that a fresh clone reruns what a change
makes stale.

Snakemake decides that a stage must rerun because its parameters, code or inputs changed by comparing them with
the record it keeps of the run that wrote the stage's outputs (``.snakemake/metadata/``, one JSON record per
output file). A fresh clone has the committed outputs (reports, tables, claims, figures) but no records, and
without a record Snakemake can only compare modification times: a changed parameter would rerun nothing.

So after each successful run the workflow copies the records of every report stage's outputs into the paper's
results folder (:func:`export_records`, from ``onsuccess`` in workflow/rules/common.smk), where they are
committed with the results (``snakemake_records.json``), and on parsing it restores those that the local
metadata lacks (:func:`import_records`). A clone then reruns a paper's report, and what the report needs, exactly
when the committed results no longer match the config or the code: a changed parameter, a new seed, an edit to
the report's functions (tests/workflow/test_fresh_clone.py).

The record format is Snakemake's own file-based persistence (``record_format_version`` 6 in Snakemake 9); the
fresh-clone test fails if a Snakemake upgrade changes where or how records are kept.
"""
from __future__ import annotations

import csv
import json
import os
from base64 import urlsafe_b64encode
from pathlib import Path

RECORDS = "snakemake_records.json"
METADATA = Path(".snakemake") / "metadata"


def record_path(path: str, metadata: Path = METADATA) -> Path:
    """Where Snakemake's file persistence keeps the record of output `path` (its urlsafe base64, split into
    folders at the file system's name length, as snakemake.persistence.file does)."""
    metadata.mkdir(parents=True, exist_ok=True)
    max_len = os.pathconf(metadata, "PC_NAME_MAX") if os.name == "posix" else 255
    max_len = max_len or 255
    b64 = urlsafe_b64encode(path.encode()).decode()
    chunks = [b64[i:i + max_len - 1] for i in range(0, len(b64), max_len - 1)]
    chunks = ["@" + c for c in chunks[:-1]] + [chunks[-1]]
    return metadata.joinpath(*chunks)


def export_records(outputs: list[str], destination: str | Path, metadata: Path = METADATA) -> int:
    """Copy the records of `outputs` (a paper's report outputs, paths as the rules name them) into
    `destination`; returns how many were found. Outputs without a record (not written by this run and never
    recorded) are left out."""
    records = {}
    for out in outputs:
        source = record_path(out, metadata)
        if source.is_file() and Path(out).exists():
            records[out] = json.loads(source.read_text())
    if records:
        Path(destination).write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    return len(records)


JOB_TIMES = "job_times.csv"


def complete_job_times(benchmarks: list[str]) -> dict | None:
    """The summed times of a paper's jobs from their benchmark files (Snakemake's `benchmark:` TSVs): `jobs`,
    `seconds` (wall, column `s`) and `cpu_seconds` (`cpu_time`); None unless every job's file exists and holds
    its timing (a run that covered the whole paper; a cluster run that only touched outputs leaves them empty)."""
    if not benchmarks or not all(Path(b).is_file() for b in benchmarks):
        return None
    seconds = cpu = 0.0
    for path in benchmarks:
        with open(path, newline="") as f:
            row = next(csv.DictReader(f, delimiter="\t"), None)
        if not row or not row.get("s"):
            return None
        seconds += float(row["s"])
        cpu += float(row.get("cpu_time") or "nan")
    return {"jobs": len(benchmarks), "seconds": seconds, "cpu_seconds": cpu}


def export_job_times(benchmarks: list[str], destination: str | Path) -> bool:
    """Write a paper's :func:`complete_job_times` to `destination` (one row: jobs, seconds, cpu_seconds), where
    there are any; returns whether it did. benchmarks/ is not committed, so this is how the run time of the
    committed results reaches a clone's summary."""
    times = complete_job_times(benchmarks)
    if times is None:
        return False
    Path(destination).write_text(f"jobs,seconds,cpu_seconds\n{times['jobs']},{times['seconds']:.6g},"
                                 f"{times['cpu_seconds']:.6g}\n")
    return True


def import_records(source: str | Path, metadata: Path = METADATA) -> int:
    """Restore the records kept in `source` for outputs that exist, where the local record is missing or
    older (a `git pull` brought results of a newer run); returns how many. A local record of a newer run (this
    machine reran the paper since) is kept."""
    source = Path(source)
    if not source.is_file():
        return 0
    restored = 0
    for out, record in json.loads(source.read_text()).items():
        target = record_path(out, metadata)
        if not Path(out).exists():
            continue
        if target.exists():
            try:
                local_end = json.loads(target.read_text()).get("endtime") or 0
            except ValueError:
                local_end = 0
            if local_end >= (record.get("endtime") or 0):
                continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record))
        restored += 1
    return restored


def scale_of_results(results: str | Path) -> str | None:
    """The scale whose results a run folder holds (read from its claims files), or None if it holds none.
    Raises ValueError if they disagree (a folder that was written by runs of two scales)."""
    scales = set()
    for claims in sorted(Path(results).glob("*/claims.json")):
        try:
            scales.add(json.loads(claims.read_text())["scale"])
        except (ValueError, KeyError):
            raise ValueError(f"{claims}: not a claims file of this workflow (no 'scale')") from None
    if len(scales) > 1:
        raise ValueError(f"{results}/ holds results of several scales ({', '.join(sorted(scales))}): "
                         "move the odd papers' folders away")
    return scales.pop() if scales else None
