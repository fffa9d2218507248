"""The infoprop report: the rollout-quality table with its premise gates, the figures, the three claims with their
controls, report.md."""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.claims import (MIN_REPLICATES, Check, Claim, Control, PositiveControl, Premise, Scope, convention,
                                  mean_test, paired_test, write_claims)
from papers.common.io import read_parquets, write_json
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.report import write_report
from papers.common.tables import mean_std, to_markdown, write_table
from papers.infoprop.dyna import ARMS as DYNA_ARMS
from papers.infoprop.params import SCHEMES, SLUG, parse

TITLE = "P13 infoprop: Infoprop, on rollouts in model-based reinforcement learning"


def scope(p) -> Scope:
    dyna = (f"the Dyna comparison on {p.dyna['env']} at {p.dyna['real_steps']} real steps (the paper: MuJoCo "
            "locomotion at 125k-400k)" if p.dyna["run"] else "the Dyna comparison (Sec. 6) is not run at this scale "
                                                             "(claim c says why)")
    return Scope("analogue", f"Infoprop's rollout step, information loss and termination (Secs. 4-5) and its Dyna loop "
                 f"(Sec. 6) as the paper defines them; the rollout study runs offline on logged {p.env} data of a "
                 f"fixed noisy linear policy (the paper: rollouts inside Dyna training), and {dyna}.")


# ---- per-seed quantities ----------------------------------------------------------------------------
def per_seed_at(curves: pd.DataFrame, scheme: str, step: int, column: str = "w1") -> np.ndarray:
    """One value per seed (each seed rolls out under its own policy shift): `column` of a scheme at `step`."""
    sel = curves[(curves.scheme == scheme) & (curves.step == step)].sort_values("seed")
    if sel.empty:
        raise ValueError(f"infoprop: no rollout curve for scheme {scheme} at step {step}")
    return sel[column].to_numpy()


def log_ratio(curves: pd.DataFrame, a: str, b: str, step: int, column: str = "w1") -> np.ndarray:
    """Per seed, log(column(a) / column(b)) at `step`: how many times farther a's rollouts are from the truth."""
    return np.log(per_seed_at(curves, a, step, column) / per_seed_at(curves, b, step, column))


def growth(curves: pd.DataFrame, scheme: str, horizon: int) -> np.ndarray:
    """Per seed, log(W1 at the horizon / W1 after one step): how much a scheme's rollouts drift off the truth."""
    return np.log(per_seed_at(curves, scheme, horizon) / per_seed_at(curves, scheme, 1))


def accepted_length(curves: pd.DataFrame, scheme: str) -> np.ndarray:
    """Per seed, the mean accepted rollout length: the sum over steps of the accepted fraction."""
    return curves[curves.scheme == scheme].groupby("seed", sort=True).accepted_fraction.sum().to_numpy()


def cut_gap(cuts: pd.DataFrame, cut: str, min_group: int) -> np.ndarray:
    """Per seed: over the steps with >= min_group accepted and >= min_group dropped samples, the dropped-weighted
    mean of P(a dropped sample's error exceeds an accepted one's) - 1/2 (0 for a cut blind to the error; NaN if no
    step qualifies)."""
    out = []
    for _, g in cuts[cuts.cut == cut].groupby("seed", sort=True):
        g = g[(g.accepted >= min_group) & (g.dropped >= min_group)]
        out.append(float(((g.dropped_above - 0.5) * g.dropped).sum() / g.dropped.sum()) if len(g) else np.nan)
    return np.array(out)


def late_gain(hist: pd.DataFrame) -> np.ndarray:
    """Per seed, how much the members' held-out MSE still fell over the last ten epochs (relative): 0 at convergence."""
    out = []
    for _, g in hist[~hist.final.astype(bool)].groupby("seed", sort=True):
        g = g.sort_values("epoch")
        out.append(1.0 - g.val_mse.iloc[-1] / g.val_mse.iloc[max(0, len(g) - 11)])
    return np.array(out)


def final_returns(returns: pd.DataFrame, arm: str) -> np.ndarray:
    """One value per seed: the final policy's mean deterministic return of one Dyna arm."""
    sel = returns[(returns.arm == arm) & returns.final].sort_values("seed")
    if sel.empty:
        raise ValueError(f"infoprop: no final Dyna return of arm {arm}")
    return sel["return"].to_numpy()


def first_returns(returns: pd.DataFrame, arm: str) -> np.ndarray:
    """One value per seed: the return at the first evaluation (the initial random-action data's policy)."""
    first = returns.real_steps.min()
    return returns[(returns.arm == arm) & (returns.real_steps == first)].sort_values("seed")["return"].to_numpy()


def closed_gap(returns: pd.DataFrame, arm: str) -> float:
    """The share of the gap between an arm's first evaluation's return and Pendulum's best return (0) that its final
    policy closed, over the seeds' mean returns: 0 = no learning, 1 = the best return."""
    start, final = first_returns(returns, arm).mean(), final_returns(returns, arm).mean()
    return float((final - start) / (0.0 - start))


def dyna_lengths(rollout_stats: pd.DataFrame, arm: str) -> np.ndarray:
    """One value per seed: the mean accepted rollout length over the rounds of model rollouts of one Dyna arm."""
    return rollout_stats[rollout_stats.arm == arm].groupby("seed", sort=True).accepted_length.mean().to_numpy()


# ---- the claims ---------------------------------------------------------------------------------------
def seed_mask(curves: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """The seeds (sorted) where `mask` (one bool per sorted seed) holds."""
    return np.sort(curves.seed.unique())[mask]


def diverged(p, curves: pd.DataFrame) -> np.ndarray:
    """Claim (a)'s per-seed premise (issue 51 review): the seed's rollouts leave the true distribution, read on an
    arm independent of the two compared: the K = 1 ablation (MBPO's distribution, its own draws) at step H has W1 at
    least `divergence_factor` times the true-vs-true floor (the true second half against the true first half, half
    the samples, so a floor no lower than at the full count). One bool per seed (sorted)."""
    h = p.rollout["horizon"]
    floor = per_seed_at(curves, "true", h, "w1_half")
    return per_seed_at(curves, "infoprop_k1", h) >= p.claims["divergence_factor"] * floor


def decided_on(gated: np.ndarray) -> np.ndarray:
    """The seeds a per-seed-gated claim is decided on: those that pass its gate, or every seed where fewer than
    MIN_REPLICATES pass (the gate's premise is then unmet and the claim inconclusive whatever the interval says; the
    interval still rests on >= 3 replicates, as the contract's form asks)."""
    return gated if gated.sum() >= MIN_REPLICATES else np.ones_like(gated)


def rollout_gates(p, curves: pd.DataFrame, gated: np.ndarray) -> list[Premise]:
    """Claim (a)'s premise: enough seeds whose rollouts diverge (:func:`diverged`), and the members disagree along
    MBPO's rollouts there (the share of the spread Infoprop removes)."""
    c, h = p.claims, p.rollout["horizon"]
    use = decided_on(gated)
    return [
        Premise.at_least(f"seeds whose rollouts diverge: the K = 1 arm's W1 at step {h} at least "
                         f"{c['divergence_factor']:g} x the true-vs-true floor (config infoprop.claims.divergence_factor)",
                         float(gated.sum()), MIN_REPLICATES, what="the fewest replicates of a verdict"),
        Premise.at_least(f"the members disagree: epistemic share e2 / (s2 + e2) along MBPO's rollouts at step {h} "
                         f"(mean over {'the diverging' if use is gated else 'all'} seeds)", float(per_seed_at(curves, "mbpo", h, "epistemic_share")[use].mean()),
                         c["min_share"], what="config infoprop.claims.min_share"),
    ]


def rollout_claim(p, curves: pd.DataFrame) -> Claim:
    """Claim (a) (Sec. 6, rollout figures): at every long-horizon step, W1(mbpo) / W1(infoprop) > 1 over the seeds
    whose rollouts diverge (:func:`diverged`)."""
    c, steps, h = p.claims, list(p.claims["long_horizon_steps"]), p.rollout["horizon"]
    margin = c["w1_log_ratio"]
    gated = diverged(p, curves)
    use = decided_on(gated)
    label = "diverging seeds" if use is gated else "all seeds: too few diverge"

    def farther(a: str, b: str, column: str = "w1") -> list:
        return [mean_test(log_ratio(curves, a, b, s, column)[use], threshold=margin, direction=">",
                          what=label, name=f"step {s}: log(W1({a}) / W1({b}))") for s in steps]

    seeds = np.sort(curves.seed.unique())
    return Claim(
        "a", "Infoprop's rollouts stay closer to the true state distribution than MBPO's random-member rollouts at "
             "long horizons, where rollouts diverge",
        "Infoprop rollouts keep the data distribution over long horizons where MBPO's drift (Sec. 6, rollout figures)",
        {"seeds": len(seeds), "diverging seeds": ", ".join(str(sd) for sd in seeds[gated]) or "none",
         **{f"W1 step {s} {k} ({label})": float(per_seed_at(curves, k, s)[use].mean())
            for s in (steps[0], steps[-1]) for k in ("mbpo", "infoprop", "infoprop_k1")}},
        f"per seed, the Wasserstein-1 distance per dimension (in data stds) between the {p.rollout['samples']} model "
        f"and {p.rollout['samples']} true continuations of each start, averaged over starts and dimensions; t interval "
        f"over the seeds whose rollouts diverge, if at least {MIN_REPLICATES} (the K = 1 arm's W1 at step {h} at least {c['divergence_factor']:g} x "
        f"the true-vs-true W1 at half the samples; an arm independent of the two compared, so the gate does not favour "
        f"either) of log(W1(mbpo) / W1(infoprop)) > {margin:g} (config infoprop.claims.w1_log_ratio) at every step of "
        f"{steps} (the second half of the horizon); the seeds take the rollout policies "
        f"{list(p.rollout['policy_shifts'])} in turn",
        farther("mbpo", "infoprop"),
        Control("Infoprop with the Kalman gain forced to 1 (exactly the epistemic removal taken out: random-member "
                "sampling again), the same criterion on the same seeds", farther("mbpo", "infoprop_k1"), kind="ablation"),
        threshold_source=convention(f"{margin:g}: a log ratio above 0, 'closer'"),
        premise=rollout_gates(p, curves, gated),
        positive_control=PositiveControl(
            f"the same distance at half the samples ({p.rollout['samples'] // 2}) on a sampler planted to be exact, on "
            "the same seeds: MBPO's first half against the true first half, divided by the true second half against "
            "the true first half; must exceed the threshold", farther("mbpo", "true", "w1_half")))


def has_error(p, curves: pd.DataFrame) -> np.ndarray:
    """Claim (b)'s per-seed premise (issue 51 review): Infoprop's rollouts depart from the truth at step H, the lower
    end of the 95% t interval over start states of its excess error (beyond the true spread) above 0: there is a
    model error for the cut to track. One bool per seed (sorted)."""
    return per_seed_at(curves, "infoprop", p.rollout["horizon"], "state_error_low") > 0.0


def cut_claim(p, curves: pd.DataFrame, cuts: pd.DataFrame) -> Claim:
    """Claim (b) (Sec. 5): the termination drops the transitions with the higher error beyond the true spread, and
    the information loss orders them better than the accumulated aleatoric entropy (the mechanism's ablation)."""
    c, h = p.claims, p.rollout["horizon"]
    min_group, margin = c["min_group"], c["cut_margin"]
    gated = has_error(p, curves)
    use = decided_on(gated)
    gaps = {cut: cut_gap(cuts, cut, min_group) for cut in ("infoprop", "random", "aleatoric", "oracle")}

    def tests(cut: str) -> list:
        return [mean_test(gaps[cut][use], threshold=margin, direction=">", what="seeds with error",
                          name=f"{cut} cut: P(dropped error > accepted error) - 1/2"),
                paired_test(gaps[cut][use], gaps["aleatoric"][use], threshold=0.0, what="seeds with error",
                            name=f"{cut} cut - aleatoric-entropy cut")]

    seeds = np.sort(curves.seed.unique())
    decided = int(np.isfinite(gaps["infoprop"][use]).sum())
    return Claim(
        "b", "The termination criterion cuts rollouts where the error has grown: dropped transitions have higher error "
             "than accepted ones, more so than a cut by accumulated aleatoric entropy with the same stop counts",
        "accumulated information loss tracks the model error; lambda1/lambda2 stop rollouts before data corruption (Sec. 5)",
        {"seeds with error": ", ".join(str(sd) for sd in seeds[gated]) or "none",
         **{f"{cut} cut": float(np.nanmean(gaps[cut][use])) for cut in gaps},
         "accepted length": float(accepted_length(curves, "infoprop")[use].mean())},
        f"per seed, at each step with >= {min_group} accepted and >= {min_group} dropped samples, the probability that "
        "a dropped sample's error exceeds an accepted one's (error: the squared distance to the true mean beyond the "
        "true variance, averaged over dimensions, so that the true spread does not enter), minus 1/2, averaged over "
        f"steps weighted by the dropped count; over the seeds where Infoprop's rollouts have an error to track (the "
        f"95% interval over starts of its excess error at step {h} above 0): t interval > {margin:g} (config "
        "infoprop.claims.cut_margin), and paired t interval of Infoprop's cut minus the ablation's > 0; the ablation "
        "gives Infoprop's stop steps to the rollouts in order of their accumulated aleatoric entropy (the information "
        "loss with the fused aleatoric variance s2 in place of the conditional variance: no epistemic term)",
        tests("infoprop"),
        Control("a random cut: the same stop steps given to random rollouts (the same acceptance at every step, "
                "blind to the state), the same criterion", tests("random"), kind="null"),
        threshold_source=convention(f"{margin:g}: 'higher', a sign (the paper gives no size); the random cut scores 0 "
                                    "in expectation; 0 for 'more so'"),
        premise=[Premise.at_least("seeds where Infoprop's rollouts have an error to track (its excess error at step "
                                  f"{h} above 0 over starts)", float(gated.sum()), MIN_REPLICATES,
                                  what="the fewest replicates of a verdict"),
                 Premise.at_least(f"the cut leaves both groups at some step (>= {min_group} each): seeds of those",
                                  float(decided), float(use.sum()), what="every one")],
        positive_control=PositiveControl("the same stop steps given to the rollouts in order of their error (the cut "
                                         "follows the error by construction), the same criterion", tests("oracle")))


def dyna_claim(p, returns: pd.DataFrame, rollout_stats: pd.DataFrame) -> Claim:
    """Claim (c) (Sec. 6, Alg. 1): Infoprop-Dyna's final return above MBPO-style Dyna's at equal real steps; gated on
    the loop learning the task with a perfect model at each arm's horizon and on MBPO learning with a learned model;
    the ablation is Infoprop's loop with K = 1. (The accepted lengths are a check: see :func:`dyna_checks`.)"""
    d, margin = p.dyna, p.claims["return_margin"]

    def test(arm: str):
        return paired_test(final_returns(returns, arm), final_returns(returns, "mbpo"), threshold=margin,
                           name=f"final return {arm} - mbpo", what="seeds")

    measured = {**{f"final return {arm}": float(final_returns(returns, arm).mean()) for arm in DYNA_ARMS},
                **{f"accepted length {arm}": float(dyna_lengths(rollout_stats, arm).mean()) for arm in DYNA_ARMS}}
    references = {"true_model": f"the true simulator at Infoprop's horizon {d['infoprop_horizon']}",
                  "true_model_h1": f"the true simulator at MBPO's horizon {d['mbpo_horizon']}",
                  "mbpo": "MBPO with its learned model"}
    return Claim(
        "c", "Infoprop-Dyna reaches a higher return than MBPO-style Dyna at equal real environment steps",
        "state of the art among Dyna-style methods on MuJoCo (Hopper, Walker2d, HalfCheetah, Humanoid), much longer "
        "rollouts (Sec. 6)",
        measured,
        f"SAC trained on model rollouts of each arm for {d['real_steps']} real steps of {d['env']} (the same for every "
        f"arm); per seed the mean return of {d['eval_episodes']} deterministic episodes of the final policy; paired t "
        f"interval over {d['seeds']} seeds of return(infoprop) - return(mbpo) > {margin:g} (config "
        "infoprop.claims.return_margin); premise: the loop learns the task with the true simulator as its model at "
        "either arm's horizon, and the MBPO baseline learns it with a learned model (a comparison of two arms that did "
        "not learn says nothing about the rollouts)",
        test("infoprop"),
        Control("Infoprop's Dyna loop with the Kalman gain forced to 1 (random-member sampling, conditional variance 0, "
                "so no information loss and no termination: rollouts of the full Infoprop horizon without the "
                "mechanism), the same criterion", test("infoprop_k1"), kind="ablation"),
        threshold_source=convention(f"{margin:g}: 'higher', a sign"),
        premise=[Premise.at_least(f"the loop learns at this budget with {what}: the share of the gap from the first "
                                  "evaluation's return to the best return (0) closed by the final policy (mean over "
                                  "seeds)", float(closed_gap(returns, arm)), p.claims["learned_share"],
                                  what="config infoprop.claims.learned_share")
                 for arm, what in references.items()],
        no_positive_control="returns are measured on the true system, not estimated; the true-model arms (a planted "
                            "perfect model at each horizon) are learnability gates")


def dyna_checks(p, rollout_stats: pd.DataFrame) -> list[Check]:
    """The accepted-length half of the paper's Sec. 6 statement, true by construction against MBPO's configured
    horizon: a check, not a claim (issue 51 review)."""
    length = dyna_lengths(rollout_stats, "infoprop")
    return [Check.at_least("c_length", "Infoprop-Dyna's mean accepted rollout length (mean over seeds) exceeds MBPO's "
                           "configured horizon (config infoprop.dyna.mbpo_horizon)", float(length.mean()),
                           float(p.dyna["mbpo_horizon"]), what="dyna.mbpo_horizon")]


def benchmark_cpu(paths) -> float:
    """Summed CPU seconds (Snakemake's `cpu_time`) of the jobs behind `paths` (benchmark TSVs)."""
    return float(sum(pd.read_csv(path, sep="\t")["cpu_time"].iloc[-1] for path in paths))


def dyna_not_measured(p, used_cpu: float, budget: float | None) -> Claim:
    """Claim (c) at a scale that does not run the Dyna comparison (dyna.run false): why, computed from the config's
    trial (the measured CPU cost of one run and how many of its seeds learned) and this run's own CPU use."""
    d, t = p.dyna, p.dyna["trial"]
    estimate = t["cpu_s_per_run"] * len(DYNA_ARMS) * d["seeds"] * d["real_steps"] / t["real_steps"]
    if budget:
        room = budget - used_cpu
        left = (f"{'more than' if estimate > room else 'within'} the {room:.0f} CPU-s left after this run's rollout study "
                f"(claims a, b: {used_cpu:.0f} of the paper's {budget:.0f} CPU-s budget)")
    else:
        left = f"beside this run's rollout study ({used_cpu:.0f} CPU-s)"
    why = (f"not run at this scale (config infoprop.dyna.run false): in a trial, MBPO-style Dyna with a trained model "
           f"({t['epochs']} epochs per refit, as the review asked; {d['model']['epochs']} in this config) cost "
           f"{t['cpu_s_per_run']:.0f} CPU-s per run at {t['real_steps']} real steps (the MBPO arm alone, the cheapest: "
           f"horizon {d['mbpo_horizon']}) and learned (closed >= {p.claims['learned_share']:g} of the gap to return 0) "
           f"in {t['learned']} of {t['seeds']} seeds; the comparison needs {len(DYNA_ARMS)} arms x {d['seeds']} seeds "
           f"at {d['real_steps']} real steps, at least {estimate:.0f} CPU-s, {left}; config/full.yaml runs it")
    return Claim.not_measured(
        "c", "Infoprop-Dyna reaches a higher return than MBPO-style Dyna at equal real environment steps",
        "state of the art among Dyna-style methods on MuJoCo (Hopper, Walker2d, HalfCheetah, Humanoid), much longer "
        "rollouts (Sec. 6)",
        f"(at a scale that runs it) paired t interval over seeds of the final return of Infoprop-Dyna minus MBPO-style "
        f"Dyna > {p.claims['return_margin']:g}, gated on the loop learning with the true simulator and MBPO learning",
        why, "not run: Infoprop's Dyna loop with the Kalman gain forced to 1", control_kind="ablation",
        threshold_source=convention(f"{p.claims['return_margin']:g}: 'higher', a sign"),
        no_positive_control="not run at this scale")


def infoprop_claims(p, curves, cuts, returns, rollout_stats, used_cpu: float = float("nan"),
                    budget: float | None = None) -> list[Claim]:
    third = (dyna_claim(p, returns, rollout_stats) if p.dyna["run"] else dyna_not_measured(p, used_cpu, budget))
    return [rollout_claim(p, curves), cut_claim(p, curves, cuts), third]


# ---- tables and figures -------------------------------------------------------------------------------
def rollout_table(p, curves: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps, h = list(p.claims["long_horizon_steps"]), p.rollout["horizon"]
    md, csv = [], []
    for scheme in SCHEMES:
        row, num = {"scheme": scheme}, {"scheme": scheme}
        for s in [1] + steps:
            v = per_seed_at(curves, scheme, s)
            row[f"W1 step {s}"], num[f"w1_step_{s}"] = mean_std(v), v.mean()
        if scheme != "mbpo":
            v = log_ratio(curves, "mbpo", scheme, h)
            row[f"log W1(mbpo)/W1 step {h}"], num[f"log_ratio_mbpo_step_{h}"] = mean_std(v), v.mean()
        else:
            row[f"log W1(mbpo)/W1 step {h}"], num[f"log_ratio_mbpo_step_{h}"] = "-", np.nan
        share = per_seed_at(curves, scheme, h, "epistemic_share")
        row[f"epistemic share step {h}"], num[f"epistemic_share_step_{h}"] = mean_std(share), share.mean()
        if scheme.startswith("infoprop"):
            length = accepted_length(curves, scheme)
            row["accepted length"], num["accepted_length"] = mean_std(length), length.mean()
        else:
            row["accepted length"], num["accepted_length"] = "-", np.nan
        md.append(row), csv.append(num)
    return pd.DataFrame(md), pd.DataFrame(csv)


def dyna_rows(returns: pd.DataFrame, rollout_stats: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The Dyna table: per arm the return at each evaluation (mean +- std over seeds) and the accepted length."""
    md, csv = [], []
    steps = sorted(returns.real_steps.unique())
    for arm in DYNA_ARMS:
        row, num = {"Dyna arm": arm}, {"dyna_arm": arm}
        for st in steps:
            v = returns[(returns.arm == arm) & (returns.real_steps == st)].sort_values("seed")["return"].to_numpy()
            row[f"return @ {st}"], num[f"return_{st}"] = mean_std(v), v.mean()
        length = dyna_lengths(rollout_stats, arm)
        row["accepted length"], num["accepted_length"] = mean_std(length), length.mean()
        md.append(row), csv.append(num)
    return pd.DataFrame(md), pd.DataFrame(csv)


def per_seed_table(p, curves: pd.DataFrame, cuts: pd.DataFrame) -> pd.DataFrame:
    """One row per seed: the quantities the per-seed premise gates of claims (a) and (b) read, and the effects."""
    h, min_group = p.rollout["horizon"], p.claims["min_group"]
    seeds = np.sort(curves.seed.unique())
    out = pd.DataFrame({
        "seed": seeds, "policy shift": curves.groupby("seed", sort=True)["shift"].first().to_numpy(),
        "K=1 W1 / floor": per_seed_at(curves, "infoprop_k1", h) / per_seed_at(curves, "true", h, "w1_half"),
        "diverges (a)": diverged(p, curves),
        "log W1 mbpo/infoprop": log_ratio(curves, "mbpo", "infoprop", h),
        "infoprop excess error": per_seed_at(curves, "infoprop", h, "state_error"),
        "its lower 95% bound": per_seed_at(curves, "infoprop", h, "state_error_low"),
        "error to track (b)": has_error(p, curves)})
    for cut in ("infoprop", "random", "aleatoric", "oracle"):
        out[f"{cut} cut gap"] = cut_gap(cuts, cut, min_group)
    return out


def gates_table(claims: list[Claim]) -> str:
    rows = [{"claim": cl.id, "premise gate": g.name, "measured": g.measured if isinstance(g.measured, str)
             else f"{g.measured:.4g}", "requirement": g.requirement, "met": "yes" if g.met else "**no**"}
            for cl in claims for g in cl.premise]
    return to_markdown(pd.DataFrame(rows))


def figures(p, curves, cuts, returns, rollout_stats, w1_figure, cut_figure, dyna_figure) -> None:
    mean = curves.groupby(["scheme", "step"], sort=True)[["w1", "w1_half", "accepted_fraction"]].mean().reset_index()
    fig, axes = subplots(1, 1)
    for scheme in SCHEMES:
        g = mean[mean.scheme == scheme]
        axes[0, 0].plot(g.step, g.w1, label=scheme)
    g = mean[mean.scheme == "true"]
    axes[0, 0].plot(g.step, g.w1_half, ":", color="grey", label="true vs true (half samples)")
    axes[0, 0].set(xlabel="rollout step", ylabel="W1 to the true distribution (data stds)", yscale="log",
                   title=f"mean over {curves.seed.nunique()} seeds")
    axes[0, 0].legend()
    savefig(fig, w1_figure)
    fig, axes = subplots(1, 2)
    g = mean[mean.scheme == "infoprop"]
    axes[0, 0].plot(g.step, g.accepted_fraction)
    axes[0, 0].set(xlabel="rollout step", ylabel="accepted fraction (Infoprop)")
    pooled = cuts.groupby(["cut", "step"], sort=True).dropped_above.mean().reset_index()
    for cut, style in (("infoprop", "-"), ("random", ":"), ("aleatoric", "-."), ("oracle", "--")):
        q = pooled[pooled.cut == cut]
        axes[0, 1].plot(q.step, q.dropped_above, style, label=f"{cut} cut")
    axes[0, 1].axhline(0.5, color="grey", lw=0.5)
    axes[0, 1].set(xlabel="rollout step", ylabel="P(dropped error > accepted error)")
    axes[0, 1].legend(fontsize=7)
    savefig(fig, cut_figure)
    fig, axes = subplots(1, 2)
    if returns is None:  # the Dyna comparison is not run at this scale (claim c says why)
        for ax in axes[0]:
            ax.text(0.5, 0.5, "Dyna comparison not run at this scale\n(claim c in report.md says why)",
                    ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        savefig(fig, dyna_figure)
        return
    for arm in DYNA_ARMS:
        g = returns[returns.arm == arm].groupby("real_steps", sort=True)["return"]
        line, = axes[0, 0].plot(g.mean().index, g.mean().values, label=arm)
        axes[0, 0].fill_between(g.min().index, g.min().values, g.max().values, color=line.get_color(), alpha=0.2)
        q = rollout_stats[rollout_stats.arm == arm].groupby("real_steps", sort=True).accepted_length.mean()
        axes[0, 1].plot(q.index, q.values, label=arm)
    axes[0, 0].set(xlabel="real environment steps", ylabel=f"deterministic return ({p.dyna['env']})")
    axes[0, 0].legend()
    axes[0, 1].set(xlabel="real environment steps", ylabel="mean accepted rollout length", yscale="log")
    savefig(fig, dyna_figure)


# ---- the stage ------------------------------------------------------------------------------------------
def report(*, cfg, scale, budget, curves, cuts, histories, dyna_returns, dyna_rollouts, benchmarks, table_md, table_csv,
           claims, params_json, report_md, verdicts, w1_figure, cut_figure, dyna_figure):
    """`dyna_returns`, `dyna_rollouts`: the Dyna job's outputs, empty where the scale does not run it (dyna.run);
    `budget`: the paper's CPU budget at this scale (config time_budget), or None."""
    p = parse(cfg)
    curves, cuts, hist = read_parquets(curves), read_parquets(cuts), read_parquets(histories)
    ran = bool(p.dyna["run"])
    returns = read_parquets([dyna_returns] if isinstance(dyna_returns, str) else list(dyna_returns)) if ran else None
    rollout_stats = (read_parquets([dyna_rollouts] if isinstance(dyna_rollouts, str) else list(dyna_rollouts))
                     if ran else None)
    used_cpu = benchmark_cpu(benchmarks)
    h = p.rollout["horizon"]
    shift = curves.groupby("seed")["shift"].first()
    final = hist[hist.final.astype(bool)].sort_values("seed")
    md, csv = rollout_table(p, curves)
    caption = (f"Rollouts of {h} steps from {p.rollout['starts']} held-out start states of {p.env}, "
               f"{p.rollout['samples']} samples each, against as many true continuations: W1 per dimension in data stds "
               f"(mean over starts and dimensions), mean +- std over {len(shift)} seeds, each under its own rollout "
               f"policy (policy shifts by seed: {', '.join(f'{s:g}' for s in shift)}; 0 = the logging policy). "
               f"Epistemic share: e2 / (s2 + e2) = 1 - K along the scheme's rollouts. Accepted length: mean steps before "
               f"Infoprop's termination. Ensembles: {mean_std(final.epoch.to_numpy() + 1)} epochs (stopped by patience "
               f"in {int(final.stopped_early.astype(bool).sum())} of {len(final)} seeds, else at the cap of "
               f"{p.model['epochs']}), held-out MSE of the elites (standardised targets) "
               f"{mean_std(final.val_mse.to_numpy())}, of all members {mean_std(late_gain(hist))} lower than ten epochs "
               "before the end (relative).")
    per_seed = per_seed_table(p, curves, cuts)
    frames = [csv.assign(study="rollouts"), per_seed.assign(study="per seed")]
    if ran:
        dyna_md, dyna_csv = dyna_rows(returns, rollout_stats)
        frames.append(dyna_csv.assign(study="dyna"))
    write_table(md, table_md, table_csv, caption=caption, csv_df=pd.concat(frames, ignore_index=True))
    d = p.dyna
    claim_list, sc = infoprop_claims(p, curves, cuts, returns, rollout_stats, used_cpu, budget), scope(p)
    check_list = dyna_checks(p, rollout_stats) if ran else []
    with open(table_md, "a") as f:
        f.write(f"\n\nPer seed (the premise gates of claims a and b read these): the K = 1 arm's W1 at step {h} over "
                f"the true-vs-true floor (claim a's gate: at least {p.claims['divergence_factor']:g}), Infoprop's excess "
                f"error at step {h} and the lower end of its 95% interval over starts (claim b's gate: above 0), "
                f"log(W1(mbpo) / W1(infoprop)) at step {h}, and each cut's P(dropped error > accepted error) - 1/2."
                "\n\n" + to_markdown(per_seed.round(4)))
        if ran:
            f.write(f"\n\nDyna (claim c): SAC on model rollouts, {d['real_steps']} real steps of {d['env']} per run, "
                    f"deterministic return of the policy ({d['eval_episodes']} episodes), mean +- std over {d['seeds']} "
                    "seeds; accepted length: mean transitions kept per model rollout over the rounds.\n\n"
                    + to_markdown(dyna_md))
        f.write("\nPremise gates (a claim whose gate is not met is inconclusive):\n\n" + gates_table(claim_list))
    figures(p, curves, cuts, returns, rollout_stats, w1_figure, cut_figure, dyna_figure)
    write_claims(claim_list, claims, paper=SLUG, scale=scale, scope=sc, checks=check_list)
    write_json(to_dict(p), params_json)
    m = p.model
    what = (
        f"Per seed: {p.data['train_episodes']} episodes of {p.data['episode_steps']} steps of {p.env} under a noisy "
        f"linear feedback policy (a = clip(tanh(W s) + {p.data['policy_noise']:g} eps), W drawn per seed)"
        + (f" with an unobserved actuator noise of std {p.data['process_noise']:g}" if p.data["process_noise"] > 0 else
           " on the deterministic simulator (no actuator noise: the policy's noise is the only randomness, as in the "
           "paper's environments)")
        + f"; an ensemble of {m['ensemble']} Gaussian MLPs ({m['layers']} x {m['hidden']}, SiLU, learned log-variance "
        f"bounds, bootstrap per member, Adam at lr {m['lr']:g}) fitted to (state delta, reward) until no member "
        f"improved its held-out MSE by 1% for {m['patience']} epochs (at most {m['epochs']}), each member back at its "
        f"best epoch, the {m['elites']} best kept as elites. From {p.rollout['starts']} start states of "
        f"{p.data['heldout_episodes']} held-out episodes, {p.rollout['samples']} true continuations of {h} steps "
        f"(MuJoCo's batched rollout) under the seed's rollout policy W + shift D (D drawn per seed; the shifts "
        f"{list(p.rollout['policy_shifts'])} in turn over the seeds) and as many model rollouts per scheme: MBPO "
        f"(random member), Infoprop, and Infoprop with K = 1 (ablation). Infoprop's termination: "
        f"information loss against a resolution of {p.info['resolution']:g}, lambda1 = the {p.info['upper_quantile']:g} "
        f"quantile of the one-step loss on the training transitions, lambda2 = {h} x its {p.info['lower_quantile']:g} "
        f"quantile, per dimension; each dropped transition compared with the accepted ones of the same step, beside a "
        f"random cut, a cut by accumulated aleatoric entropy (the ablation) and an error-ordered cut with the same stop "
        f"steps. " + (f"Dyna (claim c): per arm and seed, SAC ({d['sac']['layers']} x {d['sac']['hidden']} ReLU, batch "
        f"{d['sac']['batch']}, lr {d['sac']['lr']:g}, automatic entropy tuning) on {d['env']} for {d['real_steps']} real "
        f"steps (the first {d['initial_steps']} with uniform random actions, shared by the arms of a seed), "
        f"{d['updates_per_step']} updates per real step on batches with {d['real_ratio']:.0%} real transitions and the "
        f"rest from the model buffer (the last {d['retain_rounds']} rounds); every {d['model_every']} real steps the "
        f"run's ensemble ({d['model']['ensemble']} members of {d['model']['layers']} x {d['model']['hidden']} SiLU, "
        f"{d['model']['epochs']} warm-started epochs on all real data) is refitted and rolled out from "
        f"{d['rollouts_per_step'] * d['model_every']} real start states under the sampled policy: MBPO for "
        f"{d['mbpo_horizon']} step(s) by random-member sampling; Infoprop for at most {d['infoprop_horizon']} steps "
        f"with its termination (lambda1, lambda2 recomputed each round from one-step losses on real (s, a)); the "
        f"ablation, Infoprop's loop with K = 1 (no epistemic removal, no termination); the learnability references, the "
        f"same loop with Pendulum's own equations as the model for {d['infoprop_horizon']} steps and for "
        f"{d['mbpo_horizon']}. Return: mean of {d['eval_episodes']} deterministic episodes every {d['eval_every']} real "
        f"steps; every run of every arm and seed is vectorised in one job." if ran else
        "The Dyna comparison (claim c) is not run at this scale; claim c says why, from the measured cost."))
    gated = diverged(p, curves)
    ratio = per_seed_at(curves, "infoprop_k1", h) / per_seed_at(curves, "true", h, "w1_half")
    differences = (
        f"Rollout study (claims a, b): one task ({p.env}) with {p.data['train_episodes'] * p.data['episode_steps']} "
        "logged transitions of a fixed noisy policy instead of rollouts inside Dyna training on Hopper, Walker2d, "
        f"HalfCheetah and Humanoid over 100k-400k steps; the ensemble is {m['layers']} x {m['hidden']} (official 4 x "
        "200) with standardised targets (the official code predicts raw deltas; means and variances are mapped back "
        "to data units, so the information loss is measured on the same scale). Termination is evaluated offline on "
        "rollouts that are continued past their cut, to compare accepted and dropped transitions; the thresholds are "
        "per dimension for the per-step and the accumulated loss, as in the official infoprop_dyna.py. The rollout "
        "policies are fixed (the logging policy or one shifted policy per seed) rather than a learning agent's. W1 "
        f"compares the rollouts as log ratios: the K = 1 arm's W1 at step {h} lies between {ratio.min():.3g} and "
        f"{ratio.max():.3g} times the true-vs-true floor over the {len(ratio)} seeds ({int(gated.sum())} at least "
        f"{p.claims['divergence_factor']:g} times: claim a's diverging seeds), so the ratio, not the difference, is "
        "comparable across seeds. The model rollouts have no termination function, so the rollout study runs on tasks "
        "that never terminate (HalfCheetah); Hopper and Walker2d would need one. "
        + (f"Dyna (claim c): {d['env']} (gymnasium classic control) instead of the MuJoCo locomotion tasks, "
        f"{d['real_steps']} real steps instead of 125k-400k, SAC with {d['sac']['layers']} x {d['sac']['hidden']} units "
        f"(official 512-1024), batch {d['sac']['batch']} and lr {d['sac']['lr']:g} (rl-baselines3-zoo's Pendulum "
        f"setting), {d['updates_per_step']} updates per step, {d['rollouts_per_step'] * d['model_every']} start states "
        "per round (official 100k) with the same count for every arm, uniform random initial actions (official: 5000 "
        "steps of the untrained agent) and the sampled SAC policy for exploration (official: pink action noise), a "
        "real-data share mixed into every batch (official: a whole batch of real data with probability 0.05), no "
        "resampling of start states when a round yields fewer transitions than start states, ensembles of "
        f"{d['model']['layers']} x {d['model']['hidden']} refitted for {d['model']['epochs']} warm-started epochs without "
        "elites or early stopping (the rollout study's ensembles have both), and the return of the final policy rather "
        f"than the best evaluation. MBPO's horizon is fixed at {d['mbpo_horizon']} (MBPO's InvertedPendulum schedule) "
        "rather than scheduled. The MuJoCo tasks need termination functions in the model rollouts, which this Dyna "
        "loop does not have." if ran else ""))
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[w1_figure, cut_figure, dyna_figure], claims=claim_list, benchmarks=benchmarks,
                 differences=differences, scope=sc, verdicts_figure=verdicts, checks=check_list)
