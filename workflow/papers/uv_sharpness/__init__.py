"""P12 uv_sharpness: Universal sharpness dynamics in neural network training: fixed point analysis,
edge of stability, and route to chaos (Kalra, He and Barkeshli, ICLR 2025; arXiv 2311.02076).
No official code was found.

Reproduced: the UV model's sharpness phenomenology (early sharpness reduction by the catapult,
progressive sharpening, edge of stability) from its exact dynamics; the fixed-point conditions for
EoS, derived here from the paper's function-space map (eta_c = 2 / lambda_min, the EoS manifold
u || v, its 2-cycle with mean sharpness (2 / eta)(1 + (r - 1)/4), period 4 at r = sqrt(5) - 1); the
period-doubling route to chaos as the learning rate grows past 2 / lambda_min (bifurcation diagram,
periods of any length, Lyapunov exponent); and the real-network check that a network's sharpness
rises to 2 / eta and stays there.

Deviations: the real network is a small tanh MLP on sklearn's digits instead of the paper's CIFAR-10
networks (nothing larger ships offline); the UV model itself is the paper's.

Modules: :mod:`.uv` (closed forms, fixed points, period detection), :mod:`.mlp` (the real-network
check), :mod:`.params`, :mod:`.stages` (the DAG's stages), :mod:`.claims` (the claims and their tests).
"""
