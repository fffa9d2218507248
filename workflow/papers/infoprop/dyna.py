"""Infoprop-Dyna against MBPO-style Dyna (claim c): SAC trained on model rollouts at equal real environment steps.

The paper's Sec. 6 (Infoprop-Dyna, Alg. 1; official ``mbrl/algorithms/infoprop_dyna.py`` on MBRL-Lib, read, not
copied) and MBPO (Janner et al. 2019) share one loop; only the rollouts differ. Every ``model_every`` real steps:

1. fit the probabilistic ensemble (:mod:`papers.infoprop.model`, warm-started, every member on its own bootstrap)
   to all real transitions so far;
2. from B = ``rollouts_per_step x model_every`` start states drawn from the real data, roll the model out under
   the current SAC policy (actions sampled) and store the accepted transitions in a model buffer that keeps the
   last ``retain_rounds`` rounds;

and at every real step (one action of the sampled policy on the true system) take ``updates_per_step`` SAC updates
on batches with a share ``real_ratio`` of real transitions and the rest from the model buffer.

The arms (one per rollout scheme, :data:`ARMS`):

* ``mbpo``: MBPO's rollouts, a random member's sample each step (:func:`papers.infoprop.propagation.step`
  ``"mbpo"``) for a fixed ``mbpo_horizon`` steps.
* ``infoprop``: Infoprop's step (Sec. 4, Eqs. 7-10) for at most ``infoprop_horizon`` steps, each rollout stopped
  (and the stopping transition dropped) when a dimension's information loss exceeds lambda1 or its running sum
  exceeds lambda2 (Sec. 5); the thresholds come, every round, from one-step losses of the model on a batch of real
  (s, a) (lambda1: the ``upper_quantile``, lambda2: horizon x the ``lower_quantile``, per dimension), as the
  official code recomputes them before each round of rollouts.
* ``infoprop_k1`` (the negative control): the same loop, horizon and thresholds with the Kalman gain forced to 1:
  the step becomes a random member's sample (no epistemic removal) and its conditional variance is 0, so the
  information loss is 0 and no rollout is ever stopped -- long MBPO-style rollouts, the mechanism absent.
* ``true_model`` (the learnability reference): the same loop with the true simulator as its model (Pendulum's
  equations, :func:`pendulum_step`), rollouts of the full Infoprop horizon: perfect long rollouts, so that whether
  this loop can learn the task at this budget is measured, apart from any model's errors.
* ``true_model_h1`` (MBPO's learnability reference, issue 51 review): the true simulator at MBPO's horizon
  ``mbpo_horizon``: whether MBPO's loop, with its short rollouts, can learn the task at this budget with a perfect
  model, so that an MBPO arm that does not learn is told apart from a loop that cannot.

SAC (Haarnoja et al. 2018, as the official ``pytorch_sac_pranz24``): a tanh-squashed Gaussian policy, twin Q
networks with soft-updated targets (tau), the entropy temperature alpha tuned to a target entropy of -act_dim,

.. math::
    y = r + \\gamma \\big(\\min_i Q'_i(s', a') - \\alpha \\log\\pi(a'|s')\\big), \\quad a' \\sim \\pi(\\cdot|s'),
    \\qquad J_\\pi = \\mathbb E\\big[\\alpha \\log\\pi(\\tilde a|s) - \\min_i Q_i(s, \\tilde a)\\big].

Pendulum-v1 never terminates (episodes are truncated at 200 steps), so every target bootstraps.

Vectorisation: every (arm, seed) run has its own networks, optimiser state, data and model, stacked along a
leading run axis of every weight (:class:`papers.infoprop.model.EnsembleLinear`); the loss is the sum of the runs'
losses, so each run's gradient is its own and Adam (elementwise) keeps the runs independent. Runs of the same seed
start from the same networks, the same initial random-action data and the same environment resets (common random
numbers across arms); they part once their rollouts differ.
"""
from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from papers.common.io import write_parquet
from papers.common.seeding import seed_everything
from papers.infoprop import propagation as P
from papers.infoprop.model import EnsembleLinear, GaussianEnsemble, gaussian_nll
from papers.infoprop.params import parse

log = logging.getLogger(__name__)

# The Dyna arms: the MBPO baseline, Infoprop, and the control (Infoprop's loop with K = 1: no mechanism).
ARMS = ("mbpo", "infoprop", "infoprop_k1", "true_model", "true_model_h1")
# The arms that roll out for MBPO's horizon; the others for Infoprop's maximum horizon.
SHORT_ARMS = ("mbpo", "true_model_h1")
# gymnasium's Pendulum-v1 (classic_control/pendulum.py): g, mass, length, time step, torque and speed limits.
PENDULUM = {"g": 10.0, "m": 1.0, "l": 1.0, "dt": 0.05, "max_torque": 2.0, "max_speed": 8.0}


def pendulum_step(obs: torch.Tensor, act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pendulum-v1's own dynamics and reward, batched: obs (..., 3) = (cos th, sin th, thdot), act (..., 1) in
    [-1, 1] (scaled to the torque box) -> next obs (..., 3), reward (..., 1).

    .. math::
        r = -(\\theta^2 + 0.1 \\dot\\theta^2 + 0.001 u^2), \\quad
        \\dot\\theta' = \\mathrm{clip}(\\dot\\theta + (\\tfrac{3g}{2l} \\sin\\theta + \\tfrac{3}{ml^2} u) dt, \\pm 8), \\quad
        \\theta' = \\theta + \\dot\\theta' dt
    (theta normalised to [-pi, pi) in the cost)."""
    c = PENDULUM
    th, thdot = torch.atan2(obs[..., 1:2], obs[..., 0:1]), obs[..., 2:3]
    u = (act * c["max_torque"]).clamp(-c["max_torque"], c["max_torque"])
    cost = th ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2  # atan2 already lies in [-pi, pi]
    thdot2 = (thdot + (3 * c["g"] / (2 * c["l"]) * torch.sin(th) + 3.0 / (c["m"] * c["l"] ** 2) * u) * c["dt"]).clamp(
        -c["max_speed"], c["max_speed"])
    th2 = th + thdot2 * c["dt"]
    return torch.cat([torch.cos(th2), torch.sin(th2), thdot2], -1), -cost
LOG_STD_BOUNDS = (-20.0, 2.0)  # the policy's log-std clamp (pytorch_sac_pranz24)


# ---- networks with a leading run axis ---------------------------------------------------------------
class RunMLP(torch.nn.Module):
    """R independent MLPs with ReLU: (R, B, d_in) -> (R, B, d_out)."""

    def __init__(self, runs: int, d_in: int, d_out: int, hidden: int, layers: int):
        super().__init__()
        sizes = [d_in] + [hidden] * layers + [d_out]
        self.layers = torch.nn.ModuleList(EnsembleLinear(runs, a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


class Agent(torch.nn.Module):
    """R SAC agents: policy, twin Q, target twin Q, log alpha."""

    def __init__(self, runs: int, obs_dim: int, act_dim: int, hidden: int, layers: int):
        super().__init__()
        self.policy = RunMLP(runs, obs_dim, 2 * act_dim, hidden, layers)
        # The twin Q networks as one stack of 2 R networks (rows 0..R-1: Q1, R..2R-1: Q2): half the kernel calls.
        self.q = RunMLP(2 * runs, obs_dim + act_dim, 1, hidden, layers)
        self.q_target = RunMLP(2 * runs, obs_dim + act_dim, 1, hidden, layers)
        self.q_target.load_state_dict(self.q.state_dict())
        self.log_alpha = torch.nn.Parameter(torch.zeros(runs, 1, 1))
        self.act_dim = act_dim

    def sample(self, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """a = tanh(u), u ~ N(mean, std) (reparameterised); log pi(a|s) with the tanh correction. (R, B, .)"""
        mean, log_std = self.policy(obs).chunk(2, -1)
        std = log_std.clamp(*LOG_STD_BOUNDS).exp()
        u = mean + std * torch.randn(mean.shape, generator=generator)
        log_prob = (-0.5 * ((u - mean) / std) ** 2 - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1, keepdim=True)
        a = torch.tanh(u)
        return a, log_prob - torch.log(1 - a ** 2 + 1e-6).sum(-1, keepdim=True)

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.policy(obs).chunk(2, -1)[0])

    def twin_q(self, net, obs, act) -> torch.Tensor:
        """Q1 and Q2 of every run: (2, R, B, 1)."""
        x = torch.cat([obs, act], -1)
        return net(torch.cat([x, x])).view(2, *x.shape[:-1], 1)

    def min_q(self, net, obs, act) -> torch.Tensor:
        return self.twin_q(net, obs, act).min(0).values


def share_across_arms(module: torch.nn.Module, seed_of_run: np.ndarray, group: int = 1) -> None:
    """Give every run the initial weights of the first run of its seed (runs are ordered seed-fastest, so that
    is run `seed`). Leading axis of a weight: copies x R x group (copies: the twin Q stack; group: an ensemble's
    members)."""
    runs, index = len(seed_of_run), torch.as_tensor(seed_of_run)
    with torch.no_grad():
        for p in module.parameters():
            if p.shape[0] % (runs * group) == 0:
                blocks = p.view(-1, runs, group, *p.shape[1:])
                p.copy_(blocks[:, index].reshape(p.shape))


# ---- the model, vectorised over runs ----------------------------------------------------------------
class RunEnsemble:
    """R probabilistic ensembles of E members (one GaussianEnsemble of R * E members; run r owns members
    r E .. r E + E - 1) with per-run normalisers of inputs and targets."""

    def __init__(self, runs: int, d_in: int, d_out: int, m: dict, seed_of_run: np.ndarray):
        self.net = GaussianEnsemble(d_in, d_out, runs * m["ensemble"], m["hidden"], m["layers"], m["learn_logvar_bounds"])
        share_across_arms(self.net, seed_of_run, m["ensemble"])
        decay = [p for name, p in self.net.named_parameters() if name.endswith("weight")]
        rest = [p for name, p in self.net.named_parameters() if not name.endswith("weight") and p.requires_grad]
        self.opt = torch.optim.Adam([{"params": decay, "weight_decay": m["weight_decay"]}, {"params": rest}], lr=m["lr"])
        self.runs, self.members, self.m = runs, m["ensemble"], m

    def fit(self, inputs: torch.Tensor, targets: torch.Tensor, generator: torch.Generator) -> float:
        """`epochs` passes of every member over its own bootstrap of its run's data (R, N, .); returns the last
        batch's loss. Normalisers are refitted to all data first (the official trainer does the same)."""
        r, e, n = self.runs, self.members, inputs.shape[1]
        self.in_mean, self.in_std = inputs.mean(1, keepdim=True), inputs.std(1, keepdim=True) + 1e-8
        self.out_mean, self.out_std = targets.mean(1, keepdim=True), targets.std(1, keepdim=True) + 1e-8
        x, y = (inputs - self.in_mean) / self.in_std, (targets - self.out_mean) / self.out_std
        boot = torch.randint(n, (r, e, n), generator=generator)
        rows = torch.arange(r)[:, None, None]
        for _ in range(self.m["epochs"]):
            order = boot.gather(2, torch.argsort(torch.rand(r, e, n, generator=generator), dim=2))
            for start in range(0, n, self.m["batch"]):
                idx = order[:, :, start: start + self.m["batch"]]
                xb, yb = x[rows, idx].flatten(0, 1), y[rows, idx].flatten(0, 1)  # (R E, b, .)
                mean, logvar = self.net(xb)
                # Mean over members and batch per run, summed over runs: each run's gradient is its own.
                loss = r * gaussian_nll(mean, logvar, yb)
                loss = loss + 0.01 * (self.net.max_logvar.sum() - self.net.min_logvar.sum())
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
        return float(loss.detach()) / r

    @torch.no_grad()
    def predict(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, B, d_in) raw -> every member's mean and variance in data units, (E, R B, d_out) float64 (the layout of
        papers.infoprop.propagation, runs folded into the batch)."""
        r, b, _ = inputs.shape
        x = ((inputs - self.in_mean) / self.in_std).unsqueeze(1).expand(r, self.members, b, -1).flatten(0, 1)
        mean, logvar = self.net(x)
        mean = mean.view(r, self.members, b, -1) * self.out_std[:, None] + self.out_mean[:, None]
        var = logvar.exp().view(r, self.members, b, -1) * self.out_std[:, None] ** 2
        return (t.double().transpose(0, 1).flatten(1, 2) for t in (mean, var))


# ---- rollouts -----------------------------------------------------------------------------------------
def rollouts(agent: Agent, model: RunEnsemble, arm_of_run: np.ndarray, real: dict, n_real: int, d: dict,
             info: dict, generator: torch.Generator):
    """One round of model rollouts for every run from B real start states; returns per run the accepted
    transitions (obs, act, rew, next_obs) as a list of (n_r, .) tensors, and per run the mean accepted length.

    Every arm steps the same start states; run r's arm decides the step and when its rollouts stop.
    """
    runs, b = len(arm_of_run), d["rollouts_per_step"] * d["model_every"]
    horizon = np.array([d["mbpo_horizon"] if a in SHORT_ARMS else d["infoprop_horizon"] for a in arm_of_run])
    pick = torch.randint(n_real, (runs, b), generator=generator)
    rows = torch.arange(runs)[:, None]
    obs, act_real = real["obs"][rows, pick], real["act"][rows, pick]
    blocks = {arm: np.flatnonzero(arm_of_run == arm) for arm in ARMS if (arm_of_run == arm).any()}

    def propagate(o, a):
        """One step of every run's scheme: next obs, reward (R, B, .) and the conditional variance (R, B, D) or None."""
        mu, s2 = model.predict(torch.cat([o, a], -1))
        dim = mu.shape[-1]
        mu, s2 = mu.view(-1, runs, b, dim), s2.view(-1, runs, b, dim)
        y, var = torch.zeros(runs, b, dim, dtype=mu.dtype), torch.zeros(runs, b, dim, dtype=mu.dtype)
        for arm, idx in blocks.items():
            if arm.startswith("true_model"):  # the simulator's own step: no variance, so no information loss, no stop
                nxt, rew = pendulum_step(o[idx].double(), a[idx].double())
                y[idx] = torch.cat([nxt - o[idx].double(), rew], -1)
                continue
            yk, vk = P.step(arm, mu[:, idx].flatten(1, 2), s2[:, idx].flatten(1, 2), generator)
            y[idx] = yk.view(len(idx), b, dim)
            if vk is not None:
                var[idx] = vk.view(len(idx), b, dim)
        nxt = torch.clamp(o.double() + y[..., :-1], -1e6, 1e6).float()  # a diverging rollout stays finite
        return nxt, y[..., -1:].float(), var

    # Thresholds per run from one-step losses on real (s, a) (official: before each round of rollouts).
    _, _, var = propagate(obs, act_real)
    loss = P.information_loss(var, info["resolution"])  # (R, B, D)
    lambda1 = np.quantile(loss, info["upper_quantile"], axis=1)[:, None]  # (R, 1, D)
    lambda2 = horizon[:, None, None] * np.quantile(loss, info["lower_quantile"], axis=1)[:, None]
    alive = np.ones((runs, b), dtype=bool)
    accumulated = np.zeros_like(loss)
    out = [[] for _ in range(runs)]
    with torch.no_grad():
        for t in range(int(horizon.max())):
            act, _ = agent.sample(obs, generator)
            nxt, rew, var = propagate(obs, act)
            step_loss = P.information_loss(var, info["resolution"])
            accumulated += step_loss
            alive &= ~((step_loss > lambda1).any(-1) | (accumulated > lambda2).any(-1)) & (t < horizon)[:, None]
            if not alive.any():
                break
            for r in np.flatnonzero(alive.any(1)):
                keep = torch.as_tensor(alive[r])
                out[r].append(torch.cat([obs[r, keep], act[r, keep], rew[r, keep], nxt[r, keep]], -1))
            obs = nxt
    lengths = [sum(len(x) for x in o) / b for o in out]
    return [torch.cat(o) if o else torch.zeros(0, 2 * obs.shape[-1] + act_real.shape[-1] + 1) for o in out], lengths


# ---- SAC ----------------------------------------------------------------------------------------------
def sac_update(agent: Agent, opts: dict, batch: torch.Tensor, obs_dim: int, act_dim: int, s: dict,
               generator: torch.Generator) -> None:
    """One SAC update of every run on its batch (R, B, obs + act + 1 + obs)."""
    runs = batch.shape[0]
    o, a = batch[..., :obs_dim], batch[..., obs_dim: obs_dim + act_dim]
    r, o2 = batch[..., obs_dim + act_dim: obs_dim + act_dim + 1], batch[..., obs_dim + act_dim + 1:]
    alpha = agent.log_alpha.exp().detach()
    with torch.no_grad():
        a2, logp2 = agent.sample(o2, generator)
        target = r + s["gamma"] * (agent.min_q(agent.q_target, o2, a2) - alpha * logp2)  # no terminal states
    q_loss = runs * 2 * F.mse_loss(agent.twin_q(agent.q, o, a), target.expand(2, *target.shape))
    opts["q"].zero_grad()
    q_loss.backward()
    opts["q"].step()
    pi, logp = agent.sample(o, generator)
    pi_loss = (alpha * logp - agent.min_q(agent.q, o, pi)).mean((1, 2)).sum()
    opts["pi"].zero_grad()
    pi_loss.backward()
    opts["pi"].step()
    alpha_loss = -(agent.log_alpha * (logp.detach() + s["target_entropy"])).mean((1, 2)).sum()
    opts["alpha"].zero_grad()
    alpha_loss.backward()
    opts["alpha"].step()
    with torch.no_grad():
        for p, pt in zip(agent.q.parameters(), agent.q_target.parameters()):
            pt.lerp_(p, s["tau"])


# ---- the true system ----------------------------------------------------------------------------------
class Envs:
    """n independent copies of a gymnasium task, stepped together; actions in [-1, 1] are scaled to the box."""

    def __init__(self, name: str, seeds: list[int]):
        import gymnasium as gym

        self.envs = [gym.make(name) for _ in seeds]
        self.seeds = seeds
        box = self.envs[0].action_space
        self.low, self.high = box.low, box.high

    def reset(self, first: bool = False) -> np.ndarray:
        return np.stack([e.reset(seed=s if first else None)[0] for e, s in zip(self.envs, self.seeds)])

    def step(self, action: np.ndarray):
        scaled = self.low + (action + 1.0) * 0.5 * (self.high - self.low)
        out = [e.step(a) for e, a in zip(self.envs, scaled)]
        obs, rew, term, trunc = (np.array([o[i] for o in out]) for i in range(4))
        if term.any():
            raise ValueError("infoprop.dyna: the task terminated an episode; only non-terminating tasks are supported")
        return obs, rew, trunc.any()


def evaluate_policy(agent: Agent, name: str, seeds_per_run: list[list[int]]) -> np.ndarray:
    """Mean return of deterministic episodes (the policy's mean action), per run; every run's episodes start
    from the resets seeded by its own list (the same for runs of one seed)."""
    runs, n = len(seeds_per_run), len(seeds_per_run[0])
    envs = Envs(name, [s for seeds in seeds_per_run for s in seeds])
    obs, total, done = envs.reset(first=True), np.zeros(runs * n), False
    with torch.no_grad():
        while not done:
            a = agent.deterministic(torch.as_tensor(obs, dtype=torch.float32).view(runs, n, -1))
            obs, rew, done = envs.step(a.reshape(runs * n, -1).numpy())
            total += rew
    return total.reshape(runs, n).mean(1)


# ---- the Dyna loop ------------------------------------------------------------------------------------
def dyna(*, cfg, returns, rollout_stats):
    """Every (arm, seed) run of the Dyna comparison in one process: the return of the deterministic policy against
    real steps (`returns`) and every round's accepted rollout length (`rollout_stats`)."""
    p = parse(cfg)
    d, s, m, info = p.dyna, p.dyna["sac"], p.dyna["model"], p.info
    seed_everything(0)
    # Denormal floats (tiny ReLU gradients) slow CPU kernels tenfold; flushing them to 0 changes no result here.
    torch.set_flush_denormal(True)
    seeds = list(range(d["seeds"]))
    arm_of_run = np.array([arm for arm in ARMS for _ in seeds])
    seed_of_run = np.array([sd for _ in ARMS for sd in seeds])
    runs = len(arm_of_run)
    generator = torch.Generator().manual_seed(1234)
    envs = Envs(d["env"], [int(sd) for sd in seed_of_run])
    obs_dim, act_dim = envs.envs[0].observation_space.shape[0], envs.envs[0].action_space.shape[0]
    agent = Agent(runs, obs_dim, act_dim, s["hidden"], s["layers"])
    share_across_arms(agent, seed_of_run)
    agent.q_target.load_state_dict(agent.q.state_dict())
    opts = {"q": torch.optim.Adam(agent.q.parameters(), lr=s["lr"]),
            "pi": torch.optim.Adam(agent.policy.parameters(), lr=s["lr"]),
            "alpha": torch.optim.Adam([agent.log_alpha], lr=s["lr"])}
    s = {**s, "target_entropy": -float(act_dim)}
    model = RunEnsemble(runs, obs_dim + act_dim, obs_dim + 1, m, seed_of_run)
    eval_seeds = [[10_000 + 100 * int(sd) + i for i in range(d["eval_episodes"])] for sd in seed_of_run]

    width = 2 * obs_dim + act_dim + 1
    real = torch.zeros(runs, d["real_steps"], width)
    # Initial data: uniform random actions, the same per seed across arms.
    explore = [np.random.default_rng([int(sd), 7]) for sd in seed_of_run]
    obs = envs.reset(first=True)
    rounds, return_rows, rollout_rows = [], [], []
    for t in range(d["real_steps"]):
        if t < d["initial_steps"]:
            a = np.stack([g.uniform(-1.0, 1.0, act_dim) for g in explore]).astype(np.float32)
        else:
            with torch.no_grad():
                a = agent.sample(torch.as_tensor(obs, dtype=torch.float32)[:, None], generator)[0][:, 0].numpy()
        nxt, rew, truncated = envs.step(a)
        real[:, t] = torch.as_tensor(np.concatenate([obs, a, rew[:, None], nxt], -1), dtype=torch.float32)
        obs = envs.reset() if truncated else nxt
        n_real = t + 1
        if n_real < d["initial_steps"]:
            continue
        if (n_real - d["initial_steps"]) % d["model_every"] == 0:
            data = real[:, :n_real]
            inputs = data[..., : obs_dim + act_dim]
            targets = torch.cat([data[..., -obs_dim:] - data[..., :obs_dim], data[..., obs_dim + act_dim: obs_dim + act_dim + 1]], -1)
            fit_loss = model.fit(inputs, targets, generator)
            fresh, lengths = rollouts(agent, model, arm_of_run, {"obs": data[..., :obs_dim], "act": data[..., obs_dim: obs_dim + act_dim]},
                                      n_real, d, info, generator)
            rounds = (rounds + [fresh])[-d["retain_rounds"]:]
            buffer = [torch.cat([rd[r] for rd in rounds]) for r in range(runs)]
            counts = torch.as_tensor([len(x) for x in buffer])
            if (counts == 0).any():
                raise RuntimeError(f"infoprop.dyna: a run's model buffer is empty after step {n_real}")
            model_data = torch.zeros(runs, int(counts.max()), width)
            for r, x in enumerate(buffer):
                model_data[r, : len(x)] = x
            rollout_rows += [{"arm": arm_of_run[r], "seed": int(seed_of_run[r]), "real_steps": n_real,
                              "accepted_length": lengths[r], "model_transitions": int(counts[r]), "model_loss": fit_loss}
                             for r in range(runs)]
            log.info("step %d: model loss %.3f; mean accepted length %s", n_real, fit_loss,
                     {arm: round(float(np.mean([lengths[r] for r in np.flatnonzero(arm_of_run == arm)])), 2) for arm in ARMS})
        n_real_batch = int(round(d["real_ratio"] * s["batch"]))
        for _ in range(d["updates_per_step"]):
            ri = torch.randint(n_real, (runs, n_real_batch), generator=generator)
            mi = (torch.rand(runs, s["batch"] - n_real_batch, generator=generator) * counts[:, None]).long()
            rows = torch.arange(runs)[:, None]
            sac_update(agent, opts, torch.cat([real[rows, ri], model_data[rows, mi]], 1), obs_dim, act_dim, s, generator)
        if n_real % d["eval_every"] == 0 or n_real == d["real_steps"]:
            ret = evaluate_policy(agent, d["env"], eval_seeds)
            return_rows += [{"arm": arm_of_run[r], "seed": int(seed_of_run[r]), "real_steps": n_real,
                             "return": float(ret[r]), "final": n_real == d["real_steps"]} for r in range(runs)]
            log.info("step %d: deterministic return %s", n_real,
                     {arm: round(float(ret[arm_of_run == arm].mean()), 1) for arm in ARMS})
    write_parquet(pd.DataFrame(return_rows), returns)
    write_parquet(pd.DataFrame(rollout_rows), rollout_stats)
