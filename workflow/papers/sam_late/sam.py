"""The update rules the arms switch between: SGD, SAM and adversarial training (PGD).

SAM (Foret et al. 2021; the paper's update rule) takes the gradient at an adversarially perturbed
point of the weights:

.. math::
    \\epsilon_t = \\rho \\, g_t / \\lVert g_t \\rVert, \\qquad
    w_{t+1} = w_t - \\eta \\, \\nabla L_{B_t}(w_t + \\epsilon_t), \\qquad g_t = \\nabla L_{B_t}(w_t),

with one norm over all parameters (the official SAM.py, non-adaptive). The base step (momentum,
weight decay) is torch's SGD, as in the official code. Adversarial training (Madry et al. 2018;
ERM_to_Adv.py) takes the plain gradient at inputs perturbed by L-inf PGD.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from papers.sam_late.model import frozen_bn


def smooth_cross_entropy(logits: torch.Tensor, y: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy against targets 1 - s on the label and s / (C - 1) on every other class
    (the official SAM.py's smoothing; its KL form differs by the targets' entropy, a constant)."""
    n_classes = logits.shape[1]
    target = torch.full_like(logits, smoothing / (n_classes - 1))
    target.scatter_(1, y[:, None], 1.0 - smoothing)  # (B, C)
    return -(target * F.log_softmax(logits, dim=1)).sum(1).mean()


def grad_norm(params) -> torch.Tensor:
    """||g|| over all parameters: the norm of the concatenated gradient."""
    return torch.norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))


def sgd_step(model: nn.Module, opt: torch.optim.Optimizer, x, y, smoothing: float) -> torch.Tensor:
    opt.zero_grad()
    loss = smooth_cross_entropy(model(x), y, smoothing)
    loss.backward()
    opt.step()
    return loss.detach()


def sam_step(model: nn.Module, opt: torch.optim.Optimizer, x, y, smoothing: float, rho: float) -> torch.Tensor:
    """One SAM step: ascend to w + eps, take the gradient there, step from w with it."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt.zero_grad()
    loss = smooth_cross_entropy(model(x), y, smoothing)
    loss.backward()
    with torch.no_grad():
        scale = rho / (grad_norm(params) + 1e-12)
        eps = [p.grad * scale if p.grad is not None else torch.zeros_like(p) for p in params]
        for p, e in zip(params, eps):
            p.add_(e)  # w + eps
    opt.zero_grad()
    with frozen_bn(model):  # the second pass must not move batch-norm statistics
        smooth_cross_entropy(model(x), y, smoothing).backward()  # grad L(w + eps)
    with torch.no_grad():
        for p, e in zip(params, eps):
            p.sub_(e)  # back to w
    opt.step()
    return loss.detach()


def pgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, epsilon: float, step_size: float, steps: int,
        random_start: bool) -> torch.Tensor:
    """L-inf PGD on the cross-entropy: x' = clip_[0,1](Proj_{|x'-x|_inf <= eps}(x' + a sign(grad_x L))).

    The model is in eval mode while attacking (ERM_to_Adv.py); its training mode is restored after.
    """
    was_training = model.training
    model.eval()
    x_adv = x.clone()
    if random_start:
        x_adv = (x_adv + torch.empty_like(x).uniform_(-epsilon, epsilon)).clamp(0.0, 1.0)
    for _ in range(steps):
        x_adv.requires_grad_(True)
        loss = F.cross_entropy(model(x_adv), y)
        (grad,) = torch.autograd.grad(loss, x_adv)
        with torch.no_grad():
            x_adv = x_adv + step_size * grad.sign()
            x_adv = torch.min(torch.max(x_adv, x - epsilon), x + epsilon).clamp(0.0, 1.0)
    model.train(was_training)
    return x_adv.detach()


def adv_step(model: nn.Module, opt: torch.optim.Optimizer, x, y, attack) -> torch.Tensor:
    """One adversarial-training step: plain cross-entropy at PGD inputs with a random start (ERM_to_Adv.py)."""
    x_adv = pgd(model, x, y, epsilon=attack.epsilon, step_size=attack.step_size, steps=attack.steps, random_start=True)
    opt.zero_grad()
    loss = F.cross_entropy(model(x_adv), y)
    loss.backward()
    opt.step()
    return loss.detach()
