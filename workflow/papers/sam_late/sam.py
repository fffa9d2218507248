"""The update rules the arms switch between: SGD, SAM and adversarial training (PGD).

SAM (Foret et al. 2021; the paper's update rule) takes the gradient at an adversarially perturbed
point of the weights:

.. math::
    \\epsilon_t = \\rho \\, g_t / \\lVert g_t \\rVert, \\qquad
    w_{t+1} = w_t - \\eta \\, \\nabla L_{B_t}(w_t + \\epsilon_t), \\qquad g_t = \\nabla L_{B_t}(w_t),

with one norm over all parameters (the official SAM.py, non-adaptive). The base step (momentum,
weight decay) is torch's SGD, as in the official code. Adversarial training (Madry et al. 2018;
ERM_to_Adv.py) takes the plain gradient at inputs perturbed by L-inf PGD.

Two controls remove exactly one of these mechanisms (the review sam_late_r20261205): the random-direction step
takes SAM's step with eps_t = rho d_t / ||d_t||, d_t ~ N(0, I) drawn afresh each step, in place of the ascent
direction g_t / ||g_t|| (the same radius, the same extra gradient evaluation at a perturbed point); the clean step
takes adversarial training's step (plain cross-entropy, the SGD optimiser) at the clean inputs, without PGD.

The random-direction control's radius (review sam_late_r20261205b, item 1): at rho a random direction barely moves
the loss (in ~85k dimensions it sees almost no curvature), so the control would remove SAM's perturbation strength
together with its direction. :func:`matched_radius` therefore calibrates, per seed at the late phase's start w, one
norm r at which a random perturbation raises the batch loss as much as SAM's ascent of norm rho does:
mean_{b,k} [L_b(w + r d_bk / ||d_bk||) - L_b(w)] = mean_b [L_b(w + rho g_b / ||g_b||) - L_b(w)] over a fixed set of
training batches b and seeded Gaussian directions d_bk (bisection on r; a rule fixed before any run).
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
    _step_with_gradient_at(model, opt, x, y, smoothing, params, eps)
    return loss.detach()


def _step_with_gradient_at(model: nn.Module, opt: torch.optim.Optimizer, x, y, smoothing: float, params, eps) -> None:
    """The second half of SAM's step, shared by its random-direction control: the weights stand at w + eps; take the
    gradient there (batch-norm statistics frozen: the second pass must not move them), go back to w, step from w."""
    opt.zero_grad()
    with frozen_bn(model):
        smooth_cross_entropy(model(x), y, smoothing).backward()  # grad L(w + eps)
    with torch.no_grad():
        for p, e in zip(params, eps):
            p.sub_(e)  # back to w
    opt.step()


def random_direction(params, rho: float) -> list[torch.Tensor]:
    """eps = rho d / ||d||, d ~ N(0, I) over all parameters (one norm, as SAM's), drawn on the CPU from torch's
    global generator in parameter order (so a run's draws do not depend on its device), moved to each parameter's."""
    d = [torch.randn(q.shape, dtype=q.dtype) for q in params]
    scale = rho / (torch.norm(torch.stack([t.norm() for t in d])) + 1e-12)
    return [(t * scale).to(q.device) for t, q in zip(d, params)]


def random_sam_step(model: nn.Module, opt: torch.optim.Optimizer, x, y, smoothing: float, rho: float) -> torch.Tensor:
    """SAM's step with the ascent direction removed: perturb to w + rho d / ||d|| (d Gaussian, fresh each step), take
    the gradient there, step from w with it; the batch loss at w is computed (and returned) as SAM's is."""
    params = [p for p in model.parameters() if p.requires_grad]
    with torch.no_grad():
        loss = smooth_cross_entropy(model(x), y, smoothing)  # at w (train mode, as SAM's first pass)
        eps = random_direction(params, rho)
        for p, e in zip(params, eps):
            p.add_(e)  # w + eps
    _step_with_gradient_at(model, opt, x, y, smoothing, params, eps)
    return loss.detach()


@torch.no_grad()
def _batch_losses(model: nn.Module, batches, smoothing: float) -> torch.Tensor:
    """(len(batches),) the smoothed cross-entropy of each batch at the model's current weights."""
    return torch.stack([smooth_cross_entropy(model(x), y, smoothing) for x, y in batches])


def matched_radius(model: nn.Module, batches, *, smoothing: float, rho: float, directions: int,
                   generator: torch.Generator, iters: int = 60, rtol: float = 1e-4) -> dict:
    """The norm r of a random perturbation whose mean loss rise at the model's weights w equals SAM's (eval mode: the
    loss is a function of w alone; the model is left as it came).

    target = mean_b [L_b(w + rho g_b / ||g_b||) - L_b(w)], g_b = grad L_b(w) (SAM's eps on batch b, eq. 2 of Foret
    et al. 2021); rise(r) = mean_{b,k} [L_b(w + r u_bk) - L_b(w)], u_bk = d_bk / ||d_bk||, d_bk ~ N(0, I) over all
    parameters (`directions` per batch, drawn once from `generator` on the CPU, in parameter order, and kept fixed
    during the search). r is found by bisection: the bracket [0, rho] doubles its upper end until rise >= target, then
    is halved until |rise - target| <= rtol x target or `iters` halvings. Returns radius, rise_sam (the target),
    rise_rand (the rise at r) and rise_rand_at_rho (the rise at r = rho, what a same-norm control would see).
    """
    params = [q for q in model.parameters() if q.requires_grad]
    saved = [q.detach().clone() for q in params]  # w: restored at the end (the add / sub pairs drift by float rounding)
    was_training = model.training
    model.eval()
    base = _batch_losses(model, batches, smoothing)  # (B,)
    rises = []
    for (x, y), l0 in zip(batches, base):
        grads = torch.autograd.grad(smooth_cross_entropy(model(x), y, smoothing), params)
        with torch.no_grad():
            scale = rho / (torch.norm(torch.stack([g.norm() for g in grads])) + 1e-12)
            for q, g in zip(params, grads):
                q.add_(g * scale)
            rises.append(smooth_cross_entropy(model(x), y, smoothing) - l0)
            for q, g in zip(params, grads):
                q.sub_(g * scale)
    target = float(torch.stack(rises).mean())
    if not target > 0:
        raise ValueError(f"sam_late: SAM's perturbation does not raise the loss at w (mean rise {target}); no random "
                         "radius can match it")
    units = []
    for _ in range(len(batches) * directions):  # u_bk, batch-major
        d = [torch.randn(q.shape, dtype=q.dtype, generator=generator) for q in params]
        norm = torch.norm(torch.stack([t.norm() for t in d]))
        units.append([(t / norm).to(q.device) for t, q in zip(d, params)])

    @torch.no_grad()
    def rise(r: float) -> float:
        out = []
        for i, ((x, y), l0) in enumerate(zip(batches, base)):
            for u in units[i * directions:(i + 1) * directions]:
                for q, t in zip(params, u):
                    q.add_(t, alpha=r)
                out.append(float(smooth_cross_entropy(model(x), y, smoothing) - l0))
                for q, t in zip(params, u):
                    q.sub_(t, alpha=r)
        return float(sum(out) / len(out))

    lo, hi = 0.0, float(rho)
    at_rho = rise_hi = rise(hi)
    for _ in range(60):
        if rise_hi >= target:
            break
        lo, hi = hi, 2 * hi
        rise_hi = rise(hi)
    else:
        raise ValueError(f"sam_late: no random radius up to {hi:g} raises the loss by SAM's {target:g}")
    r, rise_r = hi, rise_hi
    for _ in range(iters):
        if abs(rise_r - target) <= rtol * target:
            break
        r = 0.5 * (lo + hi)
        rise_r = rise(r)
        if rise_r < target:
            lo = r
        else:
            hi = r
    with torch.no_grad():
        for q, w in zip(params, saved):
            q.copy_(w)
    model.train(was_training)
    return {"radius": float(r), "rise_sam": target, "rise_rand": float(rise_r), "rise_rand_at_rho": float(at_rho)}


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
    return clean_step(model, opt, x_adv, y)


def clean_step(model: nn.Module, opt: torch.optim.Optimizer, x, y) -> torch.Tensor:
    """Adversarial training's step at the inputs given: plain cross-entropy (no label smoothing), one gradient step.
    Given the clean batch, the control of late AT that keeps its loss and optimiser and drops the adversarial inputs."""
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()
