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
import torch.nn.functional as F
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
    """Remember fn(x) of the last `size` inputs x (by identity), for parameter-free maps of a fixed input.

    Full-batch training feeds the same tensor at every step; its LogEig (or its token logarithms, or
    the uniform Frechet mean of fixed tokens) then needs computing once, not once per step. `size` 3: the fitting,
    validation and test inputs of papers.symspace.train.fit alternate (each evaluation used to evict the fitting
    input's value, recomputed, to the same bits, at the next step: speed only).
    """

    def __init__(self, size: int = 3):
        self.size, self.entries = size, []  # [(x, x's version, fn(x))], most recent last

    def __call__(self, x: torch.Tensor, fn):
        # The version counter rises with every in-place change of x: a tensor changed in place is a new input.
        for i, (key, version, value) in enumerate(self.entries):
            if key is x and version == x._version:
                if i != len(self.entries) - 1:
                    self.entries.append(self.entries.pop(i))
                return value
        with torch.no_grad():
            value = fn(x)
        self.entries = ([e for e in self.entries if e[0] is not x] + [(x, x._version, value)])[-self.size:]
        return value


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


class SPDAttentionReplicas(nn.Module):
    """R independent attention networks (:class:`SPDAttentionNet` with ``attention=True``: the Busemann FC layers as
    query and key, the distance-based attention with its weighted Frechet mean and the Busemann MLR, Sec. 4.1-4.3)
    side by side (speed only, no change of method): every parameter gains a leading replica dimension, stacked from
    the given networks, and the forward maps (R, B, T, n, n) tokens (replica r its own) to (R, B, classes), replica r
    computing what ``nets[r]`` computes with the same operations per matrix (the batched kernels compute each matrix
    on its own; tests/papers/test_symspace_speed.py checks logits, gradients and training to the bit). :meth:`loss`
    is the sum of the replicas' own mean cross-entropies, each computed as papers.symspace.train.fit computes one
    network's, so that each replica gets the gradient it gets alone. What it saves is the per-operation overhead of
    the many small Frechet-mean and Busemann steps (claim e's units of one train job train together)."""

    def __init__(self, nets: list):
        super().__init__()
        if not all(isinstance(net, SPDAttentionNet) and net.attention for net in nets):
            raise ValueError("symspace: SPDAttentionReplicas stacks attention networks (attention=True) only")
        first = nets[0]
        self.iters, self.dim = first.iters, first.dim
        self.layers = ("query", "key", "mlr")
        self.alpha, self.beta = first.mlr.dist.alpha, first.mlr.dist.beta
        for name in self.layers:
            dists = [getattr(net, name) for net in nets]
            dists = [d.dist if isinstance(d, BusemannMLR) else d for d in dists]
            if not all(d.fused for d in dists):
                raise ValueError("symspace: the attention network's Busemann layers are fused")
            for q in ("s", "r", "a"):
                setattr(self, f"{name}_{q}", nn.Parameter(torch.stack([getattr(d, q).detach().clone() for d in dists])))
        self.token_logs = InputCache()

    def _distance(self, name, x):  # x (R, M, n, n) -> (R, M, K): BusemannDistance.forward, fused, per replica
        s, r, a = (getattr(self, f"{name}_{q}") for q in ("s", "r", "a"))
        p_inv_sqrt = torch.linalg.matrix_exp(-sym(s) / 2)  # (R, K, n, n)
        rot = orthogonal_param(r)
        y = geo.spd_to_base_fused(x.unsqueeze(2), p_inv_sqrt.unsqueeze(1), rot.unsqueeze(1))  # (R, M, K, n, n)
        h = torch.sort(a, dim=-1, descending=True).values.unsqueeze(1)  # (R, 1, K, n)
        return geo.ab_inner(h, geo.log_diag_udu(sym(y)), self.alpha, self.beta)

    def forward(self, tokens):  # (R, B, T, n, n) -> (R, B, classes)
        r, b, t, n, _ = tokens.shape
        q = self._distance("query", tokens.reshape(r, b * t, n, n)).reshape(r, b, t, self.dim)
        k = self._distance("key", tokens.reshape(r, b * t, n, n)).reshape(r, b, t, self.dim)
        att = torch.softmax(-torch.cdist(q, k) ** 2 / self.dim ** 0.5, dim=-1)  # (R, B, T, T)
        logs = self.token_logs(tokens, lambda x: geo.sym_funcm(x, "log"))
        tokens = frechet_mean(tokens, att, self.iters, logs)  # (R, B, T, n, n)
        uniform = torch.full((b, 1, t), 1.0 / t, dtype=tokens.dtype).expand(r, b, 1, t)
        pooled = frechet_mean(tokens, uniform, self.iters)[:, :, 0]  # (R, B, n, n)
        return self._distance("mlr", pooled)

    @staticmethod
    def loss(logits, y):
        """The replicas' mean cross-entropies summed, each as fit's loss of one network (logits (B, classes)): the
        (R, classes, B) form of fit's replica loss runs other softmax and mean kernels, whose rounding need not be
        the one-network run's."""
        return sum(F.cross_entropy(logits[r], y[r]) for r in range(logits.shape[0]))


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
        self._x_consts = InputCache()  # |x|^2 and its functions: full-batch training feeds the same x every step

    # True: the logits by :class:`_BallLogits` (the same function, fewer passes over (..., N, K), a hand-written
    # backward); False: :meth:`forward_reference`, the autograd path the tests compare it with.
    fused = True

    def _p(self):  # keep base points inside the ball
        norm = self.p.norm(dim=-1, keepdim=True)
        return self.p * (torch.tanh(norm) / norm.clamp_min(1e-15))

    def forward(self, x):  # (..., N, d) -> (..., N, classes)
        if self.fused and not x.requires_grad:
            return self._forward_fused(x)
        return self.forward_reference(x)

    def _forward_fused(self, x):
        """The logits of :meth:`forward_reference` by :class:`_BallLogits` (a hand-written backward: speed only)."""
        p = self._p()
        a_norm = self.a.norm(dim=-1).clamp_min(1e-15)  # (..., K)
        consts = self._x_consts(x, _x_constants)
        if self.kind == "busemann":
            w = self.a / a_norm.unsqueeze(-1)
            pp = (p * p).sum(-1)
            return _BallLogits.apply("busemann", x, consts, p, w, pp, (p * w).sum(-1), torch.log1p(-pp))
        return _BallLogits.apply("ganea", x, consts, p, self.a, (p * p).sum(-1), (p * self.a).sum(-1), a_norm)

    def forward_reference(self, x):
        """The straightforward logits (autograd through :func:`_moved`): the fused path's reference."""
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


def _x_constants(x):
    """What :class:`_BallLogits` reads of x (..., N, d): |x|^2 (..., N, 1) and functions of it, x's coordinate
    columns (..., N, 1) and x^T (..., d, N) (contiguous: for a small d the inner products by broadcasting beat a
    batched matrix product of N x d by d x K)."""
    x2 = (x * x).sum(-1, keepdim=True)
    cols = tuple(x[..., i:i + 1].contiguous() for i in range(x.shape[-1]))
    return x2, 1 + x2, torch.log1p(-x2), 2 / (1 - x2), cols, x.transpose(-1, -2).contiguous()


def _inner(x, cols, q):
    """<x_n, q_k>: x (..., N, d), q (..., K, d) -> (..., N, K); by d broadcast passes where d is small."""
    if len(cols) > 4:
        return x @ q.transpose(-1, -2)
    out = cols[0] * q[..., 0].unsqueeze(-2)
    for i in range(1, len(cols)):
        out.addcmul_(cols[i], q[..., i].unsqueeze(-2))
    return out


class _BallLogits(torch.autograd.Function):
    """:class:`BallMLR`'s logits with a hand-written backward (speed only; the straightforward autograd path is
    :meth:`BallMLR.forward_reference`, and tests/papers/test_symspace.py checks values and gradients against it and
    by torch.autograd.gradcheck). The tree seeds' heads train as (replicas, N, K) tensors, and autograd through the
    dozens of elementwise steps of :func:`_moved` was most of the tree job's time.

    Inputs: x (..., N, d) (no gradient), consts = :func:`_x_constants` (x), base points p and the vectors w
    (..., K, d), and per class P = |p|^2, C = <p, w> and ``extra`` (..., K): log(1 - |p|^2) for ``busemann``
    (w = omega = a/|a|), |a| for ``ganea`` (w = a); autograd carries those small (..., K) inputs back to the
    parameters. With s = <x, p>, t = <x, w>, X = |x|^2, c_u = 1 - 2 s + X, c_x = 1 - P and y = (-p) (+) x, the
    Mobius algebra of :func:`_moved` gives (identities, checked by the tests)

        den = 1 - 2 s + P X = c_u - X c_x,   |x - p|^2 = c_u - c_x,   |y|^2 = |x - p|^2 / den,
        1 - |y|^2 = (1 - X)(1 - P) / den,    <y, w> = (c_x t - c_u C) / den,
        den |y - omega|^2 = E = 2 c_u (1 + C) - c_x (1 + X + 2 t)      (|omega| = 1),

    so the Busemann logit (Sec. 3.2) 2 artanh|y| / |y| * (log(1 - |y|^2) - log|y - omega|^2) is
    A(|y|) (log(1 - X) + log(1 - P) - log E), and Ganea et al.'s (2018, eq. 25) lambda_p |a| asinh(2 <y, a> /
    ((1 - |y|^2) |a|)) is (2 |a| / c_x) asinh(z), z = 2 (c_x t - c_u C) / ((1 - X) c_x |a|) (den cancels). The
    clamps of the reference path are kept: |y| = clamp(sqrt(max(|y|^2, 1e-24)), 1e-12, 1 - 1e-12) (no gradient
    where clamped), den >= 1e-15 in |y|^2; the clamp masks are applied to every replica unconditionally (a
    replica that diverged to NaN must not switch them off for the others: review symspace_r12, tested).

    Not the reference path's rounding: the two agree to float64 rounding while the base points stay well inside
    the ball; where a base point nears the boundary (|p| = tanh|q| with |q| beyond about 9) the reference's
    1 - |y|^2 and 1 - |p|^2 lose digits by cancellation that the factored forms above keep, so the two paths'
    logits part (review symspace_r12 against mpmath: the fused ones are the more accurate), and training runs that
    reach such base points (the large rates of the tree grid) diverge less often on this path."""

    @staticmethod
    def forward(ctx, kind, x, consts, p, w, pp, pw, extra):
        x2, one_x2, log_1mx2, two_over, cols, x_t = consts
        s = _inner(x, cols, p)  # (..., N, K)
        t = _inner(x, cols, w)
        pp_, pw_, extra_ = pp.unsqueeze(-2), pw.unsqueeze(-2), extra.unsqueeze(-2)  # (..., 1, K)
        c_x = 1 - pp_
        c_u = torch.add(one_x2, s, alpha=-2)
        ctx.kind = kind
        if kind == "busemann":
            den_raw = torch.addcmul(c_u, x2, c_x, value=-1)
            den = den_raw.clamp_min(1e-15)
            y2 = (c_u - c_x).div_(den)
            r = y2.clamp_min(1e-24).sqrt_().clamp_(1e-12, 1 - 1e-12)
            a_fac = torch.atanh(r).mul_(2).div_(r)  # A(|y|) = 2 artanh|y| / |y|
            u = torch.add(one_x2, t, alpha=2)  # 1 + X + 2 t
            e = torch.mul(c_u, 2 * (1 + pw_)).addcmul_(u, c_x, value=-1)
            b = (log_1mx2 + extra_).sub_(e.log())  # log(1 - |y|^2) - log|y - omega|^2
            ctx.save_for_backward(x_t, x2, p, w, pp, pw, extra, c_u, den_raw, den, y2, r, a_fac, u, e, b)
            return a_fac * b
        # ganea: extra = |a|
        nw = torch.mul(t, c_x).addcmul_(c_u, pw_, value=-1)  # (c_x t - c_u C) = den <y, a>
        v_k = 1 / (c_x * extra_)
        z = nw.mul_(two_over).mul_(v_k)
        zz = z * z
        root = (zz + 1).sqrt_()  # sqrt(1 + z^2): asinh's derivative
        # asinh(z) = sign(z) log1p(|z| + z^2 / (1 + sqrt(1 + z^2))), accurate at small and large |z|
        ash = torch.log1p(zz.div_(root + 1).add_(z.abs())).copysign_(z)
        scale = 2 * extra_ / c_x  # lambda_p |a|
        ctx.save_for_backward(x_t, two_over, p, w, pp, pw, extra, c_u, t, z, root, ash, scale, v_k, c_x)
        return scale * ash

    @staticmethod
    def backward(ctx, grad):
        if ctx.kind == "busemann":
            x_t, x2, p, w, pp, pw, extra, c_u, den_raw, den, y2, r, a_fac, u, e, b = ctx.saved_tensors
            c_x = 1 - pp.unsqueeze(-2)
            g_a = grad * b
            g_b = grad * a_fac
            # dA/d|y| / (2 |y|) = (1 / (1 - |y|^2) - A / 2) / |y|^2, zero where |y| is clamped
            rr = r * r
            g_y2 = (1 - rr).reciprocal_().add_(a_fac, alpha=-0.5).div_(rr).mul_(g_a)
            # unconditionally: a guard on min/max over all replicas reads NaN once one replica diverged, and skipping
            # the mask then gave the live replicas at the clamp a gradient the reference path does not (review
            # symspace_r12)
            g_y2.masked_fill_((r <= 1e-12) | (r >= 1 - 1e-12), 0.0)
            h = g_y2.div_(den)  # g_y2 / den
            y2m = y2 * (den_raw >= 1e-15)  # no den gradient where clamped (NaN-safe, as the mask above)
            g_e = g_b.div(e).neg_()  # d logit / d E = -A / E
            # |y|^2: d/ds = -2 (1 - |y|^2) / den, d/dP = (1 - |y|^2 X) / den; E: d/ds = -4 (1 + C), d/dt = -2 c_x,
            # d/dP = 1 + X + 2 t, d/dC = 2 c_u; log(1 - P): the logit's d/d = A
            g_s = (y2m - 1).mul_(h).mul_(2).addcmul_(g_e, -4 * (1 + pw.unsqueeze(-2)))
            g_t = g_e * (-2 * c_x)
            g_pp = (h - h * y2m * x2).addcmul_(g_e, u).sum(-2)
            g_pw = 2 * (g_e * c_u).sum(-2)
            g_extra = g_b.sum(-2)
        else:
            x_t, two_over, p, w, pp, pw, extra, c_u, t, z, root, ash, scale, v_k, c_x = ctx.saved_tensors
            g_z = (grad * scale).div_(root)
            g_zu = g_z * two_over  # d logit / d (den <y, a>) = g_z 2 / (1 - X) v_k, without the v_k
            gz_z = (g_z * z).sum(-2)
            g_ash = (grad * ash).sum(-2)  # d logit / d scale
            c_x1, v_k1, scale1 = c_x.squeeze(-2), v_k.squeeze(-2), scale.squeeze(-2)
            # z = (2 / (1 - X)) (c_x t - c_u C) v_k, c_u = 1 - 2 s + X, v_k = 1 / (c_x |a|); scale = 2 |a| / c_x
            g_s = g_zu * (2 * pw.unsqueeze(-2) * v_k)
            g_t = g_zu * (c_x * v_k)
            g_pw = -(g_zu * c_u).sum(-2) * v_k1
            g_pp = gz_z / c_x1 - (g_zu * t).sum(-2) * v_k1 + g_ash * scale1 / c_x1
            g_extra = -gz_z / extra + g_ash * 2 / c_x1
        g_p = (x_t @ g_s).transpose(-1, -2).sum_to_size(p.shape)  # sum_n g_s[n, k] x_n
        g_w = (x_t @ g_t).transpose(-1, -2).sum_to_size(w.shape)
        return (None, None, None, g_p, g_w, g_pp.sum_to_size(pp.shape), g_pw.sum_to_size(pw.shape),
                g_extra.sum_to_size(extra.shape))


def _init(linear: nn.Linear, generator: torch.Generator) -> None:
    """Deterministic initialisation from the model's own generator (not the global RNG)."""
    bound = 1 / linear.in_features ** 0.5
    with torch.no_grad():
        linear.weight.copy_((torch.rand(linear.weight.shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound)
        linear.bias.zero_()
