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


def test_detect_period_on_the_logistic_map():
    def orbit(r, steps=5000, keep=256):
        x, out = 0.3, []
        for t in range(steps):
            x = r * x * (1 - x)
            if t >= steps - keep:
                out.append(x)
        return np.array(out)

    assert uv.detect_period(orbit(2.8)) == 1
    assert uv.detect_period(orbit(3.2)) == 2
    assert uv.detect_period(orbit(3.5)) == 4
    assert uv.detect_period(orbit(3.9)) == 0  # chaos


def test_uv_route_to_chaos_and_edge_of_stability():
    # The headline mechanism on a coarse grid: below 2/lambda_min GD converges (period 1, sharpness
    # below 2/eta); just above it the late sharpness averages 2/eta on a period-2 orbit; far above,
    # the Lyapunov exponent turns positive.
    n, x, y = 100, 1.0, 1.0
    lmin = uv.lambda_min(x, y, n)
    rng = np.random.default_rng(0)
    u, v = rng.normal(0, 0.1, n), rng.normal(0, 0.1, n)
    ratios = np.array([0.8, 1.05, 1.5])
    shape = ratios.shape
    f_late, lam_late, lyap, diverged = uv.iterate(np.full(shape, uv.output(u, v, x)), np.full(shape, uv.ntk(u, v, x)),
                                                  x, y, n, ratios * 2 / lmin, 20000, 1024)
    assert [uv.detect_period(s) for s in f_late] == [1, 2, 0]
    assert lam_late[0].mean() < 2 / (0.8 * 2 / lmin)
    assert lam_late[1].mean() * (1.05 * 2 / lmin) / 2 == pytest.approx(1.0, abs=0.02)
    assert lyap[2] > 0 and lyap[0] < 0.01 and not diverged.any()


def test_uv_params_checks():
    with pytest.raises(ValueError, match="late_window"):
        parse({"steps": 100, "late_window": 100})
    with pytest.raises(KeyError, match="uv_sharpness.mlp.lr"):
        parse({"mlp": {"lr": 1}})


# ---- claims: intervals over seeds, with controls -------------------------------------------------
def _sweep(seeds=3):
    """A hand-made sweep: period 1 below r = 1, 2 from 1, 4 from 1.2, chaos from 1.35, EoS within 5% up to 1.2."""
    import pandas as pd

    rows = []
    for seed in range(seeds):
        for r in np.round(np.arange(0.8, 1.5001, 0.025), 4):
            period = 1 if r < 1 else 2 if r < 1.2 else 4 if r < 1.35 else 0
            rows.append({"seed": seed, "ratio": r, "period": period, "lyapunov": 0.1 if period == 0 else -0.1,
                         "diverged": False,
                         "sharpness_over_2_eta": (0.8 / r if r < 1 else 1 + (0.02 if r <= 1.2 else 0.2)) + 1e-4 * seed})
    return pd.DataFrame(rows)


def test_onsets_per_seed_and_the_eos_deviation():
    from papers.uv_sharpness.stages import ONSETS, eos_deviation, onsets_per_seed

    pts = _sweep()
    np.testing.assert_allclose(onsets_per_seed(pts, ONSETS["period_4"]), [1.2] * 3)
    np.testing.assert_allclose(onsets_per_seed(pts, ONSETS["chaos"]), [1.35] * 3)
    assert np.isnan(onsets_per_seed(pts, ONSETS["period_8"])).all()
    np.testing.assert_allclose(eos_deviation([1.02, 0.5, 3.0, np.nan]), [0.02, 0.5, 1.0, 1.0])


def test_route_to_chaos_holds_on_the_sweep_and_not_with_permuted_labels():
    from papers.uv_sharpness.stages import _route_parts

    pts = _sweep()
    parts, onsets = _route_parts(pts, r_below=0.975)
    assert [e.verdict for e in parts] == ["holds"] * 3
    rng = np.random.default_rng(0)
    shuffled = pts.sort_values(["seed", "ratio"]).assign(
        shuffled=np.concatenate([rng.permutation(g.ratio.to_numpy()) for _, g in pts.sort_values(["seed", "ratio"]).groupby("seed")]))
    control, _ = _route_parts(shuffled, r_below=0.975, ratio_column="shuffled")
    assert any(e.verdict != "holds" for e in control)


def test_eos_claim_covers_the_whole_sweep_and_states_its_range():
    import pandas as pd

    from papers.uv_sharpness.stages import uv_claims

    pts = _sweep()
    p = parse({})
    eos = pd.DataFrame([{"init_scale": 0.1, "ratio": r, "seed": s, "sharpness_over_2_eta": 0.8 / r if r < 1 else 1.01}
                        for r in (0.8, 1.05) for s in range(3)])
    mlp_df = pd.DataFrame([{"lr": 0.1, "seed": s, "two_over_eta": 20.0, "initial_sharpness": 5.0 + s,
                            "late_sharpness": 20.0 + 0.1 * s, "final_loss": 0.1, "final_accuracy": 0.9} for s in range(3)])
    m = {"thresholds": {"period_2": 1.0, "period_4": 1.2, "period_8": None, "chaos": 1.35, "divergence": None},
         "below_threshold_all_period_1": True}
    a, b, c = uv_claims(p, m, eos, pts, mlp_df)
    # EoS within 5% only up to r = 1.2: tested over the whole sweep it does not hold, and says where it does
    assert a.verdict == "does not hold" and a.measured["holds_up_to_r"] == pytest.approx(1.2)
    assert a.control.verdict == "does not hold"
    assert b.verdict == "holds" and b.control.verdict != "holds"
    assert c.verdict == "holds" and c.control.verdict == "does not hold"
