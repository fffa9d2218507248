"""The network of P17 profilebfn: a small bidirectional (ESM-style) transformer over the flow's theta.

The official model (bfn_model/bfn_roberta.py) is ESM-2 / RoBERTa whose token embedding is replaced by
a linear map of theta (B, L, K) plus a linear map of a Gaussian basis of t (``BFNInputLayer`` with
``time_dim`` basis functions on [0, 1]); it outputs logits over the residues at every position.
Ours is the same at a small size: pre-norm encoder layers without dropout and sinusoidal positions
(ESM-2 uses rotary ones), so that one model serves families of any length.
"""
from __future__ import annotations

import math

import torch
from torch import nn


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
        layer = nn.TransformerEncoderLayer(d_model, n_head, 4 * d_model, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, k)

    def forward(self, theta: torch.Tensor, t: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        B, L, _ = theta.shape
        h = self.embed_theta(theta) + self.embed_time(self.time_basis(t))[:, None, :]  # (B, L, D)
        h = h + sinusoidal_positions(L, h.shape[-1]).to(h)  # (B, L, D)
        h = self.encoder(h, src_key_padding_mask=padding)  # (B, L, D): every position sees every other
        return self.head(self.norm(h))  # (B, L, K)
