"""kernels.attention: reference against SDPA, autograd, opcheck, Triton against the reference."""

import pytest
import torch
import torch.nn.functional as F
from kernels_testing import GRAD_TOL, TOL, TRITON_DEVICE, needs_gpu, needs_triton
from torch.nn.attention.bias import causal_lower_right

import kernels
from kernels.attention import (
    _attention_bwd_reference,
    _attention_fwd_reference,
    _triton_attention_bwd,
    _triton_attention_fwd,
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


@pytest.mark.parametrize("with_bias", [False, True])
def test_opcheck(with_bias):
    q, k, v = [t.requires_grad_() for t in _inputs(1, 4, 2, 9, 11, 8)]
    bias = torch.randn(2, 1, 9, 11, requires_grad=True) if with_bias else None
    if with_bias:
        q, k, v = [t.detach().expand(2, -1, -1, -1).contiguous().requires_grad_() for t in (q, k, v)]
    torch.library.opcheck(torch.ops.kernels.attention_fwd.default, (q, k, v, bias, True, 0.5))
    # the backward op has no autograd of its own (no double backward): plain inputs
    q, k, v = q.detach(), k.detach(), v.detach()
    bias = None if bias is None else bias.detach()
    out, lse = _attention_fwd_reference(q, k, v, bias, True, 0.5)
    args = (torch.randn_like(out), q, k, v, bias, out, lse, True, 0.5, with_bias)
    torch.library.opcheck(torch.ops.kernels.attention_bwd.default, args)


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
    out, lse = _triton_attention_fwd(q, k, v, bias, causal, 0.3, block_m=16, block_n=16)
    out_ref, lse_ref = _attention_fwd_reference(q, k, v, bias, causal, 0.3)
    torch.testing.assert_close(out.float(), out_ref.float(), **TOL[dtype])
    assert torch.equal(torch.isinf(lse), torch.isinf(lse_ref))
    torch.testing.assert_close(lse.nan_to_num(0, 0, 0), lse_ref.float().nan_to_num(0, 0, 0), **TOL[dtype])
    do = torch.randn_like(out)
    need_dbias = bias is not None
    grads = _triton_attention_bwd(do, q, k, v, bias, out, lse, causal, 0.3, need_dbias, block_m=16, block_n=16)
    grads_ref = _attention_bwd_reference(do, q, k, v, bias, out_ref, lse_ref, causal, 0.3, need_dbias)
    for name, a, b in zip(["dq", "dk", "dv", "dbias"], grads, grads_ref):
        torch.testing.assert_close(a.float(), b.float(), **GRAD_TOL[dtype], msg=lambda m: f"{name}: {m}")


@needs_triton
def test_triton_uniform_scores():
    q, k, v = _inputs(1, 1, 1, 21, 21, 16, device=TRITON_DEVICE)
    out, _ = _triton_attention_fwd(torch.zeros_like(q), k, v, None, True, 1.0, block_m=16, block_n=16)
    torch.testing.assert_close(out, v.cumsum(2) / torch.arange(1, 22, device=TRITON_DEVICE).view(1, 1, 21, 1))


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
