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
* **The step size.** Plain gradient steps are sensitive to the scale of the advantages, and the two estimators
  standardise different groups (TCA the design steps on their own, GAE together with the control steps), so one
  hand-set step size favours one of them (issue 51's review). :func:`learn_grid` therefore trains every step size
  of a grid side by side, and the analysis gives each estimator the step size that did best on the other half of
  the replicates (cross-fitting): each estimator at its own tuned step size, decided on data the test does not use.
* **The measure.** The policy's expected return J = sum_d pi(d) R(d) (R: the design's mean return over the start
  draws, exact, not estimated), as the share of the possible improvement it gained: (J_end - J_start) /
  (max_d R(d) - J_start).
* **The mechanism, measured.** Per iteration, the share of the design-step advantages' variance explained by the
  chosen design's return R(d) (squared correlation): how much of the late design reward the estimator passes to the
  design decision. The premise of the claim compares it under TCA and GAE over the first iterations, while the
  critic has not yet carried the late reward back to the first execution step (a critic indexed by the chosen
  design lets GAE's design advantage pick up gamma V(s_1 | d) once it has learned).

Both estimators of a replicate start from the same logits, critic and random stream (common random numbers). The
null control assigns each episode the rewards of a random design, whatever the policy chose: the reward does not
depend on the choice, so neither estimator can improve the design. The positive control freezes the critic at 0
(``value_lr`` 0): GAE's design advantage is then the (gamma lambda)-discounted execution reward by construction, the
late reward hidden from it, which is the setting where TCA's advantage is planted (Sec. 3.3's argument).
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
    """Train the design policy on the bandit at one step size; returns J (the policy's exact expected return) before
    each iteration and after the last: (iterations + 1,). `rewards` (K, draws, T); `shuffle`: the null control (each
    episode gets the rewards of a design drawn uniformly, not of the one chosen). :func:`learn_grid` with one step
    size."""
    curve, _ = learn_grid(rewards, tca=tca, lrs=[policy_lr], iterations=iterations, episodes=episodes,
                          value_lr=value_lr, gamma=gamma, lam=lam, rng=rng, shuffle=shuffle)
    return curve[0]


def learn_grid(rewards: np.ndarray, *, tca: bool, lrs, iterations: int, episodes: int, value_lr: float,
               gamma: float, lam: float, rng: np.random.Generator, shuffle: bool = False):
    """:func:`learn` at every step size of `lrs` side by side (one independent learner per step size, vectorised;
    BodyGen Sec. 3.3's estimator through :func:`papers.bodygen.credit.estimate`).

    Returns (curve, r2): curve (len(lrs), iterations + 1), the policy's exact expected return before each iteration
    and after the last; r2 (len(lrs), iterations), per iteration the squared correlation between the raw design-step
    advantages and the chosen designs' returns R(d) (NaN where every episode chose the same design)."""
    k, draws, horizon = rewards.shape
    lrs = np.asarray(lrs, float)
    n = len(lrs)
    value_of = rewards.sum(2).mean(1)  # R(d): (K,)
    theta = np.zeros((n, k))
    v_design, v_control = np.zeros(n), np.zeros((n, k, horizon))
    is_design = np.r_[True, np.zeros(horizon, bool)]
    design = np.broadcast_to(is_design, (episodes, horizon + 1))
    groups = [design, ~design] if tca else [np.ones_like(design)]
    learner = np.repeat(np.arange(n), episodes)  # the learner of each episode in the flat batch
    curve, r2 = np.zeros((n, iterations + 1)), np.full((n, iterations), np.nan)

    def policy():
        pi = np.exp(theta - theta.max(1, keepdims=True))
        return pi / pi.sum(1, keepdims=True)

    for it in range(iterations):
        pi = policy()
        curve[:, it] = pi @ value_of
        chosen = (rng.random((n, episodes, 1)) > pi.cumsum(1)[:, None, :]).sum(2).clip(max=k - 1)  # (n, E)
        shown = rng.integers(k, size=(n, episodes)) if shuffle else chosen
        r = np.concatenate([np.zeros((n * episodes, 1)),
                            rewards[shown.ravel(), rng.integers(draws, size=n * episodes)]], 1)
        values = np.concatenate([v_design[learner, None], v_control[learner, chosen.ravel()]], 1)  # sees the choice
        adv, targets = credit.estimate(r, values, np.zeros(n * episodes), np.zeros_like(r), is_design, gamma=gamma,
                                       lam=lam, tca=tca)
        adv, targets = adv.reshape(n, episodes, -1), targets.reshape(n, episodes, -1)
        for i in range(n):
            if value_of[chosen[i]].std() > 0:
                r2[i, it] = np.corrcoef(adv[i, :, 0], value_of[chosen[i]])[0, 1] ** 2
            a = credit.standardise(adv[i], groups)[:, 0]
            theta[i] += lrs[i] * ((np.eye(k)[chosen[i]] - pi[i]) * a[:, None]).mean(0)
        v_design += value_lr * (targets[:, :, 0].mean(1) - v_design)
        onehot = np.eye(k)[chosen]  # (n, E, K): the critic's per-design regression step, over the episodes that chose d
        counts = onehot.sum(1)  # (n, K)
        sums = np.einsum("nek,net->nkt", onehot, targets[:, :, 1:])
        seen = counts > 0
        v_control[seen] += value_lr * (sums[seen] / counts[seen][:, None] - v_control[seen])
    curve[:, -1] = policy() @ value_of
    return curve, r2


def late_share(rewards: np.ndarray, horizon: float) -> float:
    """The share of the designs' return differences that arrives after step `horizon` of the execution: sum over
    steps t >= horizon of the spread (std over designs) of the mean reward r_t(d), over the sum at every step."""
    spread = rewards.mean(1).std(0)  # (T,)
    return float(spread[int(np.ceil(horizon)):].sum() / max(spread.sum(), 1e-12))


def cross_fit(auc, folds: int = 2):
    """Each replicate's score at the step size chosen on the other replicates (cross-fitting, issue 51's review: each
    estimator its own step size, decided on data the test does not use).

    `auc`: a DataFrame with columns replicate, lr, auc (one row per replicate and step size). Replicate r is in fold
    r mod `folds`; a fold's step size is the one with the highest mean auc over the replicates of the other folds
    (ties: the smaller). Returns a DataFrame indexed by replicate (sorted) with columns fold, lr, auc."""
    import pandas as pd

    table = auc.pivot(index="replicate", columns="lr", values="auc").sort_index()
    fold = table.index.to_numpy() % folds
    rows = []
    for f in range(folds):
        train = table[fold != f].mean()
        best = float(train.index[int(np.argmax(train.to_numpy()))]) if (fold != f).any() else float(train.index[0])
        for rep in table.index[fold == f]:
            rows.append({"replicate": int(rep), "fold": f, "lr": best, "auc": float(table.loc[rep, best])})
    return pd.DataFrame(rows).set_index("replicate").sort_index()
