"""A design task in one object: its structure and solver, its target sampler, its loss.

The losses follow the official ``losses.py``: shells compare every coordinate (L1) and towers the
compression rings' xyz and the tension rings' heights (squared error) plus 10 x the variance of the
tension and of the compression force densities (for models whose q are force densities: the hybrid and
direct optimisation; the fully neural model's latent is not one, and the penalty pinned it at its floor on
every bar, hiding the target from its decoder); kappa x ||r_free|| is the PINN baseline's physics term
(kappa = 0: the paper's NN baseline, the shape loss alone).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from papers.neural_fdm import models, shapes
from papers.neural_fdm.fdm import FDM


@dataclass
class Task:
    name: str  # shell | tower
    p: object  # params.Shell | params.Tower
    fdm: FDM
    inputs: torch.Tensor  # node indices the encoder reads
    levels: tuple | None  # towers: (compression-ring nodes, tension-ring nodes)
    load: float  # vertical area load

    @property
    def span(self) -> float:
        """The structure's governing dimension: a shell's side, a tower's height (for length tolerances)."""
        return float(self.p.size if self.levels is None else self.p.height)

    @property
    def num_compared(self) -> int:
        """Coordinates the shape error compares (it is reported per coordinate)."""
        if self.levels is None:
            return 3 * self.fdm.num_nodes
        return 3 * len(self.levels[0]) + len(self.levels[1])

    def sample(self, rng: np.random.Generator, n: int, split: str = "id") -> np.ndarray:
        """n random targets (n, N, 3) in distribution ("id") or out of it ("ood")."""
        return shapes.sample_targets(self.name, self.p, rng, n, split)

    def sample_stacked(self, rngs, n: int, split: str = "id") -> np.ndarray:
        """n random targets from each generator of `rngs` (M, n, N, 3); row m equals ``sample(rngs[m], n, split)``."""
        return shapes.sample_stacked(self.name, self.p, rngs, n, split)

    def loads(self, x: torch.Tensor) -> torch.Tensor:
        return self.fdm.area_loads(x, self.load)

    def shape_error(self, x, x_hat) -> torch.Tensor:
        return models.shape_error(self.name, x, x_hat, self.levels)

    def loss(self, x, x_hat, q, loads, residual_weight: float, regularize: bool = True) -> tuple[torch.Tensor, dict]:
        """The training (and direct-optimisation) loss, mean over the batch, and its terms; `regularize`: add the
        towers' q-variance term (q are force densities)."""
        shape = self.shape_error(x, x_hat).mean()
        total, terms = shape, {"shape": shape}
        if residual_weight:
            res = models.residual_norm(self.fdm, q, x_hat, loads).mean()
            total = total + residual_weight * res
            terms["residual"] = res
        if regularize and self.name == "tower" and self.p.regularization:
            reg = models.q_variance(q)
            total = total + self.p.regularization * reg
            terms["regularization"] = reg
        return total, terms

    def stacked_loss(self, x, x_hat, q, loads, residual_weight: float, regularize: bool = True
                     ) -> tuple[torch.Tensor, dict]:
        """:meth:`loss` of M independent members at once: x, x_hat, loads (M, B, N, 3), q (M, B, E) -> the losses
        (M,) and their terms (each (M,)); member m's entries equal ``loss(x[m], x_hat[m], q[m], loads[m], ...)``
        (tested), as one batch of tensor operations instead of M."""
        M, B = x.shape[:2]
        shape = self.shape_error(x.flatten(0, 1), x_hat.flatten(0, 1)).view(M, B).mean(1)
        total, terms = shape, {"shape": shape}
        if residual_weight:
            res = models.residual_norm(self.fdm, q.flatten(0, 1), x_hat.flatten(0, 1), loads.flatten(0, 1))
            res = res.view(M, B).mean(1)
            total = total + residual_weight * res
            terms["residual"] = res
        if regularize and self.name == "tower" and self.p.regularization:
            reg = models.q_variance_stacked(q)
            total = total + self.p.regularization * reg
            terms["regularization"] = reg
        return total, terms

    def admissible(self, q: torch.Tensor, condition_limit: float) -> torch.Tensor:
        """(B,) bool: cond(K(q)) <= condition_limit (else the solve counts as failed)."""
        return models.spectrum_check(self.fdm, q, condition_limit)[1]

    def build(self, model: str) -> torch.nn.Module:
        """A freshly initialised learned model (float32, seed the caller's torch RNG first)."""
        p = self.p
        encoder = models.Encoder(self.fdm, self.inputs, p.width, p.depth, p.shift,
                                 normalise_height=getattr(p, "normalise_height", False))
        if model == "hybrid":
            return models.Hybrid(self.fdm, encoder)
        return models.Neural(self.fdm, encoder, p.width, p.depth)


def build(name: str, params, dtype=torch.float64) -> Task:
    """The task `name` ("shell" or "tower") from the paper's Params, its solver in `dtype`."""
    p = params.task(name)
    if name == "shell":
        fdm = FDM(shapes.grid_structure(p.grid), dtype)
        return Task(name, p, fdm, torch.arange(fdm.num_nodes), None, p.load)
    fdm = FDM(shapes.tube_structure(p.levels, p.sides, p.rings), dtype)
    idx = np.arange(p.levels * p.sides).reshape(p.levels, p.sides)
    comp = shapes.ring_levels(p.levels, p.rings)
    tension = np.setdiff1d(np.arange(p.levels), comp)
    rings = torch.as_tensor(idx[comp].ravel())
    return Task(name, p, fdm, rings, (rings, torch.as_tensor(idx[tension].ravel())), 0.0)
