"""The network of P17 profilebfn: a small bidirectional (ESM-style) transformer over the flow's theta.

The official model (bfn_model/bfn_roberta.py) is ESM-2 / RoBERTa whose token embedding is replaced by
a linear map of theta (B, L, K) plus a linear map of a Gaussian basis of t (``BFNInputLayer`` with
``time_dim`` basis functions on [0, 1]); it outputs logits over the residues at every position.
Ours is the same at a small size: pre-norm encoder layers without dropout and sinusoidal positions
(ESM-2 uses rotary ones), so that one model serves families of any length. Attention is the project's op
(``kernels.attention``: Triton on CUDA, the torch reference or PyTorch's fused CPU attention elsewhere).
"""
from __future__ import annotations

import math

import torch
from torch import nn

import kernels


class TimeBasis(nn.Module):
    """t (B,) -> (B, time_dim): Gaussian bumps exp(-(t - c_k)^2 / (2 w^2)) at centres c_k on [0, 1]
    (the official BFNInputLayer's gaussian_basis)."""

    def __init__(self, time_dim: int):
        super().__init__()
        self.register_buffer("centres", torch.linspace(0.0, 1.0, time_dim))
        self.width = 1.0 / max(time_dim - 1, 1)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return torch.exp(-((t[:, None] - self.centres) ** 2) / (2 * self.width ** 2))


def sinusoidal_positions(length: int, d_model: int) -> torch.Tensor:
    """(L, d_model) fixed positions of Vaswani et al. (2017), Sec. 3.5."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    out = torch.zeros(length, d_model)
    out[:, 0::2] = torch.sin(pos * freq)
    out[:, 1::2] = torch.cos(pos * freq)
    return out


class Block(nn.Module):
    """Pre-norm bidirectional transformer layer: x + Attn(LN(x)), then x + MLP(LN(x)) (GELU, 4x width, no
    dropout); padded keys masked."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        B, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, L, 3, self.n_head, D // self.n_head).permute(2, 0, 3, 1, 4)  # (B, H, L, Dh)
        att = kernels.attention(q, k, v, bias=keep)  # keep (B, 1, 1, L): True = attend (not padding)
        x = x + self.proj(att.transpose(1, 2).reshape(B, L, D))
        return x + self.mlp(self.ln2(x))


class ProfileBFNNet(nn.Module):
    """e_hat logits = Head(Encoder(theta W_theta + phi(t) W_t + pos)).

    Shapes: theta (B, L, K), t (B,), padding (B, L) True on padded positions -> logits (B, L, K).
    """

    def __init__(self, *, k: int = 20, d_model: int = 64, n_layer: int = 2, n_head: int = 4, time_dim: int = 16):
        super().__init__()
        self.config = {"k": k, "d_model": d_model, "n_layer": n_layer, "n_head": n_head, "time_dim": time_dim}
        self.embed_theta = nn.Linear(k, d_model)
        self.time_basis = TimeBasis(time_dim)
        self.embed_time = nn.Linear(time_dim, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, k)

    def forward(self, theta: torch.Tensor, t: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        B, L, _ = theta.shape
        h = self.embed_theta(theta) + self.embed_time(self.time_basis(t))[:, None, :]  # (B, L, D)
        h = h + sinusoidal_positions(L, h.shape[-1]).to(h)  # (B, L, D)
        keep = None if padding is None else ~padding[:, None, None, :]  # (B, 1, 1, L)
        for block in self.blocks:  # every position sees every other
            h = block(h, keep)
        return self.head(self.norm(h))  # (B, L, K)
