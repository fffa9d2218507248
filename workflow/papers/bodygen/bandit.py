"""TCA's mechanism on its own: a design-only bandit with a scripted gait and a late design reward.

BodyGen's temporal credit assignment (Sec. 3.3, :mod:`papers.bodygen.credit`) gives a design step the undiscounted
return of the whole execution, where GAE damps an execution reward k steps later by (gamma lambda)^k (0.945^k with
the official gamma = 0.995, lambda = 0.95: a reward 50 steps into the execution reaches the design step at 6%). The
paper's claim that removing TCA lowers the return rests on this; co-design at a laptop budget does not learn a gait
(see the report's learnability gate), so the mechanism is tested where it can be isolated:

* **The designs.** Per replicate, ``designs`` bodies of the task: its initial tree with every limb's attributes
  drawn uniformly in the normalised box (bone offset, size, gear). Each is executed in MuJoCo for ``control_steps``
  steps under one **scripted gait** (no control learning: every motor follows sin(2 pi t / period + pi k), k the
  limb's index, alternate limbs in antiphase), from ``noise_draws`` start-state draws (the environment's own start
  noise). The per-step rewards r_t(d) (forward velocity minus the control cost) are the execution's rewards: a
  design's return builds up over the whole execution, past GAE's horizon.
* **The episode.** One design step (a softmax policy over the designs, logits theta) followed by the execution's
  ``control_steps`` steps with the recorded rewards of the chosen design and a random start draw; reward 0 at the
  design step, as in BodyGen's episode.
* **The learner.** Per iteration, ``episodes`` episodes; advantages and value targets by
  :func:`papers.bodygen.credit.estimate` (TCA or GAE, the code the co-design arms run) from a tabular critic
  (the design state's value, and one value per design and execution step); advantages standardised per group as
  :func:`papers.bodygen.train.train_arm` does (design / control under TCA, all together without); then one
  policy-gradient step on the logits, theta += lr mean_i A_i (onehot(d_i) - pi) (PPO's first step, the ratio at 1),
  and one regression step of the critic toward its targets.
* **The measure.** The policy's expected return J = sum_d pi(d) R(d) (R: the design's mean return over the start
  draws, exact, not estimated), as the share of the possible improvement it gained: (J_end - J_start) /
  (max_d R(d) - J_start).

Both estimators of a replicate start from the same logits, critic and random stream (common random numbers). The
null control assigns each episode the rewards of a random design, whatever the policy chose: the reward does not
depend on the choice, so neither estimator can improve the design.
"""
from __future__ import annotations

import numpy as np

from papers.bodygen import credit
from papers.bodygen.env import Execution
from papers.bodygen.morphology import N_ATTR, Body


def designs(task, k: int, rng: np.random.Generator) -> list[Body]:
    """`k` bodies of the task's initial tree, each limb's normalised attributes drawn uniformly in [-1, 1]."""
    from papers.bodygen.train import initial_body

    out = []
    for _ in range(k):
        body = initial_body(task).copy()
        for limb in body.limbs:
            limb.u = rng.uniform(-1.0, 1.0, N_ATTR)
        out.append(body)
    return out


def scripted_rewards(bodies: list[Body], task, env: dict, draws: int, period: float,
                     rng: np.random.Generator) -> np.ndarray:
    """Per design, start draw and execution step, the reward under the scripted gait: (K, draws, T)."""
    out = np.zeros((len(bodies), draws, env["control_steps"]))
    for j in range(draws):
        sim = Execution(bodies, task, env, rng)
        limbs = max(len(b.limbs) for b in bodies)
        alive = np.ones(len(bodies), bool)
        phase = np.pi * np.arange(limbs)
        for t in range(env["control_steps"]):
            torque = np.broadcast_to(np.sin(2 * np.pi * t / period + phase), (len(bodies), limbs))
            r, done = sim.step(np.ascontiguousarray(torque), env["ctrl_cost"], alive)
            out[:, j, t] = r
            alive &= ~done
    return out


def learn(rewards: np.ndarray, *, tca: bool, iterations: int, episodes: int, policy_lr: float, value_lr: float,
          gamma: float, lam: float, rng: np.random.Generator, shuffle: bool = False) -> np.ndarray:
    """Train the design policy on the bandit; returns J (the policy's exact expected return) before each iteration
    and after the last: (iterations + 1,). `rewards` (K, draws, T); `shuffle`: the null control (each episode gets
    the rewards of a design drawn uniformly, not of the one chosen)."""
    k, draws, horizon = rewards.shape
    value_of = rewards.sum(2).mean(1)  # R(d): (K,)
    theta = np.zeros(k)
    v_design, v_control = 0.0, np.zeros((k, horizon))
    is_design = np.r_[True, np.zeros(horizon, bool)]
    curve = []
    for _ in range(iterations):
        pi = np.exp(theta - theta.max())
        pi /= pi.sum()
        curve.append(float(pi @ value_of))
        chosen = rng.choice(k, size=episodes, p=pi)
        shown = rng.integers(k, size=episodes) if shuffle else chosen
        r = np.concatenate([np.zeros((episodes, 1)), rewards[shown, rng.integers(draws, size=episodes)]], 1)
        values = np.concatenate([np.full((episodes, 1), v_design), v_control[chosen]], 1)  # the critic sees the choice
        adv, targets = credit.estimate(r, values, np.zeros(episodes), np.zeros_like(r), is_design, gamma=gamma,
                                       lam=lam, tca=tca)
        design = np.broadcast_to(is_design, adv.shape)
        adv = credit.standardise(adv, [design, ~design] if tca else [np.ones_like(design)])
        grad = ((np.eye(k)[chosen] - pi) * adv[:, :1]).mean(0)
        theta += policy_lr * grad
        v_design += value_lr * float((targets[:, 0] - v_design).mean())
        for d in np.unique(chosen):
            rows = chosen == d
            v_control[d] += value_lr * (targets[rows, 1:].mean(0) - v_control[d])
    pi = np.exp(theta - theta.max())
    curve.append(float((pi / pi.sum()) @ value_of))
    return np.array(curve)


def late_share(rewards: np.ndarray, horizon: float) -> float:
    """The share of the designs' return differences that arrives after step `horizon` of the execution: sum over
    steps t >= horizon of the spread (std over designs) of the mean reward r_t(d), over the sum at every step."""
    spread = rewards.mean(1).std(0)  # (T,)
    return float(spread[int(np.ceil(horizon)):].sum() / max(spread.sum(), 1e-12))
