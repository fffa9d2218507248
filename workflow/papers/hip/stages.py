"""The hip DAG's stages: prepare (KJV bytes) -> train (one language model per seed, on text with key
records) -> evaluate (per seed: retrieval and text loss of every method, top-k recall per layer,
decoding with an offloaded cache), cost against T -> report. Each function takes its parameters
and paths explicitly.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pandas as pd
import torch

from papers.common.io import write_parquet
from papers.common.params import to_dict
from papers.common.progress import progress
from papers.common.seeding import seed_everything
from papers.hip import data, methods
from papers.hip import evaluate as ev
from papers.hip import offload as off
from papers.hip.model import GPT, GPTConfig, load, save
from papers.hip.params import parse
from papers.hip.train import record_batches, train

log = logging.getLogger(__name__)


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
def train_lm(*, cfg, seed, train_tokens, checkpoint, history):
    """One byte-level language model (seed `seed`) on KJV windows with repeated key records,
    dense attention."""
    p, seed = parse(cfg), int(seed)
    seed_everything(seed)
    m = p.lm
    model = GPT(GPTConfig(n_layer=m.n_layer, n_head=m.n_head, n_embd=m.n_embd, rope_base=m.rope_base,
                          smear_keys=m.smear_keys, smear_from=m.smear_from)).to(p.device)
    batches = record_batches(data.load_tokens(train_tokens), p.train, np.random.default_rng(seed))
    hist = train(model, p.train, batches, desc=f"train lm seed {seed}")
    save(model.cpu(), checkpoint, train=to_dict(p.train), seed=seed)
    write_parquet(hist.assign(seed=seed), history)


# ---- evaluate ------------------------------------------------------------------------------------
# The vocabulary of the byte models (papers.hip.data: UTF-8 bytes). The count models below live here, not in
# papers.hip.evaluate, so that the cost stage (which imports that module whole) does not rerun for them.
VOCAB = 256


def byte_ngram_logp(train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Count models of bytes fitted on the training text, the reference of (b)'s language-model premise (review
    hip_r10): ``(unigram, bigram)`` log-probabilities, (256,) and (256, 256) with ``bigram[a, b] = log p(b | a)``.
    Smoothing: add-one (Laplace) on every count, ``p(b) = (c(b) + 1) / (N + 256)`` and ``p(b | a) = (c(a b) + 1) /
    (c(a .) + 256)``, where ``c(a .)`` counts the pairs that start with a (the last byte of the text starts none)."""
    t = np.asarray(train, dtype=np.int64)
    uni = np.bincount(t, minlength=VOCAB).astype(float) + 1.0
    pairs = np.bincount(t[:-1] * VOCAB + t[1:], minlength=VOCAB * VOCAB).reshape(VOCAB, VOCAB).astype(float) + 1.0
    return np.log(uni / uni.sum()), np.log(pairs / pairs.sum(1, keepdims=True))


def ngram_window_nll(windows: np.ndarray, start: int, unigram: np.ndarray, bigram: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per window (N, T + 1), the mean NLL (nats/byte) of the unigram and of the bigram over the same targets as
    ``window_nll(...)[:, start:]``: bytes ``start + 1 .. T``, each given the byte before it (the bigram)."""
    w = np.asarray(windows, dtype=np.int64)
    prev, target = w[:, start:-1], w[:, start + 1:]
    return -unigram[target].mean(1), -bigram[prev, target].mean(1)


def evaluate(*, cfg, seed, checkpoint, train_tokens, val_tokens, retrieval, text, recall, offload):
    """Everything measured on one trained model (seed `seed`), on held-out text:

    * ``retrieval``: per prompt (T, n_keys, needle depth, record width) and method, the answer's NLL and
      whether the greedy decode is right; prompts are the same for every method (paired). Rows with
      ``source = "planted"`` are the positive control: the same accuracy on one attention head with a planted
      needle (:func:`papers.hip.evaluate.planted_needle`), drawn with this seed;
    * ``text``: per held-out window (no records) and method, the mean NLL of the second half; beside it
      (``unigram_nll_late``, ``bigram_nll_late``) the same bytes' NLL under add-one count models of bytes fitted on
      the training text (:func:`byte_ngram_logp`): (b)'s premise that the model learned text;
    * ``recall``: per record-free held-out window of the largest T (random starts drawn with this seed) and pruned
      layer, the recall of the oracle top-n key blocks by HiP and by random blocks, on the model's q, k and on the
      same keys shuffled (keys ``shuffled``, and ``shuffled2``, a second independent shuffle: the null (A/A)
      control); keys ``untrained`` / ``untrained_shuffled``: the same on the same windows through the untrained
      model (this seed's initial weights; the reference that tells learned locality from RoPE's or the smeared
      keys'); keys ``planted`` / ``planted_shuffled``: the same on keys with planted locality (the positive
      control);
    * ``offload``: the decoding simulation per (window, layer, T, arm) at ``offload.mask_k`` (papers.hip.offload) on
      held-out windows drawn with this seed, the mask-estimation and sparse-attention hit rates apart: HiP on the
      model's keys and on the same keys shuffled (twice), random
      reads, and planted-locality keys (layer -1); arms ``hip_frozen``, ``shuffled_frozen`` (the same permutation as
      ``shuffled``) and ``planted_frozen``: the same decodes with the search's chunk bounds frozen at the first decoded
      length (``offload.simulate_decode(freeze_bounds=True)``; a diagnostic reported beside (d), review hip_r10).
    """
    p, seed = parse(cfg), int(seed)
    seed_everything(seed)
    model = load(checkpoint)[0].to(p.device)
    val = data.load_tokens(val_tokens)
    e = p.eval
    rng = np.random.default_rng(10_000 + seed)  # prompts: disjoint from the training draws
    gen = torch.Generator().manual_seed(seed)  # random blocks

    # retrieval prompts: every (T, n_keys, depth, width) cell, `prompts` each, held-out text at random starts
    prompts = []
    for T in e.lengths:
        for width in e.widths:
            for n_keys in e.n_keys:
                for depth in e.depths:
                    for _ in range(e.prompts):
                        start = int(rng.integers(0, len(val) - T))
                        x, answer, needle = data.retrieval_prompt(rng, val, start, T, n_keys, depth, width)
                        prompts.append({"T": T, "n_keys": n_keys, "depth": depth, "width": width,
                                        "prompt": len(prompts), "x": x, "answer": answer, "needle_at": needle})
    keys = ("T", "n_keys", "depth", "width", "prompt", "needle_at")
    rows = []
    for method in progress(methods.METHODS, desc="retrieval"):
        for T in e.lengths:
            group = [q for q in prompts if q["T"] == T]
            x = torch.from_numpy(np.stack([q["x"] for q in group]).astype(np.int64))
            nll, correct = ev.answer_scores(model, x, group[0]["answer"], 1, method, p.hip, gen)  # the value byte
            rows += [{"seed": seed, "source": "model", "method": method, **{k: q[k] for k in keys},
                      "answer_nll": float(a), "correct": bool(c)} for q, a, c in zip(group, nll, correct)]
    # the positive control: one head with a planted needle, every method on the same draw
    pgen = torch.Generator().manual_seed(20_000 + seed)
    i = 0
    for T in e.lengths:
        for width in e.widths:
            for depth in e.depths:
                for _ in range(e.planted_prompts):
                    hit = ev.planted_needle(T, width, depth, p.hip, pgen, strength=e.planted_strength)
                    rows += [{"seed": seed, "source": "planted", "method": m, "T": T, "n_keys": 1, "depth": depth,
                              "width": width, "prompt": i, "needle_at": -1, "answer_nll": float("nan"),
                              "correct": hit[m]} for m in methods.METHODS]
                    i += 1
    write_parquet(pd.DataFrame(rows), retrieval)

    # held-out text without records: how much ordinary bytes use far context (the far premise's control)
    Tt = p.train.seq_len
    starts = np.linspace(0, len(val) - Tt - 2, e.text_windows).astype(int)
    windows = torch.from_numpy(np.stack([val[s: s + Tt + 1] for s in starts]).astype(np.int64))
    # (b)'s premise (review hip_r10): the same bytes under count models of bytes fitted on the training text
    unigram, bigram = byte_ngram_logp(data.load_tokens(train_tokens))
    uni_late, bi_late = ngram_window_nll(windows.numpy(), Tt // 2, unigram, bigram)
    rows = []
    for method in progress(methods.METHODS, desc="text"):
        late = ev.window_nll(model, windows, method, p.hip, gen)[:, Tt // 2:].mean(1)
        rows += [{"seed": seed, "method": method, "text_window": w, "nll_late": float(v),
                  "unigram_nll_late": float(uni_late[w]), "bigram_nll_late": float(bi_late[w])}
                 for w, v in enumerate(late)]
    write_parquet(pd.DataFrame(rows), text)

    # top-k recall per pruned layer, on the dense pass's q, k of record-free held-out windows at the largest T (the
    # model's own locality: review hip_r8 found that retrieval prompts, half of them with records of width 16-32,
    # carried locality planted by the data); random starts drawn with this seed. The untrained reference (review
    # hip_r9): the same architecture with this seed's initial weights (train_lm's initialisation: torch seeded with
    # the seed, then GPT built), on the same windows, its keys and the same keys shuffled; locality there would be
    # planted by RoPE or the smeared keys, not learned.
    T = max(e.lengths)
    rrng = np.random.default_rng(40_000 + seed)
    group = [{"prompt": j, "x": val[s: s + T]}
             for j, s in enumerate(rrng.integers(0, len(val) - T, e.recall_prompts))]
    with torch.random.fork_rng(devices=[]):  # the CPU generator only: the weights are drawn on the CPU, then moved
        torch.manual_seed(seed)
        untrained = GPT(model.cfg).to(p.device).eval()
    ugen = torch.Generator().manual_seed(60_000 + seed)  # the untrained arm's shuffles and random blocks
    rows = []
    for q in progress(group, desc="recall"):
        x = torch.from_numpy(q["x"][None].astype(np.int64)).to(p.device)
        qk, qk_untrained = ev.record_qk(model, x), ev.record_qk(untrained, x)
        for layer, (qq, kk) in qk.items():
            if layer < p.hip.dense_layers:
                continue
            # two independent block shuffles: the first is (b)'s reference, the pair is its null (A/A) control
            for keys_, k_used in (("model", kk), ("shuffled", ev.shuffle_keys(kk, p.hip, gen)),
                                  ("shuffled2", ev.shuffle_keys(kk, p.hip, gen))):
                for m, r in ev.topk_recall(qq, k_used, p.hip, gen).items():
                    rows.append({"seed": seed, "prompt": q["prompt"], "layer": layer, "keys": keys_, "method": m,
                                 "recall": r})
            uq, uk = qk_untrained[layer]
            for keys_, k_used in (("untrained", uk), ("untrained_shuffled", ev.shuffle_keys(uk, p.hip, ugen))):
                for m, r in ev.topk_recall(uq, k_used, p.hip, ugen).items():
                    rows.append({"seed": seed, "prompt": q["prompt"], "layer": layer, "keys": keys_, "method": m,
                                 "recall": r})
    # the positive control: keys with planted locality, as many draws as prompts, the model's head shape
    H, D = model.cfg.n_head, model.cfg.n_embd // model.cfg.n_head
    for j in range(len(group)):
        qq, kk = ev.planted_locality_keys(T, H, D, pgen)
        for keys_, k_used in (("planted", kk), ("planted_shuffled", ev.shuffle_keys(kk, p.hip, gen))):
            for m, r in ev.topk_recall(qq, k_used, p.hip, gen).items():
                rows.append({"seed": seed, "prompt": j, "layer": -1, "keys": keys_, "method": m, "recall": r})
    write_parquet(pd.DataFrame(rows), recall)

    # decoding with an offloaded cache, on held-out windows of the largest length, at the offloading mask_k:
    # q and k of each pruned layer of the model running HiP at that budget. Arms (papers.hip.offload): ``hip``, HiP's
    # traced search on the model's q, k; ``shuffled``, the same search on the same keys in shuffled block order (one
    # permutation per window and layer, fixed while decoding: attention locality removed, the tree's structure and the
    # queries kept), (d)'s ablation control and the reference of the locality difference; ``shuffled2``, a second
    # independent shuffle, that difference's A/A null; ``random``, random blocks read at HiP's volume (reported); layer
    # -1, ``planted`` / ``planted_shuffled``: keys with planted locality and queries that stay near one direction, and
    # the same keys shuffled (reported). The windows' starts are drawn per seed (text variation sampled, review hip_r8).
    o = p.offload
    cfg_off = dataclasses.replace(p.hip, mask_k=o.mask_k)
    # Fresh windows and draws (streams 150_000 and 130_000, were 50_000 and 30_000): (d)'s deciding statistic changed
    # after review hip_r12 had seen the earlier windows' figures (papers.hip.verdicts.DECIDING_HIT_RATE).
    starts = np.sort(np.random.default_rng(150_000 + seed).integers(0, len(val) - max(o.lengths) - 1, o.windows))
    sgen = torch.Generator().manual_seed(130_000 + seed)  # the offload arms' block shuffles and planted draws
    rows = []

    def decode(w, layer, arms, g=None, freeze=False):
        for To in o.lengths:
            for arm, (qq, kk) in arms.items():
                r = off.simulate_decode(qq, kk, To, o.decode_steps, o.refresh_interval, cfg_off, o.lru_scale, g,
                                        freeze_bounds=freeze)
                rows.append({"seed": seed, "window": w, "layer": layer, "T": To, "arm": arm, **r})

    for w, s in enumerate(starts):
        x = torch.from_numpy(val[s: s + max(o.lengths)][None].astype(np.int64)).to(p.device)
        record = []
        with torch.no_grad():
            model(x, methods.make_attend("hip", cfg_off, record=record))
        for layer, qq, kk, _ in record:
            qq, kk = qq.cpu(), kk.cpu()
            ks, ks2 = ev.shuffle_keys(kk, cfg_off, sgen)[0], ev.shuffle_keys(kk, cfg_off, sgen)[0]
            decode(w, layer, {"hip": (qq[0], kk[0]), "shuffled": (qq[0], ks), "shuffled2": (qq[0], ks2)})
            decode(w, layer, {"random": (qq[0], kk[0])}, gen)
            # the diagnostic of (d), reported (review hip_r10): chunk bounds frozen at the first decoded length
            decode(w, layer, {"hip_frozen": (qq[0], kk[0]), "shuffled_frozen": (qq[0], ks)}, freeze=True)
        qp, kp = off.planted_decode_qk(max(o.lengths), model.cfg.n_head, model.cfg.n_embd // model.cfg.n_head, sgen)
        decode(w, -1, {"planted": (qp[0], kp[0]), "planted_shuffled": (qp[0], ev.shuffle_keys(kp, cfg_off, sgen)[0])})
        decode(w, -1, {"planted_frozen": (qp[0], kp[0])}, freeze=True)
    write_parquet(pd.DataFrame(rows), offload)


# ---- cost ----------------------------------------------------------------------------------------
def cost(*, cfg, table):
    """HiP's counted key products and time against T, and dense attention's, on random q, k of one head;
    the control runs the same tree search with mask_k = T / control_fraction (up to control_max_len: its cost
    is quadratic). Every (input, T) is measured `timing_repeats` times and the fastest timing of each arm is kept
    (papers.hip.evaluate.min_seconds times the arms in turn within a round)."""
    p = parse(cfg)
    c = p.cost
    # The CPU timings run on one intra-op thread, whatever the job's threads, so that the calling thread's CPU time
    # counts all of the work. With more, idle OpenMP threads spin and their spinning counts as CPU time, which a loaded
    # machine makes erratic (issue 55: at 2 threads per job, the dense exponent came out 1.95 [0.89, 3.01]).
    job_threads = torch.get_num_threads()
    if c.device != "cuda":
        torch.set_num_threads(1)
    rows = []
    try:
        # Rounds over every (input, T), not repeats in a row: a burst of load on a shared machine then disturbs
        # one timing of a measurement, not all of them, and the minimum drops it (issue 55: repeats in a row on a
        # loaded machine moved one input's time at T = 8192 by 1.9x).
        for round_ in range(c.timing_repeats):
            for rep in range(c.repeats):
                gen = torch.Generator().manual_seed(rep)  # the same inputs in every round
                for T in progress(c.lengths, desc=f"cost, round {round_}, input {rep}"):
                    control = T // c.control_fraction if T <= c.control_max_len else None
                    rows += [{"input": rep, **r} for r in ev.cost_at(T, p.hip, c.head_dim, gen,
                                                                    control_mask_k=control,
                                                                    time_dense=T <= c.dense_max_len,
                                                                    repeats=1, device=c.device)]
    finally:
        torch.set_num_threads(job_threads)
    rows = pd.DataFrame(rows)
    timed = [col for col in rows.columns if col.endswith("_seconds")]
    rows = rows.groupby(["input", "T", "arm"], sort=False, as_index=False).agg(
        {col: ("min" if col in timed else "first") for col in rows.columns if col not in ("input", "T", "arm")})
    write_parquet(rows, table)
