"""P13 infoprop: the propagation step against closed forms and Monte Carlo, the information loss and termination by
hand, the distances against scipy, the ensemble's likelihood against torch, and bad input."""
import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from papers.infoprop import propagation as P
from papers.infoprop import data as D
from papers.infoprop.model import gaussian_nll, train_ensemble
from papers.infoprop.params import parse
from papers.infoprop.report import cut_gap
from papers.infoprop.stages import (aleatoric_stops, cut_errors, dropped_above, excess_error, oracle_stops,
                                    per_start_lower_bound, wasserstein_1d)


def _members(mu, s2):
    """(E,) lists -> (E, 1, 1) tensors: one rollout, one dimension."""
    return (torch.tensor(mu, dtype=torch.float64)[:, None, None], torch.tensor(s2, dtype=torch.float64)[:, None, None])


def test_fused_moments_by_hand():
    # mu = (0, 3), s2 = (1, 2): mean precision (1 + 1/2) / 2 = 3/4 -> s2 = 4/3; m = 4/3 (0/1 + 3/2) / 2 = 1;
    # e2 = ((0 - 1)^2 + (3 - 1)^2) / 2 = 5/2; K = (4/3) / (4/3 + 5/2) = 8/23; v = (1 - K) s2 = 15/23 * 4/3 = 20/23.
    mu, s2 = _members([0.0, 3.0], [1.0, 2.0])
    m, fused_var, epistemic = P.fuse(mu, s2)
    assert float(m) == pytest.approx(1.0) and float(fused_var) == pytest.approx(4 / 3)
    assert float(epistemic) == pytest.approx(2.5)
    mean, var = P.infoprop_moments(mu, s2, torch.tensor([[4.0]], dtype=torch.float64))
    assert float(mean) == pytest.approx(1.0 + 8 / 23 * 3.0)  # m + K (z - m) with z = 4
    assert float(var) == pytest.approx(20 / 23)
    # The K = 1 control: the draw itself, no variance left.
    mean1, var1 = P.infoprop_moments(mu, s2, torch.tensor([[4.0]], dtype=torch.float64), unit_gain=True)
    assert float(mean1) == 4.0 and float(var1) == 0.0


def test_marginal_of_the_step_is_the_aleatoric_gaussian():
    # The paper's model: z ~ N(m, s2 + e2). Then y = m + K (z - m) + sqrt(v) eps is exactly N(m, s2).
    mu, s2 = _members([0.0, 3.0, -1.0], [1.0, 2.0, 0.5])
    m, fused_var, epistemic = (float(t) for t in P.fuse(mu, s2))
    n = 200_000
    g = torch.Generator().manual_seed(0)
    z = m + math.sqrt(fused_var + epistemic) * torch.randn(n, 1, generator=g, dtype=torch.float64)
    mean, var = P.infoprop_moments(mu.expand(-1, n, -1), s2.expand(-1, n, -1), z)
    y = (mean + var.sqrt() * torch.randn(n, 1, generator=g, dtype=torch.float64)).numpy().ravel()
    # Five standard errors of the sample mean and of the sample variance of a Gaussian.
    assert abs(y.mean() - m) < 5 * math.sqrt(fused_var / n)
    assert abs(y.var(ddof=1) - fused_var) < 5 * fused_var * math.sqrt(2 / (n - 1))
    assert stats.kstest(y, "norm", args=(m, math.sqrt(fused_var))).pvalue > 1e-3
    # ... and not N(m, s2 + e2), the random member's own spread.
    assert stats.kstest(y, "norm", args=(m, math.sqrt(fused_var + epistemic))).pvalue < 1e-6


def test_step_with_random_members_keeps_the_first_two_moments():
    # With equal member variances the random member's draw has mean m and variance s2 + e2, so the step's
    # marginal has mean m and variance K^2 (s2 + e2) + (1 - K) s2 = s2 exactly (Monte Carlo through P.step).
    n = 200_000
    mu, s2 = _members([0.0, 2.0, -1.0, 0.5], [0.7] * 4)
    m, fused_var, epistemic = (float(t) for t in P.fuse(mu, s2))
    y, _ = P.step("infoprop", mu.expand(-1, n, -1), s2.expand(-1, n, -1), torch.Generator().manual_seed(1))
    y = y.numpy().ravel()
    kurt_term = ((y - y.mean()) ** 4).mean() - y.var() ** 2  # the variance of (y - mean)^2: not Gaussian here
    assert abs(y.mean() - m) < 5 * math.sqrt(fused_var / n)
    assert abs(y.var(ddof=1) - fused_var) < 5 * math.sqrt(kurt_term / n)
    # MBPO's random member keeps the epistemic spread: variance s2 + e2.
    ymbpo, _ = P.step("mbpo", mu.expand(-1, n, -1), s2.expand(-1, n, -1), torch.Generator().manual_seed(2))
    assert ymbpo.numpy().var() == pytest.approx(fused_var + epistemic, rel=0.02)


def test_unit_gain_control_is_random_member_sampling():
    mu = torch.randn(5, 64, 3, dtype=torch.float64)
    s2 = torch.rand(5, 64, 3, dtype=torch.float64) + 0.1
    y_mbpo, _ = P.step("mbpo", mu, s2, torch.Generator().manual_seed(3))
    y_k1, var = P.step("infoprop_k1", mu, s2, torch.Generator().manual_seed(3))
    torch.testing.assert_close(y_k1, y_mbpo)  # same draws: identical samples
    assert float(var.abs().max()) == 0.0


def test_information_loss_and_termination_by_hand():
    # v = 1 / (2 pi e): 0.5 log2(2 pi e v) = 0, so H = -log2(1e-6) = 19.93 bits; a v below the resolution's cell clips at 0.
    v = np.array([1 / (2 * math.pi * math.e), 1e-14])
    np.testing.assert_allclose(P.information_loss(v, 1e-6), [6 * math.log2(10), 0.0])
    data = np.arange(1, 101, dtype=float)[:, None] * np.ones((1, 2))  # losses 1..100 in both dimensions
    lam1, lam2 = P.thresholds(data, horizon=10, upper_quantile=0.99, lower_quantile=0.01)
    np.testing.assert_allclose(lam1, np.quantile(np.arange(1, 101), 0.99))
    np.testing.assert_allclose(lam2, 10 * np.quantile(np.arange(1, 101), 0.01))
    losses = np.zeros((3, 4, 2))
    losses[0] = 1.0  # running sums 1, 2, 3, 4 stay below lambda2 = 3, 5 in dim 0 and 5 in dim 1 ...
    losses[1, 2, 1] = 7.0  # per-step threshold 6 exceeded at step 2 in dimension 1
    losses[2, :, 0] = 2.0  # running sum 2, 4, 6 > 5 at step 2
    stop = P.stop_step(losses, lambda1=np.array([6.0, 6.0]), lambda2=np.array([5.0, 5.0]))
    np.testing.assert_array_equal(stop, [4, 2, 2])


def test_wasserstein_against_scipy():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3, 40)), rng.standard_t(3, size=(3, 40)) + 0.5
    ours = wasserstein_1d(x, y, axis=1)
    ref = [stats.wasserstein_distance(a, b) for a, b in zip(x, y)]
    np.testing.assert_allclose(ours, ref, rtol=1e-12)
    with pytest.raises(ValueError, match="equal sample counts"):
        wasserstein_1d(x, y[:, :10], axis=1)


def test_gaussian_nll_against_torch():
    g = torch.Generator().manual_seed(0)
    mean, logvar, y = (torch.randn(3, 8, 4, generator=g) for _ in range(3))
    ref = torch.nn.GaussianNLLLoss(reduction="mean")(mean, y, logvar.exp())  # 0.5 (log var + (y - mu)^2 / var)
    torch.testing.assert_close(gaussian_nll(mean, logvar, y), 2 * ref)


def test_ensemble_recovers_a_known_noise_and_disagrees_off_data():
    # y = 2 x + N(0, 0.3^2), x in [-1, 1]: every member's variance near 0.09 on the data; members disagree more
    # far from it (epistemic), where the aleatoric noise is the same.
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(2000, 1))
    y = 2 * x + 0.3 * rng.standard_normal((2000, 1))
    m = {"ensemble": 5, "hidden": 32, "layers": 2, "lr": 3e-3, "weight_decay": 0.0, "batch": 128, "epochs": 30,
         "val_fraction": 0.1, "learn_logvar_bounds": True}
    torch.manual_seed(0)
    # The held-out MSE of a linear map stops improving by 1% well before the cap: early stopping (on the MSE, as
    # MBRL-Lib) fires, and the elites are kept.
    net, hist = train_ensemble(x, y, {**m, "elites": 4, "patience": 3}, torch.Generator().manual_seed(0))
    assert net.ensemble == 4 and hist[-1]["final"] and len(hist[-1]["elites"].split(",")) == 4
    assert hist[-1]["stopped_early"] and hist[-1]["epoch"] < m["epochs"] - 1
    # Trained to the cap, each member back at its best held-out MSE (MBRL-Lib's snapshot, on the mean's error: the
    # variance of an early snapshot is still shrinking), the members' variance has the noise's order, far below the
    # spread of y (1.42).
    net, hist = train_ensemble(x, y, {**m, "elites": 5, "patience": m["epochs"]}, torch.Generator().manual_seed(0))
    assert not hist[-1]["stopped_early"]
    mu, s2 = net.predict(torch.tensor([[0.0], [0.5], [6.0]], dtype=torch.float32))
    assert 0.5 * 0.09 < float(s2[:, :2].mean()) < 4 * 0.09
    _, _, epistemic = P.fuse(mu.double(), s2.double())
    assert float(epistemic[2]) > 10 * float(epistemic[:2].max())
    assert hist[-1]["val_mse"] < hist[0]["val_mse"]


def test_cut_gap_by_hand_and_random_cut():
    err = np.array([[1.0, 1.0], [1.0, 1.0], [3.0, 3.0], [3.0, 3.0]])  # rollouts 2 and 3 have the high error
    rows = pd.DataFrame([{"seed": 0, "cut": "infoprop", **r} for r in cut_errors(err, np.array([2, 2, 1, 1]))])
    assert rows.loc[1, "accepted"] == 2 and rows.loc[1, "dropped"] == 2
    # step 2: both dropped errors exceed both accepted ones: P = 1, gap 1/2 (step 1 has no dropped sample).
    np.testing.assert_allclose(cut_gap(rows, "infoprop", min_group=1), [0.5])
    np.testing.assert_allclose(cut_gap(rows, "infoprop", min_group=3), [np.nan])
    # A cut blind to the error: each dropped error exceeds half the accepted ones and ties the other: gap 0.
    rows = pd.DataFrame([{"seed": 0, "cut": "random", **r} for r in cut_errors(err, np.array([2, 1, 2, 1]))])
    np.testing.assert_allclose(cut_gap(rows, "random", min_group=1), [0.0])


def test_dropped_above_is_the_mann_whitney_probability():
    rng = np.random.default_rng(0)
    err = rng.normal(size=40) + np.r_[np.zeros(25), np.ones(15)]
    accepted = np.r_[np.ones(25, bool), np.zeros(15, bool)]
    u = stats.mannwhitneyu(err[~accepted], err[accepted]).statistic
    assert dropped_above(err, accepted) == pytest.approx(u / (25 * 15))
    assert np.isnan(dropped_above(err, np.ones(40, bool)))


def test_excess_error_is_zero_for_true_samples_and_the_planted_offset_otherwise():
    # Samples from the true distribution score 0 in expectation whatever its spread; a shift by c scores c^2.
    rng = np.random.default_rng(1)
    true = rng.normal(0.0, 3.0, size=(50, 400, 2, 3))  # (N, M, H, D): a wide aleatoric spread
    same = rng.normal(0.0, 3.0, size=(50, 400, 2, 3))
    assert abs(excess_error(same, true).mean()) < 0.2  # against a spread of 9
    assert excess_error(same + 2.0, true).mean() == pytest.approx(4.0, abs=0.25)
    # With few true continuations the estimated mean's own error (sigma^2 / M') must be taken out too: at M' = 4 and
    # sigma^2 = 9 it would leave a bias of 2.25.
    few = rng.normal(0.0, 3.0, size=(4000, 4, 1, 2))
    assert abs(excess_error(rng.normal(0.0, 3.0, size=(4000, 8, 1, 2)), few).mean()) < 0.3


def test_per_start_lower_bound_is_the_t_interval_over_starts():
    rng = np.random.default_rng(2)
    err = rng.normal(1.0, 2.0, size=(12 * 5, 3))  # 12 starts x 5 samples, 3 steps
    per_start = err.reshape(12, 5, 3).mean(1)
    low = stats.t.interval(0.95, 11, loc=per_start.mean(0), scale=stats.sem(per_start, axis=0))[0]
    np.testing.assert_allclose(per_start_lower_bound(err, 12), low)


def test_aleatoric_cut_follows_the_accumulated_entropy_whatever_the_units():
    # Rollout 2 has the largest aleatoric variance throughout, rollout 0 the smallest: the earliest stop goes to 2.
    s2 = np.array([[[0.1, 1.0]] * 3, [[0.5, 1.0]] * 3, [[2.0, 1.0]] * 3])  # (B=3, H=3, D=2)
    stop = np.array([3, 1, 2])
    out = aleatoric_stops(s2, stop)
    np.testing.assert_array_equal(out, [3, 2, 1])
    # Rescaling an output (other units) shifts every rollout's entropy alike: the same cut.
    np.testing.assert_array_equal(aleatoric_stops(s2 * np.array([1.0, 1e4]), stop), out)


def test_oracle_cut_gives_the_earliest_stops_to_the_largest_errors():
    err = np.array([[0.1, 0.2], [5.0, 6.0], [1.0, 1.0], [9.0, 9.0]])
    stop = np.array([2, 0, 2, 1])
    out = oracle_stops(err, stop)
    np.testing.assert_array_equal(np.sort(out), np.sort(stop))  # the same stop steps
    assert out[3] == 0 and out[1] == 1 and set(out[[0, 2]]) == {2}


def test_batched_true_continuations_equal_stepping_the_environment():
    # With no noise the continuation is deterministic: MuJoCo's batched rollout must equal env.step, step by step.
    env = D.make_env("HalfCheetah-v5")
    obs, _ = env.reset(seed=0)
    starts = [obs]
    for _ in range(3):
        obs, *_ = env.step(env.action_space.sample())
        starts.append(obs)
    starts = np.array(starts)
    w = D.policy_matrix(17, 6, 1.0, seed=0)
    d = {"policy_noise": 0.0, "process_noise": 0.0}
    states, alive = D.continue_true(env, w, d, starts, 2, 5, np.random.default_rng(0))
    assert states.shape == (4, 2, 5, 17) and alive.all()
    for i, s0 in enumerate(starts):
        D.restore(env, s0)
        o = s0
        for t in range(5):
            o, *_ = env.step(D.act(w, o, 0.0, np.random.default_rng(0)))
            np.testing.assert_allclose(states[i, :, t], np.broadcast_to(o, (2, 17)), atol=1e-8)


def test_hopper_continuations_stop_at_the_task_termination():
    env = D.make_env("Hopper-v5")
    obs, _ = env.reset(seed=0)
    w = D.policy_matrix(11, 3, 3.0, seed=1)  # a strong random feedback: the hopper falls within the horizon
    states, alive = D.continue_true(env, w, {"policy_noise": 0.0, "process_noise": 0.0}, obs[None], 1, 200,
                                    np.random.default_rng(0))
    t = int(alive[0, 0].sum())
    assert 0 < t < 200 and not alive[0, 0, t:].any()
    np.testing.assert_array_equal(states[0, 0, t:], np.broadcast_to(states[0, 0, t - 1], states[0, 0, t:].shape))


def test_shift_of_takes_the_regimes_in_turn():
    assert [D.shift_of([0.0, 1.0], s) for s in range(5)] == [0.0, 1.0, 0.0, 1.0, 0.0]


def test_restore_reproduces_the_simulator_state():
    env = D.make_env("HalfCheetah-v5")
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        obs, *_ = env.step(env.action_space.sample())
    after = env.step(np.full(6, 0.3))[0]
    D.restore(env, obs)
    np.testing.assert_allclose(env.step(np.full(6, 0.3))[0], after, atol=1e-10)


def test_shifted_policies():
    w = D.policy_matrix(17, 6, 1.0, seed=0)
    ws = D.shifted_policies(w, 1.0, [0.0, 1.0, 2.0], seed=0)
    np.testing.assert_array_equal(ws[0], w)  # shift 0 is the logging policy itself
    np.testing.assert_allclose(ws[2] - w, 2 * (ws[1] - w))  # one direction per seed, scaled by the shift
    # The direction has the logging matrix's own scale: entries of std gain / sqrt(obs_dim).
    assert np.std(ws[1] - w) == pytest.approx(1 / np.sqrt(17), rel=0.3)


def test_bad_input_names_the_key_or_file(tmp_path):
    with pytest.raises(KeyError, match="infoprop.rollouts"):
        parse({"rollouts": {}})
    with pytest.raises(ValueError, match="long_horizon_steps"):
        parse({"rollout": {"starts": 4, "samples": 4, "horizon": 10}})  # default steps go to 50
    with pytest.raises(FileNotFoundError, match="nothere.npz"):
        D.read_prepared(tmp_path / "nothere.npz")
    np.savez(tmp_path / "partial.npz", w=np.zeros(2))
    with pytest.raises(ValueError, match="partial.npz lacks"):
        D.read_prepared(tmp_path / "partial.npz")


def _curves(share: float, growth: float, seeds: int = 4, horizon: int = 50) -> pd.DataFrame:
    """Hand-made rollout curves: MBPO's W1 grows `growth`-fold over the horizon, Infoprop's stays at half of it,
    the K = 1 ablation tracks MBPO, the exact sampler's half-sample distance (the floor) stays at 0.05."""
    rng, rows = np.random.default_rng(0), []
    for seed in range(seeds):
        for step in range(1, horizon + 1):
            mbpo = 0.2 * growth ** ((step - 1) / (horizon - 1)) * (1 + 0.05 * rng.standard_normal())
            for scheme, w1 in (("mbpo", mbpo), ("infoprop", mbpo / 2), ("infoprop_k1", mbpo * 1.01), ("true", 0.05)):
                rows.append({"seed": seed, "scheme": scheme, "step": step, "w1": w1, "w1_half": w1,
                             "epistemic_share": share, "accepted_fraction": 1.0})
    return pd.DataFrame(rows)


def test_claim_a_is_decided_only_where_mbpo_diverges_and_the_members_disagree():
    from papers.infoprop.report import rollout_claim

    p = parse({})
    claim = rollout_claim(p, _curves(share=0.3, growth=8.0))
    assert claim.premise_met and claim.verdict == "holds" and claim.control.verdict != "holds"
    assert claim.positive_control.verdict == "holds"
    # the same planted gap where the members barely disagree, or where MBPO's rollouts do not drift: inconclusive
    for share, growth in ((0.05, 8.0), (0.3, 1.2)):
        claim = rollout_claim(p, _curves(share=share, growth=growth))
        assert not claim.premise_met and claim.verdict == "inconclusive"


def test_claim_a_reads_only_the_seeds_whose_rollouts_diverge():
    from papers.infoprop.report import diverged, rollout_claim

    p = parse({})
    # Seeds 0-2 diverge (the K = 1 arm ends at 1.6, 32 x the floor) and Infoprop halves MBPO's W1 there; seeds 3-4
    # do not (0.2: 4 x the floor, below the factor 5) and Infoprop is farther there: the claim holds on 0-2.
    a, b = _curves(share=0.3, growth=8.0, seeds=3), _curves(share=0.3, growth=1.0, seeds=2)
    b["seed"] += 3
    b.loc[b.scheme == "infoprop", "w1"] *= 3.0
    curves = pd.concat([a, b], ignore_index=True)
    np.testing.assert_array_equal(diverged(p, curves), [True, True, True, False, False])
    claim = rollout_claim(p, curves)
    assert claim.verdict == "holds" and claim.measured["diverging seeds"] == "0, 1, 2"
    assert all(e.replicates == 3 for e in claim.evidence)
    # Two diverging seeds are too few to decide: inconclusive, whatever the effect (the interval then spans all seeds).
    claim = rollout_claim(p, curves[curves.seed != 2])
    assert not claim.premise_met and claim.verdict == "inconclusive"
    assert all(e.replicates == 4 for e in claim.evidence)


def _cuts(gaps: dict, seeds: int) -> pd.DataFrame:
    """Cut rows whose gap (P(dropped error > accepted error) - 1/2) per seed is `gaps[cut]`: one step qualifies."""
    return pd.DataFrame([{"seed": sd, "cut": cut, "step": 1, "accepted": 50, "dropped": 50, "dropped_above": 0.5 + g}
                         for cut, g in gaps.items() for sd in range(seeds)])


def test_claim_b_needs_an_error_to_track_and_beats_the_aleatoric_cut():
    from papers.infoprop.report import cut_claim

    p, h = parse({}), 50
    rows = []
    for seed in range(4):
        for step in range(1, h + 1):
            for scheme in ("mbpo", "infoprop", "infoprop_k1"):
                rows.append({"seed": seed, "scheme": scheme, "step": step, "state_error": 1.0,
                             "state_error_low": 0.5 if seed < 3 else -0.1, "accepted_fraction": 0.5})
    curves = pd.DataFrame(rows)
    noise = np.array([0.01, -0.01, 0.005, 0.0])

    def cuts(info, ale):
        frame = _cuts({"infoprop": info, "random": 0.0, "aleatoric": ale, "oracle": 0.45}, 4)
        frame.loc[frame.cut != "oracle", "dropped_above"] += np.tile(noise, 3)
        return frame

    claim = cut_claim(p, curves, cuts(0.3, 0.1))
    assert claim.premise_met and claim.verdict == "holds" and claim.measured["seeds with error"] == "0, 1, 2"
    assert claim.control.verdict != "holds" and claim.positive_control.verdict == "holds"
    # The aleatoric entropy cuts as well as the information loss: the mechanism is not what tracks the error.
    assert cut_claim(p, curves, cuts(0.3, 0.3)).verdict != "holds"
    # No seed has an error to track: inconclusive, never decided.
    flat = curves.assign(state_error_low=-0.1)
    claim = cut_claim(p, flat, cuts(0.3, 0.1))
    assert not claim.premise_met and claim.verdict == "inconclusive"
