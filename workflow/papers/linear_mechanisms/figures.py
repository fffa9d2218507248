"""The report's figures: trajectories of the mechanism points, the phase diagram, width scaling, the MLP."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap

from papers.common.plotting import savefig, subplots
from papers.linear_mechanisms.phase import LABELS

LABEL_COLORS = {"kernel": "#bbbbbb", "alignment": "#1f77b4", "disalignment": "#d62728", "rescaling": "#2ca02c",
                "mixed": "#ff7f0e"}
AXIS_NAMES = {"width": "width d", "sigma": "init scale sigma", "kappa_exponent": "alpha (kappa = d^-alpha)",
              "lr_ratio": "eta_u / eta_w"}


def trajectories(traj: pd.DataFrame, h: float, path) -> None:
    """Columns: mechanism points; rows: |cos(u, w)|, K / K0, |w| / |w0|, 1 - cos(w, w0). Lines exact, dots GD."""
    rows = [("|cos(u, w)|", lambda g, s: g[f"{s}_cos_uw"].abs()),
            ("K / K0", lambda g, s: g[f"{s}_ntk"] / g[f"{s}_ntk"].iloc[0]),
            ("|w| / |w0| (first layer)", lambda g, s: g[f"{s}_norm_w"]),
            ("1 - cos(w, w0)", lambda g, s: g[f"{s}_dir_w"])]
    points = list(dict.fromkeys(traj.point))
    fig, axes = subplots(len(rows), len(points), width=3.6, height=2.4)
    for j, point in enumerate(points):
        for seed, g in traj[(traj.point == point) & (traj.h == h)].groupby("seed"):
            g = g.sort_values("time")
            for i, (name, value) in enumerate(rows):
                ax = axes[i, j]
                line, = ax.plot(g.time, value(g, "exact"), lw=1.0, label=f"exact, seed {seed}")
                every = max(1, len(g) // 25)
                ax.plot(g.time.iloc[::every], value(g, "gd").iloc[::every], "o", ms=2.5, color=line.get_color())
                ax.set_xscale("symlog", linthresh=float(g.time.iloc[1]), linscale=0.2)
                if i == 0:
                    ax.set_title(point)
                if j == 0:
                    ax.set_ylabel(name)
                if i == len(rows) - 1:
                    ax.set_xlabel("gradient-flow time")
    axes[0, 0].legend(fontsize=6)
    savefig(fig, path)


def _heat(ax, table: pd.DataFrame, title: str, cmap="viridis", center=None) -> None:
    values = table.to_numpy(float)
    kwargs = {}
    if center is not None:
        lim = np.nanmax(np.abs(values)) or 1.0
        kwargs = dict(vmin=-lim, vmax=lim)
    im = ax.imshow(values, origin="lower", aspect="auto", cmap=cmap, **kwargs)
    ax.figure.colorbar(im, ax=ax, fraction=0.046)
    _ticks(ax, table)
    ax.set_title(title, fontsize=9)


def _ticks(ax, table: pd.DataFrame) -> None:
    ax.set_xticks(range(table.shape[1]), [f"{v:g}" for v in table.columns], fontsize=7)
    ax.set_yticks(range(table.shape[0]), [f"{v:g}" for v in table.index], fontsize=7)
    ax.set_xlabel(AXIS_NAMES.get(table.columns.name, table.columns.name))
    ax.set_ylabel(AXIS_NAMES.get(table.index.name, table.index.name))


def phase_diagram(cells: pd.DataFrame, axes_of: dict, path) -> None:
    """One row per panel: NTK change, change of |cos(u, w)|, first-layer norm ratio and turn, labels (letters: predicted)."""
    panels = list(axes_of)
    fig, axes = subplots(len(panels), 5, width=4.2, height=3.3)
    cmap = ListedColormap([LABEL_COLORS[k] for k in LABELS])
    for i, panel in enumerate(panels):
        c = cells[cells.panel == panel].copy()
        x, y = axes_of[panel]
        c["log_ntk"] = np.log10(c.gd_ntk_change.clip(lower=1e-8))
        c["dcos"] = c.gd_cos - c.gd_cos0
        c["log_norm_w"] = np.log10(c.gd_norm_w)
        c["log_dir_w"] = np.log10(c.gd_dir_w.clip(lower=1e-12))
        c["code"] = [LABELS.index(v) for v in c.measured]
        pivot = lambda col: c.pivot(index=y, columns=x, values=col)  # noqa: E731
        _heat(axes[i, 0], pivot("log_ntk"), f"{panel}: log10 |K_T / K_0 - 1|")
        _heat(axes[i, 1], pivot("dcos"), "|cos(u,w)|: final - initial", cmap="RdBu_r", center=0)
        _heat(axes[i, 2], pivot("log_norm_w"), "log10 |w_T| / |w_0|", cmap="PiYG", center=0)
        _heat(axes[i, 3], pivot("log_dir_w"), "log10 (1 - cos(w_T, w_0))", cmap="magma")
        ax = axes[i, 4]
        codes = pivot("code")
        ax.imshow(codes.to_numpy(float), origin="lower", aspect="auto", cmap=cmap, vmin=-0.5, vmax=len(LABELS) - 0.5)
        predicted = c.pivot(index=y, columns=x, values="predicted")
        for (r, q), label in np.ndenumerate(predicted.to_numpy()):
            ax.text(q, r, label[0].upper(), ha="center", va="center", fontsize=8)
        _ticks(ax, codes)
        ax.set_title("measured (colour) vs predicted (letter)", fontsize=9)
    handles = [axes[0, 4].plot([], [], "s", color=LABEL_COLORS[k], label=k)[0] for k in LABELS]
    axes[0, 4].legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    savefig(fig, path)


def scaling(cells: pd.DataFrame, panel: str, path) -> None:
    """NTK change against width for every kappa exponent: GD (seed mean, dots), typical prediction (dashed)."""
    fig, axes = subplots(1, 1, width=5.0, height=3.8)
    ax = axes[0, 0]
    for alpha, g in cells[cells.panel == panel].groupby("kappa_exponent"):
        g = g.sort_values("width")
        line, = ax.plot(g.width, g.gd_ntk_change, "o-", label=f"kappa = d^-{alpha:g}")
        ax.plot(g.width, g.pred_ntk_change, "--", color=line.get_color(), lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("width d")
    ax.set_ylabel("|K_T / K_0 - 1| (dashed: prediction)")
    ax.legend(fontsize=7)
    savefig(fig, path)


def nonlinear(mlp: pd.DataFrame, path) -> None:
    """MLP on images: NTK change and test accuracy against the init scale (mean +- std over seeds)."""
    fig, axes = subplots(1, 2, width=4.2, height=3.4)
    for ax, key, name in ((axes[0, 0], "ntk_change", "||K_T - K_0|| / ||K_0||"), (axes[0, 1], "test_accuracy", "test accuracy")):
        ax.errorbar(mlp.init_scale, mlp[key], yerr=mlp[f"{key}_std"], marker="o", capsize=3)
        ax.set_xscale("log")
        ax.set_xlabel("init scale sigma")
        ax.set_ylabel(name)
    axes[0, 0].set_yscale("log")
    axes[0, 0].set_title("two-layer tanh MLP")
    savefig(fig, path)
