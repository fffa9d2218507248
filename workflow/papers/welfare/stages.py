"""The welfare DAG's stages: prepare -> simulate (one job per policy) -> evaluate -> report.

Each function takes its parameters and its input and output paths explicitly, so it runs under
Snakemake (see workflow/rules/welfare.smk) and in tests alike.
"""
from __future__ import annotations

import logging
from importlib import resources

import numpy as np
import pandas as pd

from papers.common.claims import Claim, write_claims
from papers.common.io import read_json, read_parquet, read_parquets, write_json, write_parquet
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.progress import progress
from papers.common.report import write_report
from papers.common.seeding import seed_everything
from papers.common.tables import mean_std, write_table
from papers.welfare import dynamics as dyn
from papers.welfare.params import SLUG, parse

log = logging.getLogger(__name__)

TITLE = "P2 welfare: Policy design in long-run welfare dynamics (Rawlsian vs utilitarian)"


def load_incomes(path: str | None = None) -> np.ndarray:
    """Household incomes from a CSV with an `income` column; None = statsmodels' Engel data (235 rows)."""
    if path is None:
        path = resources.files("statsmodels.datasets.engel") / "engel.csv"
    try:
        df = pd.read_csv(path)
    except Exception as e:  # malformed file: name it before any work is done
        raise ValueError(f"{path}: cannot read as CSV ({e})") from e
    if "income" not in df.columns:
        raise ValueError(f"{path}: no column 'income' (columns: {', '.join(map(str, df.columns))})")
    income = pd.to_numeric(df["income"], errors="coerce")
    bad = np.flatnonzero(income.isna().to_numpy())
    if bad.size:
        raise ValueError(f"{path}: line {bad[0] + 2}: income {df['income'].iloc[bad[0]]!r} is not a number")
    return income.to_numpy(dtype=float)


# ---- prepare ---------------------------------------------------------------------------------
def prepare(*, cfg, population):
    """Draw each seed's population: N initial welfare levels and the knots of f and g per individual."""
    p = parse(cfg)
    incomes = load_incomes(p.incomes)
    if incomes.size < p.individuals:
        raise ValueError(f"welfare.individuals = {p.individuals} exceeds the {incomes.size} incomes available")
    b = p.bounds()
    (rl, rr), (dl, dr) = p.return_knots, p.decay_knots
    rows = []
    for seed in range(p.seeds):
        rng = seed_everything(seed)
        u0 = np.sort(rng.choice(incomes, size=p.individuals, replace=False)) * p.income_scale
        # The official code draws integer knots per individual and keeps the draw only if the
        # treatment line is steeper than the decay line (return_alpha > -decay_alpha).
        f_slope = np.empty(p.individuals); f_icpt = np.empty(p.individuals)
        g_slope = np.empty(p.individuals); g_icpt = np.empty(p.individuals)
        for i in range(p.individuals):
            while True:
                fx0, fx1 = rng.uniform(*rl), rng.uniform(*rr)
                gx0, gx1 = rng.uniform(*dl), rng.uniform(*dr)
                fs, fi = dyn.linear_through(fx0, b.f_lb, fx1, b.f_ub)
                gs, gi = dyn.linear_through(gx0, b.g_ub, gx1, b.g_lb)
                if fs > -gs:
                    break
            f_slope[i], f_icpt[i], g_slope[i], g_icpt[i] = fs, fi, gs, gi
        rows.append(pd.DataFrame({"seed": seed, "individual": np.arange(p.individuals), "welfare0": u0,
                                  "f_slope": f_slope, "f_icpt": f_icpt, "g_slope": g_slope, "g_icpt": g_icpt}))
    df = pd.concat(rows, ignore_index=True)
    write_parquet(df, population)
    log.info("population: %d seeds x %d individuals, initial welfare %.1f .. %.1f; bounds %s",
             p.seeds, p.individuals, df.welfare0.min(), df.welfare0.max(), b)


def _matrix(df: pd.DataFrame, column: str) -> np.ndarray:
    return df.pivot(index="seed", columns="individual", values=column).to_numpy()


# ---- simulate --------------------------------------------------------------------------------
def simulate(*, cfg, policy: str, population, trajectory):
    """Simulate one policy for every seed at once; write mean welfare per (seed, t)."""
    p = parse(cfg)
    pop = read_parquet(population)
    # One stream per (seed set, policy): policies draw independent noise, as in the official code.
    rng = np.random.default_rng([p.seeds, dyn.POLICIES.index(policy)])
    mean = dyn.simulate(policy, _matrix(pop, "welfare0"), _matrix(pop, "f_slope"), _matrix(pop, "f_icpt"),
                        _matrix(pop, "g_slope"), _matrix(pop, "g_icpt"), p.bounds(), k=p.budget,
                        horizon=p.horizon, noise=p.noise, rng=rng,
                        progress=lambda it: progress(it, desc=f"welfare {policy}", total=p.horizon))
    seeds, t = np.meshgrid(np.arange(p.seeds), np.arange(p.horizon + 1), indexing="ij")
    write_parquet(pd.DataFrame({"policy": policy, "seed": seeds.ravel(), "t": t.ravel(),
                                "mean_welfare": mean.ravel()}), trajectory)


# ---- evaluate --------------------------------------------------------------------------------
def _curves(trajectories) -> dict[str, np.ndarray]:
    df = read_parquets(trajectories)
    return {pol: g.pivot(index="seed", columns="t", values="mean_welfare").to_numpy()
            for pol, g in df.groupby("policy", sort=False)}


def crossing_time(rawls_rate: np.ndarray, util_rate: np.ndarray) -> float:
    """First t from which the Rawlsian growth rate stays above the utilitarian one (NaN if never)."""
    ahead = rawls_rate > util_rate
    if not ahead[-1]:
        return float("nan")
    behind = np.flatnonzero(~ahead)
    return float(behind[-1] + 2) if behind.size else 1.0  # rates are indexed from t = 1


def evaluate(*, cfg, trajectories, metrics, rates, crossing):
    """Growth rates at the table's horizons, long-run slopes, and the Rawlsian/utilitarian crossing."""
    p = parse(cfg)
    curves = _curves(trajectories)
    t = np.arange(1, p.horizon + 1)
    rows = []
    for pol, mean in curves.items():
        slope = dyn.late_slope(mean, p.long_run_window)
        for seed in range(mean.shape[0]):
            row = {"policy": pol, "seed": seed, "long_run_slope": slope[seed]}
            row.update({f"rate_t{h}": dyn.growth_rate(mean[seed], h) for h in sorted({*p.table_horizons, p.short_run, p.horizon})})
            rows.append(row)
    write_parquet(pd.DataFrame(rows), metrics)

    # Growth-rate curves (mean over seeds) for the figure, and the per-seed crossing time of the
    # Rawlsian min-U policy against the best utilitarian policy at each t.
    rate = {pol: (mean[:, 1:] - mean[:, :1]) / t for pol, mean in curves.items()}
    utils = [pol for pol in dyn.UTILITARIAN if pol in rate]
    rawls = "rawlsian_min_u" if "rawlsian_min_u" in rate else next(pol for pol in dyn.RAWLSIAN if pol in rate)
    best_util = np.max([rate[pol] for pol in utils], axis=0)  # (S, T)
    cross = [crossing_time(rate[rawls][s], best_util[s]) for s in range(best_util.shape[0])]
    curve_rows = [pd.DataFrame({"policy": pol, "t": t, "rate_mean": r.mean(0), "rate_std": r.std(0, ddof=1) if r.shape[0] > 1 else 0.0})
                  for pol, r in rate.items()]
    write_parquet(pd.concat(curve_rows, ignore_index=True), rates)
    write_json({"rawlsian_policy": rawls, "crossing_time_per_seed": cross,
                "crossing_time_of_mean": crossing_time(rate[rawls].mean(0), best_util.mean(0))}, crossing)


# ---- report ----------------------------------------------------------------------------------
def report(*, cfg, scale, metrics, rates, crossing, benchmarks, table_md, table_csv, claims, params_json, report_md, figure):
    """The results table, the growth-rate figure, the claims with computed verdicts, the report."""
    p = parse(cfg)
    m = read_parquet(metrics)
    curves = read_parquet(rates)
    crossing = read_json(crossing)
    theory = dyn.theoretical_rates(p.bounds(), p.individuals, p.budget)
    horizons = sorted(set(p.table_horizons))

    # Table: mean +- std over seeds of the growth rate at each horizon, and the long-run slope.
    md_rows, csv_rows = [], []
    for pol in p.policies:
        g = m[m.policy == pol]
        md = {"policy": pol, **{f"t = {h}": mean_std(g[f"rate_t{h}"], 4) for h in horizons},
              "long-run slope": mean_std(g.long_run_slope, 4),
              "theory": f"{theory['rawlsian']:.4g}" if pol == "rawlsian_min_u" else
                        f"{theory['utilitarian']:.4g}" if pol == "util_max_u" else ""}
        md_rows.append(md)
        for h in horizons:
            csv_rows.append({"policy": pol, "quantity": f"rate_t{h}", "mean": g[f"rate_t{h}"].mean(), "std": g[f"rate_t{h}"].std(ddof=1)})
        csv_rows.append({"policy": pol, "quantity": "long_run_slope", "mean": g.long_run_slope.mean(), "std": g.long_run_slope.std(ddof=1)})
    caption = (f"Mean welfare growth rate (U_bar(t) - U_bar(0)) / t per policy, mean +- std over {p.seeds} seeds "
               f"(N = {p.individuals}, K = {p.budget}, T = {p.horizon}); long-run slope over the last "
               f"{p.long_run_window:.0%} of T, beside the theoretical long-run rate. Reproduces Fig. 1(a) as a table.")
    write_table(pd.DataFrame(md_rows), table_md, table_csv, caption=caption, csv_df=pd.DataFrame(csv_rows))

    # Figure: growth rate against t (log scale), mean and spread over seeds.
    fig, axes = subplots(1, 1, width=6.5, height=4.2)
    ax = axes[0, 0]
    for pol in p.policies:
        c = curves[curves.policy == pol]
        ax.plot(c.t, c.rate_mean, label=pol, lw=1.4, ls="-" if pol in dyn.RAWLSIAN else "--" if pol in dyn.UTILITARIAN else ":")
        ax.fill_between(c.t, c.rate_mean - c.rate_std, c.rate_mean + c.rate_std, alpha=0.15)
    for name, value in theory.items():
        ax.axhline(value, color="grey", lw=0.8, ls=":")
        ax.annotate(f"{name} theory", (p.horizon, value), ha="right", va="bottom", fontsize=7, color="grey")
    if np.isfinite(crossing["crossing_time_of_mean"]):
        ax.axvline(crossing["crossing_time_of_mean"], color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel("mean welfare growth rate")
    ax.set_title(f"Growth rate per policy (N={p.individuals}, K={p.budget}, {p.seeds} seeds)")
    ax.legend(fontsize=7)
    savefig(fig, figure)

    # Claims. Differences between policies must exceed two standard errors of the per-seed
    # difference, so that noise alone cannot make a claim hold.
    rawls = crossing["rawlsian_policy"]
    utils = [pol for pol in dyn.UTILITARIAN if pol in p.policies]

    def rate_at(pol, h):
        return m[m.policy == pol].sort_values("seed")[f"rate_t{h}"].to_numpy()

    def lead(a, b, h):
        d = rate_at(a, h) - rate_at(b, h)
        se = d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else 0.0
        return d.mean(), se

    best_util_short = max(utils, key=lambda pol: rate_at(pol, p.short_run).mean())
    d_short, se_short = lead(best_util_short, rawls, p.short_run)
    best_util_long = max(utils, key=lambda pol: rate_at(pol, p.horizon).mean())
    d_long, se_long = lead(rawls, best_util_long, p.horizon)
    cross_seeds = np.asarray(crossing["crossing_time_per_seed"], dtype=float)
    slope = {pol: m[m.policy == pol].long_run_slope.mean() for pol in p.policies}
    rel = {"rawlsian": abs(slope[rawls] / theory["rawlsian"] - 1)}
    if "util_max_u" in slope:
        rel["utilitarian"] = abs(slope["util_max_u"] / theory["utilitarian"] - 1)
    claims_list = [
        Claim("a", "A utilitarian policy leads in the short run.",
              "utilitarian policies dominate in the short run (Fig. 1)",
              {"t": p.short_run, "best_utilitarian": best_util_short,
               "utilitarian_rate": rate_at(best_util_short, p.short_run).mean(), "rawlsian_rate": rate_at(rawls, p.short_run).mean()},
              f"mean per-seed lead of {best_util_short} over {rawls} at t = {p.short_run} > 2 SE: "
              f"{d_short:.4g} > {2 * se_short:.4g}",
              d_short > 2 * se_short),
        Claim("b", "The Rawlsian policy leads in the long run, after a crossing time.",
              "Rawlsian policies outperform utilitarian ones in the long run (Fig. 1)",
              {"t": p.horizon, "rawlsian_rate": rate_at(rawls, p.horizon).mean(),
               "best_utilitarian": best_util_long, "utilitarian_rate": rate_at(best_util_long, p.horizon).mean(),
               "crossing_time_mean_curve": crossing["crossing_time_of_mean"],
               "crossing_time_seeds": mean_std(cross_seeds[np.isfinite(cross_seeds)], 4) if np.isfinite(cross_seeds).any() else "never"},
              f"mean per-seed lead of {rawls} over {best_util_long} at t = T = {p.horizon} > 2 SE "
              f"({d_long:.4g} > {2 * se_long:.4g}) and a crossing exists in every seed "
              f"({int(np.isfinite(cross_seeds).sum())}/{cross_seeds.size})",
              (d_long > 2 * se_long) and bool(np.isfinite(cross_seeds).all())),
        Claim("c", "Long-run growth rates match the theory: (K f_ub - (N-K) g_lb)/N Rawlsian, (K f_ub - (N-K) g_ub)/N utilitarian.",
              f"Rawlsian {theory['rawlsian']:.4g}, utilitarian {theory['utilitarian']:.4g} (at our N, K)",
              {"rawlsian_slope": slope[rawls], "rawlsian_theory": theory["rawlsian"],
               "utilitarian_slope": slope.get("util_max_u", float("nan")), "utilitarian_theory": theory["utilitarian"]},
              f"relative error of each long-run slope <= rate_tolerance = {p.rate_tolerance}: "
              + ", ".join(f"{k} {v:.3g}" for k, v in rel.items()),
              len(rel) == 2 and max(rel.values()) <= p.rate_tolerance,
              note="" if "util_max_u" in slope else "util_max_u was not simulated, so the utilitarian rate is unchecked"),
    ]
    write_claims(claims_list, claims, paper=SLUG, scale=scale)
    write_json(to_dict(p), params_json)

    what = (f"{p.seeds} seeds x {len(p.policies)} policies ({', '.join(p.policies)}), N = {p.individuals} "
            f"individuals whose initial welfare is a household income x {p.income_scale} "
            f"({'Engel 1857 incomes, statsmodels' if p.incomes is None else p.incomes}), K = {p.budget} treated per step, "
            f"T = {p.horizon} steps, f in [{p.bounds().f_lb:.0f}, {p.bounds().f_ub:.0f}] and g in "
            f"[{p.bounds().g_lb:.0f}, {p.bounds().g_ub:.0f}], linear between per-individual knots as the official code, "
            f"with its symmetric noise ({'on' if p.noise else 'off'}).")
    differences = (
        "The paper initialises welfare from SIPP 2014 incomes (individuals grouped by income bin) and runs "
        "T = 10,000 steps over 100 samples; no SIPP file ships in an installable package, so we draw N "
        "households from the Engel (1857) incomes in statsmodels and scale them to the same range of welfare "
        "units as the paper's (tens to hundreds). Everything else (the bounds, the linear f and g, the "
        "rounding, the noise, the tie-breaking) follows the official code. The full scale uses the paper's T "
        "and sample count; point `welfare.incomes` at a SIPP extract to use the paper's population.")
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md, figures=[figure],
                 claims=claims_list, benchmarks=benchmarks, differences=differences)
