"""The symspace report: the accuracy table, the figures, claims (a)-(e) with their gates and controls, the checks,
report.md."""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.claims import (Check, Claim, Control, Evidence, PositiveControl, Premise, Scope, convention,
                                  describe, mean_test, paired_test, write_claims)
from papers.common.io import read_parquet, write_json
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.report import job_times, write_report
from papers.common.tables import mean_std, write_table
from papers.symspace.params import SLUG, parse, real_eeg
from papers.symspace.stages import ASYMPTOTIC, CHECKS, KNOWN_VALUE, LIMIT_CHECKS, WRONG_FORMULAS

TITLE = "P4 symspace: Neural networks on symmetric spaces of noncompact type (Busemann point-to-hyperplane distance)"
SPD_ARMS = {"spdnet_logeig_linear": "BiMap -> ReEig -> LogEig + linear (SPDNet)",
            "spdnet_busemann_mlr": "BiMap -> ReEig -> Busemann MLR"}
BALL_ARMS = {"euclidean_mlr": "Euclidean MLR", "ganea_mlr": "Ganea et al.'s gyroplane MLR",
             "busemann_mlr": "Busemann (horocycle) MLR", "angle_rule": "angle rule about the origin (premise of d)",
             "generating_head": "the random horocycle head that drew the labels (positive control of d)"}
NO_POSITIVE = ("a direct comparison of two trained classifiers' test accuracies on the same held-out data: no "
               "estimator or detector stands between the models and the verdict, so there is no analysis to blind")


def replicates(acc: pd.DataFrame, task: str, arm: str, variant: str = "main", column: str = "test_acc") -> np.ndarray:
    """One value per replicate (a seed where each seed draws its own data; a subject of real EEG, averaged over
    the seeds that vary its initialisation), in replicate order: arms of one task pair by replicate."""
    sel = acc[(acc.task == task) & (acc.arm == arm) & (acc.variant == variant)]
    if sel.empty:
        raise ValueError(f"symspace: no accuracies for task {task}, arm {arm}, variant {variant}")
    return sel.groupby("replicate")[column].mean().sort_index().to_numpy()


def paired(acc: pd.DataFrame, task: str, first: tuple, second: tuple, column: str = "test_acc"):
    """Two (arm, variant) arms' values on the replicates they share, in replicate order (claim b's controls run on
    fewer seeds than its heads)."""
    a, b = (acc[(acc.task == task) & (acc.arm == arm) & (acc.variant == variant)].groupby("replicate")[column].mean()
            for arm, variant in (first, second))
    if a.empty or b.empty:
        raise ValueError(f"symspace: no accuracies for task {task}, arms {first} and {second}")
    common = a.index.intersection(b.index).sort_values()
    return a[common].to_numpy(), b[common].to_numpy()


def eeg_tasks(acc: pd.DataFrame) -> list[str]:
    """Claim (b)'s EEG tasks: the mixing model (task eeg) or the user's data sets (eeg:<name>)."""
    return sorted(t for t in acc.task.unique() if t == "eeg" or t.startswith("eeg:"))


def attention_tasks(acc: pd.DataFrame) -> list[str]:
    """The attention extension's tasks: the mixing model with the class signal spread over the windows, or real EEG
    (eeg_planted, the event in one window, is its positive control)."""
    return sorted(t for t in acc[acc.arm == "attention"].task.unique() if t != "eeg_planted")


def stability(acc: pd.DataFrame, task: str, first: str, second: str) -> float:
    """How far a claim's mean effect (first - second arm, test accuracy) moves between the best-validation
    checkpoint of the first half of training and that of the whole run."""
    full = np.subtract(*paired(acc, task, (first, "main"), (second, "main")))
    half = np.subtract(*paired(acc, task, (first, "main"), (second, "main"), column="half_test_acc"))
    return float(abs(np.nanmean(full) - np.nanmean(half)))


def stable_gate(acc: pd.DataFrame, pairs: list, tol: float, what: str) -> Premise:
    shifts = {f"{task}: {first} - {second}": stability(acc, task, first, second) for task, first, second in pairs}
    worst = max(shifts, key=shifts.get)
    return Premise.at_most(f"the effect is stable across step counts ({what}): the largest shift of the mean "
                           "difference between the best-validation checkpoint of the first half of training and of "
                           f"the whole run (at {worst})", shifts[worst], tol, what="symspace.claims.stability_tol")


def range_test(errors, tol: float, name: str) -> Evidence:
    """Every case against a tolerance: effect the largest error, 'interval' the (smallest, largest) over the cases.
    It holds when every case is below `tol`, fails when every case is at or above it; a numerical check of an
    identity needs no interval over replicates (a t interval on per-seed maxima would test their mean)."""
    e = np.asarray(errors, dtype=float)
    return Evidence(float(e.max()), (float(e.min()), float(e.max())), e.size,
                    f"range (smallest, largest) of the absolute error over {e.size} random cases: holds when every "
                    "case is below the tolerance, fails when every case is at or above it", tol, "<",
                    f"{name} (largest error; the brackets hold the range over the cases, not a 95% interval)",
                    values=tuple(e))


def converged_gate(acc: pd.DataFrame, sel, tol: float, what: str) -> Premise:
    """Every arm of `sel` (per task) had peaked on validation: the mean of its runs' late gains, t interval over
    its replicates, lies below `tol`.

    Per arm, not per run: one run's late gain is read on a validation set of 27-45 items, so it moves in steps of
    one item (0.02-0.04) and a flat curve's noise alone lifts the largest of 48-60 runs' gains to 3-4 items (the
    first default run of issue 52: 0.125 on one of 16 EEG runs whose median was -0.03). The mean over an arm's
    replicates averages that noise out; a systematic late rise of the arm still shows in it, and the interval
    keeps an arm with too few or too scattered runs from passing. The largest single run stays in table.csv."""
    rows = acc[sel]
    parts = [mean_test(g.late_gain.to_numpy(dtype=float), threshold=tol, direction="<",
                       name=f"{task} {arm}: mean late gain", what="runs")
             for (task, arm), g in rows.groupby(["task", "arm"], sort=True)]
    return Premise.from_evidence(f"every arm converged ({what}): per task and arm, the mean over its runs of the "
                                 "rise of validation accuracy in the last quarter of training over the best before "
                                 "(t interval) below symspace.claims.convergence_tol", parts)


def claim_a(p, chk: pd.DataFrame) -> Claim:
    tol, order_tol = p.claims["distance_tol"], p.claims["order_tol"]
    errors = lambda name, sel=None: chk[chk.check == name].error.to_numpy()  # noqa: E731
    spd = chk[chk.check == LIMIT_CHECKS["spd"]]
    parts = [range_test(g.error, tol, f"spd {metric}: closed form vs limit") for metric, g in
             spd.assign(metric=spd.case.str.split(":").str[1]).groupby("metric", sort=False)]
    parts.append(range_test(errors(LIMIT_CHECKS["ball"]), tol, "ball: horocycle closed form vs limit"))
    return Claim(
        "a", "The closed-form Busemann distance on SPD(n) (every (alpha, beta) metric tried) and on the Poincare ball "
             "equals its limit definition",
        "exact (Sec. 3, the closed forms of the Busemann function)",
        {part.name: part.effect for part in parts},
        f"every random case's absolute error (closed form minus the Richardson-extrapolated limit d(X, gamma(t)) - t, "
        f"mpmath at {p.check['dps']} digits) below {tol:g} (symspace.claims.distance_tol); the wrong formulas must "
        "have every case at or above it",
        parts,
        Control("wrong formulas, same procedure: the plain (not reversed) Cholesky factor, and the (alpha, beta) form "
                "with the beta term dropped", [range_test(errors(WRONG_FORMULAS["cholesky"]), tol, "plain Cholesky"),
                                               range_test(errors(WRONG_FORMULAS["beta"]), tol, "beta term dropped")],
                kind="null"),
        threshold_source=convention(f"numerical tolerance {tol:g}: the two-level Richardson remainder is O(t^-3) "
                                    f"(~1e-5 at t = {p.check['times'][0]:g} for 1/t coefficients of order 1-10), a "
                                    "wrong formula errs by order 0.1-1"),
        premise=[Premise.at_most("the limit is evaluated in its 1/t regime (what Richardson's extrapolation "
                                 "presupposes): the largest relative change of t x gap over the last doubling of t",
                                 float(errors(ASYMPTOTIC).max()), order_tol,
                                 what="symspace.claims.order_tol; a 1/sqrt(t) gap would change by 0.29")],
        positive_control=PositiveControl(
            "the same limit procedure on diagonal X, whose Busemann value -<h, log x>_(alpha, beta) follows from the "
            "definition alone: the procedure must confirm it", range_test(errors(KNOWN_VALUE), tol, "known value")))


def claim_b(p, acc: pd.DataFrame) -> Claim:
    """Decided on the EEG task(s) alone: the paper's SPD tasks are EEG (BCIC-IV-2a, MAMEM-SSVEP-II, BCI-NER). The
    digits' region covariances stand in for none of them and are reported as context (measured, with their own
    interval and convergence), not decided on: issue 52's review saw a digits-only "does not hold" flip sign with
    the initialisation."""
    tasks = eeg_tasks(acc)
    bus, log = "spdnet_busemann_mlr", "spdnet_logeig_linear"

    def heads(variant, t_list=tasks):
        return [paired_test(*paired(acc, t, (bus, variant), (log, variant)),
                            name=f"{t}: Busemann MLR - LogEig head ({variant})", what="replicates") for t in t_list]

    learned = [paired_test(*paired(acc, t, (log, "main"), (log, "permuted_labels")),
                           name=f"{t}: SPDNet - SPDNet on permuted labels", what="replicates") for t in tasks]
    main = acc.task.isin(tasks) & acc.arm.isin([bus, log]) & (acc.variant == "main")
    inits = int(acc[main].groupby(["task", "replicate", "arm"]).size().min())
    measured = {f"{t} {arm}": float(replicates(acc, t, arm).mean()) for t in tasks for arm in (bus, log)}
    if (acc.task == "digits").any():  # context
        digits = heads("main", ["digits"])[0]
        gains = acc[(acc.task == "digits") & (acc.variant == "main")].groupby("arm").late_gain.mean()
        measured.update({
            f"context (digits, not deciding) {arm}": float(replicates(acc, "digits", arm).mean()) for arm in (bus, log)})
        measured["context (digits, not deciding): Busemann - LogEig"] = digits.describe()
        measured.update({f"context (digits): mean late gain {arm}": float(g) for arm, g in gains.items()})
    return Claim(
        "b", "On the EEG task the Busemann MLR head beats SPDNet's LogEig + linear head on the same BiMap -> ReEig "
             "backbone",
        "BCIC-IV-2a 78.24%, MAMEM-SSVEP-II 70.96%, BCI-NER 78.02%, above SPDNet (LogEig head) and other SPD baselines",
        measured,
        "paired-by-replicate t interval of the test-accuracy difference (Busemann head - LogEig head, the same "
        "backbone with the same initial weights: the head is the only difference; each at its best-validation "
        f"checkpoint; a replicate's value is the mean over {inits} initialisations of both on the same data and "
        "split) > 0 on every EEG task; the digits are reported as context, not decided on (the paper's SPD tasks are "
        "EEG)",
        heads("main"),
        Control("both heads trained on permuted labels (no class information to learn; first initialisation), same "
                "criterion", heads("permuted_labels"), kind="null"),
        threshold_source=convention("a sign: the paper reports the Busemann MLR above SPDNet's LogEig head"),
        premise=[converged_gate(acc, main, p.claims["convergence_tol"], "both heads, every EEG task"),
                 stable_gate(acc, [(t, bus, log) for t in tasks], p.claims["stability_tol"], "both heads"),
                 Premise.from_evidence("the backbone learns each EEG task: SPDNet above its permuted-label control "
                                       "(paired t interval > 0)", learned)],
        no_positive_control=NO_POSITIVE)


def claim_c() -> Claim:
    return Claim.not_measured(
        "c", "The (alpha, beta) family matters: a tuned (alpha, beta) beats the affine-invariant (1, 0) metric",
        "best (alpha, beta) above (1, 0) or tied, per data set",
        "not testable in this design",
        "not testable in this design: in the MLR the metric enters only through <h, l>_(alpha, beta) = <alpha h + beta "
        "(sum h) 1, l>, so every (alpha, beta) model is a (1, 0) model with the normal a' = alpha a + beta (sum a) 1 "
        "(check 'reparametrisation' confirms it numerically) and the Frechet mean of the attention is the same for "
        "every (alpha, beta): the family changes only the optimisation path, not what the network can represent, so a "
        "difference in accuracy here would measure optimisation, not the metric",
        "not run: the claim is not testable in this design", threshold_source=convention("a sign"))


def claim_d(p, acc: pd.DataFrame) -> Claim:
    margin, tol = p.claims["noninferiority_margin"], p.claims["convergence_tol"]
    bus, ganea = ("busemann_mlr", "main"), ("ganea_mlr", "main")
    angle = replicates(acc, "tree", "angle_rule")
    main = (acc.task == "tree") & acc.arm.isin(["euclidean_mlr", "ganea_mlr", "busemann_mlr"]) & (acc.variant == "main")
    chance = float(acc[acc.task == "tree"].chance.iloc[0])
    learned = mean_test(replicates(acc, "tree", "ganea_mlr") - chance, threshold=0.0, direction=">",
                        name=f"tree: Ganea head - chance ({chance:.3g})", what="tree seeds")
    planted = (acc.task == "tree_horocycle").any()
    return Claim(
        "d", f"On the hyperbolic task the Busemann (horocycle) head is within {margin:g} accuracy of, or above, "
             "Ganea et al.'s hyperbolic MLR",
        "on par or better than hyperbolic MLR baselines",
        {**{arm: float(replicates(acc, "tree", arm).mean()) for arm in ("busemann_mlr", "ganea_mlr")},
         "context: euclidean_mlr": float(replicates(acc, "tree", "euclidean_mlr").mean()),
         "angle rule": float(angle.mean()),
         **({f"positive control, {arm}: accuracy on its own training points (test)":
             f"{replicates(acc, 'tree_horocycle', arm, column='fit_acc').mean():.3f} "
             f"({replicates(acc, 'tree_horocycle', arm).mean():.3f})"
             for arm in ("busemann_mlr", "ganea_mlr", "generating_head")} if planted else {})},
        f"paired-by-seed t interval of the test-accuracy difference Busemann head - Ganea's head > -{margin:g} (each "
        f"head the best of {p.train['restarts']} initialisations on validation, at its best-validation checkpoint); "
        "the Euclidean head is reported as context, not decided against (the paper's comparator is hyperbolic)",
        paired_test(*paired(acc, "tree", bus, ganea), threshold=-margin, name="tree: Busemann head - Ganea's head",
                    what="tree seeds"),
        Control("the Busemann head before training (its initial parameters) against Ganea's head, same criterion",
                paired_test(*paired(acc, "tree", ("busemann_mlr", "untrained"), ganea), threshold=-margin,
                            name="tree: untrained Busemann head - Ganea's head", what="tree seeds"), kind="null"),
        threshold_source=convention(f"a non-inferiority margin of {margin:g} accuracy, a judgement of this "
                                    "reproduction set before any run (the paper states none), against Ganea et al.'s "
                                    "hyperbolic MLR, the paper's comparator ('hyperbolic MLR baselines')"),
        premise=[converged_gate(acc, main, tol, "the three heads"),
                 stable_gate(acc, [("tree", "busemann_mlr", "ganea_mlr")], p.claims["stability_tol"], "both heads"),
                 Premise.at_most("no angle rule about the origin gives the labels: the best angular-sector rule's "
                                 "mean test accuracy", float(angle.mean()), p.claims["angle_rule_max"],
                                 what="symspace.claims.angle_rule_max"),
                 Premise.from_evidence("the hyperbolic baseline learns the task: Ganea's head above chance (t "
                                       "interval)", learned)],
        **({"positive_control": PositiveControl(
            f"the same heads, restarts and criterion on {p.tree['planted_share']:.0%} of the same tree points "
            f"labelled by a random Busemann head of {p.tree['planted_classes']} horocycles (base points at random "
            "nodes, random directions; the labels lie in the Busemann head's function class, which the generating "
            "head set into layers.BallMLR confirms: check 'planted_representable'): the Busemann head must be "
            "non-inferior there",
            paired_test(*paired(acc, "tree_horocycle", bus, ganea), threshold=-margin,
                        name="horocycle bands: Busemann head - Ganea's head", what="tree seeds"))}
           if planted else {"no_positive_control": "symspace.tree.planted_seeds is 0"}))


def _attention_claim(p, acc: pd.DataFrame, tasks: list, threshold: float, cid: str, statement: str, paper: str,
                     source: str) -> Claim:
    """Attention - no attention on `tasks` (paired by replicate, test accuracy at the best-validation checkpoint)
    against `threshold`, with the convergence, stability and learning gates, the untrained network as its null
    control, and the planted window (the class event in one window) as its positive control."""
    tol = p.claims["convergence_tol"]

    def gain(variant, t, thr):
        return paired_test(*paired(acc, t, ("attention", variant), ("no_attention", "main")), threshold=thr,
                           name=f"{t}: attention ({variant}) - no attention", what="replicates")

    chance = {t: float(acc[acc.task == t].chance.iloc[0]) for t in tasks}
    learned = [mean_test(replicates(acc, t, "no_attention") - chance[t], threshold=0.0, direction=">",
                         name=f"{t}: no-attention network - chance ({chance[t]:.3g})") for t in tasks]
    main = acc.task.isin(tasks) & acc.arm.isin(["attention", "no_attention"]) & (acc.variant == "main")
    planted = ((acc.task == "eeg_planted") & (acc.arm == "attention")).any()
    return Claim(
        cid, statement, paper,
        {**{f"{t} attention": float(replicates(acc, t, "attention").mean()) for t in tasks},
         **{f"{t} no attention": float(replicates(acc, t, "no_attention").mean()) for t in tasks}},
        f"paired-by-replicate t interval of attention - no attention (the same network with the attention removed: "
        f"the ablation; EEG window tokens, test accuracy at the best-validation checkpoint) > {threshold:g}",
        [gain("main", t, threshold) for t in tasks],
        Control("the attention network before training (its initial parameters) against the trained network without "
                "attention, same criterion", [gain("untrained", t, threshold) for t in tasks], kind="null"),
        threshold_source=convention(source),
        premise=[converged_gate(acc, main, tol, "both networks"),
                 stable_gate(acc, [(t, "attention", "no_attention") for t in tasks], p.claims["stability_tol"],
                             "both networks"),
                 Premise.from_evidence("the network without attention learns the task (above chance, t interval)",
                                       learned)],
        **({"positive_control": PositiveControl(
            "the same pair on the mixing model with the class event in one randomly placed window (a window to "
            "find, planted by construction): the attention must beat the network without it (paired t interval > 0)",
            gain("main", "eeg_planted", 0.0))} if planted else
           {"no_positive_control": "symspace.train.planted_attention_seeds is 0"}))


def attention_extension(p, acc: pd.DataFrame) -> Claim | None:
    """The spread-window robustness check (an extension, not the paper's claim e): where the class's excess power
    is spread over every window, no window stands out, so the attention has nothing to find and must not lose. Its
    verdict is computed with the same machinery (gates, controls) but it is reported in the text, not among the
    claims: it decides a non-inferiority statement in a setting built so that attention cannot help, which says
    nothing about the paper's "attention improves accuracy". None where the spread setting was not run (real EEG)."""
    if not (acc.task == "eeg_spread").any():
        return None
    margin = p.claims["noninferiority_margin"]
    return _attention_claim(
        p, acc, ["eeg_spread"], -margin, "e_spread",
        "Extension (robustness check, not the paper's claim): the distance-based attention is within "
        f"{margin:g} accuracy of, or above, the same network without it on EEG whose class signal is spread over "
        "every window", "not in the paper (the paper's claim is that attention improves accuracy)",
        f"a non-inferiority margin of {margin:g} accuracy (symspace.claims.noninferiority_margin, claim d's): where no "
        "window stands out the attention has nothing to find, so it must not lose")


def claim_e(p, acc: pd.DataFrame, extension: Claim | None) -> Claim:
    """The paper's claim: the attention improves accuracy. Decided on real EEG (config symspace.eeg_datasets, the
    full scale), where what there is to find is the data's, not planted. Not measured on the mixing model: the only
    settings there are the spread window, built so that attention has nothing to find (the extension), and the
    planted window, where it wins by construction (the positive control)."""
    statement = ("The distance-based attention (Busemann FC queries and keys, weighted Frechet-mean aggregation) "
                 "improves accuracy over the same network without it on EEG")
    paper = "attention improves accuracy (EEG tasks, Sec. 5)"
    real = [t for t in attention_tasks(acc) if t.startswith("eeg:")]
    if real:
        return _attention_claim(p, acc, real, 0.0, "e", statement, paper,
                                "a sign: the paper reports the attention above the network without it")
    seen = ""
    if extension is not None:
        ev = extension.evidence[0] if isinstance(extension.evidence, list) else extension.evidence
        seen = (f" The spread-window robustness check (an extension, reported in the text) reads "
                f"{ev.describe()}: {extension.verdict}; it does not decide this claim.")
    return Claim.not_measured(
        "e", statement, paper,
        "paired-by-replicate t interval of attention - no attention > 0 on real EEG (config symspace.eeg_datasets), "
        "where the class information is the data's, not planted in one window by construction",
        "not measured at this scale: no setting was run in which attention has something to find without it being "
        "planted by construction (the mixing model either spreads the class signal over every window, where "
        "attention has nothing to find, or puts it in one window, where attention wins by construction); real EEG "
        "(config symspace.eeg_datasets, full scale) decides it." + seen,
        "not run: the claim itself was not measured", threshold_source=convention("a sign"),
        control_kind="ablation")


def symspace_checks(p, chk: pd.DataFrame, acc: pd.DataFrame | None = None) -> list[Check]:
    tol = p.claims["distance_tol"]
    statements = {"invariance_n": "the closed form is invariant under X -> N X N^T, N unit upper triangular "
                                  "(horospheres are N-orbits)",
                  "invariance_o": "the point-to-hyperplane distance is invariant when the hyperplane and the point "
                                  "move together under an orthogonal O",
                  "logeig": "for diagonal X the closed form is the LogEig linear form -<h, log x>_(alpha, beta) (the "
                            "Busemann MLR generalises LogEig + linear)",
                  "ganea": "on the ball, the horocycle distance equals Ganea's gyroplane distance on the geodesic "
                           "normal to the hyperplane",
                  "reparametrisation": "the (alpha, beta) MLR equals the (1, 0) MLR with the normal a' = alpha a + "
                                       "beta (sum a) 1 (why claim c is not testable here)"}
    checks = [Check.at_most(key, statement, float(chk[chk.check == CHECKS[key]].error.max()), tol,
                            what=f"largest error over {int((chk.check == CHECKS[key]).sum())} cases; distance_tol")
              for key, statement in statements.items()]
    gen = None if acc is None else acc[(acc.task == "tree_horocycle") & (acc.arm == "generating_head")]
    if gen is not None and not gen.empty:
        low = float(np.minimum(gen.test_acc, gen.fit_acc).min())
        checks.append(Check.at_least(
            "planted_representable", "claim (d)'s positive-control labels lie in the Busemann head's function class: "
            "the head that drew them, set into layers.BallMLR's Busemann head, labels every planted point right",
            low, 1.0, what=f"smallest accuracy over {len(gen)} planted tree seeds, training and test points"))
    return checks


def symspace_claims(p, acc: pd.DataFrame, chk: pd.DataFrame, extension: Claim | None = None) -> list[Claim]:
    return [claim_a(p, chk), claim_b(p, acc), claim_c(), claim_d(p, acc), claim_e(p, acc, extension)]


# ---- table, figures, text ------------------------------------------------------------------------
def _table(acc: pd.DataFrame, chk: pd.DataFrame):
    """Test accuracy per task and arm (mean +- std over replicates, and every replicate's value in table.csv), the
    controls, and the largest and smallest errors of claim (a)'s quantities and of the checks."""
    md, csv = [], []
    rows = [(t, arm, v) for t in eeg_tasks(acc) + ["digits"] for arm in SPD_ARMS for v in ("main", "permuted_labels")]
    rows += [(t, arm, v) for t in attention_tasks(acc) + ["eeg_planted"] for arm, v in
             (("no_attention", "main"), ("attention", "main"), ("attention", "untrained"))]
    rows += [("tree", arm, "main") for arm in BALL_ARMS] + [("tree", "busemann_mlr", "untrained")]
    rows += [("tree_horocycle", arm, "main") for arm in ("ganea_mlr", "busemann_mlr", "generating_head")]
    for task, arm, variant in rows:
        sel = acc[(acc.task == task) & (acc.arm == arm) & (acc.variant == variant)]
        if sel.empty:
            continue
        v = replicates(acc, task, arm, variant)
        half = replicates(acc, task, arm, variant, "half_test_acc")
        label = {**SPD_ARMS, **BALL_ARMS}.get(arm, arm.replace("_", " "))
        name = label + ("" if variant == "main" else f" [{variant}]")
        gains = sel.late_gain
        md.append({"task": task, "model": name, "test accuracy": mean_std(v, 3),
                   "at the first half's checkpoint": mean_std(half, 3) if np.isfinite(half).any() else "n/a",
                   "replicates": v.size,
                   "largest late validation gain": f"{gains.max():.3g}" if gains.notna().any() else "n/a"})
        csv.append({"task": task, "arm": arm, "variant": variant, "mean": v.mean(),
                    "std": v.std(ddof=1) if v.size > 1 else 0.0, "replicates": v.size, "runs": len(sel),
                    "max_late_gain": gains.max(), "mean_late_gain": gains.mean(), "per_replicate": ";".join(f"{x:.6g}" for x in v),
                    "per_replicate_first_half": ";".join(f"{x:.6g}" for x in half)})
    for name, g in chk.groupby("check", sort=False):
        md.append({"task": "closed-form check", "model": name, "test accuracy": f"error {g.error.min():.3g} .. "
                   f"{g.error.max():.3g}", "at the first half's checkpoint": "n/a", "replicates": len(g),
                   "largest late validation gain": "n/a"})
        csv.append({"task": "distance_check", "arm": name, "variant": "", "mean": g.error.max(),
                    "std": float("nan"), "replicates": len(g), "max_late_gain": float("nan"),
                    "per_replicate": f"min {g.error.min():.6g}"})
    return pd.DataFrame(md), pd.DataFrame(csv)


def _figures(acc, gaps, acc_figure, gap_figure):
    tasks = eeg_tasks(acc) + ["digits"] + attention_tasks(acc) + ["eeg_planted", "tree", "tree_horocycle"]
    tasks = [t for t in tasks if (acc.task == t).any()]
    fig, axes = subplots(1, len(tasks), width=3.6, height=3.8)
    for ax, task in zip(axes[0], tasks):
        arms = [a for a in (*SPD_ARMS, "no_attention", "attention", *BALL_ARMS)
                if ((acc.task == task) & (acc.arm == a) & (acc.variant == "main")).any()]
        vals = [replicates(acc, task, a) for a in arms]
        ax.bar(range(len(arms)), [v.mean() for v in vals], yerr=[v.std(ddof=1) if v.size > 1 else 0 for v in vals],
               color="tab:blue", alpha=0.7)
        ax.axhline(float(acc[acc.task == task].chance.iloc[0]), color="grey", ls=":", label="chance")
        ax.set_xticks(range(len(arms)))
        ax.set_xticklabels([a.replace("spdnet_", "") for a in arms], rotation=30, ha="right", fontsize=7)
        ax.set_title(task, fontsize=9)
        ax.set_ylabel("test accuracy (best-validation checkpoint)", fontsize=7)
        ax.legend(fontsize=7)
    savefig(fig, acc_figure)
    fig, axes = subplots(1, 1, width=5.5, height=4)
    ax = axes[0, 0]
    for (alpha, beta), g in gaps.groupby(["alpha", "beta"]):
        mean = g.groupby("t").gap.apply(lambda s: np.abs(s).mean())
        ax.loglog(mean.index, mean.values, "o-", label=f"(alpha, beta) = ({alpha:g}, {beta:g})")
    t = np.asarray(sorted(gaps.t.unique()), float)
    ax.loglog(t, np.abs(gaps[gaps.t == t[0]].gap).mean() * t[0] / t, "k--", lw=0.8, label="1/t")
    ax.set_xlabel("t")
    ax.set_ylabel("|d(X, gamma(t)) - t - B(X)|")
    ax.set_title("Gap to the closed form (first case of each metric)", fontsize=9)
    ax.legend(fontsize=7)
    savefig(fig, gap_figure)


def _what_was_run(p, acc) -> str:
    e, t, tr = p.eeg, p.tree, p.train
    if real_eeg(p):
        eeg = (f"(1) real EEG: {', '.join(f'{k} ({v})' for k, v in sorted(p.eeg_datasets.items()))}, one .npz per "
               f"subject, {e['windows']} windows per trial; the subjects are the replicates of an EEG task "
               f"({p.seeds} seeds vary the initialisation only); session 0 trains, session 1 tests. ")
    else:
        eeg = (f"(1) EEG-like mixing model: {e['subjects']} subjects per seed, {e['channels']} channels = sources, "
               f"{e['classes']} classes, {e['trials_per_class']} trials per class and session, {e['windows']} windows "
               f"of {e['samples']} samples; class k multiplies source k's power by {e['class_gain']:g} in one randomly "
               f"placed window (the attention extension instead spreads the same excess power over every window: "
               f"x {1 + (e['class_gain'] - 1) / e['windows']:.3g} in each); per-subject forward matrix, perturbed by "
               f"{e['session_shift']:g} in session 2 (which tests); trial covariance = mean of window covariances. ")
    return (
        f"{p.head_seeds} seeds for claim (b)'s heads on EEG (each draws its own data and split; on each, both heads "
        f"from {tr['head_inits']} initialisations, averaged per seed; the permuted-label controls, one "
        f"initialisation, on the first {p.seeds}), {p.seeds} for the attention extension (its positive control on "
        f"the first {tr['planted_attention_seeds']}), {t['seeds']} tree seeds for claim (d) (its positive control on "
        f"the first {t['planted_seeds']}). " + eeg +
        f"(2) context for claim (b), not deciding it: sklearn digits on the first {p.seeds} seeds "
        f"({p.digits['max_images']} images drawn per seed, {p.digits['train_fraction']:.0%} train, one "
        f"initialisation, {tr['digits_step_factor'] * tr['steps']} steps): "
        "5 x 5 region covariances of (x, y, I, |Ix|, |Iy|). "
        f"(3) a {t['branching']}-ary tree of depth {t['depth']} in the Poincare disk (edge length "
        f"{t['edge_length']:g}, hyperbolic noise {t['noise']:g}), labels = ancestor at depth {t['label_depth']}, "
        "moved by a random rotation and a Mobius translation of its root to hyperbolic distance "
        f"{t['root_shift']:g} from the origin, "
        f"{t['train_fraction']:.0%} of the nodes train; claim (d)'s positive control labels {t['planted_share']:.0%} "
        f"of the same points (equal classes) by a random Busemann head of {t['planted_classes']} horocycles (base "
        "points at random nodes, random directions), labels the Busemann head can represent exactly. Each ball head is "
        f"trained from {tr['restarts']} initialisations per tree seed (each from its own key), the best on validation "
        "kept, every head alike. "
        f"Claim (b): the same BiMap ({p.model['bimap_dim']} x {p.model['bimap_dim']} output) -> ReEig backbone, with "
        "the same initial weights, under SPDNet's LogEig + linear head and under the Busemann MLR. The attention "
        "extension (claim e itself is not measured on the mixing model): the "
        f"attention network ({p.model['attention_dim']} hyperplanes per query/key FC layer, {p.model['frechet_iters']} "
        "Frechet-mean iteration(s)) and the same network without attention, on the window tokens of "
        + ("every EEG subject" if tr["attention_subjects"] is None else
           f"the first {tr['attention_subjects']} EEG subject(s) of each seed")
        + f", {tr['attention_steps']} steps each, where the class signal is spread over the windows (the extension) "
        "and where it sits in one window (its positive control). "
        f"Every EEG model of claim (b) trains {tr['steps']} full-batch Adam steps (lr {tr['lr']:g}), the ball heads "
        f"{tr['tree_steps']} (lr {tr['tree_lr']:g}), in float64; "
        f"{tr['val_fraction']:.0%} of the training data is held out and its accuracy read every {tr['eval_every']} "
        "steps: every accuracy is read at the checkpoint of the best validation accuracy (not the last iterate), and "
        "again at the best checkpoint of the first half of training (the stability gate: a claim's mean effect may "
        f"move by at most {p.claims['stability_tol']:g} between the two); the convergence gate: per task and arm, "
        "the mean over its runs of the rise in the last quarter over the best before, t interval. "
        f"Claim (a): {p.check['matrices']} random SPD({p.check['dim']}) cases per metric {list(p.metrics)} and "
        f"{p.check['matrices']} ball cases, the limit at t = {list(p.check['times'])} in mpmath ({p.check['dps']} "
        "digits), Richardson-extrapolated.")


def _power(claim_list, p) -> str:
    """The deciding intervals' half-widths of the non-inferiority claims against their margin (power)."""
    margin, parts = p.claims["noninferiority_margin"], []
    for claim in claim_list:
        if claim.id in ("d", "e_spread") and claim.evidence is not None:
            for ev in (claim.evidence if isinstance(claim.evidence, list) else [claim.evidence]):
                parts.append(f"{ev.name}: half-width {ev.half_width:.3g} over {ev.replicates}")
    return (f"Power of the non-inferiority tests (margin {margin:g}): " + "; ".join(parts) + " (a half-width above "
            "the margin cannot show non-inferiority even at a zero true difference). ") if parts else ""


def _extension_text(ext: Claim | None) -> str:
    """The spread-window robustness check, in words: its computed verdict, evidence, gates and controls."""
    if ext is None:
        return ""
    gates = "; ".join(f"{g.describe()} ({'met' if g.met else 'NOT met'})" for g in ext.premise)
    pos = (f" Positive control ({ext.positive_control.description}): {ext.positive_control.verdict}, "
           f"{describe(ext.positive_control.evidence)}." if ext.positive_control is not None else "")
    return (f"**Robustness check (an extension, not the paper's claim (e) and not counted among the claims).** "
            f"{ext.statement}. Criterion: {ext.criterion}. Computed verdict: **{ext.verdict}**, "
            f"{describe(ext.evidence)}. Gates: {gates}. Negative control ({ext.control.description}): "
            f"{ext.control.verdict}.{pos}" + (f" Note: {ext.note}." if ext.note else "")
            + " The setting is built so that attention has nothing to find (the class's excess power spread evenly "
            "over every window), so this reads whether the layer costs accuracy where it cannot help; it says nothing "
            "about the paper's claim that attention improves accuracy, which stays not measured here. ")


def _planted_tree_text(acc: pd.DataFrame) -> str:
    """What claim (d)'s positive control shows about the heads' training (computed from the table)."""
    sel = acc[acc.task == "tree_horocycle"]
    if sel.empty:
        return ""
    val = {arm: (float(replicates(acc, "tree_horocycle", arm, column="fit_acc").mean()),
                 float(replicates(acc, "tree_horocycle", arm).mean()))
           for arm in ("busemann_mlr", "ganea_mlr", "generating_head")}
    n = int(sel[sel.arm == "busemann_mlr"].replicate.nunique())
    return (f"Claim (d)'s positive control over {n} tree seeds: on labels drawn by a random Busemann head (which, set "
            f"into the implemented head, scores {val['generating_head'][0]:.3f} on the training points and "
            f"{val['generating_head'][1]:.3f} on the test points), the trained Busemann head reaches "
            f"{val['busemann_mlr'][0]:.3f} on its own training points ({val['busemann_mlr'][1]:.3f} test) and "
            f"Ganea's head {val['ganea_mlr'][0]:.3f} ({val['ganea_mlr'][1]:.3f} test): where the Busemann head's "
            "training accuracy stays below what its function class reaches, the gap is one of optimisation (from the "
            "initialisation near the origin, at the shared step count and learning rate), not of geometry. ")


def _budget(benchmarks) -> str:
    t = job_times(benchmarks)
    return (f"Cost of this run: {t['seconds']:.0f} s of summed job time ({t['cpu_seconds']:.0f} s CPU) over "
            f"{t['jobs']} jobs.")


def report(*, cfg, scale, table, checks, gaps, benchmarks, table_md, table_csv, claims, params_json, report_md,
           verdicts, accuracy_figure, gap_figure):
    p = parse(cfg)
    acc, chk, gp = read_parquet(table), read_parquet(checks), read_parquet(gaps)
    md, csv = _table(acc, chk)
    caption = ("Test accuracy, mean +- std over replicates (the mixing model and the digits: seeds, each its own data; "
               "real EEG: subjects; the tree: tree seeds); [permuted_labels]: trained on permuted labels; "
               "[untrained]: the network before training (the null arm of claim d and of the extension); every accuracy at the "
               "best-validation checkpoint, and in the next column at the first half of training's (the stability "
               "gate's); tree_horocycle: claim (d)'s positive control, eeg_spread: the attention extension, "
               "eeg_planted: its positive control; digits: context for claim (b); the late validation "
               "gain is the convergence gate's measure; last rows: claim (a)'s and the checks' smallest and largest errors. table.csv lists "
               "every replicate's value.")
    write_table(md, table_md, table_csv, caption=caption, csv_df=csv)
    _figures(acc, gp, accuracy_figure, gap_figure)
    extension = attention_extension(p, acc)
    claim_list, check_list = symspace_claims(p, acc, chk, extension), symspace_checks(p, chk, acc)
    scope = Scope("analogue", "the paper's closed forms, MLR, FC and attention layers and SPDNet's BiMap/ReEig "
                  "backbone, implemented as in the paper (the authors' released code, nguyenxuanson10/symspaces-ic, "
                  "covers the hyperbolic image classification and was read for the Poincare-ball head's formula); "
                  + ("the user's EEG data sets, " if real_eeg(p) else "an EEG mixing model in place of BCIC-IV-2a, "
                     "MAMEM-SSVEP-II and BCI-NER, ")
                  + "a noisy tree in the Poincare disk in place of the paper's hyperbolic image data, small full-batch "
                  "models. Claim (b) is decided on the EEG task(s) only, because the paper's SPD experiments are EEG "
                  "classification; region covariances of sklearn's digits stand in for none of them and are "
                  "reported as context. Claim (e) (attention improves accuracy) is not measured: no setting here has "
                  "something for attention to find without planting it; a spread-window robustness check is "
                  "reported as an extension.")
    write_claims(claim_list, claims, paper=SLUG, scale=scale, scope=scope, checks=check_list)
    write_json(to_dict(p), params_json)
    differences = (
        "Data: " + ("the user's EEG (one .npz per subject: trials x channels x time, labels, session; MNE is not "
                    "used); " if real_eeg(p) else
                    "a mixing model stands in for the paper's EEG sets (BCIC-IV-2a, MAMEM-SSVEP-II, BCI-NER): sources "
                    "white, not band-limited, the class information is source power, the covariance's content either "
                    "way; the full scale reads real EEG per subject (config symspace.eeg_datasets) and only dry-runs "
                    "here; ")
        + "region covariances of 8x8 digits (context for claim b only), a noisy embedded tree for the hyperbolic task (node "
        "positions, not a network's features). Official code: nguyenxuanson10/symspaces-ic (the hyperbolic image "
        "classification; its PoincareBall.dist2planebm is the Busemann ball head's logit here; nothing copied); none "
        "found for the SPD part. Models: one BiMap/ReEig block, full-batch Adam with one learning rate "
        "and step count for every arm of a task (not tuned per arm), no batch normalisation. The FC layer is used as the "
        "attention's query/key map (distances to learned hyperplanes); the paper's FC layer also maps those distances "
        "back onto the manifold, which is not needed here. The MLR logit is |a_k| times the signed Busemann distance "
        "(h_k = sorted a_k / |a_k|); in that parametrisation the metric's beta term is a linear reparametrisation of "
        "a_k (check 'reparametrisation'), which is why claim (c) is not testable here. "
        + _extension_text(extension) + _planted_tree_text(acc)
        + _power(claim_list + ([extension] if extension is not None else []), p) + "The tree "
        "is moved by an isometry so that its classes are not angular sectors about the origin (a fixed angle rule "
        "solves the unmoved tree); claim (d)'s premise measures the best angle rule. The paper reports single runs or "
        "few seeds on real data; our intervals are over replicates of synthetic data, so magnitudes are not "
        "comparable, only directions. " + _budget(benchmarks))
    write_report(report_md, title=TITLE, scale=scale, what_was_run=_what_was_run(p, acc), table_md=table_md,
                 figures=[accuracy_figure, gap_figure], claims=claim_list, benchmarks=benchmarks,
                 differences=differences, scope=scope, verdicts_figure=verdicts, checks=check_list)
