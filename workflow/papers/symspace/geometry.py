"""The point-to-hyperplane distance on SPD(n) and on the Poincare ball, through the Busemann function.

Nguyen et al., "Neural networks on symmetric spaces of noncompact type" (ICLR 2025), Sec. 3: a
hyperplane of a symmetric space of noncompact type is a level set of a Busemann function
B_gamma(X) = lim_{t -> oo} [d(X, gamma(t)) - t] of a geodesic ray gamma, and the signed distance of a
point to it is (minus) that Busemann value, moved to a base point by an isometry (Sec. 3.2-3.3).

SPD(n) with the G-invariant (alpha, beta) metrics (Sec. 3.3, the closed form for higher rank):

    <U, V>_X = alpha tr(X^-1 U X^-1 V) + beta tr(X^-1 U) tr(X^-1 V),    alpha > 0, alpha + n beta > 0,
    d(X, Y)^2 = alpha ||log(X^-1/2 Y X^-1/2)||_F^2 + beta (log det(X^-1 Y))^2.

The ray gamma(t) = exp(t diag(h)), with h of unit (alpha, beta) norm and decreasing entries, has

    B_h(X) = -<h, log diag D>_{alpha, beta},    X = U D U^T,  U unit upper triangular,

where <u, v>_{alpha, beta} = alpha u.v + beta (sum u)(sum v). U D U^T comes from the Cholesky factor
of X with rows and columns in reverse order ("reverse, Cholesky, reverse back"). A hyperplane with
base point P and rotation R acts on X through the isometry X -> R^T P^-1/2 X P^-1/2 R.

Poincare ball (curvature -1, rank one): the horocycle version, with y = (-p) (+) x the Mobius
translation of x by -p and omega = a / |a| a boundary point,

    s_{p, a}(x) = log(1 - |y|^2) - log |y - omega|^2   (= -B_omega(y): positive towards omega).

Both closed forms are checked against their limit definitions (:func:`spd_busemann_limit`,
:func:`ball_busemann_limit`) in tests/papers/test_symspace.py and in the evaluate stage (claim a).
"""
from __future__ import annotations

import mpmath
import numpy as np
import torch


# ---- SPD(n) ---------------------------------------------------------------------------------
def ab_inner(u: torch.Tensor, v: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """<u, v>_{alpha, beta} = alpha u.v + beta (sum u)(sum v) over the last axis."""
    return alpha * (u * v).sum(-1) + beta * u.sum(-1) * v.sum(-1)


def ab_normalise(h: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """h scaled to unit (alpha, beta) norm, so that exp(t diag(h)) is a unit-speed ray."""
    return h / ab_inner(h, h, alpha, beta).clamp_min(1e-30).sqrt().unsqueeze(-1)


def log_diag_udu(x: torch.Tensor, reverse: bool = True) -> torch.Tensor:
    """log diag D of X = U D U^T with U unit upper triangular. (..., n, n) -> (..., n).

    Reverse the order of rows and columns (J X J), take the Cholesky factor L (lower), reverse
    back: J L J is upper triangular and X = (J L J)(J L J)^T, so D = diag(J L J)^2.
    ``reverse=False`` takes the plain Cholesky factor (X = L D L^T, L unit *lower*): the wrong
    decomposition for a ray with decreasing h, kept as the negative control of claim (a).
    """
    if not reverse:
        return 2 * torch.linalg.cholesky(x).diagonal(dim1=-2, dim2=-1).log()
    flipped = x.flip(-1, -2)
    chol = torch.linalg.cholesky(flipped)
    return 2 * chol.diagonal(dim1=-2, dim2=-1).log().flip(-1)


def spd_busemann(x: torch.Tensor, h: torch.Tensor, alpha: float = 1.0, beta: float = 0.0,
                 reverse: bool = True) -> torch.Tensor:
    """B_h(X) = -<h, log diag D>_{alpha, beta} (Sec. 3.3). x: (..., n, n); h: (n,) or broadcastable (..., n)."""
    return -ab_inner(h, log_diag_udu(x, reverse), alpha, beta)


class _SymFunction(torch.autograd.Function):
    """f of a symmetric matrix through its eigenvalues, with the Daleckii-Krein backward.

    dX = V (K o (V^T dY V)) V^T with K_ij = (f(l_i) - f(l_j)) / (l_i - l_j), and f'(l_i) where the two
    eigenvalues (nearly) coincide. torch's eigh backward divides by l_i - l_j and overflows there (a
    Frechet-mean step near its fixed point, a hyperplane's base point at the identity).
    """

    @staticmethod
    def forward(ctx, x, fn, dfn):
        evals, evecs = torch.linalg.eigh(x)
        f = fn(evals)
        ctx.save_for_backward(evals, evecs, f)
        ctx.dfn = dfn
        return (evecs * f.unsqueeze(-2)) @ evecs.transpose(-1, -2)

    @staticmethod
    def backward(ctx, grad):
        evals, evecs, f = ctx.saved_tensors
        return _daleckii_krein(evals, evecs, f, ctx.dfn, grad), None, None


def _daleckii_krein(evals, evecs, f, dfn, grad):
    """dX = V (K o (V^T sym(dY) V)) V^T for Y = V f(L) V^T (the backward of :class:`_SymFunction`)."""
    diff = evals.unsqueeze(-1) - evals.unsqueeze(-2)
    close = diff.abs() <= 1e-9 * evals.abs().amax(-1, keepdim=True).unsqueeze(-1).clamp_min(1e-30)
    safe = torch.where(close, torch.ones_like(diff), diff)
    deriv = dfn(evals)
    k = torch.where(close, (deriv.unsqueeze(-1) + deriv.unsqueeze(-2)) / 2,
                    (f.unsqueeze(-1) - f.unsqueeze(-2)) / safe)
    g = (grad + grad.transpose(-1, -2)) / 2
    inner = evecs.transpose(-1, -2) @ g @ evecs
    return evecs @ (k * inner) @ evecs.transpose(-1, -2)


class _SqrtRsqrt(torch.autograd.Function):
    """(X^1/2, X^-1/2) of symmetric positive definite X from one eigendecomposition (the Frechet-mean step needs
    both): the same numbers, forward and backward, as two :func:`sym_funcm` calls ("sqrt", "rsqrt"), which would
    decompose the same X twice (the gradient is the sum of the two Daleckii-Krein terms, as autograd would add
    them)."""

    @staticmethod
    def forward(ctx, x):
        evals, evecs = torch.linalg.eigh(x)
        f_sqrt, f_rsqrt = FUNCTIONS["sqrt"][0](evals), FUNCTIONS["rsqrt"][0](evals)
        ctx.save_for_backward(evals, evecs, f_sqrt, f_rsqrt)
        vt = evecs.transpose(-1, -2)
        return (evecs * f_sqrt.unsqueeze(-2)) @ vt, (evecs * f_rsqrt.unsqueeze(-2)) @ vt

    @staticmethod
    def backward(ctx, grad_sqrt, grad_rsqrt):
        evals, evecs, f_sqrt, f_rsqrt = ctx.saved_tensors
        return (_daleckii_krein(evals, evecs, f_sqrt, FUNCTIONS["sqrt"][1], grad_sqrt)
                + _daleckii_krein(evals, evecs, f_rsqrt, FUNCTIONS["rsqrt"][1], grad_rsqrt))


def sym_sqrt_rsqrt(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """X^1/2 and X^-1/2 of symmetric positive definite x from one eigendecomposition (:class:`_SqrtRsqrt`)."""
    return _SqrtRsqrt.apply(x)


# The matrix functions the layers use, each with its derivative (for the backward above).
FUNCTIONS = {
    "log": (torch.log, lambda v: 1 / v),
    "exp": (torch.exp, torch.exp),
    "sqrt": (torch.sqrt, lambda v: 0.5 / torch.sqrt(v)),
    "rsqrt": (torch.rsqrt, lambda v: -0.5 * v ** -1.5),
}


def sym_funcm(x: torch.Tensor, fn) -> torch.Tensor:
    """fn applied to the eigenvalues of symmetric x: V fn(L) V^T. `fn`: a name of FUNCTIONS, or
    a pair (f, f') such as ReEig's clamp."""
    f, df = FUNCTIONS[fn] if isinstance(fn, str) else fn
    return _SymFunction.apply(x, f, df)


def spd_to_base(x: torch.Tensor, p_inv_sqrt: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """R^T P^-1/2 X P^-1/2 R: the isometry that takes the hyperplane's base point P to the identity."""
    y = p_inv_sqrt @ x @ p_inv_sqrt
    return rot.transpose(-1, -2) @ y @ rot


def spd_to_base_fused(x: torch.Tensor, p_inv_sqrt: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """:func:`spd_to_base` as A^T X A with A = P^-1/2 R formed once per hyperplane: two products per input and
    hyperplane instead of four (the same matrix; the rounding differs)."""
    a = p_inv_sqrt @ rot
    return a.transpose(-1, -2) @ x @ a


def spd_distance(x: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> float:
    """The (alpha, beta) geodesic distance, numpy (independent of the closed form)."""
    from scipy.linalg import eigh

    lam = eigh(y, x, eigvals_only=True)  # eigenvalues of X^-1 Y
    ln = np.log(lam)
    return float(np.sqrt(alpha * (ln ** 2).sum() + beta * ln.sum() ** 2))


def spd_busemann_limit(x: np.ndarray, h: np.ndarray, alpha: float, beta: float, times, dps: int = 80) -> list[float]:
    """d(X, gamma(t)) - t for each t, gamma(t) = exp(t diag(h)), in mpmath at `dps` digits.

    The definition of the Busemann function before the limit. For large t the eigenvalues of
    gamma(t)^-1/2 X gamma(t)^-1/2 span exp(+-t max|h|), beyond float64, hence the extended precision.
    """
    mpmath.mp.dps = dps
    n = x.shape[0]
    xm = mpmath.matrix(x.tolist())
    out = []
    for t in times:
        g = mpmath.diag([mpmath.exp(-mpmath.mpf(t) * mpmath.mpf(float(hi)) / 2) for hi in h])
        evals, _ = mpmath.eigsy(g * xm * g)
        ln = [mpmath.log(evals[i]) for i in range(n)]
        d = mpmath.sqrt(alpha * sum(v ** 2 for v in ln) + beta * sum(ln) ** 2)
        out.append(float(d - t))
    return out


def richardson(times, values) -> float:
    """Extrapolate f(t) = L + c/t + e/t^2 + ... to t -> oo from the last two or three of `times` (doubling)."""
    t, f = np.asarray(times, float), np.asarray(values, float)
    if not np.allclose(t[1:] / t[:-1], 2.0):
        raise ValueError(f"richardson: times must double, got {list(times)}")
    first = 2 * f[1:] - f[:-1]  # kills the 1/t term
    if first.size == 1:
        return float(first[-1])
    return float((4 * first[-1] - first[-2]) / 3)  # kills the 1/t^2 term


# ---- Poincare ball (c = 1) ---------------------------------------------------------------------
def mobius_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x (+) y on the Poincare ball (Ganea et al. 2018, eq. 2 with c = 1)."""
    xy = (x * y).sum(-1, keepdim=True)
    x2 = (x * x).sum(-1, keepdim=True)
    y2 = (y * y).sum(-1, keepdim=True)
    num = (1 + 2 * xy + y2) * x + (1 - x2) * y
    return num / (1 + 2 * xy + x2 * y2).clamp_min(1e-15)


def ball_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """arcosh(1 + 2 |x - y|^2 / ((1 - |x|^2)(1 - |y|^2)))."""
    num = ((x - y) ** 2).sum(-1)
    den = (1 - (x * x).sum(-1)) * (1 - (y * y).sum(-1))
    return torch.acosh(1 + 2 * num / den)


def ball_horocycle(x: torch.Tensor, p: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """s_{p,a}(x) = log(1 - |y|^2) - log|y - omega|^2, y = (-p) (+) x, omega = a/|a| (Sec. 3.2).

    x: (..., B, d); p, a: (..., K, d) -> (..., B, K): the signed distance to the horocycle through p normal to omega
    (leading dimensions broadcast: several independent problems, e.g. seeds, side by side).
    """
    y = mobius_add(-p.unsqueeze(-3), x.unsqueeze(-2))  # (..., B, K, d)
    omega = a / a.norm(dim=-1, keepdim=True).clamp_min(1e-15)
    return torch.log1p(-(y * y).sum(-1)) - ((y - omega.unsqueeze(-3)) ** 2).sum(-1).log()


def ball_gyroplane(x: torch.Tensor, p: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Ganea et al. (2018) eq. 25's signed distance to the gyroplane through p with normal a:
    asinh(2 <y, a> / ((1 - |y|^2) |a|)), y = (-p) (+) x. (..., B, d), (..., K, d) -> (..., B, K)."""
    y = mobius_add(-p.unsqueeze(-3), x.unsqueeze(-2))
    a_norm = a.norm(dim=-1).clamp_min(1e-15).unsqueeze(-2)
    return torch.asinh(2 * (y * a.unsqueeze(-3)).sum(-1) / ((1 - (y * y).sum(-1)) * a_norm))


def ball_busemann_limit(x: np.ndarray, p: np.ndarray, omega: np.ndarray, times) -> list[float]:
    """d(x, gamma(t)) - t, gamma(t) = p (+) tanh(t/2) omega the unit-speed ray from p towards omega (float64)."""
    xt, pt = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(p, dtype=torch.float64)
    om = torch.as_tensor(omega, dtype=torch.float64)
    return [float(ball_distance(xt, mobius_add(pt, np.tanh(t / 2) * om)) - t) for t in times]
