"""The sam_late report: the table, the figures, the claims and report.md.

Every claim is decided on the clean-label runs (the paper's setting) with Student-t intervals over seeds, each
seed its own initialisation, batch order and train / test split; arms are paired by seed (every arm of a seed starts
from the same weights, late arms branch from that seed's SGD run). The noisy-label runs, where they are configured,
are an extension shown in the table and the text, not a claim.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from papers.common.claims import (HOLDS, Claim, Control, PositiveControl, Premise, Scope, convention, mean_test,
                                  paired_test,
                                  write_claims)
from papers.common.io import read_parquet, read_parquets, write_json
from papers.common.params import to_dict
from papers.sam_late.analysis import barrier, escape_fits, gap_fraction
from papers.sam_late.evaluate import NO_SAM, alpha_grid
from papers.sam_late.params import ADV_ARMS, NOISY_ARMS, SAM_ARMS, SLUG, parse, sweep_arm

TITLE = "P6 sam_late: Sharpness-Aware Minimization efficiently selects flatter minima late in training"
# The official script's late phase in optimiser steps: SAM from epoch 150 of 160 (ERM_to_SAM.py --epochs 160
# --start_SAM 150), 50,000 CIFAR-10 training images in batches of 128 (--bs 128).
PAPER_LATE_STEPS = 10 * math.ceil(50000 / 128)
SEEDS = "seeds (own initialisation, batch order and split)"

PAPER = {  # the paper's direction for each arm
    "sgd": "baseline",
    "sam": "lower test error and flatter than SGD",
    "late_sam": "nearly the test error and sharpness of SAM throughout",
    "early_sam": "close to SGD: the late phase decides",
    "adv": "robust baseline (AT throughout)",
    "late_adv": "nearly the robust accuracy of AT throughout",
}
# +1: higher is better; -1: lower is better (a gap share is signed by the full arm's gap, so it needs none)
WHAT = {"test_acc": "test accuracy", "test_loss": "test loss", "robust_acc": "robust accuracy", "eig_1": "sharpness"}


def scope(p) -> Scope:
    if p.data.source == "digits":
        return Scope("analogue", f"the paper trains ResNets, WideResNets and VGG on CIFAR-10/100; here an MLP "
                     f"{'x'.join(str(h) for h in p.hidden)} trains on {p.data.train_size} of sklearn's 8x8 digits (the "
                     "only images that ship offline). The switching schedule, the SAM step, the momentum restart, label "
                     "smoothing, the PGD attack and the line interpolation follow the official code.")
    return Scope("replication", f"the official script's {p.model} on CIFAR-10 from {p.data.path}")


def per_seed(m: pd.DataFrame, arm: str, col: str, rho: float = NO_SAM, labels: str = "clean") -> np.ndarray:
    """One arm's per-seed values of `col`, in seed order (arms share seeds 0 .. seeds - 1)."""
    g = m[(m.labels == labels) & (m.arm == arm) & np.isclose(m.rho, rho)].sort_values("seed")
    return g[col].to_numpy(dtype=float)


def seed_shares(m: pd.DataFrame, arm: str, full: str, col: str, rho: float, full_rho: float,
                labels: str = "clean") -> np.ndarray:
    """Per seed, the share of the SGD -> `full` gap that `arm` closes: (arm - SGD) / (full - SGD), paired by seed."""
    return gap_fraction(per_seed(m, "sgd", col, NO_SAM, labels), per_seed(m, full, col, full_rho, labels),
                        per_seed(m, arm, col, rho, labels))


def escape_table(escapes: pd.DataFrame, rho: float) -> pd.DataFrame:
    """Per seed (clean labels): the exponential and power-law fits of ||w_t - w_switch|| for late SAM and SGD."""
    clean = escapes[escapes.labels == "clean"]
    keep = (clean.arm == "sgd") | ((clean.arm == "late_sam") & np.isclose(clean.rho, rho))
    rows = [{"arm": arm, "seed": seed, **escape_fits(g.step, g.distance)}
            for (arm, seed), g in clean[keep].groupby(["arm", "seed"])]
    return pd.DataFrame(rows, columns=["arm", "seed", "rate", "r2_exp", "power", "r2_pow"])


def planted_escape_fits(escapes: pd.DataFrame, sam_fits: pd.DataFrame, rho: float, seed: int = 0) -> pd.DataFrame:
    """Claim (c)'s positive control: per seed, an exponential escape planted with late SAM's own fitted rate, start
    and step count, d_t = d_1 exp(rate (t - 1)) times log-normal noise as large as the scatter of late SAM's
    log-distance around the better of its two fits (exponential in t, power law in log t: the scatter the data show
    beyond either shape); fitted exactly as the measured escapes are."""
    clean = escapes[(escapes.labels == "clean") & (escapes.arm == "late_sam") & np.isclose(escapes.rho, rho)]
    rng = np.random.default_rng(seed)
    rows = []
    for s, g in clean.groupby("seed"):
        t, d = g.step.to_numpy(float), g.distance.to_numpy(float)
        ok = d > 0
        t, z = t[ok], np.log(d[ok])
        sd = min(float(np.std(z - np.polyval(np.polyfit(u, z, 1), u), ddof=2)) for u in (t, np.log(t)))
        planted = np.exp(z[0] + float(sam_fits.loc[s, "rate"]) * (t - t[0]) + rng.normal(0, sd, size=len(t)))
        rows.append({"seed": s, **escape_fits(t, planted)})
    return pd.DataFrame(rows).set_index("seed")


def extrapolated_rise(share_before, share_after, span: float, length: float) -> np.ndarray:
    """Per seed, the share of the gap a late arm would still gain over another late phase of `length` epochs,
    extrapolated linearly from its last measured rise: (share_after - share_before) x length / span, where `span`
    epochs separate the two measurements. Near 0 once the arm has converged (its share has plateaued)."""
    before, after = np.asarray(share_before, dtype=float), np.asarray(share_after, dtype=float)
    return (after - before) * float(length) / float(span)


def plateaued(name: str, rises, p, where: str) -> Premise:
    """The convergence gate of a late arm: the 95% t interval of the extrapolated rise lies below plateau_share_max."""
    tests = [mean_test(r, threshold=p.plateau_share_max, direction="<", what=SEEDS, name=f"{n}: extrapolated rise")
             for n, r in rises]
    return Premise.from_evidence(f"{name} has converged: {where}, extrapolated to another late phase as long, "
                                 f"stays below plateau_share_max = {p.plateau_share_max} of the gap", tests)


def one_sided(gate: Premise, claim_without_gate: Claim) -> Premise:
    """A convergence gate that withholds only a "does not hold" (and an undecided result), never a "holds".

    papers.common.claims has no premise that gates one direction only, so it is built here. The convergence gates
    of (a) and (e) (:func:`plateaued`) test an upper bound on the late arm's *rise* in its share of the gap: a share
    that falls or stays passes them, so a gate that is unmet says the share is still rising. Both claims test that
    the share exceeds a threshold (direction ">"): a share still rising can only end higher with more training, so
    an unconverged arm can turn a "does not hold" or an undecided result into a "holds", but cannot undo a "holds".
    The gate is therefore met when the arm has converged, or when the claim holds without it
    (`claim_without_gate`: the same claim, every other premise, control and positive control included, built
    without this gate). Its `measured` and `requirement` keep the measured rise and say which case applies.
    """
    holds = claim_without_gate.verdict == HOLDS
    return Premise(f"{gate.name} (one-sided: withholds only 'does not hold' and undecided results)", gate.measured,
                   f"{gate.requirement}, or the claim holds without this gate (a share still rising can only end "
                   "higher, so it cannot undo a 'holds')", gate.met or holds)


def one_sided_note(gate: Premise, claim_without_gate: Claim, what: str) -> str:
    """The note of a one-sided convergence gate: which way it works, why, and whether it binds here (computed)."""
    holds = claim_without_gate.verdict == HOLDS
    state = ("met: the arm has converged" if gate.met else
             "not met (the share is still rising)" + ("; it does not bind here, since the claim holds without it"
                                                      if holds else "; it binds here: the claim stays undecided"))
    return (f"convergence gate on {what} (one-sided): {gate.measured}: {state}. The gate tests only a rise of the "
            "share (a falling share passes it), and a share still rising can only end higher, so the gate withholds "
            "a 'does not hold' and an undecided result, never a 'holds'")


def escape_loss_rise(escapes: pd.DataFrame, arm: str, rho: float) -> pd.Series:
    """Per seed (clean labels): the largest rise of the full training set's loss above its value at w_switch over
    the tracked steps after the switch, max_t L(w_t) - L(w_switch); > 0 when the run leaves SGD's minimum uphill."""
    g = escapes[(escapes.labels == "clean") & (escapes.arm == arm) & np.isclose(escapes.rho, rho)]
    if "train_loss" not in g:
        return pd.Series(dtype=float)
    return g.groupby("seed").apply(lambda e: float(e.train_loss.max() - e.switch_train_loss.iloc[0]))


def undefined(parts) -> str:
    """The note of a share test that measured nothing: every seed's gap was zero, so no share is defined."""
    parts = parts if isinstance(parts, list) else [parts]
    missing = [e.name for e in parts if e.verdict == "not measured"]
    return ("no seed has a gap to share (the full arm ends exactly where SGD does), so the share is undefined for: "
            + "; ".join(missing)) if missing else ""


def _std(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(values.std(ddof=1)) if values.size > 1 else 0.0


def row_order(p) -> list[tuple[str, str, float]]:
    """(labels, arm, rho) of the table's rows: the clean runs (the claims'), then the noisy extension."""
    order = [("clean", "sgd", NO_SAM), *[("clean", arm, p.rho) for arm in SAM_ARMS]]
    order += [("clean", sweep_arm(k), p.rho) for k in sorted(p.late_sweep)]
    for rho in [r for r in p.rhos if r != p.rho]:
        order += [("clean", "sam", rho), ("clean", "late_sam", rho)]
    order += [("clean", arm, NO_SAM) for arm in ADV_ARMS]
    if "noisy" in p.conditions:
        order += [("noisy", arm, NO_SAM if arm == "sgd" else p.rho) for arm in NOISY_ARMS]
    return order


def late_epochs_of(p, arm: str) -> int:
    """Epochs of SAM (or AT) at the end of a late arm, at the start of early SAM; 0 for the others."""
    if arm.startswith("late_sam_k"):
        return int(arm.rsplit("_k", 1)[1])
    if arm == "late_adv":
        return p.adv_late_epochs
    return p.late_epochs if arm.startswith(("late", "early")) else 0


def _share_cell(m, p, labels, arm, rho) -> tuple[str, dict]:
    """The table's 'gap closed' cell (test loss / sharpness; robust accuracy for late AT) and its numbers."""
    if arm == "late_adv":
        frac = {"robust": float(np.nanmean(seed_shares(m, "late_adv", "adv", "robust_acc", NO_SAM, NO_SAM)))}
        return f"robust {frac['robust']:.2f}", frac
    if not arm.startswith(("late_sam", "early_sam")):
        return "-", {}
    sam_train = m[(m.labels == labels) & (m.arm == "sam") & np.isclose(m.rho, rho)].train_acc.mean()
    sgd_train = m[(m.labels == labels) & (m.arm == "sgd")].train_acc.mean()
    if sam_train < 0.5 * sgd_train:  # SAM throughout did not train at this rho: no gap to share (see the text)
        return "n/a (SAM throughout does not train at this rho)", {}
    frac = {col: float(np.nanmean(seed_shares(m, arm, "sam", col, rho, rho, labels)))
            for col in ("test_loss", "test_acc", "eig_1")}
    return " / ".join("n/a" if np.isnan(frac[c]) else f"{frac[c]:.2f}" for c in ("test_loss", "test_acc", "eig_1")), frac


def write_results_table(p, m: pd.DataFrame, fits: pd.DataFrame, table_md, table_csv) -> None:
    from papers.common.tables import mean_std, write_table

    rows = []
    for labels, arm, rho in row_order(p):
        g = m[(m.labels == labels) & (m.arm == arm) & np.isclose(m.rho, rho)]
        cell, frac = _share_cell(m, p, labels, arm, rho)
        k = late_epochs_of(p, arm)
        switch = fits[fits.labels == labels].switch_train_acc if arm == "sgd" else None
        rows.append({"labels": labels, "arm": arm, "rho": rho if rho != NO_SAM else "-",
                     "late epochs": k if arm.startswith("late") else "-",
                     "test accuracy": mean_std(g.test_acc), "test loss": mean_std(g.test_loss),
                     "train accuracy": mean_std(g.train_acc)
                     + (f" (at the switch {switch.mean():.3f}, worst seed {switch.min():.3f})" if switch is not None else ""),
                     "top eigenvalue": mean_std(g.eig_1), "robust accuracy": mean_std(g.robust_acc),
                     "gap closed (test loss / acc / sharpness)": cell,
                     "paper": ("extension (not the paper's setting)" if labels == "noisy" else
                               PAPER["late_sam" if arm.startswith("late_sam") else arm]),
                     # csv
                     "rho_value": rho, "late_epochs": k, "test_acc_mean": g.test_acc.mean(), "test_acc_std": _std(g.test_acc),
                     "test_loss_mean": g.test_loss.mean(), "test_loss_std": _std(g.test_loss),
                     "train_acc_mean": g.train_acc.mean(), "eig_1_mean": g.eig_1.mean(), "eig_1_std": _std(g.eig_1),
                     "robust_acc_mean": g.robust_acc.mean(), "robust_acc_std": _std(g.robust_acc),
                     "loss_gap_closed": frac.get("test_loss", np.nan), "acc_gap_closed": frac.get("test_acc", np.nan),
                     "sharpness_gap_closed": frac.get("eig_1", np.nan), "robust_gap_closed": frac.get("robust", np.nan),
                     "switch_train_acc": np.nan if switch is None else switch.mean()})
    table = pd.DataFrame(rows)
    d = p.data
    caption = (f"{d.source}, {d.train_size} train / {d.test_size} test images per seed (each seed its own random "
               f"split), {p.model}, {p.epochs} epochs (lr x {p.lr_gamma} from epochs {list(p.lr_milestones)}); labels "
               + (f"clean (the paper's setting: every claim) or noisy ({d.label_noise:.0%} of each seed's training "
                  "labels moved to another class, its own draw per seed: an extension)" if "noisy" in p.conditions
                  else "clean (the paper's setting)")
               + f". Late arms switch for the last `late "
               f"epochs` epochs (late_sam_kK: the switch sweep), early SAM uses SAM for the first {p.late_epochs}. Mean "
               f"+- std over {p.seeds} seeds. Test loss: cross-entropy on the clean test labels. Train accuracy: on the "
               f"run's own training labels (SGD: also at the main switch epoch, the premise of the late-phase claims). "
               f"Top eigenvalue: the Hessian's largest, on the first {p.hessian_samples} training examples. Robust "
               f"accuracy: L-inf PGD, epsilon {p.attack.epsilon}, {p.attack.steps} steps, on the test set. Gap closed: "
               f"mean over seeds of (arm - SGD) / (SAM at the same rho - SGD) in test loss, test accuracy and top "
               f"eigenvalue; for late AT, of the SGD -> AT gap in robust accuracy.")
    write_table(table[["labels", "arm", "rho", "late epochs", "test accuracy", "test loss", "train accuracy",
                       "top eigenvalue", "robust accuracy", "gap closed (test loss / acc / sharpness)", "paper"]],
                table_md, table_csv, caption=caption,
                csv_df=table[["labels", "arm", "rho_value", "late_epochs", "test_acc_mean", "test_acc_std",
                              "test_loss_mean", "test_loss_std", "train_acc_mean", "eig_1_mean", "eig_1_std",
                              "robust_acc_mean", "robust_acc_std", "loss_gap_closed", "acc_gap_closed",
                              "sharpness_gap_closed", "robust_gap_closed", "switch_train_acc"]]
                .rename(columns={"rho_value": "rho"}))


def sam_late_claims(p, m: pd.DataFrame, fits: pd.DataFrame, sam_fits: pd.DataFrame, sgd_fits: pd.DataFrame,
                    planted_fits: pd.DataFrame, late_barriers, control_barriers, valley_distances=(),
                    loss_rises: tuple[pd.Series, pd.Series] | None = None,
                    escapes_by_rho: dict | None = None) -> list[Claim]:
    """The six claims on the clean-label runs, each decided on Student-t intervals over seeds against a threshold of
    the config, behind premise gates (the gap to close exists; SGD has fitted its training set at the switch).

    `m`: evaluate's metrics (one row per labels, arm, rho, seed); `fits`: SGD's fit at the switch per seed;
    `sam_fits`/`sgd_fits`: escape fits per seed, `planted_fits` those of the planted exponential escapes;
    barriers per seed: w_switch -> late SAM, and the matched-distance control line; `valley_distances`: per seed,
    ||w_switch - the next seed's SGD solution||, the length of the whole line the control walks the start of;
    `loss_rises`: per seed, the training loss's largest rise above w_switch's after the switch (escape_loss_rise),
    for late SAM and for SGD (claim (c)'s premise; None: not recorded, the premise is unmet);
    `escapes_by_rho`: {rho: (late SAM's escape fits, the planted fits, late SAM's loss rises)} for every rho of
    `rhos` (None: the main rho's, from the arguments above). Claim (c) is decided at the smallest rho whose premise
    gates are all met (the rule of the config), with every rho's fit in its note.
    """
    thr, close, ratio, rho = p.gap_fraction_min, p.close_share_max, p.early_ratio_max, p.rho
    sign = {"test_acc": 1.0, "robust_acc": 1.0, "test_loss": -1.0, "eig_1": -1.0}

    def gain(arm, col, arm_rho=rho):  # per seed: how much better than SGD the arm ends
        return sign[col] * (per_seed(m, arm, col, arm_rho) - per_seed(m, "sgd", col))

    def gap_exists(full, col, full_rho=rho):
        e = mean_test(gain(full, col, full_rho), threshold=0.0, direction=">", what=SEEDS,
                      name=f"{WHAT[col]}: {full} better than SGD")
        return Premise.from_evidence(f"the gap to close exists: {full} ends better than SGD in {WHAT[col]}", e)

    def share(arm, full, col, arm_rho=rho, full_rho=rho):
        return seed_shares(m, arm, full, col, arm_rho, full_rho)

    def closes(arm, full, col, arm_rho=rho, full_rho=rho):
        return mean_test(share(arm, full, col, arm_rho, full_rho), threshold=thr, direction=">", what=SEEDS,
                         name=f"{WHAT[col]}: share of the SGD -> {full} gap that {arm} closes")

    switch_acc = fits[fits.labels == "clean"].switch_train_acc.to_numpy(float)
    converged = Premise.at_least("SGD has fitted its training set at the switch (training accuracy at w_switch, worst "
                                 "seed)", switch_acc.min() if switch_acc.size else float("nan"), p.switch_train_acc_min,
                                 what="switch_train_acc_min: the late phase starts near a minimum, as the paper's")
    sweep = sorted([p.late_epochs, *p.late_sweep])
    name_of = {k: "late_sam" if k == p.late_epochs else sweep_arm(k) for k in sweep}
    longest = name_of[sweep[-1]]
    most = convention("more than half of the gap ('most'); the paper's 'nearly the same generalization and solution "
                      "sharpness as full SAM' (abstract) names no number and is stronger: the shares are reported")
    measures = ("test_loss", "eig_1")  # generalization (test loss: less noisy than accuracy near its ceiling) and sharpness
    # Convergence of the late arms (a): the share's rise between the two longest switches of the sweep
    if len(sweep) >= 2:
        k_lo, k_hi = sweep[-2], sweep[-1]
        late_converged = plateaued(
            f"late SAM ({longest})",
            [(f"{WHAT[col]}: share({name_of[k_hi]}) - share({name_of[k_lo]}), x {k_hi}/{k_hi - k_lo}",
              extrapolated_rise(share(name_of[k_lo], "sam", col), share(name_of[k_hi], "sam", col), k_hi - k_lo, k_hi))
             for col in measures], p, f"its share's rise from K = {k_lo} to K = {k_hi} epochs (the two longest "
                                     "switches of the sweep), in test loss and in sharpness")
    else:
        late_converged = Premise.at_most("late SAM has converged (needs two switches in the sweep to measure)",
                                         float("nan"), p.plateau_share_max)
    direct = ("a direct comparison of measured test losses and top Hessian eigenvalues (Lanczos, checked against the "
              "exact Hessian in the unit tests): no estimator stands between the data and the effect")

    # (a) at every switch of the sweep, late SAM closes > thr of both gaps; control: early SAM (same SAM epochs, early)
    def claim_a(gates, gate_note=""):
        return Claim(
            "a", f"Late SAM (the last K of {p.epochs} epochs, for every K in the switch sweep {sweep}) closes more than half "
                 "of the gap between SGD and SAM throughout, in test loss and in sharpness.",
            "a few epochs of SAM at the end give nearly the same generalization and sharpness as full SAM",
            {**{f"loss_gap_closed_k{k}": float(share(name_of[k], "sam", "test_loss").mean()) for k in sweep},
             **{f"sharpness_gap_closed_k{k}": float(share(name_of[k], "sam", "eig_1").mean()) for k in sweep},
             **{f"acc_gap_closed_k{k}": float(np.nanmean(share(name_of[k], "sam", "test_acc"))) for k in sweep},
             "test_loss_sgd": per_seed(m, "sgd", "test_loss").mean(), "test_loss_sam": per_seed(m, "sam", "test_loss", rho).mean(),
             "eig_sgd": per_seed(m, "sgd", "eig_1").mean(), "eig_sam": per_seed(m, "sam", "eig_1", rho).mean()},
            f"at rho = {rho}, clean labels, over {p.seeds} seeds: at every K of the sweep, the 95% t intervals of the "
            f"per-seed share (late SAM - SGD) / (SAM - SGD) lie above gap_fraction_min = {thr}, in test loss and in top "
            "Hessian eigenvalue (the accuracy shares are reported: near its ceiling accuracy moves by a few test images)",
            [closes(name_of[k], "sam", col) for k in sweep for col in measures],
            Control(f"ablation of the timing: early SAM at rho = {rho}, the same {p.late_epochs} SAM epochs at the start "
                    "instead of the end; the same share test", [closes("early_sam", "sam", col) for col in measures],
                    kind="ablation"),
            note="; ".join(x for x in (
                undefined([closes(name_of[k], "sam", col) for k in sweep for col in measures]),
                "the shares by K (test loss / sharpness): " + ", ".join(
                    f"K = {k}: {np.nanmean(share(name_of[k], 'sam', 'test_loss')):.2f} / "
                    f"{np.nanmean(share(name_of[k], 'sam', 'eig_1')):.2f}" for k in sweep)
                + f"; K epochs are K x {math.ceil(p.data.train_size / p.batch_size)} SAM steps here (the official late phase: "
                  f"{PAPER_LATE_STEPS} steps)", gate_note) if x),
            threshold_source=most,
            premise=[gap_exists("sam", "test_loss"), gap_exists("sam", "eig_1"), converged, *gates],
            no_positive_control=direct, paper_effect=1.0)

    a0 = claim_a([])
    a = claim_a([one_sided(late_converged, a0)], one_sided_note(late_converged, a0, "late SAM"))

    # (b) the paper's direct statement: early SAM ends close to SGD, decided on test loss
    below = mean_test(share("early_sam", "sam", "test_loss"), threshold=close, direction="<", what=SEEDS,
                      name="test loss: share of the SGD -> SAM gap that early_sam closes")
    b = Claim(
        "b", f"Early SAM (SAM for the first {p.late_epochs} epochs, then SGD) ends closer to SGD than to SAM throughout: "
             "it closes less than half of the gap in test loss.",
        "early SAM followed by SGD ends close to SGD: the late phase decides (Sec. 5)",
        {"loss_gap_closed": float(share("early_sam", "sam", "test_loss").mean()),
         "test_loss_early": per_seed(m, "early_sam", "test_loss", rho).mean(),
         "test_loss_sgd": per_seed(m, "sgd", "test_loss").mean(), "test_loss_sam": per_seed(m, "sam", "test_loss", rho).mean(),
         f"loss_gap_closed_{longest}": float(share(longest, "sam", "test_loss").mean())},
        f"at rho = {rho}, clean labels: the 95% t interval over {p.seeds} seeds of early SAM's per-seed share of the "
        f"SGD -> SAM gap in test loss lies below close_share_max = {close}",
        below,
        Control(f"{longest} (SAM for the last {sweep[-1]} epochs, the whole decayed-lr phase) in early SAM's place: its "
                "late phase runs SAM, so by the paper it should not end close to SGD; the same test",
                mean_test(share(longest, "sam", "test_loss"), threshold=close, direction="<", what=SEEDS,
                          name=f"test loss: share of the SGD -> SAM gap that {longest} closes"), kind="null"),
        note=undefined(below),
        threshold_source=convention(f"the midpoint {close}: below half of the SGD -> SAM gap an arm ends nearer SGD than "
                                    "SAM; the paper says early SAM ends close to SGD without a number"),
        premise=[gap_exists("sam", "test_loss")], no_positive_control=direct)

    # (b2) early SAM closes at most `ratio` of late SAM's share
    def at_most(other, col):
        return mean_test(ratio * share("late_sam", "sam", col) - share(other, "sam", col), threshold=0.0,
                         direction=">", what=SEEDS, name=f"{WHAT[col]}: {ratio} x share(late_sam) - share({other})")

    b2 = Claim(
        "b2", f"Early SAM closes at most {ratio:g} times the share of the gap that late SAM (the last {p.late_epochs} "
              "epochs) closes, in test loss and in sharpness.",
        "the optimiser of the late phase shapes the final solution more than that of the early phase",
        {"loss_gap_closed_early": float(share("early_sam", "sam", "test_loss").mean()),
         "loss_gap_closed_late": float(share("late_sam", "sam", "test_loss").mean()),
         "sharpness_gap_closed_early": float(share("early_sam", "sam", "eig_1").mean()),
         "sharpness_gap_closed_late": float(share("late_sam", "sam", "eig_1").mean())},
        f"at rho = {rho}, clean labels: the 95% t intervals over {p.seeds} seeds of {ratio} x share(late SAM) - "
        "share(early SAM) (per-seed shares as in (a)) lie above 0, in test loss and in top Hessian eigenvalue",
        [at_most("early_sam", col) for col in measures],
        Control(f"{longest} (SAM for the last {sweep[-1]} epochs) in early SAM's place: both arms take SAM in the late "
                "phase, so the late phase cannot tell them apart; the same test",
                [at_most(longest, col) for col in measures], kind="null"),
        note=undefined([at_most("early_sam", col) for col in measures]),
        threshold_source=convention(f"a ratio of {ratio:g}: the early arm's share at most {ratio:g} of the late arm's "
                                    "(the paper gives no number)"),
        premise=[gap_exists("sam", "test_loss"), gap_exists("sam", "eig_1")], no_positive_control=direct)

    # (c) exponential escape; control: SGD's own drift from the same w_switch
    def shape(f, arm):
        return [mean_test(f.r2_exp, threshold=p.escape_r2_min, direction=">", what=SEEDS,
                          name=f"{arm}: R^2 of the exponential fit"),
                mean_test(f.r2_exp - f.r2_pow, threshold=0.0, direction=">", what=SEEDS,
                          name=f"{arm}: R^2 exponential - R^2 power law")]

    # Premise of (c): SGD's solution is unstable under SAM, i.e. SAM's training loss rises above w_switch's after the
    # switch (there is a minimum to escape), and by more than SGD's own from the same w_switch (not batch noise).
    # Decided at the smallest rho of `rhos` whose premise gates are all met (chosen on the premise, never on the fit).
    rise_sgd = loss_rises[1] if loss_rises is not None else None
    if escapes_by_rho is None:
        escapes_by_rho = {rho: (sam_fits, planted_fits, loss_rises[0] if loss_rises is not None else None)}

    def unstable_at(r):
        rise_sam = escapes_by_rho[r][2]
        if rise_sam is None or rise_sgd is None or not len(rise_sam) or not len(rise_sgd):
            return Premise.at_least(f"SGD's solution is unstable under SAM at rho = {r} (the training loss after the "
                                    "switch was not recorded)", float("nan"), 0.0)
        both = rise_sam.index.intersection(rise_sgd.index)
        return Premise.from_evidence(
            f"SGD's solution is unstable under SAM at rho = {r}: over the first {p.escape_steps} steps after the "
            "switch, late SAM's training loss rises above its value at w_switch, and by more than SGD's from the same "
            "w_switch",
            [mean_test(rise_sam.to_numpy(float), threshold=0.0, direction=">", what=SEEDS,
                       name=f"late_sam (rho {r}): max_t L(w_t) - L(w_switch) (nats)"),
             paired_test(rise_sam.reindex(both).to_numpy(float), rise_sgd.reindex(both).to_numpy(float), what=SEEDS,
                         name=f"loss rise after the switch, late_sam (rho {r}) - SGD (nats)")])

    rhos_c = sorted(escapes_by_rho)
    unstable_by = {r: unstable_at(r) for r in rhos_c}
    met_c = [r for r in rhos_c if converged.met and unstable_by[r].met]
    rho_c = met_c[0] if met_c else (rho if rho in escapes_by_rho else rhos_c[0])
    sam_fits, planted_fits, _ = escapes_by_rho[rho_c]
    unstable = unstable_by[rho_c]
    seeds_c = sam_fits.index.intersection(sgd_fits.index)
    where_c = (f"at rho = {rho_c}, the smallest of rhos {rhos_c} whose premise is met" if met_c else
               f"at the main rho = {rho_c}: no rho of {rhos_c} meets the premise")

    def rise_text(r):
        rs = escapes_by_rho[r][2]
        return "not recorded" if rs is None or not len(rs) else f"{float(rs.mean()):.3g} nats"

    per_rho = "; ".join(
        f"rho {r}: late SAM's loss rise {rise_text(r)} (SGD's {float(rise_sgd.mean()):.3g})"
        f" (premise {'met' if unstable_by[r].met else 'not met'}), R^2 exponential "
        f"{float(escapes_by_rho[r][0].r2_exp.mean()):.3f}, power law {float(escapes_by_rho[r][0].r2_pow.mean()):.3f} "
        f"(d ~ t^{float(escapes_by_rho[r][0].power.median()):.2f}), rate {float(escapes_by_rho[r][0].rate.median()):.3g} "
        "a step" for r in rhos_c) if rise_sgd is not None and len(rise_sgd) else ""
    per_rho_measured = {}
    for r in rhos_c:
        f_r, _, rs = escapes_by_rho[r]
        per_rho_measured.update({f"r2_exp_rho{r}": float(f_r.r2_exp.mean()), f"r2_power_law_rho{r}": float(f_r.r2_pow.mean()),
                                 f"train_loss_rise_late_sam_rho{r}": float(rs.mean()) if rs is not None and len(rs)
                                 else float("nan")})
    c = Claim(
        "c", f"After the switch ({where_c}), SAM escapes the SGD solution exponentially: log ||w_t - w_switch|| grows "
             f"linearly over the first {p.escape_steps} steps, faster than SGD drifts.",
        "SAM first escapes the minimum found by SGD exponentially fast",
        {"rho": rho_c, "rate_per_step": float(sam_fits.rate.median()), "r2_exp": float(sam_fits.r2_exp.mean()),
         "r2_power_law": float(sam_fits.r2_pow.mean()), "power_law_exponent": float(sam_fits.power.median()),
         "sgd_rate_per_step": float(sgd_fits.rate.median()),
         "train_loss_rise_late_sam": (float(escapes_by_rho[rho_c][2].mean()) if escapes_by_rho[rho_c][2] is not None
                                      and len(escapes_by_rho[rho_c][2]) else float("nan")),
         "train_loss_rise_sgd": float(rise_sgd.mean()) if rise_sgd is not None and len(rise_sgd) else float("nan"),
         **per_rho_measured},
        f"clean labels, decided at the smallest rho of rhos {rhos_c} whose premise gates are all met (else at the main "
        f"rho, inconclusive), over {p.seeds} seeds (95% t intervals): the R^2 of the exponential fit exceeds "
        f"escape_r2_min = {p.escape_r2_min}, it exceeds the power law's R^2 (d = c t^k), and the rate exceeds SGD's "
        "from the same w_switch (paired by seed)",
        shape(sam_fits, f"late_sam (rho {rho_c})") + [
            paired_test(sam_fits.rate.reindex(seeds_c), sgd_fits.rate.reindex(seeds_c), what=SEEDS,
                        name=f"escape rate late_sam (rho {rho_c}) - SGD (per step)")],
        Control("SGD's own drift from the same w_switch over the same steps (no SAM after the switch): the two shape "
                "tests of the criterion (the rate comparison has no counterpart)", shape(sgd_fits, "sgd"), kind="null"),
        note="; ".join(x for x in (
            f"at rho {rho_c}, late SAM's distance from w_switch grows as t^{float(sam_fits.power.median()):.2f} "
            f"(power-law R^2 {float(sam_fits.r2_pow.mean()):.3f} against {float(sam_fits.r2_exp.mean()):.3f} for the "
            "exponential)",
            f"every rho: {per_rho}" if per_rho else "") if x),
        threshold_source=convention(f"an R^2 of {p.escape_r2_min}: the log-distance lies close to a line, and closer "
                                    "than to a power law's (the paper shows the escape as exponential, Sec. 4)"),
        premise=[converged, unstable],
        positive_control=PositiveControl(
            "exponential escapes planted with late SAM's own fitted rate, start and step count, with log-normal noise "
            "of the spread late SAM's log-distance shows around its exponential fit; the two shape tests",
            shape(planted_fits, "planted exponential")))

    # (d) no barrier on the line w_switch -> late SAM; control: a line as long, from w_switch towards another valley
    late_b = np.asarray(late_barriers, dtype=float)
    ctl_b = np.asarray(control_barriers, dtype=float)
    dist = per_seed(m, "late_sam", "distance", rho)
    ev_d = mean_test(late_b, threshold=p.barrier_tolerance, direction="<", what=SEEDS)
    ctl_d = mean_test(ctl_b, threshold=p.barrier_tolerance, direction="<", what=SEEDS) if ctl_b.size else None
    d = Claim(
        "d", "The late-SAM solution lies in the same valley as w_switch: no loss barrier on the line between them.",
        "SAM converges to a flatter minimum within the same valley",
        {"max_barrier": float(late_b.max()), "mean_barrier": float(late_b.mean()),
         "matched_distance_barrier": float(ctl_b.mean()) if ctl_b.size else float("nan"),
         "distance_switch_to_late_sam": float(dist.mean()),
         "distance_switch_to_other_seed_sgd": float(np.mean(valley_distances)) if len(valley_distances) else np.nan},
        f"clean labels: the 95% t interval over {p.seeds} seeds of the training-loss barrier (max over alpha in [0, 1] of "
        f"L(alpha) minus the chord) lies below barrier_tolerance = {p.barrier_tolerance} nats",
        ev_d, Control(f"from each seed's w_switch, a line as long as its late-SAM run went (matched distance, mean "
                      f"{float(dist.mean()):.3g}) towards the next seed's SGD solution (another initialisation and "
                      "split: another valley); the same barrier test", ctl_d, kind="null"),
        note=("the matched-distance line towards another valley shows no barrier either: over a segment this short "
              "a barrier test cannot tell one valley from two"
              + (f" (late SAM moves {float(dist.mean()):.3g} from w_switch, the other seed's solution lies "
                 f"{float(np.mean(valley_distances)):.3g} away)" if len(valley_distances) else "")
              if ctl_d is not None and ctl_d.verdict == "holds" else ""),
        threshold_source=convention(f"{p.barrier_tolerance} nats: a rise above the chord this small counts as none "
                                    "(the paper plots the line, Sec. 4, and reads the absence of a barrier by eye)"),
        premise=[converged],
        no_positive_control="the barrier is the loss evaluated on the line itself, not an estimate, so it cannot "
                            "report a barrier that is not there; whether the test could see one at this length is what "
                            "the matched-distance control asks")

    # (e) late AT closes > thr of the robustness gap; convergence: its share's rise over the second half of its late
    # phase (the checkpoint at epochs - K // 2), extrapolated to another late phase as long
    k_adv = p.adv_late_epochs
    half = k_adv // 2
    robust_midway = (gap_fraction(per_seed(m, "sgd", "robust_acc"), per_seed(m, "adv", "robust_acc"),
                                  per_seed(m, "late_adv", "robust_acc_midway"))
                     if "robust_acc_midway" in m and half >= 1 else np.full(p.seeds, np.nan))
    at_converged = plateaued(
        f"late AT ({k_adv} epochs)",
        [(f"robust accuracy: share(late_adv) - share {half} epochs earlier, x {k_adv}/{half}",
          extrapolated_rise(robust_midway, share("late_adv", "adv", "robust_acc", NO_SAM, NO_SAM), max(half, 1),
                            k_adv))],
        p, f"its share's rise over the second half of its late phase (the last {half} of {k_adv} epochs)")
    sam_twin = name_of.get(k_adv, "late_sam")  # the late-SAM arm as long as late AT (params.check ensures it exists)
    spe = math.ceil(p.data.train_size / p.batch_size)  # optimiser steps an epoch
    steps_note = (f"late AT's {k_adv} epochs are {k_adv * spe} optimiser steps here ({spe} an epoch: "
                  f"{p.data.train_size} images in batches of {p.batch_size}), against {PAPER_LATE_STEPS} in the "
                  "paper's late AT (ERM_to_Adv.py: the last 10 of 160 epochs of CIFAR-10 in batches of 128)"
                  + (f"; {p.late_epochs} epochs, the paper's share of training, would be {p.late_epochs * spe} steps "
                     "here, " + (f"{PAPER_LATE_STEPS / (p.late_epochs * spe):.0f} times fewer than the paper's"
                                 if PAPER_LATE_STEPS > 1.5 * p.late_epochs * spe else "about as many as the paper's")
                     if k_adv != p.late_epochs else ""))

    def claim_e(gates, gate_note=""):
        return Claim(
            "e", f"Late adversarial training (the last {k_adv} of {p.epochs} epochs) closes more than half of the gap in "
                 "robust accuracy between SGD and adversarial training throughout.",
            "the late-phase finding extends from SAM to adversarial training: late AT reaches nearly the robustness of AT",
            {"robust_gap_closed": float(share("late_adv", "adv", "robust_acc", NO_SAM, NO_SAM).mean()),
             "robust_sgd": per_seed(m, "sgd", "robust_acc").mean(), "robust_adv": per_seed(m, "adv", "robust_acc").mean(),
             "robust_late_adv": per_seed(m, "late_adv", "robust_acc").mean(),
             f"robust_{sam_twin}": per_seed(m, sam_twin, "robust_acc", rho).mean(),
             "robust_gap_closed_midway": float(np.nanmean(robust_midway))},
            f"clean labels, over {p.seeds} seeds (paired), the 95% t interval of the per-seed share (late AT - SGD) / "
            f"(AT - SGD) in PGD robust accuracy lies above gap_fraction_min = {thr}",
            closes("late_adv", "adv", "robust_acc", NO_SAM, NO_SAM),
            note="; ".join(x for x in (undefined(closes("late_adv", "adv", "robust_acc", NO_SAM, NO_SAM)), steps_note,
                                       gate_note) if x),
            control=Control(f"late SAM at rho = {rho} for as long ({sam_twin}) in late AT's place: branched from the same "
                    "SGD checkpoints, a late phase without adversarial examples. Not an exact ablation: it swaps in SAM, restarts momentum (late AT "
                    "keeps SGD's optimiser, as ERM_to_Adv.py) and keeps label smoothing "
                    f"{p.label_smoothing} (the adversarial arms use plain cross-entropy); the same share test",
                    closes(sam_twin, "adv", "robust_acc", rho, NO_SAM), kind="null"),
            threshold_source=convention("more than half of the gap ('most'); the paper's late AT reaches nearly the "
                                        "robustness of AT throughout (Sec. 6), which names no number and is stronger"),
            premise=[gap_exists("adv", "robust_acc", NO_SAM), converged, *gates],
            no_positive_control="robust accuracy is measured directly, by the same PGD attack on every arm (the attack is "
                                "checked against its closed form on a linear model in the unit tests)",
            paper_effect=1.0)

    e0 = claim_e([])
    e = claim_e([one_sided(at_converged, e0)], one_sided_note(at_converged, e0, f"late AT ({k_adv} epochs)"))
    return [a, b, b2, c, d, e]


def report(*, cfg, scale, metrics, interpolation, switch, histories, escapes, benchmarks, table_md, table_csv, claims,
           params_json, report_md, verdicts, fig_curves, fig_sweep, fig_mechanism, fig_robust, fig_switch):
    from papers.common.report import write_report
    from papers.sam_late import figures

    p = parse(cfg)
    m = read_parquet(metrics)
    lines = read_parquet(interpolation)
    fits = read_parquet(switch)
    hist = read_parquets(histories)
    esc = read_parquets(escapes)

    def mean(arm, col, rho=NO_SAM, labels="clean"):
        return float(per_seed(m, arm, col, rho, labels).mean())

    write_results_table(p, m, fits, table_md, table_csv)

    # --- mechanism: escape fits and barriers (clean labels)
    esc_fits = escape_table(esc, p.rho)
    sam_fits = esc_fits[esc_fits.arm == "late_sam"].set_index("seed")
    sgd_fits = esc_fits[esc_fits.arm == "sgd"].set_index("seed")
    planted = planted_escape_fits(esc, sam_fits, p.rho)
    escapes_by_rho = {}  # claim (c): late SAM's escape at every rho of the sweep (decided at the smallest premised one)
    for r in p.rhos:
        f_r = escape_table(esc, r)
        f_r = f_r[f_r.arm == "late_sam"].set_index("seed")
        escapes_by_rho[r] = (f_r, planted_escape_fits(esc, f_r, r), escape_loss_rise(esc, "late_sam", r))
    barriers = (lines.groupby(["kind", "rho", "seed"])[["alpha", "loss"]]
                .apply(lambda g: barrier(g.alpha, g.loss)).rename("barrier").reset_index())
    late_barriers = barriers[(barriers.kind == "switch_to_late_sam") & np.isclose(barriers.rho, p.rho)].barrier
    control_barriers = barriers[barriers.kind == "matched_distance"].barrier

    figures.curves(p, hist, fig_curves)
    figures.rho_sweep(p, m, fig_sweep)
    figures.robust(p, m, fig_robust)
    figures.switch_sweep(p, m, fig_switch, seed_shares)

    valley = (lines[lines.kind == "matched_distance"].groupby("seed").valley_distance.first().to_numpy()
              if "valley_distance" in lines else np.array([]))
    rises = (escape_loss_rise(esc, "late_sam", p.rho), escape_loss_rise(esc, "sgd", NO_SAM))
    claim_list = sam_late_claims(p, m, fits, sam_fits, sgd_fits, planted, late_barriers, control_barriers, valley,
                                 loss_rises=rises, escapes_by_rho=escapes_by_rho)
    rho_c = next(c for c in claim_list if c.id == "c").measured["rho"]
    figures.mechanism(p, esc, escapes_by_rho[rho_c][0], lines, fig_mechanism, escape_rho=rho_c)
    sc = scope(p)
    write_claims(claim_list, claims, paper=SLUG, scale=scale, scope=sc)
    write_json(to_dict(p), params_json)

    d, sweep = p.data, sorted([p.late_epochs, *p.late_sweep])
    clean_fit = fits[fits.labels == "clean"]
    what = (f"{d.source}: per seed a random split into {d.train_size} training and {d.test_size} test images, pixels "
            f"in [0, 1]; clean labels (the paper's setting, every claim)"
            + (f", and a noisy-label extension ({d.label_noise:.0%} of each seed's training labels moved to another "
               "class, its own draw per seed)" if "noisy" in p.conditions else "")
            + f". Network {p.model}{' ' + 'x'.join(str(h) for h in p.hidden) if p.model == 'mlp' else ''}, mini-batch "
            f"{p.batch_size}, lr {p.lr} ({f'x {p.lr_gamma} from epochs {list(p.lr_milestones)}' if p.lr_milestones else 'constant'}), "
            f"momentum {p.momentum}, weight decay {p.weight_decay}, label smoothing {p.label_smoothing}, {p.epochs} "
            f"epochs, {p.seeds} seeds. Arms (clean labels): SGD; SAM throughout; late SAM (SGD, then SAM for the last "
            f"K epochs, branched from the SGD run's checkpoint at epoch {p.epochs} - K; K = {p.late_epochs} for the main "
            f"arm, the switch sweep K in {sweep} at the main rho); early SAM (SAM for the first {p.late_epochs} epochs, "
            f"then SGD); SAM and late SAM at rho in {list(p.rhos)} (main rho {p.rho}); adversarial training (L-inf PGD, "
            f"epsilon {p.attack.epsilon}, step {p.attack.step_size}, {p.attack.steps} steps, random start) throughout "
            f"and in the last {p.adv_late_epochs} epochs (late AT, branched from SGD's checkpoint at epoch "
            f"{p.adv_switch_epoch})"
            + (f"; noisy labels: {', '.join(NOISY_ARMS)}" if "noisy" in p.conditions else "")
            + f". At the main switch (epoch {p.switch_epoch}) SGD fits {clean_fit.switch_train_acc.mean():.1%} of its "
            f"clean training labels (worst seed {clean_fit.switch_train_acc.min():.1%}). Sharpness: the top "
            f"{p.eigenvalues} Hessian eigenvalues of the training cross-entropy on the first {p.hessian_samples} "
            f"training examples, {p.lanczos_iters} Lanczos steps. Escape: ||w_t - w_switch|| over the first "
            f"{p.escape_steps} steps after the switch, fitted on a log scale against t (exponential) and log t (power "
            f"law). Valley: training loss on the first {p.interpolation_samples} examples at {len(alpha_grid(p))} points "
            f"of the line from w_switch to the late-SAM solution, alpha in {list(p.interpolation_range)}; the control "
            "line starts at the same w_switch and is as long, but points at the next seed's SGD solution.")
    extension = ""
    if "noisy" in p.conditions:
        sh = {col: float(np.nanmean(seed_shares(m, "late_sam", "sam", col, p.rho, p.rho, "noisy")))
              for col in ("test_loss", "test_acc", "eig_1")}
        extension = (
            f" Extension, noisy labels ({d.label_noise:.0%}, not the paper's setting; no claim rests on it): SGD ends "
            f"at test accuracy {mean('sgd', 'test_acc', labels='noisy'):.3f} fitting "
            f"{mean('sgd', 'train_acc', labels='noisy'):.0%} of the noisy training labels, SAM throughout at "
            f"{mean('sam', 'test_acc', p.rho, 'noisy'):.3f} fitting {mean('sam', 'train_acc', p.rho, 'noisy'):.0%}, and "
            f"late SAM at {mean('late_sam', 'test_acc', p.rho, 'noisy'):.3f} fitting "
            f"{mean('late_sam', 'train_acc', p.rho, 'noisy'):.0%}: it closes {sh['test_loss']:.2f} of the gap in test "
            f"loss, {sh['test_acc']:.2f} in test accuracy and {sh['eig_1']:.2f} in sharpness.")
    collapsed = [r for r in p.rhos if mean("sam", "train_acc", r) < 0.5 * mean("sgd", "train_acc")]
    collapse = "".join(
        f" SAM throughout at rho {r} does not train (training accuracy {mean('sam', 'train_acc', r):.2f}, test "
        f"{mean('sam', 'test_acc', r):.2f}) while late SAM at the same rho, which starts from SGD's trained weights, "
        f"ends at test accuracy {mean('late_sam', 'test_acc', r):.2f}: normalised SAM takes its gradient at w + rho "
        "g/||g||, a step of length rho whatever ||g|| is, and near the initialisation, where the loss is flat and ||g|| "
        "small, a step this long lands where the gradient no longer points downhill from w." for r in collapsed)
    sweep_k = sorted([p.late_epochs, *p.late_sweep])
    late_gain = ""
    if len(sweep_k) >= 2:  # the convergence gate of (a), in words: how much the longest late arm still gains
        k_lo, k_hi = sweep_k[-2:]
        arm_of = {k: "late_sam" if k == p.late_epochs else sweep_arm(k) for k in sweep_k}
        gains = {c: float(np.nanmean(extrapolated_rise(seed_shares(m, arm_of[k_lo], "sam", c, p.rho, p.rho),
                                                       seed_shares(m, arm_of[k_hi], "sam", c, p.rho, p.rho),
                                                       k_hi - k_lo, k_hi))) for c in ("test_loss", "eig_1")}
        late_gain = (f"; late SAM's share changes from K = {k_lo} to K = {k_hi} epochs by "
                     f"{gains['test_loss'] * (k_hi - k_lo) / k_hi:.2f} of the gap in test loss and "
                     f"{gains['eig_1'] * (k_hi - k_lo) / k_hi:.2f} in sharpness (extrapolated to another {k_hi} epochs: "
                     f"{gains['test_loss']:.2f} and {gains['eig_1']:.2f}, against plateau_share_max = "
                     f"{p.plateau_share_max}, the one-sided convergence gate of claim (a))")
    differences = (
        "The paper trains ResNets, WideResNets and VGG on CIFAR-10/100 with clean labels (e.g. WideResNet-16-8, "
        f"switching at epoch 175 of 200); the default scale trains a small MLP on {d.train_size} of sklearn's 8x8 digits "
        "per seed (the only image set that ships offline), with clean labels for every claim. As in the paper the "
        f"learning rate is decayed (x {p.lr_gamma} at epochs {list(p.lr_milestones)}) before every switch of the sweep, "
        "so late SAM starts where SGD has fitted its training set (the premise gate says how well). Generalization is "
        "decided on the test loss (cross-entropy on the clean test labels), with the accuracy shares reported: on "
        f"{d.source} SGD ends at test accuracy {mean('sgd', 'test_acc'):.3f} and SAM at "
        f"{mean('sam', 'test_acc', p.rho):.3f}, a difference of "
        f"{abs(mean('sam', 'test_acc', p.rho) - mean('sgd', 'test_acc')) * d.test_size:.1f} of the {d.test_size} test "
        f"images on average, while the test loss goes from {mean('sgd', 'test_loss'):.3f} to "
        f"{mean('sam', 'test_loss', p.rho):.3f}. The full scale "
        "(config/full.yaml) is the official script's VGG-16-BN on CIFAR-10 from a user-given folder. An epoch here is "
        f"{math.ceil(d.train_size / p.batch_size)} optimiser steps ({d.train_size} images in batches of {p.batch_size}), "
        f"so the main late phase of {p.late_epochs} epochs is {p.late_epochs * math.ceil(d.train_size / p.batch_size)} "
        f"SAM steps, against {PAPER_LATE_STEPS} in the official script's last 10 of 160 epochs on CIFAR-10: the same "
        f"share of training, {PAPER_LATE_STEPS / (p.late_epochs * math.ceil(d.train_size / p.batch_size)):.0f} times "
        f"fewer steps{late_gain}. Late AT (claim (e)) runs for the last {p.adv_late_epochs} epochs, "
        f"{p.adv_late_epochs * math.ceil(d.train_size / p.batch_size)} steps here against {PAPER_LATE_STEPS} in the "
        "official ERM_to_Adv.py (its last 10 of 160 CIFAR-10 epochs)"
        + (f": at the official length of {p.late_epochs} epochs it would have "
           f"{p.late_epochs * math.ceil(d.train_size / p.batch_size)} steps, so its late phase is the decayed-lr phase "
           "instead (the longest the design allows)" if p.adv_late_epochs != p.late_epochs else "")
        + ". Claim (c) is decided at the smallest SAM radius of "
        f"{sorted(p.rhos)} at which SGD's solution is unstable under SAM (its premise), here rho = {rho_c}"
        + ("" if "noisy" in p.conditions else
           "; the noisy-label extension of earlier runs is off at this scale (it decided no claim"
           + ("; its jobs pay for the runs at the other rho" if len(p.rhos) > 1 else "") + ")")
        + ". The optimiser, "
        "the SAM step, the momentum restart at the switch (two optimiser objects, as in the official code; late AT "
        "keeps SGD's optimiser, as ERM_to_Adv.py), label "
        f"smoothing, the PGD attack and the line interpolation follow the official code; PGD takes {p.attack.steps} "
        "steps (official 10) for the budget. Our deviations: inputs are not normalised (one pipeline for SAM and AT, "
        f"pixels in [0, 1]); the initial lr is {p.lr} (official 0.01); the Hessian is taken in eval mode on the first "
        f"{p.hessian_samples} training examples with our Lanczos (the official code uses train mode and scipy's eigsh); "
        "the escape's shape is fitted to the distance from w_switch during normal late-SAM training, while escape.py "
        "tracks the training loss (recorded here too, on the whole training set after each step: it decides claim "
        "(c)'s premise that SGD's solution is unstable under SAM); the barrier is our summary of the line the paper plots, with a control line of matched "
        "length; gap shares are per seed (paired)." + collapse + extension)
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[fig_curves, fig_switch, fig_sweep, fig_mechanism, fig_robust], claims=claim_list,
                 benchmarks=benchmarks, differences=differences, scope=sc, verdicts_figure=verdicts)
