"""Direct optimisation, the paper's non-amortised baseline (official ``scripts/optimize.py``).

For one target X, minimise the task loss L(FDM(q), X) over the force densities of the active bars
with a bounded gradient-based optimiser (scipy's SLSQP or L-BFGS-B), |q| in [low, high] and the
sign of each bar fixed, so q keeps the same constraints as the encoder's output. Gradients come
from autograd through the solver (the adjoint of :class:`~papers.neural_fdm.fdm.LinearSolve`).
"""
from __future__ import annotations

import time

import numpy as np
import scipy.linalg
import scipy.optimize
import torch

from papers.neural_fdm.tasks import Task

FAILED = 1e12  # the loss reported for q without an equilibrium (a singular K); the optimisers step back from it


# LAPACK's double-precision Cholesky and LU (factor, solve), called directly: scipy.linalg's wrappers cost more per
# call than a 64 x 64 factorisation.
_POTRF, _POTRS, _GETRF, _GETRS = scipy.linalg.lapack.get_lapack_funcs(("potrf", "potrs", "getrf", "getrs"),
                                                                      dtype=np.float64)


class Objective:
    """The task loss of one target as a function of the active bars' |q|, and its gradient, in numpy (float64):
    the same loss as ``task.loss(x, fdm.equilibrium(q, x, loads), q, loads, 0, regularize)`` and the gradient
    autograd takes through it (tested), with the adjoint written out instead of recorded (the optimisers call it
    thousands of times per shape, where autograd's bookkeeping cost more than the 64 x 64 solve itself).

    Forward: K = C_f^T Q C_f and b = P_f - C_f^T Q C_s X_s assembled from the solver's index tables, X_f = K^-1 b
    (Cholesky of s K where every bar has sign s, falling back to LU as :class:`~papers.neural_fdm.fdm.LinearSolve`
    does). Backward (adjoint method): g = dL/dX_f, lambda = K^-1 g, dL/dK = -lambda X_f^T, dL/db = lambda, summed
    into each bar's q through the same tables; the towers' q-variance adds 2 (q - mean) / n per population."""

    def __init__(self, task: Task, x: torch.Tensor, loads: torch.Tensor, regularize: bool = True):
        fdm = task.fdm
        self.active = fdm.active.numpy()
        self.signs = fdm.signs.numpy()[self.active]
        self.num_bars, self.nf, self.definite = len(fdm.signs), fdm.num_free, fdm.definite_sign
        self.free = fdm.free.numpy()
        self.k_bar, self.k_index, self.k_coef = fdm.k_bar.numpy(), fdm.k_index.numpy(), fdm.k_coef.numpy()
        self.rhs_bar, self.rhs_to = fdm.rhs_bar.numpy(), fdm.rhs_to.numpy()
        self.x = x[0].detach().numpy().astype(np.float64)
        self.xs = self.x[fdm.rhs_from.numpy()]  # (R, 3): the support at the far end of each support bar
        self.p_free = loads[0].detach().numpy().astype(np.float64)[self.free]
        # the compared coordinates of the free nodes (the supports are exact whatever q): weights of the shape loss
        target = self.x[self.free]
        mask = np.zeros((len(self.x), 3), bool)
        if task.levels is None:  # shells: L1 over every coordinate
            mask[:] = True
        else:  # towers: squared error over the compression rings' xyz and the tension rings' z
            mask[task.levels[0].numpy()] = True
            mask[task.levels[1].numpy(), 2] = True
        self.mask, self.target, self.l1 = mask[self.free], target, task.levels is None
        # (the supports add nothing to the loss: every shape keeps them exactly)
        self.reg = float(task.p.regularization) if (regularize and task.levels is not None
                                                    and task.p.regularization) else 0.0

    def __call__(self, a: np.ndarray) -> tuple[float, np.ndarray]:
        """(loss, dloss/da) at |q| = a of the active bars."""
        nf = self.nf
        q = np.zeros(self.num_bars)
        q[self.active] = a * self.signs
        k = np.bincount(self.k_index, weights=q[self.k_bar] * self.k_coef, minlength=nf * nf).reshape(nf, nf)
        w = q[self.rhs_bar]
        b = self.p_free + np.stack([np.bincount(self.rhs_to, weights=w * self.xs[:, c], minlength=nf)
                                    for c in range(3)], 1)
        solve = None
        with np.errstate(all="ignore"):
            if self.definite != 0.0:  # Cholesky of s K (LAPACK potrf / potrs); not positive definite: LU
                factor, info = _POTRF(self.definite * k, lower=1)
                if info == 0:
                    sign = self.definite
                    solve = lambda r: _POTRS(factor, sign * r, lower=1)[0]  # noqa: E731
            if solve is None:  # LU (getrf / getrs); a singular K gives inf / nan, as torch's LU does
                lu, piv, _ = _GETRF(k)
                solve = lambda r: _GETRS(lu, piv, r)[0]  # noqa: E731
            xf = solve(b)  # (Nf, 3)
            d = (xf - self.target) * self.mask
            if self.l1:
                loss, g = float(np.abs(d).sum()), np.sign(d)
            else:
                loss, g = float((d * d).sum()), 2.0 * d
            grad_q = np.zeros(self.num_bars)
            if self.reg:
                for part in (q > 0, q < 0):
                    n = int(part.sum())
                    if n > 1:
                        dev = q[part] - q[part].mean()
                        loss += self.reg * float((dev * dev).mean())
                        grad_q[part] += self.reg * 2.0 * dev / n
            if not np.isfinite(loss):
                return loss, np.zeros_like(a)
            lam = solve(g)  # (Nf, 3); K symmetric
            dk = -(lam @ xf.T).reshape(-1)  # dL/dK
            grad_q += np.bincount(self.k_bar, weights=self.k_coef * dk[self.k_index], minlength=self.num_bars)
            grad_q += np.bincount(self.rhs_bar, weights=(lam[self.rhs_to] * self.xs).sum(1), minlength=self.num_bars)
        return loss, grad_q[self.active] * self.signs


def optimize(task: Task, x: torch.Tensor, *, method: str, init, bounds: tuple, maxiter: int, tol: float,
             rng: np.random.Generator, regularize: bool = True) -> dict:
    """Fit q to one target x (1, N, 3). Returns q (1, E), x_hat (1, N, 3), nit, nfev, success, seconds.
    `regularize`: the task's whole loss (the towers' q-variance term included, as the hybrid trains), or, False, the
    shape loss alone (the closest equilibrium shape the solver finds, whatever its force densities)."""
    fdm = task.fdm
    active = fdm.active
    signs = fdm.signs[active]  # (A,)
    loads = task.loads(x)
    n = int(active.sum())
    a0 = np.full(n, float(init)) if init is not None else rng.uniform(*bounds, size=n)

    def to_q(a: torch.Tensor) -> torch.Tensor:
        q = torch.zeros(1, len(fdm.signs), dtype=a.dtype)
        q[0, active] = a * signs
        return q

    objective = Objective(task, x, loads, regularize)

    def fun(a_np):
        loss, grad = objective(a_np)
        if not np.isfinite(loss):  # a free node whose bars are all at q = 0: no equilibrium exists
            return FAILED, np.zeros_like(a_np)
        return loss, grad

    start = time.perf_counter()
    res = scipy.optimize.minimize(fun, a0, jac=True, method=method, bounds=[bounds] * n, tol=tol,
                                  options={"maxiter": maxiter})
    seconds = time.perf_counter() - start
    with torch.no_grad():
        q = to_q(torch.as_tensor(res.x, dtype=fdm.signs.dtype))
        x_hat = fdm.equilibrium(q, x, loads)
    return {"q": q, "x_hat": x_hat, "nit": int(res.nit), "nfev": int(res.nfev), "success": bool(res.success),
            "seconds": seconds}
