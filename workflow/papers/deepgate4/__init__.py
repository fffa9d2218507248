"""P5 deepgate4: DeepGate4: Efficient and Effective Representation Learning for Circuit Design at Scale
(Zheng et al., ICLR 2025; arXiv 2502.01681). Official code: zyzheng17/DeepGate4-ICLR-25.

Reproduced: the main comparison (signal-probability and truth-table-distance errors on held-out ITC-99 and EPFL
circuits, DeepGate4 against DeepGate2, GAT and a plain DeepGate3-style transformer) and the scalability claims:
the partitioned level-by-level update with a history table has sub-linear peak memory while the full-graph pass
grows linearly; the fused graph-attention kernel (``kernels.gat_attention``) against the unfused reference is
measured where a GPU is present.

Deviations: small models and a short, equal optimiser-step budget per arm with early stopping on validation
circuits, on one CPU thread; real netlists from PyPI circuitgraph converted to AIGs in Python plus generated
arithmetic circuits (as deep as the held-out ones) instead of the paper's data sets; two gate-level tasks only; a
level encoding normalised by the circuit's depth; a level-window partition (the partitioned pass equals the
full-graph pass with fan-in-cone attention). The report lists them.

Modules: :mod:`.aig` (netlists, AIGs, simulation, labels), :mod:`.partition` (windows, areas, mini-batches),
:mod:`.model` (DeepGate2 tokenizer, GAT, refinement layers), :mod:`.train` (loops), :mod:`.memory` (peak memory,
fused vs unfused), :mod:`.params`, :mod:`.stages`, :mod:`.report`.
"""
