"""P4 symspace: Neural networks on symmetric spaces of noncompact type (X. S. Nguyen et al., ICLR 2025).

Official code: none for the SPD part (nguyenxuanson10/symspaces-ic holds hyperbolic image classification
only; nothing is copied from it).

What is reproduced: the unified point-to-hyperplane distance through the Busemann function (Sec. 3),
its closed form on SPD(n) with the G-invariant (alpha, beta) metrics (reversed-Cholesky U D U^T
decomposition) and on the Poincare ball (horocycles), checked against the limit definition and the
special cases (claim a); the MLR and FC layers built on it and the distance-based attention with a
weighted Frechet-mean aggregation (Sec. 4), against LogEig + linear, SPDNet, a Euclidean MLP, a
Euclidean MLR and Ganea et al.'s hyperbolic MLR (claims b-e).

How we deviate: offline synthetic stand-ins for the paper's data (EEG mixing model, digits region
covariances, a noisy tree in the disk), tiny full-batch models; the full scale reads EEG exported as
.npz (no MNE). The report's "What differs from the paper" lists every difference.

Modules: geometry.py (the distances), layers.py (the layers and baselines), data.py (and the prepare stage), train.py,
stages.py (train, evaluate), report.py (table, figures, claims).
"""
