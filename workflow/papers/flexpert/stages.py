"""The flexpert DAG's stages after prepare (papers.flexpert.data.prepare): pretrain (the masked LM), train (one
job per seed: the predictors and the designers on that seed's leave-proteins-out split), evaluate (the seeds'
tables in one). The report is papers.flexpert.report. Each function takes its parameters and paths explicitly."""
from __future__ import annotations

import copy
import logging

import numpy as np
import pandas as pd
import torch

from papers.common.io import write_parquet
from papers.common.seeding import seed_everything
from papers.flexpert import train as T
from papers.flexpert.data import read_chains_file
from papers.flexpert.enm import pearson, zscore
from papers.flexpert.params import parse

log = logging.getLogger(__name__)


def pretrain(*, cfg, sequences, lm):
    """Pretrain the masked protein LM once; every seed's predictors start from it."""
    p = parse(cfg)
    seed_everything(0)
    seqs = list(pd.read_parquet(sequences)["sequence"])
    net = T.pretrain_lm(seqs, p.lm, seed=0)
    torch.save(net.state_dict(), lm)


def _region(length: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """A random contiguous segment of `size` residues, at least 3 residues from either end."""
    start = int(rng.integers(3, max(4, length - size - 3)))
    mask = np.zeros(length, dtype=bool)
    mask[start:start + size] = True
    return mask


def train(*, cfg, seed, chains, splits, lm, predictions, designs):
    """One seed: Flexpert-Seq, Flexpert-3D, their controls and a judge Flexpert-3D (another initialisation) on the
    split's training proteins, scored on its held-out proteins; then the designers (claim c)."""
    p = parse(cfg)
    seed = int(seed)
    rng = seed_everything(seed)
    records = read_chains_file(chains)
    split = pd.read_parquet(splits)
    test_ids = set(split[(split.seed == seed) & split.test].id)
    lm_state = torch.load(lm)
    for r in records:
        r["anm_raw"] = r["anm"]
        r["anm"] = zscore(r["anm"])
        if r["has_b"]:
            r["target"] = zscore(r["bfactor"])
    train_b = [r for r in records if r["has_b"] and r["id"] not in test_ids]
    test_b = [r for r in records if r["has_b"] and r["id"] in test_ids]
    log.info("seed %d: %d training, %d held-out proteins with B-factors", seed, len(train_b), len(test_b))

    # Controls: the ANM profile permuted over each protein's residues (train and test), and the targets
    # permuted over each training protein's residues.
    def shuffled_anm(rs):
        return [dict(r, anm=rng.permutation(r["anm"])) for r in rs]

    arms = {"seq": (train_b, test_b, False, seed), "3d": (train_b, test_b, True, seed),
            "3d_shuffled_anm": (shuffled_anm(train_b), shuffled_anm(test_b), True, seed),
            "seq_permuted_targets": ([dict(r, target=rng.permutation(r["target"])) for r in train_b], test_b, False, seed),
            "judge_3d": (train_b, test_b, True, seed + 1000)}
    rows, nets = [], {}
    for arm, (tr, te, three_d, init) in arms.items():
        nets[arm] = T.train_predictor(tr, lm_state, p.lm, p.predictor, three_d, init)
        for r, pred in zip(te, T.predict(nets[arm], te)):
            rows.append({"seed": seed, "arm": arm, "id": r["id"], "pearson": pearson(pred, r["bfactor"])})
        log.info("seed %d: %s trained", seed, arm)
    for r in test_b:
        rows.append({"seed": seed, "arm": "anm_profile", "id": r["id"], "pearson": pearson(r["anm_raw"], r["bfactor"])})
        rows.append({"seed": seed, "arm": "gnm_profile", "id": r["id"], "pearson": pearson(r["gnm"], r["bfactor"])})
    write_parquet(pd.DataFrame(rows), predictions)

    # ---- Flexpert-Design (claim c) ----
    ds = p.design
    flex_model, judge = nets["3d"], nets["judge_3d"]
    design_train = [r for r in records if r["id"] not in test_ids]
    for r, f in zip(design_train, T.predict(flex_model, design_train)):
        r["target_flex"] = f
    base = T.pretrain_designer(design_train, ds, seed)
    designers = {
        "unsteered": T.finetune_designer(copy.deepcopy(base), design_train, ds, seed, 0.0, False, None),
        "steered": T.finetune_designer(copy.deepcopy(base), design_train, ds, seed, ds["flex_weight"], True, flex_model),
        "zero_weight": T.finetune_designer(copy.deepcopy(base), design_train, ds, seed, 0.0, True, None),
    }
    native = T.predict(flex_model, test_b)
    regions = [_region(len(r["sequence"]), ds["segment"], rng) for r in test_b]
    raised = [f + ds["raise"] * m for f, m in zip(native, regions)]
    runs = {"unsteered": ("unsteered", None), "steered": ("steered", raised),
            "steered, native instruction": ("steered", native), "zero_weight": ("zero_weight", raised)}
    out = []
    for name, (which, flex) in runs.items():
        seqs = T.design(designers[which], test_b, flex)
        designed = [dict(r, sequence=s) for r, s in zip(test_b, seqs)]
        by_judge, by_loss_model = T.predict(judge, designed), T.predict(flex_model, designed)
        for r, s, m, fj, fl in zip(test_b, seqs, regions, by_judge, by_loss_model):
            out.append({"seed": seed, "design": name, "id": r["id"], "region_judge": float(fj[m].mean()),
                        "outside_judge": float(fj[~m].mean()), "region_loss_model": float(fl[m].mean()),
                        "recovery": float(np.mean([a == b for a, b in zip(s, r["sequence"])]))})
        log.info("seed %d: designs %s done", seed, name)
    write_parquet(pd.DataFrame(out), designs)
