"""papers.common.claims: the four-state decision, intervals against closed forms, controls, the file."""
import json

import jsonschema
import numpy as np
import pytest
from scipy import stats

from papers.common import claims as C
from papers.common.claims import (FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, Check, Claim, Control, Evidence,
                                  PositiveControl, Premise, Scope, all_of, bootstrap_interval, convention, decide,
                                  derived, from_paper, mean_test, paired_test, proportion_test, unpaired_test,
                                  validate_claims, write_claims)


def ev(lo, hi, threshold=0.0, direction=">", n=5):
    return Evidence((lo + hi) / 2, (lo, hi), n, "test", threshold, direction)


NO_CONTROL = Control("none in this test", kind="null")
SIGN = convention("a sign: the effect is positive")
SCOPE = Scope("analogue", "a demo paper")


def Claim(*args, **kwargs):  # noqa: N802 (the tests' claims all share one threshold source unless they say)
    kwargs.setdefault("threshold_source", SIGN)
    return C.Claim(*args, **kwargs)


def Ctl(description, evidence=None, kind="null"):  # noqa: N802
    return Control(description, evidence, kind=kind)


# ---- the decision at each boundary ----------------------------------------------------------------
@pytest.mark.parametrize("interval, direction, expected", [
    ((0.1, 0.5), ">", HOLDS),            # whole interval above
    ((0.0, 0.5), ">", INCONCLUSIVE),     # touches the threshold from above: not cleared
    ((-0.1, 0.5), ">", INCONCLUSIVE),    # straddles
    ((-0.5, 0.0), ">", FAILS),           # whole interval at or below: missed
    ((-0.5, -0.1), ">", FAILS),
    ((-0.5, -0.1), "<", HOLDS),
    ((-0.5, 0.0), "<", INCONCLUSIVE),    # touches from below: not cleared
    ((0.0, 0.5), "<", FAILS),
    ((-0.1, 0.1), "<", INCONCLUSIVE),
    ((float("nan"), 1.0), ">", NOT_MEASURED),
])
def test_decide_boundaries(interval, direction, expected):
    assert decide(interval, 0.0, direction) == expected


def test_decide_rejects_bad_input():
    with pytest.raises(ValueError, match="direction"):
        decide((0, 1), 0, ">=")
    with pytest.raises(ValueError, match="low > high"):
        decide((1, 0), 0, ">")


def test_all_of_is_a_conjunction():
    assert all_of([HOLDS, HOLDS]) == HOLDS
    assert all_of([HOLDS, INCONCLUSIVE]) == INCONCLUSIVE
    assert all_of([HOLDS, NOT_MEASURED, INCONCLUSIVE]) == NOT_MEASURED
    assert all_of([INCONCLUSIVE, FAILS, HOLDS]) == FAILS


# ---- claims and their controls --------------------------------------------------------------------
def test_claim_holds_only_when_its_control_does_not():
    strong = ev(0.2, 0.4)
    assert Claim("a", "s", "p", 1, "c", strong, Ctl("ctl", ev(-0.1, 0.3))).verdict == HOLDS
    assert Claim("a", "s", "p", 1, "c", strong, Ctl("ctl", ev(-0.4, -0.1))).verdict == HOLDS
    vacuous = Claim("a", "s", "p", 1, "c", strong, Ctl("ctl", ev(0.1, 0.3)))
    assert vacuous.verdict == INCONCLUSIVE and "negative control" in vacuous.note
    # a failing claim stays failing whatever its control does
    assert Claim("a", "s", "p", 1, "c", ev(-0.4, -0.1), Ctl("ctl", ev(0.1, 0.3))).verdict == FAILS


def test_fewer_than_three_replicates_is_inconclusive():
    c = Claim("a", "s", "p", 1, "c", ev(0.2, 0.4, n=2), NO_CONTROL)
    assert c.verdict == INCONCLUSIVE and "2 replicate(s)" in c.note
    assert Claim("a", "s", "p", 1, "c", ev(0.2, 0.4, n=3), NO_CONTROL).verdict == HOLDS


def test_conjunction_and_not_measured():
    c = Claim("a", "s", "p", 1, "c", [ev(0.2, 0.4), ev(-0.4, -0.2)], NO_CONTROL)
    assert c.verdict == FAILS and "misses" in c.note
    nm = C.Claim.not_measured("k", "kernel is faster", "-35%", "runtime ratio < 1", "needs CUDA; this run is on a CPU",
                              threshold_source=from_paper("-35% runtime, Table 4"))
    assert nm.verdict == NOT_MEASURED and nm.note.startswith("needs CUDA")
    with pytest.raises(ValueError, match="say why"):
        Claim("a", "s", "p", 1, "c", None, NO_CONTROL)
    with pytest.raises(TypeError, match="Control"):
        Claim("a", "s", "p", 1, "c", ev(0.2, 0.4), "a control")
    with pytest.raises(TypeError, match="kind"):
        Control("a control without a kind", ev(0.2, 0.4))  # noqa


def test_a_verdict_cannot_be_passed_in():
    with pytest.raises(TypeError):
        Claim("a", "s", "p", 1, "c", ev(0.2, 0.4), NO_CONTROL, verdict=HOLDS)  # noqa


# ---- intervals against closed forms ---------------------------------------------------------------
def test_mean_test_is_the_student_t_interval():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    e = mean_test(x, threshold=0, direction=">")
    half = stats.t.ppf(0.975, 3) * x.std(ddof=1) / 2
    assert e.effect == pytest.approx(3.5) and e.interval == pytest.approx((3.5 - half, 3.5 + half))
    assert e.replicates == 4 and e.verdict == INCONCLUSIVE  # sd 2.6 over 4 seeds: [-0.71, 7.71] straddles 0
    lo, hi = stats.t.interval(0.95, 3, loc=x.mean(), scale=stats.sem(x))
    assert e.interval == pytest.approx((lo, hi))


def test_paired_and_unpaired_differ_as_they_should():
    rng = np.random.default_rng(0)
    seed_effect = rng.normal(0, 5, 8)  # a large per-seed effect that both arms share
    a, b = seed_effect + 1.0 + rng.normal(0, 0.1, 8), seed_effect + rng.normal(0, 0.1, 8)
    p = paired_test(a, b)
    u = unpaired_test(a, b)
    assert p.verdict == HOLDS and u.verdict == INCONCLUSIVE  # pairing removes the shared seed effect
    res = stats.ttest_ind(a, b, equal_var=False)
    ci = res.confidence_interval(0.95)
    assert u.interval == pytest.approx((ci.low, ci.high))
    with pytest.raises(ValueError, match="replicates"):
        paired_test([1, 2, 3], [1, 2])


def test_bootstrap_is_fixed_by_its_seed_and_covers_the_mean():
    x = np.random.default_rng(1).normal(2.0, 1.0, 40)
    one = bootstrap_interval(np.mean, x)
    assert one == bootstrap_interval(np.mean, x)  # reruns give the same interval
    m, lo, hi = one
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size)
    assert lo == pytest.approx(m - half, abs=0.1) and hi == pytest.approx(m + half, abs=0.1)
    ratio = C.bootstrap_test(lambda a, b: a.mean() / b.mean(), x, x + 1, threshold=1, direction="<")
    assert ratio.verdict == HOLDS and ratio.replicates == 40


def test_proportion_matches_clopper_pearson():
    e = proportion_test(98, 106, threshold=0.7)
    ci = stats.binomtest(98, 106).proportion_ci(0.95, method="exact")
    assert e.interval == pytest.approx((ci.low, ci.high)) and e.verdict == HOLDS
    assert proportion_test(0, 10, threshold=0.5).interval[0] == 0.0
    assert proportion_test(3, 3, threshold=0.5).verdict == INCONCLUSIVE  # [0.29, 1]: too few to tell


# ---- the file ---------------------------------------------------------------------------------------
def test_written_claims_validate_and_carry_evidence(tmp_path):
    claims = [
        Claim("a", "x rises", "up", {"x": float("nan")}, "x > 0", ev(0.2, 0.4), Ctl("flat", ev(-0.1, 0.1))),
        Claim("b", "y falls", "down", 1.0, "y < 0", [ev(-0.4, -0.2, direction="<"), ev(-0.1, 0.3)], NO_CONTROL),
        C.Claim.not_measured("c", "gpu", "fast", "ratio < 1", "needs CUDA", threshold_source=convention("ratio 1")),
    ]
    data = write_claims(claims, tmp_path / "claims.json", paper="demo", scale="smoke", scope=SCOPE)
    written = json.loads((tmp_path / "claims.json").read_text())
    assert [c["verdict"] for c in written["claims"]] == [HOLDS, INCONCLUSIVE, NOT_MEASURED]
    assert written["claims"][0]["measured"] == {"x": None}
    assert written["claims"][0]["control"]["verdict"] == INCONCLUSIVE
    assert len(written["claims"][1]["evidence"]["parts"]) == 2 and data["claims"][0]["scale"] == "smoke"
    for broken in ({"verdict": True}, {"verdict": "holds", "criterion": None}):
        bad = json.loads(json.dumps(written))
        bad["claims"][0].update(broken)
        with pytest.raises(jsonschema.ValidationError):
            validate_claims(bad)
    bad = json.loads(json.dumps(written))
    del bad["claims"][0]["evidence"]  # a measured claim without evidence
    with pytest.raises(jsonschema.ValidationError):
        validate_claims(bad)
    with pytest.raises(ValueError, match="duplicate"):
        write_claims(claims + claims[:1], tmp_path / "x.json", paper="demo", scale="smoke", scope=SCOPE)


# ---- verdicts about the paper: premise gates, positive controls, checks, threshold sources ---------------------
LEARNED = Premise.at_least("held-out accuracy (the model learned the task)", 0.97, 0.9, what="the accuracy gate")
NOT_LEARNED = Premise.at_least("held-out accuracy (the model learned the task)", 0.31, 0.9, what="the accuracy gate")


@pytest.mark.parametrize("interval, raw", [((-0.5, -0.1), FAILS), ((0.2, 0.4), HOLDS)])
def test_an_unmet_premise_makes_any_decision_inconclusive(interval, raw):
    met = Claim("a", "s", "p", 1, "c", ev(*interval), NO_CONTROL, premise=[LEARNED])
    assert met.verdict == raw and met.premise_met
    unmet = Claim("a", "s", "p", 1, "c", ev(*interval), NO_CONTROL, premise=[LEARNED, NOT_LEARNED])
    assert unmet.verdict == INCONCLUSIVE and not unmet.premise_met
    assert "premise not met: held-out accuracy" in unmet.note and "0.31" in unmet.note
    # a setting without the premise never reads "does not hold", whatever the control says
    assert Claim("a", "s", "p", 1, "c", ev(-0.5, -0.1), Ctl("ctl", ev(-0.5, -0.1)), premise=[NOT_LEARNED]).verdict \
        == INCONCLUSIVE
    # not measured stays not measured
    nm = C.Claim.not_measured("a", "s", "p", "c", "needs a GPU", threshold_source=SIGN, premise=[NOT_LEARNED])
    assert nm.verdict == NOT_MEASURED


def test_premise_gates_compute_met_from_the_measurement():
    assert Premise.at_least("x", 0.9, 0.9).met and not Premise.at_least("x", float("nan"), 0.0).met
    assert Premise.at_most("spread", 0.01, 0.05).met and not Premise.at_most("spread", 0.2, 0.05).met
    assert Premise.from_evidence("W1 grows", ev(0.1, 0.3)).met
    assert not Premise.from_evidence("W1 grows", ev(-0.1, 0.3)).met
    with pytest.raises(ValueError, match="requirement"):
        Premise("x", 1.0, "", True)


@pytest.mark.parametrize("interval, raw", [((-0.5, -0.1), FAILS), ((0.2, 0.4), HOLDS)])
def test_a_failed_positive_control_makes_any_decision_inconclusive(interval, raw):
    planted_found = PositiveControl("effect planted", ev(0.3, 0.9))
    assert Claim("a", "s", "p", 1, "c", ev(*interval), NO_CONTROL, positive_control=planted_found).verdict == raw
    for blind, reads in ((PositiveControl("effect planted", ev(-0.3, 0.9)), "is inconclusive"),
                         (PositiveControl("effect planted", ev(-0.9, -0.3)), "does not hold"),
                         (PositiveControl("effect planted, not run"), "is not measured")):
        c = Claim("a", "s", "p", 1, "c", ev(*interval), NO_CONTROL, positive_control=blind)
        assert c.verdict == INCONCLUSIVE and "does not find the effect where it is planted" in c.note
        assert f"the positive control {reads}:" in c.note  # a sentence, not "is does not hold"


def test_checks_are_kept_apart_from_claims(tmp_path):
    claims = [Claim("a", "x rises", "up", 1.0, "x > 0", ev(0.2, 0.4), NO_CONTROL, premise=[LEARNED])]
    checks = [Check.at_most("params", "the policy has under 2M parameters", 6.8e5, 2e6, what="the paper's count"),
              Check.at_most("exact", "the closed form equals the recursion", 3e-3, 1e-6)]
    data = write_claims(claims, tmp_path / "claims.json", paper="demo", scale="smoke", scope=SCOPE, checks=checks)
    assert [c["id"] for c in data["claims"]] == ["a"]  # a check is not counted as a claim
    assert [(k["id"], k["passed"]) for k in data["checks"]] == [("params", True), ("exact", False)]
    assert C.count_states(c["verdict"] for c in data["claims"])[HOLDS] == 1
    with pytest.raises(ValueError, match="duplicate"):
        write_claims(claims, tmp_path / "x.json", paper="demo", scale="smoke", scope=SCOPE,
                     checks=[Check.at_most("a", "same id as a claim", 0.0, 1.0)])


def test_the_schema_rejects_a_claim_without_a_threshold_source_or_scope(tmp_path):
    claims = [Claim("a", "x rises", "up", 1.0, "x > 0", ev(0.2, 0.4), NO_CONTROL, premise=[LEARNED])]
    written = write_claims(claims, tmp_path / "claims.json", paper="demo", scale="smoke", scope=SCOPE)
    validate_claims(written)
    for key, drop in (("threshold_source", lambda d: d["claims"][0].pop("threshold_source")),
                      ("threshold kind", lambda d: d["claims"][0]["threshold_source"].update(kind="ours")),
                      ("scope", lambda d: d.pop("scope")),
                      ("control kind", lambda d: d["claims"][0]["control"].pop("kind")),
                      ("premise", lambda d: d["claims"][0].pop("premise"))):
        bad = json.loads(json.dumps(written))
        drop(bad)
        with pytest.raises(jsonschema.ValidationError):
            validate_claims(bad)
    # and the schema itself refuses a decided claim whose premise is unmet or whose positive control failed
    bad = json.loads(json.dumps(written))
    bad["claims"][0]["premise"][0]["met"] = False
    with pytest.raises(jsonschema.ValidationError):
        validate_claims(bad)
    bad = json.loads(json.dumps(written))
    bad["claims"][0]["positive_control"] = {"description": "planted", "verdict": INCONCLUSIVE}
    with pytest.raises(jsonschema.ValidationError):
        validate_claims(bad)
    with pytest.raises(TypeError, match="threshold_source"):
        C.Claim("a", "s", "p", 1, "c", ev(0.2, 0.4), NO_CONTROL)  # noqa
    with pytest.raises(ValueError, match="kind"):
        C.ThresholdSource("ours", "a number we liked")
    with pytest.raises(TypeError, match="Scope"):
        write_claims(claims, tmp_path / "x.json", paper="demo", scale="smoke", scope="analogue")


def test_threshold_sources_and_power():
    assert from_paper("98 of 106 pairs, Sec. 4").kind == "paper" and derived("the random arm").kind == "derived"
    c = Claim("a", "s", "p", 1, "c", ev(0.1, 0.5), NO_CONTROL, paper_effect=0.6)
    pw = c.power()
    assert pw["half_width"] == pytest.approx(0.2) and pw["resolves_paper_effect"]  # 0.2 < |0.6 - 0|
    assert not Claim("a", "s", "p", 1, "c", ev(-1.0, 1.0), NO_CONTROL, paper_effect=0.6).power()["resolves_paper_effect"]


def test_identical_replicates_are_said():
    same = mean_test([0.05, 0.05, 0.05], threshold=0.1, direction="<")
    assert same.identical and same.to_json()["identical_replicates"] is True
    c = Claim("a", "s", "p", 1, "c", same, NO_CONTROL)
    assert "identical values" in c.note
    assert not mean_test([0.05, 0.06, 0.05], threshold=0.1, direction="<").identical


def test_forest_plots_draw_every_claim(tmp_path):
    from papers.common.forest import forest_plot, standardised, summary_forest_plot

    claims = [Claim("a", "x", "p", 1, "c", ev(0.2, 0.4), Ctl("ctl", ev(-0.3, 0.1), kind="ablation"),
                    positive_control=PositiveControl("planted", ev(0.5, 0.9))),
              C.Claim.not_measured("b", "gpu", "fast", "ratio < 1", "needs CUDA", threshold_source=SIGN)]
    forest_plot(claims, tmp_path / "f.png")
    data = write_claims(claims, tmp_path / "claims.json", paper="demo", scale="smoke", scope=SCOPE)
    summary_forest_plot([{"paper": "demo", **c} for c in data["claims"]], tmp_path / "s.png")
    assert (tmp_path / "f.png").stat().st_size > 0 and (tmp_path / "s.png").stat().st_size > 0
    # the summary's units: distance from the threshold in half-widths, positive on the claimed side
    m, lo, hi = standardised({"effect": 0.3, "interval": [0.2, 0.4], "threshold": 0.0, "direction": ">"})
    assert (m, lo, hi) == pytest.approx((3.0, 2.0, 4.0))
    m, lo, hi = standardised({"effect": 0.3, "interval": [0.2, 0.4], "threshold": 0.0, "direction": "<"})
    assert (m, lo, hi) == pytest.approx((-3.0, -4.0, -2.0))
