"""The paper's own setting at the full scale: inference-time sharpening (best-of-N under the self-reward
log pi(y | x)) of a pretrained causal LM on GSM-style math prompts (the paper's Section 5 experiments).

Nothing is downloaded: the user points ``sharpening.pretrained[].path`` at a local Hugging Face directory
(weights and tokenizer, as ``save_pretrained`` writes them) and ``sharpening.math_prompts`` at a JSON-lines file
with one ``{"question": ..., "answer": ...}`` object per line, the answer ending in ``#### <number>`` (GSM8K's
format). Per question, a pool of M sampled completions is scored by the model's own sequence log-likelihood
(the self-reward) and checked against the reference number; best-of-N accuracy for every N <= M comes from the
pool without bias (:func:`papers.sharpening.lm.best_of_n_from_pool`), beside greedy decoding and best-of-N with
the rewards shuffled within each question (the control of claim (a)).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import torch

from papers.common.hf import load_causal_lm
from papers.sharpening.lm import best_of_n_from_pool

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def read_math_prompts(path, limit: int | None = None) -> list[dict]:
    """Questions and reference numbers from a GSM-style JSON-lines file; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (set sharpening.math_prompts to a GSM-style .jsonl)")
    rows = []
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}, line {line_no}: not JSON ({e.msg})") from None
        if not (isinstance(obj, dict) and isinstance(obj.get("question"), str) and isinstance(obj.get("answer"), str)):
            raise ValueError(f"{path}, line {line_no}: needs string fields 'question' and 'answer'")
        if "####" not in obj["answer"]:
            raise ValueError(f"{path}, line {line_no}: the answer has no '#### <number>' (GSM8K's final-answer mark)")
        reference = parse_number(obj["answer"].split("####")[-1])
        if reference is None:
            raise ValueError(f"{path}, line {line_no}: no number after '####'")
        rows.append({"question": obj["question"], "reference": reference})
        if limit is not None and len(rows) == limit:
            break
    if not rows:
        raise ValueError(f"{path}: no questions")
    return rows


def parse_number(text: str) -> float | None:
    """The last number in `text` (commas as thousands separators), or None."""
    found = NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def is_correct(completion: str, reference: float, stop: str) -> bool:
    """Whether the completion's final number (before the first `stop`) equals the reference."""
    value = parse_number(completion.split(stop)[0] if stop else completion)
    return value is not None and math.isclose(value, reference, rel_tol=0, abs_tol=1e-6)


def load(path, dtype: str = "float32"):
    """The model (eval mode) and tokenizer of a local Hugging Face directory (papers.common.hf), on the GPU when
    there is one: best-of-N sampling of a pretrained LM is the full scale's costliest step (a `gpu` job)."""
    device = "cuda" if torch.cuda.is_available() else None
    return load_causal_lm(path, dtype=dtype, key="sharpening.pretrained[].path", device=device)


@torch.no_grad()
def sample_and_score(model, tokenizer, prompt: str, samples: int, max_new_tokens: int, *, greedy: bool = False,
                     seed: int = 0) -> tuple[list[str], np.ndarray]:
    """`samples` completions of one prompt (ancestral sampling at temperature 1, or greedy decoding) and their
    self-reward log pi(y | x): the sum of the log-probabilities of the generated tokens, up to and including
    the end-of-sequence token when one is drawn."""
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"].to(model.device)
    torch.manual_seed(seed)  # generate() draws from torch's global generator
    eos = tokenizer.eos_token_id
    sampling = {} if greedy else {"temperature": 1.0, "top_k": 0, "top_p": 1.0}  # the model's own law, untruncated
    out = model.generate(ids, do_sample=not greedy, num_return_sequences=samples, max_new_tokens=max_new_tokens,
                         pad_token_id=eos if eos is not None else 0, **sampling)
    new = out[:, ids.shape[1]:]  # (M, T)
    logp = torch.log_softmax(model(out).logits[:, ids.shape[1] - 1:-1].float(), -1).gather(-1, new[..., None])[..., 0]
    keep = torch.ones_like(new, dtype=torch.bool)  # tokens up to and including the first end-of-sequence token
    if eos is not None:
        after_eos = (new == eos).long().cumsum(1) - (new == eos).long()
        keep = after_eos == 0
    texts = tokenizer.batch_decode(torch.where(keep, new, torch.full_like(new, eos if eos is not None else 0)),
                                   skip_special_tokens=True)
    return texts, (logp * keep).sum(1).cpu().numpy()


def best_of_n(model, tokenizer, questions: list[dict], *, template: str, sizes, max_new_tokens: int, stop: str,
              seed: int) -> dict:
    """Best-of-N accuracy under the self-reward for each N in `sizes` (one pool of max(sizes) samples per
    question), with the shuffled-reward control, plain sampling (N = 1) and greedy decoding; every value per
    question ({N: (Q,)} and (Q,) for greedy), so that intervals can resample the questions."""
    M = max(sizes)
    rewards, correct, greedy = [], [], []
    for i, q in enumerate(questions):
        prompt = template.format(question=q["question"])
        texts, r = sample_and_score(model, tokenizer, prompt, M, max_new_tokens, seed=seed + i)
        rewards.append(r)
        correct.append([is_correct(t, q["reference"], stop) for t in texts])
        g, _ = sample_and_score(model, tokenizer, prompt, 1, max_new_tokens, greedy=True)
        greedy.append(is_correct(g[0], q["reference"], stop))
    rewards, correct = np.array(rewards), np.array(correct)
    perm = np.random.default_rng(seed).permuted(np.tile(np.arange(M), (len(questions), 1)), axis=1)
    return {"accuracy": best_of_n_from_pool(rewards, correct, sizes, per_prompt=True),
            "shuffled_accuracy": best_of_n_from_pool(np.take_along_axis(rewards, perm, 1), correct, sizes,
                                                     per_prompt=True),
            "greedy_accuracy": np.array(greedy, dtype=float)}
