"""The models: a small masked protein LM (ProtT5's stand-in), Flexpert-Seq / Flexpert-3D on top of it,
and a structure-to-sequence (inverse folding) designer on C-alpha k-nearest-neighbour graphs.

Reading order, bottom-up: :class:`ProteinLM` -> :class:`FlexPredictor` (Sec. 4) -> :class:`Designer`
(Sec. 5) and :func:`straight_through_gumbel` (the differentiable sequence of the Flexpert-Design loss).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels

N_AA = 20
PAD, MASK = N_AA, N_AA + 1  # token ids after the 20 residues
VOCAB = N_AA + 2


def sinusoidal(length: int, dim: int) -> torch.Tensor:
    """Fixed sinusoidal positions (L, dim): the LM pretrains on <= 256 residues, structures reach 400."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    pe = torch.zeros(length, dim)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return pe


# ---- the protein language model ----------------------------------------------------------------------
class Block(nn.Module):
    """Pre-norm transformer block: x + Attn(LN(x)), then x + MLP(LN(x)); padded keys masked. Attention is the
    project's op (``kernels.attention``: Triton on CUDA, the torch reference or PyTorch's fused CPU attention
    elsewhere)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, L, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)  # (B, H, L, Dh)
        att = kernels.attention(q, k, v, bias=keep[:, None, None, :])  # (B, H, L, Dh); keys: True = attend
        x = x + self.proj(att.transpose(1, 2).reshape(B, L, D))
        return x + self.mlp(self.ln2(x))


class ProteinLM(nn.Module):
    """A bidirectional transformer encoder with a masked-residue head (BERT-style pretraining).

    Args:
        d_model, layers, heads: encoder size (ProtT5-XL has 24 layers of 1024; ours is tiny).
    Shapes: tokens (B, L) -> embeddings (B, L, d_model); a soft sequence (B, L, 20) one-hot may replace
    the tokens (Flexpert-Design feeds the Gumbel-softmax sample through it).
    """

    def __init__(self, d_model: int, layers: int, heads: int):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(VOCAB, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, N_AA)

    def encode(self, tokens: torch.Tensor | None, pad: torch.Tensor, onehot: torch.Tensor | None = None) -> torch.Tensor:
        """Per-residue embeddings (B, L, D); `pad` (B, L) is True at padding."""
        x = self.embed(tokens) if onehot is None else onehot @ self.embed.weight[:N_AA]  # (B, L, D)
        x = x + sinusoidal(x.shape[1], self.d_model).to(x)
        for block in self.blocks:
            x = block(x, ~pad)
        return self.norm(x)

    def forward(self, tokens: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return self.head(self.encode(tokens, pad))  # (B, L, 20) residue logits


# ---- Flexpert-Seq and Flexpert-3D -----------------------------------------------------------------------
class ConvAdaptor(nn.Module):
    """The ENM adaptor of Flexpert-3D (official ``ENMAdaptedConvClassifier``): a stack of Conv1d + ReLU over
    the per-residue ANM profile, averaged over channels into one number per residue. Padding is zeroed before
    every layer (the official code masks only the output), so a chain's output does not depend on its batch."""

    def __init__(self, channels: int, layers: int, kernel_size: int):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(1 if i == 0 else channels, channels, kernel_size,
                                             padding=(kernel_size - 1) // 2) for i in range(layers))

    def forward(self, enm: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        keep = (~pad)[:, None, :].to(enm.dtype)  # (B, 1, L)
        z = enm[:, None, :] * keep
        for conv in self.convs:
            z = torch.relu(conv(z)) * keep  # (B, C, L)
        return z.mean(1)[..., None]  # (B, L, 1)


class FlexPredictor(nn.Module):
    """Flexpert-Seq (``enm_adaptor=None``) or Flexpert-3D: per-residue flexibility from the LM embedding,
    with the ANM profile concatenated through the conv adaptor for 3D (Sec. 4, Fig. 1).

    .. math::
        \\hat f_i = w^T [\\,\\mathrm{LM}(s)_i \\,;\\, \\mathrm{Adaptor}(\\mathrm{ANM})_i\\,] + b
    """

    def __init__(self, lm: ProteinLM, dropout: float, adaptor: ConvAdaptor | None = None):
        super().__init__()
        self.lm, self.adaptor = lm, adaptor
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(lm.d_model + (1 if adaptor is not None else 0), 1)

    def forward(self, tokens, pad, enm=None, onehot=None) -> torch.Tensor:
        h = self.dropout(self.lm.encode(tokens, pad, onehot))  # (B, L, D)
        if self.adaptor is not None:
            h = torch.cat([h, self.adaptor(enm, pad)], -1)
        return self.out(h)[..., 0]  # (B, L)


def masked_mse(pred: torch.Tensor, target: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    keep = ~pad
    return ((pred - target) ** 2 * keep).sum() / keep.sum()


# ---- the inverse-folding designer --------------------------------------------------------------------------
def knn_graph(ca: torch.Tensor, pad: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k nearest C-alpha neighbours of every residue (B, L, k), padding never chosen."""
    d = torch.cdist(ca, ca)  # (B, L, L)
    d = d.masked_fill(pad[:, None, :], float("inf"))
    return d.topk(min(k, ca.shape[1]), dim=-1, largest=False).indices


def local_frames(ca: torch.Tensor) -> torch.Tensor:
    """An orthonormal frame per residue from C-alpha i-1, i, i+1 (B, L, 3, 3); the ends copy their neighbour."""
    prev = torch.cat([ca[:, :1] * 2 - ca[:, 1:2], ca[:, :-1]], 1)
    nxt = torch.cat([ca[:, 1:], ca[:, -1:] * 2 - ca[:, -2:-1]], 1)
    u, v = F.normalize(ca - prev, dim=-1, eps=1e-6), F.normalize(nxt - ca, dim=-1, eps=1e-6)
    b = F.normalize(u - v, dim=-1, eps=1e-6)
    n = F.normalize(torch.cross(u, v, dim=-1), dim=-1, eps=1e-6)
    return torch.stack([b, n, torch.cross(b, n, dim=-1)], -2)


def edge_features(ca: torch.Tensor, nbr: torch.Tensor, n_rbf: int = 16, max_offset: int = 32) -> tuple:
    """Per edge i <- j: RBF of |x_j - x_i| (2..22 A), the direction of x_j - x_i in i's local frame, and the
    clipped sequence offset j - i (ProteinMPNN's C-alpha-only features, reduced). Returns (E (B,L,k,F), offset)."""
    B, L, k = nbr.shape
    xj = ca[torch.arange(B, device=ca.device)[:, None, None], nbr]  # (B, L, k, 3)
    rel = xj - ca[:, :, None]
    dist = rel.norm(dim=-1, keepdim=True)
    centers = torch.linspace(2.0, 22.0, n_rbf, device=ca.device)
    rbf = torch.exp(-((dist - centers) / (20.0 / n_rbf)) ** 2)
    direction = torch.einsum("blij,blkj->blki", local_frames(ca), rel / (dist + 1e-6))
    offset = (nbr - torch.arange(L, device=ca.device)[None, :, None]).clamp(-max_offset, max_offset) + max_offset
    return torch.cat([rbf, direction], -1), offset


class GraphLayer(nn.Module):
    """Attention over the k neighbours with edge-conditioned messages (ProteinMPNN's message MLP over
    [h_i, h_j, e_ij], weighted by a softmax over the neighbourhood), then a residual feed-forward."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.msg = nn.Sequential(nn.Linear(3 * d, d), nn.GELU(), nn.Linear(d, d))
        self.score = nn.Linear(3 * d, heads)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, h, e, nbr, nbr_pad):
        B, L, k = nbr.shape
        d = h.shape[-1]
        hj = h[torch.arange(B, device=h.device)[:, None, None], nbr]  # (B, L, k, D)
        z = torch.cat([h[:, :, None].expand(B, L, k, d), hj, e], -1)  # (B, L, k, 3D)
        att = self.score(z).masked_fill(nbr_pad[..., None], float("-inf")).softmax(2)  # (B, L, k, H)
        m = self.msg(z).view(B, L, k, self.heads, d // self.heads)
        h = self.norm1(h + (att[..., None] * m).sum(2).reshape(B, L, d))
        return self.norm2(h + self.ff(h))


class Designer(nn.Module):
    """Structure (C-alpha kNN graph) -> residue logits, optionally conditioned on a flexibility instruction
    per residue added to the zero-initialised node features (Flexpert-Design, Sec. 5 and Fig. 2; official
    ``proteinmpnn_model.py``: ``h_V = gt_flex.unsqueeze(-1).expand(...)``)."""

    def __init__(self, d_model: int, layers: int, heads: int, k: int):
        super().__init__()
        self.k = k
        self.edge_in = nn.Linear(16 + 3, d_model)
        self.offset = nn.Embedding(65, d_model)
        self.layers = nn.ModuleList(GraphLayer(d_model, heads) for _ in range(layers))
        self.out = nn.Linear(d_model, N_AA)

    def forward(self, ca, pad, flex=None) -> torch.Tensor:
        nbr = knn_graph(ca, pad, self.k)
        feats, offset = edge_features(ca, nbr)
        e = self.edge_in(feats) + self.offset(offset)  # (B, L, k, D)
        nbr_pad = pad[torch.arange(pad.shape[0], device=pad.device)[:, None, None], nbr]  # (B, L, k)
        h = torch.zeros(*ca.shape[:2], e.shape[-1], device=ca.device)
        if flex is not None:  # the instruction, copied over the node feature's dimensions
            h = h + flex.masked_fill(pad, 0.0)[..., None]
        for layer in self.layers:
            h = layer(h, e, nbr, nbr_pad)
        return self.out(h)  # (B, L, 20)


def straight_through_gumbel(logits: torch.Tensor, tau: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """A one-hot sample in the forward pass with the Gumbel-softmax gradient in the backward pass
    (Jang et al. 2017; ``F.gumbel_softmax(hard=True)`` in the official code, drawn here from a seeded generator).

    .. math::
        y = \\mathrm{onehot}(\\arg\\max(\\ell + g)) + \\mathrm{softmax}((\\ell + g)/\\tau) - \\mathrm{sg}[\\mathrm{softmax}((\\ell + g)/\\tau)]
    """
    u = torch.rand(logits.shape, generator=generator).to(logits.device).clamp(1e-9, 1 - 1e-9)  # CPU generator
    g = -torch.log(-torch.log(u))
    soft = ((logits + g) / tau).softmax(-1)
    hard = F.one_hot(soft.argmax(-1), logits.shape[-1]).to(soft)
    return hard + soft - soft.detach()
