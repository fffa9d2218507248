"""A tiny causal transformer (GPT), nanoGPT-style, whose attention is ``kernels.attention``.

Shared: papers.sharpening (a character-level LM) and papers.eagle (its LM's blocks) import it; nothing here
knows about either. Read bottom-up: :class:`GPT` (embeddings,
blocks, tied head), :class:`Block` (pre-norm attention and MLP), :class:`CausalSelfAttention`; then the
three things a caller does with a causal LM: :func:`token_logprobs` (teacher forcing),
:func:`generate` (ancestral sampling or greedy decoding) and :func:`save` / :func:`load`.

Shapes: B batch, T time, C = n_embd channels, H heads, D = C / H head size, V vocabulary.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import kernels
from papers.common import checkpoint


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    block_size: int  # the longest input the position embedding covers
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64


class CausalSelfAttention(nn.Module):
    """softmax(q k^T / sqrt(D) + causal mask) v per head (Vaswani et al. 2017), by ``kernels.attention``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "n_embd must be a multiple of n_head"
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor, cache: dict | None = None) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C). With a `cache` (generation), the keys and values of earlier positions
        are kept in it and these T tokens attend to them too (the causal mask is bottom-right aligned)."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = (z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)  # (B, H, T_past + T, D)
            cache["k"], cache["v"] = k, v
        y = kernels.attention(q, k, v, causal=True)  # (B, H, T, D)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(cfg.n_embd), CausalSelfAttention(cfg)
        self.ln_2, self.mlp = nn.LayerNorm(cfg.n_embd), MLP(cfg)

    def forward(self, x: torch.Tensor, cache: dict | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token and learned position embeddings, n_layer pre-norm blocks, a final LayerNorm and a head tied
    to the token embedding (GPT-2's layout, as in nanoGPT)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, caches: list[dict] | None = None) -> torch.Tensor:
        """Next-token logits (B, T, V) for token ids idx (B, T). `caches` (one dict per block, from
        :meth:`new_caches`) holds the keys and values of the tokens already seen: idx then continues them."""
        B, T = idx.shape
        start = caches[0]["k"].shape[2] if caches and "k" in caches[0] else 0
        assert start + T <= self.cfg.block_size, f"position {start + T} exceeds block_size {self.cfg.block_size}"
        x = self.wte(idx) + self.wpe(torch.arange(start, start + T, device=idx.device))  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.lm_head(self.ln_f(x))  # (B, T, V)

    def new_caches(self) -> list[dict]:
        return [{} for _ in self.blocks]


def token_logprobs(model: GPT, seq: torch.Tensor) -> torch.Tensor:
    """log p(seq[:, t] | seq[:, :t]) for t = 1 .. T-1, shape (B, T-1), by teacher forcing."""
    logits = model(seq[:, :-1])  # (B, T-1, V)
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, seq[:, 1:, None]).squeeze(-1)


@torch.no_grad()
def generate(model: GPT, prefix: torch.Tensor, new_tokens: int, *, greedy: bool = False,
             temperature: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Extend prefix (B, T0) by `new_tokens` tokens: ancestral sampling from softmax(logits / temperature),
    or the argmax at each step (greedy). A key-value cache makes each new token cost one position.
    Returns (B, T0 + new_tokens); T0 + new_tokens - 1 must not exceed block_size."""
    caches = model.new_caches()
    seq, step_in = prefix, prefix
    for _ in range(new_tokens):
        logits = model(step_in, caches)[:, -1].float()  # (B, V)
        if greedy:
            nxt = logits.argmax(-1, keepdim=True)
        else:
            nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)  # (B, 1)
        seq, step_in = torch.cat([seq, nxt], dim=1), nxt
    return seq


def save(model: GPT, path: str | Path, **extra) -> None:
    """A checkpoint: the config, the weights and whatever the caller adds (papers.common.checkpoint)."""
    checkpoint.save(model, path, **extra)


def load(path: str | Path) -> tuple[GPT, dict]:
    """The model of a checkpoint written by :func:`save` and the whole checkpoint."""
    model, ckpt = checkpoint.load(path, lambda cfg: GPT(GPTConfig(**cfg)))
    return model, ckpt
