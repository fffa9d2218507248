"""The paper's real-network check: a tanh MLP trained by full-batch GD on the mean squared error,
its sharpness measured along the way by power iteration (Cohen et al. 2021's protocol).

Progressive sharpening drives the sharpness up until it reaches 2 / eta, where it stays (the edge of
stability) while the loss keeps decreasing non-monotonically.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import nn

from papers.common.hessian import top_eigenvalue


CIFAR_SHAPE = (3, 32, 32)


def mlp(d_in: int, hidden: int, d_out: int) -> nn.Module:
    """d_in -> hidden -> hidden -> d_out with tanh, PyTorch's default initialisation."""
    return nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, d_out))


def cnn(channels: int, hidden: int, d_out: int, side: int = 32) -> nn.Module:
    """(N, channels, side, side) -> d_out: two 3x3 tanh convolutions of `hidden` channels, each followed by 2x2 max
    pooling, and a linear readout: the small CNN of the paper's (and Cohen et al. 2021's) CIFAR-10 checks."""
    return nn.Sequential(nn.Conv2d(channels, hidden, 3, padding=1), nn.Tanh(), nn.MaxPool2d(2),
                         nn.Conv2d(hidden, hidden, 3, padding=1), nn.Tanh(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(hidden * (side // 4) ** 2, d_out))


def train(x: torch.Tensor, labels: torch.Tensor, *, hidden: int, lr: float, steps: int, sharpness_every: int,
          power_iterations: int, seed: int, architecture: str = "fcn", progress=None) -> pd.DataFrame:
    """Full-batch GD on L = mean_i |g(x_i) - onehot(y_i)|^2 / 2; returns the history. `architecture`: "fcn" (x is
    (N, d)) or "cnn" (x is (N, C, H, W)).

    Columns: step, loss, accuracy, sharpness (NaN between measurements), two_over_eta.
    """
    torch.manual_seed(seed)
    n_classes = int(labels.max()) + 1
    target = nn.functional.one_hot(labels, n_classes).to(x.dtype)
    model = (cnn(x.shape[1], hidden, n_classes, x.shape[-1]) if architecture == "cnn" else
             mlp(x.shape[1], hidden, n_classes)).to(x.dtype)
    params = list(model.parameters())

    def loss_fn():
        return 0.5 * ((model(x) - target) ** 2).sum(1).mean()

    gen = torch.Generator().manual_seed(seed)
    eig_vec = None
    rows = []
    steps_iter = range(steps + 1) if progress is None else progress(range(steps + 1))
    for step in steps_iter:
        sharp = float("nan")
        if step % sharpness_every == 0:
            # Warm start from the last eigenvector: the Hessian moves slowly between measurements.
            sharp, eig_vec = top_eigenvalue(loss_fn, params, iters=power_iterations, generator=gen, init=eig_vec)
        loss = loss_fn()
        with torch.no_grad():
            acc = float((model(x).argmax(1) == labels).float().mean())
        rows.append({"step": step, "loss": float(loss), "accuracy": acc, "sharpness": sharp})
        if step == steps:
            break
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= lr * g
    df = pd.DataFrame(rows)
    df["two_over_eta"] = 2.0 / lr
    return df


def late_mean(history: pd.DataFrame, fraction: float = 1 / 3) -> float:
    """Mean measured sharpness over the last `fraction` of training."""
    measured = history.dropna(subset=["sharpness"])
    last = measured[measured.step >= history.step.max() * (1 - fraction)]
    return float(np.mean(last.sharpness))
