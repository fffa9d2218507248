"""P9 ensembles: the ensemble quantities, the equivalence test and the estimator against hand-computed
cases, closed forms and Monte Carlo; the batched members against members trained alone."""
import pickle

import numpy as np
import pytest
import torch
from scipy import stats

from papers.ensembles import data as data_mod
from papers.ensembles import ensemble, models
from papers.ensembles.params import Setting, parse
from papers.ensembles.stages import build_claims, first_from, replicates, setting_summary
from papers.ensembles.train import augment, log_probs, train_group


def _binary(s: np.ndarray) -> np.ndarray:
    """Two-class probabilities (M, N, 2) whose true class (0) has probability s (M, N)."""
    return np.stack([s, 1 - s], axis=-1)


def _config(**over):
    setting = {"arch": "mlp", "train_size": 300, "widths": [8], "depths": [1], "init_gain": 1.0, "epochs": 1,
               "batch_size": 32, "lr": 0.001, "weight_decay": 0.0, "augment": False}
    cfg = {"members": 4, "pools": 2, "chosen": "a", "control": "b", "selected": ["a", "b"],
           "settings": {"a": dict(setting), "b": {**setting, "widths": [8, 16]}}}
    cfg.update(over)
    return cfg


# ---- ensemble quantities -----------------------------------------------------------------------
def test_member_metrics_and_disagreement_by_hand():
    P = np.array([[[0.9, 0.1], [0.4, 0.6], [0.7, 0.3]],   # member 0 predicts 0, 1, 0
                  [[0.6, 0.4], [0.8, 0.2], [0.2, 0.8]]])  # member 1 predicts 0, 0, 1 (all right)
    y = np.array([0, 0, 1])
    acc, nll = ensemble.member_metrics(P, y)
    np.testing.assert_allclose(acc, [1 / 3, 1])
    np.testing.assert_allclose(nll, [-(np.log(0.9) + np.log(0.4) + np.log(0.3)) / 3,
                                     -(np.log(0.6) + np.log(0.8) + np.log(0.8)) / 3])
    assert ensemble.disagreement(P) == pytest.approx(2 / 3)  # differ on images 1 and 2


def test_curves_endpoints_and_jensen_gap():
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(5), size=(6, 40))  # (M, N, C)
    y = rng.integers(0, 5, 40)
    acc_m, nll_m = ensemble.member_metrics(P, y)
    c = ensemble.curves(P, y, orderings=1)  # identity ordering: members 0, 1, 2, ...
    assert c["acc"][0] == acc_m[0] and c["nll"][0] == pytest.approx(nll_m[0])
    full = P.mean(0)
    assert c["nll"][-1] == pytest.approx(-np.log(full[np.arange(40), y]).mean())
    np.testing.assert_allclose(c["member_nll"], np.cumsum(nll_m) / np.arange(1, 7))
    assert (c["jensen_gap"] >= -1e-12).all() and c["jensen_gap"][0] == pytest.approx(0)
    many = ensemble.curves(P, y, orderings=30, seed=1)
    assert many["nll"][-1] == pytest.approx(c["nll"][-1])  # every ordering ends with the full ensemble
    assert many["member_nll"][-1] == pytest.approx(nll_m.mean())


def test_identical_members_have_no_jensen_gap_and_no_gain():
    rng = np.random.default_rng(1)
    P = np.repeat(rng.dirichlet(np.ones(3), size=(1, 50)), 4, axis=0)
    y = rng.integers(0, 3, 50)
    c = ensemble.curves(P, y, orderings=3)
    np.testing.assert_allclose(c["jensen_gap"], 0, atol=1e-12)
    np.testing.assert_allclose(c["acc"], c["acc"][0])


def test_first_from():
    assert first_from(np.array([False, True, True])) == 2
    assert first_from(np.array([True, False, True, True])) == 3
    assert first_from(np.array([True, True])) == 1
    assert first_from(np.array([True, False])) is None


# ---- equivalence test --------------------------------------------------------------------------
def test_ks_statistic_by_hand():
    s = np.array([[0.1, 0.2, 0.3, 0.4, 0.45], [0.5, 0.6, 0.7, 0.8, 0.9]])
    r = ensemble.equivalence_test(_binary(s), np.zeros(5, dtype=int), alpha=0.05)
    assert r["max_ks"] == 1.0 and r["pairs"] == 1
    assert r["min_p"] == pytest.approx(stats.ks_2samp(s[0], s[1]).pvalue)  # 2 / C(10, 5) = 0.0079


def test_equivalence_test_accepts_one_distribution_and_rejects_two():
    rng = np.random.default_rng(2)
    same = rng.beta(5, 1, size=(8, 600))  # 8 members, one output distribution
    y = np.zeros(600, dtype=int)
    r = ensemble.equivalence_test(_binary(same), y, alpha=0.05)
    assert r["equivalent"] and r["pairs"] == 28
    mixed = np.concatenate([rng.beta(5, 1, size=(4, 600)), rng.beta(3, 1, size=(4, 600))])
    r = ensemble.equivalence_test(_binary(mixed), y, alpha=0.05)
    assert not r["equivalent"] and r["p_bonferroni"] <= 0.05


def test_equivalence_test_level_under_the_null():
    # Independent members with one distribution: the Bonferroni test rejects in at most ~alpha of trials.
    rng = np.random.default_rng(3)
    rejected = [not ensemble.equivalence_test(_binary(rng.uniform(size=(4, 200))), np.zeros(200, dtype=int),
                                              alpha=0.1)["equivalent"] for _ in range(100)]
    assert np.mean(rejected) <= 0.16  # alpha = 0.1, binomial sd 0.03


# ---- estimator ---------------------------------------------------------------------------------
def test_accuracy_estimate_is_the_clt_closed_form():
    # Two classes: margin d = 2 s - 1. Members' s ~ N(mu_n, tau_n^2) per image, so the mean of M members is
    # exactly normal and P(ensemble right) = Phi(sqrt(M) mu_d / sigma_d); many members pin the moments.
    rng = np.random.default_rng(4)
    mu = rng.uniform(0.4, 0.7, 30)
    tau = rng.uniform(0.02, 0.08, 30)
    s = rng.normal(mu, tau, size=(20000, 30))
    sizes = [1, 2, 5, 32]
    est = ensemble.estimate(_binary(s), np.zeros(30, dtype=int), sizes)
    exact = [stats.norm.cdf(np.sqrt(m) * (2 * mu - 1) / (2 * tau)).mean() for m in sizes]
    np.testing.assert_allclose(est["acc"], exact, atol=5e-3)


def test_estimate_matches_measured_ensembles_of_iid_members():
    # A pool of i.i.d. members: the estimate from all of them predicts the measured curve (Monte Carlo).
    rng = np.random.default_rng(5)
    mu = rng.uniform(0.45, 0.9, 400)
    s = np.clip(rng.normal(mu, 0.05, size=(64, 400)), 1e-3, 1 - 1e-3)
    P, y = _binary(s), np.zeros(400, dtype=int)
    c = ensemble.curves(P, y, orderings=50, seed=0)
    est = ensemble.estimate(P, y, c["M"])
    assert np.abs(est["acc"] - c["acc"]).max() < 0.02
    assert np.abs(est["nll"] - c["nll"]).max() < 0.01 * c["nll"][0]


def test_nll_estimate_is_the_k_ensemble_at_m_equals_k_and_second_order_elsewhere():
    rng = np.random.default_rng(6)
    P = rng.dirichlet(np.full(4, 3.0), size=(5, 30))
    y = rng.integers(0, 4, 30)
    est = ensemble.estimate(P, y, [5])
    assert est["nll"][0] == pytest.approx(-np.log(P.mean(0)[np.arange(30), y]).mean())
    # second order at M = 1: the mean member NLL -log mu + sigma^2 / (2 mu^2), on one large sample of members
    s = rng.normal([0.6, 0.8, 0.3], [0.01, 0.02, 0.005], size=(100000, 3))
    est = ensemble.estimate(_binary(s), np.zeros(3, dtype=int), [1])
    mean_nll = (-np.log(s)).mean()
    plug_in = (-np.log(s.mean(0))).mean()
    assert est["nll"][0] - plug_in == pytest.approx(mean_nll - plug_in, rel=0.02)


# ---- members -----------------------------------------------------------------------------------
def test_glorot_init_bounds_and_shapes():
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    net = models.GroupMLP(gens, 64, 32, 2, 10, gain=2.0)
    assert [tuple(w.shape) for w in net.weights] == [(3, 64, 32), (3, 32, 32), (3, 32, 10)]
    for w, b in zip(net.weights, net.biases):
        bound = 2.0 * np.sqrt(6 / (w.shape[1] + w.shape[2]))
        assert w.abs().max() <= bound and b.abs().max() <= bound and w.abs().max() > 0.9 * bound
    assert net(torch.zeros(3, 5, 64)).shape == (3, 5, 10)


def test_members_trained_together_equal_members_trained_alone():
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(70, 64, generator=g), torch.randint(0, 10, (70,), generator=g)
    s = Setting(widths=(16,), depths=(2,), epochs=3, batch_size=16)
    both, _ = train_group(s, [3, 7], 16, 2, x, y, 10)
    alone, _ = train_group(s, [7], 16, 2, x, y, 10)
    torch.testing.assert_close(log_probs(both, x, 2)[1], log_probs(alone, x, 1)[0], rtol=1e-5, atol=1e-6)
    again, _ = train_group(s, [3, 7], 16, 2, x, y, 10)
    assert torch.equal(log_probs(both, x, 2), log_probs(again, x, 2))  # deterministic


def test_resnet18_and_augmentation_shapes():
    net = models.build("resnet18", [torch.Generator().manual_seed(0)], d_in=3072, width=2, depth=1, n_classes=10,
                       gain=1.0).eval()
    x = torch.rand(1, 3, 3 * 32 * 32)
    assert net(x).shape == (1, 3, 10)
    out = augment(x[0], torch.Generator().manual_seed(0))
    assert out.shape == (3, 3072)
    # the full scale's path: one ResNet member, augmented mini-batches, then its test probabilities
    s = Setting(arch="resnet18", widths=(2,), epochs=1, batch_size=4, augment=True)
    images, labels = torch.rand(8, 3072), torch.arange(8) % 10
    model, train_loss = train_group(s, [0], 2, 1, images, labels, 10)
    lp = log_probs(model, images, 1)
    assert lp.shape == (1, 8, 10) and torch.isfinite(train_loss).all()
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(1, 8, dtype=torch.float64))


# ---- data and parameters -----------------------------------------------------------------------
def test_digits_split_and_cifar_loaders(tmp_path):
    df = data_mod.digits(test_size=1000, seed=0)
    assert (df.split == "test").sum() == 1000 and (df.split == "train").sum() == 797
    x, y = data_mod.arrays(df, "train", 300)
    assert x.shape == (300, 64) and 0 <= x.min() and x.max() <= 1 and set(y) <= set(range(10))

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, n in [*((f"data_batch_{i}", 4) for i in range(1, 6)), ("test_batch", 3)]:
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": list(range(n))}, f)
    df = data_mod.cifar(folder)
    assert (df.split == "train").sum() == 20 and (df.split == "test").sum() == 3 and df.shape[1] == 3074

    bad = tmp_path / "bad.npz"
    np.savez(bad, x_train=np.zeros((2, 28, 28)), y_train=np.zeros(2), x_test=np.zeros((1, 28, 28)), y_test=np.zeros(1))
    with pytest.raises(ValueError, match="bad.npz.*x_train"):
        data_mod.cifar(bad)


def test_params_parse_and_cross_field_rules():
    p = parse(_config())
    assert list(p.settings) == ["a", "b"] and p.jobs == 1
    assert p.job_members(0)[:2] == [("a", 0), ("a", 1)]
    assert [p.settings["b"].architecture(m, 4) for m in range(4)] == [(8, 1), (8, 1), (16, 1), (16, 1)]
    with pytest.raises(ValueError, match="chosen"):
        parse(_config(chosen="b"))  # heterogeneous
    with pytest.raises(ValueError, match="selected"):
        parse(_config(selected=["a", "zzz"]))
    with pytest.raises(ValueError, match="pools"):
        parse(_config(pools=3))  # 4 // 3 = 1 member per pool: no ensemble
    with pytest.raises(KeyError, match="settings.a.hidden"):
        parse(_config(settings={"a": {"hidden": 3}}))


def test_augmentation_shifts_and_flips_like_a_loop():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(6, 3 * 32 * 32, generator=g)
    out = augment(x, torch.Generator().manual_seed(5)).reshape(6, 3, 32, 32)
    gen = torch.Generator().manual_seed(5)  # the same draws, applied one image at a time
    dy, dx = torch.randint(0, 9, (2, 6, 1), generator=gen)
    flip = torch.rand(6, 1, generator=gen) < 0.5
    padded = torch.nn.functional.pad(x.reshape(6, 3, 32, 32), (4, 4, 4, 4))
    for i in range(6):
        want = padded[i, :, dy[i, 0]:dy[i, 0] + 32, dx[i, 0]:dx[i, 0] + 32]
        torch.testing.assert_close(out[i], want.flip(-1) if flip[i, 0] else want)


# ---- claims ------------------------------------------------------------------------------------
def test_replicates_pools_and_disjoint_pairs_by_hand():
    rng = np.random.default_rng(4)
    s = rng.uniform(0.2, 0.9, size=(4, 30))
    P, y = _binary(s), np.zeros(30, dtype=int)
    r = replicates(parse(_config()), P, y)  # 2 pools of 2 members
    assert r["pool_size"] == 2 and len(r["pools"]) == 2
    acc_m, _ = ensemble.member_metrics(P, y)
    pool1 = r["pools"].iloc[1]
    assert pool1.best_acc == acc_m[2:].max() and pool1.mean_acc == pytest.approx(acc_m[2:].mean())
    assert pool1.ensemble_nll == pytest.approx(-np.log(s[2:].mean(0)).mean())
    assert sorted(np.ravel(r["pairs"]).tolist()) == [0, 1, 2, 3]  # a perfect matching: disjoint pairs
    i, j = r["pairs"][0]
    assert r["pair_p"][0] == pytest.approx(stats.ks_2samp(s[i], s[j]).pvalue)


def _synthetic_evaluation(cfg, pools: dict[str, np.ndarray], tmp_path):
    """Run the evaluate stage on synthetic member probabilities; return what report() hands build_claims."""
    import pandas as pd

    from papers.ensembles import stages

    p = parse(cfg)
    frames, members = [], []
    for name, s in pools.items():
        P = _binary(s)
        for m in range(len(P)):
            frames.append(pd.DataFrame({"setting": name, "member": m, "sample": np.arange(P.shape[1]), "label": 0,
                                        "p0": P[m, :, 0], "p1": P[m, :, 1]}))
            members.append({"setting": name, "member": m, "train_loss": 0.0, "train_acc": 1.0})
    pd.concat(frames).to_parquet(tmp_path / "probs.parquet")
    pd.DataFrame(members).to_parquet(tmp_path / "members.parquet")
    stages.evaluate(cfg=cfg, probs=[str(tmp_path / "probs.parquet")], members=[str(tmp_path / "members.parquet")],
                    metrics=str(tmp_path / "metrics.json"), curves=str(tmp_path / "curves.parquet"))
    from papers.common.io import read_json

    m, curves_df = read_json(tmp_path / "metrics.json"), pd.read_parquet(tmp_path / "curves.parquet")
    rows = {n: setting_summary(n, m[n], curves_df[curves_df.setting == n]) for n in p.settings}
    reps = {n: replicates(p, _binary(pools[n]), np.zeros(pools[n].shape[1], dtype=int)) for n in p.settings}
    blocks = {n: {"acc": m[n]["estimator_blocks_acc_max_error"], "nll": m[n]["estimator_blocks_nll_max_error"]}
              for n in p.settings}
    return build_claims(p, rows, curves_df, reps, blocks)


def test_claim_c_holds_for_iid_members_and_its_heterogeneous_control_does_not(tmp_path):
    rng = np.random.default_rng(5)
    N = 400
    logit = rng.normal(1.0, 1.0, size=N)  # the test points' difficulty, shared by all members
    same = 1 / (1 + np.exp(-(logit + rng.normal(0, 1.0, size=(32, N)))))  # i.i.d. members
    shift = np.repeat([-3.0, -1.0, 1.0, 3.0], 8)[:, None]  # four "architectures" in blocks of 8
    mixed = 1 / (1 + np.exp(-(logit + shift + rng.normal(0, 1.0, size=(32, N)))))
    cfg = _config(members=32, pools=4, estimator_members=4, orderings=3)
    claims = {c.id: c for c in _synthetic_evaluation(cfg, {"a": same, "b": mixed}, tmp_path)}
    assert [c for c in claims] == ["a", "c", "d", "e"]
    c = claims["c"]
    assert c.evidence[0].replicates == 16 and c.verdict == "holds"
    assert c.control.verdict != "holds"
    assert claims["e"].verdict == "holds"  # averaging noisy i.i.d. members raises accuracy
    assert claims["a"].control.verdict == "not measured"
