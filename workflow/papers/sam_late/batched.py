"""The seeds of one arm trained side by side: the same SGD / SAM / adversarial-training steps as
:func:`papers.sam_late.train.train` for the MLP, with every weight carrying a leading seed axis (M, ...).

A tiny MLP's step on a 50-image batch costs less in arithmetic than in the Python and dispatch overhead
around it, so running the seeds one after another paid that overhead once per seed; here one batched matmul
(``torch.baddbmm``) serves all of them. Nothing is shared between seeds: the loss summed over seeds has
each seed's gradient as its seed slice; SAM's norm (Foret et al. 2021, eq. 2: eps = rho g / ||g||, one norm over
all of a network's parameters) and PGD's sign step (Madry et al. 2018) are taken per seed; each seed draws its
batch order and its PGD random start from its own (seed, epoch) streams exactly as the one-seed loop does (a numpy
Generator, and a torch Generator seeded as that loop seeds torch's global one). The update is torch's SGD
(momentum, dampening 0, weight decay added to the gradient, the buffer started from the first step's direction),
written out with the seed axis; the checkpoints are the one-seed loop's, per seed (a test checks both paths agree).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

N_PARAMS_PER_LAYER = 2  # weight (out, in), bias (out,)
GROUP = 5  # seeds trained side by side


def supported(p) -> bool:
    """The batched path covers the MLP without augmentation (the default scale); VGG runs one seed at a time."""
    return p.model == "mlp" and not p.augment


def forward(ws: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """x (M, B, d_in) -> logits (M, B, C) through Linear-ReLU-...-Linear with weights ws = [W1, b1, W2, b2, ...]
    of shapes (M, out, in), (M, out)."""
    h = x
    n_layers = len(ws) // N_PARAMS_PER_LAYER
    for k in range(n_layers):
        w, b = ws[2 * k], ws[2 * k + 1]
        h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
        if k < n_layers - 1:
            h = torch.relu(h)
    return h


def member_loss(logits: torch.Tensor, y: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy per seed (M,) against targets 1 - s on the label and s / (C - 1) elsewhere:
    :func:`papers.sam_late.sam.smooth_cross_entropy` of each seed's batch. torch's label_smoothing s' puts
    s' / C on every class, so s' = s C / (C - 1) gives the same targets."""
    m, b, c = logits.shape
    s = smoothing * c / (c - 1)
    return F.cross_entropy(logits.reshape(m * b, c), y.reshape(m * b), reduction="none",
                           label_smoothing=s).view(m, b).mean(1)


def _bcast(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return v.view(-1, *([1] * (like.dim() - 1)))


class Members:
    """Weights (M, ...) and the two optimisers' momentum buffers ("sgd", "sam": None until their first step)."""

    def __init__(self, models: list[nn.Module], starts: list[dict] | None):
        self.models = models  # one nn.Module per seed: the layout the checkpoints are written in
        self.params_of = [[q for q in m.parameters() if q.requires_grad] for m in models]
        if starts is not None:
            for m, s in zip(models, starts):
                m.load_state_dict(s["model"])
        self.ws = [torch.stack([ps[i].detach() for ps in self.params_of]).clone()
                   for i in range(len(self.params_of[0]))]
        self.bufs: dict[str, list | None] = {"sgd": None, "sam": None}
        if starts is not None:
            for k in self.bufs:
                states = [s["optimizers"][k]["state"] for s in starts]
                if all(len(st) for st in states):
                    self.bufs[k] = [torch.stack([st[i]["momentum_buffer"] for st in states]).clone()
                                    for i in range(len(self.ws))]
                elif any(len(st) for st in states):
                    raise ValueError("sam_late: the seeds' checkpoints disagree on which optimiser has stepped")

    def sgd_update(self, rule: str, grads: list[torch.Tensor], lr: float, momentum: float, wd: float) -> None:
        """torch.optim.SGD.step (dampening 0, no Nesterov): d = g + wd w; buf = momentum buf + d (buf = d at the
        first step); w -= lr buf."""
        with torch.no_grad():  # in place: the seeds' weights outgrow the cache, so every temporary costs
            if self.bufs[rule] is None:
                self.bufs[rule] = [g.add(w, alpha=wd) for g, w in zip(grads, self.ws)]
            else:
                for buf, g, w in zip(self.bufs[rule], grads, self.ws):
                    buf.mul_(momentum).add_(g).add_(w, alpha=wd)
            for w, buf in zip(self.ws, self.bufs[rule]):
                w.add_(buf, alpha=-lr)

    def checkpoints(self, p, epoch: int, lr: float) -> list[dict]:
        """Per seed, :func:`papers.sam_late.train.checkpoint` of the equivalent module and optimisers."""
        from papers.sam_late.train import checkpoint

        out = []
        for j, (model, params) in enumerate(zip(self.models, self.params_of)):
            with torch.no_grad():
                for q, w in zip(params, self.ws):
                    q.copy_(w[j])
            opts = {}
            for k, bufs in self.bufs.items():
                o = torch.optim.SGD(params, lr=lr, momentum=p.momentum, weight_decay=p.weight_decay)
                if bufs is not None:
                    for q, buf in zip(params, bufs):
                        o.state[q] = {"momentum_buffer": buf[j].clone()}
                opts[k] = o
            out.append(checkpoint(model, opts, epoch))
        return out


@torch.no_grad()
def evaluate(ws, x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, mean cross-entropy and accuracy on its own set x (M, N, d), y (M, N)."""
    logits = forward(ws, x)
    m, n, c = logits.shape
    loss = F.cross_entropy(logits.reshape(m * n, c), y.reshape(m * n), reduction="none").view(m, n).mean(1)
    acc = (logits.argmax(2) == y).double().mean(1)
    return loss.double().numpy(), acc.numpy()


def pgd(ws, x, y, gens, *, epsilon: float, step_size: float, steps: int, random_start: bool) -> torch.Tensor:
    """:func:`papers.sam_late.sam.pgd` per seed: each seed's random start from its own generator `gens[j]`."""
    ws = [w.detach() for w in ws]
    x_adv = x.clone()
    if random_start:
        noise = torch.stack([torch.empty(x.shape[1:], dtype=x.dtype).uniform_(-epsilon, epsilon, generator=g)
                             for g in gens])
        x_adv = (x_adv + noise.to(x.device)).clamp(0.0, 1.0)
    for _ in range(steps):
        x_adv.requires_grad_(True)
        loss = member_loss(forward(ws, x_adv), y).sum()
        (grad,) = torch.autograd.grad(loss, x_adv)
        with torch.no_grad():
            x_adv = x_adv + step_size * grad.sign()
            x_adv = torch.min(torch.max(x_adv, x - epsilon), x + epsilon).clamp(0.0, 1.0)
    return x_adv.detach()


def _grads(ws, loss_fn) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [w.detach().requires_grad_(True) for w in ws]
    losses = loss_fn(leaves)  # (M,)
    grads = torch.autograd.grad(losses.sum(), leaves)
    return losses.detach(), list(grads)


def step(mem: Members, rule: str, xb, yb, p, rho, gens, lr: float) -> torch.Tensor:
    """One step of every seed by `rule`; returns each seed's batch loss (M,) (at w, as the one-seed loop). `rho`: a
    float, or for the random-direction rule each seed's radius (M,) (late_rand's calibrated r)."""
    if rule == "sgd":
        loss, grads = _grads(mem.ws, lambda ws: member_loss(forward(ws, xb), yb, p.label_smoothing))
        mem.sgd_update("sgd", grads, lr, p.momentum, p.weight_decay)
    elif rule == "sam":
        loss, g = _grads(mem.ws, lambda ws: member_loss(forward(ws, xb), yb, p.label_smoothing))
        with torch.no_grad():
            # (M,) ||g|| over all parameters: sam.grad_norm's norm of the per-parameter norms, per seed
            norm = torch.stack([torch.linalg.vector_norm(t, dim=tuple(range(1, t.dim()))) for t in g]).norm(dim=0)
            scale = rho / (norm + 1e-12)
            for w, t in zip(mem.ws, g):
                w.add_(t.mul_(_bcast(scale, t)))  # w + eps (g now holds eps)
        _, grads = _grads(mem.ws, lambda ws: member_loss(forward(ws, xb), yb, p.label_smoothing))  # grad L(w + eps)
        with torch.no_grad():
            for w, e in zip(mem.ws, g):
                w.sub_(e)  # back to w, as sam.sam_step
        mem.sgd_update("sam", grads, lr, p.momentum, p.weight_decay)
    elif rule == "rand":  # sam.random_sam_step: SAM's step at w + rho d / ||d||, d Gaussian from each seed's generator
        with torch.no_grad():
            loss = member_loss(forward(mem.ws, xb), yb, p.label_smoothing)
            d = [torch.stack([torch.randn(w.shape[1:], dtype=w.dtype, generator=gen) for gen in gens]).to(w.device)
                 for w in mem.ws]  # per seed, the parameters in order, as sam.random_direction draws them
            norm = torch.stack([torch.linalg.vector_norm(t, dim=tuple(range(1, t.dim()))) for t in d]).norm(dim=0)
            scale = (rho.to(norm.device) if torch.is_tensor(rho) else rho) / (norm + 1e-12)
            for w, t in zip(mem.ws, d):
                w.add_(t.mul_(_bcast(scale, t)))  # w + eps (d now holds eps)
        _, grads = _grads(mem.ws, lambda ws: member_loss(forward(ws, xb), yb, p.label_smoothing))  # grad L(w + eps)
        with torch.no_grad():
            for w, e in zip(mem.ws, d):
                w.sub_(e)
        mem.sgd_update("sam", grads, lr, p.momentum, p.weight_decay)
    elif rule == "clean":  # sam.clean_step: AT's loss (plain cross-entropy) and SGD optimiser at the clean inputs
        loss, grads = _grads(mem.ws, lambda ws: member_loss(forward(ws, xb), yb))
        mem.sgd_update("sgd", grads, lr, p.momentum, p.weight_decay)
    else:
        a = p.attack
        x_adv = pgd(mem.ws, xb, yb, gens, epsilon=a.epsilon, step_size=a.step_size, steps=a.steps, random_start=True)
        loss, grads = _grads(mem.ws, lambda ws: member_loss(forward(ws, x_adv), yb))
        mem.sgd_update("sgd", grads, lr, p.momentum, p.weight_decay)
    return loss


def train_members(models: list[nn.Module], tensors: list[dict], p, *, arm: str, rho, seeds: list[int],
                  starts: list[dict] | None = None, switch: int | None = None, track: bool = False, progress=None):
    """:func:`papers.sam_late.train.train` for every seed of `seeds` at once (models[j] initialised for seeds[j],
    tensors[j] its data, starts[j] its checkpoint); returns that function's (history, escape, checkpoints) per seed."""
    m = len(seeds)
    mem = Members(models, starts)
    first = 0 if starts is None else starts[0]["epoch"]
    if starts is not None and any(s["epoch"] != first for s in starts):
        raise ValueError("sam_late: the seeds' checkpoints start at different epochs")
    x = torch.stack([t["x_train"].reshape(len(t["x_train"]), -1) for t in tensors])  # (M, N, d)
    y = torch.stack([t["y_train"] for t in tensors])  # (M, N)
    x_test = torch.stack([t["x_test"].reshape(len(t["x_test"]), -1) for t in tensors])
    y_test = torch.stack([t["y_test"] for t in tensors])
    n = x.shape[1]
    rows = torch.arange(m, device=x.device)[:, None]
    history = [[] for _ in range(m)]
    escape = [[] for _ in range(m)]
    ckpts = [{} for _ in range(m)]
    w_ref, ref_loss, n_escape = None, None, 0
    if switch is None:
        switch = p.late_epochs if arm.startswith("early") else p.switch_epoch
    branch_points = set(p.switch_epochs) if arm == "sgd" else set()
    lr_prev = p.lr if first == 0 else p.lr_at(first - 1)  # the optimisers' lr as the one-seed loop leaves it
    epochs = range(first, p.epochs)
    for epoch in progress(epochs) if progress else epochs:
        if epoch == p.switch_epoch or epoch in branch_points:
            key = "switch" if epoch == p.switch_epoch else epoch
            for j, c in enumerate(mem.checkpoints(p, epoch, lr_prev)):
                ckpts[j][key] = c
        if epoch == switch and track:
            w_ref = torch.cat([w.flatten(1) for w in mem.ws], 1).clone()
            ref_loss = evaluate(mem.ws, x, y)[0]
        rule = p.rule(arm, epoch, switch)
        lr = lr_prev = p.lr_at(epoch)
        gens, orders = [], []
        for s in seeds:  # each seed's (seed, epoch) streams, as the one-seed loop draws them
            rng = np.random.default_rng([s, epoch])
            gens.append(torch.Generator().manual_seed(int(rng.integers(2**31))))
            orders.append(torch.from_numpy(rng.permutation(n)))
        order = torch.stack(orders).to(x.device)  # (M, N)
        losses = []
        for i in range(0, n, p.batch_size):
            idx = order[:, i:i + p.batch_size]
            loss = step(mem, rule, x[rows, idx], y[rows, idx], p, lr=lr, rho=rho, gens=gens)
            losses.append(loss)
            if w_ref is not None and n_escape < p.escape_steps:
                n_escape += 1
                dist = (torch.cat([w.flatten(1) for w in mem.ws], 1) - w_ref).norm(dim=1).double().numpy()
                tl = evaluate(mem.ws, x, y)[0]
                for j in range(m):
                    escape[j].append({"step": n_escape, "distance": float(dist[j]), "train_loss": float(tl[j]),
                                      "switch_train_loss": float(ref_loss[j])})
        mean_loss = torch.stack(losses).double().mean(0).numpy()
        last = epoch == p.epochs - 1
        if last or (epoch + 1) % p.history_every == 0:
            tloss, tacc = evaluate(mem.ws, x_test, y_test)
        else:
            tloss = tacc = np.full(m, np.nan)
        for j in range(m):
            history[j].append({"epoch": epoch, "rule": rule, "lr": lr, "train_loss": float(mean_loss[j]),
                               "test_loss": float(tloss[j]), "test_acc": float(tacc[j])})
    for j, c in enumerate(mem.checkpoints(p, p.epochs, lr_prev)):
        ckpts[j]["final"] = c
    cols = ["step", "distance", "train_loss", "switch_train_loss"]
    return [(pd.DataFrame(history[j]), pd.DataFrame(escape[j], columns=cols), ckpts[j]) for j in range(m)]

