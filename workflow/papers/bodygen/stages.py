"""The bodygen DAG's stages: prepare (every task's template, no torch), train (one arm on one task and seed),
credit_bandit (TCA against GAE on a design-only bandit) and evaluate (every trained agent's final design with
deterministic design and control; parameter counts).

Each function takes its parameters and its input and output paths explicitly, so it runs under Snakemake
(workflow/rules/bodygen.smk) and in tests alike.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from papers.bodygen.params import ARMS, parse
from papers.common.io import ensure_parent, read_json, write_json, write_parquet

log = logging.getLogger(__name__)

# Architectures whose parameter counts claim (d) states: the paper's own sizes (official config.yaml: hidden
# 64, 3 blocks, heads 128 x 128) and a heavy MoSAT that the "lightweight" criterion must reject (control).
PAPER_MODEL = {"hidden": 64, "blocks": 3, "head_hidden": 128}
HEAVY_MODEL = {"hidden": 256, "blocks": 6, "head_hidden": 256}


# ---- prepare -----------------------------------------------------------------------------------
def _ms_per_step(model, integrator: int, steps: int = 2000) -> float:
    """CPU milliseconds per MuJoCo step of `model` with `integrator` (timed here, for the report's compute note)."""
    import time

    import mujoco

    model.opt.integrator = integrator
    data = mujoco.MjData(model)
    t0 = time.process_time()
    mujoco.mj_step(model, data, nstep=steps)
    return 1e3 * (time.process_time() - t0) / steps


def prepare(*, cfg, template):
    """Every task's initial morphology: its limb tree and MJCF (JSON, per task), compiled once by MuJoCo to check
    it (a malformed template fails here, naming the task); and the cost of one physics step of a grown body (the
    template with two children on every leg) with Euler and RK4 integration, for the report."""
    import mujoco  # no torch in this stage

    from papers.bodygen.tasks import get_task
    from papers.bodygen.train import initial_body

    p = parse(cfg)
    out = {}
    for name in p.tasks:
        task = get_task(name)
        body = initial_body(task)
        text = body.mjcf(task, p.env["integrator"])
        try:
            model = mujoco.MjModel.from_xml_string(text)
        except ValueError as err:
            raise ValueError(f"bodygen.tasks: the template of task {name!r} does not compile: {err}") from err
        grown = body
        for _ in range(2):  # add a child to every limb that may have one: a body of the size co-design grows
            grown = grown.transform_skeleton(np.ones(len(grown.limbs), dtype=np.int64), task.max_depth, task.max_children)
        big = mujoco.MjModel.from_xml_string(grown.mjcf(task, p.env["integrator"]))
        out[name] = {"limbs": [{"parent": l.parent, "u": l.u.tolist()} for l in body.limbs], "nq": int(model.nq),
                     "nu": int(model.nu), "mass": float(model.body_mass.sum()), "mjcf": text,
                     "timing_limbs": len(grown.limbs),
                     "ms_per_step": {"Euler": _ms_per_step(big, mujoco.mjtIntegrator.mjINT_EULER),
                                     "RK4": _ms_per_step(big, mujoco.mjtIntegrator.mjINT_RK4)}}
    write_json(out, template)


def read_template(path, task: str) -> dict:
    data = read_json(path)
    if task not in data or not data[task].get("limbs"):
        raise ValueError(f"{path}: no 'limbs' of task {task!r} in the prepared templates")
    return data[task]


# ---- train -------------------------------------------------------------------------------------
def train(*, cfg, task: str, arm: str, seed: str, template, checkpoint, history):
    """Train one arm on one task and seed (from its own seed + the arm's offset); checkpoint and history."""
    import torch

    from papers.bodygen.model import count_parameters
    from papers.bodygen.tasks import get_task
    from papers.bodygen.train import train_arm

    torch.set_num_threads(1)
    p = parse(cfg)
    read_template(template, task)
    seed = int(seed)
    spec = get_task(task)
    if arm not in p.arms:
        raise ValueError(f"bodygen: arm {arm!r} is not in bodygen.arms {list(p.arms)}")
    spec_arm = ARMS[arm]
    log.info("task %s, arm %s, seed %d", task, arm, seed + spec_arm["seed_offset"])
    agent, hist = train_arm(spec_arm, p, seed + spec_arm["seed_offset"], log=log.info, task=spec)
    rows = [{**h, "task": task, "arm": arm, "seed": seed, "parameters": count_parameters(agent)} for h in hist]
    torch.save({"states": {arm: agent.state_dict()}, "task": task, "seed": seed, "model": dict(p.model)},
               ensure_parent(checkpoint))
    write_parquet(pd.DataFrame(rows), history)


# ---- the TCA bandit ------------------------------------------------------------------------------
def credit_bandit(*, cfg, curves):
    """TCA against GAE on the design-only bandit (papers.bodygen.bandit), every replicate, and the null control."""
    from papers.bodygen import bandit as B
    from papers.bodygen.tasks import get_task

    p = parse(cfg)
    c, ppo = p.credit, p.ppo
    task = get_task(p.tasks[0])
    horizon = 1.0 / (1.0 - ppo["gamma"] * ppo["lam"])  # GAE's effective horizon in steps
    rows = []
    for rep in range(c["seeds"]):
        rng = np.random.default_rng([rep, 5])
        bodies = B.designs(task, c["designs"], rng)
        rewards = B.scripted_rewards(bodies, task, p.env, c["noise_draws"], c["gait_period"], rng)
        value = rewards.sum(2).mean(1)
        noise = float(rewards.sum(2).std(1).mean())
        late = B.late_share(rewards, horizon)
        for estimator in ("tca", "gae"):
            for reward in ("design", "shuffled"):
                curve = B.learn(rewards, tca=estimator == "tca", iterations=c["iterations"], episodes=c["episodes"],
                                policy_lr=c["policy_lr"], value_lr=c["value_lr"], gamma=ppo["gamma"], lam=ppo["lam"],
                                rng=np.random.default_rng([rep, 6, reward == "shuffled"]), shuffle=reward == "shuffled")
                share = (curve - curve[0]) / (value.max() - curve[0])
                rows += [{"replicate": rep, "estimator": estimator, "reward": reward, "iteration": i, "J": float(j),
                          "share": float(sh), "best": float(value.max()), "uniform": float(value.mean()),
                          "start_noise": noise, "late_share": late, "gae_horizon": horizon}
                         for i, (j, sh) in enumerate(zip(curve, share))]
        log.info("replicate %d: designs' returns %s, late share %.2f", rep, np.round(value, 1), late)
    write_parquet(pd.DataFrame(rows), curves)


# ---- evaluate ----------------------------------------------------------------------------------
def design_record(body, task) -> dict:
    """A final design for the morphology figure: bones in the task's plane (the 3-D crawler seen from above)."""
    start, end = body.attach_points(task.root_attach)
    phys = body.physical()
    return {"plane": task.plane, "parent": [l.parent for l in body.limbs], "start": start.tolist(), "end": end.tolist(),
            "size": phys[:, 2].tolist(), "gear": phys[:, 3].tolist()}


def evaluate(*, cfg, checkpoints, returns, designs, parameters):
    """Final design of every (arm, seed): deterministic design and control over `evaluate.episodes` episodes."""
    import torch

    from papers.bodygen.env import passive_rollout
    from papers.bodygen.model import count_parameters
    from papers.bodygen.tasks import get_task
    from papers.bodygen.train import make_agent, rollout

    torch.set_num_threads(1)
    p = parse(cfg)
    rows, bodies = [], {}
    for path in checkpoints:
        ckpt = torch.load(path, weights_only=False)
        seed, task = int(ckpt["seed"]), get_task(ckpt["task"])
        for name, state in ckpt["states"].items():
            arm = ARMS[name]
            agent = make_agent(arm["arch"], p.model, task)
            agent.load_state_dict(state)
            agent.eval()
            # evaluation noise: its own stream per (arm seed), never the training one
            rng = np.random.default_rng([seed + arm["seed_offset"], 1])
            _, rew, alive, _, is_design, _, final = rollout(agent, arm, p, task, rng, p.evaluate["episodes"],
                                                             deterministic=True)
            per_episode = rew.sum(1)
            # The second half of the execution (sustained motion, past the start's transient; 0 once terminated)
            # and the same designs from the same start states with zero torque (what collapsing alone earns).
            late = rew[:, int(is_design.sum()) + p.env["control_steps"] // 2:].sum(1)
            passive, _, passive_late = passive_rollout(final, task, p.env,
                                                       np.random.default_rng([seed + arm["seed_offset"], 1]))
            rows.append({"task": task.name, "arm": name, "seed": seed, "return": float(per_episode.mean()),
                         "return_std": float(per_episode.std()),
                         "episode_length": float(alive[:, ~is_design].sum(1).mean()),
                         "late_return": float(late.mean()), "passive_return": float(passive.mean()),
                         "passive_late_return": float(passive_late.mean()),
                         "limbs": len(final[0].limbs)})
            bodies[f"{task.name}/{name}/{seed}"] = design_record(final[0], task)
    write_parquet(pd.DataFrame(rows), returns)
    write_json(bodies, designs)
    counts = []  # per task: its token width and TopoPE table differ
    for task in p.tasks:
        for label, model in (("this run", dict(p.model)), ("paper", {**dict(p.model), **PAPER_MODEL}),
                             ("heavy control", {**dict(p.model), **HEAVY_MODEL})):
            for arch in ("mosat", "gnn"):
                counts.append({"task": task, "config": label, "arch": arch, "hidden": model["hidden"],
                               "blocks": model["blocks"], "head_hidden": model["head_hidden"],
                               "parameters": count_parameters(make_agent(arch, model, get_task(task)))})
    write_parquet(pd.DataFrame(counts), parameters)
