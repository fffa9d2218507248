"""P18 adamanip: AdaManip, adaptive articulated object manipulation (Wang et al., ICLR 2025).

Paper: "AdaManip: Adaptive Articulated Object Manipulation Environments and Policy Learning",
https://openreview.net/forum?id=Luss2sa0vc ; official code OpenGHz/AdaManip (IsaacGym).

What we reproduce: the paper's main comparison (its results table: success rates per category of policies trained
on adaptive vs one-go demonstrations, diffusion policy vs baselines) on our own small MuJoCo
environment of articulated objects whose mechanism is hidden from the observation:

* ``env.py``     -- MJCF generated per object (randomised geometry), the hidden mechanisms (direction of
  a cap/handle/knob, locks that open after a hidden turn, a microwave lock released by a button, a lamp
  switched by one of push / turn cw / turn ccw), a floating gripper moved by end-effector targets, and
  the observation: a point cloud sampled from the geometry surfaces (world frame) plus the gripper state.
* ``experts.py`` -- the demonstration collectors: one-go (reads the hidden state and acts once) and
  adaptive (tries, watches whether the part moved, switches or unlocks, retries), successes only; and the
  random-primitive reference (a primitive the category's experts use, drawn every step: undirected retrying); and
  a one-go expert that guesses the hidden mechanism, against which the adaptive expert plants claim (a)'s effect.
* ``policy.py``  -- the diffusion policy (PointNet encoder, 1D conditional U-Net with FiLM, DDPM with a
  cosine schedule and epsilon prediction, receding horizon), the MLP behaviour-cloning baseline, and that baseline
  sampled from its maximum-likelihood Gaussian (stochastic but unimodal: the ablation of the diffusion policy's
  several action modes, Sec. 4.2).

How we deviate (the report's "What differs from the paper" says it in full): kinematic MuJoCo (joint
positions follow the gripper's targets within joint limits, no contact dynamics), the episode starts
with the handle grasped (the paper's separate grasping stage is skipped), a mechanism jams after a few
blocked tries (so that wrong tries cost the episode), PointNet instead of PointNet++, tiny models and few
training steps for a 2-core CPU budget. The claims are gated on their premises: the diffusion policy reads
the visible marker as well as MLP behaviour cloning, it learned to adapt (it beats undirected retrying with its
noise fixed per episode), and undirected retrying fails where the adaptive expert succeeds.
"""
