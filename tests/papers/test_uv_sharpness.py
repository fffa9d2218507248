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
    with pytest.raises(ValueError, match="catapult_products"):
        parse({"catapult_products": {"ablation": 1.2, "start": 1.0, "stop": 2.5, "step": 0.05}})
    with pytest.raises(ValueError, match="catapult_products"):
        parse({"catapult_products": {"ablation": 0.7, "start": 1.0, "stop": 2.5}})
    with pytest.raises(ValueError, match="onset_span"):
        parse({"onset_span": 0.27})  # not a multiple of the grid step 0.05
    with pytest.raises(ValueError, match="onset_span"):
        parse({"onset_span": 1.0})  # more than (stop - start) / 2
    with pytest.raises(ValueError, match="width_sweep"):
        parse({"width_sweep": [100, 0]})


# ---- claims: intervals over replicates, with controls -------------------------------------------
def _sweep(seeds=3, init="small"):
    """A hand-made sweep: period 1 below r = 1, 2 from 1, 4 from 1.25, 8 from 1.3, chaos from 1.35, the 2-cycle's
    mean sharpness exactly, on the manifold above r = 1 (imbalance 0.3 below it, 1e-12 above)."""
    import pandas as pd

    rows = []
    for seed in range(seeds):
        for j, r in enumerate(np.round(np.arange(0.8, 1.5001, 0.025), 4)):
            period = 1 if r < 1 else 2 if r < 1.25 else 4 if r < 1.3 else 8 if r < 1.35 else 0
            two_cycle = 1 < r < 1.25
            rows.append({"init": init, "seed": seed, "index": j, "ratio": r, "period": period,
                         "lyapunov": 0.1 if period == 0 else -0.1, "diverged": False,
                         "label": "chaos" if period == 0 else f"period {period}", "imbalance0": 0.99,
                         "eta_theta0": r * (0.2 if init == "small" else 1.0),
                         "imbalance": 0.3 if r < 1 else 1e-12 * (1 + seed),
                         "sharpness_over_2_eta": (0.8 / r if r < 1 else 1 + (r - 1) / 4 if two_cycle else 1.2)
                                                 + 1e-7 * seed})
    return pd.DataFrame(rows)


def test_onsets_per_seed():
    from papers.uv_sharpness.claims import ONSETS, onsets_per_seed

    pts = _sweep()
    np.testing.assert_allclose(onsets_per_seed(pts, ONSETS["period_4"]), [1.25] * 3)
    np.testing.assert_allclose(onsets_per_seed(pts, ONSETS["chaos"]), [1.35] * 3)
    assert np.isnan(onsets_per_seed(pts[pts.ratio < 1.3], ONSETS["period_8"])).all()


def test_route_to_chaos_holds_on_the_sweep_and_not_with_permuted_labels():
    from papers.uv_sharpness.claims import route_parts

    pts = _sweep()
    parts, onsets = route_parts(pts, 1.0, 0.05)
    assert [e.verdict for e in parts] == ["holds"] * 4
    early = pts.assign(period=np.where((pts.ratio > 0.9) & (pts.ratio < 0.95), 2, pts.period))  # period 2 below 1
    assert route_parts(early, 1.0, 0.05)[0][0].verdict == "does not hold"
    rng = np.random.default_rng(0)
    shuffled = pts.sort_values(["seed", "ratio"]).assign(
        shuffled=np.concatenate([rng.permutation(g.ratio.to_numpy()) for _, g in pts.sort_values(["seed", "ratio"]).groupby("seed")]))
    control, _ = route_parts(shuffled, 1.0, 0.05, ratio_column="shuffled")
    assert any(e.verdict != "holds" for e in control)


def test_logistic_positive_control_finds_the_known_route():
    # The route detection on the logistic map, whose bifurcations are known (period 2 at mu = 3, 4 at 1 + sqrt(6),
    # 8 at 3.5441, chaos from 3.5699): a small sweep must find them in order, near their values.
    from papers.uv_sharpness.claims import ONSETS, logistic_sweep, onsets_per_seed, route_parts

    p = parse({"seeds": 3, "sweep_points": 289, "steps": 5000, "late_window": 512})
    pts = logistic_sweep(p)
    step = (3.62 - 2.9) / 288
    parts, _ = route_parts(pts, 3.0, 2 * step, what="mu")
    assert [e.verdict for e in parts] == ["holds"] * 4
    assert np.all(np.abs(onsets_per_seed(pts, ONSETS["period_4"]) - (1 + np.sqrt(6))) < 3 * step)
    chaos = onsets_per_seed(pts, ONSETS["chaos"])  # 3 chaotic points in a row: past the accumulation point, before
    assert np.all((chaos > 3.5699 - step) & (chaos < 3.6))  # the period-3 window at 3.83


GRID = np.round(np.concatenate([[0.7], np.arange(1.0, 2.5001, 0.05)]), 10)  # the default catapult_products (1.8 on it)


def test_catapult_products_hold_the_run_below_the_catapult_once():
    from papers.uv_sharpness.stages import catapult_products

    assert np.array_equal(catapult_products(parse({})), GRID)
    with pytest.raises(ValueError, match="below"):
        parse({"catapult_products": {"ablation": 0.7, "below": 1.82, "start": 1.0, "stop": 2.5, "step": 0.05}})
    with pytest.raises(ValueError, match="below"):
        parse({"catapult_products": {"ablation": 0.7, "below": 2.1, "start": 1.0, "stop": 2.5, "step": 0.05}})


def _runs(seeds=4, jump=0.3, slope=0.5, rise=9.0, first_onset=1.85, curve=0.0, theta0=2.0):
    """Hand-made trajectory runs: the small init's ratio runs (rise `rise`), and the large init's early-phase runs at
    the default eta Theta_0 grid (Theta_0 = `theta0`; lambda_min = 0.2, so the lasting reduction has room up to
    1 - 0.2 / theta0), whose loss first rises at first_onset +
    0.05 seed (the catapult onset); the early reduction grows by slope e + curve e^2 in e = eta Theta_0 - 1.3 (0
    below 1.3) and jumps by `jump` at the onset."""
    import pandas as pd

    rows = [{"init_scale": 0.1, "ratio": r, "product": np.nan, "seed": s, "eta_theta0": 0.2 * r, "reduction": 0.0,
             "rise": rise + s, "loss_ratio": 1e-3, "early_loss_peak": 0.5, "early_loss_end": 1e-3, "diverged": False,
             "diverged_step": np.nan} for r in (0.3, 0.8, 1.05, 1.1) for s in range(seeds)]
    for s in range(seeds):
        onset = first_onset + 0.05 * s
        for c in GRID:
            up = c >= onset - 1e-9
            rows.append({"init_scale": 0.35, "ratio": c / 2.45, "product": c, "seed": s, "eta_theta0": c,
                         "reduction": slope * max(c - 1.3, 0) + curve * max(c - 1.3, 0) ** 2 + jump * up + 0.001 * s,
                         "initial_sharpness": theta0, "rise": np.nan,
                         "loss_ratio": np.nan, "early_loss_peak": 1.5 if up else 0.5, "early_loss_end": 0.1,
                         "diverged": False, "diverged_step": np.nan})
    return pd.DataFrame(rows)


def _mlp(control_late=15.0, late=lambda lr, s: 2 / lr):
    """Hand-made network runs: eta = 0.1 and 0.2 at 2/eta (+ 0.1 seed), and the ablation at the default control_lr
    0.04 (2/eta = 50) with late sharpness `control_late`."""
    import pandas as pd

    return pd.DataFrame([{"lr": lr, "seed": s, "two_over_eta": 2 / lr, "initial_sharpness": 5.0 + s,
                          "late_sharpness": (control_late if lr == 0.04 else late(lr, s)) + 0.1 * s,
                          "initial_loss": 0.5, "final_loss": 0.1, "final_accuracy": 0.9}
                         for lr in (0.04, 0.1, 0.2) for s in range(3)])


def _claims(small, large, runs=None, wide="planted", mlp_df=None):
    import pandas as pd

    from papers.uv_sharpness.claims import logistic_sweep, uv_claims

    p = parse({"sweep_points": 29, "seeds": 3})  # the hand-made sweep's grid: 0.8 .. 1.5 by 0.025
    mlp_df = _mlp() if mlp_df is None else mlp_df
    logistic = logistic_sweep(parse({"seeds": 3, "sweep_points": 289, "steps": 5000, "late_window": 512}))
    runs = _runs() if runs is None else runs
    # d_catapult's positive control: by default the same hand-made runs (the jump planted); None simulates the wide model
    return uv_claims(p, large, small, runs, mlp_df, logistic, wide=_runs() if wide == "planted" else wide)


def test_claims_decide_with_their_controls_and_the_checks_pass():
    (a, b, c, d, dc), checks = _claims(_sweep(), _sweep(init="large"))
    assert a.verdict == "holds" and a.control.verdict == "does not hold" and a.premise_met
    assert b.verdict == "holds" and b.control.verdict != "holds" and b.positive_control.verdict == "holds"
    assert c.verdict == "holds" and c.control.verdict == "does not hold" and c.control.kind == "ablation"
    assert c.measured["slope of log late sharpness against log eta, per seed"] == pytest.approx([-1, -1, -1], abs=0.02)
    # (d): 1.8 (no catapult: lasting reduction 0.25) against 0.7 (0); the ablation alone does not reduce
    assert d.verdict == "holds" and d.control.verdict == "does not hold" and d.control.kind == "ablation"
    assert d.evidence.verdict == "holds" and d.premise_met
    assert any(k.startswith("n = 10000") for k in d.measured)  # the width sweep, reported beside (d)
    # (d_catapult): the planted jump of 0.3 at each seed's onset; the smooth growth (0.125 over D = 0.25) cancels
    assert dc.verdict == "holds" and dc.control.verdict == "does not hold" and dc.premise_met
    assert dc.evidence.effect == pytest.approx(0.3)
    assert dc.statement.startswith("Extension")
    assert dc.measured["catapult onset eta Theta_0 per seed"] == pytest.approx([1.85, 1.9, 1.95, 2.0])
    # period 4 at 1.25 is within 2 grid steps (0.05) of sqrt(5) - 1; the 2-cycle's mean sharpness is exact;
    # progressive sharpening from the small init (rise 9) is a check
    assert [k.id for k in checks] == ["eta_c", "period_4", "two_cycle", "progressive_sharpening"]
    assert all(k.passed for k in checks)


def test_catapult_claim_fails_without_a_jump_and_is_undecided_when_eta_alone_grows_the_reduction():
    claims, checks = _claims(_sweep(), _sweep(init="large"), _runs(jump=0.0))
    assert claims[4].verdict == "does not hold"  # smooth growth only: 0.025 per step < 0.1
    assert claims[3].verdict == "holds"  # a large learning rate still reduces
    curved = _claims(_sweep(), _sweep(init="large"), _runs(jump=0.0, slope=0.0, curve=1.0))[0][4]
    # a convex reduction adds 2 curve D^2 = 0.125 to every difference in differences with no catapult on either side:
    # the control (all runs calm) holds too, so the test cannot tell
    assert curved.control.verdict == "holds" and curved.verdict == "inconclusive" and curved.premise_met


def test_mlp_claim_needs_one_over_eta_and_its_ablation_must_stay_below_two_over_eta():
    from papers.uv_sharpness.claims import eta_slopes

    # the ablation's sharpness sits at its own 2/eta = 50: the control holds, so the test does not tell EoS apart
    c = _claims(_sweep(), _sweep(init="large"), mlp_df=_mlp(control_late=50.0))[0][2]
    assert c.control.verdict == "holds"
    # a late sharpness that does not follow 1/eta: slope 0 across the rates, and 2/eta missed at one of them
    flat = _mlp(late=lambda lr, s: 15.0)
    assert eta_slopes(flat[flat.lr > 0.05]) == pytest.approx([0.0, 0.0, 0.0], abs=1e-9)
    c = _claims(_sweep(), _sweep(init="large"), mlp_df=flat)[0][2]
    assert c.verdict == "does not hold"
    assert any(e.name.startswith("|slope") and e.verdict == "does not hold" for e in c.evidence)


def test_catapult_claim_is_undecided_when_the_reduction_has_no_room():
    # at 1.6 per unit the reduction below the onset nears 1 (0.8 at 1.8): across the onset it can grow by at most
    # 1 - R, less than it grew over the span below, so "does not hold" would come from the bound: inconclusive
    dc = _claims(_sweep(), _sweep(init="large"), _runs(jump=0.0, slope=1.6))[0][4]
    assert not dc.premise_met and dc.verdict == "inconclusive"
    # the lasting reduction ends at a minimum, where Theta >= lambda_min: from Theta_0 = 0.25 (lambda_min = 0.2) it
    # is at most 0.2, below what the planted runs already reach under the onset, so the test has no room either
    dc = _claims(_sweep(), _sweep(init="large"), _runs(theta0=0.25))[0][4]
    assert not dc.premise_met and dc.verdict == "inconclusive"


def test_large_lr_claim_separates_the_catapult_from_the_learning_rate():
    # every seed's loss rises below 1.8: the part without a catapult has no valid run, so (d) cannot decide
    early = _claims(_sweep(), _sweep(init="large"), _runs(first_onset=1.5))[0][3]
    assert early.verdict in ("inconclusive", "not measured") and not early.premise_met
    # a reduction only where the loss rises (none below the onset): the part below the catapult fails
    only = _runs(slope=0.0)
    claims, _ = _claims(_sweep(), _sweep(init="large"), only)
    d = claims[3]
    assert d.evidence.verdict == "does not hold" and d.verdict == "does not hold"
    # a deep transient dip (0.7 at step 2) that does not last: the lasting reduction decides, and it does not hold
    dipped = only.assign(dip=0.7, dip_step=2.0)
    d = _claims(_sweep(), _sweep(init="large"), dipped)[0][3]
    assert d.verdict == "does not hold" and "minimum at step 2 in 4 of 4" in d.note
    # a small init (Theta_0 = 0.15 below lambda_min = 0.2 in every seed): not the paper's large init, no verdict
    small = _claims(_sweep(), _sweep(init="large"), _runs(theta0=0.15))[0][3]
    assert not small.premise_met and small.verdict in ("inconclusive", "not measured")


def test_catapult_premise_gates_runs_that_diverge_or_never_fall():
    runs = _runs()
    bad = runs["product"].notna() & (runs.seed < 2)  # half the seeds: the onset run diverges
    runs.loc[bad & (runs.early_loss_peak > 1), ["diverged", "diverged_step"]] = [True, 7.0]
    claims, _ = _claims(_sweep(), _sweep(init="large"), runs)
    assert claims[4].verdict == "inconclusive" and "premise not met" in claims[4].note
    assert "at step 7" in claims[4].note  # the divergence step is computed, not typed
    no_rise = _runs().assign(early_loss_peak=0.5)  # no run's loss ever rises: no catapult onset
    never = _claims(_sweep(), _sweep(init="large"), no_rise)[0][4]
    assert never.verdict in ("inconclusive", "not measured") and not never.premise_met


def test_progressive_sharpening_check_fails_when_the_small_init_does_not_rise():
    _, checks = _claims(_sweep(), _sweep(init="large"), _runs(rise=0.05))
    assert not checks[-1].passed


def test_off_manifold_orbits_and_unmet_premises():
    small, large = _sweep(), _sweep(init="large")
    off = large.assign(imbalance=np.where(large.ratio > 1.2, 0.05, large.imbalance))  # leaves the manifold past 1.2
    a = _claims(small, off)[0][0]
    assert a.verdict == "does not hold"
    on_at_start = large.assign(imbalance0=1e-4)  # starts on the manifold: reaching it says nothing
    a = _claims(small, on_at_start)[0][0]
    assert a.verdict == "inconclusive" and "premise not met" in a.note
    unsettled = small.assign(label=np.where(small.ratio > 1.3, "aperiodic", small.label))
    b = _claims(unsettled, large)[0][1]
    assert b.verdict == "inconclusive" and "premise not met" in b.note


def test_manifold_claim_leaves_diverged_runs_out_and_gates_on_their_share():
    small, large = _sweep(), _sweep(seeds=4, init="large")
    top = large.ratio >= 1.475  # one replicate escapes at the sweep's top edge: no late orbit, not off the manifold
    edge = large.assign(diverged=top & (large.seed == 0), imbalance=np.where(top & (large.seed == 0), np.nan,
                                                                              large.imbalance))
    a = _claims(small, edge)[0][0]
    assert a.verdict == "holds" and a.measured["diverged_runs"] == 2
    assert a.measured["divergence_onset_per_replicate"][0] == pytest.approx(1.475)
    many = large.ratio >= 1.3  # most of the route diverges: the sweep no longer probes it
    gone = large.assign(diverged=many, imbalance=np.where(many, np.nan, large.imbalance))
    a = _claims(small, gone)[0][0]
    assert a.verdict == "inconclusive" and "premise not met" in a.note and a.measured["points_untested"] == 9


def test_trajectory_runs_find_the_divergence_step_and_the_loss_rise():
    import pandas as pd

    from papers.uv_sharpness.stages import trajectory_runs

    p = parse({"steps": 100, "late_window": 64, "early_steps": 10, "max_period": 16})
    f = np.full(101, 1.0)
    f[:4] = [0.0, 2.5, 0.5, 1.2]  # L_0 = 0.5, a rise to 1.125 at step 1, then back to the minimum
    f_bad = f.copy()
    f_bad[30:] = np.inf
    ntk = np.full(101, 0.9)
    ntk[:3] = [1.0, 0.6, 0.3]  # a transient dip at step 2, then Theta recovers to 0.9
    hess = np.full(101, 1.5)
    hess[:3] = [2.0, 1.0, 0.8]
    traj = pd.concat([pd.DataFrame({"init_scale": 0.35, "ratio": 1.0, "product": 2.5, "seed": s, "step": np.arange(101),
                                    "f": ff, "ntk": ntk, "sharpness": hess}) for s, ff in ((0, f), (1, f_bad))])
    runs = trajectory_runs(traj, p).sort_values("seed")
    assert runs.early_loss_peak.iloc[0] == pytest.approx(2.25) and runs.early_loss_end.iloc[0] == 0.0
    assert not runs.diverged.iloc[0] and np.isnan(runs.diverged_step.iloc[0])
    assert runs.diverged.iloc[1] and runs.diverged_step.iloc[1] == 30
    # the lasting reduction at the early phase's end (step 10), not the transient minimum at step 2
    assert runs.reduction.iloc[0] == pytest.approx(0.1) and runs.early_end.iloc[0] == pytest.approx(0.9)
    assert runs.dip.iloc[0] == pytest.approx(0.7) and runs.dip_step.iloc[0] == 2
    assert runs.sharpness_reduction.iloc[0] == pytest.approx(0.25)  # on lambda_max: 1.5 at step 10, from 2
    assert np.isnan(runs.rise.iloc[0])  # an early-phase run has no late window


def test_fixed_point_check_fails_when_period_four_comes_late():
    small = _sweep()
    late = small.assign(period=np.where((small.ratio >= 1.25) & (small.ratio < 1.3), 2, small.period))  # never
    assert not _claims(late, _sweep(init="large"))[1][1].passed
    late = late.assign(period=np.where(late.ratio >= 1.3, 4, late.period))  # period 4 from 1.3: 0.064 late
    assert not _claims(late, _sweep(init="large"))[1][1].passed


def test_sweep_instances_differ_and_set_the_init_in_units_of_lambda_min():
    from papers.uv_sharpness.stages import sweep_instance

    p = parse({})
    inst = [sweep_instance(p, seed, 0.5) for seed in range(4)]
    assert len({(i["x"], i["y"], i["offset"]) for i in inst}) == 4
    for i in inst:
        assert p.example_range[0] <= i["x"] <= p.example_range[1] and 0 <= i["offset"] < 1
        # E Theta_0 = 2 sigma^2 x^2 and lambda_min = 2 |x y| / sqrt(n): the ratio is the init's
        assert 2 * i["sigma"] ** 2 * i["x"] ** 2 / uv.lambda_min(i["x"], i["y"], p.width) == pytest.approx(0.5)
    assert sweep_instance(parse({"grid_jitter": False}), 0, 0.5)["offset"] == 0.0


def test_full_scale_reads_cifar_from_a_user_path_and_trains_the_cnn(tmp_path):
    # The paper's real-network check runs on CIFAR-10: a folder in the python-pickle format (here two tiny fake
    # batches) is read by prepare, and the small CNN trains on it by full-batch GD with its sharpness measured.
    import pickle

    import pandas as pd

    from papers.uv_sharpness.stages import prepare, train_mlp

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(1, 6):
        batch = {b"data": rng.integers(0, 256, (8, 3072), dtype=np.uint8), b"labels": list(rng.integers(0, 10, 8))}
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(batch))
    cfg = {"mlp": {"dataset": "cifar10", "path": str(folder), "architecture": "cnn", "train_size": 20, "hidden": 4,
                   "learning_rates": [0.05], "steps": 6, "sharpness_every": 3, "power_iterations": 3, "seeds": 1}}
    prepare(cfg=cfg, digits=tmp_path / "images.parquet")
    images = pd.read_parquet(tmp_path / "images.parquet")
    assert images.shape == (20, 3072 + 1) and images.drop(columns="label").to_numpy().max() <= 1.0
    train_mlp(cfg=cfg, digits=tmp_path / "images.parquet", lr=0.05, seed=0, history=tmp_path / "h.parquet")
    hist = pd.read_parquet(tmp_path / "h.parquet")
    assert len(hist) == 7 and hist.sharpness.notna().sum() == 3 and np.isfinite(hist.loss).all()
    with pytest.raises(ValueError, match="cnn needs images"):
        parse({"mlp": {"architecture": "cnn"}})
    with pytest.raises(ValueError, match="mlp.path"):
        parse({"mlp": {"dataset": "cifar10"}})


def test_wide_early_runs_match_the_parameter_space_runs_and_show_the_onset_test_blind():
    """The function-space map reproduces the parameter-space early phase (same seeds, same width), and at a width where
    only the catapult reduces the NTK the first round's onset test (onset minus one grid step below) missed it, since
    the catapult's extra reduction grows from zero at its onset; the difference in differences over D sees it."""
    from papers.uv_sharpness import uv
    from papers.uv_sharpness.claims import catapult_onsets, early_arms, wide_early_runs
    from papers.uv_sharpness.stages import _init, _simulate

    p = parse({"seeds": 3, "early_steps": 300})
    mine = wide_early_runs(p, p.width)
    s = max(p.init_scales)
    runs = []  # eta = product / Theta_0 of each seed's own init, as stages.trajectories sets it
    for seed in range(3):
        u, v = _init(seed, p.width, s)
        for c in (0.7, 1.8, 2.5):
            runs.append((s, c / uv.ntk(u, v, p.x) / (2 / p.lambda_min), seed, c))
    traj = _simulate(runs, p, p.early_steps)
    for (seed, c), g in traj.groupby(["seed", "product"]):
        g = g.sort_values("step")
        got = mine[(mine.seed == seed) & np.isclose(mine["product"], c)].iloc[0]
        assert got.reduction == pytest.approx(1 - g.ntk.iloc[-1] / g.ntk.iloc[0], rel=1e-6, abs=1e-9)
        assert got.dip == pytest.approx(1 - g.ntk.min() / g.ntk.iloc[0], rel=1e-6, abs=1e-9)
        assert got.dip_step == g.step.iloc[int(np.argmin(g.ntk.to_numpy()))]
    wide = early_arms(wide_early_runs(parse({"seeds": 4}), 10000))
    onset, at, below, _ = catapult_onsets(wide, 1.0)
    assert np.all(onset >= 0) and np.all(wide["products"][onset] >= 2.0 - 1e-9)  # the infinite-width onset
    assert np.nanmax(at - below) < 0.1  # the jump at the onset stays below change_threshold
    j18 = int(np.argmin(np.abs(wide["products"] - 1.8)))
    assert np.nanmax(wide["reduction"][:, j18]) < 0.05  # below the catapult, hardly any reduction at this width
    claims, _ = _claims(_sweep(), _sweep(init="large"), wide=None)
    assert claims[4].positive_control.verdict == "holds" and claims[4].verdict == "holds"
