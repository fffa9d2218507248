"""Shared plumbing: the reference switch, the optional Triton import, small helpers.

Every op in this package is a ``torch.library.custom_op`` whose default (CPU, or any
device) implementation is the plain-torch reference and whose CUDA implementation
launches a Triton kernel. :func:`use_triton` is the single place that decides.

Set ``KERNELS_FORCE_REFERENCE=1`` to run the reference everywhere (also on CUDA),
e.g. to bisect a numerical difference. The variable is read at every call.

Triton is optional: without it (or without a GPU) the package imports and runs the
references. ``TRITON_INTERPRET=1`` must be set *before* ``import kernels`` for the
Triton launchers to accept CPU tensors (the interpreter; used by the tests).
"""

from __future__ import annotations

import os
import types

import torch

FORCE_REFERENCE_ENV = "KERNELS_FORCE_REFERENCE"

try:  # Triton is imported once, here; the kernel modules take `triton`, `tl` from us.
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    HAS_TRITON = False
    # Just enough of a stand-in for the `@triton.jit` definitions and their
    # `tl.constexpr` annotations to be evaluated; nothing here can launch.
    triton = types.SimpleNamespace(jit=lambda fn=None, **_: fn, next_power_of_2=None, cdiv=None)
    tl = types.SimpleNamespace(constexpr=object)

LOG2E = 1.4426950408889634  # 1 / ln(2): exp(x) == exp2(x * LOG2E)
LN2 = 0.6931471805599453


def force_reference() -> bool:
    """True when ``KERNELS_FORCE_REFERENCE`` is set to anything but '', '0' or 'false'."""
    return os.environ.get(FORCE_REFERENCE_ENV, "").strip().lower() not in ("", "0", "false")


# Triton reads TRITON_INTERPRET when a kernel is decorated, i.e. when the kernel modules
# are imported right after this one: what counts is the value at import time.
_INTERPRET = HAS_TRITON and os.environ.get("TRITON_INTERPRET", "0").strip().lower() not in ("", "0", "false")


def interpreting() -> bool:
    """True when the Triton kernels were defined under ``TRITON_INTERPRET=1`` (CPU interpreter)."""
    return _INTERPRET


def use_triton(*tensors: torch.Tensor) -> bool:
    """Whether the CUDA implementation of an op should launch its Triton kernel."""
    return (
        HAS_TRITON
        and not force_reference()
        and all(t.is_cuda for t in tensors)
        and all(t.dtype in (torch.float16, torch.bfloat16, torch.float32) for t in tensors if t.is_floating_point())
    )


def eager_cpu(*tensors) -> bool:
    """Whether an op may skip its ``custom_op`` wrapper and run the reference directly: eager mode
    (not tracing under ``torch.compile``) and no CUDA tensor. The reference is plain differentiable
    torch, so autograd needs no registration there, and the wrapper's first call in a process
    imports ``torch._dynamo`` (seconds of CPU per job in the workflow)."""
    return not torch.compiler.is_compiling() and not any(t.is_cuda for t in tensors if t is not None)


def check_launchable(*tensors: torch.Tensor) -> None:
    """Raise a helpful error before a Triton launch that could not work."""
    if not HAS_TRITON:
        raise RuntimeError("kernels: triton is not installed; use the reference functions")
    if any(not t.is_cuda for t in tensors) and not interpreting():
        raise RuntimeError(
            "kernels: Triton kernels need CUDA tensors, or TRITON_INTERPRET=1 set before `import kernels` "
            "(the CPU interpreter)"
        )


# Element offsets in int64. A row index times its row stride passes 2**31 at long contexts:
# 131072 tokens of a split-qkv view (row stride 3 * C = 24576 at C = 8192), or the bias
# gradient's row offset ``m * Tk`` once ``Tq * Tk > 2**31`` (T > 46341). Triton computes
# ``tl.arange`` indices and int32 strides in int32, which wraps silently; every kernel takes
# its row offsets from these helpers (tests/kernels/test_offsets.py runs them in the
# interpreter at such shapes and checks that no kernel multiplies a row index by a stride itself).


@triton.jit
def offsets_1d(idx, stride):
    """``idx * stride`` in int64, for a vector (or scalar) of row indices."""
    return idx.to(tl.int64) * stride


@triton.jit
def tile_offsets(rows, stride_r, cols, stride_c):
    """``rows[:, None] * stride_r + cols[None, :] * stride_c`` in int64: the element offsets of a
    ``(len(rows), len(cols))`` tile."""
    return rows[:, None].to(tl.int64) * stride_r + cols[None, :].to(tl.int64) * stride_c


def next_pow2(n: int, minimum: int = 1) -> int:
    """Smallest power of two >= max(n, minimum) (Triton block sizes must be powers of two)."""
    p = 1
    while p < max(n, minimum):
        p *= 2
    return p


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
