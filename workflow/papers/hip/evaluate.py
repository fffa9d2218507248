"""Measurements on a trained model: perplexity, passkey accuracy, top-k recall, attention locality,
and the cost of dense attention and of HiP against T. Each takes tensors and returns numbers.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

import kernels
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
def nll_by_position(model: GPT, windows: torch.Tensor, method: str, cfg: HiPConfig, generator: torch.Generator,
                    batch: int = 4) -> torch.Tensor:
    """Mean next-byte NLL (nats) at each position 1 .. T over the windows (N, T + 1): (T,)."""
    attend = methods.make_attend(method, cfg, generator)
    dev = model.lm_head.weight.device
    nll = [token_nll(model, windows[i:i + batch].to(dev), attend).cpu() for i in range(0, len(windows), batch)]
    return torch.cat(nll).mean(0)


@torch.no_grad()
def passkey_hits(model: GPT, x: torch.Tensor, answer_start: int, n_digits: int, method: str, cfg: HiPConfig,
                 generator: torch.Generator, batch: int = 16) -> torch.Tensor:
    """(N, n_digits) bool: the greedy next byte at each answer position equals the key's digit.
    A row that is all True is a greedy decode that reproduces the whole key."""
    attend = methods.make_attend(method, cfg, generator)
    out, dev = [], model.lm_head.weight.device
    for i in range(0, len(x), batch):
        xb = x[i:i + batch, :answer_start + n_digits - 1].to(dev)
        logits = model(xb, attend)[:, answer_start - 1:].cpu()  # predictions of the answer bytes
        out.append(logits.argmax(-1) == x[i:i + batch, answer_start:answer_start + n_digits])
    return torch.cat(out)


def topk_recall(q: torch.Tensor, k: torch.Tensor, cfg: HiPConfig, generator: torch.Generator) -> dict[str, float]:
    """Mean recall of the oracle top-n key blocks by HiP and by random pruning, on the same q, k."""
    T = q.shape[2]
    oracle = kernels.oracle_select(q, k, **cfg.select_kwargs())
    return {m: float(methods.recall(methods.select(m, q, k, cfg, generator), oracle, T, cfg).mean())
            for m in ("hip", "random")}


# ---- cost against T (CPU references) ------------------------------------------------------------
def hip_selection_scores(T: int, cfg: HiPConfig) -> int:
    """q . k products of HiP's tree search, as the kernel computes them: for every query block
    whose search range of L blocks exceeds n, ``ceil(log2(ceil(L / n)))`` levels of 2n halves,
    each scored on its centre block's ``block_k`` keys by every ``block_stride_q``-th query."""
    g = methods.geometry(T, cfg)
    total = 0
    for b, L in enumerate(g["L"].tolist()):
        if L > cfg.n:
            rows = min(cfg.block_q, T - b * cfg.block_q)
            levels = math.ceil(math.log2(-(-L // cfg.n)))
            total += levels * 2 * cfg.n * cfg.block_k * (-(-rows // cfg.block_stride_q))
    return total


def attended_scores(blocks: torch.Tensor, T: int, cfg: HiPConfig) -> int:
    """q . k products of the block-sparse attention: every query of a block times every key
    of its selected blocks (as the gathering reference computes them, causal mask included)."""
    nsel = (blocks >= 0).sum(-1).cpu()  # (B, H, NQB)
    rows = torch.clamp(T - torch.arange(blocks.shape[2]) * cfg.block_q, max=cfg.block_q)
    return int((nsel * rows * cfg.block_k).sum())


def _seconds(fn, device: str) -> float:
    t0 = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


@torch.no_grad()
def cost_at(T: int, cfg: HiPConfig, head_dim: int, time_dense: bool, generator: torch.Generator,
            repeats: int = 1, device: str = "cpu") -> dict:
    """Key scores (exact counts) and wall time (median of `repeats`) of dense attention and of
    HiP (select + block-sparse attention) for one head of length T: the CPU references, or the
    Triton kernels with ``device="cuda"`` (then a first untimed call compiles them)."""
    q, k, v = (torch.randn(1, 1, T, head_dim, generator=generator).to(device) for _ in range(3))
    blocks = methods.select("hip", q, k, cfg)
    hip_fn = lambda: kernels.block_sparse_attention(
        q, k, v, methods.select("hip", q, k, cfg), block_q=cfg.block_q, block_k=cfg.block_k)
    dense_fn = lambda: kernels.attention(q, k, v, causal=True)
    if device == "cuda":  # compile the kernels first
        hip_fn()
        dense_fn()
    hip_time = float(np.median([_seconds(hip_fn, device) for _ in range(repeats)]))
    dense_time = float(np.median([_seconds(dense_fn, device) for _ in range(repeats)])) if time_dense else float("nan")
    select_scores = hip_selection_scores(T, cfg)
    return {"T": T, "dense_scores": T * T, "hip_select_scores": select_scores,
            "hip_scores": select_scores + attended_scores(blocks, T, cfg),
            "dense_seconds": dense_time, "hip_seconds": hip_time}


def fit_exponent(xs, ys) -> float:
    """Least-squares slope of log y against log x: y ~ x^a."""
    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    return float(np.polyfit(lx, ly, 1)[0])
