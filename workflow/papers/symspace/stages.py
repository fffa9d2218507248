"""The symspace DAG's stages train (one job per seed) and evaluate; prepare is papers.symspace.data.prepare (no
torch import: a job's start-up is most of the smoke DAG's time), the report papers.symspace.report.

Each function takes its parameters and its input and output paths explicitly, so it runs under
Snakemake (workflow/rules/symspace.smk) and in tests alike.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch

from papers.common.io import read_parquets, write_parquet
from papers.common.seeding import seed_everything
from papers.symspace import data as D
from papers.symspace import geometry as geo
from papers.symspace import train as T
from papers.symspace.params import parse

log = logging.getLogger(__name__)


# ---- train -------------------------------------------------------------------------------------
def train(*, cfg, seed: str, data, accuracies):
    """Every arm of every task on one seed: one row per (task, unit, arm, variant, alpha, beta)."""
    p = parse(cfg)
    seed = int(seed)
    rng = seed_everything(seed)
    d = D.read_prepared(data)
    rows = []
    for unit, subject in enumerate(d["eeg"][seed]):
        tok_train = torch.as_tensor(subject["train"]["tokens"], dtype=torch.float64)  # (N, W, C, C)
        tok_test = torch.as_tensor(subject["test"]["tokens"], dtype=torch.float64)
        y_train = torch.as_tensor(subject["train"]["labels"], dtype=torch.long)
        y_test = torch.as_tensor(subject["test"]["labels"], dtype=torch.long)
        # The trial covariance: the mean of its window covariances (the whole trial's covariance up to
        # the window means), the input of every arm but the attention pair.
        rows += T.spd_task("eeg", unit, tok_train.mean(1), y_train, tok_test.mean(1), y_test, p, seed, rng,
                           tokens_train=tok_train, tokens_test=tok_test)
        log.info("seed %d: EEG subject %d done", seed, unit)
    dg = d["digits"]
    n_img = min(p.digits["max_images"], len(dg["labels"]))
    chosen = np.sort(rng.choice(len(dg["labels"]), size=n_img, replace=False))
    spd, labels = dg["spd"][chosen], dg["labels"][chosen]
    train_idx, test_idx = T.split(labels, p.digits["train_fraction"], rng)
    x = torch.as_tensor(spd, dtype=torch.float64)
    y = torch.as_tensor(labels, dtype=torch.long)
    rows += T.spd_task("digits", 0, x[train_idx], y[train_idx], x[test_idx], y[test_idx], p, seed, rng)
    log.info("seed %d: digits done", seed)
    tree = d["tree"][seed]
    rows += T.ball_task(tree["points"], tree["labels"], p, seed, rng)
    write_parquet(pd.DataFrame(rows).assign(seed=seed), accuracies)


# ---- evaluate ----------------------------------------------------------------------------------
def _random_spd(n: int, rng: np.random.Generator) -> np.ndarray:
    a = rng.normal(size=(n, n))
    return a @ a.T / n + 0.3 * np.eye(n)


def _unit_h(n, alpha, beta, rng) -> np.ndarray:
    """A direction with strictly decreasing entries (gaps >= 0.3 before scaling) and unit (alpha, beta) norm."""
    h = np.cumsum(-(0.3 + rng.uniform(size=n)))
    h = h - h.mean() + rng.normal()
    return h / np.sqrt(alpha * h @ h + beta * h.sum() ** 2)


def distance_checks(p, seed: int) -> tuple[list[dict], list[dict]]:
    """Claim (a) on one seed's random cases: the closed forms against their definitions and special cases.

    Returns per-check rows (the largest absolute error over the seed's cases) and the gap curve
    d(X, gamma(t)) - t - B(X) of the first case (the figure). Wrong formulas (the plain Cholesky factor,
    the beta term dropped) are measured the same way: the control.
    """
    rng = np.random.default_rng([seed, 7])
    n, times = p.check["dim"], list(p.check["times"])
    err: dict[str, list[float]] = {}
    curve = []

    def add(name, value):
        err.setdefault(name, []).append(abs(float(value)))

    for i in range(p.check["matrices"]):
        x = _random_spd(n, rng)
        xt = torch.as_tensor(x)
        for alpha, beta in p.metrics:
            h = _unit_h(n, alpha, beta, rng)
            ht = torch.as_tensor(h)
            gaps = geo.spd_busemann_limit(x, h, alpha, beta, times, p.check["dps"])
            limit = geo.richardson(times, gaps)
            closed = float(geo.spd_busemann(xt, ht, alpha, beta))
            add("spd: closed form vs limit", closed - limit)
            add("control: plain (not reversed) Cholesky vs limit", float(geo.spd_busemann(xt, ht, alpha, beta, reverse=False)) - limit)
            if beta != 0:
                add("control: beta term dropped vs limit", float(geo.spd_busemann(xt, ht, alpha, 0.0)) - limit)
            # The gap shrinks like 1/t: t * gap is constant up to O(1/t), so its relative change between the
            # last two times is small.
            tg = [t * (g - closed) for t, g in zip(times, gaps)]
            add("spd: relative change of t x gap over the last doubling", (tg[-1] - tg[-2]) / tg[-1])
            if i == 0:
                curve += [{"seed": seed, "alpha": alpha, "beta": beta, "t": t, "gap": g - closed} for t, g in zip(times, gaps)]
            # Invariance: horospheres are orbits of the unit upper-triangular group N: B(N X N^T) = B(X).
            nu = np.triu(rng.normal(size=(n, n)), 1) + np.eye(n)
            add("spd: B(N X N^T) - B(X), N unit upper triangular",
                float(geo.spd_busemann(torch.as_tensor(nu @ x @ nu.T), ht, alpha, beta)) - closed)
            # The hyperplane moves with the group: (P, R, X) -> (O P O^T, O R, O X O^T), O orthogonal.
            pm, o = _random_spd(n, rng), np.linalg.qr(rng.normal(size=(n, n)))[0]
            r = np.linalg.qr(rng.normal(size=(n, n)))[0]

            def based(pmat, rot, xmat):
                w, v = np.linalg.eigh(pmat)
                pis = torch.as_tensor(v @ np.diag(w ** -0.5) @ v.T)
                y = geo.spd_to_base(torch.as_tensor(xmat), pis, torch.as_tensor(rot))
                return float(geo.spd_busemann((y + y.T) / 2, ht, alpha, beta))

            add("spd: base-point distance invariant under O", based(o @ pm @ o.T, o @ r, o @ x @ o.T) - based(pm, r, x))
            # The LogEig case: for diagonal X the closed form is the linear form -<h, log x>_{alpha,beta}
            # of the tangent vector at the identity (LogEig + linear).
            dx = np.exp(rng.normal(size=n))
            add("spd: diagonal X equals LogEig linear form",
                float(geo.spd_busemann(torch.as_tensor(np.diag(dx)), ht, alpha, beta))
                + (alpha * h @ np.log(dx) + beta * h.sum() * np.log(dx).sum()))
        # Poincare ball: the horocycle closed form vs its limit, and Ganea's gyroplane distance on the
        # geodesic through p normal to the hyperplane (where the two hyperplanes' distances coincide).
        d = 3
        pt = rng.normal(size=d)
        pt *= 0.6 * rng.uniform() / np.linalg.norm(pt)
        a = rng.normal(size=d)
        omega = a / np.linalg.norm(a)
        xb = rng.normal(size=d)
        xb *= 0.8 * rng.uniform() / np.linalg.norm(xb)
        # The rank-one gap decays exponentially in t; beyond t ~ 16, 1 - |gamma(t)|^2 ~ 4 exp(-t) loses
        # float64's digits, so the limit is read at t = 16.
        ball_times = [4.0, 8.0, 16.0]
        lim = geo.ball_busemann_limit(xb, pt, omega, ball_times)[-1]
        s = float(geo.ball_horocycle(torch.as_tensor(xb)[None], torch.as_tensor(pt)[None], torch.as_tensor(a)[None]))
        add("ball: horocycle closed form vs limit", s + lim)
        on_line = geo.mobius_add(torch.as_tensor(pt), float(rng.uniform(-0.9, 0.9)) * torch.as_tensor(omega))[None]
        add("ball: equals Ganea's distance on the normal geodesic",
            float(geo.ball_horocycle(on_line, torch.as_tensor(pt)[None], torch.as_tensor(a)[None]))
            - float(geo.ball_gyroplane(on_line, torch.as_tensor(pt)[None], torch.as_tensor(a)[None])))
    rows = [{"seed": seed, "check": k, "max_abs_error": max(v), "cases": len(v)} for k, v in err.items()]
    return rows, curve


def evaluate(*, cfg, accuracies, table, checks, gaps):
    """All seeds' accuracies in one table, and claim (a)'s numerical checks per seed."""
    p = parse(cfg)
    write_parquet(read_parquets(accuracies), table)
    rows, curve = [], []
    for seed in range(p.seeds):
        r, c = distance_checks(p, seed)
        rows += r
        curve += c
    write_parquet(pd.DataFrame(rows), checks)
    write_parquet(pd.DataFrame(curve), gaps)
