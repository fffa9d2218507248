"""Training a learned model (official ``training.py``): Adam on a fresh batch of random targets per step.

There is no fixed training set: the paper samples new target shapes from the generator at every
step, so the model never sees a test shape. The loss is the task's (:meth:`Task.loss`); only the
fully neural model pays the residual penalty (the hybrid's residual is zero to solver precision).

The hybrid may train with a guard against near-singular stiffness (ours): a step after which the
stiffness K of the batch's first shapes has another inertia than the untrained model's (q crossed a
singular K: the solver's shape jumps to another branch, from which the loss barrier of the singularity
keeps it) or a condition number above the limit is undone. The learning rate comes from :func:`search_lr`, the same search for every model.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch

from papers.neural_fdm.models import spectrum_check
from papers.neural_fdm.tasks import Task

log = logging.getLogger(__name__)

# Shapes of each batch whose stiffness the guard checks (an eigendecomposition each: a few keep it cheap;
# the encoder's q moves smoothly with the shape, so a step that crosses a singular K crosses it for all).
GUARD_SHAPES = 4


def train(task: Task, model_name: str, *, seed: int, steps: int, batch_size: int, lr: float, clip_norm: float,
          residual_weight: float, log_every: int, guard: bool = False, condition_limit: float = 1e4,
          progress=None) -> tuple[torch.nn.Module, pd.DataFrame]:
    """Train one model; returns it and its history (step, loss and loss terms every `log_every` steps).

    A step whose loss is not finite (a batch that lands on a singular K) is skipped and counted; with
    `guard`, a hybrid's step after which K on the batch's first shapes has another inertia than the
    untrained model's (its most common one on the first batch), or a cond(K) above `condition_limit`, is
    undone and counted ("rejected").
    """
    torch.manual_seed(seed)
    rng = np.random.default_rng([seed, 1 + ("shell", "tower").index(task.name)])
    model = task.build(model_name)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    kappa = residual_weight if model_name == "neural" else 0.0
    guard = guard and model_name == "hybrid"  # the fully neural model never solves with K
    dtype = task.fdm.signs.dtype
    rows, skipped, rejected, inertia = [], 0, 0, None
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
        if guard:
            if inertia is None:  # the untrained model's branch: its most common inertia on the first batch
                inertia = int(torch.mode(spectrum_check(task.fdm, q[:GUARD_SHAPES].detach(), condition_limit)[0]).values)
            before = [p.detach().clone() for p in model.parameters()]
        opt.step()
        if guard:
            with torch.no_grad():
                neg, ok = spectrum_check(task.fdm, model.encoder(x[:GUARD_SHAPES]), condition_limit)
                if bool((neg != inertia).any() or not ok.all()):
                    for p, old in zip(model.parameters(), before):
                        p.copy_(old)
                    rejected += 1
        if step % log_every == 0 or step == steps - 1:
            rows.append({"step": step, "loss": loss.item(), **{k: v.item() for k, v in terms.items()}})
    if skipped or rejected:
        log.warning("%s %s seed %d: skipped %d steps with a non-finite loss, undid %d steps the guard rejected",
                    task.name, model_name, seed, skipped, rejected)
    history = pd.DataFrame(rows)
    history["skipped"] = skipped
    history["rejected"] = rejected
    return model, history


def validation_error(task: Task, model: torch.nn.Module, x: torch.Tensor, condition_limit: float) -> float:
    """Median shape error per coordinate of `model` on validation targets x (n, N, 3); a failed solve
    (a shape that is not finite, or a hybrid's cond(K) above `condition_limit`) counts as infinite."""
    from papers.neural_fdm.models import Hybrid

    with torch.no_grad():
        loads = task.loads(x)
        x_hat, q = model(x, loads)
        err = task.shape_error(x, x_hat) / task.num_compared
        if isinstance(model, Hybrid):
            err = torch.where(task.admissible(q, condition_limit), err, torch.inf)
    err = torch.where(torch.isnan(err), torch.inf, err)
    return float(err.median())


def search_lr(task: Task, model_name: str, *, grid, x_val: torch.Tensor, seeds, steps: int, condition_limit: float,
              **train_kw) -> tuple[float, pd.DataFrame]:
    """The learning rate of `grid` whose models, trained `steps` steps from each of `seeds`, have the lowest
    worst-seed median validation error (a rate is as good as its worst start; ties: the smaller rate). The
    same search for every model; x_val is never a test set. Returns the rate and one row per (rate, seed)."""
    rows = []
    for lr in sorted(grid):
        for seed in seeds:
            model, hist = train(task, model_name, seed=seed, steps=steps, lr=lr, condition_limit=condition_limit,
                                **train_kw)
            rows.append({"lr": lr, "seed": seed, "validation_error": validation_error(task, model, x_val, condition_limit),
                         "skipped": int(hist["skipped"].iloc[0]) if len(hist) else steps,
                         "rejected": int(hist["rejected"].iloc[0]) if len(hist) else 0})
    table = pd.DataFrame(rows)
    worst = table.groupby("lr").validation_error.max().reset_index().sort_values(["validation_error", "lr"])
    best = float(worst.lr.iloc[0])
    return best, table.assign(chosen=table.lr == best)
