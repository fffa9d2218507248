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
include: "workflow/rules/symspace.smk"
include: "workflow/rules/eagle.smk"
include: "workflow/rules/profilebfn.smk"
include: "workflow/rules/flexpert.smk"
include: "workflow/rules/infoprop.smk"
include: "workflow/rules/bodygen.smk"
include: "workflow/rules/adamanip.smk"
include: "workflow/rules/report.smk"


# What reruns a stage, through Snakemake's `params` trigger:
# * its code: every rule runs workflow/scripts/call.py, so Snakemake's `code` trigger alone cannot
#   see an edit to a paper's module; each rule gets a parameter `code`, the hash of what its function
#   can run (papers.common.codehash);
# * its parameters, and only those: a rule's `cfg` (its paper's config section) is cut down to the
#   part its stage declares in STAGE_PARAMS (papers/<slug>/params.py), so a change to a report's
#   threshold reruns the report alone. The stage cannot read the rest (papers.common.params.for_stage).
# * its data: a path in the config that names a file or folder the stage reads (`input: true` in the
#   paper's schema) becomes an input of the rule, so that editing the file in place reruns the stage.
from snakemake.io import IOFile

from papers.common.codehash import code_version
from papers.common.inputs import configured_inputs, in_section
from papers.common.params import stage_section

_data = configured_inputs(config, os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml"), PAPERS)

for _rule in workflow.rules:
    _call = getattr(_rule.params, "call", None)
    if not _call:
        continue
    _rule.set_params(code=code_version(_call))
    _slug = _call.split(".")[1] if _call.startswith("papers.") else None
    if _slug in config and "cfg" in _rule.params.keys() and _rule.name.startswith(f"{_slug}_"):
        _module = importlib.import_module(f"papers.{_slug}.params")
        try:
            _view = stage_section(_module, _rule.name[len(_slug) + 1:], config[_slug], where=_slug)
        except KeyError as e:
            raise WorkflowError(f"rule {_rule.name}: {e.args[0]}") from None
        _index = _rule.params._names["cfg"][0]  # replace in place: the trigger compares every item
        _rule.params[_index] = _view
        setattr(_rule.params, "cfg", _view)
        _paths = sorted({path for key, path in _data.items() if key.startswith(f"{_slug}.")
                         and in_section(key[len(_slug) + 1:], _view)})
        for _path in _paths:  # unnamed: the stage function gets its paths from `cfg`, as before
            _rule.input.append(IOFile(_path, rule=_rule))


rule all:
    """Every selected paper's report, table, figures and claims, and the cross-paper summary."""
    input:
        all_targets(),
    default_target: True
