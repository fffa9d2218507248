"""P6 sam_late: Sharpness-Aware Minimization efficiently selects flatter minima late in training
(Zhou, Wang, Mao, Li and Yan, ICLR 2025; arXiv 2410.10373). Official code: zzp1012/SAM-in-Late-Phase.

Reproduced: the switching experiment (SGD, SAM throughout, SAM only in the last K epochs, SAM only in
the first K epochs then SGD), with test loss, accuracy and sharpness (top Hessian eigenvalues by Lanczos) per arm,
one late phase K for every deciding claim (matched to the paper's 3,910 late SAM steps as far as the CPU budget
allows), the paper's share of training (10 of 160 epochs) reported beside it, and a rho sweep; the two phases after
the switch (the escape from the SGD solution, fitted on a log scale and gated on a small-perturbation phase, and the
loss along the line from the switch point to the late-SAM solution, against a line of the same length towards
another valley); and the extension to adversarial training (late AT, with early AT of equal length as its timing
ablation, against AT throughout, by robust accuracy).

Deviations: the default scale trains an MLP on 300 of sklearn's digits per seed (each seed its own split), clean
labels as the paper (a 20% label-noise extension can be switched on), for 400 epochs so that the late phase has 1,200
SAM steps (half of training, against 6% in the paper: matched in steps, not in share), instead of the paper's CIFAR
networks (nothing larger ships offline); the full scale is the official script's VGG-16-BN on CIFAR-10 from a
user-given folder. Inputs are not normalised, and the Hessian is taken in eval mode (see the report's "What
differs").

Modules: :mod:`.data` (digits, CIFAR-10, per-seed splits and label noise), :mod:`.model` (MLP, VGG-16-BN),
:mod:`.sam` (the SGD, SAM and PGD steps), :mod:`.train` (the switching loop and the arms of a job),
:mod:`.analysis` (sharpness, lines, fits), :mod:`.evaluate` (what is measured on every network), :mod:`.report`
(table, claims, report.md) and :mod:`.figures`, :mod:`.params`, :mod:`.stages` (the thin layer the rules call).
"""
