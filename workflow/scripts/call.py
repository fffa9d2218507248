"""Run one stage of a paper from a Snakemake rule (every rule's `script:`).

The rule names the function in `params.call` ("papers.welfare.simulate:simulate"); its named
inputs, named outputs and other params become the function's keyword arguments, so the function
also runs without Snakemake (tests call it directly). See papers.common.runner.
"""
from papers.common.runner import run_stage

run_stage(snakemake)  # noqa: F821 (snakemake injects the `snakemake` object)
