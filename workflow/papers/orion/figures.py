"""The report's figures: request-patching layer profiles, the oversight experiment, training curves."""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.plotting import savefig, subplots
from papers.orion.patching import CONTROL, HYPOTHESES

COLORS = {"R2(C2)": "tab:blue", "R1(C2)": "tab:red", "R1(C1)": "tab:green"}


def layer_profiles(sweep: pd.DataFrame, pairs: pd.DataFrame, path) -> None:
    """Normalised probability of each hypothesis against the patched layer (the paper's layer plots): one panel
    per model size (rows) and family (columns); lines are the mean over seeds, bands the 95% t interval over
    seeds; dashed: R1(C2) (red) and R2(C2) (blue) under the same-request control (patching.CONTROL). The title
    counts the seeds past the gate."""
    from papers.common.claims import t_interval

    models, families = list(dict.fromkeys(sweep.model)), list(dict.fromkeys(sweep.family))
    fig, axes = subplots(len(models), len(families), width=2.6, height=2.1, sharey=True)
    for i, model in enumerate(models):
        for j, family in enumerate(families):
            ax = axes[i, j]
            g = sweep[(sweep.model == model) & (sweep.family == family)]
            for source, style in (("request", "-"), (CONTROL, "--")):
                for h in HYPOTHESES if source == "request" else ("R1(C2)", "R2(C2)"):
                    r = g[(g.source == source) & (g.hypothesis == h)]
                    layers = sorted(r.layer.unique())
                    stats = [t_interval(r[r.layer == L].normalized.to_numpy()) for L in layers]
                    mean, lo, hi = (np.array(x) for x in zip(*stats))
                    ax.plot(layers, mean, style, marker="o" if source == "request" else None, ms=3, color=COLORS[h],
                            label=h if source == "request" else f"{h}, control")
                    ax.fill_between(layers, lo, hi, color=COLORS[h], alpha=0.15, lw=0)
            ax.axhline(0.7, color="grey", lw=0.6, ls=":")
            pp = pairs[(pairs.model == model) & (pairs.family == family)]
            ax.set_title(f"{model} / {family} ({int(pp.gated.sum())}/{len(pp)} gated)", fontsize=8)
            ax.set_xticks(sorted(g.layer.unique()))
            if i == len(models) - 1:
                ax.set_xlabel("patched layer L")
            if j == 0:
                ax.set_ylabel("p / p_clean")
    axes[0, 0].legend(fontsize=6)
    savefig(fig, path)


def oversight(over: pd.DataFrame, summary: pd.DataFrame, path) -> None:
    """Accuracy of the injected stories with the trusted prompt patched in at each layer (dashed: unpatched)."""
    over = over[over.trusted == "trusted"]
    models = list(dict.fromkeys(over.model))
    fig, axes = subplots(1, len(models), width=3.2, height=2.8, sharey=True)
    for ax, model in zip(axes[0], models):
        for condition, style in (("injected", "-"), ("clean", ":")):
            g = over[(over.model == model) & (over.condition == condition)].sort_values("layer")
            patched = g[g.layer >= 0]
            line, = ax.plot(patched.layer, patched.accuracy, style, marker="o", ms=3, label=f"{condition}, patched")
            ax.axhline(g[g.layer < 0].accuracy.iloc[0], color=line.get_color(), ls="--", lw=0.8,
                       label=f"{condition}, unpatched")
        chosen = summary[summary.model == model].layer.iloc[0]
        ax.axvline(chosen, color="grey", lw=0.6)
        ax.set_title(f"{model}: oversight at layer {chosen}", fontsize=8)
        ax.set_xlabel("patched layer L")
        ax.set_ylim(-0.02, 1.02)
    axes[0, 0].set_ylabel("accuracy")
    axes[0, 0].legend(fontsize=6)
    savefig(fig, path)


def training(hist: pd.DataFrame, gate: float, path) -> None:
    """Validation accuracy of the worst family during training, one line per seed (dotted: the accuracy gate);
    a seed's line stops where it was taken: orion.train.post_gate_steps past its gate, or at the step cap."""
    models = list(dict.fromkeys(hist.model))
    fig, axes = subplots(1, len(models), width=3.2, height=2.8, sharey=True)
    for ax, model in zip(axes[0], models):
        g = hist[hist.model == model]
        cols = [c for c in g.columns if c.startswith("eval/")]
        for seed, r in g.groupby("seed"):
            ax.plot(r.step, r[cols].min(axis=1), marker="o", ms=2, label=f"seed {seed}")
        ax.axhline(gate, color="grey", lw=0.6, ls=":")
        ax.set_title(model, fontsize=8)
        ax.set_xlabel("step")
    axes[0, 0].set_ylabel("validation accuracy, worst family")
    axes[0, 0].legend(fontsize=6)
    savefig(fig, path)
