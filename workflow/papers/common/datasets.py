"""Image data sets several papers share: sklearn's digits (ships in its wheel) and CIFAR (user path).

Loaders take the path of the file or folder (default: the packaged copy, where one exists), return
pixels scaled to [0, 1], and name the file and line (or array) of bad input.
"""
from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np

DIGITS_SHAPE = (64,)  # 8 x 8 grey levels 0..16, flattened
CIFAR_SHAPE = (3, 32, 32)


def digits_path() -> Path:
    """sklearn's packaged copy of the UCI optical digits (1,797 rows: 64 pixels 0..16, then the label)."""
    import sklearn

    return Path(sklearn.__file__).parent / "datasets" / "data" / "digits.csv.gz"


def load_digits(path: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """x (N, 64) float32 in [0, 1] and labels (N,) int64 from a digits CSV (gzip or plain)."""
    path = Path(path) if path is not None else digits_path()
    opener = gzip.open if path.suffix == ".gz" else open
    x, y = [], []
    with opener(path, "rt") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                values = [float(v) for v in line.split(",")]
            except ValueError:
                raise ValueError(f"{path}, line {line_no}: not a row of numbers: {line.strip()[:60]!r}") from None
            if len(values) != 65:
                raise ValueError(f"{path}, line {line_no}: expected 65 values (64 pixels and a label), got {len(values)}")
            pixels, label = values[:64], values[64]
            if not (all(0 <= v <= 16 for v in pixels) and label in range(10)):
                raise ValueError(f"{path}, line {line_no}: pixels must lie in [0, 16] and the label in 0..9")
            x.append(pixels)
            y.append(int(label))
    if not x:
        raise ValueError(f"{path}: no rows")
    return np.asarray(x, dtype=np.float32) / 16.0, np.asarray(y, dtype=np.int64)


def load_cifar(path: str | Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """x (N, 3, 32, 32) float32 in [0, 1] and labels (N,) int64 of one split ("train" or "test").

    `path` is the python-pickle folder of CIFAR-10 (cifar-10-batches-py: data_batch_1..5, test_batch) or
    CIFAR-100 (cifar-100-python: train, test; fine labels), or an .npz with x_train, y_train, x_test,
    y_test (uint8 images, N x 3 x 32 x 32 or N x 32 x 32 x 3).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path) as f:
            keys = (f"x_{split}", f"y_{split}")
            missing = sorted(set(keys) - set(f.files))
            if missing:
                raise ValueError(f"{path}: missing arrays {missing} (has {sorted(f.files)})")
            x, y = _chw(f[keys[0]], path, keys[0]), np.asarray(f[keys[1]]).reshape(-1)
    elif path.is_dir():
        cifar10 = (path / "test_batch").exists() or (path / "data_batch_1").exists()
        names = ([f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]) if cifar10 \
            else [split]
        xs, ys = zip(*(_pickled_batch(path / name) for name in names))
        x, y = np.concatenate(xs), np.concatenate(ys)
    else:
        raise FileNotFoundError(f"{path}: expected a CIFAR python folder (cifar-10-batches-py, cifar-100-python) "
                                "or an .npz file")
    return x.astype(np.float32) / 255.0, y.astype(np.int64)


def _pickled_batch(file: Path) -> tuple[np.ndarray, np.ndarray]:
    if not file.exists():
        raise FileNotFoundError(f"{file}: missing CIFAR batch file")
    with open(file, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    labels = batch.get(b"labels", batch.get(b"fine_labels")) if isinstance(batch, dict) else None
    if labels is None or b"data" not in batch:
        raise ValueError(f"{file}: not a CIFAR batch (needs b'data' and b'labels' or b'fine_labels')")
    data = np.asarray(batch[b"data"])
    if data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{file}: b'data' has shape {data.shape}, expected (N, 3072)")
    return data.reshape(-1, *CIFAR_SHAPE), np.asarray(labels)


def _chw(x: np.ndarray, file: Path, key: str) -> np.ndarray:
    """Images as N x 3 x 32 x 32 (accepts channel-last)."""
    if x.ndim == 4 and x.shape[1:] == (32, 32, 3):
        x = x.transpose(0, 3, 1, 2)
    if x.ndim != 4 or x.shape[1:] != CIFAR_SHAPE:
        raise ValueError(f"{file}: array '{key}' has shape {x.shape}, expected N x 3 x 32 x 32 or N x 32 x 32 x 3")
    return x
