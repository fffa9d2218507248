"""P12 uv_sharpness: Universal sharpness dynamics in neural network training: fixed point analysis,
edge of stability, and route to chaos (Kalra, He and Barkeshli, ICLR 2025; arXiv 2311.02076).
No official code was found.

Reproduced: the UV model's sharpness phenomenology from its exact dynamics: early sharpness reduction from a
large init at a large learning rate without a catapult (against the same init at a small one; at the model's width,
with a width sweep beside it), and, as an extension, whether the catapult adds to it (a difference in differences
across each seed's catapult onset, its first loss rise); edge of stability; the route to chaos on the EoS manifold u || v (a sweep from an init off the manifold, Theta_0 below lambda_min, imbalance 1 - 4kf^2/Theta^2);
the period-doubling route to chaos as the learning rate grows past 2 / lambda_min (bifurcation diagram,
periods of any length, Lyapunov exponent; positive control: the logistic map); and the real-network check
that a network's sharpness rises to 2 / eta and stays there. The fixed-point conditions derived here from
the paper's function-space map (eta_c = 2 / lambda_min, the 2-cycle's mean sharpness (2 / eta)(1 + (r - 1)/4),
period 4 at r = sqrt(5) - 1) are checks of our derivation against our simulation, not claims; so is progressive
sharpening from the small init, whose Theta_0 sits below every minimum's sharpness by construction.

Deviations: at the default scale the real network is a small tanh MLP on sklearn's digits instead of the
paper's CIFAR-10 networks (nothing larger ships offline); the full scale reads CIFAR-10 from a user-given
path (an FCN or a small CNN). The UV model itself is the paper's.

Modules: :mod:`.uv` (closed forms, fixed points, period detection), :mod:`.mlp` (the real-network
check), :mod:`.params`, :mod:`.stages` (the DAG's stages), :mod:`.claims` (the claims and their tests).
"""
