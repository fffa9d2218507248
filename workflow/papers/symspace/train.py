"""Training of every arm on one seed's data: full-batch Adam on the cross-entropy, a validation curve that the
convergence gate reads, accuracy on held-out data."""
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


def fit(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float, *, val=None,
        every: int = 0, betas: tuple = (0.9, 0.999), eps: float = 1e-8) -> tuple[torch.nn.Module, list[float]]:
    """Full-batch Adam (Kingma & Ba 2015, Alg. 1, torch's defaults) on the cross-entropy for `steps` steps.

    `val` = (x_val, y_val): the validation accuracy every `every` steps, returned as the curve the convergence
    gate reads (:func:`late_gain`). Written out rather than torch.optim.Adam, whose first step imports
    torch._dynamo (2-3 s of every job's start-up, most of the smoke DAG's budget).
    """
    params = [q for q in model.parameters() if q.requires_grad]
    m = [torch.zeros_like(q) for q in params]
    v = [torch.zeros_like(q) for q in params]
    curve = []
    for step in range(1, steps + 1):
        for q in params:
            q.grad = None
        loss = _loss(model(x), y)
        loss.backward()
        with torch.no_grad():
            for q, m_q, v_q in zip(params, m, v):
                m_q.mul_(betas[0]).add_(q.grad, alpha=1 - betas[0])
                v_q.mul_(betas[1]).addcmul_(q.grad, q.grad, value=1 - betas[1])
                m_hat = m_q / (1 - betas[0] ** step)
                v_hat = v_q / (1 - betas[1] ** step)
                q.sub_(lr * m_hat / (v_hat.sqrt() + eps))
        if val is not None and every and step % every == 0:
            curve.append(accuracy(model, *val))
    if not torch.isfinite(loss):
        raise FloatingPointError(f"symspace: training {type(model).__name__} diverged (loss {loss.item()})")
    return model, curve


def _loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy; for replicas side by side (logits (R, N, K), y (R, N)) the sum of their means, so that
    each replica's parameters get the gradient they would get alone."""
    if logits.dim() == 3:
        return F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(-1).sum()
    return F.cross_entropy(logits, y)


def late_gain(curve):
    """How much the validation accuracy still rose in the last quarter of training: the best value of the last
    quarter of the curve minus the best before it (<= 0: the curve had peaked; the convergence gate bounds it).
    NaN without a curve; one value per replica when the curve holds replicas side by side."""
    curve = np.asarray(list(curve), dtype=float)
    if len(curve) < 4:
        return float("nan") if curve.ndim <= 1 else np.full(curve.shape[1], np.nan)
    cut = len(curve) - max(1, len(curve) // 4)
    gain = curve[cut:].max(0) - curve[:cut].max(0)
    return float(gain) if gain.ndim == 0 else gain


@torch.no_grad()
def accuracy(model, x, y):
    """Share of correct arg-max predictions: a float, or one per replica (logits (R, N, K))."""
    right = (model(x).argmax(-1) == y).double().mean(-1)
    return float(right) if right.dim() == 0 else right.numpy()


def split(labels: np.ndarray, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Stratified random split: (indices of the first part, of the rest), `fraction` of each class in the first."""
    first = []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        first.append(idx[: max(1, int(round(fraction * idx.size)))])
    first = np.sort(np.concatenate(first))
    return first, np.setdiff1d(np.arange(labels.size), first)


def spd_task(task: str, unit: int, replicate: int, x_train, y_train, x_test, y_test, p, seed: int,
             rng: np.random.Generator, tokens_train=None, tokens_test=None) -> list[dict]:
    """Every SPD arm on one task unit (an EEG subject, or the digits): rows of accuracies.

    x_*: (N, n, n) float64 tensors; y_*: (N,) long. The training part is split into fit and validation (the
    validation curve is the convergence gate's); every accuracy in the claims is on the test part. Claim (b)'s
    arms: the same BiMap -> ReEig backbone (same initial weights within a seed) under SPDNet's LogEig + linear
    head and under the Busemann MLR, each also on permuted labels (its null control).
    """
    n, classes = x_train.shape[-1], int(y_train.max()) + 1
    fit_idx, val_idx = split(y_train.numpy(), 1 - p.train["val_fraction"], rng)
    perm = torch.as_tensor(rng.permutation(fit_idx.size))
    xf, yf, xv, yv = x_train[fit_idx], y_train[fit_idx], x_train[val_idx], y_train[val_idx]
    t = p.train
    rows = []

    def run(arm, variant, model, xf_, yf_, xv_, xt_, steps=t["steps"]):
        model, curve = fit(model, xf_, yf_, steps, t["lr"], val=(xv_, yv), every=t["eval_every"])
        rows.append({"task": task, "unit": unit, "replicate": replicate, "arm": arm, "variant": variant,
                     "chance": 1.0 / classes, "val_acc": curve[-1], "test_acc": accuracy(model, xt_, y_test), "late_gain": late_gain(curve)})
        return model

    m = min(p.model["bimap_dim"], n)
    for head in ("logeig_linear", "busemann_mlr"):
        for variant, labels in (("main", yf), ("permuted_labels", yf[perm])):
            model = L.SPDNet(n, m, classes, generator(seed, task, unit, "backbone", variant),
                             head=head, head_generator=generator(seed, task, unit, head, variant))
            run(f"spdnet_{head}", variant, model, xf, labels, xv, x_test)
    if tokens_train is not None:
        # Claim (e): the attention network and the same network without attention, on the window tokens, both for
        # attention_steps (its Frechet means make a step ~10x an MLR's).
        tf, tv = tokens_train[fit_idx], tokens_train[val_idx]
        for attention in (False, True):
            arm = "attention" if attention else "no_attention"
            model = L.SPDAttentionNet(n, classes, p.model["attention_dim"], 1.0, 0.0, p.model["frechet_iters"],
                                      attention, generator(seed, task, unit, arm))
            model = run(arm, "main", model, tf, yf, tv, tokens_test, steps=t["attention_steps"])
        # Claim (e)'s control: the trained attention network with its weights shuffled over the tokens.
        model.shuffle_weights = generator(seed, task, unit, "shuffle")
        rows.append({"task": task, "unit": unit, "replicate": replicate, "arm": "attention",
                     "variant": "shuffled_weights", "chance": 1.0 / classes, "val_acc": accuracy(model, tv, yv),
                     "test_acc": accuracy(model, tokens_test, y_test), "late_gain": float("nan")})
    return rows


def angle_rule(x_fit: np.ndarray, y_fit: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, bins: int) -> float:
    """Test accuracy of the best angle rule about the origin learned from the training points: the disk cut into
    `bins` equal angular sectors, each labelled by the majority of its training points (ties: the smaller label;
    a sector without training points takes the label of the nearest sector that has some)."""
    def sector(x):
        return (np.floor((np.arctan2(x[:, 1], x[:, 0]) + np.pi) / (2 * np.pi) * bins).astype(int)) % bins

    s_fit, s_test = sector(x_fit), sector(x_test)
    classes = int(max(y_fit.max(), y_test.max())) + 1
    counts = np.zeros((bins, classes))
    np.add.at(counts, (s_fit, y_fit), 1)
    filled = np.flatnonzero(counts.sum(1) > 0)
    label = counts.argmax(1)
    for b in np.flatnonzero(counts.sum(1) == 0):
        gap = np.minimum((filled - b) % bins, (b - filled) % bins)
        label[b] = label[filled[gap.argmin()]]
    return float((label[s_test] == y_test).mean())


def ball_tasks(trees: list[dict], p) -> list[dict]:
    """The three heads on every tree seed (claim d), the Busemann head on permuted labels (its null control), and
    the angle rule (claim d's premise: no angle rule about the origin gives the labels).

    Every seed's tree has the same nodes and classes, so its stratified split has the same sizes: the seeds train
    side by side, each head holding one copy of its parameters per seed (their own initialisation, noise,
    isometry, split and label permutation)."""
    t = p.train
    fits, vals, tests, perms = [], [], [], []
    for seed, tree in enumerate(trees):
        rng = np.random.default_rng([seed, 5])
        train_idx, test_idx = split(tree["labels"], p.tree["train_fraction"], rng)
        fit_pos, val_pos = split(tree["labels"][train_idx], 1 - t["val_fraction"], rng)
        fits.append(train_idx[fit_pos]), vals.append(train_idx[val_pos]), tests.append(test_idx)
        perms.append(rng.permutation(fit_pos.size))
    if len({len(f) for f in fits}) != 1 or len({len(v) for v in tests}) != 1:
        raise ValueError("symspace: the tree seeds' splits differ in size (the trees must share nodes and classes)")
    x = torch.as_tensor(np.stack([tr["points"] for tr in trees]), dtype=torch.float64)  # (R, N, 2)
    y = torch.as_tensor(np.stack([tr["labels"] for tr in trees]), dtype=torch.long)  # (R, N)

    def take(z, idx):
        return torch.stack([z[r, torch.as_tensor(i)] for r, i in enumerate(idx)])

    x_fit, y_fit, x_val, y_val, x_test, y_test = (take(x, fits), take(y, fits), take(x, vals), take(y, vals),
                                                   take(x, tests), take(y, tests))
    y_perm = torch.stack([y_fit[r, torch.as_tensor(perm)] for r, perm in enumerate(perms)])
    classes, d, R = int(y.max()) + 1, x.shape[-1], len(trees)
    rows = []
    for head, variant in [*((h, "main") for h in ("euclidean_mlr", "ganea_mlr", "busemann_mlr")),
                          ("busemann_mlr", "permuted_labels")]:
        g = generator("tree", head, variant)
        model = (L.EuclideanMLR(d, classes, g, replicas=R) if head == "euclidean_mlr"
                 else L.BallMLR(d, classes, head.split("_")[0], g, replicas=R))
        model, curve = fit(model, x_fit, y_fit if variant == "main" else y_perm, t["tree_steps"], t["tree_lr"],
                           val=(x_val, y_val), every=t["eval_every"])
        test, gains = accuracy(model, x_test, y_test), late_gain(curve)
        rows += [{"task": "tree", "unit": 0, "replicate": r, "seed": r, "arm": head, "variant": variant,
                  "chance": 1.0 / classes, "val_acc": float(curve[-1][r]), "test_acc": float(test[r]),
                  "late_gain": float(gains[r])} for r in range(R)]
    for r, tree in enumerate(trees):
        train_idx = np.concatenate([fits[r], vals[r]])
        rows.append({"task": "tree", "unit": 0, "replicate": r, "seed": r, "arm": "angle_rule", "variant": "main",
                     "chance": 1.0 / classes, "val_acc": float("nan"), "late_gain": float("nan"),
                     "test_acc": angle_rule(tree["points"][train_idx], tree["labels"][train_idx],
                                            tree["points"][tests[r]], tree["labels"][tests[r]], p.tree["angle_bins"])})
    return rows
