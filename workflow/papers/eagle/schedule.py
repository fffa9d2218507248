"""The SFT learning-rate schedule (no torch import: the report reads it too)."""
from __future__ import annotations

import math


def lr_factor(step: int, steps: int, schedule: str, warmup: float) -> float:
    """The learning rate's multiplier at `step` (0-based) of `steps`: 1 throughout for ``constant``; for ``cosine``
    LLaVA-1.5's schedule (its training scripts: ``lr_scheduler_type cosine``, ``warmup_ratio 0.03``), a linear warm-up
    over the first ceil(warmup * steps) steps, then a half cosine from 1 to 0 at the last step."""
    if schedule == "constant":
        return 1.0
    if schedule != "cosine":
        raise ValueError(f"eagle.train.sft_schedule must be constant or cosine, got {schedule!r}")
    n_warm = math.ceil(warmup * steps)
    if step < n_warm:
        return (step + 1) / n_warm
    return 0.5 * (1.0 + math.cos(math.pi * (step - n_warm) / max(1, steps - n_warm)))
