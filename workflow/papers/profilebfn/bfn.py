"""The discrete Bayesian flow of ProfileBFN over the 20 amino acids: schedule, flow, loss, sampler.

Notation of the BFN paper (Graves et al. 2023, "Bayesian Flow Networks", its section on discrete data) and of
ProfileBFN (ICLR 2025, its method section; equation numbers are not cited: no copy of either paper is at hand
offline, the formulas were checked against the official bflow.py and by the unit tests):

* accuracy schedule (BFN, discrete data; the official ``beta_time_order`` = 2):
  beta(t) = beta1 t^2, beta'(t) = 2 beta1 t;
* Bayesian flow distribution (BFN, discrete data): y ~ N(beta(t) (K e_x - 1), beta(t) K I), theta = softmax(y).
  ProfileBFN puts a profile P (a column's distribution over the K residues) where BFN
  has the one-hot e_x: y ~ N(beta(t) (K P - 1), beta(t) K I). A single sequence is the degenerate
  profile P = e_x, so training on single sequences is BFN's own training;
* continuous-time loss (BFN, discrete data): L_inf(x) = (K / 2) beta'(t) ||e_x - e_hat(theta, t)||^2
  = K beta1 t ||e_x - e_hat||^2, t ~ U(0, 1), e_hat the network's output distribution;
* sampler of the official generation script (profile_seqgen.py): from the family profile at t0, for
  each t on a grid from t0 to 1: theta ~ flow(P, t); P <- softmax(network(theta, t)); then argmax P.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

K = 20


def beta(t: torch.Tensor, beta1: float) -> torch.Tensor:
    """Accuracy beta(t) = beta1 t^2 (official beta_time_order = 2)."""
    return beta1 * t ** 2


def beta_rate(t: torch.Tensor, beta1: float) -> torch.Tensor:
    """beta'(t) = 2 beta1 t."""
    return 2.0 * beta1 * t


def flow_logits(p: torch.Tensor, t: torch.Tensor, beta1: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """y ~ N(beta (K p - 1), beta K I): the sender sample whose softmax is the flow's theta.

    p: (B, L, K) a distribution per position (one-hot for a sequence, a profile column otherwise);
    t: (B,) one time per sequence, shared by its positions (the official code's t is constant per row).
    """
    b = beta(t, beta1).view(-1, 1, 1)  # (B, 1, 1)
    # drawn on the (CPU) generator and moved: the same noise on any device
    eps = torch.randn(p.shape, generator=generator, dtype=p.dtype).to(p.device)
    return b * (K * p - 1.0) + (b * K).sqrt() * eps  # (B, L, K)


def flow(p: torch.Tensor, t: torch.Tensor, beta1: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """theta ~ p_F(theta | p; t) = softmax(y) (BFN's Bayesian flow; ProfileBFN's with a profile p)."""
    return torch.softmax(flow_logits(p, t, beta1, generator), dim=-1)


def continuous_loss(x: torch.Tensor, e_hat: torch.Tensor, t: torch.Tensor, beta1: float,
                    mask: torch.Tensor | None = None, count: torch.Tensor | None = None) -> torch.Tensor:
    """L_inf = (K/2) beta'(t) ||e_x - e_hat||^2 (BFN's continuous-time loss), mean over the unmasked positions.

    x: (B, L) residue indices; e_hat: (B, L, K) output distributions; t: (B,); mask: (B, L) True where
    a residue is (False on padding); count: the divisor of the masked sum in place of mask.sum() (a data-parallel
    process's slice is divided by the union batch's residues / processes, papers.profilebfn.train).
    """
    e_x = F.one_hot(x.clamp(min=0).long(), K).to(e_hat.dtype)
    per_position = 0.5 * K * beta_rate(t, beta1).view(-1, 1) * ((e_x - e_hat) ** 2).sum(-1)  # (B, L)
    if mask is None:
        return per_position.mean()
    return (per_position * mask).sum() / (mask.sum().clamp(min=1) if count is None else count)


def continuous_loss_per_sequence(x: torch.Tensor, e_hat: torch.Tensor, t: torch.Tensor, beta1: float,
                                 mask: torch.Tensor) -> torch.Tensor:
    """:func:`continuous_loss` per sequence (B,): the mean over each sequence's own unmasked positions."""
    e_x = F.one_hot(x.clamp(min=0).long(), K).to(e_hat.dtype)
    per_position = 0.5 * K * beta_rate(t, beta1).view(-1, 1) * ((e_x - e_hat) ** 2).sum(-1)  # (B, L)
    return (per_position * mask).sum(1) / mask.sum(1).clamp(min=1)


def context_free_prediction(theta: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """The best prediction of a residue from its own position alone: the posterior of x given the flow's sender
    sample with the composition `prior` (K,). The sender density is N(y; beta (K e_x - 1), beta K I), whose x-
    dependent part is exp(y_x), so p(x | y) is proportional to prior_x exp(y_x), i.e. to prior_x theta_x.
    A network that reads no other position can do no better in expectation; beating it on held-out sequences
    means it uses context (the competence gate)."""
    w = theta * prior
    return w / w.sum(-1, keepdim=True)


def bayesian_update(theta: torch.Tensor, x: torch.Tensor, alpha: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """One Bayesian update of a categorical belief (BFN's Bayesian update for discrete data): y ~ N(alpha (K e_x - 1), alpha K I),
    theta' = theta e^y / sum(theta e^y). Composing updates of accuracies alpha_i equals one flow sample
    at beta = sum alpha_i (BFN's additive accuracies): the unit test of the flow checks it by sampling."""
    e_x = F.one_hot(x.long(), K).to(theta.dtype)
    eps = torch.randn(theta.shape, generator=generator, dtype=theta.dtype)
    y = alpha * (K * e_x - 1.0) + (alpha * K) ** 0.5 * eps
    return torch.softmax(torch.log(theta) + y, dim=-1)


@torch.no_grad()
def sample(net, prior: torch.Tensor, n: int, *, t0: float, steps: int, beta1: float,
           generator: torch.Generator, batch: int = 256) -> torch.Tensor:
    """ProfileBFN generation from a family profile (official profile_seqgen.py).

    prior: (L, K) the family's profile, on the network's device; returns (n, L) residue indices (CPU). For each of
    the `steps` times
    t on linspace(t0, 1): theta ~ flow(P, t), P <- softmax(net(theta, t)); the result is argmax P.
    The caller removes duplicates.
    """
    out = []
    for start in range(0, n, batch):
        b = min(batch, n - start)
        p = prior.unsqueeze(0).expand(b, -1, -1).clone()  # (b, L, K)
        for t_value in torch.linspace(t0, 1.0, steps).tolist():
            t = torch.full((b,), t_value, device=prior.device)
            theta = flow(p, t, beta1, generator)
            p = torch.softmax(net(theta, t), dim=-1)
        out.append(p.argmax(-1).cpu())
    return torch.cat(out)
