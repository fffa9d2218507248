"""The report's figures: test curves per epoch, the rho sweep, the mechanism (escape and line losses), robust
accuracy, and the switch sweep ("how late is late enough"). Clean labels, the claims' runs, unless said."""
from __future__ import annotations

import numpy as np

from papers.common.plotting import savefig, subplots
from papers.sam_late.analysis import line_fit
from papers.sam_late.evaluate import NO_SAM
from papers.sam_late.params import ADV_ARMS, SAM_ARMS, early_arm, sweep_arm

COLORS = {"sgd": "tab:blue", "sam": "tab:green", "late_sam": "tab:orange", "early_sam": "tab:purple",
          "adv": "tab:red", "late_adv": "tab:brown", "early_adv": "tab:pink", "late_rand": "tab:olive",
          "late_clean": "tab:gray"}


def _std(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(values.std(ddof=1)) if values.size > 1 else 0.0


def curves(p, hist, path) -> None:
    """Test loss and training loss per epoch (the paper's test-error curves of SGD, SAM and the switch)."""
    hist = hist[hist.labels == "clean"]
    fig, axes = subplots(1, 2, width=5.0, height=3.6)
    for arm in ("sgd", *SAM_ARMS, *ADV_ARMS):
        g = hist[(hist.arm == arm) & (np.isclose(hist.rho, p.rho) | (hist.rho == NO_SAM))]
        curve = g.groupby("epoch")[["test_loss", "train_loss"]].mean()
        curve = curve[curve.index >= p.epochs // 3]  # the paper's curves also omit the first epochs
        tested = curve.test_loss.dropna()  # the test set is evaluated every history_every epochs
        axes[0, 0].plot(tested.index, tested, color=COLORS[arm], lw=1, label=arm)
        axes[0, 1].plot(curve.index, curve.train_loss, color=COLORS[arm], lw=1, label=arm)
    for ax in axes[0]:
        ax.axvline(p.switch_epoch, color="grey", ls=":", lw=0.8)
        ax.set_xlabel("epoch")
    axes[0, 0].set_ylabel("test loss (clean labels)")
    axes[0, 1].set_ylabel("training loss (batch mean)")
    axes[0, 1].set_yscale("log")
    axes[0, 0].legend(fontsize=7)
    axes[0, 0].set_title(f"rho = {p.rho}; dotted: switch epoch; first {p.epochs // 3} epochs omitted", fontsize=9)
    savefig(fig, path)


def rho_sweep(p, m, path) -> None:
    """Final test loss and sharpness against rho (clean labels)."""
    m = m[m.labels == "clean"]
    fig, axes = subplots(1, 2, width=4.5, height=3.4)
    for ax, col, label in ((axes[0, 0], "test_loss", "test loss"), (axes[0, 1], "eig_1", "top Hessian eigenvalue")):
        base = m[m.arm == "sgd"][col]
        ax.axhline(base.mean(), color=COLORS["sgd"], lw=1, label="sgd")
        for arm in SAM_ARMS:
            g = m[m.arm == arm].groupby("rho")[col]
            ax.errorbar(g.mean().index, g.mean(), yerr=g.agg(_std), color=COLORS[arm], marker="o", ms=3, lw=1,
                        capsize=2, label=arm)
        ax.set_xticks(list(p.rhos))
        ax.set_xlabel("rho")
        ax.set_ylabel(label)
    axes[0, 0].legend(fontsize=7)
    savefig(fig, path)


def mechanism(p, esc, sam_fits, lines, path, escape_rho: float | None = None) -> None:
    """The escape on a log scale (late SAM at `escape_rho`, the rho claim (c) is decided at; default the main rho),
    and the loss along the line from w_switch (late SAM at the main rho)."""
    esc = esc[esc.labels == "clean"]
    r_esc = p.rho if escape_rho is None else escape_rho
    fig, axes = subplots(1, 2, width=4.8, height=3.6)
    ax = axes[0, 0]
    for arm in ("late_sam", "sgd"):
        g = esc[(esc.arm == arm) & (np.isclose(esc.rho, r_esc) | (arm == "sgd"))]
        for seed, s in g.groupby("seed"):
            ax.plot(s.step, s.distance, color=COLORS[arm], lw=0.8, alpha=0.8,
                    label=(f"{arm} (rho {r_esc})" if arm == "late_sam" else arm) if seed == 0 else None)
    if len(sam_fits):
        t = np.arange(1, p.escape_steps + 1)
        g = esc[(esc.arm == "late_sam") & np.isclose(esc.rho, r_esc)]
        a, b, _ = line_fit(g.step, np.log(g.distance.clip(lower=1e-12)))
        ax.plot(t, np.exp(a + b * t), color="k", ls="--", lw=0.8, label="exponential fit (all seeds)")
    ax.set_yscale("log")
    ax.set_xlabel("step after the switch")
    ax.set_ylabel("||w_t - w_switch||")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for kind, color in (("switch_to_late_sam", COLORS["late_sam"]), ("switch_to_late_adv", COLORS["late_adv"]),
                        ("matched_distance", "grey")):
        g = lines[(lines.kind == kind) & (np.isclose(lines.rho, p.rho) | (kind != "switch_to_late_sam"))]
        for seed, s in g.groupby("seed"):
            ax.plot(s.alpha, s.loss, color=color, lw=0.8, label=kind if seed == 0 else None)
    ax.axvline(0, color="k", lw=0.5)
    ax.axvline(1, color="k", lw=0.5)
    ax.set_xlabel("alpha: (1 - alpha) w_a + alpha w_b")
    ax.set_ylabel("training loss")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    savefig(fig, path)


def robust(p, m, path) -> None:
    """Clean and robust test accuracy of the main arms (clean labels)."""
    m = m[m.labels == "clean"]
    fig, axes = subplots(1, 1, width=6.0, height=3.4)
    arms = ["sgd", *SAM_ARMS, *ADV_ARMS]
    sel = m[(m.rho == NO_SAM) | np.isclose(m.rho, p.rho)]
    for i, (col, label) in enumerate((("test_acc", "clean"), ("robust_acc", f"PGD eps={p.attack.epsilon}"))):
        g = sel.groupby("arm")[col]
        axes[0, 0].bar(np.arange(len(arms)) + 0.4 * i, g.mean().reindex(arms), width=0.4,
                       yerr=g.agg(_std).reindex(arms), capsize=2, label=label)
    axes[0, 0].set_xticks(np.arange(len(arms)) + 0.2, arms, fontsize=7, rotation=30)
    axes[0, 0].set_ylabel("test accuracy")
    axes[0, 0].legend(fontsize=7)
    savefig(fig, path)


def switch_sweep(p, m, path, seed_shares) -> None:
    """The switch sweep (the paper's "how late is late enough"): per-seed share of the SGD -> SAM gap that late SAM
    closes against the number of late SAM epochs, mean and 95% t interval over seeds; early SAM for reference.
    `seed_shares(m, arm, full, col, rho, full_rho)` gives the per-seed shares."""
    from papers.common.claims import t_interval

    ks = sorted([p.late_epochs, *p.late_ks])
    fig, axes = subplots(1, 3, width=4.0, height=3.4)
    for ax, col, label in ((axes[0, 0], "test_loss", "test loss"), (axes[0, 1], "test_acc", "test accuracy"),
                           (axes[0, 2], "eig_1", "top Hessian eigenvalue")):
        stats = [t_interval(seed_shares(m, "late_sam" if k == p.late_epochs else sweep_arm(k), "sam", col,
                                        p.rho, p.rho)) for k in ks]
        mid = np.array([x[0] for x in stats])
        ax.errorbar(ks, mid, yerr=[mid - [x[1] for x in stats], [x[2] for x in stats] - mid], color="tab:orange",
                    marker="o", ms=3, lw=1, capsize=2, label="late SAM (last K epochs)")
        early = np.nanmean(seed_shares(m, "early_sam", "sam", col, p.rho, p.rho))
        ax.axhline(early, color="tab:purple", ls="--", lw=1, label=f"early SAM (first {p.late_epochs}, then SGD)")
        for k in p.early_ks:
            ax.axhline(np.nanmean(seed_shares(m, early_arm(k), "sam", col, p.rho, p.rho)), color="tab:purple", ls="-.",
                       lw=1, label=f"early SAM (first {k}, then SGD)")
        ax.axhline(p.gap_fraction_min, color="grey", ls=":", lw=0.8, label="gap_fraction_min")
        ax.axhline(1.0, color="tab:green", lw=0.8, label="SAM throughout")
        ax.axhline(0.0, color="tab:blue", lw=0.8, label="SGD")
        ax.set_xlabel(f"K: SAM for the last K of {p.epochs} epochs")
        ax.set_ylabel("share of the SGD -> SAM gap closed")
        ax.set_title(label, fontsize=9)
    axes[0, 0].legend(fontsize=6)
    savefig(fig, path)
