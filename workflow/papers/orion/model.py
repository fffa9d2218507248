"""A tiny causal transformer (GPT) whose attention is ``kernels.attention``, with a hook on the residual stream.

The design follows papers/common/gpt.py (nanoGPT's layout: pre-norm blocks, a head tied to the token
embedding) with rotary position embeddings (Su et al. 2021) instead of learned ones, as in Pythia and Llama,
the paper's main model families; what this paper adds is the hook. ``GPT.forward(idx, hook=...)`` calls
``hook(layer, x)`` on the residual stream x (B, T, C) after the embeddings (layer 0) and after each block
(layers 1 .. n_layer) and continues with what it returns, so one function reads the stream
(:func:`residuals`) and another overwrites it at chosen tokens (:func:`patched_logits`): the request-patching
of the paper (official code: causal_checker/hf_hooks.py, ``residual_steam_hook_fn``, which writes the output
of a block at the last token).

Shapes: B batch, T time, C = n_embd channels, H heads, D = C / H head size, V vocabulary, L = n_layer.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

import kernels
from papers.common import checkpoint, gpt

Hook = Callable[[int, torch.Tensor], torch.Tensor]


@dataclasses.dataclass(frozen=True)
class GPTConfig(gpt.GPTConfig):
    """papers.common.gpt's config, kv_window (each key and value is a learned per-channel mix of the keys
    (values) of its own and the kv_window - 1 previous positions; 1: plain attention) and request_markers (the
    token ids that open a request; non-empty: the routed model of :func:`routing_masks`)."""

    kv_window: int = 1
    value_layers: int = -1  # values mixed too in the first value_layers blocks (-1: every block, 0: keys only)
    request_markers: tuple = ()  # token ids opening a request; non-empty: block 1 reads the request alone, 2.. not it

    def windows_values(self, layer: int) -> bool:
        """Whether block `layer` (0-based) mixes its values as well as its keys."""
        return self.kv_window > 1 and (self.value_layers < 0 or layer < self.value_layers)

    def value_reach_after(self, layer: int) -> int:
        """How many positions before its own the last token reads through value windows in the blocks that run
        after the residual stream at `layer` (0 = embeddings .. n_layer): the positions a last-token patch at
        that layer leaves unpatched and still read, whatever the patched state's query (0: none)."""
        return self.kv_window - 1 if any(self.windows_values(i) for i in range(layer, self.n_layer)) else 0


def _request_start(idx: torch.Tensor, markers: torch.Tensor) -> torch.Tensor:
    """(..., T): the position of the latest request-opening token (one of `markers`) at or before each token, -1
    before any."""
    pos = torch.arange(idx.shape[-1], device=idx.device)
    return torch.where(torch.isin(idx, markers), pos, -1).cummax(-1).values


def request_blind_mask(idx: torch.Tensor, markers: torch.Tensor) -> torch.Tensor:
    """(..., T, T) bool, True where query t may attend key s: s <= t, and s outside [start(t), t), where start(t)
    is the position of the latest request-opening token (one of `markers`) at or before t (no such token: no
    restriction). idx (..., T) token ids. The mask of a routed model's blocks after the first (:func:`routing_masks`)."""
    T = idx.shape[-1]
    pos = torch.arange(T, device=idx.device)
    start = _request_start(idx, markers)
    causal = pos[None, :] <= pos[:, None]  # (T, T): [t, s]
    own_request = (pos[None, :] >= start[..., :, None]) & (pos[None, :] < pos[:, None]) & (start[..., :, None] >= 0)
    return causal & ~own_request


def request_only_mask(idx: torch.Tensor, markers: torch.Tensor) -> torch.Tensor:
    """(..., T, T) bool, True where query t may attend key s: s <= t, and s >= start(t) for a token inside a request
    (from its opening token on; :func:`request_blind_mask`); before any request, causal. The mask of a routed
    model's first block: a request's tokens read their own request and nothing of the context."""
    T = idx.shape[-1]
    pos = torch.arange(T, device=idx.device)
    start = _request_start(idx, markers)
    return (pos[None, :] <= pos[:, None]) & (pos[None, :] >= start[..., :, None])


def routing_masks(idx: torch.Tensor, markers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention masks of a routed model: (:func:`request_only_mask` for block 1, :func:`request_blind_mask`
    for the blocks after it), each (..., T, T).

    The positive control of claims (a) and (b): in block 1 the last token reads its own request and nothing of the
    context; in the blocks after it, the context and no token of its request. So after block 1 the last token's
    state is a function of the request's tokens alone (rotary positions enter through offsets only), and the
    answer must be retrieved from the context afterwards, through that state: request-patching at layer 1 gives
    the output of (C2, R1) by construction, R1(C2), in any model that does the task; it is the setting where the
    paper's decomposition is planted. (A first version masked the blocks after the first only: its block 1 read
    the context too, gathered the values, and patching at layer 1 carried C1's answer, R1(C1).)"""
    return request_only_mask(idx, markers), request_blind_mask(idx, markers)


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean attention mask (True = attend) as the additive one kernels.attention makes of it (0 / -inf): made
    once per forward pass and passed to every block (GPT.forward, and papers.orion.ensemble's stacked passes)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def causal_window(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """y_t = sum_j w[:, j] * x_{t - j} over j < K (zero before the start), per channel: x (..., T, C), w (..., C, K)
    (broadcast against x's leading axes).

    The short causal convolution over keys and values: Olsson et al. (2022)'s smeared key, k_t <- a k_t +
    (1 - a) k_{t-1}, widened to K positions and applied to the values too. Why the models need it: in
    three of our families the key sits 2-3 tokens from its value ("alpha : X", "the king met X", "X = Circle"),
    a match a plain attention layer cannot make on one token; without the window those families did not pass the
    accuracy gate within the default budget (issue 20; the report gives the runs). The query is left as it is, so
    a query reads only its own residual stream; the values are not: through them the last token reads the tokens
    just before it, which request-patching leaves unpatched, whatever the patched query (GPTConfig.value_reach_after;
    the claims' premise gate asks that no such window runs after the patched layer: keys only, value_layers 0)."""
    T = x.shape[-2]
    y = x * w[..., 0]
    for j in range(1, min(w.shape[-1], T)):  # tap j: x shifted j positions later, zeros in front
        y = y + F.pad(x[..., :T - j, :] * w[..., j], (0, 0, j, 0))
    return y


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs (x_i, x_{i + D/2}) of x (B, H, T, D) by angle t * theta_i (RoFormer, Eq. 34)."""
    x1, x2 = x.chunk(2, dim=-1)  # 2 x (B, H, T, D/2)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def rotary_angles(T: int, D: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of t * base^(-2i/D) for t < T, i < D/2: two (T, D/2) tables."""
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)  # (D/2,)
    angle = torch.arange(T, dtype=torch.float32)[:, None] * theta  # (T, D/2)
    return angle.cos(), angle.sin()


class CausalSelfAttention(gpt.CausalSelfAttention):
    """papers.common.gpt's attention (same weights) with rotary positions applied to q and k, and keys and values
    mixed over the last cfg.kv_window positions (:func:`causal_window`; weights `kv_mix` (2, C, K), initialised
    to the plain attention's: 1 on the current position, 0 on the others)."""

    def __init__(self, cfg: GPTConfig, layer: int = 0):
        super().__init__(cfg)
        # routed model: which of routing_masks this block uses (0: block 1, 1: the blocks after it)
        self.routing = (0 if layer == 0 else 1) if cfg.request_markers else None
        self.kv_mix = None
        if cfg.kv_window > 1:
            w = torch.zeros(2, cfg.n_embd, cfg.kv_window)
            w[:, :, 0] = 1.0
            self.kv_mix = nn.Parameter(w)
        self.window_values = cfg.windows_values(layer)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                masks: tuple | None = None) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C); `masks`, :func:`routing_masks` ((B, T, T) each, boolean, or additive (B, 1, T,
        T), 0 where a query may attend and -inf elsewhere, as GPT.forward passes them), replace the causal mask in a
        routed model."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        if self.kv_mix is not None:
            k = causal_window(k, self.kv_mix[0])
            if self.window_values:
                v = causal_window(v, self.kv_mix[1])
        q, k, v = (z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)  # positions enter through q.k only
        if self.routing is not None:  # the masks hold causality too (and keep the diagonal, so no row is empty)
            bias = masks[self.routing]
            y = kernels.attention(q, k, v, bias=bias[:, None] if bias.dtype == torch.bool else bias)  # (B, H, T, D)
        else:
            y = kernels.attention(q, k, v, causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int = 0):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(cfg.n_embd), CausalSelfAttention(cfg, layer)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                masks: tuple | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cos, sin, masks)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """A token embedding, n_layer pre-norm blocks with rotary attention, a final LayerNorm, a tied head."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        cos, sin = rotary_angles(cfg.block_size, cfg.n_embd // cfg.n_head)
        self.register_buffer("cos", cos, persistent=False)  # (block_size, D/2)
        self.register_buffer("sin", sin, persistent=False)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scaled init of the residual projections
            if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    _init_weights = staticmethod(gpt.GPT._init_weights)  # GPT-2's: N(0, 0.02) weights, zero biases

    def forward(self, idx: torch.Tensor, hook: Hook | None = None, at: torch.Tensor | None = None,
                start: tuple[int, torch.Tensor] | None = None) -> torch.Tensor:
        """Next-token logits (B, T, V) for token ids idx (B, T); `hook(layer, x)` sees and may replace
        the residual stream x (B, T, C) at layers 0 (embeddings) .. n_layer (last block's output). With `at` (B,
        positions), the logits (B, V) at token at[b] of each sequence only (the head, position by position, is
        not run where nothing reads it: the analysis reads the last token). With `start` (layer, x): x (B, T, C) is
        the residual stream at that layer of an earlier pass on idx (:func:`streams`), and the pass goes on from
        there, the hook called from that layer on (the blocks before it would compute x again, op for op)."""
        B, T = idx.shape
        assert T <= self.cfg.block_size, f"length {T} exceeds block_size {self.cfg.block_size}"
        first, x = start if start is not None else (0, self.wte(idx))  # x (B, T, C)
        if hook is not None:
            x = hook(first, x)
        cos, sin = self.cos[:T], self.sin[:T]
        masks = None
        if self.cfg.request_markers:  # 2 x (B, 1, T, T), additive (0 / -inf), as kernels.attention makes them
            masks = tuple(additive_mask(m[:, None], x.dtype)
                          for m in routing_masks(idx, torch.tensor(self.cfg.request_markers, device=idx.device)))
        for layer, block in enumerate(self.blocks, start=1):
            if layer <= first:
                continue
            x = block(x, cos, sin, masks)
            if hook is not None:
                x = hook(layer, x)
        if at is not None:
            x = x[torch.arange(B, device=x.device), at]  # (B, C)
        return self.lm_head(self.ln_f(x))  # (B, T, V), or (B, V) with `at`


# ---- reading and overwriting the residual stream ------------------------------------------------
@torch.no_grad()
def residuals(model: GPT, idx: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """The residual stream at token pos[b] of each sequence, at every layer: (L + 1, B, C)."""
    rows, out = torch.arange(len(pos)), []

    def read(layer, x):
        out.append(x[rows, pos].clone())  # (B, C)
        return x

    model(idx, hook=read, at=pos)  # the head at pos only: nothing reads its logits
    return torch.stack(out)


@torch.no_grad()
def streams(model: GPT, idx: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream (B, T, C) at every layer 0 .. n_layer of an unpatched pass: what :func:`patched_logits`
    resumes from (`clean`)."""
    out = []

    def read(layer, x):
        out.append(x)
        return x

    model(idx, hook=read, at=torch.zeros(idx.shape[0], dtype=torch.long))
    return out


@torch.no_grad()
def patched_logits(model: GPT, idx: torch.Tensor, pos: torch.Tensor, layer: int, vectors: torch.Tensor,
                   clean: list[torch.Tensor] | None = None) -> torch.Tensor:
    """Logits (B, V) at token pos[b] when the residual stream at that token, at `layer`, is overwritten by
    vectors[b] (B, C) and the forward pass continues from there (the paper's request-patching). With `clean`
    (:func:`streams` of idx), the pass starts at `layer` from the clean stream there (up to the patch a patched
    pass is the clean one: the same numbers, without running the blocks before the patch again)."""
    rows = torch.arange(idx.shape[0])

    def write(at, x):
        if at == layer:
            x = x.clone()
            x[rows, pos] = vectors
        return x

    if clean is None:
        return model(idx, hook=write, at=pos)
    return model(idx, hook=write, at=pos, start=(layer, clean[layer]))


@torch.no_grad()
def last_logits(model: GPT, idx: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Logits (B, V) at token pos[b] of each (right-padded) sequence."""
    return model(idx, at=pos)


@torch.no_grad()
def last_token_attention(model: GPT, idx: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """The attention weights of token pos[b]'s query in every block and head: (L, B, H, T) (each row sums to 1 over
    the positions <= pos[b]). Recomputed from the residual stream entering each block, with the block's own
    weights, key window, rotary positions and mask (causal, or a routed model's :func:`routing_masks`), as
    CausalSelfAttention.forward does; what the last token reads where (the report's mechanism)."""
    streams = []

    def read(layer, x):
        streams.append(x)
        return x

    model(idx, hook=read, at=pos)
    B, T = idx.shape
    rows = torch.arange(B)
    masks = routing_masks(idx, torch.tensor(model.cfg.request_markers, device=idx.device)) \
        if model.cfg.request_markers else None
    out = []
    for i, block in enumerate(model.blocks):
        attn = block.attn
        C, H = model.cfg.n_embd, attn.n_head
        q, k, _ = attn.c_attn(block.ln_1(streams[i])).split(C, dim=2)  # the stream entering block i + 1
        if attn.kv_mix is not None:
            k = causal_window(k, attn.kv_mix[0])
        q, k = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k))  # (B, H, T, D)
        q, k = rotary(q, model.cos[:T], model.sin[:T]), rotary(k, model.cos[:T], model.sin[:T])
        scores = (q[rows, :, pos] [:, :, None, :] @ k.transpose(-1, -2)).squeeze(2) / math.sqrt(C // H)  # (B, H, T)
        allowed = torch.arange(T)[None, :] <= pos[:, None]  # (B, T)
        if masks is not None:
            allowed = masks[0 if i == 0 else 1][rows, pos]  # (B, T): the row of the last token
        out.append(torch.softmax(scores.masked_fill(~allowed[:, None, :], float("-inf")), dim=-1))
    return torch.stack(out)


def save(model: GPT, path: str | Path, **extra) -> None:
    """A checkpoint: the config, the weights and whatever the caller adds (papers.common.checkpoint)."""
    checkpoint.save(model, path, **extra)


def load(path: str | Path) -> tuple[GPT, dict]:
    """The model of a checkpoint written by :func:`save` (in eval mode), and the whole checkpoint."""
    model, ckpt = checkpoint.load(path, lambda cfg: GPT(GPTConfig(**cfg)))
    return model.eval(), ckpt
