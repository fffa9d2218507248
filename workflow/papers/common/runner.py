"""The bridge between a Snakemake rule and a paper's stage function.

A rule is thin: it names a function (``params.call = "papers.<slug>.<module>:<function>"``) and
the paths and parameters it takes. :func:`run_stage` turns the rule's named inputs, named outputs
and remaining params into keyword arguments, sends stdout, stderr (tqdm bars) and ``logging`` to
the rule's log file, limits the job to its threads, and logs what it ran and how long it took.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from papers.common.cuda_probe import probe_if_asked
from papers.common.params import StageConfig

log = logging.getLogger("papers")

# Named outputs that common code writes beside the stage's own (see run_stage).
BYPRODUCTS = ("page", "verdicts_caption")

# A failure that would repeat on a retry (a wrong config value, a missing file, a bug) leaves this marker
# beside the job's log, so that the profile's retries stop at once instead of queueing the same job again
# with more memory and time. The workflow's onstart removes every marker, so a new run starts clean.
DETERMINISTIC_SUFFIX = ".deterministic"
# What a retry may cure: the machine, not the code (memory, a device error, a lost file system).
TRANSIENT_ERRORS = (MemoryError, ConnectionError, TimeoutError)
TRANSIENT_WORDS = ("out of memory", "CUDA error", "NCCL", "ECC", "Stale file handle", "Input/output error")

# The CUDA build of the pinned torch, for the message of a GPU job that finds none.
CUDA_TORCH = ("pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128 (run with the "
              "checkout's .venv/bin/python on a GPU node; README, 'Running on a cluster')")


def is_transient(error: BaseException) -> bool:
    """Whether a retry of the same job could succeed: a machine fault, not a property of the code or config."""
    if isinstance(error, TRANSIENT_ERRORS):
        return True
    if isinstance(error, OSError) and not isinstance(error, (FileNotFoundError, NotADirectoryError, PermissionError)):
        return True
    return any(word in str(error) for word in TRANSIENT_WORDS)


# A test cluster may ask SLURM for a GPU on a CPU-only node, to check that the request reaches sbatch
# (tests/workflow/test_slurm.py sets this); the job then runs on the CPU.
FAKE_GPU_ENV = "REPRO_FAKE_GPU"


def check_gpu(resources) -> None:
    """A job that asks for a GPU stops at once if torch cannot see one (a CPU build, or no device)."""
    gpus = int(getattr(resources, "gpu", 0) or 0) if not isinstance(resources, Mapping) else int(resources.get("gpu", 0) or 0)
    if gpus <= 0 or os.environ.get(FAKE_GPU_ENV) == "1":
        return
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"this job asked for {gpus} GPU(s) but torch {torch.__version__} sees no CUDA device "
            f"(torch.version.cuda = {torch.version.cuda}). Install the CUDA build of the same version into the "
            f"environment the jobs run in: {CUDA_TORCH}; or check the node's driver with nvidia-smi.")


def deterministic_marker(log_path: str | None) -> Path | None:
    return None if not log_path else Path(str(log_path) + DETERMINISTIC_SUFFIX)


def clear_deterministic_markers(logs: str) -> int:
    """Remove the deterministic-failure markers under a run's log folder; returns how many."""
    found = list(Path(logs).rglob("*" + DETERMINISTIC_SUFFIX)) if Path(logs).is_dir() else []
    for marker in found:
        marker.unlink(missing_ok=True)
    return len(found)


# Fault injection for the cluster test (tests/workflow/test_slurm.py): with
# REPRO_FAIL_ONCE=<rule>:<marker file>, the first run of <rule> creates the marker and fails, so
# the test can check that the profile's retries resubmit it. Unset, it does nothing.
FAIL_ONCE_ENV = "REPRO_FAIL_ONCE"


def resolve(target: str):
    """Import ``"package.module:function"`` and return the function."""
    module_name, _, func_name = target.partition(":")
    if not func_name:
        raise ValueError(f"params.call must look like 'papers.<slug>.<module>:<function>', got {target!r}")
    return getattr(importlib.import_module(module_name), func_name)


def limit_threads(threads: int) -> None:
    """Keep a job to its Snakemake `threads:` (BLAS pools, and torch if it is loaded)."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


def _named(namedlist) -> dict:
    return {name: value for name, value in namedlist.items()}


@contextlib.contextmanager
def log_to(path: str | None):
    """Redirect stdout, stderr and the root logger to `path` (append), or leave them if None."""
    if path is None:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", buffering=1) as stream:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            try:
                yield
            except BaseException:  # the traceback goes to the rule's log too, beside the output that led to it
                logging.getLogger("papers").exception("stage failed")
                raise
            finally:
                root.removeHandler(handler)


def _fail_once(rule: str) -> None:
    rule_name, _, marker = os.environ.get(FAIL_ONCE_ENV, "").partition(":")
    if rule_name == rule and marker and not os.path.exists(marker):
        Path(marker).touch()
        raise RuntimeError(f"{FAIL_ONCE_ENV}: injected failure of rule {rule} (a retry will pass)")


def _add_provenance(params_json: str) -> None:
    """Add this run's provenance and overrides to a report stage's ``params.json``."""
    from papers.common import provenance
    from papers.common.io import read_json, write_json

    block = provenance.json_block()
    if block and os.path.isfile(params_json):
        write_json({**read_json(params_json), **block}, params_json)


def run_stage(smk) -> None:
    """Call the function a rule names, with the rule's paths and params as keyword arguments."""
    from papers.common import provenance

    params = _named(smk.params)
    target = params.pop("call")
    params.pop("code", None)  # the code's hash, for Snakemake's rerun trigger only (see the Snakefile)
    parts = target.split(":")[0].split(".")
    slug = parts[1] if len(parts) > 2 and parts[0] == "papers" else None
    provenance.set_context(dict(smk.config), slug)
    if slug in smk.config and isinstance(params.get("cfg"), Mapping):
        # The stage gets its paper's whole section but may read only what its rule was given.
        params["cfg"] = StageConfig(smk.config[slug], readable=params["cfg"], rule=smk.rule)
    outputs = _named(smk.output)
    # Outputs that common code writes on the stage's behalf, from the paths it is given anyway: not arguments of
    # the stage function (the report page and the forest plot's caption, written by papers.common.report.write_report).
    byproducts = {name: outputs.pop(name) for name in BYPRODUCTS if name in outputs}
    kwargs = {**_named(smk.input), **outputs, **params}
    log_path = smk.log[0] if smk.log else None
    marker = deterministic_marker(log_path)
    if marker is not None and marker.is_file():
        raise RuntimeError(f"rule {smk.rule}: not retried, the previous attempt of this run failed with an error "
                           f"that repeats deterministically: {marker.read_text().strip()} (see {log_path})")
    with log_to(log_path):
        try:
            check_gpu(smk.resources)
            limit_threads(smk.threads)
            # The probe (off unless REPRO_CUDA_PROBE is set: tests/workflow/test_gpu_routing.py) wraps the import
            # too: a module that picks its device when it is imported (flexpert's DEVICE) must see the GPU node.
            with probe_if_asked(smk.rule):
                func = resolve(target)
                limit_threads(smk.threads)  # again: importing the function may have loaded torch
                log.info("rule %s: %s(%s)", smk.rule, target, ", ".join(sorted(kwargs)))
                _fail_once(smk.rule)
                start = time.perf_counter()
                func(**kwargs)
        except Exception as e:
            if marker is not None and not is_transient(e) and not str(e).startswith(f"{FAIL_ONCE_ENV}:"):
                marker.write_text(f"{type(e).__name__}: {e}\n")
            raise
        missing = [path for path in byproducts.values() if not os.path.exists(path)]
        if missing:
            raise RuntimeError(f"rule {smk.rule}: {', '.join(missing)} not written (papers.common.report.write_report "
                               "writes the page beside report.md and the forest plot's caption beside the figure)")
        if "params_json" in kwargs:
            _add_provenance(kwargs["params_json"])
        log.info("rule %s: done in %.1f s", smk.rule, time.perf_counter() - start)
