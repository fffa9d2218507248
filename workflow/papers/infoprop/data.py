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


# How each task's observation maps to the simulator state: qpos without its first `excluded` entries (the
# unobserved x, or x and y), then qvel, clipped to +-`velocity_clip` where the environment clips it (gymnasium's
# Hopper-v5 and Walker2d-v5); `kwargs` drop the extra observation terms of Humanoid-v5 and Ant-v5 (cinert, cvel,
# actuator and contact forces), so that an observation restores the simulator (exactly where nothing is clipped).
ENV_SPECS = {
    "HalfCheetah-v5": {"excluded": 1, "velocity_clip": None, "kwargs": {}},
    "Hopper-v5": {"excluded": 1, "velocity_clip": 10.0, "kwargs": {}},
    "Walker2d-v5": {"excluded": 1, "velocity_clip": 10.0, "kwargs": {}},
    "Humanoid-v5": {"excluded": 2, "velocity_clip": None, "kwargs": {
        "include_cinert_in_observation": False, "include_cvel_in_observation": False,
        "include_qfrc_actuator_in_observation": False, "include_cfrc_ext_in_observation": False}},
    "Ant-v5": {"excluded": 2, "velocity_clip": None, "kwargs": {"include_cfrc_ext_in_observation": False}},
}


def make_env(name: str):
    """The bare MuJoCo environment (no time limit or checker wrappers: episodes are cut here), its observation
    restricted to (qpos without the unobserved position, qvel) as :data:`ENV_SPECS` says."""
    import gymnasium as gym

    if name not in ENV_SPECS:
        raise ValueError(f"infoprop.env = {name!r}: one of {list(ENV_SPECS)}")
    return gym.make(name, **ENV_SPECS[name]["kwargs"]).unwrapped


def _excluded(env) -> int:
    return ENV_SPECS[env.spec.id]["excluded"]


def restore(env, obs: np.ndarray) -> None:
    """Set the simulator to the state behind `obs` = (qpos without the unobserved x (and y), qvel): those
    coordinates do not enter the dynamics, so they are set to 0."""
    k, nq = _excluded(env), env.model.nq
    qpos = np.concatenate([np.zeros(k), obs[: nq - k]])
    qvel = obs[nq - k: nq - k + env.model.nv]
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


def observe(env, state: np.ndarray) -> np.ndarray:
    """Observations (B, obs_dim) of full physics states (B, nstate) laid out as mjSTATE_FULLPHYSICS (time, qpos,
    qvel, ...), as the environment's own observation would read them."""
    spec, nq, nv = ENV_SPECS[env.spec.id], env.model.nq, env.model.nv
    qpos, qvel = state[:, 1 + spec["excluded"]: 1 + nq], state[:, 1 + nq: 1 + nq + nv]
    if spec["velocity_clip"] is not None:
        qvel = np.clip(qvel, -spec["velocity_clip"], spec["velocity_clip"])
    return np.concatenate([qpos, qvel], 1)


def unhealthy(env, state: np.ndarray) -> np.ndarray:
    """Which states (B, nstate) end an episode by the task's own termination (False throughout for tasks that never
    terminate): the environment's `is_healthy`, read state by state."""
    if not getattr(env, "_terminate_when_unhealthy", False):
        return np.zeros(len(state), dtype=bool)
    nq, nv = env.model.nq, env.model.nv
    out = np.zeros(len(state), dtype=bool)
    for i, x in enumerate(state):
        env.data.qpos[:], env.data.qvel[:] = x[1: 1 + nq], x[1 + nq: 1 + nq + nv]
        out[i] = not env.is_healthy
    return out


def continue_true(env, w, d: dict, starts: np.ndarray, samples: int, horizon: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """The true state distribution: from each start, `samples` continuations of `horizon` steps.

    Every continuation steps at once through MuJoCo's batched rollout (``mujoco.rollout``: `frame_skip` physics steps
    per control step with the action held, exactly what ``env.step`` does). Returns states (N, M, H, obs_dim) after
    steps 1..H and an alive mask (N, M, H) (False once the task's own termination fired; HalfCheetah never
    terminates); a terminated continuation keeps its last state.
    """
    import mujoco
    from mujoco import rollout as batched

    n, dim = starts.shape
    m_, spec = env.model, mujoco.mjtState.mjSTATE_FULLPHYSICS
    first = np.zeros((n, mujoco.mj_stateSize(m_, spec)))
    for i in range(n):
        restore(env, starts[i])
        mujoco.mj_getState(m_, env.data, first[i], spec)
    state = np.repeat(first, samples, axis=0)  # (N M, nstate), sample-fastest
    obs = np.repeat(starts, samples, axis=0)
    low, high = env.action_space.low, env.action_space.high
    states = np.zeros((n * samples, horizon, dim))
    alive = np.ones((n * samples, horizon), dtype=bool)
    live = np.ones(n * samples, dtype=bool)
    scratch = mujoco.MjData(m_)
    for t in range(horizon):
        a = act(w, obs, d["policy_noise"], rng)
        applied = np.clip(a + d["process_noise"] * rng.standard_normal(a.shape), low, high)
        rows = np.flatnonzero(live)
        if rows.size == 0:  # every continuation has ended (mujoco.rollout needs a non-empty batch)
            states[:, t:] = obs[:, None]
            alive[:, t:] = False
            break
        out, _ = batched.rollout(m_, scratch, state[rows], np.repeat(applied[rows, None], env.frame_skip, 1),
                                 nstep=env.frame_skip)
        state[rows] = out[:, -1]
        obs[rows] = observe(env, state[rows])
        states[:, t] = obs
        ended = np.zeros_like(live)
        ended[rows] = unhealthy(env, state[rows])
        alive[:, t] = live  # the step that terminates is still a sample; later ones are not
        live &= ~ended
        alive[~live, t + 1:] = False
    return states.reshape(n, samples, horizon, dim), alive.reshape(n, samples, horizon)


def shift_of(shifts, seed: int) -> float:
    """The rollout policy's shift of replicate `seed`: the regimes of rollout.policy_shifts in turn, so that the
    replicates span them (a claim over replicates then speaks for every regime, not one)."""
    return float(shifts[seed % len(shifts)])


def prepare(*, cfg, seed: str, data):
    """One seed's logged transitions, held-out start states and their true continuations under the seed's rollout
    policy (:func:`shift_of`), as one .npz."""
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
    shifts = [shift_of(r["policy_shifts"], seed)]
    w_rollout = shifted_policies(w, p.data["gain"], shifts, seed)
    true = [continue_true(env, wk, p.data, starts, r["samples"], r["horizon"], rng) for wk in w_rollout]
    np.savez(data, w=w, w_rollout=w_rollout, shifts=np.asarray(shifts, dtype=float), starts=starts,
             true_states=np.stack([t[0] for t in true]), true_alive=np.stack([t[1] for t in true]),
             **{f"train_{k}": v for k, v in train.items()})
    log.info("seed %d: %d training transitions, %d starts x %d true continuations of %d steps under policy shift %g",
             seed, len(train["obs"]), r["starts"], r["samples"], r["horizon"], shifts[0])


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
