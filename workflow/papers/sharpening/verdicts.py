"""sharpening's claims, decided on the results tables (papers.common.claims): each with its premise gates and its
negative control (an ablation of the paper's mechanism or a null), checked against the thresholds in
``p.claims`` (config, fixed before the deciding runs; config.yaml says where each comes from).

Replicates: on the language-model level the ``pretrain.seeds`` base models, each pretrained and sharpened with its
own seed, arms on the same base model paired; on the tabular level ``tabular.seeds`` independent base models per
setting (fresh y* and decoys), the two structures sharing them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.claims import (Claim, Control, Premise, Scope, convention, derived, from_paper, mean_test,
                                  paired_test)
from papers.sharpening import tabular as tb
from papers.sharpening.params import Params

SCOPE = Scope("analogue", "the paper's experiments sharpen pretrained LLMs on math and QA benchmarks; here an exact "
                          "tabular model and tiny character-level transformers pretrained on a synthetic reversal task "
                          "with a known sequence mode stand in for them (at the full scale, with sharpening.pretrained "
                          "listing models, best-of-N on GSM-style prompts with a local LM decides (a))")


# ---- reading the results table ---------------------------------------------------------------------------------
def cell(df: pd.DataFrame, level, variant, method, budget, column="accuracy", pairs=None) -> np.ndarray:
    """The per-seed values of one cell, ordered by seed (so two cells of the same base models pair up)."""
    sel = (df.level == level) & (df.variant == variant) & (df.method == method) & (df.budget == budget)
    if pairs is not None:
        sel &= df.pairs == pairs
    return df[sel].sort_values("seed")[column].to_numpy(dtype=float)


def mean(df, *key, column="accuracy", pairs=None) -> float:
    v = cell(df, *key, column=column, pairs=pairs)
    return float(v.mean()) if len(v) else float("nan")


def lm_budgets(p: Params) -> list[int]:
    return list(p.sharpen.budgets)


def required_budgets(df: pd.DataFrame, p: Params, structure: str, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Per seed and K: the budget SFT or RL needs to reach the target accuracy, read off its whole budget curve
    (inf when no budget of the grid reaches it), shape (seeds, len(pairs)); and C_cov per K."""
    tp = p.tabular
    m_req = np.array([[tb.required_budget(tp.budgets, [cell(df, "tabular", structure, method, m, pairs=K)[s]
                                                       for m in tp.budgets], tp.target_accuracy)
                       for K in tp.pairs] for s in range(tp.seeds)])
    cov = np.array([mean(df, "tabular", structure, "sample", 1, column="coverage", pairs=K) for K in tp.pairs])
    return m_req, cov


def budget_slopes(m_req: np.ndarray, cov: np.ndarray, cap: float) -> np.ndarray:
    """Per seed, the least-squares slope of log m_req on log C_cov over the sweep; a budget the grid never
    reached counts as `cap` (twice the largest budget), which understates how fast it grows."""
    y = np.log(np.where(np.isfinite(m_req), m_req, cap))
    x = np.log(cov)
    return np.array([np.polyfit(x, row, 1)[0] for row in y])


def bon_slopes(df: pd.DataFrame, level: str, variant: str, method: str, sizes) -> np.ndarray:
    """Per base model, the least-squares slope of best-of-N accuracy on log2 N over `sizes` (accuracy gained per
    doubling of N, the whole curve at once)."""
    ns = sorted(sizes)
    curves = np.array([cell(df, level, variant, method, n) for n in ns])  # (N, seeds)
    return np.array([np.polyfit(np.log2(ns), curves[:, s], 1)[0] for s in range(curves.shape[1])])


def fit_gate(p: Params, gaps: dict) -> Premise:
    """Every base model fits the corpus law: its KL(law || model) per answer letter on held-out prompts (estimated
    on fresh draws of the law, papers.sharpening.lm.law_gap) at most ``pretrain.fit_gap_max`` (the paper sharpens a
    model that has learned its data; a base model far from the law has no sequence mode to sharpen toward). The
    same threshold is the pretraining's gate on the validation prompts (``pretrain.fit_gap_max``)."""
    worst = max(gaps.values()) if gaps else float("nan")
    return Premise.at_most(f"every base model fits the corpus law: the largest KL(law || model) per answer letter on "
                           f"held-out prompts of the {len(gaps)} base models", worst, p.pretrain.fit_gap_max,
                           what="pretrain.fit_gap_max")


# ---- the claims ----------------------------------------------------------------------------------------------------
def sharpening_claims(p: Params, df: pd.DataFrame, conv: pd.DataFrame, formulas: pd.DataFrame,
                      gaps: dict) -> list[Claim]:
    """The five claims. `df`: the long results table (both levels; rows of level "pretrained" at the full scale);
    `conv`: the convergence runs' KL traces; `formulas`: their final policies' distances to the closed form and its
    wrong neighbours (tabular.formula_distances); `gaps`: {base model: KL(law || model) per letter}."""
    c, tp = p.claims, p.tabular
    ns = sorted(p.bon_sizes)
    N = ns[-1]
    fitted = fit_gate(p, gaps)
    pre_names = sorted(df[df.level == "pretrained"].variant.unique()) if "level" in df else []

    # (a) best-of-N improves with N (the slope of accuracy on log N, per base model) and beats greedy decoding
    def bon_parts(method):
        parts, meas = [], {}
        for v in p.variants:
            slopes = bon_slopes(df, "lm", v, method, ns)
            greedy = cell(df, "lm", v, "greedy", 1)
            parts += [mean_test(slopes, threshold=c.bon_slope_min, direction=">", what="base models",
                                name=f"{v}: slope of accuracy on log2 N"),
                      paired_test(cell(df, "lm", v, method, N), greedy, threshold=0.0, direction=">",
                                  what="base models", name=f"{v}: best-of-{N} - greedy")]
            meas.update({f"{v}.slope_per_doubling": float(slopes.mean()), f"{v}.sampling": mean(df, "lm", v, "sample", 1),
                         f"{v}.greedy": float(greedy.mean()), f"{v}.best_of_{N}": mean(df, "lm", v, method, N)})
        return parts, meas

    ev_a, meas_a = bon_parts("best_of_n")
    ctl_a, _ = bon_parts("best_of_n_shuffled")
    premise_a, where_a = [fitted], f"both LM variants, over the {len(gaps)} base models"
    if pre_names:  # full scale: the pretrained LMs' best-of-N on math prompts decides (a)
        ev_a, ctl_a, meas_a = pretrained_bon_parts(p, df, pre_names, "best_of_n"), \
            pretrained_bon_parts(p, df, pre_names, "best_of_n_shuffled"), {
                f"{m}.best_of_{max(p.pretrained.bon_sizes)}": mean(df, "pretrained", m, "best_of_n",
                                                                  max(p.pretrained.bon_sizes)) for m in pre_names}
        premise_a = [Premise.at_least("the pretrained LMs answer some questions (mean best-of-1 accuracy)",
                                      float(np.mean([mean(df, "pretrained", m, "best_of_n", 1) for m in pre_names])),
                                      0.05, what="a model that never answers has nothing to select")]
        where_a = f"the pretrained LMs {pre_names} on the math prompts, over the questions"
    claim_a = Claim(
        "a", "Best-of-N with the self-reward log pi_base improves with N (accuracy rises with log N from plain "
             "sampling at N = 1) and beats greedy decoding at the largest N.",
        "best-of-N under the model's own sequence likelihood lifts accuracy over sampling and greedy decoding across "
        "models and tasks",
        meas_a,
        f"{where_a}: the least-squares slope of best-of-N accuracy on log2 N over N in {ns} (each base model's whole "
        f"curve) > bon_slope_min = {c.bon_slope_min}, and best-of-{N} minus greedy decoding > 0 (95% t intervals; "
        "paired by base model)",
        ev_a,
        Control("the same criterion on best-of-N from the same pools with the rewards shuffled within each prompt "
                "(a self-reward that carries no information about the sample), where best-of-N is plain sampling",
                ctl_a, kind="null"),
        threshold_source=convention("signs: accuracy rises with N (slope > 0) and best-of-N beats greedy (> 0)"),
        premise=premise_a,
        no_positive_control="best-of-N accuracy is the pool's unbiased estimate over all N-subsets (tested against "
                            "enumeration) of exact correctness: no detector to be blind; the shuffled-reward control "
                            "shows the same test can fail")

    # (b) SFT-sharpening amortises best-of-m (high coverage), at every budget; control: SFT on unselected samples
    v = "high_coverage"
    sample = cell(df, "lm", v, "sample", 1)

    def recovered(sft, m):
        bon = cell(df, "lm", v, "best_of_n", m)
        return (sft - sample) / np.where(bon > sample, bon - sample, np.nan)

    ev_b, ctl_b, meas_b = [], [], {}
    for m in lm_budgets(p):
        frac = recovered(cell(df, "lm", v, "sft", m), m)
        ev_b.append(mean_test(frac, threshold=c.amortisation_fraction, direction=">", what="base models",
                              name=f"m = {m}"))
        ctl_b.append(mean_test(recovered(cell(df, "lm", v, "sft_unselected", 1), m),
                               threshold=c.amortisation_fraction, direction=">", what="base models", name=f"m = {m}"))
        meas_b.update({f"recovered.m{m}": float(np.nanmean(frac)) if np.isfinite(frac).any() else float("nan"),
                       f"sft.m{m}": mean(df, "lm", v, "sft", m),
                       f"best_of_m.m{m}": mean(df, "lm", v, "best_of_n", m)})
    no_gain = [(m, [int(i) for i in np.flatnonzero(~(cell(df, "lm", v, "best_of_n", m) > sample))])
               for m in lm_budgets(p)]
    claim_b = Claim(
        "b", f"SFT-sharpening amortises best-of-N: one sample of the fine-tuned model recovers more than "
             f"{c.amortisation_fraction:.0%} of best-of-N's gain over sampling.",
        "SFT on best-of-N winners recovers much of best-of-N's gain in one sample (amortisation experiments)",
        meas_b,
        f"high-coverage LM, every budget m in {lm_budgets(p)}: the 95% t interval over the {len(gaps)} base models of "
        f"the share of best-of-m's gain over sampling that one SFT sample recovers, (SFT - sampling) / (best-of-m - "
        f"sampling), lies above amortisation_fraction = {c.amortisation_fraction}",
        ev_b,
        Control("SFT on one unselected sample per prompt (a plain draw of pi_base instead of the best-of-m winner: "
                "exactly the self-reward selection removed, the same fine-tuning): the same criterion", ctl_b,
                kind="ablation"),
        note="; ".join(f"best-of-{m} does not beat sampling on base model(s) {ids}, so there is no gain to amortise "
                       "there" for m, ids in no_gain if ids),
        threshold_source=convention(f"{c.amortisation_fraction}: three quarters of the gain (the paper gives no "
                                    "share)"),
        premise=[fitted],
        no_positive_control="accuracies are exact (pi(y* | x) by teacher forcing) and best-of-m's gain is measured "
                            "in the same run; the unselected-sample ablation shows the criterion can fail")

    # (c) the coverage theory: SFT's required budget grows with C_cov, RL's does not (compositional sweep)
    cap = 2 * max(tp.budgets)

    def slope_parts(structure):
        parts, meas, censored = [], {}, []
        for method, direction in [("sft", ">"), ("rl", "<")]:
            m_req, cov = required_budgets(df, p, structure, method)
            if not np.isfinite(m_req).all():
                censored.append(f"{method} {structure} (K = "
                                f"{sorted({tp.pairs[j] for j in np.argwhere(~np.isfinite(m_req))[:, 1]})})")
            slopes = budget_slopes(m_req, cov, cap)
            parts.append(mean_test(slopes, threshold=c.budget_slope, direction=direction, what="base models",
                                   name=f"{structure}: {method.upper()} d log m_req / d log C_cov"))
            meas.update({f"{structure}.{method}.slope": float(slopes.mean()),
                         **{f"{structure}.{method}.m_req.K{K}": geo for K, geo in  # geometric mean over base models
                            zip(tp.pairs, np.exp(np.log(np.minimum(m_req, cap)).mean(0)).tolist())}})
        return parts, meas, censored

    ev_c, meas_c, cens_c = slope_parts("compositional")
    ctl_c, _, cens_ctl = slope_parts("atomic")
    cov_range = required_budgets(df, p, "compositional", "sft")[1]
    optimum = min(mean(df, "tabular", "compositional", "optimum", 0, pairs=K) for K in tp.pairs)
    claim_c = Claim(
        "c", "SFT-sharpening's required sample budget grows with the coverage coefficient C_cov, while "
             "RL-sharpening's does not.",
        "SFT-sharpening is minimax optimal but needs coverage (budget ~ C_cov); RLHF-sharpening with online "
        "exploration bypasses the coverage requirement",
        meas_c,
        f"tabular compositional sweep, K = {list(tp.pairs)} (C_cov {cov_range.min():.3g} .. {cov_range.max():.3g}): "
        f"for each base model, the budget each method needs to reach accuracy {tp.target_accuracy} is read off its "
        f"whole budget curve ({list(tp.budgets)}) at every setting, and log m_req is fitted against log C_cov; the "
        f"95% t interval over the {tp.seeds} base models of SFT's slope lies above budget_slope = {c.budget_slope} "
        "and of RL's below it",
        ev_c,
        Control("the atomic sweep (each prompt's pi_base(y*) and C_cov as in the compositional sweep, but y* appears "
                "only whole: exactly the part-by-part structure that online exploration exploits removed): the same "
                "criterion", ctl_c, kind="ablation"),
        note="; ".join(x for x in [
            f"a budget the grid never reached counts as {cap} (it then understates growth): " + ", ".join(
                cens_c + [f"{x_} [control]" for x_ in cens_ctl]) if cens_c or cens_ctl else "",
            "the per-budget comparison of RL and SFT is claim (e)"] if x),
        threshold_source=from_paper(f"the theory's slopes, 1 for SFT (its sample complexity grows as C_cov) and 0 for "
                                    f"RL with exploration; {c.budget_slope} is midway"),
        premise=[Premise.at_least("the target accuracy is reachable: the KL-regularised optimum's accuracy at every K "
                                  "(closed form)", optimum, tp.target_accuracy, what="target_accuracy")],
        no_positive_control="the accuracies are exact (closed forms of the tabular model); the atomic ablation shows "
                            "the RL part can fail")

    # (d) tabular RL converges to the closed-form optimum, and not to a neighbouring formula (one long run per seed)
    def formula_parts(f):
        d = formulas[formulas.hypothesis == f].sort_values("seed")
        b = f * p.beta
        return [mean_test(d.tolerance - d.kl_rl, threshold=0.0, direction=">", what="RL runs",
                          name=f"nearest wrong answer's KL to pi*_{b:g} - KL(pi_RL || pi*_{b:g})"),
                mean_test(d.kl_rl_half - d.kl_rl, threshold=0.0, direction=">", what="RL runs",
                          name=f"KL(pi_RL || pi*_{b / 2:g}) - KL(pi_RL || pi*_{b:g})"),
                mean_test(d.kl_rl_double - d.kl_rl, threshold=0.0, direction=">", what="RL runs",
                          name=f"KL(pi_RL || pi*_{2 * b:g}) - KL(pi_RL || pi*_{b:g})")]

    right = formulas[formulas.hypothesis == 1.0]
    last = conv.sort_values("samples_per_prompt").groupby("seed").tail(1).set_index("seed").kl_to_optimum
    three_q = conv[conv.samples_per_prompt <= 0.75 * conv.samples_per_prompt.max()]
    at_3q = three_q.sort_values("samples_per_prompt").groupby("seed").tail(1).set_index("seed").kl_to_optimum
    drop = float(((at_3q - last) / last).max())
    claim_d = Claim(
        "d", "On the tabular model, RL-sharpening converges to the closed-form optimum pi_base^(1+1/beta) / Z: nearer "
             "to it than to the optimum of beta/2 or 2 beta, and nearer than the mode or either of those is.",
        "the KL-regularised self-reward objective is maximised by pi*_beta proportional to pi_base^(1+1/beta)",
        {"kl_rl": float(right.kl_rl.mean()), "tolerance": float(right.tolerance.mean()),
         "kl_rl_half": float(right.kl_rl_half.mean()), "kl_rl_double": float(right.kl_rl_double.mean()),
         "samples_per_prompt": int(conv.samples_per_prompt.max()), "beta": p.beta},
        f"after {tp.convergence_samples} samples per prompt (K = {tp.convergence_pairs}, one base model per run): "
        f"KL(pi_RL || pi*_beta) below the tolerance derived on the same base model, the smallest KL(W || pi*_beta) "
        f"over the wrong answers W in (pi*_beta/2, pi*_2beta, the point mass on the mode); and KL(pi_RL || pi*_beta) "
        f"below KL(pi_RL || pi*_beta/2) and KL(pi_RL || pi*_2beta); 95% t intervals over the {tp.seeds} runs",
        formula_parts(1.0),
        Control(f"the same test with the wrong formula pi*_2beta = pi_base^(1 + 1/(2 beta)) in the optimum's place "
                f"(its tolerance and neighbours pi*_beta and pi*_4beta)", formula_parts(2.0), kind="null"),
        threshold_source=derived("the nearest wrong answer's KL to pi*_beta, computed exactly on each run's base "
                                 "model (the point mass on the mode, pi*_beta/2, pi*_2beta); signs for the "
                                 "neighbour comparisons"),
        premise=[Premise.at_most("every run has settled: the largest relative fall of KL(pi_RL || pi*_beta) over the "
                                 "last quarter of the run", drop, c.settled_drop_max, what="settled_drop_max")],
        no_positive_control="the KLs are exact (closed forms over the tabular chains); a policy at a wrong formula "
                            "fails the same test (tests/papers/test_sharpening.py) and so does the wrong-formula "
                            "control")

    # (e) RL's lead over SFT is larger under low coverage: the interaction, per budget, paired by base model
    def interaction(arm):
        def lead(variant, m):
            return cell(df, "lm", variant, arm, m) - cell(df, "lm", variant, "sft", m)

        return [paired_test(lead("low_coverage", m), lead("high_coverage", m), threshold=0.0, direction=">",
                            what="base models", name=f"m = {m}: ({arm} - SFT) at low coverage - at high coverage")
                for m in lm_budgets(p)]

    ev_e, ctl_e = interaction("rl"), interaction("best_of_n")
    claim_e = Claim(
        "e", "RL-sharpening's lead over SFT-sharpening at matched sample budgets is larger under low coverage than "
             "under high coverage, at every budget the run covers.",
        "RLHF-sharpening with online exploration bypasses the coverage requirement of SFT-sharpening",
        {f"interaction.m{m}": e.effect for m, e in zip(lm_budgets(p), ev_e)}
        | {f"rl_minus_sft.{v}.m{m}": float((cell(df, "lm", v, "rl", m) - cell(df, "lm", v, "sft", m)).mean())
           for v in p.variants for m in lm_budgets(p)},
        f"at every budget m in {lm_budgets(p)}: (RL - SFT accuracy) on the low-coverage LM (C_cov = "
        f"{mean(df, 'lm', 'low_coverage', 'sample', 1, column='coverage'):.3g}) minus (RL - SFT) on the high-coverage "
        f"LM (C_cov = {mean(df, 'lm', 'high_coverage', 'sample', 1, column='coverage'):.3g}), paired by base model, "
        "> 0 (95% paired t intervals)",
        ev_e,
        Control("the same interaction with best-of-m of the base model in RL's place (selection from pi_base samples, "
                "no exploration and no training: it needs coverage as SFT does). If it shows the interaction too, the "
                "test only measures how much SFT loses at low coverage, not what RL gains", ctl_e, kind="null"),
        threshold_source=convention("a sign: the lead is larger under low coverage"),
        premise=[fitted],
        no_positive_control="accuracies are exact (teacher forcing) and best-of-m is the pool's unbiased estimate; "
                            "the best-of-m control shows the interaction test can fail")
    return [claim_a, claim_b, claim_c, claim_d, claim_e]


def pretrained_bon_parts(p: Params, df: pd.DataFrame, names: list[str], method: str):
    """(a) at the full scale: per pretrained LM, the slope of best-of-N accuracy on log2 N and best-of-N_max minus
    greedy, each with a percentile bootstrap over the questions (per-question rows, level "pretrained_question")."""
    from papers.common.claims import bootstrap_test

    ns = sorted(p.pretrained.bon_sizes)
    parts = []
    for name in names:
        q = df[(df.level == "pretrained_question") & (df.variant == name)]
        curve = q[q.method == method].pivot_table(index="seed", columns="budget", values="accuracy")[ns].to_numpy()
        greedy = q[q.method == "greedy"].sort_values("seed").accuracy.to_numpy()
        x = np.log2(ns)
        parts += [bootstrap_test(lambda a: np.polyfit(x, a.mean(0), 1)[0], curve, threshold=p.claims.bon_slope_min,
                                 direction=">", what="questions", name=f"{name}: slope of accuracy on log2 N"),
                  bootstrap_test(lambda a, g: a[:, -1].mean() - g.mean(), curve, greedy, threshold=0.0, direction=">",
                                 what="questions", name=f"{name}: best-of-{ns[-1]} - greedy")]
    return parts
