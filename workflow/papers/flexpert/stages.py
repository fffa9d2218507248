"""The flexpert DAG's stages after prepare (papers.flexpert.data.prepare): pretrain (the masked LM), train (one
job per seed: the predictors and the designers on that seed's leave-proteins-out split, the designs judged
from outside the Flexpert family), evaluate (the seeds' tables in one). The report is papers.flexpert.report.
Each function takes its parameters and paths explicitly."""
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
from papers.flexpert.enm import pearson, planted_target, residue_type_means, threaded_gnm_fluctuations, zscore
from papers.flexpert.params import parse

log = logging.getLogger(__name__)


def pretrain(*, cfg, sequences, lm):
    """Pretrain the masked protein LM once; every seed's predictors start from it."""
    p = parse(cfg)
    seed_everything(0)
    seqs = list(pd.read_parquet(sequences)["sequence"])
    net = T.pretrain_lm(seqs, p.lm, seed=0)
    torch.save({k: v.cpu() for k, v in net.state_dict().items()}, lm)


def _region(length: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """A random contiguous segment of `size` residues, at least 3 residues from either end."""
    start = int(rng.integers(3, max(4, length - size - 3)))
    mask = np.zeros(length, dtype=bool)
    mask[start:start + size] = True
    return mask


# The positive control of claim (c): the region's residues replaced by draws from the five residues of the weakest
# contacts on the judge's scale (Miyazawa-Jernigan: K, D, E, N, Q), a region made more flexible by construction.
WEAK_CONTACT_RESIDUES = "KDENQ"


def plant_flexible(sequence: str, region: np.ndarray, rng: np.random.Generator) -> str:
    """`sequence` with the residues of `region` drawn from :data:`WEAK_CONTACT_RESIDUES`."""
    seq = np.array(list(sequence))
    seq[region] = rng.choice(list(WEAK_CONTACT_RESIDUES), int(region.sum()))
    return "".join(seq)


def judge(chain: dict, sequence: str, cutoff: float, gamma: float) -> np.ndarray:
    """The judge of claim (c), from outside the Flexpert family: the sequence threaded onto the chain's backbone,
    its sequence-dependent GNM fluctuations (:func:`papers.flexpert.enm.threaded_gnm_fluctuations`), z-scored over
    the protein (the same units as the instruction)."""
    return zscore(threaded_gnm_fluctuations(chain["coords"], sequence, cutoff, gamma))


def train(*, cfg, seed, chains, splits, lm, predictions, designs):
    """One seed: Flexpert-Seq, Flexpert-3D and their controls trained on the split's training targets and scored on
    its held-out targets; then the designers (claim c), trained on every chain outside the held-out clusters and
    tested on every held-out chain."""
    p = parse(cfg)
    seed = int(seed)
    rng = seed_everything(seed)
    records = read_chains_file(chains)
    split = pd.read_parquet(splits)
    test_ids = set(split[(split.seed == seed) & split.test].id)
    lm_state = torch.load(lm, map_location="cpu")
    cutoff, gamma = p.enm["cutoff"], p.enm["gamma"]
    for r in records:
        r["anm_raw"] = r["anm"]
        r["anm"] = zscore(r["anm"])
        if r["is_target"]:
            r["target"] = zscore(r["flex"])
    train_t = [r for r in records if r["is_target"] and r["id"] not in test_ids]
    test_t = [r for r in records if r["is_target"] and r["id"] in test_ids]
    log.info("seed %d: %d training, %d held-out target chains", seed, len(train_t), len(test_t))

    # Controls: the ANM profile permuted over each protein's residues (train and test: the ablation of claim b1),
    # and the targets permuted over each training protein's residues (claim b2's null). Claim b2's positive control:
    # Flexpert-Seq trained and scored on the planted target (:func:`planted_target`).
    def shuffled_anm(rs):
        return [dict(r, anm=rng.permutation(r["anm"])) for r in rs]

    for r in train_t + test_t:
        r["planted"] = planted_target(r["sequence"], r["flex"])
    planted_train = [dict(r, target=r["planted"]) for r in train_t]
    # arm: (training chains, held-out chains, Flexpert-3D?, the held-out profile it is scored against)
    arms = {"seq": (train_t, test_t, False, "flex"), "3d": (train_t, test_t, True, "flex"),
            "3d_shuffled_anm": (shuffled_anm(train_t), shuffled_anm(test_t), True, "flex"),
            "seq_permuted_targets": ([dict(r, target=rng.permutation(r["target"])) for r in train_t], test_t, False,
                                     "flex"),
            "seq_planted": (planted_train, test_t, False, "planted")}
    # Claim b1's null: every arm also scored against the held-out targets permuted over residues (one permutation
    # per chain and seed, the same for every arm).
    permuted = {r["id"]: np.random.default_rng([seed, i, 23]).permutation(len(r["flex"])) for i, r in enumerate(test_t)}

    def scored(arm, r, pred, against="flex"):
        return {"seed": seed, "arm": arm, "id": r["id"], "pearson": pearson(pred, r[against]),
                "pearson_permuted_target": pearson(pred, r[against][permuted[r["id"]]])}

    rows, nets = [], {}
    for arm, (tr, te, three_d, against) in arms.items():
        nets[arm] = T.train_predictor(tr, lm_state, p.lm, p.predictor, three_d, seed)
        rows += [scored(arm, r, pred, against) for r, pred in zip(te, T.predict(nets[arm], te))]
        log.info("seed %d: %s trained", seed, arm)
    by_type = residue_type_means(train_t)
    for r in test_t:
        for arm, profile in (("anm_profile", r["anm_raw"]), ("gnm_profile", r["gnm"]),
                             ("judge_native", judge(r, r["sequence"], cutoff, gamma)),
                             ("residue_baseline", np.array([by_type[a] for a in r["sequence"]]))):
            rows.append(scored(arm, r, profile))
        rows.append(scored("anm_profile_planted", r, r["anm_raw"], "planted"))
    write_parquet(pd.DataFrame(rows), predictions)

    # ---- Flexpert-Design (claim c) ----
    ds = p.design
    flex_model = nets["3d"]
    design_train = [r for r in records if r["id"] not in test_ids]
    design_test = [r for r in records if r["id"] in test_ids]
    for r, f in zip(design_train, T.predict(flex_model, design_train)):
        r["target_flex"] = f
    base = T.pretrain_designer(design_train, ds, seed)
    designers, train_flex_mse = {}, {}
    for arm, weight, instructed in (("unsteered", 0.0, False), ("steered", ds["flex_weight"], True),
                                    ("zero_weight", 0.0, True)):
        designers[arm], train_flex_mse[arm] = T.finetune_designer(copy.deepcopy(base), design_train, ds, seed, weight,
                                                                  instructed, flex_model)
        log.info("seed %d: designer %s, training Flexpert loss (last quarter) %.4f", seed, arm, train_flex_mse[arm])
    native = T.predict(flex_model, design_test)
    regions = [_region(len(r["sequence"]), ds["segment"], rng) for r in design_test]
    raised = [f + ds["raise"] * m for f, m in zip(native, regions)]
    runs = {"unsteered": ("unsteered", None), "steered": ("steered", raised), "zero_weight": ("zero_weight", raised),
            "steered, native instruction": ("steered", native),
            "zero_weight, native instruction": ("zero_weight", native)}
    sequences = {name: T.design(designers[which], design_test, flex) for name, (which, flex) in runs.items()}
    sequences["native"] = [r["sequence"] for r in design_test]
    sequences["planted"] = [plant_flexible(r["sequence"], m, rng) for r, m in zip(design_test, regions)]
    # The composition baseline of the recovery premise: always the training chains' most frequent residue.
    residues = "".join(r["sequence"] for r in design_train)
    composition = max(residues.count(a) for a in set(residues)) / len(residues)
    out = []
    designer_of = {name: which for name, (which, _) in runs.items()}
    for name, seqs in sequences.items():
        designed = [dict(r, sequence=s) for r, s in zip(design_test, seqs)]
        by_loss_model = T.predict(flex_model, designed)
        for r, s, m, fl in zip(design_test, seqs, regions, by_loss_model):
            fj = judge(r, s, cutoff, gamma)
            out.append({"seed": seed, "design": name, "id": r["id"], "region_judge": float(fj[m].mean()),
                        "outside_judge": float(fj[~m].mean()), "region_loss_model": float(fl[m].mean()),
                        "recovery": float(np.mean([a == b for a, b in zip(s, r["sequence"])])),
                        "composition_recovery": composition,
                        "train_flex_mse": train_flex_mse[designer_of[name]] if name in designer_of else np.nan})
        log.info("seed %d: designs %s judged", seed, name)
    write_parquet(pd.DataFrame(out), designs)
