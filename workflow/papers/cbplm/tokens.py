"""The token layout the four models share: <pad> <cls> <eos> <mask>, the 20 residues, then the
conditional-tag model's concept-bin tokens (K concepts x n_bins)."""
from __future__ import annotations

import numpy as np
import torch

from papers.cbplm.data import AMINO_ACIDS, residue_index

PAD, CLS, EOS, MASK = 0, 1, 2, 3
AA_OFFSET = 4  # token id of AMINO_ACIDS[0]; tag tokens follow the residues
N_SPECIAL = AA_OFFSET + len(AMINO_ACIDS)


# ---- tokens ----------------------------------------------------------------------------------
def tag_token(concept: int, bin_: np.ndarray | int, n_bins: int) -> np.ndarray | int:
    """Token id of bin `bin_` of concept `concept` in the conditional-tag model's vocabulary."""
    return N_SPECIAL + concept * n_bins + bin_


def vocab_size(n_concepts: int, n_bins: int) -> int:
    return N_SPECIAL + n_concepts * n_bins


def encode(sequences, tags: np.ndarray | None = None) -> tuple[torch.Tensor, int]:
    """Tokens ``(B, T)``: <cls> [tags] residues <eos> <pad>...; returns (tokens, first residue index).

    `tags` (B, K) are tag token ids placed right after <cls> (the conditional-tag model's prefix).
    """
    n_prefix = 1 + (0 if tags is None else tags.shape[1])
    lengths = [len(s) for s in sequences]
    tokens = np.full((len(sequences), n_prefix + max(lengths) + 1), PAD, dtype=np.int64)
    tokens[:, 0] = CLS
    if tags is not None:
        tokens[:, 1:n_prefix] = tags
    for i, s in enumerate(sequences):
        tokens[i, n_prefix:n_prefix + len(s)] = residue_index(s) + AA_OFFSET
        tokens[i, n_prefix + len(s)] = EOS
    return torch.from_numpy(tokens), n_prefix


def decode(tokens: torch.Tensor, n_prefix: int, lengths) -> list[str]:
    """Residue strings back from tokens (the inverse of :func:`encode` on the residue span)."""
    aa = np.array(list(AMINO_ACIDS))
    out = tokens[:, n_prefix:].numpy() - AA_OFFSET
    return ["".join(aa[out[i, :n]]) for i, n in enumerate(lengths)]


def residue_mask(tokens: torch.Tensor) -> torch.Tensor:
    """True at residue tokens (not special, not tag)."""
    return (tokens >= AA_OFFSET) & (tokens < N_SPECIAL)


def draw_mask(tokens: torch.Tensor, prob: float, generator: torch.Generator) -> torch.Tensor:
    """Bernoulli(`prob`) over residue positions, as the official _mask_inputs (no 80/10/10 split)."""
    rand = torch.rand(tokens.shape, generator=generator)
    return (rand < prob) & residue_mask(tokens)
