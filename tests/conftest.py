# Triton decides between compiling and interpreting a kernel when `@triton.jit` runs, i.e.
# when `kernels` is first imported, wherever that happens in this pytest process. Without a
# GPU we want the CPU interpreter, so the variable is set here, before any test module (or
# a paper that imports `kernels`) is collected. With a GPU the kernels compile for real.
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
