"""The five ways of mixing the experts' feature maps into visual tokens for the LM (Sec. 2.4 of the paper, Fusion strategy).

Every fusion takes the experts' maps ``[(B, C_e, S_e, S_e)]`` (the low-resolution CLIP map first) and
returns visual tokens (B, N, d) for the LM. Each ends in a 2-layer GELU MLP of hidden width ``hidden``
(LLaVA's ``mlp2x_gelu`` projector) and adds a learned position embedding per token. Parameter budgets
are matched by solving each fusion's ``hidden`` for the parameter count of the channel concatenation
(:func:`matched_hidden`).

* :class:`ChannelConcat` -- Eagle (Sec. 2.4 "Channel Concatenation"; NVlabs/EAGLE's multi-backbone tower): each
  map bilinearly interpolated (align_corners=True) to one G x G grid, concatenated along channels,
  ``T = MLP([interp(F_1); ...; interp(F_E)])``, G^2 tokens.
* :class:`SequenceAppend` -- each expert's G x G tokens through its own projector, appended one after
  another: E G^2 tokens.
* :class:`LlavaHRInjection` -- LLaVA-HR's mixture-of-resolution adapter (Luo et al. 2024, Eq. 3):
  ``F_l' = F_l + g * phi(F_h)``, a dynamic gate ``g = tanh(W_2 GELU(W_1 [avg(F_l); avg(phi(F_h))]))``
  injects the high-resolution maps into the low-resolution (CLIP) map; G^2 tokens.
* :class:`MiniGeminiCrossAttention` -- Mini-Gemini's patch info mining (Li et al. 2024, Eq. 1):
  ``T = MLP(Q + softmax(phi(Q) phi(K)^T) phi(V))``, each low-resolution query attending only to the
  high-resolution cells of its own region; G^2 tokens.
* :class:`DeformableAttention` -- deformable attention (Zhu et al. 2021, Eq. 2-3, one head, the experts as
  the levels): ``out_q = sum_e sum_k A_qek W_e F_e(p_q + dp_qek)``, offsets and weights predicted from
  the query, bilinear sampling; G^2 tokens.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

import kernels


def to_grid(x: torch.Tensor, grid: int) -> torch.Tensor:
    """(B, C, S, S) -> (B, C, G, G): bilinear, align_corners=True (as Eagle's released tower)."""
    if x.shape[-1] == grid:
        return x
    return F.interpolate(x, size=(grid, grid), mode="bilinear", align_corners=True)


def tokens(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H W, C), row-major cells."""
    return x.flatten(2).transpose(1, 2)


def mlp(d_in: int, hidden: int, d_out: int) -> nn.Sequential:
    """LLaVA-1.5's mlp2x_gelu projector."""
    return nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, d_out))


class ChannelConcat(nn.Module):
    def __init__(self, channels: list[int], sizes: list[int], d: int, grid: int, hidden: int, **_):
        super().__init__()
        self.grid, self.n_tokens = grid, grid * grid
        self.proj = mlp(sum(channels), hidden, d)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_tokens, d))

    def forward(self, maps: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat([tokens(to_grid(m, self.grid)) for m in maps], dim=-1)  # (B, G^2, sum C_e)
        return self.proj(x) + self.pos  # (B, G^2, d)


class SequenceAppend(nn.Module):
    def __init__(self, channels: list[int], sizes: list[int], d: int, grid: int, hidden: int, **_):
        super().__init__()
        self.grid, self.n_tokens = grid, len(channels) * grid * grid
        self.projs = nn.ModuleList(mlp(c, hidden, d) for c in channels)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_tokens, d))

    def forward(self, maps):
        x = torch.cat([p(tokens(to_grid(m, self.grid))) for p, m in zip(self.projs, maps)], dim=1)  # (B, E G^2, d)
        return x + self.pos


class LlavaHRInjection(nn.Module):
    def __init__(self, channels: list[int], sizes: list[int], d: int, grid: int, hidden: int, **_):
        super().__init__()
        self.grid, self.n_tokens = grid, grid * grid
        c0 = channels[0]
        self.phi = nn.ModuleList(nn.Conv2d(c, c0, 1) for c in channels[1:])
        self.gate = nn.ModuleList(nn.Sequential(nn.Linear(2 * c0, c0), nn.GELU(), nn.Linear(c0, c0)) for _ in channels[1:])
        for g in self.gate:  # start as the low-resolution encoder alone (LLaVA-HR initialises the gate at 0)
            nn.init.zeros_(g[2].weight)
            nn.init.zeros_(g[2].bias)
        self.proj = mlp(c0, hidden, d)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_tokens, d))

    def forward(self, maps):
        f = to_grid(maps[0], self.grid)  # (B, C0, G, G)
        for phi, gate, m in zip(self.phi, self.gate, maps[1:]):
            h = to_grid(phi(m), self.grid)  # (B, C0, G, G)
            g = torch.tanh(gate(torch.cat([f.mean((2, 3)), h.mean((2, 3))], dim=-1)))  # (B, C0)
            f = f + g[:, :, None, None] * h
        return self.proj(tokens(f)) + self.pos


def region_mask(grid: int, size: int) -> torch.Tensor:
    """(G^2, S^2) bool: low-res cell (i, j) sees the high-res cells of its region, high-res row (column) r falling
    in low-res row (column) floor(r G / S): S / G x S / G regions when G divides S, and otherwise regions of
    floor or ceil(S / G) cells that still tile the map (a 24 x 24 query grid over a 32 x 32 ConvNeXt map)."""
    if size < grid:
        raise ValueError(f"region_mask: the high-res map ({size} x {size}) is coarser than the query grid ({grid})")
    cell = torch.arange(size) * grid // size  # high-res row/col -> low-res row/col
    low = (cell[:, None] * grid + cell[None, :]).flatten()  # (S^2,) the low-res cell of each high-res cell
    return low[None, :] == torch.arange(grid * grid)[:, None]


class MiniGeminiCrossAttention(nn.Module):
    def __init__(self, channels: list[int], sizes: list[int], d: int, grid: int, hidden: int, **_):
        super().__init__()
        self.grid, self.n_tokens = grid, grid * grid
        self.size = max(sizes[1:])
        c_hi = sum(channels[1:])
        self.q = nn.Linear(channels[0], d)
        self.k = nn.Linear(c_hi, d)
        self.v = nn.Linear(c_hi, d)
        self.proj = mlp(d, hidden, d)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_tokens, d))
        self.register_buffer("mask", region_mask(grid, self.size), persistent=False)

    def forward(self, maps):
        q = self.q(tokens(to_grid(maps[0], self.grid))) + self.pos  # (B, G^2, d)
        hi = torch.cat([tokens(to_grid(m, self.size)) for m in maps[1:]], dim=-1)  # (B, S^2, C_hi)
        k, v = self.k(hi), self.v(hi)  # (B, S^2, d)
        att = kernels.attention(q[:, None], k[:, None], v[:, None], bias=self.mask)[:, 0]  # (B, G^2, d)
        return self.proj(q + att)


class DeformableAttention(nn.Module):
    def __init__(self, channels: list[int], sizes: list[int], d: int, grid: int, hidden: int, points: int = 4, **_):
        super().__init__()
        self.grid, self.n_tokens, self.points = grid, grid * grid, points
        self.sizes = list(sizes[1:])
        levels = len(self.sizes)
        self.q = nn.Linear(channels[0], d)
        self.value = nn.ModuleList(nn.Conv2d(c, d, 1) for c in channels[1:])
        self.offsets = nn.Linear(d, levels * points * 2)
        self.weights = nn.Linear(d, levels * points)
        self.out = nn.Linear(d, d)
        self.proj = mlp(d, hidden, d)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_tokens, d))
        # Deformable DETR's initialisation: zero weights, the offsets' bias a ring of K directions (1 cell out).
        nn.init.zeros_(self.offsets.weight)
        angle = 2 * math.pi * torch.arange(points) / points
        ring = torch.stack([angle.cos(), angle.sin()], -1)  # (K, 2) as (x, y)
        self.offsets.bias.data = ring.repeat(levels, 1).flatten()
        nn.init.zeros_(self.weights.weight)
        nn.init.zeros_(self.weights.bias)
        centre = (torch.arange(grid) + 0.5) / grid * 2 - 1  # cell centres in grid_sample's [-1, 1]
        ref = torch.stack(torch.meshgrid(centre, centre, indexing="ij")[::-1], -1).reshape(-1, 2)  # (G^2, 2) (x, y)
        self.register_buffer("ref", ref, persistent=False)

    def forward(self, maps):
        q = self.q(tokens(to_grid(maps[0], self.grid))) + self.pos  # (B, Nq, d)
        B, Nq, d = q.shape
        L, K = len(self.sizes), self.points
        off = self.offsets(q).view(B, Nq, L, K, 2)  # in cells of each level's map
        att = torch.softmax(self.weights(q).view(B, Nq, L * K), -1).view(B, Nq, L, K)
        out = q.new_zeros(B, Nq, d)
        for level, (m, value, size) in enumerate(zip(maps[1:], self.value, self.sizes)):
            loc = self.ref[None, :, None] + off[:, :, level] * (2.0 / size)  # (B, Nq, K, 2)
            sampled = F.grid_sample(value(m), loc, mode="bilinear", align_corners=False)  # (B, d, Nq, K)
            out = out + torch.einsum("bdqk,bqk->bqd", sampled, att[:, :, level])
        return self.proj(q + self.out(out))


FUSIONS = {"concat": ChannelConcat, "sequence_append": SequenceAppend, "llava_hr": LlavaHRInjection,
           "mini_gemini": MiniGeminiCrossAttention, "deformable": DeformableAttention}


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def build(name: str, channels, sizes, d: int, grid: int, hidden: int, points: int = 4) -> nn.Module:
    return FUSIONS[name](list(channels), list(sizes), d, grid, hidden, points=points)


def matched_hidden(name: str, channels, sizes, d: int, grid: int, target: int, points: int = 4) -> int:
    """The hidden width (>= 1) whose fusion `name` has the parameter count closest to `target`.

    Every fusion's count grows by a fixed amount per hidden unit, so a bisection finds it.
    """
    def count(h):
        return n_params(build(name, channels, sizes, d, grid, h, points))

    lo, hi = 1, 4096
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid) <= target else (lo, mid)
    return min((lo, hi), key=lambda h: abs(count(h) - target))
