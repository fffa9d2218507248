"""Advantages and value targets: BodyGen's temporal credit assignment (TCA, Sec. 3.3) and plain GAE.

An episode is ``S`` steps: design steps (skeleton and attribute transforms, reward 0) followed by control
steps (reward = forward velocity - control cost). Arrays are (N, S): N episodes of equal length in step.

Control steps, both estimators (GAE, Schulman et al. 2016, with the official gamma = 0.995, lambda = 0.95):

.. math::
    \\delta_t = r_t + \\gamma V(s_{t+1}) - V(s_t), \\qquad
    \\hat A_t = \\sum_{l \\ge 0} (\\gamma\\lambda)^l \\delta_{t+l}, \\qquad \\hat R_t = V(s_t) + \\hat A_t

with :math:`V(s_{t+1}) = 0` after a termination (the root tilted past the limit) and the bootstrap value of
the observation after the last step where an episode is truncated. Steps after a termination carry no
sample (``alive`` is False there) and no reward.

Design steps under TCA (official ``estimate_advantages``): the undiscounted Monte-Carlo return of the whole
episode, :math:`G_t = \\sum_{t' \\ge t} r_{t'}`, is both the value target and, minus :math:`V(s_t)`, the
advantage; so a reward late in the execution reaches the design decision undamped, where GAE would
discount it by :math:`(\\gamma\\lambda)^{k}` over the k steps in between. Value targets are normalised per
group (design / control) by running normalisers and advantages are standardised per group. Without TCA
(the ablation) every step uses GAE and both normalisations run over the whole batch.
"""
from __future__ import annotations

import numpy as np


def gae(rewards: np.ndarray, values: np.ndarray, bootstrap: np.ndarray, terminal: np.ndarray, gamma: float,
        lam: float) -> np.ndarray:
    """GAE advantages (N, S). `bootstrap` (N,): V of the state after the last step (truncation);
    `terminal` (N, S): the episode terminated at this step (no bootstrap, the recursion restarts)."""
    n, s = rewards.shape
    next_values = np.concatenate([values[:, 1:], bootstrap[:, None]], 1) * (1.0 - terminal)
    deltas = rewards + gamma * next_values - values
    adv = np.zeros_like(rewards, dtype=np.float64)
    running = np.zeros(n)
    for t in reversed(range(s)):
        running = deltas[:, t] + gamma * lam * running * (1.0 - terminal[:, t])
        adv[:, t] = running
    return adv


def monte_carlo_returns(rewards: np.ndarray) -> np.ndarray:
    """Undiscounted reward-to-go G_t = sum_{t' >= t} r_t' (N, S)."""
    return np.cumsum(rewards[:, ::-1], 1)[:, ::-1]


def estimate(rewards, values, bootstrap, terminal, is_design, *, gamma: float, lam: float, tca: bool):
    """Raw (unnormalised) advantages and value targets (N, S) under TCA or plain GAE.

    `values` and `bootstrap` are the critic's predictions in return units (already unscaled); `terminal`
    (N, S) marks terminations; `is_design` (S,) marks the design steps. Rewards after a termination must be 0.
    """
    adv = gae(rewards, values, bootstrap, terminal, gamma, lam)
    targets = values + adv
    if tca:
        g = monte_carlo_returns(rewards)
        adv = np.where(is_design[None, :], g - values, adv)
        targets = np.where(is_design[None, :], g, targets)
    return adv, targets


def standardise(adv: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """Zero mean, unit std within each group (boolean masks over `adv`'s entries)."""
    out = adv.astype(np.float64).copy()
    for g in groups:
        if g.sum() > 1:
            a = adv[g]
            out[g] = (a - a.mean()) / (a.std(ddof=1) + 1e-8)
    return out
