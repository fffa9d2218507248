"""The linear_mechanisms DAG's stages, the thin layer the rules call:
prepare (1-D regression data, images) -> trajectories (mechanism points, claim a, check c_points) | phase (one job per
panel) | nonlinear (one job per seed: every MLP arm) -> evaluate (:mod:`.evaluate`) -> report (:mod:`.report`,
with the claims of :mod:`.claims`). Each function takes its parameters and paths.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from papers.common.datasets import load_digits
from papers.common.io import read_parquet, write_parquet
from papers.common.progress import progress
from papers.linear_mechanisms import exact, phase
from papers.linear_mechanisms.evaluate import OBSERVABLES, SUMMARY
from papers.linear_mechanisms.evaluate import xy as _xy
from papers.linear_mechanisms.params import parse

log = logging.getLogger(__name__)



# ---- prepare -----------------------------------------------------------------------------------
def _images(nl, seed: int):
    """The pool of images (x, labels) the nonlinear check splits per seed (:func:`split_images`): digits, train_size
    + test_size of them drawn with `seed` (all 1797 at the default scale), or mnist1d's train and test sets together."""
    if nl.dataset == "mnist1d":
        from mnist1d.data import get_dataset_args, make_dataset

        args = get_dataset_args()
        args.num_samples = nl.train_size + nl.test_size
        args.train_split = nl.train_size / args.num_samples
        args.seed = seed
        data = make_dataset(args)  # generated locally from the package's templates, no download
        return np.concatenate([data["x"], data["x_test"]]), np.concatenate([data["y"], data["y_test"]])
    x, labels = load_digits(nl.path)
    order = np.random.default_rng(seed).permutation(len(labels))[:nl.train_size + nl.test_size]
    return x[order], labels[order]


# The split of the pool is drawn per MLP seed from np.random.default_rng([SPLIT_STREAM, seed]), a stream apart from
# the seed's torch initialisation.
SPLIT_STREAM = 7


def split_images(x: np.ndarray, labels: np.ndarray, train_size: int, seed: int):
    """The nonlinear check's split for one seed: a permutation of the pool drawn from (SPLIT_STREAM, seed), its
    first train_size images for training and the rest for testing, less every test image pixel-identical to a
    training image (a duplicate would score memorisation as generalisation). Returns (train index, test index,
    number of test images dropped as duplicates)."""
    order = np.random.default_rng([SPLIT_STREAM, seed]).permutation(len(labels))
    train, test = order[:train_size], order[train_size:]
    seen = {row.tobytes() for row in np.ascontiguousarray(x[train])}
    keep = np.array([np.ascontiguousarray(x[i]).tobytes() not in seen for i in test], dtype=bool)
    return train, test[keep], int((~keep).sum())


def prepare(*, cfg, regression, images):
    """The 1-D regression set (x ~ N(0, 1), y = slope x + noise) and the pool of images of the nonlinear check
    (split per seed by the nonlinear stage)."""
    p = parse(cfg)
    rng = np.random.default_rng(p.data.seed)
    x = rng.standard_normal(p.data.samples)
    y = p.data.slope * x + p.data.noise * rng.standard_normal(p.data.samples)
    write_parquet(pd.DataFrame({"x": x, "y": y}), regression)

    x_img, labels = _images(p.nonlinear, p.data.seed)
    cols = [f"f{i}" for i in range(x_img.shape[1])]
    write_parquet(pd.DataFrame(x_img, columns=cols).assign(label=labels), images)


# ---- GD beside the exact solution, for rows of one width --------------------------------------
def simulate(rows: list[dict], x, y, *, h: float, tol: float, min_steps: int, max_steps: int,
             records: int, steps: int | None = None, record: list | None = None, desc: str = "gd") -> dict:
    """Run GD and evaluate the exact solution at the same flow times for `rows` (hyperparameters + seed).

    All rows share one width. Each row gets its own flow time per step (exact.step_size at `h`); all run
    the same number of steps, enough for every row to converge (exact.time_to_converge), unless `steps` is
    given, recorded at `records` log-spaced steps (or at the step indices `record`). Returns flow times
    (R, T), observables of GD and of the exact solution (R, T) and the learned state.
    """
    width = rows[0]["width"]
    assert all(r["width"] == width for r in rows), "simulate: one width per call"
    m2, mxy = exact.moments(x, y)
    kappa, eta_u, eta_w = phase.constants(*(np.array([r[k] for r in rows], float)
                                            for k in ("width", "kappa_exponent", "lr_ratio")))
    sigma = np.array([r["sigma"] for r in rows])[:, None]
    draws = {seed: exact.init(seed, width) for seed in sorted({r["seed"] for r in rows})}
    u0 = sigma * np.stack([draws[r["seed"]][0] for r in rows])  # (R, d)
    w0 = sigma * np.stack([draws[r["seed"]][1] for r in rows])
    a, b, c = exact.rescaled_gram(u0, w0, eta_u, eta_w)
    problem = dict(kappa=kappa, eta_u=eta_u, eta_w=eta_w, m2=m2, mxy=mxy)
    dt = exact.step_size(a, b, c, h=h, **problem)
    t_converge = exact.time_to_converge(a, b, c, tol=tol, **problem)
    if steps is None:
        needed = np.ceil(t_converge / dt)
        steps = int(np.clip(needed.max(), min_steps, max_steps))
    if record is None:  # log-spaced steps (the start and the end only for records <= 2)
        inner = np.geomspace(1, steps, records).round().astype(int).tolist() if records > 2 else []
        record = sorted({0, steps, *inner})
    times, gram_gd = exact.gradient_descent(u0, w0, x, y, kappa=kappa, eta_u=eta_u, eta_w=eta_w, dt=dt,
                                            steps=steps, record=record,
                                            progress=lambda it: progress(it, desc=f"{desc} d={width}", total=steps + 1))
    col = {k: v[:, None] for k, v in problem.items() if k not in ("m2", "mxy")}
    S = exact.exponent(times, a[:, None], b[:, None], c[:, None], m2=m2, mxy=mxy, **col)
    gram_exact = exact.gram_at(S, a[:, None], b[:, None], c[:, None], eta_u=col["eta_u"], eta_w=col["eta_w"])
    gram0 = {k: v[:, :1] for k, v in gram_gd.items()}
    obs = dict(kappa=col["kappa"], eta_u=col["eta_u"], eta_w=col["eta_w"])
    return {"times": times, "steps": steps, "record": record, "converged": times[:, -1] >= t_converge,
            "gd": exact.observables(gram_gd, gram0, **obs), "exact": exact.observables(gram_exact, gram0, **obs),
            "limit": phase.learned_state(a, b, c, **problem), "target": mxy / m2}


# ---- trajectories of the mechanism points (claim a, check c_points) ---------------------------
def trajectories(*, cfg, regression, trajectories):
    """For each mechanism point and seed: GD at step h and h/2 with the exact solution at the same times."""
    p = parse(cfg)
    x, y = _xy(regression)
    settings = dict(tol=p.converge_tol, min_steps=p.min_steps, max_steps=p.max_steps, records=p.trajectory_records)
    frames = []
    for name, grid in p.points.items():
        rows = [{**grid.points()[0], "seed": seed} for seed in range(p.seeds_at(name))]
        base = None  # the run at h; the run at h / 2 takes twice its steps, recorded at the same flow times
        for h in (p.trajectory_step, p.trajectory_step / 2):
            same_times = {} if base is None else {"steps": 2 * base["steps"], "record": [2 * k for k in base["record"]]}
            res = simulate(rows, x, y, h=h, desc=f"{name} h={h}", **settings, **same_times)
            base = base or res
            for i, row in enumerate(rows):
                df = pd.DataFrame({"point": name, **row, "h": h, "record": np.arange(res["times"].shape[1]),
                                   "time": res["times"][i], "converged": bool(res["converged"][i])})
                for src in ("gd", "exact"):
                    for key in OBSERVABLES:
                        df[f"{src}_{key}"] = res[src][key][i]
                frames.append(df)
    write_parquet(pd.concat(frames, ignore_index=True), trajectories)


# ---- the phase diagram (one panel) ------------------------------------------------------------
def run_phase(*, cfg, panel, regression, grid):
    """GD to convergence at every point x seed of one panel; the exact state at the same time, its limit,
    and the predicted state of a typical initialisation."""
    p = parse(cfg)
    x, y = _xy(regression)
    m2, mxy = exact.moments(x, y)
    points = p.panels[panel].points()
    out = []
    for width in sorted({pt["width"] for pt in points}):
        rows = [{**pt, "seed": seed} for pt in points if pt["width"] == width for seed in range(p.seeds_of(panel))]
        res = simulate(rows, x, y, h=p.phase_step, tol=p.converge_tol, min_steps=p.min_steps,
                       max_steps=p.max_steps, records=2, desc=f"{panel}")
        first = {k: v[:, 0] for k, v in res["gd"].items()}
        summaries = {"gd": phase.summarise({k: v[:, -1] for k, v in res["gd"].items()}, first),
                     "exact": phase.summarise({k: v[:, -1] for k, v in res["exact"].items()}, first),
                     "limit": res["limit"]}
        for i, row in enumerate(rows):
            pred = phase.predict(row["width"], row["sigma"], row["kappa_exponent"], row["lr_ratio"], m2=m2, mxy=mxy)
            rec = {"panel": panel, **row, "steps": res["steps"], "time": res["times"][i, -1],
                   "converged": bool(res["converged"][i]),
                   "gd_F": res["gd"]["F"][i, -1], "exact_F": res["exact"]["F"][i, -1], "target": res["target"]}
            for src, summary in summaries.items():
                rec.update({f"{src}_{k}": float(summary[k][i]) for k in SUMMARY})
            rec.update({f"pred_{k}": float(pred[k]) for k in SUMMARY})
            rec.update(phase.numbers(row["width"], row["sigma"], row["kappa_exponent"], row["lr_ratio"], res["target"]))
            out.append(rec)
    write_parquet(pd.DataFrame(out), grid)


# ---- the nonlinear check (one seed, every arm) --------------------------------------------------
def mlp_arms(nl) -> list[dict]:
    """The MLP's arms, in training order. "scale": every init scale at equal layer rates in NTK parameterisation
    (claim d), converged on training accuracy; "lazy": the base init lazy_base(nl) with its output multiplied by
    lazy_multiplier(nl) (Chizat, Oyallon and Bach 2019's lazy scaling: the large init's laziness without its tanh
    saturation; claim d's ablation), on the same accuracy rule; "learned": the smallest and the largest init scale
    again, trained to the learned state (training loss <= rescaling_converge_loss; claims e_alignment,
    e_disalignment); "rescaling": one scale with the first layer slowed by rescaling_lr_ratio, in the output scaling
    `rescaling_parameterisation`, on the same loss rule (claim e_rescaling); "frozen:<mechanism>": the same init,
    convergence rule, output scaling and readout rate as that mechanism's arm with the first layer frozen (rate 0,
    the limit of a very large lr_ratio), trained for at most as many steps as its paired run took (the ablation of
    feature learning: the readout alone); "frozen_accuracy:alignment": the same for the smallest scale's
    accuracy-converged "scale" run (e_alignment reported under the training-accuracy rule too). Every arm a claim
    e_* decides on follows one convergence rule (the loss)."""
    from papers.linear_mechanisms.mlp import MEAN_FIELD, NTK

    rescaling_alpha = MEAN_FIELD if nl.rescaling_parameterisation == "mean_field" else NTK
    loss = nl.rescaling_converge_loss
    small = min(nl.init_scales)
    arms = [{"arm": "scale", "init_scale": s, "lr_ratio": 1.0, "output_exponent": NTK} for s in nl.init_scales]
    arms.append({"arm": "lazy", "init_scale": lazy_base(nl), "lr_ratio": 1.0, "output_exponent": NTK,
                 "output_multiplier": lazy_multiplier(nl)})
    arms += [{"arm": "learned", "init_scale": s, "lr_ratio": 1.0, "output_exponent": NTK, "converge_loss": loss}
             for s in sorted({small, max(nl.init_scales)})]
    arms.append({"arm": "rescaling", "init_scale": nl.rescaling_scale, "lr_ratio": nl.rescaling_lr_ratio,
                 "output_exponent": rescaling_alpha, "converge_loss": loss})
    paired = mechanism_arms(nl)
    for mechanism, (arm, scale) in paired.items():
        twin = next(a for a in arms if a["arm"] == arm and a["init_scale"] == scale)
        arms.append({**twin, "arm": f"frozen:{mechanism}", "lr_ratio": float("inf"), "paired": (arm, scale)})
    twin = next(a for a in arms if a["arm"] == "scale" and a["init_scale"] == small)
    arms.append({**twin, "arm": ACCURACY_TWIN, "lr_ratio": float("inf"), "paired": ("scale", small)})
    return arms


# The frozen twin of the smallest scale's accuracy-converged run (e_alignment under the training-accuracy rule).
ACCURACY_TWIN = "frozen_accuracy:alignment"


def lazy_base(nl) -> float:
    """Claim (d)'s lazy arm's base init: the largest of init_scales not above lazy_base_scale (an init whose runs fit
    their training set within the cap; its own "scale" run is the base of the laziness-alone contrast)."""
    return float(max(s for s in nl.init_scales if s <= nl.lazy_base_scale))


def lazy_multiplier(nl) -> float:
    """Claim (d)'s lazy arm multiplies the output of the base init (lazy_base) by (largest / base)^2: the factor by
    which the larger init multiplies a two-layer network's output (both layers scale with sigma) where tanh is not
    saturated, i.e. the laziness the init scale brings (Chizat, Oyallon and Bach 2019, Sec. 2: scaling a centred
    model's output by alpha makes its training lazier by 1/alpha), without the saturation it also brings."""
    return float((max(nl.init_scales) / lazy_base(nl)) ** 2)


def mechanism_arms(nl) -> dict:
    """The arm (name, init scale) each claim e_* reads: the learned state at the smallest and largest init scale,
    and the rescaling arm."""
    return {"alignment": ("learned", min(nl.init_scales)), "disalignment": ("learned", max(nl.init_scales)),
            "rescaling": ("rescaling", nl.rescaling_scale)}


def nonlinear(*, cfg, seed, images, runs):
    """Train the tanh MLP in every arm (mlp_arms) from one seed; NTK change, test accuracy, the layers' state."""
    import torch

    from papers.common.seeding import seed_everything
    from papers.linear_mechanisms import mlp

    p = parse(cfg)
    nl = p.nonlinear
    seed_everything(seed)
    df = read_parquet(images)
    feats = [c for c in df.columns if c.startswith("f")]
    train_idx, test_idx, duplicates = split_images(df[feats].to_numpy(), df.label.to_numpy(), nl.train_size, seed)
    train, test = df.iloc[train_idx], df.iloc[test_idx]
    log.info("seed %d: %d training images, %d test images (%d test images pixel-identical to a training image "
             "dropped)", seed, len(train), len(test), duplicates)
    mean, std = train[feats].mean(), train[feats].std(ddof=0).replace(0.0, 1.0)  # constant pixels stay 0

    def tensor(part):
        return (torch.tensor(((part[feats] - mean) / std).to_numpy(), dtype=torch.float32),
                torch.tensor(part.label.to_numpy(), dtype=torch.long))

    (x_tr, y_tr), (x_te, y_te) = tensor(train), tensor(test)
    rows, steps_of = [], {}
    for arm in mlp_arms(nl):
        scale, steps = arm["init_scale"], nl.steps
        if "paired" in arm:  # the ablation trains no longer than its paired run did
            steps = steps_of[arm["paired"]]
        res = mlp.train(x_tr, y_tr, x_te, y_te, scale=scale, hidden=nl.hidden, steps=steps, lr_factor=nl.lr_factor,
                        power_iterations=nl.power_iterations, probe=nl.probe, seed=seed,
                        converge_accuracy=nl.converge_accuracy, lr_ratio=arm["lr_ratio"],
                        output_exponent=arm["output_exponent"], centred=nl.centred,
                        converge_loss=arm.get("converge_loss"),
                        output_multiplier=arm.get("output_multiplier", 1.0),
                        progress=lambda it, s=scale, a=arm["arm"]: progress(it, desc=f"mlp {a} scale={s} seed={seed}",
                                                                            total=nl.steps))
        steps_of[(arm["arm"], scale)] = res["steps_run"]
        log.info("%s arm, scale %s, seed %d: NTK change %.4g, test accuracy %.4f, loss %.4g after %d steps (%s)",
                 arm["arm"], scale, seed, res["ntk_change"], res["test_accuracy"], res["train_loss"], res["steps_run"],
                 "converged" if res["converged"] else "NOT converged")
        rows.append({"seed": seed, "arm": arm["arm"], "init_scale": scale, "n_train": len(train), "n_test": len(test),
                     "test_duplicates_dropped": duplicates, **res})
    # e_alignment's positive control: alignment planted in a linear two-layer network with one output
    trainable, frozen = mlp.planted_alignment(
        seed, samples=nl.train_size, d_in=len(feats), hidden=nl.hidden, scale=nl.planted_scale,
        output_exponent=mlp.NTK, lr_factor=nl.lr_factor, converge_loss=nl.rescaling_converge_loss, steps=nl.steps,
        centred=nl.centred)
    log.info("planted alignment, seed %d: layer alignment %.4g -> %.4g (frozen first layer: -> %.4g), loss %.3g "
             "after %d steps", seed, trainable["alignment0"], trainable["alignment"], frozen["alignment"],
             trainable["train_loss"], trainable["steps_run"])
    for arm, res in ((PLANTED, trainable), (PLANTED_FROZEN, frozen)):
        rows.append({"seed": seed, "arm": arm, "init_scale": nl.planted_scale, "diverged": False, **res})
    write_parquet(pd.DataFrame(rows), runs)


# The rows of e_alignment's planted positive control (mlp.planted_alignment) in the runs table.
PLANTED, PLANTED_FROZEN = "planted:alignment", "planted_frozen:alignment"


# ---- evaluate and report ---------------------------------------------------------------------
def evaluate(*, cfg, regression, trajectories, grids, runs, metrics):
    """Claim metrics: GD vs exact errors, mechanism labels, phase-diagram agreement, width scaling, MLP arms."""
    from papers.linear_mechanisms.evaluate import evaluate as run

    run(cfg=cfg, regression=regression, trajectories=trajectories, grids=grids, runs=runs, metrics=metrics)


def report(*, cfg, scale, metrics, trajectories, grids, runs, benchmarks, table_md, table_csv, claims, params_json,
           report_md, verdicts, fig_trajectories, fig_phase, fig_scaling, fig_nonlinear):
    """The table, the figures, the claims with computed verdicts and the checks, report.md."""
    from papers.linear_mechanisms.report import write

    write(cfg=cfg, scale=scale, metrics=metrics, trajectories=trajectories, grids=grids, runs=runs,
          benchmarks=benchmarks, table_md=table_md, table_csv=table_csv, claims=claims, params_json=params_json,
          report_md=report_md, verdicts=verdicts, fig_trajectories=fig_trajectories, fig_phase=fig_phase,
          fig_scaling=fig_scaling, fig_nonlinear=fig_nonlinear)
