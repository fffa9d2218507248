# iclr25-repro: one DAG that regenerates the results of ICLR 2025 papers, from data to verdict.
# This file is a table of contents: the rules live in workflow/rules/, the code they call in
# workflow/papers/ (package `papers`) and kernels/ (package `kernels`). See README.md.
import os

from snakemake.utils import min_version

min_version("9.0")


# Relative to this file, so that `--directory` (tests, clusters) still finds the default config.
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/welfare.smk"
include: "workflow/rules/uv_sharpness.smk"
include: "workflow/rules/orion.smk"
include: "workflow/rules/deepgate4.smk"
include: "workflow/rules/sam_late.smk"
include: "workflow/rules/cbplm.smk"
include: "workflow/rules/ensembles.smk"
include: "workflow/rules/linear_mechanisms.smk"
include: "workflow/rules/sharpening.smk"
include: "workflow/rules/neural_fdm.smk"
include: "workflow/rules/sbdd_vs.smk"
include: "workflow/rules/hip.smk"
include: "workflow/rules/report.smk"


# Every rule runs workflow/scripts/call.py, so Snakemake's `code` trigger alone cannot see an edit to
# a paper's module: each rule also gets a parameter `code`, the hash of what its function can run
# (papers.common.codehash), and the `params` trigger reruns it, and what follows, when that changes.
from papers.common.codehash import code_version

for _rule in workflow.rules:
    if getattr(_rule.params, "call", None):
        _rule.set_params(code=code_version(_rule.params.call))


rule all:
    """Every selected paper's report, table, figures and claims, and the cross-paper summary."""
    input:
        all_targets(),
    default_target: True
