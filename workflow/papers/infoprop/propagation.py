"""Rollout propagation schemes and Infoprop's information loss and termination (the paper's Sec. 4-5).

Each scheme maps every member's prediction, means mu (E, B, D) and variances s2 (E, B, D) in data units,
to one sample of the next output per rollout (B, D). Per output dimension, independently:

* **MBPO** (random member): pick e uniformly, draw N(mu_e, s2_e). Epistemic spread (which member) and
  aleatoric noise (the member's variance) both enter the sample.
* **Ensemble mean**: the mean of the members' means; no noise (the expectation propagation of PETS).
* **Infoprop** (Sec. 4, Eqs. 7-10; official ``gaussian_mlp.py: info_sample_1d``): fuse the members,

  .. math::
      s^2 = \\Big(\\tfrac1E \\sum_e s_e^{-2}\\Big)^{-1}, \\qquad m = s^2 \\tfrac1E \\sum_e \\mu_e / s_e^2, \\qquad
      e^2 = \\tfrac1E \\sum_e (\\mu_e - m)^2,

  read a random member's draw z ~ N(mu_e, s2_e) as a noisy observation of the true next state, whose
  observation noise is the epistemic part e2, and condition on it (a Kalman update):

  .. math::
      K = \\frac{s^2}{s^2 + e^2}, \\qquad m' = m + K (z - m), \\qquad v = (1 - K) s^2, \\qquad
      \\hat y \\sim \\mathcal N(m', v).

  If z ~ N(m, s2 + e2), the marginal of y is N(m, s2): the aleatoric part only.
* **Infoprop, K = 1** (the negative control): the same step with the gain forced to 1, so m' = z and
  v = 0: no epistemic removal, which is random-member sampling again.

Information loss (Sec. 5; official ``infoprop_dyna.py``): the entropy of the conditional N(m', v) in bits above
the entropy of a uniform cell of the resolution delta (1e-6),
:math:`H = \\max(0, \\tfrac12 \\log_2(2 \\pi e v) - \\log_2 \\delta)`, per dimension and step; a rollout stops
(and the transition of that step is dropped) when any dimension's H exceeds lambda1 or any dimension's sum of H
along the rollout exceeds lambda2, both per dimension from one-step predictions on real data: lambda1 = its 0.9999
quantile, lambda2 = horizon x its 0.01 quantile.
"""
from __future__ import annotations

import math

import numpy as np
import torch


def fuse(mu: torch.Tensor, s2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused mean m, fused (aleatoric) variance s2 and epistemic variance e2: (E, B, D) -> (B, D) each."""
    fused_var = 1.0 / (1.0 / s2).mean(0)
    fused_mean = fused_var * (mu / s2).mean(0)
    epistemic = ((mu - fused_mean) ** 2).mean(0)
    return fused_mean, fused_var, epistemic


def random_member_draw(mu, s2, generator) -> torch.Tensor:
    """z ~ N(mu_e, s2_e) with e uniform per rollout (the same member for all dimensions, as the official code)."""
    E, B, _ = mu.shape
    member = torch.randint(E, (B,), generator=generator)
    rows = torch.arange(B)
    eps = torch.randn(mu.shape[1:], generator=generator, dtype=mu.dtype)
    return mu[member, rows] + s2[member, rows].sqrt() * eps


def infoprop_moments(mu, s2, z, unit_gain: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Conditional mean m' and variance v of the Infoprop step given the draw z: (B, D) each.

    With `unit_gain` the Kalman gain is forced to 1 (the K = 1 control): m' = z, v = 0.
    """
    m, fused_var, epistemic = fuse(mu, s2)
    if unit_gain:
        return z, torch.zeros_like(m)
    gain = fused_var / (fused_var + epistemic)
    # (1 - K) s2 written as s2 e2 / (s2 + e2): no cancellation where the members agree (K near 1).
    return m + gain * (z - m), fused_var * epistemic / (fused_var + epistemic)


def step(scheme: str, mu, s2, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One propagated sample (B, D) of `scheme` and, for the Infoprop schemes, its conditional variance v."""
    if scheme == "mbpo":
        return random_member_draw(mu, s2, generator), None
    if scheme == "mean":
        return mu.mean(0), None
    if scheme in ("infoprop", "infoprop_k1"):
        z = random_member_draw(mu, s2, generator)
        mean, var = infoprop_moments(mu, s2, z, unit_gain=scheme == "infoprop_k1")
        eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
        return mean + var.sqrt() * eps, var
    raise ValueError(f"infoprop: unknown propagation scheme {scheme!r}")


def information_loss(var, resolution: float):
    """H = max(0, 0.5 log2(2 pi e v) - log2(resolution)) in bits, elementwise (numpy or torch in, numpy out)."""
    v = np.asarray(var.cpu().numpy() if isinstance(var, torch.Tensor) else var, dtype=float)
    with np.errstate(divide="ignore"):
        h = 0.5 * np.log2(2 * math.pi * math.e * v) - math.log2(resolution)
    return np.clip(h, 0.0, np.inf)


def thresholds(loss_on_data: np.ndarray, horizon: int, upper_quantile: float, lower_quantile: float):
    """lambda1 (per-step) and lambda2 (accumulated), per dimension, from one-step losses on real data (N, D)."""
    lambda1 = np.quantile(loss_on_data, upper_quantile, axis=0)
    lambda2 = horizon * np.quantile(loss_on_data, lower_quantile, axis=0)
    return lambda1, lambda2


def stop_step(losses: np.ndarray, lambda1: np.ndarray, lambda2: np.ndarray) -> np.ndarray:
    """Per rollout, the first step (0-based) whose transition is dropped; H if none. losses (B, H, D).

    A transition at step t is dropped, and the rollout ends, when H_t > lambda1 in any dimension or
    sum_{k<=t} H_k > lambda2 in any dimension (official infoprop_dyna.py).
    """
    violated = (losses > lambda1).any(-1) | (np.cumsum(losses, axis=1) > lambda2).any(-1)  # (B, H)
    horizon = losses.shape[1]
    return np.where(violated.any(1), violated.argmax(1), horizon)
