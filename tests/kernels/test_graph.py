"""kernels.graph: a hand-computed graph, SDPA with an adjacency mask, PyG's GATConv and
scatter, autograd, opcheck, and the Triton kernels against the reference."""

import math

import pytest
import torch
import torch.nn.functional as F
from kernels_testing import DEVICES, GRAD_TOL, TOL, TRITON_DEVICE, needs_gpu, needs_triton

import kernels
from kernels.graph import (
    graph_attention_reference,
    _graph_bwd_reference,
    _graph_fwd_reference,
    _triton_graph_bwd,
    _triton_graph_fwd,
    _triton_segment_sum,
    degree_order,
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


# Through the registration (torch.ops.kernels.graph_attention_fwd and the backward that
# register_autograd attached, kernels::graph_attention_bwd), not the eager CPU bypass.


def _op_args(lay, q, k, v, bias, scale=0.5, slope=0.2, gat=False):
    return (q, k, v, bias, lay.rowptr, lay.col, lay.dst, lay.colptr, lay.csc_eid, scale, slope, gat)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gat", [False, True])
def test_gradcheck_through_the_registered_op(device, gat):
    ei = _graph(9, 7, 25, device=device)  # bipartite, some destinations without edges
    lay = kernels.graph_layout(ei, 9, 7)
    D = 1 if gat else 3
    q, k = _randn(7, 2, D).double().to(device), _randn(9, 2, D, seed=1).double().to(device)
    v, b = _randn(9, 2, 4, seed=2).double().to(device), _randn(25, 2, seed=3).double().to(device)
    args = [t.requires_grad_() for t in (q, k, v, b)]
    fn = lambda q, k, v, b: torch.ops.kernels.graph_attention_fwd(*_op_args(lay, q, k, v, b, gat=gat))[0]  # noqa: E731
    assert torch.autograd.gradcheck(fn, args)
    src = _randn(30, 3, seed=8).double().to(device).requires_grad_()
    index = torch.randint(0, 6, (30,), generator=torch.Generator().manual_seed(0)).to(device)
    assert torch.autograd.gradcheck(lambda s: torch.ops.kernels.segment_sum(s, index, 8), (src,))


@pytest.mark.parametrize("device", DEVICES)
def test_registered_op_values_and_grads_match_the_reference(device):
    # CPU: the registered CPU kernel; CUDA: the Triton kernels behind the same registration
    N, E, H = 60, 300, 3
    lay = kernels.graph_layout(_graph(N, N, E, device=device), N, N)
    q, k, v = (_randn(N, H, 16, seed=s, device=device).requires_grad_() for s in range(3))
    bias = _randn(E, H, seed=4, device=device).requires_grad_()
    out = torch.ops.kernels.graph_attention_fwd(*_op_args(lay, q, k, v, bias))[0]
    leaves = [t.detach().requires_grad_() for t in (q, k, v, bias)]
    ref = _graph_fwd_reference(*leaves, lay.col, lay.dst, N, 0.5, 0.2, False)[0]
    torch.testing.assert_close(out, ref, **TOL[torch.float32])
    do = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v, bias), do), torch.autograd.grad(ref, leaves, do)):
        torch.testing.assert_close(a, b, **GRAD_TOL[torch.float32])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gat", [False, True])
def test_opcheck(device, gat):
    lay = kernels.graph_layout(_graph(11, 9, 40, device=device), 11, 9)
    D = 1 if gat else 4
    q, k, v = (_randn(n, 2, d, seed=s, device=device) for s, (n, d) in enumerate([(9, D), (11, D), (11, 5)]))
    bias = _randn(40, 2, seed=3, device=device)
    fwd_args = (q, k, v, bias, lay.rowptr, lay.col, lay.dst, lay.colptr, lay.csc_eid, 0.5, 0.2, gat)
    torch.library.opcheck(torch.ops.kernels.graph_attention_fwd.default,
                          tuple(t.requires_grad_() if i < 4 else t for i, t in enumerate(fwd_args)))
    out, lse = torch.ops.kernels.graph_attention_fwd(q.detach(), k.detach(), v.detach(), bias.detach(),
                                                     *fwd_args[4:])
    torch.library.opcheck(torch.ops.kernels.graph_attention_bwd.default,
                          (torch.randn_like(out), q.detach(), k.detach(), v.detach(), bias.detach(), out, lse,
                           lay.rowptr, lay.col, lay.dst, lay.colptr, lay.csc_eid, 0.5, 0.2, gat, True))
    torch.library.opcheck(torch.ops.kernels.segment_sum.default,
                          (_randn(30, 3, device=device).requires_grad_(),
                           torch.randint(0, 6, (30,)).to(device), 8))


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


def _skewed_graph(N, seed=0, device="cpu"):
    """DeepGate4-shaped: fan-in 2 for the gates, fan-out skewed (six hub nodes scattered over
    the ids feed a third of the gates), plus self loops. Returns (2, E)."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.arange(8, N).repeat_interleave(2)
    src = (torch.rand(dst.numel(), generator=g) * dst).long()
    hubs = torch.tensor([3, 40, 77, 130, 171, 222]) % (N // 2)
    src[::3] = hubs[torch.randint(0, 6, (src[::3].numel(),), generator=g)]
    src = torch.minimum(src, dst - 1)  # still a DAG: sources before their destination
    loops = torch.arange(N)
    return torch.stack([torch.cat([src, loops]), torch.cat([dst, loops])]).to(device)


def test_degree_order_bounds_the_work():
    ei = _skewed_graph(300)
    lay = kernels.graph_layout(ei, 300, 300)
    deg = lay.colptr[1:] - lay.colptr[:-1]  # out-degree: the skewed side
    order = degree_order(lay.colptr)
    assert torch.all(deg[order][:-1] >= deg[order][1:])
    # loop steps = sum over row blocks of the block's max degree
    steps = lambda o: sum(int(deg[o[i:i + 16]].max()) for i in range(0, 300, 16))  # noqa: E731
    assert steps(order) < 0.6 * steps(torch.arange(300))


@needs_triton
@pytest.mark.parametrize("gat", [False, True])
def test_triton_degree_order_and_heads_on_a_skewed_graph(gat):
    # the scheduled kernels against the reference on a graph with hubs, 5 heads in one
    # program (BLOCK_H = 8: padded heads), at the CUDA path's 64 rows per program; and the
    # schedule does not change the result: identity order gives bitwise the same values
    N, H = 300, 5
    D, C = (1, 12) if gat else (12, 12)
    ei = _skewed_graph(N, device=TRITON_DEVICE)
    lay = kernels.graph_layout(ei, N, N)
    q, k = _randn(N, H, D, device=TRITON_DEVICE), _randn(N, H, D, seed=1, device=TRITON_DEVICE)
    v, do = _randn(N, H, C, seed=2, device=TRITON_DEVICE), _randn(N, H, C, seed=4, device=TRITON_DEVICE)
    out, lse = _triton_graph_fwd(q, k, v, None, lay.rowptr, lay.col, 0.3, 0.2, gat, block_m=64)
    out_ref, lse_ref = _graph_fwd_reference(q, k, v, None, lay.col, lay.dst, N, 0.3, 0.2, gat)
    torch.testing.assert_close(out, out_ref, **TOL[torch.float32])
    args = (do, q, k, v, None, out, lse, lay.rowptr, lay.col, lay.dst, lay.colptr, lay.csc_eid, 0.3, 0.2, gat, False)
    grads = _triton_graph_bwd(*args, block_m=64)
    grads_ref = _graph_bwd_reference(do, q, k, v, None, out_ref, lse_ref, lay.col, lay.dst, 0.3, 0.2, gat, False)
    for name, a, b in zip(["dq", "dk", "dv"], grads[:3], grads_ref[:3]):
        torch.testing.assert_close(a, b, **GRAD_TOL[torch.float32], msg=lambda m: f"{name}: {m}")
    ident = torch.arange(N, device=TRITON_DEVICE)
    out2, _ = _triton_graph_fwd(q, k, v, None, lay.rowptr, lay.col, 0.3, 0.2, gat, block_m=64, order=ident)
    grads2 = _triton_graph_bwd(*args, block_m=64, row_order=ident, col_order=ident)
    assert torch.equal(out, out2) and all(torch.equal(a, b) for a, b in zip(grads[:3], grads2[:3]))


@needs_triton
def test_triton_graph_attention_matches_pyg_transformer_conv():
    # dot-product graph attention = PyG TransformerConv (no root weight) over its projections
    from torch_geometric.nn import TransformerConv

    torch.manual_seed(0)
    N, H, C = 120, 4, 8
    conv = TransformerConv(H * C, C, heads=H, root_weight=False)
    x = torch.randn(N, H * C)
    ei = _skewed_graph(N)
    ref = conv(x, ei)
    lay = kernels.graph_layout(ei.to(TRITON_DEVICE), N, N)
    with torch.no_grad():
        q, k, v = (lin(x).view(N, H, C).to(TRITON_DEVICE) for lin in (conv.lin_query, conv.lin_key, conv.lin_value))
    out, _ = _triton_graph_fwd(q, k, v, None, lay.rowptr, lay.col, C ** -0.5, 0.0, False)
    torch.testing.assert_close(out.reshape(N, -1).cpu(), ref.detach(), atol=1e-5, rtol=1e-5)


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


# ------------------------------------------------------- destinations whose edges are all masked


def _masked_case(device="cpu", dtype=torch.float32):
    """The 4-node graph of test_four_node_graph_by_hand, 2 heads, plus 2 -> 1. Every edge into
    node 3 is masked (bias -inf) in both heads, the edge into node 1 in head 1 only; node 2 has
    no incoming edge. Returns edge_index, q, k, v, bias and, per head, the edges kept."""
    edge_index = torch.tensor([[0, 1, 2, 3, 1, 2], [3, 3, 3, 0, 0, 1]], device=device)
    q = torch.tensor([[1.0, -1.0], [0.5, 0.0], [0.0, 2.0], [2.0, 1.0]]).view(4, 2, 1)
    k = torch.tensor([[1.0, 0.5], [2.0, -1.0], [3.0, 1.0], [0.0, 2.0]]).view(4, 2, 1)
    v = torch.arange(16, dtype=torch.float32).view(4, 2, 2) / 8 - 1
    inf = float("-inf")
    bias = torch.tensor([[inf, inf], [inf, inf], [inf, inf], [0.0, 0.5], [0.0, -0.5], [0.3, inf]])
    q, k, v, bias = (t.to(device=device, dtype=dtype) for t in (q, k, v, bias))
    return edge_index, q, k, v, bias.float()


def _expected_without_masked_edges(edge_index, q, k, v, bias, do):
    """Output and gradients of the graph with the masked edges removed, head by head (nothing
    -inf in it): what masking must equal. Masked edges get a zero bias gradient."""
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=torch.float64)
    grads = [torch.zeros(t.shape, dtype=torch.float64) for t in (q, k, v, bias)]
    for h in range(q.shape[1]):
        keep = torch.isfinite(bias[:, h]).cpu()
        ei = edge_index.cpu()[:, keep]
        leaves = [t.detach().cpu()[:, h:h + 1].double().requires_grad_() for t in (q, k, v)]
        b = bias.detach().cpu()[keep, h].double().requires_grad_()
        o = graph_attention_reference(*leaves, ei, scale=1.0, edge_bias=b)
        out[:, h] = o[:, 0].detach()
        g = torch.autograd.grad(o, leaves + [b], do.cpu()[:, h:h + 1].double())
        for i in range(3):
            grads[i][:, h] = g[i][:, 0]
        grads[3][keep, h] = g[3]
    return out, grads


def test_masked_case_by_hand():
    # the oracle itself, by hand: node 0 in head 0 attends over k3, k1 with scores q0*k = (0, 2) and
    # bias (0, 0); node 1 in head 0 has the single edge from 2; nodes 2 and 3 get zeros
    edge_index, q, k, v, bias = _masked_case()
    out, _ = _expected_without_masked_edges(edge_index, q, k, v, bias, torch.zeros(4, 2, 2))
    w0 = torch.tensor([1.0, math.exp(2)]) / (1.0 + math.exp(2))
    torch.testing.assert_close(out[0, 0].float(), w0[0] * v[3, 0] + w0[1] * v[1, 0])
    torch.testing.assert_close(out[1, 0].float(), v[2, 0])
    assert torch.all(out[1, 1] == 0) and torch.all(out[2] == 0) and torch.all(out[3] == 0)


def _check_masked(out, grads, expected, tol):
    out_exp, grads_exp = expected
    assert all(torch.isfinite(t).all() for t in (out, *grads))
    assert torch.all(out[3] == 0) and torch.all(out[1, 1] == 0)  # exactly zero, not NaN
    torch.testing.assert_close(out.double(), out_exp, **tol)
    for name, a, b in zip(["dq", "dk", "dv", "dbias"], grads, grads_exp):
        torch.testing.assert_close(a.double(), b, **tol, msg=lambda m: f"{name}: {m}")
    assert torch.all(grads[0][3] == 0) and torch.all(grads[3][:3] == 0) and grads[3][5, 1] == 0


def test_all_masked_destination_reference_and_cpu_paths():
    edge_index, q, k, v, bias = _masked_case()
    do = _randn(4, 2, 2, seed=5)
    expected = _expected_without_masked_edges(edge_index, q, k, v, bias, do)
    tol = dict(atol=1e-6, rtol=1e-6)
    lay = kernels.graph_layout(edge_index, 4, 4)
    paths = {
        "reference": lambda *t: graph_attention_reference(*t[:3], edge_index, scale=1.0, edge_bias=t[3]),
        "eager CPU": lambda *t: kernels.graph_attention(*t[:3], edge_index, scale=1.0, edge_bias=t[3]),
        "registered op": lambda *t: torch.ops.kernels.graph_attention_fwd(  # bias in CSR order
            *_op_args(lay, *t[:3], t[3][lay.perm], scale=1.0))[0],
    }
    for name, fn in paths.items():
        leaves = [t.clone().requires_grad_() for t in (q, k, v, bias)]
        out = fn(*leaves)
        grads = torch.autograd.grad(out, leaves, do)
        _check_masked(out.detach(), grads, expected, tol)
    # the forward's lse is -inf where nothing is seen (node 3, node 1 in head 1, node 2)
    _, lse = _graph_fwd_reference(q, k, v, bias[lay.perm], lay.col, lay.dst, 4, 1.0, 0.2, False)
    assert torch.isneginf(lse[3]).all() and torch.isneginf(lse[1, 1]) and torch.isneginf(lse[2]).all()
    assert torch.isfinite(lse[0]).all() and torch.isfinite(lse[1, 0])


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_all_masked_destination_triton(dtype):
    edge_index, q, k, v, bias = _masked_case(TRITON_DEVICE, dtype)
    do = _randn(4, 2, 2, seed=5)
    expected = _expected_without_masked_edges(edge_index, q.float(), k.float(), v.float(), bias, do)
    lay = kernels.graph_layout(edge_index, 4, 4)
    b = bias[lay.perm.to(bias.device)].contiguous()  # the kernels take the bias in CSR order
    out, lse = _triton_graph_fwd(q, k, v, b, lay.rowptr, lay.col, 1.0, 0.2, False, block_m=16)
    assert torch.isneginf(lse[3]).all() and torch.isneginf(lse[1, 1]) and torch.isneginf(lse[2]).all()
    do = do.to(device=TRITON_DEVICE, dtype=dtype)
    dq, dk, dv, db = _triton_graph_bwd(do, q, k, v, b, out, lse, lay.rowptr, lay.col, lay.dst, lay.colptr,
                                       lay.csc_eid, 1.0, 0.2, False, True, block_m=16)
    dbias = torch.empty_like(db)
    dbias[lay.perm.to(db.device)] = db  # back to edge_index order
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)
    _check_masked(out.float().cpu(), [t.float().cpu() for t in (dq, dk, dv, dbias)], expected, tol)
    # and the GAT score: a row that sees no edge gives zeros and finite gradients there too
    out_g, lse_g = _triton_graph_fwd(q, k, v, b, lay.rowptr, lay.col, 1.0, 0.2, True, block_m=16)
    ref_g, _ = _graph_fwd_reference(q, k, v, b, lay.col, lay.dst, 4, 1.0, 0.2, True)
    assert torch.all(out_g[3] == 0) and torch.isfinite(ref_g).all()
    torch.testing.assert_close(out_g.float(), ref_g.float(), **tol)
    grads_g = _triton_graph_bwd(do, q, k, v, b, out_g, lse_g, lay.rowptr, lay.col, lay.dst, lay.colptr,
                                lay.csc_eid, 1.0, 0.2, True, True, block_m=16)
    assert all(torch.isfinite(t).all() for t in grads_g) and torch.all(grads_g[0][3] == 0)


def test_graph_rows_per_program_on_cuda(monkeypatch):
    # the CUDA rule (the interpreter always takes 16 rows), pinned to what kernels.compile_report
    # measured on sm_90 (see graph.GRAPH_MAX_ROWS): 64 rows at 4 heads x 32 or 8 heads x 16 spilled,
    # 32 did not; GAT's CSC backward with one head compiles only at 16 rows
    import kernels.graph as graph

    monkeypatch.setattr(graph, "interpreting", lambda: False)
    assert graph._rows_per_program(None, 4, 32) == 32
    assert graph._rows_per_program(None, 8, 16) == 32
    assert graph._rows_per_program(None, 1, 128) == 32  # DeepGate4's GAT, width 128
    assert graph._rows_per_program(None, 8, 64) == 16  # never fewer than 16
    assert graph._rows_per_program(24, 8, 64) == 24  # an explicit block_m wins
    assert graph._src_rows(32, 1, gat=True) == 16
    assert graph._src_rows(32, 4, gat=True) == 32 and graph._src_rows(32, 1, gat=False) == 32
