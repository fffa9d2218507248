"""The probabilistic ensemble: E Gaussian MLPs predicting the state delta and the reward (PETS/MBPO, as in the
official code's ``mbrl/models/gaussian_mlp.py`` on MBRL-Lib).

Each member e maps a normalised (state, action) to a mean and a log-variance per output,

.. math::
    p_e(\\Delta s, r \\mid s, a) = \\mathcal{N}(\\mu_e(s, a), \\operatorname{diag} \\sigma^2_e(s, a)),

trained on its own bootstrap of the data by the Gaussian negative log-likelihood
:math:`\\sum_d (\\mu_{e,d} - y_d)^2 / \\sigma^2_{e,d} + \\log \\sigma^2_{e,d}`. The log-variance is kept
between learned bounds by soft clamps (Chua et al. 2018, App. A.1),

.. math::
    \\log\\sigma^2 \\leftarrow \\ell_{max} - \\operatorname{softplus}(\\ell_{max} - \\log\\sigma^2), \\quad
    \\log\\sigma^2 \\leftarrow \\ell_{min} + \\operatorname{softplus}(\\log\\sigma^2 - \\ell_{min}),

with :math:`0.01 (\\sum \\ell_{max} - \\sum \\ell_{min})` added to the loss so the bounds tighten.
Targets are standardised for training; :meth:`GaussianEnsemble.predict` returns means and variances in the
data's own units (the information loss is measured there, against an absolute resolution).

Training to convergence as the official trainer (MBRL-Lib ``ModelTrainer.train``, which the official
``infoprop_dyna.py`` calls): after every epoch each member's held-out MSE is computed; a member whose score
improved by more than 1% (relative) since its best keeps a snapshot of its weights; training stops when no
member improved for ``patience`` epochs in a row (or after ``epochs``), every member returns to its best
snapshot, and the ``elites`` members with the lowest held-out MSE are kept (MBRL-Lib ``num_elites``: 5 of 7);
only they propagate.
"""
from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

log = logging.getLogger(__name__)


class EnsembleLinear(nn.Module):
    """E independent affine maps applied batch-wise: (E, B, in) -> (E, B, out)."""

    def __init__(self, ensemble: int, d_in: int, d_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble, d_in, d_out))
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, d_out))
        bound = 1.0 / np.sqrt(d_in)
        nn.init.uniform_(self.weight, -bound, bound)  # torch's nn.Linear default, per member

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class GaussianEnsemble(nn.Module):
    """E Gaussian MLPs with SiLU activations and learned log-variance bounds (official: gaussian_mlp.py).

    Args:
        d_in: state + action size. d_out: state delta + reward size.
        ensemble (int): E (paper: 7). hidden (int): units per layer. layers (int): hidden layers.
        learn_logvar_bounds (bool): learn l_min, l_max (init -10 and 0.5, as the official code) or keep them.

    Shapes: :meth:`forward` (E, B, d_in) normalised -> mean, logvar (E, B, d_out) standardised.
    """

    def __init__(self, d_in: int, d_out: int, ensemble: int, hidden: int, layers: int, learn_logvar_bounds: bool):
        super().__init__()
        sizes = [d_in] + [hidden] * layers
        self.hidden = nn.ModuleList(EnsembleLinear(ensemble, a, b) for a, b in zip(sizes, sizes[1:]))
        self.head = EnsembleLinear(ensemble, hidden, 2 * d_out)
        self.min_logvar = nn.Parameter(-10.0 * torch.ones(1, 1, d_out), requires_grad=learn_logvar_bounds)
        self.max_logvar = nn.Parameter(0.5 * torch.ones(1, 1, d_out), requires_grad=learn_logvar_bounds)
        for name in ("in_mean", "in_std", "out_mean", "out_std"):
            self.register_buffer(name, torch.zeros(d_in if name.startswith("in") else d_out))
        self.ensemble, self.d_out = ensemble, d_out

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for layer in self.hidden:
            x = F.silu(layer(x))
        mean, logvar = self.head(x).split(self.d_out, dim=-1)
        logvar = self.max_logvar - F.softplus(self.max_logvar - logvar)
        logvar = self.min_logvar + F.softplus(logvar - self.min_logvar)
        return mean, logvar

    @torch.no_grad()
    def keep(self, members) -> None:
        """Keep only `members` (indices along the ensemble axis): the elites."""
        index = torch.as_tensor(list(members))
        for layer in [*self.hidden, self.head]:
            layer.weight = nn.Parameter(layer.weight[index].clone())
            layer.bias = nn.Parameter(layer.bias[index].clone())
        self.ensemble = len(index)

    def set_normalisers(self, inputs: np.ndarray, targets: np.ndarray) -> None:
        for name, arr in (("in", inputs), ("out", targets)):
            getattr(self, f"{name}_mean").copy_(torch.as_tensor(arr.mean(0)))
            getattr(self, f"{name}_std").copy_(torch.as_tensor(arr.std(0) + 1e-8))

    @torch.no_grad()
    def predict(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every member's mean and variance in data units: (B, d_in) raw -> (E, B, d_out) twice."""
        x = ((inputs - self.in_mean) / self.in_std).expand(self.ensemble, *inputs.shape)
        mean, logvar = self(x)
        return mean * self.out_std + self.out_mean, logvar.exp() * self.out_std ** 2


def gaussian_nll(mean: torch.Tensor, logvar: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over members, batch and outputs of (mu - y)^2 exp(-logvar) + logvar (the constant dropped)."""
    return ((mean - target) ** 2 * torch.exp(-logvar) + logvar).mean()


def _member_slices(model: GaussianEnsemble) -> list[torch.Tensor]:
    """The parameters that carry a member axis (every layer's weight and bias), in a fixed order."""
    return [t for layer in [*model.hidden, model.head] for t in (layer.weight, layer.bias)]


def train_ensemble(inputs: np.ndarray, targets: np.ndarray, m: dict, generator: torch.Generator):
    """Fit a GaussianEnsemble on (inputs, targets) = ((s, a), (s' - s, r)); each member on its own bootstrap.

    A share `val_fraction` is held out (never trained on). After each epoch every member's held-out MSE
    (standardised targets) is measured; members that improved by more than 1% keep a snapshot; training stops after
    `patience` epochs without any member improving, or at `epochs`. Every member returns to its best snapshot and
    the `elites` best are kept (the module docstring). Returns the ensemble and the history: one dict per epoch
    (train loss, held-out MSE and NLL of the ensemble, how many members improved) and a last one with
    ``"final": True`` (the elites' held-out MSE, the epoch of stopping, whether patience stopped it).
    """
    n = len(inputs)
    perm = torch.randperm(n, generator=generator).numpy()
    n_val = int(round(m["val_fraction"] * n))
    val, fit = perm[:n_val], perm[n_val:]
    model = GaussianEnsemble(inputs.shape[1], targets.shape[1], m["ensemble"], m["hidden"], m["layers"],
                             m["learn_logvar_bounds"])
    model.set_normalisers(inputs[fit], targets[fit])
    x = ((torch.as_tensor(inputs) - model.in_mean) / model.in_std).float()
    y = ((torch.as_tensor(targets) - model.out_mean) / model.out_std).float()
    fit_t = torch.as_tensor(fit)
    # Bootstrap: member e trains on n_fit indices drawn with replacement from the fit split.
    boot = fit_t[torch.randint(len(fit), (m["ensemble"], len(fit)), generator=generator)]  # (E, n_fit)
    decay = [p for name, p in model.named_parameters() if name.endswith("weight")]
    rest = [p for name, p in model.named_parameters() if not name.endswith("weight") and p.requires_grad]
    opt = torch.optim.Adam([{"params": decay, "weight_decay": m["weight_decay"]}, {"params": rest}], lr=m["lr"])
    best = torch.full((m["ensemble"],), float("inf"))
    snapshot = [t.detach().clone() for t in _member_slices(model)]
    history, idle, stopped = [], 0, False
    for epoch in range(m["epochs"]):
        order = boot[:, torch.randperm(len(fit), generator=generator)]
        for start in range(0, len(fit), m["batch"]):
            idx = order[:, start: start + m["batch"]]  # (E, b)
            mean, logvar = model(x[idx])
            loss = gaussian_nll(mean, logvar, y[idx])
            loss = loss + 0.01 * (model.max_logvar.sum() - model.min_logvar.sum())
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            mean, logvar = model(x[val].expand(m["ensemble"], -1, -1))
            member_mse = ((mean - y[val]) ** 2).mean((1, 2))  # (E,)
            improved = member_mse < best * (1.0 - 0.01)  # MBRL-Lib: improvement_threshold 0.01
            for t, snap in zip(_member_slices(model), snapshot):
                snap[improved] = t[improved]
            best = torch.where(improved, member_mse, best)
            history.append({"epoch": epoch, "train_loss": float(loss), "val_mse": float(member_mse.mean()),
                            "val_nll": float(gaussian_nll(mean, logvar, y[val])), "improved": int(improved.sum()),
                            "final": False, "stopped_early": False, "elites": ""})
        log.info("epoch %d: %s", epoch, history[-1])
        idle = 0 if improved.any() else idle + 1
        if idle >= m["patience"]:
            stopped = True
            break
    with torch.no_grad():
        for t, snap in zip(_member_slices(model), snapshot):
            t.copy_(snap)
    elites = torch.argsort(best)[: m["elites"]].sort().values
    model.keep(elites.tolist())
    history.append({"epoch": history[-1]["epoch"], "train_loss": history[-1]["train_loss"],
                    "val_mse": float(best[elites].mean()), "val_nll": float("nan"), "improved": 0, "final": True,
                    "stopped_early": stopped, "elites": ",".join(map(str, elites.tolist()))})
    return model, history
