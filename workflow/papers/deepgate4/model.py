"""The models: DeepGate2's level-by-level GNN, the GAT baseline, and DeepGate4's refinement.

Read bottom-up: :class:`CircuitModel` runs a circuit's windows (the full graph, or the
partitioned update with a history table); per window it runs the DeepGate2 tokenizer level by
level (:class:`Tokenizer`), then refinement layers (:class:`RefineLayer`): DeepGate4's GAT-based
sparse transformer (``attention="gat"``, the official ``Sparse_Transformer`` with
``GATConv``), a dot-product sparse transformer (``"dot"``), the plain dense transformer of
DeepGate3 (``"dense"``, the same fan-in-cone mask computed as a dense matrix) or a global
transformer (``"global"``: every gate of a window attends to every gate of it, no cone mask).
Official code:
zyzheng17/DeepGate4-ICLR-25, ``src/models/{dg4,dg2,plain_tf_linear,plain_tf,tfmlp}.py``.
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

import kernels

from .partition import PI, Plan, Sub

Tensor = torch.Tensor


# ---- heads -------------------------------------------------------------------------------------
def mlp(d_in: int, d_hidden: int, layers: int = 3) -> nn.Sequential:
    """The official readout MLP (3 layers, ReLU), without its batch norm and dropout."""
    dims = [d_in] + [d_hidden] * (layers - 1)
    mods = []
    for a, b in itertools.pairwise(dims):
        mods += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*mods, nn.Linear(dims[-1], 1))


class Heads(nn.Module):
    """Signal probability from hf (``readout_prob``) and truth-table distance of a gate pair from
    [hf_a, hf_b] (``proj_gate_ttsim``), both through a sigmoid, trained with L1 as officially."""

    def __init__(self, d: int, d_mlp: int):
        super().__init__()
        self.prob = mlp(d, d_mlp)
        self.tt = mlp(2 * d, d_mlp)

    def forward(self, hf: Tensor, pairs: Tensor | None = None, hf_b: Tensor | None = None):
        prob = torch.sigmoid(self.prob(hf)).squeeze(-1)  # (N,)
        if pairs is None:
            return prob
        a = hf[pairs[0]]
        b = (hf if hf_b is None else hf_b)[pairs[1]]
        return prob, torch.sigmoid(self.tt(torch.cat([a, b], -1))).squeeze(-1)  # (P,)


# ---- DeepGate2 tokenizer -----------------------------------------------------------------------
class Aggr(nn.Module):
    """DeepGate2's attention aggregator (official ``TFMlpAggr``) for a fixed fan-in k.

    ``m_i = sum_j softmax_j(a(q(x_i), k(x_j))) v(x_j)``; the official score is linear in
    [q(x_i), k(x_j)], so the destination's part cancels in the softmax over j and the score is a
    linear function of x_j alone, which is how we parametrise it.
    """

    def __init__(self, d_in: int, d: int):
        super().__init__()
        self.score = nn.Linear(d_in, 1, bias=False)
        self.value = nn.Linear(d_in, d)

    def forward(self, x: Tensor) -> Tensor:  # x (n, k, d_in): the fanins of n gates
        alpha = torch.softmax(self.score(x), dim=1)  # (n, k, 1)
        return (alpha * self.value(x)).sum(1)  # (n, d)


class Tokenizer(nn.Module):
    """DeepGate2 (official ``dg2.py``): gates updated level by level, AND and NOT with their own
    aggregators and GRUs, structure hs from the fanins' hs, function hf from [hs, hf]."""

    def __init__(self, d: int):
        super().__init__()
        self.aggr_and_s, self.aggr_and_f = Aggr(d, d), Aggr(2 * d, d)
        self.aggr_not_s, self.aggr_not_f = Aggr(d, d), Aggr(d, d)
        self.gru_and_s, self.gru_and_f = nn.GRUCell(d, d), nn.GRUCell(d, d)
        self.gru_not_s, self.gru_not_f = nn.GRUCell(d, d), nn.GRUCell(d, d)

    def forward(self, hs: Tensor, hf: Tensor, steps) -> tuple[Tensor, Tensor]:
        """hs, hf (n, d) of a Sub's nodes; updated in place along `steps` (one per level)."""
        for and_dst, and_src, not_dst, not_src in steps:
            if and_dst.numel():
                xs = hs[and_src]  # (a, 2, d)
                xf = torch.cat([xs, hf[and_src]], -1)  # (a, 2, 2d)
                hs = hs.index_copy(0, and_dst, self.gru_and_s(self.aggr_and_s(xs), hs[and_dst]))
                hf = hf.index_copy(0, and_dst, self.gru_and_f(self.aggr_and_f(xf), hf[and_dst]))
            if not_dst.numel():
                hs = hs.index_copy(0, not_dst, self.gru_not_s(self.aggr_not_s(hs[not_src]), hs[not_dst]))
                hf = hf.index_copy(0, not_dst, self.gru_not_f(self.aggr_not_f(hf[not_src]), hf[not_dst]))
        return hs, hf


# ---- refinement layers -------------------------------------------------------------------------
class RefineLayer(nn.Module):
    """A post-norm transformer layer whose attention is restricted to each gate's fan-in cone.

    ``attention="gat"``: DeepGate4's ``GATTransformerEncoderLayer`` (``GATConv``: per-head
    projection, scores LeakyReLU(a_src . x_j + a_dst . x_i), heads concatenated, a bias), through
    ``kernels.gat_attention``; ``"dot"``: dot-product scores through ``kernels.graph_attention``;
    ``"dense"``: DeepGate3's plain transformer, softmax(q k^T / sqrt(d) + mask) v over each area
    with the cone as a dense boolean mask, through ``kernels.attention``; ``"global"``: the same
    softmax over all gates of the window (of the same circuit in a union of circuits), no mask.
    ``cone`` (gat, dot): ``fanin`` attends to the fan-in cone (the official ``global_virtual_edge``),
    ``fanin_fanout`` to the fan-in and the fan-out cone (the paper, Sec. 3.3).
    Then x = LN(x + att), x = LN(x + FFN(x)).
    """

    def __init__(self, width: int, heads: int, d_ff: int, attention: str, dropout: float, cone: str = "fanin"):
        super().__init__()
        self.attention, self.heads, self.cone = attention, heads, cone
        self.fused = True  # False: the unfused torch references of the kernels (claim c)
        c = width // heads
        if attention == "gat":
            self.lin = nn.Linear(width, width, bias=False)
            self.att_src = nn.Parameter(torch.empty(1, heads, c))
            self.att_dst = nn.Parameter(torch.empty(1, heads, c))
            self.bias = nn.Parameter(torch.zeros(width))
            nn.init.xavier_uniform_(self.att_src)
            nn.init.xavier_uniform_(self.att_dst)
        else:
            self.qkv = nn.Linear(width, 3 * width)
            self.out = nn.Linear(width, width)
        self.ffn = nn.Sequential(nn.Linear(width, d_ff), nn.ReLU(), nn.Linear(d_ff, width))
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.drop = nn.Dropout(dropout)

    def attend(self, x: Tensor, sub: Sub) -> Tensor:
        n, width = x.shape
        H, C = self.heads, width // self.heads
        if self.attention in ("gat", "dot"):
            edges, layout = (sub.att_io, sub.att_io_layout) if self.cone == "fanin_fanout" else (sub.att, sub.att_layout)
        if self.attention == "gat":
            h = self.lin(x).view(n, H, C)
            if self.fused:
                a = kernels.gat_attention(h, None, self.att_src, self.att_dst, layout)
            else:
                a = kernels.gat_attention_reference(h, None, self.att_src, self.att_dst, edges)
            return a.reshape(n, width) + self.bias
        q, k, v = self.qkv(x).view(n, 3, H, C).unbind(1)  # (n, H, C) each
        if self.attention == "dot":
            fn = kernels.graph_attention if self.fused else kernels.graph_attention_reference
            a = fn(q, k, v, layout if self.fused else edges)
            return self.out(a.reshape(n, width))
        if self.attention == "global":
            fn = kernels.attention if self.fused else kernels.attention_reference
            same = (sub.part[:, None] == sub.part[None, :])[None, None]  # (1, 1, n, n): one circuit of a union
            q, k, v = (t.transpose(0, 1)[None] for t in (q, k, v))  # (1, H, n, C) each
            a = fn(q, k, v, bias=same)[0].transpose(0, 1)  # (n, H, C)
            return self.out(a.reshape(n, width))
        # dense: per area (root cone), as DeepGate3's per-area masked attention; gates in several
        # areas get identical outputs (a cone is closed), one copy is read back through area_pick
        fn = kernels.attention if self.fused else kernels.attention_reference
        A, L = sub.areas.shape
        qkv = torch.stack([q, k, v])[:, sub.areas.clamp(min=0)]  # (3, A, L, H, C)
        q, k, v = qkv.permute(0, 1, 3, 2, 4).unbind(0)  # (A, H, L, C) each
        a = fn(q, k, v, bias=sub.area_mask[:, None])  # (A, H, L, C)
        a = a.permute(0, 2, 1, 3).reshape(A * L, width)[sub.area_pick]  # (n, width)
        return self.out(a)

    def forward(self, x: Tensor, sub: Sub) -> Tensor:  # x (n_new, width)
        x = self.norm1(x + self.drop(self.attend(x, sub)))
        return self.norm2(x + self.drop(self.ffn(x)))


# ---- the circuit model -------------------------------------------------------------------------
def sinusoid(positions: Tensor, d: int) -> Tensor:
    """Sinusoidal encoding of integer positions (the official ``sinuous_positional_encoding``)."""
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32, device=positions.device) * (-math.log(10000.0) / d))
    ang = positions.float()[:, None] * div  # (n, d/2)
    return torch.stack([ang.sin(), ang.cos()], -1).reshape(-1, d)


class CircuitModel(nn.Module):
    """DeepGate2 (refine_layers = 0), DeepGate3-style plain transformer (attention="dense") and
    DeepGate4 (attention="gat", local_encoding=True, trained with the partitioned update).

    Per window: hs, hf of the new gates start from the primary-input vectors (hs, DeepGate2's
    ``hs_init``) and a learned PI function vector (hf; the official code derives it from two
    virtual NOT gates), plus DeepGate4's encodings in hs: the global one, a sinusoid of the
    forward level through a linear layer, and the local one, embeddings of the numbers of AND and
    NOT fanouts (official ``abs_pe_embedding``, ``out_and``, ``out_not``). ``level_encoding``:
    ``absolute`` encodes the level itself (the paper); ``normalised`` encodes
    ``level_scale * level / depth`` (depth of the gate's own circuit), a relative position that
    stays in the trained range on deeper circuits (a difference from the paper). The tokenizer runs
    over the window's levels; the refinement layers over [hf, hs] of the window's gates, added
    back as a residual (official ``hf = hf + hf_tf``).
    """

    def __init__(self, *, hidden: int, mlp_hidden: int, refine_layers: int, heads: int, attention: str,
                 local_encoding: bool, dropout: float, max_degree: int, cone: str = "fanin",
                 level_encoding: str = "absolute", level_scale: float = 100.0):
        super().__init__()
        d = hidden
        self.d, self.local_encoding, self.max_degree = d, local_encoding, max_degree
        self.level_encoding, self.level_scale = level_encoding, level_scale
        self.tokenizer = Tokenizer(d)
        self.hf_pi = nn.Parameter(torch.randn(d) / math.sqrt(d))
        if local_encoding:
            self.level_proj = nn.Linear(d, d)
            self.out_and = nn.Embedding(max_degree + 1, d)
            self.out_not = nn.Embedding(max_degree + 1, d)
        self.refine = nn.ModuleList(RefineLayer(2 * d, heads, 4 * d, attention, dropout, cone)
                                    for _ in range(refine_layers))
        self.heads = Heads(d, mlp_hidden)

    def set_fused(self, fused: bool) -> None:
        for layer in self.refine:
            layer.fused = fused

    def init_states(self, plan: Plan, new: Tensor, pi_vec: Tensor) -> tuple[Tensor, Tensor]:
        """Initial (hs, hf) of the gates `new` (global ids); pi_vec (N, d) holds PI vectors."""
        is_pi = (plan.gate[new] == PI)[:, None]
        hs = pi_vec[new]
        hf = torch.where(is_pi, self.hf_pi.expand(new.numel(), -1), torch.zeros(new.numel(), self.d, device=new.device))
        if self.local_encoding:
            clamp = lambda t: t.clamp(max=self.max_degree)
            pos = plan.level[new] if self.level_encoding == "absolute" else self.level_scale * plan.level_frac[new]
            hs = hs + self.level_proj(sinusoid(pos, self.d)) \
                + self.out_and(clamp(plan.fanout_and[new])) + self.out_not(clamp(plan.fanout_not[new]))
        return hs, hf

    def forward_sub(self, plan: Plan, sub: Sub, hs_ctx: Tensor, hf_ctx: Tensor, pi_vec: Tensor):
        """Embeddings (hs, hf) of a Sub's new gates, given its context gates' embeddings."""
        hs0, hf0 = self.init_states(plan, sub.new, pi_vec)
        hs, hf = self.tokenizer(torch.cat([hs_ctx, hs0]), torch.cat([hf_ctx, hf0]), sub.steps)
        hs, hf = hs[sub.n_ctx:], hf[sub.n_ctx:]
        if len(self.refine):
            x = torch.cat([hf, hs], -1)  # (n_new, 2d)
            for layer in self.refine:
                x = layer(x, sub)
            hf, hs = hf + x[:, :self.d], hs + x[:, self.d:]
        return hs, hf

    def embed(self, plan: Plan, pi_vec: Tensor, *, partitioned: bool = False, on_sub=None, history=None):
        """hs, hf (N, d) of every gate.

        Full graph: windows in order, everything in one autograd graph. Partitioned: one
        mini-batch of areas at a time, context pulled from the history table (no gradient),
        results pushed back; `on_sub(sub, hs_new, hf_new, hs_table, hf_table)` is called per
        mini-batch before the push (the training loop's loss and optimizer step). `history`:
        a preallocated table (hs, hf), each (N, d) (the official code keeps it in host memory).
        """
        N, d = plan.num_nodes, self.d
        if partitioned and history is not None:
            hs_all, hf_all = history
        else:
            hs_all, hf_all = torch.zeros(N, d, device=pi_vec.device), torch.zeros(N, d, device=pi_vec.device)
        for sub in plan.work(partitioned):
            ctx = sub.nodes[:sub.n_ctx]
            hs, hf = self.forward_sub(plan, sub, hs_all[ctx], hf_all[ctx], pi_vec)
            if partitioned:
                if on_sub is not None:
                    on_sub(sub, hs, hf, hs_all, hf_all)
                with torch.no_grad():
                    hs_all[sub.new], hf_all[sub.new] = hs.detach(), hf.detach()
            else:
                hs_all = hs_all.index_copy(0, sub.new, hs)
                hf_all = hf_all.index_copy(0, sub.new, hf)
        return hs_all, hf_all


class GAT(nn.Module):
    """The GAT baseline (official ``gnn.GAT(in_channels=3, hidden_channels, num_layers=9)``):
    GATConv layers (one head, self loops) over the fanin -> gate edges of the one-hot gate type,
    ReLU between layers; hf = hs = h."""

    def __init__(self, *, hidden: int, mlp_hidden: int, layers: int):
        super().__init__()
        dims = [3] + [hidden] * layers
        self.lins = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in itertools.pairwise(dims))
        self.att_src = nn.ParameterList(nn.Parameter(torch.empty(1, 1, hidden)) for _ in range(layers))
        self.att_dst = nn.ParameterList(nn.Parameter(torch.empty(1, 1, hidden)) for _ in range(layers))
        self.bias = nn.ParameterList(nn.Parameter(torch.zeros(hidden)) for _ in range(layers))
        for p in [*self.att_src, *self.att_dst]:
            nn.init.xavier_uniform_(p)
        self.heads = Heads(hidden, mlp_hidden)

    def embed(self, plan: Plan, pi_vec=None, **_):
        N = plan.num_nodes
        loops = torch.arange(N, device=plan.gate.device)
        layout = kernels.graph_layout(torch.cat([plan.edge_index, torch.stack([loops, loops])], 1), N, N)
        x = F.one_hot(plan.gate, 3).float()
        for i, lin in enumerate(self.lins):
            h = lin(x)[:, None]  # (N, 1, hidden)
            x = kernels.gat_attention(h, None, self.att_src[i], self.att_dst[i], layout)[:, 0] + self.bias[i]
            if i < len(self.lins) - 1:
                x = F.relu(x)
        return x, x


def build(arm: dict, *, hidden: int, mlp_hidden: int, heads: int, dropout: float, max_degree: int,
          level_encoding: str = "absolute", level_scale: float = 100.0) -> nn.Module:
    """A model from an arm's config (`kind`: circuit | gat)."""
    if arm["kind"] == "gat":
        return GAT(hidden=hidden, mlp_hidden=mlp_hidden, layers=arm["layers"])
    return CircuitModel(hidden=hidden, mlp_hidden=mlp_hidden, refine_layers=arm["layers"], heads=heads,
                        attention=arm["attention"], local_encoding=arm["local_encoding"], dropout=dropout,
                        max_degree=max_degree, cone=arm.get("cone", "fanin"), level_encoding=level_encoding,
                        level_scale=level_scale)
