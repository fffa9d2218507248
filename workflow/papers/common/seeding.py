"""One seeding block for every source of randomness a stage uses."""
from __future__ import annotations

import random

import numpy as np


def seed_everything(seed: int) -> np.random.Generator:
    """Seed python's `random`, numpy's legacy global state and torch (if installed).

    Returns a fresh ``numpy.random.Generator`` for the stage to draw from explicitly. On CUDA, torch
    is also told to use deterministic algorithms, so that reruns give the same tables; the CPU ops the
    papers use are deterministic already, and the switch costs seconds of imports per job there.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass
    else:
        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.use_deterministic_algorithms(True, warn_only=True)
    return np.random.default_rng(seed)
