"""What each job asks a cluster for, by a dry run of the real profiles/slurm at the full scale (no cluster needed):
one edit of the config routes every GPU rule. What every job is submitted with is checked through a fake SLURM in
test_cluster_submission.py.
"""
import os
import re
import subprocess

from smk import ROOT, full_scale_stand_ins, rule_kinds, snakemake

GPU_RULES = {rule for rule, kind in rule_kinds().items() if kind == "gpu"}


def _jobs(stdout: str) -> list[tuple[str, dict]]:
    """(rule, resources) of every job in a dry run's listing."""
    jobs = []
    for block in re.split(r"^(?:local)?rule ", stdout, flags=re.M)[1:]:
        rule = block.split(":", 1)[0]
        line = re.search(r"^\s+resources: (.*)$", block, re.M)
        resources = dict(item.split("=", 1) for item in line.group(1).split(", ")) if line else {}
        jobs.append((rule, resources))
    return jobs


def test_one_edit_routes_every_gpu_rule(tmp_path):
    full_scale_stand_ins(tmp_path)
    result = snakemake("-n", "--profile", str(ROOT / "profiles" / "slurm"),
                       "--configfile", str(ROOT / "config" / "full.yaml"),
                       "--config", "resources={gpu: {partition: a100, gres: 'gpu:a100:1', gpu: 0}}",
                       workdir=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = _jobs(result.stdout)
    routed = {rule: res for rule, res in jobs if rule in GPU_RULES}
    # every gpu-kind rule with a job at the full scale (which rules those are is tested by behaviour in
    # test_gpu_routing.py)
    assert set(routed) == GPU_RULES & {rule for rule, _ in jobs} and len(routed) >= 10, routed
    assert all(res.get("slurm_partition") == "a100" and res.get("gres") == "gpu:a100:1" for res in routed.values()), routed


def test_the_local_cluster_script_leaves_a_real_configuration_alone(tmp_path):
    """scripts/slurm-local.sh writes slurm.conf and stops daemons: never where a real cluster's config is."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=production\n")
    for action in ("up", "down"):
        result = subprocess.run([str(ROOT / "scripts" / "slurm-local.sh"), action], capture_output=True, text=True,
                                env={**os.environ, "SLURM_CONF": str(conf)}, timeout=60)
        assert result.returncode == 1 and "was not written by this script" in result.stderr, result.stderr
    assert conf.read_text() == "ClusterName=production\n" and sorted(p.name for p in tmp_path.iterdir()) == ["slurm.conf"]
