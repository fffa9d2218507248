"""The hip DAG's stages: prepare (KJV bytes) -> train (language model, passkey model) ->
evaluate (text: perplexity, recall, locality; passkey accuracy), cost against T, decoding
with an offloaded cache -> report. Each function takes its parameters and paths explicitly.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pandas as pd
import torch

from papers.common.io import write_json, write_parquet
from papers.common.params import to_dict
from papers.common.progress import progress
from papers.common.seeding import seed_everything
from papers.hip import data, methods
from papers.hip import evaluate as ev
from papers.hip import offload as off
from papers.hip.model import GPT, GPTConfig, load, save
from papers.hip.params import parse
from papers.hip.train import text_batches, train

log = logging.getLogger(__name__)


def _gpt(m, device: str) -> GPT:
    return GPT(GPTConfig(n_layer=m.n_layer, n_head=m.n_head, n_embd=m.n_embd, rope_base=m.rope_base)).to(device)


def _load(checkpoint, device: str) -> GPT:
    return load(checkpoint)[0].to(device)


def _arms(p) -> list[tuple[str, str, methods.HiPConfig]]:
    """(name, method, HiP config): every method, then the pruned ones with each ablated number of
    dense layers (named ``<method>@dl<d>``)."""
    arms = [(m, m, p.hip) for m in methods.METHODS]
    for d in p.eval.dense_layers_ablation:
        arms += [(f"{m}@dl{d}", m, dataclasses.replace(p.hip, dense_layers=d)) for m in methods.METHODS[1:]]
    return arms


def _val_windows(tokens: np.ndarray, T: int, n: int) -> torch.Tensor:
    """The first n non-overlapping windows of T + 1 bytes of the held-out text: (n, T + 1)."""
    if len(tokens) < n * T + 1:
        raise ValueError(f"held-out text has {len(tokens)} bytes, fewer than {n} windows of {T} need")
    x = torch.from_numpy(tokens.astype(np.int64))
    return torch.stack([x[i * T: i * T + T + 1] for i in range(n)])


# ---- prepare -------------------------------------------------------------------------------------
def prepare(*, cfg, train_tokens, val_tokens):
    """The KJV (diatheke, or the text file ``data.text``) as UTF-8 bytes; the last
    ``val_fraction`` is held out."""
    p = parse(cfg)
    text = data.read_text_file(p.data.text) if p.data.text else data.read_diatheke(p.data.module, p.data.books)
    tokens = data.to_bytes(data.clean(text, p.data.module))
    n_val = int(len(tokens) * p.data.val_fraction)
    log.info("%d bytes, %d held out", len(tokens), n_val)
    data.write_tokens(tokens[: len(tokens) - n_val], train_tokens)
    data.write_tokens(tokens[len(tokens) - n_val:], val_tokens)


# ---- train ---------------------------------------------------------------------------------------
def train_lm(*, cfg, train_tokens, checkpoint, history):
    """The byte-level language model on the KJV, dense attention."""
    p = parse(cfg)
    seed_everything(p.seed)
    model = _gpt(p.lm, p.device)
    batches = text_batches(data.load_tokens(train_tokens), p.lm_train, torch.Generator().manual_seed(p.seed))
    hist = train(model, p.lm_train, batches, desc="train lm")
    save(model.cpu(), checkpoint, train=to_dict(p.lm_train), steps=p.lm_train.steps)
    write_parquet(hist, history)


def train_passkey(*, cfg, checkpoint, history):
    """The passkey model: prompts of each of ``passkey.train_lengths`` bytes by turns, at
    ``batch * seq_len / length`` prompts (the same bytes per step). Loss: the mean NLL over all
    bytes plus ``answer_weight`` x the mean NLL of the key's digits after the question (as
    weights, normalised by 1 + answer_weight)."""
    p = parse(cfg)
    tp = p.passkey_train
    seed_everything(p.seed)
    model = _gpt(p.passkey_model, p.device)
    rng = np.random.default_rng(p.seed)

    def batch(step):
        T = p.passkey.train_lengths[step % len(p.passkey.train_lengths)]
        x, answer, _ = data.passkey_batch(rng, tp.batch * tp.seq_len // T, T, p.passkey.key_repeats)
        B = x.shape[0]
        w = torch.full((B, T - 1), 1.0 / (B * (T - 1)))  # one weight per predicted byte
        w[:, answer - 1:] += p.passkey.answer_weight / (B * data.KEY_DIGITS)
        return torch.from_numpy(x.astype(np.int64)), w

    hist = train(model, tp, batch, desc="train passkey")
    save(model.cpu(), checkpoint, train=to_dict(tp), steps=tp.steps)
    write_parquet(hist, history)


# ---- evaluate ------------------------------------------------------------------------------------
def evaluate_text(*, cfg, checkpoint, val_tokens, metrics, locality):
    """Held-out perplexity of every method; top-k recall of HiP and random pruning against the
    oracle, and the score autocorrelation (locality), on the dense pass's q and k."""
    p = parse(cfg)
    seed_everything(p.seed)
    model = _load(checkpoint, p.device)
    T = p.lm_train.seq_len
    windows = _val_windows(data.load_tokens(val_tokens), T, p.eval.text_windows)
    gen = torch.Generator().manual_seed(p.seed)
    ppl = {}
    for name, method, cfg_m in progress(_arms(p), desc="perplexity"):
        nll = ev.nll_by_position(model, windows, method, cfg_m, gen)
        ppl[name] = {"nll": float(nll.mean()), "ppl": float(nll.mean().exp()), "nll_late": float(nll[T // 2:].mean())}
        log.info("%s: ppl %.4f", name, ppl[name]["ppl"])

    rows, recall = [], {"hip": [], "random": []}
    probe = torch.linspace(T // 2, T - 1, p.eval.locality_rows).long()
    for w in range(p.eval.locality_windows):
        qk = ev.record_qk(model, windows[w: w + 1, :T].to(p.device))
        for layer, (q, k) in qk.items():
            if layer < p.hip.dense_layers:
                continue
            for m, r in ev.topk_recall(q, k, p.hip, gen).items():
                recall[m].append(r)
            for control, shuffle in (("model", None), ("shuffled keys", gen)):
                corr = methods.score_autocorrelation(q, k, probe, p.eval.max_lag, shuffle)
                rows += [{"window": w, "layer": layer, "keys": control, "lag": lag + 1, "autocorr": float(c)}
                         for lag, c in enumerate(corr)]
    write_parquet(pd.DataFrame(rows), locality)
    write_json({"T": T, "ppl": ppl, "recall": {m: float(np.mean(v)) for m, v in recall.items()},
                "recall_per_layer": recall}, metrics)


def evaluate_passkey(*, cfg, checkpoint, metrics):
    """Passkey accuracy of every method: a greedy decode reproduces all five digits."""
    p = parse(cfg)
    seed_everything(p.seed)
    model = _load(checkpoint, p.device)
    T = p.passkey_train.seq_len
    x, answer, key_at = data.passkey_batch(np.random.default_rng(p.seed + 1), p.eval.passkey_samples, T,
                                           p.passkey.key_repeats)
    x = torch.from_numpy(x.astype(np.int64))
    gen = torch.Generator().manual_seed(p.seed)
    out = {"T": T, "key_depth": (key_at / T).tolist()}
    for name, method, cfg_m in progress(_arms(p), desc="passkey"):
        hits = ev.passkey_hits(model, x, answer, data.KEY_DIGITS, method, cfg_m, gen)
        out[name] = {"accuracy": float(hits.all(-1).float().mean()), "digit_accuracy": float(hits.float().mean()),
                     "per_digit": hits.float().mean(0).tolist(), "correct": hits.all(-1).tolist()}
        log.info("%s: passkey accuracy %.3f", name, out[name]["accuracy"])
    write_json(out, metrics)


def cost(*, cfg, table):
    """Key scores and time of dense attention and of HiP against T (CPU references, one head)."""
    p = parse(cfg)
    seed_everything(p.seed)
    gen = torch.Generator().manual_seed(p.seed)
    rows = [ev.cost_at(T, p.hip, p.cost.head_dim, T <= p.cost.dense_max_len, gen, p.cost.repeats, p.cost.device)
            for T in progress(p.cost.lengths, desc="cost")]
    write_parquet(pd.DataFrame(rows), table)


def decode_offload(*, cfg, checkpoint, val_tokens, table):
    """Decoding with an offloaded KV cache: for each context length T, the last ``decode_steps``
    positions are decoded (teacher-forced held-out text) with HiP's mask refreshed every
    ``refresh_interval`` steps; q and k of each pruned layer come from the model run with HiP."""
    p = parse(cfg)
    o = p.offload
    seed_everything(p.seed)
    model = _load(checkpoint, p.device)
    windows = _val_windows(data.load_tokens(val_tokens), max(o.lengths), o.windows)
    rows = []
    for w in range(o.windows):
        record = []
        with torch.no_grad():
            model(windows[w: w + 1, :max(o.lengths)].to(p.device), methods.make_attend("hip", p.hip, record=record))
        for layer, q, k, _ in record:
            for T in o.lengths:
                r = off.simulate_decode(q[0].cpu(), k[0].cpu(), T, o.decode_steps, o.refresh_interval, p.hip, o.lru_scale)
                rows.append({"window": w, "layer": layer, "T": T, **r})
    write_parquet(pd.DataFrame(rows), table)
