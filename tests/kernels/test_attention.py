"""kernels.attention: reference against SDPA, autograd, opcheck, Triton against the reference."""

import sys

import pytest
import torch
import torch.nn.functional as F
from kernels_testing import (DEVICES, GRAD_TOL, OP_GRAD_TOL, OP_TOL, TOL, TRITON_DEVICE, needs_gpu, needs_triton,
                             tile_config)
from torch.nn.attention.bias import causal_lower_right

import kernels
from kernels.attention import (
    BWD_CONFIGS,
    DECODE_BWD_CONFIGS,
    DECODE_FWD_CONFIGS,
    FWD_CONFIGS,
    REGISTER_BUDGET,
    BlockConfig,
    _attention_bwd_reference,
    _attention_fwd_reference,
    _bias_to_float,
    _triton_attention_bwd,
    _triton_attention_fwd,
    attention_configs,
    register_estimate,
    smem_bytes,
    tune_key,
)


def _inputs(B, Hq, Hkv, Tq, Tk, D, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, Tq, D, generator=g)
    k = torch.randn(B, Hkv, Tk, D, generator=g)
    v = torch.randn(B, Hkv, Tk, D, generator=g)
    return [t.to(device=device, dtype=dtype) for t in (q, k, v)]


def _bias(kind, B, Hq, Tq, Tk, seed=1):
    g = torch.Generator().manual_seed(seed)
    if kind == "float":  # e.g. a relative-position or topology bias, one per head
        return torch.randn(1, Hq, Tq, Tk, generator=g)
    if kind == "bool":  # padding mask: the last keys of each sequence are padding
        keep = torch.arange(Tk)[None, :] < torch.randint(1, Tk + 1, (B,), generator=g)[:, None]
        return keep[:, None, None, :]
    return None


# (B, Hq, Hkv, Tq, Tk, D, causal, bias): odd lengths, D not a power of two, grouped-query
# heads, Tq != Tk (bottom-right causal), a single decoding query
SDPA_CASES = [
    (1, 2, 2, 17, 17, 16, False, None),
    (2, 4, 2, 33, 33, 24, True, None),
    (1, 3, 1, 20, 45, 8, True, "float"),
    (2, 2, 2, 31, 19, 40, False, "bool"),
    (1, 2, 1, 1, 29, 16, True, "float"),
]


@pytest.mark.parametrize("B,Hq,Hkv,Tq,Tk,D,causal,bias_kind", SDPA_CASES)
def test_reference_matches_sdpa(B, Hq, Hkv, Tq, Tk, D, causal, bias_kind):
    q, k, v = _inputs(B, Hq, Hkv, Tq, Tk, D)
    bias = _bias(bias_kind, B, Hq, Tq, Tk)
    # SDPA's own masks: causal_lower_right is its bottom-right causal variant
    if causal and bias is None:
        mask = causal_lower_right(Tq, Tk)
    elif causal:
        mask = bias.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq), float("-inf"))
    else:
        mask = bias
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    b_ref = b_ours = None
    if bias_kind == "float":
        b_ref, b_ours = bias.clone().requires_grad_(), bias.clone().requires_grad_()
        mask = mask - bias + b_ref  # same values, differentiable in b_ref
    out_ref = F.scaled_dot_product_attention(*leaves, attn_mask=mask, scale=0.3, enable_gqa=True)
    # the reference itself (kernels.attention may use SDPA on the CPU: see the next test)
    out = kernels.attention_reference(*ours, causal=causal, bias=b_ours if bias_kind == "float" else bias, scale=0.3)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    do = torch.randn_like(out)
    out_ref.backward(do)
    out.backward(do)
    for a, b in zip(ours + [b_ours], leaves + [b_ref]):
        if a is not None:
            torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("B,Hq,Hkv,Tq,Tk,D,causal,bias_kind", SDPA_CASES + [(1, 2, 1, 9, 9, 8, True, None),
                                                                          (2, 2, 2, 7, 7, 8, False, "float")])
def test_cpu_dispatch_equals_the_reference(B, Hq, Hkv, Tq, Tk, D, causal, bias_kind):
    # On the CPU `attention` runs PyTorch's fused attention where the conventions agree and the
    # reference elsewhere; either way it must equal the reference, values and gradients.
    q, k, v = _inputs(B, Hq, Hkv, Tq, Tk, D)
    bias = _bias(bias_kind, B, Hq, Tq, Tk)
    a = [t.clone().requires_grad_() for t in (q, k, v)]
    b = [t.clone().requires_grad_() for t in (q, k, v)]
    out = kernels.attention(*a, causal=causal, bias=bias)
    ref = kernels.attention_reference(*b, causal=causal, bias=bias)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    do = torch.randn_like(out)
    out.backward(do)
    ref.backward(do)
    for x, y in zip(a, b):
        torch.testing.assert_close(x.grad, y.grad, atol=1e-5, rtol=1e-5)


def test_uniform_scores_average_the_values():
    # q = 0: every visible key scores the same, so out_i is the mean of the visible v_j
    q, k, v = _inputs(1, 1, 1, 7, 7, 4)
    out = kernels.attention(torch.zeros_like(q), k, v, causal=True)
    cummean = v.cumsum(2) / torch.arange(1, 8).view(1, 1, 7, 1)
    torch.testing.assert_close(out, cummean)
    out = kernels.attention(torch.zeros_like(q), k, v)
    torch.testing.assert_close(out, v.mean(2, keepdim=True).expand_as(v))


def test_rows_without_keys_are_zero():
    # Tq = 6 > Tk = 4, bottom-right causal: query i sees keys j <= i - 2, rows 0 and 1 none
    q, k, v = [t.requires_grad_() for t in _inputs(1, 2, 1, 6, 4, 8)]
    out = kernels.attention(q, k, v, causal=True)
    assert torch.all(out[:, :, :2] == 0) and torch.isfinite(out).all()
    out.sum().backward()
    assert torch.all(q.grad[:, :, :2] == 0) and torch.isfinite(k.grad).all()
    torch.testing.assert_close(out[:, :, 2:], kernels.attention_reference(q, k, v, causal=True)[:, :, 2:])


def test_rows_masked_out_by_the_bias_have_finite_zero_gradients():
    # A padding-style boolean mask that hides every key from query 2: its output is 0 and no gradient
    # (of q, k, v or the bias) may turn into NaN through it.
    q, k, v = [t.requires_grad_() for t in _inputs(1, 1, 1, 3, 3, 4)]
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)[None, None]
    bias = torch.zeros(1, 1, 3, 3).masked_fill(~mask, float("-inf")).requires_grad_()
    for b in (mask, bias):
        out = kernels.attention(q, k, v, bias=b)
        assert torch.all(out[0, 0, 2] == 0)
        out.sum().backward()
        assert torch.all(q.grad[0, 0, 2] == 0)
        for t in (q, k, v):
            assert torch.isfinite(t.grad).all()
            t.grad = None
    assert torch.isfinite(bias.grad).all()


def test_gradcheck_float64():
    q, k, v = [t.double().requires_grad_() for t in _inputs(1, 4, 2, 5, 6, 3)]
    bias = torch.randn(1, 4, 5, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v, b: kernels.attention(q, k, v, causal=True, bias=b),
                                    (q, k, v, bias))
    assert torch.autograd.gradcheck(lambda q, k, v: kernels.attention(q, k, v), (q, k, v))


# Through the registration: torch.ops.kernels.attention_fwd's forward and the backward that
# register_autograd attached to it (kernels::attention_bwd), not the eager CPU bypass of
# `attention`. On CUDA, float64 runs the reference inside the CUDA implementation; the fp32
# test below then exercises the Triton kernels behind the same registration.


def _op_out(q, k, v, bias=None, causal=False, scale=0.5):
    return torch.ops.kernels.attention_fwd(q, k, v, bias, causal, scale)[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("Hq,Hkv,Tq,Tk,causal,with_bias", [
    (4, 2, 5, 6, True, True),  # grouped-query, Tq < Tk, bias
    (2, 2, 1, 7, True, False),  # decoding: one query
    (2, 1, 6, 4, True, False),  # Tq > Tk: rows without keys (zero output, zero gradient)
    (2, 2, 5, 5, False, True),
])
def test_gradcheck_through_the_registered_op(device, Hq, Hkv, Tq, Tk, causal, with_bias):
    q, k, v = [t.to(device, torch.float64).requires_grad_() for t in _inputs(1, Hq, Hkv, Tq, Tk, 3)]
    args = [q, k, v]
    if with_bias:
        args.append(torch.randn(1, Hq, Tq, Tk, dtype=torch.float64, device=device, requires_grad=True))
    fn = lambda q, k, v, b=None: _op_out(q, k, v, b, causal)  # noqa: E731
    assert torch.autograd.gradcheck(fn, args)


def _cuda(*values):
    return pytest.param(*values, marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))


@pytest.mark.parametrize("device,dtype", [("cpu", torch.float32), _cuda("cuda", torch.float32),
                                          _cuda("cuda", torch.float16), _cuda("cuda", torch.bfloat16)])
def test_registered_op_values_and_grads_match_the_reference(device, dtype):
    # CPU: the registered CPU kernel and backward; CUDA: the Triton kernels (TF32 for fp32)
    q, k, v = [t.requires_grad_() for t in _inputs(2, 4, 2, 70, 90, 32, dtype, device)]
    bias = torch.randn(1, 4, 70, 90, device=device, requires_grad=True)
    out = _op_out(q, k, v, bias, True, 0.2)
    leaves = [t.detach().requires_grad_() for t in (q, k, v, bias)]
    ref = kernels.attention_reference(*leaves[:3], causal=True, bias=leaves[3], scale=0.2)
    torch.testing.assert_close(out.float(), ref.float(), **OP_TOL[dtype])
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v, bias), do)
    grads_ref = torch.autograd.grad(ref, leaves, do)
    for name, a, b in zip(["dq", "dk", "dv", "dbias"], grads, grads_ref):
        torch.testing.assert_close(a.float(), b.float(), **OP_GRAD_TOL[dtype], msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("Tq,Tk,with_bias", [(9, 11, False), (9, 11, True), (1, 13, False)])
def test_opcheck_on_device(device, Tq, Tk, with_bias):
    q, k, v = [t.to(device).requires_grad_() for t in _inputs(2, 4, 2, Tq, Tk, 16)]
    bias = torch.randn(2, 1, Tq, Tk, device=device, requires_grad=True) if with_bias else None
    torch.library.opcheck(torch.ops.kernels.attention_fwd.default, (q, k, v, bias, True, 0.5))
    q, k, v = q.detach(), k.detach(), v.detach()
    bias = None if bias is None else bias.detach()
    out, lse = torch.ops.kernels.attention_fwd(q, k, v, bias, True, 0.5)
    args = (torch.randn_like(out), q, k, v, bias, out, lse, True, 0.5, with_bias)
    torch.library.opcheck(torch.ops.kernels.attention_bwd.default, args)


def test_configs_fit_shared_memory():
    # what the CUDA path may launch: every candidate fits the budget it is given, the
    # 128 x 64 x 3-stage fp32 tile at D = 128 (256 KiB) does not survive, none is empty
    for D in (16, 64, 128, 256):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for phase in ("fwd", "bwd"):
                for limit in (99 * 1024, 227 * 1024):
                    cfgs = attention_configs(D, dtype, phase, smem_limit=limit)
                    assert cfgs
                    if D <= 128:
                        assert all(smem_bytes(c, D, dtype, phase) <= limit for c in cfgs)
    assert smem_bytes(BlockConfig(128, 64, 4, 3), 128, torch.float32, "fwd") == 256 * 1024
    assert BlockConfig(128, 64, 4, 3) not in attention_configs(128, torch.float32, "fwd", smem_limit=227 * 1024)
    assert BlockConfig(128, 64, 4, 3) in attention_configs(128, torch.bfloat16, "fwd", smem_limit=227 * 1024)


@needs_triton
def test_untuned_choice_skips_a_configuration_that_does_not_compile(monkeypatch):
    # KERNELS_AUTOTUNE=0 takes the first candidate that compiles: on an H200 the fp32, D = 128 forward
    # with a bias overflowed shared memory at a candidate the operand-tile estimate let through
    from triton.runtime.errors import OutOfResources

    attention_module = sys.modules["kernels.attention"]  # the package's `attention` is the function
    monkeypatch.setenv("KERNELS_AUTOTUNE", "0")
    monkeypatch.setattr(attention_module, "_TUNED", {})
    configs = [BlockConfig(128, 64, 8, 3), BlockConfig(128, 32, 4, 3), BlockConfig(64, 64, 4, 2)]
    launched = []

    def launch(cfg):
        launched.append(cfg)
        if cfg.block_m == 128:
            raise OutOfResources(262144, 232448, "shared memory")

    assert attention_module._choose("key", configs, launch) == configs[2]
    assert launched == configs
    assert attention_module._choose("key", configs, launch) == configs[2]  # cached: no launch
    assert len(launched) == 3
    with pytest.raises(OutOfResources):
        attention_module._choose("other", configs[:2], launch)


# ---------------------------------------------------------------------------- Triton


TRITON_CASES = [  # small: the interpreter runs every program in Python
    (1, 2, 1, 37, 37, 24, True, None),  # grouped-query, D not a power of two, ragged tails
    (2, 2, 2, 20, 45, 16, True, "float"),  # Tq < Tk
    (1, 4, 2, 33, 19, 8, False, "float"),
    (1, 1, 1, 40, 30, 16, True, None),  # Tq > Tk: rows without keys
]


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("B,Hq,Hkv,Tq,Tk,D,causal,bias_kind", TRITON_CASES)
def test_triton_matches_reference(B, Hq, Hkv, Tq, Tk, D, causal, bias_kind, dtype):
    q, k, v = _inputs(B, Hq, Hkv, Tq, Tk, D, dtype, TRITON_DEVICE)
    bias = _bias(bias_kind, B, Hq, Tq, Tk)
    if bias is not None:
        bias = bias.to(TRITON_DEVICE)
        bias[..., 0, :] = float("-inf")  # a row masked out by the bias alone
    out, lse = _triton_attention_fwd(q, k, v, bias, causal, 0.3, config=tile_config(16, 16), precision="ieee")
    out_ref, lse_ref = _attention_fwd_reference(q, k, v, bias, causal, 0.3)
    torch.testing.assert_close(out.float(), out_ref.float(), **TOL[dtype])
    assert torch.equal(torch.isinf(lse), torch.isinf(lse_ref))
    torch.testing.assert_close(lse.nan_to_num(0, 0, 0), lse_ref.float().nan_to_num(0, 0, 0), **TOL[dtype])
    do = torch.randn_like(out)
    need_dbias = bias is not None
    grads = _triton_attention_bwd(do, q, k, v, bias, out, lse, causal, 0.3, need_dbias, config=tile_config(16, 16), precision="ieee")
    grads_ref = _attention_bwd_reference(do, q, k, v, bias, out_ref, lse_ref, causal, 0.3, need_dbias)
    for name, a, b in zip(["dq", "dk", "dv", "dbias"], grads, grads_ref):
        torch.testing.assert_close(a.float(), b.float(), **GRAD_TOL[dtype], msg=lambda m: f"{name}: {m}")


@needs_triton
def test_triton_uniform_scores():
    q, k, v = _inputs(1, 1, 1, 21, 21, 16, device=TRITON_DEVICE)
    out, _ = _triton_attention_fwd(torch.zeros_like(q), k, v, None, True, 1.0, config=tile_config(16, 16), precision="ieee")
    torch.testing.assert_close(out, v.cumsum(2) / torch.arange(1, 22, device=TRITON_DEVICE).view(1, 1, 21, 1))


# The tile sizes the CUDA path launches, run in the interpreter (warps and stages do not
# exist there; the tiles, masks and loop bounds are what these tests check).
def _tiles(configs):
    return sorted({(c.block_m, c.block_n) for c in configs})


GPU_FWD_TILES = _tiles(FWD_CONFIGS)
GPU_BWD_TILES = _tiles(BWD_CONFIGS)


def _check_triton(q, k, v, bias, causal, scale, fwd_tiles, bwd_tiles, dtype):
    out_ref, lse_ref = _attention_fwd_reference(q, k, v, bias, causal, scale)
    # and the reference against SDPA where SDPA's conventions are ours (every row sees a key)
    if bias is None and not causal:
        sdpa = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=scale, enable_gqa=True)
        torch.testing.assert_close(out_ref.float(), sdpa, **TOL[dtype])
    for bm, bn in fwd_tiles:
        out, lse = _triton_attention_fwd(q, k, v, bias, causal, scale, config=tile_config(bm, bn),
                                         precision="ieee")
        torch.testing.assert_close(out.float(), out_ref.float(), **TOL[dtype], msg=lambda m: f"fwd {bm}x{bn}: {m}")
    do = torch.randn_like(out_ref)
    need_dbias = bias is not None
    grads_ref = _attention_bwd_reference(do, q, k, v, bias, out_ref, lse_ref, causal, scale, need_dbias)
    for bm, bn in bwd_tiles:
        grads = _triton_attention_bwd(do, q, k, v, bias, out_ref, lse_ref.float(), causal, scale, need_dbias,
                                      config=tile_config(bm, bn), precision="ieee")
        for name, a, b in zip(["dq", "dk", "dv", "dbias"], grads, grads_ref):
            torch.testing.assert_close(a.float(), b.float(), **GRAD_TOL[dtype],
                                       msg=lambda m: f"{name} {bm}x{bn}: {m}")


@needs_triton
@pytest.mark.parametrize("Hq,Hkv,Tq,Tk,D,causal,bias_kind,dtype", [
    (2, 1, 140, 140, 64, True, "float", torch.float16),  # grouped-query, ragged last tiles of 128 / 64
    (2, 1, 70, 190, 128, True, None, torch.float32),  # Tq != Tk, D = 128
    (2, 2, 150, 90, 64, False, "bool", torch.float32),  # Tq > Tk, padding mask
])
def test_triton_at_the_gpu_tiles(Hq, Hkv, Tq, Tk, D, causal, bias_kind, dtype):
    q, k, v = _inputs(1, Hq, Hkv, Tq, Tk, D, dtype, TRITON_DEVICE)
    bias = _bias(bias_kind, 1, Hq, Tq, Tk)
    bias = _bias_to_float(bias.to(TRITON_DEVICE), q) if bias is not None else None
    if bias is not None:
        bias = bias.float()
    _check_triton(q, k, v, bias, causal, D ** -0.5, GPU_FWD_TILES, GPU_BWD_TILES, dtype)


@needs_triton
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("Hq,Hkv,D", [(4, 1, 64), (2, 1, 128)])
def test_triton_decode(Hq, Hkv, D, causal):
    # one query against a cache of 200 keys (Tq = 1, Tq != Tk), at the decode tiles
    q, k, v = _inputs(1, Hq, Hkv, 1, 200, D, torch.float16, TRITON_DEVICE)
    _check_triton(q, k, v, None, causal, D ** -0.5, _tiles(DECODE_FWD_CONFIGS), _tiles(DECODE_BWD_CONFIGS),
                  torch.float16)


@needs_triton
@pytest.mark.parametrize("D", [256])
def test_triton_large_head_dim(D):
    # D = 256 at the tiles that fit an H200's 227 KiB (the others are pruned); grouped, bias
    q, k, v = _inputs(1, 2, 1, 80, 96, D, torch.float16, TRITON_DEVICE)
    bias = torch.randn(1, 2, 80, 96, device=TRITON_DEVICE)
    fwd = _tiles(attention_configs(D, torch.float16, "fwd", smem_limit=227 * 1024))
    bwd = _tiles(attention_configs(D, torch.float16, "bwd", smem_limit=227 * 1024))
    _check_triton(q, k, v, bias, True, D ** -0.5, fwd, bwd, torch.float16)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_attention_autograd(dtype):
    q, k, v = [t.requires_grad_() for t in _inputs(2, 8, 2, 300, 300, 64, dtype, "cuda")]
    bias = torch.randn(1, 8, 300, 300, device="cuda", requires_grad=True)
    out = kernels.attention(q, k, v, causal=True, bias=bias)
    ref = kernels.attention_reference(*(t.detach().requires_grad_() for t in (q, k, v)), causal=True, bias=bias)
    torch.testing.assert_close(out.float(), ref.float(), **TOL[dtype])
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v, bias))


@needs_gpu
def test_gpu_force_reference(monkeypatch):
    q, k, v = _inputs(1, 2, 2, 64, 64, 32, torch.float16, "cuda")
    monkeypatch.setenv("KERNELS_FORCE_REFERENCE", "1")
    torch.testing.assert_close(kernels.attention(q, k, v, causal=True),
                               kernels.attention_reference(q, k, v, causal=True), atol=0, rtol=0)


# ---------------------------------------------------------------------------- launch choice (issue 54, item 6)


# (phase, D, tiles, warps, stages) -> spilled, as `python -m kernels.compile_report` measured on sm_90 (bf16,
# Triton 3.7.1, ptxas of CUDA 12.8): registers / spill stores in the comments. The estimate must put
# every spilling configuration over the budget and the clean ones under it.
MEASURED_SPILLS = [
    ("fwd", 128, 128, 64, 4, 3, True),  # 255 / 264 B (the review: 255 and a 1048 B stack)
    ("fwd", 128, 128, 32, 4, 3, True),  # 255 / 4 B
    ("fwd", 128, 128, 64, 8, 3, False),  # 183 / 0
    ("fwd", 128, 64, 64, 4, 3, False),  # 187 / 0
    ("fwd", 64, 128, 64, 4, 3, False),  # 228 / 0
    ("bwd", 128, 64, 64, 4, 2, True),  # dK/dV kernel 255 / 16 B
    ("bwd", 128, 64, 64, 8, 2, False),  # 233 / 0
    ("bwd", 128, 64, 32, 4, 2, False),  # 182 / 0
    ("bwd", 64, 64, 64, 4, 2, False),  # 213 / 0
]


@pytest.mark.parametrize("phase,D,bm,bn,warps,stages,spilled", MEASURED_SPILLS)
def test_register_estimate_separates_the_measured_spills(phase, D, bm, bn, warps, stages, spilled):
    est = register_estimate(BlockConfig(bm, bn, warps, stages), D, torch.bfloat16, phase)
    assert (est > REGISTER_BUDGET) == spilled, est


def test_first_candidates_do_not_spill():
    # what KERNELS_AUTOTUNE=0 launches at D = 128, bf16 on an H200: the 8-warp tiles
    assert attention_configs(128, torch.bfloat16, "fwd", smem_limit=227 * 1024)[0] == BlockConfig(128, 64, 8, 3)
    assert attention_configs(128, torch.bfloat16, "bwd", smem_limit=227 * 1024)[0] == BlockConfig(64, 64, 8, 2)
    for D in (16, 64, 128, 256):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for phase in ("fwd", "bwd"):
                cfgs = attention_configs(D, dtype, phase, smem_limit=227 * 1024)
                within = [register_estimate(c, D, dtype, phase) <= REGISTER_BUDGET for c in cfgs]
                assert within == sorted(within, reverse=True)  # none within the budget after one over it
                assert set(cfgs) <= set(FWD_CONFIGS if phase == "fwd" else BWD_CONFIGS)  # reordered, not dropped


def test_tune_key_buckets_the_lengths():
    def key(Tq, Tk, phase="fwd"):
        return tune_key(phase, torch.empty(1, 2, Tq, 64, device="meta"), Tk, True, False, "tf32")

    assert key(1000, 1000) == key(1024, 1024) != key(1025, 1024) != key(1024, 1025)
    assert key(1, 4096) == key(16, 4096) != key(17, 4096)  # decoding: one query bucket
    assert key(2048, 2048) != key(2048, 2048, "bwd")
    assert len({key(t, t) for t in range(17, 4097)}) == 8  # 32 .. 4096: one entry per power of two
