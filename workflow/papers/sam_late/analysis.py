"""What the paper measures on a trained network: sharpness (top Hessian eigenvalues, Lanczos), the
loss along the straight line between two weights (linear mode connectivity, LMC.py), robust accuracy
under PGD, the escape's growth rate, and how much of a gap a partial arm closes.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from papers.common.hessian import lanczos
from papers.sam_late.sam import pgd


def sharpness(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, iters: int, k: int, seed: int) -> list[float]:
    """The `k` largest eigenvalues of the Hessian of the mean cross-entropy on (x, y), in eval mode.

    flatness.py does the same on the first 5,000 training images with scipy's Lanczos (eigsh).
    """
    model.eval()
    params = [p for p in model.parameters() if p.requires_grad]
    return lanczos(lambda: F.cross_entropy(model(x), y), params, iters=iters, k=k,
                   generator=torch.Generator().manual_seed(seed))


def interpolate_state(a: dict, b: dict, alpha: float) -> dict:
    """(1 - alpha) a + alpha b for every floating tensor of two state dicts (running statistics too,
    as LMC.py's interpolate_weights); integer buffers (batch counters) are taken from `a`."""
    return {k: (1 - alpha) * v + alpha * b[k] if v.is_floating_point() else v for k, v in a.items()}


def state_distance(a: dict, b: dict) -> float:
    """||b - a|| over every floating tensor of two state dicts (the weights' Euclidean distance)."""
    return float(torch.sqrt(sum(((b[k] - v) ** 2).sum() for k, v in a.items() if v.is_floating_point())))


def toward(a: dict, b: dict, distance: float) -> dict:
    """The state at `distance` from a on the straight line to b: a + distance (b - a) / ||b - a||."""
    return interpolate_state(a, b, distance / state_distance(a, b))


@torch.no_grad()
def loss_along_line(model: nn.Module, a: dict, b: dict, alphas, x, y) -> tuple[np.ndarray, np.ndarray]:
    """Mean cross-entropy and accuracy on (x, y) at each alpha of the line from state a (0) to state b (1)."""
    losses, accs = [], []
    model.eval()
    for alpha in alphas:
        model.load_state_dict(interpolate_state(a, b, float(alpha)))
        logits = model(x)
        losses.append(float(F.cross_entropy(logits, y)))
        accs.append(float((logits.argmax(1) == y).float().mean()))
    return np.array(losses), np.array(accs)


def barrier(alphas, losses) -> float:
    """The loss barrier of a line: max over alpha in [0, 1] of L(alpha) - ((1 - alpha) L(0) + alpha L(1)).

    0 when the loss along the line never rises above the chord between its ends (one convex valley).
    """
    alphas, losses = np.asarray(alphas, dtype=float), np.asarray(losses, dtype=float)
    inside = (alphas >= 0) & (alphas <= 1)
    l0, l1 = np.interp(0.0, alphas, losses), np.interp(1.0, alphas, losses)
    chord = (1 - alphas[inside]) * l0 + alphas[inside] * l1
    return float(np.max(losses[inside] - chord))


def line_fit(t, z) -> tuple[float, float, float]:
    """Least-squares z = a + b t; returns (a, b, R^2)."""
    t, z = np.asarray(t, dtype=float), np.asarray(z, dtype=float)
    b, a = np.polyfit(t, z, 1)
    ss_res = float(np.sum((z - (a + b * t)) ** 2))
    ss_tot = float(np.sum((z - z.mean()) ** 2))
    return float(a), float(b), 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")


def escape_fits(step, distance) -> dict:
    """Exponential growth d = d0 exp(r t) against a power law d = c t^k, both fitted on log d.

    Returns rate r (per step), R^2 of the exponential fit, exponent k and R^2 of the power law.
    """
    step, distance = np.asarray(step, dtype=float), np.asarray(distance, dtype=float)
    ok = distance > 0
    _, rate, r2_exp = line_fit(step[ok], np.log(distance[ok]))
    _, power, r2_pow = line_fit(np.log(step[ok]), np.log(distance[ok]))
    return {"rate": rate, "r2_exp": r2_exp, "power": power, "r2_pow": r2_pow}


def gap_fraction(baseline, full, partial):
    """(partial - baseline) / (full - baseline): the share of the baseline-to-full gap a partial arm closes
    (1 = as far as the full arm, 0 = no further than the baseline), elementwise over arrays (one entry per
    seed); NaN where the gap is zero."""
    baseline, full, partial = (np.asarray(v, dtype=float) for v in (baseline, full, partial))
    gap = full - baseline
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(gap != 0, (partial - baseline) / gap, np.nan)
    return float(share) if share.ndim == 0 else share


def robust_accuracy(model: nn.Module, x, y, attack, batch: int = 1000) -> float:
    """Accuracy on PGD inputs (no random start, as ERM_to_Adv.py's robust_evaluation)."""
    model.eval()
    correct = 0
    for i in range(0, len(x), batch):
        x_adv = pgd(model, x[i:i + batch], y[i:i + batch], epsilon=attack.epsilon, step_size=attack.step_size,
                    steps=attack.steps, random_start=False)
        with torch.no_grad():
            correct += int((model(x_adv).argmax(1) == y[i:i + batch]).sum())
    return correct / len(x)
