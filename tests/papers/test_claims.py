"""papers.common.claims: the four-state decision, intervals against closed forms, controls, the file."""
import json

import jsonschema
import numpy as np
import pytest
from scipy import stats

from papers.common import claims as C
from papers.common.claims import (FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, Claim, Control, Evidence, all_of,
                                  bootstrap_interval, decide, mean_test, paired_test, proportion_test,
                                  unpaired_test, validate_claims, write_claims)


def ev(lo, hi, threshold=0.0, direction=">", n=5):
    return Evidence((lo + hi) / 2, (lo, hi), n, "test", threshold, direction)


NO_CONTROL = Control("none in this test")


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
    assert Claim("a", "s", "p", 1, "c", strong, Control("ctl", ev(-0.1, 0.3))).verdict == HOLDS
    assert Claim("a", "s", "p", 1, "c", strong, Control("ctl", ev(-0.4, -0.1))).verdict == HOLDS
    vacuous = Claim("a", "s", "p", 1, "c", strong, Control("ctl", ev(0.1, 0.3)))
    assert vacuous.verdict == INCONCLUSIVE and "negative control" in vacuous.note
    # a failing claim stays failing whatever its control does
    assert Claim("a", "s", "p", 1, "c", ev(-0.4, -0.1), Control("ctl", ev(0.1, 0.3))).verdict == FAILS


def test_fewer_than_three_replicates_is_inconclusive():
    c = Claim("a", "s", "p", 1, "c", ev(0.2, 0.4, n=2), NO_CONTROL)
    assert c.verdict == INCONCLUSIVE and "2 replicate(s)" in c.note
    assert Claim("a", "s", "p", 1, "c", ev(0.2, 0.4, n=3), NO_CONTROL).verdict == HOLDS


def test_conjunction_and_not_measured():
    c = Claim("a", "s", "p", 1, "c", [ev(0.2, 0.4), ev(-0.4, -0.2)], NO_CONTROL)
    assert c.verdict == FAILS and "misses" in c.note
    nm = Claim.not_measured("k", "kernel is faster", "-35%", "runtime ratio < 1", "needs CUDA; this run is on a CPU")
    assert nm.verdict == NOT_MEASURED and nm.note.startswith("needs CUDA")
    with pytest.raises(ValueError, match="say why"):
        Claim("a", "s", "p", 1, "c", None, NO_CONTROL)
    with pytest.raises(TypeError, match="Control"):
        Claim("a", "s", "p", 1, "c", ev(0.2, 0.4), "a control")


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
        Claim("a", "x rises", "up", {"x": float("nan")}, "x > 0", ev(0.2, 0.4), Control("flat", ev(-0.1, 0.1))),
        Claim("b", "y falls", "down", 1.0, "y < 0", [ev(-0.4, -0.2, direction="<"), ev(-0.1, 0.3)], NO_CONTROL),
        Claim.not_measured("c", "gpu", "fast", "ratio < 1", "needs CUDA"),
    ]
    data = write_claims(claims, tmp_path / "claims.json", paper="demo", scale="smoke")
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
        write_claims(claims + claims[:1], tmp_path / "x.json", paper="demo", scale="smoke")
