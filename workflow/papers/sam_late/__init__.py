"""P6 sam_late: Sharpness-Aware Minimization efficiently selects flatter minima late in training
(Zhou, Wang, Mao, Li and Yan, ICLR 2025; arXiv 2410.10373). Official code: zzp1012/SAM-in-Late-Phase.

Reproduced: the switching experiment (SGD, SAM throughout, SAM only in the last epochs, SAM only in
the first epochs), with test accuracy and sharpness (top Hessian eigenvalues by Lanczos) per arm, the
sweep over the switch epoch (SAM for the last K epochs, K swept: "how late is late enough") and a rho
sweep; the two phases after the switch (the escape from the SGD solution, fitted on a log scale, and
the loss along the line from the switch point to the late-SAM solution, against a line of the same
length towards another valley); and the extension to adversarial training (late PGD training against
PGD training throughout, by robust accuracy).

Deviations: the default scale trains an MLP on 300 of sklearn's digits per seed (each seed its own split), with
clean labels as the paper (every claim) and, as a labelled extension, 20% label noise (the lr decayed before the
late phase, as the paper), instead of the paper's CIFAR networks (nothing larger ships offline); the full scale is
the official script's VGG-16-BN on CIFAR-10 from a user-given folder. Inputs are not normalised, and the Hessian is
taken in eval mode (see the report's "What differs").

Modules: :mod:`.data` (digits, CIFAR-10, per-seed splits and label noise), :mod:`.model` (MLP, VGG-16-BN),
:mod:`.sam` (the SGD, SAM and PGD steps), :mod:`.train` (the switching loop and the arms of a job),
:mod:`.analysis` (sharpness, lines, fits), :mod:`.evaluate` (what is measured on every network), :mod:`.report`
(table, claims, report.md) and :mod:`.figures`, :mod:`.params`, :mod:`.stages` (the thin layer the rules call).
"""
