"""The true system and the logged data: a MuJoCo task from gymnasium, a noisy feedback policy, process noise.

The rollout-quality study (issue 29, Data) needs a true state distribution to compare model rollouts with:
from each start state the simulator is continued under the same noisy policy, with its own process noise,
`samples` times. The process noise is an unobserved actuator noise (the applied torque is the commanded
action plus Gaussian noise, clipped to the actuator range): the model sees the commanded action, so this noise
is the aleatoric part of the transition it has to learn. No torch here: a job's start-up is most of the smoke
DAG's time.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from papers.infoprop.params import parse

log = logging.getLogger(__name__)


def make_env(name: str):
    """The bare MuJoCo environment (no time limit or checker wrappers: episodes are cut here)."""
    import gymnasium as gym

    return gym.make(name).unwrapped


def restore(env, obs: np.ndarray) -> None:
    """Set the simulator to the state behind `obs` = (qpos[1:], qvel): the x position is not observed and
    does not enter the dynamics, so it is set to 0."""
    nq = env.model.nq
    qpos = np.concatenate([[0.0], obs[: nq - 1]])
    qvel = obs[nq - 1: nq - 1 + env.model.nv]
    env.set_state(qpos, qvel)


def policy_matrix(obs_dim: int, act_dim: int, gain: float, seed: int) -> np.ndarray:
    """W of the logging policy, (act_dim, obs_dim), drawn per seed."""
    rng = np.random.default_rng([seed, 11])
    return rng.normal(0.0, gain / np.sqrt(obs_dim), size=(act_dim, obs_dim))


def shifted_policies(w: np.ndarray, gain: float, shifts, seed: int) -> np.ndarray:
    """The rollout policies W + shift x D, one direction D ~ N(0, gain^2 / obs_dim) per seed: (K, act_dim, obs_dim)."""
    d = np.random.default_rng([seed, 13]).normal(0.0, gain / np.sqrt(w.shape[1]), size=w.shape)
    return np.stack([w + s * d for s in shifts])


def act(w: np.ndarray, obs: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """The noisy linear feedback policy a = clip(tanh(W s) + noise eps, -1, 1); obs (..., obs_dim) -> (..., act_dim)."""
    a = np.tanh(obs @ w.T) + noise * rng.standard_normal(obs.shape[:-1] + (w.shape[0],))
    return np.clip(a, -1.0, 1.0)


def step(env, action: np.ndarray, process_noise: float, rng: np.random.Generator):
    """One step of the true system: the commanded action plus actuator noise, clipped to the actuator range."""
    low, high = env.action_space.low, env.action_space.high
    applied = np.clip(action + process_noise * rng.standard_normal(action.shape), low, high)
    obs, reward, terminated, _, _ = env.step(applied)
    return obs, float(reward), bool(terminated)


def log_episodes(env, w, d: dict, episodes: int, rng: np.random.Generator) -> dict:
    """`episodes` episodes of at most episode_steps under the noisy policy: transitions (obs, act, rew, next_obs)."""
    obs_l, act_l, rew_l, next_l, done_l = [], [], [], [], []
    for _ in range(episodes):
        obs, _ = env.reset(seed=int(rng.integers(2**31)))
        for _ in range(d["episode_steps"]):
            a = act(w, obs, d["policy_noise"], rng)
            nxt, r, terminated = step(env, a, d["process_noise"], rng)
            obs_l.append(obs), act_l.append(a), rew_l.append(r), next_l.append(nxt), done_l.append(terminated)
            obs = nxt
            if terminated:
                break
    return {"obs": np.array(obs_l), "act": np.array(act_l), "rew": np.array(rew_l), "next_obs": np.array(next_l),
            "done": np.array(done_l)}


def continue_true(env, w, d: dict, starts: np.ndarray, samples: int, horizon: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """The true state distribution: from each start, `samples` continuations of `horizon` steps.

    Returns states (N, M, H, obs_dim) after steps 1..H and an alive mask (N, M, H) (False once the
    environment's own termination fired; HalfCheetah never terminates).
    """
    n, dim = starts.shape
    states = np.zeros((n, samples, horizon, dim))
    alive = np.ones((n, samples, horizon), dtype=bool)
    for i in range(n):
        for j in range(samples):
            restore(env, starts[i])
            obs = starts[i]
            for t in range(horizon):
                obs, _, terminated = step(env, act(w, obs, d["policy_noise"], rng), d["process_noise"], rng)
                states[i, j, t] = obs
                if terminated:
                    states[i, j, t + 1:] = obs
                    alive[i, j, t + 1:] = False
                    break
    return states, alive


def prepare(*, cfg, seed: str, data):
    """One seed's logged transitions, held-out start states and their true continuations under each rollout
    policy (rollout.policy_shifts), as one .npz."""
    p = parse(cfg)
    seed = int(seed)
    rng = np.random.default_rng([seed, 1])
    env = make_env(p.env)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    w = policy_matrix(obs_dim, act_dim, p.data["gain"], seed)
    train = log_episodes(env, w, p.data, p.data["train_episodes"], rng)
    held = log_episodes(env, w, p.data, p.data["heldout_episodes"], rng)
    r = p.rollout
    if len(held["obs"]) < r["starts"]:
        raise ValueError(f"infoprop: {len(held['obs'])} held-out states for rollout.starts = {r['starts']}: raise "
                         f"data.heldout_episodes")
    pick = np.sort(rng.choice(len(held["obs"]), size=r["starts"], replace=False))
    starts = held["obs"][pick]
    w_rollout = shifted_policies(w, p.data["gain"], r["policy_shifts"], seed)
    true = [continue_true(env, wk, p.data, starts, r["samples"], r["horizon"], rng) for wk in w_rollout]
    np.savez(data, w=w, w_rollout=w_rollout, shifts=np.asarray(r["policy_shifts"], dtype=float), starts=starts,
             true_states=np.stack([t[0] for t in true]), true_alive=np.stack([t[1] for t in true]),
             **{f"train_{k}": v for k, v in train.items()})
    log.info("seed %d: %d training transitions, %d starts x %d true continuations of %d steps under %d policies", seed,
             len(train["obs"]), r["starts"], r["samples"], r["horizon"], len(w_rollout))


def read_prepared(path) -> dict:
    """What :func:`prepare` wrote; a missing or incomplete file stops with its path."""
    keys = ("w", "w_rollout", "shifts", "starts", "true_states", "true_alive", "train_obs", "train_act", "train_rew", "train_next_obs")
    if not Path(path).is_file():
        raise FileNotFoundError(f"infoprop: prepared data {path} does not exist")
    with np.load(path) as z:
        missing = [k for k in keys if k not in z.files]
        if missing:
            raise ValueError(f"infoprop: {path} lacks arrays {missing}")
        return {k: z[k] for k in z.files}
