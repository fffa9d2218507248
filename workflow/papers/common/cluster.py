"""What a job asks a cluster for on each attempt (workflow/rules/common.smk, `job_resources`)."""
from __future__ import annotations


def per_attempt(value: int, cap: int | None):
    """A resource callable for Snakemake: attempt n asks for n times the first attempt's `value` (a retry after an
    out-of-memory kill or a timeout must not simply repeat), up to `cap` (the partition's limit: a request above it
    would never be scheduled); never below `value` itself."""
    def asked(wildcards, attempt: int) -> int:
        scaled = value * attempt
        return scaled if cap is None else min(scaled, max(cap, value))

    return asked
