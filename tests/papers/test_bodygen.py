"""P3 bodygen: credit assignment against closed forms, the limb tree and its MJCF, the MuJoCo reward against a
direct simulation, MoSAT's symmetries and padding, GraphConv against PyG, config errors."""
import dataclasses

import mujoco
import numpy as np
import pytest
import torch

from papers.bodygen import credit
from papers.bodygen.env import RAISE_STEP, Execution, passive_rollout, tokens
from papers.bodygen.model import GraphNet, MoSAT, RunningNorm
from papers.bodygen.morphology import ADD, NOOP, REMOVE, Body
from papers.bodygen.params import ARMS, Params, parse
from papers.bodygen.tasks import TASKS
from papers.bodygen.train import initial_body, max_limbs, train_arm

CRAWLER2D = TASKS["crawler2d"]

GAMMA, LAM = 0.995, 0.95


def gae_by_definition(r, v, bootstrap, gamma, lam):
    """A_t = sum_l (gamma lam)^l delta_{t+l}, written out for one untruncated-by-termination episode."""
    s = len(r)
    v_next = np.append(v[1:], bootstrap)
    delta = r + gamma * v_next - v
    return np.array([sum((gamma * lam) ** (l - t) * delta[l] for l in range(t, s)) for t in range(s)])


def test_gae_matches_its_definition():
    rng = np.random.default_rng(0)
    r, v, boot = rng.normal(size=(3, 40)), rng.normal(size=(3, 40)), rng.normal(size=3)
    adv = credit.gae(r, v, boot, np.zeros((3, 40)), GAMMA, LAM)
    for i in range(3):
        np.testing.assert_allclose(adv[i], gae_by_definition(r[i], v[i], boot[i], GAMMA, LAM), rtol=1e-10)


def test_gae_does_not_bootstrap_through_a_termination():
    rng = np.random.default_rng(1)
    r, v = rng.normal(size=(1, 10)), rng.normal(size=(1, 10))
    term = np.zeros((1, 10))
    term[0, 5] = 1.0
    r[0, 6:] = 0.0
    adv = credit.gae(r, v, np.array([7.0]), term, GAMMA, LAM)
    # up to the termination it is GAE of the first six steps with a zero value after them
    np.testing.assert_allclose(adv[0, :6], gae_by_definition(r[0, :6], v[0, :6], 0.0, GAMMA, LAM), rtol=1e-10)


def test_monte_carlo_returns_are_undiscounted_reward_to_go():
    r = np.array([[0.0, 0.0, 1.0, 2.0, 3.0]])
    np.testing.assert_allclose(credit.monte_carlo_returns(r), [[6.0, 6.0, 6.0, 5.0, 3.0]])


def test_late_execution_reward_moves_the_design_advantage_under_tca_not_gae():
    """BodyGen's TCA (Sec. 3.3): a reward at the end of execution reaches the design step in full under TCA;
    plain GAE damps it by (gamma lambda)^k over the k steps in between."""
    design_steps, control_steps = 6, 150
    s = design_steps + control_steps
    is_design = np.arange(s) < design_steps
    values, boot, term = np.zeros((1, s)), np.zeros(1), np.zeros((1, s))
    base = np.zeros((1, s))
    late = base.copy()
    late[0, -1] = 1.0  # one unit of reward at the last control step
    moved = {}
    for tca in (True, False):
        a0, _ = credit.estimate(base, values, boot, term, is_design, gamma=GAMMA, lam=LAM, tca=tca)
        a1, _ = credit.estimate(late, values, boot, term, is_design, gamma=GAMMA, lam=LAM, tca=tca)
        moved[tca] = a1[0, 0] - a0[0, 0]  # change of the first design step's advantage
    assert moved[True] == pytest.approx(1.0)
    assert moved[False] == pytest.approx((GAMMA * LAM) ** (s - 1), rel=1e-9)  # closed form of GAE's damping
    assert moved[False] < 1e-3
    # control steps are GAE under both estimators
    a_tca, _ = credit.estimate(late, values, boot, term, is_design, gamma=GAMMA, lam=LAM, tca=True)
    a_gae, _ = credit.estimate(late, values, boot, term, is_design, gamma=GAMMA, lam=LAM, tca=False)
    np.testing.assert_allclose(a_tca[0, ~is_design], a_gae[0, ~is_design])


def test_tca_value_targets_are_monte_carlo_for_design_and_lambda_returns_for_control():
    rng = np.random.default_rng(2)
    r, v = rng.normal(size=(2, 12)), rng.normal(size=(2, 12))
    r[:, :3] = 0.0
    is_design = np.arange(12) < 3
    adv, tgt = credit.estimate(r, v, np.zeros(2), np.zeros((2, 12)), is_design, gamma=GAMMA, lam=LAM, tca=True)
    np.testing.assert_allclose(tgt[:, :3], np.repeat(r.sum(1, keepdims=True), 3, 1))
    np.testing.assert_allclose(adv[:, :3], tgt[:, :3] - v[:, :3])
    np.testing.assert_allclose(tgt[:, 3:], (v + credit.gae(r, v, np.zeros(2), np.zeros((2, 12)), GAMMA, LAM))[:, 3:])


def test_standardise_per_group():
    rng = np.random.default_rng(3)
    a = rng.normal(5.0, 3.0, size=(4, 20))
    g1 = np.zeros_like(a, bool)
    g1[:, :5] = True
    out = credit.standardise(a, [g1, ~g1])
    for g in (g1, ~g1):
        assert out[g].mean() == pytest.approx(0.0, abs=1e-12)
        assert out[g].std(ddof=1) == pytest.approx(1.0, rel=1e-6)


def test_skeleton_transform_rules():
    body = Body.initial([[0.3, -0.3], [-0.3, -0.3]], 0.08, 30.0)
    grown = body.transform_skeleton(np.array([ADD, ADD, ADD]), max_depth=4, max_children=2)
    # the root already has 2 children (max 2): only the legs grow; new children copy their parent
    assert len(grown.limbs) == 5 and list(grown.depth()) == [0, 1, 1, 2, 2]
    np.testing.assert_allclose(grown.limbs[3].u, grown.limbs[1].u)
    assert len(set(grown.codes())) == len(grown.limbs)
    # removing: a leaf below the root yes, a root child with children no, the first root child never
    shrunk = grown.transform_skeleton(np.array([NOOP, REMOVE, NOOP, REMOVE, NOOP]), 4, 2)
    assert len(shrunk.limbs) == 4
    leaf_root_child = Body.initial([[0.3, -0.3], [-0.3, -0.3]], 0.08, 30.0)
    assert not leaf_root_child.can_remove(1) and leaf_root_child.can_remove(2)
    # a child added to the root copies the root's first leg (official add_child_to_body clones bodies[0].child[0];
    # the root's own bone has zero length)
    one_leg = leaf_root_child.transform_skeleton(np.array([NOOP, NOOP, REMOVE]), 4, 2)
    regrown = one_leg.transform_skeleton(np.array([ADD, NOOP]), 4, 2)
    assert len(one_leg.limbs) == 2 and len(regrown.limbs) == 3
    np.testing.assert_array_equal(regrown.limbs[2].u, one_leg.limbs[1].u)
    deep = grown
    for _ in range(5):
        deep = deep.transform_skeleton(np.full(len(deep.limbs), ADD), 4, 2)
    assert deep.depth().max() == 3 and len(deep.limbs) == max_limbs(CRAWLER2D) == 15


def test_mjcf_compiles_with_one_motor_per_limb():
    body = Body.initial([[0.3, -0.3], [-0.3, -0.3]], 0.08, 30.0).transform_skeleton(np.array([0, 1, 1]), 4, 2)
    m = mujoco.MjModel.from_xml_string(body.mjcf(CRAWLER2D))
    assert m.nu == len(body.limbs) - 1 and m.nq == 3 + len(body.limbs) - 1
    np.testing.assert_allclose(m.actuator_gear[:, 0], 30.0, rtol=1e-4)


def test_execution_reward_matches_a_direct_simulation():
    p = Params()
    body = initial_body(CRAWLER2D).transform_skeleton(np.array([0, 1, 0]), 4, 2)
    env = dict(p.env)
    ex = Execution([body], CRAWLER2D, env, np.random.default_rng(0), noise=False)
    m = mujoco.MjModel.from_xml_string(body.mjcf(CRAWLER2D, env["integrator"]))
    d = mujoco.MjData(m)
    d.qpos[1] = ex.datas[0].qpos[1]  # the start height that place_on_ground chose (tested below)
    actions = np.random.default_rng(1).uniform(-1.5, 1.5, size=(20, len(body.limbs)))
    for a in actions:
        r, _ = ex.step(a[None], env["ctrl_cost"], np.array([True]))
        ctrl = np.clip(a[1:], -1, 1)
        x0 = d.qpos[0]
        d.ctrl[:] = ctrl
        for _ in range(env["frame_skip"]):
            mujoco.mj_step(m, d)
        expected = (d.qpos[0] - x0) / (CRAWLER2D.timestep * env["frame_skip"]) - env["ctrl_cost"] * np.mean(ctrl ** 2)
        assert r[0] == pytest.approx(expected, rel=1e-9, abs=1e-12)


def _batch(body, f, limbs):
    t = tokens([body], 2, None, limbs, 4)
    x = torch.randn(1, limbs, f, generator=torch.Generator().manual_seed(0))
    return x, torch.as_tensor(t["codes"]), torch.as_tensor(t["mask"]), torch.as_tensor(t["adj"])


@pytest.mark.parametrize("chain", [1, 3])
def test_start_height_is_the_lowest_grid_height_that_clears_the_floor(chain):
    """Closed form: the body's lowest point (a capsule end minus its radius, or the root sphere's bottom) must
    clear the floor plus the geoms' contact margin, on the official 0.05 grid from ground level."""
    p = Params()
    body = initial_body(CRAWLER2D)
    for _ in range(chain):  # grow a chain down the back leg: the lowest point goes deeper than the template's
        acts = np.zeros(len(body.limbs), np.int64)
        acts[-1] = ADD
        body = body.transform_skeleton(acts, 4, 2)
    body = body.transform_attributes(np.tile([0.0, -0.8, 0.0, 0.0], (len(body.limbs), 1)))
    ex = Execution([body], CRAWLER2D, dict(p.env), np.random.default_rng(0), noise=False)
    start, end = body.attach_points()
    radius = np.array([0.03 + (u[2] + 1) / 2 * 0.07 for u in (l.u for l in body.limbs)])
    lowest = min(-CRAWLER2D.root_geom[1], float(np.min(np.minimum(start[1:, 1], end[1:, 1]) - radius[1:])))
    margin = 0.01  # geom default margin in the MJCF
    height = CRAWLER2D.init_height + ex.datas[0].qpos[1]  # root centre above the floor
    k = round((height) / RAISE_STEP)
    assert height == pytest.approx(k * RAISE_STEP, abs=1e-9)
    assert height + lowest > -1e-9  # clears the floor (margin contacts count as touching)
    assert (k - 1) * RAISE_STEP + lowest < margin  # one grid step lower would touch
    assert ex.datas[0].ncon == 0


def test_zero_torque_return_telescopes_to_the_root_displacement():
    """With zero torque the control cost vanishes and the per-step velocities sum to (x_T - x_0) / dt; x_T from a
    direct simulation of the same start state (same noise stream) for control_steps * frame_skip physics steps."""
    p = Params()
    env = {**p.env, "control_steps": 50}
    body = initial_body(CRAWLER2D).transform_skeleton(np.array([0, 1, 1]), 4, 2)
    returns, lengths, _ = passive_rollout([body], CRAWLER2D, env, np.random.default_rng(3))
    ex = Execution([body], CRAWLER2D, env, np.random.default_rng(3))
    m, d = ex.models[0], ex.datas[0]
    x0 = d.qpos[0]
    mujoco.mj_step(m, d, nstep=env["control_steps"] * env["frame_skip"])
    assert lengths[0] == env["control_steps"]
    assert returns[0] == pytest.approx((d.qpos[0] - x0) / (CRAWLER2D.timestep * env["frame_skip"]), rel=1e-9)


def test_mosat_is_permutation_equivariant_and_only_topope_sees_the_tree_position():
    torch.manual_seed(0)
    body = Body.initial([[0.3, -0.3], [-0.3, -0.3]], 0.08, 30.0).transform_skeleton(np.array([0, 1, 1]), 4, 2)
    x, codes, mask, adj = _batch(body, 6, 5)
    perm = torch.tensor([0, 2, 1, 4, 3])
    swapped = codes.clone()
    swapped[0, [1, 2]] = codes[0, [2, 1]]  # the same tokens placed at each other's position in the tree
    for topope in (False, True):
        net = MoSAT(6, 16, 2, 4, topope=topope)
        out = net(x, codes, mask, adj)
        # attention over a set: reordering the tokens (with their codes) reorders the outputs
        assert torch.allclose(out[:, perm], net(x[:, perm], codes[:, perm], mask[:, perm], adj), atol=1e-5)
        assert torch.allclose(out, net(x, swapped, mask, adj), atol=1e-5) == (not topope)


def test_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    body = Body.initial([[0.3, -0.3], [-0.3, -0.3]], 0.08, 30.0)
    x, codes, mask, adj = _batch(body, 6, 3)
    xp, codesp, maskp, adjp = _batch(body, 6, 7)
    xp[:, :3] = x
    for net in (MoSAT(6, 16, 2, 4), GraphNet(6, 16, 2)):
        assert torch.allclose(net(x, codes, mask, adj), net(xp, codesp, maskp, adjp)[:, :3], atol=1e-6)


def test_padded_mosat_matches_one_body_at_a_time_with_torch_attention():
    """Independent computation: each body of a mixed-size batch alone, unpadded, its attention by torch's
    scaled_dot_product_attention; the padded batch's real limbs must agree."""
    torch.manual_seed(0)
    net = MoSAT(6, 16, 2, 4)
    sizes = [3, 7, 5]
    mask = torch.tensor([[k < n for k in range(7)] for n in sizes])
    x, codes = torch.randn(3, 7, 6), torch.randint(0, 81, (3, 7))
    out = net(x, codes, mask, None)
    for b, n in enumerate(sizes):
        h = net.inp(x[b, :n]) + net.topo(codes[b, :n])
        for blk in net.blocks:
            a = blk.ln1(h)
            h = h + torch.nn.functional.scaled_dot_product_attention(blk.q(a)[None], blk.k(a)[None], blk.v(a)[None])[0]
            h = h + blk.mlp(blk.ln2(h))
        assert torch.allclose(out[b, :n], h, atol=1e-5)


def test_graphconv_layer_matches_torch_geometric():
    pyg = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    body = Body.initial([[0.3, -0.3], [-0.3, -0.3]], 0.08, 30.0).transform_skeleton(np.array([0, 1, 1]), 4, 2)
    t = tokens([body], 2, None, 5, 4)
    adj = torch.as_tensor(t["adj"])
    h = torch.randn(1, 5, 8)
    net = GraphNet(8, 8, 1)
    ref = pyg.GraphConv(8, 8, aggr="add")
    with torch.no_grad():
        ref.lin_root.weight.copy_(net.self_w[0].weight)
        ref.lin_rel.weight.copy_(net.nbr_w[0].weight)
        ref.lin_rel.bias.copy_(net.self_w[0].bias)
    edge_index = adj[0].nonzero().T.flip(0)  # (source j, target i)
    ours = torch.tanh(net.self_w[0](h) + net.nbr_w[0](adj @ h))[0]
    assert torch.allclose(ours, torch.tanh(ref(h[0], edge_index)), atol=1e-6)


def test_running_norm_matches_numpy():
    x = np.random.default_rng(4).normal(3.0, 2.0, size=(500, 3))
    norm = RunningNorm(3)
    for chunk in np.array_split(x, 7):
        norm.update(torch.as_tensor(chunk))
    np.testing.assert_allclose(norm.mean.numpy(), x.mean(0), rtol=1e-10)
    np.testing.assert_allclose(norm.std().numpy(), x.std(0), rtol=1e-10)


def test_config_errors_name_the_key():
    with pytest.raises(KeyError, match="bodygen.nonsense"):
        parse({"seeds": 3, "nonsense": 1})
    with pytest.raises(ValueError, match="bodygen.arms"):
        parse({"seeds": 3, "arms": ["bodygen", "nope"]})


def test_training_is_deterministic_and_respects_the_budget():
    p = dataclasses.replace(Params(), env={**Params().env, "control_steps": 8, "skel_steps": 2},
                            model={**Params().model, "hidden": 8, "blocks": 1, "head_hidden": 8},
                            ppo={**Params().ppo, "env_steps": 30, "samples": 12, "episodes": 3, "epochs": 1})
    runs = [train_arm(ARMS["bodygen"], p, 0, log=lambda *_: None)[1] for _ in range(2)]
    timers = ("seconds", "cpu_seconds", "rollout_cpu_seconds")
    assert [{k: v for k, v in h.items() if k not in timers} for h in runs[0]] == \
        [{k: v for k, v in h.items() if k not in timers} for h in runs[1]]
    assert all(0 < h["rollout_cpu_seconds"] <= h["cpu_seconds"] for h in runs[0])
    assert runs[0][-1]["env_steps"] >= 30 and (len(runs[0]) == 1 or runs[0][-2]["env_steps"] < 30)


# ---- TCA's mechanism on the design-only bandit ------------------------------------------------------------
def _late_bandit(horizon=60, k=4):
    """Design d earns d / k per step over the last 10 execution steps only, nothing before: a late reward."""
    r = np.zeros((k, 1, horizon))
    r[:, 0, -10:] = (np.arange(k) / k)[:, None]
    return r


def test_tca_learns_a_late_design_reward_that_gae_damps():
    from papers.bodygen import bandit as B

    r = _late_bandit()
    kw = dict(iterations=40, episodes=16, policy_lr=0.5, value_lr=0.1, gamma=GAMMA, lam=LAM)
    value = r.sum(2).mean(1)
    share = {}
    for tca in (True, False):
        curve = B.learn(r, tca=tca, rng=np.random.default_rng(0), **kw)
        share[tca] = ((curve - curve[0]) / (value.max() - curve[0]))
    # TCA moves the design at once; GAE only once its critic has carried the late reward back to the first
    # execution step (about 1 / (1 - gamma lambda) steps per iteration): both get there, TCA sooner (the area under
    # the curve, claim e's measure).
    assert share[True][4] > 0.25 and share[False][4] < 0.1
    assert share[True].mean() > share[False].mean() + 0.1
    # rewards that do not depend on the choice: no estimator can improve the design
    null = B.learn(r, tca=True, rng=np.random.default_rng(0), shuffle=True, **kw)
    assert abs(null[-1] - null[0]) < 0.25 * (value.max() - null[0])


def test_late_share_by_hand():
    from papers.bodygen import bandit as B

    r = _late_bandit(horizon=60)
    assert B.late_share(r, 18.3) == pytest.approx(1.0)  # every difference after step 19
    early = np.zeros((2, 1, 40))
    early[1, 0, :10] = 1.0
    assert B.late_share(early, 18.3) == pytest.approx(0.0)


def _noisy_early_bandit(k=4, draws=8, horizon=60, seed=0):
    """Start noise in the first 20 steps (the same spread for every design), design d's reward d / k over the last
    10: what reaches GAE's design step from a frozen critic is mostly noise, TCA's undiscounted return carries R(d)."""
    rng = np.random.default_rng(seed)
    r = np.zeros((k, draws, horizon))
    r[:, :, :20] = rng.normal(0.0, 1.0, (k, draws, 20))
    r[:, :, -10:] = (np.arange(k) / k)[:, None, None]
    return r


def test_advantage_r2_separates_the_estimators_where_the_late_reward_is_hidden_from_gae():
    from papers.bodygen import bandit as B

    r = _noisy_early_bandit()
    kw = dict(lrs=[1e-9, 0.5], iterations=5, episodes=64, gamma=GAMMA, lam=LAM)
    _, r2_tca = B.learn_grid(r, tca=True, value_lr=0.0, rng=np.random.default_rng(1), **kw)
    _, r2_gae = B.learn_grid(r, tca=False, value_lr=0.0, rng=np.random.default_rng(1), **kw)
    # TCA: G = noise + R(d): R(d) explains var(R) / (var(R) + var(noise sum)) of it; GAE (frozen critic): the late
    # reward damped by (gamma lambda)^50 ~ 0.06, so R(d) explains almost nothing
    between = np.var(np.arange(4) / 4 * 10)
    expected = between / (between + r[:, :, :20].sum(2).var())
    assert np.nanmean(r2_tca[0]) == pytest.approx(expected, abs=0.15)
    assert np.nanmean(r2_gae[0]) < 0.1 < np.nanmean(r2_tca[0])


def test_paying_the_return_at_the_first_execution_step_removes_what_separates_the_estimators():
    # claim (e)'s ablation: with the whole execution return at the first execution step and a frozen critic, GAE's
    # design advantage is gamma lambda G exactly (no discount past step 1), proportional to TCA's G: both carry R(d)
    # alike, where with the reward late GAE's carries almost nothing (the test above)
    from papers.bodygen import bandit as B

    r = _noisy_early_bandit()
    early = np.zeros_like(r)
    early[:, :, 0] = r.sum(2)
    kw = dict(lrs=[1e-9], iterations=5, episodes=64, gamma=GAMMA, lam=LAM, value_lr=0.0)
    _, r2_tca = B.learn_grid(early, tca=True, rng=np.random.default_rng(1), **kw)
    _, r2_gae = B.learn_grid(early, tca=False, rng=np.random.default_rng(1), **kw)
    np.testing.assert_allclose(r2_gae, r2_tca, rtol=1e-9)
    assert np.nanmean(r2_tca) > 0.1


def test_learn_grid_runs_independent_learners():
    from papers.bodygen import bandit as B

    r = _late_bandit()
    curve, _ = B.learn_grid(r, tca=True, lrs=[0.0, 0.5, 4.0], iterations=20, episodes=16, value_lr=0.1, gamma=GAMMA,
                            lam=LAM, rng=np.random.default_rng(0))
    value = r.sum(2).mean(1)
    assert np.allclose(curve[0], value.mean())  # step size 0: the uniform policy throughout
    assert curve[1, -1] > value.mean() and curve[2, -1] > curve[1, 5]  # the others learn, the larger step faster
    # TCA's standardised design advantage does not read the critic (claim e's positive control reuses TCA's run)
    frozen, _ = B.learn_grid(r, tca=True, lrs=[0.0, 0.5, 4.0], iterations=20, episodes=16, value_lr=0.0, gamma=GAMMA,
                             lam=LAM, rng=np.random.default_rng(0))
    assert np.allclose(frozen, curve)


def test_cross_fit_scores_each_replicate_at_the_step_size_the_other_fold_chose():
    import pandas as pd

    from papers.bodygen import bandit as B

    # even replicates do best at 0.1, odd ones at 1.0; a tie at 2.0 with 1.0 on the even replicates
    auc = {0: {0.1: 0.9, 1.0: 0.2, 2.0: 0.2}, 2: {0.1: 0.8, 1.0: 0.3, 2.0: 0.3},
           1: {0.1: 0.1, 1.0: 0.7, 2.0: 0.5}, 3: {0.1: 0.2, 1.0: 0.9, 2.0: 0.6}}
    table = pd.DataFrame([{"replicate": r, "lr": lr, "auc": a} for r, row in auc.items() for lr, a in row.items()])
    out = B.cross_fit(table, 2)
    assert out.loc[0, "lr"] == out.loc[2, "lr"] == 1.0  # chosen on the odd replicates
    assert out.loc[1, "lr"] == out.loc[3, "lr"] == 0.1  # chosen on the even ones
    assert out.auc.tolist() == [0.2, 0.1, 0.3, 0.2]


def _curves(tca_share, gae_share, r2_tca, r2_gae, frozen_share=0.2, early_gap=0.0, reps=8, iterations=4):
    """A hand-made credit table: every learner's share constant over the iterations (plus replicate noise); with the
    reward paid at the first execution step (the ablation) TCA leads GAE by `early_gap`."""
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = []
    for rep in range(reps):
        for est, reward, share, r2 in (("tca", "design", tca_share, r2_tca), ("gae", "design", gae_share, r2_gae),
                                       ("gae", "frozen critic", frozen_share, r2_gae),
                                       ("tca", "early", 0.7 + early_gap, r2_tca), ("gae", "early", 0.7, r2_gae),
                                       ("tca", "shuffled", 0.0, np.nan),
                                       ("gae", "shuffled", 0.0, np.nan)):
            for lr in ((0.0, 0.1, 1.0) if reward != "shuffled" else (1.0,)):
                noise = 0.02 * rng.standard_normal()
                value = share * lr / (lr + 0.1) + noise if reward != "shuffled" else noise  # larger steps do better
                for it in range(iterations + 1):
                    rows.append({"replicate": rep, "estimator": est, "reward": reward, "lr": lr, "iteration": it,
                                 "J": 0.0, "share": value, "r2": r2 + 0.01 * rng.standard_normal(), "best": 3.0,
                                 "uniform": 1.0, "start_noise": 1.0, "late_share": 0.9, "gae_horizon": 18.3})
    return pd.DataFrame(rows)


def test_credit_claim_needs_its_premise_and_its_positive_control():
    from papers.bodygen.report import credit_claim

    p = parse({"credit": {**Params().credit, "iterations": 4, "premise_iterations": 2, "policy_lrs": [0.1, 1.0]}})
    good = credit_claim(p, _curves(0.9, 0.5, r2_tca=0.6, r2_gae=0.3))
    assert good.verdict == "holds" and good.positive_control.verdict == "holds"
    assert good.measured["TCA step size"] == "fold 0: 1; fold 1: 1"
    # GAE's design advantage carries as much of R(d) as TCA's: the premise fails, the same gain reads inconclusive
    assert credit_claim(p, _curves(0.9, 0.5, r2_tca=0.3, r2_gae=0.3)).verdict == "inconclusive"
    # GAE ahead where the critic learns, TCA ahead where the late reward is hidden by construction: does not hold
    assert credit_claim(p, _curves(0.5, 0.9, r2_tca=0.6, r2_gae=0.3)).verdict == "does not hold"
    # the planted setting not found (TCA no better with GAE's critic frozen): inconclusive, never "does not hold"
    assert credit_claim(p, _curves(0.5, 0.9, r2_tca=0.6, r2_gae=0.3, frozen_share=0.9)).verdict == "inconclusive"
    # TCA leads as much with nothing late (the ablation holds too): the gain is not the late reward's: inconclusive
    ablated = credit_claim(p, _curves(0.9, 0.5, r2_tca=0.6, r2_gae=0.3, early_gap=0.4))
    assert ablated.control.kind == "ablation" and ablated.control.verdict == "holds"
    assert ablated.verdict == "inconclusive" and good.control.verdict != "holds"


def test_credit_settings_errors_name_the_key():
    from papers.bodygen.stages import credit_settings

    for bad, key in (({"policy_lrs": [0.4, 0.2]}, "policy_lrs"), ({"premise_iterations": 0}, "premise_iterations"),
                     ({"folds": 99}, "folds")):
        p = parse({"credit": {**Params().credit, **bad}})
        with pytest.raises(ValueError, match=f"bodygen.credit.{key}"):
            credit_settings(p)


def test_full_scale_minutes_from_the_measured_step_cost():
    from papers.bodygen.timing import merged_config, step_cost, train_minutes

    assert train_minutes(12.0, 50_000_000, 1.5) == 15_000  # 50M x 12 ms = 10,000 min, x 1.5
    with pytest.raises(ValueError):
        train_minutes(12.0, 50_000_000, 0.5)
    assert merged_config({"ppo": {"a": 1, "b": 2}, "x": 1}, {"ppo": {"b": 3}}) == {"ppo": {"a": 1, "b": 3}, "x": 1}
    small = {"tasks": ["crawler2d"], "model": {**Params().model, "hidden": 8, "blocks": 1, "head_hidden": 8},
             "env": {"skel_steps": 2, "control_steps": 10, "frame_skip": 4, "ctrl_cost": 1e-4, "integrator": "Euler"},
             "ppo": {**Params().ppo, "epochs": 1, "minibatch": 64, "episodes": 4}}
    cost = step_cost(small, samples=40, control_steps=10)
    assert cost["samples"] >= 40 and cost["ms_per_step"] > 0
    assert cost["ms_per_step"] == pytest.approx(cost["rollout_ms_per_step"] + cost["update_ms_per_step"])


def test_control_log_std_is_the_tasks_unless_the_config_sets_one():
    from papers.bodygen.train import make_agent

    model = {**Params().model, "hidden": 8, "blocks": 1, "head_hidden": 8}
    assert float(make_agent("mosat", {**model, "control_log_std": None}, TASKS["crawler2d"]).ctrl_log_std) == -0.5
    assert float(make_agent("mosat", {**model, "control_log_std": None}, TASKS["cheetah"]).ctrl_log_std) == 0.0
    assert float(make_agent("mosat", {**model, "control_log_std": -1.0}, TASKS["cheetah"]).ctrl_log_std) == -1.0


# ---- the return claims' learnability gate, on hand-made returns -------------------------------------------
def _returns(late: dict, final: dict, passive: float = 1.0, seeds: int = 4):
    import pandas as pd

    rng = np.random.default_rng(0)
    return pd.DataFrame([{"task": "crawler2d", "arm": arm, "seed": s, "return": final[arm] + 0.1 * rng.standard_normal(),
                          "late_return": late[arm] + 0.1 * rng.standard_normal(), "passive_return": passive}
                         for arm in late for s in range(seeds)])


def test_return_claim_is_decided_only_when_every_compared_arm_learned_a_gait():
    from papers.bodygen.report import RETURN_CLAIMS, return_claim

    p = parse({"arms": ["bodygen", "t2a", "fixed"]})
    cid, statement, paper, arm, other = RETURN_CLAIMS[0]
    learned = _returns(late={"bodygen": 30.0, "t2a": 20.0, "fixed": 25.0}, final={"bodygen": 60.0, "t2a": 40.0, "fixed": 50.0})
    claim = return_claim(p, cid, statement, paper, arm, other, learned)
    assert claim.premise_met and claim.verdict == "holds"
    # the positive control (fixed body against the baseline, the same test) holds here; where the fixed body earns
    # no more than the baseline the test is shown blind to the gap and the same gain reads inconclusive
    assert claim.positive_control.verdict == "holds"
    blind = _returns(late={"bodygen": 30.0, "t2a": 20.0, "fixed": 25.0},
                     final={"bodygen": 60.0, "t2a": 40.0, "fixed": 40.0})
    assert return_claim(p, cid, statement, paper, arm, other, blind).verdict == "inconclusive"
    # the baseline stays at what collapsing earns (second half below the zero-torque return): the same planted gain
    # of BodyGen reads inconclusive, never "holds", and a planted loss never "does not hold"
    for final in ({"bodygen": 60.0, "t2a": 40.0, "fixed": 50.0}, {"bodygen": 20.0, "t2a": 40.0, "fixed": 50.0}):
        flat = _returns(late={"bodygen": 30.0, "t2a": 0.5, "fixed": 25.0}, final=final)
        claim = return_claim(p, cid, statement, paper, arm, other, flat)
        assert not claim.premise_met and claim.verdict == "inconclusive"
    # an ablation arm not trained at this scale: not measured, with the reason
    ablation = return_claim(p, *RETURN_CLAIMS[1][:3], "bodygen", "no_tca", learned)
    assert ablation.verdict == "not measured" and "no_tca" in ablation.note


def test_several_tasks_are_decided_on_the_mean_relative_gain_not_on_every_task():
    import pandas as pd

    from papers.bodygen.report import RETURN_CLAIMS, relative_gain, return_claim

    late = {"bodygen": 30.0, "t2a": 20.0, "fixed": 25.0}
    one = _returns(late=late, final={"bodygen": 60.0, "t2a": 40.0, "fixed": 50.0})
    # a second task where BodyGen loses 10% (the paper's Table 1 has such tasks): +50% and -10% average to +20%
    two = _returns(late=late, final={"bodygen": 90.0, "t2a": 100.0, "fixed": 120.0})
    both = pd.concat([one, two.assign(task="cheetah")])
    gain = relative_gain(both, "bodygen", "t2a", ["crawler2d", "cheetah"])
    assert gain.mean() == pytest.approx(0.5 * (20 / 40 - 10 / 100), abs=0.01)
    p = parse({"arms": ["bodygen", "t2a", "fixed"], "tasks": ["crawler2d", "cheetah"]})
    assert return_claim(p, *RETURN_CLAIMS[0], both).verdict == "holds"


def test_parameter_counts_are_checks_that_can_fail_and_not_claims():
    import pandas as pd

    from papers.bodygen.report import RETURN_CLAIMS, checks

    p = parse({})
    sizes = {("this run", "mosat"): 50_000, ("this run", "gnn"): 40_000, ("paper", "mosat"): 900_000,
             ("paper", "gnn"): 700_000, ("heavy control", "mosat"): 5_000_000}
    counts = pd.DataFrame([{"config": c, "arch": a, "parameters": n} for (c, a), n in sizes.items()])
    entries = {c.id: c for c in checks(p, counts)}
    assert set(entries) == {"d_this_run", "d_paper_sizes", "d_heavy"} and all(c.passed for c in entries.values())
    over = counts.assign(parameters=lambda d: d.parameters.where(d.config != "paper", 3_000_000))
    assert not {c.id: c for c in checks(p, over)}["d_paper_sizes"].passed
    assert "d" not in {cid for cid, *_ in RETURN_CLAIMS}  # the count is no longer a claim
