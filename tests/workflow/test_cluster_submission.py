"""Every job of the full-scale DAG, submitted through the real profiles/slurm and the real executor plugin to a
fake SLURM (tests/workflow/fake_slurm/fake_slurm.py: its sbatch records the call and writes the job's outputs, its
sacct reports the job done), so that the test reads what each job asked the cluster for:

* the settings are profiles/slurm's, not the workflow profile's (profiles/default is applied to every run and
  wins over --profile, so it must not set what a cluster run sets differently): threads per job as the config's
  kind gives them, not capped by a local `cores`;
* no account and no CPU partition are sent by default (the cluster's defaults apply);
* every job of the `gpu` kind asks for its GPU on the GPU partition, and no other job asks for a GPU.
"""
import json
import os
import re
import shlex

import yaml
from papers.sbdd_vs.params import job_minutes
from snakemake.utils import update_config

from smk import RULES_TEXT, ROOT, full_scale_stand_ins, rule_kinds, snakemake

FAKE = ROOT / "tests" / "workflow" / "fake_slurm" / "fake_slurm.py"
TOOLS = ("sbatch", "sacct", "squeue", "sacctmgr", "sshare", "sinfo", "scontrol", "scancel")
KIND = rule_kinds()
GPU_RULES = {rule for rule, kind in KIND.items() if kind == "gpu"}


def target_key(rule: str, wildcards: str) -> str:
    """'rule:a=1,b=2' with the wildcards sorted, as both the dry run and sbatch's --target-jobs give them."""
    items = sorted(w for w in wildcards.split(",") if w)
    return f"{rule}:{','.join(items)}"


def dry_run_jobs(stdout: str) -> dict[str, list[str]]:
    """{target key: the files the job writes (outputs, log, benchmark)} of every job in a dry run's listing."""
    jobs = {}
    for block in re.split(r"^rule ", stdout, flags=re.M)[1:]:
        rule = block.split(":", 1)[0]
        files = [f for kind in ("output", "log", "benchmark")
                 for line in re.findall(rf"^\s+{kind}: (.*)$", block, re.M) for f in line.split(", ")]
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        wc = ",".join(w.strip() for w in wildcards.group(1).split(", ")) if wildcards else ""
        jobs[target_key(rule, wc)] = files
    return jobs


def test_every_full_scale_job_reaches_slurm_as_the_profile_and_config_say(tmp_path):
    work, state, bin_dir = tmp_path / "work", tmp_path / "slurm", tmp_path / "bin"
    for d in (work, state, bin_dir):
        d.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(FAKE)
    full_scale_stand_ins(work)
    profile = ["--profile", str(ROOT / "profiles" / "slurm"), "--configfile", str(ROOT / "config" / "full.yaml")]
    dry = snakemake("-n", *profile, workdir=work, timeout=300)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    jobs = dry_run_jobs(dry.stdout)
    jobs = {k: v for k, v in jobs.items() if not k.startswith("all:")}  # `all` is a local rule: not submitted
    (state / "outputs.json").write_text(json.dumps(jobs))

    run = snakemake(*profile, "--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "1",
                    workdir=work, timeout=1800, env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SLURM_DIR": str(state)})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    submissions = [json.loads(line) for line in (state / "submissions.jsonl").read_text().splitlines()]
    submitted = {}
    for s in submissions:
        target = re.search(r"--target-jobs '([^']*)'", next(a for a in s["args"] if a.startswith("--wrap=")))
        rule, _, wc = target.group(1).partition(":")
        submitted.setdefault(target_key(rule, wc), []).append(s["args"])
    assert set(submitted) == set(jobs), (set(jobs) ^ set(submitted))
    assert all(len(calls) == 1 for calls in submitted.values())

    full = yaml.safe_load((ROOT / "config" / "full.yaml").read_text())
    kinds = full["resources"]
    # rules whose paper estimates its own jobs' wall time: job_resources(kind, runtime=config[paper][key])
    own_runtime = {rule: full[paper][key] for rule, paper, key in re.findall(
        r'^\s*rule (\w+):(?:(?!^\s*rule ).)*?job_resources\("\w+", runtime=config\["(\w+)"\]\["(\w+)"\]',
        RULES_TEXT, re.M | re.S)}
    # sbdd_vs sizes its Vina jobs from their dockings (papers.sbdd_vs.params.job_minutes), over the config a full-scale
    # run reads: config.yaml with full.yaml laid over it, as Snakemake merges them
    merged = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(merged, full)
    for stage in ("generate", "evaluate", "dock"):
        own_runtime[f"sbdd_vs_{stage}"] = job_minutes(merged["sbdd_vs"], stage, kinds["train"]["runtime"])
    assert own_runtime["sbdd_vs_generate"] > kinds["train"]["runtime"]  # the Vina estimate, not the kind's floor
    # rules measured by scripts/estimate_full_jobs.py ask for their estimate in place of both (test_job_estimates.py)
    estimates = full.get("job_estimates") or {}
    slurm_profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.v8+.yaml").read_text())
    for key, calls in submitted.items():
        args = calls[0]
        rule = key.split(":")[0]
        kind = KIND[rule]
        flags = " ".join(args)
        assert not any(a in ("-A", "--account") or a.startswith("--account") for a in args), (key, flags)
        assert f"--cpus-per-task={kinds[kind]['threads']}" in args, (key, flags)  # not capped by a local `cores`
        estimate = estimates.get(rule, {})
        assert args[args.index("--mem") + 1] == str(estimate.get("mem_mb", kinds[kind]["mem_mb"])), (key, flags)
        runtime = estimate.get("runtime", own_runtime.get(rule, kinds[kind]["runtime"]))
        assert args[args.index("-t") + 1] == str(runtime), (key, flags)
        wrapped = shlex.split(next(a for a in args if a.startswith("--wrap=")).split("=", 1)[1])
        assert wrapped[wrapped.index("--latency-wait") + 1] == str(slurm_profile["latency-wait"]), key
        if kind == "gpu":
            assert f"--gpus={kinds['gpu']['gpu']}" in args or "--gpus" in flags, (key, flags)
            assert args[args.index("-p") + 1] == kinds["gpu"]["partition"], (key, flags)
        else:
            assert "--gpus" not in flags and "gpu" not in " ".join(a for a in args if a.startswith("--gres")), (key, flags)
            assert "-p" not in args, (key, flags)  # no CPU partition by default: the cluster's default applies
    # orion_evaluate_pretrained and the like join the DAG only when pretrained models are configured.
    assert GPU_RULES - {k.split(":")[0] for k in submitted} <= {"orion_evaluate_pretrained"}


def test_the_workflow_profile_agrees_with_the_slurm_profile():
    """profiles/default is applied to every run and wins over --profile: whatever it sets, the SLURM profile must
    set alike (or not at all), and it must not set `cores` or `keep-going`."""
    workflow_profile = yaml.safe_load((ROOT / "profiles" / "default" / "config.v8+.yaml").read_text())
    slurm_profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.v8+.yaml").read_text())
    assert "cores" not in workflow_profile and "keep-going" not in workflow_profile
    for key, value in workflow_profile.items():
        assert slurm_profile.get(key, value) == value, key
    assert slurm_profile["keep-going"] is True and "slurm_account" not in slurm_profile["default-resources"]
