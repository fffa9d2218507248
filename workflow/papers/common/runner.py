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

from papers.common.params import StageConfig

log = logging.getLogger("papers")

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
    kwargs = {**_named(smk.input), **_named(smk.output), **params}
    with log_to(smk.log[0] if smk.log else None):
        limit_threads(smk.threads)
        func = resolve(target)
        limit_threads(smk.threads)  # again: importing the function may have loaded torch
        log.info("rule %s: %s(%s)", smk.rule, target, ", ".join(sorted(kwargs)))
        _fail_once(smk.rule)
        start = time.perf_counter()
        func(**kwargs)
        if "params_json" in kwargs:
            _add_provenance(kwargs["params_json"])
        log.info("rule %s: done in %.1f s", smk.rule, time.perf_counter() - start)
