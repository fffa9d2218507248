"""Training a tiny transformer on the mixture of ORION-style tasks (the paper's models are pretrained LMs; ours
learn the tasks from scratch, which is what makes this an analogue).

A batch draws a family uniformly per sequence, a training style, values, and 1 .. max_requests requests, each
followed by its answer: the loss is the cross-entropy on every answer, plus `lm_weight` times the next-token
loss on the other tokens. A share `copy_fraction` of the sequences are copy sequences instead (a list of words
written twice, :func:`tasks.copy_sequence`), whose second copy counts as answers: generic repeated text of the
kind a pretrained LM has seen, which makes the induction circuits form within ~500 steps; without it, the
families that bind a key to a value in context stayed at chance for 4,000 steps (the report says more). AdamW with weight decay on matrices only, linear warmup then a constant rate, gradient
clipping: what the issue's prototype found to train (a decaying rate ran out before the slow induction phase).
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from papers.orion import tasks
from papers.orion.model import GPT
from papers.orion.lm import encode_words

log = logging.getLogger(__name__)


def sample_batch(families: list, train_styles: dict, vocab: tasks.Vocab, rng: np.random.Generator, *,
                 batch_size: int, max_requests: int, inject_prob: float, copy_fraction: float = 0.0,
                 copy_length: tuple[int, int] = (8, 20)) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids x (B, T) and a mask (B, T - 1) that is True where the next token is an answer."""
    seqs, answer_at = [], []
    for _ in range(batch_size):
        if rng.random() < copy_fraction:
            tokens, targets = tasks.copy_sequence(vocab, rng, length=copy_length)
            seqs.append(tokens)
            answer_at.append(targets)
            continue
        fam = families[rng.integers(len(families))]
        styles = train_styles[fam.name]
        n_req = int(rng.integers(1, min(max_requests, len(fam.keys)) + 1))
        tokens, targets = tasks.training_sequence(fam, styles[rng.integers(len(styles))], vocab, rng,
                                                  requests=n_req, inject_prob=inject_prob)
        seqs.append(tokens)
        answer_at.append(targets)
    x = encode_words(seqs, vocab.index).ids  # (B, T), right-padded with id 0
    mask = torch.zeros(x.shape[0], x.shape[1] - 1, dtype=torch.bool)
    for i, targets in enumerate(answer_at):
        mask[i, targets] = True
    return x, mask


def loss_fn(model: GPT, x: torch.Tensor, answer_mask: torch.Tensor, lm_weight: float) -> tuple[torch.Tensor, float]:
    """Cross-entropy on the answers + lm_weight x next-token cross-entropy elsewhere (padding excluded);
    also the top-1 accuracy on the answers."""
    logits = model(x[:, :-1])  # (B, T-1, V)
    target = x[:, 1:]  # (B, T-1)
    ce = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none").view_as(target)
    loss = ce[answer_mask].mean()
    other = (target != 0) & ~answer_mask
    if lm_weight > 0:
        loss = loss + lm_weight * ce[other].mean()
    acc = (logits.argmax(-1)[answer_mask] == target[answer_mask]).float().mean().item()
    return loss, acc


def configure_optimizer(model: GPT, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices (dim >= 2: linear weights, the tied embedding), none on biases and norms."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def train(model: GPT, sample, *, steps: int, lr: float, warmup: int, weight_decay: float, grad_clip: float,
          lm_weight: float, eval_every: int, evaluate, progress=lambda it: it) -> pd.DataFrame:
    """Train `model` on batches from `sample()`; every `eval_every` steps (and at the end) record
    `evaluate(model)` (a dict: held-out accuracy per family). Returns the history, one row per record."""
    opt = configure_optimizer(model, lr, weight_decay)
    history, loss_sum, acc_sum, n = [], 0.0, 0.0, 0
    for step in progress(range(1, steps + 1)):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, step / max(warmup, 1))
        x, mask = sample()
        loss, acc = loss_fn(model, x, mask, lm_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        loss_sum, acc_sum, n = loss_sum + loss.item(), acc_sum + acc, n + 1
        if step % eval_every == 0 or step == steps:
            model.eval()
            with torch.no_grad():
                held_out = evaluate(model)
            model.train()
            history.append({"step": step, "train/loss": loss_sum / n, "train/answer_accuracy": acc_sum / n,
                            **{f"eval/{k}": v for k, v in held_out.items()}})
            log.info("step %d: %s", step, ", ".join(f"{k} {v:.3f}" for k, v in history[-1].items() if k != "step"))
            loss_sum, acc_sum, n = 0.0, 0.0, 0
    return pd.DataFrame(history)
