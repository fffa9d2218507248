"""A SMILES language model: a tiny decoder-only transformer (nanoGPT's layout) whose attention is
``kernels.attention(q, k, v, causal=True)``.

Trained on a real drug-like set (ChEMBL), then fine-tuned on a target's known actives, it stands for
the ligand-based generators the paper contrasts with pocket-conditioned SBDD models.
Tokens follow the SMILES regex of Schwaller et al. (2019, Molecular Transformer).
"""
from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import nn

import kernels

SMILES_REGEX = re.compile(r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|/|:|~|@|\?|>|\*|\$|%[0-9]{2}|[0-9])")
PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


def tokenize(smiles: str) -> list[str]:
    tokens = SMILES_REGEX.findall(smiles)
    if "".join(tokens) != smiles:
        raise ValueError(f"SMILES {smiles!r} has characters outside the tokenizer's regex")
    return tokens


class Vocab:
    """Token <-> id; id 0 is padding, then BOS and EOS, then the SMILES tokens sorted."""

    def __init__(self, tokens):
        self.itos = [PAD, BOS, EOS, *sorted(set(tokens) - {PAD, BOS, EOS})]
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def from_smiles(cls, smiles) -> Vocab:
        return cls(t for s in smiles for t in tokenize(s))

    def encode(self, smiles: str, max_tokens: int) -> list[int] | None:
        """[BOS, tokens..., EOS] padded to max_tokens + 2, or None if too long or a token is unknown."""
        tokens = tokenize(smiles)
        if len(tokens) > max_tokens or any(t not in self.stoi for t in tokens):
            return None
        ids = [self.stoi[BOS], *(self.stoi[t] for t in tokens), self.stoi[EOS]]
        return ids + [0] * (max_tokens + 2 - len(ids))

    def decode(self, ids) -> str:
        out = []
        for i in ids:
            if i == self.stoi[EOS] or i == 0:
                break
            if i != self.stoi[BOS]:
                out.append(self.itos[i])
        return "".join(out)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):  # x: (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        y = kernels.attention(q, k, v, causal=True)  # softmax(q k^T / sqrt(D) + causal mask) v, (B, H, T, D)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class SmilesGPT(nn.Module):
    def __init__(self, vocab_size: int, *, d_model: int, n_layer: int, n_head: int, block_size: int):
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def hidden(self, idx):  # idx: (B, T) token ids
        """The last layer's normalised hidden states, (B, T, C): what the head reads."""
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)

    def forward(self, idx):
        return self.head(self.hidden(idx))  # (B, T, vocab)


def loss_fn(model: SmilesGPT, batch: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over real tokens (padding ignored). batch: (B, T) ids."""
    logits = model(batch[:, :-1])  # (B, T-1, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), ignore_index=0)


def train(model: SmilesGPT, data: torch.Tensor, *, steps: int, batch: int, lr: float, generator: torch.Generator,
          progress=lambda it: it) -> list[float]:
    """AdamW with a cosine learning-rate schedule; minibatches drawn with `generator`. Returns losses."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / max(steps, 1))))
    losses = []
    model.train()
    for _ in progress(range(steps)):
        idx = torch.randint(len(data), (batch,), generator=generator)
        x = data[idx]  # (B, max_tokens + 2)
        x = x[:, : int((x != 0).sum(1).max())]  # trim the columns that are padding in every row
        loss = loss_fn(model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def sample(model: SmilesGPT, vocab: Vocab, n: int, *, temperature: float, generator: torch.Generator) -> list[str]:
    """`n` SMILES strings by ancestral sampling from BOS until EOS (may be invalid; "" if none came)."""
    model.eval()
    eos = vocab.stoi[EOS]
    idx = torch.full((n, 1), vocab.stoi[BOS], dtype=torch.long)  # (n, 1)
    done = torch.zeros(n, dtype=torch.bool)
    for _ in range(model.block_size - 1):
        logits = model(idx)[:, -1, :] / temperature  # (n, V)
        logits[:, 0] = -math.inf  # never padding
        nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)  # (n,)
        nxt = torch.where(done, torch.zeros_like(nxt), nxt)
        idx = torch.cat([idx, nxt[:, None]], dim=1)
        done |= nxt == eos
        if done.all():
            break
    # a sequence that never ended is not a molecule (an empty string parses as invalid)
    return [vocab.decode(row.tolist()) if finished else "" for row, finished in zip(idx, done.tolist())]


@torch.no_grad()
def embed(model: SmilesGPT, vocab: Vocab, smiles, *, batch: int = 256) -> torch.Tensor:
    """A learned embedding per molecule: the mean of the LM's last hidden states over its tokens and EOS
    (BOS and padding left out), scaled to unit length, so that a dot product is a cosine similarity.
    Returns (N, C).

    A token the vocabulary lacks is left out and a SMILES longer than the model's context is cut to it,
    so every library compound gets an embedding. Attention is causal and padding comes last, so a
    molecule's embedding does not depend on the others in its batch.
    """
    model.eval()
    limit = model.block_size - 2
    rows = []
    for s in smiles:
        ids = [vocab.stoi[t] for t in tokenize(s) if t in vocab.stoi and t not in (PAD, BOS, EOS)][:limit]
        rows.append([vocab.stoi[BOS], *ids, vocab.stoi[EOS]])
    out = []
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        width = max(len(r) for r in chunk)
        idx = torch.tensor([r + [0] * (width - len(r)) for r in chunk], dtype=torch.long)  # (b, T)
        h = model.hidden(idx)  # (b, T, C)
        keep = (idx != 0).float()
        keep[:, 0] = 0.0  # BOS carries no information about the molecule
        mean = (h * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)  # (b, C)
        out.append(F.normalize(mean, dim=-1))
    return torch.cat(out) if out else torch.empty(0, model.ln_f.normalized_shape[0])
