"""Held-out perplexity, concept R^2, single-concept interventions and the concept-to-token weights.

Every model of a seed is scored on the same held-out sequences with the same masked positions.
An intervention (the paper's control experiment, Sec. 4.1, official ``intervene_on_sequences``)
masks the residues that CB-pLM's gradient attribution says oppose the push most, asks the model for
them under a changed concept, draws each from the model's distribution, and measures the concept of
the new sequence with Biopython:

* CB-pLM: the concept k fed to the bottleneck is set to its training minimum or maximum (the
  official 0 / 1 of the [0, 1]-normalised concept); the other concepts are the model's own
  predictions (as the official code at inference);
* CB-pLM at equal request strength: concept k set to the mean concept of the training proteins in
  the tag LM's lowest / highest bin (what the tag LM's request asks for on average);
* CB-pLM with concept k's embedding zeroed (the ablation of the mechanism: the request reaches no
  logit), asked for the extremes;
* continuous-concept conditional LM: concept k's input set to the same extremes as CB-pLM's; the
  others keep the sequence's true values;
* conditional-tag: concept k's tag becomes the lowest or highest bin; the others keep the sequence's
  true bins;
* plain masked LM: no handle; it redraws the same residues (up and down independently), so its
  change is the drift that regenerating attribution-chosen residues causes: the noise floor.

The official code takes the argmax; we sample (temperature 1), so the plain LM's drift is a
measured floor and not zero by construction.
"""
from __future__ import annotations

import dataclasses

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


def _concept_kwargs(kind: str, z, teacher: bool, device) -> dict:
    """The concept input of a forward pass: CB-pLM's teacher forcing, the conditional LM's (always) input."""
    if (kind == "cb" and teacher) or kind == "cond":
        return {"concepts": torch.as_tensor(np.asarray(z), dtype=torch.float32, device=device)}
    return {}


@torch.no_grad()
def perplexity(model, kind, seqs, z, bins, masks, n_bins, teacher: bool = False) -> float:
    """exp(mean CE over the masked residues). CB-pLM uses its predicted concepts unless `teacher`; the conditional
    LM is fed `z` (its input), the tag LM `bins`."""
    model.eval()
    nll, count = 0.0, 0
    for s in _batches(len(seqs)):
        tokens, n_prefix = batch_tokens(kind, seqs[s], bins[s], n_bins)
        mask = place(masks[s], n_prefix, tokens.shape)
        tokens, mask = tokens.to(_device(model)), mask.to(_device(model))
        inputs = tokens.masked_fill(mask, T.MASK)
        logits = model(inputs, **_concept_kwargs(kind, z[s], teacher, tokens.device))["logits"]
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


def attribution(model, seqs, concept: int) -> list[np.ndarray]:
    """Per residue, how much it pushes CB-pLM's predicted concept `concept` up (the official
    ``intervene_on_sequences`` attribution: gradient x input against the <mask> embedding),

    .. math:: a_t = \\sum_d \\frac{\\partial \\hat c_k}{\\partial x_{t,d}} (x_{t,d} - x^{\\mathrm{mask}}_d),

    with x the token embeddings (before positions are added). One array per sequence, its residues only.
    """
    model.eval()
    emb_table = model.encoder.tok
    out = []
    for s in _batches(len(seqs)):
        tokens, n_prefix = T.encode(seqs[s])
        captured = []
        hook = emb_table.register_forward_hook(lambda m, i, o: captured.append(o))
        try:
            with torch.enable_grad():
                c_hat = model(tokens.to(_device(model)))["concepts"][:, concept]  # (B,)
                x = captured[0]  # (B, T, C)
                (grad,) = torch.autograd.grad(c_hat.sum(), x)  # sequences do not interact: one sum suffices
        finally:
            hook.remove()
        a = (grad * (x.detach() - emb_table.weight[T.MASK].detach())).sum(-1).cpu().numpy()  # (B, T)
        out += [a[i, n_prefix:n_prefix + len(q)] for i, q in enumerate(seqs[s])]
    return out


def edit_masks(attributions, fraction: float, direction: int) -> list[np.ndarray]:
    """The residues to regenerate for a push `direction` (+1 up, -1 down): the round(fraction x length)
    (at least 1) residues whose attribution opposes the push most (official ``_create_intervene_mask``:
    ascending sort for a positive intervention, descending for a negative one)."""
    masks = []
    for a in attributions:
        n = max(1, int(round(fraction * len(a))))
        order = np.argsort(direction * a, kind="stable")  # most opposed first
        m = np.zeros(len(a), dtype=bool)
        m[order[:n]] = True
        masks.append(m)
    return masks


@dataclasses.dataclass
class Arm:
    """One intervening model: `kind` (cb, cond, tag, plain), per concept the (down, up) request `targets`
    (standardised concept values: CB-pLM, conditional LM) or `target_bins` (tag LM), and `ablate` (CB-pLM with the
    intervened concept's embedding zeroed)."""

    model: torch.nn.Module
    kind: str
    targets: list | None = None
    target_bins: list | None = None
    ablate: bool = False


@torch.no_grad()
def regenerate(model, kind, seqs, bins, masks, n_bins, generator: torch.Generator | None = None,
               temperature: float = 1.0, concept: int | None = None, target: float = 0.0,
               target_bin: int = 0, z=None, ablate: bool = False) -> list[str]:
    """Sequences whose masked residues are redrawn under the intervention: sampled from
    softmax(logits / temperature) with `generator`, or the argmax when temperature = 0 (official).
    The conditional LM reads `z` (B, K), its concept `concept` set to `target`; CB-pLM's bottleneck gets
    `target` for `concept` (with that concept's embedding zeroed when `ablate`)."""
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
            if ablate:
                kwargs["ablate"] = concept
        if kind == "cond":
            c = np.array(z[s], dtype=np.float32)
            if concept is not None:
                c[:, concept] = target
            kwargs["concepts"] = torch.from_numpy(c).to(_device(model))
        logits = model(tokens.masked_fill(mask, T.MASK).to(_device(model)), **kwargs)["logits"].cpu()  # (B, T, 20)
        if temperature == 0:
            drawn = logits[mask].argmax(-1)
        else:  # on the CPU, so that a seeded generator gives the same draws on any device
            drawn = torch.multinomial(torch.softmax(logits[mask].double() / temperature, -1), 1, generator=generator)[:, 0]
        new = tokens.clone()
        new[mask] = drawn + T.AA_OFFSET
        out += T.decode(new, n_prefix, [len(x) for x in seqs[s]])
    return out


# The arms' fixed places in the seed streams (so that adding an arm never changes another arm's draws).
ARM_STREAMS = {"cb": 0, "plain": 1, "tag": 2, "cond": 3, "cb_equal": 4, "cb_ablated": 5}


def intervene(arms: dict, seqs, z, bins, masks: dict, names, mean, std, n_bins: int, temperature: float,
              seed: int) -> pd.DataFrame:
    """The paper's single-concept intervention (Sec. 4.1; official ``intervene_on_sequences``) for
    every arm (:class:`Arm`), concept and direction, on the same residues for every arm.

    `masks[(k, direction)]`: the residues to regenerate (chosen by CB-pLM's attribution). The plain LM has no
    handle: it redraws the same residues, so its change is the drift that regeneration alone causes (the noise
    floor). One row per (arm, concept, direction, sequence); `delta` is the change signed so that positive =
    requested; `model` names the arm.
    """
    rows = []
    for name, arm in arms.items():
        for k, concept in enumerate(names):
            for d_i, direction in enumerate((+1, -1)):
                # One stream per (seed, arm, concept, direction): reruns draw the same residues.
                gen = torch.Generator().manual_seed(int(np.random.SeedSequence(
                    [seed, ARM_STREAMS[name], k, d_i]).generate_state(1)[0]))
                up = d_i == 0
                handle = {} if arm.kind == "plain" else {"concept": k}
                if arm.targets is not None:
                    handle["target"] = arm.targets[k][up]
                if arm.target_bins is not None:
                    handle["target_bin"] = int(arm.target_bins[k][up])
                new = regenerate(arm.model, arm.kind, seqs, bins, masks[(k, direction)], n_bins, gen, temperature,
                                 z=z, ablate=arm.ablate, **handle)
                z_new = (D.concept_matrix(new, [concept])[:, 0] - mean[k]) / std[k]
                rows.append(pd.DataFrame({
                    "model": name, "concept": concept, "direction": direction, "sequence": np.arange(len(seqs)),
                    "z_before": z[:, k], "z_after": z_new, "delta": direction * (z_new - z[:, k]),
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
