"""P10 linear_mechanisms: Three Mechanisms of Feature Learning in a Linear Network (Xu and Ziyin, ICLR 2025;
arXiv 2401.07085). No official code was found.

Reproduced: the exact finite-width learning dynamics of the one-hidden-layer linear network
f(x) = kappa (u.w) x on one-dimensional data, checked against simulated gradient descent; the phase
diagram over width, init scale, output scale and the ratio of layer-wise learning rates (relative NTK
change, change of cos(u, w), norm ratios); the kernel regime in NTK parameterisation against
width-independent feature learning in mean-field parameterisation; the three mechanisms of feature
learning (alignment, disalignment, rescaling), each where the phase diagram puts it (a check: our derivation
against our simulation); and the nonlinear claims (a two-layer tanh MLP on real images: larger init, smaller NTK
change, worse test accuracy, with a lazy-scaling ablation; the three mechanisms in its layers).

Deviations: the paper's text past Section 1 could not be read here (stages.PAPER_SEARCH says what was
searched), so the closed form (for any learning-rate ratio),
the phase boundaries and the operational definitions of the mechanisms are derived by us from the model
(exact.py, phase.py say which statements are ours). The nonlinear check uses sklearn's digits (300 training images at the
default scale, so every run can be trained to convergence in its time budget; MNIST-1D at the full scale)
instead of the paper's larger tasks.

Modules: :mod:`.exact` (model, closed form, gradient descent), :mod:`.phase` (phase diagram and labels),
:mod:`.mlp` (the nonlinear check: its arms and their frozen-first-layer ablations), :mod:`.params`,
:mod:`.stages` (the thin layer the rules call, and the training stages), :mod:`.evaluate`, :mod:`.claims`
(claims, premise gates, controls, the checks c_points and c_phase), :mod:`.report`, :mod:`.figures`.
"""
