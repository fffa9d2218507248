"""Several seeds of one model size trained side by side in one process: E copies of the tiny GPT
(papers.orion.model) whose weights carry a leading member axis, so one forward pass runs all of them.

Why: a 4-layer width-32 GPT is too small to keep a CPU core busy, so one step of E members costs little more
than one step of one member. The members stay independent: member e has its own initial weights (those of
``GPT(cfg)`` built after ``torch.manual_seed(seed_e)``), its own batches, its own AdamW state (AdamW is
elementwise, so one optimiser over the stacked weights is E optimisers) and its own gradient clipping
(:func:`clip_per_member`). :meth:`EnsembleGPT.member` gives member e back as a plain :class:`GPT` with the same
weights, which is what the analysis (request-patching with hooks) runs on.

The computation is GPT.forward written with a member axis: for x (E, B, T, C), a linear layer is
``einsum("ebtc,ecd->ebtd", x, W) + b[:, None, None]`` with W (E, C_in, C_out) = the member's nn.Linear weight
transposed; attention folds (E, B) into one batch axis for ``kernels.attention``.
"""
from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

import kernels
from papers.orion.model import GPT, GPTConfig, additive_mask, causal_window, rotary, rotary_angles, routing_masks

# GPT parameter name -> how it is stored here (Linear weights transposed to (in, out)).
_LINEARS = ("attn.c_attn", "attn.c_proj", "mlp.0", "mlp.2")
_NORMS = ("ln_1", "ln_2")


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x (E, B, T, C_in) @ w (E, C_in, C_out) + b (E, C_out), per member."""
    return torch.einsum("ebtc,ecd->ebtd", x, w) + b[:, None, None]


def _bmm_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x (E, N, C_in) @ w (E, C_in, C_out) + b (E, C_out): :func:`_linear` on rows flattened (the einsum's bmm)."""
    return torch.bmm(x, w) + b[:, None]


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """LayerNorm over channels with per-member gain and bias (E, C), x (E, ..., C); eps as nn.LayerNorm's (1e-5)."""
    shape = (w.shape[0],) + (1,) * (x.dim() - 2) + w.shape[1:]  # x (E, ..., C)
    return F.layer_norm(x, x.shape[-1:]) * w.view(shape) + b.view(shape)


class EnsembleGPT(nn.Module):
    """E independent GPTs of one config, stacked. Build with :meth:`from_members`, read back with :meth:`member`."""

    def __init__(self, cfg: GPTConfig, members: int):
        super().__init__()
        self.cfg, self.members = cfg, members
        E, C, V = members, cfg.n_embd, cfg.vocab_size
        self.params = nn.ParameterDict()
        self.params["wte"] = nn.Parameter(torch.zeros(E, V, C))  # also the head (weight tying)
        for i in range(cfg.n_layer):
            for norm in _NORMS:
                self.params[f"b{i}_{norm}_w"] = nn.Parameter(torch.ones(E, C))
                self.params[f"b{i}_{norm}_b"] = nn.Parameter(torch.zeros(E, C))
            for name, (c_in, c_out) in zip(_LINEARS, ((C, 3 * C), (C, C), (C, 4 * C), (4 * C, C))):
                key = name.replace(".", "_")
                self.params[f"b{i}_{key}_w"] = nn.Parameter(torch.zeros(E, c_in, c_out))
                self.params[f"b{i}_{key}_b"] = nn.Parameter(torch.zeros(E, c_out))
            if cfg.kv_window > 1:
                self.params[f"b{i}_attn_kv_mix"] = nn.Parameter(torch.zeros(E, 2, C, cfg.kv_window))
        self.params["ln_f_w"] = nn.Parameter(torch.ones(E, C))
        self.params["ln_f_b"] = nn.Parameter(torch.zeros(E, C))
        cos, sin = rotary_angles(cfg.block_size, C // cfg.n_head)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @classmethod
    def from_members(cls, models: list[GPT]) -> "EnsembleGPT":
        """Stack the weights of `models` (same config) as members 0 .. E - 1."""
        ens = cls(models[0].cfg, len(models))
        with torch.no_grad():
            for key, value in ens.params.items():
                value.copy_(torch.stack([_gpt_tensor(m.state_dict(), key) for m in models]))
        return ens

    def member(self, e: int) -> GPT:
        """Member e as a plain GPT (a copy of its current weights). The GPT is a copy of one built once per config
        (:func:`_template`): building one draws its initial weights, which are overwritten here anyway."""
        model = copy.deepcopy(_template(self.cfg))
        state = model.state_dict()
        with torch.no_grad():
            for key, value in self.params.items():
                for name, tensor in _gpt_names(key, value[e]):
                    state[name].copy_(tensor)
        model.load_state_dict(state)
        return model.eval()

    def forward(self, idx: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (E, B, T, V) for token ids idx (E, B, T): member e reads idx[e]; with `members` (E indices), the
        e-th row of idx is read by member members[e] (a subset of the members, as papers.orion.train's parts). With
        `members`, the weights are always taken by index, even when it names every member: each call then adds one
        term to each member's gradient, so the sum over a step's calls is the same whichever members share them.

        The same operations as :meth:`forward_reference` (GPT.forward per member), bit for bit (a test checks), in
        fewer and larger ones: activations kept as (E, B T, C) so that a linear layer is one ``torch.bmm`` (the
        einsum's own kernel), and the rotary rotation of q and k done together on the qkv output, in the
        rotate-half form x * (cos, cos) + (x2, x1) * (-sin, sin), which is the same products and sums as
        model.rotary's (x1 cos - x2 sin, x2 cos + x1 sin). The routed model's boolean masks are turned into
        additive ones once per call, not once per block."""
        E, B, T = idx.shape
        C, H = self.cfg.n_embd, self.cfg.n_head
        N = B * T
        p = self.params
        if members is not None:
            p = {k: v[members] for k, v in p.items()}
        wte = p["wte"]  # (E, V, C)
        x = torch.gather(wte, 1, idx.reshape(E, N, 1).expand(-1, -1, C))  # (E, B T, C)
        masks = None
        if self.cfg.request_markers:  # 2 x (E B, 1, T, T), additive: the routed model's block 1, blocks after it
            masks = [additive_mask(m[:, None], x.dtype) for m in routing_masks(
                idx.reshape(E * B, T), torch.tensor(self.cfg.request_markers, device=idx.device))]
        for i in range(self.cfg.n_layer):
            h = _layer_norm(x, p[f"b{i}_ln_1_w"], p[f"b{i}_ln_1_b"])
            qkv = _bmm_linear(h, p[f"b{i}_attn_c_attn_w"], p[f"b{i}_attn_c_attn_b"])  # (E, B T, 3C)
            y = self._attention(qkv.view(E, B, T, 3 * C), i, p.get(f"b{i}_attn_kv_mix"),
                                None if masks is None else masks[0 if i == 0 else 1]).view(E, N, C)
            x = x + _bmm_linear(y, p[f"b{i}_attn_c_proj_w"], p[f"b{i}_attn_c_proj_b"])
            h = _layer_norm(x, p[f"b{i}_ln_2_w"], p[f"b{i}_ln_2_b"])
            h = F.gelu(_bmm_linear(h, p[f"b{i}_mlp_0_w"], p[f"b{i}_mlp_0_b"]))
            x = x + _bmm_linear(h, p[f"b{i}_mlp_2_w"], p[f"b{i}_mlp_2_b"])
        x = _layer_norm(x, p["ln_f_w"], p["ln_f_b"])
        return torch.bmm(x, wte.transpose(1, 2)).view(E, B, T, -1)

    def _attention(self, qkv: torch.Tensor, i: int, kv_mix: torch.Tensor | None, mask: torch.Tensor | None
                   ) -> torch.Tensor:
        """Block i's attention (model.CausalSelfAttention) on qkv (E, B, T, 3C), the c_attn outputs of E members
        (kv_mix (E, 2, C, K), their key/value windows; mask (E B, 1, T, T), additive, the routed model's, else
        causal): the heads' outputs y (E B T, C), rows in (E, B, T) order, before c_proj. Without a window, q and
        k are rotated together in the rotate-half form x * (cos, cos) + (x2, x1) * (-sin, sin), the same products
        and sums as model.rotary's (x1 cos - x2 sin, x2 cos + x1 sin)."""
        E, B, T, _ = qkv.shape
        C, H = self.cfg.n_embd, self.cfg.n_head
        D = C // H
        cos, sin = self.cos[:T], self.sin[:T]  # (T, D/2)
        if kv_mix is not None:  # per member: w (E, 1, 1, C, K) against k (E, B, T, C)
            q, k, v = qkv.split(C, dim=-1)
            w = kv_mix[:, :, None, None]
            k = causal_window(k, w[:, 0])
            if self.cfg.windows_values(i):
                v = causal_window(v, w[:, 1])
            q, k, v = (z.reshape(E * B, T, H, D).transpose(1, 2) for z in (q, k, v))  # (E B, H, T, D)
            q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        else:
            # over the view (E, B, T, 2 [q, k], H, 2 [halves], D/2) of q and k: the rotate-half tables
            cos2 = torch.stack([cos, cos], 1)[:, None, None]  # (T, 1, 1, 2, D/2)
            sin2 = torch.stack([-sin, sin], 1)[:, None, None]
            qkv = qkv.view(E, B, T, 3, H, 2, D // 2)
            qk = qkv[:, :, :, :2]
            qk = qk * cos2 + torch.cat([qk[..., 1:, :], qk[..., :1, :]], -2) * sin2  # rotary on q and k
            qk = qk.view(E * B, T, 2, H, D)
            q, k = qk[:, :, 0].transpose(1, 2), qk[:, :, 1].transpose(1, 2)  # (E B, H, T, D)
            v = qkv[:, :, :, 2].reshape(E * B, T, H, D).transpose(1, 2)
        if mask is not None:
            y = kernels.attention(q, k, v, bias=mask)
        else:
            y = kernels.attention(q, k, v, causal=True)
        return y.transpose(1, 2).reshape(E * B * T, C)

    def forward_packed(self, ids: torch.Tensor, parts: list[tuple[torch.Tensor, int, int]], pos: list[torch.Tensor],
                       heads: list[torch.Tensor]) -> list[torch.Tensor]:
        """The training pass without the padding: member e's logits (m_e, V) at its tokens pos[e][heads[e]].

        ids (P,): the token ids of a step's parts (papers.orion.train.length_buckets), each part (rows, B, T) (its
        members' indices, sequences, padded length) flattened in (member, sequence, position) order and the parts
        one after another; pos[e]: the indices in ids of member e's real tokens (not the padding), in that order;
        heads[e] (len(pos[e]),) bool: where its logits are wanted (the tokens whose next token the loss reads).

        The position-wise layers (norms, linears, MLP, head) run on each member's real tokens alone, one matrix
        product per member (a member's shapes are those of its own batch, so a seed trains the same alone or in
        any stack); only attention sees the padded layout: the members' q, k, v are scattered into it (zeros at the
        padding, which sits after each sequence's last token and which causal attention never lets a real token
        read) and each part's attention is :meth:`forward`'s. The same function as :meth:`forward` at those tokens,
        with other float rounding (fused layer norms, per-member products; a test holds the losses and gradients to
        GPT.forward's within float tolerance): ~20% of a step's positions were padding."""
        C = self.cfg.n_embd
        p = {k: v.unbind(0) for k, v in self.params.items()}  # per member: one backward op per weight
        counts = [len(q) for q in pos]
        flat = torch.cat(pos)
        markers = torch.tensor(self.cfg.request_markers, device=ids.device) if self.cfg.request_markers else None
        layout, sizes, start = [], [], 0  # per part: rows, padded shape, the routed model's masks; its size in ids
        for rows, B, T in parts:
            n = len(rows) * B * T
            masks = None if markers is None else [additive_mask(m[:, None], self.params["wte"].dtype)
                                                  for m in routing_masks(ids[start:start + n].view(-1, T), markers)]
            layout.append((rows, B, T, masks))
            sizes.append(n)
            start += n
        P = start

        def linear(h, name):  # per member: h[e] (n_e, C_in) @ W_e + b_e
            return [torch.addmm(b, he, w) for he, w, b in zip(h, p[f"{name}_w"], p[f"{name}_b"])]

        def norm(h, name):
            return [F.layer_norm(he, (C,), w, b) for he, w, b in zip(h, p[f"{name}_w"], p[f"{name}_b"])]

        x = [F.embedding(ids[q], wte) for q, wte in zip(pos, p["wte"])]  # (n_e, C)
        for i in range(self.cfg.n_layer):
            qkv = torch.cat(linear(norm(x, f"b{i}_ln_1"), f"b{i}_attn_c_attn"))  # (sum n_e, 3C)
            # the padded layout, zeros at the padding (split, not sliced: one gradient buffer, not one per part)
            padded = qkv.new_zeros(P, 3 * C).index_put_((flat,), qkv).split(sizes)
            kv_mix = self.params.get(f"b{i}_attn_kv_mix") if self.cfg.kv_window > 1 else None
            y = torch.cat([self._attention(part.view(len(rows), B, T, 3 * C), i,
                                           None if kv_mix is None else kv_mix[rows],
                                           None if masks is None else masks[0 if i == 0 else 1])
                           for part, (rows, B, T, masks) in zip(padded, layout)])  # (P, C)
            y = y.index_select(0, flat).split(counts)
            x = [xe + ye for xe, ye in zip(x, linear(y, f"b{i}_attn_c_proj"))]
            h = [F.gelu(he) for he in linear(norm(x, f"b{i}_ln_2"), f"b{i}_mlp_0")]
            x = [xe + he for xe, he in zip(x, linear(h, f"b{i}_mlp_2"))]
        return [F.linear(F.layer_norm(xe[head], (C,), w, b), wte)
                for xe, head, w, b, wte in zip(x, heads, p["ln_f_w"], p["ln_f_b"], p["wte"])]

    def forward_reference(self, idx: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`forward` written op for op as GPT.forward with a member axis (einsum linears, model.rotary on q
        and k apart, boolean masks): the straightforward path that the tests hold :meth:`forward` to, bit for bit."""
        E, B, T = idx.shape
        C, H = self.cfg.n_embd, self.cfg.n_head
        p = self.params
        if members is not None:
            p = {k: v[members] for k, v in p.items()}
        wte = p["wte"]  # (E, V, C)
        x = torch.gather(wte, 1, idx.reshape(E, B * T, 1).expand(-1, -1, C)).view(E, B, T, C)
        cos, sin = self.cos[:T], self.sin[:T]
        masks = routing_masks(idx.reshape(E * B, T), torch.tensor(self.cfg.request_markers, device=idx.device)) \
            if self.cfg.request_markers else None  # 2 x (E B, T, T): the routed model's block 1, blocks after it
        for i in range(self.cfg.n_layer):
            h = _layer_norm(x, p[f"b{i}_ln_1_w"], p[f"b{i}_ln_1_b"])
            q, k, v = _linear(h, p[f"b{i}_attn_c_attn_w"], p[f"b{i}_attn_c_attn_b"]).split(C, dim=-1)
            if self.cfg.kv_window > 1:  # per member: w (E, 1, 1, C, K) against k (E, B, T, C)
                w = p[f"b{i}_attn_kv_mix"][:, :, None, None]
                k = causal_window(k, w[:, 0])
                if self.cfg.windows_values(i):
                    v = causal_window(v, w[:, 1])
            q, k, v = (z.reshape(E * B, T, H, C // H).transpose(1, 2) for z in (q, k, v))  # (E B, H, T, D)
            q, k = rotary(q, cos, sin), rotary(k, cos, sin)
            if masks is not None:
                y = kernels.attention(q, k, v, bias=masks[0 if i == 0 else 1][:, None])
            else:
                y = kernels.attention(q, k, v, causal=True)
            y = y.transpose(1, 2).reshape(E, B, T, C)
            x = x + _linear(y, p[f"b{i}_attn_c_proj_w"], p[f"b{i}_attn_c_proj_b"])
            h = _layer_norm(x, p[f"b{i}_ln_2_w"], p[f"b{i}_ln_2_b"])
            h = F.gelu(_linear(h, p[f"b{i}_mlp_0_w"], p[f"b{i}_mlp_0_b"]))
            x = x + _linear(h, p[f"b{i}_mlp_2_w"], p[f"b{i}_mlp_2_b"])
        x = _layer_norm(x, p["ln_f_w"], p["ln_f_b"])
        return torch.einsum("ebtc,evc->ebtv", x, wte)


_TEMPLATES: dict = {}


def _template(cfg: GPTConfig) -> GPT:
    """A GPT of `cfg`, built once (its weights are never read: :meth:`EnsembleGPT.member` overwrites them all)."""
    if cfg not in _TEMPLATES:
        _TEMPLATES[cfg] = GPT(cfg)
    return _TEMPLATES[cfg]


def _gpt_key(key: str) -> tuple[str, bool]:
    """The GPT state-dict name of a stacked weight, and whether it is a transposed Linear weight."""
    if key == "wte":
        return "wte.weight", False
    if key.startswith("ln_f_"):
        return f"ln_f.{'weight' if key.endswith('_w') else 'bias'}", False
    block, rest = key.split("_", 1)
    i = int(block[1:])
    if rest == "attn_kv_mix":
        return f"blocks.{i}.attn.kv_mix", False
    kind = "weight" if rest.endswith("_w") else "bias"
    stem = rest[:-2]
    for norm in _NORMS:
        if stem == norm:
            return f"blocks.{i}.{norm}.{kind}", False
    for name in _LINEARS:
        if stem == name.replace(".", "_"):
            return f"blocks.{i}.{name}.{kind}", kind == "weight"
    raise KeyError(key)


def _gpt_tensor(state: dict, key: str) -> torch.Tensor:
    name, transposed = _gpt_key(key)
    return state[name].t() if transposed else state[name]


def _gpt_names(key: str, value: torch.Tensor):
    name, transposed = _gpt_key(key)
    yield name, value.t() if transposed else value
    if key == "wte":
        yield "lm_head.weight", value  # tied


def clip_per_member(params, max_norm: float) -> torch.Tensor:
    """Scale each member's gradient so that its global norm (over all its weights) is at most `max_norm`, as
    ``torch.nn.utils.clip_grad_norm_`` does for one model. Returns the E norms before clipping."""
    params = [q for q in params if q.grad is not None]
    norms = torch.sqrt(sum(q.grad.pow(2).flatten(1).sum(1) for q in params))  # (E,)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for q in params:
        q.grad.mul_(scale.view(-1, *([1] * (q.dim() - 1))))
    return norms


def decay_groups(ens: EnsembleGPT, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices (the linear weights and the tied embedding: dim 3 with the
    member axis), none on biases, norms and the key/value mixing weights (which start at the identity)."""
    decay = [q for q in ens.parameters() if q.dim() == 3]
    rest = [q for q in ens.parameters() if q.dim() != 3]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def init_members(cfg: GPTConfig, seeds: list[int]) -> list[GPT]:
    """One GPT per seed, each initialised after torch.manual_seed(seed) (its GPT-2 init, model.GPT)."""
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(GPT(cfg))
    return models

