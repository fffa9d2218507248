"""HiP: hierarchically pruned attention (Lee et al., ICLR 2025, arXiv:2406.09827).

HiP replaces the dense ``Tq x Tk`` score matrix by a per-query-block choice of key
blocks found with a tree search whose cost grows as ``O(T log T)`` (Sec. 3.1,
Algorithm 1), then attends only over the chosen blocks (Sec. 3.2, block-sparse
FlashAttention). Forward only, as in the paper.

Read bottom-up: the public :func:`hip_attention`, :func:`hip_select`,
:func:`block_sparse_attention`; their ``torch.library`` registration; the Triton
launchers and kernels; the geometry and the references at the top (the spec).

Selection, per query block of ``block_q`` queries (the paper's notation in brackets):

1. the key range is cut into key blocks of ``block_k`` tokens; the first
   ``ceil(sink / block_k)`` blocks (attention sinks) and the blocks that overlap the
   ``window`` keys before the query block (sliding window) are always kept;
2. the remaining key blocks (the *search range*, ``L`` blocks) are cut into
   ``n = mask_k / block_k`` equal chunks [the ``k`` branches];
3. each chunk is split into two halves; a half is scored by its representative, the
   centre key block, as ``max_{i, j} q_i . k_j`` over every ``block_stride_q``-th query
   of the block and the representative's keys; the ``n`` best halves survive (ties: the
   lower position wins, so the choice is deterministic); repeated until every chunk is
   one key block long, i.e. ``ceil(log2(ceil(L / n)))`` times.

With ``L <= n`` every block of the search range is kept, so with ``mask_k >= T`` HiP
equals dense (causal) attention exactly.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from ._dispatch import cdiv, check_launchable, eager_cpu, interpreting, next_pow2, tile_offsets, tl, triton, use_triton
from .attention import _acc_dtype

__all__ = [
    "hip_attention",
    "hip_select",
    "block_sparse_attention",
    "hip_select_reference",
    "block_sparse_attention_reference",
    "oracle_select",
]

# Defaults of the official code (DeepAuto-AI/hip-attention, `tree_k`, `tree_block_size_q`,
# `tree_block_stride_q`, `tree_block_size_k`); sink and window as the issue specifies.
MASK_K, BLOCK_Q, BLOCK_STRIDE_Q, BLOCK_K, SINK, WINDOW = 512, 64, 2, 2, 16, 256


# ----------------------------------------------------------------------------------------
# Geometry, shared by the reference, the launcher and the fake (meta) implementation
# ----------------------------------------------------------------------------------------


def _geometry(Tq: int, Tk: int, block_q: int, block_k: int, sink: int, window: int, causal: bool):
    """Per query block (int64 CPU tensors of length ``NQB``): window blocks ``[w_lo, w_hi)``,
    the search range ``[ns, w_lo) + [w_hi, end)`` of ``L`` blocks; and the scalar ``ns``.

    Query ``i`` sits at key position ``i + Tk - Tq`` (bottom-right, as in
    :func:`kernels.attention`). Causal: the window covers the ``window`` keys before the
    block's first query up to its last query, and nothing after it is searched.
    Non-causal: the window reaches ``window`` keys past the last query too, and the
    search range continues after it.
    """
    NQB, NKB = cdiv(Tq, block_q), cdiv(Tk, block_k)
    ns = min(cdiv(sink, block_k), NKB)
    qb = torch.arange(NQB, dtype=torch.int64)
    offset = Tk - Tq
    q_first = qb * block_q + offset
    q_last = torch.clamp((qb + 1) * block_q, max=Tq) - 1 + offset
    w_lo_tok = torch.clamp(q_first - window, 0, Tk)
    w_hi_tok = torch.clamp(q_last + 1 + (0 if causal else window), 0, Tk)
    w_lo = torch.clamp(w_lo_tok // block_k, min=ns)
    w_hi = torch.maximum(-(-w_hi_tok // block_k), w_lo)
    end = w_hi if causal else torch.full_like(w_hi, NKB)
    L = (w_lo - ns) + (end - w_hi)
    return dict(NQB=NQB, NKB=NKB, ns=ns, w_lo=w_lo, w_hi=w_hi, L=L)


def _n_iter(L_max: int, n: int) -> int:
    """Number of halvings until every chunk of ``ceil(L / n)`` blocks is one block long."""
    size = cdiv(L_max, n) if L_max > 0 else 0
    return math.ceil(math.log2(size)) if size > 1 else 0


def _num_selected(Tq, Tk, block_q, block_k, mask_k, sink, window, causal) -> int:
    """Width of :func:`hip_select`'s output, from shapes only (plain Python: the fake
    implementation runs it under FakeTensorMode, where new tensors would be symbolic)."""
    NKB = cdiv(Tk, block_k)
    ns = min(cdiv(sink, block_k), NKB)
    nw = 0
    for qb in range(cdiv(Tq, block_q)):
        q_first = qb * block_q + Tk - Tq
        q_last = min((qb + 1) * block_q, Tq) - 1 + Tk - Tq
        w_lo = max(min(max(q_first - window, 0), Tk) // block_k, ns)
        w_hi = max(cdiv(min(max(q_last + 1 + (0 if causal else window), 0), Tk), block_k), w_lo)
        nw = max(nw, w_hi - w_lo)
    return ns + max(mask_k // block_k, 1) + nw


def _assemble(tree: Tensor, g: dict) -> Tensor:
    """Concatenate sink, tree and window blocks; sort each row ascending, -1 at the end."""
    B, H, NQB, _ = tree.shape
    dev = tree.device
    sink = torch.arange(g["ns"], device=dev).expand(B, H, NQB, g["ns"])
    w_lo, w_hi = g["w_lo"].to(dev), g["w_hi"].to(dev)
    nw = int((w_hi - w_lo).max()) if NQB else 0
    win = w_lo[:, None] + torch.arange(nw, device=dev)  # (NQB, nw)
    win = torch.where(win < w_hi[:, None], win, -1).expand(B, H, NQB, nw)
    blocks = torch.cat([sink, tree.to(torch.int64), win], dim=-1)
    big = torch.iinfo(torch.int64).max
    blocks = torch.sort(torch.where(blocks < 0, big, blocks), dim=-1).values
    return torch.where(blocks == big, -1, blocks).to(torch.int32)


def _head_rows(B: int, H: int, group: int, Tk: int, device) -> Tensor:
    """(B, H, 1) index of the first key row of query head h in a (B * Hkv * Tk, D) view."""
    b = torch.arange(B, device=device).view(B, 1, 1)
    h = torch.arange(H, device=device).view(1, H, 1)
    return (b * (H // group) + h // group) * Tk


def _virtual_to_real(u: Tensor, ns, w_lo, w_hi) -> Tensor:
    """Search-range position ``u`` -> key block index (skipping the window blocks)."""
    before = w_lo - ns
    return u + ns + torch.where(u >= before, w_hi - w_lo, 0)


# ----------------------------------------------------------------------------------------
# References: plain torch, vectorised over query blocks
# ----------------------------------------------------------------------------------------


def _tree_search_reference(q, k, *, block_q, block_stride_q, block_k, mask_k, sink, window, causal):
    """Returns ``(tree, g, n_scores)``: tree (B, H, NQB, n) key blocks or -1 (unsorted)."""
    B, H, Tq, D = q.shape
    Tk, group = k.shape[2], H // k.shape[1]
    g = _geometry(Tq, Tk, block_q, block_k, sink, window, causal)
    NQB, dev = g["NQB"], q.device
    n = max(mask_k // block_k, 1)
    acc = _acc_dtype(q)
    ns = g["ns"]
    L, w_lo, w_hi = g["L"].to(dev), g["w_lo"].to(dev), g["w_hi"].to(dev)

    # every block_stride_q-th query of each block: (B, H, NQB, NQ, D), padded rows masked
    NQ = block_q // block_stride_q
    rows = torch.arange(NQB, device=dev)[:, None] * block_q + torch.arange(NQ, device=dev) * block_stride_q
    q_ok = rows < Tq  # (NQB, NQ)
    qs = q.to(acc)[:, :, rows.clamp(max=Tq - 1)]  # (B, H, NQB, NQ, D)
    k_rows = k.to(acc).reshape(-1, D)  # (B * Hkv * Tk, D): keys are gathered by row
    head_base = _head_rows(B, H, group, Tk, dev)  # (B, H, 1): first key row of each query head

    # n equal chunks of the search range [Algorithm 1, initialisation]
    i = torch.arange(n, device=dev)
    start = (L[:, None] * i) // n  # (NQB, n), positions in the search range
    size = (L[:, None] * (i + 1)) // n - start
    start = start.expand(B, H, NQB, n).clone()
    size = size.expand(B, H, NQB, n).clone()
    searching = L > n  # blocks with L <= n keep everything: nothing to score
    n_scores = 0
    for _ in range(_n_iter(int(L.max()) if NQB else 0, n)):
        # split every chunk into halves, interleaved (left_0, right_0, left_1, ...)
        left = size // 2
        h_start = torch.stack([start, start + left], -1).flatten(-2)  # (B, H, NQB, 2n)
        h_size = torch.stack([left, size - left], -1).flatten(-2)
        # score each half by its centre key block [Algorithm 1, representative]
        rep = _virtual_to_real(h_start + h_size // 2, ns, w_lo[:, None], w_hi[:, None])
        keys = rep[..., None] * block_k + torch.arange(block_k, device=dev)  # (B, H, NQB, 2n, bk)
        k_ok = (keys < Tk) & (h_size[..., None] > 0)
        rows_k = (head_base + keys.clamp(max=Tk - 1).flatten(2)).flatten()
        kg = k_rows.index_select(0, rows_k).view(B, H, NQB, 2 * n * block_k, D)
        s = torch.matmul(qs, kg.transpose(-1, -2))  # (B, H, NQB, NQ, 2n * bk)
        s = s.masked_fill(~q_ok[:, :, None], float("-inf")).amax(-2)  # max over queries
        s = s.view(B, H, NQB, 2 * n, block_k).masked_fill(~k_ok, float("-inf")).amax(-1)
        n_scores += int((k_ok.sum((-2, -1)) * q_ok.sum(-1)).masked_fill(~searching, 0).sum())
        # keep the n best halves; a stable sort lets the lower position win ties
        top = torch.sort(s, dim=-1, descending=True, stable=True).indices[..., :n]
        top = torch.sort(top, dim=-1).values  # back to positional order
        start, size = torch.gather(h_start, -1, top), torch.gather(h_size, -1, top)
    real = _virtual_to_real(start, ns, w_lo[:, None], w_hi[:, None])
    tree = torch.where(size > 0, real, -1)
    return tree, g, n_scores


def hip_select_reference(
    q: Tensor,
    k: Tensor,
    *,
    block_q: int = BLOCK_Q,
    block_stride_q: int = BLOCK_STRIDE_Q,
    block_k: int = BLOCK_K,
    mask_k: int = MASK_K,
    sink: int = SINK,
    window: int = WINDOW,
    causal: bool = True,
) -> Tensor:
    """HiP's key-block selection in plain torch (the spec of :func:`hip_select`)."""
    tree, g, _ = _tree_search_reference(q, k, block_q=block_q, block_stride_q=block_stride_q, block_k=block_k,
                                        mask_k=mask_k, sink=sink, window=window, causal=causal)
    return _assemble(tree, g)


def _select_defaults():
    return dict(block_q=BLOCK_Q, block_stride_q=BLOCK_STRIDE_Q, block_k=BLOCK_K, mask_k=MASK_K, sink=SINK,
                window=WINDOW, causal=True)


def block_sparse_attention_reference(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    blocks: Tensor,
    *,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    causal: bool = True,
    scale: Optional[float] = None,
) -> Tensor:
    """Block-sparse attention in plain torch: gathers each query block's keys (the spec).

    Memory and time ``O(Tq * n_selected * block_k)``, not ``O(Tq * Tk)``; a row's
    blocks must be distinct (as :func:`hip_select` returns them).
    """
    B, Hq, Tq, D = q.shape
    Tk, group = k.shape[2], Hq // k.shape[1]
    scale = D ** -0.5 if scale is None else scale
    acc = _acc_dtype(q)
    NQB, dev = cdiv(Tq, block_q), q.device
    blocks = blocks.to(torch.int64)
    keys = (blocks[..., None] * block_k + torch.arange(block_k, device=dev)).flatten(-2)  # (B, Hq, NQB, NK)
    k_ok = (blocks[..., None] >= 0).expand(*blocks.shape, block_k).flatten(-2) & (keys < Tk)
    NK = keys.shape[-1]
    rows = (_head_rows(B, Hq, group, Tk, dev) + keys.clamp(0, Tk - 1).flatten(2)).flatten()
    kg = k.to(acc).reshape(-1, D).index_select(0, rows).view(B, Hq, NQB, NK, D)
    vg = v.to(acc).reshape(-1, D).index_select(0, rows).view(B, Hq, NQB, NK, D)
    qp = torch.nn.functional.pad(q.to(acc), (0, 0, 0, NQB * block_q - Tq)).view(B, Hq, NQB, block_q, D)
    s = torch.matmul(qp, kg.transpose(-1, -2)) * scale  # (B, Hq, NQB, block_q, NK)
    ok = k_ok[..., None, :]
    if causal:
        pos = torch.arange(NQB * block_q, device=dev).view(NQB, block_q, 1) + (Tk - Tq)
        ok = ok & (keys[..., None, :] <= pos)
    s = s.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse))  # rows without keys -> 0
    out = torch.matmul(p, vg).view(B, Hq, NQB * block_q, D)[:, :, :Tq].contiguous()
    return out.to(q.dtype)


def oracle_select(q: Tensor, k: Tensor, query_blocks: Optional[Tensor] = None, **kw) -> Tensor:
    """The ``n = mask_k / block_k`` key blocks of HiP's search range with the highest true
    score ``max_{i in block, j in key block} q_i . k_j`` (all queries), per query block.

    The yardstick for HiP's recall. ``query_blocks`` (1-D) restricts it to some query
    blocks (memory ``O(block_q * Tk)`` per block). Returns ``(B, H, len, n)``, -1 padded.
    """
    kw = {**_select_defaults(), **kw}
    B, H, Tq, D = q.shape
    Tk, group = k.shape[2], H // k.shape[1]
    bq, bk, n = kw["block_q"], kw["block_k"], max(kw["mask_k"] // kw["block_k"], 1)
    g = _geometry(Tq, Tk, bq, bk, kw["sink"], kw["window"], kw["causal"])
    if query_blocks is None:
        query_blocks = torch.arange(g["NQB"])
    kk = k.float().repeat_interleave(group, dim=1)
    NKB = g["NKB"]
    kp = torch.nn.functional.pad(kk, (0, 0, 0, NKB * bk - Tk), value=0.0)
    out = torch.full((B, H, len(query_blocks), n), -1, dtype=torch.int64, device=q.device)
    for r, qb in enumerate(query_blocks.tolist()):
        L = int(g["L"][qb])
        qq = q[:, :, qb * bq:min((qb + 1) * bq, Tq)].float()
        s = torch.matmul(qq, kp.transpose(-1, -2)).amax(-2)  # (B, H, NKB * bk)
        s = s.masked_fill(torch.arange(NKB * bk, device=q.device) >= Tk, float("-inf"))
        s = s.view(B, H, NKB, bk).amax(-1)
        u = torch.arange(L, device=q.device)
        real = _virtual_to_real(u, g["ns"], int(g["w_lo"][qb]), int(g["w_hi"][qb]))
        top = torch.sort(s[..., real], dim=-1, descending=True, stable=True).indices[..., :n]
        out[..., r, :top.shape[-1]] = torch.sort(real[top], dim=-1).values
    return out


# ----------------------------------------------------------------------------------------
# Triton kernels
# ----------------------------------------------------------------------------------------


@triton.jit
def _hip_virtual_to_real(u, ns, w_lo, w_hi):
    return u + ns + tl.where(u >= w_lo - ns, w_hi - w_lo, 0)


@triton.jit
def _hip_select_fwd(Q, K, Tree, Starts, Sizes, Scores,  #
                    stride_qb, stride_qh, stride_qm, stride_qd,  #
                    stride_kb, stride_kh, stride_kn, stride_kd,  #
                    H, Tq, Tk, ns, window, n_iter,  #
                    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,  #
                    BLOCK_Q: tl.constexpr, STRIDE_Q: tl.constexpr, BLOCK_K: tl.constexpr,  #
                    N_SEL: tl.constexpr, BLOCK_SEL: tl.constexpr, BLOCK_HALF: tl.constexpr,  #
                    CAUSAL: tl.constexpr, IN_PRECISION: tl.constexpr):
    # One program runs the whole tree search of one query block of one head. The chunk
    # lists (double-buffered) and the half scores live in a small global scratch owned by
    # the program; tl.debug_barrier() orders the writes of one phase before the reads of
    # the next (they are done by different threads of the program).
    qb = tl.program_id(0)
    off_bh = tl.program_id(1)
    NQB = tl.num_programs(0)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    off_hkv = off_h // GROUP
    row = off_bh.to(tl.int64) * NQB + qb
    Starts += row * 2 * N_SEL
    Sizes += row * 2 * N_SEL
    Scores += row * 2 * N_SEL
    K += off_b * stride_kb + off_hkv * stride_kh

    # -- geometry: the same formulas as `_geometry` --
    offset = Tk - Tq
    NKB = tl.cdiv(Tk, BLOCK_K)
    q_first = qb * BLOCK_Q + offset
    q_last = tl.minimum((qb + 1) * BLOCK_Q, Tq) - 1 + offset
    w_lo_tok = tl.minimum(tl.maximum(q_first - window, 0), Tk)
    if CAUSAL:
        w_hi_tok = tl.minimum(tl.maximum(q_last + 1, 0), Tk)
    else:
        w_hi_tok = tl.minimum(tl.maximum(q_last + 1 + window, 0), Tk)
    w_lo = tl.maximum(w_lo_tok // BLOCK_K, ns)
    w_hi = tl.maximum(tl.cdiv(w_hi_tok, BLOCK_K), w_lo)
    if CAUSAL:
        end = w_hi
    else:
        end = NKB
    L = (w_lo - ns) + (end - w_hi)

    # -- N_SEL equal chunks of the search range --
    offs_c = tl.arange(0, BLOCK_SEL)
    mask_c = offs_c < N_SEL
    c_start = (L * offs_c) // N_SEL
    c_size = tl.where(mask_c, (L * (offs_c + 1)) // N_SEL - c_start, 0)
    tl.store(Starts + offs_c, c_start, mask=mask_c)
    tl.store(Sizes + offs_c, c_size, mask=mask_c)

    # -- every STRIDE_Q-th query of the block stays resident --
    offs_q = qb * BLOCK_Q + tl.arange(0, BLOCK_Q // STRIDE_Q) * STRIDE_Q
    mask_q = offs_q < Tq
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + tile_offsets(offs_q, stride_qm, offs_d, stride_qd),
                mask=mask_q[:, None] & mask_d[None, :], other=0.0)

    # which half of the double buffer holds the result (set outside the `if`: a variable
    # assigned in only one branch of a runtime condition would change type)
    final = tl.where(L > N_SEL, n_iter % 2, 0)
    if L > N_SEL:  # otherwise every block of the search range is kept: nothing to score
        for it in range(n_iter):
            src = (it % 2) * N_SEL
            dst = N_SEL - src
            tl.debug_barrier()
            # -- score the 2 * N_SEL halves, BLOCK_HALF at a time --
            # key tile: BLOCK_HALF halves x BLOCK_K keys of each half's centre block. No
            # causal mask is needed: the search range ends before the first query.
            offs_t = tl.arange(0, BLOCK_HALF * BLOCK_K)
            for h0 in range(0, 2 * N_SEL, BLOCK_HALF):
                hv = h0 + offs_t // BLOCK_K  # half id of each key column
                mask_h = hv < 2 * N_SEL
                cs = tl.load(Starts + src + hv // 2, mask=mask_h, other=0)
                csz = tl.load(Sizes + src + hv // 2, mask=mask_h, other=0)
                left = csz // 2
                right = hv % 2
                hs = cs + right * left
                hsz = tl.where(right == 1, csz - left, left)
                rep = _hip_virtual_to_real(hs + hsz // 2, ns, w_lo, w_hi)
                key = rep * BLOCK_K + offs_t % BLOCK_K
                valid = mask_h & (hsz > 0) & (key < Tk)
                kT = tl.load(K + tile_offsets(offs_d, stride_kd, key, stride_kn),
                             mask=valid[None, :] & mask_d[:, None], other=0.0)  # (BLOCK_D, BLOCK_HALF * BLOCK_K)
                s = tl.dot(q, kT, input_precision=IN_PRECISION)  # fp32 (NQ, BLOCK_HALF * BLOCK_K)
                s = tl.max(tl.where(mask_q[:, None], s, float("-inf")), 0)  # max over queries
                s = tl.where(valid, s, float("-inf"))
                s = tl.max(tl.reshape(s, (BLOCK_HALF, BLOCK_K)), 1)  # max over the block's keys
                offs_hs = h0 + tl.arange(0, BLOCK_HALF)
                tl.store(Scores + offs_hs, s, mask=offs_hs < 2 * N_SEL)
            tl.debug_barrier()
            # -- keep the N_SEL best halves, in positional order --
            offs_hv = tl.arange(0, 2 * BLOCK_SEL)
            mask_hv = offs_hv < 2 * N_SEL
            s = tl.load(Scores + offs_hv, mask=mask_hv, other=float("-inf")) + 0.0  # + 0.0: -0.0 -> +0.0
            # pack (score, -position) in one int64 whose order is (score desc, position asc):
            # flipping the magnitude bits of negative floats makes int32 order = float order
            bits = s.to(tl.int32, bitcast=True)
            key32 = bits ^ ((bits >> 31) & 0x7FFFFFFF)
            packed = (key32.to(tl.int64) << 32) | (0x7FFFFFFF - offs_hv).to(tl.int64)
            packed = tl.where(mask_hv, packed, -9223372036854775807 - 1)
            top = tl.topk(packed, BLOCK_SEL)  # sorted, largest first
            thr = tl.min(tl.where(tl.arange(0, BLOCK_SEL) < N_SEL, top, 9223372036854775807), 0)
            keep = packed >= thr  # exactly N_SEL halves: the packed keys are distinct
            slot = tl.cumsum(keep.to(tl.int32), 0) - 1
            cs = tl.load(Starts + src + offs_hv // 2, mask=mask_hv, other=0)
            csz = tl.load(Sizes + src + offs_hv // 2, mask=mask_hv, other=0)
            left = csz // 2
            right = offs_hv % 2
            tl.store(Starts + dst + slot, cs + right * left, mask=keep)
            tl.store(Sizes + dst + slot, tl.where(right == 1, csz - left, left), mask=keep)
        tl.debug_barrier()
    c_start = tl.load(Starts + final * N_SEL + offs_c, mask=mask_c, other=0)
    c_size = tl.load(Sizes + final * N_SEL + offs_c, mask=mask_c, other=0)
    real = _hip_virtual_to_real(c_start, ns, w_lo, w_hi)
    tl.store(Tree + row * N_SEL + offs_c, tl.where(c_size > 0, real, -1), mask=mask_c)


@triton.jit
def _bsa_fwd(Q, K, V, Blocks, Out,  #
             stride_qb, stride_qh, stride_qm, stride_qd,  #
             stride_kb, stride_kh, stride_kn, stride_kd,  #
             stride_vb, stride_vh, stride_vn, stride_vd,  #
             stride_ib, stride_ih, stride_iq, stride_is,  #
             stride_ob, stride_oh, stride_om, stride_od,  #
             Hq, Tq, Tk, n_sel, sm_scale,  #
             GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,  #
             BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_SEL: tl.constexpr,  #
             CAUSAL: tl.constexpr, IN_PRECISION: tl.constexpr):
    # FlashAttention forward over a gathered key set: each step loads BLOCK_SEL selected
    # key blocks (BLOCK_SEL * BLOCK_K keys) through index pointers.
    qb = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // Hq).to(tl.int64)
    off_h = (off_bh % Hq).to(tl.int64)
    off_hkv = off_h // GROUP
    K += off_b * stride_kb + off_hkv * stride_kh
    V += off_b * stride_vb + off_hkv * stride_vh
    Blocks += off_b * stride_ib + off_h * stride_ih + qb * stride_iq
    offs_m = qb * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    mask_md = (offs_m[:, None] < Tq) & mask_d[None, :]
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + tile_offsets(offs_m, stride_qm, offs_d, stride_qd),
                mask=mask_md, other=0.0)
    m_i = tl.zeros([BLOCK_Q], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_Q], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q, BLOCK_D], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # 1/ln(2): exp2 instead of exp
    offs_t = tl.arange(0, BLOCK_SEL * BLOCK_K)
    for s0 in range(0, n_sel, BLOCK_SEL):
        sel = s0 + offs_t // BLOCK_K
        blk = tl.load(Blocks + sel * stride_is, mask=sel < n_sel, other=-1)
        offs_n = blk * BLOCK_K + offs_t % BLOCK_K
        valid = (blk >= 0) & (offs_n < Tk)
        kT = tl.load(K + tile_offsets(offs_d, stride_kd, offs_n, stride_kn),
                     mask=valid[None, :] & mask_d[:, None], other=0.0)
        qk = tl.dot(q, kT, input_precision=IN_PRECISION) * qk_scale
        keep = valid[None, :]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None] + (Tk - Tq))
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)  # no (-inf) - (-inf)
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + tile_offsets(offs_n, stride_vn, offs_d, stride_vd),
                    mask=valid[:, None] & mask_d[None, :], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=IN_PRECISION)
        m_i = m_ij
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # rows without keys output 0
    acc = acc / l_safe[:, None]
    tl.store(Out + off_b * stride_ob + off_h * stride_oh + tile_offsets(offs_m, stride_om, offs_d, stride_od),
             acc.to(Out.type.element_ty), mask=mask_md)


# ----------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------


def gpu_block_half(block_k: int) -> int:
    """Halves scored per step of the selection kernel on CUDA: a 128-key tile (64 halves at
    the default block_k = 2). The interpreter uses 16."""
    return max(16, 128 // block_k)


def gpu_block_sel(block_k: int) -> int:
    """Selected key blocks gathered per step of the block-sparse kernel on CUDA: 64 keys."""
    return max(1, 64 // block_k)


def _triton_hip_tree(q, k, *, block_q, block_stride_q, block_k, mask_k, sink, window, causal, block_half=None):
    """Launch :func:`_hip_select_fwd`; returns ``(tree, geometry)`` like the reference."""
    check_launchable(q, k)
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    g = _geometry(Tq, Tk, block_q, block_k, sink, window, causal)
    n = max(mask_k // block_k, 1)
    NQ = block_q // block_stride_q
    if NQ < 16 or NQ & (NQ - 1) or block_k & (block_k - 1):
        raise ValueError(f"hip_select (Triton): block_q / block_stride_q = {NQ} must be a power of two >= 16 "
                         f"and block_k = {block_k} a power of two")
    rows = B * H * g["NQB"]
    starts = torch.zeros((rows, 2 * n), dtype=torch.int32, device=q.device)
    sizes = torch.zeros((rows, 2 * n), dtype=torch.int32, device=q.device)
    scores = torch.empty((rows, 2 * n), dtype=torch.float32, device=q.device)
    tree = torch.empty((B, H, g["NQB"], n), dtype=torch.int32, device=q.device)
    BLOCK_HALF = block_half or (16 if interpreting() else gpu_block_half(block_k))
    BLOCK_HALF = max(min(BLOCK_HALF, next_pow2(2 * n)), cdiv(16, block_k))  # tl.dot needs >= 16 columns
    _hip_select_fwd[(g["NQB"], B * H)](
        q, k, tree, starts, sizes, scores,  #
        *q.stride(), *k.stride(),  #
        H, Tq, Tk, g["ns"], window, _n_iter(int(g["L"].max()), n),  #
        GROUP=H // k.shape[1], HEAD_DIM=D, BLOCK_D=next_pow2(D, 16),  #
        BLOCK_Q=block_q, STRIDE_Q=block_stride_q, BLOCK_K=block_k,  #
        N_SEL=n, BLOCK_SEL=next_pow2(n), BLOCK_HALF=BLOCK_HALF,  #
        CAUSAL=causal, IN_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",  #
        num_warps=1 if interpreting() else 4)
    return tree, g


def _triton_block_sparse_attention(q, k, v, blocks, *, block_q, block_k, causal, scale, block_sel=None):
    """Launch :func:`_bsa_fwd`."""
    check_launchable(q, k, v, blocks)
    B, Hq, Tq, D = q.shape
    Tk = k.shape[2]
    if block_q < 16 or block_q & (block_q - 1) or block_k & (block_k - 1):
        raise ValueError(f"block_sparse_attention (Triton): block_q={block_q} must be a power of two >= 16 and "
                         f"block_k={block_k} a power of two")
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    n_sel = blocks.shape[-1]
    BLOCK_SEL = block_sel or (max(1, 16 // block_k) if interpreting() else gpu_block_sel(block_k))
    BLOCK_SEL = max(BLOCK_SEL, cdiv(16, block_k))  # tl.dot needs >= 16 columns
    _bsa_fwd[(cdiv(Tq, block_q), B * Hq)](
        q, k, v, blocks, out,  #
        *q.stride(), *k.stride(), *v.stride(), *blocks.stride(), *out.stride(),  #
        Hq, Tq, Tk, n_sel, scale,  #
        GROUP=Hq // k.shape[1], HEAD_DIM=D, BLOCK_D=next_pow2(D, 16),  #
        BLOCK_Q=block_q, BLOCK_K=block_k, BLOCK_SEL=BLOCK_SEL,  #
        CAUSAL=causal, IN_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",  #
        num_warps=1 if interpreting() else 4, num_stages=1 if interpreting() else 2)
    return out


# ----------------------------------------------------------------------------------------
# torch.library registration (forward only, as in the paper)
# ----------------------------------------------------------------------------------------


@torch.library.custom_op("kernels::hip_select", mutates_args=())
def _hip_select_op(q: Tensor, k: Tensor, block_q: int, block_stride_q: int, block_k: int, mask_k: int,
                   sink: int, window: int, causal: bool) -> Tensor:
    return hip_select_reference(q, k, block_q=block_q, block_stride_q=block_stride_q, block_k=block_k,
                                mask_k=mask_k, sink=sink, window=window, causal=causal)


@_hip_select_op.register_kernel("cuda")
def _hip_select_cuda(q, k, block_q, block_stride_q, block_k, mask_k, sink, window, causal):
    kw = dict(block_q=block_q, block_stride_q=block_stride_q, block_k=block_k, mask_k=mask_k, sink=sink,
              window=window, causal=causal)
    NQ = block_q // block_stride_q
    if use_triton(q, k) and NQ >= 16 and not NQ & (NQ - 1) and not block_k & (block_k - 1):
        tree, g = _triton_hip_tree(q, k, **kw)
        return _assemble(tree, g)
    return hip_select_reference(q, k, **kw)


@_hip_select_op.register_fake
def _hip_select_fake(q, k, block_q, block_stride_q, block_k, mask_k, sink, window, causal):
    B, H, Tq, _ = q.shape
    nsel = _num_selected(Tq, k.shape[2], block_q, block_k, mask_k, sink, window, causal)
    return q.new_empty((B, H, cdiv(Tq, block_q), nsel), dtype=torch.int32)


@torch.library.custom_op("kernels::block_sparse_attention", mutates_args=())
def _bsa_op(q: Tensor, k: Tensor, v: Tensor, blocks: Tensor, block_q: int, block_k: int, causal: bool,
            scale: float) -> Tensor:
    return block_sparse_attention_reference(q, k, v, blocks, block_q=block_q, block_k=block_k, causal=causal,
                                            scale=scale)


@_bsa_op.register_kernel("cuda")
def _bsa_cuda(q, k, v, blocks, block_q, block_k, causal, scale):
    if use_triton(q, k, v) and block_q >= 16 and not block_q & (block_q - 1) and not block_k & (block_k - 1):
        return _triton_block_sparse_attention(q, k, v, blocks, block_q=block_q, block_k=block_k, causal=causal,
                                              scale=scale)
    return block_sparse_attention_reference(q, k, v, blocks, block_q=block_q, block_k=block_k, causal=causal,
                                            scale=scale)


@_bsa_op.register_fake
def _bsa_fake(q, k, v, blocks, block_q, block_k, causal, scale):
    return q.new_empty(q.shape)


# ----------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------


def _check(q, k, v=None):
    if q.dim() != 4 or k.dim() != 4 or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"hip: q (B, Hq, Tq, D) and k (B, Hkv, Tk, D) expected; got {tuple(q.shape)}, {tuple(k.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"hip: Hq={q.shape[1]} must be a multiple of Hkv={k.shape[1]}")
    if v is not None and v.shape != k.shape:
        raise ValueError(f"hip: v must have k's shape {tuple(k.shape)}; got {tuple(v.shape)}")


def hip_select(
    q: Tensor,
    k: Tensor,
    *,
    block_q: int = BLOCK_Q,
    block_stride_q: int = BLOCK_STRIDE_Q,
    block_k: int = BLOCK_K,
    mask_k: int = MASK_K,
    sink: int = SINK,
    window: int = WINDOW,
    causal: bool = True,
) -> Tensor:
    """HiP's hierarchical key-block selection (arXiv:2406.09827, Sec. 3.1, Algorithm 1).

    .. math::
        \\mathcal{B}_b = \\mathrm{sink} \\cup \\mathrm{window}_b \\cup
        \\operatorname{tree-top}_{n}\\Big(\\max_{i \\in b,\\, j \\in \\mathrm{rep}(c)} q_i \\cdot k_j\\Big),
        \\qquad n = \\mathrm{mask\\_k} / \\mathrm{block\\_k}

    The tree search halves ``n`` chunks of the search range ``ceil(log2(L / n))`` times,
    keeping the ``n`` halves whose centre key block scores highest (ties: lower position
    wins). Triton on CUDA (one program per query block and head), reference elsewhere.

    Args:
        q (Tensor): queries. k (Tensor): keys (grouped-query heads allowed).
        block_q (int, optional): queries per block. (default: :obj:`64`)
        block_stride_q (int, optional): score every ``block_stride_q``-th query of a block.
            (default: :obj:`2`)
        block_k (int, optional): keys per key block. (default: :obj:`2`)
        mask_k (int, optional): keys kept by the tree search per query block (its budget),
            besides the sink and window. (default: :obj:`512`)
        sink (int, optional): first keys always kept. (default: :obj:`16`)
        window (int, optional): keys before each query block always kept. (default: :obj:`256`)
        causal (bool, optional): bottom-right aligned causal; if False the window also reaches
            ``window`` keys past the block and the search covers the rest. (default: :obj:`True`)

    Shapes:
        - **q**: :math:`(B, H_q, T_q, D)`; **k**: :math:`(B, H_{kv}, T_k, D)`
        - **output**: int32 :math:`(B, H_q, \\lceil T_q / \\mathrm{block\\_q} \\rceil, S)`, the
          key-block indices of each query block, distinct, sorted ascending, padded at the end
          with -1; :math:`S = \\lceil \\mathrm{sink}/\\mathrm{block\\_k} \\rceil + n + ` (window blocks)
    """
    _check(q, k)
    if eager_cpu(q, k):
        return hip_select_reference(q, k, block_q=block_q, block_stride_q=block_stride_q, block_k=block_k,
                                    mask_k=mask_k, sink=sink, window=window, causal=causal)
    return _hip_select_op(q, k, block_q, block_stride_q, block_k, mask_k, sink, window, causal)


def block_sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    blocks: Tensor,
    *,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    causal: bool = True,
    scale: Optional[float] = None,
) -> Tensor:
    """Block-sparse attention over given key blocks (HiP, arXiv:2406.09827, Sec. 3.2).

    .. math::
        \\mathrm{out}_i = \\sum_{j \\in \\mathcal{K}_{b(i)}} \\mathrm{softmax}_j(s\\, q_i \\cdot k_j)\\, v_j,
        \\qquad \\mathcal{K}_b = \\{\\, \\beta\\, \\mathrm{block\\_k} + t : \\beta \\in \\mathrm{blocks}_b,\\ 0 \\le t < \\mathrm{block\\_k} \\,\\}

    Forward only. Causal masking (bottom-right) applies inside the selected blocks.

    Args:
        q, k, v (Tensor): as in :func:`kernels.attention`.
        blocks (Tensor): int key-block indices per query block, -1 = none; distinct in a row.
        block_q (int, optional): queries per block. (default: :obj:`64`)
        block_k (int, optional): keys per key block. (default: :obj:`2`)
        causal (bool, optional): (default: :obj:`True`)
        scale (float, optional): (default: ``D ** -0.5``)

    Shapes:
        - **blocks**: :math:`(B, H_q, \\lceil T_q / \\mathrm{block\\_q} \\rceil, S)`
        - **output**: :math:`(B, H_q, T_q, D)`
    """
    _check(q, k, v)
    B, Hq, Tq, _ = q.shape
    if blocks.shape[:3] != (B, Hq, cdiv(Tq, block_q)):
        raise ValueError(f"block_sparse_attention: blocks must be (B, Hq, ceil(Tq/block_q), S) = "
                         f"{(B, Hq, cdiv(Tq, block_q))} + (S,); got {tuple(blocks.shape)}")
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if eager_cpu(q, k, v):
        return block_sparse_attention_reference(q, k, v, blocks, block_q=block_q, block_k=block_k, causal=causal,
                                                scale=scale)
    return _bsa_op(q, k, v, blocks, block_q, block_k, causal, scale)


def hip_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask_k: int = MASK_K,
    block_q: int = BLOCK_Q,
    block_stride_q: int = BLOCK_STRIDE_Q,
    block_k: int = BLOCK_K,
    sink: int = SINK,
    window: int = WINDOW,
    causal: bool = True,
    scale: Optional[float] = None,
) -> Tensor:
    """HiP attention (arXiv:2406.09827): :func:`hip_select` then :func:`block_sparse_attention`.

    .. math::
        \\mathrm{out}_i = \\sum_{j \\in \\mathcal{K}_{b(i)}} \\mathrm{softmax}_j(s\\, q_i \\cdot k_j)\\, v_j

    Selection ``O(T log T)`` key scores, attention ``O(T (mask_k + window + sink))``;
    equals :func:`kernels.attention` exactly when ``mask_k`` covers the whole key range.
    Arguments as in :func:`hip_select` and :func:`block_sparse_attention`. Forward only.

    Shapes:
        - **q**: :math:`(B, H_q, T_q, D)`; **k**, **v**: :math:`(B, H_{kv}, T_k, D)`
        - **output**: :math:`(B, H_q, T_q, D)`
    """
    blocks = hip_select(q, k, block_q=block_q, block_stride_q=block_stride_q, block_k=block_k, mask_k=mask_k,
                        sink=sink, window=window, causal=causal)
    return block_sparse_attention(q, k, v, blocks, block_q=block_q, block_k=block_k, causal=causal, scale=scale)
