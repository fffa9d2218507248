"""P3 bodygen: BodyGen, efficient embodiment co-design (Lu et al., ICLR 2025).

Paper: https://openreview.net/forum?id=cTR17xl89h ; official code GenesisOrigin/BodyGen (built on
Transform2Act; read for the episode structure, networks and hyperparameters, not copied).

What we reproduce: the co-design comparison of the paper's Table 1 (BodyGen against Transform2Act at equal
environment steps) and its ablations (no TopoPE, no temporal credit assignment), each gated on every compared arm
having learned a gait (the fixed-body arm is the learnability reference); TCA's mechanism on its own, on a
design-only bandit with a scripted gait (``bandit``); the model-size statement as a check. Modules, bottom-up:
``morphology`` (limb tree, skeleton and attribute transforms, MJCF), ``env`` (limb tokens, MuJoCo execution),
``model`` (MoSAT with TopoPE, the GraphConv baseline, heads), ``credit`` (TCA and GAE), ``train`` (rollouts and
PPO), ``bandit``, ``stages`` and ``report``; ``timing`` measures a full-scale train job's cost per step
(``time_full_scale.py`` prints it).

Deviations (the report's "What differs from the paper"): a 2-D crawler instead of ten 3-D tasks at the default
scale, a budget of tens of thousands of control steps instead of 50M samples and fewer arms (the full scale runs
all of them, one job per task, arm and seed), smaller networks, Euler integration, gear bounds scaled to the lighter
planar body.
"""
