"""Training (one policy on one category's demonstrations) and batched closed-loop evaluation."""
from __future__ import annotations

import numpy as np
import torch

from papers.adamanip.env import ACTION_DIM, STATE_DIM
from papers.adamanip.policy import DiffusionPolicy, MLPPolicy, Normalizer

POLICIES = ("diffusion", "mlp_bc")


def windows(demos: dict, obs_horizon: int, pred_horizon: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training samples: for every step t of every demo, the observations t-To+1..t and the actions
    t-To+1..t-To+Tp, indices clipped to the demo (the edges repeat, as the official sequence sampler pads).

    `demos` holds flat arrays ``points`` (N, P, 3), ``state`` (N, 4), ``action`` (N, 4) and ``episode`` (N,)
    (which demo each step belongs to, in order). Returns points (M, To, P, 3), state (M, To, 4), actions (M, Tp, 4).
    """
    episode = demos["episode"]
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    ends = np.r_[starts[1:], len(episode)]
    obs_idx, act_idx = [], []
    for s, e in zip(starts, ends):
        for t in range(s, e):
            obs_idx.append(np.clip(t - obs_horizon + 1 + np.arange(obs_horizon), s, e - 1))
            act_idx.append(np.clip(t - obs_horizon + 1 + np.arange(pred_horizon), s, e - 1))
    obs_idx, act_idx = np.array(obs_idx), np.array(act_idx)
    return demos["points"][obs_idx], demos["state"][obs_idx], demos["action"][act_idx]


def build(policy: str, norm: Normalizer, pol: dict):
    common = dict(hidden=pol["hidden"], feat=pol["feat"], state_dim=STATE_DIM, action_dim=ACTION_DIM,
                  obs_horizon=pol["obs_horizon"], pred_horizon=pol["pred_horizon"])
    if policy == "diffusion":
        return DiffusionPolicy(norm, unet_dims=tuple(pol["unet_dims"]), diffusion_steps=pol["diffusion_steps"], **common)
    if policy == "mlp_bc":
        return MLPPolicy(norm, mlp_hidden=pol["mlp_hidden"], **common)
    raise ValueError(f"adamanip: policy must be one of {POLICIES}, got {policy!r}")


def fit(policy: str, demos: dict, pol: dict, tr: dict, seed: int) -> tuple[torch.nn.Module, list[float]]:
    """Train one policy by minibatch AdamW on the demos' windows; returns the model and its loss curve."""
    torch.manual_seed(seed)
    points, state, actions = windows(demos, pol["obs_horizon"], pol["pred_horizon"])
    flat_p = points.reshape(-1, 3)
    norm = Normalizer(flat_p.mean(0), flat_p.std(0) + 1e-6, state.reshape(-1, STATE_DIM).mean(0),
                      state.reshape(-1, STATE_DIM).std(0) + 1e-2)  # floor: a dimension
                      # the demos never move (lateral) must not blow up when the policy drifts in it
    model = build(policy, norm, pol)
    opt = torch.optim.AdamW(model.parameters(), lr=tr["lr"], weight_decay=tr["weight_decay"])
    gen = torch.Generator().manual_seed(seed)
    P, S, A = (torch.as_tensor(x, dtype=torch.float32) for x in (points, state, actions))
    losses = []
    for step in range(tr["steps"]):
        idx = torch.randint(0, len(A), (min(tr["batch"], len(A)),), generator=gen)
        loss = model.loss(P[idx], S[idx], A[idx], gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return model, losses


@torch.no_grad()
def rollout(model, eps: list, max_steps: int, pol: dict, seed: int) -> np.ndarray:
    """Success (0/1) of each episode (a batch of any categories, all with the same number of points) under
    receding-horizon control: predict Tp actions from the last To observations, execute Ta of them,
    repeat; success latches when reached."""
    model.eval()
    episodes = len(eps)
    To, Ta = pol["obs_horizon"], pol["action_horizon"]
    gen = torch.Generator().manual_seed(seed)
    obs = [ep.observe() for ep in eps]
    hist_p = [[o[0]] * To for o in obs]
    hist_s = [[o[1]] * To for o in obs]
    done = np.zeros(episodes, dtype=bool)
    t = 0
    while t < max_steps and not done.all():
        P = torch.as_tensor(np.stack([np.stack(h[-To:]) for h in hist_p]))  # (E, To, P, 3)
        S = torch.as_tensor(np.stack([np.stack(h[-To:]) for h in hist_s]))  # (E, To, 4)
        chunk = model.act(P, S, gen).numpy()  # (E, Tp, A)
        for j in range(To - 1, To - 1 + Ta):
            if t >= max_steps:
                break
            for i, ep in enumerate(eps):
                if done[i]:
                    continue
                ep.step(chunk[i, j])
                done[i] = ep.success
                p, s = ep.observe()
                hist_p[i].append(p), hist_s[i].append(s)
            t += 1
    return done.astype(np.int64)
