"""The paper's model and its fully neural baseline, and the task losses (official ``models.py``, ``losses.py``).

Both models share the encoder: an MLP maps a target shape X to force densities

.. math::
    q = s \\odot (\\mathrm{softplus}(\\mathrm{MLP}(X)) + \\tau),

with s the sign of each bar (-1 compression, +1 tension) and tau >= 0 a lower bound on |q|, so
that the sign constraints hold by construction. The decoders differ:

- hybrid (the paper's model): the force density method, X_hat = FDM(q, X_supports, P) (:mod:`.fdm`);
  the prediction is in equilibrium by construction.
- neural (the baseline): an MLP decoder maps (q, supports, loads) to the free nodes; it is trained
  with the equilibrium residual as a penalty (a physics-informed loss), so equilibrium is only
  approximate.
"""
from __future__ import annotations

from itertools import pairwise

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from papers.neural_fdm.fdm import FDM


def mlp(d_in: int, width: int, depth: int, d_out: int) -> nn.Sequential:
    """`depth` linear layers (the last one d_out wide) with ELU between them (equinox's MLP(depth))."""
    dims = [d_in] + [width] * (depth - 1) + [d_out]
    layers = []
    for i, (a, b) in enumerate(pairwise(dims)):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(nn.ELU())
    return nn.Sequential(*layers)


class Encoder(nn.Module):
    """Target shape -> force densities q (B, E), signs fixed per bar, inactive bars at 0.

    With `normalise_height` the encoder reads z as a fraction of the target's height, (z - z_0) / H with
    z_0 and H the lowest support and the supports' height span: a target is presented as a designer draws
    it, its scale given by the supports, which the decoder receives as they are.
    """

    def __init__(self, fdm: FDM, inputs: torch.Tensor, width: int, depth: int, shift: float,
                 normalise_height: bool = False):
        super().__init__()
        self.register_buffer("inputs", inputs)  # node indices the encoder sees (towers: the compression rings)
        self.register_buffer("signs", fdm.signs * fdm.active)  # (E,) +-1, 0 where inactive
        self.register_buffer("supports", fdm.supports)
        self.net = mlp(3 * len(inputs), width, depth, len(fdm.signs))
        self.shift = shift  # tau
        self.normalise_height = normalise_height

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (B, N, 3) -> q (B, E)
        inp = x[:, self.inputs]  # (B, I, 3)
        if self.normalise_height:
            zs = x[:, self.supports, 2]  # (B, S)
            z0, span = zs.min(1).values, zs.max(1).values - zs.min(1).values  # (B,)
            inp = torch.cat([inp[..., :2], ((inp[..., 2] - z0[:, None]) / span[:, None])[..., None]], -1)
        h = self.net(inp.flatten(1))
        return (F.softplus(h) + self.shift) * self.signs


class Hybrid(nn.Module):
    """The paper's model: MLP encoder, force density decoder."""

    def __init__(self, fdm: FDM, encoder: Encoder):
        super().__init__()
        self.fdm, self.encoder = fdm, encoder

    def forward(self, x: torch.Tensor, loads: torch.Tensor):  # -> X_hat (B, N, 3), q (B, E)
        q = self.encoder(x)
        return self.fdm.equilibrium(q, x, loads), q


class Neural(nn.Module):
    """The fully neural baseline: MLP encoder, MLP decoder from (q, supports, loads_z) to the free nodes."""

    def __init__(self, fdm: FDM, encoder: Encoder, width: int, depth: int):
        super().__init__()
        self.fdm, self.encoder = fdm, encoder
        n_in = len(fdm.signs) + 3 * len(fdm.supports) + fdm.num_nodes  # official MLPDecoderXL inputs
        self.decoder = mlp(n_in, width, depth, 3 * fdm.num_free)

    def forward(self, x: torch.Tensor, loads: torch.Tensor):
        q = self.encoder(x)
        h = torch.cat([q, x[:, self.fdm.supports].flatten(1), loads[..., 2]], 1)
        x_hat = x.clone()
        x_hat[:, self.fdm.free] = self.decoder(h).view(len(x), -1, 3)
        return x_hat, q


def mlp_flops(module: nn.Module) -> int:
    """Floating-point operations of one forward pass per shape: 2 per weight of every linear layer."""
    return sum(2 * m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


# ---- losses ------------------------------------------------------------------------------------
def shape_error(task: str, x: torch.Tensor, x_hat: torch.Tensor, tower_levels=None) -> torch.Tensor:
    """Per-shape error (B,) as the official losses, summed over the compared coordinates.

    shells: L1 over every coordinate. towers: squared error over the compression rings' xyz plus
    the tension rings' heights z (``tower_levels`` = (ring node indices, tension node indices)).
    """
    if task == "shell":
        return (x - x_hat).abs().flatten(1).sum(1)
    rings, tension = tower_levels
    return ((x[:, rings] - x_hat[:, rings]) ** 2).flatten(1).sum(1) + ((x[:, tension, 2] - x_hat[:, tension, 2]) ** 2).sum(1)


def residual_norm(fdm: FDM, q: torch.Tensor, x_hat: torch.Tensor, loads: torch.Tensor) -> torch.Tensor:
    """||r_free||_2 per shape (B,): the paper's physics loss and equilibrium metric."""
    r = fdm.residual(q, x_hat, loads)[:, fdm.free]
    return torch.sqrt((r ** 2).flatten(1).sum(1))


def log_condition(fdm: FDM, q: torch.Tensor) -> torch.Tensor:
    """log10 of the condition number of K = C_f^T diag(q) C_f per shape (B,): max |eig| / min |eig|."""
    eig = torch.linalg.eigvalsh(fdm.stiffness(q)).abs()  # (B, Nf)
    return torch.log10(eig.max(1).values) - torch.log10(eig.min(1).values)


def spectrum_check(fdm: FDM, q: torch.Tensor, condition_limit: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per shape (B,): the inertia of K(q) (its number of negative eigenvalues; it changes only where q
    crosses a singular K) and whether cond(K) <= `condition_limit`."""
    eig = torch.linalg.eigvalsh(fdm.stiffness(q))  # (B, Nf) ascending
    mag = eig.abs()
    cond_ok = torch.log10(mag.max(1).values) - torch.log10(mag.min(1).values) <= float(np.log10(condition_limit))
    return (eig < 0).sum(1), cond_ok


def q_variance(q: torch.Tensor) -> torch.Tensor:
    """The towers' regularizer: variance of the tension q plus variance of the compression q (batch-wide)."""
    pos, neg = q[q > 0], q[q < 0]
    out = q.new_zeros(())
    for part in (pos, neg):
        if part.numel() > 1:
            out = out + part.var(unbiased=False)
    return out


def q_variance_stacked(q: torch.Tensor) -> torch.Tensor:
    """:func:`q_variance` of each of M batches at once: q (M, B, E) -> (M,). The tension (q > 0) and compression
    (q < 0) entries of a batch are masks instead of boolean selections (whose sizes may differ by member); each
    population variance is sum (q - mean)^2 / count over its mask, 0 where the mask holds fewer than 2 entries."""
    flat = q.flatten(1)  # (M, B E)
    out = flat.new_zeros(flat.shape[0])
    for mask in (flat > 0, flat < 0):
        w = mask.to(flat.dtype)
        count = w.sum(1)
        mean = (flat * w).sum(1) / count.clamp(min=1)
        var = (((flat - mean[:, None]) * w) ** 2).sum(1) / count.clamp(min=1)
        out = out + torch.where(count > 1, var, torch.zeros_like(var))
    return out
