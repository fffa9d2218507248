"""P13 infoprop: Infoprop, on rollouts in model-based reinforcement learning (Frauenknecht et al., ICLR 2025,
https://arxiv.org/abs/2501.16918).

Official code: Data-Science-in-Mechanical-Engineering/infoprop (on MBRL-Lib) and the JAX port
dsubhasish09/Infoprop-JAX; read for the propagation step (``gaussian_mlp.py: info_sample_1d``) and the
thresholds (``infoprop_dyna.py``), nothing copied.

What is reproduced: the Infoprop rollout step (Sec. 4: fuse the ensemble, read a random member's draw as a noisy
observation of the next state, condition on it with a Kalman gain so that only aleatoric uncertainty propagates),
its information loss and the termination by lambda1/lambda2 (Sec. 5), against MBPO's random-member sampling, on a
probabilistic ensemble (early stopping and elites as MBRL-Lib's trainer) fitted to logged
HalfCheetah-v5 transitions of the deterministic simulator; the rollouts are compared with the true simulator
continued from the same held-out states (claim a, decided on the seeds whose rollouts diverge, with the members
disagreeing), and the transitions Infoprop drops with those it keeps, by an error that excludes the true spread,
against a cut by accumulated aleatoric entropy with the same stop counts (claim b, on the seeds with an error).

Claim (c), Infoprop-Dyna (Sec. 6, Alg. 1: SAC trained on model rollouts) against MBPO-style Dyna at equal real
steps, with Infoprop's loop at K = 1 as the ablation and the loop with the true simulator as its model as the
learnability references (at either arm's horizon), runs on Pendulum-v1 with every arm and seed vectorised in one
process (dyna.py), at the scales that run it (dyna.run: the full scale; at the default scale claim c is not measured,
its reason computed from a trial's measured cost).

How we deviate: one task per study, fixed noisy policies (one per replicate, the regimes in turn) instead of a
learning agent in the rollout study, a small Dyna task and budget, smaller networks; the report's "What differs from
the paper" lists every difference.

Modules: data.py (the true system, the logged data and the prepare stage), model.py (the ensemble), propagation.py
(the schemes, information loss, thresholds), stages.py (train, evaluate), dyna.py (the Dyna comparison), report.py
(table, figures, claims).
"""
