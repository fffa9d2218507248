"""The eagle DAG's stages pretrain and train (one job per seed each) and evaluate; prepare is
papers.eagle.data.prepare (no torch import), the report papers.eagle.report.

Each function takes its parameters and its input and output paths explicitly, so it runs under
Snakemake (workflow/rules/eagle.smk) and in tests alike.
"""
from __future__ import annotations

import logging

import pandas as pd
import torch

from papers.common.io import read_parquets, write_parquet
from papers.common.seeding import seed_everything
from papers.eagle import train as T
from papers.eagle.data import read_split
from papers.eagle.params import parse

log = logging.getLogger(__name__)
SPLITS = ("train", "val", "test", "novel")


def pretrain(*, cfg, seed: str, data, experts):
    """The three experts on their own objectives and the LM on the QA text, for one seed (a .pt file)."""
    p = parse(cfg)
    seed = int(seed)
    seed_everything(seed)
    splits = {s: read_split(data, seed, s) for s in SPLITS}
    out = T.pretrain_all(splits, p, seed)
    for name, curve in out["curves"].items():
        log.info("seed %d: %s pretraining loss %.3f -> %.3f", seed, name, curve[0], curve[-1])
    torch.save(out, experts)


def train(*, cfg, seed: str, data, experts, accuracies):
    """Every arm of the study on one seed: one row per (arm, split, question kind)."""
    p = parse(cfg)
    seed = int(seed)
    seed_everything(seed)
    splits = {s: read_split(data, seed, s) for s in SPLITS}
    pretrained = torch.load(experts, weights_only=False)
    rows = T.run_seed(pretrained, splits, p, seed)
    write_parquet(pd.DataFrame(rows).assign(seed=seed), accuracies)


def evaluate(*, cfg, accuracies, table):
    """All seeds' accuracies in one table (checked: every seed has the same arms)."""
    p = parse(cfg)
    df = read_parquets(accuracies)
    fixed = df[~df.arm.str.startswith("rr:")].groupby("seed").arm.apply(frozenset)
    if fixed.nunique() != 1 or len(fixed) != p.seeds:
        raise ValueError(f"eagle: the seeds' accuracy files {list(accuracies)} do not hold the same arms")
    write_parquet(df, table)
