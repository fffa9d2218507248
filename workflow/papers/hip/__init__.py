"""P16 hip: HiP Attention: sparse sub-quadratic attention with hierarchical attention pruning
(Lee et al., ICLR 2025; arXiv 2406.09827). Official code: DeepAuto-AI/hip-attention (FSL licence:
read, not copied).

HiP is training-free: it replaces the dense attention of a model trained with dense attention by
a per-query-block choice of key blocks, found with a tree search of ``O(T log T)`` cost that
relies on attention locality (neighbouring keys score alike), then attends block-sparsely. The
kernels are in the ``kernels`` package (``hip_select``, ``block_sparse_attention``,
``oracle_select``); this folder is the experiment.

Reproduced, on tiny byte-level models trained here on the King James Bible:
attention locality; held-out perplexity and passkey accuracy of dense attention, HiP, the oracle
top-k blocks, random block pruning and a sink + sliding window at equal key budgets; HiP's top-k
recall against random pruning (the paper's guarantee); the cost of HiP and dense attention
against T (2k-32k, CPU references, fitted exponents); and a simulated KV-cache offloading
during decoding (resident tokens and hit rate against T).

Deviations: no pretrained LLM ships offline, so the models are tiny and evaluated at their
trained context (1k bytes instead of 32k-1M tokens); HiP's block sizes and budgets are scaled
down accordingly; training uses torch's fused CPU attention (the same function as
``kernels.attention``); the passkey prompt is shortened for bytes. See the report.

Modules: :mod:`.model` (the GPT), :mod:`.methods` (HiP and the baselines, recall, locality),
:mod:`.data` (KJV bytes, passkey prompts), :mod:`.train`, :mod:`.evaluate`, :mod:`.offload`
(the decoding cache simulation), :mod:`.params`, :mod:`.stages` (the DAG's stages),
:mod:`.report`.
"""
