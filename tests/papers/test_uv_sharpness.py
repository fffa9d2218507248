"""P12 uv_sharpness: the UV model's closed forms against autograd, eigensolvers and known maps."""
import numpy as np
import pytest
import torch

from papers.common.hessian import lanczos, top_eigenvalue
from papers.uv_sharpness import uv
from papers.uv_sharpness.params import parse

N, X, Y = 7, 1.3, 0.6


def _random_uv(seed=0, scale=0.8):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(N, generator=g, dtype=torch.float64) * scale,
            torch.randn(N, generator=g, dtype=torch.float64) * scale)


def _loss(theta):
    u, v = theta[:N], theta[N:]
    f = X * torch.dot(u, v) / np.sqrt(N)
    return 0.5 * (f - Y) ** 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_hessian_matches_autograd(seed):
    u, v = _random_uv(seed)
    auto = torch.autograd.functional.hessian(_loss, torch.cat([u, v]))
    torch.testing.assert_close(uv.hessian(u, v, X, Y), auto, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_closed_form_sharpness_is_the_top_eigenvalue(seed):
    u, v = _random_uv(seed, scale=0.3 + seed)
    top = torch.linalg.eigvalsh(uv.hessian(u, v, X, Y))[-1].item()
    f, theta = uv.output(u.numpy(), v.numpy(), X), uv.ntk(u.numpy(), v.numpy(), X)
    assert uv.sharpness(f, theta, X, Y, N) == pytest.approx(top, rel=1e-10)


def test_sharpness_on_the_minimum_manifold_is_the_ntk_and_at_least_lambda_min():
    rng = np.random.default_rng(0)
    for _ in range(20):
        u = rng.normal(size=N)
        v = rng.normal(size=N)
        v *= Y / uv.output(u, v, X)  # now f = y exactly
        lam = uv.sharpness(uv.output(u, v, X), uv.ntk(u, v, X), X, Y, N)
        assert lam == pytest.approx(uv.ntk(u, v, X), rel=1e-10)
        assert lam >= uv.lambda_min(X, Y, N) - 1e-12
    u = np.ones(N) * np.sqrt(abs(Y) * np.sqrt(N) / (X * N))  # u = v: the flattest minimum
    assert uv.output(u, u, X) == pytest.approx(Y)
    assert uv.ntk(u, u, X) == pytest.approx(uv.lambda_min(X, Y, N))


def test_power_iteration_and_lanczos_find_the_top_eigenvalue():
    u, v = _random_uv(4, scale=1.5)
    params = [u.clone().requires_grad_(), v.clone().requires_grad_()]

    def loss_fn():
        return _loss(torch.cat(params))

    top = torch.linalg.eigvalsh(uv.hessian(u, v, X, Y))
    lam, _ = top_eigenvalue(loss_fn, params, iters=300, generator=torch.Generator().manual_seed(0))
    largest_magnitude = top[top.abs().argmax()].item()
    assert lam == pytest.approx(largest_magnitude, rel=1e-6)
    assert lanczos(loss_fn, params, iters=2 * N, k=2, generator=torch.Generator().manual_seed(0)) == pytest.approx(
        top.flip(0)[:2].tolist(), rel=1e-8)


@pytest.mark.parametrize("ratio", [0.7, 1.1, 1.35])
def test_function_space_map_equals_parameter_gd(ratio):
    rng = np.random.default_rng(1)
    u, v = rng.normal(0, 0.3, N), rng.normal(0, 0.3, N)
    eta = ratio * 2 / uv.lambda_min(X, Y, N)
    f, theta = uv.output(u, v, X), uv.ntk(u, v, X)
    for _ in range(200):
        u, v = uv.gd_step(u, v, X, Y, eta)
        f, theta = uv.function_step(f, theta, X, Y, N, eta)
        # chaos amplifies rounding, so compare step by step from the parameter state
        assert f == pytest.approx(uv.output(u, v, X), rel=1e-9, abs=1e-12)
        assert theta == pytest.approx(uv.ntk(u, v, X), rel=1e-9)
        f, theta = uv.output(u, v, X), uv.ntk(u, v, X)


def test_function_jacobian_matches_autograd():
    eta = 3.0

    def step(z):
        return torch.stack(uv.function_step(z[0], z[1], X, Y, N, eta))

    z = torch.tensor([0.4, 0.9], dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(step, z)
    j_ff, j_ft, j_tf, j_tt = uv.function_jacobian(0.4, 0.9, X, Y, N, eta)
    np.testing.assert_allclose(auto.numpy(), [[j_ff, j_ft], [j_tf, j_tt]], rtol=1e-12)


def _logistic_orbit(r, steps=20000, keep=1024, x0=0.3):
    """The late orbit of the logistic map x -> r x (1 - x) and its Lyapunov exponent (mean log |r (1 - 2x)|)."""
    x, out = x0, []
    for t in range(steps):
        x = r * x * (1 - x)
        if t >= steps - keep:
            out.append(x)
    out = np.array(out)
    return out, uv.lyapunov_1d(r * (1 - 2 * out))


@pytest.mark.parametrize("r, period", [(2.8, 1), (3.2, 2), (3.5, 4), (3.56, 8), (3.83, 3), (3.74, 5), (3.63, 6)])
def test_detect_period_finds_any_period_of_the_logistic_map(r, period):
    # Periods 3 (the window at 1 + sqrt(8) = 3.8284 .. 3.8415), 5 and 6 are not powers of two; each periodic
    # orbit is attracting, so its Lyapunov exponent is negative.
    orbit, lyap = _logistic_orbit(r)
    assert uv.detect_period(orbit) == period
    assert lyap < 0
    assert uv.classify(uv.detect_period(orbit), lyap) == f"period {period}"


def test_logistic_map_at_four_is_chaos_with_lyapunov_ln2():
    orbit, lyap = _logistic_orbit(4.0, steps=200_000, keep=100_000, x0=0.2345)
    assert uv.detect_period(orbit) == 0
    assert lyap == pytest.approx(np.log(2), abs=0.01)  # closed form: ln 2
    assert uv.classify(0, lyap) == "chaos"
    assert uv.classify(0, -0.01) == "aperiodic" and uv.classify(2, np.nan, diverged=True) == "diverged"


def test_detect_period_needs_two_full_periods_and_finite_values():
    assert uv.detect_period(np.tile([0.1, 0.5, 0.9], 1)) == 0  # one period only
    assert uv.detect_period(np.tile([0.1, 0.5, 0.9], 2)) == 3
    assert uv.detect_period(np.array([0.1, np.nan] * 8)) == 0


# ---- the fixed points of the EoS manifold (derived in uv's docstring) ----------------------------------
@pytest.mark.parametrize("r", [1.01, 1.1, 1.2, 1.23])
def test_two_cycle_is_a_period_two_orbit_of_the_manifold_map(r):
    g_plus, g_minus = uv.two_cycle(r)
    assert uv.eos_map(g_plus, r) == pytest.approx(g_minus, abs=1e-12)
    assert uv.eos_map(g_minus, r) == pytest.approx(g_plus, abs=1e-12)
    assert g_plus != pytest.approx(g_minus)
    # the multiplier from the derivative of the composed map, by central differences
    eps = 1e-6
    twice = lambda g: uv.eos_map(uv.eos_map(g, r), r)  # noqa: E731
    assert (twice(g_plus + eps) - twice(g_plus - eps)) / (2 * eps) == pytest.approx(uv.two_cycle_multiplier(r), abs=1e-6)
    assert uv.two_cycle_sharpness_ratio(r) == pytest.approx(1 + (r - 1) / 4, abs=1e-12)


def test_period_four_starts_where_the_two_cycle_multiplier_reaches_minus_one():
    assert uv.R_PERIOD_4 == pytest.approx(np.sqrt(5) - 1)
    assert uv.two_cycle_multiplier(uv.R_PERIOD_4) == pytest.approx(-1, abs=1e-12)
    assert np.isnan(uv.two_cycle(0.9)[0])
    for r, period in ((1.1, 2), (1.2, 2), (1.25, 4)):
        g, out = 0.9, []
        for t in range(20000):
            g = uv.eos_map(g, r)
            if t >= 20000 - 256:
                out.append(g)
        assert uv.detect_period(np.array(out)) == period


def test_manifold_map_is_the_function_space_map_on_u_parallel_v():
    # On u = v the function-space map reduces to g' = g (1 - r (g - 1))^2 with g = f / y, and the sharpness to
    # (2 / eta)(r / 2)(|g| + |2g - 1|); the imbalance 1 - 4 k f^2 / Theta^2 is 0 there.
    n, x, y, r = 50, 1.3, 0.7, 1.15
    eta = r * 2 / uv.lambda_min(x, y, n)
    u = np.random.default_rng(0).normal(0, 0.2, n)
    f, theta = uv.output(u, u, x), uv.ntk(u, u, x)
    assert uv.imbalance(f, theta, x, n) == pytest.approx(0, abs=1e-12)
    g = f / y
    for _ in range(50):
        assert uv.sharpness(f, theta, x, y, n) * eta / 2 == pytest.approx(uv.manifold_sharpness_ratio(g, r), rel=1e-9)
        f, theta = uv.function_step(f, theta, x, y, n, eta)
        g = uv.eos_map(g, r)
        assert f / y == pytest.approx(g, rel=1e-8)


def test_uv_route_to_chaos_and_edge_of_stability():
    # The headline mechanism on a coarse grid: below 2/lambda_min GD converges (period 1, sharpness
    # below 2/eta); just above it the late sharpness averages (2/eta)(1 + (r - 1)/4) on a period-2 orbit
    # of the manifold u || v; far above, the Lyapunov exponent turns positive.
    n, x, y = 100, 1.0, 1.0
    lmin = uv.lambda_min(x, y, n)
    rng = np.random.default_rng(0)
    u, v = rng.normal(0, 0.1, n), rng.normal(0, 0.1, n)
    ratios = np.array([0.8, 1.05, 1.5])
    shape = ratios.shape
    f_late, lam_late, lyap, diverged, imbalance = uv.iterate(
        np.full(shape, uv.output(u, v, x)), np.full(shape, uv.ntk(u, v, x)), x, y, n, ratios * 2 / lmin, 20000, 1024)
    assert [uv.detect_period(s) for s in f_late] == [1, 2, 0]
    assert lam_late[0].mean() < 2 / (0.8 * 2 / lmin)
    assert lam_late[1].mean() * (1.05 * 2 / lmin) / 2 == pytest.approx(uv.two_cycle_sharpness_ratio(1.05), abs=1e-6)
    assert lyap[2] > 0 and lyap[0] < 0.01 and not diverged.any()
    # on the manifold above eta_c (to rounding); below it GD stops on a minimum where u, v are aligned only as far
    # as gradient flow from a small init took them
    assert imbalance[1] < 1e-12 and imbalance[0] > 1e6 * imbalance[1]


def test_uv_params_checks():
    with pytest.raises(ValueError, match="late_window"):
        parse({"steps": 100, "late_window": 100})
    with pytest.raises(KeyError, match="uv_sharpness.mlp.lr"):
        parse({"mlp": {"lr": 1}})


# ---- claims: intervals over seeds, with controls -------------------------------------------------
def _sweep(seeds=3):
    """A hand-made sweep: period 1 below r = 1, 2 from 1, 4 from 1.25, 8 from 1.3, chaos from 1.35, EoS within 5%
    up to 1.2, the 2-cycle's mean sharpness exactly, on the manifold above r = 1."""
    import pandas as pd

    rows = []
    for seed in range(seeds):
        for r in np.round(np.arange(0.8, 1.5001, 0.025), 4):
            period = 1 if r < 1 else 2 if r < 1.25 else 4 if r < 1.3 else 8 if r < 1.35 else 0
            two_cycle = 1 < r < 1.25
            rows.append({"seed": seed, "ratio": r, "period": period, "lyapunov": 0.1 if period == 0 else -0.1,
                         "diverged": False, "label": "chaos" if period == 0 else f"period {period}",
                         "imbalance": 0.3 if r < 1 else 1e-9,
                         "sharpness_over_2_eta": (0.8 / r if r < 1 else 1 + (r - 1) / 4 if two_cycle else 1.2)
                                                 + 1e-5 * seed})
    return pd.DataFrame(rows)


def test_onsets_per_seed_and_the_eos_deviation():
    from papers.uv_sharpness.claims import ONSETS, eos_deviation, onsets_per_seed

    pts = _sweep()
    np.testing.assert_allclose(onsets_per_seed(pts, ONSETS["period_4"]), [1.25] * 3)
    np.testing.assert_allclose(onsets_per_seed(pts, ONSETS["chaos"]), [1.35] * 3)
    assert np.isnan(onsets_per_seed(pts[pts.ratio < 1.3], ONSETS["period_8"])).all()
    np.testing.assert_allclose(eos_deviation([1.02, 0.5, 3.0, np.nan]), [0.02, 0.5, 1.0, 1.0])


def test_route_to_chaos_holds_on_the_sweep_and_not_with_permuted_labels():
    from papers.uv_sharpness.claims import _route_parts

    pts = _sweep()
    parts, onsets = _route_parts(pts, r_below=0.975)
    assert [e.verdict for e in parts] == ["holds"] * 4
    rng = np.random.default_rng(0)
    shuffled = pts.sort_values(["seed", "ratio"]).assign(
        shuffled=np.concatenate([rng.permutation(g.ratio.to_numpy()) for _, g in pts.sort_values(["seed", "ratio"]).groupby("seed")]))
    control, _ = _route_parts(shuffled, r_below=0.975, ratio_column="shuffled")
    assert any(e.verdict != "holds" for e in control)


def _claims(pts):
    import pandas as pd

    from papers.uv_sharpness.claims import same_attractor, uv_claims

    p = parse({"sweep_points": 29})  # the hand-made sweep's grid: 0.8 .. 1.5 by 0.025
    eos = pd.DataFrame([{"init_scale": 0.1, "ratio": r, "seed": s, "sharpness_over_2_eta": 0.8 / r if r < 1 else 1.01}
                        for r in (0.8, 1.05) for s in range(3)])
    runs = pd.DataFrame([{"init_scale": sigma, "ratio": r, "seed": s, "eta_theta0": lam0 * r,
                          "reduction": 0.3 if lam0 > 2 else 0.001, "rise": -0.2 if lam0 > 2 else 9.0}
                         for sigma, lam0 in ((0.1, 0.2), (0.35, 2.45)) for r in (0.8, 1.05, 1.1) for s in range(3)])
    mlp_df = pd.DataFrame([{"lr": 0.1, "seed": s, "two_over_eta": 20.0, "initial_sharpness": 5.0 + s,
                            "late_sharpness": 20.0 + 0.1 * s, "final_loss": 0.1, "final_accuracy": 0.9} for s in range(3)])
    orbits = pd.DataFrame([{"seed": s, "ratio": r, "f": 1.0} for s in range(3) for r in pts.ratio.unique()])
    return uv_claims(p, eos, pts, runs, mlp_df, same_attractor(orbits, pts, 1e-6))


def test_claims_decide_over_the_whole_sweep_with_their_controls():
    a, b, c, d, e, f = _claims(_sweep())
    # EoS within 5% only below r = 1.2 (the 2-cycle: 1 + (r - 1)/4): over the whole sweep it does not hold, and says where it does
    assert a.verdict == "does not hold" and a.measured["holds_up_to_r"] == pytest.approx(1.175)
    assert a.control.verdict == "does not hold"
    assert b.verdict == "holds" and b.control.verdict != "holds"
    assert c.verdict == "holds" and c.control.verdict == "does not hold"
    # catapult at eta lambda_0 = 2.45 r in (2, 4) only (r = 1.05, 1.1); the small init is the control, and vice versa
    assert d.verdict == "holds" and d.control.verdict == "does not hold" and len(d.evidence) == 2
    assert e.verdict == "holds" and e.control.verdict == "does not hold" and len(e.evidence) == 3
    # period 4 at 1.25 is within 2 grid steps (0.05) of sqrt(5) - 1; the 2-cycle's mean sharpness is exact; the
    # naive 2/eta misses it
    assert f.verdict == "holds" and f.control.verdict == "does not hold"


def test_fixed_point_claim_fails_when_period_four_comes_late():
    pts = _sweep()
    late = pts.assign(period=np.where((pts.ratio >= 1.25) & (pts.ratio < 1.3), 2, pts.period))  # period 4 never
    assert _claims(late)[5].verdict == "does not hold"
    late = late.assign(period=np.where(late.ratio >= 1.3, 4, late.period))  # period 4 from 1.3: 0.064 late
    f = _claims(late)[5]
    assert f.verdict == "does not hold"
