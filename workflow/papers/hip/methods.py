"""HiP and the baselines it is compared with at an equal key budget (the paper's Sec. 4).

Every pruned method attends, per query block of ``block_q`` queries, to key blocks of
``block_k`` keys: the attention sinks (the first ``sink`` keys), a sliding ``window`` before
the block (and the block itself, causally), and ``n = mask_k / block_k`` blocks from the rest
of the past, the *search range*. They differ only in how those ``n`` blocks are chosen:

* ``hip``: HiP's hierarchical tree search (Algorithm 1), ``kernels.hip_select``;
* ``oracle``: the true top-``n`` blocks by ``max q . k`` (``kernels.oracle_select``), the
  upper bound HiP approximates;
* ``random``: ``n`` blocks drawn uniformly from the search range (the paper's guarantee is
  that HiP beats this in expectation);
* ``window``: no choice at all: the ``mask_k`` keys go to a longer sliding window
  (StreamingLLM-style sink + window, as the paper's baselines).

``dense`` is exact causal attention (``kernels.attention``). The first ``dense_layers`` layers
stay dense for every method, as in the paper (``dense_layers`` in the official code).
Attention over the chosen blocks is ``kernels.block_sparse_attention``.
"""
from __future__ import annotations

import dataclasses

import torch

import kernels
from papers.hip.model import Attend, dense

METHODS = ("dense", "hip", "oracle", "random", "window")


@dataclasses.dataclass(frozen=True)
class HiPConfig:
    """HiP's hyper-parameters, scaled to a tiny model (official defaults in brackets)."""

    block_q: int = 32  # queries per block [64; 32 in the paper's ablations]
    block_stride_q: int = 2  # score every 2nd query of a block in the tree search [2]
    block_k: int = 2  # keys per key block [2]
    mask_k: int = 64  # keys chosen by the tree search per query block [512]
    sink: int = 4  # first keys always kept [16]
    window: int = 32  # keys before each query block always kept [256]
    dense_layers: int = 0  # first layers kept dense [3 of 32: ~10%, i.e. none of 2-4 layers]

    @property
    def n(self) -> int:
        """Key blocks chosen per query block, besides sink and window."""
        return max(self.mask_k // self.block_k, 1)

    @property
    def budget(self) -> int:
        """Keys a query block attends to once the search range is longer than ``mask_k``
        (sink + window + mask_k, plus the block itself)."""
        return self.sink + self.window + self.mask_k

    def select_kwargs(self) -> dict:
        return {"block_q": self.block_q, "block_stride_q": self.block_stride_q, "block_k": self.block_k,
                "mask_k": self.mask_k, "sink": self.sink, "window": self.window, "causal": True}


# ---- geometry: sink, window and search range of each query block (causal self-attention) ------
def geometry(T: int, cfg: HiPConfig, window: int | None = None) -> dict:
    """Key-block ranges of each of the ``ceil(T / block_q)`` query blocks, as in ``kernels.hip``:
    sink blocks ``[0, ns)``, window blocks ``[w_lo, w_hi)`` (the ``window`` keys before the
    block's first query, up to its last query), search range ``[ns, w_lo)`` of ``L`` blocks."""
    window = cfg.window if window is None else window
    bq, bk = cfg.block_q, cfg.block_k
    nqb, nkb = -(-T // bq), -(-T // bk)
    ns = min(-(-cfg.sink // bk), nkb)
    b = torch.arange(nqb)
    q_first = b * bq
    q_last = torch.clamp((b + 1) * bq, max=T) - 1
    w_lo = torch.clamp(torch.clamp(q_first - window, 0, T) // bk, min=ns)
    w_hi = torch.maximum(-(-(q_last + 1) // bk), w_lo)
    return {"nqb": nqb, "ns": ns, "w_lo": w_lo, "w_hi": w_hi, "L": w_lo - ns}


def fixed_blocks(T: int, cfg: HiPConfig, window: int | None = None) -> torch.Tensor:
    """(NQB, ns + max window blocks): the sink and window blocks of each query block, -1 padded."""
    g = geometry(T, cfg, window)
    nw = int((g["w_hi"] - g["w_lo"]).max())
    win = g["w_lo"][:, None] + torch.arange(nw)  # (NQB, nw)
    win = torch.where(win < g["w_hi"][:, None], win, -1)
    sink = torch.arange(g["ns"]).expand(g["nqb"], g["ns"])
    return torch.cat([sink, win], dim=1)


def assemble(*parts: torch.Tensor) -> torch.Tensor:
    """Concatenate block lists (..., S_i) (-1 = none), sort each row ascending, -1 at the end."""
    blocks = torch.cat([p.to(torch.int64) for p in parts], dim=-1)
    big = torch.iinfo(torch.int64).max
    blocks = torch.sort(torch.where(blocks < 0, big, blocks), dim=-1).values
    return torch.where(blocks == big, -1, blocks).to(torch.int32)


def random_tree(B: int, H: int, T: int, cfg: HiPConfig, generator: torch.Generator) -> torch.Tensor:
    """(B, H, NQB, n): ``min(n, L)`` distinct blocks drawn uniformly from each search range, -1 padded."""
    g = geometry(T, cfg)
    L_max = max(int(g["L"].max()), 1)
    u = torch.rand(B, H, g["nqb"], L_max, generator=generator)  # uniform keys: top-n = a uniform subset (CPU)
    u = u.masked_fill(torch.arange(L_max) >= g["L"][:, None], -1.0)
    top = torch.topk(u, min(cfg.n, L_max), dim=-1)
    picked = torch.where(top.values >= 0, top.indices + g["ns"], -1)
    return torch.nn.functional.pad(picked, (0, cfg.n - picked.shape[-1]), value=-1)


def select(method: str, q: torch.Tensor, k: torch.Tensor, cfg: HiPConfig,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Key blocks (B, H, NQB, S) of a pruned method for causal self-attention, q, k (B, H, T, D)."""
    B, H, T, _ = q.shape
    if method == "hip":
        return kernels.hip_select(q, k, **cfg.select_kwargs())
    if method == "window":  # the tree's mask_k keys extend the window instead
        return assemble(fixed_blocks(T, cfg, window=cfg.window + cfg.mask_k).expand(B, H, -1, -1).to(q.device))
    fixed = fixed_blocks(T, cfg).expand(B, H, -1, -1).to(q.device)  # sink + window
    if method == "oracle":
        return assemble(fixed, kernels.oracle_select(q, k, **cfg.select_kwargs()))
    if method == "random":
        return assemble(fixed, random_tree(B, H, T, cfg, generator).to(q.device))
    raise ValueError(f"unknown pruned method {method!r} (known: {', '.join(METHODS[1:])})")


def make_attend(method: str, cfg: HiPConfig, generator: torch.Generator | None = None,
                record: list | None = None) -> Attend:
    """The model's ``attend`` for `method`: dense in the first ``dense_layers`` layers, then
    block-sparse attention over the method's blocks. ``record`` (a list) collects
    ``(layer, q, k, blocks)`` of the pruned layers, for recall and the cache simulation."""
    if method == "dense":
        return dense

    def attend(layer, q, k, v):
        if layer < cfg.dense_layers:
            return dense(layer, q, k, v)
        blocks = select(method, q, k, cfg, generator)
        if record is not None:
            record.append((layer, q, k, blocks))
        return kernels.block_sparse_attention(q, k, v, blocks, block_q=cfg.block_q, block_k=cfg.block_k, causal=True)

    return attend


# ---- top-k recall (the paper's guarantee: HiP beats random pruning) ----------------------------
def tree_part(blocks: torch.Tensor, T: int, cfg: HiPConfig) -> torch.Tensor:
    """Boolean (B, H, NQB, NKB): the selected blocks that lie in the search range (not sink/window)."""
    g = geometry(T, cfg)
    nkb = -(-T // cfg.block_k)
    blocks = blocks.cpu()
    sel = torch.zeros(*blocks.shape[:3], nkb + 1, dtype=torch.bool)
    sel.scatter_(-1, torch.where(blocks < 0, nkb, blocks).to(torch.int64), True)
    j = torch.arange(nkb)
    in_range = (j >= g["ns"]) & (j < g["w_lo"][:, None])  # (NQB, NKB)
    return sel[..., :nkb] & in_range


def recall(blocks: torch.Tensor, oracle: torch.Tensor, T: int, cfg: HiPConfig) -> torch.Tensor:
    """Per query block whose search range exceeds ``n`` blocks: |chosen ∩ top-n| / n, shape (B, H, M)."""
    g = geometry(T, cfg)
    pruned = g["L"] > cfg.n  # elsewhere every method keeps the whole search range
    chosen, best = tree_part(blocks, T, cfg), tree_part(assemble(oracle), T, cfg)
    hits = (chosen & best).sum(-1).float()  # (B, H, NQB)
    return hits[..., pruned] / cfg.n
