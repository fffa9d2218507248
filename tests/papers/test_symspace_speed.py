"""symspace's speed-only paths against the straightforward ones, bit for bit (review symspace_r12: the tree heads'
per-seed outcomes are chaotic under float rounding, so a speed change must not move a single bit)."""
import numpy as np
import pytest
import torch

from papers.symspace import layers as L
from papers.symspace.train import accuracy, fit


def _tokens(b, t, n, rng):
    a = rng.normal(size=(b, t, n, n))
    return torch.as_tensor(a @ np.swapaxes(a, -1, -2) / n + 0.3 * np.eye(n))


def test_input_cache_keeps_the_last_inputs_and_recomputes_none():
    calls = []

    def fn(x):
        calls.append(x)
        return x * 2

    cache = L.InputCache(size=2)
    a, b, c = (torch.full((2,), float(v)) for v in (1, 2, 3))
    for x in (a, b, a, b, a):  # two inputs alternating: each computed once
        assert torch.equal(cache(x, fn), x * 2)
    assert len(calls) == 2
    cache(c, fn)  # a third input evicts the least recently used (b: a was used last)
    cache(a, fn)
    assert len(calls) == 3
    cache(b, fn)
    assert len(calls) == 4 and calls[-1] is b
    # identity, not equality: an equal tensor that is another object is computed afresh
    cache(torch.full((2,), 1.0), fn)
    assert len(calls) == 5


def test_half_test_is_the_test_accuracy_of_the_first_half_runs_checkpoint():
    """fit evaluates the test set only up to half of the steps (the only checkpoint it is read at): half_test must
    equal, bit for bit, the test accuracy of the best-validation checkpoint of a run stopped at half the steps."""
    rng = np.random.default_rng(5)

    def draw(n):
        x = torch.as_tensor(rng.uniform(-0.6, 0.6, size=(3, n, 2)))
        return x, (x[..., 0] > 0).long() + (x[..., 1] > 0).long()

    (x, y), (xv, yv), (xt, yt) = draw(30), draw(20), draw(40)
    whole = L.BallMLR(2, 3, "ganea", torch.Generator().manual_seed(0), replicas=3)
    half = L.BallMLR(2, 3, "ganea", torch.Generator().manual_seed(0), replicas=3)
    whole, curve = fit(whole, x, y, steps=40, lr=0.3, val=(xv, yv), every=2, test=(xt, yt))
    half, half_curve = fit(half, x, y, steps=20, lr=0.3, val=(xv, yv), every=2)
    np.testing.assert_array_equal(np.asarray(curve)[:10], np.asarray(half_curve))  # the same trajectory
    np.testing.assert_array_equal(whole.half_test, accuracy(half, xt, yt))


def _train_twice(build, fit_data, val, test, caches):
    out = []
    for size in (3, 1):  # 1: the cache of one input, which every evaluation evicted (the earlier behaviour)
        model = build()
        for name in caches:
            setattr(model, name, L.InputCache(size=size))
        model, curve = fit(model, *fit_data, steps=12, lr=0.05, val=val, every=2, test=test)
        out.append(([q.detach().clone() for q in model.parameters()], np.asarray(curve), model.half_test))
    (p3, c3, h3), (p1, c1, h1) = out
    assert all(torch.equal(a, b) for a, b in zip(p3, p1))
    np.testing.assert_array_equal(c3, c1)
    assert h3 == h1


def test_cached_inputs_train_bit_for_bit_as_recomputed_ones():
    rng = np.random.default_rng(8)
    n, t, classes = 3, 3, 2
    fit_data = (_tokens(16, t, n, rng), torch.as_tensor(rng.integers(classes, size=16)))
    val = (_tokens(8, t, n, rng), torch.as_tensor(rng.integers(classes, size=8)))
    test = (_tokens(10, t, n, rng), torch.as_tensor(rng.integers(classes, size=10)))
    _train_twice(lambda: L.TangentPoolNet(n, classes, 5, torch.Generator().manual_seed(1)), fit_data, val, test,
                 ["token_logs"])
    _train_twice(lambda: L.SPDAttentionNet(n, classes, 2, 1.0, 0.0, 1, False, torch.Generator().manual_seed(2)),
                 fit_data, val, test, ["token_logs", "pooled_tokens"])
    _train_twice(lambda: L.SPDAttentionNet(n, classes, 2, 1.0, 0.0, 1, True, torch.Generator().manual_seed(3)),
                 fit_data, val, test, ["token_logs", "pooled_tokens"])


# ---- a train job's units side by side (issue 52's budget: claim (b)'s head replicates and claim (e)'s units) ----
def _small_params(**train):
    from papers.common.params import to_dict
    from papers.symspace.params import Params, parse

    cfg = to_dict(Params())
    cfg.update(eeg={**cfg["eeg"], "trials_per_class": 8}, train={**cfg["train"], **train})
    return parse(cfg)


def _subjects(p, seeds):
    from papers.symspace import data as D

    out = []
    for s in seeds:
        subject = D.eeg_like(p.eeg, s)[0]
        out.append((s, torch.as_tensor(subject["train"]["tokens"]), torch.as_tensor(subject["train"]["labels"]),
                    torch.as_tensor(subject["test"]["tokens"]), torch.as_tensor(subject["test"]["labels"]),
                    np.linalg.inv(subject["forward"])))
    return out


def _count_calls(monkeypatch, module, name):
    calls = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(type(args[0]).__name__)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _same_rows(a: list, b: list) -> None:
    import pandas as pd

    assert len(a) == len(b) and len(a) > 0
    one, side = pd.DataFrame(a), pd.DataFrame(b)
    assert list(one.columns) == list(side.columns)
    # every value to the bit (NaN where NaN): the report and the claims read these rows
    assert one.equals(side), one.compare(side)


def test_heads_of_a_jobs_replicates_side_by_side_equal_one_run_per_replicate(monkeypatch):
    """stages.train trains claim (b)'s heads of all its replicates in one run per head (train.heads_train); each
    replicate's rows must equal, bit for bit, those of its own run (the committed per-replicate path, heads_task),
    with the permuted-label control on one replicate only (replicates with different run counts side by side)."""
    from papers.symspace import train as T

    p = _small_params(steps=12, eval_every=3)
    subjects = _subjects(p, (3, 4, 5))

    def units():
        return [T.heads_prepare("eeg", 0, s, xtr.mean(1), ytr, xte.mean(1), yte, p, s, np.random.default_rng([s, 4]),
                                controls=(k == 0), inits=2, ceiling=True, unmixing=unmix)
                for k, (s, xtr, ytr, xte, yte, unmix) in enumerate(subjects)]

    alone = []
    for u in units():
        T.heads_train([u], p)
        alone += T.heads_rows(u)
    calls = _count_calls(monkeypatch, T, "fit")
    joint = units()
    T.heads_train(joint, p)
    assert calls == ["SPDNetReplicas", "SPDNetReplicas"]  # one run per head: the replicates did train together
    _same_rows(alone, [row for u in joint for row in T.heads_rows(u)])
    # and heads_task (one replicate) is the prepare/train/rows sequence
    s, xtr, ytr, xte, yte, unmix = subjects[1]
    _same_rows(T.heads_task("eeg", 0, s, xtr.mean(1), ytr, xte.mean(1), yte, p, s, np.random.default_rng([s, 4]),
                            controls=False, inits=2, ceiling=True, unmixing=unmix),
               T.heads_rows(joint[1]))


def test_attention_networks_of_a_jobs_units_side_by_side_equal_one_at_a_time(monkeypatch):
    """stages.train trains claim (e)'s attention networks of all its units side by side
    (layers.SPDAttentionReplicas); each unit's rows (the attention network's curve, checkpoints and accuracies, and
    the other arms) must equal, bit for bit, those of attention_task on the unit alone."""
    from papers.symspace import train as T

    p = _small_params(attention_steps=8, eval_every=2)
    subjects = _subjects(p, (0, 1, 2))

    def units():
        return [T.attention_prepare("eeg", 0, s, xtr, ytr, xte, yte, p, s, np.random.default_rng([s, 6]))
                for s, xtr, ytr, xte, yte, _ in subjects]

    alone = [row for s, xtr, ytr, xte, yte, _ in subjects
             for row in T.attention_task("eeg", 0, s, xtr, ytr, xte, yte, p, s, np.random.default_rng([s, 6]))]
    calls = _count_calls(monkeypatch, T, "fit")
    monkeypatch.setattr(T, "ATTENTION_SIDE_BY_SIDE", 2)  # 3 units: 2 side by side, the third alone
    joint = units()
    T.attention_train(joint, p)
    # the ablations (3) and the third attention network alone; the first two side by side
    assert calls.count("SPDAttentionReplicas") == 1 and calls.count("SPDAttentionNet") == 4
    _same_rows(alone, [row for u in joint for row in T.attention_rows(u)])


def test_attention_replicas_compute_each_networks_logits_and_gradients():
    """SPDAttentionReplicas against the networks it stacks, on each replica's own tokens: the same logits and, from
    the summed per-replica loss, each network's own gradient, to the bit."""
    import torch.nn.functional as F

    rng = np.random.default_rng(3)
    nets = [L.SPDAttentionNet(3, 2, 2, 1.0, 0.0, 1, True, torch.Generator().manual_seed(k)) for k in range(3)]
    side = L.SPDAttentionReplicas(nets)
    tokens = torch.stack([_tokens(5, 3, 3, rng) for _ in nets])
    y = torch.as_tensor(rng.integers(2, size=(3, 5)))
    logits = side(tokens)
    side.loss(logits, y).backward()
    grads = {name: q.grad for name, q in side.named_parameters()}
    for r, net in enumerate(nets):
        alone = net(tokens[r])
        assert torch.equal(logits[r], alone)
        F.cross_entropy(alone, y[r]).backward()
        for layer in ("query", "key", "mlr"):
            dist = getattr(net, layer)
            dist = dist.dist if layer == "mlr" else dist
            for q in ("s", "r", "a"):
                assert torch.equal(grads[f"{layer}_{q}"][r], getattr(dist, q).grad), (layer, q)
    with pytest.raises(ValueError):
        L.SPDAttentionReplicas([L.SPDAttentionNet(3, 2, 2, 1.0, 0.0, 1, False, torch.Generator().manual_seed(0))])


def _draw_units(rng, units, n_fit, n_val, n_test, shape, classes):
    def draw(size):
        a = rng.normal(size=(size, *shape[:-2], shape[-1], shape[-1]))
        x = torch.as_tensor(a @ np.swapaxes(a, -1, -2) / shape[-1] + 0.3 * np.eye(shape[-1]))
        return x, torch.as_tensor(rng.integers(classes, size=size))

    return [(*draw(n_fit), *draw(n_val), *draw(n_test)) for _ in range(units)]


@pytest.mark.parametrize("kind", ["logeig_linear", "busemann_mlr", "attention"])
def test_units_side_by_side_train_to_the_same_parameters(kind):
    """Several units' networks trained side by side, each replica on its own data, against each unit's own run (a
    unit's runs side by side on its shared data for the SPD heads, as the committed path trains them; the network
    alone for the attention): the trained parameters, validation curves and first-half checkpoints to the bit (the
    rows above are accuracies, which a changed rounding need not move)."""
    rng = np.random.default_rng(11)
    steps, every = 10, 2
    if kind == "attention":
        data = _draw_units(rng, 3, 12, 6, 8, (3, 4, 4), 3)
        nets = [[L.SPDAttentionNet(4, 3, 2, 1.0, 0.0, 1, True, torch.Generator().manual_seed(k))] for k in range(3)]
        stack = L.SPDAttentionReplicas
    else:
        data = _draw_units(rng, 3, 12, 6, 8, (5, 5), 3)
        nets = [[L.SPDNet(5, 3, 3, torch.Generator().manual_seed(10 * k + j), head=kind) for j in range(1 + k % 2)]
                for k in range(3)]  # units with 1, 2 and 1 runs
        stack = L.SPDNetReplicas

    def build(k):  # fresh copies of unit k's networks
        import copy
        return [copy.deepcopy(net) for net in nets[k]]

    alone = []
    for k, (x, y, xv, yv, xt, yt) in enumerate(data):
        if kind == "attention":
            model, x_, y_, val, test = build(k)[0], x, y, (xv, yv), (xt, yt)
        else:  # the unit's runs on its shared inputs, labels per run
            model, x_, val, test = stack(build(k)), x, (xv, yv), (xt, yt)
            y_ = y.expand(len(nets[k]), -1)
        model, curve = fit(model, x_, y_, steps=steps, lr=0.05, val=val, every=every, test=test)
        params = [q.detach()[None] if kind == "attention" else q.detach() for q in model.parameters()]
        alone.append((params, np.asarray(curve).reshape(len(curve), -1), np.atleast_1d(model.half_test)))
    owner = [k for k in range(3) for _ in nets[k]]
    side = stack([net for k in range(3) for net in build(k)])
    x, y, xv, yv, xt, yt = (torch.stack([data[k][i] for k in owner]) for i in range(6))
    side, curve = fit(side, x, y, steps=steps, lr=0.05, val=(xv, yv), every=every, test=(xt, yt))
    curve, half = np.asarray(curve), np.asarray(side.half_test)
    r0 = 0
    for k, (params, own_curve, own_half) in enumerate(alone):
        r1 = r0 + len(nets[k])
        for q, q1 in zip(side.parameters(), params):
            assert torch.equal(q.detach()[r0:r1], q1)
        np.testing.assert_array_equal(curve[:, r0:r1], own_curve)
        np.testing.assert_array_equal(half[r0:r1], own_half)
        r0 = r1


def test_input_cache_recomputes_an_input_changed_in_place():
    """The cache keys on the tensor and its version counter: an input changed in place is computed anew."""
    cache, calls = L.InputCache(), []

    def double(t):
        calls.append(1)
        return t * 2

    x = torch.ones(3)
    assert torch.equal(cache(x, double), torch.full((3,), 2.0)) and torch.equal(cache(x, double), 2 * torch.ones(3))
    assert len(calls) == 1  # the second call read the cache
    x.add_(1.0)
    assert torch.equal(cache(x, double), torch.full((3,), 4.0)) and len(calls) == 2
    assert len(cache.entries) == 1  # the stale entry of the same tensor is replaced, not kept beside
