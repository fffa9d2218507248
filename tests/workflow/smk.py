"""Run the workflow's Snakefile from the tests, always in a scratch directory (never the checkout)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The papers whose smoke DAG the tests run (every implemented paper).
PAPERS = [
    "welfare", "deepgate4", "sam_late", "cbplm", "ensembles", "linear_mechanisms", "sharpening", "uv_sharpness",
    "neural_fdm", "sbdd_vs", "hip", "orion", "profilebfn", "symspace", "infoprop", "flexpert", "bodygen",
    "adamanip", "eagle",
]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(*args: str, workdir: Path, timeout: int = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run Snakemake on the repository's Snakefile with `args`, writing into `workdir` (`env`: extra variables)."""
    cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir), *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    env.pop("TRITON_INTERPRET", None)  # set by tests/conftest.py for the kernel tests only
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


# The data the full scale reads from user-given paths (config/full.yaml), relative to the workdir.
# The workflow checks at parse time that they exist; the dry-run tests give it empty stand-ins.
FULL_SCALE_DATA = {"files": ["data/uniref50.fasta", "data/pg19_books.txt", "data/bcic_iv_2a/A01.npz", "data/gsm8k/test.jsonl", "data/eagle/llava_v1_5_mix665k.json", "data/eagle/benchmark_val.json", "data/eagle/benchmark_test.json"], "folders": ["data/cifar-10-batches-py", "data/models/base_lm", "data/atlas/pdb", "data/atlas/analysis", "data/eagle/images", "data/models/clip_vit_l14_336", "data/models/convnext_xxl_1024", "data/models/eva02_l", "data/models/vicuna_7b"]}


def full_scale_stand_ins(workdir: Path) -> None:
    """Empty files and folders where config/full.yaml expects the user's data."""
    for folder in FULL_SCALE_DATA["folders"]:
        (workdir / folder).mkdir(parents=True, exist_ok=True)
    for file in FULL_SCALE_DATA["files"]:
        (workdir / file).parent.mkdir(parents=True, exist_ok=True)
        (workdir / file).touch()


# The rules as written in workflow/rules/*.smk, read without running Snakemake.
RULES_TEXT = "".join(f.read_text() for f in sorted((ROOT / "workflow" / "rules").glob("*.smk")))
_RULE_BLOCK = r'^\s*rule (\w+):(?:(?!^\s*rule ).)*?'


def rule_kinds() -> dict[str, str]:
    """{rule: the kind of job it declares (light, train, gpu)}: job_resources("<kind>"[, runtime=...])."""
    return {rule: kind for kind in ("light", "train", "gpu")
            for rule in re.findall(_RULE_BLOCK + rf'job_resources\("{kind}"[,)]', RULES_TEXT, re.M | re.S)}


def stage_rules() -> dict[str, str]:
    """{rule: the stage function it calls (params.call)} of every rule that runs a paper's code."""
    return dict(re.findall(_RULE_BLOCK + r'call="([\w.:]+)"', RULES_TEXT, re.M | re.S))

