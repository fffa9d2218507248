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
    """Train block `job` of the distinct member trainings; write validation and test probabilities.

    Members of one pipeline (one architecture) train side by side (one batched module); member m of replicate r
    draws its initialisation, batch order and augmentation from its own seed (:func:`member_seed`). A member
    that several settings share (a heterogeneous setting's members are members of the homogeneous pipelines) is
    trained once. For claim (a)'s control, member 0 of each homogeneous pipeline records its last `snapshots`
    epochs. Rows are keyed by (replicate, pipeline, member); :func:`setting_probs` assembles a setting from them.
    """
    import torch

    from papers.ensembles.train import log_probs, train_group

    p = parse(cfg)
    seed_everything(job)  # nothing below draws from global state; set for safety
    device = "cuda" if torch.cuda.is_available() else "cpu"
    df = pd.read_parquet(data)
    n_classes = int(df.label.max()) + 1
    pipes, snap_pipes = p.pipelines, p.snapshot_pipelines

    groups = defaultdict(list)  # (replicate, pipeline) -> members; a ResNet trains alone
    for r, q, m in p.job_members(job):
        groups[(r, q, m if pipes[q].arch == "resnet18" else -1)].append(m)

    prob_blocks, snap_blocks, member_rows, states = [], [], [], []
    for (r, q, _), ms in groups.items():
        s = pipes[q]
        (width,), (depth,) = s.widths, s.depths
        x, y = (torch.from_numpy(a.copy()) for a in data_mod.arrays(df, r, "train"))
        evals = {split: data_mod.arrays(df, r, split) for split in ("val", "test")}
        x_eval = torch.from_numpy(np.concatenate([evals["val"][0], evals["test"][0]]))
        n_val = len(evals["val"][1])
        snap = q in snap_pipes and 0 in ms
        log.info("replicate %d, pipeline %d (%s k=%d, depth %d): members %s, %d training images", r, q, s.arch, width,
                 depth, ms, len(x))
        out = train_group(s, [member_seed(r, m) for m in ms], width, depth, x, y, n_classes, device,
                          progress=lambda it: progress(it, desc=f"r{r} pipeline {q} {ms[0]}..{ms[-1]}"),
                          snapshot_x=x_eval if snap else None, snapshots=p.snapshots if snap else 0,
                          snapshot_member=ms.index(0) if snap else 0, flat_window=p.flat_window)
        prob = log_probs(out.model, x_eval, len(ms), device).exp().numpy()  # (G, N_val + N_test, C)
        splits = (("val", slice(0, n_val)), ("test", slice(n_val, None)))
        for split, sl in splits:
            prob_blocks += [({"replicate": r, "pipeline": q, "member": m, "split": split}, prob[g, sl],
                             evals[split][1]) for g, m in enumerate(ms)]
        if snap:
            for split, sl in splits:
                snap_blocks += [({"replicate": r, "pipeline": q, "member": 0, "snapshot": t, "split": split},
                                 out.snapshots[t, sl].numpy(), evals[split][1]) for t in range(len(out.snapshots))]
        for g, m in enumerate(ms):
            member_rows.append({"replicate": r, "pipeline": q, "member": m, "seed": member_seed(r, m),
                                "arch": s.arch, "width": width, "depth": depth, "train_size": len(x),
                                "train_loss": float(out.train_loss[g]), "train_acc": float(out.train_acc[g]),
                                "window_loss": float(out.window_loss[g])})
        states.append({"replicate": r, "pipeline": q, "members": ms, "width": width, "depth": depth,
                       "model": {k: v.cpu() for k, v in out.model.state_dict().items()}})
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


def setting_probs(frames: pd.DataFrame, p, name: str, replicate: int, split: str) -> tuple[np.ndarray, np.ndarray]:
    """P (M, N, C) and y (N,) of setting `name`'s members 0..M-1 in one replicate and split, each read from the
    pipeline that trained it (a heterogeneous setting's members come from several pipelines)."""
    pipes = p.pipelines
    part = frames[(frames.replicate == replicate) & (frames.split == split)]
    blocks = []
    for m in range(p.members):
        q = pipes.index(p.member_pipeline(name, m))
        blocks.append(part[(part.pipeline == q) & (part.member == m)])
    return stacked(pd.concat(blocks))


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


def estimator_sweep(K: int) -> list[int]:
    """K' = 2, 4, 8, ... below K: the estimator from fewer members, reported beside claims (b), (d) through the same
    rule (K' = 2: the fewest from which it has a per-image variance)."""
    return [2 ** i for i in range(1, K.bit_length()) if 2 ** i < K]


def seen_subsets(M: int, K: int, count: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """`count` distinct K-subsets of the M members, drawn at random (all C(M, K) of them, in order, when there are no
    more than `count`): (seen, held) index arrays, held = the other M - K members. Claims (b), (d) average the
    predicted and the measured change over them, at no training cost."""
    from itertools import combinations
    from math import comb

    if comb(M, K) <= count:
        chosen = [np.array(c) for c in combinations(range(M), K)]
    else:
        rng, drawn, chosen = np.random.default_rng(seed), set(), []
        while len(chosen) < count:
            c = tuple(sorted(rng.choice(M, K, replace=False).tolist()))
            if c not in drawn:
                drawn.add(c)
                chosen.append(np.array(c))
    return [(seen, np.setdiff1d(np.arange(M), seen)) for seen in chosen]


def subset_curve(P: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """The K members' own ensemble curve at M = 1 ... K, each M the exact mean over every subset of M of them: what a
    reader can measure from the K members without the estimator."""
    from itertools import combinations

    K = len(P)
    out = {"M": np.arange(1, K + 1), "acc": np.zeros(K), "nll": np.zeros(K)}
    for m in range(1, K + 1):
        subsets = list(combinations(range(K), m))
        for sub in subsets:
            acc, nll = ensemble.member_metrics(P[list(sub)].mean(0, keepdims=True), y)
            out["acc"][m - 1] += acc[0] / len(subsets)
            out["nll"][m - 1] += nll[0] / len(subsets)
    return out


def naive_fit(sizes: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The curve a + b / M fitted by least squares to (sizes, values), evaluated at `at` (claims (b), (d)'s second
    baseline; with two sizes it passes through both)."""
    design = np.stack([np.ones(len(sizes)), 1.0 / np.asarray(sizes, dtype=float)], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, np.asarray(values, dtype=float), rcond=None)
    return a + b / np.asarray(at, dtype=float)


def _curve_frame(name: str, r: int, P: np.ndarray, y: np.ndarray, K: int, sweep, orderings: int, subsets: int,
                 seed: int) -> pd.DataFrame:
    """For each k in {K} and `sweep`, per seen subset (:func:`seen_subsets`): the measured curve of the held-out
    members (M = 1 ... members - k, averaged over orderings) beside three predictions from the subset's k seen
    members: `<metric>_hat`, the estimator (equal to the k seen members' own ensemble at M = k); `<metric>_flat`, its
    value at M = k at every M (its M dependence removed: claims (b), (d)'s ablation); `<metric>_fit`, the naive curve
    a + b / M fitted to the seen members' own sub-ensembles (M = 1 ... k; reported only). Long format, one row per
    (k, subset, M)."""
    frames = []
    for k in sorted({K, *sweep}):
        for i, (seen, held) in enumerate(seen_subsets(len(P), k, subsets, seed + 1_000_000 * k)):
            c = ensemble.curves(P[held], y, orderings, seed=seed + 100_000 * i + 1_000_000 * k)
            cols = {key: c[key] for key in ("M", "acc", "nll", "member_acc", "member_nll", "jensen_gap")}
            est, flat = ensemble.estimate(P[seen], y, c["M"]), ensemble.estimate(P[seen], y, [k])
            own = subset_curve(P[seen], y)
            for metric in ("acc", "nll"):
                cols[f"{metric}_hat"] = est[metric]
                cols[f"{metric}_flat"] = np.full(len(c["M"]), flat[metric][0])
                cols[f"{metric}_fit"] = naive_fit(own["M"], own[metric], c["M"])
            frames.append(pd.DataFrame({"setting": name, "replicate": r, "k": k, "subset": i, **cols}))
    return pd.concat(frames, ignore_index=True)


def evaluate(*, cfg, probs, members, snapshots, metrics, curves):
    """Per setting and replicate: the members' convergence, the full ensemble against the validation-chosen member,
    the ensemble curve over M of the held-out members against the estimator from K members and from K' = 2, 4, ...,
    against its flat version and against the naive a + b / M fit to the seen members' sub-ensembles, over random seen
    subsets (and the same on planted i.i.d. members, the positive control), KS distances of disjoint member pairs and of the same pairs made exchangeable (within a pipeline,
    across architectures in the heterogeneous setting, and among the planted members), and one run's snapshot
    ensemble (claim (a)'s control)."""
    p = parse(cfg)
    frames, snaps = read_parquets(probs), read_parquets(snapshots)
    member_table = read_parquets(members)
    pipes = p.pipelines
    K, M = p.estimator_members, p.members
    out, curve_frames = {}, []
    for name, s in p.settings.items():
        out[name] = []
        for r in range(p.replicates):
            seed = p.data_seed + r
            (P_val, y_val), (P, y) = setting_probs(frames, p, name, r, "val"), setting_probs(frames, p, name, r, "test")
            acc_m, nll_m = ensemble.member_metrics(P, y)
            curve_frames.append(_curve_frame(name, r, P, y, K, estimator_sweep(K), p.orderings, p.subsets, seed))
            keys = pd.DataFrame([{"pipeline": pipes.index(p.member_pipeline(name, m)), "member": m} for m in range(M)])
            trained = member_table[member_table.replicate == r].merge(keys, on=["pipeline", "member"])
            pairs = matching(M, seed)
            rec = {"replicate": r, "members": int(len(P)), "test_size": int(len(y)), "val_size": int(len(y_val)),
                   "train_loss_mean": float(trained.train_loss.mean()), "train_loss_max": float(trained.train_loss.max()),
                   "train_acc_mean": float(trained.train_acc.mean()), "train_acc_min": float(trained.train_acc.min()),
                   "train_loss_fall": float((trained.window_loss - trained.train_loss).mean()),
                   "member_acc": acc_m.tolist(), "member_nll": nll_m.tolist(),
                   "disagreement": ensemble.disagreement(P),
                   "jensen_gap": float(nll_m.mean() - ensemble.member_metrics(P.mean(0, keepdims=True), y)[1][0]),
                   **versus_chosen(P_val, y_val, P, y),
                   "pairs": pairs, "pair_p": ensemble.equivalence_pvalues(P, y, pairs).tolist(),
                   "pair_ks": ensemble.ks_distances(P, y, pairs).tolist()}
            if s.heterogeneous:
                # across architectures: member m with member m + M/2 (the blocks differ), and the same pairs made
                # exchangeable: claim (c)'s null control (two distributions through the same rule)
                half = M // 2
                cross = [(m, m + half) for m in range(half)]
                rec.update(cross_pairs=cross, cross_pair_p=ensemble.equivalence_pvalues(P, y, cross).tolist(),
                           cross_ks=ensemble.ks_distances(P, y, cross).tolist(),
                           cross_exchangeable_ks=ensemble.exchangeable_distances(P, y, cross, seed).tolist())
            else:
                rec["exchangeable_ks"] = ensemble.exchangeable_distances(P, y, pairs, seed).tolist()
                planted = ensemble.planted_members(P, M, rec["disagreement"], seed)
                # claim (c)'s positive control: members identical in distribution by construction, the same rule
                rec.update(planted_disagreement=ensemble.disagreement(planted),
                           planted_pair_ks=ensemble.ks_distances(planted, y, pairs).tolist(),
                           planted_exchangeable_ks=ensemble.exchangeable_distances(planted, y, pairs, seed).tolist())
                curve_frames.append(_curve_frame(f"{name}@planted", r, planted, y, K, estimator_sweep(K), p.orderings,
                                                 p.subsets, seed))
                q = pipes.index(s.single(*s.architectures[0]))
                g = snaps[(snaps.pipeline == q) & (snaps.replicate == r) & (snaps.member == 0)]
                (S_val, _), (S, _) = stacked(g[g.split == "val"], "snapshot"), stacked(g[g.split == "test"], "snapshot")
                rec["snapshots"] = {**versus_chosen(S_val, y_val, S, y), "disagreement": ensemble.disagreement(S)}
            out[name].append(rec)
            log.info("%s r%d: members acc %.4f (train acc %.4f), ensemble %.4f, val-chosen %.4f; mean KS distance "
                     "%.4f", name, r, acc_m.mean(), rec["train_acc_mean"], rec["ensemble_acc"], rec["chosen_acc"],
                     np.mean(rec["pair_ks"]))
    write_json(out, metrics)
    write_parquet(pd.concat(curve_frames, ignore_index=True), curves)
