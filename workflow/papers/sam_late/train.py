"""The training loop of every arm: mini-batch SGD (momentum, weight decay, step decay), switching
its update rule between SGD, SAM and adversarial training at an epoch (ERM_to_SAM.py, ERM_to_Adv.py).

Each epoch draws its batch order and its torch randomness from (seed, epoch) alone, so a run that
starts from another run's checkpoint at epoch e continues exactly as that run would have: a late
arm branches from the SGD run at the switch epoch (a test checks the two agree).

As in the official code, SGD steps and SAM steps use two optimiser objects (so momentum starts
afresh when the rule switches between them), while adversarial training uses the SGD optimiser. The controls
follow the rule they stand in for: the random-direction step (rand) SAM's optimiser, the clean step (clean) SGD's.
"""
from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from papers.sam_late import batched, sam
from papers.sam_late.data import random_crop_flip
from papers.sam_late.params import MATCH_COLUMNS


def flat_params(model: nn.Module) -> torch.Tensor:
    """All trainable parameters as one vector (P,)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad])


def _cpu(obj):
    if torch.is_tensor(obj):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cpu(v) for v in obj]
    return obj


def checkpoint(model, optimizers: dict, epoch: int) -> dict:
    """Model and optimiser states at the start of `epoch` (CPU tensors)."""
    return {"model": _cpu(model.state_dict()), "optimizers": {k: _cpu(o.state_dict()) for k, o in optimizers.items()},
            "epoch": epoch}


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> tuple[float, float]:
    """Mean cross-entropy and accuracy in eval mode."""
    model.eval()
    loss, correct = 0.0, 0
    for i in range(0, len(x), batch):
        logits = model(x[i:i + batch])
        loss += float(F.cross_entropy(logits, y[i:i + batch], reduction="sum"))
        correct += int((logits.argmax(1) == y[i:i + batch]).sum())
    return loss / len(x), correct / len(x)


def train(model: nn.Module, data: dict, p, *, arm: str, rho: float, seed: int, start: dict | None = None,
          switch: int | None = None, track: bool = False, progress=None):
    """Train `model` (in place) as arm `arm` from epoch 0, or from checkpoint `start`.

    Args:
        data: tensors x_train (N, ...), y_train (N,) (the noisy labels), x_test, y_test.
        p: the paper's Params (epochs, lr schedule, rule of the arm per epoch, attack, ...).
        switch: the epoch the arm's rule changes at (default: late_epochs for early arms, p.switch_epoch for late
            arms; the extra arms pass theirs).
        track: record ||w_t - w_switch|| after each of the first p.escape_steps steps from the switch
            epoch on (the escape; w_switch = the weights at the start of epoch `switch`).

    Returns:
        history (one row per epoch: rule, lr, train_loss, and test_loss, test_acc every p.history_every epochs and
        at the last, NaN between), escape (one row per tracked step: step, distance, the full training set's loss
        after the step and at w_switch), and the checkpoints {"switch": at p.switch_epoch, e: for SGD at every
        other epoch e of p.switch_epochs (the extra late arms' branch points), "final": at the end} (those before
        the run's first epoch are absent).
    """
    params = [q for q in model.parameters() if q.requires_grad]
    optimizers = {rule: torch.optim.SGD(params, lr=p.lr, momentum=p.momentum, weight_decay=p.weight_decay)
                  for rule in ("sgd", "sam")}
    first = 0
    if start is not None:
        model.load_state_dict(start["model"])
        for k, o in optimizers.items():
            # A copy: load_state_dict keeps same-device tensors by reference, so stepping would change the caller's
            # checkpoint (its momentum buffers) in place (review sam_late_r20261205).
            o.load_state_dict(copy.deepcopy(start["optimizers"][k]))
        first = start["epoch"]
    x, y = data["x_train"], data["y_train"]
    n = len(x)
    history, escape, ckpts = [], [], {}
    w_ref, step = None, 0
    if switch is None:
        switch = p.late_epochs if arm.startswith("early") else p.switch_epoch
    branch_points = set(p.switch_epochs) if arm == "sgd" else set()  # only SGD runs are branched from
    epochs = range(first, p.epochs)
    for epoch in progress(epochs) if progress else epochs:
        if epoch == p.switch_epoch:
            ckpts["switch"] = checkpoint(model, optimizers, epoch)
        elif epoch in branch_points:
            ckpts[epoch] = checkpoint(model, optimizers, epoch)
        if epoch == switch and track:
            w_ref = flat_params(model)
            # The training loss at w_switch: the premise of claim (c) asks whether it rises after the switch
            # (escape.py tracks the training loss; plain cross-entropy on the run's labels, in eval mode).
            ref_loss = evaluate(model, x, y)[0]
        rule = p.rule(arm, epoch, switch)
        opt = optimizers["sam" if rule in ("sam", "rand") else "sgd"]
        for o in optimizers.values():
            for group in o.param_groups:
                group["lr"] = p.lr_at(epoch)
        # One seeding block per epoch (ERM_to_SAM.py: set_seed(seeds[epoch])): batch order, dropout,
        # augmentation and PGD's random start all follow from (seed, epoch).
        rng = np.random.default_rng([seed, epoch])
        torch.manual_seed(int(rng.integers(2**31)))
        order = torch.from_numpy(rng.permutation(n))
        model.train()
        losses = []
        for i in range(0, n, p.batch_size):
            idx = order[i:i + p.batch_size]
            xb, yb = x[idx], y[idx]  # (B, ...), (B,)
            if p.augment:
                xb = random_crop_flip(xb)
            if rule == "sgd":
                loss = sam.sgd_step(model, opt, xb, yb, p.label_smoothing)
            elif rule == "sam":
                loss = sam.sam_step(model, opt, xb, yb, p.label_smoothing, rho)
            elif rule == "rand":
                loss = sam.random_sam_step(model, opt, xb, yb, p.label_smoothing, rho)
            elif rule == "clean":
                loss = sam.clean_step(model, opt, xb, yb)
            else:
                loss = sam.adv_step(model, opt, xb, yb, p.attack)
            losses.append(float(loss))
            if w_ref is not None and step < p.escape_steps:
                step += 1
                escape.append({"step": step, "distance": float((flat_params(model) - w_ref).norm()),
                               "train_loss": evaluate(model, x, y)[0], "switch_train_loss": ref_loss})
                model.train()
        last = epoch == p.epochs - 1
        test_loss, test_acc = (evaluate(model, data["x_test"], data["y_test"])
                               if last or (epoch + 1) % p.history_every == 0 else (np.nan, np.nan))
        history.append({"epoch": epoch, "rule": rule, "lr": p.lr_at(epoch), "train_loss": float(np.mean(losses)),
                        "test_loss": test_loss, "test_acc": test_acc})
    ckpts["final"] = checkpoint(model, optimizers, p.epochs)
    return pd.DataFrame(history), pd.DataFrame(escape, columns=["step", "distance", "train_loss", "switch_train_loss"]), ckpts


# ---- the arms of one training job ---------------------------------------------------------------------
def new_model(p, seed: int, device: str) -> nn.Module:
    """The initialisation depends on the seed only, so every arm of a seed starts from the same weights."""
    from papers.sam_late.data import CIFAR_SHAPE, DIGITS_SHAPE, N_CLASSES
    from papers.sam_late.model import build

    torch.manual_seed(seed)
    shape = DIGITS_SHAPE if p.data.source == "digits" else CIFAR_SHAPE
    return build(p.model, shape, p.hidden, N_CLASSES).to(device)


def calibrate_rand(p, tensors: dict, start: dict, seed: int, rho: float, switch: int, device: str) -> dict:
    """late_rand's radius for one seed (:func:`papers.sam_late.sam.matched_radius`) at its late phase's start
    (`start`: SGD's checkpoint at `switch`): the first p.match_batches batches of a fixed permutation of the seed's
    training set and p.match_directions directions per batch, both from the (seed, switch, 1) stream (apart from the
    training's (seed, epoch) streams, so the calibration leaves the run's randomness as it was)."""
    model = new_model(p, seed, device)
    model.load_state_dict(start["model"])
    x, y = tensors["x_train"], tensors["y_train"]
    rng = np.random.default_rng([seed, switch, 1])
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    order = torch.from_numpy(rng.permutation(len(x)))
    batches = [(x[idx], y[idx]) for idx in order.split(p.batch_size)[:p.match_batches]]
    return sam.matched_radius(model, batches, smoothing=p.label_smoothing, rho=rho, directions=p.match_directions,
                              generator=gen)


def _with_match(history: pd.DataFrame, match: dict | None) -> pd.DataFrame:
    """late_rand's calibration (radius, SAM's and the random perturbation's loss rises) as constant columns."""
    if match is not None:
        for col in MATCH_COLUMNS:
            history[col] = match[col.removeprefix("match_")]
    return history


def train_arms(p, df: pd.DataFrame, condition: str, arms, rho: float, sgd_runs: dict | None, device: str,
               progress=None) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Train `arms` for every seed on that seed's split and `condition`'s labels; late arms start from SGD's
    checkpoint at their switch epoch (`sgd_runs`: seed -> SGD's checkpoints, from the same condition).

    `arms`: names of params.ARMS, or (name, arm, switch) for an extra arm (arm a name of params.ARMS, switch the
    epoch its rule changes at: late_sam_kK, SAM for the last K epochs, switches at epochs - K; early_sam_kK at K).
    Returns the histories and escapes (columns labels, arm, rho, seed first) and {arm: {seed: checkpoints}}
    (SGD keeps its branch points, every other arm only its final state).
    """
    from papers.common.seeding import seed_everything
    from papers.sam_late.data import load_tensors

    if batched.supported(p):
        return _train_arms_side_by_side(p, df, condition, arms, rho, sgd_runs, device, progress)
    histories, escapes, runs = [], [], {}
    for seed in range(p.seeds):
        tensors = load_tensors(df, p.data.source, seed, condition, device)
        for job in arms:
            name, arm, switch = (job, job, None) if isinstance(job, str) else job
            if switch is None:
                switch = p.late_epochs if arm.startswith("early") else p.switch_epoch
            late = arm.startswith("late")
            start = sgd_runs[seed]["switch" if switch == p.switch_epoch else switch] if late else None
            match = calibrate_rand(p, tensors, start, seed, rho, switch, device) if arm == "late_rand" else None
            seed_everything(seed)
            model = new_model(p, seed, device)
            bar = (lambda it: progress(it, desc=f"{condition} {name} rho={rho} seed={seed}")) if progress else None
            h, e, ckpts = train(model, tensors, p, arm=arm, rho=match["radius"] if match else rho, seed=seed,
                                start=start, switch=switch, track=late or arm == "sgd", progress=bar)
            runs.setdefault(name, {})[seed] = ckpts if arm == "sgd" else {"final": ckpts["final"]}
            _label(h, e, condition, name, rho, seed)
            _with_match(h, match)
            histories.append(h)
            escapes.append(e)
    return pd.concat(histories, ignore_index=True), pd.concat(escapes, ignore_index=True), runs


def _label(history: pd.DataFrame, escape: pd.DataFrame, condition: str, name: str, rho: float, seed: int) -> None:
    """Prefix a run's history and escape frames with the columns that name it (labels, arm, rho, seed)."""
    from papers.sam_late.params import is_sam_arm

    for df_ in (history, escape):
        df_.insert(0, "labels", condition)
        df_.insert(1, "arm", name)
        df_.insert(2, "rho", rho if is_sam_arm(name) else 0.0)
        df_.insert(3, "seed", seed)


def _train_arms_side_by_side(p, df, condition, arms, rho, sgd_runs, device, progress=None):
    """:func:`train_arms` with the seeds of each arm trained at once (:mod:`.batched`): the same initialisations,
    data, random streams and outputs, in the same order (seed, then arm)."""
    from papers.common.seeding import seed_everything
    from papers.sam_late.data import load_tensors

    seeds = list(range(p.seeds))
    tensors = [load_tensors(df, p.data.source, seed, condition, device) for seed in seeds]
    out, runs = {}, {}
    for job in arms:
        name, arm, switch = (job, job, None) if isinstance(job, str) else job
        if switch is None:
            switch = p.late_epochs if arm.startswith("early") else p.switch_epoch
        late = arm.startswith("late")
        key = "switch" if switch == p.switch_epoch else switch
        results, matches = [], {}
        for g in range(0, len(seeds), batched.GROUP):
            group = seeds[g:g + batched.GROUP]
            models = []
            for seed in group:
                seed_everything(seed)
                models.append(new_model(p, seed, device))
            starts = [sgd_runs[seed][key] for seed in group] if late else None
            arm_rho = rho
            if arm == "late_rand":  # each seed's calibrated radius (float32, as the one-seed loop's scale rounds it)
                for seed, start in zip(group, starts):
                    matches[seed] = calibrate_rand(p, tensors[seed], start, seed, rho, switch, device)
                arm_rho = torch.tensor([matches[seed]["radius"] for seed in group], dtype=torch.float32)
            bar = ((lambda it: progress(it, desc=f"{condition} {name} rho={rho} seeds {group[0]}-{group[-1]}"))
                   if progress else None)
            results += batched.train_members(models, [tensors[s] for s in group], p, arm=arm, rho=arm_rho, seeds=group,
                                             starts=starts, switch=switch, track=late or arm == "sgd", progress=bar)
        for seed, (h, e, ckpts) in zip(seeds, results):
            runs.setdefault(name, {})[seed] = ckpts if arm == "sgd" else {"final": ckpts["final"]}
            _label(h, e, condition, name, rho, seed)
            _with_match(h, matches.get(seed) if arm == "late_rand" else None)
            out[seed, name] = (h, e)
    order = [(seed, (job if isinstance(job, str) else job[0])) for seed in seeds for job in arms]
    return (pd.concat([out[k][0] for k in order], ignore_index=True),
            pd.concat([out[k][1] for k in order], ignore_index=True), runs)
