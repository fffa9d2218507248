"""The five ways of mixing the experts' feature maps into visual tokens for the LM (Sec. 2.4 of the paper, Fusion strategy).

Every fusion takes the experts' maps ``[(B, C_e, S_e, S_e)]`` (the low-resolution CLIP map first) and
returns visual tokens (B, N, d) for the LM. Each ends in a 2-layer GELU MLP of hidden width ``hidden``
(LLaVA's ``mlp2x_gelu`` projector) and adds a learned position embedding per token. Parameter budgets
are matched by solving each fusion's ``hidden`` for the parameter count of the channel concatenation
(:func:`matched_hidden`).

Resampling a map to the G x G grid (:func:`to_grid`, config eagle.fusion.resample): ``area`` (the default) averages
the cells each grid cell covers, so every cell of a high-res map reaches the fusions that resample it (concat,
sequence append, LLaVA-HR), as every cell reaches Mini-Gemini's and deformable attention's keys; ``bilinear`` is
Eagle's released tower (align_corners=True), which at an 8 x 8 -> 4 x 4 stride gives rows and columns 1 and 6 zero
weight (issue 52: it cost concat, not the attention fusions, part of the high-res map).

Mini-Gemini's and deformable attention's query / key / value width (eagle.fusion.attention_width): ``lm`` (the LM's
embedding width) or ``low_res`` (the low-res expert's channels: Mini-Gemini mines in the CLIP feature space and its
projector then maps to the LM). At the real widths (CLIP-L 1024, ConvNeXt-XXL 3072, a 4096-wide LM) ``lm`` puts
more parameters in the attention alone than the concat projector has, so no projector width matches its budget
(:func:`matched_hidden` raises); config/full.yaml uses ``low_res``.

* :class:`ChannelConcat` -- Eagle (Sec. 2.4 "Channel Concatenation"; NVlabs/EAGLE's multi-backbone tower): each
  map resampled to one G x G grid, concatenated along channels,
  ``T = MLP([resample(F_1); ...; resample(F_E)])``, G^2 tokens.
* :class:`SequenceAppend` -- each expert's G x G tokens through its own projector, appended one after
  another: E G^2 tokens.
* :class:`LlavaHRInjection` -- LLaVA-HR's mixture-of-resolution adapter (Luo et al. 2024; its official code's
  MR-Adapter and final path): ``F_l' = F_l + f_l(F_l) + g * f_h(F_h)``, a dynamic scalar gate
  ``g = tanh(W_2 GELU(W_1 [avg(F_l); avg(f_h(F_h))]))`` injects the high-resolution maps into the low-resolution
  (CLIP) map, then ``T = MLP(W_l F_l' + sum_e W_e resample(F_h,e))``; G^2 tokens.
* :class:`MiniGeminiCrossAttention` -- Mini-Gemini's patch info mining (Li et al. 2024, Eq. 1):
  ``T = MLP(Q + softmax(phi(Q) phi(K)^T) phi(V))``, each low-resolution query attending only to the
  high-resolution cells of its own region; G^2 tokens.
* :class:`DeformableAttention` -- deformable attention (Zhu et al. 2021, Eq. 2-3, one head, the experts as
  the levels): ``out_q = sum_e sum_k A_qek W_e F_e(p_q + dp_qek)``, offsets and weights predicted from
  the query, bilinear sampling; G^2 tokens.
"""
from __future__ import annotations

import functools
import math

import torch
from torch import nn
from torch.nn import functional as F

import kernels


RESAMPLE = ("area", "bilinear")
ATTENTION_WIDTHS = ("lm", "low_res")


@functools.lru_cache(maxsize=None)
def area_matrix(size: int, grid: int) -> torch.Tensor:
    """(S^2, G^2): column g holds the weights with which grid cell g averages the map's cells, those of PyTorch's
    adaptive average pooling (a grid cell covers rows floor(i S / G) .. ceil((i + 1) S / G) - 1, likewise columns).
    Applied as one matrix product, which on the CPU runs about twice as fast as the pooling op on the towers'
    channels-last maps."""
    eye = torch.eye(size * size, device="cpu").view(size * size, 1, size, size)
    return F.adaptive_avg_pool2d(eye, grid).view(size * size, grid * grid)


def bilinear_unread(size: int, grid: int) -> int:
    """How many of a size x size map's rows (likewise columns) carry zero weight in a bilinear, align_corners
    resampling to a grid x grid grid: the rows no output cell interpolates from (12 of 16 at 16 -> 4)."""
    rows = torch.eye(size).view(size, 1, 1, size).expand(size, 1, 2, size)
    weight = F.interpolate(rows, size=(2, grid), mode="bilinear", align_corners=True)[:, 0, 0, :]
    return int((weight.abs().sum(dim=1) == 0).sum())


def to_grid(x: torch.Tensor, grid: int, mode: str = "area") -> torch.Tensor:
    """(B, C, S, S) -> (B, C, G, G). ``area``: a map at least as fine as the grid is average-pooled over the cells
    each grid cell covers (adaptive average pooling: cells of floor or ceil(S / G) where G does not divide S), so
    every input cell weighs in; a coarser map is upsampled bilinearly (pooling cannot add cells). ``bilinear``:
    align_corners=True whatever the sizes (Eagle's released tower)."""
    if x.shape[-1] == grid:
        return x
    if mode == "area" and x.shape[-1] > grid:
        B, C, S, _ = x.shape
        return (x.flatten(2) @ area_matrix(S, grid).to(x.device, x.dtype)).view(B, C, grid, grid)
    if mode not in RESAMPLE:
        raise ValueError(f"eagle.fusion.resample must be one of {RESAMPLE}, got {mode!r}")
    return F.interpolate(x, size=(grid, grid), mode="bilinear", align_corners=True)


def tokens(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H W, C), row-major cells."""
    return x.flatten(2).transpose(1, 2)


def mlp(d_in: int, hidden: int, d_out: int) -> nn.Sequential:
    """LLaVA-1.5's mlp2x_gelu projector."""
    return nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, d_out))


class ChannelConcat(nn.Module):
    def __init__(self, channels: list[int], sizes: list[int], d: int, grid: int, hidden: int, resample: str = "area",
                 **_):
        super().__init__()
        self.grid, self.n_tokens, self.resample = grid, grid * grid, resample
        self.proj = mlp(sum(channels), hidden, d)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_tokens, d))

    def forward(self, maps: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat([tokens(to_grid(m, self.grid, self.resample)) for m in maps], dim=-1)  # (B, G^2, sum C_e)
        return self.proj(x) + self.pos  # (B, G^2, d)


class SequenceAppend(nn.Module):
    def __init__(self, channels: list[int], sizes: list[int], d: int, grid: int, hidden: int, resample: str = "area",
                 **_):
        super().__init__()
        self.grid, self.n_tokens, self.resample = grid, len(channels) * grid * grid, resample
        self.projs = nn.ModuleList(mlp(c, hidden, d) for c in channels)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_tokens, d))

    def forward(self, maps):
        x = torch.cat([p(tokens(to_grid(m, self.grid, self.resample))) for p, m in zip(self.projs, maps)], dim=1)
        return x + self.pos


class LlavaHRInjection(nn.Module):
    """LLaVA-HR's mixture-of-resolution adaptation as its official code builds it (luogen1996/LLaVA-HR,
    llava_hr/model/multimodal_encoder/multipath_encoder_wapper.py): an MR-Adapter (``S2FStitchAlignModuleV2``) per
    high-res expert injects that expert's map into the low-res (CLIP) map, then the final ``MultiPathAlignModule``
    adds a linear map of the low-res features and one of each high-res map pooled to the grid; LLaVA's projector
    follows. Per high-res expert (F_l the low-res map on the G x G grid, F_h the high-res map):

    * high-res branch: ``s = resample(slow_proj(GELU(slow_conv(F_h))))`` (two 1 x 1 convolutions; slow_proj starts at
      zero, slow_conv Xavier-uniform);
    * low-res branch: ``F_l <- F_l + fast_proj(GELU(fast_conv(F_l)))`` (a 7 x 7 depthwise convolution, 2 G - 1
      wide on a grid G < 4, then 1 x 1; fast_proj starts at zero);
    * gate: ``g = tanh(W_2 GELU(W_1 [avg(F_l); avg(s)]))``, one scalar per image (W_1: 2C -> C / 2, W_2: C / 2 -> 1,
      PyTorch's default initialisation) and ``F_l <- F_l + g s``.

    Then ``T = MLP(fast_lin(F_l) + sum_e slow_lin_e(resample(F_h,e))) + pos``, G^2 tokens. The adapter starts as the
    identity (slow_proj and fast_proj at zero, as the official ``zero_init=True``), while the gate is live from the
    first step, so the gradient reaches slow_proj at once; the final linear path reads every high-res map without a
    gate. (This module's first version had a per-channel gate whose last layer started at zero, a random 1 x 1 phi in
    place of the high-res branch, no low-res branch and no final path, so the high-res map reached the LM only
    through the product g phi(F_h), zero at the start; on seed 0 of the committed default run that arm never read
    the small digit in 540 SFT steps, its fine-question validation accuracy at chance throughout, where this form
    reads it by step 180.) Lighter than LLaVA-HR: the adapter is applied once to
    the CLIP tower's output map, not after each of the ViT's first three quarters of blocks."""

    def __init__(self, channels: list[int], sizes: list[int], d: int, grid: int, hidden: int, resample: str = "area",
                 **_):
        super().__init__()
        self.grid, self.n_tokens, self.resample = grid, grid * grid, resample
        c0 = channels[0]
        kernel = min(7, 2 * grid - 1)  # 7 x 7 (official); on a grid under 4 a wider kernel reads only padding
        self.slow_conv = nn.ModuleList(nn.Conv2d(c, c, 1) for c in channels[1:])
        self.slow_proj = nn.ModuleList(nn.Conv2d(c, c0, 1) for c in channels[1:])
        self.fast_conv = nn.ModuleList(nn.Conv2d(c0, c0, kernel, padding=kernel // 2, groups=c0) for _ in channels[1:])
        self.fast_proj = nn.ModuleList(nn.Conv2d(c0, c0, 1) for _ in channels[1:])
        self.gate = nn.ModuleList(nn.Sequential(nn.Linear(2 * c0, max(1, c0 // 2)), nn.GELU(), nn.Linear(max(1, c0 // 2), 1))
                                  for _ in channels[1:])
        for conv in (*self.slow_conv, *self.fast_conv):  # the official initialisation
            nn.init.xavier_uniform_(conv.weight)
            nn.init.zeros_(conv.bias)
        for conv in (*self.slow_proj, *self.fast_proj):  # zero_init=True: the adapter starts as the identity
            nn.init.zeros_(conv.weight)
            nn.init.zeros_(conv.bias)
        self.fast_lin = nn.Linear(c0, c0)  # MultiPathAlignModule
        self.slow_lin = nn.ModuleList(nn.Linear(c, c0) for c in channels[1:])
        self.proj = mlp(c0, hidden, d)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_tokens, d))

    def forward(self, maps):
        f = to_grid(maps[0], self.grid, self.resample)  # (B, C0, G, G)
        for slow_conv, slow_proj, fast_conv, fast_proj, gate, m in zip(self.slow_conv, self.slow_proj, self.fast_conv,
                                                                     self.fast_proj, self.gate, maps[1:]):
            s = to_grid(slow_proj(F.gelu(slow_conv(m))), self.grid, self.resample)  # (B, C0, G, G)
            f = f + fast_proj(F.gelu(fast_conv(f)))
            g = torch.tanh(gate(torch.cat([f.mean((2, 3)), s.mean((2, 3))], dim=-1)))  # (B, 1)
            f = f + g[:, :, None, None] * s
        out = self.fast_lin(tokens(f))
        for lin, m in zip(self.slow_lin, maps[1:]):
            out = out + lin(tokens(to_grid(m, self.grid, self.resample)))
        return self.proj(out) + self.pos


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
    def __init__(self, channels: list[int], sizes: list[int], d: int, grid: int, hidden: int, resample: str = "area",
                 attention_width: str = "lm", **_):
        super().__init__()
        self.grid, self.n_tokens, self.resample = grid, grid * grid, resample
        self.size = max(sizes[1:])
        c_hi = sum(channels[1:])
        w = width_of(attention_width, channels, d)
        self.q = nn.Linear(channels[0], w)
        self.k = nn.Linear(c_hi, w)
        self.v = nn.Linear(c_hi, w)
        self.proj = mlp(w, hidden, d)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_tokens, w))
        self.register_buffer("mask", region_mask(grid, self.size), persistent=False)

    def forward(self, maps):
        q = self.q(tokens(to_grid(maps[0], self.grid, self.resample))) + self.pos  # (B, G^2, w)
        hi = torch.cat([tokens(to_grid(m, self.size, self.resample)) for m in maps[1:]], dim=-1)  # (B, S^2, C_hi)
        k, v = self.k(hi), self.v(hi)  # (B, S^2, w)
        att = kernels.attention(q[:, None], k[:, None], v[:, None], bias=self.mask)[:, 0]  # (B, G^2, w)
        return self.proj(q + att)


class DeformableAttention(nn.Module):
    def __init__(self, channels: list[int], sizes: list[int], d: int, grid: int, hidden: int, points: int = 4,
                 resample: str = "area", attention_width: str = "lm", **_):
        super().__init__()
        self.grid, self.n_tokens, self.points, self.resample = grid, grid * grid, points, resample
        self.sizes = list(sizes[1:])
        levels = len(self.sizes)
        w = width_of(attention_width, channels, d)
        self.q = nn.Linear(channels[0], w)
        self.value = nn.ModuleList(nn.Conv2d(c, w, 1) for c in channels[1:])
        self.offsets = nn.Linear(w, levels * points * 2)
        self.weights = nn.Linear(w, levels * points)
        self.out = nn.Linear(w, w)
        self.proj = mlp(w, hidden, d)
        self.pos = nn.Parameter(0.02 * torch.randn(self.n_tokens, w))
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
        q = self.q(tokens(to_grid(maps[0], self.grid, self.resample))) + self.pos  # (B, Nq, w)
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


def width_of(attention_width: str, channels, d: int) -> int:
    """The attention fusions' query / key / value width: the LM's (``lm``) or the low-res expert's (``low_res``)."""
    if attention_width not in ATTENTION_WIDTHS:
        raise ValueError(f"eagle.fusion.attention_width must be one of {ATTENTION_WIDTHS}, got {attention_width!r}")
    return d if attention_width == "lm" else int(channels[0])


def build(name: str, channels, sizes, d: int, grid: int, hidden: int, points: int = 4, resample: str = "area",
          attention_width: str = "lm") -> nn.Module:
    return FUSIONS[name](list(channels), list(sizes), d, grid, hidden, points=points, resample=resample,
                         attention_width=attention_width)


def count(name: str, channels, sizes, d: int, grid: int, hidden: int, points: int = 4,
          attention_width: str = "lm") -> int:
    """The parameter count of fusion `name`, built on the meta device (no memory, no initialisation: cheap at the
    full scale's 4096-wide LM)."""
    with torch.device("meta"):
        return n_params(build(name, channels, sizes, d, grid, hidden, points, attention_width=attention_width))


def matched_hidden(name: str, channels, sizes, d: int, grid: int, target: int, points: int = 4,
                   attention_width: str = "lm") -> int:
    """The hidden width (>= 1) whose fusion `name` has the parameter count closest to `target`.

    Every fusion's count is affine in the hidden width (a + b h: the projector's two layers), so two counts solve
    it. Raises when the fusion's parts outside the projector alone exceed `target` (the width would be below 1:
    a projector that throttles every token through a few units, not a comparison at equal budget).
    """
    a1 = count(name, channels, sizes, d, grid, 1, points, attention_width)
    b = count(name, channels, sizes, d, grid, 2, points, attention_width) - a1
    exact = 1 + (target - a1) / b
    if exact < 1:
        hint = ("set eagle.fusion.attention_width to low_res (the attention at the low-res expert's width) or raise "
                "eagle.fusion.hidden" if name in ("mini_gemini", "deformable") and attention_width == "lm"
                else "raise eagle.fusion.hidden")
        raise ValueError(f"eagle.fusion: {name}'s parts outside its projector have {a1 - b} parameters, more than the "
                         f"concat projector's budget ({target}) at channels {list(channels)} and LM width {d}: no "
                         f"projector width matches it; {hint}")
    lo = max(1, math.floor(exact))
    return min((lo, lo + 1), key=lambda h: abs(a1 + (h - 1) * b - target))


def matched(name: str, channels, sizes, d: int, cfg: dict) -> nn.Module:
    """Fusion `name` as config eagle.fusion sets it (grid, resample, attention_width, deformable_points): the
    channel concatenation with hidden width ``cfg["hidden"]``, every other fusion with the width that matches the
    concatenation's parameter count over the same experts (:func:`matched_hidden`)."""
    grid, points, hidden = cfg["grid"], cfg["deformable_points"], cfg["hidden"]
    resample, width = cfg.get("resample", "area"), cfg.get("attention_width", "lm")
    if name != "concat":
        target = count("concat", channels, sizes, d, grid, hidden, points)
        hidden = matched_hidden(name, channels, sizes, d, grid, target, points, width)
    return build(name, channels, sizes, d, grid, hidden, points, resample, width)
