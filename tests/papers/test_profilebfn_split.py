"""profilebfn_train split for the full scale (issue 54, item 4): chained parts and data-parallel processes compute the
same training as one job (papers.profilebfn.train)."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from papers.profilebfn import train as T
from papers.profilebfn.params import parse

ROOT = Path(__file__).resolve().parents[2]
AA = list("ACDEFGHIKLMNPQRSTVWY")
CFG = {"families": ["RRM_1"], "potts": {"length": 8, "contacts": 2},
       "model": {"d_model": 16, "n_layer": 1, "n_head": 2, "time_dim": 4},
       "train": {"steps": 6, "batch": 4, "crop": 16, "lr": 1.0e-2, "warmup": 2}}


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("profilebfn_split") / "training.parquet"
    seqs = ["".join(rng.choice(AA, int(rng.integers(5, 30)))) for _ in range(64)]  # shorter and longer than the crop
    pd.DataFrame({"name": [f"s{i}" for i in range(64)], "sequence": seqs, "source": "proteins"}).to_parquet(path)
    return path


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_whole_equals_chained_parts_bit_for_bit(training, tmp_path):
    whole = T.train_part(parse(CFG), seed=3, part=0, training=training)
    chained = parse({**CFG, "train_parts": 2})
    T.train_part(chained, seed=3, part=0, training=training, out=tmp_path / "part0.pt")
    resumed = T.train_part(chained, seed=3, part=1, training=training, resume=tmp_path / "part0.pt")
    assert resumed["step"] == whole["step"] == 6 and len(resumed["losses"]) == 6
    assert resumed["losses"] == whole["losses"]
    _same(resumed["model"], whole["model"])
    _same(resumed["untrained"], whole["untrained"])
    for sa, sb in zip(resumed["optimizer"]["state"].values(), whole["optimizer"]["state"].values()):
        for k in sa:
            assert torch.equal(sa[k], sb[k]), k


def test_a_part_refuses_the_wrong_predecessor(training, tmp_path):
    chained = parse({**CFG, "train_parts": 3})
    T.train_part(chained, seed=3, part=0, training=training, out=tmp_path / "part0.pt")
    with pytest.raises(ValueError, match="not part 1"):
        T.train_part(chained, seed=3, part=2, training=training, resume=tmp_path / "part0.pt")


def test_ddp_on_two_gloo_processes_equals_one_process_on_the_union_batch(training, tmp_path):
    """Each process trains on half of the same union batch; DDP's mean of the gradients, with each loss normalised by
    the union's residue count x 2, is the union batch's gradient, so AdamW takes the same steps (to float rounding:
    the sums are ordered differently). The batches have unequal residue counts (sequences shorter than the crop), so a
    per-process mean would differ."""
    steps = 4
    cfg = {**CFG, "train": {**CFG["train"], "steps": steps}}
    one = T.train_part(parse(cfg), seed=5, part=0, training=training)
    two_cfg = {**cfg, "train": {**cfg["train"], "gpus": 2}}
    two = T.launch(two_cfg, seed=5, part=0, training=training, resume=None, out=tmp_path / "ddp.pt", world=2)
    assert two["world"] == 2 and two["step"] == steps
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-5)
    d = CFG["model"]["d_model"]
    for k in one["model"]:
        a, b = two["model"][k], one["model"][k]
        if k.endswith("qkv.bias"):
            # the key bias shifts every score of a query alike, so softmax makes its gradient zero in exact arithmetic;
            # Adam's normalisation turns the rounding left there into lr-sized steps either way: left out
            a, b = torch.cat([a[:d], a[2 * d:]]), torch.cat([b[:d], b[2 * d:]])
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=k)
    assert not torch.equal(one["model"]["head.weight"], one["untrained"]["head.weight"])  # it trained


def test_the_full_scale_runs_data_parallel_on_cuda_in_chained_parts():
    import yaml
    from snakemake.utils import update_config

    merged = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(merged, yaml.safe_load((ROOT / "config" / "full.yaml").read_text()))
    p = parse(merged["profilebfn"])
    assert p.device == "cuda" and p.train.gpus > 1 and p.train_parts > 1 and p.train.batch % p.train.gpus == 0
    default = parse(yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["profilebfn"])
    assert default.device == "cpu" and default.train.gpus == 1 and default.train_parts == 1
