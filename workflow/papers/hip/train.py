"""Training the tiny models with dense attention (HiP itself needs no training).

One straight loop (nanoGPT's): AdamW, linear warm-up then cosine decay, gradient clipping.
A batch function supplies the byte sequences and per-token loss weights: KJV windows with key
records, extra weight on the values that only far context predicts.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

from papers.common.progress import progress
from papers.hip import data
from papers.hip.model import GPT, dense, token_nll
from papers.hip.params import TrainParams

Batch = Callable[[int], tuple[torch.Tensor, torch.Tensor]]  # step -> (x (B, T+1), weights (B, T))


def lr_at(step: int, tp: TrainParams) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 0 at ``steps``."""
    if step < tp.warmup:
        return tp.lr * (step + 1) / tp.warmup
    return tp.lr * 0.5 * (1 + math.cos(math.pi * (step - tp.warmup) / max(tp.steps - tp.warmup, 1)))


def train(model: GPT, tp: TrainParams, next_batch: Batch, *, desc: str) -> pd.DataFrame:
    """Minimise the weighted mean next-byte NLL; returns the history (step, lr, loss)."""
    attend = dense  # kernels.attention (PyTorch's fused attention on the CPU, Triton on a GPU)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tp.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=tp.lr, betas=(0.9, 0.95))
    model.train()
    rows = []
    for step in progress(range(tp.steps), desc=desc):
        lr = lr_at(step, tp)
        for group in opt.param_groups:
            group["lr"] = lr
        x, w = (t.to(model.lm_head.weight.device) for t in next_batch(step))
        loss = (token_nll(model, x, attend) * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tp.grad_clip)
        opt.step()
        rows.append({"step": step, "lr": lr, "loss": loss.item()})
    model.eval()
    return pd.DataFrame(rows)


def record_batches(tokens: np.ndarray, tp: TrainParams, rng: np.random.Generator) -> Batch:
    """Three phases of windows with key records (papers.hip.data), weight 1 per byte and
    ``1 + recall_weight`` on the repeats' values, the bytes only an earlier record predicts:

    * steps < ``drill_steps``: ``short_batch`` record drills of ``short_len`` bytes (records only,
      ``data.record_drill``): the retrieval skill on its own, ~30x the answers of a text window;
    * steps < ``short_steps``: ``short_batch`` KJV windows of ``short_len`` bytes with records
      (``data.training_sample``): many short sequences, more steps of the same cost;
    * the rest: ``batch`` KJV windows of ``seq_len`` bytes (the context evaluated; RoPE is not
      trusted beyond the trained length)."""

    def batch(step: int):
        if step < tp.drill_steps:
            xs, recall = zip(*(data.record_drill(rng, tp.short_len + 1) for _ in range(tp.short_batch)))
        else:
            length, n = (tp.short_len, tp.short_batch) if step < tp.short_steps else (tp.seq_len, tp.batch)
            xs, recall = zip(*(data.training_sample(rng, tokens, length + 1, tp.max_records, tp.repeats)
                               for _ in range(n)))
        x = torch.from_numpy(np.stack(xs).astype(np.int64))  # (B, T + 1)
        w = 1.0 + tp.recall_weight * torch.from_numpy(np.stack(recall)[:, 1:]).float()  # weight of predicting x[t]
        return x, w

    return batch
