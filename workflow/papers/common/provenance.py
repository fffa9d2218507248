"""Where a result comes from: the commit, the command, the config files, the packages, the machine,
the date, and every parameter that differs from its scale's defaults.

The workflow's ``onstart`` handler (workflow/rules/common.smk) calls :func:`write_run_record` once
per run, in the process the user started, to ``logs/<run>/provenance.json``. Each job's
:func:`papers.common.runner.run_stage` then calls :func:`set_context`, so that a paper's report
stage (:func:`papers.common.report.write_report`) heads ``report.md`` with it and ``params.json``
carries it, without any paper passing it along.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
# Packages whose versions can change a result; those not installed are left out.
PACKAGES = ("torch", "triton", "numpy", "scipy", "pandas", "scikit-learn", "statsmodels", "rdkit", "snakemake")

_context: dict | None = None


def record_path(run: str) -> Path:
    return Path("logs") / run / "provenance.json"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def run_record(*, run: str, scale: str, configfiles, argv=None) -> dict:
    """What identifies this run of the workflow (written once, when it starts)."""
    commit = _git("rev-parse", "HEAD")
    return {
        "run": run,
        "scale": scale,
        "commit": commit or "unknown (not a git checkout)",
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")) if commit else None,
        "command": shlex.join(sys.argv if argv is None else argv),  # quoted: it can be pasted back
        "configfiles": [str(f) for f in configfiles],
        "versions": versions(),
        "machine": f"{platform.node()} ({platform.machine()}, {platform.system()} {platform.release()})",
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


# Two Snakemake processes may run papers of one run side by side (their targets are disjoint); each job reads
# the record of the process that started it, named in its environment, not the last one written.
RECORD_VARIABLE = "REPRO_RUN_RECORD"


def write_run_record(*, run: str, scale: str, configfiles, argv=None) -> Path:
    """Write this process's record (``logs/<run>/provenance-<pid>.json``, named to its jobs through the
    environment they inherit) and the run's latest (``logs/<run>/provenance.json``, for jobs that do not inherit
    it, e.g. on a cluster that does not export the environment)."""
    path = record_path(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(run_record(run=run, scale=scale, configfiles=configfiles, argv=argv), indent=2) + "\n"
    own = path.with_name(f"provenance-{os.getpid()}.json")
    own.write_text(text)
    path.write_text(text)
    os.environ[RECORD_VARIABLE] = str(own.resolve())
    return path


def scale_defaults(scale: str) -> dict:
    """The configuration a scale stands for: config/config.yaml, with config/<scale>.yaml laid over it."""
    import yaml

    from snakemake.utils import update_config

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    overlay = ROOT / "config" / f"{scale}.yaml"
    if scale != "default" and overlay.is_file():
        update_config(config, yaml.safe_load(overlay.read_text()) or {})
    return config


def differences(actual: Any, default: Any, prefix: str = "") -> dict[str, tuple]:
    """{dotted key: (value, scale's default)} for every leaf where `actual` differs from `default`."""
    if isinstance(actual, dict) and isinstance(default, dict):
        out = {}
        for key in sorted(set(actual) | set(default), key=str):
            where = f"{prefix}.{key}" if prefix else str(key)
            out.update(differences(actual.get(key), default.get(key), where))
        return out
    norm = lambda v: json.loads(json.dumps(v))  # noqa: E731 (tuples and lists compare alike)
    return {} if norm(actual) == norm(default) else {prefix: (actual, default)}


def set_context(config: dict, slug: str | None) -> None:
    """Called by the runner before a stage: this run's record and the paper's overrides."""
    global _context
    scale = config.get("scale", "default")
    run = config.get("run") or scale
    own = os.environ.get(RECORD_VARIABLE)
    path = Path(own) if own and Path(own).is_file() else record_path(run)
    record = json.loads(path.read_text()) if path.is_file() else {"run": run, "scale": scale,
                                                                   "note": f"{path} missing (a dry or partial run)"}
    overrides = {}
    if slug and slug in config:
        try:
            overrides = differences(config[slug], scale_defaults(scale).get(slug, {}), slug)
        except (OSError, ValueError) as e:  # a broken config file was caught at parse time; say so here
            overrides = {"<unknown>": (str(e), None)}
    _context = {"record": record, "overrides": overrides}


def context() -> dict | None:
    """This job's provenance, or None outside a workflow run (a test calling a stage directly)."""
    return _context


def markdown() -> str:
    """The head of report.md: run, commit, command, configs, packages, machine, date, overrides."""
    if _context is None:
        return ""
    r = _context["record"]
    lines = [f"Provenance: run `{r.get('run')}` (scale `{r.get('scale')}`), commit `{str(r.get('commit', '?'))[:12]}`"
             + (" with uncommitted changes" if r.get("dirty") else "") + f", started {r.get('started', '?')} on "
             f"{r.get('machine', '?')}; command `{r.get('command', '?')}`; config files "
             f"{', '.join(f'`{c}`' for c in r.get('configfiles', [])) or '?'}; "
             + ", ".join(f"{k} {v}" for k, v in r.get("versions", {}).items()) + "."]
    if r.get("note"):
        lines.append(f"({r['note']})")
    overrides = _context["overrides"]
    if overrides:
        lines.append("")
        lines.append(f"**Modified run**: {len(overrides)} value(s) differ from the `{r.get('scale')}` scale's defaults:")
        lines += [f"- `{k}` = `{json.dumps(v)}` (default `{json.dumps(d)}`)" for k, (v, d) in overrides.items()]
    else:
        lines.append("")
        lines.append(f"Every parameter of this paper has its `{r.get('scale')}` scale default.")
    return "\n".join(lines)


def json_block() -> dict | None:
    if _context is None:
        return None
    return {"provenance": _context["record"],
            "overrides": {k: {"value": v, "default": d} for k, (v, d) in _context["overrides"].items()}}
