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


def train_ensemble(inputs: np.ndarray, targets: np.ndarray, m: dict, generator: torch.Generator):
    """Fit a GaussianEnsemble on (inputs, targets) = ((s, a), (s' - s, r)); each member on its own bootstrap.

    A share `val_fraction` is held out (never trained on) and its per-epoch MSE and NLL are logged; the
    ensemble of the last epoch is returned with the history (a list of per-epoch dicts).
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
    history = []
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
            history.append({"epoch": epoch, "train_loss": float(loss), "val_mse": float(((mean - y[val]) ** 2).mean()),
                            "val_nll": float(gaussian_nll(mean, logvar, y[val]))})
        log.info("epoch %d: %s", epoch, history[-1])
    return model, history
