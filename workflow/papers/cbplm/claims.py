"""The claims of P7 cbplm, computed from the evaluation tables (the verdict contract of papers.common.claims).

(a)     control (Sec. 4.1, Fig. 3): intervening on a concept through the bottleneck moves that property at
        least 3x more than a continuous-concept conditional LM sent the same request, both measured above the
        noise floor (the plain LM's drift when it redraws the same residues); the ablation control zeroes the
        intervened concept's embedding;
(a_tag) the same against the conditional-tag LM at equal request strength (CB-pLM asked for the mean concept
        of the tag LM's extreme bin);
(b)     perplexity (Sec. 4.3, Table 2): the CB-pLM keeps at least a fixed share of what the plain LM gains
        over residue frequencies (in log-perplexity), read at the end of a training-length sweep whose
        premise is that concept prediction has converged;
Interpretability (Sec. 4.2, Fig. 5), the linear concepts-to-tokens map agreeing with residue scales, is reported as
checks (:func:`interpretability_checks`): it holds by construction (a closed-form reference without a model
reproduces it).

Each is decided on intervals over the training seeds, the independent replicates: every seed retrains all four
models.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def weight_checks(w: pd.DataFrame) -> pd.DataFrame:
    """Per seed: Spearman of the GRAVY weights with Kyte-Doolittle; signs of the charge weights."""
    rows = []
    for seed, g in w.groupby("seed"):
        gravy = g[g.concept == "gravy"]
        charge = g[g.concept == "charge"].set_index("residue").weight
        right = int((charge[["K", "R"]] > 0).sum() + (charge[["D", "E"]] < 0).sum())
        rows.append({"seed": seed, "kd_spearman": spearman(gravy.weight, gravy.kyte_doolittle),
                     "charge_signs_right": right})
    return pd.DataFrame(rows)


def paired_change(iv: pd.DataFrame) -> pd.DataFrame:
    """Per (seed, model, concept, sequence): the change in the requested direction averaged over both
    directions, (z_up - z_down) / 2, from the two regenerated sequences."""
    z = iv.pivot_table(index=["seed", "model", "concept", "sequence"], columns="direction", values="z_after")
    return ((z[1] - z[-1]) / 2).rename("change").reset_index()


# The intervening arms (papers.cbplm.evaluate.Arm) and the baselines CB-pLM is compared with in claim (a).
ARMS = {"cb": "CB-pLM, training extremes", "cb_equal": "CB-pLM, the tag bins' mean (equal strength)",
        "cb_ablated": "CB-pLM, concept embedding zeroed [ablation]", "cond": "continuous-concept conditional LM, training extremes",
        "tag": "conditional-tag LM, extreme bins", "plain": "plain masked LM (noise floor)"}


def excess_over_floor(change: pd.DataFrame) -> pd.DataFrame:
    """Per (seed, concept): each arm's mean change and every handle's excess over the plain LM's (the noise floor:
    what regenerating the same residues without a handle does), columns `<arm>_excess`."""
    per = change.groupby(["seed", "concept", "model"]).change.mean().unstack("model")
    for arm in per.columns:
        if arm != "plain":
            per[f"{arm}_excess"] = per[arm] - per["plain"]
    return per.reset_index()


def ratio_of_means(a, b) -> float:
    """mean(a) / mean(b); NaN where the denominator is not positive (no ratio to speak of). Sums over sizes, not
    np.mean: the bootstrap calls this 10,000 times per interval."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    b_mean = b.sum() / b.size
    return float(a.sum() / a.size / b_mean) if b_mean > 0 else float("nan")


def concept_ratios(exc: pd.DataFrame, names, numerator: str = "cb", denominator: str = "tag") -> dict:
    """Per concept: the `numerator` / `denominator` ratio of excess changes with a paired bootstrap interval over
    seeds, or 'not measured' where the denominator's excess cannot be told from zero (its t interval over seeds
    reaches 0: a ratio over such a denominator has no interval)."""
    from papers.common.claims import bootstrap_interval, t_interval

    out = {}
    for name in names:
        g = exc[exc.concept == name].sort_values("seed")
        m, lo, hi = t_interval(g[f"{denominator}_excess"])
        if g.seed.nunique() < 2 or not lo > 0:
            out[name] = f"not measured ({denominator} excess {m:.3g} [{lo:.3g}, {hi:.3g}] SD reaches 0)"
            continue
        r, r_lo, r_hi = bootstrap_interval(ratio_of_means, g[f"{numerator}_excess"].to_numpy(),
                                           g[f"{denominator}_excess"].to_numpy())
        out[name] = f"{r:.3g} [{r_lo:.3g}, {r_hi:.3g}]"
    return out


def sweep_table(m: pd.DataFrame) -> pd.DataFrame:
    """Per (seed, run length) of the training-length sweep: CB-pLM's held-out perplexity and mean concept R^2; where
    the plain LM was trained as long (the full run), CB-pLM's share of the plain LM's gain (own, true and another
    protein's concepts) and the plain LM's gain over residue frequencies (nats); NaN elsewhere."""
    uni = m[(m.model == "unigram") & (m.metric == "perplexity")].set_index("seed").value
    rows = []
    for (seed, step), g in m[m.model.isin(["cb", "plain"])].groupby(["seed", "step"]):
        def val(model, metric):
            v = g[(g.model == model) & (g.metric == metric)].value
            return float(v.iloc[0]) if len(v) else float("nan")
        log_uni = np.log(uni[seed])
        gain = log_uni - np.log(val("plain", "perplexity"))
        r2 = g[(g.model == "cb") & (g.metric == "concept_r2")].value
        rows.append({"seed": seed, "step": step, "plain_gain": gain, "cb_perplexity": val("cb", "perplexity"),
                     "cb_share": (log_uni - np.log(val("cb", "perplexity"))) / gain,
                     "cb_true_share": (log_uni - np.log(val("cb", "perplexity_true_concepts"))) / gain,
                     "cb_shuffled_share": (log_uni - np.log(val("cb", "perplexity_shuffled_concepts"))) / gain,
                     "concept_r2": float(r2.mean()) if len(r2) else float("nan")})
    return pd.DataFrame(rows).sort_values(["step", "seed"]).reset_index(drop=True)


def cbplm_claims(p, m: pd.DataFrame, change: pd.DataFrame, w: pd.DataFrame, checks: pd.DataFrame) -> list:
    """The three claims. `m`: the metrics rows of every seed (and sweep step); `change`: :func:`paired_change` of the
    interventions; `w`: the CB-pLM's centred concept-to-token weights per seed; `checks`: :func:`weight_checks`."""
    from papers.common.claims import (Claim, Control, PositiveControl, Premise, bootstrap_test, convention, from_paper,
                                      mean_test, paired_test, t_interval)

    c = p.claims
    names = list(p.concepts)
    n = int(m.seed.nunique())
    final = p.train.steps
    threes = from_paper(f"about 3x larger change than the conditional baselines (Sec. 4.1, Fig. 3): min_ratio = "
                        f"{c.min_ratio:g}")

    def metric(kind, name, concept="", step=final):
        g = m[(m.model == kind) & (m.metric == name) & (m.concept == concept) & (m.step == step)].sort_values("seed")
        return g.value.to_numpy(float)

    def reads(kind, shuffled, label):
        """The baseline reads its handle: fed another protein's handle, its perplexity rises (interval > 0)."""
        return mean_test(metric(kind, shuffled) / metric(kind, "perplexity") - 1, threshold=0.0, direction=">",
                         what="seeds", name=f"{label}: perplexity with another protein's handle / its own - 1")

    exc = excess_over_floor(change)
    per_seed = exc.groupby("seed")[[col for col in exc.columns if col not in ("seed", "concept")]].mean().sort_index()
    cb_reads = mean_test(metric("cb", "perplexity_shuffled_concepts") / metric("cb", "perplexity_true_concepts") - 1,
                         threshold=0.0, direction=">", what="seeds",
                         name="CB-pLM: perplexity with another protein's concepts / its own - 1")

    def ratio_test(arm, baseline, label="", table=None):
        """arm excess > 0; arm excess - min_ratio x baseline excess > 0 (paired t: the ratio criterion without a
        denominator that can sit at 0); and where the baseline's excess is told from 0, the ratio itself (paired
        bootstrap). `table`: per-seed excesses (default: the run's). Returns (parts, whether the ratio was tested)."""
        table = per_seed if table is None else table
        x, y = table[f"{arm}_excess"].to_numpy(float), table[f"{baseline}_excess"].to_numpy(float)
        parts = [mean_test(x, threshold=0.0, direction=">", what="seeds", name=f"{label}{arm} excess change (SD)"),
                 paired_test(x, c.min_ratio * y, threshold=0.0, direction=">", what="seeds",
                             name=f"{label}{arm} excess - {c.min_ratio:g} x {baseline} excess (SD)")]
        measured = len(y) >= 2 and t_interval(y)[1] > 0
        if measured:
            parts.append(bootstrap_test(ratio_of_means, x, y, threshold=c.min_ratio, direction=">", what="seeds",
                                        name=f"{label}{arm} excess / {baseline} excess"))
        return parts, measured

    # The convergence premise of (a), (a_tag) and (b): CB-pLM's mean held-out concept R^2 gained from the sweep's
    # longest shorter run (its own schedule) to the full run. The intervention ratio moved with training length
    # (review of issue 50: 1.59 at 400 and 1.91 at 800 steps on one seed), so (a) is read only where it has converged.
    sweep = sweep_table(m)
    steps = sorted(sweep.step.unique())
    last = sweep[sweep.step == final].sort_values("seed")
    before = sweep[sweep.step == steps[-2]].sort_values("seed") if len(steps) > 1 else None
    r2_gain = float((last.concept_r2.to_numpy() - before.concept_r2.to_numpy()).mean()) if before is not None else float("nan")
    converged = Premise.at_most(f"concept prediction converged: mean R^2 gained from a {steps[-2] if len(steps) > 1 else 'no'}"
                                f"-step run to the {final}-step run", r2_gain, c.max_r2_gain, what="cbplm.claims.max_r2_gain")

    def planted(baseline):
        """The positive control of (a): a synthetic arm whose change is plain + k x (baseline - plain) on every row
        (protein, concept, seed), k = min_ratio + 0.5, so its excess over the floor is k times the baseline's by
        construction; through the same analysis it must hold."""
        k = c.min_ratio + 0.5
        rows = change[change.model.isin([baseline, "plain"])]
        wide = rows.pivot_table(index=["seed", "concept", "sequence"], columns="model", values="change")
        synthetic = (wide["plain"] + k * (wide[baseline] - wide["plain"])).rename("change").reset_index()
        both = pd.concat([rows, synthetic.assign(model="planted")], ignore_index=True)
        e = excess_over_floor(both)
        table = e.groupby("seed")[["planted_excess", f"{baseline}_excess"]].mean().sort_index()
        parts, _ = ratio_test("planted", baseline, "planted: ", table)
        return PositiveControl(f"a synthetic arm plain + {k:g} x ({baseline} - plain) on every intervened protein "
                               f"(its excess {k:g} times the baseline's by construction) through the same test", parts)

    def a_claim(cid, arm, baseline, statement, request, premise):
        parts, measured = ratio_test(arm, baseline)
        ctl, _ = ratio_test("cb_ablated", baseline, "ablation: ")
        b_m, b_lo, b_hi = t_interval(per_seed[f"{baseline}_excess"])
        notes = [f"redrawing the attribution-chosen residues without a handle (plain LM) already moves the concepts "
                 f"{per_seed.plain.mean():.3g} SD the requested way; above that floor {ARMS[arm]} adds "
                 f"{per_seed[f'{arm}_excess'].mean():.3g} SD and {ARMS[baseline]} {per_seed[f'{baseline}_excess'].mean():.3g} SD"]
        if not measured:
            notes.append(f"the ratio itself is not measured: the baseline's excess, {b_m:.3g} [{b_lo:.3g}, {b_hi:.3g}] "
                         f"SD, cannot be told from 0; the claim rests on {arm} excess - {c.min_ratio:g} x {baseline} excess")
        ratios = concept_ratios(exc, names, arm, baseline)
        return Claim(
            cid, statement, "about 3x larger change in the desired concept than the conditional baselines (Sec. 4.1, Fig. 3)",
            {"change_sd": {a: float(per_seed[a].mean()) for a in (arm, baseline, "cb_ablated", "plain")},
             "ratio_of_excesses": ratio_of_means(per_seed[f"{arm}_excess"], per_seed[f"{baseline}_excess"]),
             "ratio_by_concept": ratios},
            f"per seed, each arm's change in the requested direction ((z_up - z_down) / 2, mean over the {len(names)} "
            f"concepts and the intervened sequences) minus the plain LM's on the same residues (the floor); {request}; "
            f"over {n} seeds: {arm} excess > 0, {arm} excess - min_ratio x {baseline} excess > 0 (paired t), and, where "
            f"the baseline's excess is told from 0, the ratio (paired bootstrap) > min_ratio = {c.min_ratio:g}",
            parts,
            Control("the same test with CB-pLM's intervened concept embedding zeroed (the bottleneck's path from the "
                    "request to the logits removed, everything else kept)", ctl, kind="ablation"),
            note="; ".join(notes), threshold_source=threes, premise=[*premise, converged],
            positive_control=planted(baseline))

    claim_a = a_claim("a", "cb", "cond",
                      "Intervening through the concept bottleneck moves the targeted property at least 3 times more "
                      "than a conditional LM given the same request, both above the noise floor of regeneration alone.",
                      "CB-pLM and the continuous-concept conditional LM are both asked for the concept's training "
                      "minimum / maximum",
                      [Premise.from_evidence("the conditional LM reads its concept input", reads("cond",
                                             "perplexity_shuffled_concepts", "conditional LM")),
                       Premise.from_evidence("CB-pLM reads its bottleneck", cb_reads)])
    claim_a_tag = a_claim("a_tag", "cb_equal", "tag",
                          "At equal request strength, intervening through the concept bottleneck moves the targeted "
                          "property at least 3 times more than the conditional-tag LM does, both above the noise floor.",
                          "the tag LM gets its lowest / highest bin, CB-pLM the mean concept of the training proteins in "
                          "that bin (the same request on average)",
                          [Premise.from_evidence("the tag LM reads its tags", reads("tag", "perplexity_shuffled_tags",
                                                                                      "tag LM")),
                           Premise.from_evidence("CB-pLM reads its bottleneck", cb_reads)])

    # (b) CB-pLM's share of the plain LM's gain over residue frequencies, read at the end of the training-length sweep.
    gain_share = convention(f"min_gain_share = {c.min_gain_share:g}: the paper's 'comparable' read as losing at most "
                            f"{1 - c.min_gain_share:.0%} of what the plain LM learns beyond residue composition (a "
                            "judgement of this reproduction, fixed before the run)")
    claim_b = Claim(
        "b", f"The CB-pLM keeps at least {c.min_gain_share:.0%} of what a plain masked LM learns beyond residue "
             "frequencies (held-out perplexity), read where its concept prediction has converged.",
        "comparable pre-training perplexity: interpretability does not cost perplexity (Sec. 4.3, Table 2)",
        {"cb_share_of_plain_gain": float(last.cb_share.mean()), "cb_true_concepts_share": float(last.cb_true_share.mean()),
         "concept_r2": float(last.concept_r2.mean()),
         "cb_perplexity_by_run_steps": {int(s): round(float(g.cb_perplexity.mean()), 4) for s, g in sweep.groupby("step")},
         "concept_r2_by_run_steps": {int(s): round(float(g.concept_r2.mean()), 4) for s, g in sweep.groupby("step")}},
        f"per seed after {final} steps, on the same held-out masked residues: the CB-pLM's (its own predicted "
        f"concepts) share (log ppl(frequencies) - log ppl(CB)) / (log ppl(frequencies) - log ppl(plain)); its {n}-seed "
        f"interval lies above min_gain_share = {c.min_gain_share:g}",
        mean_test(last.cb_share, threshold=c.min_gain_share, direction=">", what="seeds",
                  name="CB-pLM's share of the plain LM's gain"),
        Control("the same test on the CB-pLM fed another held-out protein's true concepts (the bottleneck told the "
                "wrong thing)", mean_test(last.cb_shuffled_share, threshold=c.min_gain_share, direction=">",
                                          what="seeds", name="CB-pLM fed another protein's concepts: share"), kind="null"),
        note=(f"fed its true concepts, CB-pLM keeps {last.cb_true_share.mean():.0%} of the plain LM's gain; along the "
              "sweep of separate CB-pLM runs (steps: held-out perplexity, mean concept R^2) "
              + ", ".join(f"{int(s)}: {g.cb_perplexity.mean():.2f}, {g.concept_r2.mean():.2f}" for s, g in sweep.groupby("step"))),
        threshold_source=gain_share,
        premise=[Premise.from_evidence("the plain LM learns beyond residue frequencies (gain in nats)",
                                       mean_test(last.plain_gain, threshold=0.0, direction=">", what="seeds",
                                                 name="plain LM's gain over residue frequencies (nats)")),
                 converged],
        no_positive_control="held-out perplexities of trained models; nothing to be blind")

    return [claim_a, claim_a_tag, claim_b]


SIGNS = {"K": 1.0, "R": 1.0, "D": -1.0, "E": -1.0}  # the charge of each charged residue at pH 7


def interpretability_checks(p, w: pd.DataFrame, checks: pd.DataFrame, slopes: dict) -> list:
    """The paper's interpretability result (Sec. 4.2, Fig. 5) as checks, not claims: the decoder's concept weights
    are trained with the true concepts fed in, so they follow what the concept's definition puts into residue
    frequencies; the closed-form reference without any model (`slopes`, :func:`papers.cbplm.data.residue_slopes`)
    already gives the result (review of issue 50). Each check states the reference beside CB-pLM's weights.
    `checks`: :func:`weight_checks`."""
    from papers.common.claims import Check
    from papers.cbplm.data import AMINO_ACIDS, kyte_doolittle

    ref = {name: pd.Series(v, index=list(AMINO_ACIDS)) for name, v in slopes.items()}
    ref_kd = spearman(ref["gravy"].to_numpy(), kyte_doolittle())
    ref_signs = int(sum((SIGNS[r] * ref["charge"][r]) > 0 for r in SIGNS))
    agree = [spearman(g.set_index("residue").weight.reindex(list(AMINO_ACIDS)), ref[name])
             for (seed, name), g in w.groupby(["seed", "concept"])]
    kd = checks.kd_spearman.to_numpy(float)
    return [
        Check.at_least("c_gravy_kd", "CB-pLM's GRAVY weights (d logit / d concept, centred) follow Kyte-Doolittle, the "
                       f"paper's Fig. 5 (Sec. 4.2); expected by construction: the slope of each residue's centred "
                       f"log-frequency on the standardised GRAVY (no model) gives Spearman {ref_kd:.3f}; mean over "
                       f"{len(kd)} seeds, per seed {', '.join(f'{x:.3f}' for x in kd)}",
                       float(kd.mean()), p.claims.min_kd_rank_correlation,
                       what="cbplm.claims.min_kd_rank_correlation: Spearman"),
        Check.at_least("c_charge_signs", "CB-pLM's net-charge weights are positive for K, R and negative for D, E in "
                       f"every seed (fewest right of 4 over the seeds); expected by construction: the no-model slopes "
                       f"get {ref_signs} of 4", float(checks.charge_signs_right.min()), len(SIGNS),
                       what="signs right"),
        Check.at_least("c_weights_match_reference", "CB-pLM's concept-to-token weights track the no-model slopes of "
                       "residue log-frequency on each concept (mean Spearman over concepts and seeds; self-consistency: "
                       "what a decoder linear in the concept should learn)", float(np.mean(agree)),
                       p.claims.min_kd_rank_correlation, what="cbplm.claims.min_kd_rank_correlation: Spearman"),
    ]
