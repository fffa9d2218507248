"""Held-out perplexity, concept R^2, single-concept interventions and the concept-to-token weights.

Every model of a seed is scored on the same held-out sequences with the same masked positions.
An intervention (the paper's control experiment, official ``intervene_on_sequences``) masks a
fraction of the residues, asks the model for the masked residues under a changed concept, takes
the argmax at each masked position, and measures the concept of the new sequence with Biopython:

* CB-pLM: the concept k fed to the bottleneck is set to +-target_sd (standardised units); the
  other concepts are the model's own predictions (as the official code at inference);
* conditional-tag: concept k's tag becomes the bin that holds +-target_sd; the others keep the
  true bins of the sequence;
* plain masked LM: no handle, the same regeneration (the change that masking alone causes).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from papers.cbplm import data as D
from papers.cbplm import tokens as T
from papers.cbplm.train import batch_tokens

EVAL_BATCH = 128


def residue_masks(lengths, prob: float, rng: np.random.Generator) -> list[np.ndarray]:
    """One boolean mask per sequence over its residues; at least one residue per sequence."""
    masks = []
    for n in lengths:
        m = rng.random(n) < prob
        if not m.any():
            m[rng.integers(n)] = True
        masks.append(m)
    return masks


def place(masks, n_prefix: int, shape) -> torch.Tensor:
    """Residue masks into token coordinates (after <cls> and any tags)."""
    out = torch.zeros(shape, dtype=torch.bool)
    for i, m in enumerate(masks):
        out[i, n_prefix:n_prefix + len(m)] = torch.from_numpy(m)
    return out


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _batches(n: int):
    for start in range(0, n, EVAL_BATCH):
        yield slice(start, min(n, start + EVAL_BATCH))


@torch.no_grad()
def perplexity(model, kind, seqs, z, bins, masks, n_bins, teacher: bool = False) -> float:
    """exp(mean CE over the masked residues). CB-pLM uses its predicted concepts unless `teacher`."""
    model.eval()
    nll, count = 0.0, 0
    for s in _batches(len(seqs)):
        tokens, n_prefix = batch_tokens(kind, seqs[s], bins[s], n_bins)
        mask = place(masks[s], n_prefix, tokens.shape)
        tokens, mask = tokens.to(_device(model)), mask.to(_device(model))
        inputs = tokens.masked_fill(mask, T.MASK)
        kwargs = {"concepts": torch.tensor(z[s], device=tokens.device)} if (kind == "cb" and teacher) else {}
        logits = model(inputs, **kwargs)["logits"]
        targets = tokens - T.AA_OFFSET
        nll += torch.nn.functional.cross_entropy(logits[mask], targets[mask], reduction="sum").item()
        count += int(mask.sum())
    return float(np.exp(nll / count))


def unigram_perplexity(train_seqs, seqs, masks) -> float:
    """The no-model reference: residue frequencies of the training split (add-one smoothed), on the
    same masked residues."""
    counts = np.bincount(np.concatenate([D.residue_index(s) for s in train_seqs]), minlength=len(D.AMINO_ACIDS)) + 1
    log_f = np.log(counts / counts.sum())
    nll = np.concatenate([-log_f[D.residue_index(s)][m] for s, m in zip(seqs, masks)])
    return float(np.exp(nll.mean()))


@torch.no_grad()
def predicted_concepts(model, seqs) -> np.ndarray:
    """CB-pLM's concept predictions c_hat (N, K) from the unmasked sequences."""
    model.eval()
    return np.concatenate([model(T.encode(seqs[s])[0].to(_device(model)))["concepts"].cpu().numpy()
                           for s in _batches(len(seqs))])


def r_squared(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Per-column coefficient of determination 1 - SSE / SST."""
    sse = ((pred - true) ** 2).sum(0)
    sst = ((true - true.mean(0)) ** 2).sum(0)
    return 1 - sse / sst


@torch.no_grad()
def regenerate(model, kind, seqs, bins, masks, n_bins, concept: int | None = None, target: float = 0.0,
               target_bin: int = 0) -> list[str]:
    """Sequences whose masked residues are replaced by the argmax under the intervention."""
    model.eval()
    out = []
    for s in _batches(len(seqs)):
        b = bins[s].copy()
        if kind == "tag" and concept is not None:
            b[:, concept] = target_bin
        tokens, n_prefix = batch_tokens(kind, seqs[s], b, n_bins)
        mask = place(masks[s], n_prefix, tokens.shape)
        kwargs = {}
        if kind == "cb" and concept is not None:
            kwargs["intervene"] = (concept, torch.full((tokens.shape[0],), float(target), device=_device(model)))
        logits = model(tokens.masked_fill(mask, T.MASK).to(_device(model)), **kwargs)["logits"].cpu()  # (B, T, 20)
        new = torch.where(mask, logits.argmax(-1) + T.AA_OFFSET, tokens)
        out += T.decode(new, n_prefix, [len(x) for x in seqs[s]])
    return out


def intervene(models: dict, seqs, z, bins, masks, names, mean, std, edges, target_sd: float, n_bins: int) -> pd.DataFrame:
    """For each model, concept and direction: the standardised change of the concept, signed so
    that positive = the requested direction. One row per (model, concept, direction, sequence)."""
    rows = []
    for kind, model in models.items():
        plain_regen = regenerate(model, kind, seqs, bins, masks, n_bins) if kind == "plain" else None
        for k, name in enumerate(names):
            for direction in (+1, -1):
                target = direction * target_sd
                target_bin = int(np.searchsorted(edges[:, k], target, side="right"))
                new = plain_regen if plain_regen is not None else regenerate(
                    model, kind, seqs, bins, masks, n_bins, concept=k, target=target, target_bin=target_bin)
                z_new = (D.concept_matrix(new, [name])[:, 0] - mean[k]) / std[k]
                delta = direction * (z_new - z[:, k])
                rows.append(pd.DataFrame({
                    "model": kind, "concept": name, "direction": direction, "sequence": np.arange(len(seqs)),
                    "z_before": z[:, k], "z_after": z_new, "delta": delta,
                    "changed": [sum(a != b for a, b in zip(x, y)) for x, y in zip(seqs, new)],
                }))
    return pd.concat(rows, ignore_index=True)


def concept_weights(model, names) -> pd.DataFrame:
    """The CB-pLM's concept-to-token weights d logit / d c, centred over the 20 residues (softmax
    ignores a shift common to all residues, so only differences between residues mean anything)."""
    w = model.concept_token_weights().detach().cpu().numpy()  # (20, K)
    w = w - w.mean(0, keepdims=True)
    kd = D.kyte_doolittle()
    return pd.DataFrame([{"concept": name, "residue": a, "weight": w[i, k], "kyte_doolittle": kd[i]}
                         for k, name in enumerate(names) for i, a in enumerate(D.AMINO_ACIDS)])
