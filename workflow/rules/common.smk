# Shared by every rules file, in a fixed order: validation, paths, wildcard constraints, helpers.
# Keep this file cheap: every cluster job parses it again (no heavy imports, no file scans).
import importlib
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

# The `papers` package, importable at parse time even without `pip install -e .`.
sys.path.insert(0, os.path.join(workflow.basedir, "workflow"))


# ---- 1. Validate the configuration before any job runs ------------------------------------------
def _validation_message(error):
    """Name the offending key as a dotted path (`welfare.horizon`) in a jsonschema error."""
    cause = error.__context__  # snakemake's validate raises from inside `except ValidationError`
    path = getattr(cause, "absolute_path", None)
    if path is None:
        return str(error)
    key = ".".join(str(p) for p in path) or "<top level>"
    return f"invalid configuration at key '{key}': {cause.message}"


try:
    validate(config, "../schemas/config.schema.yaml", set_default=False)
except WorkflowError as e:
    raise WorkflowError(_validation_message(e)) from None

SCALE = config["scale"]
PAPERS = config["papers"]
for _slug in PAPERS:
    if _slug not in config:
        raise WorkflowError(
            f"invalid configuration at key 'papers': paper '{_slug}' has no section '{_slug}:' in the "
            f"config (it is not implemented yet, or its parameters are missing)"
        )
    # Rules across keys that a schema cannot state (papers.<slug>.params.parse checks them).
    try:
        importlib.import_module(f"papers.{_slug}.params").parse(config[_slug])
    except (KeyError, ValueError) as e:
        raise WorkflowError(f"invalid configuration: {e.args[0]}") from None

# ---- 2. Paths: what a job writes, its log and its benchmark mirror each other ----------------
RESULTS = f"results/{SCALE}"
LOGS = f"logs/{SCALE}"
BENCHMARKS = f"benchmarks/{SCALE}"
# Every rule calls one function of the `papers` package through this script (see its docstring).
CALL = "../scripts/call.py"




# A wildcard can only match a real value: seeds are integers; arms are constrained per rule.
wildcard_constraints:
    seed=r"\d+",


# ---- 3. Helpers -------------------------------------------------------------------------------
def seeds(slug):
    """The seeds of a paper: 0 .. config[slug].seeds - 1."""
    return list(range(config[slug]["seeds"]))


def res(kind, key):
    """A resource of a kind of job (`light`, `train`, ...) from config `resources`."""
    return config["resources"][kind][key]


def paper_outputs(slug):
    """The outputs of a paper's report stage; its target `snakemake <slug>` builds them."""
    base = f"{RESULTS}/{slug}"
    return [f"{base}/table.md", f"{base}/table.csv", f"{base}/claims.json", f"{base}/report.md"]


def all_targets():
    """The default target: each selected paper's report outputs and the cross-paper summary."""
    targets = [f"{RESULTS}/summary.md", f"{RESULTS}/summary.csv"]
    for slug in PAPERS:
        targets += paper_outputs(slug)
    return targets
