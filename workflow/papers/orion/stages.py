"""The orion DAG's stages: prepare (vocabulary, style split, held-out test and validation prompts, patching pairs,
injected stories) -> train (one tiny transformer per model and seed, stopped at the validation gate) -> evaluate
(test accuracy, request-patching sweep, oversight under injection, per model) -> report (papers.orion.report).
Each function takes its parameters and paths explicitly.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from papers.common.io import read_json, read_parquet, write_json, write_parquet
from papers.common.progress import progress
from papers.common.seeding import seed_everything
from papers.orion import tasks
from papers.orion.params import BLOCK_SIZE, parse

log = logging.getLogger(__name__)


# ---- prepare -------------------------------------------------------------------------------------
def prepare(*, cfg, vocab, test, val, pairs, injection):
    """The vocabulary and value pools (from the word list), the split of context styles, and the held-out sets:
    `test` (the claims' accuracy premise), `val` (the early-stopping gate; no prompt of `test` among them),
    `pairs` (request-patching), `injection` (one trusted prompt asking inject_key, one asking another key (the
    control of claim (c)), then the untrusted stories with their clean twins). The held-out styles are split again
    (tasks.split_held_out, share val_share): the validation prompts use one part, the test prompts, pairs and
    injected stories the other, so the early-stopping gate reads neither a training nor a test style; each
    prompt records its style."""
    p = parse(cfg)
    words = tasks.load_words(p.words or tasks.DEFAULT_WORDS, min_len=p.word_length[0], max_len=p.word_length[1])
    voc = tasks.build_vocab(words, pool_size=p.pool_size, numbers=p.numbers, seed=p.data_seed)
    families = [tasks.FAMILIES[f] for f in p.families]
    held_out = {f.name: tasks.split_styles(f, p.test_fraction, p.data_seed) for f in families}
    parts = {name: (tr, *tasks.split_held_out(ho, p.val_share, p.data_seed + 3)) for name, (tr, ho) in held_out.items()}
    splits = {name: (tr, te) for name, (tr, _, te) in parts.items()}
    val_splits = {name: (tr, va) for name, (tr, va, _) in parts.items()}
    log.info("vocabulary: %d tokens (%d words read from %s)", len(voc), len(words), p.words or tasks.DEFAULT_WORDS)
    write_json({"tokens": list(voc.tokens), "pools": {k: list(v) for k, v in voc.pools.items()},
                "styles": {name: {part: [list(map(_listify, s)) for s in styles]
                                  for part, styles in zip(("train", "val", "test"), split)}
                           for name, split in parts.items()}}, vocab)

    rng = np.random.default_rng(p.data_seed + 1)  # the pools and split used data_seed itself
    rows = []
    for f in families:
        for _ in range(p.test_prompts):
            pr = tasks.test_prompt(f, splits[f.name][1], voc, rng)
            rows.append({"family": f.name, "key": pr.key, "prompt": " ".join(pr.tokens), "answer": pr.answer,
                         "style": tasks.style_label(pr.style), "request_tokens": len(pr.request)})
    write_parquet(pd.DataFrame(rows), test)
    write_parquet(pd.DataFrame([tasks.patch_pair(f, splits[f.name][1], voc, rng)
                                for f in families for _ in range(p.patch_pairs)]), pairs)
    story_test = splits["story"][1]
    trusted = tasks.make_prompt(tasks.FAMILIES["story"], story_test[rng.integers(len(story_test))], voc, rng,
                                key=p.inject_key)
    other = next(k for k in tasks.FAMILIES["story"].keys if k != p.inject_key)  # claim (c)'s control
    trusted_other = tasks.make_prompt(tasks.FAMILIES["story"], story_test[rng.integers(len(story_test))], voc, rng,
                                      key=other)
    rows = [{"role": role, "clean": " ".join(t.tokens), "injected": " ".join(t.tokens), "answer": t.answer,
             "injected_key": "", "injected_answer": t.answer}
            for role, t in (("trusted", trusted), ("trusted_other", trusted_other))]
    rows += [{"role": "untrusted", **tasks.injected_prompt(story_test, voc, rng, p.inject_key)}
             for _ in range(p.inject_prompts)]
    write_parquet(pd.DataFrame(rows), injection)
    write_parquet(validation_prompts(families, val_splits, voc, p.val_prompts, read_parquet(test),
                                     np.random.default_rng(p.data_seed + 2)), val)


def validation_prompts(families, splits: dict, voc: tasks.Vocab, n: int, test: pd.DataFrame,
                       rng: np.random.Generator, tries: int = 100) -> pd.DataFrame:
    """`n` prompts per family from its validation styles (`splits[family][1]`), none equal to a test prompt
    (redrawn; a family whose prompts cannot avoid the test set within `tries` draws per prompt is an error)."""
    taken = set(test.prompt)
    rows = []
    for f in families:
        for _ in range(n):
            for _ in range(tries):
                pr = tasks.test_prompt(f, splits[f.name][1], voc, rng)
                prompt = " ".join(pr.tokens)
                if prompt not in taken:
                    break
            else:
                raise ValueError(f"family {f.name}: no validation prompt outside the test set in {tries} draws")
            rows.append({"family": f.name, "key": pr.key, "prompt": prompt, "answer": pr.answer,
                         "style": tasks.style_label(pr.style)})
    return pd.DataFrame(rows)


def _listify(x):
    return list(x) if isinstance(x, tuple) else x


def read_vocab(path) -> tuple[tasks.Vocab, dict]:
    """The vocabulary and the style split written by :func:`prepare`."""
    data = read_json(path)
    voc = tasks.Vocab(tokens=tuple(data["tokens"]), pools={k: tuple(v) for k, v in data["pools"].items()})
    styles = {name: {part: [(s[0], tuple(s[1])) for s in lst] for part, lst in parts.items()}
              for name, parts in data["styles"].items()}
    missing = [f for f in styles if f not in tasks.FAMILIES]
    if missing:
        raise ValueError(f"{path}: unknown task families {missing}")
    return voc, styles


# ---- train ---------------------------------------------------------------------------------------
def train(*, cfg, model_name, vocab, val, checkpoints, gate_checkpoints, history):
    """Train every seed of one model side by side (papers.orion.ensemble) on the task mixture until each passes
    the accuracy gate on the validation prompts, then orion.train.post_gate_steps more (issue 47's sixth review), or
    up to the step cap; per seed two checkpoints: `checkpoints`, the one analysed for the claims (post_gate_steps
    past the gate, or at the cap), and `gate_checkpoints`, the one at the gate (reported beside, not deciding); and
    the history of validation accuracy per seed. The test prompts are never read here. The seeds are orion.seed_offset
    .. seed_offset + seeds - 1 (the checkpoint files are numbered 0 .. seeds - 1, the checkpoint records the seed)."""
    import torch

    from papers.orion import model as gpt
    from papers.orion import train as trainer
    from papers.orion.ensemble import init_members
    from papers.orion.lm import encode_words
    from papers.orion.model import last_logits
    from papers.orion.patching import answer_stats

    p = parse(cfg)
    m, t = p.model(model_name), p.train_for(model_name)  # orion.train with the model's own overrides
    seeds = list(range(p.seed_offset, p.seed_offset + p.seeds))
    if not len(checkpoints) == len(gate_checkpoints) == len(seeds):
        raise ValueError(f"orion.seeds = {p.seeds} but {len(checkpoints)} and {len(gate_checkpoints)} checkpoint paths "
                         "were given")
    voc, styles = read_vocab(vocab)
    families = [tasks.FAMILIES[f] for f in p.families]
    train_styles = {f: s["train"] for f, s in styles.items()}
    held_out = {f: (g.prompt.str.split().tolist(), g.answer.tolist()) for f, g in read_parquet(val).groupby("family")}
    index = voc.index

    # patching.accuracy's top-1 accuracy, with the validation prompts encoded once (not at every record)
    encoded = {f: (encode_words(prompts, index), torch.tensor([index[w] for w in answers]))
               for f, (prompts, answers) in held_out.items()}

    def evaluate(model):
        return {f: float(answer_stats(last_logits(model, batch.ids, batch.pos), answers)[1].mean())
                for f, (batch, answers) in encoded.items()}

    def sampler(rng):
        return lambda copy_only: trainer.sample_batch(
            families, train_styles, voc, rng, batch_size=t.batch_size, max_requests=t.max_requests,
            copy_fraction=1.0 if copy_only else t.copy_fraction, copy_length=t.copy_length,
            copy_separated=t.copy_separated)

    # Seed s: its own initial weights (torch seed 1000 * (model index + 1) + s) and its own batches.
    offset = 1000 * (p.model_names.index(model_name) + 1)
    seed_everything(offset)
    markers = tuple(voc.index[w] for w in tasks.request_markers(p.families)) if m.routed else ()
    cfg_gpt = gpt.GPTConfig(vocab_size=len(voc), block_size=BLOCK_SIZE, n_layer=m.n_layer, n_head=m.n_head,
                            n_embd=m.n_embd, kv_window=m.kv_window, value_layers=m.value_layers,
                            request_markers=markers)
    members = init_members(cfg_gpt, [offset + s for s in seeds])  # initialised on the CPU on either device
    device = training_device(p.device)
    samplers = [sampler(np.random.default_rng(offset + s)) for s in seeds]
    log.info("model %s: %d seeds of %d parameters%s, on %s", model_name, len(seeds),
             sum(q.numel() for q in members[0].parameters()),
             ", routed (request read in block 1 only)" if m.routed else "", device)
    models, steps, hist, at_gate = trainer.train_until_gate(
        members, samplers, max_steps=t.max_steps, lr=t.lr, warmup=t.warmup, weight_decay=t.weight_decay,
        grad_clip=t.grad_clip, lm_weight=t.lm_weight, eval_every=t.eval_every, evaluate=evaluate,
        gate=p.claims.gate_accuracy, gate_records=t.gate_records, copy_warmup=t.copy_warmup,
        buckets=t.length_buckets, post_gate_steps=t.post_gate_steps,
        progress=lambda it: progress(it, desc=f"train {model_name}", total=t.max_steps + t.post_gate_steps),
        device=device)
    hist = hist.rename(columns={"member": "seed"})
    hist.insert(0, "model", model_name)
    write_parquet(hist, history)
    for s, model, step, (gate_model, gate_step, passed), path, gate_path in zip(
            seeds, models, steps, at_gate, checkpoints, gate_checkpoints):
        info = dict(model_name=model_name, seed=s, gate_step=gate_step, passed_gate=passed, rng=torch.get_rng_state())
        gpt.save(model, path, step=step, checkpoint="analysed", **info)
        gpt.save(gate_model, gate_path, step=gate_step, checkpoint="gate", **info)


def training_device(setting: str) -> str:
    """orion.device as a torch device: cpu, cuda, or for auto cuda when torch sees one (else cpu)."""
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return setting


# ---- evaluate ------------------------------------------------------------------------------------
def evaluate_trained(*, cfg, model_name, checkpoints, vocab, test, pairs, metrics, sweep, gate_checkpoints=(),
                     gate_metrics=None, gate_sweep=None):
    """The orion_evaluate stage: :func:`evaluate`'s analysis, less what decides nothing (review orion_r10). For
    every seed of one trained model at its analysed checkpoint (`checkpoints`; the claims decide there): test
    accuracy per family, the request-patching sweep with the same-request control (patching.CONTROL) and the
    attention shares, into `metrics` and `sweep`, as :func:`evaluate` writes them. At the seeds' gate checkpoints
    (`gate_checkpoints`, into `gate_metrics` and `gate_sweep`; reported beside, not deciding) the sweep is the
    request patch alone (:func:`request_sweep`): the report reads no control figure at the gate. A gate checkpoint
    that is its analysed checkpoint (:func:`same_checkpoint`: the same step and weights, as orion.train
    .post_gate_steps 0 makes them) is not analysed twice: its rows are the analysed ones. Every row written is
    the row :func:`evaluate` writes (a test holds it to that)."""
    parse(cfg)  # checks the configuration before any work
    voc, _ = read_vocab(vocab)
    analysed = [_evaluate_one(model_name, path, voc, test, pairs) for path in checkpoints]
    _write_evaluation(analysed, metrics, sweep)
    if gate_metrics is None:
        return
    at_gate = []
    for i, path in enumerate(gate_checkpoints):
        if i < len(checkpoints) and same_checkpoint(checkpoints[i], path):
            log.info("%s: %s is the analysed checkpoint %s, not analysed again", model_name, path, checkpoints[i])
            acc, sw = analysed[i]
        else:
            acc, sw = _evaluate_one(model_name, path, voc, test, pairs, control=False)
        at_gate.append((acc, sw[sw.source == "request"]))
    _write_evaluation(at_gate, gate_metrics, gate_sweep)


def same_checkpoint(path_a, path_b) -> bool:
    """Whether two checkpoints hold the same model at the same point of training: the same configuration and
    weights (bit for bit), and the same seed, step, gate step and gate outcome (all that the evaluation's rows
    record of a checkpoint besides what its model computes)."""
    import torch

    a, b = (torch.load(path, map_location="cpu", weights_only=False) for path in (path_a, path_b))
    if a["config"] != b["config"] or a["model"].keys() != b["model"].keys() \
            or any(a.get(k) != b.get(k) for k in ("seed", "step", "gate_step", "passed_gate")):
        return False
    return all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def _write_evaluation(results, metrics, sweep):
    write_parquet(pd.concat([acc for acc, _ in results], ignore_index=True), metrics)
    write_parquet(pd.concat([sw for _, sw in results], ignore_index=True), sweep)


def _evaluate_one(model_name, path, voc, test, pairs, control=True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One checkpoint's rows, as :func:`evaluate` computes them: test accuracy with the attention shares, and the
    sweep (with the same-request control where `control`, else the request patch alone)."""
    from papers.orion import model as gpt
    from papers.orion import patching
    from papers.orion.lm import WordLM

    model, ckpt = gpt.load(path)
    tag = {"model": model_name, "seed": int(ckpt["seed"]), "n_layer": model.cfg.n_layer,
           "width": model.cfg.n_embd, "gate_step": int(ckpt.get("gate_step", ckpt["step"])),
           "analysed_step": int(ckpt["step"]), "passed_gate": bool(ckpt.get("passed_gate", True)),
           "routed": bool(model.cfg.request_markers)}
    lm, reach = WordLM(model, voc.index), model.cfg.value_reach_after
    rows = []
    for f, g in read_parquet(test).groupby("family", sort=False):
        acc, prob = patching.accuracy(lm, g.prompt.str.split().tolist(), g.answer.tolist())
        rows.append({**tag, "family": f, "accuracy": acc, "answer_prob": prob, "prompts": len(g)})
    acc_df = pd.DataFrame(rows)
    frames = []
    for f, g in read_parquet(pairs).groupby("family", sort=False):
        sw = (patching.request_patching if control else request_sweep)(lm, g).assign(
            **tag, family=f, pairs=len(g), key_distance=int(g.key_distance.min()))
        sw["window_request_tokens"] = [min(reach(int(L)), int(g.request_tokens.max()) - 1) for L in sw.layer]
        frames.append(sw)
    log.info("%s seed %d: accuracy %s", tag["model"], tag["seed"], dict(zip(acc_df.family, acc_df.accuracy.round(3))))
    return acc_df.merge(attention_shares(model, voc, test), on="family", how="left"), pd.concat(frames, ignore_index=True)


def request_sweep(lm, pairs: pd.DataFrame) -> pd.DataFrame:
    """patching.request_patching's rows of the source "request" alone (the paper's patch: x1's last-token state
    written into x2's last token, hypotheses patching.HYPOTHESES), without the same-request control: the same calls
    on the same batches, so the same numbers (a test holds it to request_patching's own rows)."""
    from papers.orion import patching

    x1, x2, x21 = (lm.encode([s.split() for s in pairs[c]]) for c in ("x1", "x2", "x21"))
    ans = {h: lm.answer_ids(pairs[c]) for h, c in zip(patching.HYPOTHESES, ("r2c2", "r1c2", "r1c1"))}
    clean = {h: patching.answer_stats(lm.last_logits(x), ans[h])[0]  # the unpatched run that asks each question
             for h, x in zip(patching.HYPOTHESES, (x2, x21, x1))}
    states = lm.residuals(x1)  # (L + 1, B, C): x1's last token at every layer
    rows = []
    for layer in range(lm.n_layer + 1):
        logits = lm.patched_logits(x2, layer, states[layer])  # (B, V)
        for h in patching.HYPOTHESES:
            p, hit = patching.answer_stats(logits, ans[h])
            rows.append({"source": "request", "layer": layer, "hypothesis": h, "prob": float(p.mean()),
                         "clean_prob": float(clean[h].mean()), "normalized": float(p.mean() / clean[h].mean()),
                         "accuracy": float(hit.mean()), "pair_prob": [float(v) for v in p],
                         "pair_clean": [float(v) for v in clean[h]]})
    return pd.DataFrame(rows)


# evaluate below is the full analysis (every checkpoint, the control at the gate too), kept as the reference the
# tests hold evaluate_trained to. Its text, and that of the functions it calls (_evaluate_checkpoints, _analyse,
# attention_shares), is part of orion_train's code version: stages.train's local function `evaluate` (its
# validation accuracy) is read by papers.common.codehash as a reference to this top-level name, so an edit here
# would retrain every seed. Rename train's local function the next time training reruns anyway (review orion_r10).
def evaluate(*, cfg, model_name, checkpoints, vocab, test, pairs, metrics, sweep, gate_checkpoints=(),
             gate_metrics=None, gate_sweep=None):
    """For every seed of one trained model (`checkpoints`, the analysed ones; the same for `gate_checkpoints`, the
    seeds at their gate, into `gate_metrics` and `gate_sweep`, reported beside): test accuracy per family (the
    claims' accuracy premise, at the analysed checkpoint the stability premise of the post-gate rule) and the
    request-patching sweep per family and layer, with the same-request control and, per layer, how many of the
    request's tokens a value window after that layer still reads (the window premise of windowed models), and where
    the last token attends in each block (the share on the context's values and on its own request's tokens)."""
    parse(cfg)  # checks the configuration before any work
    voc, _ = read_vocab(vocab)
    _evaluate_checkpoints(model_name, checkpoints, voc, test, pairs, metrics, sweep)
    if gate_metrics is not None:
        _evaluate_checkpoints(model_name, gate_checkpoints, voc, test, pairs, gate_metrics, gate_sweep)


def _evaluate_checkpoints(model_name, checkpoints, voc, test, pairs, metrics, sweep):
    from papers.orion import model as gpt
    from papers.orion.lm import WordLM

    accs, sweeps = [], []
    for path in checkpoints:
        model, ckpt = gpt.load(path)
        tag = {"model": model_name, "seed": int(ckpt["seed"]), "n_layer": model.cfg.n_layer,
               "width": model.cfg.n_embd, "gate_step": int(ckpt.get("gate_step", ckpt["step"])),
               "analysed_step": int(ckpt["step"]), "passed_gate": bool(ckpt.get("passed_gate", True)),
               "routed": bool(model.cfg.request_markers)}
        acc, sw = _analyse(WordLM(model, voc.index), tag, test, pairs, reach=model.cfg.value_reach_after)
        acc = acc.merge(attention_shares(model, voc, test), on="family", how="left")
        accs.append(acc)
        sweeps.append(sw)
    write_parquet(pd.concat(accs, ignore_index=True), metrics)
    write_parquet(pd.concat(sweeps, ignore_index=True), sweep)


def attention_shares(model, voc: tasks.Vocab, test) -> pd.DataFrame:
    """Per family of the test prompts: where the last token's query attends in each block b (1 .. n_layer), as the
    mean over prompts of the attention weight, taken for the head that puts the most there: `values_b{b}` on the
    context's values (tasks.value_positions), `request_b{b}` on the request's tokens before the last one. A model
    that retrieves by the values' kind reads the values in block 1, before it has processed its request (the
    independent review of issue 47 measured 0.67-1.00 in block 1 of the tested models)."""
    import torch

    from papers.orion.lm import encode_words
    from papers.orion.model import last_token_attention

    rows = []
    for f, g in read_parquet(test).groupby("family", sort=False):
        family = tasks.FAMILIES[f]
        tokens = g.prompt.str.split().tolist()
        batch = encode_words(tokens, voc.index)
        weights = last_token_attention(model, batch.ids, batch.pos)  # (L, B, H, T)
        values = torch.zeros(len(tokens), batch.ids.shape[1])
        request = torch.zeros_like(values)
        for i, (t, n) in enumerate(zip(tokens, g.request_tokens)):
            values[i, tasks.value_positions(family, voc, t, int(n))] = 1.0
            request[i, len(t) - int(n):len(t) - 1] = 1.0
        row = {"family": f}
        for b in range(weights.shape[0]):
            row[f"values_b{b + 1}"] = float((weights[b] * values[:, None]).sum(-1).mean(0).max())
            row[f"request_b{b + 1}"] = float((weights[b] * request[:, None]).sum(-1).mean(0).max())
        rows.append(row)
    return pd.DataFrame(rows)


def evaluate_pretrained(*, cfg, model_name, test, pairs, injection, metrics, sweep, oversight):
    """The same analysis on a pretrained causal LM read from the local directory orion.pretrained[name].path (the
    paper's setting; full scale), and the oversight experiment under prompt injection (claim (c)): a model not
    trained to obey the note. Its tokenizer reads the prompts as text."""
    from papers.orion import patching
    from papers.orion.lm import PretrainedLM

    p = parse(cfg)
    spec = p.pretrained_model(model_name)
    lm = PretrainedLM(spec["path"], dtype=spec.get("dtype", "float32"))
    log.info("%s: %d layers from %s on %s", model_name, lm.n_layer, spec["path"], lm.device)
    tag = {"model": model_name, "seed": 0, "n_layer": lm.n_layer, "width": 0, "gate_step": 0, "analysed_step": 0,
           "passed_gate": True, "routed": False}
    acc, sw = _analyse(lm, tag, test, pairs)  # no value window: nothing reads around the patch

    inj = read_parquet(injection)
    untrusted = inj[inj.role == "untrusted"]
    story = sw[(sw.family == "story") & (sw.source == "request")]
    chosen = patching.best_layer(story)  # chosen on the request-patching sweep, not on these results
    frames = []
    for role in ("trusted", "trusted_other"):
        trusted = inj[inj.role == role].iloc[0]
        for condition in ("injected", "clean"):
            frames.append(patching.oversight(lm, trusted.clean.split(), untrusted[condition].str.split().tolist(),
                                             untrusted.answer.tolist(), untrusted.injected_answer.tolist())
                          .assign(condition=condition, trusted=role))
    write_parquet(acc, metrics)
    write_parquet(sw, sweep)
    write_parquet(pd.concat(frames, ignore_index=True).assign(**tag, chosen_layer=chosen), oversight)


def _analyse(lm, tag: dict, test, pairs, reach=lambda layer: 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Test accuracy per family and the request-patching sweep per family. `reach(L)`: how many positions before
    its own the last token reads through value windows in the blocks after layer L (model.GPTConfig
    .value_reach_after); each sweep row records `window_request_tokens`, how many tokens of x2's request other
    than the last that window reads (most over the family's pairs), and the family's shortest distance from the
    last token to the token that tells R2 from R1 (`key_distance`)."""
    from papers.orion import patching

    rows = []
    for f, g in read_parquet(test).groupby("family", sort=False):
        acc, prob = patching.accuracy(lm, g.prompt.str.split().tolist(), g.answer.tolist())
        rows.append({**tag, "family": f, "accuracy": acc, "answer_prob": prob, "prompts": len(g)})
    acc_df = pd.DataFrame(rows)
    frames = []
    for f, g in read_parquet(pairs).groupby("family", sort=False):
        sw = patching.request_patching(lm, g).assign(**tag, family=f, pairs=len(g), key_distance=int(g.key_distance.min()))
        sw["window_request_tokens"] = [min(reach(int(L)), int(g.request_tokens.max()) - 1) for L in sw.layer]
        frames.append(sw)
    log.info("%s seed %d: accuracy %s", tag["model"], tag["seed"], dict(zip(acc_df.family, acc_df.accuracy.round(3))))
    return acc_df, pd.concat(frames, ignore_index=True)
