"""The report of P7 cbplm: the results table, three figures and report.md; the claims are computed in
:mod:`papers.cbplm.claims`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.cbplm import data as D
from papers.cbplm.claims import (ARMS, cbplm_claims, concept_ratios, excess_over_floor, interpretability_checks,
                                 paired_change, spearman, sweep_table, weight_checks)
from papers.cbplm.params import SLUG, parse, unknown_width
from papers.common.io import write_json
from papers.common.params import to_dict

TITLE = "P7 cbplm: Concept Bottleneck protein language models (CB-pLM)"


def _sd(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(values.std(ddof=1)) if values.size > 1 else 0.0


def report(*, cfg, scale, summary, metrics, interventions, weights, histories, benchmarks,
           table_md, table_csv, claims, params_json, report_md, fig_interventions, fig_weights, fig_training, verdicts):
    """The results table, the figures, the claims with computed verdicts, the report."""
    from papers.common.claims import Check, Scope, write_claims
    from papers.common.io import read_json, read_parquets
    from papers.common.plotting import savefig, subplots
    from papers.common.report import write_report
    from papers.common.tables import mean_std, write_table

    p = parse(cfg)
    names = list(p.concepts)
    final = p.train.steps
    info = read_json(summary)
    m = read_parquets(metrics)
    iv = read_parquets(interventions)
    w = read_parquets(weights)
    hist = read_parquets(histories)

    def metric(kind, name, concept="", step=final):
        g = m[(m.model == kind) & (m.metric == name) & (m.concept == concept) & (m.step == step)].sort_values("seed")
        return g.value.to_numpy()

    change = paired_change(iv)
    per_seed = change.groupby(["model", "concept", "seed"]).change.mean().rename("delta").to_frame()
    per_seed["right"] = iv.groupby(["model", "concept", "seed"]).delta.apply(lambda d: (d > 0).mean())
    per_seed = per_seed.reset_index()
    exc = excess_over_floor(change)
    log_uni, log_plain = np.log(metric("unigram", "perplexity")), np.log(metric("plain", "perplexity"))

    md_rows, csv_rows = [], []

    def csv(kind, quantity, values, concept=""):
        csv_rows.append({"model": kind, "quantity": quantity, "concept": concept, "mean": float(np.mean(values)),
                         "std": _sd(values)})

    handles = {"cb": "perplexity_shuffled_concepts", "tag": "perplexity_shuffled_tags",
               "cond": "perplexity_shuffled_concepts"}
    for arm in ARMS:
        kind = "cb" if arm.startswith("cb") else arm
        row = {"model / intervention": ARMS[arm]}
        if arm == kind:
            ppl = metric(kind, "perplexity")
            row.update({"parameters": int(m[m.model == kind].parameters.iloc[0]), "held-out perplexity": mean_std(ppl, 4),
                        "share of plain LM's gain": mean_std((log_uni - np.log(ppl)) / (log_uni - log_plain), 3)})
            csv(kind, "perplexity", ppl)
            if kind in handles:
                row["perplexity, another protein's handle"] = mean_std(metric(kind, handles[kind]), 4)
                csv(kind, handles[kind], metric(kind, handles[kind]))
            if kind == "cb":
                csv(kind, "perplexity_true_concepts", metric(kind, "perplexity_true_concepts"))
                for cname in names:
                    csv(kind, "concept_r2", metric(kind, "concept_r2", cname), cname)
                row["concept R^2 (mean)"] = mean_std(np.mean([metric(kind, "concept_r2", cn) for cn in names], axis=0), 3)
        for cname in names:
            g = per_seed[(per_seed.model == arm) & (per_seed.concept == cname)]
            row[f"change {cname}"] = f"{mean_std(g.delta, 3)} ({g.right.mean():.0%})"
            csv(arm, "intervention_change", g.delta, cname)
            csv(arm, "intervention_right_way", g.right, cname)
        g = per_seed[per_seed.model == arm].groupby("seed")[["delta", "right"]].mean()
        row["change, all concepts"] = f"{mean_std(g.delta, 3)} ({g.right.mean():.0%})"
        md_rows.append(row)
    unigram = metric("unigram", "perplexity")
    md_rows.append({"model / intervention": "residue frequencies (no model)", "parameters": 0,
                    "held-out perplexity": mean_std(unigram, 4), "share of plain LM's gain": "0 (by definition)"})
    csv("unigram", "perplexity", unigram)
    for num, den in (("cb", "cond"), ("cb_equal", "tag"), ("cb", "tag")):
        ratios = concept_ratios(exc, names, num, den)
        md_rows.append({"model / intervention": f"ratio of excesses over the floor, {ARMS[num]} / {ARMS[den]} "
                        "[95% bootstrap over seeds]", **{f"change {cname}": ratios[cname] for cname in names}})
    for cname in names:
        g = exc[exc.concept == cname]
        for arm in ARMS:
            if arm != "plain":
                csv(arm, "excess_over_floor", g[f"{arm}_excess"], cname)
    sweep = sweep_table(m)
    for step, g in sweep.groupby("step"):
        row = {"model / intervention": f"CB-pLM trained for {int(step)} steps, its own schedule (the sweep)",
               "held-out perplexity": mean_std(g.cb_perplexity, 4), "concept R^2 (mean)": mean_std(g.concept_r2, 3)}
        if step == final:
            row["share of plain LM's gain"] = f"{mean_std(g.cb_share, 3)} (plain LM's gain {mean_std(g.plain_gain, 3)} nats)"
        md_rows.append(row)
        for col in ("cb_perplexity", "concept_r2") + (("cb_share", "cb_true_share", "plain_gain") if step == final else ()):
            csv("cb", f"sweep_{col}_steps{int(step)}", g[col])
    checks = weight_checks(w)
    csv("cb", "kd_spearman", checks.kd_spearman, "gravy")
    csv("cb", "charge_signs_right", checks.charge_signs_right, "charge")
    caption = (
        f"CB-pLM against a continuous-concept conditional LM, a conditional-tag LM and a plain masked LM of the same "
        f"encoder ({p.model.n_layers} layers, width {p.model.d_model}, {final} steps), mean +- std over {p.seeds} seeds, "
        f"{info['train']} training / {info['test']} held-out real proteins of {p.min_length}-{p.max_length} residues. "
        f"Perplexity: masked residues ({p.train.mask_prob:.0%}) of the held-out set, CB-pLM with its own predicted "
        "concepts, the conditional LMs with the protein's own concepts or tags; 'another protein's handle' feeds each "
        "protein another protein's concepts or tags; share of gain: (log ppl(frequencies) - log ppl(model)) / (log "
        "ppl(frequencies) - log ppl(plain)). Change: the concept's shift in standard deviations in the requested "
        "direction, (z_up - z_down) / 2, after the request and redrawing "
        f"{p.intervention.edit_fraction:.0%} of the residues, those CB-pLM's gradient attribution says oppose the push "
        f"most (the same residues for every arm), sampled at temperature {p.intervention.temperature:g}; measured with "
        f"Biopython over {min(p.intervention.sequences, info['test'])} held-out proteins; in brackets the share of "
        "(protein, direction) pairs that moved the requested way. Requests: the training minimum / maximum (CB-pLM, the "
        f"conditional LM, CB-pLM with the concept's embedding zeroed), the lowest / highest of {p.tag_bins} bins (tag "
        "LM), the mean concept of those bins' training proteins (CB-pLM at equal strength). The plain LM has no handle: "
        "its change is the drift that redrawing those residues causes, the noise floor. Ratio rows: mean excess / mean "
        "excess over the floor per concept; 'not measured' where the denominator's excess cannot be told from zero. "
        "Sweep rows: CB-pLM trained from scratch for fewer steps (the same seed, its own warm-up and cosine decay), "
        "beside the full run; the convergence premise compares their concept R^2.")
    write_table(pd.DataFrame(md_rows).fillna(""), table_md, table_csv, caption=caption, csv_df=pd.DataFrame(csv_rows))

    # Figure 1: change in the requested direction per concept and arm (the plain LM = the noise floor).
    fig, axes = subplots(1, 1, width=max(8.5, 1.5 * len(names)), height=3.8)
    ax = axes[0, 0]
    x = np.arange(len(names))
    width = 0.8 / len(ARMS)
    for j, arm in enumerate(ARMS):
        g = per_seed[per_seed.model == arm].groupby("concept").delta.agg(["mean", "std"]).reindex(names)
        ax.bar(x + (j - (len(ARMS) - 1) / 2) * width, g["mean"], width, yerr=g["std"].fillna(0), label=ARMS[arm], capsize=2)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xticks(x, names, fontsize=7, rotation=20)
    ax.set_ylabel("change in requested direction (SD)")
    ax.set_title(f"Single-concept interventions ({p.intervention.edit_fraction:.0%} residues by attribution, sampled)",
                 fontsize=9)
    ax.legend(fontsize=6)
    savefig(fig, fig_interventions)

    # Figure 2: the CB-pLM's concept-to-token weights (mean over seeds) against residue scales.
    wm = w.groupby(["concept", "residue"]).agg(weight=("weight", "mean"), kd=("kyte_doolittle", "first")).reset_index()
    fig, axes = subplots(1, 2, width=4.6, height=3.8)
    g = wm[wm.concept == "gravy"]
    axes[0, 0].scatter(g.kd, g.weight, s=12)
    for r in g.itertuples():
        axes[0, 0].annotate(r.residue, (r.kd, r.weight), fontsize=8, xytext=(2, 2), textcoords="offset points")
    axes[0, 0].set_xlabel("Kyte-Doolittle hydropathy")
    axes[0, 0].set_ylabel("GRAVY weight (centred logit / SD)")
    axes[0, 0].set_title(f"GRAVY weights, Spearman {spearman(g.weight, g.kd):.2f}", fontsize=9)
    g = wm[wm.concept == "charge"].set_index("residue").reindex(list(D.AMINO_ACIDS))
    colors = ["tab:blue" if a in "KR" else "tab:red" if a in "DE" else "grey" for a in g.index]
    axes[0, 1].bar(g.index, g.weight, color=colors)
    axes[0, 1].axhline(0, color="k", lw=0.6)
    axes[0, 1].set_ylabel("charge weight (centred logit / SD)")
    axes[0, 1].set_title("charge weights (blue K/R, red D/E)", fontsize=9)
    savefig(fig, fig_weights)

    # Figure 3: training curves (masked-LM cross-entropy) and claim (b)'s sweep.
    fig, axes = subplots(1, 2, width=5.0, height=3.6)
    full_runs = hist[hist.run_steps == final]
    missing = sorted(set(p.models) - set(full_runs.model))
    if missing:
        raise ValueError(f"training histories: no rows of the {final}-step run for {missing} (column run_steps)")
    for kind in MODELS_ORDER:
        h = full_runs[full_runs.model == kind].groupby("step")["train/ce"].mean()
        axes[0, 0].plot(h.index, h.values, label=kind)
    axes[0, 0].set_xlabel("step")
    axes[0, 0].set_ylabel("masked-LM cross-entropy (train)")
    axes[0, 0].legend(fontsize=8)
    for seed, g in sweep.groupby("seed"):
        axes[0, 1].plot(g.step, g.concept_r2, "o-", color="tab:blue", alpha=0.5, label="CB-pLM, per seed" if seed == sweep.seed.min() else None)
    sw = sweep.groupby("step").concept_r2.mean()
    axes[0, 1].plot(sw.index, sw.values, "s-", color="k", label="mean")
    axes[0, 1].set_xlabel("training steps (separate runs)")
    axes[0, 1].set_ylabel("held-out concept R^2 (mean over concepts)")
    axes[0, 1].set_title("the convergence premise: concept R^2 by run length", fontsize=9)
    axes[0, 1].legend(fontsize=7)
    savefig(fig, fig_training)

    claims_list = cbplm_claims(p, m, change, w, checks)
    params = {k: int(m[m.model == k].parameters.max()) for k in MODELS_ORDER}
    check_list = [Check.at_most("capacity", "the four models have the same encoder; their parameter counts differ by at "
                                "most 10% (the heads and handles only)", max(params.values()) / min(params.values()) - 1,
                                0.1, what="relative spread"),
                  *interpretability_checks(p, w, checks, info["residue_slopes"])]
    source = (f"the aaanalysis 1.1.0 benchmark sets {', '.join(p.files)}" if p.sequences is None else f"`{p.sequences}`"
              + (f" (streamed: {p.max_sequences} drawn of the {info['read']} records read)" if "streamed_sample" in info else ""))
    devices = sorted(set(hist.device)) if "device" in hist else ["an unrecorded device"]
    scope = Scope("analogue", f"{info['kept']} real proteins of {p.min_length}-{p.max_length} residues from {source} "
                  f"instead of the paper's UniRef50 / SwissProt, {len(names)} Biopython concepts instead of 718, a "
                  f"{p.model.n_layers}-layer encoder of width {p.model.d_model} instead of 24M-3B parameters; the "
                  "conditional baselines are built here.")
    write_claims(claims_list, claims, paper=SLUG, scale=scale, scope=scope, checks=check_list)
    write_json(to_dict(p), params_json)

    what = (
        f"{info['kept']} real proteins ({info['train']} train / {info['test']} held out) from "
        + source + f": {info['duplicates_dropped']} duplicates dropped, "
        f"{info['outside_length_range']} outside {p.min_length}-{p.max_length} residues, {info['non_standard_excluded']} "
        f"excluded for a character other than the 20 standard upper-case residues (e.g. {', '.join(info['non_standard_examples'][:3])}). "
        f"{len(names)} concepts from Biopython's ProteinAnalysis, standardised on the training split: {', '.join(names)} "
        f"(net charge at pH 7 kept, isoelectric point dropped: r = {info['charge_vs_isoelectric_point_r']:.2f} on our "
        f"training set). Four masked LMs with one encoder size ({p.model.n_layers} pre-LN layers, width {p.model.d_model}, "
        f"{p.model.n_heads} heads, attention by `kernels.attention` with the padding mask as bias), {final} AdamW "
        f"steps of {p.train.batch_size} sequences, {p.train.mask_prob:.0%} masking, {p.seeds} seeds: CB-pLM (concept "
        f"head on <cls>, bottleneck of concept embeddings (width {p.model.concept_emb} each) and an unknown part "
        f"z_u {unknown_width(len(names), p.model.concept_emb, p.model.d_model, p.model.unknown_width)} wide, one linear "
        f"layer to the residues; loss = CE + {p.train.concept_weight} K MSE + "
        f"{p.train.orthogonality_weight} |cos|, true concepts fed in training), a continuous-concept conditional LM (a "
        "linear map of the standardised concepts added at every position), a conditional-tag LM "
        f"({p.tag_bins} quantile bins per concept as prefix tokens whose embeddings are also added at every position), "
        "and a plain masked LM. CB-pLM is also trained from scratch for "
        + ", ".join(str(s) for s in p.train.sweep) + f" steps on its own schedule (the sweep of the convergence premise). "
        "Interventions as the official `intervene_on_sequences`: the concept set to the request, the residues "
        "chosen by CB-pLM's gradient x input attribution, then redrawn; the plain LM redraws the same residues and "
        "gives the noise floor.")
    differences = (
        "The paper trains CB-pLMs of 24M to 3B parameters on UniRef50 and SwissProt with 718 concepts (biophysical "
        f"descriptors plus annotations); here an encoder of width {p.model.d_model} and {p.model.n_layers} layers is "
        f"trained for {final} steps on {' and '.join(devices)} on {info['train']} real proteins of {p.min_length}-"
        f"{p.max_length} residues with {len(names)} Biopython concepts, standardised (the official code normalises each "
        "to [0, 1] with fixed ranges; our training minimum / maximum are its 0 / 1). The official intervention takes "
        "the argmax at the chosen residues; we sample (temperature "
        f"{p.intervention.temperature:g}) so that the plain LM's drift is a measured noise floor rather than zero by "
        "construction, and the other LMs redraw the residues CB-pLM's attribution chose (they have no concept "
        "head to attribute with). The output layer covers the 20 residues only (the official head spans the whole "
        "vocabulary); positions are learned embeddings (official: rotary); no dropout. The unknown part z_u is "
        f"{unknown_width(len(names), p.model.concept_emb, p.model.d_model, p.model.unknown_width)} wide: the official "
        "K x E, but at least the encoder width (K x E is 1436 at the paper's 718 concepts, wider than its 408; with "
        f"{len(names)} concepts it would be {len(names) * p.model.concept_emb}), and where it is wider than z_c the "
        "orthogonality loss pads z_c with zeros. Perplexity is our own "
        "masked-residue perplexity on held-out proteins with a random (not homology-aware) split. The two conditional "
        "baselines are our constructions: the paper's conditional pLMs are larger models trained by their authors; "
        "the continuous-concept one gets exactly CB-pLM's requests, the tag one its extreme bins, which CB-pLM matches "
        "at equal strength. The training-length sweep trains CB-pLM again from scratch at each shorter length (not "
        "the plain or conditional LMs). The paper's interpretability figure (Sec. 4.2) is reported as checks, not a "
        "claim: a no-model regression of residue frequencies on each concept reproduces it. The full scale points "
        "`cbplm.sequences` at a UniRef FASTA, streamed to `cbplm.max_sequences`, and uses the official 24M "
        "configuration.")
    # The trade of seeds for training length (review of issue 50), costed from this run's training jobs.
    train_cpu = sum(float(pd.read_csv(b, sep="\t").cpu_time.iloc[-1]) for b in benchmarks if "/train/" in str(b))
    steps_per_seed = len(p.models) * final + sum(p.train.sweep)
    per_step = train_cpu / (p.seeds * steps_per_seed)
    doubled = p.seeds * (len(p.models) * 2 * final + final) * per_step
    differences += "" if scale != "default" else (
        f" Budget: {p.seeds} seeds x ({len(p.models)} models x {final} steps + CB-pLM's sweep run of "
        + ", ".join(str(x) for x in p.train.sweep) + f" steps): the training jobs took {train_cpu:.0f} s of CPU here, "
        f"{per_step * 1000:.1f} ms per step; the next doubling ({2 * final} steps, the sweep run at {final}) would take "
        f"about {doubled:.0f} s of CPU for training alone, beyond this paper's time budget (`time_budget` in "
        "config/config.yaml), so the convergence premise is read at the length the budget allows.")
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[fig_interventions, fig_weights, fig_training], claims=claims_list, checks=check_list,
                 benchmarks=benchmarks, differences=differences, scope=scope, verdicts_figure=verdicts)


MODELS_ORDER = ("cb", "cond", "tag", "plain")
