"""The bodygen DAG's stages: prepare (the crawler template, no torch), train (every arm on one seed) and
evaluate (every trained agent's final design with deterministic design and control; parameter counts).

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
def prepare(*, cfg, template, xml):
    """The initial morphology: its limb tree (JSON) and MJCF, compiled once by MuJoCo to check it."""
    import mujoco  # no torch in this stage

    from papers.bodygen.morphology import Body

    p = parse(cfg)
    body = Body.initial([list(leg) for leg in p.body["legs"]], p.body["size"], p.body["gear"])
    text = body.mjcf(p.env["root_radius"], p.env["init_height"], p.env["joint_range"], p.env["timestep"],
                     p.env["integrator"])
    model = mujoco.MjModel.from_xml_string(text)
    ensure_parent(xml).write_text(text)
    write_json({"limbs": [{"parent": l.parent, "u": l.u.tolist()} for l in body.limbs],
                "nq": int(model.nq), "nu": int(model.nu), "mass": float(model.body_mass.sum())}, template)


def read_template(path) -> dict:
    data = read_json(path)
    if "limbs" not in data or not data["limbs"]:
        raise ValueError(f"{path}: no 'limbs' in the prepared template")
    return data


# ---- train -------------------------------------------------------------------------------------
def train(*, cfg, seed: str, template, checkpoint, history):
    """Train every arm on one seed (each from its own seed + the arm's offset); checkpoint and history."""
    import torch

    from papers.bodygen.model import count_parameters
    from papers.bodygen.train import train_arm

    torch.set_num_threads(1)
    p = parse(cfg)
    read_template(template)
    seed = int(seed)
    states, rows = {}, []
    for name in p.arms:
        arm = ARMS[name]
        log.info("arm %s, seed %d", name, seed + arm["seed_offset"])
        agent, hist = train_arm(arm, p, seed + arm["seed_offset"], log=log.info)
        states[name] = agent.state_dict()
        rows += [{**h, "arm": name, "seed": seed, "parameters": count_parameters(agent)} for h in hist]
    torch.save({"states": states, "seed": seed, "model": dict(p.model), "body": dict(p.body)}, ensure_parent(checkpoint))
    write_parquet(pd.DataFrame(rows), history)


# ---- evaluate ----------------------------------------------------------------------------------
def design_record(body) -> dict:
    start, end = body.attach_points()
    from papers.bodygen.morphology import from_unit

    phys = from_unit(np.stack([l.u for l in body.limbs]))
    return {"parent": [l.parent for l in body.limbs], "start": start.tolist(), "end": end.tolist(),
            "size": phys[:, 2].tolist(), "gear": phys[:, 3].tolist()}


def evaluate(*, cfg, checkpoints, returns, designs, parameters):
    """Final design of every (arm, seed): deterministic design and control over `evaluate.episodes` episodes."""
    import torch

    from papers.bodygen.env import passive_rollout
    from papers.bodygen.model import count_parameters
    from papers.bodygen.train import make_agent, rollout

    torch.set_num_threads(1)
    p = parse(cfg)
    rows, bodies = [], {}
    for path in checkpoints:
        ckpt = torch.load(path, weights_only=False)
        seed = int(ckpt["seed"])
        for name, state in ckpt["states"].items():
            arm = ARMS[name]
            agent = make_agent(arm["arch"], p.model, p.body)
            agent.load_state_dict(state)
            agent.eval()
            # evaluation noise: its own stream per (arm seed), never the training one
            rng = np.random.default_rng([seed + arm["seed_offset"], 1])
            _, rew, alive, _, is_design, _, final = rollout(agent, arm, p, rng, p.evaluate["episodes"],
                                                             deterministic=True)
            per_episode = rew.sum(1)
            # The second half of the execution (sustained motion, past the start's transient; 0 once terminated)
            # and the same designs from the same start states with zero torque (what collapsing alone earns).
            late = rew[:, int(is_design.sum()) + p.env["control_steps"] // 2:].sum(1)
            passive, _ = passive_rollout(final, p.env, np.random.default_rng([seed + arm["seed_offset"], 1]))
            rows.append({"arm": name, "seed": seed, "return": float(per_episode.mean()),
                         "return_std": float(per_episode.std()),
                         "episode_length": float(alive[:, ~is_design].sum(1).mean()),
                         "late_return": float(late.mean()), "passive_return": float(passive.mean()),
                         "limbs": len(final[0].limbs)})
            bodies[f"{name}/{seed}"] = design_record(final[0])
    write_parquet(pd.DataFrame(rows), returns)
    write_json(bodies, designs)
    counts = []
    for label, model in (("this run", dict(p.model)), ("paper", {**dict(p.model), **PAPER_MODEL}),
                         ("heavy control", {**dict(p.model), **HEAVY_MODEL})):
        for arch in ("mosat", "gnn"):
            counts.append({"config": label, "arch": arch, "hidden": model["hidden"], "blocks": model["blocks"],
                           "head_hidden": model["head_hidden"],
                           "parameters": count_parameters(make_agent(arch, model, p.body))})
    write_parquet(pd.DataFrame(counts), parameters)
