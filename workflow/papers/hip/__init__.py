"""P16 hip: HiP Attention: sparse sub-quadratic attention with hierarchical attention pruning
(Lee et al., ICLR 2025; arXiv 2406.09827). Official code: DeepAuto-AI/hip-attention (FSL licence:
read, not copied).

HiP is training-free: it replaces the dense attention of a model trained with dense attention by
a per-query-block choice of key blocks, found with a tree search of ``O(T log T)`` cost that
relies on attention locality (neighbouring keys score alike), then attends block-sparsely. The
kernels are in the ``kernels`` package (``hip_select``, ``block_sparse_attention``,
``oracle_select``); this folder is the experiment.

Reproduced, on tiny byte-level models (3 seeds) trained here on the King James Bible with key
records written over it (each key repeated later, so its value needs far context by construction of
the data): the share of the answer loss that needs far context; retrieval (passkey and multi-key,
needle depth varied) of dense attention, HiP, the oracle top-k blocks, random blocks and a sink +
window (StreamingLLM) at equal key budgets, the first layer dense as in the paper; HiP's top-k
recall against random blocks per layer, against shuffled keys (locality as the tree search uses
it); the measured cost of HiP (the reference search's own counter, wall time) and of dense
attention against T (2k-32k), against a budget growing with T; and a simulated KV-cache
offloading during decoding (working set and hit rate against T), against random blocks.

Deviations: no pretrained LLM ships offline, so the models are tiny and evaluated at their
trained context (1k bytes instead of 32k-1M tokens); HiP's block sizes and budgets are scaled
down accordingly; training uses torch's fused CPU attention (the same function as
``kernels.attention``). See the report.

Modules: :mod:`.model` (the GPT), :mod:`.methods` (HiP and the baselines, recall),
:mod:`.data` (KJV bytes, key records, retrieval prompts), :mod:`.train`, :mod:`.evaluate`,
:mod:`.offload` (the decoding cache simulation), :mod:`.params`, :mod:`.stages` (the DAG's
stages), :mod:`.report`.
"""
