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

from papers.common.io import read_parquet, read_parquets, write_parquet
from papers.common.seeding import seed_everything
from papers.symspace import data as D
from papers.symspace import geometry as geo
from papers.symspace import layers as L
from papers.symspace import train as T
from papers.symspace.params import parse

log = logging.getLogger(__name__)
# Claim (b)'s function-class premise compares a Busemann-class oracle (one offset per class fitted) with the LogEig
# class's reference, the tangent-space logistic regression; fitted on the run's ~90 fitting trials, that reference
# fell short of its class by its estimation error (review symspace_r9: fitted on 1,200 trials of the same generator
# the oracle's lead vanished). So the premise's reference is fitted on this many fresh training-session trials per
# class of the same subject's generator (papers.symspace.data.eeg_reference), tested on the same test trials.
REFERENCE_TRIALS_PER_CLASS = 300


# ---- train ----------------------------------------------------------------------------------------
def train(*, cfg, seed: str, data, accuracies):
    """One train job: claim (b)'s heads on the EEG of the head replicates dealt to this job (seed, seed + seeds, ...;
    replicate i on the mixing model's seed head_seed_offset + i),
    each from train.head_inits initialisations, with the tangent-space logistic regression on the same trial
    covariances (the ceiling reference of the heads' shared input), the permuted-label controls on every one of
    them (review symspace_r13) and the digits (context, deciding nothing: digits_step_factor x steps, one
    initialisation) on the first digits.seeds; and claim (e)'s attention networks on the attention seeds dealt to this
    job the same way (the burst, claim e's deciding setting, on the first burst_attention_seeds seeds; claim b's EEG,
    the class event in one window, its positive control, on the first planted_attention_seeds; the spread window,
    context, on the first spread_attention_seeds where set; real EEG: every subject, on this job's seed).

    The replicate of a row is the seed where each seed draws its own data (the mixing model, the digits), and the
    subject where every seed sees the same subjects (real EEG: the seeds then vary the initialisation only)."""
    p = parse(cfg)
    job = int(seed)
    keep_freed_memory()
    seed_everything(job)
    d = D.read_prepared(data)
    # Each replicate's rows in order; a unit of claim (b)'s heads stands in for its rows until every replicate's
    # heads have trained side by side (T.heads_train: speed only, each run gets the numbers it got alone).
    parts, units = [], []
    for i in range(job, p.head_seeds, p.seeds):
        # head replicate i: the mixing model's seed head_seed_offset + i; real EEG: seed i (the same subjects)
        s = D.head_seed_list(p)[i] if "eeg" in d["eeg"] else i
        rng = np.random.default_rng([s, 4])
        # every head replicate carries the permuted-label controls (review symspace_r13: on the first `seeds` alone
        # the null's half-width, ~0.05, could not reject at delta = 0.02; side by side they cost ~0.2 CPU-s each)
        controls = True
        for task, by_seed in d["eeg"].items():
            real = task != "eeg"
            if s not in by_seed or (real and s >= p.seeds):
                continue  # real EEG: its replicates are the subjects; head seeds beyond `seeds` add none
            for unit, subject in enumerate(by_seed[s]):
                # The trial covariance: the mean of its window covariances (the whole trial's covariance up to the
                # window means).
                x_train, y_train, x_test, y_test = _trials(subject)
                # The oracle arms (claim b's function-class premise) where the generator is known (mixing model).
                unmixing = np.linalg.inv(subject["forward"]) if "forward" in subject else None
                reference = None
                if unmixing is not None:  # the premise's LogEig-class reference, fitted on a large draw (symspace_r9)
                    x_ref, y_ref = D.eeg_reference(p.eeg, subject["forward"], REFERENCE_TRIALS_PER_CLASS,
                                                   1_000_000 * (unit + 1) + s)
                    reference = (torch.as_tensor(x_ref, dtype=torch.float64).mean(1), torch.as_tensor(y_ref))
                units.append(T.heads_prepare(task, unit, unit if real else s, x_train.mean(1), y_train,
                                             x_test.mean(1), y_test, p, s, rng, controls=controls,
                                             inits=p.train["head_inits"], ceiling=True, unmixing=unmixing,
                                             reference=reference))
                parts.append(units[-1])
        if i < p.digits.get("seeds", 0):  # the digits are context for claim (b), deciding nothing
            dg = d["digits"]
            n_img = min(p.digits["max_images"], len(dg["labels"]))
            chosen = np.sort(rng.choice(len(dg["labels"]), size=n_img, replace=False))
            spd, labels = dg["spd"][chosen], dg["labels"][chosen]
            train_idx, test_idx = T.split(labels, p.digits["train_fraction"], rng)
            x = torch.as_tensor(spd, dtype=torch.float64)
            y = torch.as_tensor(labels, dtype=torch.long)
            parts.append(T.heads_task("digits", 0, s, x[train_idx], y[train_idx], x[test_idx], y[test_idx], p, s,
                                      rng, controls=False, steps=p.train["digits_step_factor"] * p.train["steps"]))
    T.heads_train(units, p)
    rows = [row for part in parts for row in (T.heads_rows(part) if isinstance(part, T.HeadsUnit) else part)]
    log.info("job %d: claim (b)'s heads on %d units done", job, len(units))
    n_planted = next(iter(d["eeg"][next(iter(d["eeg"]))].values()))[0]["train"]["tokens"].shape[-1]
    for s in range(job, min(p.spd_planted["seeds"], p.head_seeds), p.seeds):  # claim (b)'s positive control
        rows += T.planted_spd_task(s, p, n_planted)
        log.info("job %d: claim (b)'s positive control on seed %d done", job, s)
    attention = []
    for task, by_seed in d["attention"].items():
        real = task.startswith("eeg:")
        for s in sorted(k for k in by_seed if k % p.seeds == job):
            rng = np.random.default_rng([s, 6])
            for unit, subject in enumerate(by_seed[s]):
                if p.train["attention_subjects"] is not None and unit >= p.train["attention_subjects"]:
                    break
                attention.append(T.attention_prepare(task, unit, unit if real else s, *_trials(subject), p, s, rng))
    T.attention_train(attention, p)  # the attention networks of this job's units side by side (speed only)
    rows += [row for u in attention for row in T.attention_rows(u)]
    log.info("job %d: claim (e)'s networks on %d units done", job, len(attention))
    write_parquet(pd.DataFrame(rows).assign(job=job, job_cpu_s=job_cpu_seconds()), accuracies)


def _trials(subject):
    """A subject's window tokens (N, W, C, C) and labels, training and test session."""
    return (torch.as_tensor(subject["train"]["tokens"], dtype=torch.float64),
            torch.as_tensor(subject["train"]["labels"], dtype=torch.long),
            torch.as_tensor(subject["test"]["tokens"], dtype=torch.float64),
            torch.as_tensor(subject["test"]["labels"], dtype=torch.long))


def tree(*, cfg, data, accuracies):
    """The ball heads and the angle rule on every tree seed (claim d), the seeds side by side in one job."""
    p = parse(cfg)
    keep_freed_memory()
    seed_everything(0)
    trees = D.read_prepared(data)["tree"]
    rows = T.ball_tasks([trees[s] for s in range(p.tree["seeds"])], p, planted_seeds=p.tree["planted_seeds"])
    log.info("%d tree seeds done", p.tree["seeds"])
    write_parquet(pd.DataFrame(rows).assign(job=-1, job_cpu_s=job_cpu_seconds()), accuracies)


def keep_freed_memory() -> None:
    """Speed only (no number changes): let glibc's malloc keep the memory that tensors free in the process, instead
    of returning it to the kernel and faulting fresh zeroed pages in at the next step's allocation. By default each
    freed block over the (adaptive) mmap threshold goes back by munmap, and the heap's top is trimmed beyond 128 KiB:
    the tree job's (replicas, N, K) tensors of a few MB each then cost ~1 page fault per 4 KiB every step, about a
    fifth of its CPU time in the kernel (measured 2.6 of 15 CPU-s on 300 steps; 0.4 with these settings). The three
    settings go together: fixing the mmap threshold alone keeps the default trim, fixing the trim alone fixes the mmap
    threshold at its 128 KiB default (both measured slower). Elsewhere than glibc (no mallopt) it does nothing but
    log that; a setting glibc refuses is logged too. The settings last for the process: call it from a job's entry
    (train, tree), not from library code that tests import."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        log.info("no glibc mallopt here: malloc keeps its defaults (slower, same numbers)")
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3  # glibc's malloc.h
    settings = {"M_MMAP_THRESHOLD": (m_mmap_threshold, 32 << 20),  # blocks below 32 MiB from the heap (glibc's max)
                "M_TRIM_THRESHOLD": (m_trim_threshold, 1 << 30),  # never trim the heap's top below 1 GiB free
                "M_TOP_PAD": (m_top_pad, 64 << 20)}  # grow the heap 64 MiB at a time
    refused = [name for name, (param, value) in settings.items() if mallopt(param, value) != 1]  # 1: accepted
    if refused:
        log.warning("glibc refused mallopt %s: malloc keeps its defaults there (slower, same numbers)", refused)


def job_cpu_seconds() -> float:
    """CPU seconds (user + system, every thread) this job's process and its waited-for children have used so far:
    Snakemake's benchmark samples cpu_time every 30 s after the first 15 s and keeps the last sample, so it misses
    up to 30 s of each job's tail (issue 52: symspace's recorded CPU-s undercounted)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return float(own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime)


# ---- evaluate ----------------------------------------------------------------------------------
# The names of claim (a)'s quantities (evaluate/distance_checks.parquet, column `check`).
LIMIT_CHECKS = {"spd": "spd: closed form vs limit", "ball": "ball: horocycle closed form vs limit"}
KNOWN_VALUE = "positive control: limit procedure vs the known value (diagonal X)"
ASYMPTOTIC = "spd: relative change of t x gap over the last doubling"
WRONG_FORMULAS = {"cholesky": "control: plain (not reversed) Cholesky vs limit",
                  "beta": "control: beta term dropped vs limit"}
CHECKS = {"invariance_n": "spd: B(N X N^T) - B(X), N unit upper triangular",
          "invariance_o": "spd: base-point distance invariant under O",
          "logeig": "spd: diagonal X equals LogEig linear form",
          "ganea": "ball: equals Ganea's distance on the normal geodesic",
          "reparametrisation": "mlr: (alpha, beta) logits equal (1, 0) logits with a' = alpha a + beta (sum a) 1"}


def _random_spd(n: int, rng: np.random.Generator) -> np.ndarray:
    a = rng.normal(size=(n, n))
    return a @ a.T / n + 0.3 * np.eye(n)


def _unit_h(n, alpha, beta, rng) -> np.ndarray:
    """A direction with strictly decreasing entries (gaps >= 0.3 before scaling) and unit (alpha, beta) norm."""
    h = np.cumsum(-(0.3 + rng.uniform(size=n)))
    h = h - h.mean() + rng.normal()
    return h / np.sqrt(alpha * h @ h + beta * h.sum() ** 2)


def distance_checks(p, seed: int) -> tuple[list[dict], list[dict]]:
    """Claim (a) on one seed's random cases: the closed forms against their limit definitions, the same limit
    procedure where the answer is known (its positive control), the wrong formulas (its null control); and the
    checks (invariances, special cases, the (alpha, beta) reparametrisation of the MLR).

    Returns one row per case and quantity (its absolute error: claim a reads the largest and the smallest over
    all cases, not an interval) and the gap curve d(X, gamma(t)) - t - B(X) of the first case (the figure).
    """
    rng = np.random.default_rng([seed, 7])
    n, times = p.check["dim"], list(p.check["times"])
    rows, curve = [], []

    def add(name, case, value):
        rows.append({"seed": seed, "case": case, "check": name, "error": abs(float(value))})

    for i in range(p.check["matrices"]):
        x = _random_spd(n, rng)
        xt = torch.as_tensor(x)
        for j, (alpha, beta) in enumerate(p.metrics):
            case = f"{i}:{alpha:g},{beta:g}"
            h = _unit_h(n, alpha, beta, rng)
            ht = torch.as_tensor(h)
            gaps = geo.spd_busemann_limit(x, h, alpha, beta, times, p.check["dps"])
            limit = geo.richardson(times, gaps)
            closed = float(geo.spd_busemann(xt, ht, alpha, beta))
            add(LIMIT_CHECKS["spd"], case, closed - limit)
            add(WRONG_FORMULAS["cholesky"], case, float(geo.spd_busemann(xt, ht, alpha, beta, reverse=False)) - limit)
            if beta != 0:
                add(WRONG_FORMULAS["beta"], case, float(geo.spd_busemann(xt, ht, alpha, 0.0)) - limit)
            # The gap shrinks like 1/t: t * gap is constant up to O(1/t), so its relative change between the
            # last two times is small (the regime Richardson's extrapolation presupposes: claim a's premise).
            tg = [t * (g - closed) for t, g in zip(times, gaps)]
            add(ASYMPTOTIC, case, (tg[-1] - tg[-2]) / tg[-1])
            if i == 0:
                curve += [{"seed": seed, "alpha": alpha, "beta": beta, "t": t, "gap": g - closed} for t, g in zip(times, gaps)]
            # Positive control: the same limit procedure on a diagonal X, whose Busemann value is known from the
            # definition alone (d(X, gamma(t))^2 = |log x - t h|^2_{alpha,beta}, so B = -<h, log x>_{alpha,beta}).
            dx = np.exp(rng.normal(size=n))
            known = -(alpha * h @ np.log(dx) + beta * h.sum() * np.log(dx).sum())
            add(KNOWN_VALUE, case, geo.richardson(times, geo.spd_busemann_limit(np.diag(dx), h, alpha, beta, times,
                                                                                 p.check["dps"])) - known)
            # Checks. Invariance: horospheres are orbits of the unit upper-triangular group N: B(N X N^T) = B(X).
            nu = np.triu(rng.normal(size=(n, n)), 1) + np.eye(n)
            add(CHECKS["invariance_n"], case, float(geo.spd_busemann(torch.as_tensor(nu @ x @ nu.T), ht, alpha, beta)) - closed)
            # The hyperplane moves with the group: (P, R, X) -> (O P O^T, O R, O X O^T), O orthogonal.
            pm, o = _random_spd(n, rng), np.linalg.qr(rng.normal(size=(n, n)))[0]
            r = np.linalg.qr(rng.normal(size=(n, n)))[0]

            def based(pmat, rot, xmat):
                w, v = np.linalg.eigh(pmat)
                pis = torch.as_tensor(v @ np.diag(w ** -0.5) @ v.T)
                y = geo.spd_to_base(torch.as_tensor(xmat), pis, torch.as_tensor(rot))
                return float(geo.spd_busemann((y + y.T) / 2, ht, alpha, beta))

            add(CHECKS["invariance_o"], case, based(o @ pm @ o.T, o @ r, o @ x @ o.T) - based(pm, r, x))
            # The LogEig case: for diagonal X the closed form is the linear form -<h, log x>_{alpha,beta}
            # of the tangent vector at the identity (LogEig + linear).
            add(CHECKS["logeig"], case, float(geo.spd_busemann(torch.as_tensor(np.diag(dx)), ht, alpha, beta)) - known)
            # Claim (c) is not testable here: under (alpha, beta) the MLR's logits equal those under (1, 0) with
            # the normal a' = alpha a + beta (sum a) 1 (the same model class, another optimisation path).
            g = torch.Generator().manual_seed(int(rng.integers(2 ** 31)))
            layer = L.BusemannDistance(n, 3, alpha, beta, g)
            flat = L.BusemannDistance(n, 3, 1.0, 0.0, g)
            with torch.no_grad():
                flat.s.copy_(layer.s)
                flat.r.copy_(layer.r)
                flat.a.copy_(alpha * layer.a + beta * layer.a.sum(-1, keepdim=True))
                xs = torch.as_tensor(np.stack([_random_spd(n, rng) for _ in range(4)]))
                add(CHECKS["reparametrisation"], case, float((layer(xs) - flat(xs)).abs().max()))
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
        add(LIMIT_CHECKS["ball"], f"{i}:ball", s + lim)
        on_line = geo.mobius_add(torch.as_tensor(pt), float(rng.uniform(-0.9, 0.9)) * torch.as_tensor(omega))[None]
        add(CHECKS["ganea"], f"{i}:ball",
            float(geo.ball_horocycle(on_line, torch.as_tensor(pt)[None], torch.as_tensor(a)[None]))
            - float(geo.ball_gyroplane(on_line, torch.as_tensor(pt)[None], torch.as_tensor(a)[None])))
    return rows, curve


def evaluate(*, cfg, accuracies, tree_accuracies, table, checks, gaps):
    """All seeds' accuracies (SPD tasks and tree) in one table, and claim (a)'s numerical checks per seed."""
    p = parse(cfg)
    write_parquet(pd.concat([read_parquets(accuracies), read_parquet(tree_accuracies)], ignore_index=True), table)
    rows, curve = distance_checks(p, seed=0)  # a check of formulas: its cases are random draws, not replicates
    write_parquet(pd.DataFrame(rows), checks)
    write_parquet(pd.DataFrame(curve), gaps)
