"""P5 deepgate4: DeepGate4: Efficient and Effective Representation Learning for Circuit Design at Scale
(Zheng et al., ICLR 2025; arXiv 2502.01681). Official code: zyzheng17/DeepGate4-ICLR-25.

Reproduced: the main comparison (signal-probability and truth-table-distance errors on held-out ITC-99 and EPFL
circuits, DeepGate4 against DeepGate2, GAT and a plain DeepGate3-style transformer, every arm the same number of
epochs, gated on convergence) and the scalability claims: the partitioned level-by-level update with a history
table has sub-linear peak memory while the full-graph pass grows linearly (netlists and generated circuits, with a
planted positive control); the fused graph-attention kernel (``kernels.gat_attention``) against the unfused
reference is a claim about the whole model on a GPU, and an op-level check in Triton's interpreter without one.

Deviations: small models and a short, equal-epoch budget per arm with early stopping on validation circuits, on
one CPU thread; real netlists from PyPI circuitgraph converted to AIGs in Python plus generated arithmetic
circuits instead of the paper's data sets; two gate-level tasks only; a level encoding normalised by the circuit's
depth; a level-window partition (the partitioned pass equals the full-graph pass with fan-in-cone attention). The
report lists them.

Modules: :mod:`.aig` (netlists, AIGs, simulation, labels), :mod:`.partition` (windows, areas, mini-batches),
:mod:`.model` (DeepGate2 tokenizer, GAT, refinement layers), :mod:`.train` (loops), :mod:`.memory` (peak memory,
fused vs unfused), :mod:`.params`, :mod:`.stages`, :mod:`.report`.
"""
