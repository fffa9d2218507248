"""Measurements on a trained model: text loss, retrieval of key records, top-k recall (locality as the
tree search uses it), and the measured cost of dense attention and of HiP against T. Each takes
tensors and returns numbers.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import torch

import kernels
from kernels.hip import _tree_search_reference  # the reference search and its own score counter
from papers.hip import methods
from papers.hip.methods import HiPConfig
from papers.hip.model import GPT, dense, token_nll


@torch.no_grad()
def record_qk(model: GPT, x: torch.Tensor) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """{layer: (q, k)} of a dense forward pass over x (B, T); q, k (B, H, T, D) after RoPE."""
    qk = {}

    def attend(layer, q, k, v):
        qk[layer] = (q, k)
        return dense(layer, q, k, v)

    model(x, attend)
    return qk


@torch.no_grad()
def window_nll(model: GPT, windows: torch.Tensor, method: str, cfg: HiPConfig, generator: torch.Generator,
               batch: int = 4) -> torch.Tensor:
    """Next-byte NLL (nats) of every position 1 .. T of each window (N, T + 1): (N, T)."""
    attend = methods.make_attend(method, cfg, generator)
    dev = model.lm_head.weight.device
    return torch.cat([token_nll(model, windows[i:i + batch].to(dev), attend).cpu()
                      for i in range(0, len(windows), batch)])


@torch.no_grad()
def answer_scores(model: GPT, x: torch.Tensor, answer_start: int, n_digits: int, method: str, cfg: HiPConfig,
                  generator: torch.Generator, batch: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """For prompts x (N, T) whose answer digits sit at ``answer_start .. + n_digits``: the summed
    NLL of the answer digits given everything before them (N,), and whether the greedy next byte
    is right at every digit (N,) bool, i.e. a greedy decode reproduces the whole key."""
    attend = methods.make_attend(method, cfg, generator)
    nll, correct, dev = [], [], model.lm_head.weight.device
    for i in range(0, len(x), batch):
        xb = x[i:i + batch, :answer_start + n_digits].to(dev)
        logits = model(xb[:, :-1], attend)[:, answer_start - 1:].float().cpu()  # predictions of the digits
        target = x[i:i + batch, answer_start:answer_start + n_digits]
        nll.append(torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none").sum(-1))
        correct.append((logits.argmax(-1) == target).all(-1))
    return torch.cat(nll), torch.cat(correct)


def shuffle_keys(k: torch.Tensor, cfg: HiPConfig, generator: torch.Generator) -> torch.Tensor:
    """k (B, H, T, D) with its key blocks in a random order (the same permutation for all heads):
    the scores of neighbouring blocks become unrelated, i.e. attention locality is destroyed, while
    the set of scores each query sees is kept (the control of the recall claim)."""
    B, H, T, D = k.shape
    nkb = T // cfg.block_k
    perm = torch.randperm(nkb, generator=generator).to(k.device)
    head = k[:, :, : nkb * cfg.block_k].reshape(B, H, nkb, cfg.block_k, D)[:, :, perm].reshape(B, H, -1, D)
    return torch.cat([head, k[:, :, nkb * cfg.block_k:]], dim=2)


def topk_recall(q: torch.Tensor, k: torch.Tensor, cfg: HiPConfig, generator: torch.Generator) -> dict[str, float]:
    """Mean recall of the oracle top-n key blocks by HiP and by random pruning, on the same q, k."""
    T = q.shape[2]
    oracle = kernels.oracle_select(q, k, **cfg.select_kwargs())
    return {m: float(methods.recall(methods.select(m, q, k, cfg, generator), oracle, T, cfg).mean())
            for m in ("hip", "random")}


# ---- planted settings: the same analyses where the effect is there by construction ------------------
def _attend_all(method: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: HiPConfig,
                generator: torch.Generator) -> torch.Tensor:
    """One attention layer of `method` over q, k, v (B, H, T, D): dense, or block-sparse over its blocks."""
    if method == "dense":
        return kernels.attention(q, k, v, causal=True)
    blocks = methods.select(method, q, k, cfg, generator)
    return kernels.block_sparse_attention(q, k, v, blocks, block_q=cfg.block_q, block_k=cfg.block_k, causal=True)


@torch.no_grad()
def planted_needle(T: int, width: int, depth: float, cfg: HiPConfig, generator: torch.Generator, *,
                   head_dim: int = 32, strength: float = 12.0) -> dict[str, bool]:
    """The retrieval test where the answer is planted (the positive control of claim (a)).

    One head over a sequence laid out as the model's prompts (``T - 1`` positions fed, the query last):
    random q, k, v (N(0, 1)), and a needle of ``width`` keys at ``depth`` whose keys all point along the
    last query, with the attention logit ``q_last . k_j / sqrt(D)`` about `strength`, and values
    along a target direction. Dense attention reads the target by construction; a method retrieves when its
    attention output at the last query has cosine > 1/2 with the target, i.e. when it kept a block of the
    needle. The needle is as wide as the model's wide records, so HiP's tree search meets the locality it
    relies on; the same accuracy comparison as on the model must then say that HiP retrieves."""
    n, D = T - 1, head_dim
    q, k, v = (torch.randn(1, 1, n, D, generator=generator) for _ in range(3))
    at = int(round(depth * (n - width - 1)))
    u = q[0, 0, -1] / q[0, 0, -1].norm()
    k[0, 0, at:at + width] = u * strength  # logit q_last . k / sqrt(D) = strength |q_last| / sqrt(D) ~ strength
    target = torch.zeros(D)
    target[0] = 1.0
    v[0, 0, at:at + width] = 4.0 * target + 0.1 * v[0, 0, at:at + width]
    return {m: bool(torch.nn.functional.cosine_similarity(_attend_all(m, q, k, v, cfg, generator)[0, 0, -1],
                                                          target, dim=0) > 0.5) for m in methods.METHODS}


def planted_locality_keys(T: int, heads: int, head_dim: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """q (1, H, T, D) random and k (1, H, T, D) varying smoothly along T, a slow sinusoid of random frequency and
    phase per channel: neighbouring keys score alike for any query (attention locality planted; the positive control of
    claim (b))."""
    t = torch.arange(T).float()[:, None] / T
    freq = 1.0 + 4.0 * torch.rand(heads, 1, head_dim, generator=generator)
    phase = 2 * math.pi * torch.rand(heads, 1, head_dim, generator=generator)
    k = torch.sin(2 * math.pi * freq * t[None] + phase)  # (H, T, D)
    return torch.randn(1, heads, T, head_dim, generator=generator), k[None].contiguous()


# ---- cost against T (measured: the kernel's own counter and time) ----------------------------------
def attended_scores(blocks: torch.Tensor, T: int, cfg: HiPConfig) -> int:
    """q . k products of the block-sparse attention over the blocks HiP returned: every query of a
    block times every key of its selected blocks (as the gathering reference computes them)."""
    nsel = (blocks >= 0).sum(-1).cpu()  # (B, H, NQB)
    rows = torch.clamp(T - torch.arange(blocks.shape[2]) * cfg.block_q, max=cfg.block_q)
    return int((nsel * rows * cfg.block_k).sum())


def _seconds(fn, device: str) -> float:
    """The time of one call of `fn`: on a GPU the wall time to its end (synchronised); on a CPU the calling
    thread's CPU time (time.thread_time), the work the call itself costs: time spent waiting while other processes
    of a shared machine hold the core is not counted (issue 55: wall times on a loaded 2-core machine moved a fitted
    exponent across its threshold). The thread's, not the process's: the cost stage computes on one intra-op thread,
    so the call's work is all on this thread, while an OpenMP pool left by earlier parallel work in the same
    process can spin on other threads and would count in the process's CPU time."""
    if device == "cuda":
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def min_seconds(fns: dict, repeats: int, device: str = "cpu") -> dict[str, float]:
    """{name: the fastest of `repeats` timings (:func:`_seconds`) of fns[name]()}, the functions called in turn
    within each repeat (interleaved in one process, after one untimed warm-up call each, which also compiles
    Triton on a GPU).

    Other work on the machine only ever adds to a timing (cache and memory-bandwidth contention remain in CPU
    time); the minimum over repeats is the one least disturbed, and interleaving exposes every arm alike."""
    for fn in fns.values():
        fn()
    best = {name: math.inf for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            best[name] = min(best[name], _seconds(fn, device))
    return best


@torch.no_grad()
def cost_at(T: int, cfg: HiPConfig, head_dim: int, generator: torch.Generator, *, control_mask_k: int | None,
            time_dense: bool, repeats: int, device: str = "cpu") -> list[dict]:
    """Key products and time of HiP (select + block-sparse attention), of the same search with a budget
    growing with T (``control_mask_k``, None: not run) and of dense attention for one head of length T, on the
    same random q, k, v. The tree search's scores are the count the reference search keeps as it runs
    (``kernels.hip._tree_search_reference``); the attended products are counted from the blocks it returned.
    Times: the minimum of `repeats` interleaved timings (:func:`min_seconds`) of the CPU references (their CPU
    time) or, with ``device="cuda"``, the Triton kernels (wall time). One row per HiP arm (``hip``, ``control``),
    dense attention's time on the HiP row."""
    q, k, v = (torch.randn(1, 1, T, head_dim, generator=generator).to(device) for _ in range(3))
    arms = {"hip": cfg} | ({"control": dataclasses.replace(cfg, mask_k=control_mask_k)} if control_mask_k else {})
    fns = {arm: (lambda c=c: kernels.block_sparse_attention(q, k, v, methods.select("hip", q, k, c),
                                                           block_q=c.block_q, block_k=c.block_k))
           for arm, c in arms.items()}
    if time_dense:
        fns["dense"] = lambda: kernels.attention(q, k, v, causal=True)
    seconds = min_seconds(fns, repeats, device)
    rows = []
    for arm, c in arms.items():
        _, _, select_scores = _tree_search_reference(q.cpu(), k.cpu(), **c.select_kwargs())
        blocks = methods.select("hip", q, k, c)
        rows.append({"T": T, "arm": arm, "mask_k": c.mask_k, "dense_scores": T * (T + 1) // 2,
                     "hip_select_scores": int(select_scores),
                     "hip_scores": int(select_scores) + attended_scores(blocks, T, c),
                     "dense_seconds": seconds.get("dense", float("nan")) if arm == "hip" else float("nan"),
                     "hip_seconds": seconds[arm]})
    return rows


def fit_exponent(xs, ys) -> float:
    """Least-squares slope of log y against log x: y ~ x^a."""
    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    return float(np.polyfit(lx, ly, 1)[0])
