"""Co-design with PPO: one arm's rollouts (design then execution), its credit assignment and its updates.

PPO (Schulman et al. 2017) with the official agent's layout (``genesis_agent.py``): per iteration whole
episodes until at least ``samples`` simulated control steps are collected (official ``min_batch_size``), advantages from :mod:`papers.bodygen.credit`, then ``epochs`` passes of minibatches of the
clipped surrogate :math:`\\min(\\rho_t \\hat A_t, \\mathrm{clip}(\\rho_t, 1-\\epsilon, 1+\\epsilon) \\hat A_t)`
(each sample's log-probability summed over its limbs) and a squared error on the normalised value targets,
separate Adam optimisers for policy and value, gradient norms clipped. Training stops once the arm has
simulated ``env_steps`` control steps (design steps do not simulate), so every arm gets the same budget.

Arms (``ARMS`` in params.py): the architecture (MoSAT, MoSAT without TopoPE, GraphConv), TCA on or off,
whether design steps run (``design: False``: the initial morphology, control only) and whether they act on the
body (``blind``: design actions are sampled and trained but the body stays the initial one).
"""
from __future__ import annotations

import random
import time

import numpy as np
import torch

from papers.bodygen import credit
from papers.bodygen.env import N_STAGES, Execution, n_features, tokens
from papers.bodygen.model import Agent, RunningNorm
from papers.bodygen.morphology import N_ATTR, Body
from papers.bodygen.tasks import Task, get_task

OBS_KEYS = ("x", "codes", "mask", "adj")
VALID_KEYS = ("valid_skel", "valid_attr", "valid_ctrl")
ACT_KEYS = ("skel", "attr", "ctrl")


def make_agent(arch: str, model: dict, task: Task) -> Agent:
    """The four networks of an arm; the control policy's initial log-std is the task's (official per-task cfg)
    unless `model` sets one for every task."""
    log_std = task.control_log_std if model.get("control_log_std") is None else model["control_log_std"]
    return Agent(arch, n_features(task.max_depth, task.sim_width), model["hidden"], model["blocks"],
                 model["head_hidden"], task.max_depth, model["attr_log_std"], log_std, code_base=task.code_base)


def initial_body(task: Task) -> Body:
    return Body.initial([list(leg) for leg in task.legs], task.size, task.gear, task.bounds)


def max_limbs(task: Task) -> int:
    """The largest tree allowed: the root keeps up to max(len(legs), max_children) children, every deeper limb
    up to max_children, over depths 0 .. max_depth - 1."""
    root, c = max(len(task.legs), task.max_children), task.max_children
    return 1 + sum(root * c ** (k - 1) for k in range(1, task.max_depth))


def trimmed(obs: dict) -> dict:
    """Torch tensors of a token batch, cut to its largest body (padding costs attention time)."""
    limbs = int(np.asarray(obs["mask"]).sum(1).max())
    out = {}
    for k in OBS_KEYS + VALID_KEYS + ACT_KEYS:
        if k in obs:
            v = torch.as_tensor(obs[k])
            out[k] = v[:, :limbs, :limbs] if k == "adj" else v[:, :limbs]
    return out


@torch.no_grad()
def rollout(agent: Agent, arm: dict, p, task: Task, rng: np.random.Generator, episodes: int,
            deterministic: bool = False):
    """`episodes` co-design episodes of `task` side by side.

    Returns the step records (tokens and actions, padded to the largest tree), rewards, alive and terminal
    flags (N, S), the design flags (S,), the tokens after the last step (for the bootstrap value) and the
    final bodies.
    """
    env_cfg = p.env
    limbs, depth = max_limbs(task), task.max_depth
    bodies = [initial_body(task) for _ in range(episodes)]

    def tok(stage, bodies):
        return tokens(bodies, stage, None, limbs, depth, task.sim_width, task.code_base)

    steps, rewards, alive, terminal = [], [], [], []
    live = np.ones(episodes, bool)

    def act(stage, t, dist_fn, mode, rows=None):
        """Sample (or take the mode of) the stage's policy for the bodies in `rows` (default all)."""
        sub = t if rows is None else {k: v[rows] for k, v in t.items()}
        dist = dist_fn(trimmed(sub))
        a = (mode(dist) if deterministic else dist.sample()).numpy()
        pad = np.zeros((episodes, limbs) + a.shape[2:], a.dtype)
        pad[slice(None) if rows is None else rows, :a.shape[1]] = a
        steps.append({"stage": stage, "tok": t, "act": pad})
        return pad

    def design_step():
        rewards.append(np.zeros(episodes))
        alive.append(np.ones(episodes, bool))
        terminal.append(np.zeros(episodes, bool))

    if arm["design"]:
        for _ in range(env_cfg["skel_steps"]):
            a = act(0, tok(0, bodies), agent.skel_dist, lambda d: d.probs.argmax(-1))
            if not arm["blind"]:
                bodies = [b.transform_skeleton(a[i, :len(b.limbs)], depth, task.max_children)
                          for i, b in enumerate(bodies)]
            design_step()
        t = tok(1, bodies)
        a = act(1, t, agent.attr_dist, lambda d: d.mean)
        if not arm["blind"]:
            bodies = [b.transform_attributes(a[i, :len(b.limbs)] * t["valid_attr"][i, :len(b.limbs)])
                      for i, b in enumerate(bodies)]
        design_step()
    sim = Execution(bodies, task, env_cfg, rng)
    base = tok(2, bodies)  # the structure is fixed during execution: only x changes
    sim_slice = slice(depth + N_STAGES, depth + N_STAGES + task.sim_width)
    for _ in range(env_cfg["control_steps"]):
        rows = np.nonzero(live)[0]  # terminated bodies are neither simulated nor fed to the policy
        t = {**base, "x": base["x"].copy()}
        for i, feats in zip(rows, sim.sim_features(rows)):
            t["x"][i, :len(feats), sim_slice] = feats
        a = act(2, t, agent.ctrl_dist, lambda d: d.mean, rows)
        alive.append(live.copy())
        r, done = sim.step(a, env_cfg["ctrl_cost"], live)
        rewards.append(r)
        terminal.append(done)
        live &= ~done
        if not live.any():
            break
    last = {**base, "x": base["x"].copy()}
    for i, feats in enumerate(sim.sim_features()):
        last["x"][i, :len(feats), sim_slice] = feats
    return (steps, np.stack(rewards, 1), np.stack(alive, 1), np.stack(terminal, 1),
            np.array([s["stage"] < 2 for s in steps]), last, bodies)


def flatten(steps) -> dict:
    """Step-major records -> one batch of N * S samples (sample index = step * N + episode)."""
    out = {k: np.concatenate([s["tok"][k] for s in steps]) for k in OBS_KEYS + VALID_KEYS}
    out["stage"] = np.concatenate([np.full(len(s["act"]), s["stage"]) for s in steps])
    for stage, key in enumerate(ACT_KEYS):
        proto = next((s["act"] for s in steps if s["stage"] == stage), None)
        shape = steps[0]["tok"]["x"].shape[1:2] + ((N_ATTR,) if key == "attr" else ())
        out[key] = np.concatenate([s["act"] if s["stage"] == stage else
                                   np.zeros((len(s["act"]),) + shape, proto.dtype if proto is not None else np.float32)
                                   for s in steps])
    out["skel"] = out["skel"].astype(np.int64)
    return out


def batch_log_prob(agent: Agent, b: dict, idx: np.ndarray) -> torch.Tensor:
    """Log-probabilities of samples `idx` of batch `b` under the current policies, each by its stage."""
    out = torch.zeros(len(idx))
    stage = b["stage"][idx]
    for s in (0, 1, 2):
        rows = np.nonzero(stage == s)[0]
        if len(rows) == 0:
            continue
        sub = trimmed({k: b[k][idx[rows]] for k in OBS_KEYS + VALID_KEYS + ACT_KEYS})
        act = {k: sub[k] for k in ACT_KEYS}
        valid = {k: sub[f"valid_{k}"] for k in ACT_KEYS}
        out[torch.as_tensor(rows)] = agent.log_prob(s, sub, act, valid)
    return out


def values_of(agent: Agent, b: dict, idx: np.ndarray) -> torch.Tensor:
    return agent.value(trimmed({k: b[k][idx] for k in OBS_KEYS}))


class Run:
    """Everything one arm's training carries from one PPO iteration to the next: the agent (its networks and
    observation normaliser), the two Adam optimisers, the return normalisers, the random streams (torch's global
    generator: initial weights and sampled actions; numpy's `rng`: the env's start noise and the minibatch order),
    the counters (simulated steps, iterations) and the history rows so far.

    There are no schedules to carry: learning rates, clip and loss weights are constant (official genesis_agent.py
    without annealing), and no entropy bonus. Nor an episode in flight: every iteration simulates whole episodes
    (a fresh :class:`papers.bodygen.env.Execution` per rollout batch), so at an iteration boundary the env's only
    state is `rng`. :meth:`state` / :meth:`from_state` therefore resume a run bit for bit at any iteration boundary
    (tests/papers/test_bodygen.py), as long as torch computes on as many threads as before.
    """

    def __init__(self, arm: dict, p, seed: int, task: Task):
        # the seeding block: every stream this run draws from
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.agent = make_agent(arm["arch"], p.model, task)
        is_value = lambda name: name.startswith(("enc.value", "value_head"))  # noqa: E731
        self.policy_params = [q for n, q in self.agent.named_parameters() if not is_value(n)]
        self.value_params = [q for n, q in self.agent.named_parameters() if is_value(n)]
        # one kernel per op, not per tensor
        self.opt_pi = torch.optim.Adam(self.policy_params, lr=p.ppo["policy_lr"], foreach=True)
        self.opt_v = torch.optim.Adam(self.value_params, lr=p.ppo["value_lr"], foreach=True)
        # Running normalisers of the value targets: one per group under TCA (design / control), one otherwise.
        self.ret_norm = {"design": RunningNorm(1, clip=1e9), "control": RunningNorm(1, clip=1e9)}
        self.history, self.env_steps, self.it = [], 0, 0

    def state(self) -> dict:
        """The run at an iteration boundary, as plain tensors, arrays and numbers (torch.save writes it)."""
        return {"agent": self.agent.state_dict(), "opt_pi": self.opt_pi.state_dict(), "opt_v": self.opt_v.state_dict(),
                "ret_norm": {k: v.state_dict() for k, v in self.ret_norm.items()},
                "rng": {"torch": torch.get_rng_state(), "numpy": self.rng.bit_generator.state,
                        # not drawn from by the training loop, carried so that nothing else could diverge
                        "numpy_global": np.random.get_state(), "python": random.getstate()},
                "env_steps": self.env_steps, "iteration": self.it, "history": list(self.history)}

    @classmethod
    def from_state(cls, state: dict, arm: dict, p, task: Task) -> "Run":
        """The run `state` was taken from, ready for its next iteration."""
        run = cls(arm, p, 0, task)  # the networks' shapes and the optimisers' parameter groups; then overwritten
        run.agent.load_state_dict(state["agent"])
        run.opt_pi.load_state_dict(state["opt_pi"])
        run.opt_v.load_state_dict(state["opt_v"])
        for k, rn in run.ret_norm.items():
            rn.load_state_dict(state["ret_norm"][k])
        rngs = state["rng"]
        torch.set_rng_state(rngs["torch"])
        run.rng.bit_generator.state = rngs["numpy"]
        np.random.set_state(rngs["numpy_global"])
        random.setstate(rngs["python"])
        run.env_steps, run.it, run.history = int(state["env_steps"]), int(state["iteration"]), list(state["history"])
        return run


def part_end(part: int, parts: int, env_steps: int) -> int:
    """The simulated steps at which part `part` (1 .. `parts`) of a run split into `parts` jobs stops: the first
    iteration boundary at or past ceil(part / parts x env_steps). Iterations are whole (the unsplit loop, too, checks
    its budget only between iterations), so the parts together run exactly the unsplit run's iterations."""
    if not 1 <= part <= parts:
        raise ValueError(f"part {part} of {parts}: parts are numbered 1 .. {parts}")
    return -(-part * env_steps // parts)


def train_arm(arm: dict, p, seed: int, log=print, task: Task | None = None) -> tuple[Agent, list[dict]]:
    """Train one arm from scratch on one seed in `task` (default: the config's first); returns the agent and one
    history row per iteration."""
    task = get_task(p.tasks[0]) if task is None else task
    run = train_until(Run(arm, p, seed, task), arm, p, task, p.ppo["env_steps"], log=log)
    return run.agent, run.history


def train_until(run: Run, arm: dict, p, task: Task, until: int, log=print) -> Run:
    """PPO iterations of `run` while it has simulated fewer than `until` control steps (``ppo.env_steps`` for a
    whole run, :func:`part_end` for a part of one); returns `run`, advanced in place."""
    ppo = p.ppo
    agent, rng, ret_norm = run.agent, run.rng, run.ret_norm
    opt_pi, opt_v, policy_params, value_params = run.opt_pi, run.opt_v, run.policy_params, run.value_params
    history, env_steps, it = run.history, run.env_steps, run.it
    n = ppo["episodes"]
    group_of = (lambda g: g) if arm["tca"] else (lambda g: "control")  # noqa: E731

    def unscale(v, group):
        rn = ret_norm[group_of(group)]
        return v if rn.count < 2 else v * rn.std().item() + rn.mean.item()

    while env_steps < until:
        t0, c0 = time.perf_counter(), time.process_time()
        # Collect batches of `n` episodes side by side until the iteration holds `samples` simulated control steps
        # (official min_batch_size), so that every arm gets as many updates per simulated step.
        runs, collected = [], 0
        while collected < ppo["samples"]:
            runs.append(rollout(agent, arm, p, task, rng, n))
            steps, rewards, alive, terminal, is_design, last, bodies = runs[-1]
            collected += int(alive[:, ~is_design].sum())
        env_steps += collected
        c_rollout = time.process_time() - c0  # CPU time of the rollouts (policy forward passes and MuJoCo)
        flats = [flatten(r[0]) for r in runs]
        alive_flat = [r[2].T.reshape(-1) for r in runs]  # step-major, as the flattened batch
        agent.norm.update(torch.as_tensor(np.concatenate(
            [f["x"][f["mask"] & a[:, None]] for f, a in zip(flats, alive_flat)])))  # one normaliser, every token
        parts = []
        for (steps, rewards, alive, terminal, is_design, last, bodies), b, a in zip(runs, flats, alive_flat):
            everything = np.arange(len(b["stage"]))
            with torch.no_grad():
                v_norm = values_of(agent, b, everything).numpy().reshape(-1, n).T  # (N, S)
                v_last = agent.value(trimmed({k: last[k] for k in OBS_KEYS})).numpy()
                old_logp = batch_log_prob(agent, b, everything).numpy()
            values = np.where(is_design[None, :], unscale(v_norm, "design"), unscale(v_norm, "control"))
            adv, targets = credit.estimate(rewards, values, unscale(v_last, "control"), terminal.astype(float),
                                           is_design, gamma=ppo["gamma"], lam=ppo["lam"], tca=arm["tca"])
            design = np.broadcast_to(is_design[None, :], adv.shape)
            keep = {k: v[a] for k, v in b.items()}  # only the samples of live steps
            keep.update(adv=adv.T.reshape(-1)[a], target=targets.T.reshape(-1)[a], design=design.T.reshape(-1)[a],
                        old_logp=old_logp[a])
            parts.append(keep)
        b = {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}
        design = b["design"]
        adv = credit.standardise(b["adv"], [design, ~design] if arm["tca"] else [np.ones_like(design)])
        tgt_norm = np.zeros_like(b["target"])
        for group, sel in (("design", design), ("control", ~design)) if arm["tca"] else \
                (("control", np.ones_like(design)),):
            if sel.any():
                ret_norm[group].update(torch.as_tensor(b["target"][sel][:, None]))
                rn = ret_norm[group]
                tgt_norm[sel] = (b["target"][sel] - rn.mean.item()) / rn.std().item()
        b["adv"] = torch.as_tensor(adv, dtype=torch.float32)
        b["ret"] = torch.as_tensor(tgt_norm, dtype=torch.float32)
        old_logp = torch.as_tensor(b["old_logp"])
        samples = np.arange(len(b["stage"]))
        for _ in range(ppo["epochs"]):
            perm = samples[rng.permutation(len(samples))]
            for start in range(0, len(perm), ppo["minibatch"]):
                idx = perm[start:start + ppo["minibatch"]]
                ratio = torch.exp(batch_log_prob(agent, b, idx) - old_logp[idx])
                a = b["adv"][idx]
                loss_pi = -torch.min(ratio * a, ratio.clamp(1 - ppo["clip"], 1 + ppo["clip"]) * a).mean()
                loss_v = ((values_of(agent, b, idx) - b["ret"][idx]) ** 2).mean()
                opt_pi.zero_grad()
                opt_v.zero_grad()
                (loss_pi + loss_v).backward()  # disjoint parameters: one backward serves both optimisers
                torch.nn.utils.clip_grad_norm_(policy_params, ppo["max_grad_norm"], foreach=True)
                torch.nn.utils.clip_grad_norm_(value_params, ppo["max_grad_norm"], foreach=True)
                opt_pi.step()
                opt_v.step()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        episode_return = float(np.concatenate([r[1].sum(1) for r in runs]).mean())
        length = float(np.concatenate([r[2][:, ~r[4]].sum(1) for r in runs]).mean())
        limbs = float(np.mean([len(bd.limbs) for r in runs for bd in r[6]]))
        history.append({"iteration": it, "env_steps": env_steps, "train_return": episode_return,
                        "episode_length": length, "episodes": n * len(runs), "limbs": limbs, "seconds": seconds,
                        "cpu_seconds": cpu, "rollout_cpu_seconds": c_rollout, "samples": collected})
        log(f"iter {it}: env steps {env_steps} return {episode_return:.3f} limbs {limbs:.2f} ({seconds:.2f} s)")
        it += 1
    run.env_steps, run.it = env_steps, it
    return run
