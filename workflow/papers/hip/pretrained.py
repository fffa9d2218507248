"""HiP in a pretrained causal LM (the paper's own setting, full scale): the attention of a Hugging Face
``transformers`` model is replaced, in all but its first ``dense_layers`` layers, by HiP or a baseline at the
same key budget, training-free (HiP, arXiv:2406.09827, Sec. 3: "we keep the first 3 layers dense"; Sec. 4:
LLaMA models evaluated on long-document perplexity and passkey retrieval).

Nothing is downloaded: ``hip.pretrained[].path`` is a local directory as ``save_pretrained`` writes it
(:func:`papers.common.hf.load_causal_lm`). The swap goes through transformers' attention interface: a function
registered with ``transformers.AttentionInterface`` receives each attention layer's rotated queries and keys
``(B, H, T, D)`` (keys and values with the model's ``H_kv`` grouped heads) and returns ``(B, T, H, D)``:

.. math::
    \\mathrm{out}_i = \\sum_{j \\in \\mathcal{K}_{b(i)},\\, j \\le i} \\mathrm{softmax}_j(s\\, q_i \\cdot k_j)\\, v_j,

with :math:`\\mathcal{K}_b` all keys in the first ``dense_layers`` layers (and for ``dense``), else the key
blocks :func:`papers.hip.methods.select` picks for query block :math:`b` (``hip``: the tree search of Sec. 3.1;
``oracle``, ``random``, ``window``: sink + window at the same budget), and :math:`s` the model's own scaling.

Quality at equal key budgets (the issue's request) is measured by two greedy-decoding tasks -- the classic passkey
and RULER's multi-key needle in a haystack (Hsieh et al. 2024, "RULER: What's the Real Context Size of Your
Long-Context Language Models?", task ``niah_multikey``: several "One of the special magic numbers for <word> is:
<7-digit number>." needles in filler, one word asked, exact match of the number) -- and each method's accuracy is
set against dense attention's on the same prompts with a paired percentile bootstrap over prompts
(:func:`accuracy_vs_dense`, through :func:`papers.common.claims.bootstrap_interval`).

Limits, stated: no KV cache (every forward is a prefill, so greedy decoding recomputes the prompt and HiP prunes
every query as in the paper's prefill), and unpadded sequences only (transformers builds no mask for a custom
attention name; causality is applied here).
"""
from __future__ import annotations

import functools
import hashlib
import logging
import re
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import kernels
from papers.common.claims import LEVEL, bootstrap_interval
from papers.common.hf import load_causal_lm
from papers.common.io import write_parquet
from papers.hip import methods
from papers.hip.methods import HiPConfig

log = logging.getLogger(__name__)

KEY = "hip.pretrained"  # the config key naming the models (errors name it)

# The classic passkey prompt (Mohtashami & Jaggi 2023, as used by the paper's Sec. 4 passkey test).
PASSKEY_INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
                 "I will quiz you about the important information there.\n")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "\nWhat is the pass key? The pass key is"
KEY_DIGITS = 5

# RULER's multi-key NIAH (Hsieh et al. 2024, niah_multikey): word keys, 7-digit values, our own wording around them.
MULTIKEY_INTRO = ("Some special magic numbers are hidden inside the following text. Memorize them: I will ask you "
                  "about one of them afterwards.\n")
MULTIKEY_NEEDLE = "One of the special magic numbers for {key} is: {value}. "
MULTIKEY_QUESTION = ("\nWhat is the special magic number for {key} mentioned in the text above? The special magic "
                     "number for {key} is:")
VALUE_DIGITS = 7
# Distinct key words (64, papers.hip.params.MULTIKEY_WORDS): common nouns, none a prefix of another, no digits.
KEY_WORDS = (
    "apple", "bridge", "candle", "dolphin", "engine", "falcon", "garden", "harbor", "island", "jacket", "kettle",
    "ladder", "marble", "needle", "orchid", "pepper", "quartz", "rabbit", "saddle", "tunnel", "umbrella", "violin",
    "walrus", "yogurt", "zebra", "anchor", "basket", "cactus", "desert", "feather", "glacier", "helmet", "insect",
    "jungle", "kitten", "lantern", "mirror", "nectar", "oyster", "parrot", "quiver", "river", "spider", "turtle",
    "valley", "window", "yacht", "blanket", "cherry", "dragon", "forest", "guitar", "hammer", "iceberg", "jewel",
    "lemon", "meadow", "noodle", "ocean", "pillow", "rocket", "silver", "thunder", "wizard")


# ---- the attention function -------------------------------------------------------------------
def pruned_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, *, method: str,
                     cfg: HiPConfig, generator: torch.Generator | None = None, **kwargs):
    """transformers' attention-function contract: q (B, H, T, D), k, v (B, H_kv, T, D) -> ((B, T, H, D), None).

    Dense causal attention in layers ``module.layer_idx < cfg.dense_layers`` and for ``method == "dense"``;
    elsewhere block-sparse attention over the blocks of ``methods.select(method, ...)``. Grouped-query heads:
    the ``H_kv`` key/value heads are repeated ``H / H_kv`` times (query head h reads kv head h // (H / H_kv),
    as transformers' ``repeat_kv``)."""
    B, H, T, D = query.shape
    if key.shape[2] != T:
        raise ValueError(f"HiP's patched attention runs prefill only (queries {T}, keys {key.shape[2]}): call the "
                         "model with use_cache=False")
    group = H // key.shape[1]
    k = key.repeat_interleave(group, dim=1) if group > 1 else key
    v = value.repeat_interleave(group, dim=1) if group > 1 else value
    scale = D ** -0.5 if scaling is None else float(scaling)
    if method == "dense" or module.layer_idx < cfg.dense_layers:
        out = kernels.attention(query, k, v, causal=True, scale=scale)
    else:
        blocks = methods.select(method, query, k, cfg, generator)
        out = kernels.block_sparse_attention(query, k, v, blocks, block_q=cfg.block_q, block_k=cfg.block_k,
                                             causal=True, scale=scale)
    return out.transpose(1, 2).contiguous(), None


def register(method: str, cfg: HiPConfig, generator: torch.Generator | None = None) -> str:
    """Register :func:`pruned_attention` bound to `method` and `cfg` with transformers; returns its name."""
    from transformers import AttentionInterface

    if method not in methods.METHODS:
        raise ValueError(f"unknown method {method!r} (known: {', '.join(methods.METHODS)})")
    digest = hashlib.sha1(repr((method, cfg, id(generator))).encode()).hexdigest()[:10]
    name = f"hip_{method}_{digest}"  # no '/' or ':' (transformers reads those as hub kernels)
    AttentionInterface.register(name, functools.partial(pruned_attention, method=method, cfg=cfg,
                                                        generator=generator))
    return name


def patch(model, method: str, cfg: HiPConfig, generator: torch.Generator | None = None):
    """Switch every attention layer of `model` to `method` (in place; returns the model)."""
    model.set_attn_implementation(register(method, cfg, generator))
    return model


def load(path, *, dtype: str = "float32", device: str | None = None):
    """The model (eval mode) and tokenizer of a local Hugging Face directory; errors name ``hip.pretrained``."""
    return load_causal_lm(path, dtype=dtype, key=f"{KEY}[].path", device=device)


# ---- long documents: mean NLL per method and length --------------------------------------------
def read_documents(path) -> str:
    """The user's long documents (one UTF-8 text file); errors name the file and the config key."""
    path = Path(path) if path is not None else None
    if path is None or not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (set hip.pretrained_eval.documents to a UTF-8 text file)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 at byte {e.start} (hip.pretrained_eval.documents)") from None
    if not text.strip():
        raise ValueError(f"{path}: empty (hip.pretrained_eval.documents)")
    return text


@torch.no_grad()
def window_nll(model, ids: torch.Tensor) -> torch.Tensor:
    """-log p(ids[t] | ids[:t]) for t = 1 .. T-1 of one window ids (T,), by teacher forcing."""
    logits = model(input_ids=ids[None], use_cache=False).logits[0, :-1].float()
    return torch.nn.functional.cross_entropy(logits, ids[1:], reduction="none")


def document_nll(model, tokens: torch.Tensor, T: int, max_windows: int, far_from: int) -> list[dict]:
    """Mean NLL of each of up to `max_windows` consecutive non-overlapping windows of T tokens, over all
    positions and over positions >= `far_from` (those whose keys the methods prune)."""
    rows = []
    for w in range(min(max_windows, len(tokens) // T)):
        nll = window_nll(model, tokens[w * T:(w + 1) * T])
        rows.append({"window": w, "nll": float(nll.mean()), "nll_far": float(nll[far_from - 1:].mean())})
    return rows


# ---- passkey ------------------------------------------------------------------------------------
def passkey_prompt(tokenizer, length: int, depth: float, key: str) -> tuple[str, float]:
    """The passkey prompt of about `length` tokens with the needle after a share `depth` of the filler
    repetitions; returns the text and the needle's actual depth (its filler repetitions before / all)."""
    count = lambda s: len(tokenizer(s, add_special_tokens=False).input_ids)  # noqa: E731
    fixed = count(PASSKEY_INTRO + NEEDLE.format(key=key) + QUESTION)
    n = max((length - fixed) // max(count(FILLER), 1), 1)
    before = int(round(depth * n))
    text = PASSKEY_INTRO + FILLER * before + NEEDLE.format(key=key) + FILLER * (n - before) + QUESTION
    return text, before / n


@torch.no_grad()
def greedy(model, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """`steps` tokens of greedy decoding after ids (T,), each step a full prefill (no KV cache)."""
    for _ in range(steps):
        nxt = model(input_ids=ids[None], use_cache=False).logits[0, -1].argmax()
        ids = torch.cat([ids, nxt[None]])
    return ids


def answer_of(text: str) -> str:
    """The first run of digits in a decoded answer ('' if none)."""
    found = re.search(r"\d+", text)
    return found.group(0) if found else ""


def passkey(model, tokenizer, length: int, depth: float, key: str, device) -> dict:
    text, actual = passkey_prompt(tokenizer, length, depth, key)
    ids = torch.tensor(tokenizer(text).input_ids, device=device)
    out = greedy(model, ids, steps=KEY_DIGITS + 3)
    answer = answer_of(tokenizer.decode(out[len(ids):]))
    return {"tokens": len(ids), "actual_depth": actual, "key": key, "answer": answer, "correct": float(answer == key)}


# ---- multi-key retrieval (RULER's niah_multikey) ----------------------------------------------------
def draw_needles(rng: np.random.Generator, needles: int, depth: float) -> list[dict]:
    """`needles` distinct (key word, 7-digit value, depth) needles, the asked one first at `depth`; the
    distractors' depths are spread: one drawn uniformly in each of needles - 1 equal strata of [0, 1], so they
    neither cluster nor all sit at the asked one (RULER draws its distractor positions at random too)."""
    words = rng.choice(len(KEY_WORDS), size=needles, replace=False)
    values = rng.choice(9 * 10 ** (VALUE_DIGITS - 1), size=needles, replace=False) + 10 ** (VALUE_DIGITS - 1)
    strata = needles - 1
    depths = [float(depth)] + [float((i + rng.random()) / strata) for i in range(strata)]
    return [{"key": KEY_WORDS[w], "value": str(v), "depth": d} for w, v, d in zip(words, values, depths)]


def multikey_prompt(tokenizer, length: int, needles: list[dict]) -> tuple[str, list[float]]:
    """The multi-key prompt of about `length` tokens asking for ``needles[0]``'s value: each needle after a share
    of its ``depth`` of the filler repetitions (needles at the same place keep their list order); returns the text
    and each needle's actual depth (its filler repetitions before / all)."""
    count = lambda s: len(tokenizer(s, add_special_tokens=False).input_ids)  # noqa: E731
    sentences = [MULTIKEY_NEEDLE.format(key=n["key"], value=n["value"]) for n in needles]
    question = MULTIKEY_QUESTION.format(key=needles[0]["key"])
    fixed = count(MULTIKEY_INTRO + "".join(sentences) + question)
    if fixed >= length:
        raise ValueError(f"hip.pretrained_eval.multikey.lengths: {length} tokens cannot hold the prompt's {fixed} "
                         f"tokens of intro, {len(needles)} needles and question")
    n = max((length - fixed) // max(count(FILLER), 1), 1)
    before = [int(round(nd["depth"] * n)) for nd in needles]
    order = sorted(range(len(needles)), key=lambda i: (before[i], i))
    parts, placed = [MULTIKEY_INTRO], 0
    for i in order:
        parts += [FILLER * (before[i] - placed), sentences[i]]
        placed = before[i]
    parts += [FILLER * (n - placed), question]
    return "".join(parts), [b / n for b in before]


def multikey(model, tokenizer, length: int, needles: list[dict], device) -> dict:
    """One multi-key prompt decoded greedily; right when the answer's first digits are the asked value."""
    text, actual = multikey_prompt(tokenizer, length, needles)
    ids = torch.tensor(tokenizer(text).input_ids, device=device)
    out = greedy(model, ids, steps=VALUE_DIGITS + 3)
    answer = answer_of(tokenizer.decode(out[len(ids):]))
    asked = needles[0]
    return {"tokens": len(ids), "actual_depth": actual[0], "key": asked["key"], "value": asked["value"],
            "needles": len(needles), "answer": answer, "correct": float(answer == asked["value"])}


def needle_sets(ev) -> dict[tuple[float, int], list[dict]]:
    """{(depth, prompt): needles} of ``ev.multikey``, drawn once from ``ev.seed`` (a stream of its own, so the
    passkeys stay those of earlier runs) and shared by every method and length: the prompts are paired."""
    mk = ev.multikey
    rng = np.random.default_rng([ev.seed, 1])
    return {(d, i): draw_needles(rng, mk.needles, d) for d in mk.depths for i in range(mk.prompts)}


# ---- each method against dense: paired bootstrap over prompts ----------------------------------
ACCURACY_TASKS = ("passkey", "multikey")
PAIR_ON = ["depth", "prompt"]  # a prompt of a task and length: the same text for every method


def accuracy_vs_dense(correct, dense_correct, *, resamples: int, seed: int,
                      level: float = LEVEL) -> tuple[float, float, float]:
    """(mean(correct - dense_correct), low, high): the accuracy difference on the same prompts with its percentile
    bootstrap interval, prompts resampled in pairs (:func:`papers.common.claims.bootstrap_interval`). Pairing
    removes the prompts' own difficulty, which both arms share, from the interval."""
    diff = np.asarray(correct, float) - np.asarray(dense_correct, float)
    if diff.ndim != 1 or diff.size == 0:
        raise ValueError(f"accuracy_vs_dense needs two equal-length non-empty vectors, got {np.shape(correct)} and "
                         f"{np.shape(dense_correct)}")
    return bootstrap_interval(np.mean, diff, level=level, n_boot=resamples, seed=seed)


def with_intervals(df: pd.DataFrame, *, resamples: int, seed: int) -> pd.DataFrame:
    """`df` with diff_vs_dense, ci_low, ci_high on the passkey and multikey rows: per (task, method, length), the
    method's accuracy minus dense's on the same prompts and its 95% paired bootstrap interval (repeated on each row
    of the group; NaN on the document rows)."""
    stats = []
    for (task, length), g in df[df.task.isin(ACCURACY_TASKS)].groupby(["task", "length"]):
        wide = g.pivot_table(index=PAIR_ON, columns="method", values="correct")
        for method in wide.columns:
            diff, lo, hi = accuracy_vs_dense(wide[method], wide["dense"], resamples=resamples, seed=seed)
            stats.append({"task": task, "length": length, "method": method, "diff_vs_dense": diff, "ci_low": lo,
                          "ci_high": hi})
    cols = ["task", "length", "method"]
    return df.merge(pd.DataFrame(stats, columns=[*cols, "diff_vs_dense", "ci_low", "ci_high"]), on=cols, how="left")


# ---- the stage ------------------------------------------------------------------------------------
def retrieval_rows(model, tokenizer, ev, T: int, keys: list[str], needles: dict, device) -> list[dict]:
    """The passkey rows (``ev.depths`` x `keys`, if T is a passkey length) and multi-key rows (`needles`, if T is a
    multi-key length) of the model as patched now, at length T."""
    rows = []
    if T in ev.lengths:
        rows += [{"task": "passkey", "length": T, "depth": d, "prompt": i,
                  **passkey(model, tokenizer, T, d, key, device)} for d in ev.depths for i, key in enumerate(keys)]
    if T in ev.multikey.lengths:
        rows += [{"task": "multikey", "length": T, "depth": d, "prompt": i,
                  **multikey(model, tokenizer, T, nd, device)} for (d, i), nd in needles.items()]
    return rows


def evaluate(*, cfg, model_name, table):
    """Every method (dense, hip, oracle, random, window) on one pretrained LM: mean NLL of the user's long
    documents at each length, passkey accuracy per length and depth (``pretrained_eval.prompts`` keys each), and
    multi-key accuracy per ``multikey`` length and depth; one table, a row per (task, method, length, depth or
    window, prompt), the accuracy rows with each method's paired difference to dense (:func:`with_intervals`)."""
    from papers.hip.params import parse

    p = parse(cfg)
    spec, ev, hip_cfg, device = p.pretrained_model(model_name), p.pretrained_eval, p.hip, p.device
    text = read_documents(ev.documents)  # before the model loads: a bad path fails first
    model, tokenizer = load(spec["path"], dtype=spec.get("dtype", "float32"), device=device)
    n_layer = model.config.num_hidden_layers
    if hip_cfg.dense_layers >= n_layer:
        raise ValueError(f"hip.hip.dense_layers ({hip_cfg.dense_layers}) leaves no pruned layer of {model_name} "
                         f"({n_layer} layers)")
    log.info("%s: %d layers from %s on %s", model_name, n_layer, spec["path"], device)
    tokens = torch.tensor(tokenizer(text, add_special_tokens=False).input_ids, device=device)
    if len(tokens) < max(ev.lengths):
        raise ValueError(f"{ev.documents}: {len(tokens)} tokens, fewer than the longest of "
                         f"hip.pretrained_eval.lengths ({max(ev.lengths)})")
    rng = np.random.default_rng(ev.seed)
    keys = [str(k) for k in rng.integers(10 ** (KEY_DIGITS - 1), 10 ** KEY_DIGITS, size=ev.prompts)]
    needles = needle_sets(ev)
    far_from = hip_cfg.budget + hip_cfg.block_q  # positions past sink + window + mask_k + their own block
    rows = []
    for method in methods.METHODS:
        patch(model, method, hip_cfg, torch.Generator().manual_seed(ev.seed))
        for T in sorted(set(ev.lengths) | set(ev.multikey.lengths)):
            if T in ev.lengths:
                rows += [{"task": "documents", "method": method, "length": T, "depth": np.nan, **r}
                         for r in document_nll(model, tokens, T, ev.windows, far_from)]
            rows += [{"method": method, **r} for r in retrieval_rows(model, tokenizer, ev, T, keys, needles, device)]
            log.info("%s %s T=%d done", model_name, method, T)
    df = with_intervals(pd.DataFrame(rows), resamples=ev.bootstrap, seed=ev.seed)
    write_parquet(df.assign(model=model_name, n_layer=n_layer, dense_layers=hip_cfg.dense_layers,
                            budget=hip_cfg.budget), table)
