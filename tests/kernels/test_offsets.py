"""int64 element offsets at long contexts (issue 54, item 5).

A row index times its row stride passes 2**31 at 128k tokens: a split-qkv view of a fused
(B, T, 3, H, Dh) projection has a row stride of 3 * C (24576 at C = 8192), and the bias
gradient's dense buffer has a row stride of Tk. The kernels take these offsets from
``kernels._dispatch.tile_offsets`` / ``offsets_1d``. Here those helpers run in the Triton
interpreter at such shapes (the strides come from meta tensors: nothing of that size is
allocated) and are compared with exact Python integers; a plain int32 product, as the kernels
had it before, wraps (checked, so that the comparison can fail); and no kernel of the package
may multiply a row index by a stride outside the helpers (an AST scan of their source).
"""

import ast
import importlib
import inspect
import warnings

import pytest
import torch
from kernels_testing import TRITON_DEVICE, needs_triton

import kernels._dispatch as dispatch
from kernels._dispatch import offsets_1d, tile_offsets, tl, triton

T_LONG = 131072  # 128k tokens
C_LONG = 8192  # model width (e.g. 64 heads x 128)
INT32_MAX = 2**31 - 1


def _split_qkv_query(T, C, H):
    """q of a fused projection (B, T, 3, H, C // H) -> (B, H, T, Dh) view, on the meta device."""
    qkv = torch.empty(1, T, 3, H, C // H, device="meta")
    return qkv[:, :, 0].transpose(1, 2)


if dispatch.HAS_TRITON:

    @triton.jit
    def _probe_tile(Out, row0, stride_r, stride_c, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
        offs_r = row0 + tl.arange(0, BLOCK_R)
        offs_c = tl.arange(0, BLOCK_C)
        tl.store(Out + tl.arange(0, BLOCK_R)[:, None] * BLOCK_C + offs_c[None, :],
                 tile_offsets(offs_r, stride_r, offs_c, stride_c))

    @triton.jit
    def _probe_1d(Out, row0, stride, BLOCK_R: tl.constexpr):
        offs = tl.arange(0, BLOCK_R)
        tl.store(Out + offs, offsets_1d(row0 + offs, stride))

    @triton.jit
    def _probe_int32_product(Out, row0, stride, BLOCK_R: tl.constexpr):
        # the pre-fix pattern: int32 index times int32 stride
        offs = tl.arange(0, BLOCK_R)
        tl.store(Out + offs, ((row0 + offs) * stride).to(tl.int64))


def _run_tile(row0, stride_r, stride_c, block_r=16, block_c=16):
    out = torch.empty(block_r, block_c, dtype=torch.int64, device=TRITON_DEVICE)
    _probe_tile[(1,)](out, row0, stride_r, stride_c, BLOCK_R=block_r, BLOCK_C=block_c)
    return out.cpu().tolist()


def _exact_tile(row0, stride_r, stride_c, block_r=16, block_c=16):
    return [[(row0 + r) * stride_r + c * stride_c for c in range(block_c)] for r in range(block_r)]


@needs_triton
def test_row_offsets_of_a_split_qkv_view_at_128k_tokens():
    q = _split_qkv_query(T_LONG, C_LONG, H=64)
    _, _, stride_qm, stride_qd = q.stride()
    assert stride_qm == 3 * C_LONG
    row0 = T_LONG - 16  # the last query tile
    exact = _exact_tile(row0, stride_qm, stride_qd)
    assert exact[-1][-1] > INT32_MAX  # the shape does overflow int32
    assert _run_tile(row0, stride_qm, stride_qd) == exact
    # the transposed key tile of the forward (rows = head dim, columns = keys)
    offs = torch.empty(16, 16, dtype=torch.int64, device=TRITON_DEVICE)
    _probe_tile[(1,)](offs, 0, stride_qd, stride_qm, BLOCK_R=16, BLOCK_C=16)  # keys 0..15: small
    assert offs.cpu().tolist() == _exact_tile(0, stride_qd, stride_qm)


@needs_triton
def test_bias_gradient_offsets_at_128k_tokens():
    # _attn_bwd_dq writes dS into a dense (B, Hq, Tq, Tk) fp32 buffer at m * Tk + n
    Tq = Tk = T_LONG
    row0, col0 = Tq - 16, Tk - 16
    out = torch.empty(16, 16, dtype=torch.int64, device=TRITON_DEVICE)
    _probe_tile[(1,)](out, row0, Tk, 1, BLOCK_R=16, BLOCK_C=16)
    exact = _exact_tile(row0, Tk, 1)
    assert exact[-1][-1] > INT32_MAX
    assert out.cpu().tolist() == exact
    # and the additive bias read through a broadcast (1, Hq, Tq, Tk) view: stride_bm = Tk
    bias = torch.empty(1, 1, Tq, Tk, device="meta").expand(2, 8, Tq, Tk)
    assert _run_tile(row0, bias.stride(2), bias.stride(3)) == exact
    assert col0 + 15 == Tk - 1


@needs_triton
def test_1d_offsets_and_that_an_int32_product_would_wrap():
    row0, stride = T_LONG - 16, 3 * C_LONG
    exact = [(row0 + r) * stride for r in range(16)]
    out = torch.empty(16, dtype=torch.int64, device=TRITON_DEVICE)
    _probe_1d[(1,)](out, row0, stride, BLOCK_R=16)
    assert out.cpu().tolist() == exact
    # the old pattern gives wrapped values in the interpreter, as it would on the GPU (numpy may
    # warn about the overflow; the values are what count)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _probe_int32_product[(1,)](out, row0, stride, BLOCK_R=16)
    wrapped = out.cpu().tolist()
    assert wrapped != exact
    assert wrapped == [((x + 2**31) % 2**32) - 2**31 for x in exact]


# ---------------------------------------------------------------------- the kernels use them

# Column-like indices: head dim, value width, heads, features (all < 2**16 times a small stride).
_COLUMN_INDICES = {"offs_d", "offs_c", "offs_h", "offs_f"}


def _kernels():
    for mod_name in ("kernels.attention", "kernels.hip", "kernels.graph"):
        mod = importlib.import_module(mod_name)
        for name, obj in vars(mod).items():
            fn = getattr(obj, "fn", None)  # a @triton.jit function wraps the Python function in .fn
            if fn is not None and getattr(fn, "__module__", None) == mod_name:
                yield mod_name, name, inspect.getsource(fn)


def _names(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _is_int64_cast(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"
            and bool(node.args) and "int64" in ast.unparse(node.args[0]))


def _row_stride_products(source):
    """Products of a row-like index (an `offs_*` other than a column index) with a stride or a
    sequence length, not cast to int64 first: the pattern that wraps at 2**31."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for a, b in ((node.left, node.right), (node.right, node.left)):
                scale = any(n.startswith("stride_") or n in ("Tk", "Tq") for n in _names(b))
                rows = {n for n in _names(a) if n.startswith("offs_")} - _COLUMN_INDICES
                if scale and rows and not _is_int64_cast(a):
                    bad.append(ast.unparse(node))
    return bad


def test_no_kernel_multiplies_a_row_index_by_a_stride_itself():
    found = list(_kernels())
    names = {name for _, name, _ in found}
    assert {"_attn_fwd_inner", "_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq", "_hip_select_fwd", "_bsa_fwd",
            "_graph_attn_fwd", "_graph_attn_bwd_dst", "_graph_attn_bwd_src", "_segment_sum_fwd"} <= names
    offenders = {f"{mod}.{name}": bad for mod, name, src in found if (bad := _row_stride_products(src))}
    assert not offenders, offenders
    # the attention and HiP kernels take their tile offsets from the helper
    for mod, name, src in found:
        if name in ("_attn_fwd_inner", "_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq", "_hip_select_fwd", "_bsa_fwd"):
            assert "tile_offsets(" in src, f"{mod}.{name}"


def test_the_scan_catches_the_old_pattern():
    old = "def k():\n    kT = tl.load(K + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd)\n"
    assert _row_stride_products(old) == ["offs_n[None, :] * stride_kn"]
    old_ds = "def k():\n    tl.store(DS + off_bh * Tq * Tk + offs_m[:, None] * Tk + offs_n[None, :], ds)\n"
    assert _row_stride_products(old_ds) == ["offs_m[:, None] * Tk"]
    fixed = "def k():\n    x = offs_m[:, None].to(tl.int64) * stride_om + offs_d[None, :] * stride_od\n"
    assert _row_stride_products(fixed) == []


def test_graph_kernels_refuse_int32_indices():
    # the graph kernels' row offsets are int64 because their index tensors are: enforced
    from kernels.graph import _check_int64

    _check_int64(col=torch.zeros(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="col"):
        _check_int64(col=torch.zeros(3, dtype=torch.int32))
