"""Measured per-job estimates at the full scale (config/full.yaml `job_estimates`, written by
scripts/estimate_full_jobs.py; issue 54, item 4), read through a dry run of the real profiles/slurm:

* a rule with an estimate asks for its runtime and mem_mb on the first attempt (and a retry scales it, up to the
  kind's caps);
* a rule without one keeps its kind's values (or its paper's own runtime estimate), and every train/gpu rule
  without one is listed, with the reason, in the script's UNMEASURED;
* every estimate fits its kind's max_runtime and max_mem_mb (a partition's limits), and names a rule that exists,
  except the rules listed in NEEDS_SPLIT, whose measured job needs more than a partition gives (the config keeps what
  they need, so that the scheduler holds them visibly, not a capped request that times out after 48 h).
"""
import re

import yaml
from papers.common.cluster import per_attempt
from papers.sbdd_vs.params import job_minutes
from snakemake.utils import update_config

from smk import RULES_TEXT, ROOT, full_scale_stand_ins, rule_kinds, snakemake

KIND = rule_kinds()
FULL = yaml.safe_load((ROOT / "config" / "full.yaml").read_text())
ESTIMATES = FULL.get("job_estimates") or {}
# Jobs measured to need more than max_runtime at the full scale (config/full_estimates.csv): each needs its work split
# across jobs (checkpoint and resume) or more devices before the full scale can run on a 48 h partition.
NEEDS_SPLIT: dict[str, str] = {}  # none since the splits of issue 54: bodygen's and profilebfn's chained parts
# (bodygen.train_parts, profilebfn.train_parts, tested bit for bit against one job), eagle's job per seed and arm, and
# orion's training on the GPU


def _jobs(stdout: str) -> list[tuple[str, dict]]:
    """(rule, resources) of every job in a dry run's listing."""
    jobs = []
    for block in re.split(r"^(?:local)?rule ", stdout, flags=re.M)[1:]:
        rule = block.split(":", 1)[0]
        line = re.search(r"^\s+resources: (.*)$", block, re.M)
        jobs.append((rule, dict(item.split("=", 1) for item in line.group(1).split(", ")) if line else {}))
    return jobs


def _own_runtime() -> dict[str, int]:
    """Rules whose paper estimates its jobs' wall time (job_resources(kind, runtime=...)), as the full scale sets it."""
    merged = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(merged, FULL)
    own = {rule: merged[paper][key] for rule, paper, key in re.findall(
        r'^\s*rule (\w+):(?:(?!^\s*rule ).)*?job_resources\("\w+", runtime=config\["(\w+)"\]\["(\w+)"\]', RULES_TEXT,
        re.M | re.S)}
    for stage in ("generate", "evaluate", "dock"):
        own[f"sbdd_vs_{stage}"] = job_minutes(merged["sbdd_vs"], stage, merged["resources"]["train"]["runtime"])
    return own


def test_every_estimate_names_a_rule_and_fits_its_kind_s_caps():
    assert ESTIMATES, "config/full.yaml has no job_estimates (scripts/estimate_full_jobs.py --write-config)"
    kinds = FULL["resources"]
    too_long = set()
    for rule, est in ESTIMATES.items():
        assert rule in KIND, f"job_estimates.{rule}: no such rule"
        spec = kinds[KIND[rule]]
        assert est["runtime"] >= 1 and est["mem_mb"] >= 100, (rule, est)
        if est["runtime"] > spec["max_runtime"] or est["mem_mb"] > spec["max_mem_mb"]:
            too_long.add(rule)
    assert too_long == set(NEEDS_SPLIT), f"jobs that do not fit a partition: {sorted(too_long)}, listed: {sorted(NEEDS_SPLIT)}"


def test_every_train_and_gpu_rule_is_measured_or_says_why_not():
    """scripts/estimate_full_jobs.py measures a rule (MEASURE) or lists it, with the reason, in UNMEASURED; the
    measured ones have their entry in config/full.yaml."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("estimate_full_jobs", ROOT / "scripts" / "estimate_full_jobs.py")
    est = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(est)
    heavy = {rule for rule, kind in KIND.items() if kind in ("train", "gpu")}
    assert set(est.MEASURE) & set(est.UNMEASURED) == set()
    assert set(est.MEASURE) | set(est.UNMEASURED) == heavy, sorted(heavy ^ (set(est.MEASURE) | set(est.UNMEASURED)))
    assert set(ESTIMATES) == set(est.MEASURE), sorted(set(ESTIMATES) ^ set(est.MEASURE))
    assert all(KIND[rule] == kind for rule, (kind, _) in est.MEASURE.items())
    assert all(reason.strip() for reason in est.UNMEASURED.values())


def test_every_rule_passes_its_name_to_job_resources():
    """job_resources finds a rule's estimate by the name the rule passes (rule="<its own name>")."""
    calls = re.findall(r'^\s*rule (\w+):(?:(?!^\s*rule ).)*?job_resources\(([^\n]*)\),\s*$', RULES_TEXT, re.M | re.S)
    assert len(calls) == len(KIND) > 40
    for rule, args in calls:
        assert f'rule="{rule}"' in args, (rule, args)


def test_a_full_scale_dry_run_asks_for_the_estimates_and_the_kind_s_values_elsewhere(tmp_path):
    full_scale_stand_ins(tmp_path)
    # an estimate for a light rule too (welfare_prepare has none in the config): the mechanism for every kind
    extra = {"welfare_prepare": {"runtime": 7, "mem_mb": 1234}}
    result = snakemake("-n", "--profile", str(ROOT / "profiles" / "slurm"), "--configfile", str(ROOT / "config" / "full.yaml"),
                       "--config", "job_estimates={welfare_prepare: {runtime: 7, mem_mb: 1234}}",
                       workdir=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = _jobs(result.stdout)
    seen = {rule for rule, _ in jobs}
    estimates = {**ESTIMATES, **extra}
    assert set(ESTIMATES) <= seen, set(ESTIMATES) - seen  # every estimated rule has jobs at the full scale
    kinds, own = FULL["resources"], _own_runtime()
    checked = set()
    for rule, res in jobs:
        if rule not in KIND or "runtime" not in res:
            continue  # `all` and the like: local, no resources
        spec = kinds[KIND[rule]]
        want = estimates.get(rule, {"runtime": own.get(rule, spec["runtime"]), "mem_mb": spec["mem_mb"]})
        assert int(res["runtime"]) == want["runtime"], (rule, res, want)
        assert int(res["mem_mb"]) == want["mem_mb"], (rule, res, want)
        checked.add(rule)
    assert "welfare_prepare" in checked and checked - set(estimates)  # rules with and without an estimate


def test_a_retry_scales_an_estimate_up_to_the_kind_s_cap():
    for rule, est in ESTIMATES.items():
        spec = FULL["resources"][KIND[rule]]
        runtime = per_attempt(est["runtime"], spec["max_runtime"])
        assert runtime(None, 1) == est["runtime"]
        assert runtime(None, 2) == min(2 * est["runtime"], max(spec["max_runtime"], est["runtime"]))
        assert runtime(None, 9) <= max(spec["max_runtime"], est["runtime"])  # never below the first attempt
