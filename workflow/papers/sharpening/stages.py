"""The sharpening DAG's stages:
prepare (the task's corpus and prompts, held-out prompts kept out of pretraining) -> tabular (level 1: the
exact coverage sweep, SFT and RL over budgets, the convergence runs) | pretrain (level 2: one tiny transformer
per seed) -> sharpen (per method: SFT or RL over budgets, both variants, every base model) -> evaluate (the
base models' best-of-N curves, coverage, everything in one long table) -> report. Each function takes its
parameters and paths explicitly.
"""
from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np
import pandas as pd

from papers.common.io import ensure_parent, read_json, read_parquet, read_parquets, write_json, write_parquet
from papers.common.params import to_dict
from papers.common.progress import progress
from papers.sharpening import tabular as tb
from papers.sharpening import task
from papers.sharpening.params import METHODS, SLUG, STRUCTURES, Params, parse, premise_method, rl_step_method

log = logging.getLogger(__name__)

# One long results table: every accuracy of every model, both levels. budget = samples per prompt
# (N for best-of-N, m for SFT / RL; 1 for plain sampling, greedy decoding and SFT on one unselected sample;
# 0 for the closed-form optimum). Tabular variants are the two structures of the coverage sweep, `pairs` its K.
COLUMNS = ["level", "variant", "pairs", "method", "budget", "seed", "accuracy", "greedy_accuracy", "log_pi_base",
           "winner_accuracy", "coverage"]
# STRUCTURES (params.py): the tabular sweep's three generators; claim (c) is decided on tabular.deciding_structure.


def _rows(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


# ---- loaders (a path in, checked data out; errors name the file and the row) -----------------------
def _check_strings(df: pd.DataFrame, path, columns, alphabet: int, max_len: int) -> None:
    abc = set(task.letters(alphabet))
    for col in columns:
        if col not in df.columns:
            raise ValueError(f"{path}: missing column {col!r}")
        for row, s in enumerate(df[col]):
            if not (isinstance(s, str) and 2 <= len(s) <= max_len and len(s) % 2 == 0 and set(s) <= abc):
                raise ValueError(f"{path}, row {row}, column {col}: {s!r} is not an even number (2 .. {max_len}) "
                                 f"of letters of {''.join(sorted(abc))}")


def read_corpus(path, p: Params) -> pd.DataFrame:
    """The pretraining corpus: columns prompt, target (a draw of the task's noisy law)."""
    df = read_parquet(path)
    _check_strings(df, path, ["prompt", "target"], p.task.alphabet, p.task.max_len)
    bad = np.flatnonzero(df.prompt.str.len() != df.target.str.len())
    if len(bad):
        raise ValueError(f"{path}, row {bad[0]}: prompt and target differ in length")
    return df


def read_prompts(path, p: Params) -> pd.DataFrame:
    """The sharpening prompts: columns variant, split (train / val / test), prompt, answer (the correct one)."""
    df = read_parquet(path)
    _check_strings(df, path, ["prompt", "answer"], p.task.alphabet, p.task.max_len)
    bad = np.flatnonzero(df.answer != df.prompt.map(lambda s: s[::-1]))
    if len(bad):
        raise ValueError(f"{path}, row {bad[0]}: answer is not the reversed prompt")
    for row, (variant, prompt) in enumerate(zip(df.variant, df.prompt)):
        if variant not in p.variants or len(prompt) != p.answer_length(variant):
            raise ValueError(f"{path}, row {row}: variant {variant!r} with a prompt of {len(prompt)} letters "
                             f"(variants: { {v: p.answer_length(v) for v in p.variants} })")
    return df


def check_held_out(corpus: pd.DataFrame, prompts: pd.DataFrame) -> dict:
    """Raise unless the held-out (test) prompts appear neither in the pretraining corpus nor among the
    sharpening (train) or validation (val, the pretraining gate's) prompts, and the train and val prompts not in
    the corpus; returns the overlap counts (zeros)."""
    seen = set(corpus.prompt)
    test, train, val = (set(prompts.prompt[prompts.split == s]) for s in ("test", "train", "val"))
    overlaps = {"test_in_corpus": len(test & seen), "test_in_train": len(test & train), "test_in_val": len(test & val),
                "train_in_corpus": len(train & seen), "val_in_corpus": len(val & seen)}
    if any(overlaps.values()):
        raise ValueError(f"held-out prompts leak: {overlaps} (e.g. {sorted((test | train | val) & seen)[:3]})")
    return overlaps


def _encoded(df: pd.DataFrame, variant: str, split: str, p: Params):
    """Prompts (B, P) and correct answers (B, n) of one variant and split, as tensors."""
    import torch

    d = df[(df.variant == variant) & (df.split == split)]
    return (torch.from_numpy(task.encode_prompts(d.prompt, p.task.max_len)),
            torch.from_numpy(task.encode_answers(d.answer, p.answer_length(variant))[0]))


def _seed(*parts: int) -> int:
    """A generator seed from several integers (stable across runs and platforms)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


# ---- prepare -------------------------------------------------------------------------------------------------
def prepare(*, cfg, corpus, prompts):
    """Generate the data, with known ground truth: the sharpening prompts (held-out test, train, and val for the
    pretraining gate, per variant, all distinct) first, then the pretraining corpus from prompts outside them, its
    answers drawn from the task's noisy law."""
    p = parse(cfg)
    rng = np.random.default_rng(p.seed)
    tk = p.task
    frames, reserved = [], set()
    for variant in p.variants:
        for split, count in [("test", tk.test_prompts), ("train", tk.train_prompts), ("val", tk.val_prompts)]:
            ps = task.distinct_prompts(rng, count, p.answer_length(variant), tk.alphabet, exclude=reserved)
            reserved |= set(ps)
            frames.append(task.frame(ps).assign(variant=variant, split=split))
    prompts_df = pd.concat(frames, ignore_index=True)[["variant", "split", "prompt", "answer"]]
    xs = task.corpus_prompts(rng, tk.pretrain_examples, range(2, tk.max_len + 1, 2), tk.alphabet, reserved)
    corpus_df = pd.DataFrame({"prompt": xs, "target": [task.noisy_answer(rng, x, tk.alphabet, tk.levels) for x in xs]})
    check_held_out(corpus_df, prompts_df)
    write_parquet(corpus_df, corpus)
    write_parquet(prompts_df, prompts)


# ---- level 1: the tabular coverage sweep ---------------------------------------------------------------------
def tabular(*, cfg, curves, convergence, formulas):
    """For each structure, number of pairs K (so C_cov) and seed (an independent base model): exact best-of-N,
    SFT-sharpening on best-of-m winners, RL-sharpening (online) and, on tabular.deciding_structure, its offline
    ablation (restricted to a fixed pool of base samples) over the budget grid, both there also at every step size of
    tabular.lr_sensitivity (claim (c) is decided at each), the closed-form optimum; then one long RL run per seed whose distance to the
    optimum is traced, and whose final policy is set against the closed form and its wrong neighbours
    (`formulas`, tabular.formula_distances; check (d)). The paper's Sections 3 and 4."""
    p = parse(cfg)
    tp = p.tabular
    budgets = list(tp.budgets)
    rows = []
    for si, structure in enumerate(STRUCTURES):
        for K in progress(tp.pairs, desc=f"tabular {structure}"):
            for seed in range(tp.seeds):
                # The same stream for every structure: the same y* and decoys, so the sweeps are paired.
                base, y_star, _ = tb.make_pair_chain(np.random.default_rng([p.seed, seed, K]), tp.prompts, K,
                                                     tp.vocab, tp.levels, atomic=structure == "atomic",
                                                     absorbing=structure == "absorbing")
                if not (tb.mode(base)[0] == y_star).all():
                    raise RuntimeError(f"tabular {structure}, K = {K}: Viterbi's mode is not the generator's y*")
                common = {"level": "tabular", "variant": structure, "pairs": K, "seed": seed,
                          "coverage": tb.coverage(base)}

                def row(method, budget, logq, **extra):
                    return {**common, "method": method, "budget": budget,
                            "accuracy": float(tb.prob_of(logq, y_star).mean()),
                            "log_pi_base": float(tb.expected_reward(logq, base).mean()), **extra}

                rows += [row("sample", 1, base), row("optimum", 0, tb.tilt(base, tb.kl_optimum(p.beta))),
                         {**common, "method": "greedy", "budget": 1,
                          "accuracy": float((tb.greedy(base) == y_star).all(1).mean())}]
                rows += [{**common, "method": "best_of_n", "budget": N, "accuracy": tb.bon_accuracy(base, N)}
                         for N in sorted(set(p.bon_sizes) | set(budgets))]
                rng = np.random.default_rng([p.seed, seed, K, 1, si])
                pool = tb.sample(base, max(budgets), rng)  # budget m uses the first m samples of the pool
                reward = tb.seq_logprob(base, pool)
                for m in budgets:
                    won = pool[np.arange(len(pool)), reward[:, :m].argmax(1)]
                    rows.append(row("sft", m, tb.sft_sharpen(base, won),
                                    winner_accuracy=float((won == y_star).all(1).mean())))
                kept, _ = tb.rl_sharpen(base, budgets, beta=p.beta, samples_per_step=tp.samples_per_step, lr=tp.lr,
                                        rng=np.random.default_rng([p.seed, seed, K, 3, si]))
                rows += [row("rl", m, kept[m]) for m in budgets]
                if structure == tp.deciding_structure:  # the ablation of (c), where (c) is decided: the same RL
                    # restricted to a fixed pool of base samples (offline, no online exploration)
                    kept, _ = tb.rl_sharpen(base, budgets, beta=p.beta, samples_per_step=tp.samples_per_step,
                                            lr=tp.lr, rng=np.random.default_rng([p.seed, seed, K, 7, si]),
                                            explore=False)
                    rows += [row("rl_offline", m, kept[m]) for m in budgets]
                    for j, lr in enumerate(tp.lr_sensitivity):  # claim (c) is decided at every step size: online
                        # RL and its offline ablation again at each of tabular.lr_sensitivity (review sharpening_r8)
                        kept, _ = tb.rl_sharpen(base, budgets, beta=p.beta, samples_per_step=tp.samples_per_step,
                                                lr=lr, rng=np.random.default_rng([p.seed, seed, K, 9, si, j]))
                        rows += [row(rl_step_method(lr), m, kept[m]) for m in budgets]
                        kept, _ = tb.rl_sharpen(base, budgets, beta=p.beta, samples_per_step=tp.samples_per_step,
                                                lr=lr, rng=np.random.default_rng([p.seed, seed, K, 11, si, j]),
                                                explore=False)
                        rows += [row(tb.offline_step_method(lr), m, kept[m]) for m in budgets]
                    if K >= p.claims.budget_fit_min_pairs:  # claim (c)'s premise "RL's budget is sample-limited"
                        # (review sharpening_r10): online and offline RL at every step size again, at
                        # tabular.premise_samples_per_step samples per prompt per step, on the budgets divisible by it
                        # (run last, so every stream above is unchanged)
                        kp = tp.premise_samples_per_step
                        grid = [m for m in budgets if m % kp == 0]
                        for j, lr in enumerate((tp.lr, *tp.lr_sensitivity)):
                            names = ("rl", "rl_offline") if lr == tp.lr else (rl_step_method(lr),
                                                                               tb.offline_step_method(lr))
                            for name, explore, tag in zip(names, (True, False), (13, 15)):
                                kept, _ = tb.rl_sharpen(base, grid, beta=p.beta, samples_per_step=kp, lr=lr,
                                                        rng=np.random.default_rng([p.seed, seed, K, tag, si, j]),
                                                        explore=explore)
                                rows += [row(premise_method(name, kp), m, kept[m]) for m in grid]
    write_parquet(_rows(rows), curves)

    traces, fits = [], []
    K = tp.convergence_pairs
    for seed in progress(range(tp.seeds), desc="convergence runs"):
        base, y_star, _ = tb.make_pair_chain(np.random.default_rng([p.seed, seed, K]), tp.prompts, K, tp.vocab,
                                             tp.levels)
        kept, trace = tb.rl_sharpen(base, [tp.convergence_samples], beta=p.beta,
                                    samples_per_step=tp.convergence_samples_per_step, lr=tp.lr,
                                    rng=np.random.default_rng([p.seed, seed, K, 5]),
                                    logp_star=tb.tilt(base, tb.kl_optimum(p.beta)), record_every=tp.record_every,
                                    decay=tp.convergence_decay)
        traces += [(seed, spent, kl) for spent, kl in trace]  # spent = 0: KL(pi_base || pi*)
        fits += [{"seed": seed, **r} for r in tb.formula_distances(kept[tp.convergence_samples], base, y_star, p.beta)]
    write_parquet(pd.DataFrame(traces, columns=["seed", "samples_per_prompt", "kl_to_optimum"]), convergence)
    write_parquet(pd.DataFrame(fits), formulas)


# ---- level 2: the language model --------------------------------------------------------------------------------
def load_bases(path):
    """The pretrained base models of a checkpoint written by :func:`pretrain`, in eval mode."""
    import torch

    from papers.common.gpt import GPT, GPTConfig

    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    models = []
    for state in ckpt["models"]:
        model = GPT(GPTConfig(**ckpt["config"]))
        model.load_state_dict(state)
        models.append(model.eval())
    return models


def law_probes(data: pd.DataFrame, p: Params, split: str, draws: int, rng: np.random.Generator) -> list:
    """Per variant: the `split` prompts, each repeated `draws` times, with answers drawn from the corpus law and
    their exact log-probabilities under it (the probes of papers.sharpening.lm.law_gap), as tensors."""
    import torch

    out = []
    for variant in p.variants:
        xs = [x for x in data.prompt[(data.variant == variant) & (data.split == split)] for _ in range(draws)]
        ys = [task.noisy_answer(rng, x, p.task.alphabet, p.task.levels) for x in xs]
        out.append((torch.from_numpy(task.encode_prompts(xs, p.task.max_len)),
                    torch.from_numpy(task.encode_answers(ys, p.answer_length(variant))[0]),
                    torch.tensor([task.log_prob(x, y, p.task.alphabet, p.task.levels) for x, y in zip(xs, ys)])))
    return out


def pretrain(*, cfg, corpus, prompts, checkpoint, history, fit):
    """Pretrain one tiny transformer per seed on the noisy corpus by maximum likelihood of the answer letters
    (AdamW, linear warm-up, cosine decay over ``steps``), to a gate: a model whose fit to the corpus law on the
    validation prompts (KL(law || model) per answer letter, the worse of the two variants; papers.sharpening.lm.
    law_gap) exceeds ``fit_gap_max`` is discarded and the base model is pretrained again from a fresh
    initialisation, up to ``max_inits`` initialisations (the last is kept if none fits). The checkpoint holds every
    kept model's weights and the config; `history` the kept runs' losses; `fit` the gap of every initialisation on
    the validation prompts and of the kept one on the test prompts (the premise the report gates the claims on)."""
    import torch

    from papers.common.gpt import GPT, GPTConfig
    from papers.sharpening import lm

    p = parse(cfg)
    # Every random draw below takes an explicit generator; only the initialisation uses torch's global one.
    # (papers.common.seeding.seed_everything would also switch on deterministic algorithms, whose import of
    # torch._dynamo costs seconds per job; these CPU ops are deterministic already.)
    tk, pp = p.task, p.pretrain
    df = read_corpus(corpus, p)
    data = read_prompts(prompts, p)
    check_held_out(df, data)
    answers, mask = task.encode_answers(df.target, tk.max_len)
    seq = torch.from_numpy(np.concatenate([task.encode_prompts(df.prompt, tk.max_len), answers], axis=1))
    mask = torch.from_numpy(mask)  # (N, max_len): which answer positions hold a letter
    lengths = df.prompt.str.len().to_numpy()
    by_length = {L: torch.from_numpy(np.flatnonzero(lengths <= L)) for L in range(2, tk.max_len + 1, 2)}
    val = law_probes(data, p, "val", pp.fit_draws, np.random.default_rng(_seed(p.seed, 17)))
    test = law_probes(data, p, "test", pp.fit_draws, np.random.default_rng(_seed(p.seed, 19)))
    cfg_model = GPTConfig(vocab_size=task.vocab_size(tk.alphabet), block_size=2 * tk.max_len, **to_dict(p.model))

    def gap(model, probes):  # the worse fitted variant: each variant's claims need its own fit
        return max(lm.law_gap(model, *probe) for probe in probes)

    states, rows, fits = [], [], []
    for seed in range(pp.seeds):
        for init in range(pp.max_inits):
            # the first initialisation is the base model's own seed (as before the gate); later ones are fresh draws
            torch.manual_seed(_seed(p.seed, seed) if init == 0 else _seed(p.seed, seed, 100 + init))
            model = GPT(cfg_model)
            # foreach: the same update, one call per step for all parameters (bit for bit equal on the CPU)
            opt = torch.optim.AdamW(model.parameters(), lr=pp.lr, weight_decay=0.0, foreach=True)
            gen = torch.Generator().manual_seed(_seed(p.seed, seed, 1) if init == 0 else _seed(p.seed, seed, 200 + init))
            run = []
            for step in progress(range(pp.steps), desc=f"pretrain seed {seed}, initialisation {init}"):
                lr = pp.lr * min(1.0, (step + 1) / pp.warmup) * 0.5 * (1 + math.cos(math.pi * step / pp.steps))
                for group in opt.param_groups:
                    group["lr"] = lr
                if step < pp.length_curriculum:  # the longest prompt length grows 2, 4, .. max_len over these steps
                    pool = by_length[min(tk.max_len, 2 + 2 * int(tk.max_len // 2 * step / pp.length_curriculum))]
                    idx = pool[torch.randint(len(pool), (pp.batch_size,), generator=gen)]
                else:
                    idx = torch.randint(len(seq), (pp.batch_size,), generator=gen)
                # (B, max_len) answer letters: token_logprobs(model, seq[idx])[:, max_len:], without the last
                # block's work on the prompt positions, which that slice discards (lm.tail_logprobs)
                logp = lm.tail_logprobs(model, seq[idx], tk.max_len)
                loss = -(logp * mask[idx]).sum() / mask[idx].sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), pp.grad_clip)
                opt.step()
                run.append({"seed": seed, "init": init, "step": step, "loss": loss.item(), "lr": lr})
            model.eval()
            fits.append({"seed": seed, "init": init, "split": "val", "law_gap": gap(model, val)})
            log.info("base model %d, initialisation %d: KL(law || model) %.4f per letter (val)", seed, init,
                     fits[-1]["law_gap"])
            if fits[-1]["law_gap"] <= pp.fit_gap_max:
                break
        fits.append({"seed": seed, "init": init, "split": "test", "law_gap": gap(model, test)})
        rows += run
        states.append(model.state_dict())
    torch.save({"config": dataclasses.asdict(cfg_model), "models": states, "params": to_dict(p)},
               ensure_parent(checkpoint))
    write_parquet(pd.DataFrame(rows), history)
    write_parquet(pd.DataFrame(fits), fit)


def sharpen(*, cfg, method, checkpoint, prompts, results):
    """One sharpening method ("sft" or "rl") over the budgets, for both variants and every base model (each
    with its own seed); each sharpened model is evaluated on the held-out prompts at once. SFT also fits, on
    the high-coverage variant, one unselected sample per prompt (the control of claim (b)); on the low-coverage
    variant RL also runs restricted to SFT's own pool of base samples (method "rl_offline", lm.rl_sharpen with
    `pool`: the comparator without online exploration of claim (e)). The paper's Sections 3 and 4."""
    import torch

    from papers.sharpening import lm

    p = parse(cfg)
    sp = p.sharpen
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    data = read_prompts(prompts, p)
    rows = []
    for seed, base in enumerate(load_bases(checkpoint)):
        for vi, variant in enumerate(p.variants):
            n = p.answer_length(variant)
            x_train, y_train = _encoded(data, variant, "train", p)
            x_test, y_test = _encoded(data, variant, "test", p)
            gen = torch.Generator().manual_seed(_seed(p.seed, seed, vi, METHODS.index(method)))

            def record(budget, model, name=method, **extra):
                ev = lm.evaluate(model, base, x_test, y_test, samples=sp.eval_samples,
                                 generator=torch.Generator().manual_seed(_seed(p.seed, seed, vi, budget, 7)))
                rows.append({"level": "lm", "variant": variant, "pairs": p.task.answer_pairs[variant],
                             "method": name, "budget": budget, "seed": seed, "accuracy": ev["sample_accuracy"],
                             "greedy_accuracy": ev["greedy_accuracy"], "log_pi_base": ev["log_pi_base"], **extra})

            if method == "sft":
                M = max(sp.budgets)  # one pool per prompt; budget m uses its first m samples
                # (B, M, n) answers and their log pi_base per token, read off the sampling pass; their sums are the
                # self-reward (lm.sample_answers: as teacher-forced lm.self_reward_shared up to float rounding)
                pool, tok = lm.sample_answers(base, x_train, n, M, gen, logprobs=True)
                reward = tok.sum(-1)  # (B, M)
                fits = [(budget, lm.winners(reward[:, :budget], pool[:, :budget]), "sft") for budget in sp.budgets]
                if variant == "high_coverage":  # the pool's first sample is one unselected draw of pi_base
                    fits.append((1, pool[:, 0], "sft_unselected"))
                for budget, targets, name in fits:
                    model = lm.sft_sharpen(base, x_train, targets, epochs=sp.sft_epochs, batch=sp.sft_batch,
                                           lr=sp.sft_lr, generator=gen)
                    record(budget, model, name, winner_accuracy=float((targets == y_train).all(1).float().mean()))
            else:  # online RL, then on the low-coverage variant its ablation (claim (e)): the same RL restricted
                # to SFT's own samples of pi_base, SFT's pool drawn again from SFT's generator (the same draws)
                arms = [((None, None), "rl")]
                if variant == "low_coverage":  # the pool with its log pi_base per token, as SFT reads them
                    arms.append((lm.sample_answers(base, x_train, n, max(sp.budgets), torch.Generator().manual_seed(
                        _seed(p.seed, seed, vi, METHODS.index("sft"))), logprobs=True), "rl_offline"))
                for (pool_, pool_logp), name in arms:
                    lm.rl_sharpen(base, x_train, n, sp.budgets, beta=p.beta,
                                  samples_per_prompt=sp.rl_samples_per_prompt, prompts_per_step=sp.rl_prompts_per_step,
                                  lr=sp.rl_lr, generator=gen, pool=pool_, pool_logp=pool_logp,
                                  on_budget=lambda budget, model, name=name: record(budget, model, name))
    write_parquet(_rows(rows), results)


# ---- evaluate ------------------------------------------------------------------------------------------------
def evaluate(*, cfg, checkpoint, prompts, tabular_curves, sharpened, results, summary):
    """Each base model's accuracies (exact sampling accuracy, greedy, best-of-N and its shuffled-reward control
    from one pool), its coverage, and every row of both levels in one long table."""
    import torch

    from papers.sharpening import lm

    p = parse(cfg)
    data = read_prompts(prompts, p)
    rows = []
    for seed, base in enumerate(load_bases(checkpoint)):
        for vi, variant in enumerate(p.variants):
            x_test, y_test = _encoded(data, variant, "test", p)
            gen = torch.Generator().manual_seed(_seed(p.seed, seed, vi, 11))
            ev = lm.evaluate(base, base, x_test, y_test, samples=p.sharpen.eval_samples, generator=gen)
            curve = lm.best_of_n_curve(base, x_test, y_test, p.bon_sizes, generator=gen,
                                       shuffle_seed=_seed(p.seed, seed, vi, 13))
            coverage = float(torch.exp(-lm.self_reward(base, x_test, y_test)).mean())  # C_cov of this base model
            common = {"level": "lm", "variant": variant, "pairs": p.task.answer_pairs[variant], "seed": seed,
                      "coverage": coverage}
            rows.append({**common, "method": "sample", "budget": 1, "accuracy": ev["sample_accuracy"],
                         "log_pi_base": ev["log_pi_base"]})
            rows.append({**common, "method": "greedy", "budget": 1, "accuracy": ev["greedy_accuracy"]})
            rows += [{**common, "method": "best_of_n", "budget": N, "accuracy": curve["accuracy"][N],
                      "log_pi_base": curve["log_pi_base"][N]} for N in p.bon_sizes]
            rows += [{**common, "method": "best_of_n_shuffled", "budget": N,
                      "accuracy": curve["shuffled_accuracy"][N]} for N in p.bon_sizes]
    test = data[data.split == "test"]

    def law(variant):  # what the corpus law itself predicts on these held-out prompts (pi(y*) = a^K, greedy: a > 1/2)
        xs = test.prompt[test.variant == variant]
        a = np.array([task.reliability(x, p.task.levels) for x in xs])
        p_star = a ** p.task.answer_pairs[variant]
        return {"answer_length": p.answer_length(variant),
                "coverage_of_the_law": task.coverage(xs, p.task.levels, p.task.answer_pairs[variant]),
                "share_greedy_wrong_under_the_law": float(np.mean(a < 0.5)),
                "law_sampling": float(p_star.mean()), "law_greedy": float(np.mean(a > 0.5)),
                "law_best_of_n": {str(N): float(np.mean(1 - (1 - p_star) ** N)) for N in p.bon_sizes}}

    write_json({"lm": {variant: law(variant) for variant in p.variants}}, summary)
    all_rows = pd.concat([read_parquet(tabular_curves), _rows(rows), read_parquets(sharpened)], ignore_index=True)
    write_parquet(all_rows.reindex(columns=COLUMNS), results)


# ---- the paper's own setting: a pretrained LM on math prompts (full scale) ------------------------------------
def pretrained(*, cfg, name, prompts, results):
    """Best-of-N under the self-reward, its shuffled-reward control and greedy decoding, for one local pretrained
    causal LM on the GSM-style prompts file `prompts` (pretrained.prompts; papers.sharpening.pretrained)."""
    from papers.sharpening import pretrained as pt

    p = parse(cfg)
    cp = p.pretrained
    if name not in cp.names:
        raise ValueError(f"sharpening.pretrained.models has no model named {name!r} (names: {cp.names})")
    spec = dict(cp.models[cp.names.index(name)])
    questions = pt.read_math_prompts(prompts, limit=cp.questions)
    model, tokenizer = pt.load(spec["path"], spec.get("dtype", "float32"))
    out = pt.best_of_n(model, tokenizer, questions, template=cp.template, sizes=cp.bon_sizes,
                       max_new_tokens=cp.max_new_tokens, stop=cp.stop, seed=p.seed)
    # level "pretrained": the means over questions (one row per cell, the table); "pretrained_question": one row
    # per question (seed = its index), what the full scale's claim (a) resamples
    arms = [("best_of_n", "accuracy"), ("best_of_n_shuffled", "shuffled_accuracy")]
    rows = [{"level": "pretrained", "variant": name, "seed": 0, "method": "greedy", "budget": 1,
             "accuracy": float(out["greedy_accuracy"].mean())}]
    rows += [{"level": "pretrained", "variant": name, "seed": 0, "method": method, "budget": N,
              "accuracy": float(out[key][N].mean())} for N in cp.bon_sizes for method, key in arms]
    for q in range(len(questions)):
        common = {"level": "pretrained_question", "variant": name, "seed": q}
        rows.append({**common, "method": "greedy", "budget": 1, "accuracy": float(out["greedy_accuracy"][q])})
        rows += [{**common, "method": method, "budget": N, "accuracy": float(out[key][N][q])}
                 for N in cp.bon_sizes for method, key in arms]
    write_parquet(_rows(rows), results)
