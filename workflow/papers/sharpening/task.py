"""The synthetic task of the language-model level: string reversal with correlated, prompt-dependent decoys.

A prompt x is a random string of n letters (n even) from an alphabet of A letters; its correct answer y* is
x reversed, read as K = n / 2 pairs of letters. The pretraining corpus writes each pair independently:

- with probability a(x) the correct pair (y*_{2i}, y*_{2i+1});
- otherwise the *decoy* pair (d(y*_{2i}), u): the letter after y*_{2i} in the alphabet (cyclically), then a
  uniformly random letter u.

The reliability a(x) = levels[index of x's first letter mod len(levels)] differs between prompts, so the
model's uncertainty depends on the prompt. Under this law (with a = a(x)):

- pi(y* | x) = a^K, and every other answer has a pair that is either a decoy pair, of probability
  (1 - a) / A, or impossible; so y* is the unique sequence-level mode iff a > (1 - a) / A, i.e. a > 1 / (A + 1)
  (checked for every level in the config);
- greedy decoding takes the first letter of a pair by its marginal, a against 1 - a: for a < 1/2 it writes
  the decoy letter, after which the second letter is uniform, so greedy's answer is wrong although y* is
  the mode (the correlation inside a pair is what separates the two). Greedy is right exactly on the
  prompts with a(x) > 1/2;
- C_cov = E_x[1 / pi(y* | x)] = E_x[a(x)^-K] grows exponentially in K, while each pair can be learned on
  its own.

Encoding: token 0 pads, token 1 separates prompt and answer, tokens 2 .. A+1 are the letters. Prompts are
left-padded to `max_len`, so the separator always sits at position max_len and answer letter i at
max_len + 1 + i copies prompt position max_len - 1 - i whatever n is.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

PAD, SEP, FIRST_LETTER = 0, 1, 2


def vocab_size(alphabet: int) -> int:
    return FIRST_LETTER + alphabet


def letters(alphabet: int) -> list[str]:
    return [chr(ord("a") + i) for i in range(alphabet)]


def reliability(prompt: str, levels) -> float:
    """a(x): the probability that a pair of the answer is written correctly, set by the prompt's first letter."""
    return float(levels[(ord(prompt[0]) - ord("a")) % len(levels)])


def decoy_letter(c: str, alphabet: int) -> str:
    """d(c), the decoy that replaces the first letter of a pair: the next letter, cyclically."""
    return chr(ord("a") + (ord(c) - ord("a") + 1) % alphabet)


def all_strings(length: int, alphabet: int) -> int:
    return alphabet ** length


def distinct_prompts(rng: np.random.Generator, count: int, length: int, alphabet: int,
                     exclude: set[str] = frozenset()) -> list[str]:
    """`count` distinct random strings of `length` letters, none in `exclude` (raises if too few exist)."""
    free = all_strings(length, alphabet) - sum(len(s) == length for s in exclude)
    if count > free:
        raise ValueError(f"asked for {count} distinct prompts of {length} letters, only {free} exist")
    out, seen = [], set(exclude)
    abc = np.array(letters(alphabet))
    while len(out) < count:
        s = "".join(abc[rng.integers(alphabet, size=length)])
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def corpus_prompts(rng: np.random.Generator, count: int, lengths, alphabet: int, exclude: set[str]) -> list[str]:
    """`count` pretraining prompts (repeats allowed) with lengths drawn uniformly from `lengths`, none in
    `exclude`: the held-out and sharpening prompts never reach pretraining."""
    abc = np.array(letters(alphabet))
    out = []
    for n in rng.choice(np.asarray(lengths), size=count):
        while True:
            s = "".join(abc[rng.integers(alphabet, size=n)])
            if s not in exclude:
                break
        out.append(s)
    return out


def noisy_answer(rng: np.random.Generator, prompt: str, alphabet: int, levels) -> str:
    """One draw of the corpus law: each pair correct with probability a(x), else (decoy letter, uniform letter)."""
    y, a, out = prompt[::-1], reliability(prompt, levels), []
    for i in range(0, len(y), 2):
        if rng.random() < a:
            out.append(y[i:i + 2])
        else:
            out.append(decoy_letter(y[i], alphabet) + chr(ord("a") + int(rng.integers(alphabet))))
    return "".join(out)


def log_prob(prompt: str, answer: str, alphabet: int, levels) -> float:
    """log pi(answer | prompt) under the corpus law, exactly (-inf for an impossible answer)."""
    y, a = prompt[::-1], reliability(prompt, levels)
    if len(answer) != len(y):
        return -math.inf
    total = 0.0
    for i in range(0, len(y), 2):
        if answer[i:i + 2] == y[i:i + 2]:
            total += math.log(a)
        elif answer[i] == decoy_letter(y[i], alphabet):
            total += math.log((1 - a) / alphabet)
        else:
            return -math.inf
    return total


def sequence_mode(prompt: str, alphabet: int, levels) -> str:
    """The most likely answer under the corpus law: y* = the reversal when a(x) > 1 / (A + 1) (else undefined)."""
    a = reliability(prompt, levels)
    if not a > 1 / (alphabet + 1):
        raise ValueError(f"a(x) = {a} <= 1 / (A + 1): the decoy pairs are at least as likely as the correct one")
    return prompt[::-1]


def greedy_first_letters(prompt: str, alphabet: int, levels) -> str:
    """The first letter of each pair that greedy decoding writes under the corpus law (the marginal's argmax):
    y*_{2i} if a(x) > 1/2, else the decoy letter. (The second letter after a decoy is a uniform tie.)"""
    y, a = prompt[::-1], reliability(prompt, levels)
    return "".join(y[i] if a > 0.5 else decoy_letter(y[i], alphabet) for i in range(0, len(y), 2))


def entropy_per_letter(alphabet: int, levels) -> float:
    """The corpus law's entropy in nats per answer letter, with the levels equally frequent (the first letter of a
    random prompt is uniform): per pair, -a log a - (1 - a) log((1 - a) / A); the floor of the pretraining loss."""
    return float(np.mean([-(a * math.log(a) + (1 - a) * math.log((1 - a) / alphabet)) for a in levels])) / 2


def coverage(prompts, levels, pairs: int) -> float:
    """C_cov = E_x[a(x)^-K] over `prompts`."""
    return float(np.mean([reliability(p, levels) ** -pairs for p in prompts]))


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


def frame(prompts) -> pd.DataFrame:
    return pd.DataFrame({"prompt": list(prompts), "answer": [p[::-1] for p in prompts]})
