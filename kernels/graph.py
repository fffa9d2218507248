"""Sparse graph attention and segment-sum message passing: torch reference, Triton kernels.

Two scores, one softmax-aggregate (read bottom-up: public functions, registration,
launchers, kernels, reference):

* :func:`graph_attention`, the transformer form (e.g. DeepGate4's sparse attention over
  fan-in / fan-out cones): ``s_ij = scale * q_i . k_j`` restricted to the graph's edges;
* :func:`gat_attention`, the GAT form (Velickovic et al., 2018; PyG ``GATConv``):
  ``s_ij = LeakyReLU(a_src . x_j + a_dst . x_i)``. It is the same op with
  ``q = a_dst . x_dst`` and ``k = a_src . x_src`` of width 1 and the score
  ``LeakyReLU(q_i + k_j)``; that is why one kernel serves both.

Both then compute ``out_i = sum_{j -> i} softmax_j(s_ij + bias_ij) v_j`` over the incoming
edges of each destination ``i``. The forward walks the graph in CSR order (edges grouped
by destination), one program per block of destination rows and all heads, one edge per
row and step, with an online softmax (running max ``m_i``, normaliser ``l_i``, ``acc``).
Row blocks are degree-aware: rows are taken in order of decreasing degree
(:func:`degree_order`), so a block loops to its own rows' largest degree rather than to
that of whatever hub shares its id range (DeepGate4's AIGs: fan-in 2, skewed fan-out). The backward
is deterministic without float atomics: a CSR pass computes ``dq`` and the per-edge
``p`` and ``dS`` into an ``(E, H)`` buffer, a CSC pass (edges grouped by source, via the
permutation ``csc_eid``) sums ``dk`` and ``dv`` in a fixed order.

:func:`segment_sum` is the plain ``out[index[e]] += src[e]`` (force assembly, elastic
networks) with the same CSR trick on CUDA.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import torch
from torch import Tensor

from ._dispatch import cdiv, check_launchable, eager_cpu, interpreting, next_pow2, tl, triton, use_triton
from .attention import _acc_dtype

__all__ = ["GraphLayout", "graph_layout", "graph_attention", "gat_attention", "segment_sum",
           "graph_attention_reference", "gat_attention_reference", "segment_sum_reference"]


# ----------------------------------------------------------------------------------------
# Layout
# ----------------------------------------------------------------------------------------


class GraphLayout(NamedTuple):
    """CSR (by destination) and CSC (by source) views of an edge list; build once per graph."""

    rowptr: Tensor  # (N_dst + 1,) int64: edges of destination i are CSR positions rowptr[i]:rowptr[i+1]
    col: Tensor  # (E,) int64: source of each edge, CSR order
    dst: Tensor  # (E,) int64: destination of each edge, CSR order
    colptr: Tensor  # (N_src + 1,) int64: edges of source j are csc_eid[colptr[j]:colptr[j+1]]
    csc_eid: Tensor  # (E,) int64: CSR position of each edge, CSC order
    perm: Tensor  # (E,) int64: CSR position -> index in the original edge_index


def graph_layout(edge_index: Tensor, num_src: Optional[int] = None, num_dst: Optional[int] = None) -> GraphLayout:
    """Sort ``edge_index`` (row 0 = source ``j``, row 1 = destination ``i``; PyG's
    ``source_to_target``) into a :class:`GraphLayout`. Stable sorts: ties keep input order."""
    src, dst = edge_index[0].long(), edge_index[1].long()
    num_src = int(src.max()) + 1 if num_src is None and src.numel() else (num_src or 0)
    num_dst = int(dst.max()) + 1 if num_dst is None and dst.numel() else (num_dst or 0)
    perm = torch.argsort(dst, stable=True)
    col, dst_s = src[perm], dst[perm]
    rowptr = torch.zeros(num_dst + 1, dtype=torch.int64, device=src.device)
    rowptr[1:] = torch.cumsum(torch.bincount(dst, minlength=num_dst), 0)
    csc_eid = torch.argsort(col, stable=True)
    colptr = torch.zeros(num_src + 1, dtype=torch.int64, device=src.device)
    colptr[1:] = torch.cumsum(torch.bincount(src, minlength=num_src), 0)
    return GraphLayout(rowptr, col, dst_s, colptr, csc_eid, perm)


# ----------------------------------------------------------------------------------------
# Reference: plain torch over the edge list (materialises (E, H, D) gathers)
# ----------------------------------------------------------------------------------------


def _edge_logits(qi, kj, scale, negative_slope, gat):
    """Per-edge score before the bias: (E, H). Returns (s, z) with z the LeakyReLU input."""
    if gat:
        z = (qi + kj).sum(-1)  # (E, H): q, k have width 1 here
        return torch.nn.functional.leaky_relu(z, negative_slope), z
    return (qi * kj).sum(-1) * scale, None


def _graph_fwd_reference(q, k, v, bias, col, dst, num_dst, scale, negative_slope, gat):
    acc = _acc_dtype(q)
    H = q.shape[1]
    s, _ = _edge_logits(q.to(acc)[dst], k.to(acc)[col], scale, negative_slope, gat)  # (E, H)
    if bias is not None:
        s = s + bias.to(acc)
    m = torch.full((num_dst, H), float("-inf"), dtype=acc, device=q.device)
    m = m.scatter_reduce(0, dst[:, None].expand(-1, H), s, "amax", include_self=True)  # segment max
    # A destination whose incoming edges are all masked (every score -inf), or that has none, has
    # m = -inf and den = 0: it takes 0 for m and 1 for den, so that its output is 0 (not
    # exp(-inf - -inf) / 0 = NaN) and autograd's gradients through it are 0 (this function is
    # also the eager CPU path). Elsewhere m and den are used unchanged.
    m = torch.where(torch.isneginf(m), 0.0, m)
    p = torch.exp(s - m[dst])
    den = torch.zeros((num_dst, H), dtype=acc, device=q.device).index_add(0, dst, p)
    empty = den == 0
    p = p / torch.where(empty, 1.0, den)[dst]
    out = torch.zeros((num_dst, H, v.shape[-1]), dtype=acc, device=q.device)
    out = out.index_add(0, dst, p[..., None] * v.to(acc)[col])
    lse = (m + torch.log(den)).masked_fill(empty, float("-inf"))  # -inf where no edge is seen
    return out.to(v.dtype), lse


def _graph_bwd_reference(do, q, k, v, bias, out, lse, col, dst, scale, negative_slope, gat, need_dbias):
    """.. math::
        dv_j = \\sum_{j \\to i} p_{ij}\\, do_i, \\quad
        dS_{ij} = p_{ij} (do_i \\cdot v_j - do_i \\cdot out_i), \\quad
        dq_i = \\sum_j g_{ij} \\partial_{q_i} s, \\quad dk_j = \\sum_i g_{ij} \\partial_{k_j} s
    """
    acc = _acc_dtype(q)
    qi, kj, vj = q.to(acc)[dst], k.to(acc)[col], v.to(acc)[col]
    s, z = _edge_logits(qi, kj, scale, negative_slope, gat)
    if bias is not None:
        s = s + bias.to(acc)
    lse_e = lse.to(acc)[dst]
    p = torch.exp(s - torch.where(torch.isinf(lse_e), 0.0, lse_e))  # (E, H)
    do = do.to(acc)
    do_i = do[dst]
    delta = (do * out.to(acc)).sum(-1)  # (N_dst, H)
    ds = p * ((do_i * vj).sum(-1) - delta[dst])
    dv = torch.zeros(v.shape, dtype=acc, device=v.device).index_add(0, col, p[..., None] * do_i)
    if gat:  # d LeakyReLU(z) / dz, and dz / dq = dz / dk = 1
        gz = (ds * torch.where(z > 0, 1.0, negative_slope))[..., None]
        dq = torch.zeros(q.shape, dtype=acc, device=q.device).index_add(0, dst, gz.expand_as(qi))
        dk = torch.zeros(k.shape, dtype=acc, device=k.device).index_add(0, col, gz.expand_as(kj))
    else:
        g = (ds * scale)[..., None]
        dq = torch.zeros(q.shape, dtype=acc, device=q.device).index_add(0, dst, g * kj)
        dk = torch.zeros(k.shape, dtype=acc, device=k.device).index_add(0, col, g * qi)
    dbias = ds.to(bias.dtype) if need_dbias else q.new_empty(0)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dbias


def graph_attention_reference(q, k, v, edge_index, *, scale=None, edge_bias=None):
    """Dot-product graph attention in plain torch over ``edge_index`` (the spec)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    bias = _bias_eh(edge_bias, q.shape[1])
    return _graph_fwd_reference(q, k, v, bias, edge_index[0].long(), edge_index[1].long(), q.shape[0],
                                scale, 0.0, False)[0]


def gat_attention_reference(x_src, x_dst, att_src, att_dst, edge_index, *, negative_slope=0.2, edge_bias=None):
    """GAT attention in plain torch over ``edge_index`` (the spec of :func:`gat_attention`)."""
    x_dst = x_src if x_dst is None else x_dst
    a_src = (x_src * att_src).sum(-1, keepdim=True)
    a_dst = (x_dst * att_dst).sum(-1, keepdim=True)
    bias = _bias_eh(edge_bias, x_src.shape[1])
    return _graph_fwd_reference(a_dst, a_src, x_src, bias, edge_index[0].long(), edge_index[1].long(),
                                x_dst.shape[0], 1.0, negative_slope, True)[0]


def segment_sum_reference(src: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """``out[n] = sum_{e: index[e] = n} src[e]`` with ``index_add`` (fp32 accumulation)."""
    acc = _acc_dtype(src)
    out = torch.zeros((num_segments, *src.shape[1:]), dtype=acc, device=src.device)
    return out.index_add(0, index.long(), src.to(acc)).to(src.dtype)


def _bias_eh(edge_bias, H):
    if edge_bias is None:
        return None
    return edge_bias[:, None].expand(-1, H) if edge_bias.dim() == 1 else edge_bias


# ----------------------------------------------------------------------------------------
# Triton kernels
# ----------------------------------------------------------------------------------------


@triton.jit
def _graph_edge_score(q, k, sm_scale, negative_slope, GAT: tl.constexpr):
    # (BLOCK_M, BLOCK_H, BLOCK_D) x 2 -> (BLOCK_M, BLOCK_H) scores in natural-log units, and z for GAT
    if GAT:
        z = tl.sum(q + k, 2)  # width-1 features: padded columns are 0 in both
        s = tl.where(z > 0, z, z * negative_slope)
    else:
        z = tl.sum(q * k, 2)
        s = z * sm_scale
    return s, z


# Scheduling, shared by the three kernels (degree-aware, all heads in one program):
# * a program owns BLOCK_M rows taken from `Order`, the rows sorted by degree (largest
#   first), not BLOCK_M consecutive node ids: step r handles the r-th edge of every row, so
#   a block loops to the largest degree *of its own rows*, which sorting makes close to each
#   row's degree. With consecutive ids a block of fan-in-2 AIG gates that holds one node of
#   fan-out 1000 would run 1000 steps for 63 idle rows. Largest first also starts the long
#   programs early (longest-processing-time order), so they do not form a tail at the end;
# * the H heads of a row are one (BLOCK_H, BLOCK_D) tile: a program reads the row's edge
#   list (rowptr, col) once for all heads, and each gathered source row of k / v is one
#   contiguous (H, D) read instead of H strided ones.


@triton.jit
def _graph_attn_fwd(Q, K, V, Bias, Rowptr, Col, Order, Out, LSE,  #
                    stride_qn, stride_qh, stride_qd,  #
                    stride_kn, stride_kh, stride_kd,  #
                    stride_vn, stride_vh, stride_vc,  #
                    stride_be, stride_bh,  #
                    stride_on, stride_oh, stride_oc,  #
                    N_dst, H, sm_scale, negative_slope,  #
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, V_DIM: tl.constexpr, BLOCK_C: tl.constexpr,  #
                    BLOCK_H: tl.constexpr, BLOCK_M: tl.constexpr, GAT: tl.constexpr, HAS_BIAS: tl.constexpr):
    offs_b = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_b < N_dst
    rows = tl.load(Order + offs_b, mask=mask_m, other=0)  # destination nodes of this block
    start = tl.load(Rowptr + rows, mask=mask_m, other=0)
    deg = tl.load(Rowptr + rows + 1, mask=mask_m, other=0) - start
    max_deg = tl.max(deg, 0)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    offs_c = tl.arange(0, BLOCK_C)
    mask_h = offs_h < H
    mask_hd = mask_h[:, None] & (offs_d < HEAD_DIM)[None, :]  # (BLOCK_H, BLOCK_D)
    mask_hc = mask_h[:, None] & (offs_c < V_DIM)[None, :]
    hd_k = offs_h[:, None] * stride_kh + offs_d[None, :] * stride_kd
    hc_v = offs_h[:, None] * stride_vh + offs_c[None, :] * stride_vc
    row3 = rows[:, None, None].to(tl.int64)
    q = tl.load(Q + row3 * stride_qn + (offs_h[:, None] * stride_qh + offs_d[None, :] * stride_qd)[None, :, :],
                mask=mask_m[:, None, None] & mask_hd[None, :, :], other=0.0).to(tl.float32)  # (M, H, D)
    m_i = tl.zeros([BLOCK_M, BLOCK_H], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M, BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_H, BLOCK_C], dtype=tl.float32)
    for r in range(0, max_deg):
        valid = r < deg
        e = start + r
        j = tl.load(Col + e, mask=valid, other=0)[:, None, None]
        k = tl.load(K + j * stride_kn + hd_k[None, :, :], mask=valid[:, None, None] & mask_hd[None, :, :],
                    other=0.0).to(tl.float32)
        s, z = _graph_edge_score(q, k, sm_scale, negative_slope, GAT)  # (M, H)
        if HAS_BIAS:
            s += tl.load(Bias + e[:, None] * stride_be + offs_h[None, :] * stride_bh,
                         mask=valid[:, None] & mask_h[None, :], other=0.0).to(tl.float32)
        s = tl.where(valid[:, None], s * 1.4426950408889634, float("-inf"))  # 1/ln(2): exp2 below
        # -- online softmax, one edge per row and head --
        m_new = tl.maximum(m_i, s)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf)
        alpha = tl.math.exp2(m_i - m_safe)
        p = tl.math.exp2(s - m_safe)
        l_i = l_i * alpha + p
        v = tl.load(V + j * stride_vn + hc_v[None, :, :], mask=valid[:, None, None] & mask_hc[None, :, :],
                    other=0.0).to(tl.float32)
        acc = acc * alpha[:, :, None] + p[:, :, None] * v
        m_i = m_new
    empty = l_i == 0.0  # no incoming edge: out 0, lse -inf
    l_safe = tl.where(empty, 1.0, l_i)
    acc = acc / l_safe[:, :, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    tl.store(LSE + rows[:, None].to(tl.int64) * H + offs_h[None, :], lse, mask=mask_m[:, None] & mask_h[None, :])
    tl.store(Out + row3 * stride_on + (offs_h[:, None] * stride_oh + offs_c[None, :] * stride_oc)[None, :, :],
             acc.to(Out.type.element_ty), mask=mask_m[:, None, None] & mask_hc[None, :, :])


@triton.jit
def _graph_attn_bwd_dst(Q, K, V, Bias, Rowptr, Col, Order, DO, LSE, Delta, DQ, P, G, DBias,  #
                        stride_qn, stride_qh, stride_qd,  #
                        stride_kn, stride_kh, stride_kd,  #
                        stride_vn, stride_vh, stride_vc,  #
                        stride_be, stride_bh,  #
                        stride_don, stride_doh, stride_doc,  #
                        stride_dqn, stride_dqh, stride_dqd,  #
                        N_dst, H, sm_scale, negative_slope,  #
                        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, V_DIM: tl.constexpr, BLOCK_C: tl.constexpr,  #
                        BLOCK_H: tl.constexpr, BLOCK_M: tl.constexpr, GAT: tl.constexpr, HAS_BIAS: tl.constexpr,
                        STORE_DBIAS: tl.constexpr):
    # CSR pass: recompute p_ij from the saved lse, dS_ij = p_ij (do_i . v_j - delta_i);
    # accumulate dq_i; write p_ij and g_ij = dS_ij * ds/d(pre-activation) per edge and head
    # for the CSC pass (and dS_ij itself = dbias_ij).
    offs_b = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_b < N_dst
    rows = tl.load(Order + offs_b, mask=mask_m, other=0)
    start = tl.load(Rowptr + rows, mask=mask_m, other=0)
    deg = tl.load(Rowptr + rows + 1, mask=mask_m, other=0) - start
    max_deg = tl.max(deg, 0)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    offs_c = tl.arange(0, BLOCK_C)
    mask_h = offs_h < H
    mask_hd = mask_h[:, None] & (offs_d < HEAD_DIM)[None, :]
    mask_hc = mask_h[:, None] & (offs_c < V_DIM)[None, :]
    mask_mh = mask_m[:, None] & mask_h[None, :]
    hd_k = offs_h[:, None] * stride_kh + offs_d[None, :] * stride_kd
    hc_v = offs_h[:, None] * stride_vh + offs_c[None, :] * stride_vc
    row3 = rows[:, None, None].to(tl.int64)
    row_h = rows[:, None].to(tl.int64) * H + offs_h[None, :]
    q = tl.load(Q + row3 * stride_qn + (offs_h[:, None] * stride_qh + offs_d[None, :] * stride_qd)[None, :, :],
                mask=mask_m[:, None, None] & mask_hd[None, :, :], other=0.0).to(tl.float32)
    do = tl.load(DO + row3 * stride_don + (offs_h[:, None] * stride_doh + offs_c[None, :] * stride_doc)[None, :, :],
                 mask=mask_m[:, None, None] & mask_hc[None, :, :], other=0.0).to(tl.float32)
    lse = tl.load(LSE + row_h, mask=mask_mh, other=0.0) * 1.4426950408889634
    # a row that saw no edge (all masked, or none) has lse = -inf: +inf makes its p = exp2(-inf) = 0
    # instead of exp2(-inf - -inf) = NaN, so its gradients are 0
    lse = tl.where(lse == float("-inf"), float("inf"), lse)
    delta = tl.load(Delta + row_h, mask=mask_mh, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_H, BLOCK_D], dtype=tl.float32)
    for r in range(0, max_deg):
        valid = r < deg
        e = start + r
        j = tl.load(Col + e, mask=valid, other=0)[:, None, None]
        k = tl.load(K + j * stride_kn + hd_k[None, :, :], mask=valid[:, None, None] & mask_hd[None, :, :],
                    other=0.0).to(tl.float32)
        s, z = _graph_edge_score(q, k, sm_scale, negative_slope, GAT)
        e_h = e[:, None] * H + offs_h[None, :]
        valid_h = valid[:, None] & mask_h[None, :]
        if HAS_BIAS:
            s += tl.load(Bias + e[:, None] * stride_be + offs_h[None, :] * stride_bh, mask=valid_h,
                         other=0.0).to(tl.float32)
        p = tl.where(valid_h, tl.math.exp2(s * 1.4426950408889634 - lse), 0.0)  # (M, H)
        v = tl.load(V + j * stride_vn + hc_v[None, :, :], mask=valid[:, None, None] & mask_hc[None, :, :],
                    other=0.0).to(tl.float32)
        ds = p * (tl.sum(do * v, 2) - delta)
        if GAT:
            g = ds * tl.where(z > 0, 1.0, negative_slope)  # LeakyReLU'
            dq += g[:, :, None]
        else:
            g = ds * sm_scale
            dq += g[:, :, None] * k
        tl.store(P + e_h, p, mask=valid_h)
        tl.store(G + e_h, g, mask=valid_h)
        if STORE_DBIAS:
            tl.store(DBias + e_h, ds, mask=valid_h)
    tl.store(DQ + row3 * stride_dqn + (offs_h[:, None] * stride_dqh + offs_d[None, :] * stride_dqd)[None, :, :],
             dq.to(DQ.type.element_ty), mask=mask_m[:, None, None] & mask_hd[None, :, :])


@triton.jit
def _graph_attn_bwd_src(Q, DO, Colptr, CscEid, Dst, Order, P, G, DK, DV,  #
                        stride_qn, stride_qh, stride_qd,  #
                        stride_don, stride_doh, stride_doc,  #
                        stride_dkn, stride_dkh, stride_dkd,  #
                        stride_dvn, stride_dvh, stride_dvc,  #
                        N_src, H,  #
                        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, V_DIM: tl.constexpr, BLOCK_C: tl.constexpr,  #
                        BLOCK_H: tl.constexpr, BLOCK_M: tl.constexpr, GAT: tl.constexpr):
    # CSC pass: each source row sums over its outgoing edges in a fixed order:
    # dv_j = sum_i p_ij do_i, dk_j = sum_i g_ij q_i (GAT: sum_i g_ij). Rows come sorted by
    # out-degree (AIG fan-out is the skewed side: a few nodes feed hundreds of gates).
    offs_b = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_b < N_src
    rows = tl.load(Order + offs_b, mask=mask_m, other=0)
    start = tl.load(Colptr + rows, mask=mask_m, other=0)
    deg = tl.load(Colptr + rows + 1, mask=mask_m, other=0) - start
    max_deg = tl.max(deg, 0)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    offs_c = tl.arange(0, BLOCK_C)
    mask_h = offs_h < H
    mask_hd = mask_h[:, None] & (offs_d < HEAD_DIM)[None, :]
    mask_hc = mask_h[:, None] & (offs_c < V_DIM)[None, :]
    hd_q = offs_h[:, None] * stride_qh + offs_d[None, :] * stride_qd
    hc_do = offs_h[:, None] * stride_doh + offs_c[None, :] * stride_doc
    dk = tl.zeros([BLOCK_M, BLOCK_H, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_M, BLOCK_H, BLOCK_C], dtype=tl.float32)
    for r in range(0, max_deg):
        valid = r < deg
        e = tl.load(CscEid + start + r, mask=valid, other=0)
        i = tl.load(Dst + e, mask=valid, other=0)[:, None, None]
        valid_h = valid[:, None] & mask_h[None, :]
        p = tl.load(P + e[:, None] * H + offs_h[None, :], mask=valid_h, other=0.0)
        g = tl.load(G + e[:, None] * H + offs_h[None, :], mask=valid_h, other=0.0)
        do = tl.load(DO + i * stride_don + hc_do[None, :, :], mask=valid[:, None, None] & mask_hc[None, :, :],
                     other=0.0).to(tl.float32)
        dv += p[:, :, None] * do
        if GAT:
            dk += g[:, :, None]
        else:
            q = tl.load(Q + i * stride_qn + hd_q[None, :, :], mask=valid[:, None, None] & mask_hd[None, :, :],
                        other=0.0).to(tl.float32)
            dk += g[:, :, None] * q
    row3 = rows[:, None, None].to(tl.int64)
    tl.store(DK + row3 * stride_dkn + (offs_h[:, None] * stride_dkh + offs_d[None, :] * stride_dkd)[None, :, :],
             dk.to(DK.type.element_ty), mask=mask_m[:, None, None] & mask_hd[None, :, :])
    tl.store(DV + row3 * stride_dvn + (offs_h[:, None] * stride_dvh + offs_c[None, :] * stride_dvc)[None, :, :],
             dv.to(DV.type.element_ty), mask=mask_m[:, None, None] & mask_hc[None, :, :])


@triton.jit
def _segment_sum_fwd(Src, Perm, Segptr, Out,  #
                     stride_se, stride_sf, stride_on, stride_of,  #
                     N_seg, F,  #
                     BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr):
    # BLOCK_M segments x BLOCK_F features per program; the r-th element of each segment
    # at step r, in the stable-sorted order: a fixed summation order, fp32 accumulation.
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask_m = offs_m < N_seg
    mask_f = offs_f < F
    start = tl.load(Segptr + offs_m, mask=mask_m, other=0)
    cnt = tl.load(Segptr + offs_m + 1, mask=mask_m, other=0) - start
    acc = tl.zeros([BLOCK_M, BLOCK_F], dtype=tl.float32)
    for r in range(0, tl.max(cnt, 0)):
        valid = r < cnt
        e = tl.load(Perm + start + r, mask=valid, other=0)
        acc += tl.load(Src + e[:, None] * stride_se + offs_f[None, :] * stride_sf,
                       mask=valid[:, None] & mask_f[None, :], other=0.0).to(tl.float32)
    tl.store(Out + offs_m[:, None].to(tl.int64) * stride_on + offs_f[None, :] * stride_of,
             acc.to(Out.type.element_ty), mask=mask_m[:, None] & mask_f[None, :])


# ----------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------


GRAPH_WARPS = 4  # warps per program of the graph kernels on CUDA
# Rows per program on CUDA (issue 54, item 6). `python -m kernels.compile_report` (sm_90, bf16, 4 warps)
# measured, for a (rows, heads, width) fp32 accumulator of rows x next_pow2(H) x next_pow2(max(D, C))
# values: 64 x 4 x 32 and 64 x 8 x 16 (8192 values, the former limit) spill in all three kernels
# (32-672 B of stack; the review saw 2.5-5.6 KB at its shapes), 32 rows (4096 values) spill in none
# (at most 247 registers), 16 rows use at most 128 registers; and at 64 and 32 rows the CSC backward
# of GAT with one head (BLOCK_H = 1) does not compile (Triton 3.7.1, TritonGPURemoveLayoutConversions:
# "mask type matches ptr type"), while 16 rows do.
GRAPH_MAX_ROWS = 32
GRAPH_ACC_VALUES = 4096


def _rows_per_program(block_m, H=1, width=1):
    """Rows per program: 16 in the interpreter; on CUDA 32, fewer when the (rows, heads, width)
    fp32 accumulator would exceed GRAPH_ACC_VALUES (32 values a thread at 4 warps)."""
    if block_m:
        return block_m
    if interpreting():
        return 16
    return max(16, min(GRAPH_MAX_ROWS, GRAPH_ACC_VALUES // (next_pow2(H) * next_pow2(width))))


def _src_rows(rows, H, gat, block_m=None):
    """Rows per program of the CSC backward: 16 for GAT with one head (larger tiles do not compile,
    see GRAPH_MAX_ROWS), else the same as the other kernels."""
    if block_m or interpreting() or not (gat and next_pow2(H) == 1):
        return rows
    return 16


def degree_order(ptr: Tensor) -> Tensor:
    """Node ids sorted by degree, largest first (stable: equal degrees keep id order), from a
    CSR / CSC pointer. The kernels take their row blocks in this order."""
    return torch.argsort(ptr[1:] - ptr[:-1], descending=True, stable=True)


def _check_int64(**index):
    # The kernels multiply these indices by row strides (a source row j times stride_kn, an edge e
    # times stride_be): in int64 they cannot wrap at 2**31 however large the graph.
    bad = [f"{name} ({t.dtype})" for name, t in index.items() if t.dtype != torch.int64]
    if bad:
        raise TypeError(f"graph kernels: index tensors must be int64 (graph_layout builds them so); "
                        f"got {', '.join(bad)}")


def _graph_meta(q, v, block_m):
    N_dst, H, D = q.shape
    C = v.shape[-1]
    return dict(HEAD_DIM=D, BLOCK_D=next_pow2(D), V_DIM=C, BLOCK_C=next_pow2(C), BLOCK_H=next_pow2(H),
                BLOCK_M=_rows_per_program(block_m, H, max(D, C)), num_warps=1 if interpreting() else GRAPH_WARPS)


def _triton_graph_fwd(q, k, v, bias, rowptr, col, scale, negative_slope, gat, *, block_m=None, order=None):
    """Launch :func:`_graph_attn_fwd` over row blocks in degree order (``order``: default
    :func:`degree_order`; any permutation of the rows gives the same result)."""
    check_launchable(q, k, v)
    N_dst, H, D = q.shape
    C = v.shape[-1]
    out = torch.empty((N_dst, H, C), dtype=v.dtype, device=v.device)
    lse = torch.empty((N_dst, H), dtype=torch.float32, device=v.device)
    order = degree_order(rowptr) if order is None else order
    _check_int64(rowptr=rowptr, col=col, order=order)
    meta = _graph_meta(q, v, block_m)
    sb = bias.stride() if bias is not None else (0, 0)
    _graph_attn_fwd[(cdiv(N_dst, meta["BLOCK_M"]),)](
        q, k, v, bias, rowptr, col, order, out, lse,  #
        *q.stride(), *k.stride(), *v.stride(), *sb, *out.stride(),  #
        N_dst, H, scale, negative_slope,  #
        GAT=gat, HAS_BIAS=bias is not None, **meta)
    return out, lse


def _triton_graph_bwd(do, q, k, v, bias, out, lse, rowptr, col, dst, colptr, csc_eid, scale, negative_slope,
                      gat, need_dbias, *, block_m=None, row_order=None, col_order=None):
    check_launchable(q, k, v)
    N_dst, H, D = q.shape
    N_src, E = k.shape[0], col.numel()
    do = do.contiguous()
    delta = (do.float() * out.float()).sum(-1)  # (N_dst, H)
    lse = lse.float().contiguous()
    p = torch.empty((E, H), dtype=torch.float32, device=q.device)
    g = torch.empty((E, H), dtype=torch.float32, device=q.device)
    dbias = torch.empty((E, H), dtype=torch.float32, device=q.device) if need_dbias else None
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    row_order = degree_order(rowptr) if row_order is None else row_order
    col_order = degree_order(colptr) if col_order is None else col_order
    _check_int64(rowptr=rowptr, col=col, dst=dst, colptr=colptr, csc_eid=csc_eid, row_order=row_order,
                 col_order=col_order)
    meta = _graph_meta(q, v, block_m)
    sb = bias.stride() if bias is not None else (0, 0)
    _graph_attn_bwd_dst[(cdiv(N_dst, meta["BLOCK_M"]),)](
        q, k, v, bias, rowptr, col, row_order, do, lse, delta, dq, p, g, dbias,  #
        *q.stride(), *k.stride(), *v.stride(), *sb, *do.stride(), *dq.stride(),  #
        N_dst, H, scale, negative_slope,  #
        GAT=gat, HAS_BIAS=bias is not None, STORE_DBIAS=need_dbias, **meta)
    src_meta = dict(meta, BLOCK_M=_src_rows(meta["BLOCK_M"], H, gat, block_m))
    _graph_attn_bwd_src[(cdiv(N_src, src_meta["BLOCK_M"]),)](
        q, do, colptr, csc_eid, dst, col_order, p, g, dk, dv,  #
        *q.stride(), *do.stride(), *dk.stride(), *dv.stride(),  #
        N_src, H, GAT=gat, **src_meta)
    dbias = dbias.to(bias.dtype) if need_dbias else q.new_empty(0)
    return dq, dk, dv, dbias


def _triton_segment_sum(src, index, num_segments, *, block_m=None, block_f=None):
    check_launchable(src, index)
    E = src.shape[0]
    x = src.reshape(E, -1)
    F = x.shape[1]
    perm = torch.argsort(index, stable=True)
    segptr = torch.zeros(num_segments + 1, dtype=torch.int64, device=src.device)
    segptr[1:] = torch.cumsum(torch.bincount(index, minlength=num_segments), 0)
    out = torch.empty((num_segments, F), dtype=src.dtype, device=src.device)
    BLOCK_M = block_m or (16 if interpreting() else 64)
    BLOCK_F = block_f or min(next_pow2(F), 16 if interpreting() else 128)
    _segment_sum_fwd[(cdiv(num_segments, BLOCK_M), cdiv(F, BLOCK_F))](
        x, perm, segptr, out, *x.stride(), *out.stride(), num_segments, F,
        BLOCK_M=BLOCK_M, BLOCK_F=BLOCK_F, num_warps=1 if interpreting() else 4)
    return out.view(num_segments, *src.shape[1:])


# ----------------------------------------------------------------------------------------
# torch.library registration
# ----------------------------------------------------------------------------------------


@torch.library.custom_op("kernels::graph_attention_fwd", mutates_args=())
def _graph_fwd_op(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], rowptr: Tensor, col: Tensor,
                  dst: Tensor, colptr: Tensor, csc_eid: Tensor, scale: float, negative_slope: float,
                  gat: bool) -> tuple[Tensor, Tensor]:
    return _graph_fwd_reference(q, k, v, bias, col, dst, rowptr.numel() - 1, scale, negative_slope, gat)


@_graph_fwd_op.register_kernel("cuda")
def _graph_fwd_cuda(q, k, v, bias, rowptr, col, dst, colptr, csc_eid, scale, negative_slope, gat):
    if use_triton(q, k, v):
        return _triton_graph_fwd(q, k, v, bias, rowptr, col, scale, negative_slope, gat)
    return _graph_fwd_reference(q, k, v, bias, col, dst, rowptr.numel() - 1, scale, negative_slope, gat)


@_graph_fwd_op.register_fake
def _graph_fwd_fake(q, k, v, bias, rowptr, col, dst, colptr, csc_eid, scale, negative_slope, gat):
    N_dst, H = q.shape[0], q.shape[1]
    return v.new_empty((N_dst, H, v.shape[-1])), q.new_empty((N_dst, H), dtype=_acc_dtype(q))


@torch.library.custom_op("kernels::graph_attention_bwd", mutates_args=())
def _graph_bwd_op(do: Tensor, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], out: Tensor, lse: Tensor,
                  rowptr: Tensor, col: Tensor, dst: Tensor, colptr: Tensor, csc_eid: Tensor, scale: float,
                  negative_slope: float, gat: bool, need_dbias: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return _graph_bwd_reference(do, q, k, v, bias, out, lse, col, dst, scale, negative_slope, gat, need_dbias)


@_graph_bwd_op.register_kernel("cuda")
def _graph_bwd_cuda(do, q, k, v, bias, out, lse, rowptr, col, dst, colptr, csc_eid, scale, negative_slope, gat,
                    need_dbias):
    if use_triton(q, k, v):
        return _triton_graph_bwd(do, q, k, v, bias, out, lse, rowptr, col, dst, colptr, csc_eid, scale,
                                 negative_slope, gat, need_dbias)
    return _graph_bwd_reference(do, q, k, v, bias, out, lse, col, dst, scale, negative_slope, gat, need_dbias)


@_graph_bwd_op.register_fake
def _graph_bwd_fake(do, q, k, v, bias, out, lse, rowptr, col, dst, colptr, csc_eid, scale, negative_slope, gat,
                    need_dbias):
    dbias = bias.new_empty(bias.shape) if need_dbias else q.new_empty(0)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dbias


def _graph_setup_context(ctx, inputs, output):
    q, k, v, bias, rowptr, col, dst, colptr, csc_eid, scale, negative_slope, gat = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, bias, out, lse, rowptr, col, dst, colptr, csc_eid)
    ctx.scale, ctx.negative_slope, ctx.gat = scale, negative_slope, gat


def _graph_backward(ctx, dout, dlse):
    q, k, v, bias, out, lse, rowptr, col, dst, colptr, csc_eid = ctx.saved_tensors
    need_dbias = bias is not None and ctx.needs_input_grad[3]
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv, dbias = _graph_bwd_op(dout, q, k, v, bias, out, lse, rowptr, col, dst, colptr, csc_eid, ctx.scale,
                                      ctx.negative_slope, ctx.gat, need_dbias)
    return (dq, dk, dv, dbias if need_dbias else None) + (None,) * 8


_graph_fwd_op.register_autograd(_graph_backward, setup_context=_graph_setup_context)


@torch.library.custom_op("kernels::segment_sum", mutates_args=())
def _segment_sum_op(src: Tensor, index: Tensor, num_segments: int) -> Tensor:
    return segment_sum_reference(src, index, num_segments)


@_segment_sum_op.register_kernel("cuda")
def _segment_sum_cuda(src, index, num_segments):
    if use_triton(src):
        return _triton_segment_sum(src, index, num_segments)
    return segment_sum_reference(src, index, num_segments)


@_segment_sum_op.register_fake
def _segment_sum_fake(src, index, num_segments):
    return src.new_empty((num_segments, *src.shape[1:]))


def _segment_sum_setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


def _segment_sum_backward(ctx, grad):
    (index,) = ctx.saved_tensors
    return grad.index_select(0, index), None, None  # a gather: deterministic everywhere


_segment_sum_op.register_autograd(_segment_sum_backward, setup_context=_segment_sum_setup_context)


# ----------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------

EdgeIndex = Union[Tensor, GraphLayout]


def _layout(edge_index: EdgeIndex, num_src: int, num_dst: int) -> GraphLayout:
    if isinstance(edge_index, GraphLayout):
        if edge_index.rowptr.numel() != num_dst + 1 or edge_index.colptr.numel() != num_src + 1:
            raise ValueError(f"graph layout is for {edge_index.colptr.numel() - 1} sources and "
                             f"{edge_index.rowptr.numel() - 1} destinations; got {num_src} and {num_dst}")
        return edge_index
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must be (2, E) (source row 0, destination row 1); got {tuple(edge_index.shape)}")
    return graph_layout(edge_index, num_src, num_dst)


def _edge_bias_csr(edge_bias, layout, H):
    if edge_bias is None:
        return None
    E = layout.col.numel()
    if edge_bias.shape not in ((E,), (E, H)):
        raise ValueError(f"edge_bias must be (E,) or (E, H) = ({E},) or ({E}, {H}); got {tuple(edge_bias.shape)}")
    return _bias_eh(edge_bias[layout.perm], H).contiguous()


def graph_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    edge_index: EdgeIndex,
    *,
    scale: Optional[float] = None,
    edge_bias: Optional[Tensor] = None,
) -> Tensor:
    """Dot-product attention restricted to a graph's edges (graph transformers; DeepGate4's
    sparse attention, arXiv:2502.01681).

    .. math::
        \\mathrm{out}_i = \\sum_{j \\in \\mathcal{N}(i)} \\alpha_{ij} v_j, \\qquad
        \\alpha_{ij} = \\mathrm{softmax}_{j \\in \\mathcal{N}(i)}\\left(s\\, q_i \\cdot k_j + b_{ij}\\right)

    where :math:`\\mathcal{N}(i)` are the sources of the edges into :math:`i`. Multi-head,
    differentiable in ``q``, ``k``, ``v``, ``edge_bias``; Triton on CUDA with a
    deterministic backward, the torch reference elsewhere. A node without incoming edges
    gets zeros.

    Args:
        q (Tensor): destination queries.
        k (Tensor): source keys.
        v (Tensor): source values.
        edge_index (Tensor or GraphLayout): ``(2, E)``, row 0 the source ``j``, row 1 the
            destination ``i`` (PyG's ``source_to_target``), or a prebuilt :func:`graph_layout`.
        scale (float, optional): :math:`s`. (default: ``D ** -0.5``)
        edge_bias (Tensor, optional): :math:`b_{ij}`, per edge ``(E,)`` or per edge and head
            ``(E, H)`` in ``edge_index``'s order. (default: :obj:`None`)

    Shapes:
        - **q**: :math:`(N_{dst}, H, D)`; **k**: :math:`(N_{src}, H, D)`; **v**: :math:`(N_{src}, H, C)`
        - **output**: :math:`(N_{dst}, H, C)`
    """
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3 or q.shape[1:] != k.shape[1:] or v.shape[:2] != k.shape[:2]:
        raise ValueError(f"graph_attention: q (N_dst, H, D), k (N_src, H, D), v (N_src, H, C) expected; "
                         f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    layout = _layout(edge_index, k.shape[0], q.shape[0])
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    bias = _edge_bias_csr(edge_bias, layout, q.shape[1])
    if eager_cpu(q, k, v, bias):
        return _graph_fwd_reference(q, k, v, bias, layout.col, layout.dst, q.shape[0], scale, 0.0, False)[0]
    out, _ = _graph_fwd_op(q, k, v, bias, layout.rowptr, layout.col, layout.dst, layout.colptr, layout.csc_eid,
                           scale, 0.0, False)
    return out


def gat_attention(
    x_src: Tensor,
    x_dst: Optional[Tensor],
    att_src: Tensor,
    att_dst: Tensor,
    edge_index: EdgeIndex,
    *,
    negative_slope: float = 0.2,
    edge_bias: Optional[Tensor] = None,
) -> Tensor:
    """Graph attention of GAT (Velickovic et al., ICLR 2018; PyG ``GATConv``'s propagation).

    .. math::
        \\mathrm{out}_i = \\sum_{j \\in \\mathcal{N}(i)} \\alpha_{ij} x_j, \\qquad
        \\alpha_{ij} = \\mathrm{softmax}_{j \\in \\mathcal{N}(i)}\\left(
        \\mathrm{LeakyReLU}(a_{src}^T x_j + a_{dst}^T x_i) + b_{ij}\\right)

    ``x`` are the already projected features (``GATConv``'s ``lin(x).view(-1, H, C)``); self
    loops, head concatenation and the output bias are the caller's, as in ``GATConv``.

    Args:
        x_src (Tensor): projected source features.
        x_dst (Tensor, optional): projected destination features (default: ``x_src``).
        att_src (Tensor): :math:`a_{src}`, broadcastable to ``(H, C)``.
        att_dst (Tensor): :math:`a_{dst}`, broadcastable to ``(H, C)``.
        edge_index (Tensor or GraphLayout): as in :func:`graph_attention`.
        negative_slope (float, optional): LeakyReLU slope. (default: :obj:`0.2`)
        edge_bias (Tensor, optional): ``(E,)`` or ``(E, H)``. (default: :obj:`None`)

    Shapes:
        - **x_src**: :math:`(N_{src}, H, C)`; **x_dst**: :math:`(N_{dst}, H, C)`
        - **output**: :math:`(N_{dst}, H, C)`
    """
    x_dst = x_src if x_dst is None else x_dst
    a_src = (x_src * att_src).sum(-1, keepdim=True)  # (N_src, H, 1)
    a_dst = (x_dst * att_dst).sum(-1, keepdim=True)  # (N_dst, H, 1)
    layout = _layout(edge_index, x_src.shape[0], x_dst.shape[0])
    bias = _edge_bias_csr(edge_bias, layout, x_src.shape[1])
    if eager_cpu(a_dst, a_src, x_src, bias):
        return _graph_fwd_reference(a_dst, a_src, x_src, bias, layout.col, layout.dst, x_dst.shape[0], 1.0,
                                    float(negative_slope), True)[0]
    out, _ = _graph_fwd_op(a_dst, a_src, x_src, bias, layout.rowptr, layout.col, layout.dst, layout.colptr,
                           layout.csc_eid, 1.0, float(negative_slope), True)
    return out


def segment_sum(src: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """Segment sum, the aggregation of message passing (``scatter(..., reduce='sum')``).

    .. math::
        \\mathrm{out}_n = \\sum_{e \\,:\\, \\mathrm{index}_e = n} \\mathrm{src}_e

    Deterministic on every device: ``index_add`` on CPU; on CUDA a Triton kernel over the
    stable-sorted segments (no float atomics). Differentiable in ``src``.

    Args:
        src (Tensor): messages.
        index (Tensor): int segment (destination) of each message.
        num_segments (int): number of segments.

    Shapes:
        - **src**: :math:`(E, *)`; **index**: :math:`(E,)`
        - **output**: :math:`(N, *)`
    """
    if index.dim() != 1 or index.shape[0] != src.shape[0]:
        raise ValueError(f"segment_sum: index must be (E,) with E = src.shape[0] = {src.shape[0]}; got {tuple(index.shape)}")
    if eager_cpu(src):
        return segment_sum_reference(src, index, int(num_segments))
    return _segment_sum_op(src, index.long(), int(num_segments))
