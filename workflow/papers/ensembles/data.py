"""The data: sklearn's digits (default and smoke) or CIFAR-10/100 from a user-given path (full).

Both become one table: a `split` column (train | test), a `label` column and pixel columns x0 ... x{D-1},
scaled to [0, 1] (digits: 8x8 = 64 pixels; CIFAR: 3x32x32 = 3072, channel-major as in the python files).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from papers.common.datasets import load_cifar, load_digits


def digits(test_size: int, seed: int) -> pd.DataFrame:
    """sklearn's 1,797 real 8x8 digits (shipped in its wheel), split at random into a training pool and a test set."""
    x, y = load_digits()
    order = np.random.default_rng(seed).permutation(len(x))
    split = np.where(np.arange(len(x)) < test_size, "test", "train")
    return _table(x[order], y[order], split)


def cifar(path: str | Path) -> pd.DataFrame:
    """CIFAR-10 or CIFAR-100 from `path` (see papers.common.datasets.load_cifar), train then test."""
    (x_tr, y_tr), (x_te, y_te) = load_cifar(path, "train"), load_cifar(path, "test")
    x = np.concatenate([x_tr, x_te]).reshape(-1, 3 * 32 * 32)
    split = np.repeat(["train", "test"], [len(y_tr), len(y_te)])
    return _table(x, np.concatenate([y_tr, y_te]), split)


def _table(x: np.ndarray, y: np.ndarray, split: np.ndarray) -> pd.DataFrame:
    df = pd.DataFrame(x.astype(np.float32), columns=[f"x{i}" for i in range(x.shape[1])])
    df.insert(0, "label", y.astype(np.int64))
    df.insert(0, "split", split)
    return df


def arrays(df: pd.DataFrame, split: str, n: int | None = None):
    """(x, y) of one split as numpy arrays: x (N, D) float32, y (N,) int64; the first `n` rows if given."""
    part = df[df.split == split]
    if n is not None:
        part = part.iloc[:n]
    return part.drop(columns=["split", "label"]).to_numpy(np.float32), part.label.to_numpy(np.int64)
