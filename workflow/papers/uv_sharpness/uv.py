"""The UV model on one example (Kalra, He and Barkeshli, ICLR 2025; arXiv 2311.02076), in closed form.

Model and loss, with u, v in R^n and one training example (x, y):

.. math::
    f = \\frac{x}{\\sqrt{n}} v^\\top u, \\qquad L = \\tfrac12 (f - y)^2 .

Gradient descent with learning rate eta moves (u, v) inside span(u_0, v_0):
u' = u - a v, v' = v - a u with a = eta (f - y) x / sqrt(n). Write Delta = f - y, k = x^2 / n and
Theta = k (|u|^2 + |v|^2) (the NTK). The parameter dynamics closes on the function-space pair
(f, Theta), the paper's fixed-point analysis in function space:

.. math::
    f' = f - \\eta \\Delta \\Theta + \\eta^2 \\Delta^2 k f, \\qquad
    \\Theta' = \\Theta (1 + \\eta^2 \\Delta^2 k) - 4 \\eta \\Delta k f .

The Hessian of L is H = J J^T + Delta (x / sqrt(n)) [[0, I], [I, 0]] with J = (x / sqrt(n)) (v, u).
Its top eigenvalue, the sharpness, lives in the 2 x 2 block spanned by J's components on the
(+1, -1) eigenspaces of [[0, I], [I, 0]]:

.. math::
    \\lambda_{\\max} = \\frac{\\Theta}{2} + \\sqrt{k (2f - y)^2 + \\frac{\\Theta^2}{4} - k f^2},

which equals Theta on the minimum manifold f = y. There the sharpness is smallest when u = v:
lambda_min = 2 |x y| / sqrt(n). For eta > 2 / lambda_min no minimum is stable, and GD settles on
the edge-of-stability manifold, with a period-doubling route to chaos as eta grows.

Fixed points (the paper's fixed-point analysis in function space, derived here from the map above).
The minima f = y are fixed points of the map with Jacobian eigenvalues 1 and 1 - eta Theta: stable
iff Theta < 2 / eta; since Theta >= lambda_min on the minima, a stable minimum exists iff
eta < eta_c = 2 / lambda_min (r = eta / eta_c < 1). Above eta_c the attractor is the paper's
"EoS manifold" on which Delta f and the sharpness are coupled: with s = |u + v|^2 and
d = |u - v|^2, GD multiplies s by (1 - a)^2 and d by (1 + a)^2 (a = eta Delta x / sqrt(n)), so on
a 2-cycle ((1 - a_1)(1 - a_2) = 1) d shrinks by (1 + a_1)(1 + a_2) = 1 + 2 a_1 a_2 < 1 and u || v
(Theta^2 = 4 k f^2, :func:`imbalance` = 0). There, with g = f / y, the dynamics is the 1-d map

.. math::
    g' = g \\, (1 - r (g - 1))^2, \\qquad \\lambda \\eta / 2 = \\tfrac{r}{2} (|g| + |2 g - 1|),

whose fixed point g = 1 has multiplier 1 - 2r (period 2 from r = 1), whose 2-cycle is
g_pm = 1 + a_pm / r with a^2 + (r - 1) a - (r - 1) = 0, multiplier 1 - 8 s - 2 s^2 (s = r - 1):
period 4 from s^2 + 4 s - 1 = 0, i.e. r = sqrt(5) - 1, and mean sharpness x eta/2 on the 2-cycle
1 + (r - 1)/4 -- not exactly 2/eta.
"""
from __future__ import annotations

import numpy as np
import torch


def lambda_min(x: float, y: float, n: int) -> float:
    """The smallest sharpness on the manifold of minima f = y: 2 |x y| / sqrt(n)."""
    return 2.0 * abs(x * y) / np.sqrt(n)


# ---- parameter space --------------------------------------------------------------------------
def output(u, v, x: float):
    """f = x v.u / sqrt(n); u, v of shape (..., n)."""
    n = u.shape[-1]
    return x * (u * v).sum(-1) / np.sqrt(n)


def ntk(u, v, x: float):
    """Theta = |df/dtheta|^2 = x^2 (|u|^2 + |v|^2) / n."""
    n = u.shape[-1]
    return x * x * ((u * u).sum(-1) + (v * v).sum(-1)) / n


def gd_step(u, v, x: float, y: float, eta):
    """One gradient-descent step on L = (f - y)^2 / 2; `eta` broadcasts over leading axes."""
    n = u.shape[-1]
    a = np.asarray(eta) * (output(u, v, x) - y) * x / np.sqrt(n)
    a = a[..., None]
    return u - a * v, v - a * u


def hessian(u: torch.Tensor, v: torch.Tensor, x: float, y: float) -> torch.Tensor:
    """The exact 2n x 2n Hessian of L with respect to theta = (u, v), J J^T + Delta d^2 f."""
    n = u.shape[-1]
    c = x / np.sqrt(n)
    jac = c * torch.cat([v, u])
    delta = c * torch.dot(u, v) - y
    eye = torch.eye(n, dtype=u.dtype)
    zero = torch.zeros(n, n, dtype=u.dtype)
    swap = torch.cat([torch.cat([zero, eye], 1), torch.cat([eye, zero], 1)], 0)
    return torch.outer(jac, jac) + delta * c * swap


# ---- function space ---------------------------------------------------------------------------
def sharpness(f, theta, x: float, y: float, n: int):
    """The exact top Hessian eigenvalue from (f, Theta) (module docstring)."""
    k = x * x / n
    return theta / 2 + np.sqrt(np.maximum(k * (2 * f - y) ** 2 + theta**2 / 4 - k * f**2, 0.0))


def function_step(f, theta, x: float, y: float, n: int, eta):
    """The GD map in function space, (f, Theta) -> (f', Theta') (module docstring)."""
    k = x * x / n
    delta = f - y
    return (f - eta * delta * theta + eta**2 * delta**2 * k * f,
            theta * (1 + eta**2 * delta**2 * k) - 4 * eta * delta * k * f)


def function_jacobian(f, theta, x: float, y: float, n: int, eta):
    """d(f', Theta') / d(f, Theta), as four arrays (J_ff, J_ft, J_tf, J_tt)."""
    k = x * x / n
    delta = f - y
    j_ff = 1 - eta * theta + eta**2 * k * (2 * delta * f + delta**2)
    j_ft = -eta * delta
    j_tf = 2 * eta**2 * delta * k * theta - 4 * eta * k * (f + delta)
    j_tt = 1 + eta**2 * delta**2 * k
    return j_ff, j_ft, j_tf, j_tt


def imbalance(f, theta, x: float, n: int):
    """1 - 4 k f^2 / Theta^2 (k = x^2 / n): 0 exactly when u || v (the EoS manifold), in [0, 1] always."""
    k = x * x / n
    return 1.0 - 4.0 * k * f * f / (theta * theta)


def eos_map(g, r):
    """The GD map on the EoS manifold u || v in g = f / y, at eta = r x 2 / lambda_min (module docstring)."""
    return g * (1.0 - r * (g - 1.0)) ** 2


def two_cycle(r):
    """(g_plus, g_minus): the 2-cycle of :func:`eos_map` for r > 1 (NaN for r <= 1)."""
    r = np.asarray(r, dtype=float)
    s = r - 1.0
    root = np.sqrt(np.where(s > 0, s * (s + 4.0), np.nan))
    return 1.0 + (-s + root) / (2.0 * r), 1.0 + (-s - root) / (2.0 * r)


def two_cycle_multiplier(r):
    """d(eos_map o eos_map)/dg on the 2-cycle: 1 - 8 s - 2 s^2 with s = r - 1 (stable while in (-1, 1))."""
    s = np.asarray(r, dtype=float) - 1.0
    return 1.0 - 8.0 * s - 2.0 * s * s


# The predicted bifurcations, in r = eta / (2 / lambda_min): the minima lose stability at 1 (period 2),
# the 2-cycle's multiplier reaches -1 at sqrt(5) - 1 (period 4).
R_PERIOD_2 = 1.0
R_PERIOD_4 = float(np.sqrt(5.0) - 1.0)


def manifold_sharpness_ratio(g, r):
    """Sharpness x eta / 2 at g = f / y on the EoS manifold: (r / 2)(|g| + |2g - 1|)."""
    g = np.asarray(g, dtype=float)
    return 0.5 * np.asarray(r) * (np.abs(g) + np.abs(2.0 * g - 1.0))


def two_cycle_sharpness_ratio(r):
    """Mean sharpness x eta / 2 over the 2-cycle: 1 + (r - 1)/4 for 1 < r <= sqrt(5) - 1."""
    g_plus, g_minus = two_cycle(r)
    return 0.5 * (manifold_sharpness_ratio(g_plus, r) + manifold_sharpness_ratio(g_minus, r))


def iterate(f0, theta0, x: float, y: float, n: int, eta, steps: int, late: int):
    """Iterate the function-space map `steps` times from (f0, Theta0), vectorised over runs.

    Returns the last `late` values of f and of the sharpness (shape (..., late)), the largest
    Lyapunov exponent over those steps (tangent vector renormalised every step; NaN where the run
    diverged), whether each run diverged, and the mean :func:`imbalance` over those steps.
    """
    f, theta = np.array(f0, dtype=float), np.array(theta0, dtype=float)
    eta = np.broadcast_to(np.asarray(eta, dtype=float), f.shape)
    f_late = np.empty(f.shape + (late,))
    lam_late = np.empty(f.shape + (late,))
    tangent = np.stack([np.ones_like(f), np.ones_like(f)]) / np.sqrt(2)
    log_growth = np.zeros_like(f)
    diverged = np.zeros(f.shape, dtype=bool)
    imbalance_sum = np.zeros_like(f)
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(steps):
            if t >= steps - late:
                i = t - (steps - late)
                f_late[..., i] = f
                lam_late[..., i] = sharpness(f, theta, x, y, n)
                imbalance_sum += imbalance(f, theta, x, n)
                j_ff, j_ft, j_tf, j_tt = function_jacobian(f, theta, x, y, n, eta)
                tangent = np.stack([j_ff * tangent[0] + j_ft * tangent[1], j_tf * tangent[0] + j_tt * tangent[1]])
                norm = np.sqrt((tangent**2).sum(0))
                log_growth += np.log(norm)
                tangent = tangent / norm
            f, theta = function_step(f, theta, x, y, n, eta)
            diverged |= ~np.isfinite(f) | (np.abs(f) > 1e6 * (1 + abs(y)))
            f = np.where(diverged, np.nan, f)
            theta = np.where(diverged, np.nan, theta)
    lyapunov = np.where(diverged, np.nan, log_growth / late)
    return f_late, lam_late, lyapunov, diverged, np.where(diverged, np.nan, imbalance_sum / late)


# ---- orbits -------------------------------------------------------------------------------------
def detect_period(series, *, max_period: int = 64, rtol: float = 1e-6):
    """Smallest p in 1, 2, 3, ..., max_period with |s[t+p] - s[t]| <= rtol (1 + |s[t]|) over the series.

    Any period, not only powers of two (periodic windows inside chaos have periods 3, 5, 6, ...).
    The series must cover at least two periods for a period to count. Returns 0 when no period fits
    (aperiodic: chaos, or a transient not yet settled -- the Lyapunov exponent tells them apart).
    """
    s = np.asarray(series, dtype=float)
    if not np.all(np.isfinite(s)):
        return 0
    for p in range(1, min(max_period, s.size // 2) + 1):
        if np.all(np.abs(s[p:] - s[:-p]) <= rtol * (1 + np.abs(s[:-p]))):
            return p
    return 0


def lyapunov_1d(derivatives) -> float:
    """The Lyapunov exponent of a 1-d orbit from the map's derivative along it: mean log |f'(x_t)|."""
    return float(np.mean(np.log(np.abs(np.asarray(derivatives, dtype=float)))))


def classify(period: int, lyapunov: float, diverged: bool = False) -> str:
    """'period p', 'chaos' (aperiodic with a positive Lyapunov exponent), 'aperiodic' (no period fits but
    the exponent is not positive: a transient near a bifurcation) or 'diverged'."""
    if diverged:
        return "diverged"
    if period > 0:
        return f"period {period}"
    return "chaos" if lyapunov > 0 else "aperiodic"
