"""P4 symspace: Neural networks on symmetric spaces of noncompact type (X. S. Nguyen et al., ICLR 2025).

Official code: nguyenxuanson10/symspaces-ic holds the hyperbolic image classification (read for its Poincare-ball
Busemann MLR logit, ``PoincareBall.dist2planebm``; nothing is copied from it); none for the SPD part.

What is reproduced: the unified point-to-hyperplane distance through the Busemann function (Sec. 3),
its closed form on SPD(n) with the G-invariant (alpha, beta) metrics (reversed-Cholesky U D U^T
decomposition) and on the Poincare ball (horocycles), checked against the limit definition (claim a; the
invariances and special cases are checks); the MLR built on it against SPDNet's LogEig + linear head on the same
BiMap/ReEig backbone, against a minimal effect taken from the paper's smallest EEG gain (claim b); the FC layer and
the distance-based attention with a weighted Frechet-mean aggregation (Sec. 4) against the same network without it
and two non-attentive baselines (claim e: decided on the EEG mixing model with the class's excess power spread over
every window, a setting not built for the attention; the class event planted in one window is its positive
control); the horocycle MLR against Ganea et al.'s hyperbolic MLR and a Euclidean MLR on a tree moved by an isometry,
so that no angle rule gives its classes (claim d). The paper's claim (c), that the (alpha, beta) family matters, is
listed as not measured: in the MLR the metric only reparametrises the normal and the Frechet mean is the same for
every (alpha, beta) (check 'reparametrisation').

How we deviate: offline synthetic stand-ins for the paper's data (EEG mixing model, digits region
covariances, a noisy tree in the disk), small full-batch models; claim (b) reports a tangent-space logistic
regression on the same covariances as the ceiling reference of the heads' shared input; the full scale reads EEG data sets exported as
.npz, one file per subject (no MNE). The report's "What differs from the paper" lists every difference.

Modules: geometry.py (the distances), layers.py (the layers and baselines), data.py (and the prepare stage), train.py,
stages.py (train, tree, evaluate), report.py (table, figures, claims, checks).
"""
