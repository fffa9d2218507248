"""Layers on SPD(n) and on the Poincare ball built on the Busemann point-to-hyperplane distance, and the baselines.

Paper: Nguyen et al., ICLR 2025. Sec. 4.1: multinomial logistic regression whose logit for class k is
the (scaled) signed distance of the input to the class's hyperplane; Sec. 4.2: an FC layer whose
outputs are distances to learned hyperplanes; Sec. 4.3: an attention whose weights come from those
distances and whose aggregation is a weighted Frechet mean. Baselines: LogEig + linear, SPDNet
(Huang & Van Gool 2017: BiMap, ReEig, LogEig) under either head, and on the ball
a Euclidean MLR and Ganea et al.'s (2018) gyroplane MLR.
"""
from __future__ import annotations

import torch
from torch import nn

from papers.symspace import geometry as geo


def sym(x: torch.Tensor) -> torch.Tensor:
    return (x + x.transpose(-1, -2)) / 2


def triu_vec(x: torch.Tensor) -> torch.Tensor:
    """The upper triangle of (..., n, n) as (..., n(n+1)/2), off-diagonal entries times sqrt 2 (an isometry)."""
    n = x.shape[-1]
    i, j = torch.triu_indices(n, n)
    scale = torch.where(i == j, 1.0, 2 ** 0.5).to(x.dtype)
    return x[..., i, j] * scale


def spd_param(s: torch.Tensor) -> torch.Tensor:
    """exp(sym(S)): an unconstrained parameter mapped onto SPD(n)."""
    return geo.sym_funcm(sym(s), "exp")


def orthogonal_param(a: torch.Tensor) -> torch.Tensor:
    """matrix_exp of the skew part of A: an unconstrained parameter mapped onto SO(n)."""
    return torch.linalg.matrix_exp(a - a.transpose(-1, -2))


class InputCache:
    """Remember fn(x) of the last input x, for parameter-free maps of a fixed input.

    Full-batch training feeds the same tensor at every step; its LogEig (or its token logarithms, or
    the uniform Frechet mean of fixed tokens) then needs computing once, not once per step.
    """

    def __init__(self):
        self.key, self.value = None, None

    def __call__(self, x: torch.Tensor, fn):
        if x is not self.key:
            with torch.no_grad():
                self.key, self.value = x, fn(x)
        return self.value


class LogEig(nn.Module):
    """X -> vec(log X) (the tangent space at the identity)."""

    def forward(self, x):  # (B, n, n) -> (B, n(n+1)/2)
        return triu_vec(geo.sym_funcm(x, "log"))


class BiMap(nn.Module):
    """X -> W^T X W with W (n, m) kept semi-orthogonal by a QR retraction of the free parameter."""

    def __init__(self, n: int, m: int, generator: torch.Generator):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, m, generator=generator, dtype=torch.float64))

    def forward(self, x):
        w, _ = torch.linalg.qr(self.weight)  # (n, m), orthonormal columns
        return w.transpose(0, 1) @ x @ w


class ReEig(nn.Module):
    """Eigenvalues clamped from below at eps (SPDNet's non-linearity)."""

    def __init__(self, eps: float = 1e-4):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return geo.sym_funcm(x, (lambda ev: ev.clamp_min(self.eps), lambda ev: (ev > self.eps).to(ev.dtype)))


class BusemannDistance(nn.Module):
    """Signed distances of X in SPD(n) to K hyperplanes (Sec. 3.3 closed form), scaled by |a_k|.

    Hyperplane k: base point P_k = exp(S_k), rotation R_k = exp(skew A_k), and normal direction
    h_k = sort_desc(a_k) / |a_k|_{alpha,beta} (decreasing entries: the Weyl chamber in which the
    reversed-Cholesky closed form holds). Output (B, K):

        v_k(X) = -|a_k|_{alpha,beta} B_{h_k}(R_k^T P_k^-1/2 X P_k^-1/2 R_k) = <sort(a_k), log diag D_k>_{alpha,beta}.
    """

    def __init__(self, n: int, k: int, alpha: float, beta: float, generator: torch.Generator):
        super().__init__()
        if not (alpha > 0 and alpha + n * beta > 0):
            raise ValueError(f"symspace: (alpha, beta) = ({alpha}, {beta}) is not a Riemannian metric on SPD({n}): "
                             "needs alpha > 0 and alpha + n beta > 0")
        self.alpha, self.beta = alpha, beta
        # fused: the isometry as A^T X A, A = P^-1/2 R (geometry.spd_to_base_fused; the attention network's layers:
        # half the matrix products); off elsewhere, so that claim (b)'s heads keep their earlier rounding.
        self.fused = False
        self.s = nn.Parameter(0.01 * torch.randn(k, n, n, generator=generator, dtype=torch.float64))
        self.r = nn.Parameter(0.01 * torch.randn(k, n, n, generator=generator, dtype=torch.float64))
        self.a = nn.Parameter(0.1 * torch.randn(k, n, generator=generator, dtype=torch.float64))

    def forward(self, x):  # (B, n, n) -> (B, K)
        # exp(S)^-1/2 = exp(-S/2); matrix_exp, not eigh, whose gradient blows up at the repeated
        # eigenvalues of the initial S ~ 0.
        p_inv_sqrt = torch.linalg.matrix_exp(-sym(self.s) / 2)  # (K, n, n)
        rot = orthogonal_param(self.r)  # (K, n, n)
        to_base = geo.spd_to_base_fused if self.fused else geo.spd_to_base
        y = to_base(x.unsqueeze(1), p_inv_sqrt, rot)  # (B, K, n, n)
        h = torch.sort(self.a, dim=-1, descending=True).values  # (K, n), unnormalised: the scale is |a|
        return geo.ab_inner(h, geo.log_diag_udu(sym(y)), self.alpha, self.beta)


class LogEigLinear(nn.Module):
    def __init__(self, n, classes, generator):
        super().__init__()
        self.head = nn.Linear(n * (n + 1) // 2, classes, dtype=torch.float64)
        _init(self.head, generator)
        self.log_eig = InputCache()

    def forward(self, x):
        return self.head(self.log_eig(x, LogEig()))


class SPDNet(nn.Module):
    """BiMap -> ReEig -> a classification head (Huang & Van Gool 2017, one BiMap/ReEig block).

    ``head="logeig_linear"``: LogEig + linear, SPDNet's own head; ``head="busemann_mlr"``: the paper's Busemann
    MLR (Sec. 4.1) on the backbone's SPD(m) output, as the paper's SPD networks put it after their BiMap/ReEig
    layers. The backbone's initial weights come from `generator`, the head's from `head_generator` (default: the
    same generator), so that two heads can share one initial backbone.
    """

    def __init__(self, n, m, classes, generator, head: str = "logeig_linear", head_generator=None):
        super().__init__()
        self.bimap, self.reeig = BiMap(n, m, generator), ReEig()
        head_generator = generator if head_generator is None else head_generator
        if head == "logeig_linear":
            self.log_eig, self.head = LogEig(), nn.Linear(m * (m + 1) // 2, classes, dtype=torch.float64)
            _init(self.head, head_generator)
        elif head == "busemann_mlr":
            self.log_eig, self.head = nn.Identity(), BusemannMLR(m, classes, 1.0, 0.0, head_generator)
        else:
            raise ValueError(f"symspace: unknown SPDNet head {head!r} (logeig_linear, busemann_mlr)")

    def forward(self, x):  # (B, n, n) -> (B, classes)
        return self.head(self.log_eig(self.reeig(self.bimap(x))))


class SPDNetReplicas(nn.Module):
    """R independent :class:`SPDNet` of one head type side by side (speed only, no change of method): every
    parameter gains a leading replica dimension, stacked from the given networks (so each replica starts from its
    own network's initial weights), and the forward maps (N, n, n) inputs (shared by the replicas) or (R, N, n, n)
    to (R, N, classes), replica r computing what ``nets[r]`` computes (one BiMap -> ReEig block, Huang & Van Gool
    2017; LogEig + linear, or the Busemann MLR of Sec. 4.1). With the per-replica loss of papers.symspace.train.fit
    each replica gets the gradient and Adam step it would get alone: claim (b)'s head initialisations and its
    permuted-label control train in one full-batch run instead of one run each, and the LogEig head takes
    log(ReEig(Z)) from one eigendecomposition of Z (ReEig keeps the eigenvectors: the Daleckii-Krein backward of the
    composite equals the chained one). The floats round differently (batched products); tests/papers/test_symspace.py
    checks the equality."""

    def __init__(self, nets: list):
        super().__init__()
        kinds = {type(net.head).__name__ for net in nets}
        if len(kinds) != 1:
            raise ValueError(f"symspace: SPDNetReplicas needs one head type, got {sorted(kinds)}")
        self.busemann = isinstance(nets[0].head, BusemannMLR)
        self.reeig = ReEig(nets[0].reeig.eps)

        def stack(get):
            return nn.Parameter(torch.stack([get(net).detach().clone() for net in nets]))

        self.weight = stack(lambda net: net.bimap.weight)  # (R, n, m)
        if self.busemann:
            dist = nets[0].head.dist
            self.alpha, self.beta = dist.alpha, dist.beta
            self.s, self.r = stack(lambda net: net.head.dist.s), stack(lambda net: net.head.dist.r)  # (R, K, m, m)
            self.a = stack(lambda net: net.head.dist.a)  # (R, K, m)
        else:
            self.lin_w, self.lin_b = stack(lambda net: net.head.weight), stack(lambda net: net.head.bias)

    def backbone(self, x):  # (N, n, n) or (R, N, n, n) -> (R, N, m, m): BiMap, ReEig
        w, _ = torch.linalg.qr(self.weight)  # (R, n, m)
        return self.reeig(w.transpose(-1, -2).unsqueeze(1) @ x @ w.unsqueeze(1))

    def forward(self, x):  # -> (R, N, classes)
        if not self.busemann:  # LogEig + linear; LogEig(ReEig(Z)) = V log(max(L, eps)) V^T from one eigh of Z
            eps = self.reeig.eps
            log_reeig = (lambda ev: ev.clamp_min(eps).log(), lambda ev: (ev > eps).to(ev.dtype) / ev.clamp_min(eps))
            w, _ = torch.linalg.qr(self.weight)
            z = geo.sym_funcm(w.transpose(-1, -2).unsqueeze(1) @ x @ w.unsqueeze(1), log_reeig)
            return triu_vec(z) @ self.lin_w.transpose(-1, -2) + self.lin_b.unsqueeze(1)
        z = self.backbone(x)
        p_inv_sqrt = torch.linalg.matrix_exp(-sym(self.s) / 2).unsqueeze(1)  # (R, 1, K, m, m)
        rot = orthogonal_param(self.r).unsqueeze(1)
        y = geo.spd_to_base(z.unsqueeze(2), p_inv_sqrt, rot)  # (R, N, K, m, m)
        h = torch.sort(self.a, dim=-1, descending=True).values.unsqueeze(1)  # (R, 1, K, m)
        return geo.ab_inner(h, geo.log_diag_udu(sym(y)), self.alpha, self.beta)


class BusemannMLR(nn.Module):
    """MLR on SPD(n) whose logits are the Busemann signed distances to one hyperplane per class (Sec. 4.1)."""

    def __init__(self, n, classes, alpha, beta, generator):
        super().__init__()
        self.dist = BusemannDistance(n, classes, alpha, beta, generator)

    def forward(self, x):
        return self.dist(x)


def frechet_mean(x: torch.Tensor, w: torch.Tensor, iters: int, logs: torch.Tensor | None = None) -> torch.Tensor:
    """Weighted affine-invariant Frechet (Karcher) mean by `iters` fixed-point steps (Sec. 4.3).

    x: (..., T, n, n) points, w: (..., Q, T) weights summing to 1 over T -> (..., Q, n, n):
    M <- M^1/2 exp(sum_t w_t log(M^-1/2 X_t M^-1/2)) M^1/2, started at the weighted log-Euclidean mean.
    `logs`: log x when the caller has it already.
    """
    logs = geo.sym_funcm(x, "log") if logs is None else logs  # (..., T, n, n)
    m = geo.sym_funcm(torch.einsum("...qt,...tij->...qij", w, logs), "exp")  # (..., Q, n, n)
    for _ in range(iters):
        m_sqrt, m_isqrt = geo.sym_sqrt_rsqrt(m)  # one eigendecomposition for both
        inner = m_isqrt.unsqueeze(-3) @ x.unsqueeze(-4) @ m_isqrt.unsqueeze(-3)  # (..., Q, T, n, n)
        step = torch.einsum("...qt,...qtij->...qij", w, geo.sym_funcm(sym(inner), "log"))
        m = sym(m_sqrt @ geo.sym_funcm(step, "exp") @ m_sqrt)
    return m


class SPDAttentionNet(nn.Module):
    """A set of T SPD tokens -> class logits (Sec. 4.3 attention, then the Busemann MLR).

    q_i, k_j = Busemann FC layers of the tokens (distances to `dim` learned hyperplanes, Sec. 4.2);
    a_ij = softmax_j(-|q_i - k_j|^2 / sqrt(dim)); token i's output is the a_i-weighted Frechet mean of
    the tokens; the outputs are pooled by their uniform Frechet mean and classified. ``attention=False``
    is the same network without the attention: the tokens are pooled directly.
    """

    def __init__(self, n, classes, dim, alpha, beta, iters, attention, generator):
        super().__init__()
        self.attention, self.iters, self.dim = attention, iters, dim
        if attention:
            self.query = BusemannDistance(n, dim, alpha, beta, generator)
            self.key = BusemannDistance(n, dim, alpha, beta, generator)
        self.mlr = BusemannMLR(n, classes, alpha, beta, generator)
        for layer in self.modules() if attention else ():  # the ablation (cheap) keeps its earlier rounding
            if isinstance(layer, BusemannDistance):
                layer.fused = True
        self.token_logs, self.pooled_tokens = InputCache(), InputCache()

    def forward(self, tokens):  # (B, T, n, n)
        b, t, n, _ = tokens.shape
        if self.attention:
            q = self.query(tokens.reshape(b * t, n, n)).reshape(b, t, self.dim)
            k = self.key(tokens.reshape(b * t, n, n)).reshape(b, t, self.dim)
            att = torch.softmax(-torch.cdist(q, k) ** 2 / self.dim ** 0.5, dim=-1)  # (B, T, T)
            logs = self.token_logs(tokens, lambda x: geo.sym_funcm(x, "log"))
            tokens = frechet_mean(tokens, att, self.iters, logs)  # (B, T, n, n)
        uniform = torch.full((b, 1, t), 1.0 / t, dtype=tokens.dtype)
        if self.attention:
            pooled = frechet_mean(tokens, uniform, self.iters)[:, 0]  # (B, n, n)
        else:  # the raw tokens' mean does not depend on any parameter
            pooled = self.pooled_tokens(tokens, lambda x: frechet_mean(x, uniform, self.iters)[:, 0])
        return self.mlr(pooled)


class TangentPoolNet(nn.Module):
    """A set of T SPD tokens -> class logits without attention: every token's tangent vector at the identity
    (LogEig, vec of log X_t) through a one-hidden-layer perceptron, the per-token logits pooled over the tokens.
    Claim (e)'s stronger non-attentive baselines (the third review of issue 52: the uniform Frechet mean of the
    plain ablation dilutes a one-window event by construction); `hidden` is set so that the parameter count matches
    the attention network's (:func:`tangent_pool_hidden`; the pooling has no parameters).

    ``pool="mean"``: the logits averaged over the tokens (a DeepSets head: each token read on its own, none weighing
    another, none selected). ``pool="logsumexp"``: per class the log-sum-exp of the tokens' logits, a smooth maximum
    that lets the window with the largest logits decide (multiple-instance pooling): a SELECTIVE non-attentive
    baseline (the fourth review of issue 52: without it a gain of the attention could come from any window
    selection, not from the paper's distance-based attention)."""

    def __init__(self, n, classes, hidden, generator, pool: str = "mean"):
        super().__init__()
        if pool not in ("mean", "logsumexp"):
            raise ValueError(f"symspace: unknown token pooling {pool!r} (mean, logsumexp)")
        self.pool = pool
        d = n * (n + 1) // 2
        self.hidden_layer = nn.Linear(d, hidden, dtype=torch.float64)
        self.out = nn.Linear(hidden, classes, dtype=torch.float64)
        _init(self.hidden_layer, generator)
        _init(self.out, generator)
        self.token_logs = InputCache()

    def forward(self, tokens):  # (B, T, n, n) -> (B, classes)
        v = self.token_logs(tokens, lambda x: triu_vec(geo.sym_funcm(x, "log")))  # (B, T, d)
        logits = self.out(torch.relu(self.hidden_layer(v)))  # (B, T, classes)
        return logits.mean(1) if self.pool == "mean" else torch.logsumexp(logits, dim=1)


def parameter_count(model: nn.Module) -> int:
    return sum(q.numel() for q in model.parameters() if q.requires_grad)


def tangent_pool_hidden(n: int, classes: int, target: int) -> int:
    """The hidden width of :class:`TangentPoolNet` whose parameter count is closest to `target` (the attention
    network's): (d + 1) h + (h + 1) classes parameters, d = n (n + 1) / 2."""
    d = n * (n + 1) // 2
    return max(1, int(round((target - classes) / (d + 1 + classes))))


# ---- Poincare-ball heads -----------------------------------------------------------------------
# Each head can hold `replicas` independent copies of its parameters (a leading dimension), trained side by side on
# (replicas, N, d) inputs: the tree's seeds in one full-batch run (every copy has its own gradient; Adam is
# elementwise, so each copy trains as it would alone).
class EuclideanMLR(nn.Module):
    """logits = W x + b: (..., N, d) -> (..., N, classes)."""

    def __init__(self, d, classes, generator, replicas: int | None = None):
        super().__init__()
        lead = () if replicas is None else (replicas,)
        bound = 1 / d ** 0.5  # nn.Linear's default range
        self.weight = nn.Parameter((torch.rand(*lead, classes, d, generator=generator, dtype=torch.float64) * 2 - 1) * bound)
        self.bias = nn.Parameter(torch.zeros(*lead, classes, dtype=torch.float64))

    def forward(self, x):
        return x @ self.weight.transpose(-1, -2) + self.bias.unsqueeze(-2)


class BallMLR(nn.Module):
    """MLR on the ball, one hyperplane (base point p_k, normal a_k) per class.

    ``busemann`` (Sec. 3.2, as the authors' released code computes it, nguyenxuanson10/symspaces-ic
    ``PoincareBall.dist2planebm``): logit d(p_k, x) s_{p_k,a_k}(x) / |y|, with y = (-p_k) (+) x, s the horocycle
    value log(1 - |y|^2) - log|y - a_k/|a_k||^2 (:func:`geometry.ball_horocycle`) and d(p_k, x) = 2 artanh |y|;
    a_k sets only the direction. ``ganea`` (Ganea et al. 2018, eq. 25): lambda_{p_k} |a_k| times the signed
    gyroplane distance.
    """

    def __init__(self, d, classes, kind, generator, replicas: int | None = None):
        super().__init__()
        if kind not in ("busemann", "ganea"):
            raise ValueError(f"symspace: unknown ball head {kind!r} (busemann, ganea)")
        self.kind = kind
        lead = () if replicas is None else (replicas,)
        self.p = nn.Parameter(0.01 * torch.randn(*lead, classes, d, generator=generator, dtype=torch.float64))
        self.a = nn.Parameter(0.1 * torch.randn(*lead, classes, d, generator=generator, dtype=torch.float64))

    def _p(self):  # keep base points inside the ball
        norm = self.p.norm(dim=-1, keepdim=True)
        return self.p * (torch.tanh(norm) / norm.clamp_min(1e-15))

    def forward(self, x):  # (..., N, d) -> (..., N, classes)
        p = self._p()
        a_norm = self.a.norm(dim=-1).clamp_min(1e-15)  # (..., K)
        if self.kind == "busemann":
            y2, yw = _moved(x, p, self.a / a_norm.unsqueeze(-1))  # |y|^2, <y, omega>
            r = y2.clamp_min(1e-24).sqrt().clamp(1e-12, 1 - 1e-12)  # |y|
            # geo.ball_horocycle: log(1 - |y|^2) - log|y - omega|^2, |y - omega|^2 = |y|^2 - 2 <y, omega> + 1
            return 2 * torch.atanh(r) / r * (torch.log1p(-y2) - (y2 - 2 * yw + 1).log())
        y2, ya = _moved(x, p, self.a)
        lam = 2 / (1 - (p * p).sum(-1))
        # geo.ball_gyroplane: asinh(2 <y, a> / ((1 - |y|^2) |a|))
        return (lam * a_norm).unsqueeze(-2) * torch.asinh(2 * ya / ((1 - y2) * a_norm.unsqueeze(-2)))


def _moved(x, p, v):
    """|y|^2 and <y, v_k> for y = (-p_k) (+) x, from inner products alone: x (..., N, d), p and v (..., K, d) ->
    two (..., N, K) tensors. The same numbers as geo.mobius_add followed by the norms (test_symspace checks it),
    without the (..., N, K, d) intermediate: the ball heads' forward pass costs a few batched matrix products
    instead of a dozen elementwise passes over N x K x d, which is what lets many tree seeds train side by side."""
    xp = x @ p.transpose(-1, -2)  # <x, p_k>  (..., N, K)
    xv = x @ v.transpose(-1, -2)  # <x, v_k>
    x2 = (x * x).sum(-1, keepdim=True)  # |x|^2  (..., N, 1)
    p2 = (p * p).sum(-1).unsqueeze(-2)  # |p_k|^2  (..., 1, K)
    pv = (p * v).sum(-1).unsqueeze(-2)  # <p_k, v_k>
    # mobius_add(u, x) with u = -p: num = (1 + 2 <u, x> + |x|^2) u + (1 - |u|^2) x, den = 1 + 2 <u, x> + |u|^2 |x|^2
    c_u = 1 - 2 * xp + x2  # coefficient of u = -p
    c_x = 1 - p2  # coefficient of x
    den = (1 - 2 * xp + p2 * x2).clamp_min(1e-15)
    num2 = c_u ** 2 * p2 - 2 * c_u * c_x * xp + c_x ** 2 * x2  # |num|^2
    return num2 / den ** 2, (-c_u * pv + c_x * xv) / den


def _init(linear: nn.Linear, generator: torch.Generator) -> None:
    """Deterministic initialisation from the model's own generator (not the global RNG)."""
    bound = 1 / linear.in_features ** 0.5
    with torch.no_grad():
        linear.weight.copy_((torch.rand(linear.weight.shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound)
        linear.bias.zero_()
