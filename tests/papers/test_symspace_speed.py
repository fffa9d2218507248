"""symspace's speed-only paths against the straightforward ones, bit for bit (review symspace_r12: the tree heads'
per-seed outcomes are chaotic under float rounding, so a speed change must not move a single bit)."""
import numpy as np
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
