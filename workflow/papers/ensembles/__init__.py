"""P9 ensembles: Agree to Disagree: Demystifying Homogeneous Deep Ensembles through Distributional
Equivalence (Yipei Wang and Xiaoqian Wang, ICLR 2025; https://openreview.net/forum?id=XYRPm8rAGM).
Official code: yipei-wang/DeepEnsembleDemystified (not readable from this machine; see below).

Reproduced: the paper's account of homogeneous deep ensembles. Members drawn i.i.d. from one training
pipeline (seeds vary the initialisation, the batch order and the augmentation) predict differently point
by point, yet their outputs form one distribution (distributional equivalence); from this the ensemble
beats every member, its loss falls with M along a curve that a few members foresee (the estimator), while
the Jensen gap explains none of it (a check here, true by convexity). Claims: (a) the ensemble against the member
one would deploy (chosen on a validation set), with one run's epoch snapshots (near-copies under the annealed learning
rate) as a null control; (b) NLL and (d) accuracy, the paper's foresight: from K = 4 seen members the estimator predicts
how much the ensemble gains beyond them, from M = K to M = members - K, measured on the other members' ensembles
(paired per random K-subset, averaged per replicate), within a quarter of that gain and better than the flat predictor
(its 1/M mechanism removed: the ablation), with planted i.i.d. members as the positive control (a + b/M fitted to the K
members' own sub-ensembles, and K' = 2, reported beside it); (c) distributional equivalence as a distance with a margin:
the within-pipeline KS distance's excess over the floor of the same pairs made exchangeable (what sampling alone
gives) below the smallest distance a KS test detects at the paper's 10,000 test images, with planted i.i.d. members as
the positive control and pairs across two architectures as the null control. The heterogeneous ensemble (members of
two widths) is also reported through the rule of (b), (d). Every claim rests on independent replicates (own data
split, own member seeds) and is gated on the members' convergence (they fit their training set, their loss has
stopped falling) and disagreement.

Deviations: the paper trains CNNs and ResNets of widths k in {10, 20, 40, 80, 160} on CIFAR-10/100 and
Tiny ImageNet; the default and smoke scales train two-layer CNNs of width k = 8 (the default scale also k = 16,
which the control's other half reuses) on 200 of sklearn's 8x8 digits with 1-pixel shifts, to convergence (offline; members then disagree on a
few to 10 percent of the test images), and the full scale trains the width-k ResNet18 on CIFAR from a user-given
path. The official repository could not be fetched here, so the estimator (:mod:`.ensemble`) is written from the
paper's statements; its docstring gives every choice that is ours. Also ours, not checked against the paper: the
KS test runs on each member's true-class probability, and members train with Adam and a cosine schedule (the
paper's optimiser could not be read); the report states both under "What differs".

Modules: :mod:`.params`, :mod:`.data` (digits, CIFAR loaders, per-replicate splits), :mod:`.models` (batched
MLPs and CNNs, ResNet18), :mod:`.train` (a group of members), :mod:`.ensemble` (the paper's quantities),
:mod:`.stages` (prepare, train, evaluate), :mod:`.report` (table, figures, claims).
"""
