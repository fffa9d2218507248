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


def layer_alignment(W: torch.Tensor, U: torch.Tensor) -> float:
    """||U W||_F / (||U||_F ||W||_F) in [0, 1]: the two layers' alignment.

    With one input and one output (W = w (h, 1), U = u^T (1, h)) it is |u.w| / (|u| |w|) = |cos(u, w)|, the
    linear model's alignment; in general it is 1 when the readout's rows lie in the span of the first layer's
    top left singular vector and ~ 1/sqrt(h) for independent random layers.
    """
    return float(torch.linalg.norm(U @ W) / (torch.linalg.norm(U) * torch.linalg.norm(W)))


def layer_state(W, U, W0, U0) -> dict:
    """The quantities a mechanism is read from, in the network's layers (the linear model's, see phase.summarise):
    layer alignment before and after, first-layer turn 1 - cos(W_T, W_0) and norm ratio |W_T| / |W_0| (Frobenius)."""
    def turn(a, b):
        return float(1 - (a * b).sum() / (torch.linalg.norm(a) * torch.linalg.norm(b)))

    return {"alignment0": layer_alignment(W0, U0), "alignment": layer_alignment(W, U),
            "dir_w": turn(W, W0), "norm_w": float(torch.linalg.norm(W) / torch.linalg.norm(W0)),
            "dir_u": turn(U, U0), "norm_u": float(torch.linalg.norm(U) / torch.linalg.norm(U0))}


def train(x_train, y_train, x_test, y_test, *, scale: float, hidden: int, steps: int, lr_factor: float,
          power_iterations: int, probe: int, seed: int, converge_accuracy: float = 1.0, lr_ratio: float = 1.0,
          progress=None) -> dict:
    """Full-batch GD on L = mean_j |f(x_j) - onehot(y_j)|^2 / 2 from init scale `scale`, until converged.

    The learning rate is lr_factor x 2 / lambda_max, lambda_max the top Hessian eigenvalue at
    initialisation (power iteration), so every init scale trains at the same relative step. `lr_ratio`
    (readout / first layer, the linear model's eta_u / eta_w) divides the first layer's rate by it (which
    cannot raise the preconditioned sharpness, so the step stays stable). Training stops once the training
    accuracy reaches `converge_accuracy` (converged: the training set is fit), or after `steps` steps (not
    converged: reported, not used by the claims).
    Returns the NTK change ||K_T - K_0||_F / ||K_0||_F on the first `probe` training points, the test
    accuracy, the final training loss, the steps run, whether it converged, and the layers' state (layer_state).
    """
    gen = torch.Generator().manual_seed(seed)
    classes = int(max(y_train.max(), y_test.max())) + 1
    target = torch.nn.functional.one_hot(y_train, classes).to(x_train.dtype)
    W, U = init(gen, x_train.shape[1], hidden, classes, scale, dtype=x_train.dtype)
    W0, U0 = W.clone(), U.clone()
    W.requires_grad_(True)
    U.requires_grad_(True)
    params = [W, U]

    def loss_fn():
        return 0.5 * ((forward(W, U, x_train) - target) ** 2).sum(1).mean()

    lam, _ = top_eigenvalue(loss_fn, params, iters=power_iterations, generator=gen)
    lr = lr_factor * 2 / abs(lam)
    rates = (lr / lr_ratio, lr)  # (first layer W, readout U)
    x_probe = x_train[:probe]
    with torch.no_grad():
        k0 = ntk(W, U, x_probe)
    converged, taken = False, 0
    it = range(steps + 1) if progress is None else progress(range(steps + 1))
    for k in it:
        out = forward(W, U, x_train)  # (n, C)
        if float((out.argmax(1) == y_train).float().mean()) >= converge_accuracy:
            converged = True
            break
        loss = 0.5 * ((out - target) ** 2).sum(1).mean()
        if not torch.isfinite(loss) or k == steps:
            break
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g, rate in zip(params, grads, rates):
                p -= rate * g
        taken += 1
    with torch.no_grad():
        k_t = ntk(W, U, x_probe)
        accuracy = float((forward(W, U, x_test).argmax(1) == y_test).float().mean())
        loss = float(loss_fn())
        state = layer_state(W, U, W0, U0)
    change = float(torch.linalg.norm(k_t - k0) / torch.linalg.norm(k0))
    return {"ntk_change": change, "test_accuracy": accuracy, "train_loss": loss, "lr": lr, "lr_ratio": lr_ratio,
            "sharpness0": float(lam), "steps_run": taken, "converged": converged,
            "diverged": bool(not np.isfinite(loss)), **state}
