"""MoSAT (BodyGen Sec. 3.2), its no-TopoPE ablation and a Transform2Act-style graph network, with the
policy heads of the three stages and the critic.

Every limb is a token: depth one-hot, stage one-hot, simulator features and the limb's design attributes,
normalised by one running normaliser shared by all tokens (official ``uni_obs_norm``).

MoSAT encoder, per token i (pre-LN transformer, attention over all limbs, padding mask only):

.. math::
    h_i^0 = W_{in} \\tilde x_i + E[\\mathrm{code}_i], \\qquad
    h^{l+1/2} = h^l + \\mathrm{Attn}(\\mathrm{LN}(h^l)), \\qquad h^{l+1} = h^{l+1/2} + \\mathrm{MLP}(\\mathrm{LN}(h^{l+1/2}))

where ``E`` is TopoPE, an embedding indexed by the limb's path from the root (official ``pos_emb_type:
index`` with the body name read as a number), and Attn is single-head scaled dot-product attention as in
the official ``MaskedSelfAttention``. The Transform2Act-style encoder replaces attention by GraphConv
(Morris et al., 2019) over the limb tree: :math:`h_i' = \\tanh(W_1 h_i + W_2 \\sum_{j \\in N(i)} h_j)`.

Shapes: B samples, L limbs (padded), F token features, D hidden width.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from papers.bodygen.morphology import BASE, N_ATTR, N_SKEL

ARCHS = ("mosat", "mosat_no_topope", "gnn")


class RunningNorm(nn.Module):
    """Per-feature running mean and std over every token seen (Welford, merged per batch); clips at +-clip."""

    def __init__(self, dim: int, clip: float = 5.0):
        super().__init__()
        self.clip = clip
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("m2", torch.zeros(dim, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:  # x (N, dim)
        x = x.double()
        n, mean, m2 = x.shape[0], x.mean(0), ((x - x.mean(0)) ** 2).sum(0)
        total = self.count + n
        delta = mean - self.mean
        self.m2 += m2 + delta ** 2 * self.count * n / total
        self.mean += delta * n / total
        self.count.copy_(total)

    def std(self) -> torch.Tensor:
        return torch.sqrt(self.m2 / self.count.clamp(min=1.0)).clamp(min=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.count < 2:
            return x
        return ((x - self.mean.float()) / self.std().float()).clamp(-self.clip, self.clip)


class Block(nn.Module):
    """Pre-LN transformer block, single-head attention with a key padding mask, SiLU MLP of ratio 4."""

    def __init__(self, d: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))

    def forward(self, h, mask):  # h (B, L, D), mask (B, L) True for real limbs
        x = self.ln1(h)
        q, k, v = self.q(x), self.k(x), self.v(x)
        att = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])  # (B, L, L)
        att = att.masked_fill(~mask[:, None, :], float("-inf")).softmax(-1)
        h = h + att @ v
        return h + self.mlp(self.ln2(h))


class MoSAT(nn.Module):
    """Topology-aware transformer encoder; ``topope=False`` is the no-TopoPE ablation (no position signal)."""

    def __init__(self, f: int, d: int, blocks: int, max_depth: int, topope: bool = True, code_base: int = BASE):
        super().__init__()
        self.inp = nn.Linear(f, d)
        # Path codes of a tree of depth < max_depth with at most base - 1 children per limb are < base**max_depth.
        self.topo = nn.Embedding(code_base ** max_depth, d) if topope else None
        self.blocks = nn.ModuleList(Block(d) for _ in range(blocks))

    def forward(self, x, codes, mask, adj):  # -> (B, L, D)
        h = self.inp(x)
        if self.topo is not None:
            h = h + self.topo(codes)
        for block in self.blocks:
            h = block(h, mask)
        return h


class GraphNet(nn.Module):
    """Transform2Act-style encoder: GraphConv layers over the limb tree (dense adjacency of the padded batch)."""

    def __init__(self, f: int, d: int, layers: int):
        super().__init__()
        self.inp = nn.Linear(f, d)
        self.self_w = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.nbr_w = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(layers))

    def forward(self, x, codes, mask, adj):  # adj (B, L, L): 1 between parent and child
        h = torch.tanh(self.inp(x))
        for w1, w2 in zip(self.self_w, self.nbr_w):
            h = torch.tanh(w1(h) + w2(adj @ h))  # sum over the neighbours j of i
        return h * mask[..., None]


def encoder(arch: str, f: int, d: int, blocks: int, max_depth: int, code_base: int = BASE) -> nn.Module:
    if arch == "gnn":
        return GraphNet(f, d, blocks)
    return MoSAT(f, d, blocks, max_depth, topope=arch == "mosat", code_base=code_base)


def mlp(d_in: int, hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, d_out))


class Agent(nn.Module):
    """Skeleton, attribute and control policies and the critic, each with its own encoder (official layout).

    The skeleton policy is categorical per limb (no-op / add / remove); the attribute policy a Gaussian delta
    per limb; the control policy a Gaussian torque per limb; the critic reads the root token.
    """

    def __init__(self, arch: str, f: int, d: int, blocks: int, head_hidden: int, max_depth: int,
                 attr_log_std: float, control_log_std: float, code_base: int = BASE):
        super().__init__()
        if arch not in ARCHS:
            raise ValueError(f"arch {arch!r}: one of {ARCHS}")
        self.norm = RunningNorm(f)
        self.enc = nn.ModuleDict({k: encoder(arch, f, d, blocks, max_depth, code_base)
                                  for k in ("skel", "attr", "ctrl", "value")})
        self.skel_head = mlp(d, head_hidden, N_SKEL)
        self.attr_head = mlp(d, head_hidden, N_ATTR)
        self.ctrl_head = mlp(d, head_hidden, 1)
        self.value_head = mlp(d, head_hidden, 1)
        self.attr_log_std = nn.Parameter(torch.full((N_ATTR,), attr_log_std))
        self.ctrl_log_std = nn.Parameter(torch.full((1,), control_log_std))

    def encode(self, which, obs):
        return self.enc[which](self.norm(obs["x"]), obs["codes"], obs["mask"], obs["adj"])

    def value(self, obs):  # (B,) in the return normaliser's units
        return self.value_head(self.encode("value", obs)[:, 0]).squeeze(-1)

    def skel_dist(self, obs):
        return torch.distributions.Categorical(logits=self.skel_head(self.encode("skel", obs)),  # (B, L)
                                               validate_args=False)  # argument checks: per-call overhead only

    def attr_dist(self, obs):
        mu = self.attr_head(self.encode("attr", obs))  # (B, L, N_ATTR)
        return torch.distributions.Normal(mu, self.attr_log_std.exp().expand_as(mu), validate_args=False)

    def ctrl_dist(self, obs):
        mu = self.ctrl_head(self.encode("ctrl", obs)).squeeze(-1)  # (B, L)
        return torch.distributions.Normal(mu, self.ctrl_log_std.exp().expand_as(mu), validate_args=False)

    def log_prob(self, stage: int, obs, act, valid):
        """Joint log-probability of a sample's action: the sum over its valid limbs (and attributes)."""
        if stage == 0:
            return (self.skel_dist(obs).log_prob(act["skel"]) * valid["skel"]).sum(-1)
        if stage == 1:
            return (self.attr_dist(obs).log_prob(act["attr"]) * valid["attr"]).sum((-1, -2))
        return (self.ctrl_dist(obs).log_prob(act["ctrl"]) * valid["ctrl"]).sum(-1)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
