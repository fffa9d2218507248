"""Welfare dynamics under a budget of interventions (Wu, Abebe, Hardt, Stoica, ICLR 2025, Sec. 2-3).

N individuals have welfare U_i(t). Each step a policy treats K of them; the treated gain the
treatment effect f_i and the others lose the decay g_j, and everyone receives symmetric noise:

.. math::
    U_i(t+1) = U_i(t) + f_i(U_i(t))  \\quad (i \\text{ treated}), \\qquad
    U_j(t+1) = U_j(t) - g_j(U_j(t))  \\quad (j \\text{ not treated}), \\qquad + \\epsilon_i(t)

with f_i increasing and clipped to [f_lb, f_ub], g_j decreasing and clipped to [g_lb, g_ub]. As in
the official code (``multi_budget_real_initial_linear.py``), f and g are linear in U between two
knots drawn per individual, values are rounded to integers, and the noise is
N(0, K (f_ub + g_ub)) clipped to +-2 K (f_ub + g_ub) and rounded.

Policies: Rawlsian ones treat the worst off (min U) or the fastest decaying (max g);
utilitarian ones maximise the immediate gain (max U, max f, max f + g); `random` treats K at random.
Ties go to the lowest index, as the official ``heapq.nlargest`` keys do, except for the max-g policy: the
official code re-sorts that policy's welfare every step (``if_differ_tie_break = False``), so among equal g
it treats the currently worst off; g is flat at g_lb above the decay knots, so such ties are common.

The long-run growth rates (the paper's long-run analysis, Sec. 3; budget-K form as in the official code) are
(K f_ub - (N - K) g_lb) / N for the Rawlsian policy, whose treated cohort keeps everyone on the
upper plateau of f and the lower plateau of g, and (K f_ub - (N - K) g_ub) / N for the utilitarian
one, which lets the untreated sink to the upper plateau of g.

Arrays are vectorised over independent simulations (seeds): welfare has shape (S, N).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RAWLSIAN = ("rawlsian_min_u", "rawlsian_max_g")
UTILITARIAN = ("util_max_u", "util_max_f", "util_max_fg")
POLICIES = RAWLSIAN + UTILITARIAN + ("random",)


@dataclass(frozen=True)
class Bounds:
    """Clip ranges of the treatment effect f and the decay g (homogeneous, as Fig. 1)."""

    f_lb: float
    f_ub: float
    g_lb: float
    g_ub: float

    @classmethod
    def official(cls, n: int, k: int, g_lb: float, g_ub: float, a: float, b: float) -> "Bounds":
        """f_lb = a N g_ub / K and f_ub = f_lb + b N (g_lb + g_ub) / K (official code: a=4, b=0.5).

        f_lb > (N - 1) g_ub makes every policy's welfare grow (the official code's comment).
        """
        f_lb = a * n * g_ub / k
        return cls(f_lb=f_lb, f_ub=f_lb + b * n * (g_lb + g_ub) / k, g_lb=g_lb, g_ub=g_ub)


def theoretical_rates(bounds: Bounds, n: int, k: int) -> dict[str, float]:
    """Long-run mean growth rates of the Rawlsian and utilitarian policies (Sec. 3, budget K)."""
    return {
        "rawlsian": (k * bounds.f_ub - (n - k) * bounds.g_lb) / n,
        "utilitarian": (k * bounds.f_ub - (n - k) * bounds.g_ub) / n,
    }


def linear_through(x0, y0, x1, y1):
    """Slope and intercept of the line through (x0, y0) and (x1, y1), elementwise."""
    slope = (y1 - y0) / (x1 - x0)
    return slope, y0 - slope * x0


def treatment(u, f_slope, f_icpt, bounds: Bounds):
    """f(U): linear, increasing, clipped to [f_lb, f_ub], rounded (official code)."""
    return np.round(np.clip(f_slope * u + f_icpt, bounds.f_lb, bounds.f_ub))


def decay(u, g_slope, g_icpt, bounds: Bounds):
    """g(U): linear, decreasing, clipped to [g_lb, g_ub], rounded (official code)."""
    return np.round(np.clip(g_slope * u + g_icpt, bounds.g_lb, bounds.g_ub))


def top_k(score, k: int):
    """Indices (S, K) of the K largest scores per row; ties go to the lowest index."""
    return np.argsort(-score, axis=1, kind="stable")[:, :k]


def choose(policy: str, u, f, g, k: int, rng: np.random.Generator):
    """The K individuals each row's policy treats, as a boolean mask of shape (S, N)."""
    if policy == "rawlsian_min_u":
        idx = top_k(-u, k)
    elif policy == "rawlsian_max_g":
        # Largest g first; among equal g the lowest current welfare (the official per-step sort), then index.
        idx = np.lexsort((u, -g), axis=1)[:, :k]
    elif policy == "util_max_u":
        idx = top_k(u, k)
    elif policy == "util_max_f":
        idx = top_k(f, k)
    elif policy == "util_max_fg":
        idx = top_k(f + g, k)
    elif policy == "random":
        idx = np.argsort(rng.random(u.shape), axis=1)[:, :k]
    else:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    treated = np.zeros(u.shape, dtype=bool)
    np.put_along_axis(treated, idx, True, axis=1)
    return treated


def step(u, treated, f, g, noise):
    """One step of the dynamics: treated gain f, the others lose g, everyone gets the noise."""
    return u + np.where(treated, f, -g) + noise


def simulate(policy: str, u0, f_slope, f_icpt, g_slope, g_icpt, bounds: Bounds, *, k: int, horizon: int,
             noise: bool, rng: np.random.Generator, progress=None):
    """Run `policy` for `horizon` steps from welfare `u0` (S, N); return the mean welfare (S, T + 1)."""
    u = np.array(u0, dtype=float)
    mean = np.empty((u.shape[0], horizon + 1))
    mean[:, 0] = u.mean(axis=1)
    noise_var = k * (bounds.f_ub + bounds.g_ub)  # official: variance_bound = K (max f_ub + max g_ub)
    steps = range(horizon) if progress is None else progress(range(horizon))
    for t in steps:
        f = treatment(u, f_slope, f_icpt, bounds)
        g = decay(u, g_slope, g_icpt, bounds)
        treated = choose(policy, u, f, g, k, rng)
        eps = 0.0
        if noise:
            eps = np.round(np.clip(rng.normal(0.0, np.sqrt(noise_var), u.shape), -2 * noise_var, 2 * noise_var))
        u = step(u, treated, f, g, eps)
        mean[:, t + 1] = u.mean(axis=1)
    return mean


def growth_rate(mean_welfare, t):
    """The paper's mean welfare growth rate (U_bar(t) - U_bar(0)) / t, per row."""
    return (mean_welfare[..., t] - mean_welfare[..., 0]) / t


def window_slope(mean_welfare, start: float, stop: float = 1.0):
    """Least-squares slope of U_bar(t) over t in [start T, stop T] (fractions of the run), per row."""
    horizon = mean_welfare.shape[-1] - 1
    lo, hi = int(round(horizon * start)), int(round(horizon * stop))
    t = np.arange(lo, hi + 1, dtype=float)
    y = mean_welfare[..., lo:hi + 1]
    tc = t - t.mean()
    return ((y - y.mean(axis=-1, keepdims=True)) * tc).sum(axis=-1) / (tc**2).sum()


def late_slope(mean_welfare, window: float):
    """Least-squares slope of U_bar(t) over the last `window` fraction of the run, per row."""
    return window_slope(mean_welfare, 1 - window)


def settling(mean_welfare, window: float):
    """Has the long-run slope settled? The slopes over the two halves of the long-run window (the last
    `window` fraction of T), per row: (earlier, later). On a plateau they agree up to noise; a slope still
    drifting (individuals still moving between plateaus) makes them differ."""
    mid = 1 - window / 2
    return window_slope(mean_welfare, 1 - window, mid), window_slope(mean_welfare, mid)


def plateau_spread(bounds: Bounds, n: int, k: int) -> float:
    """The upper minus the lower plateau rate, (K f_ub - (N-K) g_lb)/N - (K f_lb - (N-K) g_ub)/N: the most
    two policies' long-run rates can differ (everyone on the upper plateau against everyone on the lower one).
    The yardstick of the claims that compare two policies' rates, or a rate with itself over time."""
    return (k * (bounds.f_ub - bounds.f_lb) + (n - k) * (bounds.g_ub - bounds.g_lb)) / n


def one_step_gain_gap(u0, f_slope, f_icpt, g_slope, g_icpt, bounds: Bounds, k: int):
    """Per row, the immediate gain of the greedy choice minus that of the Rawlsian one at t = 0.

    Treating i instead of leaving it to decay changes the mean welfare by (f_i + g_i) / N, so the greedy
    (utilitarian) choice gains the sum of the K largest f + g, the Rawlsian one the f + g of the K worst off.
    Zero when f + g is the same for everyone (the flat-returns control): then whom a policy treats cannot
    matter, even in the short run."""
    gain = treatment(u0, f_slope, f_icpt, bounds) + decay(u0, g_slope, g_icpt, bounds)
    greedy = np.take_along_axis(gain, top_k(gain, k), axis=1).sum(axis=1)
    worst_off = np.take_along_axis(gain, top_k(-np.asarray(u0, float), k), axis=1).sum(axis=1)
    return greedy - worst_off


# ---- The theorems' conditions (Sec. 3) ---------------------------------------------------------
# With K treated per step, the mean welfare changes by (K f - (N - K) g) / N. The paper's two
# conditions bound this drift at the extreme plateaus (the official code states them for its
# figures: "f^- > (N-1) g^+ ensures the positivity" in ruin_condition.py, and the Rawlsian / greedy
# "expected zeta" rates of multi_budget_real_initial_linear.py and ruin_condition.py):
#
# * survival: K f_lb > (N - K) g_ub. Even at the worst plateau a treatment outweighs the others'
#   decay, so the Rawlsian policy keeps everyone rising to the upper plateau (f_ub, g_lb) and wins:
#   Rawlsian (K f_ub - (N-K) g_lb) / N > utilitarian (K f_ub - (N-K) g_ub) / N.
# * ruin: K f_ub < (N - K) g_lb. Even at the best plateau the drift is negative, so a policy that
#   spreads its treatments lets everyone sink to the lower plateau (f_lb, g_ub): Rawlsian
#   (K f_lb - (N-K) g_ub) / N, while the utilitarian one keeps its K favourites climbing at f_ub:
#   (K f_ub - (N-K) g_ub) / N, which wins by K (f_ub - f_lb) / N.
# * neither ("intermediate"): the theorems make no prediction; the winner depends on where the
#   population starts relative to the root of the drift.
#
# The random policy. Treated with probability K / N each step, an individual at welfare U drifts by
# d(U) = (K f(U) - (N - K) g(U)) / N in expectation, the same function the Rawlsian cohort follows.
# Under survival d > 0 everywhere, so everyone rises to the upper plateau; under ruin d < 0
# everywhere, so everyone sinks to the lower one: in both theorem regimes random has the Rawlsian
# long-run rate (they differ only in the transient). Rawlsian and random can part only in the
# intermediate regime, where random lets those who start below the root of d sink while a Rawlsian
# policy lifts them with everyone else (if the cohort sits above the root) or drags everyone down.
SURVIVAL, RUIN, INTERMEDIATE = "survival", "ruin", "intermediate"


def regime(bounds: Bounds, n: int, k: int) -> str:
    """Which of the paper's conditions (Sec. 3) holds at (bounds, N, K)."""
    if k * bounds.f_lb > (n - k) * bounds.g_ub:
        return SURVIVAL
    if k * bounds.f_ub < (n - k) * bounds.g_lb:
        return RUIN
    return INTERMEDIATE


def predicted(bounds: Bounds, n: int, k: int) -> dict:
    """The theory's long-run prediction at (bounds, N, K): winner and the rate of every policy family.

    Returns ``{"regime", "winner" ("rawlsian" | "utilitarian" | None), "rawlsian", "utilitarian",
    "random"}`` (rates are NaN in the intermediate regime, where no theorem applies).
    """
    kind = regime(bounds, n, k)
    up = (k * bounds.f_ub - (n - k) * bounds.g_lb) / n
    down = (k * bounds.f_lb - (n - k) * bounds.g_ub) / n
    util = (k * bounds.f_ub - (n - k) * bounds.g_ub) / n
    if kind == SURVIVAL:
        return {"regime": kind, "winner": "rawlsian", "rawlsian": up, "utilitarian": util, "random": up}
    if kind == RUIN:
        return {"regime": kind, "winner": "utilitarian", "rawlsian": down, "utilitarian": util, "random": down}
    nan = float("nan")
    return {"regime": kind, "winner": None, "rawlsian": nan, "utilitarian": nan, "random": nan}


def family(policy: str) -> str:
    """'rawlsian', 'utilitarian' or 'random'."""
    return "rawlsian" if policy in RAWLSIAN else "utilitarian" if policy in UTILITARIAN else "random"
