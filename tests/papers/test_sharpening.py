"""P11 sharpening: the task's ground truth (sequence mode, greedy answer, coverage) against brute-force
enumeration of its law, the tabular model's closed forms against enumeration, the policy-gradient estimator
against finite differences, the best-of-N pool estimator against all subsets, held-out prompts kept out of
pretraining, the tiny transformer's cache and causality, and the claims' decisions on synthetic results."""
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from papers.sharpening import lm, task
from papers.sharpening import tabular as tb
from papers.common.gpt import GPT, GPTConfig, generate, token_logprobs
from papers.sharpening.params import parse, premise_method, rl_step_method
from papers.sharpening import stages, verdicts


def _random_chain(seed=0, X=2, L=4, V=3, concentration=0.7):
    """A Markov chain per prompt with Dirichlet rows: greedy, mode and tilt are non-trivial."""
    rng = np.random.default_rng(seed)
    return np.log(rng.dirichlet(np.full(V, concentration), size=(X, L, V)))


def _all_sequences(L, V):
    return np.array(list(itertools.product(range(V), repeat=L)))  # (V^L, L)


def _brute(logp):
    """log pi(y | x) of every sequence, (X, V^L), and the sequences."""
    X, L, V, _ = logp.shape
    ys = _all_sequences(L, V)
    return tb.seq_logprob(logp, np.broadcast_to(ys, (X, *ys.shape)).copy()), ys


# ---- the tabular model ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chain_is_a_distribution_and_viterbi_finds_the_mode(seed):
    logp = _random_chain(seed)
    lp, ys = _brute(logp)
    np.testing.assert_allclose(np.exp(lp).sum(1), 1.0, rtol=1e-12)
    y_star, lp_star = tb.mode(logp)
    np.testing.assert_array_equal(y_star, ys[lp.argmax(1)])
    np.testing.assert_allclose(lp_star, lp.max(1), rtol=1e-12)
    assert tb.coverage(logp) == pytest.approx(np.mean(np.exp(-lp.max(1))), rel=1e-12)


@pytest.mark.parametrize("alpha", [1.0, 2.0, 11.0, 0.5])
def test_tilt_is_the_normalised_power_of_the_chain(alpha):
    logp = _random_chain(3)
    lp, _ = _brute(logp)
    target = alpha * lp - np.log(np.exp(alpha * lp).sum(1, keepdims=True))
    got, _ = _brute(tb.tilt(logp, alpha))
    np.testing.assert_allclose(got, target, atol=1e-10)


def test_kl_and_expected_reward_match_enumeration():
    p, q = _random_chain(4), _random_chain(5)
    lp, _ = _brute(p)
    lq, _ = _brute(q)
    np.testing.assert_allclose(tb.kl(q, p), (np.exp(lq) * (lq - lp)).sum(1), rtol=1e-10)
    np.testing.assert_allclose(tb.expected_reward(q, p), (np.exp(lq) * lp).sum(1), rtol=1e-10)


@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_the_closed_form_optimum_maximises_the_kl_regularised_self_reward(beta):
    """max_pi E_pi[log pi_base] - beta KL(pi || pi_base) = beta log sum_y pi_base(y)^(1 + 1/beta), at the tilt."""
    base = _random_chain(6)
    lp, _ = _brute(base)

    def objective(logq):
        return tb.expected_reward(logq, base) - beta * tb.kl(logq, base)

    star = tb.tilt(base, tb.kl_optimum(beta))
    value = objective(star)
    closed = beta * np.log(np.exp((1 + 1 / beta) * lp).sum(1))
    np.testing.assert_allclose(value, closed, rtol=1e-9)
    rng = np.random.default_rng(0)
    for _ in range(20):  # any other chain scores lower
        other = tb.normalise(star + 0.3 * rng.normal(size=star.shape))
        assert (objective(other) <= value + 1e-12).all()


@pytest.mark.parametrize("structure", ["compositional", "atomic", "absorbing"])
def test_pair_chain_has_the_stated_mode_greedy_answer_and_coverage(structure):
    """Enumerating every sequence: y* is the unique mode with pi(y*) = a^K in every structure, greedy decoding
    misses it exactly on the prompts whose branching probability is below 1/2, C_cov and best-of-N as stated."""
    K, V, levels = 2, 6, (0.3, 0.7)  # 3 decoy tokens: y* is the mode iff a > 1/4
    atomic = structure == "atomic"
    base, y_star, a = tb.make_pair_chain(np.random.default_rng(0), 4, K, V, levels, atomic=atomic,
                                         absorbing=structure == "absorbing")
    lp, ys = _brute(base)
    np.testing.assert_allclose(np.exp(lp).sum(1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(ys[lp.argmax(1)], y_star)
    np.testing.assert_allclose(np.exp(lp.max(1)), a ** K)
    second = np.sort(lp, 1)[:, -2]
    assert (second < lp.max(1)).all()  # unique mode
    branch = a ** K if atomic else a
    np.testing.assert_array_equal((tb.greedy(base) == y_star).all(1), branch > 0.5)
    assert tb.coverage(base) == pytest.approx(np.mean(a ** -K))
    for n in (1, 16):
        assert tb.bon_accuracy(base, n) == pytest.approx(np.mean(1 - (1 - a ** K) ** n))


def test_task_law_mode_greedy_and_coverage_by_enumeration():
    """The LM task's corpus law (task.py): a distribution; its mode is the reversal; greedy's first letters are
    the argmax of the first letter's marginal; sampling follows it; C_cov = E[a^-K]."""
    A, levels = 4, (0.3, 0.7)
    answers = ["".join(t) for t in itertools.product(task.letters(A), repeat=4)]
    rng = np.random.default_rng(0)
    for prompt in ["abcd", "bdca"]:
        p = np.exp([task.log_prob(prompt, y, A, levels) for y in answers])
        assert p.sum() == pytest.approx(1.0)
        assert answers[int(p.argmax())] == task.sequence_mode(prompt, A, levels) == prompt[::-1]
        assert p.max() == pytest.approx(task.reliability(prompt, levels) ** 2)
        first = {c: p[[y[0] == c for y in answers]].sum() for c in task.letters(A)}
        assert max(first, key=first.get) == task.greedy_first_letters(prompt, A, levels)[0]
        draws = [task.noisy_answer(rng, prompt, A, levels) for _ in range(20000)]
        freq = np.array([draws.count(y) for y in answers]) / len(draws)
        np.testing.assert_allclose(freq, p, atol=0.01)
    assert task.greedy_first_letters("abcd", A, levels) != "db"  # a = 0.3: greedy writes the decoy letters
    assert task.greedy_first_letters("bdca", A, levels) == "ad"  # a = 0.7: greedy is right
    assert task.coverage(["abcd", "bdca"], levels, 2) == pytest.approx((0.3 ** -2 + 0.7 ** -2) / 2)
    entropies = []  # per letter, one prompt of each level
    for prompt in ["abcd", "bdca"]:
        p = np.exp([task.log_prob(prompt, y, A, levels) for y in answers])
        entropies.append(-(p[p > 0] * np.log(p[p > 0])).sum() / 4)
    assert task.entropy_per_letter(A, levels) == pytest.approx(np.mean(entropies))
    with pytest.raises(ValueError, match="decoy"):
        task.sequence_mode("abcd", A, (0.1,))


def test_sampling_matches_the_chain_and_best_of_n_matches_its_formula():
    logp = _random_chain(7, X=1, L=3, V=2)
    lp, ys = _brute(logp)
    y = tb.sample(logp, 40000, np.random.default_rng(1))[0]
    freq = np.array([(y == s).all(1).mean() for s in ys])
    np.testing.assert_allclose(freq, np.exp(lp[0]), atol=0.01)
    y_star = tb.mode(logp)[0]
    copies = np.repeat(logp, 3000, axis=0)  # 3000 independent best-of-3 draws at once
    wins = np.mean((tb.best_of_n(copies, 3, np.random.default_rng(2)) == y_star).all(1))
    assert wins == pytest.approx(tb.bon_accuracy(logp, 3), abs=0.03)


def test_absorbing_decoys_make_later_pairs_reachable_only_through_correct_earlier_ones():
    """With absorbing decoys a sequence whose first pair is a decoy never contains a correct token afterwards;
    in the compositional chain (the same y*, the same C_cov) the second pair is right with probability a whatever
    the first pair was."""
    K, V, levels = 3, 8, (0.3, 0.7)
    h = V // 2
    comp, y_star, a = tb.make_pair_chain(np.random.default_rng(5), 4, K, V, levels)
    absorb, y2, _ = tb.make_pair_chain(np.random.default_rng(5), 4, K, V, levels, absorbing=True)
    np.testing.assert_array_equal(y_star, y2)
    assert tb.coverage(absorb) == pytest.approx(tb.coverage(comp))
    for logp, later_right in [(absorb, 0.0), (comp, None)]:
        y = tb.sample(logp, 4000, np.random.default_rng(0))  # (X, n, L)
        first_decoy = y[:, :, 0] >= h
        second_right = (y[:, :, 2:4] == y_star[:, None, 2:4]).all(-1)
        for x in range(len(a)):
            share = second_right[x][first_decoy[x]].mean()
            if later_right is None:
                assert share == pytest.approx(a[x], abs=0.05)
            else:
                assert share == later_right and (y[x][first_decoy[x]][:, 1:] >= h).all()
    with pytest.raises(ValueError, match="not both"):
        tb.make_pair_chain(np.random.default_rng(0), 2, 2, V, levels, atomic=True, absorbing=True)


def test_sft_fits_the_winner_exactly():
    base = _random_chain(8, X=6)
    winner = tb.best_of_n(base, 5, np.random.default_rng(0))
    np.testing.assert_allclose(tb.prob_of(tb.sft_sharpen(base, winner), winner), 1.0)


def test_required_budget_and_slope_read_the_whole_curve():
    assert tb.required_budget([4, 8, 16], [0.2, 0.9, 0.95], 0.8) == 8
    # a curve that reaches the target and falls below it again needs the budget after its last fall
    assert tb.required_budget([4, 8, 16, 32], [0.2, 0.9, 0.5, 0.85], 0.8) == 32
    assert tb.required_budget([4, 8, 16], [0.2, 0.9, 0.5], 0.8) == math.inf  # collapsed at the largest budget
    assert tb.required_budget([16, 4, 8], [0.9, 0.9, 0.5], 0.8) == 16  # order of the grid does not matter
    assert tb.required_budget([4, 8], [0.2, 0.5], 0.8) == math.inf
    cov = np.array([2.0, 8.0, 32.0])
    slopes = verdicts.budget_slopes(np.array([[4.0, 16.0, 64.0], [64.0, 64.0, 64.0], [4.0, 16.0, np.inf]]), cov, cap=128)
    np.testing.assert_allclose(slopes[:2], [1.0, 0.0], atol=1e-12)
    true = verdicts.budget_slopes(np.array([[4.0, 16.0, 256.0]]), cov, cap=128)[0]
    assert 0 < slopes[2] < true  # a never-reached budget counts as the cap: growth is understated, not invented


def test_best_of_n_slope_is_the_accuracy_gained_per_doubling_of_n():
    sizes = [1, 2, 4, 8]
    rows = [{"level": "lm", "variant": "v", "method": "best_of_n", "budget": n, "seed": s,
             "accuracy": 0.1 + (0.05 + 0.01 * s) * np.log2(n)} for n in sizes for s in range(3)]
    np.testing.assert_allclose(verdicts.bon_slopes(stages._rows(rows), "lm", "v", "best_of_n", sizes),
                               [0.05, 0.06, 0.07])


def test_policy_gradient_is_unbiased():
    """The REINFORCE estimate (reward-to-go, leave-one-out baseline) against central finite differences."""
    beta = 0.5
    base = _random_chain(9, X=1, L=2, V=2)
    logits = tb.normalise(base + np.random.default_rng(0).normal(0, 0.5, base.shape))

    def objective(theta):
        q = tb.normalise(theta)
        return float(tb.expected_reward(q, base)[0] - beta * tb.kl(q, base)[0])

    exact = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape):
        e = np.zeros_like(logits)
        e[idx] = 1e-6
        exact[idx] = (objective(logits + e) - objective(logits - e)) / 2e-6
    y = tb.sample(tb.normalise(logits), 400000, np.random.default_rng(1))
    estimate = tb.policy_gradient(logits, base, y, beta)
    np.testing.assert_allclose(estimate, exact, atol=0.01)


def test_rl_sharpening_approaches_the_optimum():
    beta = 0.5
    base = _random_chain(10, X=2, L=3, V=3)
    star = tb.tilt(base, tb.kl_optimum(beta))
    kept, trace = tb.rl_sharpen(base, [1600, 4800], beta=beta, samples_per_step=16, lr=0.05,
                                rng=np.random.default_rng(0), logp_star=star, record_every=10)
    assert trace[0][1] > 0.3 and trace[-1][1] < 0.01
    assert tb.kl(kept[4800], star).mean() == pytest.approx(trace[-1][1])
    assert tb.kl(kept[1600], star).mean() > trace[-1][1]


def test_offline_rl_draws_only_from_a_fixed_pool_of_base_samples(monkeypatch):
    """explore=False: tabular RL samples pi_base once (the pool), never the current policy, and the step that brings
    the budget to m trains on answers from the pool's first m samples only; with decay the step size falls linearly
    to 0 over the run."""
    base = _random_chain(3, X=2, L=3, V=3)
    seen, lrs, used = [], [], []
    real_sample, real_step, real_pg = tb.sample, tb.Adam.step, tb.Reachable.policy_gradient
    real_policy_sample = tb.Reachable.sample
    monkeypatch.setattr(tb, "sample", lambda logp, n, rng: seen.append((logp is base, n)) or real_sample(logp, n, rng))
    # the policy samples through Reachable.sample (its table on the states pi_base reaches)
    monkeypatch.setattr(tb.Reachable, "sample", lambda self, logp, n, rng: seen.append((False, n)) or
                        real_policy_sample(self, logp, n, rng))
    monkeypatch.setattr(tb.Adam, "step", lambda self, theta, grad, lr=None: lrs.append(lr) or
                        real_step(self, theta, grad, lr))
    monkeypatch.setattr(tb.Reachable, "policy_gradient", lambda self, logp, b, y, beta: used.append(y) or
                        real_pg(self, logp, b, y, beta))
    kept, _ = tb.rl_sharpen(base, [8, 16], beta=0.5, samples_per_step=4, lr=0.1, rng=np.random.default_rng(0),
                            explore=False, decay=True)
    assert seen == [(True, 16)] and set(kept) == {8, 16}  # one pool of 16 base samples per prompt, nothing else
    assert lrs == pytest.approx([0.1, 0.075, 0.05, 0.025])
    pool = real_sample(base, 16, np.random.default_rng(0))  # the same draw: the pool
    for step, y in enumerate(used):
        for x in range(2):
            allowed = {tuple(r) for r in pool[x, :4 * (step + 1)]}
            assert {tuple(r) for r in y[x]} <= allowed
    seen.clear()
    used.clear()
    tb.rl_sharpen(base, [8], beta=0.5, samples_per_step=4, lr=0.1, rng=np.random.default_rng(0))
    assert seen == [(False, 4), (False, 4)]  # online: the current policy samples (at the first step a copy of pi_base)


def _small_cfg():
    cfg = yaml.safe_load((Path(__file__).parents[2] / "config" / "config.yaml").read_text())["sharpening"]
    return {**cfg, "task": {**cfg["task"], "pretrain_examples": 3000, "train_prompts": 100, "test_prompts": 100,
                            "val_prompts": 50}}


def test_held_out_prompts_never_reach_pretraining_or_training(tmp_path):
    """prepare() draws held-out and training prompts first and keeps them out of the corpus: checked here
    independently of its own check, and check_held_out must catch a leak."""
    cfg = _small_cfg()
    stages.prepare(cfg=cfg, corpus=tmp_path / "corpus.parquet", prompts=tmp_path / "prompts.parquet")
    p = parse(cfg)
    corpus = stages.read_corpus(tmp_path / "corpus.parquet", p)
    prompts = stages.read_prompts(tmp_path / "prompts.parquet", p)
    test, train, val = (prompts[prompts.split == s] for s in ("test", "train", "val"))
    assert len(test) == len(train) == 200 and len(val) == 100 and prompts.prompt.is_unique
    assert not set(test.prompt) & (set(corpus.prompt) | set(train.prompt) | set(val.prompt))
    assert not (set(train.prompt) | set(val.prompt)) & set(corpus.prompt)
    assert (corpus.prompt.str.len() == 4).sum() > 300  # the corpus does hold prompts of the held-out length
    leak = pd.concat([corpus, pd.DataFrame({"prompt": [test.prompt.iloc[0]], "target": [test.answer.iloc[0]]})])
    with pytest.raises(ValueError, match="test_in_corpus"):
        stages.check_held_out(leak, prompts)


def test_loaders_name_the_file_and_row(tmp_path):
    p = parse(_small_cfg())
    pd.DataFrame({"prompt": ["abcd", "abc"], "target": ["dcba", "cba"]}).to_parquet(tmp_path / "c.parquet")
    with pytest.raises(ValueError, match=r"c.parquet, row 1, column prompt"):
        stages.read_corpus(tmp_path / "c.parquet", p)
    pd.DataFrame({"variant": ["high_coverage"], "split": ["test"], "prompt": ["abcd"], "answer": ["abdc"]}).to_parquet(
        tmp_path / "p.parquet")
    with pytest.raises(ValueError, match=r"p.parquet, row 0: answer is not the reversed prompt"):
        stages.read_prompts(tmp_path / "p.parquet", p)


# ---- the language-model level ------------------------------------------------------------------------------
def test_best_of_n_pool_estimator_is_the_mean_over_all_subsets():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(3, 6))
    values = rng.random((3, 6)) < 0.4
    got = lm.best_of_n_from_pool(rewards, values, range(1, 7))
    for n in range(1, 7):
        brute = np.mean([[values[b, list(s)][rewards[b, list(s)].argmax()] for s in itertools.combinations(range(6), n)]
                         for b in range(3)])
        assert got[n] == pytest.approx(brute)


def _tiny_gpt(seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=7, block_size=12, n_layer=2, n_head=2, n_embd=16)).eval()


def test_transformer_is_causal_and_its_cache_changes_nothing():
    model = _tiny_gpt()
    seq = torch.randint(0, 7, (3, 12))
    with torch.no_grad():
        full = model(seq)
        other = seq.clone()
        other[:, 8:] = (other[:, 8:] + 1) % 7
        torch.testing.assert_close(model(other)[:, :8], full[:, :8])  # the future does not leak
        caches = model.new_caches()
        parts = [model(seq[:, :5], caches), model(seq[:, 5:6], caches), model(seq[:, 6:], caches)]
        torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-5, atol=1e-5)
        greedy = generate(model, seq[:, :4], 6, greedy=True)
        naive = seq[:, :4]
        for _ in range(6):
            naive = torch.cat([naive, model(naive)[:, -1].argmax(-1, keepdim=True)], 1)
        torch.testing.assert_close(greedy, naive)
    lp = token_logprobs(model, seq)
    torch.testing.assert_close(lp, torch.log_softmax(full[:, :-1], -1).gather(-1, seq[:, 1:, None])[..., 0])


def test_sampling_follows_the_model_and_sft_raises_the_targets_likelihood():
    model = _tiny_gpt(1)
    prompts = torch.randint(0, 7, (4, 3))
    gen = torch.Generator().manual_seed(0)
    y = lm.sample_answers(model, prompts, 1, 4000, gen)[:, :, 0]  # (4, 4000) one-token answers
    with torch.no_grad():
        p = torch.softmax(model(prompts)[:, -1], -1)
    freq = torch.stack([torch.bincount(row, minlength=7) / 4000.0 for row in y])
    torch.testing.assert_close(freq, p, atol=0.03, rtol=0)
    targets = torch.randint(0, 7, (4, 2))
    before = lm.self_reward(model, prompts, targets)
    after = lm.self_reward(lm.sft_sharpen(model, prompts, targets, epochs=30, batch=4, lr=1e-2, generator=gen),
                           prompts, targets)
    assert (after > before).all() and after.exp().min() > 0.5


def test_rl_sharpening_reports_every_budget_and_raises_the_self_reward():
    model = _tiny_gpt(2)
    prompts = torch.randint(0, 7, (8, 3))
    gen = torch.Generator().manual_seed(0)
    seen = []
    lm.rl_sharpen(model, prompts, 2, [4, 16], beta=0.1, samples_per_prompt=4, prompts_per_step=8, lr=1e-2,
                  generator=gen, on_budget=lambda b, policy: seen.append(
                      (b, float(lm.evaluate(policy, model, prompts, torch.zeros(8, 2, dtype=torch.long), samples=16,
                                            generator=torch.Generator().manual_seed(1))["log_pi_base"]))))
    base = lm.evaluate(model, model, prompts, torch.zeros(8, 2, dtype=torch.long), samples=16,
                       generator=torch.Generator().manual_seed(1))["log_pi_base"]
    assert [b for b, _ in seen] == [4, 16]
    assert seen[-1][1] > base  # the sharpened policy's outputs are likelier under pi_base


def test_offline_lm_rl_trains_on_the_given_pool_only(monkeypatch):
    """With a pool (SFT's samples of pi_base), RL never samples: pass j draws from the pool's first (j + 1) k
    samples of each prompt only; online, the policy samples."""
    model = _tiny_gpt(2)
    prompts = torch.arange(8)[:, None].repeat(1, 3) % 7  # distinct prompts, to find a minibatch's rows
    prompts[7, 0] = 1
    pool = lm.sample_answers(model, prompts, 2, 8, torch.Generator().manual_seed(3))  # (8, 8, 2)
    drawn_by, used = [], []
    real, real_loss = lm.sample_answers, lm.rl_loss
    monkeypatch.setattr(lm, "sample_answers", lambda m, *a, **k: drawn_by.append(m is model) or real(m, *a, **k))
    monkeypatch.setattr(lm, "rl_loss", lambda pol, b, x, y, beta, **kw: used.append((x, y)) or real_loss(pol, b, x, y,
                                                                                                         beta, **kw))
    seen = []
    lm.rl_sharpen(model, prompts, 2, [4, 8], beta=0.1, samples_per_prompt=4, prompts_per_step=4, lr=1e-2,
                  generator=torch.Generator().manual_seed(0), on_budget=lambda b, policy: seen.append(b), pool=pool)
    assert seen == [4, 8] and drawn_by == []  # the policy never samples
    assert len(used) == 4
    for j, (x, y) in enumerate(used):  # steps 0, 1: from samples 0-3 of their prompts; steps 2, 3: from 0-7
        rows = [int(np.flatnonzero((prompts == r).all(1))[0]) for r in x]
        for r, answers in zip(rows, y):
            allowed = {tuple(a.tolist()) for a in pool[r, :4 * (j // 2 + 1)]}
            assert {tuple(a.tolist()) for a in answers} <= allowed
    with pytest.raises(ValueError, match="pool"):
        lm.rl_sharpen(model, prompts, 2, [16], beta=0.1, samples_per_prompt=4, prompts_per_step=4, lr=1e-2,
                      generator=torch.Generator().manual_seed(0), on_budget=lambda b, policy: None, pool=pool)
    drawn_by.clear()
    lm.rl_sharpen(model, prompts, 2, [4], beta=0.1, samples_per_prompt=4, prompts_per_step=4, lr=1e-2,
                  generator=torch.Generator().manual_seed(0), on_budget=lambda b, policy: None)
    assert drawn_by == [False, False]  # online: the policy (a copy of the base model) samples


def test_pool_draw_is_the_policy_renormalised_on_the_pool_without_replacement():
    """Importance resampling from a pool of base samples, without replacement (review sharpening_r13): only pool
    entries are drawn, never one twice for a prompt, and the ordered pair of the first two draws follows successive
    sampling's closed form, P(i then j) = w_i w_j / (1 - w_i) with w = softmax(log pi - log pi_base) over the pool
    (uniform over the entries when pi = pi_base)."""
    base, policy = _tiny_gpt(4), _tiny_gpt(5)
    prompts = torch.randint(0, 7, (2, 3), generator=torch.Generator().manual_seed(0))
    support = lm.sample_answers(base, prompts, 1, 3, torch.Generator().manual_seed(0))  # (2, 3, 1)
    support[:, :, 0] = torch.tensor([[1, 2, 3], [4, 5, 6]])  # distinct one-token answers
    logb = lm.self_reward(base, prompts.repeat_interleave(3, 0), support.view(6, 1)).view(2, 3)
    logp = lm.self_reward(policy, prompts.repeat_interleave(3, 0), support.view(6, 1)).view(2, 3)
    reps = 20000  # each prompt repeated: one draw of 2 per copy
    # pool log pi_base lowered on the later entries: weights far from uniform (about 0.06 / 0.17 / 0.77), so a
    # miscalibrated weight (review sharpening_r14's (pi / pi_base)^1.1 mutant) moves the pair law past the tolerance
    skewed = logb - torch.tensor([[0.0, 1.0, 2.5]], dtype=logb.dtype)
    for model, lb, w in [(base, logb, torch.full((2, 3), 1 / 3)), (policy, skewed, torch.softmax(logp - skewed, 1))]:
        y, j = lm.pool_draw(model, prompts.repeat(reps, 1), support.repeat(reps, 1, 1), lb.repeat(reps, 1), 2,
                            torch.Generator().manual_seed(1), index=True)
        assert (j[:, 0] != j[:, 1]).all()  # never the same pool entry twice
        assert torch.equal(y[:, :, 0], support.repeat(reps, 1, 1)[torch.arange(2 * reps)[:, None], j, 0])
        j = j.view(reps, 2, 2)  # (copy, prompt, draw)
        for b in range(2):
            freq = torch.zeros(3, 3)
            freq.index_put_((j[:, b, 0], j[:, b, 1]), torch.ones(reps), accumulate=True)
            expect = w[b][:, None] * w[b][None, :] / (1 - w[b][:, None])
            expect.fill_diagonal_(0.0)
            torch.testing.assert_close(freq / reps, expect, atol=0.012, rtol=0)
    with pytest.raises(ValueError, match="distinct"):
        lm.pool_draw(base, prompts, support, logb, 4, torch.Generator().manual_seed(1))


def test_offline_rl_reads_the_plain_path_values_and_never_repeats_a_sample_in_a_pass(monkeypatch):
    """The offline arm's fast path (review sharpening_r13, improvement 2): at every step, the per-token log pi_base
    that rl_sharpen hands rl_loss equals answer_logprobs_shared(base, x, y) of the answers it hands it, and the
    pool's log pi_base that weights pool_draw equals self_reward_shared(base, x, pool) (both recomputed here the
    plain way, by teacher forcing, within 1e-4), whether the pool's per-token values are given (read off the
    sampling pass) or computed. And the draw never repeats a pool sample of a prompt within a pass, takes only the
    pool's first (j + 1) k samples in pass j, and takes exactly the first k in the first pass."""
    base = _tiny_gpt(6)
    prompts = torch.randint(0, 7, (8, 3), generator=torch.Generator().manual_seed(2))
    pool, tok = lm.sample_answers(base, prompts, 3, 12, torch.Generator().manual_seed(3), logprobs=True)
    real_loss, real_draw = lm.rl_loss, lm.pool_draw
    for given in (tok, None):
        losses, draws = [], []

        def loss_spy(policy, b, x, y, beta, base_logp=None, **kw):
            assert b is base and base_logp is not None
            with torch.no_grad():
                torch.testing.assert_close(base_logp, lm.answer_logprobs_shared(base, x, y), atol=1e-4, rtol=0)
            losses.append(len(x))
            return real_loss(policy, b, x, y, beta, base_logp=base_logp, **kw)

        def draw_spy(policy, x, support, support_logb, k, generator, index=False):
            torch.testing.assert_close(support_logb, lm.self_reward_shared(base, x, support), atol=1e-4, rtol=0)
            y, j = real_draw(policy, x, support, support_logb, k, generator, index=True)
            draws.append((support.shape[1], j))
            return (y, j) if index else y

        monkeypatch.setattr(lm, "rl_loss", loss_spy)
        monkeypatch.setattr(lm, "pool_draw", draw_spy)
        lm.rl_sharpen(base, prompts, 3, [4, 12], beta=0.1, samples_per_prompt=4, prompts_per_step=3, lr=1e-2,
                      generator=torch.Generator().manual_seed(0), pool=pool, pool_logp=given,
                      on_budget=lambda b, policy: None)
        monkeypatch.undo()
        assert len(losses) == len(draws) == 9 and sum(losses) == 3 * 8  # 3 passes of 3 minibatches (3, 3, 2)
        for step, (S, j) in enumerate(draws):
            assert S == 4 * (step // 3 + 1)  # pass p draws from the pool's first (p + 1) k samples
            assert ((0 <= j) & (j < S)).all()
            assert all(len(set(row.tolist())) == 4 for row in j)  # k distinct pool samples per prompt
            if step < 3:  # first pass: the pool's first k samples, each once
                assert all(sorted(row.tolist()) == [0, 1, 2, 3] for row in j)


# ---- task and parameters -----------------------------------------------------------------------------------
def test_task_encoding():
    prompts = task.distinct_prompts(np.random.default_rng(0), 5, 4, 4)
    assert len(set(prompts)) == 5
    enc = task.encode_prompts(prompts, 6)
    assert [task.decode(r).lstrip("_") for r in enc] == [p + "|" for p in prompts]
    with pytest.raises(ValueError, match="only 16 exist"):
        task.distinct_prompts(np.random.default_rng(0), 17, 2, 4)


def test_default_config_parses_and_bad_values_fail():
    cfg = yaml.safe_load((Path(__file__).parents[2] / "config" / "config.yaml").read_text())["sharpening"]
    p = parse(cfg)
    assert p.variants == ("high_coverage", "low_coverage") and math.isclose(p.beta, 0.1)
    with pytest.raises(ValueError, match="bon_sizes"):
        parse({**cfg, "sharpen": {**cfg["sharpen"], "budgets": [4, 128]}})
    with pytest.raises(ValueError, match="multiple"):
        parse({**cfg, "tabular": {**cfg["tabular"], "budgets": [6]}})
    with pytest.raises(ValueError, match="levels"):  # no level below 1/2: greedy would find the mode
        parse({**cfg, "task": {**cfg["task"], "levels": [0.6, 0.7]}})
    assert p.tabular.lr_sensitivity == (0.03, 0.3) and p.claims.budget_fit_min_pairs == 3
    with pytest.raises(ValueError, match="budget_fit_min_pairs"):  # (c) needs two K to fit a slope over
        parse({**cfg, "claims": {**cfg["claims"], "budget_fit_min_pairs": 5}})
    with pytest.raises(ValueError, match="lr_sensitivity"):
        parse({**cfg, "tabular": {**cfg["tabular"], "lr_sensitivity": [0.1, 0.3]}})


def _claim_frame(sft_req, rl_req, atomic_rl_req, bon_gain=0.1, seeds=3, rl_lead_low=0.2, rl_lead_high=0.0,
                 offline_req=None, offline_lead_low=0.0, greedy=0.3, rl_collapses=False,
                 compositional_rl_req=None, steps=None, plateau=None, premise=None):
    """A results table as evaluate() writes it. Tabular: budgets 4 .. 256, K = 1 .. 4 (C_cov 2 .. 128); each
    method's curve jumps to accuracy 1 at its required budget (absorbing, the deciding sweep: SFT at `sft_req`, RL
    at `rl_req`, offline RL at `offline_req`, by default SFT's; compositional the same unless
    `compositional_rl_req`; atomic: SFT and both RLs at `atomic_rl_req`), the optimum at 0.95; `rl_collapses`:
    RL on the absorbing sweep falls to 0 at the largest budget. LM: best-of-N rising by `bon_gain` per doubling, its
    shuffled control flat at sampling, greedy decoding at `greedy`, SFT recovering 90% of the gain, RL
    `rl_lead_low` / `rl_lead_high` above SFT at low / high coverage, offline RL `offline_lead_low` above SFT at low
    coverage (it runs there only). `steps`: {RL step size of tabular.lr_sensitivity: (online RL's, offline RL's
    required budgets)} on the absorbing sweep; by default (0.03 and 0.3) the same as at the configured step size. A
    required budget list may instead be a list of per-seed lists. `plateau`: {absorbing method: its accuracy at the
    largest budget} (a learner that never reaches the optimum; above the target, so its required budget stays).
    `premise`: {absorbing RL method: factor}: the method rerun at 16 samples per step (claim (c)'s sample-limited
    premise) needs `factor` x its budget (default 1 for every RL method: sample-limited)."""
    budgets, rows = [4, 8, 16, 32, 64, 128, 256], []
    offline_req = sft_req if offline_req is None else offline_req
    comp_rl = rl_req if compositional_rl_req is None else compositional_rl_req
    steps = {0.03: (rl_req, offline_req), 0.3: (rl_req, offline_req)} if steps is None else steps
    absorbing = {"sft": sft_req, "rl": rl_req, "rl_offline": offline_req}
    for lr, (online, offline) in steps.items():
        absorbing |= {rl_step_method(lr): online, tb.offline_step_method(lr): offline}

    def rerun(req, factor):  # a method's budgets at 16 samples per step: `factor` x, one factor or one per seed
        per_seed = isinstance(req[0], (list, tuple)) or isinstance(factor, (list, tuple))
        if not per_seed:
            return [x * factor for x in req]
        return [[x * (factor[s] if isinstance(factor, (list, tuple)) else factor)
                 for x in (req[s] if isinstance(req[0], (list, tuple)) else req)] for s in range(seeds)]

    absorbing |= {premise_method(method, 16): rerun(req, (premise or {}).get(method, 1))
                  for method, req in absorbing.items() if method != "sft"}
    for structure, reqs in [("absorbing", absorbing),
                            ("compositional", {"sft": sft_req, "rl": comp_rl}),
                            ("atomic", {"sft": sft_req, "rl": atomic_rl_req})]:
        for j, K in enumerate((1, 2, 3, 4)):
            for seed in range(seeds):
                common = {"level": "tabular", "variant": structure, "pairs": K, "seed": seed,
                          "coverage": 2.0 * 4 ** j}
                rows += [{**common, "method": "sample", "budget": 1, "accuracy": 0.1},
                         {**common, "method": "optimum", "budget": 0, "accuracy": 0.95}]
                for method, req in reqs.items():
                    fall = rl_collapses and structure == "absorbing" and method == "rl"
                    need = (req[seed] if isinstance(req[0], (list, tuple)) else req)[j]
                    top = (plateau or {}).get(method) if structure == "absorbing" else None
                    rows += [{**common, "method": method, "budget": m,
                              "accuracy": top if top is not None and m == budgets[-1] else
                              float(m >= need * (1 + seed % 2) and not (fall and m == budgets[-1])) + 0.001 * seed}
                             for m in budgets]
    for variant in ("high_coverage", "low_coverage"):
        for seed in range(seeds):
            common = {"level": "lm", "variant": variant, "seed": seed, "coverage": 10.0}
            rows += [{**common, "method": "sample", "budget": 1, "accuracy": 0.1},
                     {**common, "method": "greedy", "budget": 1, "accuracy": greedy + 0.002 * seed},
                     {**common, "method": "sft_unselected", "budget": 1, "accuracy": 0.1 + 0.001 * seed}]
            for i, n in enumerate((1, 2, 4, 8)):
                bon = 0.1 + bon_gain * i + 0.002 * seed * i
                rows += [{**common, "method": "best_of_n", "budget": n, "accuracy": bon},
                         {**common, "method": "best_of_n_shuffled", "budget": n,
                          "accuracy": 0.1 + 0.003 * ((i + seed) % 2)}]
                if n in (4, 8):
                    sft = 0.1 + 0.9 * (bon - 0.1)
                    lead = rl_lead_low if variant == "low_coverage" else rl_lead_high
                    off = offline_lead_low
                    rows += [{**common, "method": "sft", "budget": n, "accuracy": sft},
                             {**common, "method": "rl", "budget": n, "accuracy": sft + lead + 0.003 * seed}]
                    if variant == "low_coverage":  # offline RL runs on the low-coverage variant only
                        rows.append({**common, "method": "rl_offline", "budget": n,
                                     "accuracy": sft + off + 0.004 * ((seed + n) % 3) - 0.004})
    conv = pd.DataFrame({"seed": np.repeat([0, 1, 2], 4), "samples_per_prompt": [0, 400, 600, 800] * 3,
                         "kl_to_optimum": [2.0, 0.0105, 0.0102, 0.01, 2.1, 0.0125, 0.012, 0.012, 1.9, 0.0112, 0.011,
                                           0.011]})
    return stages._rows(rows), conv


def _formulas(beta, fit_to=1.0, seeds=3):
    """formula_distances of policies at pi*_{fit_to * beta} on three tabular base models (K = 2)."""
    rows = []
    for seed in range(seeds):
        base, y_star, _ = tb.make_pair_chain(np.random.default_rng([0, seed, 2]), 8, 2, 8, (0.3, 0.7))
        policy = tb.tilt(base, tb.kl_optimum(fit_to * beta))
        rows += [{"seed": seed, **r} for r in tb.formula_distances(policy, base, y_star, beta)]
    return pd.DataFrame(rows)


def _sharpening_params():
    return parse({"bon_sizes": [1, 2, 4, 8], "sharpen": {"budgets": [4, 8]},
                  "tabular": {"pairs": [1, 2, 3, 4], "budgets": [4, 8, 16, 32, 64, 128, 256], "seeds": 3,
                              "lr_sensitivity": [0.03, 0.3]},
                  "pretrain": {"seeds": 3}, "claims": {"budget_fit_min_pairs": 2}})


FITTED = {0: 0.01, 1: 0.012, 2: 0.008}  # KL(law || model) per letter of three base models, under the 0.02 gate
# what the corpus law predicts on the held-out prompts (the evaluate stage's summary), per LM variant
LAW = {v: {"law_sampling": 0.1, "law_greedy": 0.3, "law_best_of_n": {str(n): 0.1 + 0.1 * i for i, n in
                                                                     enumerate((1, 2, 4, 8))}}
       for v in ("high_coverage", "low_coverage")}


def _decide(*frame, formulas=None, gaps=FITTED):
    """(claims, checks) by id."""
    from papers.sharpening.verdicts import sharpening_claims

    p = _sharpening_params()
    formulas = _formulas(p.beta) if formulas is None else formulas
    claims, checks = sharpening_claims(p, *frame, formulas, gaps, LAW)
    return {c.id: c for c in claims}, {c.id: c for c in checks}


def _claims(*frame, **kw):
    return _decide(*frame, **kw)[0]


def test_claims_decide_on_replicates_and_the_controls_can_fail(tmp_path):
    from papers.common.claims import write_claims
    from papers.sharpening.verdicts import SCOPE

    grows, flat = [4, 16, 64, 128], [16, 16, 16, 16]
    claims, checks = _decide(*_claim_frame(grows, flat, atomic_rl_req=grows))
    assert sorted(claims) == ["a", "b", "c", "e"] and sorted(checks) == ["a_law", "d_optimum"]
    for cid in "bce":
        assert claims[cid].verdict == "holds", (cid, claims[cid].note)
        assert claims[cid].control.verdict == "does not hold", cid
        assert claims[cid].premise and claims[cid].premise_met, cid
    assert [claims[c].control.kind for c in "bce"] == ["ablation", "ablation", "null"]
    # (a) without a pretrained LM is not measured (the task builds it in): the check a_law carries the curve
    assert claims["a"].verdict == "not measured" and "pretrained" in claims["a"].note
    assert checks["a_law"].passed and checks["a_law"].measured["high_coverage.law.best_of_8"] == pytest.approx(0.4)
    assert checks["d_optimum"].passed
    write_claims(list(claims.values()), tmp_path / "claims.json", paper="sharpening", scale="smoke", scope=SCOPE,
                 checks=list(checks.values()))
    # RL's budget grows with coverage like SFT's (at every step size): (c) fails on its RL part
    both_grow = _claims(*_claim_frame(grows, grows, atomic_rl_req=grows))
    assert both_grow["c"].verdict == "does not hold" and "SFT - online RL" in both_grow["c"].note
    # (c) is decided on the absorbing sweep: RL growing on the compositional one alone changes nothing
    assert _claims(*_claim_frame(grows, flat, atomic_rl_req=grows, compositional_rl_req=grows))["c"].verdict == "holds"
    # RL reaches the target early but falls below it at the largest budget: it never stays there, so its budget is
    # censored at the cap at every K (a flat line at the cap): the first crossing would have called it flat at 16
    m_req, _ = verdicts.required_budgets(_claim_frame(grows, flat, grows, rl_collapses=True)[0],
                                         _sharpening_params(), "absorbing", "rl")
    assert np.isinf(m_req).all()
    # best-of-N flat in N: the check a_law fails
    assert not _decide(*_claim_frame(grows, flat, grows, bon_gain=0.0))[1]["a_law"].passed
    # (e): RL ahead of SFT and of offline RL at low coverage; greedy decoding (the null) does not pass
    assert claims["e"].control.verdict == "does not hold" and "leave-one-out" in claims["e"].note
    # no lead of RL over SFT at low coverage: (e) fails
    assert _claims(*_claim_frame(grows, flat, grows, rl_lead_low=-0.1))["e"].verdict == "does not hold"
    # RL's lead as large at high coverage as at low does not matter any more: the interaction is reported only
    assert _claims(*_claim_frame(grows, flat, grows, rl_lead_high=0.2))["e"].verdict == "holds"
    # offline RL on SFT's own samples as good as RL: the lead is not owed to exploration, (e) does not hold
    same = _claims(*_claim_frame(grows, flat, grows, offline_lead_low=0.2))["e"]
    assert same.verdict != "holds" and "offline RL" in same.note
    # greedy decoding ahead of SFT and offline RL at every budget: the null passes, so (e) is inconclusive
    vetoed_e = _claims(*_claim_frame(grows, flat, grows, greedy=0.95))["e"]
    assert vetoed_e.control.verdict == "holds" and vetoed_e.verdict == "inconclusive"
    # offline RL collapses below base sampling: RL's lead over it would be trivial, so (e) is inconclusive
    collapsed = _claims(*_claim_frame(grows, flat, grows, offline_lead_low=-0.5))["e"]
    assert not collapsed.premise_met and collapsed.verdict == "inconclusive" and "learns" in collapsed.note


GROWS, FLAT = [4, 16, 64, 128], [16, 16, 16, 16]  # required budgets at K = 1 .. 4 (C_cov 2, 8, 32, 128)


def test_c_holds_at_every_step_size_and_reports_each_slope():
    """(c) holds where at every RL step size SFT's slope exceeds online RL's by more than budget_slope and offline
    RL's exceeds online RL's; every step size's online and offline slopes are in `measured`, each verdict named."""
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS))["c"]
    assert c.verdict == "holds" and c.premise_met, c.note
    # slopes over K >= 2 (C_cov 8, 32, 128): SFT's budgets 16, 64, 128 -> slope 0.75; RL flat -> 0
    assert c.measured["absorbing.sft.slope"] == pytest.approx(0.75)
    for online, offline in [("rl", "rl_offline"), ("rl_lr0.03", "rl_offline_lr0.03"), ("rl_lr0.3", "rl_offline_lr0.3")]:
        assert c.measured[f"absorbing.{online}.slope"] == pytest.approx(0.0)
        assert c.measured[f"absorbing.{offline}.slope"] == pytest.approx(0.75)
    assert [c.measured[f"verdict.lr{lr}"] for lr in ("0.03", "0.1", "0.3")] == ["holds"] * 3
    assert len(c.evidence) == 6 and len(c.control.evidence) == 3  # (i), (ii) and the control at each step size
    # offline RL grows as SFT does: removing exploration gives back the whole lead (share 1); the control (the share
    # the ablation keeps, 0) clearly fails
    assert c.measured["exploration_share.lr0.1"] == pytest.approx(1.0) and c.control.verdict == "does not hold"
    assert "0.1 (configured)" in c.note


def test_c_does_not_hold_where_removing_exploration_does_not_steepen_the_growth():
    """The ablation can fail the claim: offline RL as flat as online RL at every step size fails part (ii)."""
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, offline_req=FLAT))["c"]
    assert c.verdict == "does not hold" and "share of the lead owed to exploration" in c.note
    assert c.measured["exploration_share.lr0.1"] == pytest.approx(0.0)
    assert c.control.verdict == "holds"  # the ablation keeps the whole lead
    assert c.measured["absorbing.rl_offline_lr0.3.slope"] == pytest.approx(0.0)


def test_c_is_inconclusive_where_one_step_size_disagrees():
    """At 0.3 online RL's budget grows like SFT's (the review's lr 0.3), elsewhere flat: the verdict depends on the
    step size, so (c) is inconclusive (a premise), and the note names 0.3."""
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, steps={0.03: (FLAT, GROWS), 0.3: (GROWS, GROWS)}))["c"]
    assert c.verdict == "inconclusive" and not c.premise_met
    assert c.measured["verdict.lr0.3"] == "does not hold" and c.measured["verdict.lr0.1"] == "holds"
    assert "0.3: does not hold" in c.note and "depend on RL's step size" in c.note
    # the ablation passing at one step size only (the review's lr 0.03: offline RL as flat as online there)
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, steps={0.03: (FLAT, FLAT), 0.3: (FLAT, GROWS)}))["c"]
    assert c.verdict == "inconclusive" and c.measured["verdict.lr0.03"] == "does not hold"
    assert "0.03: does not hold" in c.note
    # a step size the run did not compute: not measured there, so the step sizes do not agree
    frame, conv = _claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, steps={0.03: (FLAT, GROWS)})
    c = _claims(frame, conv)["c"]
    assert c.verdict == "inconclusive" and c.measured["verdict.lr0.3"] == "not measured" and "0.3: not run" in c.note


def test_c_does_not_hold_where_exploration_explains_a_minority_of_the_lead():
    """Offline RL steeper than online RL (the former sign test passed) but only a fifth of the way to SFT: the share
    of the lead owed to exploration is 0.25 / 1.25 = 0.2 on every base model, wholly below 0.5, so every step size
    does not hold, and so does (c); the control (the ablation keeps 0.8 of the lead) holds."""
    sft, offline = [4, 8, 64, 256], [16, 16, 16, 32]  # slopes over K >= 2: 1.25 and 0.25
    c = _claims(*_claim_frame(sft, FLAT, atomic_rl_req=sft, offline_req=offline))["c"]
    assert c.measured["absorbing.sft.slope"] == pytest.approx(1.25)
    assert c.measured["absorbing.rl_offline.slope"] == pytest.approx(0.25)
    assert c.measured["exploration_share.lr0.1"] == pytest.approx(0.2)
    assert c.control.verdict == "holds" and c.verdict == "does not hold"
    assert [c.measured[f"verdict.lr{lr}"] for lr in ("0.03", "0.1", "0.3")] == ["does not hold"] * 3


def test_c_is_inconclusive_where_the_share_straddles_one_half():
    """Shares 1/3, 2/3, 1/3 over the three base models (offline RL's slope 0.25, 0.5, 0.25 against SFT's 0.75, online
    RL flat): mean 0.44 with a 95% t interval across 0.5, so each step size reads inconclusive, and so does (c)."""
    offline = [[16, 16, 16, 32], [16, 16, 32, 64], [16, 16, 16, 32]]
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, offline_req=offline,
                              steps={0.03: (FLAT, offline), 0.3: (FLAT, offline)}))["c"]
    share = next(e for e in c.evidence if e.name == "step 0.1: share of the lead owed to exploration")
    assert share.values == pytest.approx((1 / 3, 2 / 3, 1 / 3))
    assert share.interval[0] < 0.5 < share.interval[1] and share.verdict == "inconclusive"
    assert [c.measured[f"verdict.lr{lr}"] for lr in ("0.03", "0.1", "0.3")] == ["inconclusive"] * 3
    assert c.verdict == "inconclusive" and c.premise_met
    # the former sign test (offline - online > 0) held here on every base model: the share is stricter
    assert min(c.measured[f"absorbing.{m}.slope"] for m in ("rl_offline", "rl_offline_lr0.03")) > 0


def test_a_control_that_does_not_clearly_fail_blocks_a_step_sizes_holds():
    """step_verdict: the lead and the share hold; the control decides between holds (it clearly fails) and
    inconclusive (its interval straddles its threshold, or it holds); online RL short of the optimum by more than
    the tolerance: premise not met, whatever the tests say."""
    from papers.common.claims import mean_test

    lead = mean_test([0.9, 1.0, 1.1], threshold=0.5, direction=">")
    share = mean_test([0.8, 0.9, 1.0], threshold=0.5, direction=">")
    failing = mean_test([0.1, 0.2, 0.3], threshold=0.5, direction=">")
    straddling = mean_test([0.2, 0.5, 0.8], threshold=0.5, direction=">")
    holding = mean_test([0.8, 0.9, 1.0], threshold=0.5, direction=">")
    assert (failing.verdict, straddling.verdict, holding.verdict) == ("does not hold", "inconclusive", "holds")
    assert verdicts.step_verdict(lead, share, failing, gap=0.0, tolerance=0.05)[0] == "holds"
    verdict, why = verdicts.step_verdict(lead, share, straddling, gap=0.0, tolerance=0.05)
    assert verdict == "inconclusive" and "not clearly failing" in why
    assert verdicts.step_verdict(lead, share, holding, gap=0.0, tolerance=0.05)[0] == "inconclusive"
    assert verdicts.step_verdict(lead, share, failing, gap=0.06, tolerance=0.05)[0] == verdicts.PREMISE_UNMET
    assert verdicts.step_verdict(lead, share, failing, gap=float("nan"), tolerance=0.05)[0] == verdicts.PREMISE_UNMET
    # the share per base model: (offline - online) / (SFT - online); no lead, no share
    assert verdicts.exploration_share([1.0, 1.0, 0.5], [0.0, 0.2, 0.5], [0.5, 0.4, 0.9]) == pytest.approx(
        [0.5, 0.25, np.nan], nan_ok=True)


def test_c_an_unconverged_step_size_casts_no_vote():
    """Online RL at step 0.3 plateaus at 0.85 at the largest budget against the optimum's 0.95 (more than 0.05
    short): that step size reads 'premise not met' instead of voting. Where the others hold, (c) is inconclusive (a
    collapsed step size cannot confirm it); where the others do not hold, (c) does not hold (it is not needed to
    refute it), even though 0.3's own slopes would have held."""
    plateau = {rl_step_method(0.3): 0.85}
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, steps={0.03: (FLAT, GROWS), 0.3: (GROWS, GROWS)},
                              plateau=plateau))["c"]
    assert c.measured["verdict.lr0.3"] == verdicts.PREMISE_UNMET
    assert c.measured["convergence_gap.lr0.3"] == pytest.approx(0.1)
    assert c.measured["verdict.lr0.03"] == c.measured["verdict.lr0.1"] == "holds"
    assert c.verdict == "inconclusive" and "online RL converged at every step size" in c.note
    assert "plain REINFORCE collapsed" in c.note and len(c.evidence) == 4  # 0.3's parts do not vote
    # the two converged step sizes both fail (exploration gives back none of the lead): (c) does not hold
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, offline_req=FLAT,
                              steps={0.03: (FLAT, FLAT), 0.3: (FLAT, GROWS)}, plateau=plateau))["c"]
    assert c.measured["verdict.lr0.3"] == verdicts.PREMISE_UNMET
    assert c.verdict == "does not hold" and c.premise_met, c.note
    # every step size collapsed: nothing votes, (c) is inconclusive
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, plateau={"rl": 0.85, rl_step_method(0.03): 0.85,
                                                                         rl_step_method(0.3): 0.85}))["c"]
    assert c.verdict == "inconclusive" and not c.premise_met


def test_c_fits_its_slopes_past_rls_optimisation_floor():
    """The slopes are fitted over K >= claims.budget_fit_min_pairs: a floor at K = 1 (RL needing 128 where SFT needs
    4) that flattens the slope over every K is left out; the slope over every K is reported beside it."""
    floor = [128, 128, 128, 128]  # no growth past the floor: slope 0 over K >= 2, and over every K
    rising = [128, 16, 64, 128]  # from K = 2 on it grows as SFT's; the floor at K = 1 flattens the all-K slope
    c = _claims(*_claim_frame(GROWS, floor, atomic_rl_req=GROWS, offline_req=rising,
                              steps={0.03: (floor, rising), 0.3: (floor, rising)}))["c"]
    assert c.measured["absorbing.rl_offline.slope"] == pytest.approx(0.75)
    assert c.measured["absorbing.rl_offline.slope_all_K"] < 0.2
    m_req = np.array([[128.0, 16, 64, 128]])
    cov = [2.0, 8.0, 32.0, 128.0]
    assert verdicts.fit_slopes(m_req, cov, [1, 2, 3, 4], [2, 3, 4], [256])[0] == pytest.approx(0.75)
    assert verdicts.fit_slopes(m_req, cov, [1, 2, 3, 4], [1, 2, 3, 4], [256])[0] < 0.2
    assert c.verdict == "holds", c.note


def test_leave_one_out_counts_the_subsets_that_keep_the_decision():
    robust = verdicts.leave_one_out([1.0, 1.1, 0.9, 1.05, 0.95], 0.5, ">")
    assert robust["subsets"] == 5 and robust["holding"] == 5 and robust["worst_bound"] > 0.5
    # one replicate carries the decision: leaving it out loses it in one subset only
    fragile = verdicts.leave_one_out([0.8, 0.81, 0.79, 0.8, 3.0], 0.7, ">")
    assert fragile["holding"] < fragile["subsets"] or fragile["worst_bound"] < 0.7
    assert verdicts.leave_one_out([1.0, 2.0, 3.0], 0.0, ">")["subsets"] == 0  # too few for a t interval of n - 1
    assert "4 of 4" in verdicts.loo_text("x", [1.0, 1.1, 0.9, 1.0], 0.5, ">")


def test_report_labels_follow_the_config():
    from papers.sharpening.report import labels

    cfg = yaml.safe_load((Path(__file__).parents[2] / "config" / "config.yaml").read_text())["sharpening"]
    k = cfg["task"]["answer_pairs"]
    lab = labels(parse(cfg))
    assert lab["high_coverage"].startswith(f"LM, {k['high_coverage']} pairs")
    assert lab["low_coverage"].startswith(f"LM, {k['low_coverage']} pairs")
    other = labels(parse({**cfg, "task": {**cfg["task"], "answer_pairs": {"high_coverage": 1, "low_coverage": 3}}}))
    assert other["high_coverage"] == "LM, 1 pairs (high coverage)" and "3 pairs" in other["low_coverage"]
    assert set(lab) >= set(stages.STRUCTURES)


def test_convergence_check_fails_on_a_policy_at_a_wrong_formula():
    """Check d_optimum passes for a policy at pi*_beta = pi_base^(1 + 1/beta) and fails for one at a wrong formula:
    pi*_2beta, pi*_beta/2, or the exponent one unit above or below (its resolution)."""
    beta = _sharpening_params().beta
    frame = _claim_frame([4, 16, 64, 128], [16] * 4, [4, 16, 64, 128])
    right = _decide(*frame, formulas=_formulas(beta, fit_to=1.0))[1]["d_optimum"]
    assert right.passed and right.measured["wrong_formula_2beta_fits"] is False
    # the resolution's margin is stated: runs at KL 0.0172 from pi*_beta and 0.0177 from pi_base^(alpha + 1) (the
    # committed run's seed 0) are nearer the optimum by (0.0177 - 0.0172) / 0.0172 = 2.9%
    near = _formulas(beta, fit_to=1.0)
    on = near.hypothesis == 1.0
    near.loc[on, ["kl_rl", "kl_rl_alpha_above", "kl_rl_alpha_below"]] = [0.0172, 0.0177, 0.0229]
    margin = _decide(*frame, formulas=near)[1]["d_optimum"]
    assert margin.measured["nearest_neighbour"] == f"pi_base^{tb.kl_optimum(beta) + 1:g}"
    assert margin.measured["smallest_relative_margin"] == pytest.approx(0.0005 / 0.0172)
    assert "2.9%" in margin.statement
    alpha = tb.kl_optimum(beta)
    # converged to pi*_2beta, to pi*_beta/2, or to pi_base^(alpha -+ 1) (fit_to: pi_base^e = pi*_{fit_to beta})
    for fit_to in (2.0, 0.5, *(1 / ((e - 1) * beta) for e in (alpha - 1, alpha + 1))):
        d = _decide(*frame, formulas=_formulas(beta, fit_to=fit_to))[1]["d_optimum"]
        assert not d.passed, (fit_to, d.measured)


def test_formula_distances_measure_the_policy_against_the_closed_form_and_its_neighbours():
    base, y_star, _ = tb.make_pair_chain(np.random.default_rng(0), 6, 2, 8, (0.3, 0.7))
    beta = 0.5
    star = tb.tilt(base, tb.kl_optimum(beta))
    at_star, at_double = tb.formula_distances(star, base, y_star, beta)
    assert at_star["hypothesis"] == 1.0 and at_star["kl_rl"] == pytest.approx(0.0, abs=1e-12)
    assert at_star["kl_rl_half"] > 0 and at_star["kl_rl_double"] > 0
    mode_kl = tb.point_mass_kl(star, y_star).mean()
    assert at_star["tolerance"] == pytest.approx(min(tb.kl(tb.tilt(base, tb.kl_optimum(beta / 2)), star).mean(),
                                                     tb.kl(tb.tilt(base, tb.kl_optimum(2 * beta)), star).mean(),
                                                     mode_kl))
    # the point mass on the mode: KL(delta || pi) = -log pi(y*), by enumeration of the one sequence
    assert mode_kl == pytest.approx(-np.log(tb.prob_of(star, y_star)).mean())
    assert at_double["beta"] == 2 * beta and at_double["kl_rl"] == pytest.approx(at_star["kl_rl_double"])


def test_lm_claims_are_inconclusive_when_a_base_model_misses_the_fit_gate():
    claims, checks = _decide(*_claim_frame([4, 16, 64, 128], [16] * 4, [4, 16, 64, 128]), gaps={**FITTED, 2: 0.09})
    for cid in "be":
        assert claims[cid].verdict == "inconclusive" and "fits the corpus law" in claims[cid].note, cid
    assert claims["c"].verdict == "holds" and checks["d_optimum"].passed  # the tabular level has no such gate


def test_law_gap_is_zero_for_the_law_and_positive_for_a_misfit(monkeypatch):
    """lm.law_gap against the exact law: a model whose log-probabilities are the law's scores 0; one that puts
    uniform mass on every answer scores KL(law || uniform), computed by enumeration of the 2-letter answers."""
    prompts, alphabet, levels = ["ab", "ba", "cd"], 4, (0.3, 0.7)
    rng = np.random.default_rng(0)
    xs = [x for x in prompts for _ in range(4000)]
    ys = [task.noisy_answer(rng, x, alphabet, levels) for x in xs]
    law = torch.tensor([task.log_prob(x, y, alphabet, levels) for x, y in zip(xs, ys)])
    x_t, y_t = torch.from_numpy(task.encode_prompts(xs, 2)), torch.from_numpy(task.encode_answers(ys, 2)[0])
    # a "model" is its log-probabilities of these answers: law_gap reads the model only through self_reward
    monkeypatch.setattr(lm, "self_reward", lambda model, prompts_, answers_: model)
    assert lm.law_gap(law, x_t, y_t, law) == pytest.approx(0.0)
    uniform = torch.full_like(law, -2 * np.log(alphabet))
    exact = np.mean([sum(np.exp(lp) * (lp + 2 * np.log(alphabet)) for lp in
                         (task.log_prob(x, a + b, alphabet, levels) for a in "abcd" for b in "abcd") if lp > -np.inf)
                     for x in prompts]) / 2
    assert exact > 0.1 and lm.law_gap(uniform, x_t, y_t, law) == pytest.approx(exact, abs=0.02)


def test_pretrained_lms_decide_best_of_n_at_the_full_scale():
    """With per-question rows of a pretrained LM (level pretrained_question), claim (a) is decided on them: the
    slope of best-of-N accuracy on log2 N and best-of-N_max - greedy, bootstrapped over questions."""
    import dataclasses

    from papers.sharpening.verdicts import sharpening_claims

    p = _sharpening_params()
    p = dataclasses.replace(p, pretrained=dataclasses.replace(p.pretrained, bon_sizes=(1, 2, 4)))
    frame, conv = _claim_frame([4, 16, 64, 128], [16] * 4, [4, 16, 64, 128], bon_gain=0.0)  # the tiny LMs: flat
    rng = np.random.default_rng(0)
    rows = []
    for q in range(40):
        p1 = rng.uniform(0.1, 0.6)
        common = {"level": "pretrained_question", "variant": "lm7b", "seed": q}
        rows.append({**common, "method": "greedy", "budget": 1, "accuracy": float(rng.random() < 0.5)})
        for n in (1, 2, 4):
            rows += [{**common, "method": "best_of_n", "budget": n, "accuracy": 1 - (1 - p1) ** n},
                     {**common, "method": "best_of_n_shuffled", "budget": n, "accuracy": p1}]
    means = pd.DataFrame(rows).groupby(["variant", "method", "budget"]).accuracy.mean().reset_index()
    df = pd.concat([frame, stages._rows(rows), stages._rows(means.assign(level="pretrained", seed=0).to_dict("records"))])
    a = {c.id: c for c in sharpening_claims(p, df, conv, _formulas(p.beta), FITTED, LAW)[0]}["a"]
    assert a.verdict == "holds" and a.control.verdict == "does not hold", a.note
    assert all(e.name.startswith("lm7b") for e in a.evidence) and a.evidence[0].replicates == 40


@pytest.mark.parametrize("gate, inits", [(10.0, 1), (1e-9, 3)])
def test_pretraining_draws_fresh_initialisations_until_a_base_model_fits_the_law(tmp_path, gate, inits):
    """The gate: a base model that misses fit_gap_max on the val prompts is pretrained again from a fresh
    initialisation, up to max_inits; every attempt is logged, the kept one is also measured on the test prompts."""
    cfg = _small_cfg()
    cfg = {**cfg, "model": {"n_layer": 1, "n_head": 1, "n_embd": 8},
           "pretrain": {**cfg["pretrain"], "seeds": 2, "steps": 3, "fit_draws": 1, "fit_gap_max": gate,
                        "max_inits": 3}}
    stages.prepare(cfg=cfg, corpus=tmp_path / "c.parquet", prompts=tmp_path / "p.parquet")
    stages.pretrain(cfg=cfg, corpus=tmp_path / "c.parquet", prompts=tmp_path / "p.parquet",
                    checkpoint=tmp_path / "base.pt", history=tmp_path / "h.parquet", fit=tmp_path / "fit.parquet")
    fit, hist = pd.read_parquet(tmp_path / "fit.parquet"), pd.read_parquet(tmp_path / "h.parquet")
    val, test = fit[fit.split == "val"], fit[fit.split == "test"]
    assert val.groupby("seed").init.count().tolist() == [inits, inits] and len(test) == 2
    assert (test.init == inits - 1).all() and (val.law_gap > 0).all()
    assert len(hist) == 2 * 3 and (hist.init == inits - 1).all()  # the kept runs' losses only
    assert len(stages.load_bases(tmp_path / "base.pt")) == 2


def test_length_curriculum_draws_short_prompts_first(tmp_path, monkeypatch):
    """pretrain.length_curriculum: over its first steps the batches' longest prompt grows 2, 4, .. max_len in equal
    shares; afterwards (and with 0) any prompt length is drawn."""
    cfg = _small_cfg()
    cfg = {**cfg, "model": {"n_layer": 1, "n_head": 1, "n_embd": 8},
           "pretrain": {**cfg["pretrain"], "seeds": 1, "steps": 12, "length_curriculum": 8, "fit_draws": 1,
                        "fit_gap_max": 10.0, "max_inits": 1}}
    longest, real = [], lm.tail_logprobs

    def spy(model, seq, start):
        if model.training:  # the pretraining batches (the gate evaluates in eval mode)
            longest.append(int((seq[:, :cfg["task"]["max_len"]] != task.PAD).sum(1).max()))
        return real(model, seq, start)

    monkeypatch.setattr(lm, "tail_logprobs", spy)
    stages.prepare(cfg=cfg, corpus=tmp_path / "c.parquet", prompts=tmp_path / "p.parquet")
    stages.pretrain(cfg=cfg, corpus=tmp_path / "c.parquet", prompts=tmp_path / "p.parquet",
                    checkpoint=tmp_path / "base.pt", history=tmp_path / "h.parquet", fit=tmp_path / "fit.parquet")
    assert longest[:6] == [2, 2, 4, 4, 6, 6] and max(longest[6:]) == cfg["task"]["max_len"] == 8


def test_c_a_step_limited_step_size_casts_no_vote():
    """Claim (c)'s sample-limited premise (review sharpening_r10) on hand-built budgets: RL rerun at 16 instead of 4
    samples per step needing the same budget (ratio 1) meets it; needing 4x (ratio 4: its budget counts Adam steps)
    misses it, as does a ratio whose interval over the base models straddles 2; a step size that misses it reads
    'premise not met' and casts no vote, exactly as an unconverged one."""
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS))["c"]  # ratio 1 everywhere: met, (c) holds
    assert c.verdict == "holds" and c.premise_met, c.note
    assert c.measured["budget_ratio.online.lr0.1"] == pytest.approx(1.0)
    assert c.measured["budget_ratio.offline.lr0.3"] == pytest.approx(1.0)
    assert c.measured["absorbing.online.lr0.1.m_req.K3.k16"] == pytest.approx(16.0 * 2 ** (1 / 3))  # 16, 32, 16
    # online RL at step 0.3 needs 4x the budget at 4x the samples per step: step-limited, no vote, (c) inconclusive
    step_bound = {rl_step_method(0.3): 4}
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, premise=step_bound))["c"]
    assert c.measured["budget_ratio.online.lr0.3"] == pytest.approx(4.0)
    assert c.measured["verdict.lr0.3"] == verdicts.PREMISE_UNMET
    assert c.measured["verdict.lr0.03"] == c.measured["verdict.lr0.1"] == "holds"
    assert c.verdict == "inconclusive" and not c.premise_met and "sample-limited" in c.note
    assert len(c.evidence) == 4  # 0.3's parts do not vote
    # straddling: base models 0 and 2 sample-limited, 1 step-limited: per-model ratios 1, 4, 1, mean 1.59 < 2 but
    # its interval reaches above 2: not met
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, premise={rl_step_method(0.3): [1, 4, 1]}))["c"]
    low, high = c.measured["budget_ratio.online.lr0.3.interval"]
    assert low < 2 < high and c.measured["budget_ratio.online.lr0.3"] == pytest.approx(4 ** (1 / 3))
    assert c.measured["verdict.lr0.3"] == verdicts.PREMISE_UNMET and c.verdict == "inconclusive"
    # the offline arm alone step-limited blocks the step size too
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, premise={"rl_offline": 4}))["c"]
    assert c.measured["verdict.lr0.1"] == verdicts.PREMISE_UNMET and c.verdict == "inconclusive"
    # the voting step sizes all fail: (c) does not hold, the step-limited one not needed to refute it
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, offline_req=FLAT,
                              steps={0.03: (FLAT, FLAT), 0.3: (FLAT, GROWS)}, premise=step_bound))["c"]
    assert c.measured["verdict.lr0.3"] == verdicts.PREMISE_UNMET
    assert c.verdict == "does not hold" and c.premise_met, c.note
    # every step size step-limited: nothing votes, (c) inconclusive for that reason
    every = {m: 4 for m in ("rl", rl_step_method(0.03), rl_step_method(0.3))}
    c = _claims(*_claim_frame(GROWS, FLAT, atomic_rl_req=GROWS, premise=every))["c"]
    assert {c.measured[f"verdict.lr{lr}"] for lr in ("0.03", "0.1", "0.3")} == {verdicts.PREMISE_UNMET}
    assert c.verdict == "inconclusive" and not c.premise_met
    assert any("sample-limited" in x.name and not x.met for x in c.premise)


def test_the_tabular_stage_reruns_rl_at_the_premise_samples_per_step(tmp_path):
    """A tiny tabular stage: online and offline RL rerun at tabular.premise_samples_per_step (16) on the deciding
    structure's fitted K and every step size, on the budgets divisible by 16; verdicts.sample_limit's ratio equals
    the ratio of the required budgets recomputed here from the stage's curves by an independent reading (the
    smallest budget from which every accuracy stays at the target). At K = 1, step 0.1, the budget is 12 Adam steps
    at either step size (48 and 192: step-limited, the review's finding), so the premise is not met."""
    cfg = {"tabular": {"prompts": 16, "pairs": [1, 2], "seeds": 3, "budgets": [4, 8, 16, 32, 48, 64, 96, 128, 192, 256],
                       "lr_sensitivity": [0.3], "convergence_pairs": 1, "convergence_samples": 32,
                       "convergence_samples_per_step": 16, "record_every": 1},
           "claims": {"budget_fit_min_pairs": 1}}
    p = parse(cfg)
    stages.tabular(cfg=cfg, curves=tmp_path / "c.parquet", convergence=tmp_path / "v.parquet",
                   formulas=tmp_path / "f.parquet")
    df = pd.read_parquet(tmp_path / "c.parquet")

    def needs(method, seed, K):
        d = df[(df.variant == "absorbing") & (df.method == method) & (df.seed == seed) & (df.pairs == K)]
        d = d.sort_values("budget")
        ok = (d.accuracy >= p.tabular.target_accuracy).to_numpy()
        stays = [i for i in range(len(ok)) if ok[i:].all()]
        return float(d.budget.iloc[stays[0]]) if stays else float("inf")

    for method in ("rl", "rl_offline", rl_step_method(0.3), tb.offline_step_method(0.3)):
        grid = sorted(df[(df.variant == "absorbing") & (df.method == premise_method(method, 16))].budget.unique())
        assert grid == [16, 32, 48, 64, 96, 128, 192, 256]
        r = verdicts.sample_limit(df, p, "absorbing", method, [1, 2])
        logs = [np.mean([np.log(min(needs(premise_method(method, 16), s, K), 512) / min(needs(method, s, K), 512))
                         for K in (1, 2)]) for s in range(3)]
        assert r["ratio"] == pytest.approx(np.exp(np.mean(logs)))
    assert not set(df[df.variant != "absorbing"].method) & {premise_method("rl", 16)}
    r = verdicts.sample_limit(df, p, "absorbing", "rl", [1, 2])
    assert [needs("rl", s, 1) for s in range(3)] == [48] * 3 and [needs("rl_k16", s, 1) for s in range(3)] == [192] * 3
    assert r["configured"][1] == pytest.approx(48) and r["premise"][1] == pytest.approx(192) and not r["met"]


def test_the_sample_limited_premise_is_configured_between_its_limits():
    """tabular.premise_samples_per_step must be a multiple of samples_per_step above it (so the two readings differ
    by a known factor), and claims.sample_limited_ratio must lie strictly between 1 and that factor."""
    cfg = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "config.yaml").read_text())["sharpening"]
    p = parse(cfg)
    assert p.tabular.premise_samples_per_step == 4 * p.tabular.samples_per_step and p.claims.sample_limited_ratio == 2
    assert (p.claims.owed_share, p.claims.convergence_tolerance) == (0.5, 0.05)
    with pytest.raises(ValueError, match="premise_samples_per_step"):
        parse({**cfg, "tabular": {**cfg["tabular"], "premise_samples_per_step": 6}})
    with pytest.raises(ValueError, match="sample_limited_ratio"):
        parse({**cfg, "claims": {**cfg["claims"], "sample_limited_ratio": 4.0}})


# ---- the fast paths against the straightforward computations (the speed-ups change no draw and no number) -----
def _rl_sharpen_direct(logp_base, budgets, *, beta, samples_per_step, lr, rng, explore=True, decay=False):
    """tabular.rl_sharpen written plainly (the version before the speed-ups): the policy normalised again for the
    gradient, the pool scored entry by entry, scipy's logsumexp, the comparison count and a plain Adam."""
    from scipy.special import logsumexp

    logits, kept = logp_base.copy(), {}
    m, v = np.zeros(logits.shape), np.zeros(logits.shape)
    steps = max(budgets) // samples_per_step
    if not explore:
        pool = tb.sample(logp_base, steps * samples_per_step, rng)
        pool_logb = tb.seq_logprob(logp_base, pool)
    for step in range(steps + 1):
        spent = step * samples_per_step
        if spent in budgets:
            kept[spent] = tb.normalise(logits)
        if step == steps:
            break
        logp = tb.normalise(logits)
        if explore:
            y = tb.sample(logp, samples_per_step, rng)
        else:
            support = pool[:, :spent + samples_per_step]
            log_w = tb.seq_logprob(logp, support) - pool_logb[:, :support.shape[1]]
            cdf = np.cumsum(np.exp(log_w - logsumexp(log_w, axis=1, keepdims=True)), axis=1)
            j = np.minimum((rng.random((len(pool), samples_per_step, 1)) > cdf[:, None, :]).sum(-1),
                           support.shape[1] - 1)
            y = support[np.arange(len(pool))[:, None], j]
        grad = tb.policy_gradient(logits, logp_base, y, beta)
        m = 0.9 * m + (1 - 0.9) * grad
        v = 0.999 * v + (1 - 0.999) * grad ** 2
        m_hat, v_hat = m / (1 - 0.9 ** (step + 1)), v / (1 - 0.999 ** (step + 1))
        logits = logits + (lr * (1 - step / steps) if decay else lr) * m_hat / (np.sqrt(v_hat) + 1e-8)
    return kept


@pytest.mark.parametrize("explore, structure, decay", [(True, "absorbing", False), (False, "absorbing", False),
                                                       (False, "compositional", True), (True, "atomic", True)])
def test_tabular_rl_equals_its_plain_version_bit_for_bit(explore, structure, decay):
    """The offline pool scored once per distinct sequence, scipy's logsumexp by its own arithmetic, the binary
    search, the policy normalised once per step and the in-place Adam: the same kept policies, exactly."""
    base, _, _ = tb.make_pair_chain(np.random.default_rng(3), 6, 3, 8, [0.3, 0.7], atomic=structure == "atomic",
                                    absorbing=structure == "absorbing")
    budgets = [4, 8, 96, 160]  # the support passes 64 columns: both branches of count_below
    kw = dict(beta=0.1, samples_per_step=4, lr=0.1, explore=explore, decay=decay)
    fast, _ = tb.rl_sharpen(base, budgets, rng=np.random.default_rng(1), **kw)
    plain = _rl_sharpen_direct(base, budgets, rng=np.random.default_rng(1), **kw)
    assert set(fast) == set(plain) == set(budgets)
    for b in budgets:
        np.testing.assert_array_equal(fast[b], plain[b])


def test_tabular_fast_helpers_equal_their_direct_expressions():
    from scipy.special import logsumexp

    rng = np.random.default_rng(0)
    base = _random_chain(1, X=5, L=4, V=3, concentration=0.3)
    pool = tb.sample(base, 300, rng)
    scorer = tb.PoolScorer(pool, 3)
    assert scorer.flat.shape[0] < 5 * 300  # the pool repeats sequences: fewer distinct ones are scored
    policy = _random_chain(2, X=5, L=4, V=3)
    for S in [1, 7, 64, 300]:
        np.testing.assert_array_equal(scorer.seq_logprob(policy, S), tb.seq_logprob(policy, pool[:, :S]))
    chain = tb.make_pair_chain(np.random.default_rng(2), 4, 2, 6, [0.3, 0.7], absorbing=True)[0]
    states = tb.Reachable(chain)
    assert 0 < len(states.rows) < chain[..., 0].size  # absorbing decoys: some states are never reached
    logits = chain + rng.normal(size=chain.shape)  # finite where the chain is, -inf where it is
    y = tb.sample(chain, 5, rng)
    full = tb.policy_gradient(logits, chain, y, 0.1)
    np.testing.assert_array_equal(states.policy_gradient(states.rows_of(tb.normalise(logits)), chain, y, 0.1),
                                  states.rows_of(full))
    assert not np.delete(full.reshape(-1, 6), states.rows, axis=0).any()  # no gradient off the reachable rows
    np.testing.assert_array_equal(states.table(states.rows_of(tb.normalise(chain))), tb.normalise(chain))
    a = rng.normal(size=(6, 200)) * 5
    a[0, :3] = a[0].max() + 1  # ties at the maximum
    np.testing.assert_array_equal(tb.logsumexp_rows(a), logsumexp(a, axis=1, keepdims=True))
    cdf = np.cumsum(rng.random((6, 200)), axis=1)
    cdf /= cdf[:, -1:]
    u = np.concatenate([rng.random((6, 5)), cdf[:, [10, 50]]], axis=1)  # values on the cdf itself: ties
    np.testing.assert_array_equal(tb.count_below(cdf, u), (u[:, :, None] > cdf[:, None, :]).sum(-1))


def test_lm_sampling_with_shared_prompts_draws_what_generate_draws():
    """One prompt run per batch, its cache shared by its copies: the same tokens as gpt.generate on the repeated
    prompts, batch by batch (also where a batch ends inside a prompt's copies)."""
    model = _tiny_gpt(3)
    prompts = torch.randint(0, 7, (5, 4))
    for k, batch, greedy in [(4, 6, False), (3, 1024, False), (1, 2, True)]:
        x = prompts.repeat_interleave(k, 0)
        gen = torch.Generator().manual_seed(7)
        direct = torch.cat([generate(model, x[i:i + batch], 3, greedy=greedy, generator=gen)[:, -3:]
                            for i in range(0, len(x), batch)]).view(5, k, 3)
        fast = lm.sample_answers(model, prompts, 3, k, torch.Generator().manual_seed(7), batch=batch, greedy=greedy)
        assert torch.equal(fast, direct)


def test_lm_shared_prompt_and_tail_logprobs_equal_teacher_forcing():
    """answer_logprobs_shared (prompt run once per prompt) and tail_logprobs (the last block on the kept
    positions only) against token_logprobs on the whole sequences: values and gradients."""
    model = _tiny_gpt(4).train()
    prompts, answers = torch.randint(0, 7, (3, 5)), torch.randint(0, 7, (3, 4, 3))
    x, y = prompts.repeat_interleave(4, 0), answers.reshape(12, 3)
    direct = token_logprobs(model, torch.cat([x, y], 1))[:, 4:]  # (12, 3)
    torch.testing.assert_close(lm.answer_logprobs_shared(model, prompts, answers).view(12, 3), direct,
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(lm.self_reward_shared(model, prompts, answers, batch=5).view(12),
                               direct.sum(-1).detach(), atol=1e-5, rtol=0)
    seq = torch.randint(0, 7, (6, 12))
    for start in [0, 4, 10]:
        grads = []
        for f in (lambda: token_logprobs(model, seq)[:, start:], lambda: lm.tail_logprobs(model, seq, start)):
            model.zero_grad()
            out = f()
            (out * torch.linspace(0.1, 1, out.shape[1])).sum().backward()
            grads.append((out.detach(), [p.grad.clone() for p in model.parameters()]))
        torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-5, rtol=0)
        for g0, g1 in zip(grads[0][1], grads[1][1]):
            torch.testing.assert_close(g0, g1, atol=1e-5, rtol=1e-4)
    policy, base = _tiny_gpt(5).train(), _tiny_gpt(6)
    loss = lm.rl_loss(policy, base, prompts, answers, 0.1)
    logp = token_logprobs(policy, torch.cat([x, y], 1))[:, 4:]  # the loss written out on the repeated prompts
    with torch.no_grad():
        r = 1.1 * token_logprobs(base, torch.cat([x, y], 1))[:, 4:] - 0.1 * logp
        g = r.flip(-1).cumsum(-1).flip(-1).view(3, 4, 3)
        adv = (g - (g.sum(1, keepdim=True) - g) / 3).view(12, 3)
    torch.testing.assert_close(loss, -(adv * logp).sum(-1).mean(), atol=1e-5, rtol=0)


# ---- the speed pass of 2026-12-05 (second): each fast path against the plain expression it replaces -------------
@pytest.mark.parametrize("L", [1, 2, 5, 7, 8, 9, 10, 15, 16, 17, 24, 33])
def test_row_sums_equal_numpys_row_sums_bit_for_bit(L):
    """tabular.row_sums (position-major vector adds in numpy's pairwise order) against .sum(-1): the same bits,
    signed zeros and infinities included, across the 8-value blocks of numpy's pairwise sum."""
    rng = np.random.default_rng(L)
    g = rng.standard_normal((3000, L)) * rng.choice([1e-8, 1.0, 1e8], size=(3000, L))
    g[:5] = -0.0
    g[5:10, ::2] = -0.0
    g[10:15, 0] = -np.inf
    out, ref = tb.row_sums(np.ascontiguousarray(g.T)), g.sum(-1)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


def test_pool_scorer_equals_the_direct_pool_score_on_long_chains():
    """PoolScorer (row_sums over the distinct sequences) on a chain of L = 10 and 18 tokens (numpy's pairwise sum
    takes blocks of 8 there) against seq_logprob of the pool, bit for bit."""
    rng = np.random.default_rng(1)
    for K in (5, 9):
        base = tb.make_pair_chain(np.random.default_rng(K), 6, K, 8, [0.3, 0.7], absorbing=True)[0]
        pool = tb.sample(base, 200, rng)
        states = tb.Reachable(base)
        scorer = tb.PoolScorer(pool, 8, states.rowmap)
        policy = states.rows_of(tb.normalise(base + rng.normal(size=base.shape)))
        for S in (1, 13, 200):
            np.testing.assert_array_equal(scorer.seq_logprob(policy, S), tb.seq_logprob(states.table(policy),
                                                                                       pool[:, :S]))


def test_indexed_cells_equal_the_direct_selection():
    """verdicts.cell (an index of the table built once, each cell computed once) against the boolean selection over
    the whole table it replaces, on every (level, variant, method, budget) of a results table, with and without K;
    a changed table is indexed again."""
    df = _claim_frame([4, 16, 64, 128], [16, 16, 16, 16], [4, 16, 64, 128])[0]
    keys = df[["level", "variant", "method", "budget"]].drop_duplicates().itertuples(index=False)
    n = 0
    for level, variant, method, budget in keys:
        for pairs in [None, *sorted(df.pairs.dropna().unique())]:
            for column in ("accuracy", "coverage"):
                np.testing.assert_array_equal(verdicts.cell(df, level, variant, method, budget, column, pairs),
                                              verdicts.cell_direct(df, level, variant, method, budget, column, pairs))
                n += 1
    assert n > 100
    assert len(verdicts.cell(df, "lm", "high_coverage", "no such method", 4)) == 0
    other = df.assign(accuracy=df.accuracy + 1.0)
    np.testing.assert_array_equal(verdicts.cell(other, "lm", "high_coverage", "sft", 4),
                                  verdicts.cell(df, "lm", "high_coverage", "sft", 4) + 1.0)


def test_sampling_pass_logprobs_are_the_teacher_forced_ones():
    """sample_answers with logprobs: the same draws as without, and each drawn token's log-probability equal to
    teacher forcing (answer_logprobs_shared) up to float rounding; answer_logprobs_pool's sums are
    self_reward_shared's bit for bit; rl_loss with those per-token values equals rl_loss computing them."""
    model = _tiny_gpt(7)
    prompts = torch.randint(0, 7, (5, 4))
    for k, batch in [(6, 7), (3, 1024)]:
        plain = lm.sample_answers(model, prompts, 3, k, torch.Generator().manual_seed(2), batch=batch)
        y, lp = lm.sample_answers(model, prompts, 3, k, torch.Generator().manual_seed(2), batch=batch, logprobs=True)
        assert torch.equal(y, plain)
        with torch.no_grad():
            torch.testing.assert_close(lp, lm.answer_logprobs_shared(model, prompts, y), atol=1e-5, rtol=0)
        tok = lm.answer_logprobs_pool(model, prompts, y, batch=8)
        assert torch.equal(tok.sum(-1), lm.self_reward_shared(model, prompts, y, batch=8))
    policy = _tiny_gpt(8).train()
    loss = lm.rl_loss(policy, model, prompts, y, 0.1)
    torch.testing.assert_close(lm.rl_loss(policy, model, prompts, y, 0.1, base_logp=lp), loss, atol=1e-5, rtol=0)


def test_foreach_adam_and_the_offline_arm_with_given_logprobs_change_nothing():
    """Adam's foreach update (sft_sharpen, rl_sharpen) equals the single-tensor one bit for bit on the CPU; offline
    RL given the pool's per-token log pi_base equals offline RL computing them (the same draws, the same
    policies up to float rounding)."""
    model = _tiny_gpt(9)
    params = []
    for foreach in (False, True):
        m = _tiny_gpt(9).train()
        opt = torch.optim.Adam(m.parameters(), lr=1e-2, foreach=foreach)
        for step in range(5):
            loss = -token_logprobs(m, torch.randint(0, 7, (6, 8), generator=torch.Generator().manual_seed(step)))
            opt.zero_grad(set_to_none=True)
            loss.mean().backward()
            opt.step()
        params.append([p.detach().clone() for p in m.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*params))
    prompts = torch.randint(0, 7, (8, 3))
    pool, lp = lm.sample_answers(model, prompts, 2, 8, torch.Generator().manual_seed(3), logprobs=True)
    kept = []
    for given in (None, lp):
        got = {}
        lm.rl_sharpen(model, prompts, 2, [4, 8], beta=0.1, samples_per_prompt=4, prompts_per_step=4, lr=1e-2,
                      generator=torch.Generator().manual_seed(0), pool=pool, pool_logp=given,
                      on_budget=lambda b, policy: got.setdefault(b, [p.detach().clone() for p in policy.parameters()]))
        kept.append(got)
    for b in (4, 8):
        for a, c in zip(kept[0][b], kept[1][b]):
            torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-4)


# ---- the speed pass of 2026-12-05 (third, issue 47's budget): each fast path against the plain one -------------------
@pytest.mark.parametrize("K, structure", [(1, "compositional"), (2, "atomic"), (3, "absorbing"), (4, "absorbing"),
                                          (5, "absorbing"), (6, "compositional"), (7, "absorbing")])
def test_prefix_scorer_equals_the_direct_pool_score_bit_for_bit(K, structure):
    """PrefixScorer (each distinct prefix read once, the pairwise partial sums carried down the trie) against
    seq_logprob of the pool's first S columns and against PoolScorer: the same bits, signed zeros included, at
    L = 2 .. 14 (a running sum below 8 tokens, numpy's blocks of 8 from 8), on the reachable rows and on a whole
    table, at every S where the set of prefixes seen changes and beyond."""
    rng = np.random.default_rng(K)
    base = tb.make_pair_chain(np.random.default_rng([K, 1]), 7, K, 8, [0.3, 0.7], atomic=structure == "atomic",
                              absorbing=structure == "absorbing")[0]
    pool = tb.sample(base, 150, rng)
    states = tb.Reachable(base)
    prefix, direct = tb.PrefixScorer(pool, 8, states.rowmap), tb.PoolScorer(pool, 8, states.rowmap)
    whole = tb.PrefixScorer(pool, 8)
    policy = states.rows_of(tb.normalise(base + rng.normal(size=base.shape)))
    table = states.table(policy)
    if K == 1:  # zero log-probabilities (certain tokens): the sums' signed zeros must match too (-0.0, so that a
        policy[:, :4] = -0.0  # scorer that drops tabular.py's `+ 0.0` normalisation fails here; +0.0 could not tell)
        table = states.table(policy)
    assert sum(len(f) for f in prefix.flat) < len(direct.flat) * 2 * K  # fewer reads than tokens
    for S in (1, 2, 3, 17, 64, 65, 149, 150):
        ref = tb.seq_logprob(table, pool[:, :S])
        for out in (prefix.seq_logprob(policy, S), direct.seq_logprob(policy, S), whole.seq_logprob(table, S)):
            np.testing.assert_array_equal(out, ref)
            np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


def test_prefix_scorer_refuses_chains_of_16_tokens():
    pool = np.zeros((2, 3, 16), dtype=np.int64)
    with pytest.raises(ValueError, match="PoolScorer"):
        tb.PrefixScorer(pool, 4)
    tb.PoolScorer(pool, 4)  # rl_sharpen's scorer there


@pytest.mark.parametrize("S", [65, 96, 128, 129, 1000, 2048])
def test_count_below_binary_search_equals_searchsorted(S):
    """count_below's vectorised binary search (S > 64) against numpy's searchsorted per row (side="left"): the same
    counts, with ties (u equal to a cdf value), repeated cdf values (zero weights), u = 0 and u beyond the row."""
    rng = np.random.default_rng(S)
    w = rng.random((64, S)) ** 8
    w[:, ::7] = 0.0
    cdf = np.cumsum(w / w.sum(1, keepdims=True), axis=1)
    u = rng.random((64, 4))
    u[0, 0], u[1, 0], u[2, 1], u[3, 2], u[4, 3] = 0.0, cdf[1, 5], 1.5, cdf[3, -1], cdf[4, 0]
    ref = np.stack([np.searchsorted(c, r, side="left") for c, r in zip(cdf, u)])
    np.testing.assert_array_equal(tb.count_below(cdf, u), ref)


def test_tabular_offline_rl_equals_its_plain_version_on_a_long_chain():
    """Offline RL on the absorbing chain at K = 5 (L = 10: the prefix scorer's pairwise branch, the binary search
    past 64 columns) against the plain version: the same kept policies, exactly."""
    base, _, _ = tb.make_pair_chain(np.random.default_rng(5), 5, 5, 8, [0.3, 0.7], absorbing=True)
    budgets = [4, 64, 72, 128]
    kw = dict(beta=0.1, samples_per_step=4, lr=0.1, explore=False)
    fast, _ = tb.rl_sharpen(base, budgets, rng=np.random.default_rng(2), **kw)
    plain = _rl_sharpen_direct(base, budgets, rng=np.random.default_rng(2), **kw)
    for b in budgets:
        np.testing.assert_array_equal(fast[b], plain[b])
