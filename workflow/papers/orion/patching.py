"""Request-patching and the prompt-injection oversight, on a model with a residual-stream hook.

Request-patching (the paper's main experiment; official code: causal_checker/alignement.py and
demo/causal_checker_sweep.py): for x1 = (C1, R1) and x2 = (C2, R2) of one task family, run x2 but overwrite
the residual stream at its last token, at layer L, with x1's (same layer, last token). Three hypotheses name
what the patched run should output:

* R2(C2): the patch did nothing (early layers, before the request is processed);
* R1(C2): the request of x1 was moved into x2 and the model retrieved from C2 (the decomposition; middle layers);
* R1(C1): x1's answer itself was moved (late layers, after retrieval).

The metric is the probability of the hypothesis' token normalised by the probability of the correct answer in
an unpatched run of the prompt that asks it: (C2, R1) for R1(C2), x2 for R2(C2), x1 for R1(C1). As in the
official analysis (``normalized_metric`` with random_guess = 0 for token probabilities), it is a ratio of means
over the pairs: mean p_patched / mean p_clean.

Oversight (the paper's prompt-injection application, internal_process_supervision.py in the official code):
untrusted prompts carry an injected note; the last-token residual of ONE trusted prompt, at one middle layer,
is written into each of them; accuracy is measured before and after.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import torch

from papers.orion.lm import PretrainedLM, WordLM

LM = WordLM | PretrainedLM  # what the functions below run on (papers.orion.lm)

HYPOTHESES = ("R2(C2)", "R1(C2)", "R1(C1)")  # in the order the decomposition predicts as L grows


def answer_stats(logits: torch.Tensor, answers: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """p(answer) under softmax(logits) (B,) and whether the answer is the argmax (B,)."""
    probs = torch.softmax(logits.float(), dim=-1)
    rows = torch.arange(len(answers))
    return probs[rows, answers].numpy(), (logits.argmax(-1) == answers).numpy()


def accuracy(lm: LM, token_lists, answers) -> tuple[float, float]:
    """Top-1 accuracy and mean probability of the answer at the last token."""
    p, hit = answer_stats(lm.last_logits(lm.encode(token_lists)), lm.answer_ids(answers))
    return float(hit.mean()), float(p.mean())


CONTROL = "same_request"  # the negative control's source (request_patching)
# The control's hypotheses, in the order of HYPOTHESES: the unchanged output, the pair's R1 on C2 (which the control's
# patch never presents), and the control source's own answer R2(C3).
CONTROL_HYPOTHESES = ("R2(C2)", "R1(C2)", "R2(C3)")


def request_patching(lm: LM, pairs: pd.DataFrame) -> pd.DataFrame:
    """The layer sweep over the pairs of one family. `pairs` has the token strings x1, x2, x21 (= (C2, R1)) and
    x3 (= (C3, R2)), and the answers r1c1, r2c2, r1c2, r2c3. Returns one row per (source, layer, hypothesis): the
    mean patched probability, the mean clean probability, their ratio (the normalised metric), and the patched
    top-1 accuracy; and, per pair in `pairs`' order, the patched and the clean probability (`pair_prob`,
    `pair_clean`: lists), from which the report resamples the pairs (a seed's bootstrap interval).

    source "request": x1's state at its last token is written into x2's last token (the paper's patch), hypotheses
    :data:`HYPOTHESES`.
    source "same_request" (the negative control): the state of x3 = (C3, R2), the SAME request as x2's on another
    context, is written instead, hypotheses :data:`CONTROL_HYPOTHESES`. It carries no R1, so R1(C2) must not appear
    at any layer (a metric or a disrupted model that yields R1(C2) without R1 would show here); and where the patched
    state carries only the request (the decomposition's middle layers), the output must stay R2(C2): the model
    retrieves from the unpatched context C2, not from C3. At L = 0 the patch is x2's own last token (the same request
    wording), so nothing changes there by construction. (It replaces a shuffled-position patch that broke the output
    at every layer, a null that could not speak; independent review of issue 47.)"""
    x1, x2, x21, x3 = (lm.encode([s.split() for s in pairs[c]]) for c in ("x1", "x2", "x21", "x3"))
    ans = {h: lm.answer_ids(pairs[c]) for h, c in zip(HYPOTHESES, ("r2c2", "r1c2", "r1c1"))}
    ans["R2(C3)"] = lm.answer_ids(pairs["r2c3"])
    clean = {  # the unpatched run that asks each hypothesis' question
        "R2(C2)": answer_stats(lm.last_logits(x2), ans["R2(C2)"])[0],
        "R1(C2)": answer_stats(lm.last_logits(x21), ans["R1(C2)"])[0],
        "R1(C1)": answer_stats(lm.last_logits(x1), ans["R1(C1)"])[0],
        "R2(C3)": answer_stats(lm.last_logits(x3), ans["R2(C3)"])[0],
    }
    sources = {"request": (lm.residuals(x1), HYPOTHESES),  # (L + 1, B, C): the source's last token at every layer
               CONTROL: (lm.residuals(x3), CONTROL_HYPOTHESES)}
    rows = []
    for source, (states, hypotheses) in sources.items():
        for layer in range(lm.n_layer + 1):
            logits = lm.patched_logits(x2, layer, states[layer])  # (B, V)
            for h in hypotheses:
                p, hit = answer_stats(logits, ans[h])
                rows.append({"source": source, "layer": layer, "hypothesis": h, "prob": float(p.mean()),
                             "clean_prob": float(clean[h].mean()), "normalized": float(p.mean() / clean[h].mean()),
                             "accuracy": float(hit.mean()), "pair_prob": [float(v) for v in p],
                             "pair_clean": [float(v) for v in clean[h]]})
    return pd.DataFrame(rows)


def best_layer(sweep: pd.DataFrame) -> int:
    """The layer where R1(C2) keeps the most normalised probability (the paper's L2 layer of a pair)."""
    r = sweep[sweep.hypothesis == "R1(C2)"].sort_values("layer")
    return int(r.layer.iloc[int(np.argmax(r.normalized.to_numpy()))])


NONE = "none"  # a layer where no hypothesis keeps enough of its clean probability to dominate


def layer_profile(sweep: pd.DataFrame, floor: float = 0.0, hypotheses: tuple = HYPOTHESES) -> list[str]:
    """The dominant hypothesis at each layer, from layer 0 up: the one of `hypotheses` with the largest normalised
    metric, if that is at least `floor`; else :data:`NONE`. Without a floor the argmax of three near-zero ratios (a
    patch that destroys the output) would name a "dominant" output by noise. The rules below read HYPOTHESES'
    labels: pass a control's profile through :func:`as_hypotheses` first."""
    wide = sweep.pivot(index="layer", columns="hypothesis", values="normalized").sort_index()
    rows = (wide.loc[layer, list(hypotheses)].astype(float) for layer in wide.index)
    return [str(r.idxmax()) if r.max() >= floor else NONE for r in rows]


def as_hypotheses(profile: list[str], hypotheses: tuple = CONTROL_HYPOTHESES) -> list[str]:
    """A profile over `hypotheses` written with the labels of :data:`HYPOTHESES` at the same places (the control's
    R2(C3), its source's own answer, stands where R1(C1) does), so that the same rules judge it."""
    return [h if h == NONE else HYPOTHESES[hypotheses.index(h)] for h in profile]


def is_decomposition_profile(profile: list[str]) -> bool:
    """True if the dominant hypothesis goes R2(C2) -> R1(C2) -> R1(C1) as L grows: never back in that order,
    starting with R2(C2), ending with R1(C1), and with R1(C2) dominating at one layer at least."""
    if NONE in profile:
        return False
    order = [HYPOTHESES.index(h) for h in profile]
    monotone = all(a <= b for a, b in zip(order, order[1:]))
    return monotone and order[0] == 0 and order[-1] == 2 and 1 in order


def is_strict_interior_decomposition(profile: list[str]) -> bool:
    """The rule of claim (b) before issue 47's second review, kept so that the report can compute what it gives: on
    the interior layers 1 .. n_layer - 1 alone, the dominant hypothesis never goes back in the order
    R2(C2) -> R1(C2) -> R1(C1), R1(C2) dominates at one interior layer at least, and no interior layer is
    :data:`NONE`. The routed positive control, mid-retrieval at some interior layer after its request was moved,
    could not pass it (a NONE layer between R1(C2) and R1(C1))."""
    if NONE in profile[1:-1]:
        return False
    interior = [HYPOTHESES.index(h) for h in profile[1:-1]]
    return bool(interior) and all(a <= b for a, b in zip(interior, interior[1:])) and 1 in interior


def is_interior_decomposition(profile: list[str]) -> bool:
    """Claim (b)'s rule, the part of :func:`is_decomposition_profile` that the data can refute (the paper's abstract:
    middle layers at the last token process the request, late layers retrieve): on the interior layers
    1 .. n_layer - 1, the dominant hypotheses never go back in the order R2(C2) -> R1(C2) -> R1(C1), R1(C2)
    dominates at one interior layer at least, and a layer where none dominates (:data:`NONE`) sits only at the
    transition from R1(C2) to R1(C1): after the last layer where R1(C2) dominates, with R1(C1) the next hypothesis
    that dominates (at an interior layer or at L = n_layer). A NONE layer anywhere else (before R1(C2), or after it
    with no R1(C1) to follow) fails the pair.

    Why the transition may hold a NONE layer (issue 47's second, independent review): once the request has been
    moved (R1(C2)) and before the retrieved answer is written (R1(C1)), a patched state can carry neither in full --
    the model is mid-retrieval there -- and the positive control, in which the decomposition is planted, shows such
    layers (:func:`is_strict_interior_decomposition`, the rule before the review, fails it).

    The two end layers are left out because they are fixed by construction: at L = 0 the patched state is the
    embedding of x1's last token alone, which carries nothing of C1 and in most pairs is x2's own last token
    (both end on the same separator), so the patch changes little or nothing (R2(C2)); at L = n_layer it is
    x1's final state, which alone sets the output (R1(C1)). A model without interior layers fails."""
    interior = list(profile[1:-1])
    named = [HYPOTHESES.index(h) for h in interior if h != NONE]
    if not named or 1 not in named or any(a > b for a, b in zip(named, named[1:])):
        return False
    last_request = max(i for i, h in enumerate(interior) if h == HYPOTHESES[1])
    if NONE in interior[:last_request]:
        return False
    if NONE not in interior[last_request:]:
        return True
    following = [h for h in profile[last_request + 2:] if h != NONE]  # after it, the last layer included
    return bool(following) and following[0] == HYPOTHESES[2]


def oversight(lm: LM, trusted: list[str], untrusted, answers, injected_answers) -> pd.DataFrame:
    """Accuracy of the untrusted prompts unpatched (layer -1) and with the trusted prompt's last-token residual
    written at each layer; also the share of outputs that follow the injection."""
    batch = lm.encode(untrusted)
    source = lm.residuals(lm.encode([trusted]))[:, 0]  # (L + 1, C)
    ans, inj = lm.answer_ids(answers), lm.answer_ids(injected_answers)
    rows = []
    for layer in range(-1, lm.n_layer + 1):
        if layer < 0:
            logits = lm.last_logits(batch)
        else:
            logits = lm.patched_logits(batch, layer, source[layer].expand(len(untrusted), -1))
        _, hit = answer_stats(logits, ans)
        _, follow = answer_stats(logits, inj)
        rows.append({"layer": layer, "accuracy": float(hit.mean()), "follows_injection": float(follow.mean())})
    return pd.DataFrame(rows)
