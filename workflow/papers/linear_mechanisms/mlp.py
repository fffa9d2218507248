"""The nonlinear check: a two-layer tanh network at several init scales, its NTK change and test accuracy.

The paper checks that its mechanisms carry over to nonlinear networks on real tasks; here a two-layer tanh
MLP in NTK parameterisation on real images (sklearn's digits by default), trained by full-batch gradient
descent on the mean squared error to one-hot targets:

.. math::
    f(x) = \\frac{1}{\\sqrt{h}} U \\tanh\\!\\Big(\\frac{W x}{\\sqrt{d_{in}}}\\Big), \\qquad
    W_{ij}, U_{ki} \\sim \\mathcal N(0, \\sigma^2),

with the init scale sigma as the knob (the linear model's sigma). The NTK, traced over the outputs, has a
closed form (g_i = 1 - tanh^2 of unit i):

.. math::
    K(x, x') = \\frac{C}{h} \\phi(x) \\cdot \\phi(x') + \\frac{x \\cdot x'}{d_{in}\\, h}
    \\sum_i \\Big(\\sum_k U_{ki}^2\\Big) g_i(x) g_i(x') .
"""
from __future__ import annotations

import math

import numpy as np
import torch

from papers.common.hessian import top_eigenvalue


def init(gen: torch.Generator, d_in: int, hidden: int, classes: int, scale: float, dtype=torch.float32):
    """W (hidden, d_in) and U (classes, hidden) with i.i.d. N(0, scale^2) entries."""
    W = torch.randn(hidden, d_in, generator=gen, dtype=dtype) * scale
    U = torch.randn(classes, hidden, generator=gen, dtype=dtype) * scale
    return W, U


def forward(W: torch.Tensor, U: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(n, d_in) -> (n, classes)."""
    phi = torch.tanh(x @ W.T / math.sqrt(W.shape[1]))  # (n, h)
    return phi @ U.T / math.sqrt(W.shape[0])


def ntk(W: torch.Tensor, U: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The output-traced NTK (n, n) of the module docstring."""
    hidden, d_in = W.shape
    phi = torch.tanh(x @ W.T / math.sqrt(d_in))  # (n, h)
    g = 1 - phi * phi
    readout = U.shape[0] * phi @ phi.T / hidden
    inner = (g * (U * U).sum(0)) @ g.T / hidden  # (n, n)
    return readout + inner * (x @ x.T) / d_in


def train(x_train, y_train, x_test, y_test, *, scale: float, hidden: int, steps: int, lr_factor: float,
          power_iterations: int, probe: int, seed: int, progress=None) -> dict:
    """Full-batch GD on L = mean_j |f(x_j) - onehot(y_j)|^2 / 2 from init scale `scale`.

    The learning rate is lr_factor x 2 / lambda_max, lambda_max the top Hessian eigenvalue at
    initialisation (power iteration), so every init scale trains at the same relative step.
    Returns the NTK change ||K_T - K_0||_F / ||K_0||_F on the first `probe` training points, the test
    accuracy, the final training loss and the learning rate.
    """
    gen = torch.Generator().manual_seed(seed)
    classes = int(max(y_train.max(), y_test.max())) + 1
    target = torch.nn.functional.one_hot(y_train, classes).to(x_train.dtype)
    W, U = init(gen, x_train.shape[1], hidden, classes, scale, dtype=x_train.dtype)
    W.requires_grad_(True)
    U.requires_grad_(True)
    params = [W, U]

    def loss_fn():
        return 0.5 * ((forward(W, U, x_train) - target) ** 2).sum(1).mean()

    lam, _ = top_eigenvalue(loss_fn, params, iters=power_iterations, generator=gen)
    lr = lr_factor * 2 / abs(lam)
    x_probe = x_train[:probe]
    with torch.no_grad():
        k0 = ntk(W, U, x_probe)
    it = range(steps) if progress is None else progress(range(steps))
    for _ in it:
        grads = torch.autograd.grad(loss_fn(), params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= lr * g
    with torch.no_grad():
        k_t = ntk(W, U, x_probe)
        accuracy = float((forward(W, U, x_test).argmax(1) == y_test).float().mean())
        loss = float(loss_fn())
    change = float(torch.linalg.norm(k_t - k0) / torch.linalg.norm(k0))
    return {"ntk_change": change, "test_accuracy": accuracy, "train_loss": loss, "lr": lr,
            "sharpness0": float(lam), "diverged": bool(not np.isfinite(loss))}
