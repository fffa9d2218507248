"""The sharpening report: the results table, three figures, the claims with computed verdicts
(papers.sharpening.verdicts), report.md."""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.claims import write_claims
from papers.common.io import read_json, read_parquet, read_parquets, write_json
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.report import job_times, write_report
from papers.common.tables import mean_std, write_table
from papers.sharpening import tabular as tb
from papers.sharpening import task
from papers.sharpening.params import METHODS, SLUG, STRUCTURES, parse
from papers.sharpening.verdicts import (PREMISE_UNMET, SCOPE, c_decision, cell, collapse_sentence, mean,
                                        required_budgets, sharpening_claims, step_methods)

TITLE = "P11 sharpening: Self-improvement in language models: the sharpening mechanism"
STRUCTURE_LABEL = {"compositional": "tabular, compositional", "atomic": "tabular, atomic (y* only whole)",
                   "absorbing": "tabular, absorbing decoys"}


def labels(p) -> dict:
    """Row and panel labels; the LM variants' numbers of pairs from the config (task.answer_pairs)."""
    return {v: f"LM, {k} pairs ({v.replace('_', ' ')})" for v, k in p.task.answer_pairs.items()} | STRUCTURE_LABEL


def _stats(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample std over seeds of accuracy and log pi_base, per (level, variant, pairs, method, budget)."""
    g = df.groupby(["level", "variant", "pairs", "method", "budget"], sort=False, dropna=False)
    out = g.agg(accuracy_mean=("accuracy", "mean"), accuracy_std=("accuracy", "std"),
                greedy_accuracy_mean=("greedy_accuracy", "mean"), log_pi_base_mean=("log_pi_base", "mean"),
                coverage_mean=("coverage", "mean"), seeds=("seed", "nunique")).reset_index()
    out["accuracy_std"] = out.accuracy_std.fillna(0.0)
    return out


def report(*, cfg, scale, results, summary, convergence, formulas, history, fit, benchmarks, table_md, table_csv,
           claims, params_json, report_md, verdicts, fig_bon, fig_sharpening, fig_convergence, pretrained=()):
    p = parse(cfg)
    c, tp = p.claims, p.tabular
    LABEL = labels(p)
    df = read_parquet(results)
    if len(pretrained):
        df = pd.concat([df, read_parquets(pretrained)], ignore_index=True)
    s = read_json(summary)
    conv, form, hist, fits = (read_parquet(x) for x in (convergence, formulas, history, fit))
    gaps = {int(k): float(v) for k, v in fits[fits.split == "test"].set_index("seed").law_gap.items()}
    budgets_lm = list(p.sharpen.budgets)
    tab_bench = [x for x in benchmarks if str(x).endswith("tabular.tsv")]
    tab_cpu = job_times(tab_bench)["cpu_seconds"] if tab_bench else float("nan")
    all_cpu = job_times(benchmarks)["cpu_seconds"]
    coverage = {v: mean(df, "lm", v, "sample", 1, column="coverage") for v in p.variants}

    # --- table: the LM (best-of-m beside SFT and RL at the same m), then the tabular sweep (required budgets)
    lines = []

    def line(setting, cov, m, bon="", sft="", rl="", extra=""):
        return {"setting": setting, "C_cov": f"{cov:.3g}", "budget m": m, "best-of-m (base)": bon,
                "SFT-sharpening": sft, "RL-sharpening": rl, "control": extra}

    for v in p.variants:
        lines.append(line(LABEL[v], coverage[v], "greedy decoding", bon=mean_std(cell(df, "lm", v, "greedy", 1))))
        if v == "high_coverage":
            lines.append(line(LABEL[v], coverage[v], "SFT on 1 unselected sample",
                              sft=mean_std(cell(df, "lm", v, "sft_unselected", 1))))
        for m in sorted(set(p.bon_sizes) | set(budgets_lm)):
            sft, rl, off = (cell(df, "lm", v, x, m) for x in ("sft", "rl", "rl_offline"))
            lines.append(line(LABEL[v], coverage[v], str(m), bon=mean_std(cell(df, "lm", v, "best_of_n", m)),
                              sft=mean_std(sft) if len(sft) else "", rl=mean_std(rl) if len(rl) else "",
                              extra="shuffled reward: " + mean_std(cell(df, "lm", v, "best_of_n_shuffled", m))
                              + (f"; offline RL: {mean_std(off)}" if len(off) else "")))
    for structure in STRUCTURES:
        methods = (*METHODS, "rl_offline") if structure == tp.deciding_structure else METHODS
        req = {method: required_budgets(df, p, structure, method)[0] for method in methods}
        # claim (c)'s other RL step sizes (online and offline), on the deciding structure where the run holds them
        more = {lr: step_methods(p, lr) for lr in tp.lr_sensitivity if structure == tp.deciding_structure
                and set(step_methods(p, lr)) <= set(df[(df.level == "tabular") & (df.variant == structure)].method)}
        req |= {m: required_budgets(df, p, structure, m)[0] for pair in more.values() for m in pair}
        for j, K in enumerate(tp.pairs):
            cov = mean(df, "tabular", structure, "sample", 1, column="coverage", pairs=K)
            lines.append(line(f"{LABEL[structure]}, K = {K}", cov, f"required to stay at accuracy {tp.target_accuracy}",
                              sft=" / ".join(f"{x:.0f}" for x in req["sft"][:, j]),
                              rl=" / ".join(f"{x:.0f}" for x in req["rl"][:, j]),
                              extra=("offline RL " + " / ".join(f"{x:.0f}" for x in req["rl_offline"][:, j]) + "; "
                                     if "rl_offline" in req else "")
                                    + "".join(f"step {lr:g}: RL " + " / ".join(f"{x:.0f}" for x in req[on][:, j])
                                              + ", offline RL " + " / ".join(f"{x:.0f}" for x in req[off][:, j]) + "; "
                                              for lr, (on, off) in more.items())
                                    + f"greedy {mean(df, 'tabular', structure, 'greedy', 1, pairs=K):.3g}, "
                                    f"optimum {mean(df, 'tabular', structure, 'optimum', 0, pairs=K):.3g}"))
    # claim (c)'s sample-limited premise (review sharpening_r10): online and offline RL's required budgets at the
    # configured and at tabular.premise_samples_per_step samples per prompt per step, per step size and fitted K
    per_c_table = c_decision(df, p)[0]
    for lr, d in per_c_table.items():
        for arm, r in d.get("limited", {}).items():
            if r is None:
                continue
            for K in r["configured"]:
                cov = mean(df, "tabular", tp.deciding_structure, "sample", 1, column="coverage", pairs=K)
                lines.append(line(f"{LABEL[tp.deciding_structure]}, K = {K}", cov,
                                  f"premise: {arm} RL at step {lr:g}, required at {tp.samples_per_step} -> "
                                  f"{tp.premise_samples_per_step} samples per step",
                                  rl=f"{r['configured'][K]:.4g} -> {r['premise'][K]:.4g}",
                                  extra=(f"ratio over the fitted K {r['ratio']:.3g} [{np.exp(r['test'].interval[0]):.3g}"
                                         f", {np.exp(r['test'].interval[1]):.3g}]" if np.isfinite(r["ratio"]) else
                                         "no ratio (both budgets unreached on a base model)") + ", premise "
                                        f"{'met' if r['met'] else 'not met'} (< {c.sample_limited_ratio:g})"))
    for name in p.pretrained.names:  # the paper's own setting (full scale)
        for N in p.pretrained.bon_sizes:
            lines.append(line(f"pretrained LM {name}, math prompts", float("nan"), str(N),
                              bon=f"{mean(df, 'pretrained', name, 'best_of_n', N):.3g}",
                              extra=f"shuffled reward: {mean(df, 'pretrained', name, 'best_of_n_shuffled', N):.3g}; "
                                    f"greedy {mean(df, 'pretrained', name, 'greedy', 1):.3g}"))
    caption = (
        f"Accuracy (probability of the correct answer) of one sample. LM rows: by samples per prompt m, best-of-m "
        f"with the self-reward log pi_base, and one sample of the SFT- or RL-sharpened model trained with m samples "
        f"per prompt (mean +- std over {p.pretrain.seeds} base models, each sharpened once), beta = {p.beta}; "
        f"control column: best-of-m when each sample carries another sample's reward, and offline RL (the same RL "
        f"restricted to SFT's own pool of base samples, low coverage only). Tabular rows: the budget "
        f"(samples per prompt, grid {list(tp.budgets)}) from which each seed's SFT, RL and offline RL stay at accuracy "
        f"{tp.target_accuracy} or above (inf: not reached, or fallen below it again at the largest budget), seeds "
        f"separated by /; on the {tp.deciding_structure} sweep also online and offline RL at the other step sizes "
        f"{list(tp.lr_sensitivity)} (claim (c) is decided at each); 'premise' rows: claim (c)'s sample-limited premise, "
        f"the geometric mean over the base models of online or offline RL's required budget at {tp.samples_per_step} "
        f"and at {tp.premise_samples_per_step} samples per prompt per step (the latter on the grid's multiples of "
        f"{tp.premise_samples_per_step}), per fitted K, and the ratio's geometric mean over K and base models [95% t]; "
        f"{tp.prompts} prompts, V = {tp.vocab}, "
        f"a(x) in {list(tp.levels)}. C_cov = E_x[1 / pi_base(y*|x)]. Full curves: table.csv.")
    write_table(pd.DataFrame(lines), table_md, table_csv, caption=caption,
                csv_df=_stats(df[df.level != "pretrained_question"]))

    # --- figures
    _bon_figure(fig_bon, p, df, coverage, s["lm"], LABEL)
    _sharpening_figure(fig_sharpening, p, df, coverage, LABEL)
    floor = task.entropy_per_letter(p.task.alphabet, p.task.levels)
    _convergence_figure(fig_convergence, p, conv, form, hist, fits, floor)

    claim_list, check_list = sharpening_claims(p, df, conv, form, gaps, s["lm"])
    write_claims(claim_list, claims, paper=SLUG, scale=scale, scope=SCOPE, checks=check_list)
    write_json(to_dict(p), params_json)

    law = s["lm"]
    final_loss = hist.groupby("seed").loss.apply(lambda v: float(v.tail(100).mean())).to_dict()
    val_fits = fits[fits.split == "val"]
    inits = val_fits.groupby("seed").init.max().add(1).to_dict()
    rejected = int(sum(inits.values()) - len(inits))
    val_gaps = val_fits.sort_values(["seed", "init"]).law_gap.tolist()
    right = form[form.hypothesis == 1.0]
    alpha = tb.kl_optimum(p.beta)
    what = (
        f"The task (papers/sharpening/task.py): a prompt of 2K letters (alphabet {p.task.alphabet}); its correct "
        f"answer y* is the reversal, read as K pairs. The corpus writes each pair correctly with probability a(x), "
        f"else as a decoy pair (the next letter, then a uniform letter); a(x) in {list(p.task.levels)} is set by the "
        f"prompt's first letter. y* is the sequence mode (pi(y*) = a^K beats any decoy pair's (1 - a) / A per "
        f"pair), but where a(x) < 1/2 greedy decoding writes the decoy letter: under the exact law greedy is wrong on "
        f"{law['high_coverage']['share_greedy_wrong_under_the_law']:.0%} of the held-out prompts.\n\n"
        f"Level 1, exact tabular model (the same generator as Markov tables, {tp.prompts} prompts, V = {tp.vocab}): "
        f"a coverage sweep over K = {list(tp.pairs)} pairs in three structures, compositional (pairs independent, "
        f"as in the LM task), atomic (all of y* with probability a^K, else a decoy: the same C_cov, but y* cannot "
        f"be assembled part by part) and absorbing (compositional, but after a decoy token every later token is a "
        f"decoy: the same C_cov, and a later pair is reachable only through correct earlier ones), {tp.seeds} "
        f"independent base models per setting; claim (c) is decided on the {tp.deciding_structure} sweep. SFT-sharpening is the tabular "
        f"maximum-likelihood fit to the best-of-m winner; RL-sharpening is REINFORCE (reward-to-go, leave-one-out "
        f"baseline, Adam on the logits, lr {tp.lr}, {tp.samples_per_step} samples per prompt per step) on "
        f"E[log pi_base] - {p.beta} KL(pi || pi_base), sampling from the current policy (online) and, as the "
        f"ablation on the {tp.deciding_structure} sweep, restricted to a fixed pool of base samples (offline RL: at "
        f"budget m it draws from the policy renormalised on the pool's first m samples), both there also at the step "
        f"sizes {list(tp.lr_sensitivity)}, over "
        f"budgets {list(tp.budgets)}; the required budget is the budget from which each curve's accuracy stays at "
        f"or above {tp.target_accuracy}. Its closed-form "
        f"optimum is pi*_beta = pi_base^{alpha:.3g} / Z (backward messages); one long RL run per seed "
        f"({tp.convergence_samples} samples per prompt, K = {tp.convergence_pairs}, step size "
        f"{'falling linearly to 0' if tp.convergence_decay else 'constant'}) ends at KL(pi_RL || pi*_beta) = "
        f"{right.kl_rl.mean():.3g} nats per prompt (mean over runs), against {right.tolerance.mean():.3g} for the "
        f"nearest wrong answer (the point mass on the mode, pi*_beta/2 or pi*_2beta), "
        f"{right.kl_rl_half.mean():.3g} / {right.kl_rl_double.mean():.3g} from the run to pi*_beta/2 / pi*_2beta, and "
        f"{right.kl_rl_alpha_below.mean():.3g} / {right.kl_rl_alpha_above.mean():.3g} to pi_base^{alpha - 1:.3g} / "
        f"pi_base^{alpha + 1:.3g} (check d_optimum).\n\n"
        f"Level 2, {p.pretrain.seeds} independently pretrained {p.model.n_layer}-layer, {p.model.n_embd}-wide "
        f"character-level causal transformers (kernels.attention), {p.pretrain.steps} steps each on "
        f"{p.task.pretrain_examples} corpus answers (prompt lengths 2 .. {p.task.max_len}"
        + (f"; AdamW at peak lr {p.pretrain.lr:g} after {p.pretrain.warmup} warm-up steps, cosine decay; a curriculum on "
           f"prompt length: the longest prompt length of the batches rises 2, 4, .. {p.task.max_len} in equal shares "
           f"of the first {p.pretrain.length_curriculum} steps" if p.pretrain.length_curriculum else "")
        + "), to a gate: an "
        f"initialisation whose fit to the law on the validation prompts misses {p.pretrain.fit_gap_max} nats per "
        f"letter is discarded and the base model drawn again, up to {p.pretrain.max_inits} initialisations; "
        f"initialisations used per base model: {', '.join(str(v) for v in inits.values())} ({rejected} discarded, "
        f"validation gaps {', '.join(f'{v:.3f}' for v in val_gaps)}). The fit: KL(law || model) per answer letter, "
        f"the worse of the two variants, on {p.pretrain.fit_draws} fresh draws of the law at each prompt; on the "
        f"held-out test prompts {', '.join(f'{v:.3f}' for v in gaps.values())} nats per kept base model (the premise "
        f"of (b), (e) and of the check a_law: at most {p.pretrain.fit_gap_max}); training loss over the last 100 steps "
        f"{', '.join(f'{v:.3f}' for v in final_loss.values())} against the law's entropy {floor:.3f}. The "
        f"{p.task.train_prompts} training, {p.task.test_prompts} held-out and {p.task.val_prompts} validation prompts "
        f"per variant are drawn first, distinct, and kept out of the corpus (checked by "
        f"check_held_out before pretraining). Each base model is sharpened once per method on "
        f"{p.task.answer_pairs['high_coverage']} pairs (C_cov = {coverage['high_coverage']:.3g}, law "
        f"{law['high_coverage']['coverage_of_the_law']:.3g}) and {p.task.answer_pairs['low_coverage']} pairs (C_cov = "
        f"{coverage['low_coverage']:.3g}, law {law['low_coverage']['coverage_of_the_law']:.3g}) with m in {budgets_lm} "
        f"samples per prompt: SFT on the best-of-m winners ({p.sharpen.sft_epochs} epochs, lr {p.sharpen.sft_lr}; "
        f"ablation: SFT on one unselected sample) and on-policy REINFORCE with the KL term "
        f"({p.sharpen.rl_samples_per_prompt} samples per prompt per step, lr {p.sharpen.rl_lr}; ablation: the same "
        f"REINFORCE restricted to SFT's own pool of base samples on the low-coverage variant, offline RL: at budget m "
        f"it draws from SFT's first m samples, {p.sharpen.rl_samples_per_prompt} distinct ones per prompt and pass, "
        f"without replacement, each in proportion to pi / pi_base among those not drawn yet: a flatter draw than the "
        f"policy renormalised on the pool once the policy has moved, review sharpening_r14). One sample's "
        f"accuracy is exact (pi(y* | x) by teacher forcing); best-of-N is estimated without bias from one pool of "
        f"{max(p.bon_sizes)} samples per prompt, and from the same pool with the rewards shuffled within each prompt "
        f"(control).")
    # claim (c)'s attribution, per RL step size, from the run (review sharpening_r9): the share of RL's lead over SFT
    # that removing exploration gives back, and the step sizes where plain REINFORCE did not converge
    per_c = c_decision(df, p)[0]
    down = [lr for lr, d in per_c.items() if d["verdict"] == PREMISE_UNMET and not d["converged"]]
    bound = [lr for lr, d in per_c.items() if d["verdict"] == PREMISE_UNMET and d["converged"]]
    share_text = ", ".join(f"{d['share'].effect:.2f} [{d['share'].interval[0]:.2f}, {d['share'].interval[1]:.2f}] "
                           f"at step size {lr:g}" for lr, d in per_c.items() if "share" in d and lr not in down)
    share_text = (f"{share_text or 'not measured'} (mean [95% t] over the base models; the ablation keeps the rest "
                  "of the lead)" + "".join(f", and at {lr:g}, where online RL did not converge, "
                                           f"{per_c[lr]['share'].effect:.3g} [{per_c[lr]['share'].interval[0]:.3g}, "
                                           f"{per_c[lr]['share'].interval[1]:.3g}] (a lead near 0 divides it)"
                                           for lr in down))
    fit_K = [K for K in tp.pairs if K >= c.budget_fit_min_pairs]
    optimum = min(mean(df, "tabular", tp.deciding_structure, "optimum", 0, pairs=K) for K in tp.pairs)
    collapse_text = "".join(
        "A" + collapse_sentence(lr, per_c[lr], optimum, max(tp.budgets), fit_K, tp.target_accuracy,
                                c.convergence_tolerance)[1:] + ". " for lr in down if per_c[lr].get("plateau"))

    def ratios(d):
        return " and ".join(f"{arm} RL " + (f"{r['ratio']:.2f} [{np.exp(r['test'].interval[0]):.2f}, "
                                             f"{np.exp(r['test'].interval[1]):.2f}]" if np.isfinite(r["ratio"]) else
                                             "no ratio (both budgets unreached on a base model)")
                            for arm, r in d.get("limited", {}).items() if r is not None)
    limit_text = (
        "The tabular RL spends its budget as samples per step x Adam steps, so its required budget can count "
        "optimiser steps rather than samples (review sharpening_r10); online and offline RL were therefore rerun at "
        f"{tp.premise_samples_per_step} instead of {tp.samples_per_step} samples per prompt per step at the fitted K, "
        "and a step size votes only where the ratio of required budgets (1: sample-limited, "
        f"{tp.premise_samples_per_step / tp.samples_per_step:g}: step-limited) lies wholly below "
        f"{c.sample_limited_ratio:g} (their geometric midpoint, a convention fixed before this run) for both. Measured "
        "ratio (geometric mean over the fitted K and base models [95% t]): "
        + "; ".join(f"step {lr:g}: {ratios(d)}" + (" (not shown sample-limited: no vote)" if lr in bound else "")
                    for lr, d in per_c.items() if "limited" in d) + ". ")
    # what the undecided step sizes lean to (review sharpening_r12: the report should say it plainly), point
    # estimates only: none of these step sizes met the premises that let it vote
    leaning = [lr for lr, d in per_c.items() if "share" in d and lr not in down]
    lean_text = ("Read plainly, at the step sizes where online RL converged (" + ", ".join(f"{lr:g}" for lr in leaning)
                 + "), RL's lead over SFT in the slope (part (i)) is " + ", ".join(
                     f"{per_c[lr]['parts'][0].effect:.2f}" for lr in leaning) + f" against {c.budget_slope:g}, and the "
                 "share of it owed to exploration (part (ii)) is " + ", ".join(
                     f"{per_c[lr]['share'].effect:.2f}" for lr in leaning) + f" against {c.owed_share:g}: in its point estimate the lead "
                 + ("clears its threshold " if all(per_c[lr]['parts'][0].effect > c.budget_slope for lr in leaning)
                    else "does not clear its threshold ") + "at each of them and the attribution to exploration "
                 + ("falls short of its threshold at each of them" if all(
                     per_c[lr]['share'].effect < c.owed_share for lr in leaning) else "does not fall short everywhere")
                 + ", but no step size meets the premises that let it decide, so these lean and do not decide. "
                 ) if leaning else ""
    sft_rows = df[(df.level == "tabular") & (df.method == "sft")]
    sft_vs_winner = float((sft_rows.accuracy - sft_rows.winner_accuracy).abs().max()) if len(sft_rows) else float("nan")
    full_a = (f"decides (a) for the listed LMs {p.pretrained.names}" if p.pretrained.names else
              "is not run at this scale (sharpening.pretrained lists no models), so (a) is not measured here")
    differences = (
        "The paper is mainly theoretical; its experiments use pretrained LLMs (best-of-N with the sequence "
        "log-likelihood on math and QA benchmarks, and SFT-sharpening for amortisation). Offline on a laptop none "
        "of that runs, so we test its claims on (1) an exact tabular model, where coverage, best-of-N and the "
        "KL-regularised optimum have closed forms, and (2) tiny transformers pretrained here on a synthetic task "
        "whose ground truth (the sequence mode of every prompt) is known exactly. That task makes the most likely "
        "answer the correct one and greedy decoding wrong on the prompts with a(x) < 1/2 by construction, so on the "
        "tiny transformers best-of-N's rise with N follows from the corpus law once they fit it: it is the check "
        "a_law (the law's prediction beside the measured curve), not evidence for (a). The paper's RLHF-sharpening "
        "guarantee without coverage uses an exploration-augmented preference method; we use plain on-policy policy "
        "gradient, whose exploration is sampling from the current policy, and ablate exactly that with offline RL "
        "(the same update restricted to a fixed pool of base samples, on the LM SFT's own pool) "
        f"for (c) and (e); (c) requires more than {c.owed_share:g} of RL's lead over SFT in the slope to be given back "
        "when exploration is removed, (offline RL's slope - online RL's) / (SFT's - online RL's) per base model "
        f"(review sharpening_r9: it was a sign); in this run that share is {share_text}. {collapse_text}{limit_text}{lean_text}"
        f"Tabular SFT is the maximum-likelihood fit to one best-of-m winner per prompt, i.e. the point mass on it "
        f"(tabular.sft_sharpen), so its accuracy is best-of-m's winner accuracy exactly (largest difference over the "
        f"{len(sft_rows)} tabular SFT rows of this run: {sft_vs_winner:.3g}) and its slope is the coverage law of "
        "best-of-m by construction: the theory's SFT, not a learned one; offline RL, which learns per transition "
        "from all m samples of its pool, can grow more slowly than it without any exploration (review "
        "sharpening_r9). "
        "(e) requires RL to beat offline RL, with "
        "greedy decoding of the base model in RL's place as a control that must fail. (c) is decided on the "
        f"{tp.deciding_structure} sweep (adopted after a review found the ablation also passed on the compositional "
        "one, where every pair branches from any previous token); the other structures are reported beside it, not "
        "deciding. (c) is decided at every RL step size of "
        f"{sorted({tp.lr, *tp.lr_sensitivity})} and holds only where every step size holds, fails only where every "
        "step size at which online RL converged fails (review sharpening_r8 found "
        "the former verdict, at one step size, decided by it), on slopes fitted over K >= "
        f"{p.claims.budget_fit_min_pairs}, past the settings where RL's budget is set by its optimisation steps, not "
        "its samples; its statement was reworded from \"RL's budget does not grow\" to \"grows markedly more slowly "
        "than SFT's\", what the slope criterion tests. Both choices were fixed before the run that decides them; "
        "the share criterion of (ii), the rule that a control which does not clearly fail blocks a step size's "
        "'holds', and the convergence premise were chosen after review sharpening_r9 had shown the shares on this "
        "run, each making (c) stricter, and its statement reworded to \"more than half of that lead is owed to "
        "online exploration\", what the share tests"
        + (f"; the tabular stage, which holds the RL runs at all {1 + len(tp.lr_sensitivity)} step sizes, used "
           f"{tab_cpu:.0f} of the paper's {all_cpu:.0f} CPU-s (Snakemake benchmarks): the step sizes besides "
           f"{tp.lr:g} ({list(tp.lr_sensitivity)}) cost one online and one offline RL run each per base model and K, "
           f"and the sample-limited premise one online and one offline RL run at {tp.premise_samples_per_step} samples "
           "per step per step size, base model and fitted K; no other part was dropped to make room for them"
           if np.isfinite(tab_cpu) else "") + ". The "
        "closed-form optimum is the check d_optimum (the optimiser against a math identity), not a claim. The paper "
        "bounds the budget each method needs; we read it off a grid of budgets (steps of a factor 1.5 or 4/3), so a "
        "required budget is known to a factor of 1.5, and compare its growth with C_cov by a slope over the sweep. "
        "Budgets are samples per prompt, "
        "matched between SFT (samples from pi_base) and RL (samples from the policy); SFT may take several epochs "
        "over its fixed data. The base models' replicates repeat initialisation and data order of pretraining on "
        f"one corpus. The fine-tuning learning rate ({p.sharpen.sft_lr}) and SFT's number of epochs "
        f"({p.sharpen.sft_epochs}) were chosen on prototype runs of an earlier version of the task; the pretraining "
        "set-up on prototypes that checked the model fits the corpus law. The claims' thresholds were fixed from the "
        "theory, or as conventions, before the runs that decide them, except (c)'s share threshold and convergence "
        "tolerance, chosen after review sharpening_r9 (above); the sample-limited premise's ratio was fixed before the run. The paper's own setting, best-of-N of a "
        "pretrained LM loaded from a local path on GSM-style math prompts (papers/sharpening/pretrained.py), "
        f"{full_a}; SFT-sharpening of that LM is not implemented, so (b) is not measured on a pretrained LM at any "
        "scale: at every scale it is decided on the tiny transformers only.")
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[fig_bon, fig_sharpening, fig_convergence], claims=claim_list, checks=check_list, scope=SCOPE,
                 verdicts_figure=verdicts, benchmarks=benchmarks, differences=differences)


# ---- figures ----------------------------------------------------------------------------------------------
def _bon_figure(path, p, df, coverage, law, LABEL):
    fig, axes = subplots(1, 2, width=4.6, height=3.6)
    ns = sorted(p.bon_sizes)
    for j, v in enumerate(p.variants):
        ax = axes[0, j]
        for method, name, style in [("best_of_n", "best-of-N, self-reward", "o-"),
                                    ("best_of_n_shuffled", "best-of-N, shuffled reward (control)", "s--")]:
            vals = np.array([cell(df, "lm", v, method, N) for N in ns])  # (N, seeds)
            ax.errorbar(ns, vals.mean(1), yerr=vals.std(1, ddof=1) if vals.shape[1] > 1 else None, fmt=style, ms=3,
                        capsize=2, label=name)
        ax.plot(ns, [law[v]["law_best_of_n"][str(N)] for N in ns], "x:", color="tab:gray", ms=4,
                label="best-of-N predicted by the corpus law")
        ax.axhline(mean(df, "lm", v, "greedy", 1), color="k", ls=":", lw=0.9, label="greedy decoding")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (samples)")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{LABEL[v]}, C_cov = {coverage[v]:.3g}", fontsize=9)
        ax.legend(fontsize=7)
    savefig(fig, path)


def _sharpening_figure(path, p, df, coverage, LABEL):
    tp, budgets_lm = p.tabular, list(p.sharpen.budgets)
    fig, axes = subplots(1, 2 + len(STRUCTURES), width=4.0, height=3.3)
    for j, v in enumerate(p.variants):
        ax = axes[0, j]
        ax.plot(budgets_lm, [mean(df, "lm", v, "best_of_n", m) for m in budgets_lm], "k--", lw=0.9,
                label="best-of-m (base)")
        for method, name in [("sft", "SFT-sharpening"), ("rl", "RL-sharpening"), ("rl_offline", "offline RL (ablation)")]:
            vals = np.array([cell(df, "lm", v, method, m) for m in budgets_lm])
            if vals.size == 0:
                continue
            ax.errorbar(budgets_lm, vals.mean(1), yerr=vals.std(1, ddof=1) if vals.shape[1] > 1 else None,
                        marker="o", ms=3, capsize=2, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("samples per prompt m")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{LABEL[v]}, C_cov = {coverage[v]:.3g}", fontsize=9)
        ax.legend(fontsize=7)
    cap = 2 * max(tp.budgets)
    for j, structure in enumerate(STRUCTURES):
        ax = axes[0, 2 + j]
        for method, name in [("sft", "SFT"), ("rl", "RL"), ("rl_offline", "offline RL (ablation)")]:
            if method == "rl_offline" and structure != tp.deciding_structure:
                continue
            m_req, cov = required_budgets(df, p, structure, method)
            shown = np.where(np.isfinite(m_req), m_req, cap)
            ax.plot(cov, np.exp(np.log(shown).mean(0)), "o-", ms=3, label=f"{name} (geometric mean over seeds)")
            for row in shown:
                ax.plot(cov, row, ".", color=ax.lines[-1].get_color(), alpha=0.4)
        ax.set_xscale("log")
        ax.set_yscale("log", base=2)
        ax.set_xlabel("C_cov (K = " + ", ".join(str(k) for k in tp.pairs) + ")")
        ax.set_ylabel(f"budget to stay at accuracy {tp.target_accuracy}")
        ax.set_title(LABEL[structure] + (" (decides (c))" if structure == tp.deciding_structure else ""),
                     fontsize=9)
        ax.legend(fontsize=7)
    savefig(fig, path)


def _convergence_figure(path, p, conv, form, hist, fits, floor):
    fig, axes = subplots(1, 3, width=4.4, height=3.4)
    ax = axes[0, 0]
    for seed, g in conv.groupby("seed"):
        ax.plot(g.samples_per_prompt, g.kl_to_optimum, lw=1.0, label=f"seed {seed}")
    right = form[form.hypothesis == 1.0]
    ax.axhline(right.tolerance.mean(), color="tab:red", ls=":", lw=0.8,
               label="nearest wrong answer's KL to pi*_beta (mean)")
    ax.set_yscale("log")
    ax.set_xlabel("samples per prompt")
    ax.set_ylabel("KL(pi_RL || pi*_beta), nats per prompt")
    ax.set_title(f"Tabular RL-sharpening -> pi_base^{tb.kl_optimum(p.beta):.3g}", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for seed, g in hist.groupby("seed"):
        ax.plot(g.step, g.loss.rolling(20, min_periods=1).mean(), lw=1.0, label=f"seed {seed} (20-step mean)")
    ax.axhline(floor, color="k", ls="--", lw=0.8, label="entropy of the corpus law")
    ax.set_xlabel("step")
    ax.set_ylabel("nats per answer letter")
    ax.set_title("LM pretraining on the noisy corpus", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[0, 2]
    for split, marker in (("val", "o"), ("test", "x")):
        g = fits[fits.split == split]
        ax.scatter(g.seed + 0.1 * g.init, g.law_gap, marker=marker, label=f"{split} prompts (x offset: initialisation)")
    ax.axhline(p.pretrain.fit_gap_max, color="tab:red", ls=":", lw=0.8, label="gate")
    ax.set_yscale("log")
    ax.set_xlabel("base model")
    ax.set_ylabel("KL(law || model) per answer letter")
    ax.set_title("Fit of each base model to the law", fontsize=9)
    ax.legend(fontsize=7)
    savefig(fig, path)
