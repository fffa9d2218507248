"""The orion DAG's stages: prepare (vocabulary, style split, held-out prompts, patching pairs, injected stories)
-> train (one tiny transformer per size and seed) -> evaluate (accuracy gate, request-patching sweep,
oversight under injection, per model) -> report. Each function takes its parameters and paths explicitly.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from papers.common.io import read_json, read_parquet, write_json, write_parquet
from papers.common.progress import progress
from papers.common.seeding import seed_everything
from papers.orion import tasks
from papers.orion.params import BLOCK_SIZE, SLUG, Params, parse

log = logging.getLogger(__name__)


# ---- prepare -------------------------------------------------------------------------------------
def prepare(*, cfg, vocab, test, pairs, injection):
    """The vocabulary and value pools (from the word list), the split of context styles, and the held-out sets:
    `test` (the accuracy gate), `pairs` (request-patching), `injection` (one trusted prompt asking inject_key,
    one asking another key (the control of claim (c)), then the untrusted stories with their clean twins)."""
    p = parse(cfg)
    words = tasks.load_words(p.words or tasks.DEFAULT_WORDS, min_len=p.word_length[0], max_len=p.word_length[1])
    voc = tasks.build_vocab(words, pool_size=p.pool_size, numbers=p.numbers, seed=p.data_seed)
    families = [tasks.FAMILIES[f] for f in p.families]
    splits = {f.name: tasks.split_styles(f, p.test_fraction, p.data_seed) for f in families}
    log.info("vocabulary: %d tokens (%d words read from %s)", len(voc), len(words), p.words or tasks.DEFAULT_WORDS)
    write_json({"tokens": list(voc.tokens), "pools": {k: list(v) for k, v in voc.pools.items()},
                "styles": {name: {"train": [list(map(_listify, s)) for s in tr], "test": [list(map(_listify, s)) for s in te]}
                           for name, (tr, te) in splits.items()}}, vocab)

    rng = np.random.default_rng(p.data_seed + 1)  # the pools and split used data_seed itself
    rows = []
    for f in families:
        for _ in range(p.test_prompts):
            pr = tasks.test_prompt(f, splits[f.name][1], voc, rng)
            rows.append({"family": f.name, "key": pr.key, "prompt": " ".join(pr.tokens), "answer": pr.answer})
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
def train(*, cfg, model_name, vocab, test, checkpoints, history):
    """Train every seed of one model size side by side (papers.orion.ensemble) on the task mixture until each
    passes the accuracy gate on the held-out prompts (or the step cap); one checkpoint per seed, taken at the
    gate, and the history of held-out accuracy per seed."""
    import torch

    from papers.orion import model as gpt
    from papers.orion import train as trainer
    from papers.orion.ensemble import init_members
    from papers.orion.lm import WordLM
    from papers.orion.patching import accuracy

    p = parse(cfg)
    m, t = p.model(model_name), p.train
    seeds = list(range(p.seeds))
    if len(checkpoints) != len(seeds):
        raise ValueError(f"orion.seeds = {p.seeds} but {len(checkpoints)} checkpoint paths were given")
    voc, styles = read_vocab(vocab)
    families = [tasks.FAMILIES[f] for f in p.families]
    train_styles = {f: s["train"] for f, s in styles.items()}
    held_out = read_parquet(test).groupby("family").head(t.eval_prompts)
    held_out = {f: (g.prompt.str.split().tolist(), g.answer.tolist()) for f, g in held_out.groupby("family")}
    index = voc.index

    def evaluate(model):
        lm = WordLM(model, index)
        return {f: accuracy(lm, prompts, answers)[0] for f, (prompts, answers) in held_out.items()}

    def sampler(rng):
        return lambda copy_only: trainer.sample_batch(
            families, train_styles, voc, rng, batch_size=t.batch_size, max_requests=t.max_requests,
            copy_fraction=1.0 if copy_only else t.copy_fraction, copy_length=t.copy_length,
            copy_separated=t.copy_separated)

    # Seed s: its own initial weights (torch seed 1000 * (size index + 1) + s) and its own batches.
    offset = 1000 * (p.model_names.index(model_name) + 1)
    seed_everything(offset)
    cfg_gpt = gpt.GPTConfig(vocab_size=len(voc), block_size=BLOCK_SIZE, n_layer=m.n_layer, n_head=m.n_head,
                            n_embd=m.n_embd, kv_window=m.kv_window, value_layers=m.value_layers)
    members = init_members(cfg_gpt, [offset + s for s in seeds])
    samplers = [sampler(np.random.default_rng(offset + s)) for s in seeds]
    log.info("model %s: %d seeds of %d parameters", model_name, len(seeds), sum(q.numel() for q in members[0].parameters()))
    models, steps, hist = trainer.train_until_gate(
        members, samplers, max_steps=t.max_steps, lr=t.lr, warmup=t.warmup, weight_decay=t.weight_decay,
        grad_clip=t.grad_clip, lm_weight=t.lm_weight, eval_every=t.eval_every, evaluate=evaluate,
        gate=p.claims.gate_accuracy, copy_warmup=t.copy_warmup,
        buckets=t.length_buckets, progress=lambda it: progress(it, desc=f"train {model_name}", total=t.max_steps))
    hist = hist.rename(columns={"member": "seed"})
    hist.insert(0, "model", model_name)
    write_parquet(hist, history)
    for s, model, step, path in zip(seeds, models, steps, checkpoints):
        gpt.save(model, path, model_name=model_name, seed=s, step=step, rng=torch.get_rng_state())


# ---- evaluate ------------------------------------------------------------------------------------
def evaluate(*, cfg, model_name, checkpoints, vocab, test, pairs, metrics, sweep):
    """For every seed of one trained size: held-out accuracy per family (the gate) and the request-patching
    sweep per family and layer, with the shuffled-position control."""
    from papers.orion import model as gpt
    from papers.orion.lm import WordLM

    parse(cfg)  # checks the configuration before any work
    voc, _ = read_vocab(vocab)
    accs, sweeps = [], []
    for path in checkpoints:
        model, ckpt = gpt.load(path)
        tag = {"model": model_name, "seed": int(ckpt["seed"]), "n_layer": model.cfg.n_layer,
               "width": model.cfg.n_embd, "gate_step": int(ckpt["step"])}
        acc, sw = _analyse(WordLM(model, voc.index), tag, test, pairs, span=model.cfg.kv_window)
        accs.append(acc)
        sweeps.append(sw)
    write_parquet(pd.concat(accs, ignore_index=True), metrics)
    write_parquet(pd.concat(sweeps, ignore_index=True), sweep)


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
    tag = {"model": model_name, "seed": 0, "n_layer": lm.n_layer, "width": 0, "gate_step": 0}
    acc, sw = _analyse(lm, tag, test, pairs)

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


def _analyse(lm, tag: dict, test, pairs, span: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out accuracy per family and the request-patching sweep per family (with the window-span diagnostic
    when `span` > 1: the model's key/value window)."""
    from papers.orion import patching

    rows = []
    for f, g in read_parquet(test).groupby("family", sort=False):
        acc, prob = patching.accuracy(lm, g.prompt.str.split().tolist(), g.answer.tolist())
        rows.append({**tag, "family": f, "accuracy": acc, "answer_prob": prob, "prompts": len(g)})
    acc_df = pd.DataFrame(rows)
    frames = [patching.request_patching(lm, g, span=span).assign(**tag, family=f, pairs=len(g))
              for f, g in read_parquet(pairs).groupby("family", sort=False)]
    log.info("%s seed %d: accuracy %s", tag["model"], tag["seed"], dict(zip(acc_df.family, acc_df.accuracy.round(3))))
    return acc_df, pd.concat(frames, ignore_index=True)


# ---- report --------------------------------------------------------------------------------------
TITLE = "P1 orion: Look Before You Leap: a universal emergent decomposition of retrieval tasks in language models"


def summarise(acc: pd.DataFrame, sweep: pd.DataFrame, gate: float) -> pd.DataFrame:
    """One row per trained model-task pair (model, seed, family): accuracy and whether it passed the gate, the
    best R1(C2) layer and value, the layer profile, and the same quantities under the shuffled-position control;
    the profile under the window-span diagnostic where the sweep has it (else empty)."""
    from papers.orion import patching

    rows = []
    for (model, seed, family), g in sweep.groupby(["model", "seed", "family"], sort=False):
        a = acc[(acc.model == model) & (acc.seed == seed) & (acc.family == family)].iloc[0]
        req, ctl, span = g[g.source == "request"], g[g.source == "shuffled"], g[g.source == "span"]
        profile, ctl_profile = patching.layer_profile(req), patching.layer_profile(ctl)
        best = patching.best_layer(req)
        n_layer = int(g.n_layer.iloc[0])
        rows.append({"model": model, "seed": seed, "family": family, "n_layer": n_layer, "width": int(g.width.iloc[0]),
                     "gate_step": int(a.gate_step), "accuracy": a.accuracy, "gated": bool(a.accuracy >= gate),
                     "r1c2_max": float(req[req.hypothesis == "R1(C2)"].normalized.max()), "r1c2_layer": best,
                     "depth": best / n_layer, "profile": " > ".join(profile),
                     "decomposition": patching.is_decomposition_profile(profile),
                     "interior": patching.is_interior_decomposition(profile),
                     "ends_by_construction": profile[0] == patching.HYPOTHESES[0] and profile[-1] == patching.HYPOTHESES[-1],
                     "control_r1c2_max": float(ctl[ctl.hypothesis == "R1(C2)"].normalized.max()),
                     "control_interior": patching.is_interior_decomposition(ctl_profile),
                     "span_profile": " > ".join(patching.layer_profile(span)) if len(span) else ""})
    return pd.DataFrame(rows)


def summarise_oversight(over: pd.DataFrame) -> pd.DataFrame:
    """One row per pretrained model: accuracy under injection before and after patching the trusted prompt's
    state at the chosen layer, and after patching the control's (a trusted prompt asking another key)."""
    rows = []
    for model, g in over.groupby("model", sort=False):
        chosen = int(g.chosen_layer.iloc[0])

        def at(condition, role, layer):
            r = g[(g.condition == condition) & (g.trusted == role)].set_index("layer")
            return r.loc[layer]

        rows.append({"model": model, "seed": 0, "n_layer": int(g.n_layer.iloc[0]), "layer": chosen,
                     "before": at("injected", "trusted", -1).accuracy, "after": at("injected", "trusted", chosen).accuracy,
                     "after_other": at("injected", "trusted_other", chosen).accuracy,
                     "follows_before": at("injected", "trusted", -1).follows_injection,
                     "follows_after": at("injected", "trusted", chosen).follows_injection,
                     "clean_before": at("clean", "trusted", -1).accuracy, "clean_after": at("clean", "trusted", chosen).accuracy})
    return pd.DataFrame(rows, columns=["model", "seed", "n_layer", "layer", "before", "after", "after_other",
                                       "follows_before", "follows_after", "clean_before", "clean_after"])


def _groups(p: Params, names) -> dict[str, str]:
    """The replicate groups of the claims: each trained size on its own (its replicates are its seeds), and
    the pretrained LMs together (their replicates are the distinct models, the paper's unit)."""
    pretrained = set(p.pretrained_names)
    return {name: ("pretrained LMs" if name in pretrained else name) for name in names}


def per_replicate(p: Params, pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per trained (model, seed) or pretrained model: over ALL its model-task pairs, the share that passed
    the gate AND keep R1(C2) (claim (a)) or show the interior profile (claim (b)); a pair below the gate counts
    as not showing them. The same shares under the shuffled-position control, and the mean relative depth of the
    R1(C2) peak over gated pairs. `group` names the size (or "pretrained LMs"). Each share comes twice: with
    the pairs below the gate counted as not showing the pattern (`share_*`, the worst case) and as showing it
    (`share_*_best`, the best case): the run did not measure them on a model that does the task."""
    c = p.claims
    group = _groups(p, pairs.model.unique())
    rows = []
    for (model, seed), g in pairs.groupby(["model", "seed"], sort=False):
        below = float((~g.gated).mean())  # the share of pairs whose outcome the run could not measure
        row = {"group": group[model], "model": model, "seed": seed, "pairs_trained": len(g),
               "pairs_gated": int(g.gated.sum()), "gate_step": int(g.gate_step.iloc[0]),
               "depth": float(g[g.gated].depth.mean()) if g.gated.any() else float("nan")}
        for column, shows in (("share_kept", g.r1c2_max >= c.keep_fraction), ("share_interior", g.interior),
                              ("control_kept", g.control_r1c2_max >= c.keep_fraction),
                              ("control_interior", g.control_interior)):
            row[column] = float((g.gated & shows).mean())  # pairs below the gate counted as not showing it
            row[column + "_best"] = row[column] + below  # ... and as showing it
        rows.append(row)
    return pd.DataFrame(rows)


def _claims(p: Params, pairs: pd.DataFrame, over: pd.DataFrame):
    """The three claims. (a) and (b) are decided per replicate group (every trained size, and the pretrained LMs
    together; the comparison across sizes: every group must hold) on the mean over the group's replicates of a
    per-replicate share, a Student t 95% interval against the config's threshold; their control is the same
    criterion on the shuffled-position patch. (c) needs a model not trained to obey the note: a pretrained LM."""
    from papers.common.claims import Claim, Control, Evidence, mean_test

    c = p.claims
    reps = per_replicate(p, pairs)
    groups = list(dict.fromkeys(reps.group))
    below = pairs[~pairs.gated]
    gate_note = (f"{len(below)} of {len(pairs)} trained model-task pairs did not reach the accuracy gate "
                 f"{c.gate_accuracy} within {p.train.max_steps} steps; the run cannot tell whether they would show the "
                 f"decomposition, so each share's interval runs from counting them as failures to counting them as "
                 f"successes: "
                 + ", ".join(f"{r.model}/{r.family} seed {r.seed} ({r.accuracy:.2f})" for r in below.itertuples())
                 if len(below) else "")
    if len(below) == len(pairs):
        gate_note = (f"no trained pair reached the accuracy gate within the step cap ({p.train.max_steps} steps): at "
                     f"this budget the models do not learn the tasks, so request-patching on them says nothing about "
                     f"the paper's mechanism and the claim cannot be decided here (the full scale trains for longer); "
                     + gate_note)

    def what(group):
        return "pretrained models" if group == "pretrained LMs" else "seeds"

    def evidence(column, threshold, label):
        """Per group: the mean worst-case share with an interval from the low end of its t interval to the high
        end of the best case's, so that a pair below the gate can neither make a claim hold nor fail."""
        parts = []
        for grp in groups:
            r = reps[reps.group == grp]
            worst = mean_test(r[column], threshold=threshold, direction=">")
            best = mean_test(r[column + "_best"], threshold=threshold, direction=">")
            low, high = max(0.0, worst.interval[0]), min(1.0, best.interval[1])  # a share lies in [0, 1]
            parts.append(Evidence(worst.effect, (low, high), worst.replicates,
                                  f"Student t 95% interval over {worst.replicates} {what(grp)}, from the low end with "
                                  f"pairs below the gate counted as failures to the high end with them counted as "
                                  f"successes (worst-case bounds), clipped to [0, 1]", threshold, ">", f"{grp}: {label}"))
        return parts

    def notes(*xs):
        return "; ".join(x for x in xs if x)

    def shares(column):
        return {grp: [round(v, 3) for v in reps[reps.group == grp][column]] for grp in groups}

    control_text = ("the shuffled-position patch: x1's state at a random position of its context (before any request "
                    "token, so it cannot carry R1) written into x2's last token, on the same models and pairs; the same "
                    "criterion must not hold")
    kept = int((pairs.gated & (pairs.r1c2_max >= c.keep_fraction)).sum())
    a = Claim(
        "a", f"Request-patching keeps >= {c.keep_fraction:.0%} of the normalised correct-token probability at some "
             "layer for nearly every model-task pair, at every model size.",
        "98 of 106 model-task pairs (0.92), models of 125M-70B",
        {"pairs_kept": kept, "pairs_gated": int(pairs.gated.sum()), "pairs_trained": len(pairs),
         "share_per_seed": shares("share_kept"), "control_share_per_seed": shares("control_kept")},
        f"for every model size (replicates: its seeds) and for the pretrained LMs together (replicates: the models), "
        f"the 95% t interval of the mean per-replicate share of its trained model-task pairs whose max over layers "
        f"of p(R1(C2)) / p_clean is >= keep_fraction = {c.keep_fraction} (the paper's 70%) lies above "
        f"pairs_fraction_min = {c.pairs_fraction_min} (the paper's 98/106); a pair below the gate (held-out accuracy "
        f"< {c.gate_accuracy}) is counted as a failure for the interval's low end and as a success for its high "
        f"end, so it can neither make the claim hold nor fail",
        evidence("share_kept", c.pairs_fraction_min, f"share of pairs gated with max_L p(R1(C2)) / p_clean >= {c.keep_fraction}"),
        Control(control_text, evidence("control_kept", c.pairs_fraction_min, "control share")),
        note=gate_note)

    b = Claim(
        "b", "On the interior layers (1 .. n_layer - 1), as the patched layer L grows the dominant output goes "
             "R2(C2) -> R1(C2) -> R1(C1), never back, and R1(C2) dominates at one of them at least, at every size.",
        "early layers R2(C2), middle layers R1(C2), late layers R1(C1) (the paper's layer plots)",
        {"pairs_with_interior_profile": int((pairs.gated & pairs.interior).sum()), "pairs_trained": len(pairs),
         "share_per_seed": shares("share_interior"), "control_share_per_seed": shares("control_interior"),
         "n_layer": sorted(int(x) for x in set(pairs.n_layer))},
        f"for every model size (replicates: its seeds) and the pretrained LMs together (replicates: the models), the "
        f"95% t interval of the mean per-replicate share of its trained pairs whose dominant hypothesis per interior "
        f"layer (largest normalised probability) follows that order and includes R1(C2) lies above "
        f"profile_fraction_min = {c.profile_fraction_min} (pairs below the gate bound the interval as in (a)). "
        f"Layers 0 and n_layer are left out: R2(C2) there "
        f"and R1(C1) at the last layer hold by construction (a sanity check in the report)",
        evidence("share_interior", c.profile_fraction_min, "share of pairs gated with the interior profile"),
        Control(control_text, evidence("control_interior", c.profile_fraction_min, "control share")),
        note=gate_note)

    statement_c = ("Patching the middle-layer last-token state of one trusted prompt restores accuracy under prompt "
                   "injection, in a model not trained to obey the injected note.")
    paper_c = "15.5% -> 97.5% on Pythia-12b"
    criterion_c = (f"for the pretrained LMs together (replicates: the models), the 95% t interval of the mean "
                   f"accuracy gain after - before on the injected stories (the trusted prompt's state patched at the "
                   f"story's best request-patching layer) lies above injection_gain_min = {c.injection_gain_min}")
    control_c = ("the same gain when the patched state comes from a trusted story that asks another attribute "
                 "(it carries a request, but not the right one): it must not restore the asked attribute")
    if over.empty:
        cc = Claim.not_measured(
            "c", statement_c, paper_c, criterion_c,
            "not measured: it needs a model that was not trained on injected notes and follows them anyway, as a "
            "pretrained LM does (instruction-like text in its training data); our tiny models never saw a note, and "
            "no pretrained LM is given at this scale (orion.pretrained is empty; the full scale analyses any local "
            "Hugging Face model listed there)", control_c)
    else:
        cc = Claim(
            "c", statement_c, paper_c,
            {"models": len(over), "accuracy_before": over.before.tolist(), "accuracy_after": over.after.tolist(),
             "accuracy_after_control": over.after_other.tolist(), "layers": over.layer.tolist()},
            criterion_c,
            mean_test(over.after - over.before, threshold=c.injection_gain_min, direction=">", what="pretrained models",
                      name="pretrained LMs: accuracy after - before"),
            Control(control_c, mean_test(over.after_other - over.before, threshold=c.injection_gain_min,
                                         direction=">", what="pretrained models", name="control gain")))
    return [a, b, cc]


def size_table(p: Params, pairs: pd.DataFrame) -> pd.DataFrame:
    """The comparison across model sizes: per size, the seeds' gate steps, and the mean [95% t interval] over
    seeds of the claims' shares (and the control's) and of the relative depth of the R1(C2) peak."""
    from papers.common.claims import t_interval

    reps = per_replicate(p, pairs)
    rows = []
    for grp, g in reps.groupby("group", sort=False):
        first = pairs[pairs.model == g.model.iloc[0]].iloc[0]
        row = {"size": grp, "layers": int(first.n_layer), "width": int(first.width), "seeds": len(g),
               "gate steps": ", ".join(str(s) for s in g.gate_step), "pairs gated": f"{g.pairs_gated.sum()} of {g.pairs_trained.sum()}"}
        for column, label in (("share_kept", "(a) share"), ("control_kept", "(a) control"),
                              ("share_interior", "(b) share"), ("control_interior", "(b) control"),
                              ("depth", "R1(C2) peak depth L / n_layer")):
            x = g[column].dropna().to_numpy()
            if len(x) >= 2:
                m, lo, hi = t_interval(x)
                row[label] = f"{m:.2f} [{max(lo, 0.0):.2f}, {min(hi, 1.0):.2f}]"  # shares and depths lie in [0, 1]
            else:
                row[label] = f"{x[0]:.2f}" if len(x) else "n/a"
        rows.append(row)
    return pd.DataFrame(rows)


def report(*, cfg, scale, metrics, sweeps, oversights, histories, benchmarks, table_md, table_csv, claims,
           params_json, report_md, fig_layers, fig_training, fig_oversight=None):
    """The results table (per size, then per model-task pair; oversight per pretrained model), the figures, the
    claims with computed verdicts and the report section."""
    from papers.common.claims import write_claims
    from papers.common.io import read_parquets
    from papers.common.params import to_dict
    from papers.common.report import write_report
    from papers.common.tables import to_markdown, write_table
    from papers.orion import figures

    p = parse(cfg)
    acc, sweep, hist = (read_parquets(x) for x in (metrics, sweeps, histories))
    over = read_parquets(oversights) if oversights else pd.DataFrame()
    pairs = summarise(acc, sweep, p.claims.gate_accuracy)
    oversight = summarise_oversight(over) if len(over) else summarise_oversight(
        pd.DataFrame(columns=["model", "chosen_layer", "n_layer", "condition", "trusted", "layer"]))

    yes_no = {True: "yes", False: "no"}
    md = pairs.assign(gated=pairs.gated.map({True: "yes", False: "below"}), interior=pairs.interior.map(yes_no),
                      control_interior=pairs.control_interior.map(yes_no))
    md = md[["model", "seed", "family", "gate_step", "accuracy", "gated", "r1c2_max", "r1c2_layer", "profile",
             "interior", "control_r1c2_max", "control_interior"]]
    md = md.rename(columns={"gate_step": "steps", "accuracy": "test accuracy", "gated": f"gate (>= {p.claims.gate_accuracy})",
                            "r1c2_max": "max_L p(R1(C2)) / p_clean", "r1c2_layer": "at layer L",
                            "profile": "dominant output, L = 0 ..", "interior": "interior profile (b)",
                            "control_r1c2_max": "control: max_L p(R1(C2)) / p_clean",
                            "control_interior": "control: interior profile"})
    long = pairs.melt(id_vars=["model", "seed", "family"],
                      value_vars=["gate_step", "accuracy", "r1c2_max", "r1c2_layer", "control_r1c2_max"],
                      var_name="quantity")
    if len(oversight):
        long = pd.concat([long, oversight.assign(family="story (injected)").melt(
            id_vars=["model", "seed", "family"], value_vars=["layer", "before", "after", "after_other"],
            var_name="quantity")], ignore_index=True)
    caption = (f"Request-patching on held-out prompts ({p.patch_pairs} pairs per family and layer), every trained "
               f"model-task pair: steps trained (the seed stops at the first record where every family passes the "
               f"gate, at most {p.train.max_steps}), held-out accuracy, the largest normalised probability of R1(C2) "
               f"over the patched layers L (the paper's Fig. 3; paper: >= 0.7 for 98 of 106 pairs) and its layer, the "
               f"dominant hypothesis at each layer, and the same under the shuffled-position control.")
    write_table(md, table_md, table_csv, caption=caption, csv_df=long)
    with open(table_md, "a") as f:
        f.write("\nThe comparison across model sizes (mean [95% t interval] over seeds; a share counts every trained "
                "pair, a pair below the gate as a failure here, while the claims bound its unknown outcome both "
                "ways; intervals clipped to [0, 1], the range of a share):\n\n")
        f.write(to_markdown(size_table(p, pairs)))
        if len(oversight):
            f.write(f"\n\nOversight: {p.inject_prompts} held-out stories asking for the {p.inject_key}, with an "
                    "injected note asking for another attribute; the last-token state of one trusted story is patched "
                    "in at the layer where the story's request-patching peaks (paper: 15.5% -> 97.5% on Pythia-12b); "
                    "control: a trusted story asking another attribute.\n\n")
            f.write(to_markdown(oversight))
        f.write("\n")

    figures.layer_profiles(sweep, pairs, fig_layers)
    figures.training(hist, p.claims.gate_accuracy, fig_training)
    figs = [fig_layers, fig_training]
    if fig_oversight is not None:
        figures.oversight(over, oversight, fig_oversight)
        figs.append(fig_oversight)

    claim_list = _claims(p, pairs, oversight)
    write_claims(claim_list, claims, paper=SLUG, scale=scale)
    write_json(to_dict(p), params_json)
    write_report(report_md, title=TITLE, scale=scale, what_was_run=_what_was_run(p) + " " + _sanity(pairs),
                 table_md=table_md, figures=figs, claims=claim_list, benchmarks=benchmarks, differences=DIFFERENCES)


def _what_was_run(p: Params) -> str:
    sizes = ", ".join(f"{name} ({m.n_layer} layers, width {m.n_embd}, {m.n_head} heads, keys and values mixed over "
                      f"{m.kv_window} positions)" for name, m in ((n, p.model(n)) for n in p.model_names))
    return (f"Tiny causal transformers ({sizes}; {p.seeds} seeds each, trained side by side in one process) trained "
            f"from scratch until every task family passes the accuracy gate ({p.claims.gate_accuracy} on held-out "
            f"prompts, checked every {p.train.eval_every} steps) or for at most {p.train.max_steps} steps (batch "
            f"{p.train.batch_size}, AdamW lr {p.train.lr}, constant after {p.train.warmup} warmup steps) on a mixture "
            f"of {len(p.families)} ORION-style task families ({', '.join(p.families)}) whose entity names come from "
            f"Debian's wamerican word list ({p.pool_size} words per pool), with {p.train.copy_fraction:.0%} of each "
            f"batch copy sequences (a list of {p.train.copy_length[0]}-{p.train.copy_length[1]} words written twice; "
            f"{p.train.copy_separated:.0%} of them with a separator after each word)"
            + (f", after a curriculum of {p.train.copy_warmup} steps on copy sequences alone. " if p.train.copy_warmup
               else ". ")
            + f"Each sequence of a family asks 1-{p.train.max_requests} requests, the loss on their answers plus "
            f"{p.train.lm_weight} x the next-token loss elsewhere. "
            f"{_pretrained_sentence(p)}Test prompts use held-out context wordings ({p.test_fraction:.0%} of the "
            f"styles). Every trained model-task pair is analysed by request-patching at every layer (the residual "
            f"stream at the last token of x2 = (C2, R2) overwritten by that of x1 = (C1, R1)) and by the same patch "
            f"from a random context position of x1 (the negative control); a pair below the gate counts against "
            f"the claims.")


def _sanity(pairs: pd.DataFrame) -> str:
    """The end layers of the profile, fixed by construction (not a claim): R2(C2) at L = 0, R1(C1) at L = n_layer."""
    gated = pairs[pairs.gated]
    ok = int(gated.ends_by_construction.sum())
    return (f"Sanity check, not a claim: the dominant output is R2(C2) at L = 0 and R1(C1) at L = n_layer in {ok} of "
            f"{len(gated)} gated pairs (by construction: at L = 0 the patch is the embedding of the last token, at "
            f"L = n_layer it is the state that sets the output); claim (b) is therefore tested on the interior layers. "
            + _gated_outcome(pairs))


def _gated_outcome(pairs: pd.DataFrame) -> str:
    """What the pairs that passed the gate show on the interior layers: how many keep the unpatched answer R2(C2)
    dominant at every interior layer, i.e. answer from x2's own request tokens whatever the last token carries."""
    gated = pairs[pairs.gated]
    if gated.empty:
        return "No pair passed the gate, so no request-patching result describes a model that does its task."
    interior = gated.profile.str.split(" > ").map(lambda layers: layers[1:-1])
    unmoved = interior.map(lambda layers: bool(layers) and all(h == "R2(C2)" for h in layers))
    listed = ", ".join(f"{r.model}/{r.family} seed {r.seed} ({r.r1c2_max:.2g})" for r in gated.itertuples())
    text = (f"Of the {len(gated)} pairs past the gate, {int(unmoved.sum())} keep R2(C2) dominant at every interior "
            f"layer, i.e. patching the last token does not move their request; max_L p(R1(C2)) / p_clean per gated "
            f"pair: {listed}.")
    if "span_profile" in gated and gated.span_profile.str.len().all():
        span = gated.span_profile.str.split(" > ").map(lambda layers: layers[1:-1])
        request_in_span = int(span.map(lambda layers: "R1(C2)" in layers).sum())
        answer_at_1 = int(span.map(lambda layers: bool(layers) and layers[0] == "R1(C1)").sum())
        text += (" Diagnostic (not a claim): with the states of the key/value window's whole span of last tokens "
                 "patched instead (papers/orion/patching.py, source span; L = 0 swaps the request tokens themselves), "
                 f"R1(C2) dominates at an interior layer in {request_in_span} of {len(gated)} gated pairs (the span "
                 f"carries the request before retrieval), and x1's own answer R1(C1) already at L = 1 in {answer_at_1} "
                 "(the answer is retrieved at the span's tokens in the first block, before the last token reads it); "
                 "the dominant output per layer L = 0 .. n_layer: "
                 + "; ".join(f"{r.model}/{r.family} seed {r.seed}: {r.span_profile}" for r in gated.itertuples())
                 + ".")
    return text


def _pretrained_sentence(p: Params) -> str:
    if not p.pretrained:
        return "No pretrained LM was listed (orion.pretrained), so the injection experiment (claim (c)) is not measured. "
    return ("Pretrained LMs analysed as they are: " + ", ".join(f"{m['name']} ({m['path']})" for m in p.pretrained)
            + "; they read the prompts as text and are scored on the first token of each answer. ")


DIFFERENCES = """\
This is an analogue of the paper's study, not a replication on its models. The paper analyses 18 pretrained
language models (GPT-2, Pythia, Falcon, Llama 2; 125M to 70B parameters) on its ORION prompts; no model weights
can be downloaded here, so we train tiny transformers (4 layers, width 64 at the default scale; 4-8
layers, widths 128-512 at the full scale; thousands of times smaller) on our own ORION-style tasks, and they are trained on the very task families they are
then analysed on. The families follow the paper's domains (question answering over a story, type hints in code,
induction, translation; variable binding (quantity) is implemented but left out of the default run for budget;
no factual recall, which needs world knowledge a tiny model does not have) with word-level tokens and short
templated contexts. The paper's size comparison spans 125M-70B; the default scale trains one size (three seeds)
to a step cap set by its 900 s budget, the full scale three sizes trained ten times longer.
The accuracy gate and the copy sequences. Each seed trains until every family passes the gate on held-out
prompts, checked every few hundred steps, and is taken at that point; a seed still below it at the step cap is
reported as such, and its pairs below the gate bound the claims' intervals (counted as failures at the low end,
as successes at the high end) instead of being dropped. The families that bind a key to its value inside the
context need an induction-style circuit, whose formation is a known slow plateau; a share of every training batch
is therefore copy sequences, a list of words written twice with the loss on the second copy: the repeated text on
which Olsson et al. (2022) watch induction heads form, standing in for the repeated text a pretrained LM has seen.
Why plain tiny transformers stayed below the gate, and the key/value window. In three families the key sits two
or three tokens from its value ("alpha : X", "the king met X", "X = Circle ( )"), so the lookup must match the
token before the last one (or a word after the value), not the last token as in plain copying. Plain 4-layer
models (widths 32 and 64, one-seed diagnostic runs of 800-3,000 steps with several recipes) learned the story
family (up to 1.0 by 3,000 steps) but stayed at the accuracy of guessing among the context's values on code,
induction and translation (0.04-0.40), as the runs before issue 20's rework did. We therefore give every layer a
short causal window over keys and values (papers/orion/model.py, causal_window, kv_window positions): each key and
value is a learned per-channel mix of those of its own and the kv_window - 1 previous positions, Olsson et al.
(2022)'s smeared key widened to four positions and applied to the values, of the kind of short convolution that
lets small models do associative recall (Arora et al. 2024, Zoology). The query is left as it is, so a query reads
only its own residual stream: the state request-patching writes at the last token is all the query of the next
layer sees there, and the request must still be moved to the last token by attention, layer by layer. With the
window (same recipe, one seed, width 64) induction, story and translation reached 1.0 and code 0.94 by step 2,100;
without it the same recipe was at 0.08-0.26 on all four at step 1,500 and, in a 3,000-step run with a per-channel
gain on keys and values in its place, never passed the gate on all four at once. With three seeds the families are learned one at a time, each in a sudden jump at a step
that varies by seed (the table's training record), so the step cap set by the budget leaves some pairs below the
gate; the full scale trains longer. A caveat on what the window does to request-patching: the value window gives
the last token a direct read of the values of the three tokens before it, which are the request's own tokens and
stay those of x2 when only the last token is patched, so a model may answer from those tokens rather than from a
request moved to the last token (what this run's gated pairs show is stated under "What was run").
A diagnostic tells the two readings apart: the same patch over the window's whole span of last tokens. Under it,
R1(C2) at an interior layer would mean that the span carries the request and only the one-token patch missed it;
R1(C1) means that the answer was already retrieved at the span's tokens, a circuit without the paper's step of
moving the request to the last token before retrieval. Models whose values are not windowed cannot be tested
at this budget: with keys windowed in every layer and values in none or in the first block only
(model.GPTConfig.value_layers 0 or 1), one-seed runs of 2,100 steps learned the story family only (1.0 with values
in block 1, 0.72 with keys only; the other three at 0.10-0.32). The pretrained LMs of the paper have no such
window; it is a property of our analogue, and the full scale keeps it so that its sizes compare like for like.
The copy sequences of every batch carry a separator after each word, the same two-token lookup with many targets
per sequence (a curriculum of copy sequences first, then the tasks, left the families at chance in a one-seed
run without the window: the circuits formed on the copies alone did not carry over).
Copy sequences share no request or key with the tasks (only the separator ":" and the pools their words come
from), so no prompt of the analysis occurs in them. The seeds of one size train side by side in one process
(their weights stacked; papers/orion/ensemble.py), the same computation as separate runs (a test checks it).
Request-patching follows the official code: the residual stream after a block at the last token, normalised by
the clean probability (ratio of means over pairs); we also draw pairs so that R2(C2), R1(C2) and R1(C1) are three
different tokens (the official code allows collisions). The negative control is ours: the same patch taken from
a context position of x1, which cannot carry the request.
Prompt injection (claim (c)). The paper's models were never trained to obey injected notes but do; ours would
follow a note only if trained to, which would make the experiment start at zero by design, so our models never
see a note and claim (c) is measured only on pretrained LMs listed under orion.pretrained (a local Hugging Face
directory; nothing is downloaded; full scale). They read our word-level prompts joined by spaces and are scored
on the first token of each answer, with the residual stream patched after each block as in the official code.
No pretrained weights ship with any package, so no run here includes one; the tests check that path on a tiny
random GPT-2 against Hugging Face's own hidden states.
"""
