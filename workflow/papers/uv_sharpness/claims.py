"""The claims of P12 uv_sharpness (Kalra, He and Barkeshli, ICLR 2025), decided on intervals over replicates.

UV claims rest on sweep replicates that each draw their own example (x, y), initial point and grid offset
(stages.sweep_instance), or on trajectory seeds (initial points); MLP claims on the MLP's seeds.

* (a) the route to chaos lies on the EoS manifold: from an init off the manifold (the sweep named "large": Theta_0 =
  0.5 lambda_min by default, five times the small sweep's, still below lambda_min, so no sharp-init route is
  tested), the late-time imbalance
  1 - 4kf^2/Theta^2 (0 exactly when u || v) is ~0 at every eta above 2/lambda_min, over the runs that stay bounded
  (a diverged run has no late orbit; the share that diverge is a premise gate); control: the same init below it,
  where GD stops at a minimum off the manifold;
* (b) the period-doubling route 1 -> 2 -> 4 -> 8 -> chaos, per replicate; positive control: the same detection on
  the logistic map, whose route is known; control: the sweep's eta labels permuted;
* (c) a real network's sharpness rises to about 2/eta and stays there, and scales as 1/eta across learning rates;
  control: the ablation at a learning rate whose 2/eta the sharpness does not reach;
* (d) at the model's width, a large learning rate reduces the sharpness early from a large init (Theta_0 >
  lambda_min) without a catapult: the lasting reduction 1 - Theta(end of the early phase) / Theta_0 (not the minimum:
  the first steps' swing of f dips Theta for a step or two, and it recovers) at eta Theta_0 below 2 (every run gated
  on no loss rise), paired against the same init and seeds at eta Theta_0 < 1 (the ablation: the large learning rate
  removed, the large init kept, which is also the control); the reduction at eta Theta_0 below 2 alone, the
  transient dip and the step of its minimum are reported beside it; a finite-width
  effect, so the claim is stated at `width` and a width sweep on the function-space map is reported beside it, as is
  the same comparison on lambda_max;
* (d_catapult) an extension, not a statement of the paper: the catapult adds early reduction beyond the learning
  rate's smooth trend, a difference in differences per seed (the change over a span D across its catapult onset
  minus over D just below); control: the same one span lower, all calm; premise: the lasting reduction (at most
  1 - lambda_min / Theta_0) leaves the test room to pass; positive control: the same test on a much wider UV model, where only the catapult reduces
  the NTK.

Progressive sharpening from a small init is a check, not a claim: the small init puts Theta_0 at a tenth of
lambda_min, the smallest sharpness of any minimum, so a run that trains must rise (:func:`sharpening_check`).
The fixed-point conditions derived in :mod:`.uv` from the paper's map (eta_c = 2/lambda_min, the 2-cycle's mean
sharpness 1 + (r - 1)/4, period 4 at r = sqrt(5) - 1) are the project's derivation measured against its own
simulation of the same map: they are checks (:func:`fixed_point_checks`), not claims.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.claims import (MIN_REPLICATES, Check, Claim, Control, PositiveControl, Premise, convention,
                                  mean_test, paired_test)
from papers.uv_sharpness import uv

# The fixed seed of the permutation of the sweep's eta labels (claim b's control).
PERMUTATION_SEED = 0
# The logistic map x' = mu x (1 - x), claim (b)'s positive control: period 2 from mu = 3, then period doubling
# (period 4 from 1 + sqrt(6), period 8 from 3.5441) into chaos from mu = 3.5699 (May 1976; Feigenbaum 1978).
LOGISTIC_RANGE = (2.9, 3.62)
LOGISTIC_PERIOD_2 = 3.0


def _chaotic(g):
    return (g.period == 0) & (g.lyapunov > 0) & ~g.diverged


# (condition, consecutive points) of each onset. An unsettled transient right at a bifurcation can look
# aperiodic with a slightly positive exponent on one grid point; chaos starts where it persists over three.
ONSETS = {
    "period_2": (lambda g: g.period == 2, 1),
    "period_4": (lambda g: g.period == 4, 1),
    "period_8": (lambda g: g.period == 8, 1),
    "chaos": (_chaotic, 3),
    "divergence": (lambda g: g.diverged, 1),
    "not_period_1": (lambda g: g.period != 1, 1),
}


def onsets_per_seed(points: pd.DataFrame, onset, ratio_column: str = "ratio") -> np.ndarray:
    """Per seed (in seed order), the smallest ratio where the onset's condition holds on its run of
    consecutive sweep points; NaN where it never does."""
    condition, run = onset
    found = []
    for _, g in points.sort_values(["seed", ratio_column]).groupby("seed"):
        hit = condition(g).to_numpy()
        starts = [i for i in range(len(hit) - run + 1) if hit[i:i + run].all()]
        found.append(g[ratio_column].iloc[starts[0]] if starts else np.nan)
    return np.asarray(found, dtype=float)


def grid_step(p) -> float:
    return (p.sweep_range[1] - p.sweep_range[0]) / (p.sweep_points - 1)


def _interval_text(values) -> str:
    """'1.236 [1.235, 1.237] (5 seeds)' for a table cell."""
    from papers.common.claims import t_interval

    x = np.asarray(values, dtype=float)
    found = x[np.isfinite(x)]
    if not found.size:
        return "not reached"
    m, lo, hi = t_interval(found)
    extra = f", {x.size - found.size} of {x.size} never" if found.size < x.size else ""
    return f"{m:.5g} [{lo:.5g}, {hi:.5g}] ({found.size} seeds{extra})"


# ---- (a) the EoS manifold ---------------------------------------------------------------------------
def _capped(values) -> np.ndarray:
    """A deviation per run, a diverged run (NaN) counted as 1 (the fixed-point check: a 2-cycle that diverged
    missed the prediction)."""
    x = np.asarray(values, dtype=float)
    return np.where(np.isfinite(x), x, 1.0)


def _manifold_parts(large: pd.DataFrame, keep, tol: float) -> tuple[list, int]:
    """Claim (a)'s test at every grid index of the off-manifold ("large") sweep whose replicates' ratios all pass `keep`: the
    late imbalance of the replicates that stayed bounded below `tol` (t interval). A diverged run has no late orbit,
    on the manifold or off it: it is left out here and counted by the claim's divergence gate. Returns the tests and
    the number of grid points where every replicate diverged (not tested; a point with fewer than MIN_REPLICATES
    bounded replicates is tested, and its part is inconclusive)."""
    parts, untested = [], 0
    for j, g in large.groupby("index"):
        if keep(g.ratio).all():
            bounded = g[~g.diverged].sort_values("seed")
            if not len(bounded):
                untested += 1
                continue
            parts.append(mean_test(bounded.imbalance, threshold=tol, direction="<", what="bounded replicates",
                                   name=f"r = {g.ratio.mean():.5g}: late imbalance"))
    return parts, untested


def manifold_claim(p, large: pd.DataFrame) -> Claim:
    h = grid_step(p)
    edge = p.onset_tolerance_steps * h  # the critical neighbourhood of r = 1, where the orbit settles slowest
    ev, untested = _manifold_parts(large, lambda r: r > 1 + edge, p.manifold_tolerance)
    ctl, _ = _manifold_parts(large, lambda r: r < 1 - edge, p.manifold_tolerance)
    above, below = large[large.ratio > 1 + edge], large[large.ratio < 1 - edge]
    start = large.groupby("seed").imbalance0.first()
    theta = large.groupby("seed").eta_theta0.max()
    escape = onsets_per_seed(large, ONSETS["divergence"])
    diverged_share = float(above.diverged.mean()) if len(above) else float("nan")
    bounded_above = above[~above.diverged]
    return Claim(
        "a", "The route to chaos lies on the edge-of-stability manifold: from an init off it (Theta_0 = "
             f"{p.sweep_inits['large']:g} lambda_min"
             + (", below lambda_min: no sharp-init route is tested" if p.sweep_inits["large"] < 1 else "")
             + "), gradient descent with eta above 2/lambda_min ends on the manifold u || v (imbalance "
             "1 - 4kf^2/Theta^2 = 0), at every eta the sweep covers, in every run that stays bounded.",
        "a period-doubling route to chaos on the edge of stability manifold as the learning rate is increased",
        {"points_above": len(ev), "within_tolerance": sum(e.verdict == "holds" for e in ev),
         "points_untested": untested,
         "worst_imbalance_above": float(bounded_above.imbalance.max()) if len(bounded_above) else float("nan"),
         "smallest_imbalance_below": float(below.imbalance.min()) if len(below) else float("nan"),
         "initial_imbalance": float(start.mean()), "diverged_runs": int(above.diverged.sum()),
         "runs_above": int(len(above)),
         "divergence_onset_per_replicate": [float(x) for x in escape]},
        f"at every grid point of the off-manifold sweep ('large': Theta_0 / lambda_min = {p.sweep_inits['large']:g}) with "
        f"r = eta / (2/lambda_min) > 1 + {p.onset_tolerance_steps} grid steps ({1 + edge:.4g}) for every replicate "
        f"({len(ev)} points tested, {untested} where every replicate diverged), the 95% t "
        f"interval over the {p.seeds} replicates that stay bounded of the imbalance averaged over the last "
        f"{p.late_window} steps lies below manifold_tolerance = {p.manifold_tolerance:g}",
        ev or None, Control(f"the same off-manifold init with eta below 2/lambda_min (r < {1 - edge:.4g}, {len(ctl)} points): a "
                    "stable minimum exists, GD stops there and need not reach the manifold", ctl or None,
                    kind="ablation"),
        threshold_source=convention(f"a numerical tolerance: the imbalance lies in [0, 1] and is 0 exactly on "
                                    f"u || v; {p.manifold_tolerance:g} of its range"),
        premise=[Premise.at_least("the off-manifold init starts off the manifold: smallest initial imbalance over the "
                                  "replicates", float(start.min()), p.off_manifold_min,
                                  what="off_manifold_min: reaching the manifold is not inherited from the start"),
                 Premise.at_most("the off-manifold init starts no catapult (which would throw the run off the route): "
                                 "largest eta Theta_0 over the sweep", float(theta.max()), 2.0,
                                 what="eta Theta_0 < 2: the first steps are stable"),
                 Premise.at_most("the sweep probes the route, not escape from it: share of the claim's runs "
                                 f"(r > {1 + edge:.4g}) that diverged", diverged_share, p.divergence_max,
                                 what="divergence_max")],
        no_positive_control="the imbalance is a closed form of (f, Theta), 0 exactly when u || v (tests check it on "
                            "planted parallel and random pairs); the test reads it directly, with no detection step",
        note="the critical neighbourhood of r = 1 (within the onset tolerance, where the orbit's attraction to the "
             "manifold vanishes and the late window may not have settled) is left out of both claim and control; "
             + (f"{int(above.diverged.sum())} of {len(above)} runs above diverged, in {int(np.isfinite(escape).sum())} "
                f"of {escape.size} replicates, first at r = {np.nanmin(escape):.4g} (left out of the imbalance test)"
                if np.isfinite(escape).any() else "no run diverged"))


# ---- (b) the route to chaos -------------------------------------------------------------------------
def route_parts(pts: pd.DataFrame, threshold: float, edge: float, ratio_column: str = "ratio",
                what: str = "r") -> tuple[list, dict]:
    """Claim (b)'s tests on per-replicate onsets: nothing but period 1 below `threshold` outside its critical
    neighbourhood (the first ratio off period 1 lies above threshold - edge: right below a period doubling the
    fixed point's multiplier is near -1, and the late window may still show the decaying alternation as period 2),
    then period 2 before period 4 before period 8 before chaos (paired by replicate)."""
    keys = ("not_period_1", "period_2", "period_4", "period_8", "chaos")
    on = {k: onsets_per_seed(pts, ONSETS[k], ratio_column) for k in keys}
    return [mean_test(on["not_period_1"] - (threshold - edge), threshold=0.0, direction=">", what="replicates",
                      name=f"first {what} off period 1 - ({threshold:g} - {edge:.3g})"),
            paired_test(on["period_4"], on["period_2"], name="onset of period 4 - of period 2"),
            paired_test(on["period_8"], on["period_4"], name="onset of period 8 - of period 4"),
            paired_test(on["chaos"], on["period_8"], name="onset of chaos - of period 8")], on


def logistic_sweep(p) -> pd.DataFrame:
    """The logistic map over mu in LOGISTIC_RANGE, through the same period detection, Lyapunov exponent and labels
    as the UV sweep: one replicate per seed, each with its own initial point and grid offset."""
    mu_step = (LOGISTIC_RANGE[1] - LOGISTIC_RANGE[0]) / (p.sweep_points - 1)
    rows = []
    for seed in range(p.seeds):
        rng = np.random.default_rng([seed, 2])
        offset = rng.uniform() if p.grid_jitter else 0.0
        mu = LOGISTIC_RANGE[0] + (np.arange(p.sweep_points) + offset) * mu_step
        x = np.full_like(mu, rng.uniform(0.1, 0.9))
        late = np.empty((mu.size, p.late_window))
        log_slope = np.zeros_like(mu)
        for t in range(p.steps):
            if t >= p.steps - p.late_window:
                late[:, t - (p.steps - p.late_window)] = x
                log_slope += np.log(np.abs(mu * (1 - 2 * x)) + 1e-300)
            x = mu * x * (1 - x)
        lyap = log_slope / p.late_window
        for i, m in enumerate(mu):
            period = uv.detect_period(late[i], max_period=p.max_period, rtol=p.period_rtol)
            rows.append({"seed": seed, "ratio": m, "period": period, "lyapunov": lyap[i], "diverged": False,
                         "label": uv.classify(period, lyap[i])})
    return pd.DataFrame(rows)


def route_claim(p, small: pd.DataFrame, logistic: pd.DataFrame) -> Claim:
    edge = p.onset_tolerance_steps * grid_step(p)
    ev, on = route_parts(small, 1.0, edge)
    rng = np.random.default_rng(PERMUTATION_SEED)
    shuffled = small.sort_values(["seed", "ratio"]).copy()
    shuffled["shuffled_ratio"] = np.concatenate([rng.permutation(g.ratio.to_numpy()) for _, g in shuffled.groupby("seed")])
    ctl, _ = route_parts(shuffled, 1.0, edge, ratio_column="shuffled_ratio")
    mu_edge = p.onset_tolerance_steps * (LOGISTIC_RANGE[1] - LOGISTIC_RANGE[0]) / (p.sweep_points - 1)
    pos, pos_on = route_parts(logistic, LOGISTIC_PERIOD_2, mu_edge, what="mu")
    missing = [f"{k.replace('_', ' ')} never reached in {int(np.isnan(v).sum())} of {v.size} replicates"
               for k, v in on.items() if k != "not_period_1" and np.isnan(v).any()]
    means = {k: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan") for k, v in on.items()}
    feigenbaum = ((means["period_4"] - means["period_2"]) / (means["period_8"] - means["period_4"])
                  if np.isfinite([means[k] for k in ("period_2", "period_4", "period_8")]).all() else float("nan"))
    periods = small[small.period > 0].period
    other = sorted(int(q) for q in periods.unique() if q & (q - 1))  # not a power of two
    unsettled = float((small.label == "aperiodic").mean())
    h = grid_step(p)
    notes = missing + [
        f"periods 1 .. {p.max_period} are detected (not only powers of two): windows of period {other} appear" if other
        else f"periods 1 .. {p.max_period} are detected; no window of a period other than a power of two appears",
        f"onsets are resolved to the sweep's grid step ({h:.3g} in r); each replicate's grid is offset by its own "
        "fraction of a step, so the interval over replicates shows that resolution"]
    return Claim(
        "b", "Period doubling: period 1 -> 2 -> 4 -> 8 -> chaos as eta grows past 2/lambda_min.",
        "a period-doubling route to chaos on the EoS manifold",
        {"onset_per_replicate": {k: [float(x) for x in v] for k, v in on.items()},
         "feigenbaum_ratio": feigenbaum, "other_periods": other,
         "logistic_onsets": {k: float(np.nanmean(v)) for k, v in pos_on.items()}},
        f"per replicate (its own example, initial point and grid offset), on the small-init sweep of r in "
        f"{list(p.sweep_range)}: the first r with any period other than 1 lies above 1 - {p.onset_tolerance_steps} "
        f"grid steps ({1 - edge:.4g}: the critical neighbourhood, as the checks), and the onsets of period 2, 4, 8 and chaos (aperiodic with Lyapunov exponent > 0 on 3 "
        f"consecutive points) increase in that order: {p.seeds}-replicate paired 95% t intervals above 0",
        ev, Control(f"permuted keys: the same tests with the sweep's eta labels permuted within each replicate "
                    f"(fixed seed {PERMUTATION_SEED}), so that no route can be read in order", ctl, kind="null"),
        threshold_source=convention("a sign: the claim is an order of onsets, not their distances"),
        premise=[Premise.at_most("the late window has settled: share of sweep points labelled aperiodic (no period "
                                 "and a non-positive Lyapunov exponent: a transient)", unsettled, p.aperiodic_max,
                                 what="aperiodic_max")],
        positive_control=PositiveControl(
            f"the same detection (periods, Lyapunov exponent, labels, onsets) on the logistic map x' = mu x (1 - x) "
            f"over mu in {list(LOGISTIC_RANGE)}, whose route (period 2 from mu = 3, period 4 from 1 + sqrt(6), chaos "
            "from 3.5699) is known: the same tests must hold", pos),
        note="; ".join(notes))


# ---- (c) the real network --------------------------------------------------------------------------
def eta_slopes(mlp_df: pd.DataFrame) -> np.ndarray:
    """Per seed, the least-squares slope of log late sharpness against log eta over the learning rates (-1 when the
    late sharpness is 2/eta at every eta: the cross-eta signature of the edge of stability); empty with < 2 rates."""
    out = []
    for _, g in mlp_df.sort_values(["seed", "lr"]).groupby("seed"):
        if g.lr.nunique() >= 2:
            out.append(float(np.polyfit(np.log(g.lr), np.log(g.late_sharpness), 1)[0]))
    return np.asarray(out, dtype=float)


def mlp_claim(p, mlp_df: pd.DataFrame) -> Claim:
    """(c) at every learning rate the initial sharpness lies below 2/eta and the late sharpness within eos_tolerance
    of it, and across the learning rates the late sharpness scales as 1/eta (slope of log sharpness against log eta
    within eos_tolerance of -1); control: the ablation at mlp.control_lr (the same network, data, seeds and steps at a
    learning rate whose 2/eta the sharpness does not reach), whose late sharpness must not sit at 2/eta."""
    control_lr = p.mlp.control_lr
    is_control = np.isclose(mlp_df.lr, control_lr)
    claim_df, control_df = mlp_df[~is_control], mlp_df[is_control]
    ev = []
    for lr, g in claim_df.sort_values(["lr", "seed"]).groupby("lr"):
        start, late = g.initial_sharpness * lr / 2, g.late_sharpness * lr / 2
        ev += [mean_test(start, threshold=1.0, direction="<", what="seeds", name=f"eta = {lr:g}: initial sharpness x eta/2"),
               mean_test(np.abs(late - 1), threshold=p.mlp.eos_tolerance, direction="<", what="seeds",
                         name=f"eta = {lr:g}: |late sharpness x eta/2 - 1|")]
    slopes = eta_slopes(claim_df)
    if slopes.size:
        ev.append(mean_test(np.abs(slopes + 1), threshold=p.mlp.eos_tolerance, direction="<", what="seeds",
                            name="|slope of log late sharpness against log eta + 1|"))
    ctl_late = control_df.sort_values("seed").late_sharpness * control_lr / 2
    ctl = (mean_test(np.abs(ctl_late - 1), threshold=p.mlp.eos_tolerance, direction="<", what="seeds",
                     name=f"eta = {control_lr:g} (ablation): |late sharpness x eta/2 - 1|") if len(control_df) else None)
    dev = (claim_df.late_sharpness * claim_df.lr / 2 - 1).abs()
    loss_ratio = float((claim_df.final_loss / claim_df.initial_loss).max())
    net = f"{p.mlp.architecture.upper()} on {p.mlp.dataset}"
    measured = {"network": net, "worst_relative_deviation": float(dev.max()), "runs": int(len(claim_df)),
                "initial_sharpness_x_eta_over_2": float((claim_df.initial_sharpness * claim_df.lr / 2).max()),
                "slope of log late sharpness against log eta, per seed": [float(x) for x in slopes]}
    if len(control_df):
        measured[f"ablation eta = {control_lr:g}: late sharpness x eta/2 (seed mean)"] = float(ctl_late.mean())
        measured[f"ablation eta = {control_lr:g}: late sharpness (seed mean; 2/eta = {2 / control_lr:g})"] = (
            float(control_df.late_sharpness.mean()))
        measured[f"ablation eta = {control_lr:g}: largest final / initial training loss"] = float(
            (control_df.final_loss / control_df.initial_loss).max())
    return Claim(
        "c", f"A real network's sharpness rises to 2/eta within {p.mlp.eos_tolerance:.0%} and stays there, at every "
             "learning rate run, so that across the learning rates it scales as 1/eta.",
        "progressive sharpening up to 2/eta, then EoS, in real networks",
        measured,
        f"at every learning rate {sorted(claim_df.lr.unique().tolist())}, {p.mlp.seeds}-seed 95% t intervals: the "
        f"initial sharpness x eta/2 lies below 1 (it starts below 2/eta) and |<sharpness> eta/2 - 1| over the last "
        f"third of training below mlp.eos_tolerance = {p.mlp.eos_tolerance}; and, with two or more learning rates, "
        f"|slope + 1| below the same tolerance, the slope of log late sharpness against log eta fitted per seed",
        ev, Control(f"the edge of stability out of reach (the ablation): the same network, data, seeds and steps at "
                    f"eta = {control_lr:g}, whose 2/eta = {2 / control_lr:g} lies above the sharpness the runs reach: "
                    "the same late-sharpness test must not hold", ctl, kind="ablation"),
        threshold_source=convention(f"a tolerance of {p.mlp.eos_tolerance:.0%} around 2/eta (and around the slope -1): "
                                    "the paper and Cohen et al. (2021) report sharpness hovering just above 2/eta, "
                                    "with no number"),
        premise=[Premise.at_most("the network trained: largest final / initial training loss over the runs",
                                 loss_ratio, p.trained_loss_ratio, what="trained_loss_ratio")],
        no_positive_control="the sharpness is the top Hessian eigenvalue by power iteration (papers.common.hessian), "
                            "which tests/papers/test_uv_sharpness.py checks against the exact eigenvalue of a small "
                            "network's Hessian; the claim reads it directly")


# ---- (d), (d_catapult): early sharpness reduction from a large init -----------------------------------
def early_arms(runs: pd.DataFrame) -> dict:
    """The product runs (set eta Theta_0) as (seed x product) arrays: `products` (sorted), `reduction` (the lasting
    early reduction 1 - Theta(end of the early phase) / Theta_0), `dip` and `dip_step` (the transient minimum), `rise` (the
    loss rises above L_0 in the early phase), `catapult` (it rises, falls below L_0 by the phase's end and never
    diverges), `calm` (no rise, no divergence), `diverged_step`, and where the runs carry them `sharpness_reduction`
    (the reduction on lambda_max) and `theta0` (Theta_0); NaN where not."""
    runs = runs[runs["product"].notna()]

    def grid(column):  # (seed, product); float (a JSON round trip leaves missing values as None)
        return runs.pivot(index="seed", columns="product", values=column).sort_index(axis=1).astype(float)

    peak, end, diverged = grid("early_loss_peak"), grid("early_loss_end"), grid("diverged").astype(bool)
    rise = (peak > 1).to_numpy()
    nan = np.full(peak.shape, np.nan)
    return {"products": grid("reduction").columns.to_numpy(dtype=float), "reduction": grid("reduction").to_numpy(),
            "rise": rise, "catapult": rise & (end < 1).to_numpy() & ~diverged.to_numpy(),
            "calm": ~rise & ~diverged.to_numpy(), "diverged_step": grid("diverged_step").to_numpy(),
            "sharpness_reduction": grid("sharpness_reduction").to_numpy() if "sharpness_reduction" in runs else nan,
            "dip": grid("dip").to_numpy() if "dip" in runs else nan, "end": end.to_numpy(),
            "dip_step": grid("dip_step").to_numpy() if "dip_step" in runs else nan,
            "theta0": grid("initial_sharpness").to_numpy() if "initial_sharpness" in runs else nan}


def catapult_products(p) -> np.ndarray:
    """The set eta Theta_0 of claims (d) and (d_catapult), sorted: the ablation, claim (d)'s `below` (once, if the
    grid holds it already) and the grid start, start + step, ..., stop."""
    c = p.catapult_products
    grid = c["start"] + c["step"] * np.arange(int(round((c["stop"] - c["start"]) / c["step"])) + 1)
    return np.unique(np.round(np.concatenate([[c["ablation"], c["below"]], grid]), 10))


def wide_early_runs(p, width: int) -> pd.DataFrame:
    """d_catapult's positive control: the early-phase runs of :func:`catapult_products` on a UV model of `width`, with
    the same init scale (the largest of init_scales), example (x, y) and seeds (u, v drawn as stages._init draws them),
    iterated on the exact function-space map (uv.function_step; the (f, Theta) pair closes under GD, so this is the
    parameter-space run without its cost). Returns the columns :func:`early_arms` reads: `reduction` the lasting
    1 - Theta(step early_steps) / Theta_0, `dip` and `dip_step` the transient minimum and its step."""
    products = catapult_products(p)
    sigma = max(p.init_scales)
    f0, theta0 = [], []
    for seed in range(p.seeds):
        rng = np.random.default_rng(seed)
        u, v = rng.normal(0.0, sigma, width), rng.normal(0.0, sigma, width)
        f0.append(float(uv.output(u, v, p.x))); theta0.append(float(uv.ntk(u, v, p.x)))
    f0, theta0 = np.array(f0)[:, None], np.array(theta0)[:, None]
    eta = products[None, :] / theta0
    f, theta = np.broadcast_to(f0, eta.shape).copy(), np.broadcast_to(theta0, eta.shape).copy()
    loss0 = 0.5 * (f0 - p.y) ** 2
    low, peak = theta.copy(), np.zeros_like(theta)
    low_step = np.zeros(eta.shape)
    diverged_step = np.full(eta.shape, np.nan)
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(1, p.early_steps + 1):
            f, theta = uv.function_step(f, theta, p.x, p.y, width, eta)
            bad = ~np.isfinite(f) | (np.abs(np.nan_to_num(f, nan=np.inf)) > 1e6 * (1 + abs(p.y)))
            diverged_step = np.where(bad & np.isnan(diverged_step), t, diverged_step)
            f, theta = np.where(bad, np.nan, f), np.where(bad, np.nan, theta)
            low_step = np.where(theta < low, t, low_step)
            low, peak = np.fmin(low, theta), np.fmax(peak, 0.5 * (f - p.y) ** 2)
    end = 0.5 * (f - p.y) ** 2
    rows = []
    for s in range(p.seeds):
        for j, c in enumerate(products):
            rows.append({"product": float(c), "seed": s, "reduction": float(1 - theta[s, j] / theta0[s, 0]),
                         "dip": float(1 - low[s, j] / theta0[s, 0]), "dip_step": float(low_step[s, j]),
                         "initial_sharpness": float(theta0[s, 0]),
                         "early_loss_peak": float(peak[s, j] / loss0[s, 0]), "early_loss_end": float(end[s, j] / loss0[s, 0]),
                         "diverged": bool(np.isfinite(diverged_step[s, j])), "diverged_step": float(diverged_step[s, j])})
    return pd.DataFrame(rows)


def catapult_onsets(arms: dict, start: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per seed, on the grid from `start`: the index of the catapult onset (the first product whose loss rises; -1 if
    none), and the gated reductions at the onset, one grid step below it and two below (NaN where that seed's runs
    lack what the comparison presupposes: the onset run a catapult, the two below calm, all inside the grid)."""
    products, red = arms["products"], arms["reduction"]
    first = int(np.argmax(products >= start - 1e-9))
    onset = np.full(red.shape[0], -1)
    at, below, below2 = (np.full(red.shape[0], np.nan) for _ in range(3))
    for s in range(red.shape[0]):
        hits = np.flatnonzero(arms["rise"][s, first:])
        if not hits.size:
            continue
        i = first + int(hits[0])
        onset[s] = i
        if i - 2 >= first and arms["catapult"][s, i] and arms["calm"][s, i - 1] and arms["calm"][s, i - 2]:
            at[s], below[s], below2[s] = red[s, i], red[s, i - 1], red[s, i - 2]
    return onset, at, below, below2


def onset_differences(arms: dict, start: float, k: int, lambda_min: float) -> dict:
    """d_catapult's difference in differences, per seed, from i = the last calm grid point below its catapult onset
    (one step below the first rise; on the grid from `start`) and the span k grid steps: `across` = R(i + k) - R(i)
    (the reduction's change over the span into the catapult window), `before` = R(i) - R(i - k) (over the span just
    below, both calm), `control` = R(i - k) - R(i - 2k) (one span lower still, all calm), `room` = 1 - lambda_min /
    Theta_0 - R(i) (the lasting reduction is at most 1 - lambda_min / Theta_0: at a minimum Theta >= lambda_min, the
    flattest minimum's sharpness). NaN where the seed lacks what that presupposes: an onset with i - 2k inside the grid,
    the run at i + k a catapult (rise and fall, no divergence), those at i, i - k and i - 2k calm."""
    products, red = arms["products"], arms["reduction"]
    first = int(np.argmax(products >= start - 1e-9))
    out = {key: np.full(red.shape[0], np.nan) for key in ("across", "before", "control", "room")}
    for s in range(red.shape[0]):
        hits = np.flatnonzero(arms["rise"][s, first:])
        if not hits.size:
            continue
        i = first + int(hits[0]) - 1
        if (i - 2 * k >= first and i + k < products.size and arms["catapult"][s, i + k]
                and all(arms["calm"][s, j] for j in (i, i - k, i - 2 * k))):
            out["across"][s], out["before"][s] = red[s, i + k] - red[s, i], red[s, i] - red[s, i - k]
            out["control"][s] = red[s, i - k] - red[s, i - 2 * k]
            out["room"][s] = 1 - lambda_min / arms["theta0"][s, i] - red[s, i]
    return out


def below_catapult_gain(p, arms: dict, lambda_min: float | None = None) -> dict:
    """Claim (d)'s comparison, per seed: the lasting early reduction at `below` (gated: calm) and at `ablation` (gated:
    calm), both NaN where the seed's init is not large (Theta_0 <= lambda_min, where Theta_0 is known), the same on
    lambda_max (`hess_lo`, `hess_ab`), the transient dip at `below` and the step of its minimum (`dip_lo`,
    `dip_step_lo`) and the loss at the early phase's end over L_0 at both (`end_lo`, `end_ab`)."""
    c = p.catapult_products

    def column(product):
        return int(np.argmin(np.abs(arms["products"] - product)))

    j_lo, j_ab = column(c["below"]), column(c["ablation"])
    large = ~(arms["theta0"][:, j_lo] <= lambda_min) if lambda_min is not None else np.ones(arms["theta0"].shape[0], bool)
    ok_lo, ok_ab = arms["calm"][:, j_lo] & large, arms["calm"][:, j_ab] & large
    return {"lo": np.where(ok_lo, arms["reduction"][:, j_lo], np.nan),
            "ab": np.where(ok_ab, arms["reduction"][:, j_ab], np.nan),
            "hess_lo": np.where(ok_lo, arms["sharpness_reduction"][:, j_lo], np.nan),
            "hess_ab": np.where(ok_ab, arms["sharpness_reduction"][:, j_ab], np.nan), "large": large,
            "dip_lo": np.where(ok_lo, arms["dip"][:, j_lo], np.nan),
            "dip_step_lo": np.where(ok_lo, arms["dip_step"][:, j_lo], np.nan),
            "end_lo": np.where(ok_lo, arms["end"][:, j_lo], np.nan), "end_ab": np.where(ok_ab, arms["end"][:, j_ab], np.nan)}


def _paired_text(a: np.ndarray, b: np.ndarray) -> str:
    """Mean [95% t interval] of the paired difference a - b over the seeds where both are finite."""
    from papers.common.claims import t_interval

    d = (a - b)[np.isfinite(a - b)]
    if d.size < 2:
        return "no valid pair" if not d.size else f"{float(d[0]):.3g} (one seed)"
    m, lo, hi = t_interval(d)
    return f"{m:.3g} [{lo:.3g}, {hi:.3g}] ({d.size} seeds)"


def width_sweep(p) -> pd.DataFrame:
    """Claim (d) and d_catapult at each of `width_sweep` (and `width`) on the exact function-space map (same init
    scale, example and seeds): per width, claim (d)'s paired reduction at `below` minus at `ablation` (mean and 95%
    t interval), the catapult run at `stop` minus the calm run at `below` (the window gain), and d_catapult's
    difference in differences."""
    from papers.common.claims import t_interval

    c, k = p.catapult_products, int(round(p.onset_span / p.catapult_products["step"]))
    rows = []
    for n in sorted({int(w) for w in p.width_sweep} | {int(p.width)}):
        arms = early_arms(wide_early_runs(p, n))
        g = below_catapult_gain(p, arms, uv.lambda_min(p.x, p.y, n))
        j_hi = int(np.argmin(np.abs(arms["products"] - c["stop"])))
        hi = np.where(arms["catapult"][:, j_hi], arms["reduction"][:, j_hi], np.nan)
        o = onset_differences(arms, c["start"], k, uv.lambda_min(p.x, p.y, n))
        row = {"width": n}
        for name, d in (("d", g["lo"] - g["ab"]), ("window_gain", hi - g["lo"]), ("diff_in_diff", o["across"] - o["before"])):
            m, lo, up = t_interval(d[np.isfinite(d)])
            row.update({name: m, f"{name}_low": lo, f"{name}_high": up, f"{name}_seeds": int(np.isfinite(d).sum())})
        rows.append(row)
    return pd.DataFrame(rows)


def _divergence_text(arms: dict) -> str:
    steps = arms["diverged_step"]
    hit = np.argwhere(np.isfinite(steps))
    if not hit.size:
        return f"no run of the {steps.size} early-phase runs diverged"
    return (f"{len(hit)} of {steps.size} early-phase runs diverged: " + ", ".join(
        f"eta Theta_0 {arms['products'][j]:g} seed {s} at step {int(steps[s, j])}" for s, j in hit))


def large_lr_claim(p, runs: pd.DataFrame, widths: pd.DataFrame | None = None) -> Claim:
    """(d) the paper's mechanism (i), early sharpness reduction from a large init, with the catapult removed (issue 48:
    a reduction of 0.67 also occurs at eta Theta_0 = 1.77, where the loss does not rise): from the same large init
    and seeds, the lasting early reduction 1 - Theta(end of the early phase) / Theta_0 at `below` in (1, 2), where no
    run's loss may rise (each run gated: no catapult), paired against the ablation's eta Theta_0 < 1 (the large learning rate removed: the first step does not overshoot f past
    y, so Theta only grows, as under gradient flow, which conserves Theta^2 - 4kf^2). "Large init": Theta_0 above
    lambda_min, the flattest minimum (below it every minimum is sharper than the init, so no run can end flatter than
    it began); a seed below is left out and counted by a premise. The reduction without a catapult is a finite-width
    effect, so the claim is stated at `width`; `widths` (:func:`width_sweep`) reports it at other widths, and the
    same comparison on lambda_max (the Hessian's top eigenvalue) is reported beside it. The claim is decided as stated,
    on the paired difference against the ablation, which is also its control; the reduction at `below` alone, the
    transient dip 1 - min / Theta_0 (issue 48's first measure: the first steps' swing of f, after which Theta
    recovers) and the step of that minimum are reported."""
    c = p.catapult_products
    statement = (f"At the UV model's width n = {p.width}, a large learning rate reduces the sharpness early from a "
                 f"large init (Theta_0 > lambda_min) without a catapult: at eta Theta_0 = {c['below']:g}, below the "
                 "catapult (no loss rise), the NTK Theta at the end of the early phase sits lower, relative to Theta_0, "
                 "by more than change_threshold than from the same init and seeds at eta Theta_0 = "
                 f"{c['ablation']:g} (< 1: the first step does not overshoot).")
    paper = ("(i) the mechanism behind early sharpness reduction: from a large init the sharpness falls early at a "
             "large learning rate (sharpness reduction); tested at this project's width, where it needs no catapult")
    source = convention(f"change_threshold = {p.change_threshold}: a tenth of Theta_0; at n = {p.width}, "
                        f"{p.change_threshold * 2 * p.width:g} times the largest reduction gradient flow allows from a "
                        f"random init (it conserves Theta^2 - 4kf^2: ~1/(2n) = {1 / (2 * p.width):.3g})")
    crit = (f"per seed with Theta_0 > lambda_min = {p.lambda_min:.4g}, the lasting early reduction 1 - Theta(step "
            f"{p.early_steps}, the end of the early phase) / Theta_0 at eta Theta_0 = {c['below']:g} minus the same at "
            f"{c['ablation']:g} (each run gated: no loss rise, no divergence), same init scale {max(p.init_scales):g} "
            f"and seeds, eta set from each run's own Theta_0; decided as stated, on its paired 95% t interval above "
            f"change_threshold = {p.change_threshold}, with the ablation's own reduction as the control (the reduction "
            f"at {c['below']:g} alone is reported, not decided)")
    if not runs["product"].notna().any():
        return Claim.not_measured("d", statement, paper, crit, "no early-phase runs at a set eta Theta_0",
                                  threshold_source=source, control_kind="ablation")
    arms = early_arms(runs)
    g = below_catapult_gain(p, arms, p.lambda_min)
    lo, ab = g["lo"], g["ab"]
    widths = width_sweep(p) if widths is None else widths

    def mean(x):
        return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")

    d_lo = lo - ab
    j_lo = int(np.argmin(np.abs(arms["products"] - c["below"])))
    steps = g["dip_step_lo"][np.isfinite(g["dip_step_lo"])].astype(int)
    modal = int(np.bincount(steps).argmax()) if steps.size else -1
    measured = {
        f"lasting reduction at eta Theta_0 = {c['below']:g}, below the catapult (mean [95% t interval], gated seeds)":
            _paired_text(lo, np.zeros_like(lo)),
        f"lasting reduction at eta Theta_0 = {c['ablation']:g} (mean [95% t interval], gated seeds)":
            _paired_text(ab, np.zeros_like(ab)),
        f"transient dip 1 - min / Theta_0 at {c['below']:g} (gated seeds)": mean(g["dip_lo"]),
        f"step of the minimum of Theta at {c['below']:g}, per gated seed": [int(t) for t in steps],
        f"seeds whose loss rose at eta Theta_0 = {c['below']:g}": int(arms["rise"][:, j_lo].sum()),
        "seeds with Theta_0 > lambda_min": int(g["large"].sum()),
        "valid pairs": int(np.isfinite(d_lo).sum()), "seeds": int(d_lo.size),
        f"on lambda_max: reduction at {c['below']:g} - at {c['ablation']:g} (mean [95% t interval])":
            _paired_text(g["hess_lo"], g["hess_ab"]),
        f"on lambda_max: reduction at {c['ablation']:g} (gated seeds)": mean(g["hess_ab"])}
    for w in widths.itertuples():
        measured[f"n = {w.width} (function-space map): reduction at {c['below']:g} - at {c['ablation']:g}"] = (
            f"{w.d:.3g} [{w.d_low:.3g}, {w.d_high:.3g}]")
    return Claim(
        "d", statement, paper, measured, crit,
        paired_test(lo, np.where(np.isfinite(lo), ab, np.nan), threshold=p.change_threshold, direction=">",
                    name=f"reduction at eta Theta_0 {c['below']:g} (no catapult) - at {c['ablation']:g}"),
        Control(f"the large learning rate removed, the large init kept (the same init at eta Theta_0 = "
                f"{c['ablation']:g}): its own reduction above change_threshold",
                mean_test(ab, threshold=p.change_threshold, direction=">", what="gated seeds",
                          name=f"eta Theta_0 {c['ablation']:g}: reduction"),
                kind="ablation"),
        threshold_source=source,
        premise=[Premise.at_least(f"the init is large: share of seeds with Theta_0 above lambda_min = "
                                  f"{p.lambda_min:.4g} (the flattest minimum; below it no run can end flatter than it "
                                  "began)", float(g["large"].mean()), p.valid_pairs_min, what="valid_pairs_min"),
                 Premise.at_least(f"the runs have what their setting presupposes: share of seeds whose pair passes "
                                  f"the run gates (large init; no loss rise at {c['below']:g} or at "
                                  f"{c['ablation']:g}; no divergence)", _valid_share(d_lo), p.valid_pairs_min,
                                  what="valid_pairs_min"),
                 Premise.at_most(f"Theta at the end of the early phase is where the run settled: largest loss at step "
                                 f"{p.early_steps} over L_0 among the gated runs at {c['below']:g} and {c['ablation']:g}",
                                 float(np.nanmax(np.concatenate([g["end_lo"], g["end_ab"]])))
                                 if np.isfinite(np.concatenate([g["end_lo"], g["end_ab"]])).any() else float("nan"),
                                 p.trained_loss_ratio, what="trained_loss_ratio")],
        no_positive_control="Theta is read directly from the run (the closed-form NTK of the UV model), with no "
                            "detection step",
        note=_divergence_text(arms) + "; " + _dip_text(c, g, steps, modal) + "; " + _width_text(p, widths) + (
            f"; on lambda_max (the Hessian's top eigenvalue: Theta plus a term in |f - y| that falls with the loss) the "
            f"reduction at {c['below']:g} beyond {c['ablation']:g} is {_paired_text(g['hess_lo'], g['hess_ab'])}, and "
            f"the ablation alone reduces lambda_max by {mean(g['hess_ab']):.3g}"))


def _dip_text(c: dict, g: dict, steps: np.ndarray, modal: int) -> str:
    """Claim (d)'s transient dip in words (computed): where the minimum of Theta falls, and the lasting reduction."""
    if not steps.size:
        return f"no gated run at {c['below']:g} records the step of Theta's minimum"
    return (f"at {c['below']:g} Theta dips by {float(np.nanmean(g['dip_lo'])):.3g} (seed mean, 1 - min / Theta_0) with its "
            f"minimum at step {modal} in {int((steps == modal).sum())} of {steps.size} gated seeds (steps "
            f"{steps.min()}-{steps.max()}), then recovers: it lasts as {float(np.nanmean(g['lo'])):.3g} at the early "
            f"phase's end, which decides; the ablation at {c['ablation']:g} ends "
            f"{-float(np.nanmean(g['ab'])):+.3g} (Theta / Theta_0 - 1) relative to its start")


def _width_text(p, widths: pd.DataFrame) -> str:
    """The width sweep in words (computed): claim (d)'s difference and the catapult window's gain, per width."""
    c = p.catapult_products

    def cell(w, name):
        return f"{getattr(w, name):.3g} [{getattr(w, name + '_low'):.3g}, {getattr(w, name + '_high'):.3g}]"
    return (f"a finite-width effect: on the exact function-space map (same init scale, example and seeds) the "
            f"reduction at eta Theta_0 = {c['below']:g} beyond {c['ablation']:g} is "
            + ", ".join(f"{cell(w, 'd')} at n = {w.width}" for w in widths.itertuples())
            + f"; the catapult run at {c['stop']:g} reduces Theta beyond the calm run at {c['below']:g} by "
            + ", ".join(f"{cell(w, 'window_gain')} at n = {w.width}" for w in widths.itertuples()))


def _valid_share(d: np.ndarray) -> float:
    return float(np.isfinite(d).mean()) if d.size else float("nan")


def _window_gains(arms: dict, c: dict) -> list[tuple[float, float]]:
    """(eta Theta_0, seed mean of the reduction there (gated: a catapult) minus at `below` (gated: calm)) for each
    grid product above 2 (the catapult window) with a valid pair."""
    j_lo = int(np.argmin(np.abs(arms["products"] - c["below"])))
    lo = np.where(arms["calm"][:, j_lo], arms["reduction"][:, j_lo], np.nan)
    out = []
    for j, prod in enumerate(arms["products"]):
        if prod > 2 + 1e-9:
            d = np.where(arms["catapult"][:, j], arms["reduction"][:, j], np.nan) - lo
            if np.isfinite(d).any():
                out.append((float(prod), float(np.nanmean(d))))
    return out


def _gains_text(gains: list[tuple[float, float]]) -> str:
    if not gains:
        return "no valid pair in the catapult window"
    hi, lo = max(gains, key=lambda g: g[1]), min(gains, key=lambda g: g[1])
    return (f"{lo[1]:+.3g} (at {lo[0]:g}) and {hi[1]:+.3g} (at {hi[0]:g}) over its {len(gains)} grid points "
            f"{gains[0][0]:g}, ..., {gains[-1][0]:g}")


def catapult_claim(p, runs: pd.DataFrame, wide: pd.DataFrame | None = None) -> Claim:
    """(d_catapult) an extension, not a statement of the paper: per seed, a difference in differences across its
    catapult onset (:func:`onset_differences`: the reduction's change over the span D from the last calm grid point
    into the catapult, minus its change over D just below, both calm), so the reduction's smooth growth with eta
    cancels and the catapult's extra reduction, which starts from zero at the onset, has D to build up. Control: the
    same difference in differences one span lower, all runs calm. Premise: the lasting reduction (at most
    1 - lambda_min / Theta_0) leaves the test room to pass, 1 - lambda_min / Theta_0 - R(last calm) - (its change over
    D below) >= change_threshold. Positive control: the same test
    at `positive_width` (`wide`, from :func:`wide_early_runs` unless given), where a reduction without the catapult
    is a finite-width effect (Lewkowycz et al. 2020's lazy regime below eta Theta_0 = 2) and the catapult's is not."""
    c = p.catapult_products
    k = int(round(p.onset_span / c["step"]))
    statement = ("Extension (not a statement of the paper): the catapult adds to early sharpness reduction beyond the "
                 "learning rate's smooth trend: per seed, over the span D = "
                 f"{p.onset_span:g} in eta Theta_0 from the last grid point below its catapult onset (the smallest eta "
                 "Theta_0 whose loss rises) into the catapult, the NTK's lasting early reduction grows by more than "
                 "change_threshold more than over the span D just below, where the loss does not rise.")
    paper = ("none: an extension (this project's earlier reading of the paper's mechanism (i) attributed early "
             "sharpness reduction to the catapult, Lewkowycz et al. 2020's loss rise at a large learning rate)")
    source = convention(f"change_threshold = {p.change_threshold}, as claim (d); span D = {p.onset_span:g} fixed in "
                        "config before the run (a tenth of the catapult window's width)")
    crit = (f"per seed, on the grid eta Theta_0 = {c['start']:g}, {c['start'] + c['step']:g}, ..., {c['stop']:g} "
            f"(init scale {max(p.init_scales):g}, eta set from each run's own Theta_0), i = the last calm point below "
            f"the onset: [R(i + D) - R(i)] - [R(i) - R(i - D)], R the lasting early reduction 1 - Theta(step "
            f"{p.early_steps}) / Theta_0, the run at i + D gated on a "
            "loss rise and fall, those at i, i - D, i - 2D on no rise, none diverging; its paired 95% t interval "
            f"above change_threshold = {p.change_threshold}")
    if not runs["product"].notna().any():
        return Claim.not_measured("d_catapult", statement, paper, crit, "no early-phase runs at a set eta Theta_0",
                                  threshold_source=source, control_kind="ablation")
    arms = early_arms(runs)
    onset, *_ = catapult_onsets(arms, c["start"])
    onset_value = np.where(onset >= 0, arms["products"][np.maximum(onset, 0)], np.nan)
    o = onset_differences(arms, c["start"], k, p.lambda_min)
    wide_arms = early_arms(wide_early_runs(p, p.positive_width) if wide is None else wide)
    w = onset_differences(wide_arms, c["start"], k, uv.lambda_min(p.x, p.y, p.positive_width))

    def mean(x):
        return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")

    def calm_below(a):  # mean reduction at `below` over the runs whose loss does not rise
        j = int(np.argmin(np.abs(a["products"] - c["below"])))
        return mean(np.where(a["calm"][:, j], a["reduction"][:, j], np.nan))
    d = o["across"] - o["before"]
    return Claim(
        "d_catapult", statement, paper,
        {"catapult onset eta Theta_0 per seed": [float(x) for x in onset_value],
         "reduction's change over D across the onset (valid seeds)": mean(o["across"]),
         "its change over D just below the onset": mean(o["before"]),
         "its change over D one span lower (control)": mean(o["control"]),
         "room left, 1 - lambda_min / Theta_0 - reduction at the last calm point": mean(o["room"]),
         f"n = {p.positive_width}: difference in differences": mean(w["across"] - w["before"]),
         "valid pairs": int(np.isfinite(d).sum()), "seeds": int(d.size)},
        crit, paired_test(o["across"], o["before"], threshold=p.change_threshold, direction=">",
                          name="change over D across the catapult onset - over D just below"),
        Control("the catapult removed from both sides: the same difference in differences one span lower (change over "
                "D just below the onset minus over the D below that, no run's loss rising): if it also holds, the "
                "reduction's curvature in eta alone gives the difference",
                paired_test(o["before"], o["control"], threshold=p.change_threshold, direction=">",
                            name="change over D just below the onset - over the D below that"), kind="ablation"),
        threshold_source=source,
        premise=[Premise.at_least("the catapult's onset is resolved: share of seeds with an onset inside the grid "
                                  "(the runs at i, i - D, i - 2D calm) whose run at i + D rises and falls without "
                                  "diverging", _valid_share(d), p.valid_pairs_min, what="valid_pairs_min"),
                 Premise.at_least("the test can pass: the lasting reduction is at most 1 - lambda_min / Theta_0 (at a "
                                  "minimum Theta >= lambda_min), so the difference in differences is at most "
                                  "1 - lambda_min / Theta_0 - R(i) - [R(i) - R(i - D)]; its seed mean",
                                  mean(o["room"] - o["before"]), p.change_threshold, what="change_threshold")],
        positive_control=PositiveControl(
            f"the same test on the UV model at width {p.positive_width} (same init scale, example and seeds; the exact "
            "function-space map), where the reduction below the catapult is a finite-width effect and the catapult's "
            "is not, so the catapult is what reduces the NTK there: the test must see it",
            paired_test(w["across"], w["before"], threshold=p.change_threshold, direction=">",
                        name=f"n = {p.positive_width}: change over D across the onset - over D just below")),
        note=_divergence_text(arms) + (
            f"; in the catapult window the catapult runs reduce the NTK beyond the run at {c['below']:g}, where the "
            f"loss does not rise (seed means, gated runs), by between {_gains_text(_window_gains(arms, c))} at n = {p.width}, "
            f"and by between {_gains_text(_window_gains(wide_arms, c))} at n = {p.positive_width}; the reduction without a "
            f"catapult at {c['below']:g} is {calm_below(arms):.3g} at n = {p.width} and {calm_below(wide_arms):.3g} at "
            f"n = {p.positive_width} (a finite-width effect)"))


def sharpening_check(p, runs: pd.DataFrame) -> Check:
    """Progressive sharpening from the small init, as a check: the small init puts Theta_0 at a tenth of lambda_min,
    the smallest sharpness of any minimum, and gradient flow conserves Theta^2 - 4kf^2, so from f_0 ~ 0 a run that
    trains must rise by about sqrt(1 + (lambda_min / Theta_0)^2) - 1: true by construction of the setting."""
    small = runs[runs["product"].isna() & (runs.init_scale == min(p.init_scales)) & (runs.eta_theta0 < 1)]
    trained = small[small.loss_ratio <= p.trained_loss_ratio]
    return Check.at_least(
        "progressive_sharpening", f"from the small init (sigma {min(p.init_scales):g}, eta Theta_0 < 1; Theta_0 below "
        "lambda_min by construction) the NTK rises over training: smallest late mean Theta / Theta_0 - 1 over the "
        f"{len(trained)} of {len(small)} runs that trained (late loss / initial at most {p.trained_loss_ratio:g})",
        float(trained.rise.min()) if len(trained) and len(trained) == len(small) else float("nan"),
        p.change_threshold, what="change_threshold; NaN if a run did not train")


# ---- the checks (the project's derivation against its own simulation) ------------------------------
def fixed_point_checks(p, small: pd.DataFrame) -> list[Check]:
    """eta_c, the period-4 onset and the 2-cycle's mean sharpness, derived in uv.py from the paper's map, against the
    small-init sweep of the same map: self-consistency, not evidence about the paper (its text could not be read)."""
    h = grid_step(p)
    tol = p.onset_tolerance_steps * h
    first_off = onsets_per_seed(small, ONSETS["not_period_1"])
    period_4 = onsets_per_seed(small, ONSETS["period_4"])
    span = p.sweep_range[1] - p.sweep_range[0]

    def miss(onset, predicted):  # an onset never reached misses by the sweep's span
        return float(np.max(np.where(np.isfinite(onset), np.abs(onset - predicted), span)))

    cycle = small[(small.ratio > uv.R_PERIOD_2 + tol) & (small.ratio < uv.R_PERIOD_4 - tol)]
    dev = np.abs(cycle.sharpness_over_2_eta - uv.two_cycle_sharpness_ratio(cycle.ratio.to_numpy()))
    return [
        Check.at_most("eta_c", "minima lose stability at eta_c = 2/lambda_min: largest |first r off period 1 - 1| over "
                      "the replicates", miss(first_off, uv.R_PERIOD_2), tol,
                      what=f"{p.onset_tolerance_steps} grid steps"),
        Check.at_most("period_4", "the 2-cycle loses stability at r = sqrt(5) - 1: largest |onset of period 4 - "
                      "(sqrt(5) - 1)| over the replicates", miss(period_4, uv.R_PERIOD_4), tol,
                      what=f"{p.onset_tolerance_steps} grid steps"),
        Check.at_most("two_cycle", "on the 2-cycle the late mean sharpness x eta/2 is 1 + (r - 1)/4: largest deviation "
                      f"over the {len(cycle)} sweep runs with 1 < r < sqrt(5) - 1 (off the critical neighbourhoods)",
                      float(_capped(dev).max()) if len(dev) else float("nan"), p.fixed_point_tolerance,
                      what="fixed_point_tolerance")]


def uv_claims(p, large: pd.DataFrame, small: pd.DataFrame, runs: pd.DataFrame, mlp_df: pd.DataFrame,
              logistic: pd.DataFrame, wide: pd.DataFrame | None = None,
              widths: pd.DataFrame | None = None) -> tuple[list[Claim], list[Check]]:
    """The five claims and the checks. `large`, `small`: the two sweeps (one row per replicate and grid point);
    `runs`: per trajectory run (stages.trajectory_runs) its initial, early-minimum and late NTK, loss and divergence; `mlp_df`: one row per (lr, seed);
    `logistic`: :func:`logistic_sweep`; `wide`: d_catapult's positive-control runs (:func:`wide_early_runs` if None);
    `widths`: claim (d)'s width sweep (:func:`width_sweep` if None)."""
    return ([manifold_claim(p, large), route_claim(p, small, logistic), mlp_claim(p, mlp_df),
             large_lr_claim(p, runs, widths), catapult_claim(p, runs, wide)],
            fixed_point_checks(p, small) + [sharpening_check(p, runs)])
