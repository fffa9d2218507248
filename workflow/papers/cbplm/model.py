"""The four masked protein LMs of P7: CB-pLM, a plain masked LM and two conditional LMs (tags, continuous concepts).

All share one encoder (pre-LayerNorm transformer, ESM-2 style as lobster's LMBase, attention by
``kernels.attention`` with the padding mask as bias) and differ only in what sits on top:

* :class:`MaskedLM` (plain, and conditional-tag when the tokens carry concept-bin tags after
  <cls>): LM head = dense, GELU, LayerNorm, linear to the 20 residues. The conditional-tag LM
  (``n_tags`` = K) also adds the sum of its K tag embeddings to every position's input, as a
  class-conditional LM adds its class embedding: a shallow encoder trained briefly barely reads
  prefix tokens through attention (issue 24: with prefix tags alone, shuffling them cost 0.1 of
  perplexity), and a baseline that ignores its handle is no baseline. The continuous-concept
  conditional LM (``n_concepts`` = K; the paper's conditional pLM baselines condition on the
  concept values) adds a linear map of the K standardised concept values to every position's
  input instead, so that it can be sent exactly the request the CB-pLM gets.
* :class:`ConceptBottleneckLM`, the paper's CB-pLM as in the official code (lobster ``CBM``,
  ``LMBaseClassificationHead``, ``LMBaseLinearLMHead``): from the encoder output h,

  .. math::
      \\hat c = W_2 \\tanh(W_1 h_{\\mathrm{cls}}), \\qquad
      z_c = [c_1 e_1, \\dots, c_K e_K] \\in \\mathbb{R}^{K E}, \\qquad
      z_u = \\mathrm{MLP}(h_t) \\in \\mathbb{R}^{U}, \\qquad
      \\mathrm{logits}_t = W_{\\mathrm{dec}} [z_c; z_u] + b,

  with c the true concepts in training (teacher forcing) and \\hat c at inference, where an
  intervention overwrites one entry of c. The unknown part's width U is the official K E (lobster's
  ``token_unk`` is as wide as z_c: 1436 for 718 concepts, wider than the 24M model's 408) but at least
  d_model: with 8 concepts K E = 16 would make z_u narrower than the encoder, a bottleneck the paper's
  models do not have (:func:`unknown_width`). The loss (official ``_compute_loss``) is
  ``CE_masked + 0.1 K MSE(c_hat, c) + 0.1 mean_t |cos(z_c, z_u)|``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import kernels
from papers.cbplm.data import AMINO_ACIDS
from papers.cbplm.params import unknown_width
from papers.cbplm.tokens import PAD

N_AA = len(AMINO_ACIDS)


class Block(nn.Module):
    """Pre-LN transformer block: x + Attn(LN(x)), then x + FF(LN(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln_1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln_2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        y = kernels.attention(q, k, v, bias=keep)  # keep (B, 1, 1, T): True = attend (not padding)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.ff(self.ln_2(x))


class Encoder(nn.Module):
    """Token + learned position embeddings, pre-LN blocks, final LayerNorm; (B, T) -> (B, T, C)."""

    def __init__(self, vocab: int, max_tokens: int, d_model: int, n_layers: int, n_heads: int, d_ff: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_tokens, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)

    def forward(self, tokens: torch.Tensor, n_tags: int = 0, condition: torch.Tensor | None = None) -> torch.Tensor:
        """`n_tags` > 0: tokens[:, 1:1 + n_tags] are condition tags whose summed embedding is added at
        every position (the conditional-tag LM); `condition` (B, C) is added at every position (the
        continuous-concept conditional LM)."""
        T = tokens.shape[1]
        keep = (tokens != PAD)[:, None, None, :]  # (B, 1, 1, T)
        x = self.tok(tokens) + self.pos(torch.arange(T, device=tokens.device))  # (B, T, C)
        if n_tags:
            x = x + self.tok(tokens[:, 1:1 + n_tags]).sum(1, keepdim=True)  # (B, 1, C), broadcast over T
        if condition is not None:
            x = x + condition[:, None, :]  # (B, 1, C), broadcast over T
        for block in self.blocks:
            x = block(x, keep)
        return self.ln_f(x)


def _mlp_head(d_model: int, out: int) -> nn.Sequential:
    """dense, GELU, LayerNorm, linear (lobster LMBaseLMHead / LMBaseMLP)."""
    return nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.LayerNorm(d_model), nn.Linear(d_model, out))


def _init(module: nn.Module) -> None:
    """BERT initialisation: N(0, 0.02) weights, zero biases."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


class MaskedLM(nn.Module):
    """Plain masked LM; with concept-bin tags in its tokens, the conditional-tag baseline; with `n_concepts`, the
    continuous-concept conditional baseline (forward's `concepts`, (B, K) standardised values, required)."""

    def __init__(self, vocab: int, max_tokens: int, d_model: int, n_layers: int, n_heads: int, d_ff: int,
                 n_tags: int = 0, n_concepts: int = 0):
        super().__init__()
        self.n_tags = n_tags  # 0: plain masked LM; K: conditional-tag LM (tags after <cls>, also added everywhere)
        self.n_concepts = n_concepts  # K: continuous-concept conditional LM (W c added everywhere)
        self.encoder = Encoder(vocab, max_tokens, d_model, n_layers, n_heads, d_ff)
        self.concept_in = nn.Linear(n_concepts, d_model) if n_concepts else None
        self.lm_head = _mlp_head(d_model, N_AA)
        _init(self)

    def forward(self, tokens: torch.Tensor, concepts: torch.Tensor | None = None) -> dict:
        if (concepts is None) != (self.concept_in is None):
            raise ValueError("the continuous-concept conditional LM needs `concepts`; the other LMs take none")
        condition = self.concept_in(concepts) if concepts is not None else None
        return {"logits": self.lm_head(self.encoder(tokens, self.n_tags, condition))}  # (B, T, 20)


class ConceptBottleneckLM(nn.Module):
    """CB-pLM: concept head on <cls>, bottleneck [z_c; z_u], one linear layer to the residues."""

    def __init__(self, vocab: int, max_tokens: int, d_model: int, n_layers: int, n_heads: int, d_ff: int,
                 n_concepts: int, concept_emb: int, unknown: int | None = None):
        super().__init__()
        K, E = n_concepts, concept_emb
        U = unknown_width(K, E, d_model, unknown)
        self.encoder = Encoder(vocab, max_tokens, d_model, n_layers, n_heads, d_ff)
        self.concept_head = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh(), nn.Linear(d_model, K))
        self.unknown = _mlp_head(d_model, U)  # z_u (official token_unk), at least d_model wide
        self.decoder = nn.Linear(K * E + U, N_AA)  # the linear concepts(+unknown)-to-tokens map
        _init(self)
        self.concept_emb = nn.Parameter(torch.empty(K, E))  # e_k, one learned vector per concept
        nn.init.trunc_normal_(self.concept_emb, std=1.0 / math.sqrt(E))  # as the official CBM

    def forward(self, tokens: torch.Tensor, concepts: torch.Tensor | None = None,
                intervene: tuple[int, torch.Tensor] | None = None, ablate: int | None = None) -> dict:
        """`concepts` (B, K): teacher forcing (training); None: use the predicted c_hat.
        `intervene` = (k, value (B,)): overwrite concept k before the bottleneck.
        `ablate` = k: concept k's embedding e_k zeroed (the mechanism control of the intervention: its value then
        reaches no logit)."""
        h = self.encoder(tokens)  # (B, T, C)
        B, T, _ = h.shape
        c_hat = self.concept_head(h[:, 0])  # (B, K) from <cls>
        c = c_hat if concepts is None else concepts
        if intervene is not None:
            k, value = intervene
            c = c.clone()
            c[:, k] = value
        emb = self.concept_emb
        if ablate is not None:
            emb = emb.clone()
            emb[ablate] = 0.0
        z_c = (c[:, :, None] * emb).flatten(1)  # (B, K E)
        z_c = z_c[:, None, :].expand(B, T, -1)  # the same at every position
        z_u = self.unknown(h)  # (B, T, U)
        logits = self.decoder(torch.cat([z_c, z_u], dim=-1))  # (B, T, 20)
        return {"logits": logits, "concepts": c_hat, "z_c": z_c, "z_u": z_u}

    def concept_token_weights(self) -> torch.Tensor:
        """d logit_a / d c_k = W_dec[a, block k] . e_k, shape (20, K): how each concept moves each residue."""
        K, E = self.concept_emb.shape
        w = self.decoder.weight[:, : K * E].view(N_AA, K, E)  # (20, K, E)
        return (w * self.concept_emb).sum(-1)


# ---- losses ----------------------------------------------------------------------------------
def masked_ce(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over masked positions; targets are residue indices 0..19."""
    return F.cross_entropy(logits[mask], targets[mask])


def orthogonality_loss(z_c: torch.Tensor, z_u: torch.Tensor) -> torch.Tensor:
    """mean over (B, T) of |cos(z_c, z_u)| (official orthogonality_loss, eps 1e-6). Where z_u is wider than z_c
    (:func:`unknown_width`), z_c is padded with zeros: the cosine is then <z_c, z_u[:KE]> / (|z_c| |z_u|), the
    official one when the widths are equal."""
    gap = z_u.shape[-1] - z_c.shape[-1]
    if gap > 0:
        z_c = F.pad(z_c, (0, gap))
    elif gap < 0:
        z_u = F.pad(z_u, (0, -gap))
    return F.cosine_similarity(z_c, z_u, dim=-1, eps=1e-6).abs().mean()


def concept_loss(c_hat: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """K * MSE(c_hat, c) (official overall_concept_loss)."""
    return c.shape[1] * F.mse_loss(c_hat, c)


def cb_loss(out: dict, targets, mask, concepts, concept_weight: float, orthogonality_weight: float) -> tuple:
    """CB-pLM training loss and its parts: CE + w_c K MSE + w_o |cos|."""
    ce = masked_ce(out["logits"], targets, mask)
    lc = concept_loss(out["concepts"], concepts)
    lo = orthogonality_loss(out["z_c"], out["z_u"])
    return ce + concept_weight * lc + orthogonality_weight * lo, {"ce": ce, "concept": lc, "orthogonality": lo}
