"""Training a learned model (official ``training.py``): Adam on a fresh batch of random targets per step.

There is no fixed training set: the paper samples new target shapes from the generator at every
step, so the model never sees a test shape. The loss is the task's (:meth:`Task.loss`); only the
fully neural model pays the residual penalty (the hybrid's residual is zero to solver precision).
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch

from papers.neural_fdm.tasks import Task

log = logging.getLogger(__name__)


def train(task: Task, model_name: str, *, seed: int, steps: int, batch_size: int, lr: float, clip_norm: float,
          residual_weight: float, log_every: int, progress=None) -> tuple[torch.nn.Module, pd.DataFrame]:
    """Train one model; returns it and its history (step, loss and loss terms every `log_every` steps).

    A step whose loss is not finite (a batch that lands on a singular K) is skipped and counted.
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng([seed, 1 + ("shell", "tower").index(task.name)])
    model = task.build(model_name)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    kappa = residual_weight if model_name == "neural" else 0.0
    dtype = task.fdm.signs.dtype
    rows, skipped = [], 0
    it = range(steps) if progress is None else progress(range(steps))
    for step in it:
        x = torch.as_tensor(task.sample(rng, batch_size, "id"), dtype=dtype)  # (B, N, 3)
        loads = task.loads(x)
        x_hat, q = model(x, loads)
        loss, terms = task.loss(x, x_hat, q, loads, kappa)
        if not torch.isfinite(loss):
            skipped += 1
            continue
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        opt.step()
        if step % log_every == 0 or step == steps - 1:
            rows.append({"step": step, "loss": loss.item(), **{k: v.item() for k, v in terms.items()}})
    if skipped:
        log.warning("%s %s seed %d: skipped %d steps with a non-finite loss", task.name, model_name, seed, skipped)
    history = pd.DataFrame(rows)
    history["skipped"] = skipped
    return model, history
