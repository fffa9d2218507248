"""kernels.graph: a hand-computed graph, SDPA with an adjacency mask, PyG's GATConv and
scatter, autograd, opcheck, and the Triton kernels against the reference."""

import math

import pytest
import torch
import torch.nn.functional as F
from kernels_testing import GRAD_TOL, TOL, TRITON_DEVICE, needs_gpu, needs_triton

import kernels
from kernels.graph import (
    _graph_bwd_reference,
    _graph_fwd_reference,
    _triton_graph_bwd,
    _triton_graph_fwd,
    _triton_segment_sum,
)


def _graph(num_src, num_dst, E, seed=0, device="cpu"):
    """Random edges without duplicates, (2, E): row 0 source, row 1 destination."""
    g = torch.Generator().manual_seed(seed)
    pairs = torch.randperm(num_src * num_dst, generator=g)[:E]
    return torch.stack([pairs % num_src, pairs // num_src]).to(device)


def _randn(*shape, seed=0, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device=device, dtype=dtype)


def test_four_node_graph_by_hand():
    # edges j -> i: 0->3, 1->3, 2->3 (node 3 attends over 0, 1, 2); 3->0, 1->0; 1, 2 get none
    edge_index = torch.tensor([[0, 1, 2, 3, 1], [3, 3, 3, 0, 0]])
    q = torch.tensor([1.0, 0.0, 0.0, 2.0]).view(4, 1, 1)
    k = torch.tensor([1.0, 2.0, 3.0, 0.0]).view(4, 1, 1)
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 2.0]]).view(4, 1, 2)
    out = kernels.graph_attention(q, k, v, edge_index, scale=1.0)[:, 0]
    # node 3: scores q3 * (k0, k1, k2) = (2, 4, 6); node 0: q0 * (k3, k1) = (0, 2)
    w3 = torch.tensor([math.exp(2), math.exp(4), math.exp(6)]) / (math.exp(2) + math.exp(4) + math.exp(6))
    w0 = torch.tensor([1.0, math.exp(2)]) / (1.0 + math.exp(2))
    expected = torch.stack([w0[0] * v[3, 0] + w0[1] * v[1, 0], torch.zeros(2), torch.zeros(2), w3 @ v[:3, 0]])
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("H,D,C", [(1, 8, 8), (3, 5, 7)])
def test_matches_sdpa_with_adjacency_mask(H, D, C):
    N, E = 30, 150
    edge_index = _graph(N, N, E)
    edge_index = torch.cat([edge_index, torch.arange(N).repeat(2, 1)], 1).unique(dim=1)  # every node has an edge in
    q, k, v = _randn(N, H, D), _randn(N, H, D, seed=1), _randn(N, H, C, seed=2)
    bias = _randn(edge_index.shape[1], H, seed=3)
    out = kernels.graph_attention(q, k, v, edge_index, edge_bias=bias)
    dense_bias = torch.full((H, N, N), float("-inf"))
    dense_bias[:, edge_index[1], edge_index[0]] = bias.T  # [h, dst, src]
    ref = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=dense_bias)
    torch.testing.assert_close(out, ref.transpose(0, 1), atol=1e-5, rtol=1e-5)


def test_gat_matches_pyg_gatconv():
    from torch_geometric.nn import GATConv
    from torch_geometric.utils import add_self_loops, remove_self_loops

    torch.manual_seed(0)
    N, F_in, H, C = 40, 12, 3, 6
    conv = GATConv(F_in, C, heads=H, negative_slope=0.2)
    with torch.no_grad():  # PyG initialises the bias to zero; make it count
        conv.bias.normal_()
    x = torch.randn(N, F_in, requires_grad=True)
    edge_index = _graph(N, N, 160)
    ref = conv(x, edge_index)
    ei, _ = add_self_loops(remove_self_loops(edge_index)[0], num_nodes=N)  # what GATConv does
    x_proj = conv.lin(x).view(N, H, C)
    out = kernels.gat_attention(x_proj, None, conv.att_src, conv.att_dst, ei).reshape(N, H * C) + conv.bias
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    w = torch.randn_like(out)
    params = [x, conv.lin.weight, conv.att_src, conv.att_dst, conv.bias]
    g_ref = torch.autograd.grad((ref * w).sum(), params)
    g_out = torch.autograd.grad((out * w).sum(), params)
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_segment_sum_matches_pyg_scatter():
    from torch_geometric.utils import scatter

    src, index = _randn(200, 3, 2), torch.randint(0, 17, (200,), generator=torch.Generator().manual_seed(1))
    out = kernels.segment_sum(src, index, 20)  # segments 17..19 stay empty
    torch.testing.assert_close(out, scatter(src, index, dim=0, dim_size=20, reduce="sum"))


def test_gradcheck_float64():
    ei = _graph(9, 7, 25)  # bipartite: 9 sources, 7 destinations, some without edges
    q, k = _randn(7, 2, 3).double(), _randn(9, 2, 3, seed=1).double()
    v, b = _randn(9, 2, 4, seed=2).double(), _randn(25, 2, seed=3).double()
    args = [t.requires_grad_() for t in (q, k, v, b)]
    assert torch.autograd.gradcheck(lambda q, k, v, b: kernels.graph_attention(q, k, v, ei, edge_bias=b), args)
    xs, xd = _randn(9, 2, 4, seed=4).double(), _randn(7, 2, 4, seed=5).double()
    a_s, a_d = _randn(1, 2, 4, seed=6).double(), _randn(1, 2, 4, seed=7).double()
    args = [t.requires_grad_() for t in (xs, xd, a_s, a_d)]
    assert torch.autograd.gradcheck(lambda xs, xd, a_s, a_d: kernels.gat_attention(xs, xd, a_s, a_d, ei), args)
    src = _randn(30, 3, seed=8).double().requires_grad_()
    index = torch.randint(0, 6, (30,))
    assert torch.autograd.gradcheck(lambda s: kernels.segment_sum(s, index, 8), (src,))


@pytest.mark.parametrize("gat", [False, True])
def test_opcheck(gat):
    lay = kernels.graph_layout(_graph(11, 9, 40), 11, 9)
    D = 1 if gat else 4
    q, k, v = _randn(9, 2, D), _randn(11, 2, D, seed=1), _randn(11, 2, 5, seed=2)
    bias = _randn(40, 2, seed=3)
    fwd_args = (q, k, v, bias, lay.rowptr, lay.col, lay.dst, lay.colptr, lay.csc_eid, 0.5, 0.2, gat)
    torch.library.opcheck(torch.ops.kernels.graph_attention_fwd.default,
                          tuple(t.requires_grad_() if i < 4 else t for i, t in enumerate(fwd_args)))
    out, lse = _graph_fwd_reference(q.detach(), k.detach(), v.detach(), bias.detach(), lay.col, lay.dst, 9, 0.5, 0.2, gat)
    torch.library.opcheck(torch.ops.kernels.graph_attention_bwd.default,
                          (torch.randn_like(out), q.detach(), k.detach(), v.detach(), bias.detach(), out, lse,
                           lay.rowptr, lay.col, lay.dst, lay.colptr, lay.csc_eid, 0.5, 0.2, gat, True))
    torch.library.opcheck(torch.ops.kernels.segment_sum.default,
                          (_randn(30, 3).requires_grad_(), torch.randint(0, 6, (30,)), 8))


# ---------------------------------------------------------------------------- Triton


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("gat,with_bias", [(False, False), (False, True), (True, True)])
def test_triton_matches_reference(gat, with_bias, dtype):
    N_src, N_dst, E, H = 37, 41, 150, 3  # ragged: 41 rows = 2 full programs of 16 + 9
    D, C = (1, 10) if gat else (12, 10)
    lay = kernels.graph_layout(_graph(N_src, N_dst, E, device=TRITON_DEVICE), N_src, N_dst)
    q, k = _randn(N_dst, H, D, dtype=dtype, device=TRITON_DEVICE), _randn(N_src, H, D, seed=1, dtype=dtype, device=TRITON_DEVICE)
    v = _randn(N_src, H, C, seed=2, dtype=dtype, device=TRITON_DEVICE)
    bias = _randn(E, H, seed=3, device=TRITON_DEVICE) if with_bias else None
    out, lse = _triton_graph_fwd(q, k, v, bias, lay.rowptr, lay.col, 0.4, 0.2, gat, block_m=16)
    out_ref, lse_ref = _graph_fwd_reference(q, k, v, bias, lay.col, lay.dst, N_dst, 0.4, 0.2, gat)
    torch.testing.assert_close(out.float(), out_ref.float(), **TOL[dtype])
    assert torch.equal(torch.isinf(lse), torch.isinf(lse_ref))  # nodes without incoming edges
    do = _randn(N_dst, H, C, seed=4, dtype=dtype, device=TRITON_DEVICE)
    args = (do, q, k, v, bias, out, lse, lay.rowptr, lay.col, lay.dst, lay.colptr, lay.csc_eid, 0.4, 0.2, gat, with_bias)
    grads = _triton_graph_bwd(*args, block_m=16)
    grads_ref = _graph_bwd_reference(do, q, k, v, bias, out_ref, lse_ref, lay.col, lay.dst, 0.4, 0.2, gat, with_bias)
    for name, a, b in zip(["dq", "dk", "dv", "dbias"], grads, grads_ref):
        torch.testing.assert_close(a.float(), b.float(), **GRAD_TOL[dtype], msg=lambda m: f"{name}: {m}")
    # deterministic: a second backward is bitwise identical
    assert all(torch.equal(a, b) for a, b in zip(grads, _triton_graph_bwd(*args, block_m=16)))


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_segment_sum(dtype):
    src = _randn(300, 3, 7, dtype=dtype, device=TRITON_DEVICE)
    index = torch.randint(0, 40, (300,), generator=torch.Generator().manual_seed(1)).to(TRITON_DEVICE)
    out = _triton_segment_sum(src, index, 45, block_m=16, block_f=16)
    torch.testing.assert_close(out.float(), kernels.segment_sum_reference(src, index, 45).float(), **TOL[dtype])


@needs_gpu
def test_gpu_gat_matches_pyg_and_is_deterministic():
    from torch_geometric.nn import GATConv

    N, H, C = 5000, 4, 32
    conv = GATConv(C, C, heads=H, add_self_loops=False).cuda()
    x = torch.randn(N, C, device="cuda", requires_grad=True)
    ei = _graph(N, N, 4 * N, device="cuda")
    ref = conv(x, ei)
    out = kernels.gat_attention(conv.lin(x).view(N, H, C), None, conv.att_src, conv.att_dst, ei).reshape(N, -1) + conv.bias
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    g1 = torch.autograd.grad(out.sum(), x, retain_graph=True)[0]
    g2 = torch.autograd.grad(out.sum(), x)[0]
    assert torch.equal(g1, g2)
