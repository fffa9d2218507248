"""P9 ensembles: Agree to Disagree: Demystifying Homogeneous Deep Ensembles through Distributional
Equivalence (Yipei Wang and Xiaoqian Wang, ICLR 2025; https://openreview.net/forum?id=XYRPm8rAGM).
Official code: yipei-wang/DeepEnsembleDemystified (not readable from this machine; see below).

Reproduced: the paper's account of homogeneous deep ensembles. Members drawn i.i.d. from one training
pipeline (seeds vary the initialisation, the batch order and the augmentation) predict differently point
by point, yet their outputs form one distribution (distributional equivalence); from this the ensemble
beats every member, its loss falls with M along a curve that a few members foresee (the estimator), while
the Jensen gap explains none of it. Claims: (a) the ensemble against the member one would deploy (chosen on
a validation set), with one run's epoch snapshots as the control; (b) the NLL at every M against the
estimator's prediction from K other members; (c) the equivalence test, pair by pair; (d) the accuracy at
every M against the estimator. A heterogeneous ensemble (members of different widths) is the control of
(b)-(d). Every claim rests on independent replicates (own data split, own member seeds).

Deviations: the paper trains CNNs and ResNets of widths k in {10, 20, 40, 80, 160} on CIFAR-10/100 and
Tiny ImageNet; the default and smoke scales train two-layer CNNs of width k in {4, 8, 16} on 200 of
sklearn's 8x8 digits with 1-pixel shifts (offline; members then disagree on 5-30% of the test images), and
the full scale trains the width-k ResNet18 on CIFAR from a user-given path. The official repository could
not be fetched here, so the equivalence test and the estimator (:mod:`.ensemble`) are written from the
paper's statements; their docstrings give the statistic, its null distribution and every choice that is ours.

Modules: :mod:`.params`, :mod:`.data` (digits, CIFAR loaders, per-replicate splits), :mod:`.models` (batched
MLPs and CNNs, ResNet18), :mod:`.train` (a group of members), :mod:`.ensemble` (the paper's quantities),
:mod:`.stages` (prepare, train, evaluate), :mod:`.report` (table, figures, claims).
"""
