"""The data: sklearn's digits (default scale) or CIFAR-10 (the paper's), one split and one draw of label noise
per seed.

Every seed is an independent replicate of the whole experiment: seed s draws its own train / test split (digits:
a random permutation of the 1,797 images; CIFAR-10: a random subset of its training images, its official test
images) and, for the noisy-label extension, its own corrupted labels. The table :func:`split_table` writes holds
the pixels (scaled to [0, 1], the box PGD projects onto, as ERM_to_Adv.py), the clean `label`, one column
`split{s}` (train | test | unused) and, where the noisy condition runs, one column `noisy{s}` per seed.
Loaders take the path of the file (or folder) and name the file and line of bad input.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# The digits and CIFAR loaders are shared with other papers: papers.common.datasets.
from papers.common.datasets import CIFAR_SHAPE, DIGITS_SHAPE, load_cifar, load_digits  # noqa: F401

N_CLASSES = 10
CONDITIONS = ("clean", "noisy")  # clean: the paper's labels; noisy: the extension with corrupted training labels


def corrupt_labels(y: np.ndarray, fraction: float, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Symmetric label noise: round(fraction N) labels, chosen at random, moved to another class uniformly."""
    y = y.copy()
    flip = rng.choice(len(y), size=int(round(fraction * len(y))), replace=False)
    y[flip] = (y[flip] + rng.integers(1, n_classes, size=len(flip))) % n_classes  # never the true class
    return y


def seed_rng(data_seed: int, seed: int, purpose: int) -> np.random.Generator:
    """The generator of seed `seed`'s split (purpose 0) or label noise (purpose 1): independent across seeds."""
    return np.random.default_rng([data_seed, seed, purpose])


def split_table(d, seeds: int, noisy: bool) -> pd.DataFrame:
    """The table described in the module docstring, from the data parameters `d` (source, path, sizes, noise)."""
    if d.source == "digits":
        x, y = load_digits(d.path)
        x = x.reshape(len(x), -1)
        splits = {}  # each seed's split is drawn from all 1,797 images
        for s in range(seeds):
            order = seed_rng(d.seed, s, 0).permutation(len(x))
            split = np.full(len(x), "unused", dtype=object)
            split[order[:d.train_size]] = "train"
            split[order[d.train_size:d.train_size + d.test_size]] = "test"
            splits[s] = split
    else:
        if d.path is None:
            raise ValueError("sam_late.data.path: the cifar10 source needs the folder cifar-10-batches-py "
                             "(nothing is downloaded)")
        x_tr, y_tr = load_cifar(d.path, "train")
        x_te, y_te = load_cifar(d.path, "test")
        x = np.concatenate([x_tr, x_te[:d.test_size]]).reshape(len(x_tr) + min(d.test_size, len(x_te)), -1)
        y = np.concatenate([y_tr, y_te[:d.test_size]])
        n_train_pool = len(x_tr)
        splits = {}
        for s in range(seeds):
            split = np.full(len(x), "unused", dtype=object)
            split[seed_rng(d.seed, s, 0).permutation(n_train_pool)[:d.train_size]] = "train"
            split[n_train_pool:] = "test"  # the official test images, the same for every seed
            splits[s] = split
    df = pd.DataFrame(x.astype(np.float32), columns=[f"px{i}" for i in range(x.shape[1])])
    columns = {"label": y.astype(np.int64)}
    for s in range(seeds):
        columns[f"split{s}"] = splits[s].astype(str)
        if noisy:
            train = splits[s] == "train"
            labels = y.astype(np.int64).copy()
            labels[train] = corrupt_labels(labels[train], d.label_noise, N_CLASSES, seed_rng(d.seed, s, 1))
            columns[f"noisy{s}"] = labels
    return pd.concat([pd.DataFrame(columns), df], axis=1)


def load_tensors(df: pd.DataFrame, source: str, seed: int, condition: str, device: str = "cpu") -> dict:
    """Seed `seed`'s tensors: x_train (N, *shape), y_train (the condition's labels: clean, or that seed's noisy
    draw), clean_train, x_test, y_test (clean), in table order."""
    import torch

    if condition not in CONDITIONS:
        raise ValueError(f"sam_late.conditions: '{condition}' is not one of {CONDITIONS}")
    shape = DIGITS_SHAPE if source == "digits" else CIFAR_SHAPE
    pixels = [c for c in df.columns if c.startswith("px")]
    out = {}
    for split in ("train", "test"):
        part = df[df[f"split{seed}"] == split]
        out[f"x_{split}"] = torch.tensor(part[pixels].to_numpy(np.float32)).reshape(-1, *shape).to(device)
        out[f"y_{split}"] = torch.tensor(part.label.to_numpy()).to(device)
    out["clean_train"] = out["y_train"]
    if condition == "noisy":
        out["y_train"] = torch.tensor(df[df[f"split{seed}"] == "train"][f"noisy{seed}"].to_numpy()).to(device)
    return out


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
