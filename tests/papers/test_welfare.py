"""P2 welfare: the dynamics against hand-computed cases and the paper's closed-form rates."""
import numpy as np
import pandas as pd
import pytest

from papers.welfare import dynamics as dyn
from papers.welfare.params import Params, parse
from papers.welfare.stages import crossing_time, flat_returns, load_incomes, prepare

BOUNDS = dyn.Bounds(f_lb=5.0, f_ub=20.0, g_lb=1.0, g_ub=3.0)


def test_one_step_by_hand():
    # Three individuals, K = 1, no noise. f(U) = clip(U + 10, 5, 20), g(U) = clip(4 - U/2, 1, 3).
    u = np.array([[2.0, 8.0, 14.0]])
    f = dyn.treatment(u, 1.0, 10.0, BOUNDS)  # [12, 18, 20] (24 clipped to 20)
    g = dyn.decay(u, -0.5, 4.0, BOUNDS)  # [3, 1, 1] (0 and -3 clipped to 1)
    np.testing.assert_array_equal(f, [[12.0, 18.0, 20.0]])
    np.testing.assert_array_equal(g, [[3.0, 1.0, 1.0]])
    rng = np.random.default_rng(0)
    expected = {
        "rawlsian_min_u": [2 + 12, 8 - 1, 14 - 1],  # treats the lowest welfare
        "rawlsian_max_g": [2 + 12, 8 - 1, 14 - 1],  # the fastest decaying is the lowest here
        "util_max_u": [2 - 3, 8 - 1, 14 + 20],  # treats the highest welfare
        "util_max_f": [2 - 3, 8 - 1, 14 + 20],
        "util_max_fg": [2 - 3, 8 - 1, 14 + 20],  # f + g = [15, 19, 21]
    }
    for policy, want in expected.items():
        treated = dyn.choose(policy, u, f, g, 1, rng)
        np.testing.assert_array_equal(dyn.step(u, treated, f, g, 0.0), [want], err_msg=policy)


def test_ties_go_to_the_lowest_index_and_random_treats_k():
    u = np.array([[5.0, 1.0, 1.0, 5.0]])
    assert dyn.top_k(-u, 1).tolist() == [[1]]
    assert dyn.top_k(u, 2).tolist() == [[0, 3]]
    treated = dyn.choose("random", np.zeros((7, 10)), None, None, 3, np.random.default_rng(1))
    assert treated.sum(axis=1).tolist() == [3] * 7


def test_max_g_ties_go_to_the_worst_off_as_the_official_per_step_sort_does():
    # Everyone on g's lower plateau (equal g): the official code sorts this policy's welfare each step, so the
    # first of the tied is the poorest, not the lowest index.
    u = np.array([[9.0, 4.0, 7.0, 2.0], [1.0, 6.0, 3.0, 8.0]])
    g = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 2.0, 1.0]])
    treated = dyn.choose("rawlsian_max_g", u, np.zeros_like(u), g, 1, np.random.default_rng(0))
    # row 0: all tie, the poorest is index 3; row 1: the larger g ties between 1 and 2, the poorer is index 2
    assert treated.argmax(axis=1).tolist() == [3, 2]
    two = dyn.choose("rawlsian_max_g", u, np.zeros_like(u), g, 2, np.random.default_rng(0))
    assert np.flatnonzero(two[0]).tolist() == [1, 3] and np.flatnonzero(two[1]).tolist() == [1, 2]


def test_theoretical_rates_and_official_bounds():
    b = dyn.Bounds.official(n=50, k=1, g_lb=10, g_ub=60, a=4, b=0.5)
    assert (b.f_lb, b.f_ub) == (12000.0, 13750.0)  # 4 * 50 * 60, + 0.5 * 50 * 70
    rates = dyn.theoretical_rates(b, n=50, k=1)
    assert rates["rawlsian"] == pytest.approx((13750 - 49 * 10) / 50)
    assert rates["utilitarian"] == pytest.approx((13750 - 49 * 60) / 50)


def test_rawlsian_long_run_rate_without_noise_is_exact():
    # Everyone above both knots: f = f_ub and g = g_lb for all, so the mean gains exactly
    # (K f_ub - (N - K) g_lb) / N per step under any policy; the Rawlsian one keeps it that way.
    n, k = 6, 2
    u0 = np.full((1, n), 1e6)
    ones = np.ones((1, n))
    mean = dyn.simulate("rawlsian_min_u", u0, 0 * ones, 1e9 * ones, 0 * ones, -1e9 * ones, BOUNDS, k=k,
                        horizon=50, noise=False, rng=np.random.default_rng(0))
    rate = dyn.theoretical_rates(BOUNDS, n, k)["rawlsian"]
    np.testing.assert_allclose(np.diff(mean[0]), rate)
    assert dyn.growth_rate(mean, 50)[0] == pytest.approx(rate)
    assert dyn.late_slope(mean, 0.5)[0] == pytest.approx(rate)


def test_utilitarian_starves_the_rest_in_the_long_run():
    # max-U keeps treating the same top individual; the others sink to g = g_ub.
    n, k = 5, 1
    ones = np.ones((1, n))
    u0 = np.array([[10.0, 0.0, 0.0, 0.0, 0.0]])
    mean = dyn.simulate("util_max_u", u0, 0 * ones, 1e9 * ones, 0 * ones, 1e9 * ones, BOUNDS, k=k,
                        horizon=40, noise=False, rng=np.random.default_rng(0))
    np.testing.assert_allclose(np.diff(mean[0]), dyn.theoretical_rates(BOUNDS, n, k)["utilitarian"])


def test_crossing_time():
    rawls = np.array([1.0, 1.0, 3.0, 1.0, 3.0, 3.0])
    util = np.full(6, 2.0)
    assert crossing_time(rawls, util) == 5.0  # ahead from index 4 on, i.e. t = 5
    assert np.isnan(crossing_time(util, rawls + 10))


def test_engel_incomes_ship_with_statsmodels():
    incomes = load_incomes()
    assert incomes.shape == (235,)
    assert incomes.min() == pytest.approx(377.0584, abs=1e-3)


def test_malformed_income_file_names_file_and_line(tmp_path):
    bad = tmp_path / "incomes.csv"
    bad.write_text("income\n100\n200\nabc\n")
    with pytest.raises(ValueError, match=r"incomes.csv: line 4: income 'abc'"):
        load_incomes(str(bad))
    (tmp_path / "other.csv").write_text("wage\n1\n")
    with pytest.raises(ValueError, match="no column 'income'"):
        load_incomes(str(tmp_path / "other.csv"))


def test_params_reject_unknown_keys_and_bad_budgets():
    with pytest.raises(KeyError, match="welfare.horizonn"):
        parse({"horizonn": 5})
    with pytest.raises(ValueError, match="budget"):
        parse({"individuals": 5, "budget": 5})
    assert parse({}) == Params()


def test_simulation_is_vectorised_over_seeds_consistently():
    # Row s of a batched run equals a run of row s alone when no randomness is drawn.
    rng = np.random.default_rng(3)
    u0 = rng.uniform(-100, 100, (3, 8))
    fs, fi = rng.uniform(0.1, 1, (3, 8)), rng.uniform(0, 10, (3, 8))
    gs, gi = -rng.uniform(0.1, 1, (3, 8)), rng.uniform(0, 10, (3, 8))
    batched = dyn.simulate("util_max_fg", u0, fs, fi, gs, gi, BOUNDS, k=2, horizon=30, noise=False, rng=rng)
    single = dyn.simulate("util_max_fg", u0[1:2], fs[1:2], fi[1:2], gs[1:2], gi[1:2], BOUNDS, k=2, horizon=30,
                          noise=False, rng=rng)
    np.testing.assert_allclose(batched[1], single[0])


def test_flat_returns_control_makes_every_policy_grow_alike(tmp_path):
    # The negative control removes welfare-dependent returns: without noise, every policy's mean
    # welfare grows by exactly (K f_mid - (N - K) g_mid) / N per step, so no policy can lead.
    cfg = {"seeds": 2, "individuals": 12, "budget": 1, "horizon": 20, "short_run": 5, "table_horizons": [5, 20]}
    prepare(cfg=cfg, population=tmp_path / "pop.parquet", control=tmp_path / "ctl.parquet")
    import pandas as pd

    pop, ctl = pd.read_parquet(tmp_path / "pop.parquet"), pd.read_parquet(tmp_path / "ctl.parquet")
    assert (pop.welfare0 == ctl.welfare0).all() and (ctl.f_slope == 0).all() and (ctl.g_slope == 0).all()
    b = parse(cfg).bounds()
    assert flat_returns(pop, b).equals(ctl)
    shape = (2, 12)
    u0 = ctl.pivot(index="seed", columns="individual", values="welfare0").to_numpy()
    curves = [dyn.simulate(pol, u0, np.zeros(shape), np.full(shape, ctl.f_icpt[0]), np.zeros(shape),
                           np.full(shape, ctl.g_icpt[0]), b, k=1, horizon=20, noise=False, rng=np.random.default_rng(0))
              for pol in dyn.POLICIES]
    f_mid, g_mid = np.round((b.f_lb + b.f_ub) / 2), np.round((b.g_lb + b.g_ub) / 2)
    for c in curves:
        np.testing.assert_allclose(np.diff(c, axis=1), (f_mid - 11 * g_mid) / 12)
    with pytest.raises(ValueError, match="no knots within"):  # an unsatisfiable rejection rule names its keys
        prepare(cfg={**cfg, "individuals": 8, "budget": 2}, population=tmp_path / "p.parquet", control=tmp_path / "c.parquet")


def test_regimes_follow_the_theorem_conditions():
    # survival: K f_lb > (N-K) g_ub; with the official f_lb = a N g_ub / K, that is a > 1 - K/N.
    assert dyn.regime(dyn.Bounds.official(50, 1, 10, 60, 4.0, 0.5), 50, 1) == dyn.SURVIVAL
    assert dyn.regime(dyn.Bounds.official(20, 1, 10, 60, 0.96, 0.5), 20, 1) == dyn.SURVIVAL  # 0.96 > 0.95
    assert dyn.regime(dyn.Bounds.official(50, 1, 10, 60, 0.96, 0.5), 50, 1) == dyn.INTERMEDIATE  # 0.96 < 0.98
    ruin = dyn.Bounds.official(50, 1, 20, 60, 0.01, 0.2)  # f = [30, 830], 830 < 49 * 20
    assert dyn.regime(ruin, 50, 1) == dyn.RUIN
    pred = dyn.predicted(ruin, 50, 1)
    assert pred["winner"] == "utilitarian"
    assert pred["rawlsian"] == pytest.approx((30 - 49 * 60) / 50) == pred["random"]
    assert pred["utilitarian"] == pytest.approx((830 - 49 * 60) / 50)
    assert dyn.predicted(dyn.Bounds.official(50, 1, 10, 60, 0.5, 0.5), 50, 1)["winner"] is None


def test_ruin_without_noise_rawlsian_sinks_to_the_lower_plateau():
    # Everyone on the lower plateaus (f = f_lb, g = g_ub at any welfare here): the Rawlsian mean falls at
    # exactly the ruin rate (K f_lb - (N-K) g_ub) / N.
    b = dyn.Bounds(f_lb=1.0, f_ub=4.0, g_lb=1.0, g_ub=3.0)  # ruin: 1 * 4 < 5 * 1
    n, k = 6, 1
    assert dyn.regime(b, n, k) == dyn.RUIN
    u0 = np.full((1, n), -1e6)
    ones = np.ones((1, n))
    mean = dyn.simulate("rawlsian_min_u", u0, 0 * ones, -1e9 * ones, 0 * ones, 1e9 * ones, b, k=k, horizon=40,
                        noise=False, rng=np.random.default_rng(0))
    np.testing.assert_allclose(np.diff(mean[0]), dyn.predicted(b, n, k)["rawlsian"])


def test_binned_incomes_spread_n_over_the_bins():
    p = Params(individuals=10, income_bins=(0.0, 10.0, 20.0, 40.0), income_scale=1.0)
    incomes = np.array([1.0, 2, 3, 4, 5, 11, 12, 13, 14, 30])  # counts 5, 4, 1
    u0 = __import__("papers.welfare.stages", fromlist=["x"]).initial_welfare(p, incomes, 10, np.random.default_rng(0))
    assert u0.size == 10 and np.all(np.diff(u0) >= 0)
    assert np.histogram(u0, bins=p.income_bins)[0].tolist() == [5, 4, 1]
    assert np.all(u0 == np.floor(u0))


def _frame(p, rate_of, rng, flat_rate=200.0, noise=0.5):
    """Per (point, population, policy, seed) rows as the report builds them: every policy at its family's predicted
    rate (rate_of(point info, family)) on the paper's population, at `flat_rate` on the flat one, plus noise."""
    from papers.welfare.claims import MAIN, point_info

    rows = []
    for pt, info in point_info(p).items():
        for pop in ("heterogeneous", "flat"):
            for pol in dyn.POLICIES:
                for s in range(p.seeds):
                    rate = rate_of(info, dyn.family(pol)) if pop == "heterogeneous" else flat_rate
                    slope = rate + rng.normal(0, noise)
                    short = (300.0 if dyn.family(pol) == "utilitarian" else 250.0) if pop == "heterogeneous" else 250.0
                    rows.append({"point": pt, "population": pop, "policy": pol, "seed": s, "long_run_slope": slope,
                                 "slope_early": slope + rng.normal(0, noise), "slope_late": slope,
                                 "rate_short": short + rng.normal(0, 2), "rate_T": slope})
    return pd.DataFrame(rows), MAIN


SURVIVAL_AND_RUIN = ({"individuals": 50, "budget": 1, "decay_bounds": (10.0, 60.0), "return_bound_factors": (4.0, 0.5)},
                     {"individuals": 50, "budget": 1, "decay_bounds": (20.0, 60.0), "return_bound_factors": (0.01, 0.2)},
                     {"individuals": 50, "budget": 1, "decay_bounds": (10.0, 60.0), "return_bound_factors": (0.5, 0.5)})


def _gaps(p, value):
    from papers.welfare.claims import point_info

    return {pop: {pt: np.full(p.seeds, value if pop == "heterogeneous" else 0.0) for pt in point_info(p)}
            for pop in ("heterogeneous", "flat")}


def test_claims_decide_on_planted_outcomes():
    """Every policy planted at its theoretical rate (random at the Rawlsian one, and apart from it by a planted gap at
    the intermediate point): the claims hold, their controls do not, the check passes."""
    from papers.welfare.claims import welfare_claims

    p = Params(seeds=6, sweep_points=SURVIVAL_AND_RUIN)
    spread = {i: dyn.plateau_spread(dyn.Bounds.official(50, 1, *pt["decay_bounds"], *pt["return_bound_factors"]), 50, 1)
              for i, pt in enumerate(SURVIVAL_AND_RUIN)}

    def rate(info, fam):
        if info["winner"] is not None:
            return info[fam]
        return 10.0 + (0.3 * spread[info["point"]] if fam == "rawlsian" else 0.0)  # intermediate: Rawlsian leads random

    data, _ = _frame(p, rate, np.random.default_rng(0))
    crossing = {"rawlsian_policy": "rawlsian_min_u", "crossing_time_per_seed": [120.0] * 6, "crossing_time_of_mean": 120.0}
    claims, checks = welfare_claims(p, data, crossing, _gaps(p, 50.0))
    verdicts = {c.id: (c.verdict, c.control.verdict) for c in claims}
    assert [c.id for c in claims] == ["a", "b", "c", "d", "e", "f"]
    for cid, (verdict, control) in verdicts.items():
        assert verdict == "holds" and control != "holds", (cid, verdict, control, [c.note for c in claims if c.id == cid])
    assert checks[0].id == "flat_rate" and not checks[0].passed  # planted flat rate 200 is not the closed form
    assert all(c.premise_met for c in claims)


def test_unmet_premises_make_long_run_claims_inconclusive():
    """Slopes still drifting (the two halves of the window apart) or no welfare-dependent gain: never 'does not hold'."""
    from papers.welfare.claims import welfare_claims

    p = Params(seeds=6, sweep_points=SURVIVAL_AND_RUIN)
    data, _ = _frame(p, lambda info, fam: info[fam] if info["winner"] else 10.0, np.random.default_rng(1))
    drifting = data.assign(slope_early=data.slope_late + 40.0)  # 40 welfare units of drift: far above 5% of the spread
    crossing = {"rawlsian_policy": "rawlsian_min_u", "crossing_time_per_seed": [120.0] * 6, "crossing_time_of_mean": 120.0}
    claims, _ = welfare_claims(p, drifting, crossing, _gaps(p, 0.0))
    by_id = {c.id: c for c in claims}
    for cid in ("a", "b", "c", "d", "e", "f"):
        assert by_id[cid].verdict == "inconclusive" and "premise not met" in by_id[cid].note, cid


def test_one_step_gain_gap_and_settling():
    u0 = np.array([[1.0, 5.0, 9.0]])
    # f = U + 10 clipped to [5, 20], g = 4 - U/2 clipped to [1, 3]: f + g = [14, 16, 20]; greedy treats U = 9 (20),
    # the Rawlsian policy U = 1 (14)
    gap = dyn.one_step_gain_gap(u0, np.ones((1, 3)), np.full((1, 3), 10.0), -0.5 * np.ones((1, 3)),
                                np.full((1, 3), 4.0), BOUNDS, 1)
    assert gap.tolist() == [6.0]
    line = np.arange(101.0)[None, :] * 3.0
    early, late = dyn.settling(line, 0.5)
    assert early[0] == pytest.approx(3.0) and late[0] == pytest.approx(3.0)
    bent = np.concatenate([np.arange(76.0) * 1.0, 75 + np.arange(1, 26.0) * 5.0])[None, :]  # slope 1, then 5
    early, late = dyn.settling(bent, 0.5)
    assert early[0] == pytest.approx(1.0) and late[0] == pytest.approx(5.0)
    b = dyn.Bounds.official(50, 1, 10, 60, 4.0, 0.5)
    assert dyn.plateau_spread(b, 50, 1) == pytest.approx((1750 + 49 * 50) / 50)
