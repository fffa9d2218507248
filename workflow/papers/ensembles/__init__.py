"""P9 ensembles: Agree to Disagree: Demystifying Homogeneous Deep Ensembles through Distributional
Equivalence (Yipei Wang and Xiaoqian Wang, ICLR 2025; https://openreview.net/forum?id=XYRPm8rAGM).
Official code: yipei-wang/DeepEnsembleDemystified (not readable from this machine; see below).

Reproduced: the paper's account of homogeneous deep ensembles. Members drawn i.i.d. from one training
pipeline (seeds vary the initialisation and the batch order) predict differently point by point, yet
their outputs form one distribution (distributional equivalence); from this the ensemble beats every
member from some size M on, its loss falls with M, and its performance at every M can be estimated
from a few members, while the Jensen gap explains none of it. A heterogeneous ensemble (members of
different widths and depths) is the control where equivalence fails.

Deviations: the paper trains CNNs and ResNets of widths k in {10, 20, 40, 80, 160} on CIFAR-10/100 and
Tiny ImageNet; the default and smoke scales train MLPs on sklearn's 8x8 digits (offline), and the full
scale trains the width-k ResNet18 on CIFAR from a user-given path. The official repository could not be
fetched here, so the equivalence test and the estimator (:mod:`.ensemble`) are written from the paper's
statements; their docstrings give the statistic, its null distribution and every choice that is ours.

Modules: :mod:`.params`, :mod:`.data` (digits, CIFAR loaders), :mod:`.models` (batched MLPs, ResNet18),
:mod:`.train` (a group of members), :mod:`.ensemble` (the paper's quantities), :mod:`.stages` (the DAG).
"""
