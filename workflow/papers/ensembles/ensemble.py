"""The paper's quantities, computed from the members' class probabilities P (M, N, C) on a test set with labels y (N,).

Notation: member m predicts p_m(x) in the simplex; the ensemble of M members predicts the mean
p̄_M(x) = (1/M) sum_m p_m(x) (the paper's deep ensemble averages probabilities); its accuracy is
mean_n [argmax_c p̄_M(x_n)_c = y_n] and its loss is the NLL, mean_n -log p̄_M(x_n)_{y_n}.

- :func:`curves`: accuracy, NLL and the Jensen gap of the ensemble at every M = 1 ... M_max.
- :func:`ks_distances`: how far apart two members' output distributions are (claim (c)), with
  :func:`exchangeable_distances` the floor that sampling alone gives, :func:`ks_margin` the margin over it,
  and :func:`equivalence_pvalues` the significance test (reported, not decided on).
- :func:`estimate`: the estimator that predicts accuracy and NLL at every M from K members (pinned to the
  K-member ensemble's measured values at M = K), and
  :func:`planted_members`, i.i.d. members on which its premise holds by construction (its positive control).

The official code (yipei-wang/DeepEnsembleDemystified) could not be read from this machine (no stored
snapshot and no indexed copy); the test and the estimator follow the paper's statement of distributional
equivalence and its per-sample statistical view as written in the docstrings below, which say where we
chose a detail ourselves.
"""
from __future__ import annotations

import numpy as np
from scipy import stats


def true_class(P: np.ndarray, y: np.ndarray) -> np.ndarray:
    """p_m(x_n)_{y_n}: (M, N) from P (M, N, C)."""
    return np.take_along_axis(P, y[None, :, None], axis=2)[..., 0]


def member_metrics(P: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each member's test accuracy (M,) and NLL (M,)."""
    return (P.argmax(2) == y).mean(1), -np.log(true_class(P, y)).mean(1)


def curves(P: np.ndarray, y: np.ndarray, orderings: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The ensemble at every size M = 1 ... M_max, averaged over random orderings of the members.

    Each ordering is a random permutation pi of the members; the ensemble of size M is its first M
    members (nested, as one would grow an ensemble). Per M, averaged over the orderings:

        acc(M), nll(M)          the ensemble's accuracy and NLL
        member_nll(M)           (1/M) sum_{m <= M} NLL(p_m), the mean loss of the members it averages
        jensen_gap(M)           member_nll(M) - nll(M) >= 0 (Jensen's inequality: -log is convex)
        member_acc(M)           the members' mean accuracy; acc(M) - member_acc(M) is the same gap
                                for the 0-1 loss, which is not convex (Jensen's inequality says nothing)

    The first ordering is the identity, so with orderings = 1 the curve is that of members 0, 1, 2, ...
    """
    M = len(P)
    acc_m, nll_m = member_metrics(P, y)
    rng = np.random.default_rng(seed)
    sizes = np.arange(1, M + 1)
    out = {k: np.zeros(M) for k in ("acc", "nll", "member_acc", "member_nll")}
    for r in range(orderings):
        pi = np.arange(M) if r == 0 else rng.permutation(M)
        p_bar = np.cumsum(P[pi], axis=0) / sizes[:, None, None]  # (M, N, C): ensemble of the first M
        out["acc"] += (p_bar.argmax(2) == y).mean(1)
        out["nll"] += -np.log(true_class(p_bar, y)).mean(1)
        out["member_acc"] += np.cumsum(acc_m[pi]) / sizes
        out["member_nll"] += np.cumsum(nll_m[pi]) / sizes
    out = {k: v / orderings for k, v in out.items()}
    out["jensen_gap"] = out["member_nll"] - out["nll"]
    out["M"] = sizes
    return out


def disagreement(P: np.ndarray) -> float:
    """Mean over member pairs i < j of the fraction of test points where their predicted classes differ."""
    pred = P.argmax(2)  # (M, N)
    M = len(pred)
    pairs = [(pred[i] != pred[j]).mean() for i in range(M) for j in range(i + 1, M)]
    return float(np.mean(pairs))


def ks_distances(P: np.ndarray, y: np.ndarray, pairs) -> np.ndarray:
    """The two-sample Kolmogorov-Smirnov distance D_ij = sup_t |F_i(t) - F_j(t)| per pair (i, j), F_m the
    empirical CDF over the N test points of member m's true-class probability s_m(x) = p_m(x)_y.

    The equivalence claim (c) rests on this distance, not on a p-value: a KS test at a fixed level rejects any
    fixed difference once N is large (at the paper's N = 10,000 almost every pair), while D estimates the size
    of the difference whatever N is: claim (c) compares its excess over the exchangeable floor
    (:func:`exchangeable_distances`) with a fixed margin (:func:`ks_margin`).
    """
    s = true_class(P, y)  # (M, N)
    return np.array([stats.ks_2samp(s[i], s[j]).statistic for i, j in pairs])


def ks_margin(alpha: float, n: int) -> float:
    """The smallest KS distance a two-sample KS test at level `alpha` can detect with two samples of `n` each:
    the asymptotic critical value c(alpha) sqrt(2 / n), c(alpha) = sqrt(-ln(alpha / 2) / 2) (1.358 at 0.05).

    Claim (c)'s margin: at the paper's test-set size (CIFAR-10, 10,000 images) the paper's own test cannot tell
    two members apart whose output distributions differ by less than this (0.0192 at alpha = 0.05), so members
    whose distance exceeds what sampling alone gives (:func:`exchangeable_distances`) by less than it are
    "identical in distribution" in the paper's sense; unlike a p-value at this run's N, the margin does not
    depend on how many test images this run has.
    """
    return float(np.sqrt(-np.log(alpha / 2) / 2) * np.sqrt(2 / n))


def exchangeable_distances(P: np.ndarray, y: np.ndarray, pairs, seed: int) -> np.ndarray:
    """KS distances of pairs made exchangeable by construction (claim (c)'s positive control).

    For each pair (i, j), each test image's two outputs are swapped between the members with probability 1/2,
    giving two pseudo-members that share the pair's point-wise disagreement and dependence through the images,
    but whose output distributions are equal by construction: their D is what sampling alone gives.
    """
    s = true_class(P, y)  # (M, N)
    rng = np.random.default_rng(seed)
    out = []
    for i, j in pairs:
        swap = rng.random(s.shape[1]) < 0.5
        out.append(stats.ks_2samp(np.where(swap, s[i], s[j]), np.where(swap, s[j], s[i])).statistic)
    return np.array(out)


def planted_members(P: np.ndarray, members: int, disagreement_target: float, seed: int,
                    iters: int = 30) -> np.ndarray:
    """i.i.d. members with a given disagreement, around the mean of the members P (K, N, C): claims (b) and (d)'s
    positive control, a setting in which the estimator's premise (members' outputs at each image are i.i.d.
    draws of one distribution) holds by construction.

    Member m's logits at image n are log p̄(x_n) + sigma z_mn, z ~ N(0, I_C) (one standard-normal draw per
    member, image and class, fixed by `seed`), p̄ the mean of P; sigma is set by bisection so that the planted
    members' mean pairwise disagreement (:func:`disagreement`) equals `disagreement_target`, that of the real
    members. Returns (members, N, C) probabilities.
    """
    log_mean = np.log(np.clip(P.mean(0), 1e-12, 1.0))  # (N, C)
    z = np.random.default_rng(seed).standard_normal((members,) + log_mean.shape)  # (M, N, C)

    def draw(sigma):
        logits = log_mean[None] + sigma * z
        q = np.exp(logits - logits.max(-1, keepdims=True))
        return q / q.sum(-1, keepdims=True)

    lo, hi = 0.0, 1.0
    while disagreement(draw(hi)) < disagreement_target and hi < 64:  # bracket the target
        lo, hi = hi, 2 * hi
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if disagreement(draw(mid)) < disagreement_target else (lo, mid)
    return draw((lo + hi) / 2)


def equivalence_pvalues(P: np.ndarray, y: np.ndarray, pairs) -> np.ndarray:
    """Do two members' outputs form one distribution? A two-sample Kolmogorov-Smirnov test per pair.

    The paper's distributional equivalence (Sec. 3): members i and j predict differently point by point,
    but the distribution of their outputs over the data is the same. The output tested is the probability
    of the true class, s_m(x) = p_m(x)_y, the quantity that accuracy and NLL are made of.

    Statistic, per pair (i, j): D_ij = sup_t |F_i(t) - F_j(t)|, with F_m the empirical CDF of
    {s_m(x_n)}_{n=1..N} over the N test points.
    Null distribution: under H0 (F_i = F_j, two independent samples of size N) D_ij has the two-sample
    Kolmogorov distribution; p_ij is its upper tail at the observed D_ij (scipy.stats.ks_2samp, exact
    for N <= 10,000, else asymptotic). The two samples share the test points, and members agree on most
    of them, so they are positively dependent, which makes this p-value conservative (too large).
    Every pair's p-value is returned: no minimum-p or Bonferroni rule summarises them, so the share of
    rejections is in plain view; disjoint pairs (a perfect matching) give independent tests. The table reports
    them; claim (c) decides on the distance (:func:`ks_distances`), since a significance test rejects any
    difference, however small, at a large enough N.

    Args:
        P: (M, N, C) class probabilities; y: (N,) labels; pairs: (i, j) member indices.
    Returns:
        (len(pairs),) p-values.
    """
    s = true_class(P, y)  # (M, N)
    return np.array([stats.ks_2samp(s[i], s[j]).pvalue for i, j in pairs])


def estimate(P: np.ndarray, y: np.ndarray, sizes) -> dict[str, np.ndarray]:
    """Predict the ensemble's accuracy and NLL at every size M from the K members in P (K, N, C).

    Distributional equivalence makes the members' outputs at one test point x i.i.d. draws of one random
    variable, so the ensemble's output there is a mean of M i.i.d. draws: by the central limit theorem
    it is about normal with the members' mean and 1/M of their variance. Per test point, from the K
    members (sample mean, sample variance with ddof = 1):

    Accuracy. The margin d_m(x) = p_m(x)_y - p_m(x)_{c*}, c* the runner-up class of the K-member mean;
    the ensemble is right when its mean margin is positive, with probability about
        q(M) = mean_n Phi(sqrt(M) mu_d(x_n) / sigma_d(x_n))      (Phi: standard normal CDF)
    (sigma_d = 0: 1 if mu_d > 0, 1/2 if mu_d = 0, 0 otherwise). The level q(K) is biased at a few members (a
    normal law for the mean of K bounded draws, the runner-up picked from the same members), so the estimate is
    pinned to what the K members measure, and q supplies the change beyond them (our choice, from the same CLT):
        acc_hat(M) = acc_K + q(M) - q(K),    acc_K the measured accuracy of the K-member ensemble,
    which equals the K-member ensemble's accuracy at M = K.

    NLL. Second-order expansion of -log around the mean mu = E p_m(x)_y, with Var p̄_M = sigma^2 / M:
        E[-log p̄_M] = -log mu + sigma^2 / (2 M mu^2) + O(M^-2).
    The plug-in mu_hat is itself a K-member mean, so -log mu_hat already carries sigma^2 / (2 K mu^2);
    removing it (our finite-K correction, from the same expansion) gives
        nll_hat(M) = mean_n [-log mu_hat(x_n) + sigma_hat^2(x_n) / (2 mu_hat(x_n)^2) (1/M - 1/K)],
    which equals the K-member ensemble's NLL at M = K.
    """
    K = len(P)
    sizes = np.asarray(sizes, dtype=float)
    mean = P.mean(0)  # (N, C): the K-member ensemble
    s = true_class(P, y)  # (K, N)
    runner_up = np.where(np.arange(P.shape[2]) == y[:, None], -np.inf, mean).argmax(1)  # (N,)
    d = s - true_class(P, runner_up)  # (K, N)
    mu_d, sd_d = d.mean(0), d.std(0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd_d > 0, mu_d / sd_d, np.sign(mu_d) * np.inf)  # (N,)

    def q(m):
        return np.where(np.isnan(z), 0.5, stats.norm.cdf(np.sqrt(m) * z)).mean()

    acc_k = (mean.argmax(1) == y).mean()
    acc = np.array([acc_k + q(m) - q(K) for m in sizes])
    mu, var = s.mean(0), s.var(0, ddof=1)
    curvature = var / (2 * mu**2)  # (N,)
    nll = np.array([(-np.log(mu) + curvature * (1 / m - 1 / K)).mean() for m in sizes])
    return {"M": sizes.astype(int), "acc": acc, "nll": nll}
