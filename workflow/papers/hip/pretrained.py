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


# ---- the stage ------------------------------------------------------------------------------------
def evaluate(*, cfg, model_name, table):
    """Every method (dense, hip, oracle, random, window) on one pretrained LM: mean NLL of the user's long
    documents at each length, and passkey accuracy per length and depth (``pretrained_eval.prompts`` keys each);
    one table, a row per (task, method, length, depth or window, prompt)."""
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
    far_from = hip_cfg.budget + hip_cfg.block_q  # positions past sink + window + mask_k + their own block
    rows = []
    for method in methods.METHODS:
        patch(model, method, hip_cfg, torch.Generator().manual_seed(ev.seed))
        for T in ev.lengths:
            for r in document_nll(model, tokens, T, ev.windows, far_from):
                rows.append({"task": "documents", "method": method, "length": T, "depth": np.nan, **r})
            for depth in ev.depths:
                for i, key in enumerate(keys):
                    rows.append({"task": "passkey", "method": method, "length": T, "depth": depth, "prompt": i,
                                 **passkey(model, tokenizer, T, depth, key, device)})
            log.info("%s %s T=%d done", model_name, method, T)
    write_parquet(pd.DataFrame(rows).assign(model=model_name, n_layer=n_layer, dense_layers=hip_cfg.dense_layers,
                                            budget=hip_cfg.budget), table)
