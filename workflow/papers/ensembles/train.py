"""Training a group of members: mini-batch Adam with a cosine schedule, each member its own batch order.

Adam and the schedule are written out (:class:`Adam`, :func:`cosine_lr`): torch.optim's first use imports
torch._dynamo, seconds per job on a small CPU, for ten lines of arithmetic; a test checks them against torch.optim.

A member's randomness comes from one seed: its generator draws the initialisation, then a fresh
permutation of the training set every epoch and the augmentation of every batch. Members of one setting
are therefore i.i.d. draws from one training pipeline, the paper's homogeneous ensemble.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

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


def shift_digits(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random shifts of 8x8 digits x (B, 64) by -1, 0 or +1 pixel in each direction (zero padding).

    No flips: a mirrored digit is another symbol (or none).
    """
    b = x.shape[0]
    img = F.pad(x.reshape(b, 8, 8), (1, 1, 1, 1))  # (B, 10, 10)
    dy, dx = torch.randint(0, 3, (2, b, 1), generator=generator)  # (B, 1) offsets into the padded image
    rows, cols = dy + torch.arange(8), dx + torch.arange(8)  # (B, 8)
    return img[torch.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]].reshape(b, 64)


def shift_digit_groups(x: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """:func:`shift_digits` for the mini-batches x (G, B, 64) of G members at once, member g's shifts drawn from
    `generators[g]` exactly as :func:`shift_digits` draws them (so a member's run does not depend on its group)."""
    g, b = x.shape[:2]
    img = F.pad(x.reshape(g, b, 8, 8), (1, 1, 1, 1))  # (G, B, 10, 10)
    dy, dx = torch.stack([torch.randint(0, 3, (2, b, 1), generator=gen) for gen in generators], 1)  # (G, B, 1) each
    rows, cols = dy + torch.arange(8), dx + torch.arange(8)  # (G, B, 8)
    gi, bi = torch.arange(g)[:, None, None, None], torch.arange(b)[None, :, None, None]
    return img[gi, bi, rows[..., :, None], cols[..., None, :]].reshape(g, b, 64)


class Adam:
    """Adam (Kingma and Ba 2015) with L2 weight decay added to the gradient, as torch.optim.Adam:

        g = grad + wd * theta;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
        theta -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

    Element-wise, so the members of a group (stacked parameters) are updated independently.
    """

    def __init__(self, params, lr: float, weight_decay: float = 0.0, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params = [q for q in params]
        self.lr, self.weight_decay, (self.b1, self.b2), self.eps = lr, weight_decay, betas, eps
        self.m = [torch.zeros_like(q) for q in self.params]
        self.v = [torch.zeros_like(q) for q in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for q, m, v in zip(self.params, self.m, self.v):
            g = q.grad if self.weight_decay == 0 else q.grad + self.weight_decay * q
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            q.addcdiv_(m, (v / c2).sqrt_().add_(self.eps), value=-self.lr / c1)

    def zero_grad(self) -> None:
        for q in self.params:
            q.grad = None


def cosine_lr(lr: float, epoch: int, epochs: int) -> float:
    """The learning rate of `epoch` (0-based) annealed from lr to 0 over `epochs` (CosineAnnealingLR, eta_min 0)."""
    return 0.5 * lr * (1 + math.cos(math.pi * epoch / epochs))


@dataclass
class Trained:
    """A trained group: the model, each member's training loss and accuracy on the un-augmented training set at
    the end (G,), the same loss at the start of the flatness window (G,) (the convergence gate: has the loss
    stopped falling?), and the snapshots (snapshots, N', C) of member `snapshot_member`, or None."""

    model: torch.nn.Module
    train_loss: torch.Tensor
    train_acc: torch.Tensor
    window_loss: torch.Tensor
    snapshots: torch.Tensor | None


def train_group(s: Setting, seeds: list[int], width: int, depth: int, x: torch.Tensor, y: torch.Tensor,
                n_classes: int, device: str = "cpu", progress=None, snapshot_x: torch.Tensor | None = None,
                snapshots: int = 0, snapshot_member: int = 0, flat_window: float = 0.25) -> Trained:
    """Train the members with `seeds` (one architecture) on (x (N, D), y (N,)).

    Each epoch, member g visits the N examples in its own random order, in batches of `batch_size`, each
    batch augmented from its own generator when `s.augment`. The training loss is also taken (eval mode, no
    augmentation) after epoch E - ceil(flat_window E) - 1, where the flatness window starts. With `snapshot_x`
    (N', D), member `snapshot_member`'s class probabilities on it are kept after each of the last `snapshots`
    epochs (claim (a)'s control: one run's snapshots); that member alone is evaluated (1/G of the group's cost).
    """
    gens = [torch.Generator().manual_seed(seed) for seed in seeds]
    model = models.build(s.arch, gens, d_in=x.shape[1], width=width, depth=depth, n_classes=n_classes,
                         gain=s.init_gain).to(device)
    opt = Adam(model.parameters(), lr=s.lr, weight_decay=s.weight_decay)
    n, g = len(x), len(seeds)
    x, y = x.to(device), y.to(device)
    digits = x.shape[1] == 64
    window_start = s.epochs - math.ceil(flat_window * s.epochs) - 1  # the last epoch before the window
    epochs = range(s.epochs) if progress is None else progress(range(s.epochs))
    snaps, window_loss = [], None
    for epoch in epochs:
        opt.lr = cosine_lr(s.lr, epoch, s.epochs)
        model.train()
        order = torch.stack([torch.randperm(n, generator=gen) for gen in gens])  # (G, N)
        for start in range(0, n, s.batch_size):
            idx = order[:, start:start + s.batch_size].to(device)  # (G, B)
            xb = x[idx]  # (G, B, D)
            if s.augment and digits:
                xb = shift_digit_groups(xb.cpu(), gens).to(device)
            elif s.augment:
                xb = torch.stack([augment(xb[i].cpu(), gens[i]).to(device) for i in range(g)])
            logits = model(xb)  # (G, B, C)
            # the sum over members of each member's mean cross-entropy: gradients stay per member
            loss = F.cross_entropy(logits.flatten(0, 1), y[idx].flatten(), reduction="sum") / idx.shape[1]
            opt.zero_grad()
            loss.backward()
            opt.step()
        if epoch == window_start:
            model.eval()
            window_loss, _ = _fit(model, x, y, g, device)
        if snapshot_x is not None and epoch >= s.epochs - snapshots:
            model.eval()
            snaps.append(log_probs(model, snapshot_x, 1, device, member=snapshot_member)[0].exp())
    model.eval()
    train_loss, train_acc = _fit(model, x, y, g, device)
    if window_loss is None:  # fewer epochs than the window: the loss at the start is the untrained one
        window_loss = torch.full_like(train_loss, float("nan"))
    return Trained(model, train_loss, train_acc, window_loss, torch.stack(snaps) if snaps else None)


def _fit(model, x, y, g: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Each member's mean cross-entropy (G,) and accuracy (G,) on the un-augmented training set."""
    lp = log_probs(model, x, g, device)  # (G, N, C)
    loss = -lp.gather(2, y.cpu().expand(g, -1).unsqueeze(-1)).squeeze(-1).mean(1)
    return loss, (lp.argmax(2) == y.cpu()).double().mean(1)


@torch.no_grad()
def log_probs(model, x: torch.Tensor, g: int, device: str = "cpu", batch: int = 1000,
              member: int | None = None) -> torch.Tensor:
    """log p(c | x) on x (N, D) of every member of the group, (G, N, C), or of member `member` alone, (1, N, C);
    float64."""
    width = g if member is None else 1
    out = [model(x[i:i + batch].to(device).expand(width, -1, -1), member).double().log_softmax(-1).cpu()
           for i in range(0, len(x), batch)]
    return torch.cat(out, dim=1)
