"""The exact tabular level: an autoregressive model over short sequences whose next-token table depends
on the prompt x, the position t and the previous token (a first-order Markov chain per prompt), so that
every quantity of the paper's framework has a closed form or an exact dynamic programme.

Shapes: X prompts, L positions, V tokens. A model is a table of log-conditionals
``logp[x, t, a, v] = log pi(y_t = v | x, y_{t-1} = a)`` of shape (X, L, V, V); at t = 0 there is no
previous token and the row ``a = 0`` is used (the start state), the other rows at t = 0 are unused.

The base models (:func:`make_pair_chain`) are the language-model task's generator written as such tables,
with the number of pairs K setting the coverage coefficient. The paper's objects (its Sections 2 to 4),
computed exactly here:
- self-reward ``r(y | x) = log pi_base(y | x)`` and its maximiser ``y*(x)`` (Viterbi);
- the coverage coefficient ``C_cov = E_x[1 / pi_base(y*(x) | x)]`` (its Definition of coverage);
- best-of-N accuracy with the self-reward, ``1 - (1 - pi_base(y* | x))^N`` when y* is unique;
- the optimum of ``E_pi[log pi_base] - beta KL(pi || pi_base)``, ``pi*_beta ∝ pi_base^(1 + 1/beta)``, which
  is again a Markov chain (backward messages below), and KL divergences between chains.

The two sharpening algorithms at a budget of m samples per prompt: SFT-sharpening (maximum likelihood on
the best-of-m winner) and RL-sharpening (the paper's RLHF-Sharpening objective, maximised by policy
gradient, sampling from the current policy: online exploration; or, as the ablation, restricted to a fixed pool of
samples of pi_base: offline).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp

START = 0  # the previous-token index used at t = 0


def offline_step_method(lr: float) -> str:
    """The method name of offline RL (the ablation of claim (c)) run at step size `lr`, one of
    tabular.lr_sensitivity (at tabular.lr itself it is "rl_offline"; online RL at `lr` is params.rl_step_method)."""
    return f"rl_offline_lr{lr:g}"


# ---- the base model ------------------------------------------------------------------------------
def make_pair_chain(rng: np.random.Generator, prompts: int, pairs: int, vocab: int, levels,
                    atomic: bool = False, absorbing: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tabular version of the language-model task (:mod:`.task`): L = 2K tokens per prompt, a correct
    answer y*(x) and a reliability a(x) = levels[x mod len(levels)].

    Tokens 0 .. V/2 - 1 are "correct" tokens (y* is drawn from them), V/2 .. V - 1 "decoy" tokens. With
    h = V/2 decoy tokens:

    - compositional (atomic=False): each pair independently is correct, (y*_2i, y*_2i+1), with probability
      a(x), else a decoy pair (d_2i, u) with d_2i a fixed decoy token and u uniform over the decoy tokens.
      pi(y*) = a^K; y* is the mode iff a > 1 / (h + 1); greedy writes d_2i when a < 1/2; the answer can be
      learned pair by pair.
    - atomic: the whole answer is y* with probability b = a^K (the same pi(y*), hence the same C_cov), else
      d_0 followed by L - 1 uniform decoy tokens; y* is the mode iff b > (1 - b) h^-(L-1). No part of y* is
      more likely than y* itself, so it cannot be assembled part by part.
    - absorbing (compositional with absorbing decoys): as compositional, but once a decoy token is written every
      later token is a uniform decoy token, so pair i + 1 of y* is reachable only through correct pairs 1 .. i.
      pi(y*) = a^K (the same C_cov); a sample carries information about pair i + 1 only when pairs 1 .. i are
      right, so a learner that only sees pi_base's samples meets the later pairs with probability a^i, while one
      that samples from its own, sharpening policy reaches them more and more often (where online exploration
      matters, the paper's Section 4).

    Returns (logp (X, L, V, V), y* (X, L), a (X,)); impossible transitions have log-probability -inf.
    """
    if vocab < 4 or vocab % 2:
        raise ValueError(f"vocab = {vocab} must be even and at least 4 (half correct, half decoy tokens)")
    if atomic and absorbing:
        raise ValueError("a chain is atomic or absorbing, not both")
    X, L, h = prompts, 2 * pairs, vocab // 2
    a = np.asarray(levels, dtype=float)[np.arange(X) % len(levels)]
    y_star = rng.integers(h, size=(X, L))
    decoy = h + rng.integers(h, size=(X, L))
    p = np.zeros((X, L, vocab, vocab))
    p[:, :, :, :] = 1.0 / vocab  # unreachable states: any law
    p[:, :, h:, :] = 0.0
    p[:, :, h:, h:] = 1.0 / h  # after a decoy token: uniform over the decoy tokens
    xs, prev = np.arange(X)[:, None], np.arange(vocab)[None, :]  # index every row (previous token) at once
    for t in range(L):
        if (t == 0) if atomic else (t % 2 == 0):  # a branching point, whatever the previous token
            prob = (a ** pairs if atomic else a)[:, None]
            p[:, t] = 0.0
            p[xs, t, prev, y_star[:, t, None]] = prob
            p[xs, t, prev, decoy[:, t, None]] = 1.0 - prob
            if absorbing and t > 0:  # after a decoy token the chain stays among the decoy tokens
                p[:, t, h:, :] = 0.0
                p[:, t, h:, h:] = 1.0 / h
        else:  # after a correct token the next correct token is certain
            p[:, t, :h] = 0.0
            p[xs, t, prev[:, :h], y_star[:, t, None]] = 1.0
    with np.errstate(divide="ignore"):
        return np.log(p), y_star, a


def normalise(logits: np.ndarray) -> np.ndarray:
    """Log-softmax over the last axis: any real table becomes a model."""
    z = logits - logits.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


# ---- sampling and scoring ------------------------------------------------------------------------
def sample(logp: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n sequences per prompt, (X, n, L) int, by ancestral sampling (inverse CDF, one uniform per token)."""
    X, L, V, _ = logp.shape
    cdf = np.cumsum(np.exp(logp), axis=-1)  # (X, L, V, V)
    y = np.empty((X, n, L), dtype=np.int64)
    prev = np.full((X, n), START)
    u = rng.random((X, n, L))
    xs = np.arange(X)[:, None]
    for t in range(L):
        c = cdf[xs, t, prev]  # (X, n, V)
        y[:, :, t] = np.minimum((u[:, :, t, None] > c).sum(-1), V - 1)
        prev = y[:, :, t]
    return y


def token_logprobs(logp: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log pi(y_t | x, y_{t-1}) for sequences y (X, n, L); returns (X, n, L)."""
    X, n, L = y.shape
    prev = np.concatenate([np.full((X, n, 1), START), y[:, :, :-1]], axis=2)
    return logp[np.arange(X)[:, None, None], np.arange(L)[None, None, :], prev, y]


def seq_logprob(logp: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log pi(y | x), (X, n): the self-reward when logp is the base model."""
    return token_logprobs(logp, y).sum(-1)


def mode(logp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """y*(x) = argmax_y pi(y | x) by Viterbi; returns (y* (X, L), log pi(y* | x) (X,))."""
    X, L, V, _ = logp.shape
    score = logp[:, 0, START, :]  # (X, V) best log-prob of a prefix ending in v
    back = np.zeros((X, L, V), dtype=np.int64)
    for t in range(1, L):
        cand = score[:, :, None] + logp[:, t]  # (X, a, v)
        back[:, t] = cand.argmax(1)
        score = cand.max(1)
    y = np.empty((X, L), dtype=np.int64)
    y[:, -1] = score.argmax(1)
    for t in range(L - 1, 0, -1):
        y[:, t - 1] = back[np.arange(X), t, y[:, t]]
    return y, score.max(1)


def greedy(logp: np.ndarray) -> np.ndarray:
    """Greedy decoding, the argmax token at each step given the previous one: (X, L)."""
    X, L, _, _ = logp.shape
    y = np.empty((X, L), dtype=np.int64)
    prev = np.full(X, START)
    for t in range(L):
        y[:, t] = logp[np.arange(X), t, prev].argmax(-1)
        prev = y[:, t]
    return y


def coverage(logp_base: np.ndarray) -> float:
    """The coverage coefficient C_cov = E_x[1 / pi_base(y*(x) | x)]."""
    return float(np.mean(np.exp(-mode(logp_base)[1])))


def bon_accuracy(logp_base: np.ndarray, n: int) -> float:
    """Exact best-of-n accuracy under the self-reward: y* wins iff it is drawn (it is the unique maximiser)."""
    p_star = np.exp(mode(logp_base)[1])
    return float(np.mean(1.0 - (1.0 - p_star) ** n))


def prob_of(logp: np.ndarray, y: np.ndarray) -> np.ndarray:
    """pi(y(x) | x) for one sequence per prompt, y (X, L); returns (X,)."""
    return np.exp(seq_logprob(logp, y[:, None, :])[:, 0])


# ---- the KL-regularised optimum and divergences ------------------------------------------------------
def tilt(logp: np.ndarray, alpha: float) -> np.ndarray:
    """The chain of pi_alpha(y | x) ∝ pi(y | x)^alpha.

    With backward messages log b_L(a) = 0, log b_t(a) = logsumexp_v [alpha logp_t(v | a) + log b_{t+1}(v)],
    the tilted chain is q_t(v | a) = pi_t(v | a)^alpha b_{t+1}(v) / b_t(a): a product of its conditionals
    gives pi^alpha / b_0(start), i.e. pi^alpha normalised. RL-sharpening's optimum is tilt(base, 1 + 1/beta).
    """
    L = logp.shape[1]
    out = np.empty_like(logp)
    log_b_next = np.zeros(logp.shape[:1] + logp.shape[-1:])  # (X, V): log b_{t+1}(v)
    for t in range(L - 1, -1, -1):
        s = alpha * logp[:, t] + log_b_next[:, None, :]  # (X, a, v)
        out[:, t] = normalise(s)
        log_b_next = logsumexp(s, axis=-1)  # log b_t(a)
    return out


def kl_optimum(beta: float) -> float:
    """The exponent of RL-sharpening's optimum, pi*_beta ∝ pi_base^(1 + 1/beta)."""
    return 1.0 + 1.0 / beta


def point_mass_kl(logp: np.ndarray, y: np.ndarray) -> np.ndarray:
    """KL(delta_y || pi) per prompt (X,): -log pi(y(x) | x), the divergence of a point mass on y (e.g. the mode)."""
    return -seq_logprob(logp, y[:, None, :])[:, 0]


def formula_distances(logp_rl: np.ndarray, logp_base: np.ndarray, y_star: np.ndarray, beta: float,
                      hypotheses=(1.0, 2.0)) -> list[dict]:
    """How well a policy fits the closed form pi*_b ∝ pi_base^(1 + 1/b), against its nearest wrong formulas.

    For each hypothesis b = f * beta (f in `hypotheses`; f = 1 is the paper's optimum, f = 2 a wrong formula, the
    negative control), the mean over prompts of KL(pi_RL || pi*_b), of KL(pi_RL || pi*_{b/2}) and of
    KL(pi_RL || pi*_{2b}), and the tolerance: the smallest KL(W || pi*_b) of the wrong answers W in {pi*_{b/2},
    pi*_{2b}, the point mass on the mode} (how far from pi*_b the nearest wrong formula lies, on this base
    model); and KL(pi_RL || pi_base^(alpha -+ 1)) for the exponents one below and above alpha = 1 + 1/b. A policy
    fits formula b when it is nearer to pi*_b than to its neighbours (those exponents included) and nearer to it
    than any wrong answer is."""
    star = {}

    def tilted(b):
        if b not in star:
            star[b] = tilt(logp_base, kl_optimum(b))
        return star[b]

    rows = []
    for f in hypotheses:
        b = f * beta
        s, half, double = tilted(b), tilted(b / 2), tilted(2 * b)
        alpha = kl_optimum(b)
        rows.append({"hypothesis": f, "beta": b, "alpha": alpha,
                     "kl_rl": float(kl(logp_rl, s).mean()),
                     "kl_rl_half": float(kl(logp_rl, half).mean()),
                     "kl_rl_double": float(kl(logp_rl, double).mean()),
                     # the resolution of the fit: the exponents one below and one above pi*_b's
                     "kl_rl_alpha_below": float(kl(logp_rl, tilt(logp_base, alpha - 1)).mean()),
                     "kl_rl_alpha_above": float(kl(logp_rl, tilt(logp_base, alpha + 1)).mean()),
                     "tolerance": float(min(kl(half, s).mean(), kl(double, s).mean(),
                                            point_mass_kl(s, y_star).mean()))})
    return rows


def state_marginals(logp: np.ndarray) -> np.ndarray:
    """P_pi(y_{t-1} = a) for every t (X, L, V); at t = 0 all the mass is on the start state."""
    X, L, V, _ = logp.shape
    mu = np.zeros((X, L, V))
    mu[:, 0, START] = 1.0
    p = np.exp(logp)
    for t in range(1, L):
        mu[:, t] = np.einsum("xa,xav->xv", mu[:, t - 1], p[:, t - 1])
    return mu


def kl(logq: np.ndarray, logp: np.ndarray) -> np.ndarray:
    """KL(q || p) between two chains per prompt (X,): sum_t E_{a ~ q}[KL(q_t(.|a) || p_t(.|a))]."""
    q = np.exp(logq)
    with np.errstate(invalid="ignore"):
        per_state = np.where(q > 0, q * (logq - logp), 0.0).sum(-1)  # (X, L, V)
    return (state_marginals(logq) * per_state).sum((1, 2))


def expected_reward(logq: np.ndarray, logp_base: np.ndarray) -> np.ndarray:
    """E_{y ~ q}[log pi_base(y | x)] per prompt (X,): the mean self-reward of a model's outputs."""
    q = np.exp(logq)
    with np.errstate(invalid="ignore"):
        per_state = np.where(q > 0, q * logp_base, 0.0).sum(-1)
    return (state_marginals(logq) * per_state).sum((1, 2))


# ---- sharpening algorithms ----------------------------------------------------------------------------
def best_of_n(logp_base: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """One best-of-n draw per prompt under the self-reward: (X, L)."""
    y = sample(logp_base, n, rng)  # (X, n, L)
    best = seq_logprob(logp_base, y).argmax(1)
    return y[np.arange(len(y)), best]


def sft_sharpen(logp_base: np.ndarray, winners: np.ndarray) -> np.ndarray:
    """SFT-sharpening: maximum likelihood, in the tabular class, on one best-of-m winner per prompt, winners (X, L)
    (from :func:`best_of_n`, or the first m samples of a pool).

    The MLE conditionals are the winners' transition counts; a state no winner visits keeps pi_base
    (the MLE is undefined there, and sampling never reaches it).
    """
    y = winners[:, None, :]  # (X, 1, L)
    X, _, L = y.shape
    counts = np.zeros(logp_base.shape)
    prev = np.concatenate([np.full((X, 1, 1), START), y[:, :, :-1]], axis=2)
    np.add.at(counts, (np.arange(X)[:, None, None], np.arange(L)[None, None, :], prev, y), 1.0)
    seen = counts.sum(-1, keepdims=True) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        mle = np.log(counts / np.where(seen, counts.sum(-1, keepdims=True), 1.0))
    return np.where(seen, mle, logp_base)


def required_budget(budgets, accuracies, target: float) -> float:
    """The budget from which a curve's accuracy stays at or above `target`: the smallest budget m such that every
    budget >= m of the grid reaches it (inf if the largest budget does not). A curve that reaches the target and
    falls below it again (a learner that collapses later) needs the budget after its last fall, not its first
    crossing: the sample budget an algorithm needs to be and stay that accurate, read off its whole curve."""
    need = math.inf
    for m, acc in sorted(zip(budgets, accuracies), reverse=True):
        if not acc >= target:
            break
        need = float(m)
    return need


class Adam:
    """Adam (Kingma and Ba, 2015) for gradient ascent on one array."""

    def __init__(self, shape, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps
        self.m, self.v, self.k = np.zeros(shape), np.zeros(shape), 0

    def step(self, theta: np.ndarray, grad: np.ndarray, lr: float | None = None) -> np.ndarray:
        # m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, theta + lr m_hat / (sqrt(v_hat) + eps), in place (the same
        # operations in the same order as the plain expressions, so the same numbers, with fewer temporaries)
        self.k += 1
        self.m *= self.b1
        self.m += (1 - self.b1) * grad
        g2 = np.square(grad)
        g2 *= 1 - self.b2
        self.v *= self.b2
        self.v += g2
        denom = np.divide(self.v, 1 - self.b2 ** self.k, out=g2)
        np.sqrt(denom, out=denom)
        denom += self.eps
        step = self.m / (1 - self.b1 ** self.k)
        step *= self.lr if lr is None else lr
        step /= denom
        return theta + step


def policy_gradient(logits: np.ndarray, logp_base: np.ndarray, y: np.ndarray, beta: float) -> np.ndarray:
    """A REINFORCE estimate of the gradient of J(pi) = E_pi[log pi_base] - beta KL(pi || pi_base) w.r.t.
    the logits of the tabular policy, from k >= 2 samples per prompt y (X, k, L).

    J = E_pi[sum_t r_t] with per-token reward r_t = (1 + beta) log pi_base(y_t | s_t) - beta log pi(y_t | s_t)
    (the self-reward and the KL term are both sums over tokens; the score-function term of log pi has mean
    zero). Each token's score is weighted by its reward-to-go G_t = sum_{s >= t} r_s minus the leave-one-out
    mean of G_t over the prompt's other samples (a baseline that keeps the estimate unbiased).
    (rl_sharpen runs the same arithmetic on the reachable states only: :meth:`Reachable.policy_gradient`.)
    """
    logp = normalise(logits)
    X, k, L = y.shape
    V = logits.shape[-1]
    r = (1 + beta) * token_logprobs(logp_base, y) - beta * token_logprobs(logp, y)  # (X, k, L)
    g = np.cumsum(r[:, :, ::-1], axis=2)[:, :, ::-1]  # reward-to-go (X, k, L)
    adv = g - (g.sum(1, keepdims=True) - g) / (k - 1)  # leave-one-out baseline
    prev = np.concatenate([np.full((X, k, 1), START), y[:, :, :-1]], axis=2)
    xs, ts = np.arange(X)[:, None, None], np.arange(L)[None, None, :]
    pi = np.exp(logp[xs, ts, prev])  # (X, k, L, V) policy at each visited state
    score = -pi * adv[..., None]  # d log pi(y_t | s_t) / d logits = onehot(y_t) - pi(. | s_t)
    score[xs, np.arange(k)[None, :, None], ts, y] += adv
    state = (xs * L + ts) * V + prev  # (X, k, L) flat index of the visited state
    flat = (state[..., None] * V + np.arange(V)).ravel()  # one slot per (state, token)
    return np.bincount(flat, weights=(score / k).ravel(), minlength=logits.size).reshape(logits.shape)


def rl_sharpen(logp_base: np.ndarray, budgets, *, beta: float, samples_per_step: int, lr: float,
               rng: np.random.Generator, logp_star: np.ndarray | None = None, record_every: int = 0,
               explore: bool = True, decay: bool = False):
    """RL-sharpening (the paper's Section 4, RLHF-Sharpening): policy gradient (Adam on the logits) on the
    KL-regularised self-reward, from pi_base, sampling `samples_per_step` sequences per prompt at every step.

    ``explore`` (default): the samples come from the current policy (online exploration). With ``explore=False``
    RL is restricted to a fixed pool of base samples (offline RL): one pool of max(budgets) samples of pi_base per
    prompt is drawn first, and the step that brings the budget to m draws its samples from the policy renormalised
    on the pool's first m samples (importance resampling, weights pi / pi_base per pool entry), so at budget m the
    policy has seen exactly m base samples per prompt, as SFT has, and can generate no other answer. This removes
    exactly the online exploration (new answers) and keeps the objective, the update formula, the reward, the KL
    term, the credit assignment, the number of steps and the step size. ``decay``: the step size falls linearly
    from `lr` to 0 over the run (a stochastic-approximation schedule, so a long run settles at a fixed point
    instead of hovering around it); without it the step size is constant.

    One run to the largest budget; the policy is kept whenever the samples drawn per prompt reach one of
    `budgets` (with a constant step size this equals separate runs stopped there). Returns
    ({budget: logp}, trace), the trace holding (samples per prompt, mean KL(pi || pi*_beta)) every
    `record_every` steps when logp_star is given.
    """
    # The policy is kept only on the states pi_base can reach (Reachable): elsewhere no sample ever goes, the
    # gradient is exactly 0 and Adam leaves the logits as they are, so those rows stay pi_base's; each step's
    # arithmetic is the plain one on the reachable rows, the same numbers (the tests compare bit for bit).
    states = Reachable(logp_base)
    V = logp_base.shape[-1]
    logits = states.rows_of(logp_base)  # (R, V)
    opt = Adam(logits.shape, lr)
    kept, trace = {}, []
    steps = max(budgets) // samples_per_step
    if not explore:  # the fixed pool of base samples, and their log pi_base, drawn once
        pool = sample(logp_base, steps * samples_per_step, rng)  # (X, M, L)
        pool_logb = seq_logprob(logp_base, pool)  # (X, M)
        xs = np.arange(len(pool))[:, None]
        # the same numbers either way; PrefixScorer reads each distinct prefix once (chains under 16 tokens)
        scorer = (PrefixScorer if pool.shape[2] < 16 else PoolScorer)(pool, V, states.rowmap)
    for step in range(steps + 1):
        spent = step * samples_per_step
        logp = normalise(logits)  # once per step: the kept policy, the sampler and the gradient share it
        if spent in budgets:
            kept[spent] = states.table(logp)
        if logp_star is not None and record_every and (step % record_every == 0 or step == steps):
            trace.append((spent, float(kl(states.table(logp), logp_star).mean())))
        if step == steps:
            break
        if explore:
            y = states.sample(logp, samples_per_step, rng)
        else:  # the policy renormalised on the pool's first spent + k samples (importance resampling)
            S = spent + samples_per_step
            support = pool[:, :S]
            log_w = scorer.seq_logprob(logp, S) - pool_logb[:, :S]  # (X, S): log pi / pi_base of the pool
            cdf = np.cumsum(np.exp(log_w - logsumexp_rows(log_w)), axis=1)
            j = np.minimum(count_below(cdf, rng.random((len(pool), samples_per_step))), S - 1)  # (X, k)
            y = support[xs, j]
        logits = opt.step(logits, states.policy_gradient(logp, logp_base, y, beta),
                          lr=lr * (1 - step / steps) if decay else None)
    return kept, trace


class Reachable:
    """The states (x, t, previous token) a chain reaches with positive probability, as rows of its table: the
    policy of :func:`rl_sharpen` lives on these rows, (R, V), and the other rows keep the base model's conditionals.

    ``rowmap`` maps each state's flat index (x L + t) V + a to its row, -1 where unreachable. :meth:`sample` and
    :meth:`policy_gradient` are :func:`sample` and :func:`policy_gradient` on the reachable rows (the same
    arithmetic, row by row and slot by slot), :meth:`table` the whole table of a policy given on them.
    """

    def __init__(self, logp_base: np.ndarray):
        X, L, V, _ = logp_base.shape
        self.shape = logp_base.shape
        reach = (state_marginals(logp_base) > 0).ravel()  # (X L V,)
        self.rows = np.flatnonzero(reach)
        self.rowmap = np.full(reach.size, -1)
        self.rowmap[self.rows] = np.arange(len(self.rows))
        self.base = normalise(logp_base).reshape(-1, V)  # the rows no sample reaches keep these

    def rows_of(self, table: np.ndarray) -> np.ndarray:
        return table.reshape(-1, self.shape[-1])[self.rows].copy()

    def table(self, rows: np.ndarray) -> np.ndarray:
        out = self.base.copy()
        out[self.rows] = rows
        return out.reshape(self.shape)

    def _row(self, xs, t, prev) -> np.ndarray:
        X, L, V, _ = self.shape
        return self.rowmap[(xs * L + t) * V + prev]

    def sample(self, logp: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """:func:`sample` from the policy whose reachable rows are logp (R, V): (X, n, L)."""
        X, L, V, _ = self.shape
        cdf = np.cumsum(np.exp(logp), axis=-1)  # (R, V)
        y = np.empty((X, n, L), dtype=np.int64)
        prev = np.full((X, n), START)
        u = rng.random((X, n, L))
        xs = np.arange(X)[:, None]
        for t in range(L):
            c = cdf.take(self._row(xs, t, prev), axis=0)  # (X, n, V), as cdf[rows] (take: faster)
            y[:, :, t] = np.minimum((u[:, :, t, None] > c).sum(-1), V - 1)
            prev = y[:, :, t]
        return y

    def policy_gradient(self, logp: np.ndarray, logp_base: np.ndarray, y: np.ndarray, beta: float) -> np.ndarray:
        """:func:`policy_gradient` on the reachable rows, logp (R, V) the policy's: (R, V)."""
        X, k, L = y.shape
        V = self.shape[-1]
        prev = np.concatenate([np.full((X, k, 1), START), y[:, :, :-1]], axis=2)
        xs, ts = np.arange(X)[:, None, None], np.arange(L)[None, None, :]
        row = self._row(xs, ts, prev)  # (X, k, L) the visited states' rows
        r = (1 + beta) * token_logprobs(logp_base, y) - beta * logp.ravel()[row * V + y]  # (X, k, L)
        g = np.cumsum(r[:, :, ::-1], axis=2)[:, :, ::-1]  # reward-to-go (X, k, L)
        adv = g - (g.sum(1, keepdims=True) - g) / (k - 1)  # leave-one-out baseline
        pi = np.exp(logp.take(row, axis=0))  # (X, k, L, V) policy at each visited state (logp[row], by take)
        score = -pi * adv[..., None]  # d log pi(y_t | s_t) / d logits = onehot(y_t) - pi(. | s_t)
        score[xs, np.arange(k)[None, :, None], ts, y] += adv
        flat = (row[..., None] * V + np.arange(V)).ravel()  # one slot per (state, token)
        return np.bincount(flat, weights=(score / k).ravel(), minlength=logp.size).reshape(logp.shape)


# ---- the offline arm's per-step arithmetic, made cheap (the same numbers as the direct expressions) ------------
class PoolScorer:
    """log pi(y | x) of a fixed pool's first S entries per prompt under any chain, scoring each distinct
    (prompt, sequence) of the pool once.

    The direct expression gathers the (X, S, L) token log-probabilities and sums over L; the pool repeats
    sequences (a peaked base model), so here the distinct ones are ordered by their first column in the pool, the
    first n_S of them are those among the first S columns, and each entry reads its sequence's sum. The sums run
    over the same L values in the same order: the result equals ``seq_logprob(logp, pool[:, :S])`` exactly
    (tests/papers/test_sharpening.py checks it bit for bit).
    """

    def __init__(self, pool: np.ndarray, vocab: int, rowmap: np.ndarray | None = None):
        X, M, L = pool.shape
        self.shape = pool.shape
        if X * vocab ** L >= 2 ** 62:
            raise ValueError(f"PoolScorer: {X} prompts of {L} tokens over {vocab} overflow an int64 key")
        # one integer per (prompt, sequence): the prompt, then the tokens as digits base vocab
        key = np.repeat(np.arange(X, dtype=np.int64), M) * vocab ** L + pool.reshape(X * M, L) @ (
            vocab ** np.arange(L, dtype=np.int64))
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        col, xr = first % M, first // M  # where each distinct (prompt, sequence) first occurs
        order = np.lexsort((xr, col))  # by first column: those of the first S columns come first
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        self.entry = rank[inverse.ravel()].reshape(X, M)  # (X, M): each pool entry's distinct sequence
        self.first_col = col[order]  # nondecreasing
        seqs = pool.reshape(X * M, L)[first[order]]  # (U, L)
        prev = np.concatenate([np.full((len(seqs), 1), START), seqs[:, :-1]], axis=1)
        state = (xr[order][:, None] * L + np.arange(L)) * vocab + prev  # (U, L) the visited states
        if rowmap is not None:  # the policy is given on reachable rows (Reachable), one row per state
            state = rowmap[state]
        self.flat = state * vocab + seqs  # (U, L) the entries of the policy's table each token reads
        self.flat_t = np.ascontiguousarray(self.flat.T)  # (L, U): position-major, for :func:`row_sums`

    def seq_logprob(self, logp: np.ndarray, S: int) -> np.ndarray:
        """log pi(y | x) of pool[:, :S] under the chain logp, (X, S)."""
        n = int(np.searchsorted(self.first_col, S, side="left"))  # the distinct sequences among the first S columns
        score = row_sums(logp.ravel()[self.flat_t[:, :n]])  # (n,): logp.ravel()[self.flat[:n]].sum(-1)
        return score[self.entry[:, :S]]


class PrefixScorer:
    """:class:`PoolScorer`'s log pi(y | x) of a fixed pool's first S entries per prompt, (X, S), with each distinct
    PREFIX (prompt, y_0 .. y_t) of the pool's sequences read once: a trie, whose nodes at depth t hold the prefixes
    of length t + 1 and carry their partial sums to their children.

    Why: on the offline arm's pools (rl_sharpen with explore=False, the absorbing chain at K = 3 .. 5, 2048 samples
    per prompt) the distinct sequences share their first tokens, so the trie has 2.5 to 4x fewer nodes than the
    distinct sequences have tokens (measured: 0.44M nodes against 1.08M tokens at K = 5), and the per-step gather
    of the policy's log-probabilities shrinks by that much.

    The same numbers: each node carries the partial sums of numpy's pairwise order for a row of L values
    (:func:`row_sums`: for L < 8 one running sum from -0.0; for 8 <= L < 16 ((g0 + g1) + (g2 + g3)) + ((g4 + g5) +
    (g6 + g7)), then g8 .. one by one; then + 0.0), so each sequence's sum is built from the same values by the
    same additions in the same order: the result equals PoolScorer's and ``seq_logprob(logp, pool[:, :S])`` bit for
    bit (tests/papers/test_sharpening.py). Chains of L >= 16 tokens (numpy's order has more blocks there) are
    refused; rl_sharpen uses PoolScorer for them.
    """

    def __init__(self, pool: np.ndarray, vocab: int, rowmap: np.ndarray | None = None):
        X, M, L = pool.shape
        if L >= 16:
            raise ValueError(f"PrefixScorer: chains of L = {L} >= 16 tokens (use PoolScorer)")
        if X * vocab ** L >= 2 ** 62:
            raise ValueError(f"PrefixScorer: {X} prompts of {L} tokens over {vocab} overflow an int64 key")
        self.shape, self.L = pool.shape, L
        # one integer per (prompt, sequence), the first token most significant: sorted keys are lexicographic, so
        # each prefix's sequences are contiguous
        digits = vocab ** np.arange(L - 1, -1, -1, dtype=np.int64)
        key = np.repeat(np.arange(X, dtype=np.int64), M) * vocab ** L + pool.reshape(X * M, L) @ digits
        uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        col = first % M  # the column where each distinct sequence first occurs
        self.flat, self.parent, self.first_col = [], [], []
        rank_prev = node_prev = None
        for t in range(L):
            prefix = uniq // vocab ** (L - 1 - t)  # (U,) nondecreasing: x, y_0 .. y_t
            start = np.flatnonzero(np.r_[True, prefix[1:] != prefix[:-1]])  # each node's first sequence
            node = np.cumsum(np.r_[True, prefix[1:] != prefix[:-1]]) - 1  # (U,) each sequence's node at depth t
            p = prefix[start]
            node_col = np.minimum.reduceat(col, start)  # where the prefix first occurs in the pool
            order = np.argsort(node_col, kind="stable")  # by first column: those of the first S columns come first
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            xs, token = p // vocab ** (t + 1), p % vocab
            prev = (p // vocab) % vocab if t else np.full(len(p), START)
            state = (xs * L + t) * vocab + prev
            if rowmap is not None:  # the policy is given on reachable rows (Reachable), one row per state
                state = rowmap[state]
            self.flat.append((state * vocab + token)[order])
            self.first_col.append(node_col[order])
            self.parent.append(None if t == 0 else rank_prev[node_prev[start]][order])
            rank_prev, node_prev = rank, node
        self.entry = rank_prev[inverse.ravel()].reshape(X, M)  # (X, M): each pool entry's leaf

    def seq_logprob(self, logp: np.ndarray, S: int) -> np.ndarray:
        """log pi(y | x) of pool[:, :S] under the chain logp, (X, S)."""
        lp = logp.ravel()
        L = self.L
        state = ()
        for t in range(L):
            n = int(np.searchsorted(self.first_col[t], S, side="left"))  # the prefixes among the first S columns
            g = lp.take(self.flat[t][:n])  # take: the same gather as lp[...], faster on these index arrays
            if t:
                state = tuple(s.take(self.parent[t][:n]) for s in state)
            if L < 8:  # one running sum from -0.0
                state = (-0.0 + g,) if t == 0 else (state[0] + g,)
            elif t in (0, 2, 4, 6):  # a pair's first value waits for its second
                state = state + (g,)
            elif t == 1:
                state = (state[0] + g,)  # g0 + g1
            elif t == 3:
                state = (state[0] + (state[1] + g),)  # (g0 + g1) + (g2 + g3)
            elif t == 5:
                state = (state[0], state[1] + g)  # g4 + g5
            elif t == 7:
                state = (state[0] + (state[1] + (state[2] + g)),)  # A + ((g4 + g5) + (g6 + g7))
            else:  # the rest one by one
                state = (state[0] + g,)
        score = state[0] + 0.0
        return score.take(self.entry[:, :S])


def row_sums(g: np.ndarray) -> np.ndarray:
    """``g.T.sum(-1)`` for g (L, n), i.e. the sums of n rows of L values stored position-major, by numpy's own
    pairwise order for a row (numpy's pairwise_sum for L <= 128: below 8 values one running sum; from 8 eight
    running sums over the blocks of 8, combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the rest
    one by one), so the same numbers, with n-wide vector adds instead of n short reductions (about 2x faster on
    the offline pool's ~10^5 sequences; tests/papers/test_sharpening.py checks it bit for bit against .sum(-1))."""
    L, n = g.shape
    if L > 128:  # numpy recurses on halves there; not needed by these chains
        return g.T.sum(-1)
    if L < 8:
        res = np.full(n, -0.0)  # pairwise_sum starts at -0.0
        for i in range(L):
            res += g[i]
    else:
        r = g[:8].copy()
        i = 8
        while i < L - L % 8:
            r += g[i:i + 8]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for j in range(i, L):
            res += g[j]
    res += 0.0  # the reduction adds the row's sum to its identity +0.0 (a sum of -0.0 reads +0.0)
    return res


def logsumexp_rows(a: np.ndarray) -> np.ndarray:
    """scipy.special.logsumexp(a, axis=1, keepdims=True) for a real 2-d array with a finite maximum per row, by
    scipy's own arithmetic (the maxima are counted out of the sum, log1p of the rest): the same numbers without
    its per-call overhead (tests/papers/test_sharpening.py checks it bit for bit)."""
    a_max = a.max(axis=1, keepdims=True)
    at_max = a == a_max
    m = at_max.sum(axis=1, keepdims=True, dtype=a.dtype)
    s = np.exp(np.where(at_max, -np.inf, a) - a_max).sum(axis=1, keepdims=True, dtype=a.dtype)
    s = np.where(s == 0, s, s / m)
    return np.log1p(s) + np.log(m) + a_max


def count_below(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """For each row x and each u[x, i], the number of entries of cdf[x] below u[x, i]: ``(u[..., None] >
    cdf[:, None, :]).sum(-1)``, which for a nondecreasing cdf (a cumulative sum) is a left binary search."""
    if cdf.shape[1] <= 64:
        return (u[:, :, None] > cdf[:, None, :]).sum(-1)
    return _search_left(cdf, u)


def _search_left(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``np.stack([np.searchsorted(c, r, side="left") for c, r in zip(cdf, u)])`` for rows c of a nondecreasing
    cdf (X, S) and u (X, k): the number of entries of each row below each u, by one binary search for all rows at
    once (log2 S rounds of a gather and a comparison, instead of X calls); the same integers (tests)."""
    X, S = cdf.shape
    pos = np.zeros(u.shape, dtype=np.int64)  # entries cdf[x, :pos] are all below u
    xs = np.arange(X)[:, None]
    step = 1 << (S.bit_length() - 1)  # the largest power of two <= S
    while step:
        cand = pos + step  # is cdf[x, cand - 1] < u as well?
        ok = cand <= S
        below = cdf[xs, np.minimum(cand, S) - 1] < u
        pos = np.where(ok & below, cand, pos)
        step >>= 1
    return pos
