"""The cost of a full-scale train job, measured: one PPO iteration of BodyGen's co-design (Sec. 3, the official PPO
settings of config/full.yaml) timed on this machine, and the wall minutes a 50M-step job needs from it.

Issue 51's review found config/full.yaml's train_minutes (3000, from the default scale's cost per step) about 3x too
low: the full scale's widths (hidden 64, 3 blocks, heads 128), 10 epochs and RK4 cost far more per simulated step.
So the estimate is measured at the full scale's own settings: :func:`step_cost` runs one iteration of
:func:`papers.bodygen.train.train_arm` (rollouts of the co-design episode, then the PPO update) with the full config,
shortened only in the number of samples, and reads its CPU timers; :func:`train_minutes` turns the CPU time per
simulated step into minutes for ``env_steps`` steps. The PPO update's cost per sample does not depend on the number
of samples per iteration (it is ``epochs`` passes over the samples in minibatches), so one short iteration measures
the per-step cost of a long one; bodies grow during co-design, which ``margin`` covers.

``workflow/papers/bodygen/time_full_scale.py`` prints both for the repository's configs.
"""
from __future__ import annotations

import copy
import math
import time


def merged_config(base: dict, overlay: dict) -> dict:
    """`overlay` over `base`, mappings merged key by key (as Snakemake merges --configfile over config.yaml)."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        out[key] = merged_config(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else copy.deepcopy(value)
    return out


def step_cost(cfg: dict, *, task: str | None = None, arm: str = "bodygen", samples: int = 2000,
              control_steps: int = 250, threads: int = 1, seed: int = 0) -> dict:
    """CPU and wall milliseconds per simulated control step of one PPO iteration of `arm` on `task` (default: the
    config's first) under `cfg` (a bodygen config section), with the iteration cut to `samples` control steps and
    episodes to `control_steps` (so that a batch of episodes fills it), everything else as configured; torch on
    `threads` intra-op threads. Returns ms_per_step (CPU), rollout_ms_per_step (CPU of the rollouts: policy forward
    passes and MuJoCo), update_ms_per_step, wall_ms_per_step, samples, and the settings timed."""
    import torch

    from papers.bodygen.params import ARMS, parse
    from papers.bodygen.tasks import get_task
    from papers.bodygen.train import train_arm

    cfg = merged_config(cfg, {"arms": [arm], "env": {"control_steps": control_steps},
                              "ppo": {"env_steps": samples, "samples": samples}, "train_parts": 1})
    if task is not None:
        cfg["tasks"] = [task]
    p = parse(cfg)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        t0 = time.perf_counter()
        _, history = train_arm(ARMS[arm], p, seed, log=lambda *a: None, task=get_task(p.tasks[0]))
        wall = time.perf_counter() - t0
    finally:
        torch.set_num_threads(before)
    n = sum(h["samples"] for h in history)
    cpu, roll = sum(h["cpu_seconds"] for h in history), sum(h["rollout_cpu_seconds"] for h in history)
    return {"ms_per_step": 1e3 * cpu / n, "rollout_ms_per_step": 1e3 * roll / n,
            "update_ms_per_step": 1e3 * (cpu - roll) / n, "wall_ms_per_step": 1e3 * wall / n, "samples": n,
            "task": p.tasks[0], "arm": arm, "threads": threads, "model": dict(p.model),
            "integrator": p.env["integrator"], "epochs": p.ppo["epochs"], "minibatch": p.ppo["minibatch"]}


def train_minutes(ms_per_step: float, env_steps: int, margin: float = 1.5) -> int:
    """Wall minutes of a train job of `env_steps` simulated steps at `ms_per_step` (one thread: CPU time is wall
    time), times `margin` (bodies grow during co-design; machines differ), rounded up."""
    if ms_per_step <= 0 or env_steps <= 0 or margin < 1:
        raise ValueError(f"train_minutes: ms_per_step and env_steps > 0 and margin >= 1, got {ms_per_step}, "
                         f"{env_steps}, {margin}")
    return math.ceil(env_steps * ms_per_step * margin / 60_000)
