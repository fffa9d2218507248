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


def _typed_from_command_line(config):
    """Validate `config`, first giving command-line strings the type the schema wants.

    Snakemake reads a nested `--config 'welfare={horizon: 800}'` as YAML with every leaf a string
    ('800'). Where the schema rejects such a string, the leaf is read again as YAML (800, 0.5, true,
    [1, 2], null) and validation retried; a value that is still wrong gets the usual message.
    """
    import yaml

    for _ in range(1000):  # each pass fixes one leaf; a config has far fewer
        try:
            validate(config, "../schemas/config.schema.yaml", set_default=False)
            return
        except WorkflowError as e:
            path = list(getattr(e.__context__, "absolute_path", None) or [])
            parent, leaf = config, None
            for key in path[:-1]:
                parent = parent[key]
            if path:
                leaf = parent[path[-1]]
            if isinstance(leaf, str):
                try:
                    typed = yaml.safe_load(leaf)
                except yaml.YAMLError:
                    typed = leaf
                if not isinstance(typed, str):
                    parent[path[-1]] = typed
                    continue
            raise WorkflowError(_validation_message(e)) from None


_typed_from_command_line(config)

SCALE = config["scale"]
PAPERS = config["papers"]

# The benchmark files record each job's CPU time, which the papers' budgets are judged by: sample it every second
# instead of every 30 s after a job's first 15 s (papers.common.benchmark_sampling says why).
from papers.common.benchmark_sampling import sample_every

sample_every()

# Every data path the selected papers read must exist now, not when their prepare job runs (on a
# cluster, after submission). The schemas mark such values `input: true` (papers.common.inputs).
from papers.common.inputs import missing_inputs

_missing = missing_inputs(config, os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml"), PAPERS)
if _missing:
    raise WorkflowError("invalid configuration: " + "; ".join(f"key '{k}': {m}" for k, m in _missing))

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
# A run's name (default: the scale) names its folders, so that an experiment
# (`--config run=my_test welfare='{horizon: 800}'`) never overwrites the reference results.
RUN = config.get("run") or SCALE
RESULTS = f"results/{RUN}"
LOGS = f"logs/{RUN}"
BENCHMARKS = f"benchmarks/{RUN}"

# A run writes only into a folder whose results were made at its own scale: smoke numbers must never
# land in results/default (the committed reference). A named run (--config run=...) gets a folder of its own.
from papers.common.cluster import per_attempt
from papers.common.records import JOB_TIMES, RECORDS, export_job_times, export_records, import_records, scale_of_results

try:
    _held = scale_of_results(RESULTS)
except ValueError as e:
    raise WorkflowError(f"invalid results folder: {e}") from None
if _held and _held != SCALE:
    raise WorkflowError(
        f"invalid configuration at key 'run': {RESULTS}/ holds results of the `{_held}` scale, and this run is "
        f"of the `{SCALE}` scale; give it a folder of its own, e.g. --config run={SCALE}_{RUN}"
    )

# The committed results carry Snakemake's records of the run that made them (papers.common.records): restore
# those this checkout lacks, so that a changed parameter or code reruns what it makes stale on a fresh clone.
if workflow.is_main_process:
    for _slug in PAPERS:
        import_records(f"{RESULTS}/{_slug}/{RECORDS}")
    import_records(f"{RESULTS}/{RECORDS}")  # the summary's


onstart:
    # Once per run, in the process the user started (not in dry runs, not in cluster jobs): the
    # commit, command, config files, packages, machine and date, read by every report stage.
    from papers.common.provenance import write_run_record

    base = os.path.join(workflow.basedir, "config", "config.yaml")  # the Snakefile's own configfile
    overlays = [os.path.relpath(f) for f in workflow.overwrite_configfiles or []]
    write_run_record(run=RUN, scale=SCALE, configfiles=[os.path.relpath(base), *overlays])
    # A new run starts without the markers by which a job's retries stop after a deterministic failure
    # (papers.common.runner): the user may have fixed the cause since.
    from papers.common.runner import clear_deterministic_markers

    clear_deterministic_markers(LOGS)


onsuccess:
    # Keep Snakemake's records of each report stage's outputs beside them (committed with the results), and the
    # paper's summed job times (its benchmark files are not committed).
    for _slug in PAPERS:
        _report = getattr(rules, f"{_slug}_report", None)
        if _report is not None:
            export_records([str(f) for f in _report.output], f"{RESULTS}/{_slug}/{RECORDS}")
            export_job_times(paper_benchmarks(_slug), f"{RESULTS}/{_slug}/{JOB_TIMES}")
    # The summary's too: a clone checks its outputs out in any order, so its inputs (the papers' claims) may
    # look newer than it; the recorded checksums tell Snakemake that they are the same files.
    if hasattr(rules, "summary"):
        export_records([str(f) for f in rules.summary.output], f"{RESULTS}/{RECORDS}")
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
    """A resource of a kind of job (`light`, `train`, `gpu`) from config `resources`."""
    return config["resources"][kind][key]


def job_resources(kind, runtime=None, rule=None):
    """What a job of `kind` asks a scheduler for, from config `resources.<kind>`.

    Memory and run time grow with each retry, up to the kind's caps; `runtime` (minutes) replaces the
    kind's for a rule whose paper estimates its own jobs' wall time. A rule named in config `job_estimates`
    (measured per job at the full scale: scripts/estimate_full_jobs.py) asks for that entry's runtime and
    mem_mb in place of both. The `gpu` kind asks for its GPUs; `partition` and `gres`, where the config
    names them, send all jobs of the kind there with one edit (null leaves the profile's default partition).
    """
    spec = config["resources"][kind]
    estimate = (config.get("job_estimates") or {}).get(rule) or {}
    runtime = estimate.get("runtime", spec["runtime"] if runtime is None else runtime)
    asked = {"mem_mb": per_attempt(estimate.get("mem_mb", spec["mem_mb"]), spec.get("max_mem_mb")),
             "runtime": per_attempt(runtime, spec.get("max_runtime"))}
    if kind == "gpu":
        asked["gpu"] = spec["gpu"]
    if spec.get("partition"):
        asked["slurm_partition"] = spec["partition"]
    if spec.get("gres"):
        asked["gres"] = spec["gres"]
    return asked


def paper_outputs(slug):
    """The outputs of a paper's report stage; its target `snakemake <slug>` builds them."""
    base = f"{RESULTS}/{slug}"
    return [f"{base}/table.md", f"{base}/table.csv", f"{base}/claims.json", f"{base}/report.md",
            f"{base}/figures/verdicts.png", f"{base}/figures/verdicts.rst", f"{base}/report.html"]


def all_targets():
    """The default target: each selected paper's report outputs and the cross-paper summary."""
    targets = [f"{RESULTS}/summary.md", f"{RESULTS}/summary.csv"]
    for slug in PAPERS:
        targets += paper_outputs(slug)
    return targets


def paper_benchmarks(slug):
    """The benchmark files of a paper's jobs: those its report rule reads, and the report's own
    (for the summary's run times; call it after the paper's rules are included)."""
    report_rule = getattr(rules, f"{slug}_report")
    # plain strings: the rule's file objects keep a reference to the rule, which cannot be pickled
    return [str(path) for path in (*report_rule.input.benchmarks, report_rule.benchmark)]


# ---- chained training parts (input functions and resources of bodygen's and profilebfn's rules) ----

def bodygen_resume(wildcards):
    """The state a part resumes from: part - 1's (none for part 1). The part is the `part` wildcard of
    bodygen_train_part, and bodygen.train_parts (the last) for bodygen_train."""
    part = int(getattr(wildcards, "part", config["bodygen"]["train_parts"]))
    if part == 1:
        return {}
    return {"resume": BODYGEN_PART.format(task=wildcards.task, arm=wildcards.arm, seed=wildcards.seed, part=part - 1)}


def profilebfn_previous_part(part):
    """The saved state that training part `part` resumes (none for part 0)."""
    return [] if part == 0 else f"{PROFILEBFN}/train/parts/{{seed}}_{part - 1}.pt"


def profilebfn_gpus(asked):
    """A gpu-kind request with the GPUs of one training job: the kind's GPUs per process x profilebfn.train.gpus
    processes (torchrun, one per GPU; 0 where the kind asks for none, as at the default scale)."""
    return {**asked, "gpu": asked["gpu"] * PROFILEBFN_CFG["train"].get("gpus", 1)}
