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
    cfg = to_dict(Params())
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
    ours = fit(model_pair(), x, y, steps=5, lr=0.1)
    ref = model_pair()
    opt = torch.optim.Adam(ref.parameters(), lr=0.1)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        opt.step()
    for a, b in zip(ours.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
