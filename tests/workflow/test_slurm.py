"""The cluster profile against a real SLURM: a one-node cluster from Debian's packages
(scripts/slurm-local.sh) runs the smoke DAG of a few papers through profiles/ci-slurm.

The submission path is the same for every paper (one group job per paper, resources from
job_resources in common.smk), so the two papers below stand for all of them: cbplm, whose first rule
is made to fail once, and ensembles, which trains torch models on packaged data (scikit-learn's digits)
in the rule given the test node's fake GPU. They are the two smoke DAGs of fewest jobs, so the group
jobs and the retry take seconds each. The papers' own target rules are asked for, not `all`, so that the
cross-paper summary does not queue a job of its own. What each paper's rules ask SLURM for is checked
for every rule by tests/workflow/test_cluster_resources.py and tests/workflow/test_cluster_submission.py,
and every paper's smoke DAG runs locally in test_dag.py.

Checked: the run completes and its tables equal the local run's; a GPU request reaches SLURM for the
rule given one (which rules use CUDA is tested by behaviour in test_gpu_routing.py); a job that fails once is retried and the run completes. The cluster is brought down
even when the test fails. Needs root (munge and slurmd), as in CI.
"""
import os
import re
import subprocess

import pytest

from smk import ROOT, RULES_TEXT, SNAKEMAKE

SLURM = ROOT / "scripts" / "slurm-local.sh"
GPU_PAPER, GPU_RULE = "ensembles", "ensembles_train"  # profiles/ci-slurm gives it the fake GPU: any rule would do
FAILING_RULE = "cbplm_prepare"
SLURM_PAPERS = ["cbplm", GPU_PAPER]  # one group job each

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="a local SLURM needs root (munge, slurmd); CI runs as root"),
]


@pytest.fixture(scope="module")
def cluster():
    up = subprocess.run([str(SLURM), "up"], capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield
    finally:
        subprocess.run([str(SLURM), "down"], capture_output=True, text=True, timeout=120)


def paper_groups() -> list[str]:
    """`--groups` arguments that put each paper's rules in one group: on a cluster every job parses
    the workflow again (seconds), so the smoke DAG's tiny jobs run as one SLURM job per paper."""
    rules = re.findall(r"^\s*rule (\w+):", RULES_TEXT, re.M)
    groups = [f"{rule}={slug}" for rule in rules for slug in SLURM_PAPERS if rule.startswith(f"{slug}_")]
    assert {g.split("=")[1] for g in groups} == set(SLURM_PAPERS), groups
    return groups


def slurm_jobs() -> list[dict]:
    """Every job the cluster knows (finished ones stay for MinJobAge), as `scontrol show job` fields."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, timeout=30).stdout
    jobs = []
    for line in out.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        jobs.append(fields)
    return jobs


def test_smoke_dag_through_slurm(cluster, smoke_runs, tmp_path):
    workdir = tmp_path / "slurm"
    workdir.mkdir()
    marker = tmp_path / "failed-once"
    # REPRO_FAKE_GPU: the GPU rule asks this CPU-only node for a GPU (profiles/ci-slurm), so its preflight is off
    env = {**os.environ, "REPRO_FAIL_ONCE": f"{FAILING_RULE}:{marker}", "REPRO_FAKE_GPU": "1"}
    # timeout -k: with accounting off, a misconfigured plugin polls sacct forever; never hang CI.
    # the targets come before --config, which takes every argument after it
    cmd = ["timeout", "-k", "10", "1500", SNAKEMAKE, *SLURM_PAPERS, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--profile", str(ROOT / "profiles" / "ci-slurm"),
           "--configfile", str(ROOT / "config" / "smoke.yaml"),
           "--groups", *paper_groups(), "--config", f"papers=[{','.join(SLURM_PAPERS)}]"]
    env.pop("TRITON_INTERPRET", None)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1600, env=env)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:]

    # The same tables as the local smoke run.
    for slug in SLURM_PAPERS:
        local = (smoke_runs[0] / "results" / "smoke" / slug / "table.csv").read_bytes()
        remote = (workdir / "results" / "smoke" / slug / "table.csv").read_bytes()
        assert local == remote, f"{slug}: the SLURM run's table differs from the local run's"

    # The injected failure happened, and the retry completed the run.
    assert marker.exists(), "the failing rule never ran"
    assert f"injected failure of rule {FAILING_RULE}" in log or "Error in group" in log or "Error in rule" in log

    # Every job went through SLURM; the GPU rule's job asked for a GPU, and no other job did.
    jobs = [j for j in slurm_jobs() if j.get("WorkDir") == str(workdir)]
    assert len(jobs) == len(SLURM_PAPERS) + 1, jobs  # one group job per paper, plus the retried one
    gpu_jobs = [j for j in jobs if "gpu" in (j.get("TresPerJob", "") + j.get("TresPerNode", ""))]
    assert gpu_jobs, "no job was submitted with a GPU request"
    assert all(GPU_PAPER in j.get("Comment", "") or GPU_RULE in j.get("Comment", "") for j in gpu_jobs), gpu_jobs
    failed = [j for j in jobs if j.get("JobState") in ("FAILED", "NODE_FAIL")]
    assert len(failed) == 1, [(j.get("Comment"), j.get("JobState")) for j in jobs]
    # The retry asked for twice the memory and time of the failed attempt (job_resources in common.smk).
    retry = min((j for j in jobs if j.get("Comment") == failed[0].get("Comment") and int(j["JobId"]) > int(failed[0]["JobId"])),
                key=lambda j: int(j["JobId"]))
    assert _megabytes(retry["MinMemoryNode"]) == 2 * _megabytes(failed[0]["MinMemoryNode"]), (failed[0], retry)
    assert _minutes(retry["TimeLimit"]) == 2 * _minutes(failed[0]["TimeLimit"]), (failed[0], retry)


def _megabytes(text: str) -> int:
    """scontrol's memory field ("4000M", "4G") in MB."""
    return int(float(text[:-1]) * {"M": 1, "G": 1024, "T": 1024 ** 2}[text[-1]])


def _minutes(text: str) -> int:
    """scontrol's TimeLimit ("01:00:00", "1-00:00:00", "00:15:00") in minutes."""
    days, _, clock = text.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return int(days or 0) * 1440 + h * 60 + m + (s > 0)
