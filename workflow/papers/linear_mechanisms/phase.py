"""The phase diagram: hyperparameters -> the model's constants, the predicted regime, the measured one.

Hyperparameters (the paper's axes): width d, init scale sigma (u_i, w_i ~ N(0, sigma^2)), output scale
kappa = d^(-alpha) (alpha = 1/2: NTK parameterisation; alpha = 1: mean-field), and the ratio of
learning rates beta = eta_u / eta_w (we set eta_u = sqrt(beta), eta_w = 1 / sqrt(beta): the product
only sets the clock of gradient flow).

Prediction (derived here from eqs. (1)-(3) of :mod:`.exact`; the paper's own phase boundaries could not be
read here: the stored copy of arXiv 2401.07085 answers every search (phase diagram, kernel / feature learning
phase, alignment, disalignment, rescaling, learning-rate ratio, width limits; stages.PAPER_SEARCH lists them)
with its abstract and the start of Section 1 only, so claims (c) and (c_phase) test these regions). The rescaled Gram scalars of a random initialisation are a = |u~0|^2 ~ d sigma^2 / eta_u,
b = |w~0|^2 ~ d sigma^2 / eta_w (their typical values) and c = sqrt(a b) cos(u0, w0), where cos^2(u0, w0)
of two independent Gaussian vectors in R^d is Beta(1/2, (d - 1)/2). Averaging the exact learned state over
that law (quantiles, both signs) gives a deterministic phase diagram. Its regimes are set by three numbers
(F* the target slope):

- r = |F*| / (kappa d sigma^2): target output over the initial area sqrt(D); final |cos(u, w)| = r / sqrt(1 + r^2).
- rho = |w~0| / |u~0| = sqrt(beta): which layer dominates the rescaled pair (rho >> 1: the first layer w).
- s = 2 r / (rho + 1 / rho): the NTK moves by sqrt(1 + s^2) - 1; s << 1 is the kernel regime.

Mechanisms of the first layer (the features), as read off the learned state:
alignment (|cos(u, w)| rises; s >~ 1, rho <~ 1: w rotates towards u), rescaling (w keeps its direction,
its norm changes by cosh S; s >~ 1 and rho >> 1: the dominant layer cannot rotate), disalignment
(|cos| falls: the initial output exceeds the target, kappa sqrt(d) sigma^2 > |F*|, which moves |cos| by its
initial size ~ d^(-1/2), so only at small width), kernel (NTK change below a threshold).
"""
from __future__ import annotations

import numpy as np

from papers.linear_mechanisms import exact

MECHANISMS = ("kernel", "alignment", "disalignment", "rescaling")
LABELS = (*MECHANISMS, "mixed")  # "mixed": the NTK moves but no single mechanism dominates
HYPER = ("width", "sigma", "kappa_exponent", "lr_ratio")


def constants(width, kappa_exponent, lr_ratio):
    """kappa = d^(-alpha), eta_u = sqrt(beta), eta_w = 1 / sqrt(beta)."""
    width, beta = np.asarray(width, float), np.asarray(lr_ratio, float)
    return width ** -np.asarray(kappa_exponent, float), np.sqrt(beta), 1 / np.sqrt(beta)


def numbers(width, sigma, kappa_exponent, lr_ratio, target: float) -> dict:
    """The dimensionless numbers r, rho, s and q0 = (typical initial output) / target of the module docstring."""
    kappa, _, _ = constants(width, kappa_exponent, lr_ratio)
    r = abs(target) / (kappa * width * sigma**2)
    rho = np.sqrt(lr_ratio)
    return {"r": r, "rho": rho, "s": 2 * r / (rho + 1 / rho), "q0": 1 / (r * np.sqrt(width))}


def typical_grams(width, sigma, kappa_exponent, lr_ratio, quantiles: int = 16):
    """a, b, c of 2 x `quantiles` equally likely initialisations at this width (module docstring).

    a and b at their typical values; cos(u0, w0) at the mid-quantiles of |cos|, whose square is
    Beta(1/2, (d - 1)/2), with both signs.
    """
    from scipy.stats import beta

    _, eta_u, eta_w = constants(width, kappa_exponent, lr_ratio)
    a = width * sigma**2 / eta_u
    b = width * sigma**2 / eta_w
    q = (np.arange(quantiles) + 0.5) / quantiles
    cos = np.sqrt(beta.ppf(q, 0.5, (width - 1) / 2)) if width > 1 else np.ones(quantiles)
    cos = np.concatenate([cos, -cos])
    return np.full_like(cos, a), np.full_like(cos, b), np.sqrt(a * b) * cos


def learned_state(a, b, c, *, kappa, eta_u, eta_w, m2, mxy) -> dict:
    """Observables of the learned state (t -> infinity) relative to t = 0, from the exact solution."""
    problem = dict(kappa=kappa, eta_u=eta_u, eta_w=eta_w, m2=m2, mxy=mxy)
    S = exact.final_exponent(a, b, c, **problem)
    gram0 = exact.gram_at(np.zeros_like(S), a, b, c, eta_u=eta_u, eta_w=eta_w)
    gram = exact.gram_at(S, a, b, c, eta_u=eta_u, eta_w=eta_w)
    return summarise(exact.observables(gram, gram0, kappa=kappa, eta_u=eta_u, eta_w=eta_w),
                     exact.observables(gram0, gram0, kappa=kappa, eta_u=eta_u, eta_w=eta_w))


def summarise(obs: dict, obs0: dict) -> dict:
    """The five numbers a mechanism is read from: NTK change, |cos| before/after, first-layer norm and direction."""
    return {"ntk_change": np.abs(obs["ntk"] / obs0["ntk"] - 1),
            "cos0": np.abs(obs0["cos_uw"]), "cos": np.abs(obs["cos_uw"]),
            "norm_w": obs["norm_w"], "dir_w": obs["dir_w"],
            "norm_u": obs["norm_u"], "dir_u": obs["dir_u"]}


def predict(width, sigma, kappa_exponent, lr_ratio, *, m2: float, mxy: float) -> dict:
    """The predicted learned state: the exact one averaged over typical initialisations (the phase diagram)."""
    kappa, eta_u, eta_w = constants(width, kappa_exponent, lr_ratio)
    a, b, c = typical_grams(width, sigma, kappa_exponent, lr_ratio)
    states = learned_state(a, b, c, kappa=kappa, eta_u=eta_u, eta_w=eta_w, m2=m2, mxy=mxy)
    return {k: float(np.mean(v)) for k, v in states.items()}


def classify(ntk_change, cos0, cos, norm_w, dir_w, *, kernel_ntk: float, cos_change: float,
             rescale_dir: float, rescale_norm: float) -> str:
    """The mechanism of one learned state, in a fixed order of tests.

    kernel: the NTK moved by less than `kernel_ntk` (relative). Otherwise rescaling: the first layer turned
    by less than `rescale_dir` (1 - cos) while its norm changed by at least `rescale_norm` (relative; the
    readout may rotate meanwhile). Otherwise alignment / disalignment: |cos(u, w)| rose / fell by at least
    `cos_change`. Otherwise mixed.
    """
    if ntk_change < kernel_ntk:
        return "kernel"
    if dir_w < rescale_dir and abs(norm_w - 1) >= rescale_norm:
        return "rescaling"
    if cos - cos0 >= cos_change:
        return "alignment"
    if cos0 - cos >= cos_change:
        return "disalignment"
    return "mixed"
