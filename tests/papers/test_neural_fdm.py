"""P14 neural_fdm: the force density method against closed forms and a dense solve, its adjoint
gradient against finite differences, the target generators' symmetries, the encoder's sign
constraints and height normalisation, the condition-number guard, the learning-rate search, and
direct optimisation recovering force densities it can reach exactly."""
import numpy as np
import pytest
import torch
from papers.neural_fdm import models, shapes, tasks
from papers.neural_fdm.direct import optimize
from papers.neural_fdm.fdm import FDM
from papers.neural_fdm.models import Encoder, log_condition, mlp_flops, q_variance
from papers.neural_fdm.params import parse


def _star(signs):
    """One free node (index 0) tied to four supports at the corners of a square."""
    edges = np.array([[0, 1], [0, 2], [0, 3], [0, 4]])
    fixed = np.array([False, True, True, True, True])
    return shapes.Structure(edges=edges, fixed=fixed, signs=np.asarray(signs, float), active=np.ones(4, bool),
                            faces=None)


def _dense_equilibrium(structure, q, x, loads):
    """X_f = (C_f^T Q C_f)^-1 (P_f - C_f^T Q C_s X_s) with dense incidence matrices (the textbook form)."""
    E, N = len(structure.edges), structure.num_nodes
    c = torch.zeros(E, N, dtype=torch.float64)
    c[torch.arange(E), torch.as_tensor(structure.edges[:, 0])] = 1.0
    c[torch.arange(E), torch.as_tensor(structure.edges[:, 1])] = -1.0
    cf, cs = c[:, structure.free], c[:, structure.supports]
    out = x.clone()
    for b in range(len(q)):
        qm = torch.diag(q[b])
        k = cf.T @ qm @ cf
        out[b, structure.free] = torch.linalg.solve(k, loads[b, structure.free] - cf.T @ qm @ cs @ x[b, structure.supports])
    return out, c


@pytest.mark.parametrize("signs,q", [
    ([-1, -1, -1, -1], [-1.5, -0.7, -2.0, -1.1]),  # compression only: Cholesky of -K
    ([1, 1, -1, 1], [1.5, 0.7, -2.0, 1.1]),  # mixed signs: LU
    ([-1, -1, -1, -1], [-0.5, -0.7, 2.0, -0.1]),  # a sign violated, -K not positive definite: falls back to LU
])
def test_single_free_node_closed_form(signs, q):
    # sum_i q_i (x_i - x) + p = 0  =>  x = (p + sum_i q_i x_i) / sum_i q_i
    fdm = FDM(_star(signs))
    x = torch.tensor([[[0.3, -0.2, 0.5], [1, 1, 0], [-1, 1, 0.2], [-1, -1, 0], [1, -1, -0.1]]], dtype=torch.float64)
    q = torch.tensor([q], dtype=torch.float64)
    p = torch.zeros_like(x)
    p[0, 0] = torch.tensor([0.1, -0.3, -2.0])
    expect = (p[0, 0] + (q[0, :, None] * x[0, 1:]).sum(0)) / q.sum()
    torch.testing.assert_close(fdm.equilibrium(q, x, p)[0, 0], expect, rtol=1e-12, atol=1e-12)
    assert fdm.definite_sign == (-1.0 if all(v < 0 for v in signs) else 0.0)


def test_loaded_cable_hangs_in_a_parabola():
    # n free nodes on a tension cable between two supports, equal loads p: q (z_{k-1} - 2 z_k + z_{k+1}) + p = 0
    # gives z_k = p / (2 q) k (n + 1 - k), and x_k = k (uniform spacing).
    n, q0, p0 = 9, 3.0, -0.6
    edges = np.stack([np.arange(n + 1), np.arange(1, n + 2)], 1)
    fixed = np.zeros(n + 2, bool)
    fixed[[0, -1]] = True
    s = shapes.Structure(edges=edges, fixed=fixed, signs=np.ones(n + 1), active=np.ones(n + 1, bool), faces=None)
    x = torch.zeros(1, n + 2, 3, dtype=torch.float64)
    x[0, -1, 0] = n + 1.0
    loads = torch.zeros_like(x)
    loads[0, 1:-1, 2] = p0
    out = FDM(s).equilibrium(torch.full((1, n + 1), q0, dtype=torch.float64), x, loads)
    k = torch.arange(n + 2, dtype=torch.float64)
    torch.testing.assert_close(out[0, :, 2], p0 / (2 * q0) * k * (n + 1 - k), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out[0, :, 0], k, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("task", ["shell", "tower"])
def test_fdm_matches_a_dense_solve_and_zeroes_the_residual(task):
    p = parse({"tower": {"levels": 7, "sides": 5}})
    t = tasks.build(task, p)
    rng = np.random.default_rng(0)
    x = torch.as_tensor(t.sample(rng, 3))
    loads = t.loads(x)
    s = t.fdm.structure
    q = torch.as_tensor(rng.uniform(0.5, 3.0, (3, len(s.edges))) * s.signs * s.active)
    got = t.fdm.equilibrium(q, x, loads)
    want, c = _dense_equilibrium(s, q, x, loads)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    r = t.fdm.residual(q, got, loads)
    assert r[:, s.free].abs().max() < 1e-10
    # the segment-sum residual is P - C^T Q C X at any X, supports included
    xr = x + 0.1 * torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    dense = loads - torch.einsum("en,be,bed->bnd", c, q, torch.einsum("en,bnd->bed", c, xr))
    torch.testing.assert_close(t.fdm.residual(q, xr, loads), dense, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("signs", [[-1, -1, -1, -1], [1, 1, -1, 1]])
def test_adjoint_gradient_matches_finite_differences(signs):
    s = _star(signs)
    fdm = FDM(s)
    x = torch.tensor([[[0.0, 0.0, 0.0], [1, 1, 0], [-1, 1, 0.2], [-1, -1, 0], [1, -1, -0.1]]], dtype=torch.float64)
    p = torch.zeros_like(x)
    p[0, 0, 2] = -1.0
    q = (torch.tensor([[1.5, 0.7, 2.0, 1.1]], dtype=torch.float64) * torch.tensor(signs)).requires_grad_()
    assert torch.autograd.gradcheck(lambda q: fdm.equilibrium(q, x, p), (q,))


def test_adjoint_gradient_on_the_shell_grid():
    t = tasks.build("shell", parse({"shell": {"grid": 4}}))
    x = torch.as_tensor(t.sample(np.random.default_rng(3), 2))
    loads = t.loads(x)
    s = t.fdm.structure
    q = torch.as_tensor(np.random.default_rng(4).uniform(0.5, 2, (2, len(s.edges))) * s.signs * s.active)
    assert torch.autograd.gradcheck(lambda q: t.fdm.equilibrium(q, x, loads), (q.requires_grad_(),))


def test_area_loads_of_a_flat_grid():
    # A flat n x n grid of side L under load w: the loads add up to w L^2; an interior node carries w h^2.
    n, size, w = 6, 5.0, -0.5
    s = shapes.grid_structure(n)
    g = torch.linspace(-size / 2, size / 2, n, dtype=torch.float64)
    x = torch.zeros(1, n * n, 3, dtype=torch.float64)
    x[0, :, 0], x[0, :, 1] = torch.meshgrid(g, g, indexing="ij")[0].ravel(), torch.meshgrid(g, g, indexing="ij")[1].ravel()
    loads = FDM(s).area_loads(x, w)
    h = size / (n - 1)
    assert float(loads[0, :, 2].sum()) == pytest.approx(w * size**2, rel=1e-12)
    assert float(loads[0, n + 1, 2]) == pytest.approx(w * h * h, rel=1e-12)
    assert float(loads[0, 0, 2]) == pytest.approx(w * h * h / 4, rel=1e-12)  # a corner
    assert torch.all(loads[..., :2] == 0)


def test_bezier_targets_keep_their_symmetry_and_boundary():
    rng = np.random.default_rng(0)
    n = 7
    x = shapes.shell_targets(rng, 4, grid=n, size=10.0, family="saddle", symmetry="double").reshape(4, n, n, 3)
    # double symmetry: mirror in u flips x, mirror in v flips y, z unchanged
    np.testing.assert_allclose(x[:, ::-1, :, 0], -x[..., 0], atol=1e-12)
    np.testing.assert_allclose(x[:, :, ::-1, 1], -x[..., 1], atol=1e-12)
    np.testing.assert_allclose(x[:, ::-1, ::-1, 2], x[..., 2], atol=1e-12)
    # corners are never wiggled; the pillow family only lifts the interior control points
    np.testing.assert_allclose(np.abs(x[:, [0, -1]][:, :, [0, -1], :2]), 5.0, atol=1e-12)
    pillow = shapes.shell_targets(rng, 4, grid=n, size=10.0, family="pillow", symmetry="asymmetric").reshape(4, n, n, 3)
    np.testing.assert_allclose(pillow[:, 0, :, 2], 0.0, atol=1e-12)
    np.testing.assert_allclose(pillow[:, :, 0, 0], np.linspace(-5, 5, n)[None].repeat(4, 0), atol=1e-12)
    np.testing.assert_allclose(shapes.bernstein(3, np.linspace(0, 1, 9)).sum(1), 1.0)
    asym = shapes.shell_targets(rng, 2, grid=n, size=10.0, family="saddle", symmetry="asymmetric").reshape(2, n, n, 3)
    assert np.abs(asym[:, ::-1, ::-1, 2] - asym[..., 2]).max() > 1e-3  # no symmetry left


def test_tower_structure_and_targets_follow_the_official_layout():
    assert shapes.ring_levels(21, 3).tolist() == [0, 10, 20]  # official tower.yml
    levels, sides, rings = 21, 16, 3
    s = shapes.tube_structure(levels, sides, rings)
    assert len(s.edges) == levels * sides + (levels - 1) * sides
    assert (s.signs < 0).sum() == rings * sides
    assert (~s.active).sum() == 2 * sides  # the pinned top and bottom rings
    assert s.fixed.sum() == 2 * sides
    x = shapes.tower_targets(np.random.default_rng(0), 3, height=10.0, radius=2.0, sides=sides, levels=levels,
                             rings=rings, radius_range=(0.5, 1.5), twist=15.0).reshape(3, levels, sides, 3)
    np.testing.assert_allclose(x[..., 2], np.broadcast_to(np.linspace(0, 10, levels)[None, :, None], x.shape[:-1]))
    r = np.linalg.norm(x[:, [0, 10, 20], :, :2], axis=-1)
    assert r.min() >= 0.5 * 2.0 - 1e-12 and r.max() <= 1.5 * 2.0 + 1e-12


def test_encoder_keeps_the_sign_constraints():
    t = tasks.build("tower", parse({"tower": {"levels": 7, "sides": 5}}), dtype=torch.float32)
    torch.manual_seed(0)
    enc = Encoder(t.fdm, t.inputs, 32, 3, shift=1.0)
    x = torch.as_tensor(t.sample(np.random.default_rng(0), 4), dtype=torch.float32)
    q = enc(x)
    act = t.fdm.active
    assert torch.all(q[:, act] * t.fdm.signs[act] >= 1.0)  # |q| >= tau with the bar's sign
    assert torch.all(q[:, ~act] == 0)
    assert mlp_flops(enc.net) == 2 * sum(m.weight.numel() for m in enc.net if isinstance(m, torch.nn.Linear))


def test_height_normalised_encoder_lets_the_solver_scale_a_taller_tower_exactly():
    # With no load the equilibrium is linear in the supports: a tower stretched in z by 1.25 is presented to the
    # height-normalised encoder exactly as the original, so the hybrid returns the original shape stretched.
    p = parse({"tower": {"levels": 7, "sides": 5, "normalise_height": True}})
    t = tasks.build("tower", p)
    torch.manual_seed(0)
    net = t.build("hybrid").double()
    x = torch.as_tensor(t.sample(np.random.default_rng(0), 3))
    tall = x.clone()
    tall[..., 2] *= 1.25
    with torch.no_grad():
        (xh, q), (xt, qt) = net(x, t.loads(x)), net(tall, t.loads(tall))
    torch.testing.assert_close(qt, q, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(xt[..., :2], xh[..., :2], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(xt[..., 2], 1.25 * xh[..., 2], rtol=1e-10, atol=1e-10)
    raw = tasks.build("tower", parse({"tower": {"levels": 7, "sides": 5}}))
    torch.manual_seed(0)
    net_raw = raw.build("hybrid").double()
    with torch.no_grad():
        assert not torch.allclose(net_raw.encoder(tall), net_raw.encoder(x))  # raw heights: another input


def test_log_condition_matches_numpy_and_the_inertia_flags_a_jump_across_a_singular_k():
    t = tasks.build("tower", parse({"tower": {"levels": 7, "sides": 6}}))
    s = t.fdm.structure
    q = torch.as_tensor(np.random.default_rng(0).uniform(1, 2, (2, len(s.edges))) * s.signs * s.active)
    k = t.fdm.stiffness(q).numpy()
    np.testing.assert_allclose(log_condition(t.fdm, q).numpy(), np.log10(np.linalg.cond(k)), rtol=1e-8)
    # uniform |q|: the same spectrum up to scale, cond ~ 10^1.5, far below the 1e4 limit
    u = torch.as_tensor(s.signs * s.active)[None]
    assert float(log_condition(t.fdm, u)) < 3 and float(log_condition(t.fdm, 2 * u)) == pytest.approx(float(log_condition(t.fdm, u)))
    assert bool(t.admissible(torch.cat([u, 3 * u]), 1e4).all()) and not bool(t.admissible(u, 10.0)[0])
    # a compression ring far stiffer than the cables: K gains negative eigenvalues (q crossed a singular K)
    stiff = u.clone()
    stiff[0, (t.fdm.signs < 0) & t.fdm.active] *= 50.0
    neg, ok = models.spectrum_check(t.fdm, torch.cat([u, stiff]), 1e4)
    assert neg[1] > neg[0] == int((np.linalg.eigvalsh(t.fdm.stiffness(u).numpy()) < 0).sum())
    # shells are all in compression: -K is positive definite for any q < 0, every eigenvalue is negative
    shell = tasks.build("shell", parse({"shell": {"grid": 5}}))
    qs = torch.as_tensor(np.random.default_rng(1).uniform(0.1, 5, (3, len(shell.fdm.signs)))) * shell.fdm.signs * shell.fdm.active
    assert models.spectrum_check(shell.fdm, qs, 1e4)[0].tolist() == [shell.fdm.num_free] * 3


def test_the_guard_undoes_a_step_that_jumps_across_a_singular_k():
    from papers.neural_fdm.train import GUARD_SHAPES, train

    t = tasks.build("tower", parse({"tower": {"levels": 7, "sides": 5, "width": 16, "depth": 2}}), dtype=torch.float32)
    kw = dict(seed=0, steps=1, batch_size=GUARD_SHAPES, lr=1.0, clip_norm=0.0, residual_weight=0.0, log_every=1)
    x = torch.as_tensor(t.sample(np.random.default_rng([0, 2]), GUARD_SHAPES), dtype=torch.float32)  # train's batch
    torch.manual_seed(0)
    init = t.build("hybrid")
    free, hist = train(t, "hybrid", guard=False, **kw)  # one huge step: the inertia of K changes
    with torch.no_grad():
        before = models.spectrum_check(t.fdm, init.encoder(x), 1e4)[0]
        after = models.spectrum_check(t.fdm, free.encoder(x), 1e4)[0]
    assert not torch.equal(before, after)
    guarded, hist = train(t, "hybrid", guard=True, **kw)  # the same step, undone
    assert int(hist.rejected.iloc[0]) == 1
    for a, b in zip(guarded.parameters(), init.parameters()):
        torch.testing.assert_close(a, b)
    _, hist = train(t, "hybrid", guard=True, **{**kw, "lr": 1e-4})  # a small step keeps the inertia
    assert int(hist.rejected.iloc[0]) == 0


def test_learning_rate_search_picks_the_lowest_validation_error_and_flags_failed_solves():
    from papers.neural_fdm.train import search_lr, validation_error

    t = tasks.build("shell", parse({"shell": {"grid": 4, "width": 8, "depth": 2}}), dtype=torch.float32)
    x_val = torch.as_tensor(t.sample(np.random.default_rng(9), 4), dtype=torch.float32)
    kw = dict(batch_size=4, clip_norm=0.0, residual_weight=0.0, log_every=1)
    lr, table = search_lr(t, "hybrid", grid=(1e-3, 1e-9), x_val=x_val, seeds=(5, 6), steps=5, condition_limit=1e4, **kw)
    assert list(table.lr) == [1e-9, 1e-9, 1e-3, 1e-3] and list(table.seed) == [5, 6, 5, 6]
    assert lr == table.groupby("lr").validation_error.max().idxmin() and table.chosen.sum() == 2
    torch.manual_seed(0)
    net = t.build("hybrid")
    assert np.isfinite(validation_error(t, net, x_val, 1e4))
    assert validation_error(t, net, x_val, 1.0) == np.inf  # every K above a limit of 1: every solve fails


def test_q_variance_is_the_sum_of_the_two_variances():
    q = torch.tensor([[1.0, 3.0, -2.0, 0.0], [2.0, 2.0, -4.0, 0.0]])
    assert float(q_variance(q)) == pytest.approx(np.var([1, 3, 2, 2]) + np.var([-2, -4]))


@pytest.mark.parametrize("task,method", [("shell", "SLSQP"), ("tower", "L-BFGS-B")])
def test_direct_optimisation_recovers_a_reachable_shape(task, method):
    # A target made by the solver itself (no load: area loads depend on the shape) is matched almost exactly.
    t = tasks.build(task, parse({"shell": {"grid": 4}, "tower": {"levels": 7, "sides": 4, "regularization": 0.0}}))
    t.load = 0.0
    s = t.fdm.structure
    x0 = torch.as_tensor(t.sample(np.random.default_rng(0), 1))
    q_true = torch.as_tensor(np.random.default_rng(1).uniform(1, 3, (1, len(s.edges))) * s.signs * s.active)
    target = t.fdm.equilibrium(q_true, x0, t.loads(x0))
    out = optimize(t, target, method=method, init=2.0, bounds=(1.0, 20.0), maxiter=60, tol=1e-12,
                   rng=np.random.default_rng(0))
    q0 = 2.0 * t.fdm.signs[None] * t.fdm.active
    before = float(t.shape_error(target, t.fdm.equilibrium(q0, target, t.loads(target))))
    after = float(t.shape_error(target, out["x_hat"]))
    assert after < 1e-3 * before, (after, before)
    assert torch.all(out["q"][:, s.active] * t.fdm.signs[s.active] >= 1.0 - 1e-12)  # the bounds held


def test_params_reject_unknown_keys_and_bad_values():
    parse({})
    with pytest.raises(KeyError, match="neural_fdm.shell.nope"):
        parse({"shell": {"nope": 1}})
    with pytest.raises(ValueError, match="family"):
        parse({"shell": {"family": "blob"}})
    with pytest.raises(ValueError, match="direct.shapes"):
        parse({"test_shapes": 5, "shell": {"direct": {"shapes": 6}}})
    with pytest.raises(ValueError, match="tune_seed"):
        parse({"seeds": 3, "tune_seed": 2})
    with pytest.raises(ValueError, match="validation_seed"):
        parse({"validation_seed": 90, "test_seed": 90})


# ---- claims ------------------------------------------------------------------------------------
def _metrics(seeds=3, hybrid_err=1.0, neural_err=2.0, neural_res=0.03, hybrid_res=1e-15, direct_err=0.8,
             shapes=4, direct_shapes=3, untrained_err=5.0):
    """A metrics table as the evaluate stage writes it: per (task, split, model, seed, shape)."""
    import pandas as pd

    rows = []
    for task in ("shell", "tower"):
        for split in ("id", "ood"):
            for model, err, res, flops in (("hybrid", hybrid_err, hybrid_res, 1e5), ("neural", neural_err, neural_res, 1e5),
                                           ("untrained", untrained_err, hybrid_res, 1e5)):
                for seed in range(seeds):
                    for shape in range(shapes):
                        e = err * (1 + 0.03 * (seed - 1)) * (1 + 0.1 * shape)
                        rows.append({"task": task, "split": split, "model": model, "seed": seed, "shape": shape,
                                     "shape_error": e, "shape_error_per_coord": e, "residual": res,
                                     "relative_residual": res * (1 + 0.05 * seed), "sign_ok": True, "flops": flops,
                                     "stiffness_min_eig": 0.1, "log_condition": 2.0, "negative_eigs": 5,
                                     "failed": False})
            for shape in range(direct_shapes):
                e = direct_err * (1 + 0.1 * shape)
                rows.append({"task": task, "split": split, "model": "direct", "seed": 0, "shape": shape,
                             "shape_error": e, "shape_error_per_coord": e, "residual": 1e-15, "relative_residual": 1e-15,
                             "sign_ok": True, "flops": 1e8 * (1 + 0.2 * shape), "stiffness_min_eig": 0.1,
                             "log_condition": 2.0, "negative_eigs": 5, "failed": False, "nfev": 10, "nit": 9, "success": True})
    return pd.DataFrame(rows)


def _claims(df, seeds=3):
    from papers.neural_fdm.stages import neural_fdm_claims, summarise

    summary, per_seed = summarise(df)
    claims, sanity = neural_fdm_claims(parse({"seeds": seeds}), df, summary, per_seed)
    return {c.id: c for c in claims}, sanity


def test_claims_decide_on_seed_intervals_with_the_hybrid_as_equilibrium_control():
    c, sanity = _claims(_metrics())
    assert c["a"].verdict == "holds" and len(c["a"].evidence) == 4  # every task x split
    assert c["a"].control.verdict == "does not hold"  # the untrained hybrid is worse than the neural model
    assert c["c"].control.verdict == "does not hold"  # ... and far from direct optimisation
    assert c["b"].verdict == "holds" and c["b"].control.verdict == "does not hold"  # the hybrid is in equilibrium
    assert sanity == {"hybrid_max_relative_residual": pytest.approx(1e-15 * 1.1), "hybrid_sign_ok_fraction": 1.0}
    assert c["c"].verdict == "holds" and c["c"].evidence[1].replicates == 3  # cost: one replicate per direct run
    c, _ = _claims(_metrics(hybrid_err=3.0))  # the hybrid behind: (a) fails; 3.75x direct's error: (c) fails
    assert c["a"].verdict == "does not hold" and "more accurate in shell_id" in c["a"].note
    assert c["c"].verdict == "does not hold" and "error ratio" in c["c"].note
    c, _ = _claims(_metrics(untrained_err=1.5))  # a baseline worse than no learning: (a) cannot be told apart
    assert c["a"].control.verdict == "holds" and c["a"].verdict == "inconclusive"
    assert "the control's criterion holds on its own at shell id" in c["a"].note


def test_claim_a_rests_on_medians_so_a_few_failed_solves_do_not_decide_it():
    df = _metrics()
    bad = (df.model == "hybrid") & (df["shape"] == 0)
    df.loc[bad, ["shape_error", "shape_error_per_coord"]] = 1e6  # one wild shape of four per seed
    df.loc[bad, "failed"] = True
    c, _ = _claims(df)
    assert c["a"].verdict == "holds"
    assert c["a"].measured["tower_ood"]["hybrid"]["failure_rate"] == pytest.approx(0.25)
    assert c["a"].measured["tower_ood"]["hybrid"]["mean"] > 1e5


def test_claims_rest_on_seeds_and_a_broken_residual_makes_the_equilibrium_claim_inconclusive():
    c, _ = _claims(_metrics(seeds=2), seeds=2)
    assert c["a"].verdict == c["b"].verdict == "inconclusive"  # two seeds are too few
    c, _ = _claims(_metrics(hybrid_res=0.03))  # a residual that flags every model cannot tell them apart
    assert c["b"].control.verdict == "holds" and c["b"].verdict == "inconclusive"
