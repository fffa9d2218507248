"""Training a group of members: mini-batch Adam with a cosine schedule, each member its own batch order.

A member's randomness comes from one seed: its generator draws the initialisation, then a fresh
permutation of the training set every epoch (and, for images, the augmentation). Members of one setting
are therefore i.i.d. draws from one training pipeline, the paper's homogeneous ensemble.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from papers.ensembles import models
from papers.ensembles.params import Setting


def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random shifts of up to 4 pixels (zero padding) and horizontal flips of images x (B, 3 * 32 * 32)."""
    b, dev = x.shape[0], x.device
    img = F.pad(x.reshape(b, 3, 32, 32), (4, 4, 4, 4))  # (B, 3, 40, 40)
    dy, dx = torch.randint(0, 9, (2, b, 1), generator=generator).to(dev)  # (B, 1) offsets
    flip = (torch.rand(b, 1, generator=generator) < 0.5).to(dev)
    cols = torch.arange(32, device=dev)  # (32,)
    rows = dy + cols  # (B, 32)
    cols = dx + torch.where(flip, 31 - cols, cols)  # (B, 32): a flip reads the columns backwards
    out = img[torch.arange(b, device=dev)[:, None, None, None], torch.arange(3, device=dev)[None, :, None, None],
              rows[:, None, :, None], cols[:, None, None, :]]  # (B, 3, 32, 32)
    return out.reshape(b, -1)


def train_group(s: Setting, seeds: list[int], width: int, depth: int, x: torch.Tensor, y: torch.Tensor,
                n_classes: int, device: str = "cpu", progress=None):
    """Train the members with `seeds` (one architecture) on (x (N, D), y (N,)); returns (model, train_loss (G,)).

    Each epoch, member g visits the N examples in its own random order, in batches of `batch_size`.
    """
    gens = [torch.Generator().manual_seed(seed) for seed in seeds]
    model = models.build(s.arch, gens, d_in=x.shape[1], width=width, depth=depth, n_classes=n_classes,
                         gain=s.init_gain).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=s.lr, weight_decay=s.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=s.epochs)
    n, g = len(x), len(seeds)
    x, y = x.to(device), y.to(device)
    epochs = range(s.epochs) if progress is None else progress(range(s.epochs))
    model.train()
    for _ in epochs:
        order = torch.stack([torch.randperm(n, generator=gen) for gen in gens])  # (G, N)
        for start in range(0, n, s.batch_size):
            idx = order[:, start:start + s.batch_size].to(device)  # (G, B)
            xb = x[idx]  # (G, B, D)
            if s.augment:
                xb = torch.stack([augment(xb[i], gens[i]) for i in range(g)])
            logits = model(xb)  # (G, B, C)
            # the sum over members of each member's mean cross-entropy: gradients stay per member
            loss = F.cross_entropy(logits.flatten(0, 1), y[idx].flatten(), reduction="sum") / idx.shape[1]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
    model.eval()
    train_loss = cross_entropy_per_member(model, x.cpu(), y.cpu(), device)
    return model, train_loss


@torch.no_grad()
def log_probs(model, x: torch.Tensor, g: int, device: str = "cpu", batch: int = 1000) -> torch.Tensor:
    """log p(c | x) of every member of the group on x (N, D): (G, N, C) in float64."""
    out = [model(x[i:i + batch].to(device).expand(g, -1, -1)).double().log_softmax(-1).cpu()
           for i in range(0, len(x), batch)]
    return torch.cat(out, dim=1)


def cross_entropy_per_member(model, x, y, device="cpu") -> torch.Tensor:
    g = model.weights[0].shape[0] if isinstance(model, models.GroupMLP) else 1
    lp = log_probs(model, x, g, device)  # (G, N, C)
    return -lp.gather(2, y.expand(g, -1).unsqueeze(-1)).squeeze(-1).mean(1)  # (G,)
