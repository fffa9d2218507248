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
    `test` (the accuracy gate), `pairs` (request-patching), `injection` (one trusted prompt, then the
    untrusted stories with their clean twins)."""
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
    rows = [{"role": "trusted", "clean": " ".join(trusted.tokens), "injected": " ".join(trusted.tokens),
             "answer": trusted.answer, "injected_key": "", "injected_answer": trusted.answer}]
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
def train(*, cfg, model_name, seed, vocab, test, checkpoint, history):
    """Train one model size with one seed on the task mixture; the history records held-out accuracy."""
    import torch

    from papers.orion import model as gpt
    from papers.orion import train as trainer
    from papers.orion.lm import WordLM
    from papers.orion.patching import accuracy

    p = parse(cfg)
    m, t = p.model(model_name), p.train
    voc, styles = read_vocab(vocab)
    rng = seed_everything(seed)
    families = [tasks.FAMILIES[f] for f in p.families]
    held_out = read_parquet(test).groupby("family").head(t.eval_prompts)
    held_out = {f: (g.prompt.str.split().tolist(), g.answer.tolist()) for f, g in held_out.groupby("family")}
    index = voc.index

    def evaluate(model):
        lm = WordLM(model, index)
        return {f: accuracy(lm, prompts, answers)[0] for f, (prompts, answers) in held_out.items()}

    def sample():
        return trainer.sample_batch(families, {f: s["train"] for f, s in styles.items()}, voc, rng,
                                    batch_size=t.batch_size, max_requests=t.max_requests, inject_prob=p.inject_prob,
                                    copy_fraction=t.copy_fraction, copy_length=t.copy_length)

    model = gpt.GPT(gpt.GPTConfig(vocab_size=len(voc), block_size=BLOCK_SIZE, n_layer=m.n_layer, n_head=m.n_head,
                                  n_embd=m.n_embd))
    log.info("model %s seed %d: %d parameters", model_name, seed, sum(q.numel() for q in model.parameters()))
    hist = trainer.train(model, sample, steps=t.steps, lr=t.lr, warmup=t.warmup, weight_decay=t.weight_decay,
                         grad_clip=t.grad_clip, lm_weight=t.lm_weight, eval_every=t.eval_every, evaluate=evaluate,
                         progress=lambda it: progress(it, desc=f"train {model_name} seed {seed}", total=t.steps))
    hist.insert(0, "model", model_name)
    hist.insert(1, "seed", seed)
    write_parquet(hist, history)
    gpt.save(model, checkpoint, model_name=model_name, seed=seed, step=t.steps, rng=torch.get_rng_state())


# ---- evaluate ------------------------------------------------------------------------------------
def evaluate(*, cfg, model_name, seed, checkpoint, vocab, test, pairs, injection, metrics, sweep, oversight):
    """For one trained model: held-out accuracy per family (the gate), the request-patching sweep per family
    and layer, and the oversight experiment (trusted-prompt patching at every layer; the layer the report uses
    is chosen from the story family's sweep, not from these results)."""
    from papers.orion import model as gpt
    from papers.orion.lm import WordLM

    parse(cfg)  # checks the configuration before any work
    model, _ = gpt.load(checkpoint)
    voc, _ = read_vocab(vocab)
    _analyse(WordLM(model, voc.index), {"model": model_name, "seed": seed, "n_layer": model.cfg.n_layer},
             test, pairs, injection, metrics, sweep, oversight)


def evaluate_pretrained(*, cfg, model_name, test, pairs, injection, metrics, sweep, oversight):
    """The same analysis on a pretrained causal LM read from the local directory orion.pretrained[name].path (the
    paper's setting; full scale). Its tokenizer reads the prompts as text."""
    from papers.orion.lm import PretrainedLM

    p = parse(cfg)
    spec = p.pretrained_model(model_name)
    lm = PretrainedLM(spec["path"], dtype=spec.get("dtype", "float32"))
    log.info("%s: %d layers from %s on %s", model_name, lm.n_layer, spec["path"], lm.device)
    _analyse(lm, {"model": model_name, "seed": 0, "n_layer": lm.n_layer}, test, pairs, injection, metrics, sweep,
             oversight)


def _analyse(lm, tag: dict, test, pairs, injection, metrics, sweep, oversight) -> None:
    from papers.orion import patching

    rows = []
    for f, g in read_parquet(test).groupby("family", sort=False):
        acc, prob = patching.accuracy(lm, g.prompt.str.split().tolist(), g.answer.tolist())
        rows.append({**tag, "family": f, "accuracy": acc, "answer_prob": prob, "prompts": len(g)})
    acc_df = pd.DataFrame(rows)

    frames = []
    for f, g in read_parquet(pairs).groupby("family", sort=False):
        frames.append(patching.request_patching(lm, g).assign(**tag, family=f, pairs=len(g)))
    sweep_df = pd.concat(frames, ignore_index=True)

    inj = read_parquet(injection)
    trusted = inj[inj.role == "trusted"].iloc[0]
    untrusted = inj[inj.role == "untrusted"]
    chosen = patching.best_layer(sweep_df[sweep_df.family == "story"])
    frames = []
    for condition, column in (("injected", "injected"), ("clean", "clean")):
        frames.append(patching.oversight(lm, trusted.clean.split(), untrusted[column].str.split().tolist(),
                                         untrusted.answer.tolist(), untrusted.injected_answer.tolist())
                      .assign(condition=condition))
    over = pd.concat(frames, ignore_index=True).assign(**tag, chosen_layer=chosen)

    write_parquet(acc_df, metrics)
    write_parquet(sweep_df, sweep)
    write_parquet(over, oversight)
    log.info("accuracy: %s; oversight layer %d", dict(zip(acc_df.family, acc_df.accuracy.round(3))), chosen)


# ---- report --------------------------------------------------------------------------------------
TITLE = "P1 orion: Look Before You Leap: a universal emergent decomposition of retrieval tasks in language models"


def summarise(acc: pd.DataFrame, sweep: pd.DataFrame, over: pd.DataFrame, gate: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per model-task pair (accuracy, gate, best R1(C2) layer and value, the layer profile) and one
    row per model for the oversight experiment (accuracy before and after at the chosen layer)."""
    from papers.orion import patching

    rows = []
    for (model, seed, family), g in sweep.groupby(["model", "seed", "family"], sort=False):
        a = acc[(acc.model == model) & (acc.seed == seed) & (acc.family == family)].iloc[0]
        r = g[g.hypothesis == "R1(C2)"].set_index("layer").normalized
        profile = patching.layer_profile(g)
        best = patching.best_layer(g)
        rows.append({"model": model, "seed": seed, "family": family, "n_layer": int(g.n_layer.iloc[0]),
                     "accuracy": a.accuracy, "gated": bool(a.accuracy >= gate), "r1c2_max": float(r.max()),
                     "r1c2_layer": best, "profile": " > ".join(profile),
                     "decomposition": patching.is_decomposition_profile(profile),
                     "interior": patching.is_interior_decomposition(profile),
                     "ends_by_construction": profile[0] == patching.HYPOTHESES[0] and profile[-1] == patching.HYPOTHESES[-1]})
    pairs = pd.DataFrame(rows)
    rows = []
    for (model, seed), g in over.groupby(["model", "seed"], sort=False):
        chosen = int(g.chosen_layer.iloc[0])
        inj, clean = g[g.condition == "injected"].set_index("layer"), g[g.condition == "clean"].set_index("layer")
        story = pairs[(pairs.model == model) & (pairs.seed == seed) & (pairs.family == "story")]
        rows.append({"model": model, "seed": seed, "n_layer": int(g.n_layer.iloc[0]), "layer": chosen,
                     "story_gated": bool(story.gated.iloc[0]) if len(story) else False,
                     "before": inj.accuracy.loc[-1], "after": inj.accuracy.loc[chosen],
                     "follows_before": inj.follows_injection.loc[-1], "follows_after": inj.follows_injection.loc[chosen],
                     "clean_before": clean.accuracy.loc[-1], "clean_after": clean.accuracy.loc[chosen]})
    return pairs, pd.DataFrame(rows)


def _groups(p: Params, names) -> dict[str, str]:
    """The replicate groups of the claims: each trained size on its own (its replicates are its seeds), and
    the pretrained LMs together (their replicates are the distinct models, the paper's unit)."""
    pretrained = set(p.pretrained_names)
    return {name: ("pretrained LMs" if name in pretrained else name) for name in names}


def per_replicate(p: Params, pairs: pd.DataFrame, over: pd.DataFrame) -> pd.DataFrame:
    """One row per trained (model, seed) or pretrained model: the share of its gated model-task pairs that keep
    R1(C2) (claim (a)) and that show the interior-layer profile (claim (b)), and the oversight gain on the story
    task (claim (c)); NaN where nothing passed the gate. `group` names the size (or "pretrained LMs")."""
    c = p.claims
    group = _groups(p, pairs.model.unique())
    rows = []
    for (model, seed), g in pairs.groupby(["model", "seed"], sort=False):
        gated = g[g.gated]
        o = over[(over.model == model) & (over.seed == seed)]
        story_ok = len(o) and bool(o.story_gated.iloc[0])
        rows.append({"group": group[model], "model": model, "seed": seed, "pairs_trained": len(g),
                     "pairs_gated": len(gated),
                     "share_kept": float((gated.r1c2_max >= c.keep_fraction).mean()) if len(gated) else float("nan"),
                     "share_interior": float(gated.interior.mean()) if len(gated) else float("nan"),
                     "gain": float(o.after.iloc[0] - o.before.iloc[0]) if story_ok else float("nan")})
    return pd.DataFrame(rows)


def _claims(p: Params, pairs: pd.DataFrame, over: pd.DataFrame):
    """The three claims, each decided per replicate group (every trained size, and the pretrained LMs together)
    on the mean over that group's replicates (seeds of a size, or distinct pretrained models): a Student t 95%
    interval against the config's threshold. Every group the run covers must hold."""
    from papers.common.claims import Claim, Control, mean_test

    c = p.claims
    gated = pairs[pairs.gated]
    n, n_all = len(gated), len(pairs)
    excluded = ", ".join(f"{r.model}/{r.family} seed {r.seed} ({r.accuracy:.2f})" for r in pairs[~pairs.gated].itertuples())
    gate_note = (f"{n_all - n} of {n_all} trained pairs are below the accuracy gate {c.gate_accuracy} and excluded "
                 f"({excluded}); issue 20 trains them to the gate instead" if excluded else "")
    reps = per_replicate(p, pairs, over)
    groups = list(dict.fromkeys(reps.group))

    def what(group):
        return "pretrained models" if group == "pretrained LMs" else "seeds"

    def evidence(column, threshold, label):
        return [mean_test(reps[reps.group == grp][column], threshold=threshold, direction=">", what=what(grp),
                          name=f"{grp}: {label}") for grp in groups]

    def empty(parts):  # groups where no replicate passed the gate: not measured there
        return [e.name.split(":")[0] for e in parts if e.replicates == 0]

    def notes(*xs):
        return "; ".join(x for x in xs if x)

    few = f"seeds per size = {p.seeds}: issue 20 adds seeds (3 or more per size)" if p.seeds < 3 else ""
    no_control = ("not run yet: issue 20 redesigns this experiment with a control where the decomposition should "
                  "not appear (a model trained on a task whose request and retrieval cannot be separated, or on "
                  "shuffled positions), on which the same criterion would be run")

    kept = int((gated.r1c2_max >= c.keep_fraction).sum())
    ev_a = evidence("share_kept", c.pairs_fraction_min, f"share of gated pairs with max_L p(R1(C2)) / p_clean >= {c.keep_fraction}")
    a = Claim(
        "a", f"Request-patching keeps >= {c.keep_fraction:.0%} of the normalised correct-token probability at some "
             "layer for nearly every model-task pair.",
        "98 of 106 model-task pairs (0.92)",
        {"pairs_kept": kept, "pairs_analysed": n, "pairs_trained": n_all, "share": kept / n if n else float("nan"),
         "median_r1c2_max": float(gated.r1c2_max.median()) if n else float("nan")},
        f"for every model size (replicates: its seeds) and for the pretrained LMs together (replicates: the models), "
        f"the 95% t interval of the mean per-replicate share of gated model-task pairs whose max over layers of "
        f"p(R1(C2)) / p_clean is >= keep_fraction = {c.keep_fraction} (the paper's 70%) lies above "
        f"pairs_fraction_min = {c.pairs_fraction_min} (the paper's 98/106)",
        ev_a, Control(no_control),
        note=notes(gate_note, f"no pair passed the gate for {', '.join(empty(ev_a))}" if empty(ev_a) else "", few))

    ok = int(gated.interior.sum())
    ev_b = evidence("share_interior", c.profile_fraction_min, "share of gated pairs with the interior profile")
    layers = sorted(set(pairs.n_layer))
    b = Claim(
        "b", "On the interior layers (1 .. n_layer - 1), as the patched layer L grows the dominant output goes "
             "R2(C2) -> R1(C2) -> R1(C1), never back, and R1(C2) dominates at one of them at least.",
        "early layers R2(C2), middle layers R1(C2), late layers R1(C1) (the paper's layer plots)",
        {"pairs_with_interior_profile": ok, "pairs_analysed": n, "share": ok / n if n else float("nan"),
         "pairs_with_full_profile": int(gated.decomposition.sum()), "n_layer": layers},
        f"for every model size (replicates: its seeds) and the pretrained LMs together (replicates: the models), the "
        f"95% t interval of the mean per-replicate share of gated pairs whose dominant hypothesis per interior layer "
        f"(largest normalised probability) follows that order and includes R1(C2) lies above profile_fraction_min = "
        f"{c.profile_fraction_min}. Layers 0 and n_layer are left out: R2(C2) there and R1(C1) at the last layer "
        f"hold by construction (a sanity check in the report)",
        ev_b, Control(no_control),
        note=notes(gate_note,
                   "with 2-layer models the interior is layer 1 alone, so for them (b) says that R1(C2) dominates "
                   "at layer 1, close to claim (a); issue 20 trains deeper models (4-8 layers)" if min(layers) <= 2 else "",
                   f"no pair passed the gate for {', '.join(empty(ev_b))}" if empty(ev_b) else "", few))

    g = over[over.story_gated]
    gains = (g.after - g.before).to_numpy()
    ev_c = evidence("gain", c.injection_gain_min, "accuracy after - before under injection")
    story_missing = empty(ev_c)
    cc = Claim(
        "c", "Patching the middle-layer last-token state of one trusted prompt restores accuracy under prompt "
             "injection.",
        "15.5% -> 97.5% on Pythia-12b",
        {"models": len(g), "accuracy_before": g.before.tolist(), "accuracy_after": g.after.tolist(),
         "layers": g.layer.tolist(), "min_gain": float(gains.min()) if len(gains) else float("nan")},
        f"for every model size (replicates: its seeds whose story task passed the gate) and the pretrained LMs "
        f"together, the 95% t interval of the mean accuracy gain after - before on the injected stories (the patch "
        f"at the story's best request-patching layer) lies above injection_gain_min = {c.injection_gain_min}",
        ev_c, Control("not run yet: issue 20 redesigns this experiment with models not trained to obey the injected "
                      "note, and a patch that carries no request (a trusted story asking another attribute), on which "
                      "the same gain criterion would be run"),
        note=notes("the trained models are trained to follow the injected note, so their accuracy under injection "
                   "starts low by design",
                   f"the story task did not pass the gate for {', '.join(story_missing)}" if story_missing else "", few))
    return [a, b, cc]


def report(*, cfg, scale, metrics, sweeps, oversights, histories, benchmarks, table_md, table_csv, claims,
           params_json, report_md, fig_layers, fig_oversight, fig_training):
    """The results table (normalised R1(C2) per model-task pair; oversight per model), three figures, the
    claims with computed verdicts and the report section."""
    from papers.common.claims import write_claims
    from papers.common.io import read_parquets
    from papers.common.params import to_dict
    from papers.common.report import write_report
    from papers.common.tables import to_markdown, write_table
    from papers.orion import figures

    p = parse(cfg)
    acc, sweep, over, hist = (read_parquets(x) for x in (metrics, sweeps, oversights, histories))
    pairs, oversight = summarise(acc, sweep, over, p.claims.gate_accuracy)

    md = pairs.assign(gated=pairs.gated.map({True: "yes", False: "excluded"}),
                      decomposition=pairs.decomposition.map({True: "yes", False: "no"}),
                      interior=pairs.interior.map({True: "yes", False: "no"}))
    md = md[["model", "seed", "family", "n_layer", "accuracy", "gated", "r1c2_max", "r1c2_layer", "profile",
             "decomposition", "interior"]]
    md = md.rename(columns={"accuracy": "test accuracy", "gated": f"gate (>= {p.claims.gate_accuracy})",
                            "r1c2_max": "max_L p(R1(C2)) / p_clean", "r1c2_layer": "at layer L",
                            "profile": "dominant output, L = 0 ..", "decomposition": "R2(C2) -> R1(C2) -> R1(C1)",
                            "interior": "same, interior layers (claim (b))"})
    long = [pairs.melt(id_vars=["model", "seed", "family"], value_vars=["accuracy", "r1c2_max", "r1c2_layer"],
                       var_name="quantity"),
            oversight.assign(family="story (injected)").melt(
                id_vars=["model", "seed", "family"], value_vars=["layer", "before", "after", "clean_before", "clean_after"],
                var_name="quantity")]
    caption = (f"Request-patching on held-out prompts ({p.patch_pairs} pairs per family and layer): the largest "
               f"normalised probability of R1(C2) over the patched layers L (the paper's Fig. 3 heat map; paper: >= 0.7 "
               f"for 98 of 106 pairs), the layer, and the dominant hypothesis at each layer. Pairs below test accuracy "
               f"{p.claims.gate_accuracy} are not analysed.")
    write_table(md, table_md, table_csv, caption=caption, csv_df=pd.concat(long, ignore_index=True))
    over_md = oversight.rename(columns={"layer": "patched layer", "before": "accuracy under injection",
                                        "after": "after patching", "follows_before": "follows injection",
                                        "follows_after": "follows after", "clean_before": "clean accuracy",
                                        "clean_after": "clean after patching"})
    with open(table_md, "a") as f:
        f.write(f"\nOversight: {p.inject_prompts} held-out stories asking for the {p.inject_key}, with an injected note "
                "asking for another attribute; the last-token state of one trusted story is patched in at the layer "
                "where the story's request-patching peaks (paper: 15.5% -> 97.5% on Pythia-12b).\n\n")
        f.write(to_markdown(over_md.drop(columns=["story_gated"])))

    figures.layer_profiles(sweep, pairs, fig_layers)
    figures.oversight(over, oversight, fig_oversight)
    figures.training(hist, p.claims.gate_accuracy, fig_training)

    claim_list = _claims(p, pairs, oversight)
    write_claims(claim_list, claims, paper=SLUG, scale=scale)
    write_json(to_dict(p), params_json)
    write_report(report_md, title=TITLE, scale=scale, what_was_run=_what_was_run(p) + " " + _sanity(pairs), table_md=table_md,
                 figures=[fig_layers, fig_oversight, fig_training], claims=claim_list, benchmarks=benchmarks,
                 differences=DIFFERENCES)


def _what_was_run(p: Params) -> str:
    sizes = ", ".join(f"{name} ({p.model(name).n_layer} layers, width {p.model(name).n_embd}, {p.model(name).n_head} heads)"
                      for name in p.model_names)
    return (f"Tiny causal transformers ({sizes}; {p.seeds} seed(s) each) trained from scratch for {p.train.steps} steps "
            f"(batch {p.train.batch_size}, AdamW lr {p.train.lr}, constant after {p.train.warmup} warmup steps) on a "
            f"mixture of {len(p.families)} ORION-style task families ({', '.join(p.families)}) whose entity names come "
            f"from Debian's wamerican word list ({p.pool_size} words per pool), with {p.train.copy_fraction:.0%} of each "
            f"batch copy sequences (a list of {p.train.copy_length[0]}-{p.train.copy_length[1]} words written twice). "
            f"{_pretrained_sentence(p)}Test prompts use held-out context "
            f"wordings ({p.test_fraction:.0%} of the styles). Each model-task pair with test accuracy >= "
            f"{p.claims.gate_accuracy} is analysed by request-patching at every layer (the residual stream at the "
            f"last token of x2 = (C2, R2) overwritten by that of x1 = (C1, R1)), and each model by the oversight "
            f"experiment: {p.inject_prompts} stories with an injected note, patched from one trusted story.")


def _sanity(pairs: pd.DataFrame) -> str:
    """The end layers of the profile, fixed by construction (not a claim): R2(C2) at L = 0, R1(C1) at L = n_layer."""
    gated = pairs[pairs.gated]
    ok = int(gated.ends_by_construction.sum())
    return (f"Sanity check, not a claim: the dominant output is R2(C2) at L = 0 and R1(C1) at L = n_layer in {ok} of "
            f"{len(gated)} gated pairs (by construction: at L = 0 the patch is the embedding of the last token, at "
            f"L = n_layer it is the state that sets the output); claim (b) is therefore tested on the interior layers.")


def _pretrained_sentence(p: Params) -> str:
    if not p.pretrained:
        return "No pretrained LM was listed (orion.pretrained). "
    return ("Pretrained LMs analysed as they are: " + ", ".join(f"{m['name']} ({m['path']})" for m in p.pretrained)
            + "; they read the prompts as text and are scored on the first token of each answer. ")


DIFFERENCES = """\
This is an analogue of the paper's study, not a replication on its models. The paper analyses 18 pretrained
language models (GPT-2, Pythia, Falcon, Llama 2; 125M to 70B parameters) on its ORION prompts; no model weights
can be downloaded here, so we train tiny transformers (thousands of times smaller) on our own ORION-style tasks,
and they are trained on the very task families they are then analysed on. The families follow the paper's domains
(question answering over a story, type hints in code, induction, variable binding, translation; no factual recall,
which needs world knowledge a tiny model does not have) but with word-level tokens and short templated contexts.
For the injection experiment the models are trained on stories that sometimes carry a note telling the reader to
answer another attribute, and follow it; a pretrained LM follows injected instructions for the same reason
(instruction-like text in its training data). The full scale trains larger models for longer, and analyses any
pretrained causal LM listed under orion.pretrained (a local Hugging Face directory; nothing is downloaded) as it
is: it reads our word-level prompts joined by spaces and is scored on the first token of each answer, with the
residual stream patched after each block as in the official code. No pretrained weights ship with any package,
so no run here includes one; the tests check that path on a tiny random GPT-2 against Hugging Face's own hidden
states.
The accuracy gate and the copy sequences. Trained on the task mixture alone (prototype runs: 2-3 layers, width
64, up to 4,250 steps at lr 1e-3 to 3e-3), only the story family passed the gate (1.00 within ~1,000 steps): a
story holds one name, one city and one job from disjoint pools, so a model can answer by the kind of word the
request names. The families that bind a key to its value inside the context stayed near chance (0.2-0.4): they
need an induction-style circuit (a previous-token head, then key matching), whose formation is a known slow
plateau. Half of every training batch is therefore copy sequences, a list of words written twice with the loss
on the second copy: the repeated text on which Olsson et al. (2022) watch induction heads form, standing in for
the repeated text a pretrained LM has seen. In a prototype run (2 layers, width 64) copying reached 0.99 by step
500, and induction (step 1,500), translation and story (2,000) passed the gate; this run's values are in the
table and the training figure. Copy sequences share no request or key with the tasks (only the separator ":"
and the pools their words come from), so no prompt of the analysis occurs in them. A family still below the
gate is excluded and named in each claim's note, so the claims rest on fewer model-task pairs than the paper's 106.
Request-patching follows the official code: the residual stream after a block at the last token, normalised by
the clean probability (ratio of means over pairs); we also draw pairs so that R2(C2), R1(C2) and R1(C1) are three
different tokens (the official code allows collisions).
"""
