"""The ensembles DAG's stages: prepare (data) -> train (blocks of members) -> evaluate -> report.
Each function takes its parameters and paths explicitly.
"""
from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np
import pandas as pd

from papers.common.claims import Claim, write_claims
from papers.common.io import read_json, read_parquets, write_json, write_parquet
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.progress import progress
from papers.common.report import write_report
from papers.common.seeding import seed_everything
from papers.common.tables import write_table
from papers.ensembles import data as data_mod
from papers.ensembles import ensemble
from papers.ensembles.params import SLUG, parse

log = logging.getLogger(__name__)

TITLE = "P9 ensembles: Agree to Disagree: homogeneous deep ensembles through distributional equivalence"


# ---- prepare ---------------------------------------------------------------------------------
def prepare(*, cfg, data):
    """The digits (random test split) or the user's CIFAR files, as one table (split, label, x0 ...)."""
    p = parse(cfg)
    df = data_mod.digits(p.test_size, p.data_seed) if p.data is None else data_mod.cifar(p.data)
    log.info("data: %d train, %d test, %d features", (df.split == "train").sum(), (df.split == "test").sum(),
             df.shape[1] - 2)
    write_parquet(df, data)


# ---- train -----------------------------------------------------------------------------------
def train(*, cfg, job, data, probs, members, checkpoint):
    """Train block `job` of the (setting, member) list; write each member's test-set probabilities.

    Members of one setting and one architecture train side by side (MLPs: one batched module); member m's
    seed is m, so it draws its initialisation and batch order from its own generator.
    """
    import torch

    from papers.ensembles.train import log_probs, train_group

    p = parse(cfg)
    seed_everything(job)  # nothing below draws from global state; set for safety
    device = "cuda" if torch.cuda.is_available() else "cpu"
    df = pd.read_parquet(data)
    x_test, y_test = (torch.from_numpy(a) for a in data_mod.arrays(df, "test"))
    n_classes = int(df.label.max()) + 1

    groups = defaultdict(list)  # (setting, width, depth) -> members; a ResNet trains alone
    for name, m in p.job_members(job):
        s = p.settings[name]
        width, depth = s.architecture(m, p.members)
        groups[(name, width, depth, m if s.arch == "resnet18" else -1)].append(m)

    prob_frames, member_rows, states = [], [], []
    for (name, width, depth, _), ms in groups.items():
        s = p.settings[name]
        x, y = (torch.from_numpy(a) for a in data_mod.arrays(df, "train", s.train_size))
        log.info("setting %s: members %s, width %d, depth %d, %d training images", name, ms, width, depth, len(x))
        model, train_loss = train_group(s, ms, width, depth, x, y, n_classes, device,
                                        progress=lambda it: progress(it, desc=f"{name} {ms[0]}..{ms[-1]}"))
        with torch.no_grad():
            train_acc = [(log_probs(model, x, len(ms), device)[g].argmax(1) == y).double().mean().item()
                         for g in range(len(ms))]
        lp = log_probs(model, x_test, len(ms), device)  # (G, N, C)
        for g, m in enumerate(ms):
            frame = pd.DataFrame(lp[g].exp().numpy(), columns=[f"p{c}" for c in range(n_classes)])
            frame.insert(0, "label", y_test.numpy())
            frame.insert(0, "sample", np.arange(len(frame)))
            frame.insert(0, "member", m)
            frame.insert(0, "setting", name)
            prob_frames.append(frame)
            member_rows.append({"setting": name, "member": m, "seed": m, "arch": s.arch, "width": width,
                                "depth": depth, "train_size": len(x), "train_loss": float(train_loss[g]),
                                "train_acc": train_acc[g]})
        states.append({"setting": name, "members": ms, "width": width, "depth": depth,
                       "model": {k: v.cpu() for k, v in model.state_dict().items()}})
    write_parquet(pd.concat(prob_frames, ignore_index=True), probs)
    write_parquet(pd.DataFrame(member_rows), members)
    torch.save({"job": job, "groups": states, "config": to_dict(p)}, checkpoint)


# ---- evaluate --------------------------------------------------------------------------------
def member_probabilities(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """P (M, N, C) and y (N,) of one setting from the long table of a training job's `probs`."""
    frame = frame.sort_values(["member", "sample"])
    cols = [c for c in frame.columns if c.startswith("p") and c[1:].isdigit()]
    M, N = frame.member.nunique(), frame["sample"].nunique()
    P = frame[cols].to_numpy(np.float64).reshape(M, N, len(cols))
    y = frame.label.to_numpy()[:N]
    return P, y


def evaluate(*, cfg, probs, members, metrics, curves):
    """Per setting: members, the ensemble at every M, disagreement, the equivalence test, the estimator."""
    p = parse(cfg)
    frames = read_parquets(probs)
    member_table = read_parquets(members)
    K = p.estimator_members
    out, curve_frames = {}, []
    for name in p.settings:
        P, y = member_probabilities(frames[frames.setting == name])
        acc_m, nll_m = ensemble.member_metrics(P, y)
        c = ensemble.curves(P, y, p.orderings, seed=p.data_seed)
        est = ensemble.estimate(P[:K], y, c["M"])  # the estimator sees members 0 .. K-1 only
        # for context: the same estimator from each disjoint block of K members (K..2K-1, ...)
        blocks = [ensemble.estimate(P[g:g + K], y, c["M"]) for g in range(0, len(P) - K + 1, K)]
        test = ensemble.equivalence_test(P, y, p.alpha)
        trained = member_table[member_table.setting == name]
        curve_frames.append(pd.DataFrame({"setting": name, **{k: c[k] for k in
                                          ("M", "acc", "nll", "member_acc", "member_nll", "jensen_gap")},
                                          "acc_hat": est["acc"], "nll_hat": est["nll"]}))
        out[name] = {
            "members": int(len(P)), "test_size": int(len(y)),
            "train_loss_max": float(trained.train_loss.max()), "train_acc_min": float(trained.train_acc.min()),
            "member_acc": acc_m.tolist(), "member_nll": nll_m.tolist(),
            "disagreement": ensemble.disagreement(P),
            "equivalence": test,
            "estimator_acc_error": np.abs(est["acc"] - c["acc"]).tolist(),
            "estimator_nll_error": np.abs(est["nll"] - c["nll"]).tolist(),
            "estimator_blocks_acc_max_error": [float(np.abs(b["acc"] - c["acc"]).max()) for b in blocks],
            "estimator_blocks_nll_max_error": [float(np.abs(b["nll"] - c["nll"]).max()) for b in blocks],
        }
        log.info("%s: members acc %.4f, ensemble acc %.4f, KS Bonferroni p %.3g", name, acc_m.mean(),
                 c["acc"][-1], test["p_bonferroni"])
    write_json(out, metrics)
    write_parquet(pd.concat(curve_frames, ignore_index=True), curves)


# ---- claims ----------------------------------------------------------------------------------
def first_from(condition: np.ndarray) -> int | None:
    """The smallest M (1-based) from which `condition` (over M = 1 ... M_max) holds for every larger M."""
    if not condition[-1]:
        return None
    fails = np.flatnonzero(~condition)
    return int(fails[-1] + 2) if len(fails) else 1


def setting_summary(name: str, m: dict, c: pd.DataFrame) -> dict:
    """The numbers of one setting that the table and the claims use (M_max = the full ensemble)."""
    acc_m, nll_m = np.array(m["member_acc"]), np.array(m["member_nll"])
    acc, nll = c.acc.to_numpy(), c.nll.to_numpy()
    return {
        "setting": name, "members": m["members"], "test_size": m["test_size"],
        "member_acc_mean": acc_m.mean(), "member_acc_std": acc_m.std(ddof=1), "member_acc_best": acc_m.max(),
        "ensemble_acc": acc[-1],
        "member_nll_mean": nll_m.mean(), "member_nll_std": nll_m.std(ddof=1), "member_nll_best": nll_m.min(),
        "ensemble_nll": nll[-1],
        "jensen_gap": c.jensen_gap.iloc[-1], "gain_over_best_nll": nll_m.min() - nll[-1],
        "disagreement": m["disagreement"],
        "ks_p_bonferroni": m["equivalence"]["p_bonferroni"],
        "ks_fraction_rejected": m["equivalence"]["fraction_rejected"],
        "ks_median_p": m["equivalence"]["median_p"],
        "equivalent": m["equivalence"]["equivalent"],
        "beats_best_acc_from_M": first_from(acc > acc_m.max()),
        "beats_best_nll_from_M": first_from(nll < nll_m.min()),
        "nll_max_increase": float(np.max(np.diff(nll))) if len(nll) > 1 else 0.0,
        "estimator_acc_max_error": max(m["estimator_acc_error"]),
        "estimator_nll_max_error": max(m["estimator_nll_error"]),
        "estimator_blocks_acc_median_error": float(np.median(m["estimator_blocks_acc_max_error"])),
        "estimator_blocks_nll_median_error": float(np.median(m["estimator_blocks_nll_max_error"])),
        "train_loss_max": m["train_loss_max"], "train_acc_min": m["train_acc_min"],
    }


def build_claims(p, rows: dict[str, dict], curves_df: pd.DataFrame) -> list[Claim]:
    ch, ct = rows[p.chosen], rows[p.control]
    cc = curves_df[curves_df.setting == p.chosen]
    homogeneous = [n for n, s in p.settings.items() if not s.heterogeneous]

    # (a) from some M on, the ensemble beats the best of all members, in accuracy and in NLL
    m_acc, m_nll = ch["beats_best_acc_from_M"], ch["beats_best_nll_from_M"]
    a = Claim(
        "a", "The ensemble beats every single member from some ensemble size M on.",
        "ensemble superior to any single member",
        {"setting": p.chosen, "ensemble_acc": ch["ensemble_acc"], "best_member_acc": ch["member_acc_best"],
         "from_M_acc": m_acc, "ensemble_nll": ch["ensemble_nll"], "best_member_nll": ch["member_nll_best"],
         "from_M_nll": m_nll, **{f"from_M_acc[{n}]": rows[n]["beats_best_acc_from_M"] for n in homogeneous}},
        f"in setting {p.chosen}, some M <= {p.members} from which the ensemble's accuracy exceeds the best of the "
        f"{p.members} members' ({ch['member_acc_best']:.4f}) and its NLL is below the best member's "
        f"({ch['member_nll_best']:.4f}) at every larger M: M_acc = {m_acc}, M_nll = {m_nll}",
        m_acc is not None and m_nll is not None,
        note="" if m_acc is not None and m_nll is not None else
        f"at M = {p.members} the ensemble's accuracy is {ch['ensemble_acc']:.4f} (best member {ch['member_acc_best']:.4f}) "
        f"and its NLL {ch['ensemble_nll']:.4f} (best member {ch['member_nll_best']:.4f}); the best of {p.members} "
        f"members is an extreme draw; the accuracy gap is "
        f"{round((ch['member_acc_best'] - ch['ensemble_acc']) * ch['test_size'])} of {ch['test_size']} test images")

    # (b) the ensemble's loss decreases monotonically with M
    inc = ch["nll_max_increase"]
    b = Claim(
        "b", "The ensemble's loss (NLL) decreases monotonically with the number of members M.",
        "loss decreasing in M",
        {"setting": p.chosen, "nll_M1": cc.nll.iloc[0], "nll_Mmax": cc.nll.iloc[-1], "max_increase": inc,
         **{f"max_increase[{n}]": rows[n]["nll_max_increase"] for n in homogeneous}},
        f"in setting {p.chosen}, NLL(M + 1) - NLL(M) <= monotone_slack for every M (averaged over {p.orderings} "
        f"orderings): max {inc:.3g} <= {p.monotone_slack}",
        inc <= p.monotone_slack,
        note="" if inc <= p.monotone_slack else
        f"the NLL rises by {inc:.3g} from M = {int(np.argmax(np.diff(cc.nll.to_numpy()))) + 1} to the next size")

    # (c) homogeneous members pass the equivalence test, the heterogeneous control fails it
    c = Claim(
        "c", "Homogeneous members pass the test of distributional equivalence; a heterogeneous ensemble fails it.",
        "homogeneous members' outputs form one distribution; heterogeneous ones do not",
        {"p_bonferroni[chosen]": ch["ks_p_bonferroni"], "p_bonferroni[control]": ct["ks_p_bonferroni"],
         **{f"p_bonferroni[{n}]": rows[n]["ks_p_bonferroni"] for n in p.settings}},
        f"pairwise KS tests on the true-class probability, Bonferroni over {p.members * (p.members - 1) // 2} pairs: "
        f"{p.chosen} p = {ch['ks_p_bonferroni']:.3g} > alpha = {p.alpha} and {p.control} p = "
        f"{ct['ks_p_bonferroni']:.3g} <= alpha",
        ch["equivalent"] and not ct["equivalent"],
        note="" if ch["equivalent"] and not ct["equivalent"] else
        ("" if ch["equivalent"] else f"the homogeneous {p.chosen} is rejected ({ch['ks_fraction_rejected']:.3f} of the "
         f"pairs at p <= alpha, median p {ch['ks_median_p']:.3g}); ")
        + ("" if not ct["equivalent"] else f"the control {p.control} is not rejected"))

    # (d) the estimator from K members predicts the ensemble at every M within tolerance
    gain_acc = cc.acc.iloc[-1] - cc.acc.iloc[0]
    gain_nll = cc.nll.iloc[0] - cc.nll.iloc[-1]
    tol_acc = max(p.estimator_rel_tolerance * abs(gain_acc), p.estimator_acc_floor)
    tol_nll = p.estimator_rel_tolerance * abs(gain_nll)
    err_acc, err_nll = ch["estimator_acc_max_error"], ch["estimator_nll_max_error"]
    d = Claim(
        "d", f"From K = {p.estimator_members} members the estimator predicts the ensemble's accuracy and NLL at every M.",
        "estimates foresee the performance of ensembles of any size",
        {"setting": p.chosen, "K": p.estimator_members, "max_error_acc": err_acc, "tolerance_acc": tol_acc,
         "max_error_nll": err_nll, "tolerance_nll": tol_nll,
         "blocks_median_max_error_acc": ch["estimator_blocks_acc_median_error"],
         "blocks_median_max_error_nll": ch["estimator_blocks_nll_median_error"],
         **{f"max_error_nll[{n}]": rows[n]["estimator_nll_max_error"] for n in p.settings}},
        f"in setting {p.chosen}, max over M = 1 ... {p.members} of |estimate - measured| <= "
        f"{p.estimator_rel_tolerance} x the metric's gain from M = 1 to {p.members} (accuracy: at least the floor): accuracy {err_acc:.4f} <= {tol_acc:.4f} "
        f"(gain {gain_acc:.4f}, floor {p.estimator_acc_floor}) and NLL {err_nll:.4f} <= {tol_nll:.4f} "
        f"(gain {gain_nll:.4f})",
        err_acc <= tol_acc and err_nll <= tol_nll,
        note="" if err_acc <= tol_acc and err_nll <= tol_nll else
        f"the estimate from members 0..{p.estimator_members - 1} misses; from each of the "
        f"{p.members // p.estimator_members} disjoint blocks of {p.estimator_members} members the median largest error "
        f"is {ch['estimator_blocks_acc_median_error']:.4f} (accuracy) and {ch['estimator_blocks_nll_median_error']:.4f} "
        f"(NLL), and a block's own mean member NLL scatters by about sd / sqrt(K) = "
        f"{ch['member_nll_std'] / np.sqrt(p.estimator_members):.4f} around the pool's")

    # (e) the Jensen gap does not explain the ensemble's gain
    ratio = ct["jensen_gap"] / ct["gain_over_best_nll"] if ct["gain_over_best_nll"] > 0 else float("inf")
    err_gain = cc.acc.iloc[-1] - cc.member_acc.iloc[-1]
    e = Claim(
        "e", "The Jensen gap does not explain the ensemble's gain or its M-dependence.",
        "Jensen's inequality is not responsible for deep ensembles' effectiveness; convexity is not necessary",
        {"jensen_gap[control]": ct["jensen_gap"], "gain_over_best[control]": ct["gain_over_best_nll"],
         "overstatement[control]": ratio, "acc_gain_over_mean_member[chosen]": err_gain,
         **{f"jensen_gap[{n}]": rows[n]["jensen_gap"] for n in p.settings},
         **{f"gain_over_best[{n}]": rows[n]["gain_over_best_nll"] for n in p.settings}},
        f"(i) in the control {p.control} the Jensen gap at M = {p.members} is at least jensen_overstatement times the "
        f"ensemble's NLL gain over its best member (or that gain is <= 0): {ct['jensen_gap']:.4f} vs "
        f"{ct['gain_over_best_nll']:.4f}, ratio {ratio:.3g} >= {p.jensen_overstatement}; and (ii) in {p.chosen} the "
        f"0-1 loss, which is not convex, still improves: ensemble accuracy - mean member accuracy = {err_gain:.4f} > 0",
        ct["jensen_gap"] > 0 and ratio >= p.jensen_overstatement and err_gain > 0)
    return [a, b, c, d, e]


# ---- report ----------------------------------------------------------------------------------
def report(*, cfg, scale, metrics, curves, probs, members, benchmarks, table_md, table_csv, claims, params_json,
           report_md, fig_curves, fig_distributions, fig_jensen):
    p = parse(cfg)
    m = read_json(metrics)
    curves_df = pd.read_parquet(curves)
    rows = {name: setting_summary(name, m[name], curves_df[curves_df.setting == name]) for name in p.settings}

    # --- table: one row per setting
    def describe(name):
        s = p.settings[name]
        archs = "/".join(f"{w}x{d}" for w, d in s.architectures)
        return f"{s.arch} {archs}, n = {s.train_size or 'all'}, {s.epochs} epochs, init gain {s.init_gain}"

    paper = {name: ("not equivalent; ensemble still gains (control)" if s.heterogeneous else
                    "equivalent; ensemble beats every member, loss falls with M") for name, s in p.settings.items()}
    table = pd.DataFrame([{
        "setting": name, "pipeline": describe(name),
        "member acc": f"{r['member_acc_mean']:.4f} +- {r['member_acc_std']:.4f} (best {r['member_acc_best']:.4f})",
        f"ensemble acc (M={p.members})": f"{r['ensemble_acc']:.4f}",
        "member NLL": f"{r['member_nll_mean']:.4f} +- {r['member_nll_std']:.4f} (best {r['member_nll_best']:.4f})",
        f"ensemble NLL (M={p.members})": f"{r['ensemble_nll']:.4f}",
        "Jensen gap": f"{r['jensen_gap']:.4f}", "disagreement": f"{r['disagreement']:.4f}",
        "KS p (Bonferroni)": f"{r['ks_p_bonferroni']:.3g}",
        "pairs p<=alpha": f"{r['ks_fraction_rejected']:.3f}",
        "equivalent": "yes" if r["equivalent"] else "no",
        f"estimator err acc / NLL (K={p.estimator_members})":
            f"{r['estimator_acc_max_error']:.4f} / {r['estimator_nll_max_error']:.4f}"
            f" (blocks median {r['estimator_blocks_acc_median_error']:.4f} / {r['estimator_blocks_nll_median_error']:.4f})",
        "paper": paper[name],
    } for name, r in rows.items()])
    csv = pd.DataFrame([{k: v for k, v in r.items()} for r in rows.values()])
    caption = (f"Homogeneous ensembles (members differ only in seed: initialisation and batch order) and a heterogeneous "
               f"control on the test set ({m[p.chosen]['test_size']} images). M = {p.members} members per setting; "
               f"curves averaged over {p.orderings} member orderings. Chosen regime: {p.chosen}; control: {p.control}. "
               f"KS p: two-sample Kolmogorov-Smirnov on the true-class probability, Bonferroni over all member pairs. "
               f"Estimator error: max over M of |estimate from members 0..{p.estimator_members - 1} - measured| (in brackets: "
               f"the median of that error over the disjoint blocks of {p.estimator_members} members).")
    write_table(table, table_md, table_csv, caption=caption, csv_df=csv)

    # --- figures
    names = list(p.settings)
    fig, axes = subplots(2, len(names), width=3.6, height=3.0)
    for j, name in enumerate(names):
        c, r = curves_df[curves_df.setting == name], rows[name]
        for i, (key, best) in enumerate([("acc", r["member_acc_best"]), ("nll", r["member_nll_best"])]):
            ax = axes[i, j]
            ax.plot(c.M, c[key], "k-", lw=1.2, label="ensemble")
            ax.plot(c.M, c[f"{key}_hat"], "C1--", lw=1.2, label=f"estimate (K={p.estimator_members})")
            ax.plot(c.M, c[f"member_{key}"], "C0:", lw=1, label="mean member")
            ax.axhline(best, color="C2", lw=0.8, label="best member")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("M")
            ax.set_ylabel("test accuracy" if key == "acc" else "test NLL")
            if i == 0:
                ax.set_title(name, fontsize=9)
            if i == 0 and j == 0:
                ax.legend(fontsize=6)
    savefig(fig, fig_curves)

    frames = read_parquets(probs)
    fig, axes = subplots(1, len(names), width=3.6, height=3.0)
    for ax, name in zip(axes[0], names):
        P, y = member_probabilities(frames[frames.setting == name])
        loss = -np.log(ensemble.true_class(P, y))  # (M, N) per-image NLL
        for k in np.unique(np.linspace(0, len(loss) - 1, 8).astype(int)):  # 8 members spread over the pool
            x = np.sort(loss[k])
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), lw=0.7, label=f"member {k}")
        ax.set_xscale("log")
        ax.set_xlabel("per-image loss -log p_m(x)_y")
        ax.set_ylabel("empirical CDF over test images")
        ax.legend(fontsize=5)
        ax.set_title(f"{name}: KS p = {rows[name]['ks_p_bonferroni']:.2g}", fontsize=9)
    savefig(fig, fig_distributions)

    fig, axes = subplots(1, 2, width=4.6, height=3.4)
    for i, name in enumerate(names):
        c, r = curves_df[curves_df.setting == name], rows[name]
        axes[0, 0].plot(c.M, c.jensen_gap, color=f"C{i}", label=name)
        axes[0, 1].plot(c.M, r["member_nll_best"] - c.nll, color=f"C{i}", label=name)
    axes[0, 0].set_title("Jensen gap: mean member NLL - ensemble NLL", fontsize=9)
    axes[0, 1].set_title("gain over the best member: best NLL - ensemble NLL", fontsize=9)
    for ax in axes[0]:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M")
        ax.axhline(0, color="grey", lw=0.6)
    axes[0, 0].legend(fontsize=7)
    savefig(fig, fig_jensen)

    # --- claims
    claims_list = build_claims(p, rows, curves_df)
    write_claims(claims_list, claims, paper=SLUG, scale=scale)
    write_json(to_dict(p), params_json)

    data = "sklearn's digits (8x8)" if p.data is None else f"CIFAR from {p.data}"
    what = (f"{data}; {m[p.chosen]['test_size']} test images. Per setting, {p.members} members trained from seeds "
            f"0..{p.members - 1} (a seed fixes the initialisation and the batch order), Adam with a cosine schedule, "
            f"cross-entropy, {p.members_per_job} members per job. Settings: "
            + "; ".join(f"{n}: {describe(n)}" for n in names)
            + f". Measured: member and ensemble accuracy and NLL at every M = 1 ... {p.members} (probability "
              f"averaging, {p.orderings} random member orderings), the Jensen gap, pairwise disagreement, pairwise "
              f"two-sample KS tests of distributional equivalence, and the CLT estimator from members "
              f"0..{p.estimator_members - 1}. The chosen regime ({p.chosen}) is fully trained (max train loss "
              f"{rows[p.chosen]['train_loss_max']:.2g}, min train accuracy {rows[p.chosen]['train_acc_min']:.3f}) "
              f"with stochastic batch order.")
    differences = (
        "The paper trains CNNs and ResNets (width k in {10, 20, 40, 80, 160}) on CIFAR-10/100 and Tiny ImageNet; "
        "the default scale trains small MLPs on sklearn's 8x8 digits (nothing larger ships offline), and the full "
        "scale trains the width-k ResNet18 on CIFAR from a path the user gives. The official code could not be "
        "read from this machine, so the equivalence test (pairwise two-sample KS on the true-class probability, "
        "Bonferroni over pairs) and the estimator (per-sample central-limit approximation with a finite-K "
        "correction of the NLL) are our reading of the paper's method, written out in "
        "workflow/papers/ensembles/ensemble.py. Fully trained members on the digits disagree on few test images "
        "(the disagreement column), which bounds the ensemble's accuracy gain; the table shows, side by side, the "
        "regimes the issue asks for (converged on more data, the chosen regime, underfit) and the control.")
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[fig_curves, fig_distributions, fig_jensen], claims=claims_list, benchmarks=benchmarks,
                 differences=differences)
