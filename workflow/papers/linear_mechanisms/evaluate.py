"""The linear_mechanisms evaluation: GD against the exact solution, the learned states of the mechanism points
and their labels, the phase diagram's measured and predicted labels, the width scaling, the MLP's arms.
The rules call it through :func:`papers.linear_mechanisms.stages.evaluate`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.io import read_parquet, read_parquets, write_json
from papers.linear_mechanisms import exact, phase
from papers.linear_mechanisms.params import parse

OBSERVABLES = ("F", "ntk", "cos_uw", "norm_u", "norm_w", "dir_u", "dir_w")
SUMMARY = ("ntk_change", "cos0", "cos", "norm_w", "dir_w", "norm_u", "dir_u")
ERROR_OBSERVABLES = ("F", "ntk", "cos_uw", "norm_u", "norm_w")
THRESHOLD_KEYS = ("kernel_ntk", "cos_change", "rescale_dir", "rescale_norm")


def xy(regression):
    df = read_parquet(regression)
    return df.x.to_numpy(), df.y.to_numpy()


def thresholds(p) -> dict:
    return {k: getattr(p.thresholds, k) for k in THRESHOLD_KEYS}


def label(row, prefix: str, thresholds: dict) -> str:
    return phase.classify(*(row[f"{prefix}{k}"] for k in ("ntk_change", "cos0", "cos", "norm_w", "dir_w")), **thresholds)


def trajectory_errors(traj: pd.DataFrame) -> pd.DataFrame:
    """max_t |GD - exact| / max_t |exact| per (point, seed, h, observable)."""
    rows = []
    for (point, seed, h), g in traj.groupby(["point", "seed", "h"]):
        for key in ERROR_OBSERVABLES:
            scale = g[f"exact_{key}"].abs().max()
            rows.append({"point": point, "seed": seed, "h": h, "observable": key,
                         "error": float((g[f"gd_{key}"] - g[f"exact_{key}"]).abs().max() / scale)})
    return pd.DataFrame(rows)


def point_states(traj: pd.DataFrame, h: float) -> pd.DataFrame:
    """The learned state (last record vs first) of each (point, seed) in the run at step `h`."""
    run = traj[traj.h == h].sort_values(["point", "seed", "record"], kind="stable")
    first, last = run.groupby(["point", "seed"]).head(1), run.groupby(["point", "seed"]).tail(1)  # same row order
    obs0 = {k: first[f"gd_{k}"].to_numpy() for k in OBSERVABLES}
    obs = {k: last[f"gd_{k}"].to_numpy() for k in OBSERVABLES}
    df = last[["point", "seed", *phase.HYPER, "time"]].reset_index(drop=True)
    for k, v in phase.summarise(obs, obs0).items():
        df[f"gd_{k}"] = v
    return df


def evaluate(*, cfg, regression, trajectories, grids, runs, metrics):
    """Claim metrics: GD vs exact errors, mechanism labels, phase-diagram agreement, width scaling, MLP."""
    p = parse(cfg)
    th = thresholds(p)
    m2, mxy = exact.moments(*xy(regression))
    traj = read_parquet(trajectories)

    # (a) exact vs GD
    err = trajectory_errors(traj)
    by_h = err.groupby("h").error.max()
    coarse, fine = p.trajectory_step, p.trajectory_step / 2

    # (c) mechanism points: seed-mean learned state, measured and predicted labels
    states = point_states(traj, coarse)
    points = []
    for name, grid in p.points.items():
        g = states[states.point == name]
        mean = g.mean(numeric_only=True)
        hyper = grid.points()[0]
        pred = {f"pred_{k}": float(v) for k, v in phase.predict(**hyper, m2=m2, mxy=mxy).items()}
        rec = {"point": name, **hyper, **{f"gd_{k}": float(mean[f"gd_{k}"]) for k in SUMMARY},
               **{f"gd_{k}_std": float(g[f"gd_{k}"].std(ddof=1)) if len(g) > 1 else 0.0 for k in SUMMARY}, **pred,
               **phase.numbers(**hyper, target=mxy / m2)}
        rec["measured"], rec["predicted"] = label(rec, "gd_", th), label(rec, "pred_", th)
        points.append(rec)

    # phase diagram: seed-mean measured label vs the typical-initialisation prediction at every panel point
    grid = read_parquets(grids)
    cells = grid.drop(columns="converged").groupby(["panel", *phase.HYPER]).mean(numeric_only=True).reset_index()
    cells["measured"] = [label(r, "gd_", th) for _, r in cells.iterrows()]
    cells["predicted"] = [label(r, "pred_", th) for _, r in cells.iterrows()]
    cells["agree"] = cells.measured == cells.predicted
    gd_vs_exact = float((grid.gd_ntk_change - grid.exact_ntk_change).abs().max())
    unconverged = int((~grid.converged).sum())

    # (b) width scaling on the scaling panel
    scaling = cells[cells.panel == p.scaling_panel]

    def curve(exponent):
        c = scaling[scaling.kappa_exponent == exponent].sort_values("width")
        return dict(zip(c.width.astype(int), c.gd_ntk_change))

    ntk_curve, mf_curve = curve(p.ntk_exponent), curve(p.mean_field_exponent)
    slope = float(np.polyfit(np.log(list(ntk_curve)), np.log(list(ntk_curve.values())), 1)[0])

    # (d), (e) the nonlinear check: every arm (init scales, the mean-field rescaling arm, the frozen-first-layer
    # ablations), seed means
    mlp_runs = read_parquets(runs)
    planted = mlp_runs[mlp_runs.arm.str.startswith("planted")]  # e_alignment's positive control (linear, 1 output)
    mlp_runs = mlp_runs[~mlp_runs.arm.str.startswith("planted")]
    if "output_multiplier" not in mlp_runs:
        mlp_runs = mlp_runs.assign(output_multiplier=1.0)
    mlp = (mlp_runs.groupby(["arm", "init_scale"])
           .agg(lr_ratio=("lr_ratio", "first"), output_exponent=("output_exponent", "first"),
                output_multiplier=("output_multiplier", "first"),
                ntk_change=("ntk_change", "mean"), ntk_change_std=("ntk_change", "std"),
                test_accuracy=("test_accuracy", "mean"), test_accuracy_std=("test_accuracy", "std"),
                train_loss=("train_loss", "mean"), train_loss_std=("train_loss", "std"),
                steps_run=("steps_run", "mean"), converged=("converged", "sum"),
                alignment0=("alignment0", "mean"), alignment=("alignment", "mean"), dir_w=("dir_w", "mean"), norm_w=("norm_w", "mean"),
                diverged=("diverged", "sum"), seeds=("seed", "count"))
           .reset_index().fillna({"ntk_change_std": 0.0, "test_accuracy_std": 0.0, "train_loss_std": 0.0}))

    write_json({
        "moments": {"m2": m2, "mxy": mxy, "target": mxy / m2},
        "errors": {"max_by_h": {str(h): float(v) for h, v in by_h.items()}, "coarse_h": coarse, "fine_h": fine,
                   "max_coarse": float(by_h[coarse]), "max_fine": float(by_h[fine]),
                   "ratio": float(by_h[coarse] / by_h[fine]),
                   "by_point": err[err.h == coarse].groupby("point").error.max().to_dict()},
        "points": points,
        "cells": cells.drop(columns=["seed"]).to_dict("records"),
        "agreement": float(cells.agree.mean()),
        "agreement_by_panel": cells.groupby("panel").agree.mean().to_dict(),
        "phase_gd_vs_exact_ntk_change": gd_vs_exact,
        "phase_unconverged_runs": unconverged,
        "scaling": {"ntk": ntk_curve, "mean_field": mf_curve, "ntk_slope": slope},
        "mlp": mlp.to_dict("records"),
        "planted": (planted.groupby("arm").agg(alignment0=("alignment0", "mean"), alignment=("alignment", "mean"),
                                               train_loss=("train_loss", "mean"), steps_run=("steps_run", "mean"),
                                               converged=("converged", "sum"), seeds=("seed", "count"))
                    .reset_index().to_dict("records")),
    }, metrics)
