"""The synthetic task of the language-model level: string reversal with label noise.

A prompt is a random string of n letters from an alphabet of A letters; its correct answer is the string
reversed. In the pretraining corpus each answer letter is independently replaced, with probability `noise`,
by a letter drawn uniformly from the alphabet. A model that learns the corpus puts probability
q = 1 - noise + noise / A on the correct letter at every position and noise / A on each other, so

- the correct answer is the sequence-level mode (maximum likelihood is right: q > noise / A);
- a sample is correct with probability q^n only: usually wrong, and exponentially rarer in n. The
  coverage coefficient of such a model is C_cov = q^-n, which is why the long-answer variant has low
  coverage.

Encoding: token 0 pads, token 1 separates prompt and answer, tokens 2 .. A+1 are the letters. Prompts are
left-padded to `max_len`, so the separator always sits at position max_len and answer letter i at
max_len + 1 + i copies prompt position max_len - 1 - i whatever n is.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

PAD, SEP, FIRST_LETTER = 0, 1, 2


def vocab_size(alphabet: int) -> int:
    return FIRST_LETTER + alphabet


def per_letter_correct(alphabet: int, noise: float) -> float:
    """q, the probability of the correct letter at one position under the noisy corpus."""
    return 1.0 - noise + noise / alphabet


def random_prompts(rng: np.random.Generator, count: int, lengths, alphabet: int) -> pd.DataFrame:
    """`count` prompts with lengths drawn uniformly from `lengths`; columns prompt, answer (strings)."""
    letters = np.array([chr(ord("a") + i) for i in range(alphabet)])
    n = rng.choice(np.asarray(lengths), size=count)
    prompts = ["".join(letters[rng.integers(alphabet, size=k)]) for k in n]
    return pd.DataFrame({"prompt": prompts, "answer": [p[::-1] for p in prompts]})


def corrupt(rng: np.random.Generator, answers, alphabet: int, noise: float) -> list[str]:
    """Each letter replaced with probability `noise` by a uniform letter (which may be the same one)."""
    out = []
    for a in answers:
        chars = np.array(list(a))
        flip = rng.random(len(chars)) < noise
        chars[flip] = [chr(ord("a") + i) for i in rng.integers(alphabet, size=int(flip.sum()))]
        out.append("".join(chars))
    return out


def encode_prompts(prompts, max_len: int) -> np.ndarray:
    """Left-padded prompt and separator, (B, max_len + 1) int64."""
    out = np.full((len(prompts), max_len + 1), PAD, dtype=np.int64)
    for i, p in enumerate(prompts):
        if not 1 <= len(p) <= max_len:
            raise ValueError(f"prompt {i} ({p!r}) must have 1 .. {max_len} letters")
        out[i, max_len - len(p):max_len] = [FIRST_LETTER + ord(c) - ord("a") for c in p]
    out[:, max_len] = SEP
    return out


def encode_answers(answers, length: int) -> np.ndarray:
    """Answer letters right-padded to `length`, (B, length) int64, and their mask (B, length) bool."""
    tokens = np.full((len(answers), length), PAD, dtype=np.int64)
    for i, a in enumerate(answers):
        tokens[i, :len(a)] = [FIRST_LETTER + ord(c) - ord("a") for c in a]
    return tokens, tokens != PAD


def decode(tokens) -> str:
    return "".join(chr(ord("a") + int(t) - FIRST_LETTER) if t >= FIRST_LETTER else ("|" if t == SEP else "_")
                   for t in tokens)
