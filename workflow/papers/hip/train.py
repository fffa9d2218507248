"""Training the tiny models with dense attention (HiP itself needs no training).

One straight loop (nanoGPT's): AdamW, linear warm-up then cosine decay, gradient clipping.
A batch function supplies the byte sequences and per-token loss weights, so the same loop
trains the language model (uniform weights) and the passkey model (extra weight on the key).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

from papers.common.progress import progress
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


def text_batches(tokens: np.ndarray, tp: TrainParams, generator: torch.Generator) -> Batch:
    """Random windows of ``seq_len + 1`` bytes of the training text, uniform weights."""
    data = torch.from_numpy(tokens.astype(np.int64))

    def batch(step: int):
        start = torch.randint(0, len(data) - tp.seq_len - 1, (tp.batch,), generator=generator)
        x = torch.stack([data[s: s + tp.seq_len + 1] for s in start.tolist()])  # (B, T + 1)
        return x, torch.ones(tp.batch, tp.seq_len)

    return batch
