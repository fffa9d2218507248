"""Training of the four masked LMs on the same data, order and masks (one straight loop)."""
from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd
import torch

from papers.cbplm import tokens as T
from papers.cbplm.model import ConceptBottleneckLM, MaskedLM, cb_loss, masked_ce
from papers.cbplm.params import Params
from papers.common.progress import progress

log = logging.getLogger(__name__)


def max_tokens(p: Params) -> int:
    """Longest token row: <cls>, K tags, residues, <eos>."""
    return p.max_length + len(p.concepts) + 2


def build(kind: str, p: Params) -> torch.nn.Module:
    """One of the four models; all share the encoder size of `p.model`."""
    m, K = p.model, len(p.concepts)
    args = (T.vocab_size(K, p.tag_bins), max_tokens(p), m.d_model, m.n_layers, m.n_heads, m.d_ff)
    if kind == "cb":
        return ConceptBottleneckLM(*args, n_concepts=K, concept_emb=m.concept_emb, unknown=m.unknown_width)
    return MaskedLM(*args, n_tags=K if kind == "tag" else 0, n_concepts=K if kind == "cond" else 0)


def tags(bins: np.ndarray, n_bins: int) -> np.ndarray:
    """(N, K) bin indices -> tag token ids of the conditional-tag model."""
    return T.tag_token(np.arange(bins.shape[1])[None, :], bins, n_bins)


def batch_tokens(kind: str, seqs, bins: np.ndarray, n_bins: int) -> tuple[torch.Tensor, int]:
    """Tokens for `kind`: the tag model gets its concept-bin prefix; the others none."""
    return T.encode(seqs, tags(bins, n_bins) if kind == "tag" else None)


def length_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator, pool: int = 50) -> list[np.ndarray]:
    """One epoch of index batches: shuffle, sort each pool of `pool` batches by length, cut, shuffle
    the batches (less padding, so less attention work, with random batch composition)."""
    order = rng.permutation(len(lengths))
    batches = []
    for start in range(0, len(order), pool * batch_size):
        chunk = order[start:start + pool * batch_size]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def lr_lambda(step: int, warmup: int, total: int) -> float:
    """Linear warm-up to the peak, then cosine decay to zero."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def train(kind: str, p: Params, df: pd.DataFrame, seed: int, device: str = "cpu",
          schedule=None) -> tuple[torch.nn.Module, torch.optim.Optimizer, pd.DataFrame]:
    """Train model `kind` on the training split; returns (model, optimizer, history). `schedule`: training
    parameters in place of `p.train` (the sweep's shorter runs, :func:`papers.cbplm.stages.shorter_run`).

    The batch order and the masks depend on `seed` only, so the models see the same data.
    """
    t = p.train if schedule is None else schedule
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    train_df = df[df.split == "train"].reset_index(drop=True)
    seqs = train_df.sequence.tolist()
    z = train_df[[f"z_{c}" for c in p.concepts]].to_numpy(np.float32)
    bins = train_df[[f"bin_{c}" for c in p.concepts]].to_numpy(np.int64)
    lengths = train_df.sequence.str.len().to_numpy()

    torch.manual_seed(seed)
    model = build(kind, p).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=t.lr, betas=tuple(t.betas), eps=t.eps, weight_decay=t.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_lambda(s, t.warmup_steps, t.steps))
    log.info("%s: %d parameters, %d training sequences", kind, sum(q.numel() for q in model.parameters()), len(seqs))

    history, batches = [], []
    model.train()
    for step in progress(range(t.steps), desc=f"cbplm train {kind}", total=t.steps):
        if not batches:
            batches = length_batches(lengths, t.batch_size, rng)
        idx = batches.pop()
        tokens, _ = batch_tokens(kind, [seqs[i] for i in idx], bins[idx], p.tag_bins)
        mask = T.draw_mask(tokens, t.mask_prob, gen)
        if not mask.any():
            continue
        inputs = tokens.masked_fill(mask, T.MASK).to(device)
        targets = (tokens - T.AA_OFFSET).clamp(min=0).to(device)
        mask = mask.to(device)
        if kind == "cb":
            c = torch.from_numpy(z[idx]).to(device)  # true concepts: teacher forcing
            out = model(inputs, concepts=c)
            loss, parts = cb_loss(out, targets, mask, c, t.concept_weight, t.orthogonality_weight)
        else:
            kwargs = {"concepts": torch.from_numpy(z[idx]).to(device)} if kind == "cond" else {}
            loss = masked_ce(model(inputs, **kwargs)["logits"], targets, mask)
            parts = {"ce": loss}
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % t.log_every == 0 or step == t.steps - 1:
            row = {"model": kind, "seed": seed, "step": step, "lr": sched.get_last_lr()[0], "loss": loss.item(),
                   **{f"train/{k}": v.item() for k, v in parts.items()}}
            history.append(row)
            log.info("step %d %s", step, " ".join(f"{k}={v:.4g}" for k, v in row.items() if isinstance(v, float)))
    return model, opt, pd.DataFrame(history)
