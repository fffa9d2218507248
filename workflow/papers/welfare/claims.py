"""The claims of P2 welfare (Wu, Abebe, Hardt and Stoica, ICLR 2025), decided on per-seed intervals.

Every point of the run (the main point of Fig. 1 and each point of the sweep over the theorems' conditions,
Sec. 3) simulates every policy on the same seeds' populations, so policies are compared paired by seed; each
seed draws its own population (initial welfare and the knots of f and g), so seeds are independent replicates
of what the claims generalise over.

* (a) a utilitarian policy leads in the short run, at the main point and at every sweep point (Fig. 1);
* (b) the Rawlsian policy leads in the long run at the main point, a survival point (Sec. 3, Fig. 1);
* (c) the long-run rates match the theory's, at the main point and at every theorem point (Sec. 3);
* (d) the theorems' predicted winner wins at every theorem point (Sec. 3: survival Rawlsian, ruin utilitarian);
* (e) random treatment reaches the Rawlsian rate wherever a theorem applies (derived from Sec. 3's drift);
* (f) where no theorem applies, Rawlsian and random treatment part (the reverse side of (e)).

Premise gates (measured; unmet: inconclusive, never "does not hold"): whom a policy treats changes the
immediate gain (a); the main point satisfies the survival condition (b); every long-run slope a claim reads has
settled (b-f); the sweep covers the regimes a claim speaks of (d, f). Negative controls: the flat-returns
population (the paper's mechanism, welfare-dependent returns, removed and everything else kept: an ablation) for
(a), (b), (d); a wrong formula for (c); the best utilitarian policy in random's place for (e); the theorem points
for (f). The check (not a claim): on the flat population every policy grows at the closed-form flat rate.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.claims import (Check, Claim, Control, Premise, bootstrap_test, convention, mean_test, paired_test)
from papers.welfare import dynamics as dyn

HETEROGENEOUS, FLAT = "heterogeneous", "flat"  # the paper's population and its ablation (stages.POPULATIONS)
MAIN = "main"  # the main point's label among the sweep's integer points
# f and g are rounded to integers (official code), so the smallest one-step gain gap there can be is 1.
SMALLEST_GAIN_GAP = 1.0

FLAT_DESC = ("the flat-returns ablation: the same people, bounds' midpoints and noise, with f and g flat in welfare "
             "(the paper's mechanism, returns that depend on welfare, removed; everything else kept)")
NO_POSITIVE = ("the comparison is a direct difference of simulated outcomes (growth rates, least-squares slopes of "
               "the simulated mean welfare), not an analysis that could be blind to an effect; "
               "tests/papers/test_welfare.py checks the slope and the rates on noise-free runs with known answers")


# ---- the data every claim reads ------------------------------------------------------------------
def point_frame(metrics: pd.DataFrame, p) -> pd.DataFrame:
    """The main point's per-(population, policy, seed) rows in the sweep's columns (point = MAIN)."""
    return metrics.rename(columns={f"rate_t{p.short_run}": "rate_short", f"rate_t{p.horizon}": "rate_T"}).assign(
        point=MAIN)[["point", "population", "policy", "seed", "long_run_slope", "slope_early", "slope_late",
                     "rate_short", "rate_T"]]


def point_info(p) -> dict:
    """Every point's N, K, bounds, regime, predicted rates and plateau spread, keyed by MAIN and the sweep index."""
    out = {}
    b = p.bounds()
    out[MAIN] = {"point": MAIN, "individuals": p.individuals, "budget": p.budget, "bounds": b,
                 **dyn.predicted(b, p.individuals, p.budget), "horizon": p.horizon}
    for pt in p.sweep():
        out[pt["point"]] = {**pt, "horizon": p.sweep_horizon}
    for info in out.values():
        info["spread"] = dyn.plateau_spread(info["bounds"], info["individuals"], info["budget"])
        info["label"] = (f"main point (N={info['individuals']}, K={info['budget']})" if info["point"] == MAIN else
                         f"point {info['point']} ({info['regime']}, N={info['individuals']}, K={info['budget']})")
    return out


def per_seed(df: pd.DataFrame, pol: str, column: str) -> np.ndarray:
    return df[df.policy == pol].sort_values("seed")[column].to_numpy()


def best_utilitarian(p, df: pd.DataFrame, column: str) -> str:
    """The utilitarian variant with the best seed mean of `column` (chosen in each population separately, so that
    the control pays the same selection effect, the best of three noisy arms, as the claim)."""
    return max((pol for pol in dyn.UTILITARIAN if pol in p.policies), key=lambda pol: per_seed(df, pol, column).mean())


def settle_premise(p, data: pd.DataFrame, info: dict, points: list, what: str) -> Premise:
    """The long-run slopes a claim reads have settled: over every policy at `points` (paper's population), the
    seed mean of |slope over the later half of the long-run window - over the earlier half| / plateau spread."""
    worst, where = 0.0, ""
    for pt in points:
        d = data[(data.point == pt) & (data.population == HETEROGENEOUS)]
        for pol in p.policies:
            drift = float(np.mean(np.abs(per_seed(d, pol, "slope_late") - per_seed(d, pol, "slope_early"))) / info[pt]["spread"])
            if not drift <= worst:
                worst, where = drift, f"{pol} at {info[pt]['label']}"
    return Premise.at_most(f"long-run slopes settled ({what}; largest drift: {where})", worst, p.settle_tolerance,
                           what="settle_tolerance x the plateau spread, between the two halves of the long-run window")


# ---- (a) and (b): Fig. 1 --------------------------------------------------------------------------------
def short_run_claim(p, data: pd.DataFrame, info: dict, gain_gap: dict) -> Claim:
    """(a) at the main point and every sweep point: best utilitarian - rawlsian_min_u growth rate at t = short_run."""
    rawls = "rawlsian_min_u"
    ev, ctl, best = [], [], {}
    for pt in info:
        d = data[(data.point == pt) & (data.population == HETEROGENEOUS)]
        fl = data[(data.point == pt) & (data.population == FLAT)]
        u, u_fl = best_utilitarian(p, d, "rate_short"), best_utilitarian(p, fl, "rate_short")
        best[str(pt)] = u
        ev.append(paired_test(per_seed(d, u, "rate_short"), per_seed(d, rawls, "rate_short"),
                              name=f"{info[pt]['label']}: {u} - {rawls} at t = {p.short_run}"))
        ctl.append(paired_test(per_seed(fl, u_fl, "rate_short"), per_seed(fl, rawls, "rate_short"),
                               name=f"{info[pt]['label']}, flat: {u_fl} - {rawls} at t = {p.short_run}"))
    main = ev[0]
    gaps = {pt: float(np.mean(g)) for pt, g in gain_gap[HETEROGENEOUS].items()}
    low = min(gaps, key=gaps.get)
    return Claim(
        "a", "A utilitarian policy leads in the short run, at every point the run covers.",
        "utilitarian policies dominate in the short run (Fig. 1)",
        {"t": p.short_run, "main_point_lead": main.effect, "points": len(ev),
         "points_leading": sum(e.verdict == "holds" for e in ev), "best_utilitarian": best},
        f"at the main point and at each of the {len(ev) - 1} sweep points, the {p.seeds}-seed paired 95% interval of "
        f"(best utilitarian - {rawls}) growth rate at t = {p.short_run} lies above 0 (the best of the utilitarian "
        "variants by seed mean, at each point)",
        ev, Control(f"{FLAT_DESC}, at every point: whom a policy treats cannot change the mean welfare", ctl,
                    kind="ablation"),
        threshold_source=convention("a sign: the paper claims a short-run lead of any size (Fig. 1)"),
        premise=[Premise.at_least(
            f"whom a policy treats changes the immediate gain: seed-mean one-step gain of the greedy choice minus the "
            f"Rawlsian one at t = 0, smallest over the points (at {info[low]['label']}; flat population: "
            f"{max(float(np.max(np.abs(g))) for g in gain_gap[FLAT].values()):.4g})", gaps[low], SMALLEST_GAIN_GAP,
            what="f and g are rounded to integers: 1 is the smallest gap there is")],
        no_positive_control=NO_POSITIVE)


def long_run_claim(p, data: pd.DataFrame, info: dict, crossing: dict) -> Claim:
    """(b) at the main point: rawlsian_min_u - best utilitarian, long-run slope and growth rate at T."""
    rawls = crossing["rawlsian_policy"]
    pt = info[MAIN]
    d = data[(data.point == MAIN) & (data.population == HETEROGENEOUS)]
    fl = data[(data.point == MAIN) & (data.population == FLAT)]

    def lead(df):
        u = best_utilitarian(p, df, "rate_T")
        return u, [paired_test(per_seed(df, rawls, "long_run_slope"), per_seed(df, u, "long_run_slope"),
                               name=f"{rawls} - {u}, long-run slope"),
                   paired_test(per_seed(df, rawls, "rate_T"), per_seed(df, u, "rate_T"),
                               name=f"{rawls} - {u}, rate at t = T = {p.horizon}")]

    u, ev = lead(d)
    u_fl, ctl = lead(fl)
    b, n, k = pt["bounds"], pt["individuals"], pt["budget"]
    margin = k * b.f_lb / ((n - k) * b.g_ub)
    cross = np.asarray(crossing["crossing_time_per_seed"], dtype=float)
    theory_lead = pt["rawlsian"] - pt["utilitarian"]
    return Claim(
        "b", "The Rawlsian policy leads in the long run, after a crossing time (at the main point, a survival point).",
        "Rawlsian policies outperform utilitarian ones in the long run under survival (Sec. 3, Fig. 1)",
        {"t": p.horizon, "rawlsian_rate": float(per_seed(d, rawls, "rate_T").mean()), "best_utilitarian": u,
         "utilitarian_rate": float(per_seed(d, u, "rate_T").mean()), "theory_lead": theory_lead,
         "crossing_time_mean_curve": crossing["crossing_time_of_mean"],
         "crossing_time_seed_median": float(np.nanmedian(cross)) if np.isfinite(cross).any() else "never",
         "seeds_crossing": int(np.isfinite(cross).sum())},
        f"the {p.seeds}-seed paired 95% intervals of ({rawls} - best utilitarian) lie above 0 for both the long-run "
        f"slope (the last {p.long_run_window:.0%} of T) and the growth rate at t = T; with claim (a) this implies a "
        "crossing",
        ev, Control(f"{FLAT_DESC} (best utilitarian there: {u_fl})", ctl, kind="ablation"),
        threshold_source=convention("a sign: the paper claims a long-run lead of any size"),
        premise=[Premise(f"the main point satisfies the survival condition K f_lb > (N-K) g_ub (the theorem's "
                         "assumption): K f_lb / ((N-K) g_ub)", margin, "> 1 (Sec. 3)", bool(margin > 1)),
                 settle_premise(p, data, info, [MAIN], "main point")],
        no_positive_control=NO_POSITIVE, paper_effect=theory_lead)


# ---- (c): the long-run rates -------------------------------------------------------------------------
def rates_claim(p, data: pd.DataFrame, info: dict) -> Claim:
    """(c) every Rawlsian and utilitarian policy's long-run slope against its regime's rate, at the main point and
    every theorem point; control: the other family's rate (the wrong formula)."""
    kind = {**{pol: "rawlsian" for pol in dyn.RAWLSIAN}, **{pol: "utilitarian" for pol in dyn.UTILITARIAN}}
    checked = [pol for pol in p.policies if pol in kind]
    wrong = {"rawlsian": "utilitarian", "utilitarian": "rawlsian"}
    covered = [pt for pt in info if info[pt]["winner"] is not None]
    ev, ctl, missed = [], [], []
    for pt in covered:
        d = data[(data.point == pt) & (data.population == HETEROGENEOUS)]
        for pol in checked:
            slope = per_seed(d, pol, "long_run_slope")
            tag = f"{info[pt]['label']}: {pol}"
            ev.append(mean_test(np.abs(slope / info[pt][kind[pol]] - 1), threshold=p.rate_tolerance, direction="<",
                                what="seeds", name=f"{tag} vs the {kind[pol]} rate"))
            if ev[-1].verdict != "holds":
                missed.append(f"{tag} settles at {slope.mean():.4g} against the formula's {info[pt][kind[pol]]:.4g}"
                              )
            ctl.append(mean_test(np.abs(slope / info[pt][wrong[kind[pol]]] - 1), threshold=p.rate_tolerance,
                                 direction="<", what="seeds", name=f"{tag} vs the {wrong[kind[pol]]} rate"))
    main = info[MAIN]
    d = data[(data.point == MAIN) & (data.population == HETEROGENEOUS)]
    return Claim(
        "c", f"Long-run growth rates match the theory within {p.rate_tolerance:.0%}: (K f_ub - (N-K) g_lb)/N for "
             "Rawlsian policies under survival ((K f_lb - (N-K) g_ub)/N under ruin), (K f_ub - (N-K) g_ub)/N for "
             "utilitarian ones.",
        f"Rawlsian {main['rawlsian']:.4g}, utilitarian {main['utilitarian']:.4g} at the main point (Sec. 3)",
        {**{f"{pol}_slope": float(per_seed(d, pol, "long_run_slope").mean()) for pol in checked},
         "rawlsian_theory": main["rawlsian"], "utilitarian_theory": main["utilitarian"], "points": len(covered),
         "parts_within_tolerance": sum(e.verdict == "holds" for e in ev), "parts": len(ev)},
        f"for every Rawlsian and utilitarian policy (all three utilitarian variants), at the main point and at every "
        f"theorem-covered sweep point ({len(covered) - 1}), the {p.seeds}-seed 95% interval of the relative error "
        f"|long-run slope / theory - 1| lies below rate_tolerance = {p.rate_tolerance}",
        ev, Control("the wrong formula: each policy's slope against the other family's theoretical rate", ctl,
                    kind="null"),
        threshold_source=convention(f"a numerical tolerance of {p.rate_tolerance:.0%}: the theory is an asymptote "
                                    "(T -> infinity); the two formulas differ by more (the control)"),
        premise=[settle_premise(p, data, info, covered, "main point and theorem points")],
        no_positive_control=NO_POSITIVE,
        note="near-mechanical once individuals sit on the clip bounds of f and g (the mean step is then the formula "
             "plus zero-mean noise); what the data can refute is which plateau each policy's population ends on, "
             "which the regime decides (the Rawlsian formula switches between survival and ruin points)"
             + "".join(f"; {m}" for m in missed))


# ---- (d), (e), (f): the sweep over the theorems' conditions -------------------------------------------
def winner_claim(p, data: pd.DataFrame, info: dict) -> Claim | None:
    """(d) the predicted winner minus the other at every theorem-covered sweep point (long-run slope)."""
    covered = [pt for pt in info if pt != MAIN and info[pt]["winner"] is not None]
    if not covered:
        return None
    ev, ctl = [], []
    for pt in covered:
        winner = info[pt]["winner"]

        def lead(df, pop):
            r = per_seed(df, "rawlsian_min_u", "long_run_slope")
            u = per_seed(df, best_utilitarian(p, df, "long_run_slope"), "long_run_slope")
            a, b = (r, u) if winner == "rawlsian" else (u, r)
            return paired_test(a, b, name=f"{info[pt]['label']}{pop}: {winner} - other")

        ev.append(lead(data[(data.point == pt) & (data.population == HETEROGENEOUS)], ""))
        ctl.append(lead(data[(data.point == pt) & (data.population == FLAT)], ", flat"))
    regimes = sorted({info[pt]["regime"] for pt in covered})
    return Claim(
        "d", "At every sweep point the theorems cover, the predicted policy wins the long run: Rawlsian under the "
             "survival condition K f_lb > (N-K) g_ub, utilitarian under the ruin condition K f_ub < (N-K) g_lb.",
        "Sec. 3: Rawlsian policies outperform utilitarian ones in the long run under survival; the reverse under ruin",
        {"points": len(covered), "regimes": ", ".join(regimes), "agree": sum(e.verdict == "holds" for e in ev)},
        f"at every theorem-covered point ({len(covered)} of {len(info) - 1}), the {p.seeds}-seed paired 95% interval "
        "of (predicted winner - the other) long-run slope lies above 0, Rawlsian = rawlsian_min_u, utilitarian = the "
        "best variant by seed mean",
        ev, Control(f"{FLAT_DESC}, at every point: no policy can lead", ctl, kind="ablation"),
        threshold_source=convention("a sign: the theorems predict which policy wins, not by how much"),
        premise=[Premise.at_least(f"theorem regimes the sweep covers ({', '.join(regimes)})", len(regimes), 2,
                                  what="survival and ruin, the two conditions the claim speaks of"),
                 settle_premise(p, data, info, covered, "theorem points")],
        no_positive_control=NO_POSITIVE)


def _gap(df: pd.DataFrame, other: str, spread: float) -> np.ndarray:
    """Per seed, |rawlsian_min_u - other| long-run slope / the plateau spread."""
    return np.abs(per_seed(df, "rawlsian_min_u", "long_run_slope") - per_seed(df, other, "long_run_slope")) / spread


def random_ties_claim(p, data: pd.DataFrame, info: dict) -> Claim | None:
    """(e) |Rawlsian - random| long-run slope below rate_tolerance of the plateau spread at every theorem point."""
    covered = [pt for pt in info if pt != MAIN and info[pt]["winner"] is not None]
    if not covered or "random" not in p.policies:
        return None
    ev, ctl = [], []
    for pt in covered:
        d = data[(data.point == pt) & (data.population == HETEROGENEOUS)]
        u = best_utilitarian(p, d, "long_run_slope")
        ev.append(mean_test(_gap(d, "random", info[pt]["spread"]), threshold=p.rate_tolerance, direction="<",
                            what="seeds", name=f"{info[pt]['label']}: |Rawlsian - random| / spread"))
        ctl.append(mean_test(_gap(d, u, info[pt]["spread"]), threshold=p.rate_tolerance, direction="<", what="seeds",
                             name=f"{info[pt]['label']}: |Rawlsian - {u}| / spread"))
    return Claim(
        "e", "Extension (not a statement of the paper): under either theorem condition the random policy reaches the "
             "Rawlsian long-run rate: prioritising the worst off is no better than random treatment wherever the "
             "theorems apply.",
        "derived from Sec. 3 (dynamics.py: a randomly treated individual drifts by (K f(U) - (N-K) g(U)) / N, "
        "positive everywhere under survival, negative everywhere under ruin)",
        {"points": len(covered), "largest_gap": max(e.effect for e in ev)},
        f"at every theorem-covered point, the {p.seeds}-seed 95% interval of |rawlsian_min_u - random| long-run slope "
        f"/ plateau spread lies below rate_tolerance = {p.rate_tolerance}",
        ev, Control("the same criterion with the best utilitarian policy in place of random (theory: it differs by "
                    "(N-K)(g_ub - g_lb)/N under survival, K (f_ub - f_lb)/N under ruin)", ctl, kind="null"),
        threshold_source=convention(f"rate_tolerance = {p.rate_tolerance:.0%} of the plateau spread (upper minus "
                                    "lower plateau rate, the most two policies can differ): the yardstick by which "
                                    "this paper's claims call two rates equal"),
        premise=[settle_premise(p, data, info, covered, "theorem points")],
        no_positive_control=NO_POSITIVE)


def random_parts_claim(p, data: pd.DataFrame, info: dict) -> Claim | None:
    """(f) at the intermediate points, the largest |mean Rawlsian - random| long-run slope over the points, relative
    to each point's plateau spread, above rate_tolerance; percentile bootstrap over seeds (resampled jointly across
    points, so the interval pays for picking the largest); control: the same statistic over the theorem points."""
    middle = [pt for pt in info if pt != MAIN and info[pt]["winner"] is None]
    covered = [pt for pt in info if pt != MAIN and info[pt]["winner"] is not None]
    if not middle or "random" not in p.policies:
        return None

    def matrices(points):  # (seeds, points) of Rawlsian and random long-run slopes, and the spreads
        cols = [data[(data.point == pt) & (data.population == HETEROGENEOUS)] for pt in points]
        return (np.stack([per_seed(d, "rawlsian_min_u", "long_run_slope") for d in cols], 1),
                np.stack([per_seed(d, "random", "long_run_slope") for d in cols], 1),
                np.array([info[pt]["spread"] for pt in points]))

    def largest_departure(points, name):
        r, q, spread = matrices(points)
        return bootstrap_test(lambda a, b: float(np.max(np.abs((a - b).mean(0)) / spread)), r, q,
                              threshold=p.rate_tolerance, direction=">", what="seeds", name=name)

    ev = largest_departure(middle, "largest |Rawlsian - random| / spread over the intermediate points")
    ctl = largest_departure(covered, "largest |Rawlsian - random| / spread over the theorem points") if covered else None
    by_point, share = {}, {}
    for pt in middle:
        d = data[(data.point == pt) & (data.population == HETEROGENEOUS)]
        t = paired_test(per_seed(d, "rawlsian_min_u", "long_run_slope"), per_seed(d, "random", "long_run_slope"))
        share[pt] = t.effect / info[pt]["spread"]
        by_point[f"point {pt}"] = (f"{t.effect:.3g} [{t.interval[0]:.3g}, {t.interval[1]:.3g}] "
                                   f"({share[pt]:+.1%} of the spread: "
                                   + ("Rawlsian ahead" if t.interval[0] > 0 else "random ahead" if t.interval[1] < 0
                                      else "no difference resolved") + ")")
    # The statistic is two-sided, so say which policy the largest departure favours, and how far Rawlsian leads
    # where it does (a reader asks whether prioritising the worst off ever pays outside the theorems).
    widest = max(share, key=lambda pt: abs(share[pt]))
    direction = (f"the largest departure is at point {widest}, where "
                 + ("Rawlsian" if share[widest] > 0 else "random") + f" is ahead by {abs(share[widest]):.1%} of the "
                 f"spread; Rawlsian's largest lead at any intermediate point is {max(max(share.values()), 0):.1%}")
    return Claim(
        "f", f"Extension (not a statement of the paper): where neither theorem condition holds, prioritising the worst "
             f"off departs from random treatment: at "
             f"some intermediate point the Rawlsian and random long-run rates differ by more than "
             f"{p.rate_tolerance:.0%} of the plateau spread (in either direction).",
        "outside Sec. 3's conditions the paper makes no prediction; the reverse side of claim (e)",
        {"points": len(middle), "rawlsian_minus_random_by_point": by_point},
        f"over the {len(middle)} intermediate sweep points, max over points of |seed-mean (rawlsian_min_u - random) "
        f"long-run slope| / plateau spread; its {p.seeds}-seed percentile bootstrap 95% interval (seeds resampled "
        f"jointly across points) lies above rate_tolerance = {p.rate_tolerance}",
        ev, Control("the same statistic over the theorem-covered points, where theory gives the two policies the same "
                    "rate (claim e)", ctl, kind="null"),
        threshold_source=convention(f"rate_tolerance = {p.rate_tolerance:.0%} of the plateau spread, the yardstick by "
                                    "which claim (e) calls the two rates equal"),
        premise=[settle_premise(p, data, info, middle, "intermediate points")],
        no_positive_control=NO_POSITIVE,
        note=direction + "; per point, Rawlsian - random (paired 95% interval): "
             + "; ".join(f"{k}: {v}" for k, v in by_point.items()))


# ---- the check and the whole list ---------------------------------------------------------------------
def flat_rate_check(p, data: pd.DataFrame, info: dict) -> Check:
    """On the flat population f and g are constant, so every policy's mean welfare drifts by exactly
    (K f_mid - (N-K) g_mid)/N per step plus zero-mean noise: a check of the simulator, true by construction."""
    worst = 0.0
    for pt, i in info.items():
        b, n, k = i["bounds"], i["individuals"], i["budget"]
        rate = (k * np.round((b.f_lb + b.f_ub) / 2) - (n - k) * np.round((b.g_lb + b.g_ub) / 2)) / n
        d = data[(data.point == pt) & (data.population == FLAT)]
        for pol in p.policies:
            worst = max(worst, float(abs(per_seed(d, pol, "long_run_slope").mean() - rate) / i["spread"]))
    return Check.at_most("flat_rate", "on the flat-returns population every policy grows at the closed-form rate "
                         "(K f_mid - (N-K) g_mid)/N (largest seed-mean gap over policies and points, / plateau spread)",
                         worst, p.rate_tolerance, what="rate_tolerance of the plateau spread")


def welfare_claims(p, data: pd.DataFrame, crossing: dict, gain_gap: dict) -> tuple[list[Claim], list[Check]]:
    """Claims (a)-(f) and the check, from `data` (one row per point, population, policy and seed: `point_frame` of
    the main run with the sweep's rows) and `gain_gap` ({population: {point: per-seed one-step gain gap}})."""
    info = point_info(p)
    claims = [short_run_claim(p, data, info, gain_gap), long_run_claim(p, data, info, crossing),
              rates_claim(p, data, info)]
    claims += [c for c in (winner_claim(p, data, info), random_ties_claim(p, data, info),
                           random_parts_claim(p, data, info)) if c is not None]
    return claims, [flat_rate_check(p, data, info)]
