"""The sharpness of a loss: its top Hessian eigenvalue, from Hessian-vector products (torch).

Two estimators over the same Hessian-vector product (Pearlmutter's trick, double backward):
power iteration (Cohen et al. 2021 measure sharpness this way) and Lanczos (what SAM papers use;
it also gives the next eigenvalues). Neither materialises the Hessian.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch


def hvp(loss_fn: Callable[[], torch.Tensor], params: Sequence[torch.Tensor], vec: list[torch.Tensor]) -> list[torch.Tensor]:
    """H v for the Hessian H of ``loss_fn()`` with respect to `params`, by double backward."""
    loss = loss_fn()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    return list(torch.autograd.grad(grads, params, grad_outputs=vec))


def _dot(a, b) -> torch.Tensor:
    return sum((x * y).sum() for x, y in zip(a, b))


def top_eigenvalue(loss_fn, params, *, iters: int = 20, generator: torch.Generator | None = None,
                   init: list[torch.Tensor] | None = None) -> tuple[float, list[torch.Tensor]]:
    """Power iteration: the largest-magnitude Hessian eigenvalue and its eigenvector.

    Returns ``(lambda, v)``; pass `v` back as `init` to warm-start the next measurement (a
    training run's Hessian changes slowly, so a few iterations then suffice).
    """
    params = list(params)
    # drawn on the CPU (where `generator` lives), then moved: the same start vector on any device
    v = init if init is not None else [torch.randn(p.shape, generator=generator, dtype=p.dtype).to(p.device) for p in params]
    norm = torch.sqrt(_dot(v, v))
    v = [x / norm for x in v]
    lam = 0.0
    for _ in range(iters):
        hv = hvp(loss_fn, params, v)
        lam = float(_dot(hv, v))  # Rayleigh quotient, |v| = 1
        norm = torch.sqrt(_dot(hv, hv))
        if norm == 0:
            break
        v = [x.detach() / norm for x in hv]
    return lam, v


def lanczos(loss_fn, params, *, iters: int = 20, k: int = 1, generator: torch.Generator | None = None) -> list[float]:
    """The `k` largest Hessian eigenvalues by `iters` Lanczos steps with full reorthogonalisation."""
    params = list(params)
    n = sum(p.numel() for p in params)
    iters = min(iters, n)

    def flat_hvp(x: torch.Tensor) -> torch.Tensor:
        chunks, offset = [], 0
        for p in params:
            chunks.append(x[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        return torch.cat([h.reshape(-1) for h in hvp(loss_fn, params, chunks)]).detach()

    dtype = params[0].dtype
    q = torch.randn(n, generator=generator, dtype=dtype).to(params[0].device)
    q = q / q.norm()
    basis, alphas, betas = [q], [], []
    for j in range(iters):
        w = flat_hvp(basis[j])
        alpha = torch.dot(w, basis[j])
        w = w - alpha * basis[j] - (betas[-1] * basis[j - 1] if j > 0 else 0)
        for b in basis:  # full reorthogonalisation keeps the small tridiagonal spectrum honest
            w = w - torch.dot(w, b) * b
        alphas.append(alpha)
        beta = w.norm()
        if j == iters - 1 or beta < 1e-10:
            break
        betas.append(beta)
        basis.append(w / beta)
    t = torch.diag(torch.stack(alphas))
    if betas:
        off = torch.stack(betas[: len(alphas) - 1])
        t = t + torch.diag(off, 1) + torch.diag(off, -1)
    eig = torch.linalg.eigvalsh(t)
    return [float(e) for e in eig.flip(0)[:k]]
