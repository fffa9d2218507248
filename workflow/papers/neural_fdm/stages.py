"""The neural_fdm DAG's stages, the thin layer the rules call: prepare (test targets) -> train (per task and
learned model, every seed side by side) -> evaluate (per task: the learned models, the controls and direct
optimisation; :mod:`.evaluate`) -> report (table, figures, claims; :mod:`.report`).
Each function takes its parameters and paths explicitly.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd

from papers.common.io import ensure_parent, write_parquet
from papers.common.params import to_dict
from papers.common.progress import progress
from papers.common.seeding import seed_everything
from papers.neural_fdm.evaluate import SPLITS
from papers.neural_fdm.params import parse

log = logging.getLogger(__name__)


# ---- prepare -------------------------------------------------------------------------------------
def prepare(*, cfg, targets):
    """The test targets of every task, in and out of distribution: long table (task, split, shape, node, x, y, z)."""
    from papers.neural_fdm.shapes import sample_targets

    p = parse(cfg)
    frames = []
    for t, name in enumerate(p.tasks):
        for s, split in enumerate(SPLITS):
            rng = np.random.default_rng([p.test_seed, t, s])
            x = sample_targets(name, p.task(name), rng, p.test_shapes, split)  # (n, N, 3)
            n, N, _ = x.shape
            frames.append(pd.DataFrame({"task": name, "split": split, "shape": np.repeat(np.arange(n), N),
                                        "node": np.tile(np.arange(N), n), "x": x[..., 0].ravel(),
                                        "y": x[..., 1].ravel(), "z": x[..., 2].ravel()}))
    write_parquet(pd.concat(frames, ignore_index=True), targets)


# ---- train ---------------------------------------------------------------------------------------
def train(*, cfg, task, model, checkpoint, history, search):
    """Train `model` ("hybrid" or "neural") on `task` for every seed, side by side in one stack
    (:class:`~papers.neural_fdm.train.Stack`); one checkpoint holds them all.

    The learning rate comes from the search both models share (:func:`~papers.neural_fdm.train.search_lr`
    over `lr_grid`, on validation targets drawn from `validation_seed`, never the test set); with an
    empty grid, the configured lr_hybrid / lr_neural. `search` gets the search's table. The same validation
    targets score every seed after 50%, 75% and 100% of its steps (columns `fraction` and
    `validation_error` of `history`), each time on the weights averaged over the last train.average steps, which
    the checkpoint keeps. The convergence premise compares the model of SHORT_RUN of the steps with that of all of
    them: at a constant rate, the 75% reading is the evaluated model of a complete run of 3/4 of the steps (same
    initial weights, target stream, rate and window), so one run per seed serves; under a decaying schedule each
    seed also trains a complete shorter run of its own (on its own schedule), side by side.
    """
    import torch

    from papers.neural_fdm import tasks
    from papers.neural_fdm.params import TASKS
    from papers.neural_fdm.train import SHORT_RUN, search_lr
    from papers.neural_fdm.train import train as train_models

    p = parse(cfg)
    t = tasks.build(task, p, dtype=torch.float32)
    tp = t.p.train
    kw = dict(batch_size=tp.batch_size, clip_norm=tp.clip_norm, residual_weight=t.p.residual_weight,
              log_every=tp.log_every, guard=t.p.guard, schedule=tp.schedule)
    # the search's runs average over the same share of their (shorter) runs as the training does of its own
    search_average = max(round(tp.average * p.tune_steps / tp.steps), 0) if tp.average > 1 else tp.average
    # validation targets (never the test set): the search's score and the convergence premise's checkpoints
    rng = np.random.default_rng([p.validation_seed, TASKS.index(task)])
    x_val = torch.as_tensor(t.sample(rng, p.validation_shapes, "id"), dtype=torch.float32)
    if p.lr_grid:
        seed_everything(p.tune_seed)
        lr, table = search_lr(t, model, grid=p.lr_grid, x_val=x_val, seeds=range(p.tune_seed, p.tune_seed + p.tune_seeds),
                              steps=p.tune_steps, condition_limit=p.condition_limit,
                              max_undone=p.max_undone, average=search_average, **kw)
        log.info("%s %s: learning-rate search %s -> %g", task, model, table.to_dict("records"), lr)
    else:
        lr = tp.lr_hybrid if model == "hybrid" else tp.lr_neural
        table = pd.DataFrame([{"lr": lr, "seed": -1, "validation_error": float("nan"), "skipped": 0, "rejected": 0,
                               "excluded": False, "chosen": True}])
    write_parquet(table.assign(task=task, model=model), search)
    seeds = list(range(p.seeds))
    # At a constant rate, one run per seed: its averaged weights at SHORT_RUN of the steps are the complete
    # shorter run's model (papers.neural_fdm.train.train; tested). Under a decaying schedule they are not (the 75%
    # iterate has not annealed), so every seed also trains its complete shorter run, on its own schedule, beside it.
    short = max(round(SHORT_RUN * tp.steps), 1)
    runs = [tp.steps] * len(seeds) + ([short] * len(seeds) if tp.schedule != "constant" else [])
    start = time.perf_counter()
    nets, hist = train_models(t, model, seeds=(seeds * 2)[:len(runs)], lrs=[lr] * len(runs), steps=runs,
                              condition_limit=p.condition_limit, average=tp.average,
                              progress=lambda it: progress(it, desc=f"{task} {model} {len(seeds)} seeds", total=tp.steps),
                              x_val=x_val, **kw)
    nets = nets[:len(seeds)]  # any shorter runs serve the convergence premise only (their rows of `hist`)
    log.info("%s %s: %d seeds x %d steps (%s) at lr %g (%s, weights averaged over the last %d steps) in %.1f s", task,
             model, len(seeds), tp.steps, f"and {short}" if len(runs) > len(seeds) else "one run each", lr,
             tp.schedule, tp.average, time.perf_counter() - start)
    torch.save({"task": task, "model": model, "states": {s: n.state_dict() for s, n in zip(seeds, nets)},
                "config": to_dict(p), "steps": tp.steps, "lr": lr,
                "average": tp.average}, ensure_parent(checkpoint))
    write_parquet(hist.assign(task=task, model=model), history)
