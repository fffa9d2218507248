"""The neural_fdm evaluate stage: every learned model and seed on every test shape, the controls, and direct
optimisation on the in-distribution shapes its claim compares.

Per shape (float64): the shape error (the task's loss, per compared coordinate), the RMS distance per
compared free coordinate (a length, for claim (c)'s tolerance; supports are exact by construction, so they
are left out), the residual and relative residual (claim (b)), the force-density signs, and the stiffness
matrix's condition number and inertia. The fully neural model has no force densities of its own (its latent
is not one), so its residual is the best any force densities could do for its shape (:func:`best_fit`: least
squares with the signs and |q| >= tau kept): whether the shape could be in equilibrium at all. Beside the
learned models five arms that are controls or references:

- ``target``: the targets themselves (zero shape error), their best-fit residual the reference of claim (b): a
  model that matched its targets exactly would be this far from equilibrium;
- ``blind``: the mean of many training targets with the target's own supports, whatever the target: a
  predictor that ignores its input, the reference of the premise that a learned model learned its task;

- ``untrained``: the hybrid of every seed with its initial weights (the same draw as training's): the
  solver without learning, the negative control of claims (a) and (c);
- ``perturbed``: every trained hybrid's equilibrium shapes with their free nodes displaced at random by
  span / deviation_ratio (RMS per coordinate): how far a construction tolerance moves an equilibrium shape from
  equilibrium (the table only);
- ``hybrid_best_fit``: every trained hybrid's shapes through the same best-fit residual pipeline as the fully
  neural model's (:func:`best_fit`, not the hybrid's own q): claim (b)'s negative control, measured as the
  claim is;
- ``displaced_target``: the targets with their free nodes displaced at random, each shape by the fully neural
  model's own RMS distance from that target over its free coordinates (the same seed and split; one draw per
  training seed): shapes as far from their targets as the fully neural ones, further from equilibrium than the
  targets by construction, the positive control of claim (b) (the effect size the claim must detect).
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

from papers.common.io import read_parquet, write_json, write_parquet
from papers.common.progress import progress
from papers.neural_fdm.params import parse

SPLITS = ("id", "ood")
# Shapes per split of claim (a)'s reachability note (reviews neural_fdm_r8, r9): direct optimisation of the task's
# whole loss on the first FLOOR_SHAPES out-of-distribution shapes (in distribution, claim (c)'s direct.shapes runs
# serve), and, where the loss has a regulariser (towers), of the shape loss alone on the first FLOOR_SHAPES of each
# split. 20: ~1.2 CPU s a shell run, ~0.1-0.4 s a tower run (the review's timing), ~45 CPU s in all.
FLOOR_SHAPES = 20


def load_targets(path, task: str, split: str):
    """Targets (n, N, 3) float64 of one task and split from the prepare stage's table."""
    import torch

    df = read_parquet(path)
    df = df[(df.task == task) & (df.split == split)].sort_values(["shape", "node"])
    if df.empty:
        raise ValueError(f"{path}: no targets for task {task!r}, split {split!r}")
    n, N = df["shape"].nunique(), df["node"].nunique()
    return torch.tensor(df[["x", "y", "z"]].to_numpy().reshape(n, N, 3), dtype=torch.float64)


def rms_error(task, x, x_hat):
    """RMS distance per compared free coordinate (B,), a length: shells every free node's xyz, towers the free
    compression rings' xyz and the tension rings' z (the coordinates the task's loss compares, less the supports,
    which every model and direct optimisation reproduce exactly by construction)."""
    import torch

    free = task.fdm.free
    if task.levels is None:
        return ((x[:, free] - x_hat[:, free]) ** 2).flatten(1).mean(1).sqrt()
    rings, tension = (idx[torch.isin(idx, free)] for idx in task.levels)
    sq = ((x[:, rings] - x_hat[:, rings]) ** 2).flatten(1).sum(1) + ((x[:, tension, 2] - x_hat[:, tension, 2]) ** 2).sum(1)
    return (sq / (3 * len(rings) + len(tension))).sqrt()


def best_fit(task, x_hat, loads, low: float):
    """The force densities that best balance shapes x_hat (B, N, 3): q minimising ||r_free|| = ||P_f + A q||
    (A from :meth:`.fdm.FDM.equilibrium_matrix`) with each bar's sign kept and |q| >= `low` (tau, the encoder's
    bound), by non-negative least squares on |q| - low. Returns q (B, E) and the relative residual (B,),
    ||r_free|| / ||bar forces at the free nodes||: small exactly when the shape could stand in equilibrium."""
    import scipy.optimize
    import torch

    from papers.neural_fdm import models

    fdm = task.fdm
    act = fdm.active
    s = fdm.signs[act]
    with torch.no_grad():
        m = (fdm.equilibrium_matrix(x_hat)[:, :, act] * s).numpy()  # (B, 3 Nf, A): columns per unit |q|
        c = loads[:, fdm.free].reshape(len(x_hat), -1).numpy() + low * m.sum(-1)  # residual at |q| = low
        q = torch.zeros(len(x_hat), len(fdm.signs), dtype=x_hat.dtype)
        for b in range(len(x_hat)):
            extra, _ = scipy.optimize.nnls(m[b], -c[b], maxiter=50 * m.shape[2])
            q[b, act] = s * (low + torch.as_tensor(extra, dtype=x_hat.dtype))
        res = models.residual_norm(fdm, q, x_hat, loads)
        scale = fdm.force_scale(q, x_hat, loads)[:, fdm.free].norm(dim=1)
    return q, (res / scale).numpy()


def blind_shape(task, p):
    """The blind predictor's shape (N, 3): the mean of `blind_shapes` training targets (a stream of their own)."""
    from papers.neural_fdm.params import TASKS

    rng = np.random.default_rng([p.validation_seed, TASKS.index(task.name), 2])
    return task.sample(rng, p.blind_shapes, "id").mean(0)


def blind_metrics(task, x, mean_shape) -> dict:
    """Shape errors of the blind predictor on targets x (B, N, 3): `mean_shape` with each target's supports."""
    import torch

    x_hat = torch.as_tensor(mean_shape, dtype=x.dtype).expand_as(x).clone()
    x_hat[:, task.fdm.supports] = x[:, task.fdm.supports]
    with torch.no_grad():
        err = task.shape_error(x, x_hat)
        n = len(err)
        nan = np.full(n, np.nan)
        return {"shape_error": err.numpy(), "shape_error_per_coord": (err / task.num_compared).numpy(),
                "rms_error": rms_error(task, x, x_hat).numpy(), "residual": nan, "relative_residual": nan,
                "sign_ok": np.ones(n, bool), "stiffness_min_eig": nan, "log_condition": nan, "negative_eigs": nan,
                "failed": np.zeros(n, bool)}


def equilibrium_metrics(task, x, x_hat, low: float, shapes: int) -> dict:
    """Shape errors of a model without force densities of its own (the fully neural model, the displaced
    hybrid) on every shape, and the best-fit residual (:func:`best_fit`) on the first `shapes` of them (NaN
    after): its cost is one least-squares solve per shape. The loads are the target's, as the hybrid's solve
    and residual take them (the official decoder's area loads on the target)."""
    import torch

    with torch.no_grad():
        err = task.shape_error(x, x_hat)
    n = len(err)
    res, rel = np.full(n, np.nan), np.full(n, np.nan)
    k = min(shapes, n)
    loads = task.loads(x[:k])
    q, rel[:k] = best_fit(task, x_hat[:k], loads, low)
    from papers.neural_fdm import models

    with torch.no_grad():
        res[:k] = models.residual_norm(task.fdm, q, x_hat[:k], loads).numpy()
    nan = np.full(n, np.nan)
    return {"shape_error": err.numpy(), "shape_error_per_coord": (err / task.num_compared).numpy(),
            "rms_error": rms_error(task, x, x_hat).numpy(), "residual": res, "relative_residual": rel,
            "sign_ok": np.ones(n, bool), "stiffness_min_eig": nan, "log_condition": nan, "negative_eigs": nan,
            "failed": ~torch.isfinite(x_hat).flatten(1).all(1).numpy()}


def shape_metrics(task, x, x_hat, q, loads, condition_limit: float = float("inf"), solves: bool = True) -> dict:
    """Per-shape metrics (numpy arrays of length B): shape error, RMS error, residual, relative residual, signs,
    the smallest |eigenvalue|, log10 condition number and inertia (negative eigenvalues) of K (how close the
    solve is to a singular stiffness matrix, and on which side of one), and `failed`: a shape that is not
    finite, or (for a model that `solves` with K) whose K has a condition number above `condition_limit`."""
    import torch

    from papers.neural_fdm import models

    fdm = task.fdm
    with torch.no_grad():
        err = task.shape_error(x, x_hat)
        res = models.residual_norm(fdm, q, x_hat, loads)
        scale = fdm.force_scale(q, x_hat, loads)[:, fdm.free].norm(dim=1)
        signed = q[:, fdm.active] * fdm.signs[fdm.active]  # s_e q_e >= 0 is the constraint
        signed_eig = torch.linalg.eigvalsh(fdm.stiffness(q))  # (B, Nf)
        eig = signed_eig.abs()
        log_cond = torch.log10(eig.max(1).values) - torch.log10(eig.min(1).values)
        failed = ~torch.isfinite(x_hat).flatten(1).all(1)
        if solves:
            failed |= ~task.admissible(q, condition_limit)
    return {"shape_error": err.numpy(), "shape_error_per_coord": (err / task.num_compared).numpy(),
            "rms_error": rms_error(task, x, x_hat).numpy(),
            "residual": res.numpy(), "relative_residual": (res / scale).numpy(),
            "sign_ok": (signed >= 0).all(1).numpy(), "stiffness_min_eig": eig.min(1).values.numpy(),
            "log_condition": log_cond.numpy(), "negative_eigs": (signed_eig < 0).sum(1).numpy(),
            "failed": failed.numpy()}


def perturb(task, x_hat, amplitude, rng: np.random.Generator):
    """`x_hat` (B, N, 3) with its free nodes displaced by Gaussian noise of `amplitude` RMS per coordinate (a
    number, or one per shape: (B,))."""
    import torch

    out = x_hat.clone()
    free = task.fdm.free
    scale = np.broadcast_to(np.asarray(amplitude, dtype=float), (x_hat.shape[0],))[:, None, None]
    noise = scale * rng.normal(0.0, 1.0, size=(x_hat.shape[0], len(free), 3))
    out[:, free] += torch.as_tensor(noise, dtype=x_hat.dtype)
    return out


def free_rms(task, x, x_hat) -> np.ndarray:
    """RMS distance per coordinate over every free node's xyz (B,): how far a model moved each shape from its
    target, compared coordinates or not (the size of claim (b)'s planted displacement)."""
    free = task.fdm.free
    return ((x[:, free] - x_hat[:, free]) ** 2).flatten(1).mean(1).sqrt().numpy()


def _time_per_shape(fn, xs) -> float:
    """Median wall time (s) of fn on one shape at a time (report text only: not deterministic)."""
    times = []
    for x in xs:
        start = time.perf_counter()
        fn(x[None])
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def evaluate(*, cfg, task, targets, checkpoints, metrics, timing, examples):
    """The learned models (every seed) on every test shape, the untrained and perturbed controls, and direct
    optimisation on the first `direct.shapes` in-distribution shapes; per-shape metrics, cost per shape
    (FLOPs), an example shape per split."""
    import torch

    from papers.neural_fdm import tasks
    from papers.neural_fdm.direct import optimize
    from papers.neural_fdm.models import mlp_flops

    p = parse(cfg)
    t = tasks.build(task, p, dtype=torch.float64)
    d = t.p.direct
    rows, example_rows, times = [], [], {}

    def add(split, model, seed, m, flops, first=0, **extra):  # m: per-shape metrics of shapes first, first + 1, ...
        for i in range(len(m["shape_error"])):
            rows.append({"task": task, "split": split, "model": model, "seed": seed, "shape": first + i,
                         **{k: v[i] for k, v in m.items()}, "flops": flops, **extra})

    def add_example(split, model, x_hat):
        xyz = x_hat[0].numpy()
        example_rows.append(pd.DataFrame({"task": task, "split": split, "model": model,
                                          "node": np.arange(len(xyz)), "x": xyz[:, 0], "y": xyz[:, 1], "z": xyz[:, 2]}))

    data = {split: load_targets(targets, task, split) for split in SPLITS}
    mean_shape = blind_shape(t, p)
    for split in SPLITS:
        add_example(split, "target", data[split][:1])
        add(split, "blind", 0, blind_metrics(t, data[split], mean_shape), 0)
        # the targets' own distance from equilibrium (best fit): what a perfect shape-matcher would inherit
        add(split, "target", 0, equilibrium_metrics(t, data[split], data[split], t.p.shift, p.equilibrium_shapes), 0)

    def untrained(seed):  # the initial weights of the hybrid of `seed` (training seeds torch, then builds)
        torch.manual_seed(seed)
        return t.build("hybrid").double().state_dict()

    amplitude = t.span / p.deviation_ratio  # the displacement of the hybrid's shapes in the "perturbed" arm (table)
    arms = [(torch.load(path, weights_only=False), None) for path in checkpoints]
    arms.append(({"model": "hybrid", "states": {seed: untrained(seed) for seed in range(p.seeds)}}, "untrained"))
    for ckpt, arm in arms:
        name = ckpt["model"]
        for seed, state in sorted(ckpt["states"].items()):
            net = t.build(name).double()
            net.load_state_dict(state)
            net.eval()
            flops = mlp_flops(net.encoder) + (t.fdm.solve_flops() if name == "hybrid" else mlp_flops(net.decoder))
            for split in SPLITS:
                x = data[split]
                loads = t.loads(x)
                with torch.no_grad():
                    x_hat, q = net(x, loads)
                if name == "hybrid":
                    m = shape_metrics(t, x, x_hat, q, loads, p.condition_limit, True)
                else:  # no force densities of its own: the best any could do for its shapes
                    m = equilibrium_metrics(t, x, x_hat, t.p.shift, p.equilibrium_shapes)
                add(split, arm or name, seed, m, flops)
                if name == "hybrid" and arm is None:
                    # claim (b)'s negative control: the hybrid's shapes through the neural model's best-fit pipeline
                    add(split, "hybrid_best_fit", seed,
                        equilibrium_metrics(t, x, x_hat, t.p.shift, p.equilibrium_shapes), flops)
                    rng = np.random.default_rng([p.test_seed, 11, seed, SPLITS.index(split)])
                    moved = perturb(t, x_hat, amplitude, rng)  # a construction tolerance off equilibrium (table)
                    add(split, "perturbed", seed, equilibrium_metrics(t, x, moved, t.p.shift, p.equilibrium_shapes),
                        flops)
                if name == "neural" and arm is None:
                    # claim (b)'s positive control: the targets displaced at random, each by this seed's fully
                    # neural RMS distance from it (the effect size the claim must detect); out of equilibrium
                    # beyond the targets' own residual by construction
                    rng = np.random.default_rng([p.test_seed, 12, seed, SPLITS.index(split)])
                    planted = free_rms(t, x, x_hat)  # (B,)
                    moved = perturb(t, x, planted, rng)
                    add(split, "displaced_target", seed,
                        {**equilibrium_metrics(t, x, moved, t.p.shift, p.equilibrium_shapes), "planted_rms": planted}, 0)
                if seed == 0 and arm is None:
                    add_example(split, name, x_hat[:1])
            if seed == 0 and arm is None:
                with torch.no_grad():
                    times[name] = _time_per_shape(lambda x, net=net: net(x, t.loads(x)), data["id"][: p.timing_shapes])

    # Direct optimisation on the in-distribution shapes claim (c) compares (one independent run per shape).
    rng = np.random.default_rng([p.test_seed, 7])
    direct_seconds = []
    for i in progress(range(d.shapes), desc=f"{task} direct"):
        x = data["id"][i: i + 1]
        out = optimize(t, x, method=d.method, init=d.init, bounds=tuple(d.bounds), maxiter=d.maxiter, tol=d.tol,
                       rng=rng)
        m = shape_metrics(t, x, out["x_hat"], out["q"], t.loads(x), p.condition_limit)
        flops = out["nfev"] * (t.fdm.solve_flops() + t.fdm.adjoint_flops())
        add("id", "direct", 0, m, flops, first=i, nfev=out["nfev"], nit=out["nit"], success=out["success"])
        direct_seconds.append(out["seconds"])
        if i == 0:
            add_example("id", "direct", out["x_hat"])
    times["direct"] = float(np.median(direct_seconds)) if direct_seconds else float("nan")

    # Claim (a)'s reachability note: how close the hybrid's own objective (its training loss, regulariser
    # included) lets an equilibrium shape come to each target, out of distribution too ("direct"); and, where the
    # loss has a regulariser, how close any equilibrium shape comes ("direct_shape_only": the shape loss alone).
    # Own random streams, so claim (c)'s runs above are unchanged.
    runs = [("ood", "direct", True)]
    if task == "tower" and t.p.regularization:
        runs += [(split, "direct_shape_only", False) for split in SPLITS]
    for r, (split, name, regularize) in enumerate(runs):
        rng = np.random.default_rng([p.test_seed, 13, r])
        for i in progress(range(min(FLOOR_SHAPES, len(data[split]))), desc=f"{task} {name} {split}"):
            x = data[split][i: i + 1]
            out = optimize(t, x, method=d.method, init=d.init, bounds=tuple(d.bounds), maxiter=d.maxiter, tol=d.tol,
                           rng=rng, regularize=regularize)
            m = shape_metrics(t, x, out["x_hat"], out["q"], t.loads(x), p.condition_limit)
            add(split, name, 0, m, out["nfev"] * (t.fdm.solve_flops() + t.fdm.adjoint_flops()), first=i,
                nfev=out["nfev"], nit=out["nit"], success=out["success"])
    df = pd.DataFrame(rows)
    df["sign_ok"] = df["sign_ok"].astype(bool)
    df["failed"] = df["failed"].astype(bool)
    write_parquet(df, metrics)
    write_parquet(pd.concat(example_rows, ignore_index=True), examples)
    write_json({"task": task, "seconds_per_shape": times, "span": t.span, "perturbation": amplitude,
                "device": "cpu, 1 thread, float64"}, timing)
