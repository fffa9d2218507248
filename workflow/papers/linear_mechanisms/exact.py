"""The paper's linear network, its exact gradient-flow trajectory, and gradient descent beside it.

Model and loss (the paper's setting: one hidden layer, width d, one-dimensional data):

.. math::
    f(x) = \\kappa \\sum_{i=1}^d u_i w_i x = \\kappa (u \\cdot w) x, \\qquad
    L = \\frac{1}{2n} \\sum_j (f(x_j) - y_j)^2 .

Only two moments of the data enter, m2 = <x^2> and mxy = <x y>: the learned function is the slope
F = kappa u.w, the target slope F* = mxy / m2, and the residual Delta = dL/dF = F m2 - mxy. Gradient flow
with layer-wise learning rates, du/dt = -eta_u kappa Delta w and dw/dt = -eta_w kappa Delta u, conserves
|u|^2 / eta_u - |w|^2 / eta_w; the NTK is K = kappa^2 (eta_u |w|^2 + eta_w |u|^2) (times x x').

Exact solution. We could not read the paper's derivation here (public summaries say its explicit
solution is stated for a special case, "beta = 1"); the one below is derived by us and holds at any
width, from any initialisation and for any eta_u / eta_w. In rescaled variables
u~ = u / sqrt(eta_u), w~ = w / sqrt(eta_w), with s = kappa sqrt(eta_u eta_w), the flow is symmetric,
du~/dt = -s Delta w~ and dw~/dt = -s Delta u~, so p = u~ + w~ and q = u~ - w~ only rescale:
p(t) = p0 e^{-S(t)}, q(t) = q0 e^{+S(t)} with dS/dt = s Delta, i.e.

.. math::
    \\tilde u(t) = \\tilde u_0 \\cosh S - \\tilde w_0 \\sinh S, \\qquad
    \\tilde w(t) = \\tilde w_0 \\cosh S - \\tilde u_0 \\sinh S .                       \\qquad (1)

With P = |p0|^2, Q = |q0|^2 and z = e^{2S}, u~.w~ = (P / z - Q z) / 4, and dS/dt = s (s m2 u~.w~ - mxy)
becomes a Riccati equation with constant coefficients,

.. math::
    \\dot z = 2 (\\alpha P - \\gamma z - \\alpha Q z^2), \\quad \\alpha = s^2 m_2 / 4, \\quad \\gamma = s\\, m_{xy},
    \\qquad z(t) = \\frac{z_+ - r(t) z_-}{1 - r(t)}, \\quad r(t) = \\frac{1 - z_+}{1 - z_-} e^{-\\lambda t}, \\qquad (2)

with z+ > 0 > z- the roots of alpha Q z^2 + gamma z - alpha P and lambda = 2 sqrt(gamma^2 + 4 alpha^2 P Q).
(1) and (2) are the whole trajectory; t -> infinity gives the learned state, z = z+.

Two invariants follow from (1) (a determinant-one map of the pair): C = |u~|^2 - |w~|^2 (the conservation
law) and D = |u~|^2 |w~|^2 - (u~.w~)^2 (the squared area of the pair). Every feature-level quantity is
then a function of the output c = u~.w~ = F / s alone (derived here):

.. math::
    \\cos^2(u, w) = \\frac{c^2}{c^2 + D}, \\qquad \\frac{K}{\\kappa^2 \\eta_u \\eta_w} = |\\tilde u|^2 + |\\tilde w|^2
    = \\sqrt{4 c^2 + 4 D + C^2} .                                                     \\qquad (3)

So |cos| grows when |F| grows (learning by alignment) and falls when |F| falls (learning by disalignment),
and the NTK moves only as much as F does relative to the initial scale sqrt(4D + C^2).

Everything here works on the Gram scalars of the pair (|u|^2, |w|^2, u.w, u.u0, w.w0): O(1) per time
point after O(d) to set up, so a trajectory at width 10^4 costs nothing.
"""
from __future__ import annotations

import numpy as np

GRAM = ("uu", "ww", "uw", "uu0", "ww0")  # |u|^2, |w|^2, u.w, u.u0, w.w0 (unscaled u, w)


# ---- data moments and the invariants of an initialisation -----------------------------------
def moments(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """m2 = <x^2>, mxy = <x y> of the training set: all the loss knows about the data."""
    return float(np.mean(x * x)), float(np.mean(x * y))


def rescaled_gram(u0, w0, eta_u, eta_w):
    """a = |u~0|^2, b = |w~0|^2, c = u~0.w~0 for u0, w0 of shape (..., d); eta broadcasts over (...)."""
    eta_u, eta_w = np.asarray(eta_u, float), np.asarray(eta_w, float)
    a = (u0 * u0).sum(-1) / eta_u
    b = (w0 * w0).sum(-1) / eta_w
    c = (u0 * w0).sum(-1) / np.sqrt(eta_u * eta_w)
    return a, b, c


def invariants(a, b, c):
    """C = a - b (conserved imbalance) and D = a b - c^2 (conserved squared area), from eq. (3)."""
    return a - b, a * b - c * c


# ---- the exact solution (eqs. 1-2) ------------------------------------------------------------
def riccati(a, b, c, *, kappa, eta_u, eta_w, m2, mxy):
    """The constants of eq. (2): z+, lambda, P and Q (all broadcast over the leading axes).

    z- = -P / (Q z+) is not formed: the formulas below use it only through z- / (1 - z-), which stays
    finite when Q = 0 (u~0 = w~0, where eq. (2) is linear).
    """
    s = kappa * np.sqrt(np.asarray(eta_u, float) * eta_w)
    alpha, gamma = s * s * m2 / 4, s * mxy
    P, Q = a + b + 2 * c, a + b - 2 * c
    disc = np.sqrt(gamma * gamma + 4 * alpha * alpha * P * Q)
    # the positive root, in the form without cancellation for either sign of gamma
    with np.errstate(divide="ignore", invalid="ignore"):
        z_plus = np.where(gamma >= 0, 2 * alpha * P / (gamma + disc), (disc - gamma) / (2 * alpha * Q))
    return z_plus, 2 * disc, P, Q


def exponent(t, a, b, c, **problem):
    """S(t) = log(z(t)) / 2 of eq. (2); `t` broadcasts against the leading axes (use t[..., None] for a time axis).

    With z- = -P / (Q z+): r z- = -(1 - z+) P / (Q z+ + P) e^{-lambda t} and r = (1 - z+) Q z+ / (Q z+ + P) e^{-lambda t}.
    """
    z_plus, lam, P, Q = riccati(a, b, c, **problem)
    decay = (1 - z_plus) * np.exp(-lam * t) / (Q * z_plus + P)
    return 0.5 * np.log((z_plus + P * decay) / (1 - Q * z_plus * decay))


def final_exponent(a, b, c, **problem):
    """S at t -> infinity: the learned state, z = z+."""
    return 0.5 * np.log(riccati(a, b, c, **problem)[0])


def gram_at(S, a, b, c, *, eta_u, eta_w):
    """The Gram scalars (GRAM) of (u(t), w(t)) at exponent S, from eq. (1)."""
    ch, sh = np.cosh(S), np.sinh(S)
    uu = a * ch**2 + b * sh**2 - 2 * c * ch * sh
    ww = b * ch**2 + a * sh**2 - 2 * c * ch * sh
    uw = c * np.cosh(2 * S) - (a + b) * np.sinh(2 * S) / 2
    eta_u, eta_w = np.asarray(eta_u, float), np.asarray(eta_w, float)
    return {"uu": eta_u * uu, "ww": eta_w * ww, "uw": np.sqrt(eta_u * eta_w) * uw,
            "uu0": eta_u * (a * ch - c * sh), "ww0": eta_w * (b * ch - c * sh)}


def time_to_converge(a, b, c, *, tol: float = 1e-4, **problem):
    """A flow time after which z is within relative `tol` of z+: |z - z+| ~ |1 - z+| (Q z+^2 + P) / (Q z+ + P) e^{-lambda t}."""
    z_plus, lam, P, Q = riccati(a, b, c, **problem)
    with np.errstate(divide="ignore"):
        log_ratio = np.log(np.abs(1 - z_plus) * (Q * z_plus**2 + P) / ((Q * z_plus + P) * tol * z_plus))
    return np.maximum(log_ratio, 0.0) / lam


# ---- what we measure, from the Gram scalars ---------------------------------------------------
def observables(gram: dict, gram0: dict, *, kappa, eta_u, eta_w) -> dict:
    """Output slope F, NTK K, cos(u, w), norm ratios and direction changes of each layer.

    `gram` at time t (uu0 = u.u0, ww0 = w.w0), `gram0` at t = 0. Direction change = 1 - cos(u_t, u_0).
    """
    uu, ww, uw = gram["uu"], gram["ww"], gram["uw"]
    norm_u0, norm_w0 = np.sqrt(gram0["uu"]), np.sqrt(gram0["ww"])
    return {
        "F": kappa * uw,
        "ntk": kappa**2 * (eta_u * ww + eta_w * uu),
        "cos_uw": uw / np.sqrt(uu * ww),
        "norm_u": np.sqrt(uu) / norm_u0,
        "norm_w": np.sqrt(ww) / norm_w0,
        "dir_u": 1 - gram["uu0"] / (np.sqrt(uu) * norm_u0),
        "dir_w": 1 - gram["ww0"] / (np.sqrt(ww) * norm_w0),
    }


def gram_of(u, w, u0, w0) -> dict:
    """The Gram scalars of explicit vectors (..., d)."""
    return {"uu": (u * u).sum(-1), "ww": (w * w).sum(-1), "uw": (u * w).sum(-1),
            "uu0": (u * u0).sum(-1), "ww0": (w * w0).sum(-1)}


# ---- gradient descent, the independent check --------------------------------------------------
def step_size(a, b, c, *, h: float, kappa, eta_u, eta_w, m2, mxy):
    """Flow time per GD step so that dt x (top eigenvalue of the flow's Jacobian) <= h along the whole path.

    In rescaled variables the Jacobian is s^2 m2 J J^T + s Delta [[0, I], [I, 0]], whose top eigenvalue is
    at most s^2 m2 (|u~|^2 + |w~|^2) + s |Delta|. Along the path |F| moves monotonically to F*, so by eq. (3)
    |u~|^2 + |w~|^2 is largest at one of the ends and |Delta| is largest at t = 0.
    """
    s = kappa * np.sqrt(np.asarray(eta_u, float) * eta_w)
    C, D = invariants(a, b, c)
    m = mxy / (m2 * s)  # the target in units of c = u~.w~
    k_max = np.maximum(np.sqrt(4 * c * c + 4 * D + C * C), np.sqrt(4 * m * m + 4 * D + C * C))
    delta0 = np.abs(s * m2 * c - mxy)
    return h / (s * s * m2 * k_max + s * delta0)


def gradient_descent(u0, w0, x, y, *, kappa, eta_u, eta_w, dt, steps: int, record=None, progress=None):
    """Full-batch GD u <- u - dt eta_u dL/du, w <- w - dt eta_w dL/dw on the data (x, y), rows in parallel.

    u0, w0: (R, d); kappa, eta_u, eta_w, dt: (R,) or scalars; x, y: (n,). The residual is computed from
    the data at every step (not from the moments), so this does not share code with the closed form.
    Returns the flow times (R, T) and the Gram scalars (R, T) at the step indices `record` (sorted, within
    [0, steps]; default: the first and the last).
    """
    kappa, eta_u, eta_w, dt = (np.broadcast_to(np.asarray(v, float), u0.shape[:1]) for v in (kappa, eta_u, eta_w, dt))
    u, w = u0.copy(), w0.copy()
    record = sorted({0, steps} if record is None else set(record))
    grams, times = [], []
    it = range(steps + 1) if progress is None else progress(range(steps + 1))
    for k in it:
        if k == record[len(times)]:
            grams.append(gram_of(u, w, u0, w0))
            times.append(k * dt)
            if len(times) == len(record):
                break
        F = kappa * (u * w).sum(-1)  # (R,)
        residual = F[:, None] * x[None, :] - y[None, :]  # (R, n)
        delta = (residual * x[None, :]).mean(-1)  # dL/dF, (R,)
        g = (dt * kappa * delta)[:, None]
        u, w = u - g * eta_u[:, None] * w, w - g * eta_w[:, None] * u
    gram = {key: np.stack([g[key] for g in grams], 1) for key in GRAM}
    return np.stack(times, 1), gram


def init(seed: int, width: int):
    """Standard normal g_u, g_w of shape (width,) for one seed; u0 = sigma_u g_u, w0 = sigma_w g_w.

    The draw depends only on (seed, width), so every sigma, kappa and learning-rate ratio at a width sees
    the same initial directions (common random numbers across a panel).
    """
    rng = np.random.default_rng([seed, width])
    return rng.standard_normal(width), rng.standard_normal(width)
