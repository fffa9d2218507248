"""The nonlinear check: a two-layer tanh network at several init scales, its NTK change and test accuracy.

The paper checks that its mechanisms carry over to nonlinear networks on real tasks; here a two-layer tanh
MLP on real images (sklearn's digits by default), trained by full-batch gradient descent on the mean squared
error to one-hot targets:

.. math::
    f(x) = h^{-\\alpha} U \\tanh\\!\\Big(\\frac{W x}{\\sqrt{d_{in}}}\\Big), \\qquad
    W_{ij}, U_{ki} \\sim \\mathcal N(0, \\sigma^2),

with the init scale sigma as the knob (the linear model's sigma) and the output exponent alpha the linear
model's kappa = d^-alpha: 1/2 is NTK parameterisation, 1 mean-field. With ``centred=True`` (the default scale's
setting) the network's output at initialisation is subtracted, f_c(x) = f(x; W, U) - f(x; W_0, U_0), so it starts
at zero whatever sigma: the centring of the kernel-regime literature (Chizat, Oyallon and Bach, "On Lazy Training in
Differentiable Programming", NeurIPS 2019, Sec. 2: the scaled model is centred so that h(w_0) = 0, otherwise the
initial output grows with the scale and training must first cancel it). Without it, a large sigma makes a large
random starting function that the readout must shrink to cancel, and that shrinkage, not feature learning, moves
the NTK (whose second term carries sum_k U_ki^2). f(x; W_0, U_0) does not depend on the parameters, so the NTK
below is the same for the centred network. The NTK, traced over the outputs, has a
closed form (g_i = 1 - tanh^2 of unit i):

.. math::
    K(x, x') = h^{-2\\alpha} \\Big[ C \\phi(x) \\cdot \\phi(x') + \\frac{x \\cdot x'}{d_{in}}
    \\sum_i \\Big(\\sum_k U_{ki}^2\\Big) g_i(x) g_i(x') \\Big] .
"""
from __future__ import annotations

import math

import numpy as np
import torch

from papers.common.hessian import top_eigenvalue

NTK, MEAN_FIELD = 0.5, 1.0  # output exponents alpha: f = h^-alpha U tanh(...)


def init(gen: torch.Generator, d_in: int, hidden: int, classes: int, scale: float, dtype=torch.float32):
    """W (hidden, d_in) and U (classes, hidden) with i.i.d. N(0, scale^2) entries."""
    W = torch.randn(hidden, d_in, generator=gen, dtype=dtype) * scale
    U = torch.randn(classes, hidden, generator=gen, dtype=dtype) * scale
    return W, U


def forward(W: torch.Tensor, U: torch.Tensor, x: torch.Tensor, output_exponent: float = NTK,
            multiplier: float = 1.0) -> torch.Tensor:
    """(n, d_in) -> (n, classes). `multiplier` scales the output (Chizat, Oyallon and Bach 2019's alpha: a larger
    multiplier at a fixed init makes training lazier, the NTK moving less, without changing the features' saturation)."""
    phi = torch.tanh(x @ W.T / math.sqrt(W.shape[1]))  # (n, h)
    return phi @ U.T * (multiplier * W.shape[0] ** -output_exponent)


def ntk(W: torch.Tensor, U: torch.Tensor, x: torch.Tensor, output_exponent: float = NTK,
        multiplier: float = 1.0) -> torch.Tensor:
    """The output-traced NTK (n, n) of the module docstring (times multiplier^2)."""
    hidden, d_in = W.shape
    phi = torch.tanh(x @ W.T / math.sqrt(d_in))  # (n, h)
    g = 1 - phi * phi
    readout = U.shape[0] * phi @ phi.T
    inner = (g * (U * U).sum(0)) @ g.T  # (n, n)
    return (readout + inner * (x @ x.T) / d_in) * (multiplier ** 2 * hidden ** (-2 * output_exponent))


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
          output_exponent: float = NTK, centred: bool = False, converge_loss: float | None = None,
          output_multiplier: float = 1.0, progress=None) -> dict:
    """Full-batch GD on L = mean_j |f(x_j) - onehot(y_j)|^2 / 2 from init scale `scale`, until converged.

    The learning rate is lr_factor x 2 / lambda_max, lambda_max the top Hessian eigenvalue at
    initialisation (power iteration), so every init scale and output exponent trains at the same relative step.
    `lr_ratio` (readout / first layer, the linear model's eta_u / eta_w) divides the first layer's rate by it
    (which cannot raise the preconditioned sharpness, so the step stays stable); ``inf`` freezes the first layer
    (the ablation of feature learning: the readout alone learns, on the same init at the same rate). Training
    stops once the training accuracy reaches `converge_accuracy` (converged: the training set is fit), or, where
    `converge_loss` is given, once the training loss is at most `converge_loss` (accuracy ignored: a slow first
    layer keeps learning long after the readout fits the labels); after `steps` steps it is not converged.
    `centred`: subtract the output at initialisation (module docstring). `output_multiplier`: the output's factor
    (forward; 1 everywhere but claim (d)'s lazy arm).
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
    with torch.no_grad():  # the starting function, subtracted when centred (a constant: no gradient flows)
        offset_train = forward(W0, U0, x_train, output_exponent, output_multiplier) if centred else 0.0
        offset_test = forward(W0, U0, x_test, output_exponent, output_multiplier) if centred else 0.0

    def output(x, offset):
        return forward(W, U, x, output_exponent, output_multiplier) - offset

    def loss_fn():
        return 0.5 * ((output(x_train, offset_train) - target) ** 2).sum(1).mean()

    lam, _ = top_eigenvalue(loss_fn, params, iters=power_iterations, generator=gen)
    lr = lr_factor * 2 / abs(lam)
    rates = (lr / lr_ratio, lr)  # (first layer W, readout U); lr / inf = 0: frozen
    x_probe = x_train[:probe]
    with torch.no_grad():
        k0 = ntk(W, U, x_probe, output_exponent, output_multiplier)
    converged, taken = False, 0
    it = range(steps + 1) if progress is None else progress(range(steps + 1))
    for k in it:
        out = output(x_train, offset_train)  # (n, C)
        loss = 0.5 * ((out - target) ** 2).sum(1).mean()
        if (float(loss.detach()) <= converge_loss if converge_loss is not None
                else float((out.argmax(1) == y_train).float().mean()) >= converge_accuracy):
            converged = True
            break
        if not torch.isfinite(loss) or k == steps:
            break
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g, rate in zip(params, grads, rates):
                if rate:
                    p -= rate * g
        taken += 1
    with torch.no_grad():
        k_t = ntk(W, U, x_probe, output_exponent, output_multiplier)
        accuracy = float((output(x_test, offset_test).argmax(1) == y_test).float().mean())
        initial_output = float(offset_train.norm(dim=1).mean()) if centred else float(
            forward(W0, U0, x_train, output_exponent, output_multiplier).norm(dim=1).mean())
        loss = float(loss_fn())
        state = layer_state(W, U, W0, U0)
    change = float(torch.linalg.norm(k_t - k0) / torch.linalg.norm(k0))
    return {"ntk_change": change, "test_accuracy": accuracy, "train_loss": loss, "lr": lr, "lr_ratio": lr_ratio,
            "output_exponent": output_exponent, "output_multiplier": output_multiplier, "centred": centred, "initial_output": initial_output,
            "sharpness0": float(lam), "steps_run": taken, "converged": converged,
            "diverged": bool(not np.isfinite(loss)), **state}


# The planted case of claim e_alignment's positive control draws its data and init from this stream (seed + offset),
# apart from the MLP's seeds.
PLANTED_SEED_OFFSET = 10_000


def planted_alignment(seed: int, *, samples: int, d_in: int, hidden: int, scale: float, output_exponent: float,
                      lr_factor: float, converge_loss: float, steps: int, centred: bool) -> tuple[dict, dict]:
    """Learning by alignment planted: a two-layer *linear* network with one output at the linear theory's alignment
    point (small init: r = 1 / (kappa h sigma^2) >> 1), on a linear teacher, the setting where the first layer's
    learning aligns the layers by construction (W grows rank one along the teacher, U along W's top direction, so
    ||U W|| / (||U|| ||W||) rises from ~1/sqrt(h) to ~1).

    .. math::
        f(x) = h^{-\\alpha} U W x / \\sqrt{d_{in}}, \\qquad x \\sim \\mathcal N(0, I), \\quad
        y = \\beta \\cdot x / |\\beta|, \\quad \\beta \\sim \\mathcal N(0, I).

    Full-batch GD on L = mean (f - y)^2 / 2 (centred as the MLP where `centred`) until L <= converge_loss (at most
    `steps`). The rate is lr_factor x 2 / lambda_sol with lambda_sol = 2 h^-alpha |E[x y]| / sqrt(d_in), the top
    Hessian eigenvalue at the balanced solution, twice that at the saddle near zero init (so the run stays stable as
    the weights grow; power iteration at the saddle would see a +-lambda pair). The frozen twin is the state GD on U
    alone converges to from U_0 (W = W_0 fixed), in closed form: U_0 plus the least-squares correction of minimum
    norm, U_T^T = U_0^T + (c Phi)^+ (y - f_0(x)), Phi = x W_0^T / sqrt(d_in), c = h^-alpha.
    Returns the trainable run's and the frozen twin's layer states (layer_state keys, train_loss, steps_run,
    converged)."""
    gen = torch.Generator().manual_seed(PLANTED_SEED_OFFSET + seed)
    dtype = torch.float64
    x = torch.randn(samples, d_in, generator=gen, dtype=dtype)  # (n, d_in)
    beta = torch.randn(d_in, generator=gen, dtype=dtype)
    y = (x @ beta / torch.linalg.norm(beta))[:, None]  # (n, 1), unit variance
    W, U = init(gen, d_in, hidden, 1, scale, dtype=dtype)
    W0, U0 = W.clone(), U.clone()
    c = hidden ** -output_exponent

    def out(W, U):  # (n, 1)
        return x @ W.T / math.sqrt(d_in) @ U.T * c

    offset = out(W0, U0) if centred else torch.zeros_like(y)
    sharpness = 2 * c * float(torch.linalg.norm(x.T @ y / samples)) / math.sqrt(d_in)
    lr = lr_factor * 2 / sharpness
    W.requires_grad_(True)
    U.requires_grad_(True)
    converged, taken = False, 0
    for k in range(steps + 1):
        loss = 0.5 * ((out(W, U) - offset - y) ** 2).mean()
        if float(loss.detach()) <= converge_loss:
            converged = True
            break
        if not torch.isfinite(loss) or k == steps:
            break
        gW, gU = torch.autograd.grad(loss, (W, U))
        with torch.no_grad():
            W -= lr * gW
            U -= lr * gU
        taken += 1
    W, U = W.detach(), U.detach()
    trainable = {**layer_state(W, U, W0, U0), "train_loss": float(loss.detach()), "steps_run": taken,
                 "converged": converged, "lr": lr}
    phi = c * x @ W0.T / math.sqrt(d_in)  # (n, h), rank <= d_in
    u_frozen = U0.T + torch.linalg.pinv(phi) @ (y - (phi @ U0.T - offset))  # (h, 1)
    frozen_loss = float(0.5 * ((phi @ u_frozen - offset - y) ** 2).mean())
    frozen = {**layer_state(W0, u_frozen.T, W0, U0), "train_loss": frozen_loss, "steps_run": 0,
              "converged": frozen_loss <= converge_loss, "lr": lr}
    return trainable, frozen
