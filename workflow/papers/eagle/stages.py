"""The eagle DAG's stages pretrain (one job: the experts and the LM that every seed and arm shares) and train (one
job per seed and arm: :func:`train`; at the synthetic scales the arms every seed trains share one job per seed:
:func:`train_seed`); prepare is papers.eagle.data.prepare and evaluate papers.eagle.report.evaluate (no torch import: those jobs
stay light), the report papers.eagle.report.

Each function takes its parameters and its input and output paths explicitly, so it runs under
Snakemake (workflow/rules/eagle.smk) and in tests alike.
"""
from __future__ import annotations

import logging

import pandas as pd
import torch

from papers.common.io import read_parquets, write_parquet
from papers.common.seeding import seed_everything
from papers.eagle import arms as A
from papers.eagle import llava
from papers.eagle import train as T
from papers.eagle.arms import seed_groups
from papers.eagle.data import read_split
from papers.eagle.params import parse

log = logging.getLogger(__name__)
SPLITS = ("train", "val", "test")  # novel (held-out templates) serves no claim: not evaluated


def pretrain(*, cfg, data, experts):
    """The experts on their own objectives and the LM on the QA text, once for every seed (a .pt file), on the
    pretraining canvases. At the full scale the experts and the LM come pretrained from their Hugging Face
    directories: this job loads each once and records its map and width (a wrong directory stops here, before the
    long training jobs)."""
    p = parse(cfg)
    seed_everything(0)
    if llava.enabled(p):
        found = llava.describe(p)
        log.info("pretrained experts and LM %s", found)
        torch.save({"llava": found}, experts)
        return
    out = T.pretrain_all(read_split(data, "pretrain", "pretrain"), p)
    for name, curve in out["curves"].items():
        log.info("%s pretraining loss %.3f -> %.3f", name, curve[0], curve[-1])
    torch.save(out, experts)


def _arm_trainer(p, index: int, data, experts):
    """train_arm(arm, rng) for the arms of seed index `index`: the seed's splits, and at the synthetic scales the
    pretrained models and the towers' frozen lower-layer activations (papers.eagle.train.trunk_bank), loaded or
    computed once for every arm the job trains."""
    if llava.enabled(p):  # the full scale: every arm trains anew from the same pretrained models
        splits = {s: llava.read_records(data, s) for s in ("train", "val", "test")}
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return lambda a, rng: llava.run_arm(a, splits, p, rng, device)
    splits = {s: read_split(data, index, s) for s in SPLITS}
    pretrained = torch.load(experts, weights_only=False)
    banks = {s: T.trunk_bank(pretrained, splits[s]["scene_canvas"], p.experts["channels"]) for s in splits}
    return lambda a, rng: T.run_arm(a, pretrained, splits, banks, p, rng)


def train(*, cfg, seed: str, arm: str, data, experts, selection=(), accuracies):
    """One arm on one seed (a job per seed and arm: at the full scale an arm is a 7B LM's whole schedule; at the
    synthetic scales the arms that only some seeds train): one row
    per (split, question kind). `arm`: the job's name (papers.eagle.arms.seed_jobs), a fixed arm's of this seed's
    groups (eagle.arm_seeds) or a round-robin slot's, whose arm is chosen from `selection` (the accuracy files of
    the seed's single experts and earlier slots, papers.eagle.arms.selection; empty for a fixed arm). `seed` is the
    job's index i (0 .. seeds - 1: the data file's key and the arm groups' "first n seeds"); the replicate's seed,
    which seeds its canvases (papers.eagle.data.prepare), arms and batches and which its rows carry, is
    eagle.seed_offset + i. The arm trains as it would among the seed's other arms in one process
    (papers.eagle.train.run_seed; tested)."""
    p = parse(cfg)
    index = int(seed)
    seed = p.seed_offset + index
    seed_everything(seed)
    names = list(p.experts["names"])
    groups = seed_groups(p.arm_seeds, index)
    selected = read_parquets(selection).to_dict("records") if selection else []
    train_arm = _arm_trainer(p, index, data, experts)
    rows = T.seeded(train_arm, T.job_arm(arm, names, groups, selected), seed)
    write_parquet(pd.DataFrame(rows).assign(seed=seed), accuracies)


def train_seed(*, cfg, seed: str, arms, data, experts, accuracies):
    """Several train jobs of one seed in one job (the synthetic scales: the jobs every seed trains,
    papers.eagle.arms.shared_jobs; issue 52, the time budget): `arms` the job names in their order
    (papers.eagle.arms.seed_jobs), `accuracies` their files, each the file that :func:`train` writes for that job,
    byte for byte (tested): before each arm the global seeds are set as its own job sets them, the arm draws its
    own RNG streams (papers.eagle.train.seeded), and a round-robin slot chooses from the rows of the jobs its
    choice reads (papers.eagle.arms.selection), which train before it here. What the job saves: the process's
    start-up (python, torch, imports) and the seed's data, pretrained models and frozen tower activations, paid
    once for the seed instead of once per arm."""
    p = parse(cfg)
    arms, accuracies = list(arms), list(accuracies)
    if len(arms) != len(accuracies) or len(set(arms)) != len(arms):
        raise ValueError(f"eagle: train_seed needs one accuracy file per distinct job, got jobs {arms} and files "
                         f"{accuracies}")
    index = int(seed)
    seed = p.seed_offset + index
    seed_everything(seed)
    names = list(p.experts["names"])
    groups = seed_groups(p.arm_seeds, index)
    train_arm = _arm_trainer(p, index, data, experts)
    done: dict[str, list[dict]] = {}  # job -> its rows
    for job, path in zip(arms, accuracies):
        missing = [j for j in A.selection(names, job) if j not in done]
        if missing:
            raise ValueError(f"eagle: job {job} chooses from {missing}, which this seed's job does not train before it")
        selected = [r for j in A.selection(names, job) for r in done[j]]
        seed_everything(seed)  # the global state the arm's own job (train) starts it from
        rows = T.seeded(train_arm, T.job_arm(job, names, groups, selected), seed)
        write_parquet(pd.DataFrame(rows).assign(seed=seed), path)
        done[job] = rows
