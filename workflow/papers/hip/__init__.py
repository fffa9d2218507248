"""P16 hip: HiP Attention: sparse sub-quadratic attention with hierarchical attention pruning
(Lee et al., ICLR 2025; arXiv 2406.09827). Official code: DeepAuto-AI/hip-attention (FSL licence:
read, not copied).

HiP is training-free: it replaces the dense attention of a model trained with dense attention by
a per-query-block choice of key blocks, found with a tree search of ``O(T log T)`` cost that
relies on attention locality (neighbouring keys score alike), then attends block-sparsely. The
kernels are in the ``kernels`` package (``hip_select``, ``block_sparse_attention``,
``oracle_select``); this folder is the experiment.

Reproduced, on tiny byte-level models (one per seed) trained here on the King James Bible with key
records written over it (each key repeated later, so its value needs far context by construction of
the data; the models' use of far context is a premise gate): retrieval (passkey and multi-key, needle
depth and width varied) of dense attention, HiP, the oracle top-k blocks, random blocks and a sink +
window (StreamingLLM) at equal key budgets, decided on needles spanning many positions as the paper's
passkey sentence does (a one-pair needle has no attention locality), with a planted needle on one
attention head as the positive control; HiP's top-k recall per layer on the model's keys against the
same keys shuffled (locality as the tree search uses it), with planted-locality keys as the positive
control; HiP's time against T (2k-16k; CPU time, the fastest of interleaved repeats), with dense attention as
the positive control and a budget growing with T as the ablation, its counted T log T work a check; and
a simulated KV-cache offloading during decoding within the trained context: the hit rate of HiP's tree-search
(mask-estimation) reads in a log T LRU on the model's keys against the same keys in shuffled block order
(attention locality removed), with a planted-locality positive control, the sparse attention's reads counted in
their own cache and reported beside it, the working set's log T growth a check. At the full scale, HiP patched into a local
pretrained LM decides retrieval on passkey and RULER multi-key prompts.

Deviations: no pretrained LLM ships offline, so the default scale's models are tiny and evaluated at
their trained context (1k bytes instead of 32k-1M tokens); HiP's block sizes and budgets are scaled
down accordingly; training uses torch's fused CPU attention (the same function as
``kernels.attention``). See the report.

Modules: :mod:`.model` (the GPT), :mod:`.methods` (HiP and the baselines, recall),
:mod:`.data` (KJV bytes, key records, retrieval prompts), :mod:`.train`, :mod:`.evaluate` (the
measurements and the planted settings), :mod:`.offload` (the decoding cache simulation), :mod:`.params`,
:mod:`.stages` (the DAG's stages), :mod:`.verdicts` (the claims), :mod:`.report`.
"""
