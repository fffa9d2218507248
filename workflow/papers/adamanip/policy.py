"""The AdaManip policy (Sec. 4.2): a 3D diffusion policy, and the MLP behaviour-cloning baseline.

Observation encoder (both policies): a PointNet (Qi et al. 2017; the paper uses PointNet++) -- a shared
per-point MLP and a max-pool -- on each of the last ``To`` point clouds, concatenated with the low-dimensional
states (gripper pose, velocity, previous action; train.LOW_DIM): the global condition ``c`` (B, To * (F + 12)).

Diffusion policy (Chi et al. 2023, as in the official ``diffusion_policy/``): a 1D temporal U-Net over the
action chunk (B, A, Tp) whose residual blocks are modulated by FiLM of the condition and the diffusion
step,

.. math::
    h \\leftarrow \\gamma(c, k) \\odot h + \\beta(c, k),

trained by DDPM (Ho et al. 2020) to predict the noise,

.. math::
    x_k = \\sqrt{\\bar\\alpha_k}\\, x_0 + \\sqrt{1 - \\bar\\alpha_k}\\, \\epsilon, \\qquad
    \\mathcal{L} = \\lVert \\epsilon - \\epsilon_\\theta(x_k, k, c) \\rVert^2,

with the cosine schedule (Nichol & Dhariwal 2021, eq. 17; diffusers' ``squaredcos_cap_v2``, the official
choice) ``alpha_bar(t) = cos^2((t/K + s)/(1 + s) pi/2)``, ``beta_k = min(1 - alpha_bar((k+1)/K) /
alpha_bar(k/K), 0.999)``, and sampled by ancestral DDPM steps with the posterior variance
``beta~_k = (1 - alpha_bar_{k-1}) / (1 - alpha_bar_k) beta_k`` and x_0 clipped to [-1, 1] -- or, where fewer
inference steps than training steps are asked for (a deviation for the CPU budget; Chi et al. 2023 do the same on
their real robot), by deterministic DDIM steps (Song et al. 2021, eq. 12 with sigma = 0) over the evenly spaced
subsequence ``k_i = i K / n`` of the training steps,

.. math::
    \\hat x_0 = (x_k - \\sqrt{1 - \\bar\\alpha_k}\\, \\hat\\epsilon) / \\sqrt{\\bar\\alpha_k}, \\qquad
    x_{k'} = \\sqrt{\\bar\\alpha_{k'}}\\, \\hat x_0 + \\sqrt{1 - \\bar\\alpha_{k'}}\\, \\hat\\epsilon,

with ``bar alpha = 1`` after the last step (diffusers' ``DDIMScheduler``, ``set_alpha_to_one``).

Receding horizon (official diffusion_train.py and dataset.py): from ``To`` = 2 observations predict the ``Tp`` = 4
actions to come (a_t .. a_{t+3}) and execute ``Ta`` = 1 of them before predicting again, so the policy sees the
outcome of every try.

MLP BC: the same encoder and an MLP regressing the same action chunk by mean squared error, which
averages the modes of a multi-modal action distribution (why the paper prefers diffusion).
"""
from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F


# ---- DDPM with the cosine schedule ---------------------------------------------------------------
def cosine_alpha_bar(t: torch.Tensor, s: float = 0.008) -> torch.Tensor:
    """alpha_bar(t) = cos^2(((t + s) / (1 + s)) pi / 2) for t in [0, 1] (Nichol & Dhariwal eq. 17, unnormalised)."""
    return torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2


def cosine_betas(K: int, max_beta: float = 0.999) -> torch.Tensor:
    """beta_k = min(1 - alpha_bar((k+1)/K) / alpha_bar(k/K), max_beta), k = 0..K-1. (K,) float64"""
    k = torch.arange(K, dtype=torch.float64)
    return torch.clamp(1 - cosine_alpha_bar((k + 1) / K) / cosine_alpha_bar(k / K), max=max_beta)


class DDPM:
    """The noise schedule and its two uses: forward noising (training) and ancestral sampling."""

    def __init__(self, K: int):
        self.K = K
        self.betas = cosine_betas(K)  # (K,)
        self.alphas = 1 - self.betas
        self.alpha_bar = torch.cumprod(self.alphas, 0)  # bar alpha_k = prod_{i <= k} alpha_i
        self.alpha_bar_prev = torch.cat([torch.ones(1, dtype=torch.float64), self.alpha_bar[:-1]])
        # posterior q(x_{k-1} | x_k, x_0) = N(c0 x_0 + ck x_k, beta~_k)  (Ho et al. eq. 6-7)
        self.post_var = self.betas * (1 - self.alpha_bar_prev) / (1 - self.alpha_bar)
        self.post_c0 = self.betas * self.alpha_bar_prev.sqrt() / (1 - self.alpha_bar)
        self.post_ck = (1 - self.alpha_bar_prev) * self.alphas.sqrt() / (1 - self.alpha_bar)

    def noise(self, x0: torch.Tensor, k: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """x_k = sqrt(bar alpha_k) x0 + sqrt(1 - bar alpha_k) eps (broadcast over all but the batch axis)."""
        ab = self.alpha_bar[k].to(x0.dtype).view(-1, *[1] * (x0.dim() - 1))
        return ab.sqrt() * x0 + (1 - ab).sqrt() * eps

    def ddim_steps(self, n: int) -> list[int]:
        """The n training steps DDIM visits, from the noisiest: k_i = i * (K // n), i = n-1 .. 0 (diffusers'
        "leading" spacing)."""
        if not 1 <= n <= self.K:
            raise ValueError(f"adamanip: DDIM needs 1 <= inference steps <= K = {self.K}, got {n}")
        return [i * (self.K // n) for i in reversed(range(n))]

    def ddim_step(self, eps_hat: torch.Tensor, k: int, k_prev: int, xk: torch.Tensor) -> torch.Tensor:
        """One deterministic DDIM step x_k -> x_{k_prev} (k_prev = -1: the end, bar alpha = 1), x_0 estimate
        clipped to [-1, 1], the noise direction kept unclipped (as diffusers)."""
        ab = float(self.alpha_bar[k])
        ab_prev = float(self.alpha_bar[k_prev]) if k_prev >= 0 else 1.0
        x0 = ((xk - math.sqrt(1 - ab) * eps_hat) / math.sqrt(ab)).clamp(-1, 1)
        return math.sqrt(ab_prev) * x0 + math.sqrt(1 - ab_prev) * eps_hat

    def step(self, eps_hat: torch.Tensor, k: int, xk: torch.Tensor, generator: torch.Generator,
             z: torch.Tensor | None = None) -> torch.Tensor:
        """One ancestral step x_k -> x_{k-1}, x_0 estimate clipped to [-1, 1]; `z`: the step's standard normal
        draw (by default drawn fresh from `generator`)."""
        ab = float(self.alpha_bar[k])
        x0 = ((xk - math.sqrt(1 - ab) * eps_hat) / math.sqrt(ab)).clamp(-1, 1)
        mean = float(self.post_c0[k]) * x0 + float(self.post_ck[k]) * xk
        if k == 0:
            return mean
        if z is None:
            z = torch.randn(xk.shape, generator=generator, dtype=xk.dtype)
        return mean + math.sqrt(float(self.post_var[k])) * z


# ---- observation encoder -------------------------------------------------------------------------
class PointNet(nn.Module):
    """Shared per-point MLP and a max-pool over points: (B, P, 3) -> (B, F); invariant to point order."""

    def __init__(self, hidden: int, out: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(3, hidden), nn.LayerNorm(hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2 * hidden), nn.LayerNorm(2 * hidden), nn.ReLU())
        self.proj = nn.Linear(2 * hidden, out)

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        return self.proj(self.mlp(points).max(dim=-2).values)


class ObsEncoder(nn.Module):
    """The condition c: PointNet features and gripper state of each of the To observations. -> (B, To*(F+S))"""

    def __init__(self, hidden: int, feat: int, state_dim: int, obs_horizon: int):
        super().__init__()
        self.pointnet = PointNet(hidden, feat)
        self.dim = obs_horizon * (feat + state_dim)

    def forward(self, points: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        B, To, P, _ = points.shape  # (B, To, P, 3), state (B, To, S)
        f = self.pointnet(points.reshape(B * To, P, 3)).reshape(B, To, -1)
        return torch.cat([f, state], -1).reshape(B, -1)


# ---- the conditional 1D U-Net (Chi et al. 2023, Sec. 3.2 / Fig. 3) -----------------------------------
class SinusoidalEmbedding(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, k: torch.Tensor) -> torch.Tensor:
        half = self.dim // 2
        freq = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / (half - 1))
        arg = k.float()[:, None] * freq[None]
        return torch.cat([arg.sin(), arg.cos()], -1)


class ConvBlock(nn.Module):
    """Conv1d -> GroupNorm -> Mish."""

    def __init__(self, cin: int, cout: int, kernel: int, groups: int):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(cin, cout, kernel, padding=kernel // 2), nn.GroupNorm(groups, cout), nn.Mish())

    def forward(self, x):
        return self.net(x)


class FiLMResBlock(nn.Module):
    """Two conv blocks; between them FiLM from the condition: h = gamma(cond) * h + beta(cond); a residual."""

    def __init__(self, cin: int, cout: int, cond_dim: int, kernel: int, groups: int):
        super().__init__()
        self.block1 = ConvBlock(cin, cout, kernel, groups)
        self.block2 = ConvBlock(cout, cout, kernel, groups)
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * cout))
        self.skip = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        h = self.block1(x)  # (B, C, T)
        gamma, beta = self.film(cond).unsqueeze(-1).chunk(2, dim=1)  # (B, C, 1) each
        h = gamma * h + beta
        return self.block2(h) + self.skip(x)


class ConditionalUnet1D(nn.Module):
    """eps_theta(x_k, k, c): a U-Net over the action chunk's time axis, FiLM-conditioned at every block.

    Shapes: x (B, Tp, A), k (B,), cond (B, C) -> (B, Tp, A). Tp must be divisible by 2^(levels - 1).
    """

    def __init__(self, action_dim: int, cond_dim: int, dims: tuple = (32, 64), step_dim: int = 32,
                 kernel: int = 3, groups: int = 8):
        super().__init__()
        self.step_embed = nn.Sequential(SinusoidalEmbedding(step_dim), nn.Linear(step_dim, 4 * step_dim), nn.Mish(),
                                        nn.Linear(4 * step_dim, step_dim))
        cd = cond_dim + step_dim
        chans = [action_dim, *dims]
        self.down = nn.ModuleList()
        for i, (cin, cout) in enumerate(zip(chans[:-1], chans[1:])):
            last = i == len(dims) - 1
            self.down.append(nn.ModuleList([FiLMResBlock(cin, cout, cd, kernel, groups),
                                            FiLMResBlock(cout, cout, cd, kernel, groups),
                                            nn.Conv1d(cout, cout, 3, 2, 1) if not last else nn.Identity()]))
        self.mid = nn.ModuleList([FiLMResBlock(dims[-1], dims[-1], cd, kernel, groups) for _ in range(2)])
        self.up = nn.ModuleList()
        for cin, cout in reversed(list(zip(dims[:-1], dims[1:]))):  # (64 -> 32) for dims (32, 64)
            self.up.append(nn.ModuleList([FiLMResBlock(2 * cout, cin, cd, kernel, groups),
                                          FiLMResBlock(cin, cin, cd, kernel, groups),
                                          nn.ConvTranspose1d(cin, cin, 4, 2, 1)]))
        self.final = nn.Sequential(ConvBlock(dims[0], dims[0], kernel, groups), nn.Conv1d(dims[0], action_dim, 1))

    def forward(self, x: torch.Tensor, k: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        c = torch.cat([self.step_embed(k), cond], -1)
        h = x.transpose(1, 2)  # (B, A, Tp)
        skips = []
        for res1, res2, downsample in self.down:
            h = res2(res1(h, c), c)
            skips.append(h)
            h = downsample(h)
        for res in self.mid:
            h = res(h, c)
        for res1, res2, upsample in self.up:
            h = torch.cat([h, skips.pop()], 1)
            h = upsample(res2(res1(h, c), c))
        return self.final(h).transpose(1, 2)


# ---- the two policies ------------------------------------------------------------------------------
class Normalizer(nn.Module):
    """Per-dimension standardisation of points (xyz) and gripper states, fit on the training demos."""

    def __init__(self, points_mean, points_std, state_mean, state_std):
        super().__init__()
        for name, v in (("pm", points_mean), ("ps", points_std), ("sm", state_mean), ("ss", state_std)):
            self.register_buffer(name, torch.as_tensor(v, dtype=torch.float32))

    def forward(self, points, state):
        return (points - self.pm) / self.ps, (state - self.sm) / self.ss


class DiffusionPolicy(nn.Module):
    """PointNet condition + ConditionalUnet1D + DDPM (Sec. 4.2)."""

    def __init__(self, norm: Normalizer, *, hidden: int, feat: int, state_dim: int, action_dim: int,
                 obs_horizon: int, pred_horizon: int, unet_dims: tuple, diffusion_steps: int,
                 inference_steps: int | None = None):
        super().__init__()
        self.norm, self.Tp, self.A = norm, pred_horizon, action_dim
        self.encoder = ObsEncoder(hidden, feat, state_dim, obs_horizon)
        self.unet = ConditionalUnet1D(action_dim, self.encoder.dim, tuple(unet_dims))
        self.ddpm = DDPM(diffusion_steps)
        # None or K: ancestral DDPM over all K steps (the paper); fewer: DDIM over a subsequence
        self.inference_steps = inference_steps or diffusion_steps
        self.ddpm.ddim_steps(self.inference_steps)  # checks the range

    def loss(self, points, state, actions, generator: torch.Generator) -> torch.Tensor:
        cond = self.encoder(*self.norm(points, state))
        k = torch.randint(0, self.ddpm.K, (actions.shape[0],), generator=generator)
        eps = torch.randn(actions.shape, generator=generator)
        return F.mse_loss(self.unet(self.ddpm.noise(actions, k, eps), k, cond), eps)

    @property
    def draws(self) -> int:
        """Standard normal draws (each (Tp, A)) behind one sample: x_K, and under ancestral DDPM one per step."""
        return 1 + (self.ddpm.K if self.inference_steps == self.ddpm.K else 0)

    @torch.no_grad()
    def act(self, points, state, generator: torch.Generator, noise: torch.Tensor | None = None) -> torch.Tensor:
        """An action chunk (B, Tp, A) per observation. `noise`: every standard normal draw of the sample, (B, draws,
        Tp, A) -- x_K first, then (ancestral DDPM) the draw of each step from k = K-1 down -- or (B, Tp, A), x_K
        alone (the later draws fresh); by default all drawn fresh from `generator`. The same `noise` at every step of
        an episode makes the sample a fixed function of the observation (DDIM is deterministic given x_K; DDPM needs
        its per-step draws fixed too)."""
        cond = self.encoder(*self.norm(points, state))
        if noise is not None and noise.dim() == 3:
            noise = noise[:, None]
        x = torch.randn((points.shape[0], self.Tp, self.A), generator=generator) if noise is None else noise[:, 0].clone()
        if self.inference_steps == self.ddpm.K:  # ancestral DDPM
            for k in reversed(range(self.ddpm.K)):
                kk = torch.full((x.shape[0],), k, dtype=torch.long)
                i = self.ddpm.K - k  # the draw of step k (x_K is draw 0)
                z = noise[:, i] if noise is not None and i < noise.shape[1] else None
                x = self.ddpm.step(self.unet(x, kk, cond), k, x, generator, z)
            return x  # (B, Tp, A)
        ks = self.ddpm.ddim_steps(self.inference_steps)
        for k, k_prev in zip(ks, [*ks[1:], -1]):
            kk = torch.full((x.shape[0],), k, dtype=torch.long)
            x = self.ddpm.ddim_step(self.unet(x, kk, cond), k, k_prev, x)
        return x  # (B, Tp, A)


class MLPPolicy(nn.Module):
    """Behaviour cloning: the same condition, an MLP regressing the action chunk (MSE)."""

    def __init__(self, norm: Normalizer, *, hidden: int, feat: int, state_dim: int, action_dim: int,
                 obs_horizon: int, pred_horizon: int, mlp_hidden: int):
        super().__init__()
        self.norm, self.Tp, self.A = norm, pred_horizon, action_dim
        self.encoder = ObsEncoder(hidden, feat, state_dim, obs_horizon)
        self.head = nn.Sequential(nn.Linear(self.encoder.dim, mlp_hidden), nn.ReLU(), nn.Linear(mlp_hidden, mlp_hidden),
                                  nn.ReLU(), nn.Linear(mlp_hidden, pred_horizon * action_dim))

    def _predict(self, points, state):
        return self.head(self.encoder(*self.norm(points, state))).view(-1, self.Tp, self.A)

    def loss(self, points, state, actions, generator: torch.Generator) -> torch.Tensor:
        return F.mse_loss(self._predict(points, state), actions)

    @torch.no_grad()
    def act(self, points, state, generator: torch.Generator, noise: torch.Tensor | None = None) -> torch.Tensor:
        return self._predict(points, state).clamp(-1, 1)  # deterministic: `noise` is not used


class GaussianBC(nn.Module):
    """The unimodal stochastic ablation of the diffusion policy (of what Sec. 4.2 credits it with: modelling a
    multi-modal action distribution): a trained MLP BC network's prediction as the mean of a diagonal Gaussian
    whose per-dimension standard deviation `sigma` (A,) is the maximum-likelihood one on the same demonstrations
    (train.gaussian_sigma); each prediction samples it. It keeps the stochastic sampling and the demonstrations and
    removes the several modes."""

    def __init__(self, mlp: MLPPolicy, sigma):
        super().__init__()
        self.mlp = mlp
        self.register_buffer("sigma", torch.as_tensor(sigma, dtype=torch.float32))

    @torch.no_grad()
    def act(self, points, state, generator: torch.Generator, noise: torch.Tensor | None = None) -> torch.Tensor:
        mean = self.mlp._predict(points, state)
        return (mean + self.sigma * torch.randn(mean.shape, generator=generator)).clamp(-1, 1)
