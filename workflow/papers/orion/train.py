"""Training tiny transformers on the mixture of ORION-style tasks (the paper's models are pretrained LMs; ours
learn the tasks from scratch, which is what makes this an analogue).

A batch draws a family uniformly per sequence, a training style, values, and 1 .. max_requests requests, each
followed by its answer: the loss is the cross-entropy on every answer, plus `lm_weight` times the next-token
loss on the other tokens. A share `copy_fraction` of the sequences are copy sequences instead (a list of words
written twice, :func:`tasks.copy_sequence`), whose second copy counts as answers: generic repeated text of the
kind a pretrained LM has seen, which makes the induction circuits form early; without it, the families that
bind a key to a value in context stayed at chance for 4,000 steps in the issue's prototype. AdamW with weight
decay on matrices only, linear warmup then a constant rate, gradient clipping per model.

:func:`train_until_gate` trains the seeds of one model side by side (papers.orion.ensemble); each one passes
the accuracy gate on the validation prompts (issue 20: the gate is reached by training, not by dropping pairs),
trains a fixed number of steps past it (issue 47's sixth review) and is taken out there, or at the step cap.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from papers.orion import tasks
from papers.orion.ensemble import EnsembleGPT, clip_per_member, decay_groups
from papers.orion.model import GPT

log = logging.getLogger(__name__)


def sample_batch(families: list, train_styles: dict, vocab: tasks.Vocab, rng: np.random.Generator, *,
                 batch_size: int, max_requests: int, copy_fraction: float = 0.0,
                 copy_length: tuple[int, int] = (8, 20), copy_separated: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids x (B, T) and a mask (B, T - 1) that is True where the next token is an answer. A share
    `copy_fraction` of the sequences are copy sequences, of which a share `copy_separated` are separated ones."""
    seqs, answer_at = [], []
    for _ in range(batch_size):
        if rng.random() < copy_fraction:
            tokens, targets = tasks.copy_sequence(vocab, rng, length=copy_length,
                                                  separated=bool(rng.random() < copy_separated))
            seqs.append(tokens)
            answer_at.append(targets)
            continue
        fam = families[rng.integers(len(families))]
        styles = train_styles[fam.name]
        n_req = int(rng.integers(1, min(max_requests, len(fam.keys)) + 1))
        tokens, targets = tasks.training_sequence(fam, styles[rng.integers(len(styles))], vocab, rng,
                                                  requests=n_req)
        seqs.append(tokens)
        answer_at.append(targets)
    # (B, T) ids right-padded with id 0, as lm.encode_words; built in numpy and converted once (per-row torch
    # indexing cost more than the draws)
    index = vocab.index
    x = np.zeros((len(seqs), max(len(t) for t in seqs)), dtype=np.int64)
    mask = np.zeros((x.shape[0], x.shape[1] - 1), dtype=bool)
    for i, (tokens, targets) in enumerate(zip(seqs, answer_at)):
        x[i, :len(tokens)] = [index[t] for t in tokens]
        mask[i, targets] = True
    return torch.from_numpy(x), torch.from_numpy(mask)


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


def pad_stack(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """E batches (x (B, T_e), mask (B, T_e - 1)) right-padded to one length: x (E, B, T), mask (E, B, T - 1).
    The shared length depends on every member's batch: training does not use it (:func:`length_buckets` pads each
    member on its own); the tests use it as the one-batch reference."""
    T = max(x.shape[1] for x, _ in batches)
    xs = torch.stack([F.pad(x, (0, T - x.shape[1])) for x, _ in batches])
    masks = torch.stack([F.pad(m, (0, T - 1 - m.shape[1])) for _, m in batches])
    return xs, masks


# A member's part is padded to its own longest sequence rounded up to a multiple of this: the padded length depends
# on that member's batch alone, and the members whose parts round to the same length share one forward pass.
PAD_MULTIPLE = 8


def length_buckets(batches: list[tuple[torch.Tensor, torch.Tensor]], buckets: int, multiple: int = PAD_MULTIPLE
                   ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The E batches of one step cut into `buckets` parts by sequence length, each member's part padded to a length
    of its own: member e's sequences sorted by length (tokens before the padding id 0), part g holds its g-th slice
    of them, padded to its longest sequence rounded up to a multiple of `multiple`; the members whose part g has the
    same padded length are stacked: [(rows, x (E_g, B_g, T_g), mask (E_g, B_g, T_g - 1))], rows the members' indices
    in `batches`, ordered by part, then length.

    Why per member: padding to the longest sequence over all members (one length per part) made a member's
    computation depend on the other members' batches: the shapes of its matrix products, so its float rounding,
    and with it, over thousands of steps, the trajectory of a seed whose outcome is bimodal (issue 47's fourth
    review). Here a member's shapes are fixed by its own batch, so a seed trains the same alone or in any stack (a
    test checks). Why parts: copy sequences (~25 tokens) and task sequences (35-52) share a batch, so padding every
    sequence to the batch's longest leaves a third of the positions as padding. Padding sits after a sequence's last
    token and attention is causal, so no real token sees it and :func:`bucketed_loss` over the parts is the loss
    over :func:`pad_stack`'s one padded batch (a test checks)."""
    B = batches[0][0].shape[0]
    if any(x.shape[0] != B for x, _ in batches):
        raise ValueError("every member's batch must hold the same number of sequences")
    order = [torch.argsort((x != 0).sum(1), stable=True) for x, _ in batches]
    parts = []
    for rows in zip(*(torch.tensor_split(o, buckets) for o in order)):  # rows[e]: member e's sequences of part g
        if len(rows[0]) == 0:
            continue
        own = [_trim(x[r], m[r], multiple) for (x, m), r in zip(batches, rows)]
        for T in sorted({x.shape[1] for x, _ in own}):
            members = [e for e, (x, _) in enumerate(own) if x.shape[1] == T]
            parts.append((torch.tensor(members), torch.stack([own[e][0] for e in members]),
                          torch.stack([own[e][1] for e in members])))
    return parts


def _trim(x: torch.Tensor, mask: torch.Tensor, multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """x (B, T), mask (B, T - 1) cut (or right-padded) to the last column that holds a token, rounded up to a
    multiple of `multiple`."""
    T = int((x != 0).sum(1).max())
    T = -(-T // multiple) * multiple
    x = F.pad(x[:, :T], (0, max(0, T - x.shape[1])))
    mask = F.pad(mask[:, :T - 1], (0, max(0, T - 1 - mask.shape[1])))
    return x, mask


def ensemble_loss(ens: EnsembleGPT, x: torch.Tensor, answer_mask: torch.Tensor, lm_weight: float) -> torch.Tensor:
    """The sum over members of :func:`loss_fn`'s loss for each (x (E, B, T), mask (E, B, T - 1)): each member's
    gradient is that of its own loss."""
    return bucketed_loss(ens, [(torch.arange(x.shape[0]), x, answer_mask)], lm_weight)


def member_losses(ens: EnsembleGPT, parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                  lm_weight: float) -> torch.Tensor:
    """Each member's :func:`loss_fn` loss (E,) over one batch given as parts (:func:`length_buckets`: rows, x, mask):
    its means over answers and over other tokens are taken over all its parts together. The pass runs on each
    member's real tokens only (:meth:`EnsembleGPT.forward_packed`: no layer but attention sees the padding, and the
    head runs only where the loss reads its logits), so a member's computation is that of its own batch."""
    E = ens.members
    ids, targets, answers, layout, pos = [], [], [], [], [[] for _ in range(E)]
    start = 0
    for rows, x, answer_mask in parts:
        inp = x[..., :-1]  # (E_g, B, T - 1): the inputs; the targets are x[..., 1:]
        E_g, B, T = inp.shape
        ids.append(inp.reshape(-1))
        targets.append(x[..., 1:].reshape(-1))
        answers.append(answer_mask.reshape(-1))
        real = (inp != 0).reshape(E_g, B * T)  # padding (id 0) follows each sequence's last token
        for j, e in enumerate(rows.tolist()):
            pos[e].append(start + j * B * T + real[j].nonzero().squeeze(1))
        layout.append((rows, B, T))
        start += E_g * B * T
    ids, targets, answers = torch.cat(ids), torch.cat(targets), torch.cat(answers)
    pos = [torch.cat(q) for q in pos]
    heads = [targets[q] != 0 for q in pos]  # the loss reads the logits where the next token is no padding
    losses = []
    for q, head, logits in zip(pos, heads, ens.forward_packed(ids, layout, pos, heads)):
        target, answer = targets[q][head], answers[q][head]
        ce = F.cross_entropy(logits, target, reduction="none")
        loss = ce[answer].mean()
        if lm_weight > 0:
            loss = loss + lm_weight * ce[~answer].mean()  # the other tokens: (target != 0) & ~answer_mask
        losses.append(loss)
    return torch.stack(losses)


def bucketed_loss(ens: EnsembleGPT, parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                  lm_weight: float) -> torch.Tensor:
    """The sum over members of :func:`member_losses`: each member's gradient is that of its own loss."""
    return member_losses(ens, parts, lm_weight).sum()


def train_until_gate(models: list[GPT], samplers: list, *, max_steps: int, lr: float, warmup: int,
                     weight_decay: float, grad_clip: float, lm_weight: float, eval_every: int, evaluate,
                     gate: float, gate_records: int = 1, copy_warmup: int = 0, buckets: int = 1, post_gate_steps: int = 0,
                     progress=lambda it: it, device: str = "cpu"
                     ) -> tuple[list[GPT], list[int], pd.DataFrame, list[tuple[GPT, int, bool]]]:
    """Train the members `models` (one per seed, same size) side by side (papers.orion.ensemble), member e on
    batches from `samplers[e](copy_only)`, until each has passed the accuracy gate and then trained
    `post_gate_steps` more steps, or `max_steps` is reached without passing the gate.

    The curriculum: for the first `copy_warmup` steps the batches are copy sequences only (``copy_only`` True)
    and the loss is on their predictable copies only (lm_weight 0), so that the induction circuits form before
    the tasks' answers can be had by guessing among the context's values (the plateau the models without it
    stayed on; see the report); then the task mixture with `lm_weight`. Each step's batches are cut into
    `buckets` parts by length, each member padded on its own (:func:`length_buckets`; the same loss with less
    padding, and a member's computation independent of the others').

    Every `eval_every` steps, `evaluate(model)` gives each member's validation accuracy per family; once every
    family of member e has been >= `gate` at `gate_records` consecutive records (at step g), a copy of member e is
    kept as its at-gate model, and member e trains on for exactly `post_gate_steps` more steps (issue 47's sixth
    review: at g a seed has just made its accuracy jump and its circuit is not yet settled; in the review's
    continuation of the committed run, 600 more steps carried two seeds' (a) ratios from 0.36 and 0.61 to ~1.0),
    is evaluated once more at g + post_gate_steps (the history's record there is the stability premise: is it still
    past the gate?) and copied out: that copy is the model the analysis decides on. With post_gate_steps 0 it is
    the at-gate copy ("stop at the gate"). The post-gate steps may run past `max_steps`, which caps the search for
    the gate only. The members still training go on without the ones taken (:func:`_keep`: the same weights and
    optimiser moments, so their training is unchanged; a step costs in proportion to the members it trains); a
    member that never passes is copied out at `max_steps` and reported below the gate (no post-gate steps: it has
    no gate to train past). Returns the analysed models, the step each was taken at, the history (one row per member
    and record; `phase` "gate" up to the gate, "post_gate" after it) and per member (at-gate model, gate step,
    passed): the at-gate copy and its step (reported beside, not deciding), or the cap model, max_steps and False.

    `device` (cpu | cuda): where the stacked weights, the optimiser and each step's batches live (issue 54: the
    full scale trains on a GPU). The batches are drawn on the CPU (the same draws on either device), and each
    member is evaluated, and returned, as a CPU copy (:meth:`EnsembleGPT.member`)."""
    if post_gate_steps < 0:
        raise ValueError(f"post_gate_steps must be >= 0, got {post_gate_steps}")
    ens = EnsembleGPT.from_members(models).to(device)
    opt = torch.optim.AdamW(decay_groups(ens, weight_decay), lr=lr, betas=(0.9, 0.95))
    E = len(models)
    active = list(range(E))  # the members still training, in the ensemble's order
    final, at_step, history, passed = [None] * E, [max_steps] * E, [], [0] * E  # passed: consecutive records
    at_gate = [None] * E  # (model, gate step, passed) per member
    until = [None] * E  # the step at which a member past the gate is taken (its gate step + post_gate_steps)
    loss_sum, n = [0.0] * E, [0] * E  # per member: its mean training loss since its last record (the history)
    for step in progress(range(1, max_steps + post_gate_steps + 1)):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, step / max(warmup, 1))
        copy_only = step <= copy_warmup
        parts = [tuple(t.to(device) for t in part)
                 for part in length_buckets([samplers[e](copy_only) for e in active], buckets)]
        losses = member_losses(ens, parts, 0.0 if copy_only else lm_weight)
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        clip_per_member(ens.parameters(), grad_clip)
        opt.step()
        for i, e in enumerate(active):
            loss_sum[e] += losses[i].item()
            n[e] += 1
        due = [e for e in active if until[e] == step]  # members whose post-gate steps end here
        if step % eval_every and step != max_steps and not due:
            continue
        recorded = []
        for i, e in enumerate(active):
            post = until[e] is not None
            if not (step % eval_every == 0 or e in due or (step == max_steps and not post)):
                continue
            member = ens.member(i)
            with torch.no_grad():
                held_out = evaluate(member)
            history.append({"member": e, "step": step, "train/loss": loss_sum[e] / n[e],
                            "phase": "post_gate" if post else "gate",
                            **{f"eval/{k}": v for k, v in held_out.items()}})
            recorded.append(history[-1])
            loss_sum[e], n[e] = 0.0, 0
            if post:
                if e in due:
                    final[e], at_step[e] = member, step
                continue
            passed[e] = passed[e] + 1 if min(held_out.values()) >= gate else 0
            if passed[e] >= gate_records:
                at_gate[e] = (member, step, True)
                until[e] = step + post_gate_steps
                if post_gate_steps == 0:
                    final[e], at_step[e] = member, step
            elif step == max_steps:
                at_gate[e] = (member, step, False)
                final[e], at_step[e] = member, step
        worst = [min((v, k) for k, v in h.items() if k.startswith("eval/")) for h in recorded]
        log.info("step %d: loss %.3f, members past the gate: %d of %d, taken: %d; worst family of the last records: %s",
                 step, float(np.mean([h["train/loss"] for h in recorded])) if recorded else float("nan"),
                 sum(u is not None for u in until), E,
                 sum(f is not None for f in final), ", ".join(f"{k.removeprefix('eval/')} {v:.2f}" for v, k in worst))
        still = [e for e in active if final[e] is None]
        if not still:
            break
        if len(still) < len(active):
            ens, opt = _keep(ens, opt, [active.index(e) for e in still], weight_decay)
            active = still
    return final, at_step, pd.DataFrame(history), at_gate


def _keep(ens: EnsembleGPT, opt: torch.optim.AdamW, rows: list[int], weight_decay: float
          ) -> tuple[EnsembleGPT, torch.optim.AdamW]:
    """The members `rows` of `ens` as an ensemble of their own, with an AdamW that holds their moments and step
    count: AdamW and the per-member clipping act on each member alone, so their training goes on unchanged."""
    device = ens.params["wte"].device
    kept = EnsembleGPT(ens.cfg, len(rows)).to(device)
    index = torch.tensor(rows, device=device)
    new_opt = torch.optim.AdamW(decay_groups(kept, weight_decay), lr=opt.param_groups[0]["lr"],
                                betas=opt.param_groups[0]["betas"])
    with torch.no_grad():
        for old, new in zip(ens.params.values(), kept.params.values()):
            new.copy_(old[index])
            state = opt.state.get(old)
            if state:  # step (a scalar shared by the members), exp_avg and exp_avg_sq (per member)
                new_opt.state[new] = {k: v.clone() if v.dim() == 0 else v[index].clone() for k, v in state.items()}
    return kept, new_opt
