"""The ensembles DAG's stages: prepare (data) -> train (blocks of members) -> evaluate -> report.
Each function takes its parameters and paths explicitly; the report and the claims are in :mod:`.report`.
"""
from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np
import pandas as pd

from papers.common.io import read_parquets, write_json, write_parquet
from papers.common.params import to_dict
from papers.common.progress import progress
from papers.common.seeding import seed_everything
from papers.ensembles import data as data_mod
from papers.ensembles import ensemble
from papers.ensembles.params import parse

log = logging.getLogger(__name__)


# ---- prepare ---------------------------------------------------------------------------------
def prepare(*, cfg, data):
    """The digits or the user's CIFAR files, one table with a random train / val / test split per replicate."""
    p = parse(cfg)
    args = (p.train_size, p.val_size, p.replicates, p.data_seed)
    df = data_mod.digits(*args) if p.data is None else data_mod.cifar(p.data, *args)
    for r in range(p.replicates):
        counts = df[f"split{r}"].value_counts()
        log.info("replicate %d: %d train, %d val, %d test", r, counts.get("train", 0), counts.get("val", 0),
                 counts.get("test", 0))
    write_parquet(df, data)


# ---- train -----------------------------------------------------------------------------------
def member_seed(replicate: int, member: int) -> int:
    """Member m of replicate r: seed 1000 r + m (distinct across replicates, shared across settings)."""
    return 1000 * replicate + member


def _long_table(blocks: list[tuple[dict, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """One long table from blocks (key columns, probabilities (N, C), labels (N,)): keys, sample, label, p0 ..."""
    columns = defaultdict(list)
    for keys, probs, y in blocks:
        for key, value in keys.items():
            columns[key].append(np.full(len(y), value))
        columns["sample"].append(np.arange(len(y)))
        columns["label"].append(y)
        for c in range(probs.shape[1]):
            columns[f"p{c}"].append(probs[:, c])
    return pd.DataFrame({key: np.concatenate(parts) for key, parts in columns.items()})


def train(*, cfg, job, data, probs, members, snapshots, checkpoint):
    """Train block `job` of the (replicate, setting, member) list; write validation and test probabilities.

    Members of one setting and one architecture train side by side (one batched module); member m of
    replicate r draws its initialisation, batch order and augmentation from its own seed (:func:`member_seed`).
    For claim (a)'s control, member 0 of each homogeneous setting is trained once more on its own (the same
    seed, so the same run) and its last `snapshots` epochs are recorded.
    """
    import torch

    from papers.ensembles.train import log_probs, train_group

    p = parse(cfg)
    seed_everything(job)  # nothing below draws from global state; set for safety
    device = "cuda" if torch.cuda.is_available() else "cpu"
    df = pd.read_parquet(data)
    n_classes = int(df.label.max()) + 1

    groups = defaultdict(list)  # (replicate, setting, width, depth) -> members; a ResNet trains alone
    for r, name, m in p.job_members(job):
        s = p.settings[name]
        width, depth = s.architecture(m, p.members)
        groups[(r, name, width, depth, m if s.arch == "resnet18" else -1)].append(m)

    prob_blocks, snap_blocks, member_rows, states = [], [], [], []
    for (r, name, width, depth, _), ms in groups.items():
        s = p.settings[name]
        x, y = (torch.from_numpy(a.copy()) for a in data_mod.arrays(df, r, "train"))
        evals = {split: data_mod.arrays(df, r, split) for split in ("val", "test")}
        x_eval = torch.from_numpy(np.concatenate([evals["val"][0], evals["test"][0]]))
        n_val = len(evals["val"][1])
        log.info("replicate %d, setting %s: members %s, width %d, depth %d, %d training images", r, name, ms, width,
                 depth, len(x))
        model, train_loss, train_acc, _ = train_group(
            s, [member_seed(r, m) for m in ms], width, depth, x, y, n_classes, device,
            progress=lambda it: progress(it, desc=f"r{r} {name} {ms[0]}..{ms[-1]}"))
        prob = log_probs(model, x_eval, len(ms), device).exp().numpy()  # (G, N_val + N_test, C)
        splits = (("val", slice(0, n_val)), ("test", slice(n_val, None)))
        for split, sl in splits:
            prob_blocks += [({"replicate": r, "setting": name, "member": m, "split": split}, prob[g, sl], evals[split][1])
                            for g, m in enumerate(ms)]
        if not s.heterogeneous and 0 in ms:  # claim (a)'s control: one run's snapshots
            *_, snaps = train_group(s, [member_seed(r, 0)], width, depth, x, y, n_classes, device,
                                    snapshot_x=x_eval, snapshots=p.snapshots)
            for split, sl in splits:
                snap_blocks += [({"replicate": r, "setting": name, "member": 0, "snapshot": t, "split": split},
                                 snaps[t, sl].numpy(), evals[split][1]) for t in range(len(snaps))]
        for g, m in enumerate(ms):
            member_rows.append({"replicate": r, "setting": name, "member": m, "seed": member_seed(r, m),
                                "arch": s.arch, "width": width, "depth": depth, "train_size": len(x),
                                "train_loss": float(train_loss[g]), "train_acc": float(train_acc[g])})
        states.append({"replicate": r, "setting": name, "members": ms, "width": width, "depth": depth,
                       "model": {k: v.cpu() for k, v in model.state_dict().items()}})
    write_parquet(_long_table(prob_blocks), probs)
    write_parquet(_long_table(snap_blocks) if snap_blocks else pd.DataFrame(), snapshots)
    write_parquet(pd.DataFrame(member_rows), members)
    torch.save({"job": job, "groups": states, "config": to_dict(p)}, checkpoint)


# ---- evaluate --------------------------------------------------------------------------------
def stacked(frame: pd.DataFrame, by: str = "member") -> tuple[np.ndarray, np.ndarray]:
    """P (M, N, C) and y (N,) from a long table of one replicate, setting and split (M = values of `by`)."""
    frame = frame.sort_values([by, "sample"])
    cols = [c for c in frame.columns if c.startswith("p") and c[1:].isdigit()]
    M, N = frame[by].nunique(), frame["sample"].nunique()
    return frame[cols].to_numpy(np.float64).reshape(M, N, len(cols)), frame.label.to_numpy()[:N]


def val_chosen(P_val: np.ndarray, y_val: np.ndarray) -> tuple[int, int]:
    """The members a practitioner would pick without the test set: the best validation accuracy (ties: the
    lower validation NLL) and the lowest validation NLL."""
    acc, nll = ensemble.member_metrics(P_val, y_val)
    return int(np.lexsort((nll, -acc))[0]), int(np.argmin(nll))


def versus_chosen(P_val, y_val, P_test, y_test) -> dict:
    """The ensemble of all members of P (probability average) and the validation-chosen member, on the test set."""
    by_acc, by_nll = val_chosen(P_val, y_val)
    acc, nll = ensemble.member_metrics(P_test, y_test)
    ens_acc, ens_nll = ensemble.member_metrics(P_test.mean(0, keepdims=True), y_test)
    return {"ensemble_acc": float(ens_acc[0]), "ensemble_nll": float(ens_nll[0]),
            "chosen_acc": float(acc[by_acc]), "chosen_nll": float(nll[by_nll]),
            "best_on_test_acc": float(acc.max()), "best_on_test_nll": float(nll.min())}


def matching(M: int, seed: int) -> list[tuple[int, int]]:
    """A random perfect matching of M members into M / 2 disjoint pairs (independent KS tests)."""
    order = np.random.default_rng(seed).permutation(M)
    return [(int(i), int(j)) for i, j in order.reshape(-1, 2)]


def evaluate(*, cfg, probs, members, snapshots, metrics, curves):
    """Per setting and replicate: the members, the full ensemble against the validation-chosen member, the
    ensemble curve over M of the held-out members against the estimator from K members, disjoint-pair KS
    tests of distributional equivalence, and one run's snapshot ensemble (claim (a)'s control)."""
    p = parse(cfg)
    frames, snaps = read_parquets(probs), read_parquets(snapshots)
    member_table = read_parquets(members)
    K = p.estimator_members
    out, curve_frames = {}, []
    for name, s in p.settings.items():
        out[name] = []
        for r in range(p.replicates):
            f = frames[(frames.setting == name) & (frames.replicate == r)]
            (P_val, y_val), (P, y) = stacked(f[f.split == "val"]), stacked(f[f.split == "test"])
            acc_m, nll_m = ensemble.member_metrics(P, y)
            # the measured curve: ensembles of the members the estimator does not see (K .. M-1)
            c = ensemble.curves(P[K:], y, p.orderings, seed=p.data_seed + r)
            est = ensemble.estimate(P[:K], y, c["M"])
            curve_frames.append(pd.DataFrame({"setting": name, "replicate": r, **{k: c[k] for k in (
                "M", "acc", "nll", "member_acc", "member_nll", "jensen_gap")}, "acc_hat": est["acc"], "nll_hat": est["nll"]}))
            pairs = matching(p.members, p.data_seed + r)
            # across architectures: member m with member m + M/2 (the heterogeneous control's blocks differ)
            cross = [(m, m + p.members // 2) for m in range(p.members // 2)]
            trained = member_table[(member_table.setting == name) & (member_table.replicate == r)]
            rec = {"replicate": r, "members": int(len(P)), "test_size": int(len(y)), "val_size": int(len(y_val)),
                   "train_loss_max": float(trained.train_loss.max()), "train_acc_min": float(trained.train_acc.min()),
                   "member_acc": acc_m.tolist(), "member_nll": nll_m.tolist(),
                   "disagreement": ensemble.disagreement(P),
                   "jensen_gap": float(nll_m.mean() - ensemble.member_metrics(P.mean(0, keepdims=True), y)[1][0]),
                   **versus_chosen(P_val, y_val, P, y),
                   "pairs": pairs, "pair_p": ensemble.equivalence_pvalues(P, y, pairs).tolist(),
                   "cross_pair_p": ensemble.equivalence_pvalues(P, y, cross).tolist()}
            g = snaps[(snaps.setting == name) & (snaps.replicate == r) & (snaps.member == 0)]
            if not s.heterogeneous and len(g):
                (S_val, _), (S, _) = stacked(g[g.split == "val"], "snapshot"), stacked(g[g.split == "test"], "snapshot")
                rec["snapshots"] = {**versus_chosen(S_val, y_val, S, y), "disagreement": ensemble.disagreement(S)}
            out[name].append(rec)
            log.info("%s r%d: members acc %.4f, ensemble %.4f, val-chosen %.4f; pairs not rejected %d/%d", name, r,
                     acc_m.mean(), rec["ensemble_acc"], rec["chosen_acc"], sum(q > p.alpha for q in rec["pair_p"]),
                     len(pairs))
    write_json(out, metrics)
    write_parquet(pd.concat(curve_frames, ignore_index=True), curves)
