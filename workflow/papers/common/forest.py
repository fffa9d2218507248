"""Forest plots of verdicts: each claim's effect and interval against its threshold, with its negative and
positive controls beside it, so that a reader sees at a glance what decided each verdict.

* :func:`forest_plot` -- one paper: a row per claim, each on its own axis and in its own units;
* :func:`summary_forest_plot` -- every paper: all claims on one axis, each effect shown as its signed
  distance from the threshold in units of the claim's own interval half-width (right of 0 is the side
  the claim asks for), so that claims in different units line up at their thresholds.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from papers.common.claims import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, Claim, deciding
from papers.common.plotting import savefig, subplots

COLOURS = {HOLDS: "tab:green", FAILS: "tab:red", INCONCLUSIVE: "tab:orange", NOT_MEASURED: "tab:gray"}
# A standardised margin beyond this many half-widths is drawn at the edge (the summary's axis).
CLIP = 6.0


def _row_label(claim: Claim) -> str:
    gates = "" if not claim.premise else ("premise met" if claim.premise_met else "premise NOT met")
    return f"({claim.id}) {claim.verdict}" + (f"\n{gates}" if gates else "")


def _draw(ax, y: float, e, colour: str, marker: str, label: str | None) -> None:
    lo, hi = e.interval
    ax.plot([lo, hi], [y, y], color=colour, lw=2.2, solid_capstyle="butt")
    ax.plot([e.effect], [y], marker=marker, color=colour, ms=6, label=label, ls="none")


def forest_plot(claims: Sequence[Claim], path) -> None:
    """One row per claim: the deciding test's effect and 95% interval (coloured by the claim's verdict),
    the negative control's (grey) and the positive control's (blue) beside it, the threshold as a dashed
    line with the side the claim asks for shaded. A conjunction shows its deciding part."""
    claims = list(claims)
    fig, axes = subplots(max(len(claims), 1), 1, width=7.0, height=1.05)
    for ax, claim in zip(axes[:, 0], claims):
        e = deciding(claim.evidence)
        ax.set_yticks([])
        ax.set_ylabel(_row_label(claim), rotation=0, ha="right", va="center", fontsize=8,
                      color=COLOURS[claim.verdict])
        if e is None:
            ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="gray")
            ax.set_xticks([])
            continue
        rows = [(2, e, COLOURS[claim.verdict], "o", "claim")]
        ctl = deciding(claim.control.evidence)
        if ctl is not None:
            rows.append((1, ctl, "0.45", "s", f"negative control ({claim.control.kind})"))
        pos = deciding(claim.positive_control.evidence) if claim.positive_control is not None else None
        if pos is not None:
            rows.append((0, pos, "tab:blue", "D", "positive control"))
        finite = [x for _, t, *_ in rows for x in (*t.interval, t.effect) if np.isfinite(x)] + [e.threshold]
        span = (max(finite) - min(finite)) or max(abs(e.threshold), 1.0)
        left, right = min(finite) - 0.08 * span, max(finite) + 0.08 * span
        for y, t, colour, marker, label in rows:
            if np.isfinite(t.interval[0]):
                _draw(ax, y, t, colour, marker, label)
        ax.axvline(e.threshold, color="k", ls="--", lw=1)
        if e.direction == ">":
            ax.axvspan(e.threshold, right, color="tab:green", alpha=0.06)
        else:
            ax.axvspan(left, e.threshold, color="tab:green", alpha=0.06)
        ax.set_xlim(left, right)
        ax.set_ylim(-0.6, 2.6)
        name = f" [{e.name}]" if e.name and not isinstance(claim.evidence, list) else \
            (f" [deciding part: {e.name}]" if e.name else "")
        ax.set_title(f"effect {e.direction} {e.threshold:.3g} ({claim.threshold_source.kind}){name}", fontsize=7,
                     loc="left")
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    if not claims:
        axes[0, 0].text(0.5, 0.5, "no claims", ha="center", va="center")
    savefig(fig, path)


def margin(value: float, threshold: float, direction: str, scale: float) -> float:
    """The signed distance of `value` from `threshold` on the side the claim asks for, in units of `scale`."""
    sign = 1.0 if direction == ">" else -1.0
    return sign * (value - threshold) / scale


def standardised(test: dict, scale: float | None = None) -> tuple[float, float, float] | None:
    """(effect, low, high) of a claims.json test as margins in units of `scale` (default: its own half-width),
    the interval's ends ordered; None when it measured nothing."""
    lo, hi = test["interval"]
    if test["effect"] is None or lo is None or hi is None:
        return None
    if scale is None:
        scale = (hi - lo) / 2
    if not scale > 0:  # a zero-width interval: measure in units of the threshold's size instead
        scale = max(abs(test["threshold"] or 0.0), abs(test["effect"]), 1e-12) * 0.05
    ends = sorted(margin(x, test["threshold"], test["direction"], scale) for x in (lo, hi))
    return margin(test["effect"], test["threshold"], test["direction"], scale), ends[0], ends[1]


def summary_forest_plot(rows: Sequence[dict], path) -> None:
    """Every claim of every paper (`rows`: the claims.json claim dicts with a ``paper`` key added) on one
    axis: the effect's signed distance from the threshold in half-widths of the claim's interval, with the
    controls in the same units. A claim holds when its whole bar lies right of 0."""
    rows = list(rows)
    fig, axes = subplots(1, 1, width=8.0, height=max(2.0, 0.19 * len(rows) + 1.0))
    ax = axes[0, 0]
    labels = []
    for i, c in enumerate(rows):
        y = len(rows) - 1 - i
        labels.append(f"{c['paper']} {c['id']}")
        ev = c.get("evidence")
        if not ev:
            ax.text(0, y, "not measured", fontsize=6, va="center", ha="center", color="gray")
            continue
        half = (ev["interval"][1] - ev["interval"][0]) / 2 if None not in ev["interval"] else None
        main = standardised(ev)
        if main is None:
            continue
        scale = half if half and half > 0 else None
        for test, dy, colour, marker in ((c["control"].get("evidence"), -0.25, "0.45", "s"),
                                         ((c.get("positive_control") or {}).get("evidence"), 0.25, "tab:blue", "D")):
            if test:
                s = standardised(test, scale)
                if s is not None:
                    m, lo, hi = np.clip(s, -CLIP, CLIP)
                    ax.plot([lo, hi], [y + dy, y + dy], color=colour, lw=1)
                    ax.plot([m], [y + dy], marker=marker, color=colour, ms=3)
        m, lo, hi = np.clip(main, -CLIP, CLIP)
        colour = COLOURS[c["verdict"]]
        ax.plot([lo, hi], [y, y], color=colour, lw=2.2)
        ax.plot([m], [y], "o", color=colour, ms=4)
        if any(not g["met"] for g in c.get("premise", [])):
            ax.text(CLIP * 1.02, y, "premise unmet", fontsize=5, va="center", color="tab:orange")
    ax.axvline(0, color="k", ls="--", lw=1)
    ax.axvspan(0, CLIP, color="tab:green", alpha=0.05)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels[::-1], fontsize=6)
    ax.set_xlim(-CLIP, CLIP * 1.25)
    ax.set_ylim(-1, len(rows))
    ax.set_xlabel("signed distance from the threshold, in half-widths of the claim's 95% interval "
                  f"(right: the side the claim asks for; clipped at +-{CLIP:g}); grey: negative control, blue: positive",
                  fontsize=7)
    savefig(fig, path)
