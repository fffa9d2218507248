"""P4 symspace: the Busemann distances against their definitions, hand-worked cases and independent computations."""
import numpy as np
import pytest
import torch

from papers.symspace import data as D
from papers.symspace import geometry as geo
from papers.symspace import layers as L
from papers.symspace.params import Params, parse
from papers.common.params import to_dict


def _spd(n, rng):
    a = rng.normal(size=(n, n))
    return a @ a.T / n + 0.3 * np.eye(n)


def _h(n, alpha, beta, rng):
    h = np.cumsum(-(0.3 + rng.uniform(size=n)))
    h = h - h.mean() + rng.normal()
    return h / np.sqrt(alpha * h @ h + beta * h.sum() ** 2)


def test_udu_decomposition_by_hand():
    # X = U D U^T with U = [[1, 2], [0, 1]], D = diag(3, 5): X = [[3 + 4*5, 2*5], [2*5, 5]] = [[23, 10], [10, 5]].
    x = torch.tensor([[23.0, 10.0], [10.0, 5.0]], dtype=torch.float64)
    np.testing.assert_allclose(geo.log_diag_udu(x).numpy(), np.log([3.0, 5.0]), rtol=1e-12)
    # The plain Cholesky factor gives X = L D' L^T with D' = (23, 5 - 100/23): another decomposition.
    np.testing.assert_allclose(geo.log_diag_udu(x, reverse=False).numpy(), np.log([23.0, 5 - 100 / 23]), rtol=1e-12)


@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (1.0, 0.5), (2.0, -0.3)])
def test_closed_form_equals_the_limit_definition(alpha, beta):
    rng = np.random.default_rng(0)
    times = [128, 256, 512]  # large enough that the terms exp(-t (h_i - h_i+1)) are negligible
    for _ in range(2):
        x, h = _spd(4, rng), _h(4, alpha, beta, rng)
        closed = float(geo.spd_busemann(torch.as_tensor(x), torch.as_tensor(h), alpha, beta))
        gaps = geo.spd_busemann_limit(x, h, alpha, beta, times, dps=350)
        assert geo.richardson(times, gaps) == pytest.approx(closed, abs=1e-6)
        # The gap shrinks like 1/t: t * (gap) is nearly constant across a doubling.
        tg = [t * (g - closed) for t, g in zip(times, gaps)]
        assert abs(tg[-1] / tg[-2] - 1) < 0.05
        # Negative controls: the plain Cholesky factor and (for beta != 0) the beta term dropped miss the limit.
        wrong = float(geo.spd_busemann(torch.as_tensor(x), torch.as_tensor(h), alpha, beta, reverse=False))
        assert abs(wrong - geo.richardson(times, gaps)) > 1e-3
        if beta:
            dropped = float(geo.spd_busemann(torch.as_tensor(x), torch.as_tensor(h), alpha, 0.0))
            assert abs(dropped - geo.richardson(times, gaps)) > 1e-3


def test_distance_against_scipy_and_on_the_ray():
    rng = np.random.default_rng(1)
    x, y = _spd(3, rng), _spd(3, rng)
    from scipy.linalg import fractional_matrix_power, logm

    xs = fractional_matrix_power(x, -0.5)
    lg = np.real(logm(xs @ y @ xs))
    assert geo.spd_distance(x, y, 1.0, 0.5) == pytest.approx(np.sqrt((lg ** 2).sum() + 0.5 * np.trace(lg) ** 2))
    # On the ray itself, X = exp(s H): B(X) = -s.
    h = _h(3, 1.0, 0.5, rng)
    x_on = torch.as_tensor(np.diag(np.exp(2.5 * h)))
    assert float(geo.spd_busemann(x_on, torch.as_tensor(h), 1.0, 0.5)) == pytest.approx(-2.5)


def test_invariances_and_the_logeig_case():
    rng = np.random.default_rng(2)
    x, h = _spd(4, rng), _h(4, 1.0, 0.0, rng)
    ht = torch.as_tensor(h)
    b = float(geo.spd_busemann(torch.as_tensor(x), ht))
    nu = np.triu(rng.normal(size=(4, 4)), 1) + np.eye(4)  # unit upper triangular: moves along horospheres
    assert float(geo.spd_busemann(torch.as_tensor(nu @ x @ nu.T), ht)) == pytest.approx(b, abs=1e-12)
    a = np.diag(np.exp(rng.normal(size=4)))  # the diagonal group translates B by -<h, log a^2>
    assert float(geo.spd_busemann(torch.as_tensor(a @ x @ a), ht)) == pytest.approx(b - 2 * h @ np.log(np.diag(a)))
    d = np.exp(rng.normal(size=4))  # diagonal X: the LogEig-linear form
    assert float(geo.spd_busemann(torch.as_tensor(np.diag(d)), ht)) == pytest.approx(-h @ np.log(d))


def test_ball_horocycle_limit_and_ganea_on_the_normal_geodesic():
    rng = np.random.default_rng(3)
    for _ in range(3):
        p = rng.normal(size=3)
        p *= 0.5 / np.linalg.norm(p)
        a = rng.normal(size=3)
        x = rng.normal(size=3)
        x *= 0.7 / np.linalg.norm(x)
        s = float(geo.ball_horocycle(torch.as_tensor(x)[None], torch.as_tensor(p)[None], torch.as_tensor(a)[None]))
        limit = geo.ball_busemann_limit(x, p, a / np.linalg.norm(a), [16.0])[0]
        assert s == pytest.approx(-limit, abs=1e-8)
        # On the geodesic through p normal to the hyperplane the horocycle and gyroplane distances agree
        # (both are the signed distance along the geodesic: 2 artanh r).
        r = 0.6
        on = geo.mobius_add(torch.as_tensor(p), r * torch.as_tensor(a / np.linalg.norm(a)))[None]
        hor = float(geo.ball_horocycle(on, torch.as_tensor(p)[None], torch.as_tensor(a)[None]))
        gyr = float(geo.ball_gyroplane(on, torch.as_tensor(p)[None], torch.as_tensor(a)[None]))
        assert hor == pytest.approx(2 * np.arctanh(r)) and gyr == pytest.approx(2 * np.arctanh(r))
    # At the origin with p = 0: Ganea's distance is asinh(0) = 0, the horocycle's log(1) - log(1) = 0.
    zero = torch.zeros(1, 2, dtype=torch.float64)
    assert float(geo.ball_horocycle(zero, zero, torch.tensor([[1.0, 0.0]], dtype=torch.float64))) == 0.0


def test_mobius_addition_against_a_hand_case():
    # In 1-d the Poincare ball is (-1, 1) and x (+) y = (x + y) / (1 + x y).
    x, y = torch.tensor([[0.5]], dtype=torch.float64), torch.tensor([[0.3]], dtype=torch.float64)
    assert float(geo.mobius_add(x, y)) == pytest.approx(0.8 / 1.15)


def test_symmetric_function_gradient_matches_finite_differences_even_at_repeated_eigenvalues():
    rng = np.random.default_rng(4)
    for x0 in (_spd(3, rng), np.eye(3)):  # the identity: every eigenvalue repeated
        x = torch.as_tensor(x0, dtype=torch.float64).requires_grad_(True)
        w = torch.as_tensor(rng.normal(size=(3, 3)))
        (geo.sym_funcm(x, "log") * w).sum().backward()
        e = torch.as_tensor(L.sym(torch.as_tensor(rng.normal(size=(3, 3)))))
        eps = 1e-6
        fd = ((geo.sym_funcm(x.detach() + eps * e, "log") - geo.sym_funcm(x.detach() - eps * e, "log")) * w).sum() / (2 * eps)
        assert float((x.grad * e).sum()) == pytest.approx(float(fd), rel=1e-5, abs=1e-8)


def test_frechet_mean_of_commuting_matrices_is_the_geometric_mean():
    # Diagonal matrices commute: the affine-invariant weighted mean is exp(sum w log X), reached at once.
    xs = torch.stack([torch.diag(torch.tensor(v, dtype=torch.float64)) for v in ([1.0, 4.0], [4.0, 1.0], [2.0, 2.0])])
    w = torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64)
    m = L.frechet_mean(xs, w, iters=3)[0]
    expected = np.exp(0.5 * np.log([1, 4]) + 0.25 * np.log([4, 1]) + 0.25 * np.log([2, 2]))
    np.testing.assert_allclose(np.diag(m.numpy()), expected, rtol=1e-10)
    # Two non-commuting matrices with equal weights: the AI midpoint A # B = A^1/2 (A^-1/2 B A^-1/2)^1/2 A^1/2.
    rng = np.random.default_rng(5)
    a, b = _spd(3, rng), _spd(3, rng)
    from scipy.linalg import sqrtm

    ah, aih = sqrtm(a), np.linalg.inv(sqrtm(a))
    mid = np.real(ah @ sqrtm(aih @ b @ aih) @ ah)
    m = L.frechet_mean(torch.as_tensor(np.stack([a, b])), torch.tensor([[0.5, 0.5]], dtype=torch.float64), iters=20)[0]
    np.testing.assert_allclose(m.numpy(), mid, rtol=1e-8, atol=1e-10)


def test_busemann_mlr_logit_is_the_scaled_distance():
    g = torch.Generator().manual_seed(0)
    layer = L.BusemannDistance(3, 2, 1.0, 0.5, g)
    rng = np.random.default_rng(6)
    x = torch.as_tensor(_spd(3, rng))[None]
    out = layer(x)[0]
    for k in range(2):
        pis = torch.linalg.matrix_exp(-L.sym(layer.s[k]) / 2)
        rot = L.orthogonal_param(layer.r[k])
        y = rot.T @ pis @ x[0] @ pis @ rot
        a = torch.sort(layer.a[k], descending=True).values
        norm = torch.sqrt(geo.ab_inner(a, a, 1.0, 0.5))
        expected = -norm * geo.spd_busemann(L.sym(y), a / norm, 1.0, 0.5)
        assert float(out[k].detach()) == pytest.approx(float(expected.detach()), rel=1e-10)


def test_region_covariance_by_hand():
    img = np.zeros((1, 2, 2))
    img[0, 0, 1] = 1.0  # one bright pixel
    cov = D.region_covariances(img, eps=0.0)[0]
    feats = np.array([[0, 1, 0, 1], [0, 0, 1, 1], [0, 1, 0, 0], [1, 1, 0, 0], [0, 1, 0, 1]], float)  # x, y, I, |Ix|, |Iy|
    np.testing.assert_allclose(cov, np.cov(feats, bias=True), atol=1e-12)


def test_bad_input_names_the_file_the_key_and_the_record(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        D.load_trials_npz(str(tmp_path / "missing.npz"), 2, 0.0)
    path = tmp_path / "subject.npz"
    np.savez(path, trials=np.zeros((3, 2, 8)), labels=np.zeros(3))
    with pytest.raises(ValueError, match="subject.npz: missing array 'session'"):
        D.load_trials_npz(str(path), 2, 0.0)
    trials = np.random.default_rng(0).normal(size=(3, 2, 8))
    trials[1, 0, 3] = np.nan
    np.savez(path, trials=trials, labels=np.zeros(3), session=np.zeros(3))
    with pytest.raises(ValueError, match="record 1"):
        D.load_trials_npz(str(path), 2, 0.0)
    with pytest.raises(FileNotFoundError, match="symspace.eeg_datasets"):
        D.load_trials_npz(str(tmp_path / "gone.npz"), 2, 0.0)
    cfg = to_dict(Params())
    with pytest.raises(ValueError, match="symspace.train.steps"):
        parse({**cfg, "train": {**cfg["train"], "steps": 100, "eval_every": 50}})
    with pytest.raises(KeyError, match="symspace.tempo"):
        parse({**cfg, "tempo": 1})
    with pytest.raises(ValueError, match="symspace.metrics"):
        parse({**cfg, "metrics": [[1.0, 0.5], [1.0, 2.0]]})
    with pytest.raises(ValueError, match="symspace.check.times"):
        parse({**cfg, "check": {**cfg["check"], "times": [10, 30]}})


def test_loader_reads_a_well_formed_file(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "s.npz"
    np.savez(path, trials=rng.normal(size=(4, 3, 20)), labels=np.array([0, 1, 0, 1]), session=np.array([0, 0, 1, 1]))
    out = D.load_trials_npz(str(path), 2, 0.0)
    assert out["train"]["tokens"].shape == (2, 2, 3, 3) and out["test"]["labels"].tolist() == [0, 1]


def test_adam_matches_torch():
    from papers.symspace.train import fit

    def model_pair():
        g = torch.Generator().manual_seed(0)
        return L.LogEigLinear(3, 2, g)

    rng = np.random.default_rng(8)
    x = torch.as_tensor(np.stack([_spd(3, rng) for _ in range(6)]))
    y = torch.tensor([0, 1, 0, 1, 0, 1])
    ours, _ = fit(model_pair(), x, y, steps=5, lr=0.1)
    ref = model_pair()
    opt = torch.optim.Adam(ref.parameters(), lr=0.1)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        opt.step()
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


# ---- training, the tree, the claims --------------------------------------------------------------------------
def test_late_gain_reads_the_last_quarter_against_the_best_before():
    from papers.symspace.train import late_gain

    assert late_gain([0.2, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.62]) == pytest.approx(0.02)  # last quarter: 0.6, 0.62
    assert late_gain([0.2, 0.9, 0.8, 0.7]) == pytest.approx(-0.2)  # peaked early
    assert np.isnan(late_gain([0.5, 0.6]))  # too short a curve to tell


def test_angle_rule_solves_sectors_and_not_what_the_isometry_moves():
    from papers.symspace.train import angle_rule, split

    # The unmoved tree's classes are angular sectors about the origin: the rule reads them off; after the isometry
    # the same rule, learned the same way, cannot.
    base = {"seeds": 1, "branching": 3, "depth": 4, "label_depth": 2, "edge_length": 1.0, "noise": 0.0,
            "train_fraction": 0.5, "angle_bins": 36, "planted_classes": 3, "planted_share": 0.5}
    for shift, bound in ((0.0, lambda acc: acc == 1.0), (3.0, lambda acc: acc < 0.7)):
        tree = D.noisy_tree({**base, "root_shift": shift}, seed=0)
        tr, te = split(tree["labels"], 0.5, np.random.default_rng(0))
        assert bound(angle_rule(tree["points"][tr], tree["labels"][tr], tree["points"][te], tree["labels"][te], 36))


def test_the_isometry_keeps_every_hyperbolic_distance():
    base = {"seeds": 1, "branching": 2, "depth": 4, "label_depth": 1, "edge_length": 1.0, "noise": 0.3,
            "train_fraction": 0.5, "angle_bins": 8, "planted_classes": 3, "planted_share": 0.5}
    a, b = D.noisy_tree({**base, "root_shift": 0.0}, 4), D.noisy_tree({**base, "root_shift": 2.5}, 4)
    xa, xb = torch.as_tensor(a["points"]), torch.as_tensor(b["points"])
    da = geo.ball_distance(xa[:, None], xa[None])
    db = geo.ball_distance(xb[:, None], xb[None])
    torch.testing.assert_close(da, db, rtol=1e-7, atol=1e-7)
    assert (a["labels"] == b["labels"]).all() and not np.allclose(a["points"], b["points"])
    # the moved root: the depth-1 nodes' centre lies near hyperbolic distance root_shift from the origin
    assert float(geo.ball_distance(xb, torch.zeros(2, dtype=torch.float64)).min()) > 0.5


def test_ball_busemann_head_is_the_released_formula():
    g = torch.Generator().manual_seed(1)
    head = L.BallMLR(2, 3, "busemann", g)
    x = torch.tensor([[0.3, -0.2], [0.1, 0.7]], dtype=torch.float64)
    out = head(x)
    p = head._p()
    for k in range(3):
        y = geo.mobius_add(-p[k], x)
        r = y.norm(dim=-1)
        omega = head.a[k] / head.a[k].norm()
        s = torch.log(1 - r ** 2) - ((y - omega) ** 2).sum(-1).log()
        torch.testing.assert_close(out[:, k], 2 * torch.atanh(r) / r * s)


def test_spdnet_heads_share_their_initial_backbone():
    from papers.symspace.train import generator

    a = L.SPDNet(5, 3, 4, generator(0, "backbone"), head="logeig_linear", head_generator=generator(0, "a"))
    b = L.SPDNet(5, 3, 4, generator(0, "backbone"), head="busemann_mlr", head_generator=generator(0, "b"))
    torch.testing.assert_close(a.bimap.weight, b.bimap.weight)
    x = torch.as_tensor(np.stack([_spd(5, np.random.default_rng(i)) for i in range(3)]))
    assert a(x).shape == b(x).shape == (3, 4)
    with pytest.raises(ValueError, match="unknown SPDNet head"):
        L.SPDNet(5, 3, 4, generator(0), head="mlp")


def _planted(effect: float, late: float = 0.0, replicates: int = 10, half_effect: float | None = None,
             controls: int | None = None, positive: float | None = 0.1) -> "pd.DataFrame":
    """An accuracy table like the train stage's, with the Busemann head `effect` above the LogEig head (at the first
    half's checkpoint `half_effect`, default the same); permuted-label controls on the first `controls` replicates;
    claim (b)'s positive control (task spd_planted) with the Busemann head `positive` above (None: not run)."""
    import pandas as pd

    rng = np.random.default_rng(0)
    half_effect = effect if half_effect is None else half_effect
    rows = []
    for task in ("eeg", "digits"):
        for r in range(replicates):
            base, noise = 0.6 + 0.05 * rng.normal(), 0.01 * rng.normal()
            for arm, v, h in (("spdnet_logeig_linear", base, base),
                              ("spdnet_busemann_mlr", base + effect + noise, base + half_effect + noise)):
                rows.append({"task": task, "replicate": r, "arm": arm, "variant": "main", "test_acc": v,
                             "half_test_acc": h, "late_gain": late})
                if controls is None or r < controls:
                    rows.append({"task": task, "replicate": r, "arm": arm, "variant": "permuted_labels",
                                 "test_acc": 0.25 + 0.02 * rng.normal(), "half_test_acc": float("nan"),
                                 "late_gain": 0.0})
    if positive is not None:
        for r in range(8):
            base, noise = 0.7 + 0.05 * rng.normal(), 0.01 * rng.normal()
            for arm, v in (("spdnet_logeig_linear", base), ("spdnet_busemann_mlr", base + positive + noise),
                           ("generating_head", 1.0)):
                rows.append({"task": "spd_planted", "replicate": r, "arm": arm, "variant": "main", "test_acc": v,
                             "half_test_acc": v, "late_gain": late})
    return pd.DataFrame(rows)


def _decidable_b_params():
    """Params under which claim (b)'s verdict rests on its evidence, controls and measured premises: real EEG named
    (the paper's data), where the analogue's unmeasured function-class premise (report.function_class_premise) does
    not apply. The logic of (b) is the same on either data."""
    import dataclasses

    return dataclasses.replace(parse(to_dict(Params())), eeg_datasets={"bcic_iv_2a": "data/bcic"})


def test_claim_b_cannot_hold_unless_its_positive_control_finds_the_planted_busemann_head_ahead():
    from papers.symspace.report import claim_b, symspace_checks

    analogue = parse(to_dict(Params()))
    # On the mixing-model analogue (b) is at most inconclusive: whether the task tells the heads' function classes
    # apart is not measured (review symspace_r7), so even a planted EEG gain cannot make it hold.
    gated = claim_b(analogue, _planted(0.1))
    assert gated.verdict == "inconclusive" and gated.positive_control.verdict == "holds"
    assert [g.met for g in gated.premise if "function classes" in g.name] == [False]
    # On real EEG (the paper's data) that gate does not apply; the rest of the logic is the same.
    p = _decidable_b_params()
    assert not [g for g in claim_b(p, _planted(0.1)).premise if "function classes" in g.name]
    held = claim_b(p, _planted(0.1))
    assert held.verdict == "holds" and held.positive_control.verdict == "holds"
    # The analysis is blind where the Busemann head is the right model: (b) cannot hold, whatever EEG says.
    blind = claim_b(p, _planted(0.1, positive=0.0))
    assert blind.verdict == "inconclusive" and "positive control" in blind.note
    assert claim_b(p, _planted(0.1, positive=-0.1)).verdict == "inconclusive"
    # Not run: said so, and the claim is decided on its evidence alone.
    assert claim_b(p, _planted(0.1, positive=None)).positive_control is None
    # The generating network labels its own planted test set right: the check passes; a wrong one fails it.
    import pandas as pd

    from papers.symspace.stages import CHECKS

    chk = pd.DataFrame([{"check": name, "error": 0.0} for name in CHECKS.values()])
    acc = _planted(0.1)
    ok = {c.id: c.passed for c in symspace_checks(p, chk, acc)}
    assert ok["spd_planted_representable"]
    bad = acc.assign(test_acc=np.where((acc.task == "spd_planted") & (acc.arm == "generating_head"), 0.9,
                                       acc.test_acc))
    assert not {c.id: c.passed for c in symspace_checks(p, chk, bad)}["spd_planted_representable"]


def test_planted_spd_labels_lie_in_the_busemann_heads_function_class():
    from papers.symspace.train import planted_spd

    cfg = {"classes": 3, "per_class": 12, "log_spread": 2.0, "train_fraction": 0.5}
    x, y, teacher = planted_spd(0, 5, 3, cfg)
    assert x.shape == (36, 5, 5) and np.bincount(y.numpy()).tolist() == [12, 12, 12]
    assert torch.linalg.eigvalsh(x).min() > 0  # SPD
    assert float((teacher(x).argmax(-1) == y).double().mean()) == 1.0  # the Busemann SPDNet gives every label
    x2, y2, _ = planted_spd(0, 5, 3, cfg)
    assert torch.equal(x, x2) and torch.equal(y, y2)  # its own stream: reruns draw the same set


def test_quadratic_plant_lies_in_the_busemann_class_and_outside_the_logeig_heads():
    """Claim (b)'s positive control (normals a_k = -e_m): the generating Busemann SPDNet labels
    every matrix right, while the best LogEig + linear head on the generating network's OWN backbone (the most
    favourable backbone a LogEig student could learn: logistic regression on vec(log Z), nearly unregularised,
    fitted to every matrix) cannot reproduce the labels. The same regression fits labels drawn by a random linear
    form of log Z exactly (it is able to fit what is linear), and the bound fails for a plant that is linear."""
    from sklearn.linear_model import LogisticRegression

    from papers.symspace.train import planted_spd

    cfg = {"classes": 3, "per_class": 160, "log_spread": 2.0, "train_fraction": 0.5}
    for seed in (0, 1):
        x, y, teacher = planted_spd(seed, 6, 4, cfg)
        with torch.no_grad():
            assert float((teacher(x).argmax(-1) == y).double().mean()) == 1.0  # in the Busemann head's class
            assert torch.equal(teacher.head.dist.a, -torch.eye(4, dtype=torch.float64)[-1].expand(3, 4))
            z = teacher.reeig(teacher.bimap(x))
            feats = L.LogEig()(z).numpy()
            # The quadratic plant's logit is -log(v_k^T Z v_k), v_k = P_k^-1/2 R_k e_m (the UDU^T corner entry).
            d = teacher.head.dist
            v = (torch.linalg.matrix_exp(-L.sym(d.s) / 2) @ L.orthogonal_param(d.r))[..., -1]  # (K, m)
            direct = -torch.log(torch.einsum("ki,nij,kj->nk", v, z, v))
            torch.testing.assert_close(teacher(x), direct)
        fit = LogisticRegression(C=1e6, max_iter=20000).fit(feats, y.numpy()).score(feats, y.numpy())
        assert fit < 0.92, fit  # the LogEig + linear head cannot represent the planted labels (measured 0.84-0.86)
        w = np.random.default_rng(seed).normal(size=(feats.shape[1], 3))
        linear = (feats @ w).argmax(1)
        assert LogisticRegression(C=1e6, max_iter=20000).fit(feats, linear).score(feats, linear) >= 0.99


def test_claim_b_finds_a_planted_gain_and_an_unconverged_arm_is_inconclusive():
    from papers.symspace.report import claim_b

    p = _decidable_b_params()
    assert claim_b(p, _planted(0.1)).verdict == "holds"
    assert claim_b(p, _planted(-0.1)).verdict == "does not hold"
    # Decided on EEG alone: the digits (context) losing does not make the claim fail, nor their late rise gate it.
    acc = _planted(0.1)
    digits = (acc.task == "digits") & (acc.arm == "spdnet_busemann_mlr")
    ctx = acc.assign(test_acc=np.where(digits, acc.test_acc - 0.3, acc.test_acc),
                     half_test_acc=np.where(digits, acc.half_test_acc - 0.3, acc.half_test_acc),
                     late_gain=np.where(acc.task == "digits", 0.2, acc.late_gain))
    held = claim_b(p, ctx)
    assert held.verdict == "holds" and all(e.name.startswith("eeg") for e in held.evidence)
    assert any(k.startswith("context (digits") for k in held.measured)
    stuck = claim_b(p, _planted(-0.1, late=0.2))  # an EEG arm still rising on validation: the gate is unmet
    assert stuck.verdict == "inconclusive" and "every arm converged" in stuck.note
    # The effect moves by 0.15 between the first half's checkpoint and the whole run's: unstable, inconclusive.
    unstable = claim_b(p, _planted(0.1, half_effect=-0.05))
    assert unstable.verdict == "inconclusive" and "stable across step counts" in unstable.note
    # Controls on fewer replicates than the heads: the control pairs on the replicates it has.
    fewer = claim_b(p, _planted(0.1, replicates=12, controls=4))
    assert fewer.verdict == "holds" and fewer.control.evidence[0].replicates == 4


def test_fit_returns_the_best_validation_checkpoint_per_replica():
    from papers.symspace.train import accuracy, fit

    rng = np.random.default_rng(2)
    x = torch.as_tensor(rng.uniform(-0.6, 0.6, size=(3, 30, 2)))
    y = torch.as_tensor((x[..., 0] > 0).long() + (x[..., 1] > 0).long())
    xv = torch.as_tensor(rng.uniform(-0.6, 0.6, size=(3, 20, 2)))
    yv = torch.as_tensor((xv[..., 0] > 0).long() + (xv[..., 1] > 0).long())
    model = L.BallMLR(2, 3, "ganea", torch.Generator().manual_seed(0), replicas=3)
    # a learning rate large enough that the validation accuracy moves about: the best point is not the last
    model, curve = fit(model, x, y, steps=40, lr=0.3, val=(xv, yv), every=2, test=(xv, yv))
    curve = np.asarray(curve)
    np.testing.assert_allclose(accuracy(model, xv, yv), curve.max(0))  # restored to each replica's best
    assert model.half_test is not None and np.all(np.asarray(model.half_test) <= curve.max(0) + 1e-12)
    np.testing.assert_allclose(model.half_test, curve[:10].max(0))  # test = validation here: the first half's best


def test_planted_tree_labels_are_equal_classes_the_busemann_head_represents_exactly():
    from papers.symspace.train import generating_head_accuracy

    rng = np.random.default_rng(3)
    x = rng.uniform(-0.6, 0.6, size=(120, 2))
    planted = D.horocycle_head_labels(x, 3, 25, np.random.default_rng(7))
    assert np.bincount(planted["labels"]).tolist() == [25, 25, 25]
    # numpy's logits are the Busemann head's (layers.BallMLR) with p = the drawn base points, a = omega
    head = L.BallMLR(2, 3, "busemann", torch.Generator().manual_seed(0))
    p = torch.as_tensor(planted["p"])
    with torch.no_grad():
        head.p.copy_(torch.atanh(p.norm(dim=-1, keepdim=True)) * p / p.norm(dim=-1, keepdim=True))
        head.a.copy_(torch.as_tensor(planted["omega"]))
    torch.testing.assert_close(head(torch.as_tensor(x)),
                               torch.as_tensor(D.busemann_logits(x, planted["p"], planted["omega"])))
    tree = {"horocycle_points": x[planted["index"]], "horocycle_labels": planted["labels"],
            "horocycle_head": {"p": planted["p"], "omega": planted["omega"]}}
    assert generating_head_accuracy(tree, np.arange(75)) == 1.0
    with pytest.raises(ValueError, match="planted_share"):  # no head gives 3 classes of 50 of 120 points
        D.horocycle_head_labels(x, 3, 50, np.random.default_rng(7), tries=20)


def test_ball_heads_inner_product_forward_equals_the_mobius_formulas():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(3, 40, 2, generator=g, dtype=torch.float64) * 1.4 - 0.7
    for kind in ("busemann", "ganea"):
        head = L.BallMLR(2, 4, kind, g, replicas=3)
        with torch.no_grad():
            head.p.mul_(80)  # base points well away from the origin
        p = head._p()
        if kind == "busemann":
            r = geo.mobius_add(-p.unsqueeze(-3), x.unsqueeze(-2)).norm(dim=-1).clamp(1e-12, 1 - 1e-12)
            ref = 2 * torch.atanh(r) / r * geo.ball_horocycle(x, p, head.a)
        else:
            ref = ((2 / (1 - (p * p).sum(-1))) * head.a.norm(dim=-1)).unsqueeze(-2) * geo.ball_gyroplane(x, p, head.a)
        torch.testing.assert_close(head(x), ref, rtol=1e-10, atol=1e-10)



def _ball_points(g, shape, radius=0.995):
    """Points of the open ball spread out to `radius` (|x| up to 0.995: the tree's nodes reach past 0.99)."""
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True) * radius * torch.rand(*shape[:-1], 1, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("kind", ["busemann", "ganea"])
@pytest.mark.parametrize("x_shape,replicas", [((4, 30, 2), 4), ((30, 2), None), ((30, 2), 4), ((4, 30, 3), 4)])
def test_fused_ball_logits_equal_the_autograd_path(kind, x_shape, replicas):
    """layers._BallLogits (the hand-written backward the tree job trains with) gives the logits and the parameter
    gradients of the straightforward autograd path (BallMLR.forward_reference, _moved's Mobius inner products), with
    base points far from the origin, on replica and single shapes, d = 2 and d = 3 (bmm-free inner products)."""
    g = torch.Generator().manual_seed(11)
    x = _ball_points(g, x_shape)
    head = L.BallMLR(x_shape[-1], 5, kind, g, replicas=replicas)
    with torch.no_grad():
        head.p.mul_(120)  # |p| = tanh|q| up to ~0.9: the trained heads' base points sit at training points
    weights = torch.randn(x_shape[:-1] + (5,) if replicas is None or len(x_shape) == 3 else (replicas, 30, 5),
                          generator=g, dtype=torch.float64)
    out = {}
    for fused in (True, False):
        head.fused = fused
        head.zero_grad(set_to_none=True)
        logits = head(x)
        (logits * weights).sum().backward()
        out[fused] = (logits.detach(), [q.grad.clone() for q in head.parameters()])
    torch.testing.assert_close(out[True][0], out[False][0], rtol=1e-10, atol=1e-10)
    for a, b in zip(out[True][1], out[False][1]):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10 * float(b.abs().max()))


@pytest.mark.parametrize("kind", ["busemann", "ganea"])
def test_fused_ball_logits_pass_gradcheck(kind):
    """The hand-written backward against finite differences (torch.autograd.gradcheck, float64), through the
    parametrisation (tanh-squashed base points, a's norm) as the heads train, replicas side by side."""
    g = torch.Generator().manual_seed(12)
    x = _ball_points(g, (2, 7, 2), radius=0.95)
    head = L.BallMLR(2, 3, kind, g, replicas=2)

    def logits(p, a):
        model = L.BallMLR(2, 3, kind, torch.Generator().manual_seed(0), replicas=2)
        del model.p, model.a
        model.p, model.a = p, a
        assert model.fused
        return model(x)

    params = tuple((3 * q).detach().clone().requires_grad_() for q in (head.p, head.a))
    assert torch.autograd.gradcheck(logits, params, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_fused_busemann_head_keeps_the_reference_clamp_at_its_base_point():
    """A point at a base point (y = 0: |y| clamped at 1e-12, where 2 artanh|y| / |y| has no gradient in the
    reference path) gets the reference's logit and gradient."""
    g = torch.Generator().manual_seed(13)
    x = torch.cat([torch.zeros(1, 1, 2, dtype=torch.float64), _ball_points(g, (1, 9, 2), 0.9)], 1)
    head = L.BallMLR(2, 3, "busemann", g, replicas=1)
    with torch.no_grad():
        head.p[0, 0] = 0.0  # class 0's base point at the origin, the first point
    out = {}
    for fused in (True, False):
        head.fused = fused
        head.zero_grad(set_to_none=True)
        logits = head(x)
        logits.sum().backward()
        out[fused] = (logits.detach(), [q.grad.clone() for q in head.parameters()])
    assert out[True][0][0, 0, 0] == 0.0  # log(1 - 0) - log|0 - omega|^2 = 0
    torch.testing.assert_close(out[True][0], out[False][0], rtol=1e-12, atol=1e-12)
    for a, b in zip(out[True][1], out[False][1]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_fused_busemann_clamp_holds_beside_a_diverged_replica():
    """Review symspace_r12: a replica whose parameters went NaN (a diverged rate of the grid) must not switch off the
    clamp's zero gradient for the live replicas beside it. The live replica's base point sits at |q| = 16 (|p| =
    tanh 16, 1 - 2.5e-14) with points across the ball from it, so |y| reaches the upper clamp 1 - 1e-12; its logits
    and gradients beside a NaN replica must equal those it gets alone (a guard on the max over all replicas, NaN
    there, used to skip the mask)."""
    g = torch.Generator().manual_seed(15)
    q = torch.tensor([16.0, 0.0], dtype=torch.float64)
    x = torch.cat([torch.tensor([[[-0.995, 0.0], [-0.9, 0.3]]], dtype=torch.float64),
                   _ball_points(g, (1, 8, 2), 0.9)], 1)
    alone = L.BallMLR(2, 3, "busemann", g, replicas=1)
    with torch.no_grad():
        alone.p[0, 0] = q

    def run(head, xs, r):
        head.zero_grad(set_to_none=True)
        logits = head(xs)
        logits[r].sum().backward()  # the live replica's loss (a diverged replica leaves the loss, train.fit)
        return logits[r].detach(), [p.grad[r].clone() for p in head.parameters()]

    pair = L.BallMLR(2, 3, "busemann", g, replicas=2)
    with torch.no_grad():
        for a, b in zip(pair.parameters(), alone.parameters()):
            a[1] = b[0]
            a[0] = float("nan")  # replica 0 diverged
    ref, got = run(alone, x, 0), run(pair, x.expand(2, -1, -1), 1)
    with torch.no_grad():
        r = L._moved(x, alone._p(), alone.a / alone.a.norm(dim=-1, keepdim=True))[0].sqrt()
    assert float(r.max()) >= 1 - 1e-12  # the clamp is active on the live replica
    assert torch.isfinite(ref[0]).all() and all(torch.isfinite(p).all() for p in ref[1])
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    for a, b in zip(got[1], ref[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["busemann", "ganea"])
def test_fused_ball_heads_train_as_the_autograd_path(kind):
    """fit() on replicas side by side (three rates, a validation checkpoint) from the same initialisation: the
    fused path and the autograd path end at the same parameters and the same validation curve."""
    from papers.symspace.train import fit

    g = torch.Generator().manual_seed(14)
    x, xv = _ball_points(g, (3, 40, 2), 0.9), _ball_points(g, (3, 15, 2), 0.9)
    y, yv = (torch.randint(0, 3, z.shape[:-1], generator=g) for z in (x, xv))
    runs = {}
    for fused in (True, False):
        head = L.BallMLR(2, 3, kind, torch.Generator().manual_seed(1), replicas=3)
        head.fused = fused
        model, curve = fit(head, x, y, steps=30, lr=[0.02, 0.2, 1.0], val=(xv, yv), every=5)
        runs[fused] = ([q.detach() for q in model.parameters()], np.asarray(curve))
    np.testing.assert_array_equal(runs[True][1], runs[False][1])
    for a, b in zip(runs[True][0], runs[False][0]):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9)

def test_spread_event_keeps_the_excess_power_but_no_window_stands_out():
    from scipy.linalg import eigh

    e = {"subjects": 1, "channels": 4, "classes": 2, "trials_per_class": 200, "windows": 4, "samples": 64,
         "power_spread": 0.0, "class_gain": 5.0, "session_shift": 0.0, "noise": 0.0, "shrink": 0.0}
    for event in ("window", "spread"):
        s = D.eeg_like(e, 0, event=event)[0]["train"]
        tok, lab = s["tokens"], s["labels"]
        # Trial-mean covariances of the two classes: A D0 A^T and A D1 A^T with D0 = diag(r, 1, ..), D1 = diag(1, r,
        # ..), r = 1 + (gain - 1) / windows = 2 in both settings: generalised eigenvalues 1/2, 1, 1, 2.
        c0, c1 = tok[lab == 0].mean(axis=(0, 1)), tok[lab == 1].mean(axis=(0, 1))
        np.testing.assert_allclose(eigh(c0, c1, eigvals_only=True), [0.5, 1, 1, 2], rtol=0.08)
        # The largest window's power over the trial's mean: the event window stands out, spread power does not.
        trace = np.trace(tok[lab == 0], axis1=-2, axis2=-1)
        peak = (trace.max(1) / trace.mean(1)).mean()
        assert (peak > 1.3) if event == "window" else (peak < 1.15)


def test_burst_event_raises_the_class_power_in_one_run_of_windows_and_nowhere_else():
    # Review symspace_r13: claim (e)'s deciding setting. Per trial the class source's power x class_gain in every window
    # of ONE run of consecutive windows, of a length uniform on 1 .. W at a uniform onset; x 1 elsewhere.
    e = {"windows": 4, "class_gain": 3.0}
    g = D.event_gains(e, 4000, np.random.default_rng(0), "burst")
    assert g.shape == (4000, 4) and set(np.unique(g)) == {1.0, 3.0}
    high = (g == 3.0).astype(int)
    starts = (np.diff(np.pad(high, ((0, 0), (1, 1))), axis=1) == 1).sum(1)
    assert (starts == 1).all()  # one run per trial, never two, never none
    lengths = high.sum(1)
    np.testing.assert_allclose(np.bincount(lengths, minlength=5)[1:] / 4000, 0.25, atol=0.03)  # L uniform on 1 .. 4
    onset = high.argmax(1)
    for length in (1, 2, 3):  # the onset uniform on 0 .. W - L, given L
        np.testing.assert_allclose(np.bincount(onset[lengths == length], minlength=5 - length)
                                   / (lengths == length).sum(), 1 / (5 - length), atol=0.05)
    # The other events keep their form: one window at gain, or 1 + (gain - 1) / W in every window.
    w = D.event_gains(e, 100, np.random.default_rng(0), "window")
    assert ((w == 3.0).sum(1) == 1).all() and ((w == 1.0).sum(1) == 3).all()
    np.testing.assert_array_equal(D.event_gains(e, 5, np.random.default_rng(0), "spread"), np.full((5, 4), 1.5))
    with pytest.raises(ValueError, match="unknown EEG event"):
        D.eeg_like({**e, "channels": 4, "classes": 2}, 0, event="other")


def test_burst_trials_carry_the_class_power_only_within_the_run():
    # Through the mixing model: read each window's source powers back through the unmixing A^-1 (no sensor noise, no
    # shift, no shrinkage, no power spread): the trial's class source sits at ~class_gain in one run of consecutive
    # windows of every length 1 .. W, at ~1 in the trial's other windows, and every other source at ~1 throughout.
    e = {"subjects": 1, "channels": 4, "classes": 2, "trials_per_class": 100, "windows": 4, "samples": 1024,
         "power_spread": 0.0, "class_gain": 3.0, "session_shift": 0.0, "noise": 0.0, "shrink": 0.0}
    s = D.eeg_like(e, 0, event="burst")[0]
    unmix = np.linalg.inv(s["forward"])
    tok, lab = s["train"]["tokens"], s["train"]["labels"]
    power = np.einsum("ij,nwjk,ik->nwi", unmix, tok, unmix)  # (N, W, sources): diag(A^-1 C A^-T)
    own = power[np.arange(len(lab)), :, lab]  # (N, W): the trial's class source
    others = np.delete(power, 0, axis=2)[lab == 0].ravel().tolist() + np.delete(power, 1, axis=2)[lab == 1].ravel().tolist()
    assert max(others) < 1.4 and min(others) > 0.7
    high = own > 2.0
    np.testing.assert_allclose(own[high], 3.0, rtol=0.25)
    np.testing.assert_allclose(own[~high], 1.0, rtol=0.3)
    starts = (np.diff(np.pad(high.astype(int), ((0, 0), (1, 1))), axis=1) == 1).sum(1)
    assert (starts == 1).all() and set(high.sum(1)) == {1, 2, 3, 4}
    # Its own stream: neither the window event's trials nor the spread window's.
    for other in ("window", "spread"):
        assert not np.allclose(D.eeg_like(e, 0, event=other)[0]["train"]["tokens"], tok)
    np.testing.assert_array_equal(D.eeg_like(e, 0, event="burst")[0]["train"]["tokens"], tok)


def _tree_table(effect: float, planted_effect: float, seeds: int = 20, fit: float = 1.0,
                euclid: float = -0.1) -> "pd.DataFrame":
    """A tree accuracy table like the tree stage's: the Busemann head `effect` above Ganea's, on the planted
    horocycle-head labels `planted_effect` (fitting its own training points there at `fit`); an untrained head near
    chance; the Euclidean head `euclid` above Ganea's (below by default: the premise that the task is hyperbolic)."""
    import pandas as pd

    rng = np.random.default_rng(1)
    rows = []
    for r in range(seeds):
        base = 0.8 + 0.03 * rng.normal()
        for task, arm, variant, v in (("tree", "ganea_mlr", "main", base),
                                      ("tree", "busemann_mlr", "main", base + effect + 0.01 * rng.normal()),
                                      ("tree", "euclidean_mlr", "main", base + euclid + 0.01 * rng.normal()),
                                      ("tree", "busemann_mlr", "untrained", 0.11 + 0.02 * rng.normal()),
                                      ("tree", "angle_rule", "main", 0.5),
                                      ("tree_horocycle", "ganea_mlr", "main", base),
                                      ("tree_horocycle", "busemann_mlr", "main",
                                       base + planted_effect + 0.01 * rng.normal()),
                                      ("tree_horocycle", "generating_head", "main", 1.0)):
            rows.append({"task": task, "replicate": r, "arm": arm, "variant": variant, "test_acc": v,
                         "half_test_acc": v, "late_gain": -0.01, "chance": 1 / 9,
                         "fit_acc": fit if (task, arm) == ("tree_horocycle", "busemann_mlr") else v,
                         "first_restart_test_acc": v - 0.02 * (arm == "busemann_mlr")})
    return pd.DataFrame(rows)


def test_claim_d_decides_against_ganea_with_a_planted_positive_control():
    from papers.symspace.report import claim_d

    p = parse(to_dict(Params()))
    on_par = claim_d(p, _tree_table(0.0, 0.1))
    assert on_par.verdict == "holds" and on_par.control.verdict == "does not hold"
    # The Euclidean head beats the hyperbolic comparator: the task lacks the hyperbolic structure the claim
    # presupposes, so non-inferiority to Ganea's head says nothing about geometry: inconclusive, not holds.
    flat = claim_d(p, _tree_table(0.0, 0.1, euclid=0.1))
    assert flat.verdict == "inconclusive" and "hyperbolic structure" in flat.note
    assert claim_d(p, _tree_table(0.0, 0.1, euclid=0.0)).verdict == "inconclusive"  # a tie is not "beats"
    # the restart sensitivity is reported (the first initialisation alone), not decided on
    assert any(k.startswith("restart sensitivity (tree)") for k in on_par.measured)
    assert claim_d(p, _tree_table(-0.1, 0.1)).verdict == "does not hold"
    # the Busemann head loses even on labels of its own function class: the analysis cannot be trusted, inconclusive
    assert claim_d(p, _tree_table(-0.1, -0.1)).verdict == "inconclusive"
    # the Busemann head does not fit its own representable training labels: not trainable here, inconclusive
    untrainable = claim_d(p, _tree_table(-0.1, 0.1, fit=0.86))
    assert untrainable.verdict == "inconclusive" and "trainable" in untrainable.note
    # A positive control that straddles its threshold is read as a matter of power (review symspace_r13), not as an
    # analysis shown blind; one that holds or fails gets no such reading.
    wide = claim_d(p, _tree_table(0.0, -0.02))
    assert wide.positive_control.verdict == "inconclusive" and wide.verdict == "inconclusive"
    assert "the positive control straddles its threshold -0.02" in wide.note and "not shown blind" in wide.note
    assert "straddles its threshold" not in on_par.note
    assert "straddles its threshold" not in claim_d(p, _tree_table(-0.1, -0.1)).note


def test_claim_d_control_is_the_trained_euclidean_head_under_the_claims_criterion():
    """Reviews symspace_r8/r9: (d)'s negative control is the trained Euclidean head against Ganea's head, > -margin,
    built from the two arms' per-seed test accuracies (not the untrained Busemann head); the superiority test
    Busemann - Ganea > 0 is reported and decides nothing."""
    from papers.symspace.report import claim_d

    p = parse(to_dict(Params()))
    table = _tree_table(0.05, 0.1)
    d = claim_d(p, table)
    ctl = d.control.evidence
    tree = table[(table.task == "tree") & (table.variant == "main")].set_index(["arm", "replicate"]).test_acc
    expected = (tree["euclidean_mlr"] - tree["ganea_mlr"]).sort_index().to_numpy()
    np.testing.assert_allclose(ctl.values, expected)  # from the trained Euclidean arm's per-seed accuracies
    assert d.control.kind == "ablation" and ctl.threshold == -p.claims["noninferiority_margin"]
    assert d.verdict == "holds" and d.control.verdict == "does not hold"  # 0.1 below Ganea's: the ablation fails
    assert d.measured["superiority verdict (reported, not deciding)"] == "holds"
    assert "tells a head without hyperbolic geometry" in d.note and "image" in d.note
    # The untrained head on par with Ganea's no longer touches the control (it did when it was the control).
    untrained_on_par = table.copy()
    sel = (untrained_on_par.task == "tree") & (untrained_on_par.variant == "untrained")
    untrained_on_par.loc[sel, "test_acc"] = untrained_on_par[(untrained_on_par.task == "tree") & (
        untrained_on_par.arm == "ganea_mlr")].test_acc.to_numpy()
    assert claim_d(p, untrained_on_par).control.verdict == "does not hold"
    # The Euclidean head about 0.01 below Ganea's (the hyperbolic premise still met, > 0): the ablation is within the
    # margin too, so the test cannot tell the geometry from its absence and (d) is at most inconclusive.
    close = claim_d(p, _tree_table(0.05, 0.1, euclid=-0.01))
    assert close.control.verdict == "holds" and close.premise_met and close.verdict == "inconclusive"
    assert "cannot tell a head without hyperbolic geometry" in close.note
    # Straddling the margin (the control at about -0.02): reported as weak discrimination, (d) still decided.
    straddle = claim_d(p, _tree_table(0.05, 0.1, euclid=-0.02))
    assert straddle.control.verdict == "inconclusive" and straddle.verdict == "holds"
    assert "only weakly" in straddle.note
    # The superiority test is reported, not deciding: a tie with Ganea's head still holds non-inferiority.
    tie = claim_d(p, _tree_table(0.0, 0.1))
    assert tie.verdict == "holds" and tie.measured["superiority verdict (reported, not deciding)"] == "inconclusive"


def test_full_scale_power_projects_the_t8_half_width_from_the_runs_paired_sd():
    """(b) at the full scale: 9 subjects, t(8) quantile times this run's paired sd over 3 (an independent
    computation with the 0.975 quantile of t(8), 2.306)."""
    import pandas as pd
    from papers.symspace.report import full_scale_power

    rng = np.random.default_rng(0)
    rows = []
    for r in range(40):
        base = 0.6 + 0.05 * rng.normal()
        gap = 0.043 * rng.normal()
        rows += [{"task": "eeg", "replicate": r, "arm": "spdnet_logeig_linear", "variant": "main", "test_acc": base},
                 {"task": "eeg", "replicate": r, "arm": "spdnet_busemann_mlr", "variant": "main",
                  "test_acc": base + gap}]
    acc = pd.DataFrame(rows)
    arm = acc.set_index(["arm", "replicate"]).test_acc
    gaps = (arm["spdnet_busemann_mlr"] - arm["spdnet_logeig_linear"]).to_numpy()
    w = full_scale_power(acc, 0.02)
    assert w["subjects"] == 9 and w["replicates"] == 40
    assert w["half_width"] == pytest.approx(2.306004 * gaps.std(ddof=1) / 3, rel=1e-5)
    assert not w["resolves"]  # sd ~0.043: half-width ~0.033 > 0.02
    assert full_scale_power(acc.assign(test_acc=acc.test_acc * 0.1), 0.02)["resolves"]  # sd ten times smaller


def _attention_table(spread_effect, window_effect=0.3, seeds=8, real=False, pool=-0.05, lse=0.0,
                     window_lse=None, deciding="eeg_burst", context=None) -> "pd.DataFrame":
    """Claim (e)'s accuracy table: attention `spread_effect` above the ablation on the deciding mixing-model setting
    `deciding` (eeg_burst; eeg_spread: the earlier rounds' tables), `window_effect` on the window-event EEG (its
    positive control); the mean-pooled baseline `pool` and the selective one `lse` (on the window EEG `window_lse`,
    default `lse`) above the ablation (None: not run); `context`: a further setting run beside (its attention 0.1
    below the ablation, its baselines as on the deciding one); real: one real EEG task (eeg:bcic_iv_2a) with
    `spread_effect` instead of the mixing-model settings."""
    import pandas as pd

    rng = np.random.default_rng(4)
    rows = []
    for r in range(seeds):
        base = 0.5 + 0.03 * rng.normal()
        settings = ((("eeg:bcic_iv_2a", spread_effect, lse),) if real else
                    (("eeg", window_effect, lse if window_lse is None else window_lse),
                     (deciding, spread_effect, lse)) + (((context, -0.1, lse),) if context else ()))
        for task, effect, sel in settings:
            arms = [("no_attention", "main", base),
                    ("attention", "main", base + effect + 0.01 * rng.normal()),
                    ("attention", "untrained", 0.25 + 0.02 * rng.normal())]
            if pool is not None:
                arms.append(("tangent_pool", "main", base + pool + 0.01 * rng.normal()))
            if sel is not None:
                arms.append(("tangent_pool_lse", "main", base + sel + 0.01 * rng.normal()))
            for arm, variant, v in arms:
                rows.append({"task": task, "replicate": r, "arm": arm, "variant": variant, "test_acc": v,
                             "half_test_acc": v, "late_gain": -0.01, "chance": 0.25, "parameters": 940,
                             "attention_parameters": 936})
    return pd.DataFrame(rows)


def test_claim_e_falls_back_to_the_spread_window_where_no_burst_was_run():
    # The earlier rounds' tables (no eeg_burst): decided on the spread window, as then.
    from papers.symspace.report import attention_tasks, claim_e
    from functools import partial

    _attention_table = partial(globals()["_attention_table"], deciding="eeg_spread")
    p = parse(to_dict(Params()))
    helps = claim_e(p, _attention_table(0.1))
    assert helps.verdict == "holds" and helps.positive_control.verdict == "holds"
    assert helps.control.verdict == "does not hold" and helps.control.kind == "null"  # the untrained network
    assert [e.name for e in helps.evidence] == [  # the spread window decides, against both baselines
        "eeg_spread: attention (main) - no attention",
        "eeg_spread: attention (main) - tangent-space perceptron pooled (the stronger baseline)",
        "eeg_spread: attention (main) - tangent-space perceptron, log-sum-exp pooled (the selective baseline)"]
    assert [e.name.split(":")[0] for e in helps.positive_control.evidence] == ["eeg"] * 3  # the window-event EEG
    # Where the data were not built for it the attention falls below the ablation: the claim does not hold, and says
    # why as far as known.
    worse = claim_e(p, _attention_table(-0.05))
    assert worse.verdict == "does not hold" and "uniform Frechet mean is already the right pooling" in worse.note
    # Above the ablation but not above the selective non-attentive baseline: not shown (a tie) or refuted (below).
    assert claim_e(p, _attention_table(0.1, lse=0.1)).verdict == "inconclusive"
    assert claim_e(p, _attention_table(0.1, lse=0.2)).verdict == "does not hold"
    assert claim_e(p, _attention_table(0.1, pool=0.2, lse=0.25)).verdict == "does not hold"
    assert claim_e(p, _attention_table(0.1, pool=None, lse=None)).verdict == "holds"  # without them: the ablation
    # Where the selective baseline is no better than the mean-pooled one, the setting has nothing for an attention to
    # select (the claim's premise): a loss to the ablation there is not evidence about the paper.
    flat = claim_e(p, _attention_table(-0.05, pool=0.0, lse=0.0))
    assert flat.verdict == "inconclusive" and "window-localised" in flat.note
    # ... and the note says the analogue cannot test it (review symspace_r7), only where that premise is unmet
    assert "not testable in this analogue" in flat.note
    assert "not testable" not in helps.note and "not testable" not in worse.note
    # The positive control fails (on the window built for it the attention does not beat the selective baseline):
    # the analysis cannot be trusted to find the attention's gain, so neither verdict can be read.
    blind = claim_e(p, _attention_table(-0.05, window_lse=0.45))
    assert blind.verdict == "inconclusive" and "positive control" in blind.note
    assert claim_e(p, _attention_table(0.1, window_effect=0.0)).verdict == "inconclusive"
    # The window-event EEG no longer decides: it is the positive control, not among the deciding tasks.
    assert attention_tasks(_attention_table(0.1)) == ["eeg_spread"]
    # Real EEG (the full scale): decided there, no positive control, the untrained network its null control.
    real = claim_e(p, _attention_table(0.1, real=True))
    assert real.verdict == "holds" and real.positive_control is None
    assert claim_e(p, _attention_table(-0.1, real=True)).verdict == "does not hold"


def test_claim_e_is_decided_on_the_burst_with_the_spread_window_as_context():
    # Review symspace_r13: the burst (the class event in a random run of 1 .. W windows) decides; the one-window plant
    # is the positive control; the spread window, where run beside it, is context and decides nothing.
    from papers.symspace.report import attention_context_tasks, attention_tasks, claim_e

    p = parse(to_dict(Params()))
    assert p.train["burst_attention_seeds"] == 7 and p.train["spread_attention_seeds"] == 0
    helps = claim_e(p, _attention_table(0.1))
    assert helps.verdict == "holds" and helps.positive_control.verdict == "holds"
    assert [e.name.split(":")[0] for e in helps.evidence] == ["eeg_burst"] * 3
    assert [e.name.split(":")[0] for e in helps.positive_control.evidence] == ["eeg"] * 3
    assert "random run of 1 .. W" in helps.criterion and "(task eeg_burst)" in helps.criterion
    assert not helps.note
    # Below the ablation on the burst, premise met and positive control holding: does not hold, and says against what.
    worse = claim_e(p, _attention_table(-0.05))
    assert worse.verdict == "does not hold"
    assert "wider than one window" in worse.note and "eeg_burst: attention (main) - no attention" in worse.note
    assert "not testable" not in worse.note and "uniform Frechet mean" not in worse.note
    # Behind the selective baseline only: the note names it, and what the attention is ahead of.
    behind = claim_e(p, _attention_table(0.1, lse=0.2))
    assert behind.verdict == "does not hold" and "though ahead of" in behind.note
    # No window-localised information measured (selective baseline = mean-pooled): inconclusive whatever the
    # attention does, with the measured reason.
    for effect in (0.1, -0.05):
        flat = claim_e(p, _attention_table(effect, pool=0.0, lse=0.0))
        assert flat.verdict == "inconclusive" and "premise is unmet as measured" in flat.note, flat.note
        assert [g.met for g in flat.premise if "window-localised" in g.name] == [False]
    # A tie on the burst: inconclusive. A blind positive control: inconclusive.
    assert claim_e(p, _attention_table(0.0)).verdict == "inconclusive"
    assert claim_e(p, _attention_table(0.1, window_lse=0.45)).verdict == "inconclusive"
    # Run beside the burst, the spread window (here with the attention 0.1 below the ablation) decides nothing.
    both = _attention_table(0.1, context="eeg_spread")
    assert attention_tasks(both) == ["eeg_burst"] and attention_context_tasks(both) == ["eeg_spread"]
    ctx = claim_e(p, both)
    assert ctx.verdict == "holds" and all(e.name.startswith("eeg_burst") for e in ctx.evidence)
    assert any(k.startswith("context (eeg_spread, not deciding)") for k in ctx.measured)
    assert "eeg_spread is context" in ctx.criterion
    assert attention_tasks(_attention_table(0.1)) == ["eeg_burst"] and not attention_context_tasks(_attention_table(0.1))


def test_prepare_runs_the_burst_and_the_spread_window_only_where_asked(tmp_path):
    cfg = to_dict(Params())
    cfg.update(seeds=1, head_seeds=2, eeg={**cfg["eeg"], "channels": 4, "classes": 2, "trials_per_class": 4,
                                           "windows": 2, "samples": 16},
               tree={**cfg["tree"], "seeds": 1, "depth": 3, "label_depth": 1, "planted_seeds": 1},
               train={**cfg["train"], "planted_attention_seeds": 1, "burst_attention_seeds": 3,
                      "spread_attention_seeds": 0})
    out = tmp_path / "data.pkl"
    D.prepare(cfg=cfg, data=str(out))
    att = D.read_prepared(str(out))["attention"]
    assert set(att) == {"eeg", "eeg_burst"} and sorted(att["eeg_burst"]) == [0, 1, 2]
    np.testing.assert_array_equal(att["eeg_burst"][2][0]["train"]["tokens"],
                                  D.eeg_like(parse(cfg).eeg, 2, event="burst")[0]["train"]["tokens"])
    with pytest.raises(ValueError, match="burst_attention_seeds"):
        parse({**cfg, "train": {**cfg["train"], "burst_attention_seeds": -1}})


def _bimap_ceilings(acc, above: float):
    """Claim (b)'s ceilings on each head's trained BiMap output (arms tangent_lr_bimap_<head>), `above` the head."""
    import pandas as pd

    heads = acc[(acc.task == "eeg") & (acc.variant == "main") & acc.arm.str.startswith("spdnet_")]
    rows = heads.assign(arm="tangent_lr_bimap_" + heads.arm, test_acc=heads.test_acc + above,
                        half_test_acc=float("nan"), late_gain=float("nan"))
    return pd.concat([acc, rows], ignore_index=True)


def test_claim_b_names_an_interval_below_delta_and_its_gate_as_one_route_in_the_verdict_table():
    # Review symspace_r13: with the function-class gate unmet the verdict reads inconclusive; the verdict table must
    # still say, from the run, that the deciding interval lies wholly below delta, and that the gate is a sufficient
    # route to a gain, not the only one (both heads below the ceiling of their own input: room it does not measure).
    from test_symspace_oracle import _with_oracle

    from papers.common.claims import Scope
    from papers.common.report import verdict_table
    from papers.symspace.report import claim_b

    p = parse(to_dict(Params()))  # the mixing model: the gate applies
    tie = claim_b(p, _bimap_ceilings(_with_oracle(_planted(0.0, replicates=30), 0.0, sd=0.03), 0.03))
    assert tie.verdict == "inconclusive" and tie.evidence[0].interval[1] <= 0.02
    table = verdict_table([tie], Scope("analogue", "x"))
    assert "whole interval at or below delta = 0.02: shown not better by delta here" in table
    assert "a sufficient route to a gain of delta, not the only one" in table
    assert "below the ceiling of their own input" in table
    # A straddling interval is not called "below delta"; heads at their ceiling leave no room to report.
    near = claim_b(p, _bimap_ceilings(_with_oracle(_planted(0.02, replicates=30), 0.0, sd=0.03), 0.0))
    assert near.evidence[0].interval[0] < 0.02 < near.evidence[0].interval[1]
    table = verdict_table([near], Scope("analogue", "x"))
    assert "shown not better by delta" not in table and "below the ceiling of their own input" not in table
    # Where the gate is met the interval below delta reads "does not hold", named the same way.
    met = claim_b(p, _with_oracle(_planted(0.0, replicates=30), 0.1))
    assert met.verdict == "does not hold" and "shown not better by delta" in met.evidence[0].name


def test_claim_b_reads_a_true_tie_as_not_better_by_the_minimal_effect():
    from papers.symspace.report import claim_b

    p = _decidable_b_params()
    delta = p.claims["min_effect"]
    assert delta == 0.02
    tie = claim_b(p, _planted(0.0, replicates=30))  # a tie with a tight interval: below delta, "does not hold"
    assert tie.verdict == "does not hold" and tie.evidence[0].threshold == delta
    assert "not a blind analysis, is the likely reason" in tie.note  # why, as far as known
    assert claim_b(p, _planted(0.01, replicates=30)).verdict == "does not hold"  # a gain, but not by delta
    assert claim_b(p, _planted(0.05, replicates=30)).verdict == "holds"  # better by more than delta
    # A gain near delta whose interval straddles it: inconclusive.
    near = claim_b(p, _planted(0.02, replicates=30))
    assert near.verdict == "inconclusive" and near.evidence[0].interval[0] < delta < near.evidence[0].interval[1]
    # The positive control is read against delta, as the claim is (a "not better by delta" reading needs an analysis
    # that resolves a planted gain of delta): a planted gain of 0.015 does not clear it, and the tie is not read.
    pos = claim_b(p, _planted(0.0, replicates=30, positive=0.015)).positive_control
    assert pos.verdict != "holds" and pos.evidence.threshold == delta
    assert claim_b(p, _planted(0.0, replicates=30, positive=0.015)).verdict == "inconclusive"
    # A tie cannot be read where the analysis is blind: the positive control fails, the claim is inconclusive.
    assert claim_b(p, _planted(0.0, replicates=30, positive=0.0)).verdict == "inconclusive"
    # The power of the design against delta is reported beside the claim.
    assert any("half-width against the minimal effect" in k for k in tie.measured)


def test_claim_c_is_listed_as_not_measured_with_its_check():
    import pandas as pd

    from papers.symspace.report import symspace_checks, symspace_claims
    from papers.symspace.stages import CHECKS, KNOWN_VALUE, LIMIT_CHECKS, ASYMPTOTIC, WRONG_FORMULAS

    p = parse(to_dict(Params()))
    names = [*CHECKS.values(), KNOWN_VALUE, *LIMIT_CHECKS.values(), ASYMPTOTIC]
    chk = pd.DataFrame([{"check": n, "case": "0:1,0", "error": 0.0} for n in names]
                       + [{"check": n, "case": "0:1,0", "error": 1.0} for n in WRONG_FORMULAS.values()])
    acc = pd.concat([_planted(0.05), _tree_table(0.05, 0.05), _attention_table(0.1)], ignore_index=True)
    acc["chance"] = acc["chance"].fillna(0.25)
    ids = [c.id for c in symspace_claims(p, acc, chk)]
    assert ids == ["a", "b", "c", "d", "e"]
    c = {c.id: c for c in symspace_claims(p, acc, chk)}["c"]
    assert c.verdict == "not measured" and "reparametrisation" in c.note
    check = {c.id: c for c in symspace_checks(p, chk, acc)}["reparametrisation"]
    assert check.passed and "claim (c)" in check.statement and "not measured" in check.statement


def test_spread_seeds_are_capped_at_the_head_seeds_and_counted_apart(tmp_path):
    cfg = to_dict(Params())
    cfg.update(seeds=1, head_seeds=2, eeg={**cfg["eeg"], "channels": 4, "classes": 2, "trials_per_class": 4,
                                           "windows": 2, "samples": 16},
               tree={**cfg["tree"], "seeds": 1, "depth": 3, "label_depth": 1, "planted_seeds": 1},
               train={**cfg["train"], "planted_attention_seeds": 1, "spread_attention_seeds": 5})
    out = tmp_path / "data.pkl"
    D.prepare(cfg=cfg, data=str(out))
    att = D.read_prepared(str(out))["attention"]
    assert sorted(att["eeg_spread"]) == [0, 1] and sorted(att["eeg"]) == [0]
    with pytest.raises(ValueError, match="spread_attention_seeds"):
        parse({**cfg, "train": {**cfg["train"], "spread_attention_seeds": -1}})


def test_tangent_space_regression_reads_power_and_base_points_start_at_their_class():
    from papers.symspace.train import base_points, tangent_space_lr

    rng = np.random.default_rng(5)

    def draw(n):  # class k: source k's power x 4
        y = np.arange(n) % 3
        x = np.stack([np.diag(np.exp(0.2 * rng.normal(size=4)) * np.where(np.arange(4) == k, 4.0, 1.0)) for k in y])
        q = np.linalg.qr(rng.normal(size=(4, 4)))[0] if not hasattr(draw, "q") else draw.q
        draw.q = q
        return torch.as_tensor(q @ x @ q.T), torch.as_tensor(y)

    xa, ya = draw(60)
    xb, yb = draw(60)
    assert tangent_space_lr(xa, ya, xb, yb) > 0.9
    assert tangent_space_lr(xa, ya[torch.randperm(60, generator=torch.Generator().manual_seed(0))], xb, yb) < 0.7
    pts = torch.as_tensor(rng.uniform(-0.6, 0.6, size=(2, 30, 2)))
    labels = torch.as_tensor(np.tile(np.arange(30) % 3, (2, 1)))
    q = base_points(pts, labels, 3, lambda r: torch.Generator().manual_seed(r))
    p = q * torch.tanh(q.norm(dim=-1, keepdim=True)) / q.norm(dim=-1, keepdim=True)  # BallMLR's squash
    for r in range(2):
        for k in range(3):
            hit = (pts[r] - p[r, k]).norm(dim=-1).argmin()
            assert torch.allclose(pts[r, hit], p[r, k]) and labels[r, hit] == k


def test_convergence_gate_reads_each_arm_not_its_noisiest_run():
    from papers.symspace.report import converged_gate

    acc = _planted(0.0, late=-0.03)
    sel = acc.variant == "main"
    # One run's validation noise (4 items of 32) above the tolerance, the arm's other runs flat: the arm converged.
    spike = acc.assign(late_gain=np.where(sel & (acc.task == "eeg") & (acc.replicate == 3)
                                          & (acc.arm == "spdnet_busemann_mlr"), 0.125, acc.late_gain))
    assert converged_gate(spike, sel, 0.05, "x").met
    # One arm of one task rising late on most runs: unmet, whatever the other arms do.
    rising = acc.assign(late_gain=np.where(sel & (acc.task == "digits") & (acc.arm == "spdnet_logeig_linear"),
                                           0.06 + 0.01 * (acc.replicate % 3), acc.late_gain))
    assert not converged_gate(rising, sel, 0.05, "x").met


def test_claim_a_decides_on_every_case_not_an_interval():
    import pandas as pd

    from papers.symspace import stages as S
    from papers.symspace.report import claim_a, range_test

    assert range_test([1e-6, 2e-5, 3e-5], 1e-4, "x").verdict == "holds"
    assert range_test([1e-6, 2e-5, 2e-4], 1e-4, "x").verdict == "inconclusive"  # one case over: not every case below
    assert range_test([2e-4, 0.3, 0.1], 1e-4, "x").verdict == "does not hold"  # every wrong-formula case over

    p = parse(to_dict(Params()))
    rows = [{"case": f"{i}:{m}", "check": name, "error": err} for i in range(3) for m in ("1,0", "1,0.5")
            for name, err in ((S.LIMIT_CHECKS["spd"], 1e-6), (S.KNOWN_VALUE, 2e-6), (S.ASYMPTOTIC, 0.01),
                              (S.WRONG_FORMULAS["cholesky"], 0.5), (S.WRONG_FORMULAS["beta"], 0.2))]
    rows += [{"case": f"{i}:ball", "check": S.LIMIT_CHECKS["ball"], "error": 1e-9} for i in range(3)]
    chk = pd.DataFrame(rows)
    assert claim_a(p, chk).verdict == "holds"
    blind = chk.assign(error=np.where(chk.check == S.KNOWN_VALUE, 0.1, chk.error))  # the procedure misses a known value
    assert claim_a(p, blind).verdict == "inconclusive"


def test_the_metric_only_reparametrises_the_mlr():
    from papers.symspace import stages as S

    cfg = to_dict(Params())
    p = parse({**cfg, "check": {**cfg["check"], "matrices": 1, "times": [16, 32], "dps": 40}})
    rows, _ = S.distance_checks(p, seed=0)
    errors = [r["error"] for r in rows if r["check"] == S.CHECKS["reparametrisation"]]
    assert len(errors) == len(p.metrics) and max(errors) < 1e-10


@pytest.mark.parametrize("kind", ["busemann", "ganea", "euclidean"])
def test_replicas_side_by_side_train_as_they_would_alone(kind):
    """The tree seeds train side by side (a leading replica dimension): each copy's parameters after Adam steps
    equal those of the same copy trained alone."""
    from papers.symspace.train import fit

    rng = np.random.default_rng(9)
    x = torch.as_tensor(rng.uniform(-0.6, 0.6, size=(2, 12, 2)))
    y = torch.as_tensor(rng.integers(0, 3, size=(2, 12)))

    def head(replicas):
        g = torch.Generator().manual_seed(3)
        return L.EuclideanMLR(2, 3, g, replicas) if kind == "euclidean" else L.BallMLR(2, 3, kind, g, replicas)

    both, _ = fit(head(2), x, y, steps=5, lr=0.05)
    for r in range(2):
        alone = head(None)
        with torch.no_grad():
            for a, b in zip(alone.parameters(), head(2).parameters()):
                a.copy_(b[r])
        alone, _ = fit(alone, x[r], y[r], steps=5, lr=0.05)
        for a, b in zip(alone.parameters(), both.parameters()):
            torch.testing.assert_close(a, b[r], rtol=1e-9, atol=1e-12)


def test_stronger_baseline_matches_the_attention_networks_parameters_and_reads_each_token():
    g = torch.Generator().manual_seed(0)
    att = L.SPDAttentionNet(6, 4, 4, 1.0, 0.0, 1, True, g)
    target = L.parameter_count(att)
    hidden = L.tangent_pool_hidden(6, 4, target)
    pool = L.TangentPoolNet(6, 4, hidden, torch.Generator().manual_seed(1))
    assert abs(L.parameter_count(pool) - target) <= 21 + 1 + 4  # within one hidden unit
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 4, 6, 6))
    tokens = torch.as_tensor(a @ np.swapaxes(a, -1, -2) / 6 + 0.1 * np.eye(6))
    out = pool(tokens)
    # Logits averaged over the tokens: the order of the windows does not matter, and one token's content does.
    assert torch.allclose(out, pool(tokens.flip(1).clone()))
    moved = tokens.clone()
    moved[:, 0] = moved[:, 0] * 5.0
    assert not torch.allclose(out, pool(moved))


def test_selective_baseline_lets_one_window_decide_with_the_same_parameters():
    g = torch.Generator().manual_seed(0)
    mean = L.TangentPoolNet(6, 4, 7, g)
    lse = L.TangentPoolNet(6, 4, 7, torch.Generator().manual_seed(0), pool="logsumexp")
    assert L.parameter_count(lse) == L.parameter_count(mean)  # the pooling has no parameters
    rng = np.random.default_rng(1)
    a = rng.normal(size=(3, 4, 6, 6))
    tokens = torch.as_tensor(a @ np.swapaxes(a, -1, -2) / 6 + 0.1 * np.eye(6))
    with torch.no_grad():
        v = L.triu_vec(geo.sym_funcm(tokens, "log"))
        per_token = lse.out(torch.relu(lse.hidden_layer(v)))  # (B, T, classes)
        assert torch.allclose(lse(tokens), torch.logsumexp(per_token, 1))
        assert torch.allclose(mean(tokens), per_token.mean(1))
        # Scaled up, one window's logits dominate: log-sum-exp tends to the max over windows (selection).
        lse.out.weight.mul_(50.0), lse.out.bias.mul_(50.0)
        big = lse.out(torch.relu(lse.hidden_layer(v)))
        assert torch.allclose(lse(tokens), big.max(1).values, atol=np.log(4) + 1e-9)
    with pytest.raises(ValueError):
        L.TangentPoolNet(6, 4, 7, g, pool="median")


def test_speed_pass_computes_the_same_maps():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(5, 6, 6))
    x = torch.as_tensor(a @ np.swapaxes(a, -1, -2) + 0.1 * np.eye(6)).requires_grad_(True)
    # X^1/2 and X^-1/2 from one eigendecomposition: bit for bit the two separate calls, forward and backward.
    s1, r1 = geo.sym_sqrt_rsqrt(x)
    ws, wr = torch.as_tensor(rng.normal(size=(2, 5, 6, 6)))
    g1, = torch.autograd.grad((s1 * ws).sum() + (r1 * wr).sum(), x)
    s2, r2 = geo.sym_funcm(x, "sqrt"), geo.sym_funcm(x, "rsqrt")
    g2, = torch.autograd.grad((s2 * ws).sum() + (r2 * wr).sum(), x)
    assert torch.equal(s1, s2) and torch.equal(r1, r2) and torch.equal(g1, g2)
    # A^T X A with A = P^-1/2 R: the same matrix as R^T P^-1/2 X P^-1/2 R (to rounding).
    p = torch.linalg.matrix_exp(torch.as_tensor(rng.normal(size=(3, 6, 6))) * 0.1)
    p = p @ p.transpose(-1, -2)
    rot = torch.linalg.qr(torch.as_tensor(rng.normal(size=(3, 6, 6))))[0]
    pis = geo.sym_funcm(p, "rsqrt")
    torch.testing.assert_close(geo.spd_to_base_fused(x.detach().unsqueeze(1), pis, rot),
                               geo.spd_to_base(x.detach().unsqueeze(1), pis, rot), rtol=1e-12, atol=1e-12)
    # Only the attention network's Busemann layers take the fused form (the ablation and claim b's heads do not).
    g = torch.Generator().manual_seed(0)
    att = L.SPDAttentionNet(6, 4, 4, 1.0, 0.0, 1, True, g)
    abl = L.SPDAttentionNet(6, 4, 4, 1.0, 0.0, 1, False, g)
    assert att.query.fused and att.key.fused and att.mlr.dist.fused and not abl.mlr.dist.fused
    assert not L.BusemannMLR(4, 3, 1.0, 0.0, g).dist.fused


def test_a_job_measures_its_own_cpu_time():
    from papers.symspace.stages import job_cpu_seconds

    before = job_cpu_seconds()
    x = 0.0
    for i in range(200000):
        x += i ** 0.5
    assert job_cpu_seconds() > before > 0


@pytest.mark.parametrize("head", ["logeig_linear", "busemann_mlr"])
def test_side_by_side_networks_equal_each_network_alone(head):
    # SPDNetReplicas (issue 52's seventh-round speed pass) stacks R SPDNets: every replica's logits, and the gradient
    # of the summed per-replica loss with respect to its parameters, must equal its network's alone.
    import torch.nn.functional as F

    rng = np.random.default_rng(3)
    x = torch.as_tensor(np.stack([_spd(5, rng) for _ in range(12)]))
    y = torch.as_tensor(np.arange(12) % 3)
    nets = [L.SPDNet(5, 3, 3, torch.Generator().manual_seed(r), head=head,
                     head_generator=torch.Generator().manual_seed(10 + r)) for r in range(3)]
    side = L.SPDNetReplicas(nets)
    logits = side(x)
    assert logits.shape == (3, 12, 3)
    F.cross_entropy(logits.transpose(1, 2), y.expand(3, -1), reduction="none").mean(-1).sum().backward()
    names = ["weight"] + (["s", "r", "a"] if head == "busemann_mlr" else ["lin_w", "lin_b"])
    for r, net in enumerate(nets):
        alone = net(x)
        torch.testing.assert_close(logits[r], alone, rtol=1e-10, atol=1e-12)
        F.cross_entropy(alone, y).backward()
        own = [net.bimap.weight] + ([net.head.dist.s, net.head.dist.r, net.head.dist.a] if head == "busemann_mlr"
                                    else [net.head.weight, net.head.bias])
        for name, q in zip(names, own):
            torch.testing.assert_close(getattr(side, name).grad[r], q.grad, rtol=1e-8, atol=1e-12)


def test_heads_side_by_side_give_the_rows_of_the_heads_one_by_one():
    # The fast path of claim (b)'s heads (each head's initialisations and permuted-label control in one run) against
    # the straightforward one (each run alone), on a small mixing-model subject: the same rows, values to rounding.
    import pandas as pd

    from papers.symspace import train as T

    cfg = to_dict(Params())
    cfg.update(train={**cfg["train"], "steps": 40, "eval_every": 10})
    p = parse(cfg)
    subject = D.eeg_like(parse({**cfg, "eeg": {**cfg["eeg"], "trials_per_class": 12}}).eeg, 7)[0]
    x_tr = torch.as_tensor(subject["train"]["tokens"]).mean(1)
    x_te = torch.as_tensor(subject["test"]["tokens"]).mean(1)
    y_tr, y_te = (torch.as_tensor(subject[k]["labels"], dtype=torch.long) for k in ("train", "test"))
    unmix = np.linalg.inv(subject["forward"])
    rows = {b: pd.DataFrame(T.heads_task("eeg", 0, 7, x_tr, y_tr, x_te, y_te, p, 7, np.random.default_rng([7, 4]),
                                         controls=True, inits=2, ceiling=True, unmixing=unmix, batched=b))
            for b in (False, True)}
    one, side = rows[False], rows[True]
    assert len(one) == len(side) == 2 * (2 + 1 + 1) + 3
    assert (one[["arm", "variant", "init"]].to_numpy() == side[["arm", "variant", "init"]].to_numpy()).all()
    for col in ("val_acc", "test_acc", "half_test_acc", "late_gain"):
        np.testing.assert_allclose(side[col].to_numpy(float), one[col].to_numpy(float), atol=1e-12, equal_nan=True)


def test_head_replicates_run_on_the_offset_block(tmp_path, monkeypatch):
    # head_seed_offset: replicate i of claim (b)'s heads runs on the mixing model's seed offset + i (a fresh block),
    # claim (e)'s positive control stays on seeds 0 .. planted_attention_seeds - 1.
    cfg = to_dict(Params())
    cfg.update(seeds=1, head_seeds=2, head_seed_offset=50,
               eeg={**cfg["eeg"], "channels": 4, "classes": 2, "trials_per_class": 4, "windows": 2, "samples": 16},
               tree={**cfg["tree"], "seeds": 1, "depth": 3, "label_depth": 1, "planted_seeds": 1},
               spd_planted={**cfg["spd_planted"], "seeds": 0},
               train={**cfg["train"], "steps": 8, "eval_every": 2, "head_inits": 1, "planted_attention_seeds": 1,
                      "burst_attention_seeds": 0, "spread_attention_seeds": 0})
    from papers.common.params import StageConfig, stage_section
    from papers.symspace import params as P

    cfg["train"]["attention_steps"] = 8

    def as_rule(stage):  # the config as the stage's rule receives it (reading an undeclared parameter raises)
        return StageConfig(cfg, stage_section(P, stage, cfg, "symspace"), f"symspace_{stage}")

    data = tmp_path / "data.pkl"
    D.prepare(cfg=as_rule("prepare"), data=str(data))
    prepared = D.read_prepared(str(data))
    assert sorted(prepared["eeg"]["eeg"]) == [0, 50, 51] and sorted(prepared["attention"]["eeg"]) == [0]
    np.testing.assert_array_equal(prepared["eeg"]["eeg"][51][0]["train"]["tokens"],
                                  D.eeg_like(parse(cfg).eeg, 51)[0]["train"]["tokens"])
    from papers.common.io import read_parquet
    from papers.symspace import stages

    # glibc's malloc settings last for the process: the job's entry sets them, the test process keeps its defaults
    monkeypatch.setattr(stages, "keep_freed_memory", lambda: None)
    stages.train(cfg=as_rule("train"), seed="0", data=str(data), accuracies=str(tmp_path / "acc.parquet"))
    acc = read_parquet(str(tmp_path / "acc.parquet"))
    heads = acc[acc.arm.str.startswith("spdnet_")]
    assert sorted(heads.replicate.unique()) == [50, 51] and sorted(heads.seed.unique()) == [50, 51]
    assert set(heads[heads.variant == "permuted_labels"].replicate) == {50, 51}  # the controls: every replicate
    assert set(acc[acc.arm == "attention"].replicate) == {0}


def test_the_premise_reference_draws_the_training_session_of_the_given_generator():
    # claim (b)'s premise reference (review symspace_r9): trials of the subject's own mixing model. Closed form of the
    # mean trial covariance without shrinkage: (T - 1) / T (A diag(E p) A^T + noise^2 I), E p_k = exp(spread^2 / 2)
    # (1 + (gain - 1) / (W classes)) for a class source (its class's trials raise it in one of W windows), exp(spread^2
    # / 2) for the others
    e = {**to_dict(Params())["eeg"], "shrink": 0.0}
    c, k, w, t = e["channels"], e["classes"], e["windows"], e["samples"]
    forward = np.random.default_rng(0).normal(size=(c, c)) / np.sqrt(c) + np.eye(c)
    x, y = D.eeg_reference(e, forward, 2000, seed=1)
    assert x.shape == (2000 * k, w, c, c) and np.array_equal(np.bincount(y), [2000] * k)
    power = np.full(c, np.exp(e["power_spread"] ** 2 / 2))
    power[:k] *= 1 + (e["class_gain"] - 1) / (w * k)
    expected = (t - 1) / t * (forward @ np.diag(power) @ forward.T + e["noise"] ** 2 * np.eye(c))
    np.testing.assert_allclose(x.mean((0, 1)), expected, rtol=0.05, atol=0.02 * np.abs(expected).max())
    # another generator: another covariance
    other = np.random.default_rng(1).normal(size=(c, c)) / np.sqrt(c) + np.eye(c)
    assert np.abs(D.eeg_reference(e, other, 2000, seed=1)[0].mean((0, 1)) - expected).max() > 0.1 * np.abs(expected).max()


# ---- review symspace_r10: claim (d)'s heads on equal terms (a learning-rate grid, chosen on validation) ----------
def test_the_rate_is_chosen_on_validation_alone_with_fixed_tie_breaks():
    """choose_on_validation: within a rate the restart of the best validation accuracy (the first on ties); across
    rates the best validation accuracy, then the lower validation cross-entropy, then the earlier rate; a diverged
    run is never kept. Its arguments are validation figures only; the test accuracies below prefer other rates and
    must not matter."""
    from papers.symspace.train import choose_on_validation

    # (rates 3, restarts 2, seeds 4)
    val = np.array([[[0.80, 0.90, 0.70, 0.70], [0.85, 0.90, 0.70, 0.70]],
                    [[0.90, 0.90, 0.70, 0.95], [0.70, 0.90, 0.70, 0.80]],
                    [[0.60, 0.90, 0.70, 0.99], [0.60, 0.80, 0.70, 0.50]]])
    loss = np.ones_like(val)
    loss[1, 0, 1], loss[2, 0, 1] = 0.5, 0.7  # seed 1: accuracy tied everywhere, rate 1 the lowest loss
    diverged = np.zeros_like(val, dtype=bool)
    diverged[2, 0, 3] = True  # seed 3: the best validation accuracy belongs to a run that diverged
    test = np.array([[[0.99, 0.99, 0.99, 0.99]] * 2, [[0.1] * 4] * 2, [[0.1] * 4] * 2])  # prefers rate 0 always
    g, k, k_at = choose_on_validation(val, loss, diverged)
    assert list(g) == [1, 1, 0, 1] and list(k) == [0, 0, 0, 0]
    assert k_at[0, 0] == 1  # within rate 0, seed 0: the second restart scored higher on validation
    # on seeds 0, 1 and 3 the test accuracy prefers rate 0 and validation another: validation's rate is kept
    assert all(test[g[s], k[s], s] < test[0, :, s].max() for s in (0, 1, 3))
    # seed 2 is tied on accuracy and loss at every rate: the earlier rate, the first restart
    assert g[2] == 0 and k[2] == 0
    everything_diverged = np.ones_like(diverged)
    with pytest.raises(FloatingPointError):
        choose_on_validation(val, loss, everything_diverged)


def test_rates_side_by_side_train_as_each_rate_alone_and_a_diverged_replica_is_set_apart():
    """fit with one learning rate per replica: each replica's parameters equal those trained alone at its rate; a
    replica whose loss becomes non-finite is flagged and leaves the others untouched."""
    from papers.symspace.train import fit

    rng = np.random.default_rng(5)
    x = torch.as_tensor(rng.uniform(-0.6, 0.6, size=(3, 12, 2)))
    y = torch.as_tensor(rng.integers(0, 3, size=(3, 12)))

    def head(replicas):
        return L.BallMLR(2, 3, "busemann", torch.Generator().manual_seed(3), replicas)

    rates = [0.02, 0.2, 1.0]
    both, _ = fit(head(3), x, y, steps=6, lr=rates)
    assert not both.diverged.any()
    for r in range(3):
        alone = head(None)
        with torch.no_grad():
            for a, b in zip(alone.parameters(), head(3).parameters()):
                a.copy_(b[r])
        alone, _ = fit(alone, x[r], y[r], steps=6, lr=rates[r])
        for a, b in zip(alone.parameters(), both.parameters()):
            torch.testing.assert_close(a, b[r], rtol=1e-9, atol=1e-12)
    # a rate that overflows the Euclidean head's logits: that replica diverges, the other trains as it would alone
    euclid = lambda n: L.EuclideanMLR(2, 3, torch.Generator().manual_seed(1), n)  # noqa: E731
    xv, yv = x[:2], y[:2]
    pair, _ = fit(euclid(2), x[:2], y[:2], steps=8, lr=[0.05, 1e308], val=(xv, yv), every=2)
    assert list(pair.diverged) == [False, True]
    ref, _ = fit(euclid(1), x[:1], y[:1], steps=8, lr=[0.05], val=(xv[:1], yv[:1]), every=2)
    for a, b in zip(ref.parameters(), pair.parameters()):
        torch.testing.assert_close(a[0], b[0], rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError):
        fit(euclid(2), x[:2], y[:2], steps=2, lr=[0.05, 0.1, 0.2])  # one rate per replica


def _small_trees(seeds=3):
    cfg = to_dict(Params())
    cfg.update(tree={**cfg["tree"], "seeds": seeds, "depth": 3, "label_depth": 1, "planted_seeds": 1},
               train={**cfg["train"], "tree_steps": 40, "eval_every": 5})
    return cfg, [D.noisy_tree(parse(cfg).tree, s) for s in range(seeds)]


def test_ball_tasks_read_the_grid_from_config_and_keep_the_validation_choice():
    """The tree stage trains every head at each rate of symspace.train.tree_lrs (the config's grid, not a constant)
    and keeps, per head and seed, the rate's run that scores best on validation: the main row is one of its seed's
    per-rate rows, the one of highest validation accuracy (ties: lower validation cross-entropy, earlier rate)."""
    import pandas as pd
    from papers.symspace.train import ball_tasks

    cfg = yaml_config()["symspace"]
    assert list(parse(cfg).train["tree_lrs"]) == [0.02, 0.2, 1.0]  # the grid fixed before the run (review symspace_r10)
    small, trees = _small_trees()
    for grid in ([0.05, 0.5], [0.3]):
        p = parse({**small, "train": {**small["train"], "tree_lrs": grid}})
        rows = pd.DataFrame(ball_tasks(trees, p, planted_seeds=1))
        heads = rows[rows.arm.isin(["euclidean_mlr", "ganea_mlr", "busemann_mlr"]) & (rows.variant != "untrained")]
        assert set(heads.variant) == {"main", *(f"lr={v:g}" for v in grid)}
        assert set(heads[heads.variant == "main"].lr) <= set(grid)
        for (task, arm, seed), g in heads.groupby(["task", "arm", "seed"]):
            main, per_rate = g[g.variant == "main"].iloc[0], g[g.variant != "main"]
            best = per_rate.sort_values(["val_acc", "val_loss", "lr"], ascending=[False, True, True]).iloc[0]
            assert main.lr == best.lr and main.test_acc == best.test_acc
            np.testing.assert_equal(main.val_acc, per_rate.val_acc.max())  # NaN: an empty validation set
        conv = rows[rows.arm == "euclidean_converged"]
        assert len(conv) == 3 and (conv.fit_acc >= 0).all() and np.isfinite(conv.fit_loss).all()


def yaml_config():
    import yaml
    from pathlib import Path

    return yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "config.yaml").read_text())


def test_claim_d_says_why_when_a_tuned_euclidean_head_ties_ganeas():
    """Premise unmet (the Euclidean head ties Ganea's): (d) reads inconclusive and its note says the task does not
    show hyperbolic geometry mattering, with the superiority test still reported."""
    from papers.symspace.report import claim_d

    p = parse(to_dict(Params()))
    tie = claim_d(p, _tree_table(0.05, 0.1, euclid=0.0))
    assert tie.verdict == "inconclusive" and not tie.premise_met
    assert "hyperbolic premise is unmet" in tie.note and "ties with" in tie.note
    assert "superiority" in tie.note
    met = claim_d(p, _tree_table(0.05, 0.1))
    assert "hyperbolic premise is unmet" not in met.note


def test_full_scale_data_sets_match_full_yaml_and_the_subjects_needed_are_the_first_to_resolve():
    """The full-scale subject count comes from the data sets config/full.yaml names (checked here, so the report's
    constant cannot go stale), and the subjects needed are the fewest whose t half-width at the run's sd is below
    delta (independently: the half-width at that count is below delta, one fewer is not)."""
    import pandas as pd
    import yaml
    from pathlib import Path
    from scipy import stats
    from papers.symspace.report import FULL_SCALE_DATASETS, full_scale_power, full_scale_power_text

    full = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "full.yaml").read_text())
    assert set(full["symspace"]["eeg_datasets"]) == set(FULL_SCALE_DATASETS)
    rng = np.random.default_rng(0)
    rows = []
    for r in range(40):
        gap = 0.043 * rng.normal()
        rows += [{"task": "eeg", "replicate": r, "arm": "spdnet_logeig_linear", "variant": "main", "test_acc": 0.6},
                 {"task": "eeg", "replicate": r, "arm": "spdnet_busemann_mlr", "variant": "main",
                  "test_acc": 0.6 + gap}]
    w = full_scale_power(pd.DataFrame(rows), 0.02)
    n, sd = w["subjects_needed"], w["sd"]
    assert stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n) < 0.02 <= stats.t.ppf(0.975, n - 2) * sd / np.sqrt(n - 1)
    assert n > w["subjects"] and not w["resolves"]  # the 9 subjects cannot, more would
    text = full_scale_power_text(w)
    assert f"about {n} subjects" in text and "vary more" in text


def test_claim_d_names_the_rates_behind_an_unmet_stability_gate():
    """Review symspace_r11: where the gate is unmet on the runs chosen on validation, the note gives the shift with every
    head at each single rate (the same half-vs-whole measure), and names the rates within the gate; met, it says
    nothing."""
    import pandas as pd
    from papers.symspace.report import stability, stability_by_rate_text

    p = parse(to_dict(Params()))
    tol = p.claims["stability_tol"]
    rows = []
    for r in range(10):
        for variant, shift in (("main", 2 * tol), ("lr=0.02", 0.0), ("lr=0.2", 2 * tol), ("lr=1", 2 * tol)):
            rows += [{"task": "tree", "replicate": r, "arm": "ganea_mlr", "variant": variant, "test_acc": 0.8,
                      "half_test_acc": 0.8, "lr": 0.2},
                     {"task": "tree", "replicate": r, "arm": "busemann_mlr", "variant": variant, "test_acc": 0.82,
                      "half_test_acc": 0.82 + shift, "lr": 0.2}]
    acc = pd.DataFrame(rows)
    assert stability(acc, "tree", "busemann_mlr", "ganea_mlr", "lr=0.2") == pytest.approx(2 * tol)
    text = stability_by_rate_text(acc, p)
    assert "0.000 at 0.02" in text and f"{2 * tol:.3f} at 0.2" in text and "within the gate at 0.02 only" in text
    stable = acc.assign(half_test_acc=acc.test_acc)
    assert stability_by_rate_text(stable, p) == ""
