"""kernels: the attention and message-passing ops the papers' models call.

Every op is a ``torch.library.custom_op``: on CUDA it launches a Triton kernel, on any
other device (and everywhere when ``KERNELS_FORCE_REFERENCE=1``) it runs the plain-torch
reference, which materialises everything, takes its softmax in fp32 and is the spec. A
model therefore runs unchanged on CPU and GPU, under ``torch.compile`` (fake
implementations are registered) and through autograd.

Ops (see each docstring for the equation, arguments and shapes):

* :func:`attention` -- FlashAttention-2-style fused attention, forward and backward,
  grouped-query heads, causal (bottom-right), additive / boolean bias, fp32/fp16/bf16.
* :func:`hip_attention` = :func:`hip_select` + :func:`block_sparse_attention` -- HiP
  (ICLR 2025, arXiv:2406.09827): hierarchical key-block selection in ``O(T log T)``
  scores, then block-sparse attention. Forward only, as in the paper.
* :func:`graph_attention` (dot-product scores) and :func:`gat_attention` (GAT scores) --
  softmax over each node's incoming edges and weighted aggregation, multi-head, with a
  deterministic backward (CSR + CSC passes, no float atomics); :func:`segment_sum`, the
  plain message-passing aggregation.

``kernels.bench`` benchmarks them: ``python -m kernels.bench --help``.
"""

from ._dispatch import FORCE_REFERENCE_ENV, HAS_TRITON
from .attention import attention, attention_reference
from .graph import (
    GraphLayout,
    gat_attention,
    gat_attention_reference,
    graph_attention,
    graph_attention_reference,
    graph_layout,
    segment_sum,
    segment_sum_reference,
)
from .hip import (
    block_sparse_attention,
    block_sparse_attention_reference,
    hip_attention,
    hip_select,
    hip_select_reference,
    oracle_select,
)

__all__ = [
    "attention",
    "attention_reference",
    "hip_attention",
    "hip_select",
    "block_sparse_attention",
    "hip_select_reference",
    "block_sparse_attention_reference",
    "oracle_select",
    "graph_attention",
    "gat_attention",
    "segment_sum",
    "graph_layout",
    "GraphLayout",
    "graph_attention_reference",
    "gat_attention_reference",
    "segment_sum_reference",
    "FORCE_REFERENCE_ENV",
    "HAS_TRITON",
]
