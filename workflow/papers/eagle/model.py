"""The tiny causal LM and the multimodal model: experts -> fusion -> visual tokens, then the question.

The LM reuses the GPT blocks of papers.common.gpt (nanoGPT layout, attention by
``kernels.attention``); its position embedding covers the question's words only, the visual tokens
carry the fusion's own position embedding (as LLaVA's image tokens carry the vision tower's).

Sequence (Sec. 2.1 Base setup: LLaVA's layout): ``[v_1 .. v_N, w_1 .. w_5, "?"]``; the logits at "?" predict the
one-word answer.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import kernels
from papers.eagle.experts import Tower
from papers.common.gpt import Block, GPTConfig


class LM(nn.Module):
    """Token + position embeddings, pre-norm causal blocks, final LayerNorm, tied head."""

    def __init__(self, vocab: int, length: int, d_model: int, n_layer: int, n_head: int):
        super().__init__()
        cfg = GPTConfig(vocab_size=vocab, block_size=length, n_layer=n_layer, n_head=n_head, n_embd=d_model)
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(length, d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, prefix: torch.Tensor | None = None, last_only: bool = False) -> torch.Tensor:
        """Logits (B, T, V) at the text positions; `prefix` (B, N, d) visual tokens come first. `last_only`: the
        logits at the last position alone (B, 1, V), the answer's, the same numbers with the last block computed
        at that position only (:func:`last_position`)."""
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))  # (B, T, d)
        n = 0 if prefix is None else prefix.shape[1]
        if prefix is not None:
            x = torch.cat([prefix, x], dim=1)  # (B, N + T, d)
        blocks = list(self.blocks)
        if last_only:
            for block in blocks[:-1]:
                x = block(x)
            return self.head(self.ln_f(last_position(blocks[-1], x)))  # (B, 1, V)
        for block in blocks:
            x = block(x)
        return self.head(self.ln_f(x[:, n:]))


def last_position(block: Block, x: torch.Tensor) -> torch.Tensor:
    """block(x)[:, -1:] computed at the last position only: x (B, T, d) -> (B, 1, d).

    In a causal block the last position's output needs every position's keys and values but only its own query,
    attention row and MLP; the answer is read there, so the training step skips the rest of the last block (the
    GPT blocks of papers.common.gpt, their own weights; the causal mask is bottom-right, so one query sees all T keys).
    """
    B, T, C = x.shape
    H = block.attn.n_head
    q, k, v = block.attn.c_attn(block.ln_1(x)).split(C, dim=2)  # 3 x (B, T, C)
    q = q[:, -1:].reshape(B, 1, H, C // H).transpose(1, 2)  # (B, H, 1, D)
    k, v = (z.reshape(B, T, H, C // H).transpose(1, 2) for z in (k, v))  # (B, H, T, D)
    y = kernels.attention(q, k, v, causal=True)  # (B, H, 1, D)
    h = x[:, -1:] + block.attn.c_proj(y.transpose(1, 2).reshape(B, 1, C))
    return h + block.mlp(block.ln_2(h))


def pretrain_lm(lm: LM, tokens: torch.Tensor, answers: torch.Tensor, *, steps: int, batch: int, lr: float, rng) -> list[float]:
    """Next-token prediction on the QA text "<question> ? <answer>" (no image): the LM learns the
    language of the task and the answers' prior given the question."""
    seq = torch.cat([tokens, answers[:, None]], dim=1)  # (Q, 7)
    opt = torch.optim.Adam(lm.parameters(), lr=lr)
    curve = []
    for _ in range(steps):
        i = torch.as_tensor(rng.integers(0, len(seq), batch))
        logits = lm(seq[i, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), seq[i, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        curve.append(loss.item())
    return curve


class MLLM(nn.Module):
    """Experts (each fed the canvas or, for a control, Gaussian noise), a fusion, the LM.

    The experts' frozen lower layers (:meth:`Tower.trunk`) run once per canvas outside the model (a cache,
    papers.eagle.train.trunk_bank); the model takes their activations and applies each expert's last layer
    (:meth:`Tower.top`), the fusion and the LM.
    """

    def __init__(self, towers: list[Tower], inputs: list[str], fusion: nn.Module, lm: LM):
        super().__init__()
        self.towers = nn.ModuleList(towers)
        self.inputs = list(inputs)
        self.fusion = fusion
        self.lm = lm

    def visual_tokens(self, trunks: list[torch.Tensor]) -> torch.Tensor:
        """trunks[e] (B, width, S_e, S_e): expert e's lower-layer activations -> visual tokens (B, N, d)."""
        return self.fusion([tower.top(h) for tower, h in zip(self.towers, trunks)])

    def forward(self, trunks: list[torch.Tensor], question: torch.Tensor) -> torch.Tensor:
        """trunks (one per expert), question (B, 6) -> answer logits (B, V) read at "?"."""
        return self.lm(question, self.visual_tokens(trunks), last_only=True)[:, -1]
