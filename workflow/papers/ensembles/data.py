"""The data: sklearn's digits (default and smoke) or CIFAR-10/100 from a user-given path (full).

Both become one table: a `label` column, one split column per replicate (`split0`, `split1`, ...: train |
val | test | unused) and pixel columns x0 ... x{D-1}, scaled to [0, 1] (digits: 8x8 = 64 pixels; CIFAR:
3x32x32 = 3072, channel-major as in the python files). Replicate r draws its split from seed data_seed + r,
so the replicates are independent draws of the whole experiment (data split and member seeds).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from papers.common.datasets import load_cifar, load_digits


def digits(train_size: int | None, val_size: int, replicates: int, seed: int) -> pd.DataFrame:
    """sklearn's 1,797 real 8x8 digits; per replicate a random train / val / test split (test: the rest)."""
    x, y = load_digits()
    splits = {}
    for r in range(replicates):
        order = np.random.default_rng(seed + r).permutation(len(x))
        n_train = len(x) - val_size - 100 if train_size is None else train_size
        split = np.full(len(x), "test", dtype=object)
        split[order[:n_train]] = "train"
        split[order[n_train:n_train + val_size]] = "val"
        splits[f"split{r}"] = split
    return _table(x, y, splits)


def cifar(path: str | Path, train_size: int | None, val_size: int, replicates: int, seed: int) -> pd.DataFrame:
    """CIFAR-10 or CIFAR-100 from `path` (papers.common.datasets.load_cifar): per replicate a random
    validation set of `val_size` and a training set of `train_size` (None: the rest) from the official
    training images; the official test images are every replicate's test set."""
    (x_tr, y_tr), (x_te, y_te) = load_cifar(path, "train"), load_cifar(path, "test")
    x = np.concatenate([x_tr, x_te]).reshape(-1, 3 * 32 * 32)
    splits = {}
    for r in range(replicates):
        order = np.random.default_rng(seed + r).permutation(len(y_tr))
        n_train = len(y_tr) - val_size if train_size is None else train_size
        split = np.full(len(y_tr), "unused", dtype=object)
        split[order[:n_train]] = "train"
        split[order[n_train:n_train + val_size]] = "val"
        splits[f"split{r}"] = np.concatenate([split, np.full(len(y_te), "test", dtype=object)])
    return _table(x, np.concatenate([y_tr, y_te]), splits)


def _table(x: np.ndarray, y: np.ndarray, splits: dict[str, np.ndarray]) -> pd.DataFrame:
    df = pd.DataFrame(x.astype(np.float32), columns=[f"x{i}" for i in range(x.shape[1])])
    for i, (name, split) in enumerate(splits.items()):
        df.insert(i, name, split.astype(str))
    df.insert(0, "label", y.astype(np.int64))
    return df


def arrays(df: pd.DataFrame, replicate: int, split: str):
    """(x, y) of one split of one replicate as numpy arrays: x (N, D) float32, y (N,) int64 (table order)."""
    part = df[df[f"split{replicate}"] == split]
    pixels = [c for c in df.columns if c.startswith("x")]
    return part[pixels].to_numpy(np.float32), part.label.to_numpy(np.int64)
