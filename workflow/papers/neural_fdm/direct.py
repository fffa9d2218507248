"""Direct optimisation, the paper's non-amortised baseline (official ``scripts/optimize.py``).

For one target X, minimise the task loss L(FDM(q), X) over the force densities of the active bars
with a bounded gradient-based optimiser (scipy's SLSQP or L-BFGS-B), |q| in [low, high] and the
sign of each bar fixed, so q keeps the same constraints as the encoder's output. Gradients come
from autograd through the solver (the adjoint of :class:`~papers.neural_fdm.fdm.LinearSolve`).
"""
from __future__ import annotations

import time

import numpy as np
import scipy.optimize
import torch

from papers.neural_fdm.tasks import Task

FAILED = 1e12  # the loss reported for q without an equilibrium (a singular K); the optimisers step back from it


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

    def fun(a_np):
        a = torch.tensor(a_np, dtype=fdm.signs.dtype, requires_grad=True)
        q = to_q(a)
        loss, _ = task.loss(x, fdm.equilibrium(q, x, loads), q, loads, 0.0, regularize=regularize)
        if not torch.isfinite(loss):  # a free node whose bars are all at q = 0: no equilibrium exists
            return FAILED, np.zeros_like(a_np)
        (grad,) = torch.autograd.grad(loss, a)
        return loss.item(), grad.numpy()

    start = time.perf_counter()
    res = scipy.optimize.minimize(fun, a0, jac=True, method=method, bounds=[bounds] * n, tol=tol,
                                  options={"maxiter": maxiter})
    seconds = time.perf_counter() - start
    with torch.no_grad():
        q = to_q(torch.as_tensor(res.x, dtype=fdm.signs.dtype))
        x_hat = fdm.equilibrium(q, x, loads)
    return {"q": q, "x_hat": x_hat, "nit": int(res.nit), "nfev": int(res.nfev), "success": bool(res.success),
            "seconds": seconds}
