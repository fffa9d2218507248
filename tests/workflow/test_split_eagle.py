"""P8 eagle's train stage at the full scale (issue 54, item 4): one job per seed and arm, each fitting a partition's
48 h, read from the full scale's dry run. That each job computes what the same arm computes among its seed's other arms
in one process is tested on the stage code (tests/papers/test_eagle.py, tests/papers/test_eagle_llava.py)."""
import re

import yaml
from snakemake.utils import update_config

from smk import ROOT, full_scale_stand_ins, snakemake


def _full_config() -> dict:
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(cfg, yaml.safe_load((ROOT / "config" / "full.yaml").read_text()))
    return cfg


def test_the_full_scale_trains_one_job_per_seed_and_arm(tmp_path):
    from papers.eagle import arms as A

    e = _full_config()["eagle"]
    names = e["experts"]["names"]
    full_scale_stand_ins(tmp_path)
    result = snakemake("-n", "eagle", "--configfile", str(ROOT / "config" / "full.yaml"), workdir=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = {}  # (seed, job name) -> its inputs
    for block in re.split(r"^(?:local)?rule ", result.stdout, flags=re.M)[1:]:
        if block.startswith("eagle_train:"):
            seed, job = re.search(r"^\s+wildcards: seed=(\d+), arm=(\S+)$", block, re.M).groups()
            jobs[int(seed), job] = re.search(r"^\s+input: (.*)$", block, re.M).group(1).split(", ")
    expected = {(s, j) for s in range(e["seeds"]) for j in A.seed_jobs(names, A.seed_groups(e["arm_seeds"], s))}
    assert set(jobs) == expected and len(jobs) == len(expected)
    # none of the synthetic scales' jobs per seed (eagle_train_seed) here: every arm has its own job
    assert not re.search(r"^(?:local)?rule eagle_train_seed:", result.stdout, re.M)
    # every fixed arm of every seed, e.g. the fusions, the single experts, Pre-Alignment and its control, each once
    arms = {a["name"] for a in A.fixed_arms(names, A.seed_groups(e["arm_seeds"], 0))}
    assert len(arms) == 11 and {A.job_name(a) for a in arms} <= {j for _, j in jobs}
    # the round-robin's slots (three experts) train after the seed's single experts: edges of the DAG
    slots = {k: v for k, v in jobs.items() if A.parse_slot(k[1])}
    assert len(slots) == 2 * e["seeds"]
    for (seed, _), inputs in slots.items():
        assert {f"results/full/eagle/train/{seed}/single-{x}.parquet" for x in names} <= set(inputs)
    # no fixed arm reads another arm's output (each trains from the pretrained experts and LM alone)
    assert not any("/train/" in i for k, v in jobs.items() if k not in slots for i in v)
