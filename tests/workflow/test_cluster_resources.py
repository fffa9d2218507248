"""What each job asks a cluster for: the real profiles/slurm, dry-run at the full scale (no cluster needed).

Every rule of the `gpu` kind (the stages that use a GPU) must land on the GPU partition with its GPU;
every other rule on the profile's CPU partition without one; memory and time as the config gives them.
"""
import os
import re
import subprocess

import yaml

from smk import ROOT, full_scale_stand_ins, snakemake

RULES = "".join(f.read_text() for f in (ROOT / "workflow" / "rules").glob("*.smk"))
GPU_RULES = set(re.findall(r'^rule (\w+):(?:(?!^rule ).)*?job_resources\("gpu"\)', RULES, re.M | re.S))


def _jobs(stdout: str) -> list[tuple[str, dict]]:
    """(rule, resources) of every job in a dry run's listing."""
    jobs = []
    for block in re.split(r"^(?:local)?rule ", stdout, flags=re.M)[1:]:
        rule = block.split(":", 1)[0]
        line = re.search(r"^\s+resources: (.*)$", block, re.M)
        resources = dict(item.split("=", 1) for item in line.group(1).split(", ")) if line else {}
        jobs.append((rule, resources))
    return jobs


def test_every_gpu_rule_lands_on_the_gpu_partition(tmp_path):
    assert len(GPU_RULES) >= 19 and "uv_sharpness_train_mlp" in GPU_RULES and "hip_train_lm" in GPU_RULES
    full_scale_stand_ins(tmp_path)
    result = snakemake("-n", "--profile", str(ROOT / "profiles" / "slurm"),
                       "--configfile", str(ROOT / "config" / "full.yaml"), workdir=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    kinds = yaml.safe_load((ROOT / "config" / "full.yaml").read_text())["resources"]
    seen = set()
    for rule, res in _jobs(result.stdout):
        if rule == "all":  # a local rule: no resources
            continue
        seen.add(rule)
        if rule in GPU_RULES:
            assert res.get("slurm_partition") == kinds["gpu"]["partition"], (rule, res)
            assert res.get("gpu") == str(kinds["gpu"]["gpu"]) and res.get("mem_mb") == str(kinds["gpu"]["mem_mb"]), (rule, res)
            assert res.get("runtime") == str(kinds["gpu"]["runtime"]), (rule, res)
        else:
            assert res.get("slurm_partition") == "cpu", (rule, res)  # the profile's default-resources
            assert "gpu" not in res, (rule, res)
    # orion_evaluate_pretrained joins the DAG only when pretrained models are configured.
    assert GPU_RULES - seen <= {"orion_evaluate_pretrained"}, GPU_RULES - seen


def test_one_edit_routes_every_gpu_rule(tmp_path):
    full_scale_stand_ins(tmp_path)
    result = snakemake("-n", "--profile", str(ROOT / "profiles" / "slurm"),
                       "--configfile", str(ROOT / "config" / "full.yaml"),
                       "--config", "resources={gpu: {partition: a100, gres: 'gpu:a100:1', gpu: 0}}",
                       workdir=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    routed = {rule: res for rule, res in _jobs(result.stdout) if rule in GPU_RULES}
    assert len(routed) >= 18, routed
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
