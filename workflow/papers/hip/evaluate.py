"""Measurements on a trained model: text loss, retrieval of key records, top-k recall (locality as the
tree search uses it), and the measured cost of dense attention and of HiP against T. Each takes
tensors and returns numbers.
"""
from __future__ import annotations

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


# ---- cost against T (measured: the kernel's own counter and wall time) -----------------------------
def attended_scores(blocks: torch.Tensor, T: int, cfg: HiPConfig) -> int:
    """q . k products of the block-sparse attention over the blocks HiP returned: every query of a
    block times every key of its selected blocks (as the gathering reference computes them)."""
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
            device: str = "cpu") -> dict:
    """Key scores and wall time of HiP (select + block-sparse attention) and of dense attention for
    one head of length T, random q, k, v. The tree search's scores are the count the reference
    search keeps as it runs (``kernels.hip._tree_search_reference``); the attended scores are
    counted from the blocks it returned. Times: one call after an untimed warm-up call, of the CPU
    references or, with ``device="cuda"``, the Triton kernels."""
    q, k, v = (torch.randn(1, 1, T, head_dim, generator=generator).to(device) for _ in range(3))
    _, _, select_scores = _tree_search_reference(q.cpu(), k.cpu(), **cfg.select_kwargs())
    blocks = methods.select("hip", q, k, cfg)
    hip_fn = lambda: kernels.block_sparse_attention(
        q, k, v, methods.select("hip", q, k, cfg), block_q=cfg.block_q, block_k=cfg.block_k)
    dense_fn = lambda: kernels.attention(q, k, v, causal=True)
    hip_fn()  # warm-up (and Triton compilation on a GPU)
    hip_time = _seconds(hip_fn, device)
    dense_time = float("nan")
    if time_dense:
        dense_fn()
        dense_time = _seconds(dense_fn, device)
    return {"T": T, "dense_scores": T * (T + 1) // 2, "hip_select_scores": int(select_scores),
            "hip_scores": int(select_scores) + attended_scores(blocks, T, cfg),
            "dense_seconds": dense_time, "hip_seconds": hip_time}


def fit_exponent(xs, ys) -> float:
    """Least-squares slope of log y against log x: y ~ x^a."""
    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    return float(np.polyfit(lx, ly, 1)[0])
