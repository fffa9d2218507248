"""Training of every arm on one seed's data: full-batch Adam on the cross-entropy, accuracy on held-out data."""
from __future__ import annotations

import logging
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from papers.symspace import layers as L

log = logging.getLogger(__name__)


def generator(*key) -> torch.Generator:
    """A torch generator seeded from a stable hash of `key` (seed, task, arm, ...): independent of run order."""
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def fit(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
        betas: tuple = (0.9, 0.999), eps: float = 1e-8) -> torch.nn.Module:
    """Full-batch Adam (Kingma & Ba 2015, Alg. 1, torch's defaults) on the cross-entropy for `steps` steps.

    Written out rather than torch.optim.Adam, whose first step imports torch._dynamo (2-3 s of every
    job's start-up, most of the smoke DAG's budget).
    """
    params = [q for q in model.parameters() if q.requires_grad]
    m = [torch.zeros_like(q) for q in params]
    v = [torch.zeros_like(q) for q in params]
    for step in range(1, steps + 1):
        for q in params:
            q.grad = None
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        with torch.no_grad():
            for q, m_q, v_q in zip(params, m, v):
                m_q.mul_(betas[0]).add_(q.grad, alpha=1 - betas[0])
                v_q.mul_(betas[1]).addcmul_(q.grad, q.grad, value=1 - betas[1])
                m_hat = m_q / (1 - betas[0] ** step)
                v_hat = v_q / (1 - betas[1] ** step)
                q.sub_(lr * m_hat / (v_hat.sqrt() + eps))
    if not torch.isfinite(loss):
        raise FloatingPointError(f"symspace: training {type(model).__name__} diverged (loss {loss.item()})")
    return model


@torch.no_grad()
def accuracy(model, x, y) -> float:
    return float((model(x).argmax(-1) == y).double().mean())


def split(labels: np.ndarray, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Stratified random split: (indices of the first part, of the rest), `fraction` of each class in the first."""
    first = []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        first.append(idx[: max(1, int(round(fraction * idx.size)))])
    first = np.sort(np.concatenate(first))
    return first, np.setdiff1d(np.arange(labels.size), first)


def spd_model(arm: str, n: int, classes: int, p, g: torch.Generator, x_fit: torch.Tensor,
              alpha: float = 1.0, beta: float = 0.0) -> torch.nn.Module:
    if arm == "logeig_linear":
        return L.LogEigLinear(n, classes, g)
    if arm == "spdnet":
        return L.SPDNet(n, min(p.model["bimap_dim"], n), classes, g)
    if arm == "euclidean_mlp":
        v = L.triu_vec(x_fit)
        return L.EuclideanMLP(n, p.model["hidden"], classes, g, v.mean(0), v.std(0).clamp_min(1e-8))
    if arm == "busemann_mlr":
        return L.BusemannMLR(n, classes, alpha, beta, g)
    raise ValueError(f"symspace: unknown arm {arm!r}")


def det_normalise(x: torch.Tensor) -> torch.Tensor:
    """X / det(X)^(1/n): every matrix of unit determinant, where the beta term of the metric cannot act."""
    n = x.shape[-1]
    return x / torch.exp(torch.logdet(x) / n)[..., None, None]


def spd_task(task: str, unit: int, x_train, y_train, x_test, y_test, p, seed: int, rng: np.random.Generator,
             tokens_train=None, tokens_test=None) -> list[dict]:
    """Every SPD arm on one task unit (an EEG subject, or the digits): rows of accuracies.

    x_*: (N, n, n) float64 tensors; y_*: (N,) long. The training part is split into fit and validation
    (validation chooses the (alpha, beta) of claim c); every accuracy in the claims is on the test part.
    """
    n, classes = x_train.shape[-1], int(y_train.max()) + 1
    fit_idx, val_idx = split(y_train.numpy(), 1 - p.train["val_fraction"], rng)
    perm = torch.as_tensor(rng.permutation(fit_idx.size))
    xf, yf, xv, yv = x_train[fit_idx], y_train[fit_idx], x_train[val_idx], y_train[val_idx]
    steps, lr = p.train["steps"], p.train["lr"]
    rows = []

    def run(arm, variant, xf_, yf_, xv_, xt_, alpha=1.0, beta=0.0, model=None):
        g = generator(seed, task, unit, arm, variant, alpha, beta)
        model = model if model is not None else spd_model(arm, n, classes, p, g, xf_, alpha, beta)
        fit(model, xf_, yf_, steps, lr)
        rows.append({"task": task, "unit": unit, "arm": arm, "variant": variant, "alpha": alpha, "beta": beta,
                     "val_acc": accuracy(model, xv_, yv), "test_acc": accuracy(model, xt_, y_test)})
        return model

    for arm in ("logeig_linear", "spdnet", "euclidean_mlp"):
        run(arm, "main", xf, yf, xv, x_test)
    for alpha, beta in p.metrics:  # (alpha, beta) = (1, 0) is the main Busemann arm
        run("busemann_mlr", "main", xf, yf, xv, x_test, alpha, beta)
    # Claim (b)'s control: the same arms trained on permuted labels (no class information to learn).
    for arm in ("logeig_linear", "spdnet", "busemann_mlr"):
        run(arm, "permuted_labels", xf, yf[perm], xv, x_test)
    if task == "eeg":
        # Claim (c)'s control: unit-determinant inputs, where the beta term is a per-class constant.
        xfd, xvd, xtd = det_normalise(xf), det_normalise(xv), det_normalise(x_test)
        for alpha, beta in p.metrics:
            run("busemann_mlr", "unit_det", xfd, yf, xvd, xtd, alpha, beta)
        # Claim (e): the attention network and the same network without attention, on the window tokens.
        tf, tv = tokens_train[fit_idx], tokens_train[val_idx]
        for attention in (False, True):
            arm = "attention" if attention else "no_attention"
            g = generator(seed, task, unit, arm)
            model = L.SPDAttentionNet(n, classes, p.model["attention_dim"], 1.0, 0.0, p.model["frechet_iters"],
                                      attention, g)
            run(arm, "main", tf, yf, tv, tokens_test, model=model)
        # Claim (e)'s control: the trained attention network with its weights shuffled over the tokens.
        model.shuffle_weights = generator(seed, task, unit, "shuffle")
        rows.append({"task": task, "unit": unit, "arm": "attention", "variant": "shuffled_weights", "alpha": 1.0,
                     "beta": 0.0, "val_acc": accuracy(model, tv, yv), "test_acc": accuracy(model, tokens_test, y_test)})
    return rows


def ball_task(points: np.ndarray, labels: np.ndarray, p, seed: int, rng: np.random.Generator) -> list[dict]:
    """The three heads on the noisy tree (claim d), and the Busemann head on permuted labels (its control)."""
    train_idx, test_idx = split(labels, p.tree["train_fraction"], rng)
    x = torch.as_tensor(points, dtype=torch.float64)
    y = torch.as_tensor(labels, dtype=torch.long)
    classes, d = int(labels.max()) + 1, points.shape[1]
    perm = torch.as_tensor(rng.permutation(train_idx.size))
    rows = []
    for head, variant in [*((h, "main") for h in ("euclidean_mlr", "ganea_mlr", "busemann_mlr")),
                          ("busemann_mlr", "permuted_labels")]:
        g = generator(seed, "tree", head, variant)
        model = L.EuclideanMLR(d, classes, g) if head == "euclidean_mlr" else L.BallMLR(d, classes, head.split("_")[0], g)
        y_fit = y[train_idx] if variant == "main" else y[train_idx][perm]
        fit(model, x[train_idx], y_fit, p.train["steps"], p.train["lr"])
        rows.append({"task": "tree", "unit": 0, "arm": head, "variant": variant, "alpha": 1.0, "beta": 0.0,
                     "val_acc": float("nan"), "test_acc": accuracy(model, x[test_idx], y[test_idx])})
    return rows
