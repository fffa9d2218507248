"""Training and evaluation loops: a straight function each (official ``dg4_trainer.py``).

Losses as in the official trainer: L1 on the signal probability of each gate and L1 on the
truth-table distance of each sampled pair, summed with weight 1. Full-graph models take one
optimizer step per circuit batch; DeepGate4 with the partitioned update takes one per
mini-batch of areas (the official ``mini_batch`` loop), its history table carrying the gates
computed before. Every arm gets the same schedule in epochs (passes over the same training
circuits, as the paper trains every model 200 epochs): its rate lowered on validation plateaus,
stopped once its validation error is flat (:func:`train`, :func:`converged`), at most `epochs`.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from .aig import PI
from .partition import Plan, pi_vectors, plan_circuit


class Example:
    """A circuit (or a disjoint union of circuits) with labels and its plan."""

    def __init__(self, name, gate, fanin, level, prob, pairs, tt, *, hidden, window_levels, areas_per_batch,
                 pi_seed, partitioned=True, part=None):
        self.name = name
        self.plan: Plan = plan_circuit(name, gate, fanin, level, window_levels=window_levels,
                                       areas_per_batch=areas_per_batch, partitioned=partitioned, part=part)
        pis = np.flatnonzero(gate == PI)
        vec = np.zeros((gate.size, hidden), dtype=np.float32)
        vec[pis] = pi_vectors(pis.size, hidden, pi_seed)
        self.pi_vec = torch.from_numpy(vec)
        self.prob = torch.tensor(np.asarray(prob), dtype=torch.float32)
        self.gates = torch.from_numpy(np.flatnonzero(gate != PI))
        self.pairs = torch.as_tensor(np.asarray(pairs, dtype=np.int64).reshape(2, -1))
        self.tt = torch.tensor(np.asarray(tt), dtype=torch.float32)

    def to(self, device) -> Example:
        ex = object.__new__(Example)
        ex.__dict__.update({k: (v.to(device) if hasattr(v, "to") else v) for k, v in self.__dict__.items()})
        return ex


def device(name: str) -> torch.device:
    """`auto`: CUDA when present, else the CPU."""
    return torch.device("cuda" if name == "auto" and torch.cuda.is_available() else ("cpu" if name == "auto" else name))


def union(circuits):
    """Disjoint union of circuits (dicts of numpy arrays): the official 'merge_small' batches.
    Levels are kept, so the circuits' windows line up."""
    off = np.cumsum([0] + [c["gate"].size for c in circuits])
    cat = lambda k: np.concatenate([c[k] for c in circuits])
    fanin = np.concatenate([np.where(c["fanin"] >= 0, c["fanin"] + o, -1) for c, o in zip(circuits, off)])
    pairs = np.concatenate([c["pairs"] + o for c, o in zip(circuits, off)], 1)
    part = np.concatenate([np.full(c["gate"].size, i, dtype=np.int64) for i, c in enumerate(circuits)])
    return {"name": "+".join(c["name"] for c in circuits), "gate": cat("gate"), "fanin": fanin,
            "level": cat("level"), "prob": cat("prob"), "pairs": pairs, "tt": cat("tt"), "part": part}


def pack(circuits, max_nodes: int):
    """Group circuits sorted by depth into unions of at most `max_nodes` nodes (or one circuit)."""
    groups, cur, size = [], [], 0
    for c in sorted(circuits, key=lambda c: (int(c["level"].max()), c["name"])):
        if cur and size + c["gate"].size > max_nodes:
            groups.append(cur)
            cur, size = [], 0
        cur.append(c)
        size += c["gate"].size
    if cur:
        groups.append(cur)
    return [union(g) for g in groups]


def validation_error(model, val, *, partitioned: bool) -> tuple[float, float]:
    """Pooled L1 errors (probability over the gates, distance over the pairs) on the validation circuits."""
    e_prob = n_prob = e_tt = n_tt = 0.0
    for ex in val:
        prob, tt = predict(model, ex, partitioned=partitioned)
        e_prob += float((prob[ex.gates] - ex.prob[ex.gates]).abs().sum())
        n_prob += ex.gates.numel()
        e_tt += float((tt - ex.tt).abs().sum())
        n_tt += ex.tt.numel()
    model.train()
    return e_prob / max(n_prob, 1), (e_tt / n_tt if n_tt else 0.0)


def constant_error(examples, val) -> float:
    """The overall validation error (probability L1 + distance L1) of the best constant predictor: the
    training labels' medians (the L1-optimal constants). A model that learned anything beats it."""
    prob = torch.cat([ex.prob[ex.gates] for ex in examples])
    tt = torch.cat([ex.tt for ex in examples])
    p0, t0 = prob.median(), (tt.median() if tt.numel() else torch.tensor(0.0))
    e_prob = torch.cat([(ex.prob[ex.gates] - p0).abs() for ex in val]).mean()
    tts = [(ex.tt - t0).abs() for ex in val if ex.tt.numel()]
    return float(e_prob + (torch.cat(tts).mean() if tts else 0.0))


def converged(curve: list[float], *, window: int, tol: float, rates: list[float] | None = None) -> tuple[bool, float]:
    """Is a validation curve flat at its end? The spread of its last `window` values, (max - min) / min:
    flat (converged) when at most `tol`, i.e. the error neither falls nor swings by more than `tol` over the
    window. A run that merely stopped improving for a few epochs (a patience stop) while its error still swings
    is not flat; a curve shorter than `window` cannot be told. With the learning `rates` of its epochs, a curve
    counts as flat only once the rate has been lowered (a plateau reached at the initial rate): a flat stretch at
    the start of training is a slow start, not convergence."""
    if len(curve) < window:
        return False, float("inf")
    last = np.asarray(curve[-window:], dtype=float)
    spread = float((last.max() - last.min()) / last.min()) if last.min() > 0 else float("inf")
    lowered = rates is None or min(rates) < rates[0]
    return bool(spread <= tol and lowered), spread


def train(model, examples, val, *, partitioned: bool, epochs: int, lr: float, patience: int, seed: int,
          flat_window: int, flat_tol: float, lr_decay: float = 0.5, log=print):
    """Adam on the summed L1 losses over the training unions until the validation error is flat, at most `epochs`.

    Every arm gets the same schedule in epochs (passes over the same training circuits): a full-graph model
    takes one optimiser step per circuit union, the partitioned update one per mini-batch of areas (the
    official ``mini_batch`` loop), the unions in a seeded random order each epoch. After every epoch the
    validation error (probability L1 + distance L1, the overall error) is measured; after `patience` epochs
    without a new best the learning rate is multiplied by `lr_decay` (reduce-on-plateau: at a constant rate
    the error swings from epoch to epoch and never flattens). Training stops when the last `flat_window`
    validation errors lie within `flat_tol` of each other (:func:`converged`: the run converged) or after
    `epochs` (it did not). The weights restored are those of the best validation epoch among the epochs trained
    after the first lowering of the rate (:func:`kept_epoch`: the model the convergence gate certifies, which
    requires a lowering; the whole run's best only if the rate was never lowered); the schedule still counts the
    whole run's best, so the rule changes only which weights are kept. Returns one row per epoch (epoch,
    optimiser steps so far, learning rate, training and validation losses, wall and CPU seconds spent
    training and validating so far).
    """
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rows, totals = [], {"prob": [], "tt": [], "steps": 0}
    best, bad = float("inf"), 0  # the schedule's best (every epoch), for the plateau count
    kept = {False: [float("inf"), 0, None], True: [float("inf"), 0, None]}  # by lowered: [error, epoch, weights]
    t_train = t_val = cpu_train = cpu_val = 0.0  # wall and CPU seconds (wall time varies with the machine's load)

    def step_done():
        totals["steps"] += 1

    model.train()
    for epoch in range(1, epochs + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        rate = opt.param_groups[0]["lr"]
        for i in rng.permutation(len(examples)):
            ex = examples[i]
            if partitioned:
                _train_partitioned(model, ex, opt, totals, step_done)
                continue
            _, hf = model.embed(ex.plan, ex.pi_vec)
            prob, tt = model.heads(hf, ex.pairs)
            l_prob = F.l1_loss(prob[ex.gates], ex.prob[ex.gates])
            l_tt = F.l1_loss(tt, ex.tt) if ex.tt.numel() else prob.sum() * 0
            opt.zero_grad()
            (l_prob + l_tt).backward()
            opt.step()
            totals["prob"].append(l_prob.item())
            totals["tt"].append(l_tt.item())
            step_done()
        t1, c1 = time.perf_counter(), time.process_time()
        t_train += t1 - t0
        cpu_train += c1 - c0
        v_prob, v_tt = validation_error(model, val, partitioned=partitioned)
        t_val += time.perf_counter() - t1
        cpu_val += time.process_time() - c1
        mean = lambda xs: float(np.mean(xs)) if xs else float("nan")
        row = {"epoch": epoch, "step": totals["steps"], "lr": rate, "train/prob_l1": mean(totals["prob"]),
               "train/tt_l1": mean(totals["tt"]), "val/prob_l1": v_prob, "val/tt_l1": v_tt,
               "val/overall": v_prob + v_tt, "train_seconds": t_train, "val_seconds": t_val,
               "train_cpu_seconds": cpu_train, "val_cpu_seconds": cpu_val}
        totals["prob"].clear()
        totals["tt"].clear()
        lowered = rate < lr  # trained after the first lowering of the rate
        if row["val/overall"] < kept[lowered][0]:
            kept[lowered] = [row["val/overall"], epoch, {k: v.detach().clone() for k, v in model.state_dict().items()}]
        if row["val/overall"] < best:
            best, bad = row["val/overall"], 0
        else:
            bad += 1
            if bad >= patience:  # plateau: lower the rate, count afresh
                for group in opt.param_groups:
                    group["lr"] *= lr_decay
                bad = 0
        best_epoch = kept[kept[True][2] is not None][1]  # the epoch whose weights are kept (so far)
        row["best_epoch"] = best_epoch
        rows.append(row)
        flat, spread = converged([r["val/overall"] for r in rows], window=flat_window, tol=flat_tol,
                                 rates=[r["lr"] for r in rows])
        log(f"epoch {epoch} ({totals['steps']} steps, lr {rate:.2g}): train prob {row['train/prob_l1']:.4f} tt "
            f"{row['train/tt_l1']:.4f}; val overall {row['val/overall']:.4f} (best at epoch {best_epoch}; "
            f"spread of the last {flat_window} {spread:.3g})")
        if flat:
            break
    model.load_state_dict(kept[kept[True][2] is not None][2])
    return rows


def kept_epoch(curve: list[float], rates: list[float]) -> int:
    """The epoch (1-based) whose weights :func:`train` keeps, from a run's validation errors and the learning
    rates its epochs were trained at: the lowest error among the epochs trained at a rate below the first
    (after the first lowering; the earliest on a tie), or the lowest of the whole curve where the rate was
    never lowered."""
    idx = [i for i, r in enumerate(rates) if r < rates[0]] or list(range(len(curve)))
    return min(idx, key=lambda i: (curve[i], i)) + 1


def _train_partitioned(model, ex: Example, opt, totals, step_done=lambda: None):
    """One pass of the partitioned update over a circuit: a step per mini-batch of areas.

    The probability loss covers the gates computed for the first time; a pair is used in the
    first mini-batch where both of its gates are available, the one computed earlier read from
    the history table (no gradient), as in the official trainer.
    """
    N, dev = ex.plan.num_nodes, ex.pi_vec.device
    done = torch.zeros(N, dtype=torch.bool, device=dev)
    used = torch.zeros(ex.pairs.shape[1], dtype=torch.bool, device=dev)
    is_gate = torch.zeros(N, dtype=torch.bool, device=dev)
    is_gate[ex.gates] = True

    def on_sub(sub, hs, hf, hs_table, hf_table):
        new = sub.new
        local = torch.full((N,), -1, dtype=torch.long, device=dev)
        local[new] = torch.arange(new.numel(), device=dev)
        first = ~done[new] & is_gate[new]
        avail = done.clone()
        avail[new] = True
        take = ~used & avail[ex.pairs[0]] & avail[ex.pairs[1]] & ((local[ex.pairs[0]] >= 0) | (local[ex.pairs[1]] >= 0))
        terms = []
        if first.any():
            prob = torch.sigmoid(model.heads.prob(hf[first])).squeeze(-1)
            l_prob = F.l1_loss(prob, ex.prob[new[first]])
            terms.append(l_prob)
            totals["prob"].append(l_prob.item())
        if take.any():
            p = ex.pairs[:, take]
            emb = lambda v: torch.where((local[v] >= 0)[:, None], hf[local[v].clamp(min=0)], hf_table[v])
            tt = torch.sigmoid(model.heads.tt(torch.cat([emb(p[0]), emb(p[1])], -1))).squeeze(-1)
            l_tt = F.l1_loss(tt, ex.tt[take])
            terms.append(l_tt)
            totals["tt"].append(l_tt.item())
            used[take] = True
        done[new] = True
        if terms:
            opt.zero_grad()
            sum(terms).backward()
            opt.step()
            step_done()

    model.embed(ex.plan, ex.pi_vec, partitioned=True, on_sub=on_sub)


@torch.no_grad()
def predict(model, ex: Example, *, partitioned: bool):
    """Predicted probability of every gate and distance of every pair (eval mode)."""
    model.eval()
    _, hf = model.embed(ex.plan, ex.pi_vec, partitioned=partitioned)
    prob, tt = model.heads(hf, ex.pairs)
    return prob, tt
