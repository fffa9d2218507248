"""P12 uv_sharpness: Universal sharpness dynamics in neural network training: fixed point analysis,
edge of stability, and route to chaos (Kalra, He and Barkeshli, ICLR 2025; arXiv 2311.02076).
No official code was found.

Reproduced: the UV model's sharpness phenomenology (sharpness reduction, progressive sharpening,
edge of stability) from its exact dynamics; the period-doubling route to chaos as the learning rate
grows past 2 / lambda_min (bifurcation diagram, detected periods, Lyapunov exponent); and the
real-network check that a network's sharpness rises to 2 / eta and stays there.

Deviations: the real network is a small tanh MLP on sklearn's digits instead of the paper's CIFAR-10
networks (nothing larger ships offline); the UV model itself is the paper's.

Modules: :mod:`.uv` (closed forms), :mod:`.mlp` (the real-network check), :mod:`.params`,
:mod:`.stages` (the DAG's stages).
"""
