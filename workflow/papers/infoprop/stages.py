"""The infoprop DAG's stages train (the ensemble, one job per seed) and evaluate (the rollout study, one job per
seed); prepare is papers.infoprop.data.prepare (no torch import), the report papers.infoprop.report.

Each function takes its parameters and its input and output paths explicitly, so it runs under Snakemake
(workflow/rules/infoprop.smk) and in tests alike.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch

from papers.common.io import write_parquet
from papers.common.seeding import seed_everything
from papers.infoprop import data as D
from papers.infoprop import propagation as P
from papers.infoprop.model import GaussianEnsemble, train_ensemble
from papers.infoprop.params import SCHEMES, parse

log = logging.getLogger(__name__)


def transitions(d: dict) -> tuple[np.ndarray, np.ndarray]:
    """Model inputs (s, a) and targets (s' - s, r) of the logged data."""
    inputs = np.concatenate([d["train_obs"], d["train_act"]], 1)
    targets = np.concatenate([d["train_next_obs"] - d["train_obs"], d["train_rew"][:, None]], 1)
    return inputs, targets


# ---- train -------------------------------------------------------------------------------------
def train(*, cfg, seed: str, data, model, history):
    """Fit one seed's probabilistic ensemble on its logged transitions to convergence (early stopping, elites kept);
    checkpoint and per-epoch history."""
    p = parse(cfg)
    seed = int(seed)
    seed_everything(seed)
    inputs, targets = transitions(D.read_prepared(data))
    generator = torch.Generator().manual_seed(seed)
    net, hist = train_ensemble(inputs, targets, p.model, generator)
    torch.save({"state_dict": net.state_dict(), "d_in": inputs.shape[1], "d_out": targets.shape[1],
                "members": net.ensemble, "model": dict(p.model), "seed": seed}, model)
    write_parquet(pd.DataFrame(hist).assign(seed=seed), history)


def load_model(path) -> GaussianEnsemble:
    ckpt = torch.load(path, weights_only=True)
    m = ckpt["model"]
    net = GaussianEnsemble(ckpt["d_in"], ckpt["d_out"], ckpt["members"], m["hidden"], m["layers"],
                           m["learn_logvar_bounds"])
    net.load_state_dict(ckpt["state_dict"])
    return net.eval()


# ---- evaluate ----------------------------------------------------------------------------------
def one_step_losses(net, inputs: np.ndarray, resolution: float, generator, batch: int = 4096) -> np.ndarray:
    """The information loss of one Infoprop step from every real (s, a): (N, D), for lambda1 and lambda2."""
    out = []
    for start in range(0, len(inputs), batch):
        mu, s2 = (t.double() for t in net.predict(torch.as_tensor(inputs[start: start + batch], dtype=torch.float32)))
        _, var = P.step("infoprop", mu, s2, generator)
        out.append(P.information_loss(var, resolution))
    return np.concatenate(out)


def rollout(net, scheme: str, starts: np.ndarray, w: np.ndarray, d: dict, samples: int, horizon: int,
            generator: torch.Generator, rng: np.random.Generator):
    """`samples` model rollouts of `horizon` steps from each start under the noisy policy with matrix `w`.

    Returns states (N, M, H, obs_dim) after steps 1..H; for the Infoprop schemes the conditional variances v and
    the fused aleatoric variances s2 (N, M, H, obs_dim + 1) of every step (state delta and reward), else None for
    both; and per step the epistemic share e2 / (s2 + e2) = 1 - K of the members' spread, averaged over rollouts and
    outputs (H,).
    """
    n, dim = starts.shape
    s = np.repeat(starts, samples, axis=0)  # (N*M, obs_dim)
    states, variances, aleatoric, share = np.zeros((n * samples, horizon, dim)), [], [], np.zeros(horizon)
    for t in range(horizon):
        a = D.act(w, s, d["policy_noise"], rng)
        # The network runs in float32; the propagation in float64 (1 - K is small where members agree).
        mu, s2 = (t_.double() for t_ in net.predict(torch.as_tensor(np.concatenate([s, a], 1), dtype=torch.float32)))
        _, fused_var, epistemic = P.fuse(mu, s2)
        share[t] = float((epistemic / (fused_var + epistemic)).mean())
        y, var = P.step(scheme, mu, s2, generator)
        # A diverging rollout stays finite (and far off) instead of turning into NaN.
        s = np.clip(s + y[:, :dim].numpy(), -1e6, 1e6)
        states[:, t] = s
        if var is not None:
            variances.append(var.numpy())
            aleatoric.append(fused_var.numpy())
    v = np.stack(variances, 1).reshape(n, samples, horizon, -1) if variances else None
    s2 = np.stack(aleatoric, 1).reshape(n, samples, horizon, -1) if aleatoric else None
    return states.reshape(n, samples, horizon, dim), v, s2, share


def wasserstein_1d(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    """W1 between the empirical distributions of equally many samples along `axis`: mean |sorted x - sorted y|."""
    if x.shape[axis] != y.shape[axis]:
        raise ValueError(f"wasserstein_1d needs equal sample counts, got {x.shape[axis]} and {y.shape[axis]}")
    return np.abs(np.sort(x, axis=axis) - np.sort(y, axis=axis)).mean(axis=axis)


def excess_error(x: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Each model sample's squared distance to the true mean beyond the true spread, averaged over dimensions:
    mean_d [(x_d - mu_d)^2 - (1 + 1/M') sigma_d^2] with mu, sigma^2 (ddof 1) of the M' true continuations from the
    same start at the same step. A sample drawn from the true distribution, independently of them, has
    E (x - mu)^2 = sigma^2 + sigma^2 / M' (the estimated mean's own error), so it scores 0 in expectation whatever
    the true (aleatoric) spread and however few continuations there are: the error measures the model's departure
    alone. x (N, M, H, D), true (N, M', H, D) -> (N M, H)."""
    m_true = true.shape[1]
    mu, var = true.mean(1, keepdims=True), true.var(1, ddof=1, keepdims=True)
    return ((x - mu) ** 2 - (1.0 + 1.0 / m_true) * var).mean(-1).reshape(-1, x.shape[2])


def per_start_lower_bound(err: np.ndarray, starts: int) -> np.ndarray:
    """Per step, the lower end of the 95% t interval over start states of the per-start mean error: err (N M, H)
    with the samples of a start contiguous -> (H,). Above 0: the model's rollouts depart from the truth at that
    step beyond what the sampling of starts explains (claim b's per-seed premise: there is an error to track)."""
    from scipy.stats import t as student

    per_start = err.reshape(starts, -1, err.shape[1]).mean(1)  # (N, H)
    sem = per_start.std(0, ddof=1) / np.sqrt(starts)
    return per_start.mean(0) - student.ppf(0.975, starts - 1) * sem


def dropped_above(err: np.ndarray, accepted: np.ndarray) -> float:
    """The probability that a dropped sample's error exceeds an accepted one's (ties count half): the Mann-Whitney
    U of the dropped over n_dropped x n_accepted, 0.5 when the cut is blind to the error. NaN if a group is empty."""
    from scipy.stats import rankdata

    n_a, n_d = int(accepted.sum()), int((~accepted).sum())
    if n_a == 0 or n_d == 0:
        return float("nan")
    ranks = rankdata(err)
    return float((ranks[~accepted].sum() - n_d * (n_d + 1) / 2) / (n_a * n_d))


def cut_errors(err: np.ndarray, stop: np.ndarray) -> list[dict]:
    """Per step, the count and summed error of accepted (step < stop) and dropped (step >= stop) samples, and the
    probability that a dropped sample's error exceeds an accepted one's (:func:`dropped_above`). err (B, H)."""
    rows = []
    for t in range(err.shape[1]):
        accepted = stop > t
        rows.append({"step": t + 1, "accepted": int(accepted.sum()), "dropped": int((~accepted).sum()),
                     "err_sum_accepted": float(err[accepted, t].sum()), "err_sum_dropped": float(err[~accepted, t].sum()),
                     "dropped_above": dropped_above(err[:, t], accepted)})
    return rows


def ranked_stops(score: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Infoprop's stop steps given to the rollouts in order of `score` (the earliest stop to the highest score), so
    that the same count of rollouts is cut at every step. score (B,), stop (B,) -> (B,)."""
    out = np.empty_like(stop)
    out[np.argsort(-score, kind="stable")] = np.sort(stop, kind="stable")
    return out


def oracle_stops(err: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """The positive control of claim (b): Infoprop's stop steps, given to the rollouts in order of their error
    (the earliest stop to the rollout with the highest mean error over the horizon), so that the cut follows the
    error by construction with the same count of cuts at every step. err (B, H), stop (B,) -> (B,)."""
    return ranked_stops(err.mean(1), stop)


def aleatoric_stops(s2: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """The ablation of claim (b)'s mechanism: Infoprop's stop steps given to the rollouts in order of their
    accumulated aleatoric entropy, sum over steps and outputs of 1/2 log2(2 pi e s2), the information loss of Sec. 5
    with the fused aleatoric variance s2 in place of the conditional variance v = s2 e2 / (s2 + e2) (no epistemic
    term; unclipped, so that rescaling an output shifts every rollout alike and leaves the order). The same stop
    counts per step as Infoprop's cut, cut by "any variance" instead of the information lost to the members'
    disagreement. s2 (B, H, D), stop (B,) -> (B,)."""
    return ranked_stops((0.5 * np.log2(2 * np.pi * np.e * s2)).sum((1, 2)), stop)


def evaluate(*, cfg, seed: str, data, model, curves, cuts):
    """Every scheme's rollouts against the true continuations (claim a); Infoprop's cuts against a random cut, a cut
    by accumulated aleatoric entropy (the mechanism's ablation) and an error-ordered cut (claim b; Sec. 5)."""
    p = parse(cfg)
    seed = int(seed)
    seed_everything(seed)
    d = D.read_prepared(data)
    net = load_model(model)
    inputs, _ = transitions(d)
    r, info = p.rollout, p.info
    generator = torch.Generator().manual_seed(seed)
    loss_data = one_step_losses(net, inputs, info["resolution"], generator)
    lambda1, lambda2 = P.thresholds(loss_data, r["horizon"], info["upper_quantile"], info["lower_quantile"])
    log.info("seed %d: lambda1 %s, lambda2 %s", seed, np.round(lambda1, 2), np.round(lambda2, 1))
    scale = d["train_obs"].std(0) + 1e-8  # per-dimension units of the distances
    curve_rows, cut_rows = [], []
    for c, (shift, w) in enumerate(zip(d["shifts"], d["w_rollout"])):
        true = d["true_states"][c] / scale  # (N, M, H, obs)
        n, m, h, _ = true.shape
        half = m // 2
        curve_rows.append(pd.DataFrame({
            "seed": seed, "shift": float(shift), "scheme": "true", "step": np.arange(1, h + 1), "w1": np.nan,
            "w1_half": wasserstein_1d(true[:, half: 2 * half], true[:, :half], axis=1).mean((0, 2)),
            "state_error": np.nan, "epistemic_share": np.nan}))
        for k, scheme in enumerate(SCHEMES):
            gen = torch.Generator().manual_seed(seed * 1000 + 10 * c + k)
            rng = np.random.default_rng([seed, 2, c, k])
            states, var, s2, share = rollout(net, scheme, d["starts"], w, p.data, m, h, gen, rng)
            x = states / scale
            w1 = wasserstein_1d(x, true, axis=1).mean((0, 2))  # (H,): over starts and dimensions
            # The positive control of claim (a), at half the samples: this scheme's first half against the true
            # first half (beside the true second half against the true first half, below).
            w1_half = wasserstein_1d(x[:, :half], true[:, :half], axis=1).mean((0, 2))
            err = excess_error(x, true)  # (B, H)
            row = {"seed": seed, "shift": float(shift), "scheme": scheme, "step": np.arange(1, h + 1), "w1": w1,
                   "w1_half": w1_half, "state_error": err.mean(0), "state_error_low": per_start_lower_bound(err, n),
                   "epistemic_share": share}
            if var is not None:
                losses = P.information_loss(var, info["resolution"]).reshape(n * m, h, -1)
                stop = P.stop_step(losses, lambda1, lambda2)
                row["accepted_fraction"] = (stop[:, None] > np.arange(h)).mean(0)
                row["info_loss"] = np.cumsum(losses, 1).sum(-1).mean(0)
                if scheme == "infoprop":
                    # The negative control: the same number of cuts at the same steps, given to random rollouts; the
                    # ablation: given in order of the accumulated aleatoric entropy; the positive control: given in
                    # order of the error.
                    random_stop = np.random.default_rng([seed, 3, c]).permutation(stop)
                    ale_stop = aleatoric_stops(s2.reshape(n * m, h, -1), stop)
                    for cut, st in (("infoprop", stop), ("random", random_stop), ("aleatoric", ale_stop),
                                    ("oracle", oracle_stops(err, stop))):
                        cut_rows += [{"seed": seed, "shift": float(shift), "cut": cut, **e} for e in cut_errors(err, st)]
                    log.info("seed %d shift %g: mean accepted length %.1f of %d", seed, shift, stop.mean(), h)
            curve_rows.append(pd.DataFrame(row))
            log.info("seed %d shift %g: %s W1 at step 1 %.3f, at H %.3f; epistemic share at H %.3f", seed, shift,
                     scheme, w1[0], w1[-1], share[-1])
    write_parquet(pd.concat(curve_rows, ignore_index=True), curves)
    write_parquet(pd.DataFrame(cut_rows), cuts)
