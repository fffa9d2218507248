"""The data: sklearn's digits with noisy training labels (default scale) or CIFAR-10 (the paper's).

Loaders take the path of the file (or folder) and name the file and line of bad input. Pixels are
scaled to [0, 1], the box PGD projects onto (ERM_to_Adv.py: min_val 0, max_val 1).
"""
from __future__ import annotations

import numpy as np

# The digits and CIFAR loaders are shared with other papers: papers.common.datasets.
from papers.common.datasets import CIFAR_SHAPE, DIGITS_SHAPE, load_cifar, load_digits  # noqa: F401


def corrupt_labels(y: np.ndarray, fraction: float, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Symmetric label noise: round(fraction N) labels, chosen at random, moved to another class uniformly."""
    y = y.copy()
    flip = rng.choice(len(y), size=int(round(fraction * len(y))), replace=False)
    y[flip] = (y[flip] + rng.integers(1, n_classes, size=len(flip))) % n_classes  # never the true class
    return y


def random_crop_flip(x, padding: int = 4):
    """CIFAR augmentation on a batch (B, C, H, W): random crop after zero padding, random horizontal flip
    (the official loader's RandomCrop(32, padding=4) and RandomHorizontalFlip), from torch's global RNG."""
    import torch
    import torch.nn.functional as F

    b, _, h, w = x.shape
    padded = F.pad(x, (padding,) * 4)
    i = torch.randint(0, 2 * padding + 1, (b,)).tolist()
    j = torch.randint(0, 2 * padding + 1, (b,)).tolist()
    out = torch.stack([padded[k, :, i[k]:i[k] + h, j[k]:j[k] + w] for k in range(b)])
    flip = torch.rand(b) < 0.5
    out[flip] = out[flip].flip(-1)
    return out
