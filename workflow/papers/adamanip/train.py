"""Training (one policy on one category's demonstrations) and batched closed-loop evaluation."""
from __future__ import annotations

import copy
import math

import numpy as np
import torch

from papers.adamanip.env import ACTION_DIM, POSE_DIM, STATE_DIM
from papers.adamanip.policy import DiffusionPolicy, MLPPolicy, Normalizer

POLICIES = ("diffusion", "mlp_bc")
LOW_DIM = STATE_DIM + ACTION_DIM  # the low-dimensional observation: gripper pose, velocity and previous action


def previous_actions(action: np.ndarray, episode: np.ndarray) -> np.ndarray:
    """The action executed before each step, zeros at the first step of each demo (the official observation's
    ``prev_action``, dataset/dataset.py ``obs_wrapper``). (N, A)"""
    prev = np.zeros_like(action)
    prev[1:] = action[:-1]
    prev[np.r_[True, episode[1:] != episode[:-1]]] = 0.0
    return prev


def windows(demos: dict, obs_horizon: int, pred_horizon: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training samples as the official ``create_sample_indices``: for every step t of every demo, the
    observations t-To+1..t and the actions t..t+Tp-1 (the actions to come), indices clipped to the demo (the
    first observation and the last action repeat, as the official sampler pads). The low-dimensional observation
    is the gripper state (pose, velocity) and the previous action (official env_state = proprioception + prev_action).

    `demos` holds flat arrays ``points`` (N, P, 3), ``state`` (N, 8), ``action`` (N, 4) and ``episode`` (N,)
    (which demo each step belongs to, in order). Returns points (M, To, P, 3), state (M, To, 12), actions (M, Tp, 4).
    """
    episode = demos["episode"]
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    ends = np.r_[starts[1:], len(episode)]
    obs_idx, act_idx = [], []
    for s, e in zip(starts, ends):
        for t in range(s, e):
            obs_idx.append(np.clip(t - obs_horizon + 1 + np.arange(obs_horizon), s, e - 1))
            act_idx.append(np.clip(t + np.arange(pred_horizon), s, e - 1))
    obs_idx, act_idx = np.array(obs_idx), np.array(act_idx)
    low_dim = np.concatenate([demos["state"], previous_actions(demos["action"], episode)], 1)
    return demos["points"][obs_idx], low_dim[obs_idx], demos["action"][act_idx]


def build(policy: str, norm: Normalizer, pol: dict):
    common = dict(hidden=pol["hidden"], feat=pol["feat"], state_dim=LOW_DIM, action_dim=ACTION_DIM,
                  obs_horizon=pol["obs_horizon"], pred_horizon=pol["pred_horizon"])
    if policy == "diffusion":
        return DiffusionPolicy(norm, unet_dims=tuple(pol["unet_dims"]), diffusion_steps=pol["diffusion_steps"],
                               inference_steps=pol.get("inference_steps"), **common)
    if policy == "mlp_bc":
        return MLPPolicy(norm, mlp_hidden=pol["mlp_hidden"], **common)
    raise ValueError(f"adamanip: policy must be one of {POLICIES}, got {policy!r}")


def ema_decay(step: int, power: float = 0.75, max_decay: float = 0.9999) -> float:
    """The EMA decay after `step` optimiser steps, 1 - (1 + step)^-power, 0 at the first step (the warm-up of
    diffusers' ``EMAModel`` with ``power=0.75``, which the official diffusion_policy_new.py uses)."""
    return 0.0 if step <= 0 else min(max_decay, 1.0 - (1.0 + step) ** -power)


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, Alg. 2), the update of torch.optim.AdamW:

    .. math::
        \\theta \\leftarrow \\theta (1 - \\eta \\lambda), \\quad m \\leftarrow \\beta_1 m + (1 - \\beta_1) g, \\quad
        v \\leftarrow \\beta_2 v + (1 - \\beta_2) g^2, \\quad
        \\theta \\leftarrow \\theta - \\eta \\frac{m / (1 - \\beta_1^t)}{\\sqrt{v / (1 - \\beta_2^t)} + \\epsilon},

    every parameter at once (``torch._foreach_*``). Written out because building a ``torch.optim`` optimiser
    imports ``torch._dynamo``, about 2 s of CPU per job -- most of a smoke-scale training job.
    """

    def __init__(self, params: list, weight_decay: float, betas: tuple = (0.9, 0.999), eps: float = 1e-8):
        self.params, self.wd, (self.b1, self.b2), self.eps = list(params), weight_decay, betas, eps
        self.m = [torch.zeros_like(q) for q in self.params]
        self.v = [torch.zeros_like(q) for q in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self, lr: float) -> None:
        self.t += 1
        grads = [q.grad for q in self.params]
        torch._foreach_mul_(self.params, 1.0 - lr * self.wd)
        torch._foreach_lerp_(self.m, grads, 1.0 - self.b1)
        torch._foreach_mul_(self.v, self.b2)
        torch._foreach_addcmul_(self.v, grads, grads, 1.0 - self.b2)
        denom = torch._foreach_sqrt(self.v)
        torch._foreach_div_(denom, math.sqrt(1.0 - self.b2 ** self.t))
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(self.params, self.m, denom, -lr / (1.0 - self.b1 ** self.t))


def fit(policy: str, demos: dict, pol: dict, tr: dict, seed: int) -> tuple[torch.nn.Module, list[float]]:
    """Train one policy by minibatch AdamW on the demos' windows, keeping an exponential moving average of its
    weights (returned: the EMA model, which the official code evaluates) and the online model's loss curve."""
    torch.manual_seed(seed)
    points, state, actions = windows(demos, pol["obs_horizon"], pol["pred_horizon"])
    flat_p, flat_s = points.reshape(-1, 3), state.reshape(-1, LOW_DIM)
    # standardise points and the gripper pose; velocity and previous action are in step units already and stay
    rest = LOW_DIM - POSE_DIM
    state_mean = np.r_[flat_s[:, :POSE_DIM].mean(0), np.zeros(rest)]
    state_std = np.r_[flat_s[:, :POSE_DIM].std(0) + 1e-2, np.ones(rest)]  # floor: a dimension the demos never
    # move (lateral) must not blow up when the policy drifts in it
    norm = Normalizer(flat_p.mean(0), flat_p.std(0) + 1e-6, state_mean, state_std)
    model = build(policy, norm, pol)
    ema = copy.deepcopy(model).requires_grad_(False)
    ema_params, model_params = list(ema.parameters()), list(model.parameters())
    opt = AdamW(model_params, weight_decay=tr["weight_decay"])
    # the official schedule: linear warm-up, then cosine decay to 0 (diffusers' get_scheduler('cosine'); its 500
    # warm-up steps of a long run scaled here to the first 5 % of the steps)
    steps = tr["steps"][policy]
    warmup = max(1, steps // 20)

    def lr_at(i: int) -> float:
        return tr["lr"][policy] * min(1.0, (i + 1) / warmup) * 0.5 * (
            1.0 + math.cos(math.pi * max(0, i - warmup) / max(1, steps - warmup)))

    gen = torch.Generator().manual_seed(seed)
    P, S, A = (torch.as_tensor(x, dtype=torch.float32) for x in (points, state, actions))
    losses = []
    for step in range(steps):
        idx = torch.randint(0, len(A), (min(tr["batch"], len(A)),), generator=gen)
        loss = model.loss(P[idx], S[idx], A[idx], gen)
        for q in model_params:
            q.grad = None
        loss.backward()
        opt.step(lr_at(step))
        with torch.no_grad():  # ema <- decay * ema + (1 - decay) * model, all parameters in one call
            torch._foreach_lerp_(ema_params, model_params, 1.0 - ema_decay(step))
        losses.append(float(loss.detach()))
    return ema, losses


@torch.no_grad()
def gaussian_sigma(mlp, demos: dict, pol: dict) -> np.ndarray:
    """The maximum-likelihood per-dimension standard deviation of a diagonal Gaussian policy whose mean is the
    trained MLP BC network, on the demonstrations it was trained on: the root mean square residual of the executed
    (first) action of each window. (A,) -- the sigma of policy.GaussianBC, the unimodal ablation of Sec. 4.2's
    diffusion policy."""
    mlp.eval()
    points, state, actions = windows(demos, pol["obs_horizon"], pol["pred_horizon"])
    pred = mlp._predict(torch.as_tensor(points, dtype=torch.float32), torch.as_tensor(state, dtype=torch.float32))
    resid = pred[:, 0].numpy() - actions[:, 0]
    return np.sqrt((resid ** 2).mean(0))


@torch.no_grad()
def rollout(model, eps: list, max_steps: int, pol: dict, seed: int, fixed_noise: bool = False) -> np.ndarray:
    """Success (0/1) of each episode (a batch of any categories, all with the same number of points) under
    receding-horizon control: predict the Tp actions to come from the last To observations (points, gripper
    state, previous action), execute the first Ta of them (official: Ta = 1), repeat; success latches.
    `fixed_noise`: the diffusion policy uses the same standard normal draws at every step of an episode (drawn once
    per episode: the initial sample x_K and, under ancestral DDPM, every step's draw; policy.DiffusionPolicy.act)
    instead of fresh ones per prediction, so that it cannot switch its choice by a new draw."""
    model.eval()
    episodes = len(eps)
    To, Ta = pol["obs_horizon"], pol["action_horizon"]
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn((episodes, getattr(model, "draws", 1), pol["pred_horizon"], ACTION_DIM),
                        generator=gen) if fixed_noise else None
    obs = [ep.observe() for ep in eps]
    # the last To observations of every episode, oldest first (the first one repeated at the start, as in training)
    hist_p = np.repeat(np.stack([o[0] for o in obs])[:, None], To, axis=1)  # (E, To, P, 3)
    first_s = np.concatenate([np.stack([o[1] for o in obs]), np.zeros((episodes, ACTION_DIM), np.float32)], 1)
    hist_s = np.repeat(first_s[:, None], To, axis=1)  # (E, To, 12): gripper state and previous action (none yet)
    done = np.zeros(episodes, dtype=bool)
    over = np.zeros(episodes, dtype=bool)  # succeeded, or jammed (a jammed mechanism never moves again)
    t = 0
    while t < max_steps and not over.all():
        live = np.flatnonzero(~over)  # only the episodes still running are fed to the policy, in one batch
        chunk = model.act(torch.as_tensor(hist_p[live]), torch.as_tensor(hist_s[live]), gen,
                          None if noise is None else noise[live]).numpy()  # (E', Tp, A)
        for j in range(Ta):
            if t >= max_steps:
                break
            for row, i in enumerate(live):
                if over[i]:
                    continue
                action = np.clip(chunk[row, j], -1.0, 1.0).astype(np.float32)
                eps[i].step(action)
                done[i] = eps[i].success
                over[i] = done[i] or eps[i].jammed
                p, s = eps[i].observe()
                hist_p[i, :-1], hist_s[i, :-1] = hist_p[i, 1:], hist_s[i, 1:]
                hist_p[i, -1], hist_s[i, -1] = p, np.concatenate([s, action])
            t += 1
    return done.astype(np.int64)
