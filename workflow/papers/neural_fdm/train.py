"""Training the learned models (official ``training.py``): Adam on a fresh batch of random targets per step.

There is no fixed training set: the paper samples new target shapes from the generator at every
step, so a model never sees a test shape. The loss is the task's (:meth:`Task.loss`); only the
fully neural model may pay a residual penalty (kappa > 0, the PINN baseline; the hybrid's residual is zero
to solver precision), and only the hybrid the towers' q-variance term (its q are force densities).

Several independent runs (training seeds, or the (rate, seed) pairs of the learning-rate search) train
side by side as one stack (:class:`Stack`): member m's weights are slice m of every stacked tensor,
its encoder and decoder MLPs run as batched matrix products, and the hybrid's force density solves of
all members form one batch. Members never interact: each has its own target stream, its own loss,
its own Adam state and learning rate (Adam is elementwise) and its own gradient clipping, so a member
trains exactly as it would alone (tested), at a fraction of the Python overhead of separate runs.

The learning rate is constant (the official configs; ``schedule: cosine``, a decay to 0 over the run, remains
selectable). The evaluated weights are a fixed-length trailing average (Polyak-Ruppert / SWA-style averaging of the
iterates; ours, as issue 49 proposed against the final iterate's seed-to-seed variance): at step n, the mean of the
weights after each of the last min(`average`, n) steps (`average` = 0 or 1: the last iterate), accumulated in float64
only over the windows that end at a checkpoint (no copy of W iterates is kept).

The hybrid may train with a guard against near-singular stiffness (ours): a step after which the
stiffness K of the batch's first shapes has another inertia than the untrained model's (q crossed a
singular K: the solver's shape jumps to another branch, from which the loss barrier of the singularity
keeps it) or a condition number above the limit is undone, member by member. The learning rate comes
from :func:`search_lr`, the same search for every model.

Given validation targets (never the test set), every member's median held-out shape error is measured after
50%, 75% and 100% of its steps (:data:`VALIDATION_FRACTIONS`, :func:`stack_validation`; the trajectory), each time
on the averaged weights of that point. The report's convergence premise compares a seed's model after 3/4 of the
steps (:data:`SHORT_RUN`) with its model after all of them. At a constant rate with a fixed-length window, the full
run's averaged weights at 3/4 of its steps ARE the evaluated model of a complete run of 3/4 of the steps (same
initial weights, same target stream, same rate at every step, the same window: tested), so one run per seed gives
both; a decaying schedule would need a separate shorter run (its 75% iterate has not annealed), which
``train(steps=[...])`` still trains beside the full one.
"""
from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.nn import functional as F

from papers.neural_fdm.models import Hybrid, spectrum_check
from papers.neural_fdm.params import SHORT_RUN  # noqa: F401  (the convergence premise's 3/4 run; re-exported)
from papers.neural_fdm.tasks import Task

log = logging.getLogger(__name__)

# Shapes of each batch whose stiffness the guard checks (an eigendecomposition each: a few keep it cheap;
# the encoder's q moves smoothly with the shape, so a step that crosses a singular K crosses it for all).
GUARD_SHAPES = 4
SCHEDULES = ("constant", "cosine")
# Fractions of the training steps after which every member's held-out validation error is measured (the
# convergence premise compares the last two; the first shows the trajectory).
VALIDATION_FRACTIONS = (0.5, 0.75, 1.0)
# torch.optim.Adam's defaults, which the stacked Adam reproduces.
BETAS, EPS = (0.9, 0.999), 1e-8


def linears(net: nn.Module) -> list[nn.Linear]:
    """The linear layers of a model in a fixed order (encoder first, then the neural decoder's)."""
    return [m for m in net.modules() if isinstance(m, nn.Linear)]


def stacked_mlp(layers, h: torch.Tensor) -> torch.Tensor:
    """An MLP of :func:`papers.neural_fdm.models.mlp` for every member at once: `layers` is a list of
    (weight (M, in, out), the transposed nn.Linear weights, bias (M, out)); h (M, B, in) -> (M, B, out), ELU between
    layers. The weights are stored transposed so that their gradients (h^T g) come out in the weights' own layout
    (no copy when autograd accumulates them)."""
    for i, (w, b) in enumerate(layers):
        h = torch.baddbmm(b[:, None, :], h, w)
        if i < len(layers) - 1:
            h = F.elu(h)
    return h


class Stack:
    """M independent models of one kind (hybrid or neural) as stacked weights; `nets` are the members'
    freshly built models, whose weights (transposed: (M, in, out)) and biases become slice m of each stacked tensor
    (leaves with gradients)."""

    def __init__(self, task: Task, model_name: str, nets: list[nn.Module]):
        self.task, self.model_name, self.nets = task, model_name, nets
        per_member = [linears(n) for n in nets]
        self.params = []
        for group in zip(*per_member):
            self.params += [torch.stack([m.weight.detach().T for m in group]).contiguous().requires_grad_(),
                            torch.stack([m.bias.detach() for m in group]).requires_grad_()]
        self.n_encoder = len(linears(nets[0].encoder))

    def _layers(self, first: int, last: int):
        return [(self.params[2 * i], self.params[2 * i + 1]) for i in range(first, last)]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """q (M, B, E) of targets x (M, B, N, 3): each member's encoder on its own targets."""
        enc = self.nets[0].encoder
        M, B = x.shape[:2]
        inp = x[:, :, enc.inputs]  # (M, B, I, 3)
        if enc.normalise_height:
            zs = x[:, :, enc.supports, 2]  # (M, B, S)
            z0 = zs.min(-1).values
            span = zs.max(-1).values - z0
            inp = torch.cat([inp[..., :2], ((inp[..., 2] - z0[..., None]) / span[..., None])[..., None]], -1)
        h = stacked_mlp(self._layers(0, self.n_encoder), inp.reshape(M, B, -1))
        return (F.softplus(h) + enc.shift) * enc.signs

    def forward(self, x: torch.Tensor, loads: torch.Tensor):
        """(x_hat (M, B, N, 3), q (M, B, E)) of every member on its own targets x and loads."""
        M, B, N, _ = x.shape
        q = self.encode(x)
        fdm = self.task.fdm
        if self.model_name == "hybrid":  # one batch of solves for every member's shapes
            x_hat = fdm.equilibrium(q.reshape(M * B, -1), x.reshape(M * B, N, 3), loads.reshape(M * B, N, 3))
            return x_hat.view(M, B, N, 3), q
        h = torch.cat([q, x[:, :, fdm.supports].flatten(2), loads[..., 2]], -1)
        out = stacked_mlp(self._layers(self.n_encoder, len(self.params) // 2), h)
        x_hat = x.clone()
        x_hat[:, :, fdm.free] = out.view(M, B, -1, 3)
        return x_hat, q

    def members(self) -> list[nn.Module]:
        """The members as ordinary models (their weights copied out of the stack)."""
        out = []
        for m, net in enumerate(self.nets):
            with torch.no_grad():
                for i, layer in enumerate(linears(net)):
                    layer.weight.copy_(self.params[2 * i][m].T)
                    layer.bias.copy_(self.params[2 * i + 1][m])
            out.append(net)
        return out


class StackedAdam:
    """Adam (torch.optim.Adam's update, its default betas and eps) over stacked weights, with a learning rate
    per member: `lr` (M,), and a step count per member (a member whose step is skipped does not advance).

    The update is torch's fused Adam kernel (``torch._fused_adam_``, the kernel of ``torch.optim.Adam(fused=True)``:
    m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2, p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)),
    one call per group of members that share their rate and step count: the whole stack at once when they all do
    (the training run), a member's slices otherwise (the search, a skipped step). One pass over the weights instead
    of a dozen elementwise ones: ~12x less time per step on the default scale's stacks, which pays for its seeds."""

    def __init__(self, params, lr: torch.Tensor):
        self.params, self.lr = params, lr
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = torch.zeros(len(lr))

    def _fused(self, rows, lr: float, t: float) -> None:
        """One fused Adam step at rate `lr` and step count `t` on members `rows` (None: every member)."""
        pick = (lambda x: [x]) if rows is None else (lambda x: [x[i] for i in rows])
        params = [s for p in self.params for s in pick(p)]
        grads = [s for p in self.params for s in pick(p.grad)]
        exp_avgs = [s for m in self.m for s in pick(m)]
        exp_avg_sqs = [s for v in self.v for s in pick(v)]
        steps = [torch.tensor(t, dtype=torch.float32) for _ in params]
        torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=lr, beta1=BETAS[0], beta2=BETAS[1],
                           weight_decay=0.0, eps=EPS, amsgrad=False, maximize=False)

    @torch.no_grad()
    def step(self, active: torch.Tensor, scale: torch.Tensor) -> None:
        """One Adam step for the members where `active` (M,) bool, at learning rate lr * scale (M,)."""
        self.t += active.to(self.t.dtype)
        rate = (self.lr * scale).tolist()
        groups: dict = {}  # (rate, step count) -> the active members that share them
        for i in torch.nonzero(active).flatten().tolist():
            groups.setdefault((rate[i], float(self.t[i])), []).append(i)
        for (lr, t), rows in groups.items():
            self._fused(None if len(rows) == len(rate) else rows, lr, t)


def lr_scale(step: int, steps: int, schedule: str) -> float:
    """The factor of the initial learning rate at `step` (0-based) of `steps`: 1, or a cosine down to 0."""
    if schedule not in SCHEDULES:
        raise ValueError(f"learning-rate schedule must be one of {SCHEDULES}, got {schedule!r}")
    return 1.0 if schedule == "constant" else 0.5 * (1 + math.cos(math.pi * step / steps))


def clip_per_member(params, clip_norm: float) -> None:
    """torch.nn.utils.clip_grad_norm_ for every member on its own: its gradients' global norm at most `clip_norm`."""
    sq = sum(p.grad.flatten(1).pow(2).sum(1) for p in params)  # (M,)
    coef = (clip_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0)
    for p in params:
        p.grad.mul_(coef.view((-1,) + (1,) * (p.dim() - 1)))


def stack_validation(stack: Stack, x_val: torch.Tensor, condition_limit: float, params=None) -> np.ndarray:
    """Every member's median shape error per coordinate on validation targets x_val (n, N, 3): (M,), as
    :func:`validation_error` gives for each member alone (a failed solve counts as infinite); with `params` (the
    stack's layout), of those weights instead of the stack's own (the averaged weights)."""
    task = stack.task
    M = stack.params[0].shape[0]  # the members now in the stack
    own = stack.params
    with torch.no_grad():
        if params is not None:
            stack.params = params
        loads = task.loads(x_val)
        n = len(x_val)
        x = x_val.expand(M, *x_val.shape)  # (M, n, N, 3): every member on the same targets
        try:
            x_hat, q = stack.forward(x, loads.expand(M, *loads.shape))
        finally:
            stack.params = own
        err = task.shape_error(x.flatten(0, 1), x_hat.flatten(0, 1)).view(M, n) / task.num_compared
        if stack.model_name == "hybrid":
            err = torch.where(task.admissible(q.flatten(0, 1), condition_limit).view(M, n), err, torch.inf)
        return torch.where(torch.isnan(err), torch.inf, err).median(1).values.double().numpy()


def train(task: Task, model_name: str, *, seeds, lrs, steps, batch_size: int, clip_norm: float,
          residual_weight: float, log_every: int, schedule: str = "constant", guard: bool = False,
          condition_limit: float = 1e4, progress=None, x_val: torch.Tensor | None = None, average: int = 0
          ) -> tuple[list[nn.Module], pd.DataFrame]:
    """Train one model per member (seed, lr) of zip(`seeds`, `lrs`), side by side; returns the trained
    models (in member order) and the history (member, seed, lr, run_steps, step, loss and its terms every
    `log_every` steps, steps skipped and undone). With validation targets `x_val`, the rows after each fraction
    of :data:`VALIDATION_FRACTIONS` of a member's steps also hold `fraction` and `validation_error`
    (:func:`stack_validation`; NaN on the other rows).

    `average`: the returned weights, and those each validation checkpoint scores, are the mean of the weights after
    each of the last min(`average`, n) steps at that point n (a fixed-length trailing average; 0 or 1: the last
    iterate). Each window is summed in float64 over its own steps only.

    `steps`: one run length for every member, or one per member. A member of a shorter run trains on its own
    complete schedule (its cosine reaches 0 at its own last step) and then leaves the stack (its final weights
    kept) while the others go on. Two members of the same seed and rate see the same initial weights and the same
    target stream, so under a constant rate the shorter run is exactly the first steps of the longer one, and its
    averaged weights are the longer run's averaged weights at that step (tested): the report's convergence premise
    compares the models of 3/4 and all of the steps (:data:`SHORT_RUN`), at a constant rate read from one run.

    Member (seed, lr) starts from the weights ``task.build`` draws after ``torch.manual_seed(seed)`` and
    trains on its own stream of random targets (numpy seed [seed, task]), as a run of its own would. A
    member's step whose loss is not finite (a batch that lands on a singular K) is skipped and counted;
    with `guard`, a hybrid member's step after which K on the batch's first shapes has another inertia than
    its untrained model's (its most common one on the first batch), or a cond(K) above `condition_limit`,
    is undone and counted ("rejected").
    """
    seeds, lrs = [int(s) for s in seeds], [float(r) for r in lrs]
    if len(seeds) != len(lrs) or not seeds:
        raise ValueError(f"train: {len(seeds)} seeds for {len(lrs)} learning rates")
    run_steps = [int(steps)] * len(seeds) if np.ndim(steps) == 0 else [int(s) for s in steps]
    if len(run_steps) != len(seeds) or min(run_steps) < 1:
        raise ValueError(f"train: {len(run_steps)} run lengths (each >= 1) for {len(seeds)} members")
    steps = max(run_steps)
    nets = []
    for seed in seeds:
        torch.manual_seed(seed)
        nets.append(task.build(model_name))
    stack = Stack(task, model_name, nets)
    M = len(seeds)
    # One target stream per distinct seed: members of the same seed (a full and a shorter run, or one seed at several
    # rates) draw identical batches, so each batch is drawn (and its loads computed) once and shared.
    distinct = sorted(set(seeds))
    rngs = {seed: np.random.default_rng([seed, 1 + ("shell", "tower").index(task.name)]) for seed in distinct}
    opt = StackedAdam(stack.params, torch.tensor(lrs, dtype=torch.float64))
    kappa = residual_weight if model_name == "neural" else 0.0
    guard = guard and model_name == "hybrid"  # the fully neural model never solves with K
    dtype = task.fdm.signs.dtype
    rows, skipped, rejected, inertia = [], np.zeros(M, int), np.zeros(M, int), None
    # step index -> {member: fraction}: the validation checkpoints, after round(f * run_steps[m]) steps
    checkpoints: dict = {}
    for m, n in enumerate(run_steps):
        for f in VALIDATION_FRACTIONS if x_val is not None else ():
            checkpoints.setdefault(max(round(f * n), 1) - 1, {})[m] = f
    # The averaging windows: end step -> the members whose weights are averaged there (their checkpoints and their
    # last step); the window of end step e covers steps max(0, e - W + 1) .. e, one float64 sum per weight tensor.
    window = max(int(average), 1)
    ends: dict = {}
    for e, marks in checkpoints.items():
        ends.setdefault(e, set()).update(marks)
    for m, n in enumerate(run_steps):
        ends.setdefault(n - 1, set()).add(m)
    sums: dict = {}  # end step -> [float64 (M, ...) per weight tensor], while its window is open
    alive = list(range(M))  # the members still in the stack (row k of every stacked tensor is member alive[k])
    final: dict = {}  # member -> its final weights, for the members that finished before the longest run
    it = range(steps) if progress is None else progress(range(steps))
    for step in it:
        K = len(alive)
        # every member's batch from its seed's stream (the draws a run of its own makes), each distinct seed once
        live = sorted({seeds[m] for m in alive})
        x = torch.as_tensor(task.sample_stacked([rngs[s] for s in live], batch_size, "id"), dtype=dtype)  # (S, B, N, 3)
        loads = task.loads(x.flatten(0, 1)).view_as(x)
        if len(live) < K:  # row k: member alive[k]'s seed
            pick = torch.tensor([live.index(seeds[m]) for m in alive])
            x, loads = x[pick], loads[pick]
        x_hat, q = stack.forward(x, loads)
        losses, terms = task.stacked_loss(x, x_hat, q, loads, kappa, regularize=model_name == "hybrid")  # (K,) each
        finite = torch.isfinite(losses.detach())
        skipped[alive] += (~finite).numpy()
        if finite.any():
            for p in stack.params:
                p.grad = None
            losses[finite].sum().backward()  # members are independent: each gets its own loss's gradient
            if clip_norm:
                clip_per_member(stack.params, clip_norm)
            if guard:
                if inertia is None:  # each member's untrained branch: its most common inertia on the first batch
                    with torch.no_grad():
                        neg, _ = spectrum_check(task.fdm, q[:, :GUARD_SHAPES].detach().flatten(0, 1), condition_limit)
                        inertia = torch.mode(neg.view(K, -1), dim=1).values  # (K,)
                before = [p.detach().clone() for p in stack.params]
            opt.step(finite, torch.tensor([lr_scale(step, run_steps[m], schedule) for m in alive], dtype=torch.float64))
            if guard:
                with torch.no_grad():  # one batch of eigendecompositions: every member's first shapes
                    q_new = stack.encode(x[:, :GUARD_SHAPES])  # (K, G, E)
                    neg, ok = spectrum_check(task.fdm, q_new.flatten(0, 1), condition_limit)
                    neg, ok = neg.view(K, -1), ok.view(K, -1)
                    bad = ((neg != inertia[:, None]).any(1) | ~ok.all(1)) & finite
                    if bad.any():
                        for p, old in zip(stack.params, before):
                            p[bad] = old[bad]
                        rejected[alive] += bad.numpy()
        with torch.no_grad():  # the open windows take this step's weights
            for e in [e for e in ends if e - window < step <= e]:
                rows_k = [k for k, m in enumerate(alive) if m in ends[e]]
                members_e = [alive[k] for k in rows_k]
                acc = sums.setdefault(e, [torch.zeros((M,) + p.shape[1:], dtype=torch.float64) for p in stack.params])
                for a, p in zip(acc, stack.params):
                    if len(rows_k) == M:
                        a.add_(p.detach())
                    else:
                        a[members_e] += p.detach()[rows_k].double()
        mean_w = None  # the averaged weights of the members whose window ends here, in the stack's layout
        if step in ends:
            count = min(window, step + 1)
            mean_w = [p.detach().clone() for p in stack.params]
            for k, m in enumerate(alive):
                if m in ends[step]:
                    for w, a in zip(mean_w, sums[step]):
                        w[k] = (a[m] / count).to(w.dtype)
            del sums[step]
        marks = checkpoints.get(step, {})  # the members whose validation checkpoint this step is
        val = stack_validation(stack, x_val, condition_limit, params=mean_w) if marks else None
        logged = None  # the losses and terms as numbers, converted once for the step's rows
        for k, m in enumerate(alive):
            if (finite[k] and (step % log_every == 0 or step == run_steps[m] - 1)) or m in marks:
                if logged is None:
                    logged = {k_: v.detach().tolist() for k_, v in {"loss": losses, **terms}.items()}
                rows.append({"member": m, "seed": seeds[m], "lr": lrs[m], "run_steps": run_steps[m], "step": step,
                             **{k_: v[k] for k_, v in logged.items()},
                             **({"fraction": marks[m], "validation_error": float(val[k])} if m in marks else {})})
        for k, m in enumerate(alive):  # a member's last step: its averaged weights are its trained model
            if run_steps[m] == step + 1:
                final[m] = [w[k].clone() for w in mean_w]
        keep = [k for k, m in enumerate(alive) if run_steps[m] > step + 1]
        if keep and len(keep) < K:  # members whose run ended leave the stack (their weights are kept)
            rows_ = torch.tensor(keep)
            stack.params = [p.detach()[rows_].clone().requires_grad_() for p in stack.params]
            opt.params = stack.params
            opt.m, opt.v = [t[rows_].clone() for t in opt.m], [t[rows_].clone() for t in opt.v]
            opt.t, opt.lr = opt.t[rows_], opt.lr[rows_]
            if inertia is not None:
                inertia = inertia[rows_]
            alive = [alive[k] for k in keep]
    if skipped.any() or rejected.any():
        log.warning("%s %s: skipped steps with a non-finite loss per member %s, undid steps the guard rejected %s",
                    task.name, model_name, skipped.tolist(), rejected.tolist())
    history = pd.DataFrame(rows)
    if len(history):
        history["skipped"] = history.member.map(dict(enumerate(skipped.tolist())))
        history["rejected"] = history.member.map(dict(enumerate(rejected.tolist())))
    out = []
    for m, net in enumerate(nets):  # every member's final weights into its own model
        with torch.no_grad():
            for i, layer in enumerate(linears(net)):
                layer.weight.copy_(final[m][2 * i].T)
                layer.bias.copy_(final[m][2 * i + 1])
        out.append(net)
    return out, history


def validation_error(task: Task, model: torch.nn.Module, x: torch.Tensor, condition_limit: float) -> float:
    """Median shape error per coordinate of `model` on validation targets x (n, N, 3); a failed solve
    (a shape that is not finite, or a hybrid's cond(K) above `condition_limit`) counts as infinite."""
    with torch.no_grad():
        loads = task.loads(x)
        x_hat, q = model(x, loads)
        err = task.shape_error(x, x_hat) / task.num_compared
        if isinstance(model, Hybrid):
            err = torch.where(task.admissible(q, condition_limit), err, torch.inf)
    err = torch.where(torch.isnan(err), torch.inf, err)
    return float(err.median())


def search_lr(task: Task, model_name: str, *, grid, x_val: torch.Tensor, seeds, steps: int, condition_limit: float,
              max_undone: float = 1.0, **train_kw) -> tuple[float, pd.DataFrame]:
    """The learning rate of `grid` whose models, trained `steps` steps from each of `seeds`, have the lowest
    worst-seed median validation error (a rate is as good as its worst start; ties: the smaller rate). Every
    (rate, seed) pair trains in one stack. The same search for every model; x_val is never a test set.

    A rate at which any search run had more than `max_undone` of its steps undone by the stiffness guard is
    excluded (column `excluded`): its validation error is that of a model whose training mostly did not happen,
    and its full training would break the premise that the guard undoes at most that share. If every rate is
    excluded, the search falls back to all of them (and the premise gate of the report says so).
    Returns the rate and one row per (rate, seed)."""
    pairs = [(lr, seed) for lr in sorted(float(r) for r in grid) for seed in seeds]
    models, hist = train(task, model_name, seeds=[s for _, s in pairs], lrs=[r for r, _ in pairs], steps=steps,
                         condition_limit=condition_limit, **train_kw)
    rows = []
    for m, ((lr, seed), model) in enumerate(zip(pairs, models)):
        h = hist[hist.member == m] if len(hist) else hist
        rows.append({"lr": lr, "seed": seed, "validation_error": validation_error(task, model, x_val, condition_limit),
                     "skipped": int(h["skipped"].iloc[0]) if len(h) else steps,
                     "rejected": int(h["rejected"].iloc[0]) if len(h) else 0})
    table = pd.DataFrame(rows)
    undone = table.groupby("lr").rejected.max() / steps  # the worst search run's share of undone steps, per rate
    table["excluded"] = table.lr.map(undone > max_undone)
    eligible = table[~table.excluded] if not table.excluded.all() else table
    if table.excluded.all():
        log.warning("%s %s: every searched rate had more than %g of its steps undone; choosing among all",
                    getattr(task, "name", task), model_name, max_undone)
    worst = eligible.groupby("lr").validation_error.max().reset_index().sort_values(["validation_error", "lr"])
    best = float(worst.lr.iloc[0])
    return best, table.assign(chosen=table.lr == best)
