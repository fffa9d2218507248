"""Sharpening a causal language model (the language-model level): the self-reward, best-of-N, and the
paper's two amortising algorithms, SFT-sharpening and RL-sharpening (the paper's Section 2).

Every prompt of a call has the same answer length n (a variant of the task), so an answer is a block of
n tokens after the prompt. Shapes: B prompts, P = prompt width (padding and separator included), n answer
tokens, k samples per prompt, M samples in a pool.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch

import kernels
from papers.common.gpt import GPT, token_logprobs


# ---- the self-reward ---------------------------------------------------------------------------------
def answer_logprobs(model: GPT, prompts: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """log pi(y_t | x, y_<t) of each answer token, (B, n), for prompts (B, P) and answers (B, n):
    token_logprobs(model, [prompts, answers])[:, P - 1:], by :func:`tail_logprobs`."""
    return tail_logprobs(model, torch.cat([prompts, answers], dim=1), prompts.shape[1] - 1)


_CAUSAL_BIASES: dict = {}


def _causal_bias(Tq: int, Tk: int) -> torch.Tensor:
    """kernels.attention's bottom-right aligned causal mask (query i sees keys j <= i + Tk - Tq) as an additive bias
    (0 or -inf), (Tq, Tk): the same attention, which kernels.attention runs by PyTorch's fused CPU attention
    where Tq < Tk (its `causal` flag then takes the materialising reference)."""
    if (Tq, Tk) not in _CAUSAL_BIASES:
        seen = torch.ones(Tq, Tk, dtype=torch.bool).tril(diagonal=Tk - Tq)
        _CAUSAL_BIASES[Tq, Tk] = torch.zeros(Tq, Tk).masked_fill(~seen, float("-inf"))
    return _CAUSAL_BIASES[Tq, Tk]


def _block(block, x: torch.Tensor, past=None, keep: int = 0):
    """papers.common.gpt.Block.forward on x (B, T, C) (the block's own modules, in its order), continuing the
    keys and values `past` of earlier positions when given, with outputs only for positions keep .. T - 1 (keys
    and values from all): returns (x (B, T - keep, C), (k, v)). Attention is kernels.attention, causal, bottom-right
    aligned; where queries and keys differ in number its mask is passed as a bias (:func:`_causal_bias`)."""
    attn = block.attn
    B, T, C = x.shape
    H = attn.n_head
    q, k, v = attn.c_attn(block.ln_1(x)).split(C, dim=2)
    q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    if keep:
        q, x = q[:, :, keep:], x[:, keep:]
    Tq, Tk = q.shape[2], k.shape[2]
    y = kernels.attention(q, k, v, causal=True) if Tq == Tk else kernels.attention(q, k, v, bias=_causal_bias(Tq, Tk))
    x = x + attn.c_proj(y.transpose(1, 2).reshape(B, Tq, C))
    return x + block.mlp(block.ln_2(x)), (k, v)


def _forward(model: GPT, idx: torch.Tensor, start: int = 0, past=None, keep: int = 0):
    """GPT.forward on tokens idx (B, T) at positions start .. start + T - 1 after the keys and values `past` (one
    (k, v) per block) of positions 0 .. start - 1; the last block's outputs only for idx's positions keep ..
    (a causal model: the outputs kept read no discarded one). Returns (logits (B, T - keep, V), [(k, v)] per block,
    every position's)."""
    B, T = idx.shape
    assert start + T <= model.cfg.block_size, f"position {start + T} exceeds block_size {model.cfg.block_size}"
    x = model.wte(idx) + model.wpe(torch.arange(start, start + T, device=idx.device))  # (B, T, C)
    kvs, last = [], len(model.blocks) - 1
    for i, block in enumerate(model.blocks):
        x, kv = _block(block, x, None if past is None else past[i], keep if i == last else 0)
        kvs.append(kv)
    return model.lm_head(model.ln_f(x)), kvs


def tail_logprobs(model: GPT, seq: torch.Tensor, start: int) -> torch.Tensor:
    """``papers.common.gpt.token_logprobs(model, seq)[:, start:]`` (the log-probabilities of tokens start + 1 ..
    T - 1, teacher-forced), without the last block's work on the positions before `start`, whose outputs that
    slice discards (:func:`_forward` with keep = start). Equal to the direct slice up to float rounding
    (tests/papers/test_sharpening.py checks values and gradients); pretraining's loss reads only the answer letters."""
    logits, _ = _forward(model, seq[:, :-1], keep=start)  # (B, T - 1 - start, V)
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, seq[:, start + 1:, None]).squeeze(-1)


@torch.no_grad()
def self_reward(model: GPT, prompts: torch.Tensor, answers: torch.Tensor, batch: int = 1024) -> torch.Tensor:
    """r(y | x) = log pi(y | x), the model's sequence log-probability (B,), in batches."""
    return torch.cat([answer_logprobs(model, prompts[i:i + batch], answers[i:i + batch]).sum(-1)
                      for i in range(0, len(prompts), batch)])


# ---- several answers per prompt: the prompt is run once (its keys and values shared by its answers) ----------
def _prompt_state(model: GPT, prompts: torch.Tensor, counts: torch.Tensor | int):
    """Run the prompts (B, P) once: the next-token logits after each prompt and the blocks' key-value caches,
    each repeated `counts` times (an int, or one count per prompt), for the answers that continue them."""
    logits, kvs = _forward(model, prompts, keep=prompts.shape[1] - 1)  # (B, 1, V)
    kvs = [(k.repeat_interleave(counts, 0), v.repeat_interleave(counts, 0)) for k, v in kvs]
    return logits[:, -1].repeat_interleave(counts, 0), kvs


def answer_logprobs_shared(model: GPT, prompts: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """:func:`answer_logprobs` of k answers per prompt, prompts (B, P), answers (B, k, n) -> (B, k, n): the same
    quantity (the same causal model, teacher-forced), with each prompt's positions computed once instead of k
    times (equal up to float rounding; tests/papers/test_sharpening.py checks it against the direct one)."""
    B, k, n = answers.shape
    y = answers.reshape(B * k, n)
    last, kvs = _prompt_state(model, prompts, k)
    P = prompts.shape[1]
    logits = last[:, None] if n == 1 else torch.cat([last[:, None], _forward(model, y[:, :-1], P, kvs)[0]], dim=1)
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, y[:, :, None]).squeeze(-1).view(B, k, n)


@torch.no_grad()
def self_reward_shared(model: GPT, prompts: torch.Tensor, answers: torch.Tensor, batch: int = 4096) -> torch.Tensor:
    """r(y | x) of k answers per prompt, prompts (B, P), answers (B, k, n) -> (B, k), in batches of about `batch`
    sequences (the prompt run once per prompt: :func:`answer_logprobs_shared`)."""
    step = max(1, batch // answers.shape[1])
    return torch.cat([answer_logprobs_shared(model, prompts[i:i + step], answers[i:i + step]).sum(-1)
                      for i in range(0, len(prompts), step)])


@torch.no_grad()
def answer_logprobs_pool(model: GPT, prompts: torch.Tensor, answers: torch.Tensor, batch: int = 4096) -> torch.Tensor:
    """:func:`answer_logprobs_shared` of k answers per prompt, (B, k, n), without gradient, in the batches of
    :func:`self_reward_shared` (whose values are these summed over n): a fixed pool's per-token log-probabilities,
    computed once (rl_sharpen's offline arm reads pi_base's per token from it instead of running pi_base again)."""
    step = max(1, batch // answers.shape[1])
    return torch.cat([answer_logprobs_shared(model, prompts[i:i + step], answers[i:i + step])
                      for i in range(0, len(prompts), step)])


@torch.no_grad()
def sample_answers(model: GPT, prompts: torch.Tensor, n: int, k: int, generator: torch.Generator,
                   batch: int = 1024, greedy: bool = False, logprobs: bool = False):
    """k answers of n tokens per prompt, (B, k, n), drawn in batches of `batch` sequences.

    papers.common.gpt.generate on the prompts repeated k times, batch by batch, with each prompt of a batch run
    once (its key-value cache shared by its copies): the same draws from the generator in the same order, on
    the same distributions up to float rounding (tests/papers/test_sharpening.py checks it against generate).
    With `logprobs`, also each drawn token's log-probability under the distribution it was drawn from, (B, k, n):
    :func:`answer_logprobs_shared` of the answers read off the sampling pass (the same causal model on the same
    tokens, one position at a time instead of teacher-forced; equal up to float rounding: at most 1.0e-5 per token
    measured on base model 0's real low-coverage pool, 256 x 64 x 8 (review sharpening_r13: 1.1e-5); tests), so
    that the self-reward of a pool of pi_base's own samples costs no second pass."""
    B = len(prompts)
    out, lps = [], []
    for r0 in range(0, B * k, batch):
        r1 = min(B * k, r0 + batch)  # rows r0 .. r1 - 1 of the repeated prompts
        first, last = r0 // k, (r1 - 1) // k
        rows = torch.arange(r0, r1) // k
        counts = torch.bincount(rows - first, minlength=last - first + 1)
        logits, kvs = _prompt_state(model, prompts[first:last + 1], counts)
        new, lp = [], []
        for t in range(n):
            if t:  # the token drawn last, at position P + t - 1, continues the cache
                logits, kvs = _forward(model, new[-1], prompts.shape[1] + t - 1, kvs)
                logits = logits[:, -1]
            logits = logits.float()
            if greedy:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)  # (rows, 1)
            new.append(nxt)
            if logprobs:
                lp.append(torch.log_softmax(logits, -1).gather(-1, nxt))
        out.append(torch.cat(new, dim=1))
        if logprobs:
            lps.append(torch.cat(lp, dim=1))
    if logprobs:
        return torch.cat(out).view(B, k, n), torch.cat(lps).view(B, k, n)
    return torch.cat(out).view(B, k, n)


# ---- best-of-N ------------------------------------------------------------------------------------------
def best_of_n_from_pool(rewards: np.ndarray, values: np.ndarray, sizes, *, per_prompt: bool = False) -> dict:
    """E[value of the best-of-N winner] for each N in `sizes`, from a pool of M >= N samples per prompt
    (B, M), averaged over prompts; value = correctness gives best-of-N accuracy.

    A uniformly random N-subset of M i.i.d. samples is N i.i.d. samples, so averaging over all subsets is
    an unbiased estimate with less variance than one draw: with the pool sorted by reward (rank j = 1 is
    the best), the subset's winner is the rank-j sample with probability C(M - j, N - 1) / C(M, N).
    Equal rewards belong to equal answers (the reward is a function of the answer), so ties are harmless.
    With ``per_prompt`` each N maps to the (B,) per-prompt estimates instead of their mean.
    """
    B, M = rewards.shape
    order = np.argsort(-rewards, axis=1, kind="stable")
    c = np.take_along_axis(values.astype(float), order, axis=1)  # (B, M) values by rank
    out = {}
    for N in sizes:
        if not 1 <= N <= M:
            raise ValueError(f"best-of-{N} needs a pool of at least {N} samples, got {M}")
        w = np.array([math.comb(M - j, N - 1) for j in range(1, M + 1)], dtype=float) / math.comb(M, N)
        out[int(N)] = c @ w if per_prompt else float((c @ w).mean())  # (B,) with per_prompt
    return out


def winners(rewards: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """The best-of-k answer per prompt under the self-reward: rewards (B, k), answers (B, k, n) -> (B, n)."""
    return answers[torch.arange(len(answers)), rewards.argmax(1)]


# ---- SFT-sharpening -------------------------------------------------------------------------------------
def sft_sharpen(base: GPT, prompts: torch.Tensor, targets: torch.Tensor, *, epochs: int, batch: int, lr: float,
                generator: torch.Generator) -> GPT:
    """SFT-sharpening: maximise sum_i log pi(y_BoN_i | x_i) over the best-of-N winners, from pi_base
    (Adam, `epochs` passes in shuffled minibatches)."""
    model = copy.deepcopy(base).train()
    # foreach: the same update, one call per step for all parameters (bit for bit equal on the CPU; tests)
    opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
    for _ in range(epochs):
        perm = torch.randperm(len(prompts), generator=generator)
        for i in range(0, len(perm), batch):
            idx = perm[i:i + batch]
            loss = -answer_logprobs(model, prompts[idx], targets[idx]).sum(-1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return model.eval()


# ---- RL-sharpening --------------------------------------------------------------------------------------
def rl_loss(policy: GPT, base: GPT, prompts: torch.Tensor, answers: torch.Tensor, beta: float,
            base_logp: torch.Tensor | None = None) -> torch.Tensor:
    """REINFORCE surrogate for J(pi) = E_pi[log pi_base(y | x)] - beta KL(pi || pi_base), from k >= 2 samples
    per prompt: prompts (B, P), answers (B, k, n) drawn from pi.

    Per-token reward r_t = (1 + beta) log pi_base(y_t | .) - beta log pi(y_t | .) (J is a sum of these over
    tokens, in expectation); each token's log pi is weighted by its reward-to-go minus the leave-one-out
    mean over the prompt's other samples. Minimising the returned loss ascends J. `base_logp` (B, k, n): the
    answers' log pi_base per token where the caller has them already (a fixed pool's), else computed here.
    """
    B, k, n = answers.shape
    logp = answer_logprobs_shared(policy, prompts, answers).view(B * k, n)  # (B k, n), with gradient
    with torch.no_grad():
        if base_logp is None:
            base_logp = answer_logprobs_shared(base, prompts, answers)
        r = (1 + beta) * base_logp.reshape(B * k, n) - beta * logp  # (B k, n)
        g = r.flip(-1).cumsum(-1).flip(-1).view(B, k, n)  # reward-to-go
        adv = (g - (g.sum(1, keepdim=True) - g) / (k - 1)).view(B * k, n)
    return -(adv * logp).sum(-1).mean()


def rl_sharpen(base: GPT, prompts: torch.Tensor, n: int, budgets, *, beta: float, samples_per_prompt: int,
               prompts_per_step: int, lr: float, generator: torch.Generator, on_budget,
               pool: torch.Tensor | None = None, pool_logp: torch.Tensor | None = None) -> GPT:
    """RL-sharpening (the paper's Section 4, RLHF-Sharpening): policy gradient (Adam) on the KL-regularised
    self-reward, from pi_base.

    Each pass over the prompts (shuffled, in minibatches of `prompts_per_step`) draws k fresh samples per
    prompt from the current policy (online exploration). With `pool` (B, M, n), samples of pi_base per prompt
    (SFT-sharpening's pool, so the same samples SFT sees), RL is restricted to the pool: pass j (which brings the
    budget to (j + 1) k) draws its k samples per prompt from the policy renormalised on the pool's first (j + 1) k
    samples (:func:`pool_draw`, importance resampling WITHOUT replacement: k distinct pool samples per prompt and
    pass), so at budget m the policy has seen exactly SFT's first m samples and can generate nothing else: offline
    RL, the ablation that removes exactly the online exploration (new answers) and keeps the objective, the loss,
    the reward, the KL term, the number of samples and steps and the step size.

    Why without replacement (reviews sharpening_r12 / r13, issue 47; chosen before the run that decides claim (e)).
    The update is Section 4's: the leave-one-out REINFORCE estimate of the gradient of E_pi[log pi_base] -
    beta KL(pi || pi_base) at the current policy (:func:`rl_loss`), unbiased when the prompt's k samples are i.i.d.
    draws of the policy. (1) With replacement (the former draw) repeats pool entries: at pi = pi_base, k i.i.d.
    draws from S pool samples give an expected update (S - 1) / S times J's gradient (the leave-one-out covariance
    of an empirical distribution), 3/4 in the first pass (S = k = 4), and the repeats carry no new sample, so the
    ablation changed the sampling statistics as well as removing exploration. Without replacement, at pi = pi_base
    (equal weights) the draw is a uniformly random k-subset of S i.i.d. samples of pi_base, i.e. k i.i.d. samples
    of pi_base: the update is unbiased there, exactly online RL's (in the first pass, S = k, the draw is the pool's
    first k samples). (2) The alternative, the pool's next k samples in order (each used once), draws from pi_base
    whatever the policy, so its expected update is J's gradient only at pi = pi_base; made unbiased at every step
    by importance weights pi / pi_base (the samples are fresh, independent of the policy), it was measured on base
    model 0's real low-coverage pool before this run: after one Adam step the log-weights were -10 on average (to
    -24), one sample per minibatch carried the update, and the policy's accuracy fell from 0.125 to 0.003 at m = 4
    (a comparator that cannot learn, which (e)'s premise rejects). Without replacement keeps following the current
    policy (the draw is the policy renormalised on the pool, a self-normalised importance estimate of pi, so the
    update is J's gradient for that restricted policy up to the without-replacement correction, which shrinks as
    the pool seen grows: k of S = (j + 1) k samples in pass j). What remains biased once pi moves from pi_base is
    common to every draw that reuses a fixed pool: that is what "restricted to the pool" means.

    After the pass that brings the samples per prompt to a budget in `budgets`,
    ``on_budget(budget, policy)`` is called; the step size is constant, so this equals separate runs stopped at
    each budget. Returns the final policy. `pool_logp` (B, M, n): the pool's log pi_base per token where the caller
    has it (:func:`sample_answers` with logprobs, when it drew the pool), else computed here.
    """
    policy = copy.deepcopy(base).train()
    base = base.eval()
    opt = torch.optim.Adam(policy.parameters(), lr=lr, foreach=True)  # foreach: as in sft_sharpen
    k = samples_per_prompt
    if pool is not None:
        if pool.shape[0] != len(prompts) or pool.shape[1] < max(budgets):
            raise ValueError(f"the pool holds {tuple(pool.shape[:2])} samples, need {len(prompts)} prompts x at "
                             f"least {max(budgets)} samples")
        # pi_base's per-token log-probabilities of the pool, once (the loss reads them for the drawn entries) and
        # their sums, the self-reward (equal to self_reward_shared(base, prompts, pool); tests)
        pool_tok = answer_logprobs_pool(base, prompts, pool) if pool_logp is None else pool_logp  # (B, M, n)
        pool_logb = pool_tok.sum(-1)  # (B, M)
    for spent in range(k, max(budgets) + 1, k):
        perm = torch.randperm(len(prompts), generator=generator)
        for i in range(0, len(perm), prompts_per_step):
            idx = perm[i:i + prompts_per_step]
            x = prompts[idx]
            if pool is None:  # online: the current policy samples
                y = sample_answers(policy, x, n, k, generator)  # (b, k, n)
                loss = rl_loss(policy, base, x, y, beta)
            else:  # restricted to the pool: k draws from the policy renormalised on the pool samples seen so far
                y, j = pool_draw(policy, x, pool[idx, :spent], pool_logb[idx, :spent], k, generator, index=True)
                loss = rl_loss(policy, base, x, y, beta, base_logp=pool_tok[idx[:, None], j])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if spent in budgets:
            on_budget(spent, policy.eval())
            policy.train()
    return policy.eval()


@torch.no_grad()
def pool_draw(policy: GPT, prompts: torch.Tensor, support: torch.Tensor, support_logb: torch.Tensor, k: int,
              generator: torch.Generator, index: bool = False):
    """k draws per prompt from the policy restricted to a fixed pool of samples of pi_base, by importance
    resampling WITHOUT replacement: support (B, S, n), S >= k, with support_logb (B, S) = log pi_base of its
    entries, -> (B, k, n), k distinct pool entries per prompt, drawn one after another, each with probability
    proportional to pi(y_j | x) / pi_base(y_j | x) among the entries not drawn yet (torch.multinomial without
    replacement). An answer that appears c times in the pool carries c pi / pi_base, about S pi(y): the policy
    renormalised on the answers the pool holds (none other can be drawn). With S = k (rl_sharpen's first pass)
    the draw is the whole support; at pi = pi_base (equal weights) it is a uniformly random k-subset of S i.i.d.
    samples of pi_base, i.e. k i.i.d. samples of pi_base, online RL's first draw (rl_sharpen says why this draw).
    With `index`, also the drawn entries' columns j (B, k)."""
    B, S, n = support.shape
    if S < k:
        raise ValueError(f"pool_draw draws {k} distinct entries per prompt from a support of {S}")
    log_w = self_reward_shared(policy, prompts, support) - support_logb  # (B, S)
    j = torch.multinomial(torch.softmax(log_w, 1), k, replacement=False, generator=generator)  # (B, k), distinct
    y = support[torch.arange(B)[:, None], j]
    return (y, j) if index else y


# ---- evaluation -------------------------------------------------------------------------------------------
@torch.no_grad()
def law_gap(model: GPT, prompts: torch.Tensor, answers: torch.Tensor, law_logprob: torch.Tensor) -> float:
    """KL(law || model) per answer letter, estimated on answers drawn from the corpus law:
    mean over draws of log law(y | x) - log model(y | x), divided by the answer length.

    prompts (B, P), answers (B, n) drawn from the law, law_logprob (B,) their exact log-probabilities under it
    (papers.sharpening.task.log_prob). Since the law's own log-probability is subtracted draw by draw, the
    estimate varies only with the model's misfit, not with the law's entropy; it is >= 0 in expectation and 0
    exactly when the model is the law on these prompts."""
    return float((law_logprob - self_reward(model, prompts, answers)).mean() / answers.shape[1])



@torch.no_grad()
def best_of_n_curve(base: GPT, prompts: torch.Tensor, correct: torch.Tensor, sizes, *,
                    generator: torch.Generator, shuffle_seed: int = 0) -> dict:
    """Best-of-N under the self-reward for each N in `sizes`, from one pool of max(sizes) samples per prompt:
    {"accuracy": {N: ...}, "log_pi_base": {N: mean self-reward of the winner}, "shuffled_accuracy": {N: ...}}.

    shuffled_accuracy is the negative control: best-of-N from the same pool when each sample is scored with the
    self-reward of another sample of its prompt (a random permutation), a reward that carries no information
    about the sample it is attached to.
    """
    B, n = correct.shape
    M = max(sizes)
    pool, tok = sample_answers(base, prompts, n, M, generator, logprobs=True)  # (B, M, n) twice
    r = tok.sum(-1).numpy()  # (B, M) the self-reward, read off the sampling pass
    ok = (pool == correct[:, None, :]).all(-1).numpy()
    perm = np.random.default_rng(shuffle_seed).permuted(np.tile(np.arange(M), (B, 1)), axis=1)
    r_shuffled = np.take_along_axis(r, perm, axis=1)
    return {"accuracy": best_of_n_from_pool(r, ok, sizes), "log_pi_base": best_of_n_from_pool(r, r, sizes),
            "shuffled_accuracy": best_of_n_from_pool(r_shuffled, ok, sizes)}


@torch.no_grad()
def evaluate(model: GPT, base: GPT, prompts: torch.Tensor, correct: torch.Tensor, *, samples: int,
             generator: torch.Generator) -> dict:
    """A model's accuracies on held-out prompts with correct answers (B, n).

    sample_accuracy is exact, E_x[pi(correct | x)] by teacher forcing (no sampling noise); greedy_accuracy
    decodes the argmax token by token; log_pi_base is the mean self-reward of `samples` samples per prompt.
    """
    n = correct.shape[1]
    p_correct = self_reward(model, prompts, correct).exp()
    greedy = sample_answers(model, prompts, n, 1, generator, greedy=True)[:, 0]
    y = sample_answers(model, prompts, n, samples, generator)  # (B, s, n)
    r_base = self_reward_shared(base, prompts, y)  # (B, s)
    return {"sample_accuracy": float(p_correct.mean()),
            "greedy_accuracy": float((greedy == correct).all(1).float().mean()),
            "log_pi_base": float(r_base.mean())}
