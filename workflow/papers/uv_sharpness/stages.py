"""The uv_sharpness DAG's stages:
prepare (digits) -> trajectories, bifurcation sweep, MLP training (per learning rate and seed)
-> evaluate -> report. Each function takes its parameters and paths explicitly.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from papers.common.claims import Scope, write_claims
from papers.common.io import read_json, read_parquet, read_parquets, write_json, write_parquet
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.progress import progress
from papers.common.report import write_report
from papers.common.seeding import seed_everything
from papers.common.tables import mean_std, write_table
from papers.uv_sharpness import uv
from papers.uv_sharpness.claims import (ONSETS, _interval_text, catapult_products, grid_step, logistic_sweep,
                                         onsets_per_seed, uv_claims, width_sweep)
from papers.uv_sharpness.params import SLUG, parse

log = logging.getLogger(__name__)

TITLE = "P12 uv_sharpness: Universal sharpness dynamics: fixed points, edge of stability and route to chaos (UV model)"


def _init(seed: int, n: int, scale: float):
    """u, v with i.i.d. N(0, scale^2) entries: one independent draw per seed (its own generator), shared by
    every eta and init scale of that seed, so that seeds are independent initial conditions."""
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, scale, n), rng.normal(0.0, scale, n)


# ---- prepare ---------------------------------------------------------------------------------
def prepare(*, cfg, digits):
    """The real-network check's images, the first `train_size` of the training set, pixels in [0, 1], flattened:
    sklearn's digits (1,797 real 8x8 images ship in its wheel, or a digits CSV at `path`) or CIFAR-10 (the
    paper's data, from the user's cifar-10-batches-py folder or .npz at `path`; 3 x 32 x 32, channel-major)."""
    from papers.common.datasets import load_cifar, load_digits

    p = parse(cfg)
    x, labels = load_cifar(p.mlp.path, "train") if p.mlp.dataset == "cifar10" else load_digits(p.mlp.path)
    n = p.mlp.train_size
    if n > len(labels):
        raise ValueError(f"uv_sharpness.mlp.train_size = {n} exceeds the {len(labels)} training images")
    x = x[:n].reshape(n, -1)
    df = pd.DataFrame(x, columns=[f"px{i}" for i in range(x.shape[1])])
    df["label"] = labels[:n]
    write_parquet(df, digits)


# ---- UV trajectories (parameter space) -------------------------------------------------------
def _simulate(runs, p, steps: int) -> pd.DataFrame:
    """GD on (u, v) for runs (init scale, r, seed, product), all at once, `steps` steps; f, Theta, sharpness per step."""
    u = np.stack([_init(seed, p.width, s)[0] for s, _, seed, _ in runs])
    v = np.stack([_init(seed, p.width, s)[1] for s, _, seed, _ in runs])
    eta = np.array([r * 2 / p.lambda_min for _, r, _, _ in runs])
    f = np.empty((len(runs), steps + 1))
    theta = np.empty_like(f)
    with np.errstate(over="ignore", invalid="ignore"):
        for t in progress(range(steps + 1), desc="uv trajectories"):
            f[:, t], theta[:, t] = uv.output(u, v, p.x), uv.ntk(u, v, p.x)
            u, v = uv.gd_step(u, v, p.x, p.y, eta)
    frames = []
    for i, (s, r, seed, c) in enumerate(runs):
        frames.append(pd.DataFrame({"init_scale": s, "ratio": r, "product": c, "seed": seed, "step": np.arange(steps + 1),
                                    "f": f[i], "ntk": theta[i],
                                    "sharpness": uv.sharpness(f[i], theta[i], p.x, p.y, p.width)}))
    return pd.concat(frames, ignore_index=True)


def trajectories(*, cfg, trajectory):
    """GD on (u, v) for every (init scale, eta ratio, seed) at once, `steps` steps; and claims (d), (d_catapult)'s
    runs (column `product`, NaN for the ratio runs): the largest init scale at each set eta Theta_0 of
    :func:`catapult_products`, eta = product / Theta_0 from each run's own Theta_0, for the early phase
    (`early_steps`) only. f, Theta and sharpness per step."""
    p = parse(cfg)
    ratio_runs = [(s, r, seed, np.nan) for s in p.init_scales for r in p.trajectory_ratios for seed in range(p.seeds)]
    s_large = max(p.init_scales)
    product_runs = []
    for c in catapult_products(p):
        for seed in range(p.seeds):
            u0, v0 = _init(seed, p.width, s_large)
            product_runs.append((s_large, c / uv.ntk(u0, v0, p.x) / (2 / p.lambda_min), seed, float(c)))
    write_parquet(pd.concat([_simulate(ratio_runs, p, p.steps), _simulate(product_runs, p, p.early_steps)],
                            ignore_index=True), trajectory)




# ---- bifurcation sweep (function space) ------------------------------------------------------
# The stream each sweep replicate draws its example (x, y) and grid offset from (its init comes from _init(seed)).
INSTANCE_STREAM = 1


def sweep_instance(p, seed: int, init_ntk: float) -> dict:
    """One replicate of a sweep: its example (x, y), drawn log-uniformly in `example_range`; its init scale sigma,
    set so that Theta_0 / lambda_min = `init_ntk` (E Theta_0 = 2 sigma^2 x^2, lambda_min = 2|x y|/sqrt(n)), so
    that eta Theta_0 = 2 r init_ntk whatever (x, y); and its grid offset, a uniform fraction of a grid step
    (`grid_jitter`), so that replicates resolve the bifurcations on different grids.

    In r = eta / (2 / lambda_min) the dynamics on the EoS manifold is one map for every example (uv.eos_map), so
    replicates that differ only in the initial point reach the same attractor and would measure the same onsets:
    the grid offset is what makes their spread show the grid's resolution."""
    rng = np.random.default_rng([seed, INSTANCE_STREAM])
    lo, hi = np.log(p.example_range[0]), np.log(p.example_range[1])
    x, y = np.exp(rng.uniform(lo, hi, 2))
    sigma = float(np.sqrt(init_ntk * abs(y / x) / np.sqrt(p.width)))
    return {"x": float(x), "y": float(y), "sigma": sigma, "offset": float(rng.uniform()) if p.grid_jitter else 0.0}


def sweep(*, cfg, init, points, orbits):
    """Iterate the (f, Theta) map over a grid of eta for every replicate from the named init (sweep_inits): period,
    Lyapunov exponent, late imbalance and orbit per (replicate, grid point)."""
    p = parse(cfg)
    h = (p.sweep_range[1] - p.sweep_range[0]) / (p.sweep_points - 1)
    index = np.arange(p.sweep_points)
    inst = [sweep_instance(p, seed, p.sweep_inits[init]) for seed in range(p.seeds)]
    x = np.array([i["x"] for i in inst])[:, None]  # (S, 1): broadcast over the grid
    y = np.array([i["y"] for i in inst])[:, None]
    ratios = p.sweep_range[0] + (index[None, :] + np.array([i["offset"] for i in inst])[:, None]) * h  # (S, P)
    lam_min = uv.lambda_min(x, y, p.width)
    f0, theta0 = [], []
    for seed, i in enumerate(inst):
        u, v = _init(seed, p.width, i["sigma"])
        f0.append(uv.output(u, v, i["x"])); theta0.append(uv.ntk(u, v, i["x"]))
    f0, theta0 = np.array(f0)[:, None], np.array(theta0)[:, None]
    imbalance0 = uv.imbalance(f0, theta0, x, p.width)[:, 0]
    shape = ratios.shape
    eta = ratios * 2 / lam_min
    f_late, lam_late, lyap, diverged, imbalance = uv.iterate(
        np.broadcast_to(f0, shape), np.broadcast_to(theta0, shape), x, y, p.width, eta, p.steps, p.late_window)
    rows, orbit_rows = [], []
    for seed, i in enumerate(inst):
        for j in index:
            r, e = float(ratios[seed, j]), float(eta[seed, j])
            period = uv.detect_period(f_late[seed, j] / i["y"], max_period=p.max_period, rtol=p.period_rtol)
            rows.append({"init": init, "seed": seed, "index": int(j), "ratio": r, "eta": e, "x": i["x"], "y": i["y"],
                         "eta_theta0": e * float(theta0[seed, 0]), "imbalance0": float(imbalance0[seed]),
                         "period": period, "lyapunov": lyap[seed, j], "diverged": bool(diverged[seed, j]),
                         "label": uv.classify(period, lyap[seed, j], bool(diverged[seed, j])),
                         "sharpness_over_2_eta": float(np.mean(lam_late[seed, j]) * e / 2),
                         "imbalance": float(imbalance[seed, j])})
            last = f_late[seed, j, -max(64, p.max_period):] / i["y"]  # g = f / y: one full period of any orbit
            orbit_rows.append(pd.DataFrame({"init": init, "seed": seed, "ratio": r, "g": last}))
    write_parquet(pd.DataFrame(rows), points)
    write_parquet(pd.concat(orbit_rows, ignore_index=True), orbits)


# ---- real network ----------------------------------------------------------------------------
def train_mlp(*, cfg, digits, lr, seed, history):
    """Full-batch GD of the network (mlp.architecture) on the images at one learning rate; sharpness every few steps."""
    import torch

    from papers.uv_sharpness import mlp

    p = parse(cfg)
    seed_everything(seed)
    df = read_parquet(digits)
    x = torch.tensor(df.drop(columns="label").to_numpy(), dtype=torch.float32)
    if p.mlp.architecture == "cnn":
        x = x.reshape(len(df), *mlp.CIFAR_SHAPE)  # (N, 3, 32, 32), as prepare flattened it
    labels = torch.tensor(df.label.to_numpy())
    hist = mlp.train(x, labels, architecture=p.mlp.architecture, hidden=p.mlp.hidden, lr=lr, steps=p.mlp.steps, sharpness_every=p.mlp.sharpness_every,
                     power_iterations=p.mlp.power_iterations, seed=seed,
                     progress=lambda it: progress(it, desc=f"mlp lr={lr} seed={seed}", total=p.mlp.steps + 1))
    hist.insert(0, "lr", lr)
    hist.insert(1, "seed", seed)
    write_parquet(hist, history)


# ---- evaluate --------------------------------------------------------------------------------
def trajectory_runs(traj: pd.DataFrame, p) -> pd.DataFrame:
    """Per trajectory run (init scale, ratio, seed; `product` = its set eta Theta_0, NaN for the ratio runs), on
    the NTK Theta (the paper's function-space sharpness, which the early mechanisms move; the Hessian's top
    eigenvalue adds |f - y| x / sqrt(n), large at a small init and gone at a minimum): the initial Theta_0,
    eta Theta_0, the lasting early reduction 1 - Theta(step `early_steps`) / Theta_0 (`reduction`, where the early
    phase ends; `sharpness_reduction`: the same on lambda_max, NaN without a `sharpness` column), the transient dip
    1 - min / Theta_0 over the first `early_steps` steps and the step of that minimum (`dip`, `dip_step`: a large
    learning rate's first steps swing f and Theta, which then recovers), the rise late mean / Theta_0 - 1; on the
    loss L = (f - y)^2 / 2: the early peak over L_0 (> 1: a loss rise, the catapult's signature), L at the end of
    the early phase over L_0, the late mean over L_0; and the first step at which the run diverged (f not finite or
    |f| > 1e6 (1 + |y|); NaN if never). The product runs stop after the early phase: their late quantities are NaN."""
    rows = []
    for (s, r, seed), g in traj.groupby(["init_scale", "ratio", "seed"]):
        g = g.sort_values("step")
        eta = r * 2 / p.lambda_min
        f = g.f.to_numpy()
        bad = ~np.isfinite(f) | (np.abs(np.nan_to_num(f, nan=np.inf)) > 1e6 * (1 + abs(p.y)))
        diverged_step = float(g.step.iloc[int(np.argmax(bad))]) if bad.any() else float("nan")
        ntk = g.ntk.to_numpy()
        lam0 = float(ntk[0])
        hess = g["sharpness"].to_numpy() if "sharpness" in g else np.full(len(g), np.nan)  # the Hessian's lambda_max
        early = ntk[:p.early_steps + 1]
        low = int(np.nanargmin(early)) if np.isfinite(early).any() else 0
        late = float(g.ntk.iloc[-p.late_window:].mean())
        loss = 0.5 * (f - p.y) ** 2
        product = float(g["product"].iloc[0])
        late_ok = np.isnan(product)  # the product runs cover the early phase only
        rows.append({"init_scale": s, "ratio": r, "product": product, "seed": seed,
                     "initial_sharpness": lam0, "eta_theta0": eta * lam0,
                     "early_min": float(early[low]), "early_end": float(ntk[p.early_steps]),
                     "late_mean": late if late_ok else np.nan, "reduction": 1 - float(ntk[p.early_steps]) / lam0,
                     "dip": 1 - float(early[low]) / lam0, "dip_step": float(g.step.iloc[low]),
                     "sharpness_reduction": float(1 - hess[p.early_steps] / hess[0]),
                     "rise": late / lam0 - 1 if late_ok else np.nan,
                     "early_loss_peak": float(np.max(loss[1:p.early_steps + 1]) / loss[0]),
                     "early_loss_end": float(loss[p.early_steps] / loss[0]),
                     "loss_ratio": float(loss[-p.late_window:].mean() / loss[0]) if late_ok else np.nan,
                     "diverged": bool(bad.any()), "diverged_step": diverged_step})
    return pd.DataFrame(rows)


def evaluate(*, cfg, trajectory, points, histories, metrics):
    """EoS statistics and early-time changes of the trajectories, the sweeps' orbit labels, and the MLP's
    initial and late sharpness and its training loss."""
    p = parse(cfg)
    traj = read_parquet(trajectory)
    late = traj[traj["product"].isna() & (traj.step > p.steps - p.late_window)]  # the ratio runs
    eos = (late.assign(eta=2 * late.ratio / p.lambda_min)
           .groupby(["init_scale", "ratio", "seed"])
           .apply(lambda g: float(g.sharpness.mean() * g.eta.iloc[0] / 2), include_groups=False)
           .rename("sharpness_over_2_eta").reset_index())
    pts = read_parquets(points)
    hist = read_parquets(histories)
    from papers.uv_sharpness.mlp import late_mean

    mlp_rows = []
    for (lr, seed), g in hist.groupby(["lr", "seed"]):
        g = g.sort_values("step")
        mlp_rows.append({"lr": lr, "seed": seed, "two_over_eta": 2 / lr,
                         "initial_sharpness": float(g.sharpness.iloc[0]),
                         "late_sharpness": late_mean(g), "initial_loss": float(g.loss.iloc[0]),
                         "final_loss": float(g.loss.iloc[-1]), "final_accuracy": float(g.accuracy.iloc[-1])})
    write_json({
        "lambda_min": p.lambda_min,
        "trajectory_eos": eos.to_dict("records"),
        "trajectory_runs": trajectory_runs(traj, p).to_dict("records"),
        "labels": {init: {k: int(v) for k, v in g.label.value_counts().items()} for init, g in pts.groupby("init")},
        "mlp": mlp_rows,
    }, metrics)


# ---- report ----------------------------------------------------------------------------------
def _index_curve(pts: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per grid index of a sweep: the replicates' mean ratio and mean `column` (replicates' ratios differ by their
    grid offsets, within one grid step)."""
    return pts.groupby("index").agg(ratio=("ratio", "mean"), value=(column, "mean")).sort_values("ratio")


def _table(p, m, eos, runs, small, large, mlp_df, widths=None) -> pd.DataFrame:
    """One row per measured quantity, ours beside the paper's statement (or our fixed-point prediction)."""
    rows = []

    def row(quantity, measured, mean, std, paper):
        rows.append({"quantity": quantity, "measured": measured, "mean": mean, "std": std, "paper": paper})

    for (s, r), g in eos.groupby(["init_scale", "ratio"]):
        x = g.sharpness_over_2_eta
        diverged = int(x.isna().sum())
        row(f"UV late sharpness x eta/2 (sigma={s}, eta = {r} x 2/lambda_min)",
            mean_std(x, 4) if not diverged else f"{diverged}/{len(g)} runs diverged", x.mean(),
            x.std(ddof=1) if len(g) > 1 else float("nan"),
            f"1 at EoS; 2-cycle: {uv.two_cycle_sharpness_ratio(r):.4g}" if uv.R_PERIOD_2 < r < uv.R_PERIOD_4
            else "1 at EoS (r > 1)" if r > 1 else "< 1 (converges to a minimum)")
    for (s, r), g in runs[runs["product"].isna()].groupby(["init_scale", "ratio"]):
        lam = g.eta_theta0.mean()
        row(f"UV lasting early NTK reduction 1 - Theta(step {p.early_steps})/Theta_0 (sigma={s}, r = {r}, eta Theta_0 = "
            f"{lam:.3g} seed mean)",
            mean_std(g.reduction, 3), g.reduction.mean(), g.reduction.std(ddof=1) if len(g) > 1 else float("nan"),
            "reduction from a large init at a large learning rate; none at eta Theta_0 < 1")
        row(f"UV NTK rise late/Theta_0 - 1 (sigma={s}, r = {r}, eta Theta_0 = {lam:.3g} seed mean)",
            mean_std(g.rise, 3), g.rise.mean(), g.rise.std(ddof=1) if len(g) > 1 else float("nan"),
            "progressive sharpening if eta Theta_0 < 1")
    for (s, c), g in runs[runs["product"].notna()].groupby(["init_scale", "product"]):
        ok = g[~g.diverged]
        div = g.diverged_step.dropna()
        steps = ok.dip_step.dropna().astype(int)
        row(f"UV lasting early NTK reduction 1 - Theta(step {p.early_steps})/Theta_0 (sigma={s}, eta Theta_0 = {c:g} "
            "per run; runs that did not diverge); transient dip 1 - min/Theta_0 and the step of the minimum",
            f"{mean_std(ok.reduction, 3)}; dip {mean_std(ok.dip, 3)}"
            + (f" at step {steps.min()}-{steps.max()}" if len(steps) else ""), ok.reduction.mean(),
            ok.reduction.std(ddof=1) if len(ok) > 1 else float("nan"),
            "the catapult's reduction if eta Theta_0 in (2, 4)" if c > 2 else
            "claim (d): a reduction without the catapult" if c == p.catapult_products["below"] else
            "claim (d): the ablation, no reduction" if c == p.catapult_products["ablation"] else
            "claims (d_catapult): comparison")
        row(f"UV early loss peak / initial loss (sigma={s}, eta Theta_0 = {c:g}); diverged runs", 
            f"{mean_std(ok.early_loss_peak, 3)}; {len(div)}/{len(g)} diverged"
            + (f" (at steps {', '.join(str(int(t)) for t in sorted(div))})" if len(div) else ""),
            ok.early_loss_peak.mean(), ok.early_loss_peak.std(ddof=1) if len(ok) > 1 else float("nan"),
            "> 1 (a loss rise) in the catapult window (2, 4) only")
    c = p.catapult_products
    for w in (widths.itertuples() if widths is not None else ()):  # claim (d) and d_catapult across widths
        for name, what, paper in (
                ("d", f"reduction at eta Theta_0 = {c['below']:g} (no loss rise) - at {c['ablation']:g}",
                 "claim (d) (stated at n = {p.width}): above change_threshold"),
                ("window_gain", f"reduction at {c['stop']:g} (catapult) - at {c['below']:g} (no loss rise)",
                 "the catapult's extra reduction at one point of its window (not a statement of the paper)"),
                ("diff_in_diff", f"d_catapult's difference in differences across the onset (D = {p.onset_span:g})",
                 "extension: above change_threshold")):
            row(f"UV early NTK, n = {w.width} (function-space map, sigma={max(p.init_scales)}): {what}; mean [95% t "
                f"interval] over {getattr(w, name + '_seeds')} seeds",
                f"{getattr(w, name):.3g} [{getattr(w, name + '_low'):.3g}, {getattr(w, name + '_high'):.3g}]",
                getattr(w, name), float("nan"), paper.format(p=p))
    predicted = {"period_2": uv.R_PERIOD_2, "period_4": uv.R_PERIOD_4}
    for name in ("period_2", "period_4", "period_8", "chaos", "divergence"):
        per_seed = onsets_per_seed(small, ONSETS[name] if name != "period_2" else ONSETS["not_period_1"])
        found = per_seed[np.isfinite(per_seed)]
        row(f"small init: first eta/(2/lambda_min) with {name.replace('_', ' ')} (mean [95% t interval] over "
            f"replicates; grid step {grid_step(p):.3g})", _interval_text(per_seed),
            float(found.mean()) if found.size else float("nan"), float(found.std(ddof=1)) if found.size > 1 else float("nan"),
            f"fixed points: {predicted[name]:.5g}" if name in predicted else "period doubling, then chaos")
    dev = _index_curve(small.assign(dev=(small.sharpness_over_2_eta - 1).abs()), "dev")
    for target in np.arange(1.05, p.sweep_range[1] + 1e-9, 0.05):  # the measured EoS curve, every 0.05 in r
        i = (dev.ratio - target).abs().idxmin()
        r, v = dev.ratio[i], dev.value[i]
        row(f"small init: |late sharpness x eta/2 - 1| at r = {r:.4g} (replicate mean)", f"{v:.4g}", v, float("nan"),
            f"2-cycle: {(r - 1) / 4:.4g}" if r < uv.R_PERIOD_4 else "near 2/eta (EoS)")
    for name, pts in (("small", small), ("large", large)):
        imb = _index_curve(pts, "imbalance")
        above, below = imb.value[imb.ratio > 1], imb.value[imb.ratio < 1]
        if len(above) and len(below):
            row(f"'{name}' sweep init (Theta_0/lambda_min = {p.sweep_inits[name]:g}): late imbalance 1 - 4kf^2/Theta^2, max "
                f"over r > 1 / min over r < 1 (replicate means; initial {pts.imbalance0.mean():.3g})",
                f"{above.max():.3g} / {below.min():.3g}", float(above.max()), float("nan"),
                "0 on the EoS manifold u || v (r > 1); a minimum off it (r < 1) if the init is off it")
        labels = m["labels"][name]
        row(f"'{name}' sweep init: sweep points by orbit (replicates x points)",
            ", ".join(f"{k}: {v}" for k, v in sorted(labels.items())), float("nan"), float("nan"),
            "periods 2^k, then chaos with periodic windows")
    for lr, g in mlp_df.groupby("lr"):
        x = g.late_sharpness * lr / 2
        control = bool(np.isclose(lr, p.mlp.control_lr))
        row(f"{p.mlp.architecture.upper()} late sharpness x eta/2 (eta = {lr}{', the ablation' if control else ''})",
            mean_std(x, 4), x.mean(), x.std(ddof=1) if len(g) > 1 else float("nan"),
            f"below 1: 2/eta = {2 / lr:g} out of reach (claim c's control)" if control
            else "about 1 (edge of stability in real networks)")
    return pd.DataFrame(rows)


def _bifurcation_figure(p, small, large, orbits, path) -> None:
    """Bifurcation diagram (replicate 0 of the small-init sweep), Lyapunov exponent, late sharpness against the
    2-cycle's prediction, and the late imbalance of both sweeps."""
    fig, axes = subplots(4, 1, width=6.5, height=2.6)
    o = orbits[(orbits.init == "small") & (orbits.seed == 0)]
    axes[0, 0].plot(o.ratio, o.g, ",k", alpha=0.6)
    axes[0, 0].set_ylabel("late-time f / y")
    axes[0, 0].set_title("Bifurcation diagram of the UV model (small init, replicate 0)")
    q = small[small.seed == 0].sort_values("ratio")
    axes[1, 0].plot(q.ratio, q.lyapunov, lw=0.8)
    axes[1, 0].axhline(0, color="grey", lw=0.6)
    axes[1, 0].set_ylabel("Lyapunov exponent")
    dev = _index_curve(small.assign(dev=(small.sharpness_over_2_eta - 1).abs()), "dev")
    axes[2, 0].plot(dev.ratio, dev.value, lw=0.8, label="measured (replicate mean)")
    cyc = dev.ratio[(dev.ratio > uv.R_PERIOD_2) & (dev.ratio < uv.R_PERIOD_4)].to_numpy()
    axes[2, 0].plot(cyc, uv.two_cycle_sharpness_ratio(cyc) - 1, "--", lw=0.8, label="2-cycle: (r - 1)/4")
    axes[2, 0].set_ylabel("|sharpness eta/2 - 1|"); axes[2, 0].legend(fontsize=7)
    for name, pts in (("small", small), ("large", large)):
        imb = _index_curve(pts, "imbalance")
        axes[3, 0].semilogy(imb.ratio, np.maximum(imb.value, 1e-17), lw=0.8, label=f"{name} sweep init (Theta_0/lambda_min = {p.sweep_inits[name]:g})")
    axes[3, 0].axhline(p.manifold_tolerance, color="tab:red", lw=0.6, ls=":", label="manifold_tolerance")
    axes[3, 0].set_ylabel("1 - 4kf^2/Theta^2"); axes[3, 0].set_xlabel("eta / (2 / lambda_min)")
    axes[3, 0].legend(fontsize=7)
    for k in ("period_2", "period_4", "period_8", "chaos"):
        on = onsets_per_seed(small, ONSETS[k])
        if np.isfinite(on).any():
            for ax in axes[:, 0]:
                ax.axvline(np.nanmean(on), color="tab:red", lw=0.5, ls=":")
    for ax in axes[:, 0]:
        ax.axvline(uv.R_PERIOD_4, color="tab:green", lw=0.5, ls="--")
    savefig(fig, path)


def _onset_text(p, runs: pd.DataFrame) -> str:
    """The measured catapult onset, for the report's differences (computed, not typed)."""
    from papers.common.claims import t_interval
    from papers.uv_sharpness.claims import catapult_onsets, early_arms

    if not runs["product"].notna().any():
        return ""
    arms = early_arms(runs)
    onset, *_ = catapult_onsets(arms, p.catapult_products["start"])
    found = arms["products"][onset[onset >= 0]]
    if not found.size:
        return "No early-phase run's loss rose on the eta Theta_0 grid: no catapult onset was found."
    m, lo, hi = t_interval(found)
    return (f"The catapult (a loss rise) starts at eta Theta_0 = {m:.3g} [{lo:.3g}, {hi:.3g}] over {found.size} of "
            f"{onset.size} seeds at n = {p.width}, from {found.min():.3g} to {found.max():.3g} by seed: at finite width "
            "the first step changes Theta by terms in eta^2 (f - y)^2 x^2 / n, so claim (d_catapult) locates each "
            "seed's onset rather than assuming eta Theta_0 = 2 (the infinite-width onset).")


def _early_panel(p, runs: pd.DataFrame, ax) -> None:
    """Claims (d), (d_catapult): early reduction against the set eta Theta_0, one line per seed, its catapult onset
    (first loss rise) marked."""
    from papers.uv_sharpness.claims import catapult_onsets, early_arms

    if not runs["product"].notna().any():
        return
    arms = early_arms(runs)
    onset, *_ = catapult_onsets(arms, p.catapult_products["start"])
    for s in range(arms["reduction"].shape[0]):
        line, = ax.plot(arms["products"], arms["reduction"][s], lw=0.6, alpha=0.7)
        if onset[s] >= 0:
            ax.plot(arms["products"][onset[s]], arms["reduction"][s, onset[s]], "o", ms=3, color=line.get_color())
    ax.axvline(2, color="grey", lw=0.6, ls="--")
    ax.set_xlabel("eta Theta_0 (set per run)"); ax.set_ylabel(f"lasting early reduction 1 - Theta({p.early_steps}) / Theta_0")
    ax.set_title(f"init scale {max(p.init_scales)}: dots = catapult onset (first loss rise)")


def scope(p) -> Scope:
    net = ("a small tanh MLP on sklearn's 8x8 digits stands in for the paper's CIFAR-10 networks"
           if p.mlp.dataset == "digits" else f"a {p.mlp.architecture.upper()} on a CIFAR-10 subset ({p.mlp.train_size} images)")
    return Scope("replication", f"the paper's UV model on one example, simulated exactly (claims a, b, d, d_catapult); for the "
                                f"real-network claim (c) {net}")


def report(*, cfg, scale, metrics, trajectory, points, orbits, histories, benchmarks, table_md, table_csv, claims,
           params_json, report_md, verdicts, fig_trajectories, fig_bifurcation, fig_mlp):
    p = parse(cfg)
    m = read_json(metrics)
    eos = pd.DataFrame(m["trajectory_eos"])
    runs = pd.DataFrame(m["trajectory_runs"])
    mlp_df = pd.DataFrame(m["mlp"])
    pts = read_parquets(points)
    small, large = pts[pts.init == "small"], pts[pts.init == "large"]

    widths = width_sweep(p)
    table = _table(p, m, eos, runs, small, large, mlp_df, widths)
    caption = (f"UV model (n = {p.width}; trajectories at (x, y) = ({p.x}, {p.y}), lambda_min = {p.lambda_min:.4g}; "
               f"each sweep replicate draws its own (x, y) log-uniformly in {list(p.example_range)}) and a "
               f"{p.mlp.architecture.upper()} on {p.mlp.dataset}; mean +- std over {p.seeds} UV seeds and {p.mlp.seeds} "
               "network seeds; onsets: mean [95% t interval] over replicates. 'fixed points' / '2-cycle': our "
               "prediction from the paper's map.")
    write_table(table[["quantity", "measured", "paper"]], table_md, table_csv, caption=caption,
                csv_df=table[["quantity", "mean", "std"]])

    # --- figures
    traj = read_parquet(trajectory)
    fig, axes = subplots(1, len(p.init_scales) + 1, width=4.8, height=3.6)
    for ax, s in zip(axes[0], p.init_scales):
        for r in p.trajectory_ratios:
            g = traj[(traj.init_scale == s) & (traj.ratio == r) & (traj.seed == 0)]
            line, = ax.plot(g.step + 1, g.sharpness, lw=0.8, label=f"eta = {r} x 2/lambda_min")
            ax.axhline(p.lambda_min / r, color=line.get_color(), ls="--", lw=0.8)  # 2/eta
        ax.set_xscale("log"); ax.set_yscale("log")
        ax.set_xlabel("step + 1"); ax.set_ylabel("sharpness (dashed: 2/eta)")
        ax.set_title(f"UV model, init scale {s}")
        ax.legend(fontsize=7)
    _early_panel(p, runs, axes[0, -1])
    savefig(fig, fig_trajectories)
    _bifurcation_figure(p, small, large, read_parquets(orbits), fig_bifurcation)

    hist = read_parquets(histories)
    fig, axes = subplots(1, 2, width=4.8, height=3.6)
    for lr, g in hist[hist.seed == 0].groupby("lr"):
        s = g.dropna(subset=["sharpness"])
        line, = axes[0, 0].plot(s.step, s.sharpness, label=f"eta = {lr}")
        axes[0, 0].axhline(2 / lr, color=line.get_color(), ls="--", lw=0.8)
        axes[0, 1].plot(g.step, g.loss, color=line.get_color(), lw=0.8, label=f"eta = {lr}")
    axes[0, 0].set_xlabel("step"); axes[0, 0].set_ylabel("sharpness (dashed: 2/eta)"); axes[0, 0].legend(fontsize=7)
    axes[0, 1].set_xlabel("step"); axes[0, 1].set_ylabel("train MSE"); axes[0, 1].set_yscale("log")
    axes[0, 0].set_title(f"{p.mlp.architecture.upper()} on {p.mlp.dataset}, full-batch GD")
    savefig(fig, fig_mlp)

    # --- claims: intervals over replicates, each behind premise gates and beside a negative control; the
    # fixed-point conditions are checks
    claims_list, checks = uv_claims(p, large, small, runs, mlp_df, logistic_sweep(p), widths=widths)
    write_claims(claims_list, claims, paper=SLUG, scale=scale, scope=scope(p), checks=checks)
    write_json(to_dict(p), params_json)

    what = (f"UV model with n = {p.width}. Trajectories: GD on (u, v) for {p.steps} steps at (x, y) = ({p.x}, {p.y}) "
            f"(lambda_min = {p.lambda_min:.4g}) from init scales {list(p.init_scales)} at eta = r x 2/lambda_min, r in "
            f"{list(p.trajectory_ratios)}, {p.seeds} seeds, sharpness in closed form; and, for claims (d) and "
            f"(d_catapult), {p.early_steps}-step early phases from init scale {max(p.init_scales)} with eta set from each "
            f"run's own Theta_0 at eta Theta_0 = {p.catapult_products['ablation']:g} (the ablation), "
            f"{p.catapult_products['below']:g} (claim d's run below the catapult) and {p.catapult_products['start']:g}, "
            f"{p.catapult_products['start'] + p.catapult_products['step']:g}, ..., {p.catapult_products['stop']:g}, "
            f"{p.seeds} seeds; the same early phases on the exact function-space map at n = "
            f"{', '.join(str(w) for w in sorted({int(w) for w in p.width_sweep} | {p.width}))} (claim d's width sweep) "
            f"and {p.positive_width} (d_catapult's positive control). Bifurcation sweeps: the exact "
            f"(f, Theta) map for {p.steps} steps at {p.sweep_points} values of r in {list(p.sweep_range)}, from two "
            f"initialisations (Theta_0 / lambda_min = {p.sweep_inits['small']:g}, small, and "
            f"{p.sweep_inits['large']:g}, named large: off the EoS manifold"
            + (", below lambda_min" if p.sweep_inits["large"] < 1 else "") + f"), {p.seeds} replicates each; a replicate draws its own example (x, y) "
            f"log-uniformly in {list(p.example_range)}, its own initial point and "
            + ("its own grid offset (a uniform fraction of a grid step)" if p.grid_jitter else "the same grid")
            + f"; period (any p <= {p.max_period}) from the last {p.late_window} steps of f, largest Lyapunov exponent "
            "from the map's Jacobian, imbalance 1 - 4kf^2/Theta^2 (0 on the EoS manifold u || v). Positive control of "
            "the route detection: the logistic map through the same code. Fixed points: the EoS 2-cycle and its "
            f"stability in closed form (papers/uv_sharpness/uv.py), as checks. Real network: {p.mlp.architecture.upper()} "
            f"({p.mlp.hidden} {'channels' if p.mlp.architecture == 'cnn' else 'hidden units'}, tanh) on the first "
            f"{p.mlp.train_size} {p.mlp.dataset} images, full-batch GD on the MSE for {p.mlp.steps} steps at eta in "
            f"{list(p.mlp.learning_rates)} and at {p.mlp.control_lr:g} (claim c's ablation: 2/eta out of reach), "
            f"{p.mlp.seeds} seeds, sharpness every {p.mlp.sharpness_every} steps by "
            f"{p.mlp.power_iterations} power iterations.")
    differences = (
        "The UV analysis is the paper's own model; we simulate it in parameter space and in its exact function-space "
        "form (a test checks the two agree to machine precision). The fixed-point predictions (the 2-cycle's mean "
        "sharpness (2/eta)(1 + (r - 1)/4), period 4 at r = sqrt(5) - 1) are our derivation from the paper's update "
        "equations; the paper's text was not available offline to check its own numbers, so they are reported as "
        "checks of our derivation against our simulation, not as claims. In r = eta / (2/lambda_min) the dynamics on "
        "the EoS manifold is one map for every example, so sweep replicates differ in (x, y), initial point and grid "
        "offset, and their onsets spread by the grid's resolution. "
        + ("The paper's real-world checks train CNNs and fully connected networks on CIFAR-10 subsets; here a small "
           "tanh MLP on sklearn's 8x8 digits (which ship with scikit-learn); the full scale reads CIFAR-10 from a "
           "user-given path. " if p.mlp.dataset == "digits" else
           f"The real-world check trains a {p.mlp.architecture.upper()} on {p.mlp.train_size} CIFAR-10 images, as the "
           "paper's. ")
        + "The Feigenbaum ratio is an extra we report, not a claim of the paper. " + _onset_text(p, runs))
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[fig_trajectories, fig_bifurcation, fig_mlp], claims=claims_list, checks=checks,
                 benchmarks=benchmarks, differences=differences, scope=scope(p), verdicts_figure=verdicts)
