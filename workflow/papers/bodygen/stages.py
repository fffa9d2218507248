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


# ---- train ----------------------------------------------------------------------------------------
# A run of `ppo.env_steps` simulated steps is split into `train_parts` chained jobs (config: the full scale's run does
# not fit one job's time limit): parts 1 .. train_parts - 1 (train_part) each write the whole training state at an
# iteration boundary (papers.bodygen.train.Run.state), the next resumes from it, and the last (train) writes the
# checkpoint and history that evaluate and report read. With train_parts 1, train is the whole run. Either way the
# result is the unsplit run's, bit for bit (tests/papers/test_bodygen.py). torch computes on the threads the rule
# gives the job (papers.common.runner.limit_threads: the `train` kind's); every part of a run must get as many.
def _run_to(p, task: str, arm: str, seed: str, part: int, resume):
    """The run of (task, arm, seed) trained up to the end of part `part` of p.train_parts, from part - 1's state."""
    import torch

    from papers.bodygen.tasks import get_task
    from papers.bodygen.train import Run, part_end, train_until

    if arm not in p.arms:
        raise ValueError(f"bodygen: arm {arm!r} is not in bodygen.arms {list(p.arms)}")
    if (resume is None) != (part == 1):
        raise ValueError(f"bodygen: part {part} of {p.train_parts} " + ("resumes from the previous part's state"
                         if part > 1 else "starts from scratch, it takes no state to resume from"))
    spec, spec_arm, seed = get_task(task), ARMS[arm], int(seed)
    log.info("task %s, arm %s, seed %d, part %d of %d (torch threads %d)", task, arm, seed + spec_arm["seed_offset"],
             part, p.train_parts, torch.get_num_threads())
    if resume is None:
        run = Run(spec_arm, p, seed + spec_arm["seed_offset"], spec)
    else:
        state = torch.load(resume, weights_only=False)
        if (state["task"], state["arm"], state["seed"], state["part"]) != (task, arm, seed, part - 1):
            raise ValueError(f"{resume}: the state of {state['task']}/{state['arm']}_{state['seed']} part "
                             f"{state['part']}, not of {task}/{arm}_{seed} part {part - 1}")
        run = Run.from_state(state["run"], spec_arm, p, spec)
    until = part_end(part, p.train_parts, p.ppo["env_steps"])
    return train_until(run, spec_arm, p, spec, until, log=log.info)


def train_part(*, cfg, task: str, arm: str, seed: str, part: str, template, state, resume=None):
    """Part `part` (1 .. train_parts - 1) of one arm's training on one task and seed: from part - 1's `resume` state
    (none for part 1) to the part's end (papers.bodygen.train.part_end); writes the whole training state."""
    import torch

    p = parse(cfg)
    read_template(template, task)
    part = int(part)
    if not 1 <= part < p.train_parts:
        raise ValueError(f"bodygen.train_parts is {p.train_parts}: parts 1 .. {p.train_parts - 1} write a state, "
                         f"the last is the train rule; got part {part}")
    run = _run_to(p, task, arm, seed, part, resume)
    torch.save({"task": task, "arm": arm, "seed": int(seed), "part": part, "parts": p.train_parts,
                "run": run.state()}, ensure_parent(state))


def train(*, cfg, task: str, arm: str, seed: str, template, checkpoint, history, resume=None):
    """Train one arm on one task and seed (from its own seed + the arm's offset), or its last part, from `resume`
    (part train_parts - 1's state) when bodygen.train_parts > 1; checkpoint and history of the whole run."""
    import torch

    from papers.bodygen.model import count_parameters

    p = parse(cfg)
    read_template(template, task)
    run = _run_to(p, task, arm, seed, p.train_parts, resume)
    rows = [{**h, "task": task, "arm": arm, "seed": int(seed), "parameters": count_parameters(run.agent)}
            for h in run.history]
    torch.save({"states": {arm: run.agent.state_dict()}, "task": task, "seed": int(seed), "model": dict(p.model)},
               ensure_parent(checkpoint))
    write_parquet(pd.DataFrame(rows), history)


# ---- the TCA bandit ------------------------------------------------------------------------------
# Keys of bodygen.credit read here that params.Params' default `credit` predates (editing params.py changes the code
# hash of every train job, so these defaults live here until the next retraining; config/config.yaml sets them all).
CREDIT_DEFAULTS = {"policy_lrs": [0.05 * 2.0 ** k for k in range(10)], "premise_iterations": 10, "folds": 2}


def credit_settings(p) -> dict:
    """bodygen.credit with the defaults above filled in, checked (errors name the key)."""
    c = {**CREDIT_DEFAULTS, **dict(p.credit)}
    lrs = list(c["policy_lrs"])
    if len(lrs) < 2 or any(not float(x) > 0 for x in lrs) or lrs != sorted(set(lrs)):
        raise ValueError(f"bodygen.credit.policy_lrs: at least two distinct positive step sizes in increasing order, "
                         f"got {lrs}")
    if not 1 <= int(c["premise_iterations"]) <= c["iterations"]:
        raise ValueError(f"bodygen.credit.premise_iterations: between 1 and credit.iterations ({c['iterations']}), "
                         f"got {c['premise_iterations']}")
    if not 2 <= int(c["folds"]) <= c["seeds"]:
        raise ValueError(f"bodygen.credit.folds: between 2 and credit.seeds ({c['seeds']}), got {c['folds']}")
    return c


def _share_rows(curve, r2, value, **keys) -> list[dict]:
    share = (curve - curve[0]) / (value.max() - curve[0])
    return [{**keys, "iteration": i, "J": float(j), "share": float(sh), "r2": float(r2[i]) if i < len(r2) else np.nan}
            for i, (j, sh) in enumerate(zip(curve, share))]


def credit_bandit(*, cfg, curves):
    """TCA against GAE on the design-only bandit (papers.bodygen.bandit; BodyGen Sec. 3.3), every replicate.

    Per replicate and estimator, the design policy learns at every step size of credit.policy_lrs side by side
    (bandit.learn_grid), and once at step size 0 (the uniform policy: the probe of the premise, how much of R(d) each
    estimator's design advantage carries while the critic learns). Runs: rewards by design with the critic learning
    (the claim); GAE with the critic frozen at 0 (the positive control: late rewards hidden from GAE by
    construction; TCA's design advantage, standardised, does not depend on the critic, so its rows of the claim's run
    serve there); the same designs with each execution's whole return paid at its first step (the ablation: nothing
    late for GAE's discount to damp, so the mechanism TCA addresses is absent); then rewards shuffled across designs
    (the null) at the step sizes cross-fitting chose for the claim (bandit.cross_fit)."""
    from papers.bodygen import bandit as B
    from papers.bodygen.tasks import get_task

    p = parse(cfg)
    c, ppo = credit_settings(p), p.ppo
    task = get_task(p.tasks[0])
    horizon = 1.0 / (1.0 - ppo["gamma"] * ppo["lam"])  # GAE's effective horizon in steps
    lrs = [0.0] + [float(x) for x in c["policy_lrs"]]
    common = dict(iterations=c["iterations"], episodes=c["episodes"], gamma=ppo["gamma"], lam=ppo["lam"])
    rows, kept = [], {}
    for rep in range(c["seeds"]):
        rng = np.random.default_rng([rep, 5])
        bodies = B.designs(task, c["designs"], rng)
        rewards = B.scripted_rewards(bodies, task, p.env, c["noise_draws"], c["gait_period"], rng)
        value = rewards.sum(2).mean(1)
        about = {"replicate": rep, "best": float(value.max()), "uniform": float(value.mean()),
                 "start_noise": float(rewards.sum(2).std(1).mean()), "late_share": B.late_share(rewards, horizon),
                 "gae_horizon": horizon}
        kept[rep] = rewards
        early = np.zeros_like(rewards)  # the ablation: each execution's whole return at its first step, nothing late
        early[:, :, 0] = rewards.sum(2)
        for estimator, reward, value_lr in (("tca", "design", c["value_lr"]), ("gae", "design", c["value_lr"]),
                                            ("gae", "frozen critic", 0.0), ("tca", "early", c["value_lr"]),
                                            ("gae", "early", c["value_lr"])):
            curve, r2 = B.learn_grid(early if reward == "early" else rewards, tca=estimator == "tca", lrs=lrs,
                                     value_lr=value_lr,
                                     rng=np.random.default_rng([rep, 6, 0]), **common)
            for lr, cu, rr in zip(lrs, curve, r2):
                rows += _share_rows(cu, rr, value, **about, estimator=estimator, reward=reward, lr=lr)
        log.info("replicate %d: designs' returns %s, late share %.2f", rep, np.round(value, 1), about["late_share"])
    table = pd.DataFrame(rows)
    for estimator in ("tca", "gae"):  # the null control at the claim's cross-fitted step sizes
        chosen = B.cross_fit(auc_table(table, estimator, "design"), c["folds"])
        for rep, lr in chosen.lr.items():
            rewards = kept[rep]
            curve = B.learn(rewards, tca=estimator == "tca", policy_lr=lr, value_lr=c["value_lr"], shuffle=True,
                            rng=np.random.default_rng([rep, 6, 1]), **common)
            about = table[table.replicate == rep].iloc[0][["replicate", "best", "uniform", "start_noise",
                                                           "late_share", "gae_horizon"]].to_dict()
            rows += _share_rows(curve, np.full(len(curve) - 1, np.nan), rewards.sum(2).mean(1), **about,
                                estimator=estimator, reward="shuffled", lr=lr)
    write_parquet(pd.DataFrame(rows), curves)


def auc_table(curves: pd.DataFrame, estimator: str, reward: str) -> pd.DataFrame:
    """Per replicate and step size (> 0), the policy's share of the possible improvement averaged over the
    iterations (the area under its learning curve: how far and how fast it improved): columns replicate, lr, auc."""
    sel = curves[(curves.estimator == estimator) & (curves.reward == reward) & (curves.lr > 0)]
    return sel.groupby(["replicate", "lr"], as_index=False).share.mean().rename(columns={"share": "auc"})


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
