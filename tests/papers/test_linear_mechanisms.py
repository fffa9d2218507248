"""P10 linear_mechanisms: the exact solution against an ODE solver and gradient descent, its invariants,
the phase-diagram labels, the MLP's closed-form NTK against autograd, and the loaders."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.integrate import solve_ivp

from papers.linear_mechanisms import exact, mlp, phase
from papers.linear_mechanisms.params import parse
from papers.linear_mechanisms.evaluate import point_states, trajectory_errors
from papers.linear_mechanisms.stages import simulate

M2, MXY = 1.3, 0.9  # data moments of a hand-made 1-D set


def _problem(kappa=0.7, eta_u=1.0, eta_w=1.0, mxy=MXY):
    return dict(kappa=kappa, eta_u=eta_u, eta_w=eta_w, m2=M2, mxy=mxy)


def _flow(u0, w0, t_eval, kappa, eta_u, eta_w, mxy):
    """Gradient flow of L = (F^2 m2 - 2 F mxy) / 2, F = kappa u.w, by a high-accuracy ODE solver."""
    d = u0.size

    def rhs(_, theta):
        u, w = theta[:d], theta[d:]
        delta = kappa * (u @ w) * M2 - mxy
        return np.concatenate([-eta_u * kappa * delta * w, -eta_w * kappa * delta * u])

    sol = solve_ivp(rhs, (0, t_eval[-1]), np.concatenate([u0, w0]), t_eval=t_eval, rtol=1e-11, atol=1e-12, method="DOP853")
    return sol.y[:d].T, sol.y[d:].T  # (T, d)


@pytest.mark.parametrize("eta_u, eta_w, mxy, scale", [(1.0, 1.0, MXY, 0.3), (4.0, 0.5, MXY, 0.1),
                                                      (0.2, 3.0, -MXY, 1.0), (1.0, 1.0, -MXY, 2.0)])
def test_exact_trajectory_matches_an_ode_solver(eta_u, eta_w, mxy, scale):
    rng = np.random.default_rng(1)
    u0, w0 = rng.normal(0, scale, 6), rng.normal(0, scale, 6)
    problem = _problem(eta_u=eta_u, eta_w=eta_w, mxy=mxy)
    t = np.linspace(0, 20, 41)
    u_ode, w_ode = _flow(u0, w0, t, problem["kappa"], eta_u, eta_w, mxy)
    a, b, c = exact.rescaled_gram(u0, w0, eta_u, eta_w)
    S = exact.exponent(t, a, b, c, **problem)[:, None]
    # eq. (1) in unscaled variables: u = u0 cosh S - sqrt(eta_u / eta_w) w0 sinh S, and symmetrically for w
    u = u0 * np.cosh(S) - np.sqrt(eta_u / eta_w) * w0 * np.sinh(S)
    w = w0 * np.cosh(S) - np.sqrt(eta_w / eta_u) * u0 * np.sinh(S)
    np.testing.assert_allclose(u, u_ode, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(w, w_ode, rtol=1e-7, atol=1e-9)
    # the Gram scalars of eq. (1) are those of the vectors
    gram = exact.gram_at(S[:, 0], a, b, c, eta_u=eta_u, eta_w=eta_w)
    direct = exact.gram_of(u_ode, w_ode, u0, w0)
    for key in exact.GRAM:
        np.testing.assert_allclose(gram[key], direct[key], rtol=1e-7, atol=1e-9)


def test_learned_state_fits_the_target_and_invariants_hold():
    rng = np.random.default_rng(2)
    u0, w0 = rng.normal(0, 0.5, 8), rng.normal(0, 0.8, 8)
    problem = _problem(eta_u=2.0, eta_w=0.5)
    a, b, c = exact.rescaled_gram(u0, w0, 2.0, 0.5)
    C0, D0 = exact.invariants(a, b, c)
    for S in [exact.exponent(5.0, a, b, c, **problem), exact.final_exponent(a, b, c, **problem)]:
        g = exact.gram_at(S, a, b, c, eta_u=2.0, eta_w=0.5)
        ut, wt, ct = g["uu"] / 2.0, g["ww"] / 0.5, g["uw"] / 1.0  # rescaled: eta_u eta_w = 1
        C, D = exact.invariants(ut, wt, ct)
        assert C == pytest.approx(C0, rel=1e-10) and D == pytest.approx(D0, rel=1e-10)
        # eq. (3): cos^2 and the NTK are functions of the output alone
        obs = exact.observables(g, exact.gram_at(0.0, a, b, c, eta_u=2.0, eta_w=0.5), kappa=0.7, eta_u=2.0, eta_w=0.5)
        assert obs["cos_uw"] ** 2 == pytest.approx(ct**2 / (ct**2 + D0), rel=1e-10)
        assert obs["ntk"] == pytest.approx(0.7**2 * np.sqrt(4 * ct**2 + 4 * D0 + C0**2), rel=1e-10)
    F = 0.7 * g["uw"]
    assert F == pytest.approx(MXY / M2, rel=1e-10)  # residual F m2 - mxy = 0


def test_riccati_solution_solves_its_equation():
    a, b, c = 0.4, 0.9, 0.1
    problem = _problem()
    s = 0.7
    alpha, gamma = s * s * M2 / 4, s * MXY
    P, Q = a + b + 2 * c, a + b - 2 * c
    t = np.linspace(0, 3, 301)
    z = np.exp(2 * exact.exponent(t, a, b, c, **problem))
    assert z[0] == pytest.approx(1.0)
    dz = np.gradient(z, t, edge_order=2)
    np.testing.assert_allclose(dz[1:-1], 2 * (alpha * P - gamma * z - alpha * Q * z * z)[1:-1], rtol=1e-3, atol=1e-5)


def test_aligned_start_is_pure_rescaling():
    """u0 = w0 (Q = 0, eq. 2 is linear; d = 1 is the same): cos stays 1, only the norms change."""
    u0 = np.array([0.3, -0.2, 0.1])
    a, b, c = exact.rescaled_gram(u0, u0, 1.0, 1.0)
    problem = _problem()
    t = np.linspace(0, 10, 11)
    S = exact.exponent(t, a, b, c, **problem)
    g = exact.gram_at(S, a, b, c, eta_u=1.0, eta_w=1.0)
    obs = exact.observables(g, exact.gram_at(0.0, a, b, c, eta_u=1.0, eta_w=1.0), kappa=0.7, eta_u=1.0, eta_w=1.0)
    np.testing.assert_allclose(obs["cos_uw"], 1.0, atol=1e-12)
    np.testing.assert_allclose(obs["dir_w"], 0.0, atol=1e-12)
    assert obs["norm_w"][-1] > 1.5  # the output grows from 0.098 to the target 0.69 by rescaling alone
    u_ode, w_ode = _flow(u0, u0.copy(), t, 0.7, 1.0, 1.0, MXY)
    np.testing.assert_allclose(np.sqrt(g["uu"]), np.linalg.norm(u_ode, axis=1), rtol=1e-7)


def test_gradient_descent_converges_to_the_exact_solution_at_first_order():
    rng = np.random.default_rng(3)
    x = rng.normal(size=64)
    y = 0.8 * x + 0.1 * rng.normal(size=64)
    m2, mxy = exact.moments(x, y)
    u0, w0 = rng.normal(0, 0.2, (2, 5)), rng.normal(0, 0.2, (2, 5))
    kappa, eta_u, eta_w = np.array([1.0, 0.5]), np.array([1.0, 3.0]), np.array([1.0, 0.3])
    a, b, c = exact.rescaled_gram(u0, w0, eta_u, eta_w)
    errors = []
    for dt, steps in [(0.02, 500), (0.01, 1000)]:
        times, gram = exact.gradient_descent(u0, w0, x, y, kappa=kappa, eta_u=eta_u, eta_w=eta_w, dt=dt, steps=steps,
                                             record=range(0, steps + 1, steps // 10))
        S = exact.exponent(times, a[:, None], b[:, None], c[:, None], kappa=kappa[:, None], eta_u=eta_u[:, None],
                           eta_w=eta_w[:, None], m2=m2, mxy=mxy)
        closed = exact.gram_at(S, a[:, None], b[:, None], c[:, None], eta_u=eta_u[:, None], eta_w=eta_w[:, None])
        errors.append(max(np.abs(gram[k] - closed[k]).max() / np.abs(closed[k]).max() for k in ("uu", "ww", "uw")))
    assert errors[0] < 0.05
    assert 1.7 < errors[0] / errors[1] < 2.3  # Euler: global error O(dt)


def test_simulate_and_errors_on_a_tiny_run():
    x = np.linspace(-2, 2, 32)
    y = x.copy()
    rows = [{"width": 6, "sigma": s, "kappa_exponent": 0.5, "lr_ratio": r, "seed": 0} for s, r in [(0.3, 1.0), (1.0, 10.0)]]
    res = simulate(rows, x, y, h=0.01, tol=1e-4, min_steps=10, max_steps=5000, records=20)
    assert res["times"].shape[0] == 2 and res["steps"] <= 5000
    for key in ("F", "ntk", "cos_uw", "norm_w"):
        scale = np.abs(res["exact"][key]).max(1, keepdims=True)
        assert (np.abs(res["gd"][key] - res["exact"][key]) / scale).max() < 0.02
    assert res["gd"]["F"][:, -1] == pytest.approx(res["target"], rel=1e-3)
    frames = []
    for i, row in enumerate(rows):
        df = pd.DataFrame({"point": f"p{i}", **row, "h": 0.01, "record": np.arange(res["times"].shape[1]),
                           "time": res["times"][i]})
        for src in ("gd", "exact"):
            for key in ("F", "ntk", "cos_uw", "norm_u", "norm_w", "dir_u", "dir_w"):
                df[f"{src}_{key}"] = res[src][key][i]
        frames.append(df.iloc[::-1])  # rows out of order on purpose
    traj = pd.concat(frames, ignore_index=True)
    assert trajectory_errors(traj).error.max() < 0.02
    states = point_states(traj, 0.01)
    for i, row in states.iterrows():
        assert row.gd_cos0 == pytest.approx(abs(res["gd"]["cos_uw"][i, 0]))
        assert row.gd_cos == pytest.approx(abs(res["gd"]["cos_uw"][i, -1]))


def test_step_size_bounds_the_flow_jacobian():
    """dt x (top eigenvalue of the flow's Jacobian) <= h at the start and at the learned state."""
    rng = np.random.default_rng(4)
    u0, w0 = rng.normal(0, 0.5, 5), rng.normal(0, 0.5, 5)
    kappa, eta_u, eta_w = 0.8, 2.0, 0.5
    problem = _problem(kappa=kappa, eta_u=eta_u, eta_w=eta_w)
    a, b, c = exact.rescaled_gram(u0, w0, eta_u, eta_w)
    dt = exact.step_size(a, b, c, h=0.1, **problem)
    S_end = exact.final_exponent(a, b, c, **problem)
    for S in (0.0, S_end):
        ch, sh = np.cosh(S), np.sinh(S)
        ut = u0 / np.sqrt(eta_u) * ch - w0 / np.sqrt(eta_w) * sh
        wt = w0 / np.sqrt(eta_w) * ch - u0 / np.sqrt(eta_u) * sh
        s = kappa * np.sqrt(eta_u * eta_w)
        delta = s * M2 * (ut @ wt) - MXY
        j = np.concatenate([wt, ut])
        swap = np.block([[np.zeros((5, 5)), np.eye(5)], [np.eye(5), np.zeros((5, 5))]])
        jac = s * s * M2 * np.outer(j, j) + s * delta * swap
        assert dt * np.abs(np.linalg.eigvalsh(jac)).max() <= 0.1 + 1e-12


def test_phase_numbers_and_prediction_at_large_width():
    """Typical initialisation, equal rates: NTK change sqrt(1 + s^2) - 1 and |cos| -> r / sqrt(1 + r^2)."""
    for sigma in (0.1, 1.0, 3.0):
        n = phase.numbers(10**6, sigma, 1.0, 1.0, target=MXY / M2)
        pred = phase.predict(10**6, sigma, 1.0, 1.0, m2=M2, mxy=MXY)
        assert pred["ntk_change"] == pytest.approx(np.sqrt(1 + n["s"] ** 2) - 1, rel=2e-2, abs=1e-5)
        assert pred["cos"] == pytest.approx(n["r"] / np.sqrt(1 + n["r"] ** 2), rel=1e-3)
    # first layer dominant (eta_u / eta_w = 100): it keeps its direction while its norm grows
    pred = phase.predict(1000, 0.1, 1.0, 100.0, m2=M2, mxy=MXY)
    assert pred["dir_w"] < 0.01 and pred["norm_w"] > 1.5 and pred["dir_u"] > 0.5


@pytest.mark.parametrize("width", [2, 4, 30])
def test_typical_cosines_follow_the_law_of_random_vectors(width):
    """Mean |cos(u0, w0)| of the quantile grid vs E|cos| = Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2))."""
    from math import gamma, pi, sqrt

    a, b, c = phase.typical_grams(width, 0.7, 0.5, 4.0)
    cos = c / np.sqrt(a * b)
    assert cos.mean() == pytest.approx(0.0, abs=1e-12)  # both signs
    assert np.abs(cos).mean() == pytest.approx(gamma(width / 2) / (sqrt(pi) * gamma((width + 1) / 2)), rel=0.02)
    assert a[0] == pytest.approx(width * 0.49 / 2.0) and b[0] == pytest.approx(width * 0.49 * 2.0)


def test_classify_hand_built_states():
    th = dict(kernel_ntk=0.02, cos_change=0.1, rescale_dir=0.05, rescale_norm=0.1)
    assert phase.classify(0.01, 0.0, 0.9, 1.5, 0.0, **th) == "kernel"
    assert phase.classify(1.0, 0.0, 0.9, 1.5, 0.01, **th) == "rescaling"
    assert phase.classify(1.0, 0.0, 0.9, 1.5, 0.2, **th) == "alignment"
    assert phase.classify(0.2, 0.6, 0.1, 0.95, 0.01, **th) == "disalignment"
    assert phase.classify(0.2, 0.3, 0.35, 1.02, 0.01, **th) == "mixed"


@pytest.mark.parametrize("alpha", [mlp.NTK, mlp.MEAN_FIELD])
def test_mlp_ntk_matches_autograd(alpha):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    W, U = mlp.init(gen, 5, 9, 3, 1.3, dtype=torch.float64)

    def outputs(w_flat, u_flat):
        return mlp.forward(w_flat.view(9, 5), u_flat.view(3, 9), x, alpha).reshape(-1)  # (n C,)

    jw, ju = torch.autograd.functional.jacobian(outputs, (W.reshape(-1), U.reshape(-1)))
    jac = torch.cat([jw, ju], 1).view(7, 3, -1)  # (n, C, params)
    k_auto = torch.einsum("ikp,jkp->ij", jac, jac)
    torch.testing.assert_close(mlp.ntk(W, U, x, alpha), k_auto, rtol=1e-10, atol=1e-10)
    # mean-field output scaling is NTK scaling divided by sqrt(h)
    np.testing.assert_allclose(mlp.forward(W, U, x, mlp.MEAN_FIELD), mlp.forward(W, U, x, mlp.NTK) / 3.0, rtol=1e-12)
    # the lazy arm's output multiplier scales the output by m and the NTK by m^2 (Chizat et al.'s lazy scaling)
    np.testing.assert_allclose(mlp.forward(W, U, x, alpha, 16.0), 16.0 * mlp.forward(W, U, x, alpha), rtol=1e-12)
    np.testing.assert_allclose(mlp.ntk(W, U, x, alpha, 16.0), 256.0 * mlp.ntk(W, U, x, alpha), rtol=1e-12)


def test_parse_checks_cross_field_rules():
    import yaml

    root = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((root / "config" / "config.yaml").read_text())["linear_mechanisms"]
    p = parse(cfg)
    assert set(p.points) == set(phase.MECHANISMS) and p.scaling_panel in p.phase_panels
    with pytest.raises(ValueError, match="phase_panels"):
        parse({**cfg, "phase_panels": ["nope"]})
    with pytest.raises(KeyError, match="linear_mechanisms.bogus"):
        parse({**cfg, "bogus": 1})


# ---- claims: decided on per-seed intervals, with controls ------------------------------------------
def _tiny_traj():
    x = np.linspace(-2, 2, 32)
    y = x.copy()
    m2, mxy = exact.moments(x, y)
    rows = [{"width": 6, "sigma": 0.3, "kappa_exponent": 0.5, "lr_ratio": r, "seed": seed} for r in (1.0, 10.0)
            for seed in (0, 1)]
    frames = []
    for width_rows in (rows,):
        res = simulate(width_rows, x, y, h=0.01, tol=1e-4, min_steps=10, max_steps=5000, records=20)
        for i, row in enumerate(width_rows):
            df = pd.DataFrame({"point": f"p{row['lr_ratio']:g}", **row, "h": 0.01,
                               "record": np.arange(res["times"].shape[1]), "time": res["times"][i]})
            for src in ("gd", "exact"):
                for key in ("F", "ntk", "cos_uw", "norm_u", "norm_w", "dir_u", "dir_w"):
                    df[f"{src}_{key}"] = res[src][key][i]
            frames.append(df)
    return pd.concat(frames, ignore_index=True), m2, mxy


def test_control_trajectories_recompute_the_exact_solution_and_differ_from_another_start():
    from papers.linear_mechanisms.claims import control_trajectories
    from papers.linear_mechanisms.evaluate import OBSERVABLES

    traj, m2, mxy = _tiny_traj()
    same = control_trajectories(traj, m2, mxy, offset=0)  # the run's own start: the exact columns again
    for key in OBSERVABLES:
        np.testing.assert_allclose(same[f"exact_{key}"], traj[f"exact_{key}"], rtol=1e-9, atol=1e-12)
    other = control_trajectories(traj, m2, mxy)
    assert trajectory_errors(other).error.max() > 10 * trajectory_errors(traj).error.max()


def _runs(change: dict, acc: dict, seeds=3, noise=1e-3, converged=True, turn=None, lazy=None):
    """MLP rows of claim (d); the first layer's turn and norm change fall as 0.1 / scale unless `turn` is given.
    `lazy` = (NTK change, test accuracy) of the lazy arm (the base init, the largest scale <= 1, output x (max /
    base)^2); None: as lazy as the largest scale within the margin and as accurate (the accuracy loss is the
    laziness's)."""
    rng = np.random.default_rng(0)
    turn = turn or {k: 0.1 / k for k in change}
    big, base = max(change), max(k for k in change if k <= 1.0)
    lazy = lazy or (change[big] / 2, acc[big])
    rows = [{"seed": s, "arm": "scale", "init_scale": k, "ntk_change": change[k] + noise * rng.normal(),
             "test_accuracy": acc[k] + noise * rng.normal(), "train_loss": 0.01, "diverged": False,
             "converged": converged, "dir_w": turn[k] * (1 + noise * rng.normal()),
             "norm_w": 1 + turn[k] * (1 + noise * rng.normal()), "output_multiplier": 1.0, "steps_run": 100}
            for s in range(seeds) for k in change]
    rows += [{"seed": s, "arm": "lazy", "init_scale": base, "ntk_change": lazy[0] * (1 + noise * rng.normal()),
              "test_accuracy": lazy[1] + noise * rng.normal(), "train_loss": 0.01, "diverged": False, "converged": True,
              "dir_w": 1e-4, "norm_w": 1.0001, "output_multiplier": (big / base) ** 2, "steps_run": 100}
             for s in range(seeds)]
    return pd.DataFrame(rows)


def test_nonlinear_claim_is_decided_over_the_whole_range_of_init_scales():
    from papers.linear_mechanisms.claims import nonlinear_claim

    p = parse({**_cfg(), "nonlinear": {**_cfg()["nonlinear"], "init_scales": [0.25, 1.0, 4.0]}})
    change, acc = {0.25: 3.0, 1.0: 0.2, 4.0: 0.05}, {0.25: 0.95, 1.0: 0.9, 4.0: 0.7}
    falling = nonlinear_claim(p, _runs(change, acc))
    assert falling.verdict == "holds" and falling.measured["lazy_output_multiplier"] == 16.0
    assert falling.measured["lazy_base_scale"] == 1.0 and falling.measured["laziness_alone_verdict"] == "holds"
    # the deciding contrast "laziness alone" (base init - lazy arm) is part of the evidence
    assert any(e.name.startswith("laziness alone") for e in falling.evidence)
    # the ablation: the lazy arm as lazy as the largest scale loses the accuracy too, so lazy - largest is ~0
    assert falling.control.kind == "ablation" and falling.control.verdict == "does not hold"
    assert all(g.met for g in falling.premise)
    # the lazy arm keeps its base init's accuracy: the laziness alone costs nothing -> does not hold, with why
    saturation = nonlinear_claim(p, _runs(change, acc, lazy=(0.02, 0.9)))
    assert saturation.control.verdict == "holds" and saturation.verdict == "does not hold"
    assert "why it does not hold" in saturation.note and saturation.measured["laziness_alone_verdict"] == "does not hold"
    # a matched arm need not be strictly lazier: a lazy arm a little less lazy than the largest scale is within the
    # equivalence margin
    close = nonlinear_claim(p, _runs(change, acc, lazy=(0.1, 0.7)))
    assert close.verdict == "holds" and all(g.met for g in close.premise)
    # a lazy arm far less lazy (or far lazier) than the largest scale does not match the laziness: premise unmet
    for far in ((1.0, 0.7), (0.001, 0.7)):
        not_lazy = nonlinear_claim(p, _runs(change, acc, lazy=far))
        assert not_lazy.verdict == "inconclusive" and "equivalence margin" in not_lazy.note
        assert "why the ablation cannot decide" in not_lazy.note
    # a lazy arm that did not fit its training set: both arms must converge
    runs = _runs(change, acc, lazy=(0.02, 0.9))
    runs.loc[(runs.arm == "lazy") & (runs.seed == 0), "converged"] = False
    assert nonlinear_claim(p, runs).verdict == "inconclusive"
    # the trend over the range decides, not each step: a dip at the middle scale leaves a falling trend standing
    dip = nonlinear_claim(p, _runs({0.25: 3.0, 1.0: 0.15, 4.0: 0.5}, acc, lazy=(0.2, 0.7)))
    assert dip.verdict == "holds" and "lowest at init scale 1 " in dip.note and "not monotone" in dip.note
    assert "not monotone" not in falling.note
    # an NTK change that grows with the init scale does not hold
    rising = nonlinear_claim(p, _runs({0.25: 0.05, 1.0: 0.2, 4.0: 3.0}, acc))
    assert rising.verdict == "does not hold" and "log NTK change" in rising.note
    # the kernel-regime premise: a first layer that moves MORE at large init leaves the claim undecided
    moving = nonlinear_claim(p, _runs(change, acc, turn={0.25: 0.01, 1.0: 0.05, 4.0: 0.2}))
    assert moving.verdict == "inconclusive" and "premise not met" in moving.note
    two_seeds = nonlinear_claim(p, _runs(change, acc, seeds=2))
    assert two_seeds.verdict == "inconclusive"
    # runs that did not converge are left out, and the convergence premise turns the verdict inconclusive
    runs = _runs(change, acc, seeds=4)
    runs.loc[(runs.seed == 3) & (runs.init_scale == 4.0) & (runs.arm == "scale"), "converged"] = False
    unconverged = nonlinear_claim(p, runs)
    assert unconverged.verdict == "inconclusive" and "premise not met" in unconverged.note
    assert unconverged.measured["unconverged_runs"] == 1
    # without the lazy arm the ablation was not run: never "holds"
    no_lazy = nonlinear_claim(p, _runs(change, acc).query("arm == 'scale'"))
    assert no_lazy.verdict == "inconclusive" and no_lazy.control.verdict == "not measured"


def test_layer_alignment_is_the_cosine_for_vectors_and_training_converges():
    gen = torch.Generator().manual_seed(0)
    u, w = torch.randn(7, generator=gen, dtype=torch.float64), torch.randn(7, generator=gen, dtype=torch.float64)
    cos = abs(float(u @ w / (u.norm() * w.norm())))
    assert mlp.layer_alignment(w[:, None], u[None, :]) == pytest.approx(cos, rel=1e-12)
    x = torch.randn(40, 5, generator=gen)
    y = (x @ torch.randn(5, 3, generator=gen)).argmax(1)  # a learnable rule
    res = mlp.train(x, y, x, y, scale=0.5, hidden=16, steps=3000, lr_factor=0.5, power_iterations=10, probe=10,
                    seed=0, converge_accuracy=1.0)
    assert res["converged"] and 0 < res["steps_run"] < 3000 and res["test_accuracy"] == 1.0
    slow = mlp.train(x, y, x, y, scale=0.5, hidden=16, steps=100, lr_factor=0.5, power_iterations=10, probe=10,
                     seed=0, converge_accuracy=1.0, lr_ratio=1e6)
    assert not slow["converged"] and slow["steps_run"] == 100 and slow["dir_w"] < 1e-6  # first layer nearly frozen
    frozen = mlp.train(x, y, x, y, scale=0.5, hidden=16, steps=100, lr_factor=0.5, power_iterations=10, probe=10,
                       seed=0, converge_accuracy=1.0, lr_ratio=float("inf"))
    # the readout alone learns (1 - cos(W, W) is 0 up to float32 rounding)
    assert frozen["dir_w"] < 1e-6 and frozen["norm_w"] == 1.0 and frozen["dir_u"] > 1e-3
    assert frozen["lr"] == res["lr"]  # the same init and readout rate as the trainable run


def test_step_cap_is_a_cap_not_a_length():
    # nonlinear.steps only bounds a run: a run that converges before it stops there, and raising the cap
    # (as the default config did, 4000 -> 20000) leaves its result unchanged, bit for bit
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(40, 5, generator=gen)
    y = (x @ torch.randn(5, 3, generator=gen)).argmax(1)
    kw = dict(scale=0.5, hidden=16, lr_factor=0.5, power_iterations=10, probe=10, seed=0, converge_accuracy=1.0)
    short, long = mlp.train(x, y, x, y, steps=3000, **kw), mlp.train(x, y, x, y, steps=20000, **kw)
    assert short["converged"] and short["steps_run"] < 3000
    assert short == long


def _small_digits(n=40, d_in=5, classes=3, seed=1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=gen)
    return x, (x @ torch.randn(d_in, classes, generator=gen)).argmax(1)


def test_centred_network_starts_at_zero_whatever_the_init_scale():
    # steps = 0: the state at initialisation. Centred, the output is 0, so the loss is that of zero output on one-hot
    # targets, 1/2, at every scale; uncentred, a large init starts from a large random function (a larger loss)
    x, y = _small_digits()
    kw = dict(hidden=16, steps=0, lr_factor=0.5, power_iterations=5, probe=10, seed=0)
    for scale in (0.25, 4.0):
        res = mlp.train(x, y, x, y, scale=scale, centred=True, **kw)
        assert res["train_loss"] == pytest.approx(0.5, abs=1e-6) and res["ntk_change"] == 0.0
    raw = mlp.train(x, y, x, y, scale=4.0, centred=False, **kw)
    assert raw["train_loss"] > 1.0 and raw["initial_output"] > 1.0
    # centring subtracts a constant: the NTK and the layers' trajectory do not see it at init (same sharpness scale)
    assert raw["initial_output"] == pytest.approx(mlp.train(x, y, x, y, scale=4.0, centred=True, **kw)["initial_output"])


def test_loss_convergence_trains_past_a_fitted_training_set():
    # converge_loss ignores the accuracy: the run continues after every label is right until the loss is small
    x, y = _small_digits()
    kw = dict(scale=0.5, hidden=16, steps=20000, lr_factor=0.5, power_iterations=10, probe=10, seed=0, centred=True)
    by_accuracy = mlp.train(x, y, x, y, converge_accuracy=1.0, **kw)
    by_loss = mlp.train(x, y, x, y, converge_loss=1e-2, **kw)
    assert by_accuracy["converged"] and by_loss["converged"] and by_loss["train_loss"] <= 1e-2
    assert by_loss["steps_run"] > by_accuracy["steps_run"] and by_accuracy["train_loss"] > 1e-2


def test_frozen_readout_limit_is_where_gradient_descent_on_u_alone_ends():
    from papers.linear_mechanisms.claims import frozen_readout_limit

    rng = np.random.default_rng(0)
    u0, w0, kappa, target = rng.normal(size=4) * 3, rng.normal(size=4) * 3, 0.5, 1.0
    u = u0.copy()
    for _ in range(5000):  # L = (kappa u.w0 - target)^2 / 2 on standardised data (m2 = 1)
        u -= 0.01 * kappa * (kappa * u @ w0 - target) * w0
    np.testing.assert_allclose(frozen_readout_limit(u0, w0, kappa, target), u, atol=1e-9)


def test_majority_of_seeds_is_an_exact_binomial_test():
    from papers.linear_mechanisms.claims import _majority

    assert _majority(["disalignment"] * 5 + ["kernel"] * 25, "disalignment", "p").verdict == "does not hold"
    assert _majority(["disalignment"] * 13 + ["kernel"] * 17, "disalignment", "p").verdict == "inconclusive"
    assert _majority(["disalignment"] * 28 + ["kernel"] * 2, "disalignment", "p").verdict == "holds"
    assert _majority(["disalignment"] * 17 + ["kernel"] * 13, "disalignment", "p").verdict == "inconclusive"


def _cfg_in_regime():
    """The config with e_alignment's small init inside the alignment regime (sigma 0.05 at h = 128: r = 35)."""
    cfg = _cfg()
    return {**cfg, "nonlinear": {**cfg["nonlinear"], "init_scales": [0.05, 0.5, 1.0, 2.0, 4.0]}}


def test_e_alignment_needs_its_small_init_in_the_alignment_regime():
    from papers.linear_mechanisms.claims import alignment_regime, nonlinear_mechanisms_claims

    p = parse(_cfg())
    gate = alignment_regime(p.nonlinear, 0.25)  # the re-review's r = 1.41 at h = 128
    assert gate.measured == pytest.approx(1.0 / (128 ** 0.5 * 0.0625)) and not gate.met
    assert alignment_regime(p.nonlinear, 0.05).met
    # the readout alone moves the alignment as much as the trainable arm: "does not hold" in the regime, but only
    # inconclusive (premise unmet) outside it, with what would test it
    rows = _mechanism_rows(p, frozen_change=1.0)
    outside = nonlinear_mechanisms_claims(p, pd.concat([rows, _planted(p)]))[0]
    assert outside.verdict == "inconclusive" and "alignment regime" in outside.note
    assert "what would test it" in outside.note and "ten outputs" in outside.note
    q = parse(_cfg_in_regime())
    inside = nonlinear_mechanisms_claims(q, pd.concat([_mechanism_rows(q, frozen_change=1.0), _planted(q)]))[0]
    assert inside.verdict == "does not hold" and "what would test it" not in inside.note


def test_scope_names_the_nonlinear_claims_an_analogue():
    from papers.linear_mechanisms.report import ANALOGUE_CLAIMS, scope

    sc = scope(parse(_cfg()))
    assert sc.kind == "replication" and "analogue, not a replication" in sc.detail
    assert all(c in sc.detail for c in ANALOGUE_CLAIMS) and "claims a and b replicate" in sc.detail


def _mechanism_rows(p, frozen_change: float, seeds=3, converged=True):
    """Each mechanism's trainable arm with a planted state, and its frozen-first-layer twin that moves the layer
    alignment by `frozen_change` of the trainable arm's change (and its first layer not at all)."""
    nl = p.nonlinear
    state = {"alignment": dict(alignment0=0.1, alignment=0.3, dir_w=0.5, norm_w=1.5, dir_u=0.6),
             "disalignment": dict(alignment0=0.1, alignment=0.05, dir_w=0.5, norm_w=0.9, dir_u=0.6),
             "rescaling": dict(alignment0=0.1, alignment=0.2, dir_w=0.001, norm_w=1.3, dir_u=0.4)}
    scale_of = {"alignment": min(nl.init_scales), "disalignment": max(nl.init_scales), "rescaling": nl.rescaling_scale}
    rows = []
    for k, st in state.items():
        for s in range(seeds):
            jitter = 1 + 0.001 * s
            rows.append({"seed": s, "arm": "rescaling" if k == "rescaling" else "learned", "init_scale": scale_of[k],
                         "ntk_change": 0.5 + 0.01 * s, "train_loss": 0.01, "converged": converged, "diverged": False,
                         "steps_run": 100, **{key: v * jitter for key, v in st.items()}})
            moved = st["alignment0"] + frozen_change * (st["alignment"] - st["alignment0"])
            rows.append({"seed": s, "arm": f"frozen:{k}", "init_scale": scale_of[k], "ntk_change": 0.3 + 0.01 * s,
                         "train_loss": 0.05, "converged": False, "diverged": False, "steps_run": 100,
                         "alignment0": st["alignment0"], "alignment": moved * jitter, "dir_w": 0.0, "norm_w": 1.0,
                         "dir_u": 0.5})
    return pd.DataFrame(rows)


def test_nonlinear_mechanisms_are_decided_on_trainable_minus_frozen():
    from papers.linear_mechanisms.claims import nonlinear_mechanisms_claims

    p = parse(_cfg_in_regime())
    claims = nonlinear_mechanisms_claims(p, _mechanism_rows(p, frozen_change=0.2))
    assert [c.id for c in claims] == ["e_alignment", "e_disalignment", "e_rescaling"]
    # the readout alone moves the alignment by a fifth of the trainable arm's change (+40% at small init): the first
    # layer adds the rest, and the swapped arms show no such mechanism
    assert all(c.verdict == "holds" and c.control.verdict != "holds" and c.control.kind == "null" for c in claims)
    assert "readout alone" in claims[0].note
    # the readout alone moves the layers as much: the first layer's learning adds nothing, alignment and
    # disalignment do not hold (rescaling is read on the first layer itself, which the frozen twin cannot move)
    same = {c.id: c for c in nonlinear_mechanisms_claims(p, _mechanism_rows(p, frozen_change=1.0))}
    assert same["e_alignment"].verdict == "does not hold" and same["e_disalignment"].verdict == "does not hold"
    assert same["e_rescaling"].verdict == "holds"
    # a first layer that does not move (dir_w ~ 0, norm ratio ~ 1): nothing for the ablation to remove, so alignment
    # and disalignment are inconclusive (their first-layer premise), not decided by the readout's movement
    still = _mechanism_rows(p, frozen_change=1.0)
    still.loc[~still.arm.str.startswith("frozen"), ["dir_w", "norm_w"]] = [1e-4, 1.0001]
    quiet = {c.id: c for c in nonlinear_mechanisms_claims(p, still)}
    assert quiet["e_disalignment"].verdict == "inconclusive" and "first layer learned" in quiet["e_disalignment"].note
    assert quiet["e_alignment"].verdict == "inconclusive"
    # unconverged trainable runs: the premise is unmet, never "does not hold"
    unconverged = nonlinear_mechanisms_claims(p, _mechanism_rows(p, frozen_change=1.0, converged=False))
    assert all(c.verdict == "inconclusive" and "premise not met" in c.note for c in unconverged)


def test_mechanisms_need_the_learned_states_own_alignment_change_and_rescaling_its_readout_premise():
    from papers.linear_mechanisms.claims import nonlinear_mechanisms_claims

    p = parse(_cfg_in_regime())
    # the review's e_alignment trained to the learned state: the alignment back at its initial value while the
    # frozen twin's falls, so trainable - frozen passes but the layers are no more aligned than at init
    rows = _mechanism_rows(p, frozen_change=0.2)
    learned = (rows.arm == "learned") & np.isclose(rows.init_scale, min(p.nonlinear.init_scales))
    frozen = rows.arm == "frozen:alignment"
    rows.loc[learned, "alignment"] = rows.loc[learned, "alignment0"] * 0.98
    rows.loc[frozen, "alignment"] = rows.loc[frozen, "alignment0"] * 0.5
    claims = {c.id: c for c in nonlinear_mechanisms_claims(p, rows)}
    parts = {e.name.split(": ", 1)[1]: e.verdict for e in claims["e_alignment"].evidence}
    assert parts["relative rise of the layer alignment, trainable - frozen first layer"] == "holds"
    assert parts["relative rise of the layer alignment, learned vs init"] == "does not hold"
    assert claims["e_alignment"].verdict == "does not hold"
    assert "-> " in claims["e_alignment"].note and "relative" in claims["e_alignment"].note
    # rescaling whose layer alignment falls (as the readout alone makes it fall) but whose readout leads its slow first
    # layer: the first layer turns by more than rescale_dir, as the review measured -> "does not hold" (the old gate
    # "the readout rotates onto the first layer", read on the alignment, made it inconclusive whatever the data)
    rows = _mechanism_rows(p, frozen_change=0.2)
    resc = rows.arm == "rescaling"
    rows.loc[resc, "alignment"] = 0.06
    rows.loc[resc, "dir_w"] = 0.07
    c = {c.id: c for c in nonlinear_mechanisms_claims(p, rows)}["e_rescaling"]
    assert c.verdict == "does not hold" and all(g.met for g in c.premise)
    # a first layer that turns more than the readout: outside the derivation's setting -> inconclusive
    rows.loc[resc, "dir_u"] = 0.01
    c = {c.id: c for c in nonlinear_mechanisms_claims(p, rows)}["e_rescaling"]
    assert c.verdict == "inconclusive" and "readout leads" in c.note


def _planted(p, rise=9.0, frozen_rise=0.2, seeds=3):
    from papers.linear_mechanisms.stages import PLANTED, PLANTED_FROZEN

    return pd.DataFrame([{"seed": s, "arm": arm, "init_scale": p.nonlinear.planted_scale, "alignment0": 0.09,
                          "alignment": 0.09 * (1 + r) * (1 + 0.01 * s), "dir_w": 0.8 if arm == PLANTED else 0.0,
                          "norm_w": 10.0 if arm == PLANTED else 1.0, "converged": True, "train_loss": 1e-3,
                          "steps_run": 20, "diverged": False}
                         for s in range(seeds) for arm, r in ((PLANTED, rise), (PLANTED_FROZEN, frozen_rise))])


def test_alignment_is_gated_on_its_planted_positive_control():
    from papers.linear_mechanisms.claims import nonlinear_mechanisms_claims

    p = parse(_cfg_in_regime())
    rows = _mechanism_rows(p, frozen_change=0.2)
    learned = (rows.arm == "learned") & np.isclose(rows.init_scale, min(p.nonlinear.init_scales))
    rows.loc[learned, "alignment"] = rows.loc[learned, "alignment0"] * 0.9  # the layers less aligned than at init
    found = nonlinear_mechanisms_claims(p, pd.concat([rows, _planted(p)]))[0]
    assert found.positive_control.verdict == "holds" and found.verdict == "does not hold"
    # an analysis that cannot find alignment where it is planted says nothing: inconclusive, never "does not hold"
    blind = nonlinear_mechanisms_claims(p, pd.concat([rows, _planted(p, rise=0.01)]))[0]
    assert blind.positive_control.verdict != "holds" and blind.verdict == "inconclusive"


def test_planted_alignment_aligns_the_layers_and_the_frozen_readout_does_not():
    trainable, frozen = mlp.planted_alignment(0, samples=120, d_in=8, hidden=32, scale=0.01, output_exponent=mlp.NTK,
                                              lr_factor=0.5, converge_loss=1e-3, steps=2000, centred=True)
    assert trainable["converged"] and trainable["alignment"] > 0.95 > 4 * trainable["alignment0"]  # ~1/sqrt(h) at init
    # the readout alone, converged in closed form, fits the teacher (h >= d_in) but leaves the layers unaligned
    assert frozen["train_loss"] < 1e-12 and frozen["alignment"] < 0.5 and frozen["dir_w"] < 1e-12


def test_e_alignment_is_reported_under_both_stopping_rules():
    from papers.linear_mechanisms.claims import nonlinear_mechanisms_claims
    from papers.linear_mechanisms.stages import ACCURACY_TWIN

    p = parse(_cfg())
    rows = _mechanism_rows(p, frozen_change=0.2)
    small = min(p.nonlinear.init_scales)
    early = rows[(rows.arm == "learned") & np.isclose(rows.init_scale, small)].assign(arm="scale")
    twin = rows[rows.arm == "frozen:alignment"].assign(arm=ACCURACY_TWIN)
    claim = nonlinear_mechanisms_claims(p, pd.concat([rows, early, twin, _planted(p)]))[0]
    assert claim.measured["accuracy_rule"]["verdict_of_the_test"] == "holds"
    assert "other stopping rule" in claim.note and "The loss rule decides" in claim.note


def test_each_seed_draws_its_own_split_without_duplicate_test_images():
    from papers.linear_mechanisms.stages import split_images

    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, size=(60, 4)).astype(float)  # few distinct rows: many duplicates
    labels = rng.integers(0, 10, 60)
    splits = [split_images(x, labels, 20, seed) for seed in range(3)]
    for train, test, dropped in splits:
        assert len(set(train) & set(test)) == 0 and len(train) == 20 and len(test) + dropped == 40
        seen = {tuple(r) for r in x[train]}
        assert not any(tuple(r) in seen for r in x[test]) and dropped > 0
    assert not np.array_equal(splits[0][0], splits[1][0])  # a split per seed
    np.testing.assert_array_equal(split_images(x, labels, 20, 1)[0], splits[1][0])  # reproducible


def test_point_and_panel_seeds_and_claim_a_on_common_seeds():
    from papers.linear_mechanisms.claims import common_seeds

    cfg = _cfg()
    p = parse(cfg)
    assert p.seeds_at("disalignment") == cfg["point_seeds"]["disalignment"] and p.seeds_at("kernel") == p.seeds
    assert p.seeds_of("width_kappa") == cfg["panel_seeds"]["width_kappa"] and p.seeds_of("ratio_sigma") == p.seeds
    with pytest.raises(ValueError, match="point_seeds"):
        parse({**cfg, "point_seeds": {"nowhere": 100}})
    with pytest.raises(ValueError, match="panel_seeds"):
        parse({**cfg, "panel_seeds": {"width_kappa": 1}})  # fewer than seeds
    traj = pd.DataFrame({"point": ["a"] * 3 + ["b"] * 5, "seed": [0, 1, 2, 0, 1, 2, 3, 4]})
    assert sorted(common_seeds(traj).seed.unique()) == [0, 1, 2]


def test_every_mechanism_arm_has_a_frozen_twin():
    from papers.linear_mechanisms.stages import mlp_arms

    nl = parse(_cfg()).nonlinear
    arms = mlp_arms(nl)
    frozen = [a for a in arms if a["arm"].startswith("frozen:")]
    assert [a["arm"] for a in frozen] == ["frozen:alignment", "frozen:disalignment", "frozen:rescaling"]
    # every arm a claim e_* decides on, and its twin, converges on one rule: the training loss; claim d's arms (scale,
    # lazy) and the reported accuracy-rule twin on training accuracy
    from papers.linear_mechanisms.stages import ACCURACY_TWIN, lazy_multiplier

    on_accuracy = {"scale", "lazy", ACCURACY_TWIN}
    assert all(a["converge_loss"] == nl.rescaling_converge_loss for a in arms if a["arm"] not in on_accuracy)
    assert all("converge_loss" not in a for a in arms if a["arm"] in on_accuracy)
    lazy = next(a for a in arms if a["arm"] == "lazy")
    base = max(s for s in nl.init_scales if s <= nl.lazy_base_scale)
    assert lazy["init_scale"] == base == 1.0 and lazy["output_multiplier"] == lazy_multiplier(nl) == (
        max(nl.init_scales) / base) ** 2 == 16.0
    acc_twin = next(a for a in arms if a["arm"] == ACCURACY_TWIN)
    assert acc_twin["paired"] == ("scale", min(nl.init_scales)) and acc_twin["lr_ratio"] == float("inf")
    assert {a["paired"] for a in frozen} == {("learned", min(nl.init_scales)), ("learned", max(nl.init_scales)),
                                             ("rescaling", nl.rescaling_scale)}
    for a in frozen:
        twin = next(t for t in arms if (t["arm"], t["init_scale"]) == a["paired"])
        assert a["lr_ratio"] == float("inf") and a["output_exponent"] == twin["output_exponent"]
        assert arms.index(twin) < arms.index(a)  # the twin trains first: its steps cap the ablation
    rescaling = next(a for a in arms if a["arm"] == "rescaling")
    assert rescaling["output_exponent"] == mlp.MEAN_FIELD and rescaling["lr_ratio"] == nl.rescaling_lr_ratio
    # the rescaling arm and its ablation converge on the loss (the slowed first layer learns after the labels fit)
    assert rescaling["converge_loss"] == nl.rescaling_converge_loss
    assert next(a for a in frozen if a["arm"] == "frozen:rescaling")["converge_loss"] == nl.rescaling_converge_loss


def _cfg():
    import yaml

    root = Path(__file__).resolve().parents[2]
    return yaml.safe_load((root / "config" / "config.yaml").read_text())["linear_mechanisms"]


def test_width_scaling_tests_and_their_label_swap():
    from papers.linear_mechanisms.claims import _persists, _vanishes

    p = parse(_cfg())
    widths = [10, 100, 1000, 10000]
    seeds = range(3)
    ntk = pd.DataFrame([[0.3 * (10 / d) * (1 + 0.01 * s) for d in widths] for s in seeds], columns=widths)
    mf = pd.DataFrame([[0.5 * (1 + 0.01 * s) for d in widths] for s in seeds], columns=widths)
    assert all(e.verdict == "holds" for e in _vanishes(ntk, p, "ntk") + _persists(mf, p, "mf"))
    assert any(e.verdict == "does not hold" for e in _vanishes(mf, p, "mf") + _persists(ntk, p, "ntk"))
    # the mean-field side is decided on the per-seed slope within +- mean_field_slope_max: a change that grows by x2
    # per decade (slope 0.3) is not width-independent, a flat one with a heavy-tailed seed still is
    rising = pd.DataFrame([[0.5 * (d / 10) ** 0.3 * (1 + 0.01 * s) for d in widths] for s in seeds], columns=widths)
    assert any(e.verdict == "does not hold" for e in _persists(rising, p, "mf"))
    noisy = mf.copy()
    noisy.loc[0, 10] = 1.5  # one seed's NTK change at d = 10 three times the others' (the max/min's heavy tail)
    slope_parts = [e for e in _persists(noisy, p, "mf") if "slope" in e.name]
    assert len(slope_parts) == 2 and all(e.threshold in (-p.mean_field_slope_max, p.mean_field_slope_max)
                                         for e in slope_parts)
