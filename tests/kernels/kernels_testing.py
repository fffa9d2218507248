"""Shared settings of the kernel tests (a plain module: `from kernels_testing import ...`).

Triton launchers are tested on CUDA tensors where a GPU exists, else on CPU tensors under
the Triton interpreter (TRITON_INTERPRET=1, set in tests/conftest.py before `kernels` is
imported). The interpreter is slow: shapes stay small, blocks hold 16 rows.
"""

import pytest
import torch

import kernels._dispatch as dispatch
from kernels.attention import BlockConfig

ON_GPU = torch.cuda.is_available()
TRITON_DEVICE = "cuda" if ON_GPU else "cpu"
CAN_RUN_TRITON = dispatch.HAS_TRITON and (ON_GPU or dispatch.interpreting())

# fp32: the kernels multiply exactly ("ieee") and sum in another order than torch.
# fp16: the kernels round the probabilities (and dS) to fp16 before the tensor-core
#       products, as FlashAttention does; the reference keeps them in fp32 -> ~1e-3.
# bf16: 8 mantissa bits instead of 11 -> 8x the fp16 tolerance (GPU only: the
#       interpreter computes tl.dot on bf16 wrongly).
TOL = {
    torch.float32: dict(atol=2e-5, rtol=2e-5),
    torch.float16: dict(atol=3e-3, rtol=3e-3),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
}
# gradients accumulate over a sequence / a neighbourhood: a looser fp16 bound
GRAD_TOL = {
    torch.float32: dict(atol=5e-5, rtol=5e-5),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=8e-2, rtol=8e-2),
}

needs_triton = pytest.mark.skipif(not CAN_RUN_TRITON, reason="needs a GPU or TRITON_INTERPRET=1 at import")
needs_gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")

# Op-level tests run on every device: CPU always, CUDA where it exists. On a machine without
# one the CUDA variant is reported as skipped ("needs CUDA": the environment, not a missing
# feature), never passed silently.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not ON_GPU, reason="needs CUDA"))]

# Through the registered ops on CUDA, fp32 products are TF32 (10-bit mantissa, as torch's
# allow_tf32): the fp16 bound applies. The CPU path is the reference itself.
OP_TOL = {**TOL, torch.float32: dict(atol=3e-3, rtol=3e-3)}
OP_GRAD_TOL = {**GRAD_TOL, torch.float32: dict(atol=1e-2, rtol=1e-2)}

# Warps of the tests' explicit tile configurations. The interpreter has no warps (1); compiled on a
# GPU they get 4, as every launch of the package does: a 1-warp variant at D = 256 took about
# 110 CPU-s to compile (issue 54's review), which a cold-cache `scripts/gpu-check.sh` paid per variant.
TEST_WARPS = 1 if dispatch.interpreting() or not ON_GPU else 4


def tile_config(block_m: int, block_n: int) -> BlockConfig:
    """A launch configuration with these tiles, one pipeline stage, TEST_WARPS warps."""
    return BlockConfig(block_m, block_n, TEST_WARPS, 1)
