"""kernels.hip: block-sparse attention against dense / flex attention, HiP against dense at
full budget, the Triton selection against the reference, and HiP's recall on synthetic data."""

import math
import warnings

import pytest
import torch
from kernels_testing import DEVICES, TOL, TRITON_DEVICE, needs_gpu, needs_triton

import kernels
from kernels.bench import smooth_keys  # keys that vary smoothly along T
from kernels.hip import (
    _assemble,
    _geometry,
    _tree_search_reference,
    _triton_block_sparse_attention,
    _triton_hip_tree,
    _virtual_to_real,
    gpu_block_half,
    gpu_block_sel,
)

SMALL = dict(block_q=32, block_stride_q=2, block_k=2, mask_k=16, sink=4, window=32)


def _randn(*shape, seed=0, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device=device, dtype=dtype)


def _dense_mask(blocks, Tq, Tk, block_q, block_k):
    """(B, H, Tq, Tk) bool: query i may use key j iff j's block is listed for i's block."""
    B, H, NQB, _ = blocks.shape
    m = torch.zeros(B, H, NQB, math.ceil(Tk / block_k) + 1, dtype=torch.bool)
    m.scatter_(-1, torch.where(blocks < 0, m.shape[-1] - 1, blocks).long(), True)
    m = m[..., :-1].repeat_interleave(block_k, -1)[..., :Tk]
    return m.repeat_interleave(block_q, 2)[:, :, :Tq]


def test_block_sparse_reference_matches_dense_and_flex():
    B, H, Tq, Tk, D = 1, 2, 80, 100, 16
    q, k, v = _randn(B, H, Tq, D), _randn(B, H, Tk, D, seed=1), _randn(B, H, Tk, D, seed=2)
    g = torch.Generator().manual_seed(3)
    n_kb = math.ceil(Tk / 4)
    # a random distinct block set per query block, -1 padded, always with the diagonal block
    blocks = torch.stack([torch.randperm(n_kb, generator=g)[:12] for _ in range(B * H * 5)]).view(B, H, 5, 12)
    blocks[..., -2:] = -1
    diag = (torch.arange(5) * 16 + 15 + Tk - Tq) // 4
    blocks[..., -1] = diag.view(1, 1, 5)
    blocks[..., :-1] = torch.where(blocks[..., :-1] == blocks[..., -1:], -1, blocks[..., :-1])
    out = kernels.block_sparse_attention_reference(q, k, v, blocks, block_q=16, block_k=4, causal=True)
    mask = _dense_mask(blocks, Tq, Tk, 16, 4) & torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq)
    dense = kernels.attention_reference(q, k, v, bias=mask)
    torch.testing.assert_close(out, dense, atol=1e-5, rtol=1e-5)
    # FlexAttention (eager on CPU) with the same mask as a mask_mod
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def mask_mod(b, h, i, j):
        return mask[b, h, i, j]

    block_mask = create_block_mask(mask_mod, B, H, Tq, Tk, device="cpu", BLOCK_SIZE=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile"
        flex = flex_attention(q, k, v, block_mask=block_mask)
    torch.testing.assert_close(out, flex, atol=1e-5, rtol=1e-5)
    # the public op (custom_op, CPU = reference)
    torch.testing.assert_close(kernels.block_sparse_attention(q, k, v, blocks, block_q=16, block_k=4), out)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("Tq,Tk,Hkv", [(150, 150, 2), (61, 203, 1)])
def test_full_budget_equals_dense(causal, Tq, Tk, Hkv):
    q, k, v = _randn(2, 2, Tq, 24), _randn(2, Hkv, Tk, 24, seed=1), _randn(2, Hkv, Tk, 24, seed=2)
    out = kernels.hip_attention(q, k, v, **dict(SMALL, mask_k=Tk), causal=causal)
    dense = kernels.attention(q, k, v, causal=causal)
    torch.testing.assert_close(out, dense, atol=1e-6, rtol=1e-6)


def test_selection_structure():
    Tq = Tk = 400
    q, k = _randn(1, 2, Tq, 16), _randn(1, 2, Tk, 16, seed=1)
    blocks = kernels.hip_select(q, k, **SMALL)
    g = _geometry(Tq, Tk, 32, 2, 4, 32, True)
    n = SMALL["mask_k"] // SMALL["block_k"]
    assert blocks.dtype == torch.int32 and blocks.shape[:3] == (1, 2, math.ceil(Tq / 32))
    for qb in range(blocks.shape[2]):
        row = blocks[0, 0, qb]
        sel = row[row >= 0]
        assert torch.all(row[len(sel):] == -1), "padding only at the end"
        assert torch.all(sel[1:] > sel[:-1]), "sorted and distinct"
        assert set(range(g["ns"])) <= set(sel.tolist()), "sink blocks"
        assert set(range(int(g["w_lo"][qb]), int(g["w_hi"][qb]))) <= set(sel.tolist()), "window blocks"
        tree = len(sel) - g["ns"] - int(g["w_hi"][qb] - g["w_lo"][qb])
        assert tree == min(n, int(g["L"][qb])), "n tree blocks once the search range exceeds n"
        assert int(sel.max()) * 2 <= qb * 32 + 31, "causal: nothing after the last query"


def test_tree_search_follows_the_best_branch():
    # one key block scores far above the rest; with n = 1 the search must end on it
    T, D = 512, 8
    q = torch.ones(1, 1, T, D)
    k = -torch.ones(1, 1, T, D)
    k[:, :, 2 * 101:2 * 101 + 2] = 1.0  # key block 101
    # make the landscape smooth around it (HiP relies on locality): a ramp towards it
    pos = torch.arange(T).view(1, 1, T, 1)
    k = k + 1.0 - (pos - 203).abs() / T
    blocks = kernels.hip_select(q, k, block_q=64, block_stride_q=2, block_k=2, mask_k=2, sink=0, window=0)
    last = blocks[0, 0, -1]
    assert 101 in last.tolist()


@pytest.mark.parametrize("op", ["select", "bsa"])
def test_opcheck(op):
    q, k, v = _randn(1, 2, 70, 16), _randn(1, 1, 70, 16, seed=1), _randn(1, 1, 70, 16, seed=2)
    if op == "select":
        torch.library.opcheck(torch.ops.kernels.hip_select.default, (q, k, 32, 2, 2, 16, 4, 8, True))
    else:
        blocks = kernels.hip_select(q, k, **SMALL)
        torch.library.opcheck(torch.ops.kernels.block_sparse_attention.default, (q, k, v, blocks, 32, 2, True, 0.25))


# ---------------------------------------------------------------------------- Triton


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("B,H,Hkv,Tq,Tk,D,causal", [
    (1, 2, 1, 260, 260, 24, True),  # grouped-query, D not a power of two, ragged last block
    (2, 1, 1, 130, 290, 16, True),  # Tq < Tk
    (1, 1, 1, 250, 250, 16, False),
])
def test_triton_selection_matches_reference(B, H, Hkv, Tq, Tk, D, causal, dtype):
    # small integers: every product is exact in fp16 / fp32, whatever the summation order,
    # so there are many exact ties and the two implementations must break them alike
    g = torch.Generator().manual_seed(Tq)
    q = torch.randint(-2, 3, (B, H, Tq, D), generator=g).to(TRITON_DEVICE, dtype)
    k = torch.randint(-2, 3, (B, Hkv, Tk, D), generator=g).to(TRITON_DEVICE, dtype)
    kw = dict(SMALL, causal=causal)
    tree, geo = _triton_hip_tree(q, k, **kw)
    tree_ref, _, _ = _tree_search_reference(q, k, **kw)
    assert torch.equal(_assemble(tree, geo), _assemble(tree_ref.to(tree.device), geo))
    if dtype != torch.float32:
        return
    # and on Gaussian data (fp32: near-ties are then rare enough not to flip a choice)
    q, k = _randn(B, H, Tq, D, device=TRITON_DEVICE, dtype=dtype), _randn(B, Hkv, Tk, D, seed=1, device=TRITON_DEVICE, dtype=dtype)
    tree, _ = _triton_hip_tree(q, k, **kw)
    tree_ref, _, _ = _tree_search_reference(q, k, **kw)
    assert torch.equal(_assemble(tree, geo), _assemble(tree_ref.to(tree.device), geo))


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("causal", [True, False])
def test_triton_block_sparse_matches_reference(dtype, causal):
    Tq, Tk = 130, 300
    q = _randn(1, 2, Tq, 24, device=TRITON_DEVICE, dtype=dtype)
    k, v = (_randn(1, 1, Tk, 24, seed=s, device=TRITON_DEVICE, dtype=dtype) for s in (1, 2))
    blocks = kernels.hip_select_reference(q, k, **SMALL, causal=causal).to(TRITON_DEVICE)
    out = _triton_block_sparse_attention(q, k, v, blocks, block_q=32, block_k=2, causal=causal, scale=0.2)
    ref = kernels.block_sparse_attention_reference(q, k, v, blocks, block_q=32, block_k=2, causal=causal, scale=0.2)
    torch.testing.assert_close(out.float(), ref.float(), **TOL[dtype])


@needs_triton
@pytest.mark.parametrize("Hq,Hkv,Tq,Tk,mask_k", [
    (1, 1, 1024, 1024, 512),  # the paper's defaults, long enough that the tree prunes (L > n)
    (2, 1, 64, 1100, 512),  # one query block at the end of a longer cache (Tq != Tk)
])
def test_triton_hip_defaults_at_the_gpu_tiles(Hq, Hkv, Tq, Tk, mask_k):
    # block_q = 64, block_stride_q = 2, block_k = 2, sink = 16, window = 256 and the CUDA
    # path's BLOCK_HALF (64 halves) and BLOCK_SEL (32 blocks), in the interpreter
    g = torch.Generator().manual_seed(0)
    q = torch.randint(-2, 3, (1, Hq, Tq, 16), generator=g).to(TRITON_DEVICE, torch.float32)
    k = torch.randint(-2, 3, (1, Hkv, Tk, 16), generator=g).to(TRITON_DEVICE, torch.float32)
    v = _randn(1, Hkv, Tk, 16, seed=2, device=TRITON_DEVICE)
    kw = dict(block_q=64, block_stride_q=2, block_k=2, mask_k=mask_k, sink=16, window=256, causal=True)
    tree, geo = _triton_hip_tree(q, k, **kw, block_half=gpu_block_half(2))
    tree_ref, _, _ = _tree_search_reference(q, k, **kw)
    assert int(geo["L"].max()) > mask_k // 2  # something was pruned
    blocks = _assemble(tree, geo)
    assert torch.equal(blocks, _assemble(tree_ref.to(tree.device), geo))
    assert torch.equal(blocks, kernels.hip_select_reference(q, k, **kw).to(blocks.device))
    out = _triton_block_sparse_attention(q, k, v, blocks, block_q=64, block_k=2, causal=True, scale=0.25,
                                         block_sel=gpu_block_sel(2))
    ref = kernels.block_sparse_attention_reference(q, k, v, blocks, block_q=64, block_k=2, causal=True, scale=0.25)
    torch.testing.assert_close(out, ref, **TOL[torch.float32])


@pytest.mark.parametrize("device", DEVICES)
def test_hip_ops_through_the_registration(device):
    # forward-only ops: opcheck (schema, fake, no autograd registered) on each device, and the
    # op's values against the references (CUDA: the Triton kernels)
    q, k, v = (_randn(1, 2, 130, 16, seed=s).to(device) for s in range(3))
    k, v = k[:, :1], v[:, :1]
    torch.library.opcheck(torch.ops.kernels.hip_select.default, (q, k, 32, 2, 2, 16, 4, 32, True))
    blocks = torch.ops.kernels.hip_select(q, k, 32, 2, 2, 16, 4, 32, True)
    assert torch.equal(blocks.cpu(), kernels.hip_select_reference(q.cpu(), k.cpu(), **SMALL))
    torch.library.opcheck(torch.ops.kernels.block_sparse_attention.default, (q, k, v, blocks, 32, 2, True, 0.25))
    out = torch.ops.kernels.block_sparse_attention(q, k, v, blocks, 32, 2, True, 0.25)
    ref = kernels.block_sparse_attention_reference(q.cpu(), k.cpu(), v.cpu(), blocks.cpu(), block_q=32, block_k=2,
                                                   scale=0.25)
    torch.testing.assert_close(out.cpu(), ref, atol=3e-5, rtol=3e-5)


@needs_gpu
def test_gpu_hip_attention_bf16():
    q, k, v = (_randn(1, 4, 4096, 64, seed=s, device="cuda", dtype=torch.bfloat16) for s in range(3))
    out = kernels.hip_attention(q, k, v)
    ref = kernels.block_sparse_attention_reference(q, k, v, kernels.hip_select_reference(q, k), block_q=64, block_k=2)
    torch.testing.assert_close(out.float(), ref.float(), **TOL[torch.bfloat16])
    # full budget equals the dense kernel
    full = kernels.hip_attention(q, k, v, mask_k=4096)
    torch.testing.assert_close(full.float(), kernels.attention(q, k, v, causal=True).float(), **TOL[torch.bfloat16])


# ---------------------------------------------------------------------------- quality

QUALITY = dict(block_q=64, block_stride_q=2, block_k=2, mask_k=64, sink=16, window=256, causal=True)


def _recalls(q, k, seed=0):
    """Mean recall of the oracle's top-n blocks by HiP, random pruning and a longer sliding
    window, each choosing n blocks of the search range (equal budget)."""
    tree, g, _ = _tree_search_reference(q, k, **QUALITY)
    oracle = kernels.oracle_select(q, k, **QUALITY)
    n = QUALITY["mask_k"] // QUALITY["block_k"]
    gen = torch.Generator().manual_seed(seed)
    hits = {"hip": [], "random": [], "window": []}
    for qb in range(g["NQB"]):
        L, w_lo = int(g["L"][qb]), int(g["w_lo"][qb])
        if L <= n:  # nothing is pruned there
            continue
        for h in range(q.shape[1]):
            best = set(oracle[0, h, qb].tolist())
            rand = _virtual_to_real(torch.randperm(L, generator=gen)[:n], g["ns"], w_lo, int(g["w_hi"][qb]))
            for name, chosen in [("hip", tree[0, h, qb].tolist()), ("random", rand.tolist()),
                                 ("window", range(w_lo - n, w_lo))]:
                hits[name].append(len(best & set(chosen)) / n)
    return {name: sum(x) / len(x) for name, x in hits.items()}


def test_recall_with_locality_and_its_control():
    g = torch.Generator().manual_seed(0)
    B, H, T, D = 1, 2, 2048, 32
    q = torch.randn(B, H, T, D, generator=g)
    local = _recalls(q, smooth_keys(B, H, T, D, g))
    control = _recalls(q, torch.randn(B, H, T, D, generator=g))  # i.i.d. keys: no locality
    # measured (seed 0): local hip 0.64, random 0.12, window 0.12; control hip 0.24, random 0.11
    assert local["hip"] > local["random"] + 0.3 and local["hip"] > local["window"] + 0.3, local
    edge_local = local["hip"] - max(local["random"], local["window"])
    edge_control = control["hip"] - max(control["random"], control["window"])
    assert edge_control < 0.5 * edge_local, (local, control)


@pytest.mark.parametrize("width,expect", [(16.0, "found"), (0.5, "missed")])
def test_recall_of_a_planted_needle(width, expect):
    # keys aligned with every query, planted around t0 on smooth keys. A bump 16 tokens
    # wide (locality): HiP finds it for every query block that can see it. A one-token
    # spike (no locality): the oracle still finds it, HiP's representatives mostly miss it.
    g = torch.Generator().manual_seed(1)
    B, H, T, D, t0 = 1, 1, 2048, 32, 700
    u = torch.nn.functional.normalize(torch.randn(D, generator=g), dim=0)
    q = torch.randn(B, H, T, D, generator=g) + 2.0 * u
    k = smooth_keys(B, H, T, D, g)
    k = k + 15.0 * torch.exp(-(((torch.arange(T) - t0) / width) ** 2)).view(1, 1, T, 1) * u
    blocks = kernels.hip_select(q, k, **QUALITY)
    oracle = kernels.oracle_select(q, k, **QUALITY)
    geo = _geometry(T, T, 64, 2, 16, 256, True)
    n = QUALITY["mask_k"] // QUALITY["block_k"]
    sees = [qb for qb in range(geo["NQB"]) if int(geo["w_lo"][qb]) > t0 // 2 and int(geo["L"][qb]) > n]
    found = sum(t0 // 2 in blocks[0, 0, qb].tolist() for qb in sees) / len(sees)
    by_oracle = sum(t0 // 2 in oracle[0, 0, qb].tolist() for qb in sees) / len(sees)
    chance = sum(n / int(geo["L"][qb]) for qb in sees) / len(sees)
    # measured: bump 1.0 (oracle 1.0); spike 0.18 (oracle 1.0); random pruning ~0.06
    assert by_oracle == 1.0 and chance < 0.1
    if expect == "found":
        assert found >= 0.9, found
    else:
        assert found <= 0.5, found
