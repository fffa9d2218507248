"""How often Snakemake's benchmark files sample a job's CPU time (applied by workflow/rules/common.smk when the
workflow is parsed; no stage imports this module, so changing it reruns nothing).

Snakemake's benchmark samples a job's process tree every 0.5 s for its first 15 s and every 30 s after that, and
keeps the last sample (snakemake.benchmark.BENCHMARK_INTERVAL): up to 30 CPU-s of every job longer than 15 s went
unrecorded, the more the shorter the job, so the same work was recorded at quite different CPU times on a quiet
and on a loaded machine (the 2026-12-05 rerun of the whole default scale: eagle's unchanged jobs 258 -> 364 CPU-s,
linear_mechanisms' 176 -> 301), which is what the papers' budgets are judged by (papers.common.records). Sampling
every second bounds the loss to about a second per job, at the cost of one process-tree read per second.
"""
from __future__ import annotations

import warnings

SAMPLE_S = 1  # seconds between samples after the first two (Snakemake's own: 30)


def sample_every(seconds: int = SAMPLE_S) -> bool:
    """Make snakemake.benchmark.benchmarked sample every `seconds` (its `interval` argument's default; the local
    executor and the script runner call it without one). Returns whether the default could be set; where a
    Snakemake version changes benchmarked's signature, warns and leaves Snakemake's own sampling."""
    import inspect

    from snakemake import benchmark

    # a contextlib.contextmanager: the generator function it wraps holds the defaults
    func = getattr(benchmark.benchmarked, "__wrapped__", benchmark.benchmarked)
    params = list(inspect.signature(func).parameters)
    if params[-1:] != ["interval"] or func.__defaults__ is None:
        warnings.warn("snakemake.benchmark.benchmarked has no trailing `interval` argument in this Snakemake "
                      "version: its benchmark files keep their own sampling (CPU time of long jobs under-counted)")
        return False
    func.__defaults__ = (*func.__defaults__[:-1], int(seconds))
    return True
