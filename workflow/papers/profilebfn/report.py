"""The profilebfn report: the table, the figure, the claims with computed verdicts, report.md.

Claims (the verdict contract of papers.common.claims; every number is computed from this run), each gated on the
network's competence (its held-out denoising loss beats the best context-free predictor):

(a) ProfileBFN's generated sequences are recognised as family members nearly as often as independent draws from
    the same profile (non-inferiority, paired by seed: issue 50, profile draws pass any absolute threshold);
(b) they are more novel than those draws (lower identity to the nearest reference member) while as family-like;
(c) the generated MSA keeps at least a set share of the reference MSA's covariation lead over profile draws (AUC
    of the planted contacts of several Potts families), gated on the network having learned the couplings.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.claims import (Check, Claim, Control, PositiveControl, Premise, Scope, convention, mean_test,
                                  paired_test, write_claims)
from papers.common.io import read_json, read_parquet, read_parquets, write_json
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.report import write_report
from papers.common.tables import mean_std, write_table
from papers.profilebfn import data
from papers.profilebfn import metrics as M
from papers.profilebfn.params import ARMS, SLUG, parse
from papers.profilebfn.stages import POTTS_NULL, potts_names

TITLE = "P17 profilebfn: ProfileBFN, profile Bayesian flow networks for protein family design"
COLUMNS = ("above_threshold", "median_bits", "column_r", "pairwise_identity", "nearest_identity", "uniqueness",
           "contact_auc", "contact_precision")


def _per_seed(m: pd.DataFrame, family: str, arm: str, column: str) -> np.ndarray:
    return m[(m.family == family) & (m.arm == arm)].sort_values("seed")[column].to_numpy(dtype=float)


def competence_gain(comp: pd.DataFrame, group: str, network: str = "trained") -> np.ndarray:
    """Per seed, the context-free predictor's held-out loss minus the network's on `group` (> 0: the network reads
    context)."""
    g = comp[(comp.group == group) & (comp.network == network)].sort_values("seed")
    return (g.context_free_loss - g.network_loss).to_numpy(float)


def reference_aucs(p, fams: pd.DataFrame, planted: dict) -> dict:
    """Per Potts family, the AUC of its reference MSA (the first n_generate_potts rows, the generated sets' size)."""
    out = {}
    for name in potts_names(p):
        ref = data.encode(list(fams[fams.family == name].sort_values("row").sequence))[: p.n_generate_potts]
        out[name] = M.contact_auc(M.apc(M.mutual_information(ref)), planted[name], p.potts.min_separation)
    return out


def profilebfn_claims(p, m: pd.DataFrame, comp: pd.DataFrame, pfam: list[str], ref_auc: dict) -> list[Claim]:
    th = p.thresholds
    n = p.seeds
    margin = th.family_margin
    competent = Premise.from_evidence(
        "competence: on held-out proteins the network's denoising loss beats the context-free predictor's",
        mean_test(competence_gain(comp, "proteins"), threshold=0.0, direction=">", what="training seeds",
                  name="context-free - network held-out loss"))
    non_inferior = convention(f"non-inferiority margin {margin:g} (thresholds.family_margin: 'nearly as often', a "
                              "judgement of this reproduction, fixed before the run)")

    def family_part(arm, f):  # the share above the HMM threshold against the profile draws', paired by seed
        return paired_test(_per_seed(m, f, arm, "above_threshold"), _per_seed(m, f, "profile", "above_threshold"),
                           threshold=-margin, direction=">", what="training seeds",
                           name=f"{f}: share above threshold, {arm} - profile")

    def novelty_part(arm, f):  # identity to the nearest reference member against the profile draws'
        return paired_test(_per_seed(m, f, arm, "nearest_identity"), _per_seed(m, f, "profile", "nearest_identity"),
                           threshold=0.0, direction="<", what="training seeds",
                           name=f"{f}: identity to nearest reference, {arm} - profile")

    def avg(f, arm, col):
        return float(np.nanmean(_per_seed(m, f, arm, col)))

    claims = [
        Claim("a", f"Trained on single sequences only, ProfileBFN generates members of held-out families nearly as "
                   f"often as independent draws from the same profile (within {margin:g} of their share above the "
                   "family's profile-HMM threshold).",
              "generated sequences are recognised as family members (the paper's family-likeness evaluation)",
              {f: {arm: round(avg(f, arm, "above_threshold"), 4) for arm in ARMS} for f in pfam},
              f"for every held-out family ({', '.join(pfam)}), the {n}-seed paired t interval of ProfileBFN's share of "
              f"distinct sequences whose HMM bit score exceeds the family threshold (max of Pfam's GA and a noise "
              f"cutoff) minus the independent profile draws' share lies above -{margin:g}",
              [family_part("profilebfn", f) for f in pfam],
              Control("the same sampler and architecture untrained (its initial weights): no learned mechanism",
                      [family_part("untrained", f) for f in pfam], kind="null"),
              threshold_source=non_inferior, premise=[competent],
              positive_control=PositiveControl(
                  f"reference members with {p.mutation_rate:.0%} of their residues mutated (family members by "
                  "construction), the same test", [family_part("copies", f) for f in pfam])),
        Claim("b", "ProfileBFN's generated sequences are more novel than independent draws from the same profile (lower "
                   "identity to the nearest reference member) while nearly as family-like.",
              "diverse and novel family proteins (abstract)",
              {f: {arm: round(avg(f, arm, "nearest_identity"), 4) for arm in ARMS} for f in pfam},
              f"for every held-out family, two {n}-seed paired t intervals against the profile draws: identity to the "
              f"nearest reference member, ProfileBFN - profile < 0, and the share above the HMM threshold, ProfileBFN - "
              f"profile > -{margin:g} (as in a)",
              [part for f in pfam for part in (novelty_part("profilebfn", f), family_part("profilebfn", f))],
              Control("the untrained network (novel because it has left the family): the same two tests",
                      [part for f in pfam for part in (novelty_part("untrained", f), family_part("untrained", f))],
                      kind="null"),
              threshold_source=convention(f"a sign for novelty; the non-inferiority margin {margin:g} for "
                                          "family-likeness"),
              premise=[competent],
              no_positive_control="identities and HMM scores have closed forms (tested by hand and against hmmsearch "
                                  "in tests/papers/test_profilebfn.py); claim (a)'s positive control shows the "
                                  "family test says 'holds' on family members"),
    ]

    # (c) covariation: per planted Potts family, AUC(ProfileBFN) - AUC(profile) - share x (AUC(reference) - AUC(profile)).
    share = th.covariation_share
    planted = [f for f in potts_names(p) if f != POTTS_NULL]

    def kept(arm, families):  # per seed, mean over the families of the covariation-share criterion
        per = [_per_seed(m, f, arm, "contact_auc") - _per_seed(m, f, "profile", "contact_auc")
               - share * (ref_auc[f] - _per_seed(m, f, "profile", "contact_auc")) for f in families]
        return np.mean(per, axis=0)

    lead_ref = np.mean([ref_auc[f] - _per_seed(m, f, "profile", "contact_auc") for f in planted], axis=0)
    coupling_gain = np.mean([competence_gain(comp, f) for f in planted], axis=0) - competence_gain(comp, POTTS_NULL)
    claims.append(Claim(
        "c", f"ProfileBFN's generated MSA keeps at least {share:.0%} of the family's covariation that independent "
             "profile sampling loses (AUC of the planted contacts from APC-corrected mutual information).",
        "generated MSAs capture the family's structural characteristics better than profile sampling (abstract; "
        "CCMpred contacts in the paper)",
        {f: {"profilebfn": round(avg(f, "profilebfn", "contact_auc"), 4), "profile": round(avg(f, "profile", "contact_auc"), 4),
             "reference": round(ref_auc[f], 4)} for f in potts_names(p)},
        f"per seed, mean over the {len(planted)} planted Potts families of AUC(ProfileBFN) - AUC(profile) - {share:g} x "
        f"(AUC(reference MSA) - AUC(profile)), the AUC telling the {p.potts.contacts} planted pairs from the other pairs "
        f"at |i - j| >= {p.potts.min_separation} by APC-corrected MI of {p.n_generate_potts} sequences; t interval over "
        f"{n} seeds > 0",
        mean_test(kept("profilebfn", planted), threshold=0.0, direction=">", what="training seeds",
                  name=f"AUC kept beyond {share:g} of the reference's lead"),
        Control("the same statistic on the null Potts family (its own fields, no couplings), scored against the first "
                "family's pairs: nothing co-varies", mean_test(kept("profilebfn", [POTTS_NULL]), threshold=0.0,
                                                              direction=">", what="training seeds",
                                                              name="null family: AUC kept"), kind="null"),
        threshold_source=convention(f"{share:g} of the reference MSA's lead (thresholds.covariation_share: 'captures' "
                                    "read as at least half, a judgement fixed before the run); the reference lead is "
                                    "measured in this run"),
        premise=[competent, Premise.from_evidence(
            "the network learned the couplings: its held-out loss gain over the context-free predictor is larger on "
            "the planted families than on the null family",
            mean_test(coupling_gain, threshold=0.0, direction=">", what="training seeds",
                      name="gain on planted - gain on null"))],
        positive_control=PositiveControl(
            "the reference MSAs themselves (couplings planted by construction): AUC(reference) - AUC(profile) > 0",
            mean_test(lead_ref, threshold=0.0, direction=">", what="training seeds", name="reference - profile AUC"))))
    return claims


def training_setup(p) -> str:
    """How the training ran, in words: device, precision, data-parallel processes, chained jobs."""
    parts = [f"on {'CUDA' if p.device == 'cuda' else 'the CPU'}", p.train.precision]
    if p.train.gpus > 1:
        parts.append(f"{p.train.gpus} data-parallel processes (DDP)")
    if p.train_parts > 1:
        parts.append(f"{p.train_parts} chained jobs per seed, each resuming the previous one's full state")
    return ", ".join(parts)


def report(*, cfg, scale, metrics, competence, curves, families, contacts, meta, benchmarks, table_md, table_csv,
           claims, params_json, report_md, figure, verdicts):
    """Table (family x arm, mean +- std over seeds), figure, claims, report.md."""
    p = parse(cfg)
    m = read_parquets(metrics)
    comp = read_parquets(competence)
    loss = read_parquets(curves)
    info_all = read_json(meta)
    info = info_all["families"]
    fams = read_parquet(families)
    pairs = read_parquet(contacts)
    planted = {name: g[["i", "j"]].to_numpy() for name, g in pairs.groupby("family")}
    pfam = list(p.families)
    potts = potts_names(p)
    ref_auc = reference_aucs(p, fams, planted)

    md_rows, csv_rows = [], []
    for family in [*pfam, *potts]:
        for arm in ARMS:
            g = m[(m.family == family) & (m.arm == arm)]
            md_rows.append({"family": family, "arm": arm,
                            **{c: (mean_std(g[c], 3) if g[c].notna().any() else "") for c in COLUMNS}})
            csv_rows.append({"family": family, "arm": arm, **{f"{c}_mean": g[c].mean() for c in COLUMNS},
                             **{f"{c}_std": g[c].std(ddof=1) if len(g) > 1 else float("nan") for c in COLUMNS}})
        if family in potts:
            md_rows.append({"family": family, "arm": "reference MSA", "contact_auc": f"{ref_auc[family]:.3f}"})
            csv_rows.append({"family": family, "arm": "reference", "contact_auc_mean": ref_auc[family]})
    for group in ["proteins", *potts]:
        for network in ("trained", "untrained"):
            g = comp[(comp.group == group) & (comp.network == network)]
            md_rows.append({"family": f"held-out {group}", "arm": f"{network} network: denoising loss (context-free "
                            f"predictor)", "above_threshold": f"{mean_std(g.network_loss, 4)} ({mean_std(g.context_free_loss, 4)})"})
            csv_rows.append({"family": f"heldout_{group}", "arm": f"{network}_network_loss", "above_threshold_mean":
                             g.network_loss.mean(), "median_bits_mean": g.context_free_loss.mean()})
    thresholds = ", ".join(f"{f} {info[f]['threshold']:.1f}" for f in [*pfam, *potts])
    caption = (f"Generated families, mean +- std over {p.seeds} training seeds ({p.n_generate} sequences per Pfam "
               f"family, {p.n_generate_potts} per Potts family, per arm). above_threshold: share of distinct sequences "
               f"whose HMM bit score exceeds the family threshold ({thresholds} bits); median_bits: their median score; "
               "column_r: Pearson r of column frequencies with the reference MSA; pairwise_identity: mean identity "
               "within the generated set (diversity); nearest_identity: mean identity to the nearest reference member "
               f"(1 - novelty); contact_auc: AUC of APC-corrected MI telling the {p.potts.contacts} planted pairs from the "
               f"others; contact_precision: top-{p.potts.contacts} precision of the same. Held-out rows (the competence "
               "gate): the continuous-time denoising loss of the network on sequences never trained on, and in brackets "
               "the context-free predictor's (composition prior times the position's own belief) on the same draws. "
               "The paper reports such quantities on CAMEO families with ESM-2-sized models; we compare arms, not "
               "numbers.")
    write_table(pd.DataFrame(md_rows).fillna(""), table_md, table_csv, caption=caption, csv_df=pd.DataFrame(csv_rows))

    fig, axes = subplots(1, 3, width=4.6, height=3.6)
    width = 0.8 / len(ARMS)
    for k, arm in enumerate(ARMS):
        vals = [m[(m.family == f) & (m.arm == arm)].above_threshold for f in pfam]
        axes[0, 0].bar(np.arange(len(pfam)) + k * width, [v.mean() for v in vals], width,
                       yerr=[v.std(ddof=1) if len(v) > 1 else 0 for v in vals], label=arm)
        fam = m[(m.arm == arm) & m.family.isin(pfam)]
        axes[0, 1].scatter(fam.pairwise_identity, fam.nearest_identity, s=14, label=arm)
        cp = [m[(m.family == f) & (m.arm == arm)].contact_auc for f in potts]
        axes[0, 2].bar(np.arange(len(potts)) + k * width, [v.mean() for v in cp], width,
                       yerr=[v.std(ddof=1) if len(v) > 1 else 0 for v in cp], label=arm)
    axes[0, 0].set_xticks(np.arange(len(pfam)) + 0.4 - width / 2, pfam)
    axes[0, 0].set_ylabel("share above HMM threshold")
    axes[0, 0].set_title("(a) family-likeness, held-out families")
    axes[0, 0].legend(fontsize=7)
    axes[0, 1].set_xlabel("mean pairwise identity (generated)")
    axes[0, 1].set_ylabel("identity to nearest reference")
    axes[0, 1].set_title("(b) diversity and novelty, Pfam families")
    axes[0, 2].scatter(np.arange(len(potts)) + 0.4 - width / 2, [ref_auc[f] for f in potts], color="k", marker="_", s=200,
                       label="reference MSA")
    axes[0, 2].axhline(0.5, color="grey", lw=0.8, ls="--")
    axes[0, 2].set_xticks(np.arange(len(potts)) + 0.4 - width / 2, potts, rotation=20, fontsize=7)
    axes[0, 2].set_ylabel("AUC of the planted contacts (APC-MI)")
    axes[0, 2].set_title("(c) covariation (black: reference MSA)")
    savefig(fig, figure)

    claims_list = profilebfn_claims(p, m, comp, pfam, ref_auc)
    parameters = int(loss.parameters.iloc[0])
    check_list = [Check.at_least("planted_signal", "every planted Potts family's reference MSA tells its contacts from "
                                 "the other pairs (AUC)", min(ref_auc[f] for f in potts if f != POTTS_NULL), 0.9,
                                 what="the data carry the covariation claim (c) looks for")]
    scope = Scope("analogue", f"a {parameters:,}-parameter network trained on {info_all['training_sequences']:,} "
                  "bacterial proteins and synthetic Potts draws instead of ESM-2-sized ones on UniRef50; Pfam seed "
                  "alignments of Debian's hmmer-examples as held-out families; planted Potts couplings and APC-MI instead "
                  "of CCMpred contacts on CAMEO structures")
    write_claims(claims_list, claims, paper=SLUG, scale=scale, scope=scope, checks=check_list)
    write_json(to_dict(p), params_json)

    held_out = ", ".join(f"{f} (L = {info[f]['length']}, {info[f]['members']} members)" for f in pfam)
    final_loss = loss.groupby("seed").loss.apply(lambda s: s.tail(max(len(s) // 10, 1)).mean())
    what = (
        f"{p.seeds} training seeds. A bidirectional transformer ({p.model.n_layer} layers, d = {p.model.d_model}, "
        f"{p.model.n_head} heads, {parameters:,} parameters, attention by `kernels.attention`, a Gaussian basis of t as "
        f"the official input layer) trained for {p.train.steps} steps (batch {p.train.batch}, windows of "
        f"{p.train.crop} residues; {training_setup(p)}) with the continuous-time discrete-BFN loss (beta1 = {p.beta1}, beta(t) = beta1 t^2) "
        f"on single sequences only: {info_all['training_sequences']} of pyhmmer's bacterial test proteins "
        f"({info_all['removed_as_held_out']} removed because they hit a held-out family's HMM at E < "
        f"{p.holdout_evalue}; {info_all['heldout_proteins']} set aside, never trained on, for the competence gate) "
        f"and {info_all['potts_training_sequences']} single draws of the Potts families; final training loss "
        f"{mean_std(final_loss.to_numpy(), 3)}. Generation from each family's profile (pseudocount {p.pseudocount}) "
        f"with the official sampler from t0 = {p.t0} in {p.sample_steps} steps, argmax, duplicates removed. Held-out "
        f"Pfam families (seed alignments of Debian hmmer-examples, match columns = columns with < 50% gaps): "
        f"{held_out}. Potts families: {p.potts.families} planted (L = {p.potts.length}, "
        f"{p.potts.residues_per_column} favoured residues per column, {p.potts.contacts} planted contacts each with "
        f"coupling {p.potts.coupling}) and one null family without couplings, {p.potts.reference} reference sequences "
        f"and {p.potts.heldout} held-out draws each. Arms: profilebfn (trained), untrained (same sampler, initial "
        f"weights), profile (independent column draws), hmm (hmmemit from the family's HMM, aligned back with "
        f"hmmalign), copies (reference rows with {p.mutation_rate:.0%} of residues mutated). HMMs: pyhmmer, built from "
        f"the seed alignment with the match columns as the reference line. The competence gate compares the held-out "
        f"denoising loss with that of the context-free predictor (the composition prior times the position's own "
        f"belief, the best prediction that reads no other position) on the same draws.")
    differences = (
        "The paper trains ESM-2-sized networks (up to 650M parameters) on UniRef50 single sequences and evaluates on "
        "CAMEO families and enzyme families, with contact maps from CCMpred (a pseudo-likelihood Potts fit, the "
        f"official evaluation) and functional classifiers; here a network of {parameters:,} parameters trains on "
        f"{p.device.upper() if p.device == 'cuda' else 'the CPU'} on "
        f"{info_all['training_sequences']:,} bacterial proteins plus single draws of synthetic Potts families, and samples in "
        f"{p.sample_steps} instead of 500 steps (a number chosen for the time budget after a prototype run had "
        "shown that more steps drift further from the profile: a choice made after seeing results, so stated here). "
        "Contacts are scored on the generated MSA with APC-corrected mutual information against planted contacts (a "
        "continuous statistic, the AUC over all scored pairs), not with CCMpred against structures; no structure of the "
        "Pfam families ships offline, so claim (c) is tested on the Potts families only. The family threshold is the "
        "larger of the seed file's HMMER2 gathering score and a noise cutoff (the best score of random sequences), not "
        "Pfam's curated HMMER3 GA. Independent profile draws match the HMM's own independent-site model, so claims (a) "
        "and (b) compare with them (non-inferiority and novelty) instead of testing a share that they pass by "
        "construction. A model can only learn covariation from data that has it: the Potts families' draws are in "
        "the training set as single sequences (as Pfam members are in UniRef50 in the paper), the Pfam families are "
        "not (they are held out)." + (
            " The network trains under bf16 autocast (the flow and the loss in fp32): neither the paper nor the official "
            "code (which releases no training code; its sampler runs in fp32) states the training precision, so this is "
            "the reproduction's choice." if p.train.precision == "bf16" else ""))
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md, figures=[figure],
                 claims=claims_list, checks=check_list, benchmarks=benchmarks, differences=differences, scope=scope,
                 verdicts_figure=verdicts)
