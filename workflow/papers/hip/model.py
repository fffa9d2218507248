"""A tiny byte-level causal transformer with rotary positions, whose attention is pluggable.

HiP is training-free (the paper's Sec. 3): a model is trained with dense attention and its
attention is then swapped, layer by layer, for a pruned one. So every block takes an
``attend(layer, q, k, v) -> y`` callable; :func:`dense` (``kernels.attention``, causal) is the
default and the one training uses; :mod:`papers.hip.methods` supplies HiP and its baselines.

Rotary position embeddings (RoPE, Su et al. 2021), as in the LLaMA models the paper prunes:
``q . k`` then depends on the positions only through their difference, and nothing in the
model is tied to a maximum length (we still evaluate only at trained lengths; see the report).

Read bottom-up: :class:`GPT` (embedding, blocks, tied head), :class:`Block` (pre-norm attention
and MLP), :class:`CausalSelfAttention`, :func:`rope`. Shapes: B batch, T time, C = n_embd,
H heads, D = C / H head size, V = 256 byte values.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import kernels
from papers.common import checkpoint

Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 256  # bytes
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    rope_base: float = 10000.0  # RoPE's theta (LLaMA: 10000)
    smear_keys: bool = False  # mix each key with the previous position's (Olsson et al. 2022's smeared keys)
    smear_from: int = 0  # ... in layers smear_from and up only (keep the lookup out of the dense first layers)


def dense(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + causal mask) v by ``kernels.attention``; (B, H, T, D) each."""
    return kernels.attention(q, k, v, causal=True)


def rope(x: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate channel pairs (i, i + D/2) of x (B, H, T, D) by angle t * base^(-2i/D) at position t."""
    T, D = x.shape[-2], x.shape[-1]
    inv_freq = base ** (-torch.arange(0, D, 2, dtype=torch.float32, device=x.device) / D)  # (D/2,)
    angle = torch.arange(T, dtype=torch.float32, device=x.device)[:, None] * inv_freq  # (T, D/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "n_embd must be a multiple of n_head"
        self.layer, self.n_head, self.rope_base = layer, cfg.n_head, cfg.rope_base
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        # smeared keys: k_t <- s k_t + (1 - s) k_{t-1}, s = sigmoid(a) learned per head (a = 0: s = 1/2)
        self.smear = nn.Parameter(torch.zeros(cfg.n_head, 1, 1)) if cfg.smear_keys and layer >= cfg.smear_from else None

    def forward(self, x: torch.Tensor, attend: Attend) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = (z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        if self.smear is not None:  # a key then says which byte precedes it: one layer can match "a b ... a" -> b
            s = torch.sigmoid(self.smear)
            k = s * k + (1 - s) * F.pad(k, (0, 0, 1, 0))[:, :, :-1]  # k_{-1} = 0
        q, k = rope(q, self.rope_base), rope(k, self.rope_base)
        y = attend(self.layer, q, k, v)  # (B, H, T, D)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(cfg.n_embd), CausalSelfAttention(cfg, layer)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x: torch.Tensor, attend: Attend) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), attend)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Byte embedding, n_layer pre-norm blocks with RoPE attention, final LayerNorm, tied head."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        for name, p in self.named_parameters():
            if p.dim() == 2:  # GPT-2 init, residual projections scaled by depth
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith(("c_proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor, attend: Attend = dense) -> torch.Tensor:
        """Next-token logits (B, T, V) for byte ids idx (B, T)."""
        x = self.wte(idx)  # (B, T, C)
        for block in self.blocks:
            x = block(x, attend)
        return self.lm_head(self.ln_f(x))


def token_nll(model: GPT, seq: torch.Tensor, attend: Attend = dense) -> torch.Tensor:
    """-log p(seq[:, t] | seq[:, :t]) for t = 1 .. T-1, shape (B, T-1), by teacher forcing."""
    logits = model(seq[:, :-1], attend)  # (B, T-1, V)
    return F.cross_entropy(logits.float().transpose(1, 2), seq[:, 1:], reduction="none")


def save(model: GPT, path: str | Path, **extra) -> None:
    """A checkpoint: the config, the weights and whatever the caller adds (papers.common.checkpoint)."""
    checkpoint.save(model, path, **extra)


def load(path: str | Path) -> tuple[GPT, dict]:
    """The model of a checkpoint written by :func:`save` (in eval mode), and the whole checkpoint."""
    model, ckpt = checkpoint.load(path, lambda cfg: GPT(GPTConfig(**cfg)))
    return model.eval(), ckpt
