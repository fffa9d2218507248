"""The report's figures: request-patching layer profiles, the oversight experiment, training curves."""
from __future__ import annotations

import pandas as pd

from papers.common.plotting import savefig, subplots
from papers.orion.patching import HYPOTHESES

COLORS = {"R2(C2)": "tab:blue", "R1(C2)": "tab:red", "R1(C1)": "tab:green"}


def layer_profiles(sweep: pd.DataFrame, pairs: pd.DataFrame, path) -> None:
    """Normalised probability of each hypothesis against the patched layer (the paper's layer plots):
    one panel per model (rows) and family (columns), seed 0."""
    sweep = sweep[sweep.seed == sweep.seed.min()]
    models, families = list(dict.fromkeys(sweep.model)), list(dict.fromkeys(sweep.family))
    fig, axes = subplots(len(models), len(families), width=2.6, height=2.1, sharey=True)
    for i, model in enumerate(models):
        for j, family in enumerate(families):
            ax = axes[i, j]
            g = sweep[(sweep.model == model) & (sweep.family == family)]
            for h in HYPOTHESES:
                r = g[g.hypothesis == h].sort_values("layer")
                ax.plot(r.layer, r.normalized, marker="o", ms=3, color=COLORS[h], label=h)
            ax.axhline(0.7, color="grey", lw=0.6, ls=":")
            gated = pairs[(pairs.model == model) & (pairs.family == family)].gated.iloc[0]
            ax.set_title(f"{model} / {family}" + ("" if gated else " (excluded)"), fontsize=8,
                         color="black" if gated else "grey")
            ax.set_xticks(sorted(g.layer.unique()))
            if i == len(models) - 1:
                ax.set_xlabel("patched layer L")
            if j == 0:
                ax.set_ylabel("p / p_clean")
    axes[0, 0].legend(fontsize=6)
    savefig(fig, path)


def oversight(over: pd.DataFrame, summary: pd.DataFrame, path) -> None:
    """Accuracy of the injected stories with the trusted prompt patched in at each layer (dashed: unpatched)."""
    over = over[over.seed == over.seed.min()]
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
    """Held-out accuracy per family during training (dotted: the accuracy gate)."""
    hist = hist[hist.seed == hist.seed.min()]
    models = list(dict.fromkeys(hist.model))
    fig, axes = subplots(1, len(models), width=3.2, height=2.8, sharey=True)
    for ax, model in zip(axes[0], models):
        g = hist[hist.model == model]
        for col in [c for c in g.columns if c.startswith("eval/")]:
            ax.plot(g.step, g[col], label=col.removeprefix("eval/"))
        ax.axhline(gate, color="grey", lw=0.6, ls=":")
        ax.set_title(model, fontsize=8)
        ax.set_xlabel("step")
    axes[0, 0].set_ylabel("held-out accuracy")
    axes[0, 0].legend(fontsize=6)
    savefig(fig, path)
