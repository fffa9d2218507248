"""The orion report stage: one row per model-task pair (test accuracy, request-patching outcome, the window premise),
the claims with their premise gates, negative and positive controls, the checks, the table, the figures and
report.md. Claims (a) and (b) are decided on the tested models; the routed models (papers.orion.model
.routing_masks), in which the decomposition is planted, are their positive control.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from papers.common.claims import MIN_REPLICATES, Check, Claim, Control, Evidence, PositiveControl, Premise, Scope, \
    convention, from_paper, mean_test, proportion_test
from papers.orion import patching, tasks
from papers.orion.params import SLUG, Params, parse

TITLE = "P1 orion: Look Before You Leap: a universal emergent decomposition of retrieval tasks in language models"
SCOPE = Scope("analogue", "the paper analyses 18 pretrained LMs (125M-70B) on its ORION tasks; here tiny causal "
                          "transformers trained from scratch on ORION-style task families stand in for them (pretrained "
                          "LMs join only where orion.pretrained lists local ones, at the full scale); the request-"
                          "patching analysis and its metric are the paper's")
TESTED, CONTROL, PRETRAINED = "tested", "positive control", "pretrained"
PRETRAINED_GROUP = "pretrained LMs"  # the replicate group of the pretrained LMs (replicates: the models)


# ---- one row per model-task pair ---------------------------------------------------------------------
def summarise(acc: pd.DataFrame, sweep: pd.DataFrame, gate: float, floor: float = 0.0, floors=()) -> pd.DataFrame:
    """One row per model-task pair (model, seed, family): test accuracy and whether it passes the gate, the best
    R1(C2) layer and value, the layer profile, the same under the same-request control (patching.CONTROL; its
    profile over patching.CONTROL_HYPOTHESES, judged by the same rules at the same places), the window premise of
    windowed models: `window_tokens`, the most tokens of x2's request (besides the last) that a value window in a block
    after any patched layer still reads, and `key_distance`, how far before the last token the request's identifying
    token sits (shortest over the family's pairs); and where the last token attends (stages.attention_shares):
    `values_b1`, block 1's share on the context's values (the head that puts the most there), and `request_later`,
    the most any later block puts on the request's tokens (NaN where not measured, a pretrained LM). `floor`: the
    least normalised probability with which a hypothesis dominates a layer (patching.layer_profile;
    claims.dominance_min); `floors`: the floors of (b)'s sensitivity table (claims.floor_sensitivity). Each row also
    carries :func:`pair_bootstrap`'s draws (the per-seed intervals) and `b_margin_at`, the margin at each of
    `floors`. `gated`: the pair passes the gate on the test prompts at the analysed checkpoint (with the post-gate
    rule, orion.train.post_gate_steps past the validation gate: the stability premise) and its seed passed the
    validation gate in training (`passed_gate`; a seed taken at the step cap without passing it has no post-gate
    checkpoint and is below the gate whatever its test accuracy); `analysed_step`, the step of the analysed
    checkpoint (`gate_step`, the step at which the seed passed the validation gate, or the cap). A sweep without the
    control's rows (the at-gate sweeps, stages.evaluate_trained) gives NaN control figures and `control_measured`
    False."""
    rows = []
    for (model, seed, family), g in sweep.groupby(["model", "seed", "family"], sort=False):
        a = acc[(acc.model == model) & (acc.seed == seed) & (acc.family == family)].iloc[0]
        req, ctl = g[g.source == "request"], g[g.source == patching.CONTROL]
        measured = not ctl.empty
        profile = patching.layer_profile(req, floor)
        ctl_own = patching.layer_profile(ctl, floor, patching.CONTROL_HYPOTHESES) if measured else []
        ctl_profile = patching.as_hypotheses(ctl_own)
        best = patching.best_layer(req)
        n_layer = int(g.n_layer.iloc[0])
        later = [a.get(f"request_b{b}", float("nan")) for b in range(2, n_layer + 1)]
        ctl_r2c2 = ctl[ctl.hypothesis == "R2(C2)"].set_index("layer").normalized
        rows.append({"model": model, "seed": seed, "family": family, "routed": bool(a.get("routed", False)),
                     "n_layer": n_layer, "width": int(g.width.iloc[0]), "gate_step": int(a.gate_step),
                     "analysed_step": int(a.get("analysed_step", a.gate_step)),
                     "passed_gate": bool(a.get("passed_gate", True)),
                     "accuracy": a.accuracy, "gated": bool(a.accuracy >= gate and a.get("passed_gate", True)),
                     "window_tokens": int(g.window_request_tokens.max()), "key_distance": int(g.key_distance.min()),
                     "r1c2_max": float(req[req.hypothesis == "R1(C2)"].normalized.max()), "r1c2_layer": best,
                     "b_margin": interior_margin(req, n_layer, floor),
                     "b_margin_at": {float(f): interior_margin(req, n_layer, f) for f in floors},
                     "control_measured": measured,
                     "control_b_margin": interior_margin(ctl, n_layer, floor, patching.CONTROL_HYPOTHESES)
                     if measured else float("nan"),
                     "depth": best / n_layer, "profile": " > ".join(profile),
                     # the paper's late stage inside the model: R1(C1) dominant at an interior layer after the
                     # R1(C2) peak (at L = n_layer it holds by construction), reported beside (b), not deciding
                     "late_interior": any(h == patching.HYPOTHESES[-1] for h in profile[best + 1:n_layer]),
                     "interior": patching.is_interior_decomposition(profile),
                     "interior_strict": patching.is_strict_interior_decomposition(profile),
                     "ends_by_construction": profile[0] == patching.HYPOTHESES[0] and profile[-1] == patching.HYPOTHESES[-1],
                     "control_r1c2_max": float(ctl[ctl.hypothesis == "R1(C2)"].normalized.max()) if measured
                     else float("nan"),
                     "control_r2c2_l1": float(ctl_r2c2.get(1, float("nan"))),
                     "control_profile": " > ".join(ctl_own),
                     "control_interior": measured and patching.is_interior_decomposition(ctl_profile),
                     "control_interior_strict": measured and patching.is_strict_interior_decomposition(ctl_profile),
                     "values_b1": float(a.get("values_b1", float("nan"))),
                     "request_later": float(np.nanmax(later)) if later and not np.all(np.isnan(later)) else float("nan"),
                     **pair_bootstrap(g, n_layer, floor, floors)})
    return pd.DataFrame(rows)


def pair_bootstrap(g: pd.DataFrame, n_layer: int, floor: float, floors=(), n_boot: int | None = None,
                   seed: int | None = None) -> dict:
    """One model-task pair's bootstrap over its patching pairs (issue 47's fifth review: a seed whose interval
    straddles its per-seed cut is undetermined, not met): the pairs are resampled with replacement (the same
    resamples, papers.common.claims' BOOTSTRAP_SAMPLES with its fixed seed, for every measure), and each resample
    gives (a)'s max_L p(R1(C2)) / p_clean and (b)'s interior margin (:func:`interior_margin`) at the floor `floor`
    and at each of `floors`, under the request patch and under the control, each a ratio of means over the
    resampled pairs as the measure itself. Returns the draws (arrays, one value per resample): `a_draws`,
    `control_a_draws`, `b_draws`, `control_b_draws` (at `floor`), `b_floor_draws` (floor -> draws); None each where
    the sweep holds no per-pair probabilities (`pair_prob`), and the control's where it holds no control rows."""
    from papers.common.claims import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED

    keys = ("a_draws", "control_a_draws", "b_draws", "control_b_draws", "b_floor_draws")
    if "pair_prob" not in g.columns:
        return dict.fromkeys(keys)
    n_boot = BOOTSTRAP_SAMPLES if n_boot is None else n_boot
    B = len(g.pair_prob.iloc[0])
    rng = np.random.default_rng(BOOTSTRAP_SEED if seed is None else seed)
    counts = rng.multinomial(B, np.full(B, 1.0 / B), size=n_boot).astype(float)  # (n_boot, B): each resample

    def ratios(source, hypotheses):
        part = g[g.source == source]
        out = {}
        for h in hypotheses:
            rows = part[part.hypothesis == h].sort_values("layer")
            prob = np.stack([np.asarray(x, dtype=float) for x in rows.pair_prob])  # (L + 1, B)
            clean = np.asarray(rows.pair_clean.iloc[0], dtype=float)  # (B,), the same at every layer
            out[h] = (counts @ prob.T) / (counts @ clean)[:, None]  # (n_boot, L + 1)
        return out

    def margin(r, hypotheses, at):
        others = np.max([r[h] for h in hypotheses if h != "R1(C2)"], axis=0)
        inner = slice(1, n_layer)  # the interior layers 1 .. n_layer - 1
        if n_layer < 2:
            return np.full(n_boot, np.nan)
        return (r["R1(C2)"][:, inner] - np.maximum(others[:, inner], at)).max(1)

    req = ratios("request", patching.HYPOTHESES)
    ctl = ratios(patching.CONTROL, patching.CONTROL_HYPOTHESES) if (g.source == patching.CONTROL).any() else None
    return {"a_draws": req["R1(C2)"].max(1), "control_a_draws": None if ctl is None else ctl["R1(C2)"].max(1),
            "b_draws": margin(req, patching.HYPOTHESES, floor),
            "control_b_draws": None if ctl is None else margin(ctl, patching.CONTROL_HYPOTHESES, floor),
            "b_floor_draws": {float(f): margin(req, patching.HYPOTHESES, f) for f in floors}}


def interior_margin(sweep: pd.DataFrame, n_layer: int, floor: float, hypotheses: tuple = patching.HYPOTHESES) -> float:
    """Claim (b)'s per-pair measure: over the interior layers L = 1 .. n_layer - 1, the largest
    n_R1(C2)(L) - max(n_other(L), floor), where n_h is hypothesis h's normalised probability (patching
    .request_patching) and the others are `hypotheses` less R1(C2) (R2(C2) and R1(C1); under the control, R2(C2) and
    R2(C3)). Positive where, at some interior layer, the patched output is R1(C2): it beats both other outputs and
    keeps at least `floor` of its clean probability (claims.dominance_min), the middle stage of the paper's
    R2(C2) -> R1(C2) -> R1(C1) (section 3: the request moved, the retrieval not yet done). NaN without an interior
    layer."""
    wide = sweep.pivot(index="layer", columns="hypothesis", values="normalized").sort_index()
    others = [h for h in hypotheses if h != "R1(C2)"]
    interior = wide.loc[(wide.index >= 1) & (wide.index <= n_layer - 1)]
    if interior.empty:
        return float("nan")
    margin = interior["R1(C2)"] - np.maximum(interior[others].max(axis=1), floor)
    return float(margin.max())


def summarise_oversight(over: pd.DataFrame) -> pd.DataFrame:
    """One row per pretrained model: accuracy under injection before and after patching the trusted prompt's
    state at the chosen layer, and after patching the control's (a trusted prompt asking another key)."""
    rows = []
    for model, g in over.groupby("model", sort=False):
        chosen = int(g.chosen_layer.iloc[0])

        def at(condition, role, layer):
            r = g[(g.condition == condition) & (g.trusted == role)].set_index("layer")
            return r.loc[layer]

        rows.append({"model": model, "seed": 0, "n_layer": int(g.n_layer.iloc[0]), "layer": chosen,
                     "before": at("injected", "trusted", -1).accuracy, "after": at("injected", "trusted", chosen).accuracy,
                     "after_other": at("injected", "trusted_other", chosen).accuracy,
                     "follows_before": at("injected", "trusted", -1).follows_injection,
                     "follows_after": at("injected", "trusted", chosen).follows_injection,
                     "clean_before": at("clean", "trusted", -1).accuracy, "clean_after": at("clean", "trusted", chosen).accuracy})
    return pd.DataFrame(rows, columns=["model", "seed", "n_layer", "layer", "before", "after", "after_other",
                                       "follows_before", "follows_after", "clean_before", "clean_after"])


def roles(p: Params, names) -> dict[str, str]:
    """Each model's part in claims (a) and (b): tested (a trained model), positive control (a routed one) or
    pretrained (an LM of orion.pretrained, tested too)."""
    control, pretrained = set(p.control_names), set(p.pretrained_names)
    return {n: CONTROL if n in control else PRETRAINED if n in pretrained else TESTED for n in names}


def per_replicate(p: Params, pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per trained (model, seed) or pretrained model: the claims' continuous measures, each the mean over
    its model-task pairs (one per family): `value_a`, max_L p(R1(C2)) / p_clean (claim (a); the paper's normalised
    metric of a model-task pair, a ratio of means over its patching pairs), `value_b`, the interior margin of R1(C2)
    (claim (b); :func:`interior_margin`), and `control_a`, `control_b`, the same under the same-request patch;
    `gated`, whether every pair of the replicate passed the accuracy gate; and the figures reported beside them (not
    deciding): `share_kept`, the share of its pairs that pass the gate and keep >= keep_fraction (the paper's count of
    pairs, 98 of 106), `share_interior`, the share that pass the gate and show the interior layer profile
    (patching.is_interior_decomposition), and the mean relative depth of the R1(C2) peak over gated pairs. `group`
    names the replicate group: each trained model on its own (replicates: its seeds), the pretrained LMs together
    (replicates: the models, the paper's unit)."""
    c = p.claims
    role = roles(p, pairs.model.unique())
    rows = []
    for (model, seed), g in pairs.groupby(["model", "seed"], sort=False):
        bounds = {}
        for column, draws, point in (("value_a", "a_draws", "r1c2_max"), ("value_b", "b_draws", "b_margin"),
                                     ("control_a", "control_a_draws", "control_r1c2_max"),
                                     ("control_b", "control_b_draws", "control_b_margin")):
            bounds[f"{column}_lo"], bounds[f"{column}_hi"] = _bounds(g, draws, g[point].mean())
        for f in c.floor_sensitivity:
            bounds[f"value_b@{f:g}"] = float(np.mean([m[float(f)] for m in g.b_margin_at])) \
                if "b_margin_at" in g and all(isinstance(m, dict) and float(f) in m for m in g.b_margin_at) else float("nan")
            bounds[f"value_b@{f:g}_lo"], bounds[f"value_b@{f:g}_hi"] = _bounds(
                g, "b_floor_draws", bounds[f"value_b@{f:g}"], key=float(f))
        rows.append({"group": PRETRAINED_GROUP if role[model] == PRETRAINED else model, "role": role[model],
                     "model": model, "seed": seed, "pairs_trained": len(g), "pairs_gated": int(g.gated.sum()),
                     "gated": bool(g.gated.all()), "gate_step": int(g.gate_step.iloc[0]),
                     "value_a": float(g.r1c2_max.mean()), "value_b": float(g.b_margin.mean()),
                     "control_a": float(g.control_r1c2_max.mean()), "control_b": float(g.control_b_margin.mean()),
                     **bounds,
                     "share_kept": float((g.gated & (g.r1c2_max >= c.keep_fraction)).mean()),
                     "share_interior": float((g.gated & g.interior).mean()),
                     "late_interior": bool((g.gated & g.late_interior).all()) if "late_interior" in g else False,
                     "depth": float(g[g.gated].depth.mean()) if g.gated.any() else float("nan")})
    return pd.DataFrame(rows)


def _bounds(g: pd.DataFrame, column: str, point: float, key=None) -> tuple[float, float]:
    """The 95% percentile bootstrap interval of a replicate's measure: its families' draws (:func:`pair_bootstrap`)
    averaged resample by resample, as the measure averages the families; (point, point) where no draws were kept."""
    from papers.common.claims import LEVEL

    if column not in g:
        return float(point), float(point)
    draws = [d.get(key) if isinstance(d, dict) else d for d in g[column]]
    if any(d is None or isinstance(d, dict) for d in draws):
        return float(point), float(point)
    mean = np.mean(np.stack([np.asarray(d, dtype=float) for d in draws]), axis=0)
    a = (1 - LEVEL) / 2
    return float(np.quantile(mean, a)), float(np.quantile(mean, 1 - a))


# ---- the claims ------------------------------------------------------------------------------------
def seed_outcomes(rows: pd.DataFrame, column: str, cut: float, strict: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per replicate of `rows`: whether it meets the per-replicate criterion (>= `cut`, or > `cut` when `strict`)
    with its whole 95% bootstrap interval over patching pairs (`column`_lo, `column`_hi: :func:`per_replicate`), and
    whether it is determined: met, or missed with its whole interval (issue 47's fifth review: a seed whose interval
    straddles the cut is undetermined, neither met nor missed). Without interval columns the point value decides."""
    lo = rows[f"{column}_lo"].to_numpy(dtype=float) if f"{column}_lo" in rows else rows[column].to_numpy(dtype=float)
    hi = rows[f"{column}_hi"].to_numpy(dtype=float) if f"{column}_hi" in rows else rows[column].to_numpy(dtype=float)
    met = lo > cut if strict else lo >= cut
    missed = hi <= cut if strict else hi < cut
    return met, met | missed


def share_evidence(r: pd.DataFrame, column: str, cut: float, share: float, name: str, what: str = "seeds",
                   strict: bool = False) -> list[Evidence]:
    """The share of the determined replicates past the accuracy gate (`r.gated`; :func:`seed_outcomes`) that meet
    the per-replicate criterion, with its exact Clopper-Pearson 95% interval (papers.common.claims.proportion_test),
    against `share` (direction >): holds where the lower bound exceeds it, does not hold where the upper bound is at
    or below it, else inconclusive. Issue 47's fourth review: the per-seed measure is bimodal, so each seed past the
    gate is one binary outcome. Replicates below the gate are left out (they do not do the task; the premise asks for
    enough past it), and so are the undetermined ones (their outcome is within the sampling of the patching pairs);
    the method says how many. The evidence's values are the counted replicates' measures. The paper's own share
    (claims.pairs_fraction_min) is reported beside it, not deciding (issue 47's sixth review: see
    :func:`differences`, "Intervals")."""
    rows = r[r.gated]
    met, determined = seed_outcomes(rows, column, cut, strict)
    counted = rows[determined]
    values = counted[column].to_numpy(dtype=float)
    k, n = int(met.sum()), int(determined.sum())
    crit = f"{column_text(column)} {'>' if strict else '>='} {cut:g}"
    test = proportion_test(k, n, threshold=share, direction=">", name=f"{name} (share > {share:g})",
                           what=f"determined {what} past the accuracy gate with {crit} (95% bootstrap interval over "
                                f"the patching pairs on that side of {cut:g})")
    test.values = tuple(float(v) for v in values) if len(values) else None
    if not n:  # no determined replicate past the gate: the share is unknown, anywhere in [0, 1]
        test.effect, test.interval = float("nan"), (0.0, 1.0)
        test.method = f"no determined {what} past the accuracy gate: the share is unknown"
    notes = []
    if len(rows) > n:
        notes.append(f"{len(rows) - n} of {len(rows)} gated {what} undetermined (bootstrap interval straddles {cut:g})")
    if len(rows) < len(r):
        notes.append(f"{len(r) - len(rows)} of {len(r)} {what} below the accuracy gate left out")
    if notes:
        test.method += " (" + "; ".join(notes) + ")"
    return [test]


def floor_table(p: Params, reps: pd.DataFrame, groups) -> dict:
    """(b) at each floor of claims.floor_sensitivity (a sensitivity table beside the verdict, not a second verdict):
    per group, the determined gated seeds with an interior margin > 0 at that floor, the undetermined ones, and the
    share's exact 95% interval."""
    out = {}
    for f in p.claims.floor_sensitivity:
        column = f"value_b@{f:g}"
        row = {}
        for grp in groups:
            g = reps[(reps.group == grp) & reps.gated]
            met, determined = seed_outcomes(g, column, 0.0, strict=True)
            e = proportion_test(int(met.sum()), int(determined.sum()), threshold=p.claims.seed_share)
            row[grp] = {"met": int(met.sum()), "determined": int(determined.sum()),
                        "undetermined": int((~determined).sum()),
                        "interval": [round(float(x), 3) for x in e.interval] if determined.any() else None}
        out[f"{f:g}"] = row
    return out


def column_text(column: str) -> str:
    """The per-replicate measure's name in words."""
    return {"value_a": "max_L p(R1(C2)) / p_clean", "control_a": "max_L p(R1(C2)) / p_clean under the control",
            "value_b": "the interior margin of R1(C2)", "control_b": "the interior margin under the control"}[column]


def gate_comparison(p: Params, pairs: pd.DataFrame, gate_pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per trained (model, seed): the claims' per-seed measures at the analysed checkpoint (orion.train
    .post_gate_steps past the validation gate; deciding) beside the same at the gate checkpoint (reported, not
    deciding; issue 47's sixth review), from :func:`per_replicate` on each: the steps, test accuracy and whether the
    seed is past the gate at each, (a)'s max_L p(R1(C2)) / p_clean and (b)'s interior margin."""
    post, gate = per_replicate(p, pairs), per_replicate(p, gate_pairs)
    acc_post = pairs.groupby(["model", "seed"]).accuracy.min().rename("accuracy")
    acc_gate = gate_pairs.groupby(["model", "seed"]).accuracy.min().rename("accuracy_gate")
    post = post.join(acc_post, on=["model", "seed"])
    gate = gate.join(acc_gate, on=["model", "seed"])
    analysed = pairs.groupby(["model", "seed"]).analysed_step.first().rename("analysed_step")
    post = post.join(analysed, on=["model", "seed"])
    both = post[["model", "role", "seed", "gate_step", "analysed_step", "accuracy", "gated", "value_a", "value_b"]].merge(
        gate[["model", "seed", "accuracy_gate", "gated", "value_a", "value_b"]], on=["model", "seed"],
        suffixes=("", "_gate"), how="left")
    return both[["model", "role", "seed", "gate_step", "analysed_step", "accuracy_gate", "accuracy", "gated_gate",
                 "gated", "value_a_gate", "value_a", "value_b_gate", "value_b"]]


def build_claims(p: Params, pairs: pd.DataFrame, over: pd.DataFrame, shortcut: dict | None = None,
                 gate_pairs: pd.DataFrame | None = None) -> list[Claim]:
    """The three claims. (a) and (b) are decided per replicate group of tested models (every tested trained model,
    and the pretrained LMs together; every group must hold) on a binary outcome per replicate past the accuracy gate
    (per_replicate: `value_a` >= keep_fraction, the paper's criterion of a model-task pair; `value_b` > 0), by the
    exact Clopper-Pearson 95% interval of the share of replicates meeting it against claims.seed_share
    (:func:`share_evidence`). Their premise: at least MIN_REPLICATES tested replicates per group pass the accuracy
    gate on the test prompts; the task cannot be solved without binding a value to its attribute (`shortcut`: per family,
    tasks.shortcut_accuracy on the test prompts; the best over the families must be at most
    claims.shortcut_accuracy_max; None: not measured, the gate unmet); and, for tested models with a value window
    only, no value window reads around the last-token patch. Their negative control (null) is the same measure and
    criterion on the same-request patch (patching.CONTROL); their positive control is the same measure and criterion
    on the routed models' seeds past the gate, where the decomposition is planted. (c) needs a model not trained to
    obey the injected note: a pretrained LM. `pairs` are the analysed checkpoints (orion.train.post_gate_steps past
    the gate); `gate_pairs`, the same seeds at their gate, are reported in each claim's measured figures (`at_gate`),
    not deciding."""
    c = p.claims
    reps = per_replicate(p, pairs)
    cmp = gate_comparison(p, pairs, gate_pairs) if gate_pairs is not None and len(gate_pairs) else None

    def at_gate(column):
        """The seeds' figures at the gate (reported, not deciding) beside the analysed ones, per trained model."""
        if cmp is None:
            return {}
        out = {}
        for model, g in cmp.groupby("model", sort=False):
            out[model] = {"gate_step": [int(x) for x in g.gate_step], "analysed_step": [int(x) for x in g.analysed_step],
                          "past_gate_at_gate": [bool(x) for x in g.gated_gate], "past_gate_analysed": [bool(x) for x in g.gated],
                          "at_gate": [round(float(x), 3) for x in g[f"{column}_gate"]],
                          "analysed": [round(float(x), 3) for x in g[column]]}
        return {"at_gate_reported_not_deciding": out}
    role = roles(p, pairs.model.unique())
    tested = pairs[pairs.model.map(role) != CONTROL]
    control_pairs = pairs[pairs.model.map(role) == CONTROL]
    tested_groups = list(dict.fromkeys(reps[reps.role != CONTROL].group))
    # Where pretrained LMs are listed (the paper's setting, config/full.yaml), they decide (a) and (b) together; the
    # tiny trained models are then reported beside, not deciding, so that they cannot veto the paper's setting
    # (issue 47's sixth review). Without pretrained LMs every tested trained model decides, as before.
    deciding = [PRETRAINED_GROUP] if PRETRAINED_GROUP in tested_groups else tested_groups
    control_groups = list(dict.fromkeys(reps[reps.role == CONTROL].group))

    def evidence(groups, column, cut, label, strict=False):
        return [part for grp in groups
                for part in share_evidence(reps[reps.group == grp], column, cut, c.seed_share, f"{grp}: {label}",
                                           "pretrained models" if grp == "pretrained LMs" else "seeds", strict)]

    def per_seed(column, groups):
        return {grp: [round(v, 3) for v in reps[reps.group == grp][column]] for grp in groups}

    def per_seed_interval(column, groups):
        return {grp: [[round(float(lo), 3), round(float(hi), 3)] for lo, hi in
                      zip(reps[reps.group == grp][f"{column}_lo"], reps[reps.group == grp][f"{column}_hi"])]
                for grp in groups}

    def undetermined(column, cut, strict, groups):
        out = {}
        for grp in groups:
            rows = reps[(reps.group == grp) & reps.gated]
            _, determined = seed_outcomes(rows, column, cut, strict)
            out[grp] = int((~determined).sum())
        return out

    described = f"{len(tested)} tested pairs ({', '.join(tested_groups)} x {', '.join(dict.fromkeys(tested.family))})"
    distance = int(tested.key_distance.min())
    shortcut = shortcut or {}
    best_family = max(shortcut, key=lambda f: shortcut[f]["best"]) if shortcut else None
    tested_reps = reps[reps.role != CONTROL]
    gated_per_group = {grp: int(tested_reps[tested_reps.group == grp].gated.sum()) for grp in deciding}
    gated_text = ", ".join(f"{g}: {n} of {int((tested_reps.group == g).sum())}" for g, n in gated_per_group.items())
    premise = [
        Premise.at_least(f"tested replicates past the accuracy gate (test accuracy >= {c.gate_accuracy} on every "
                         f"family of the {described}), fewest over the groups ({gated_text})",
                         min(gated_per_group.values()) if gated_per_group else 0, MIN_REPLICATES,
                         what="the binary outcomes are read on replicates that do the task they are analysed on"),
        Premise.at_most(
            "test accuracy of the best rule that answers without binding a value to its attribute in the context"
            + (f" ({best_family}: answer-by-type {shortcut[best_family]['type_rule']:.3f}, always-one-attribute "
               f"{shortcut[best_family]['fixed_key_rule']:.3f}; highest over the families "
               f"{', '.join(shortcut)})" if best_family else " (not measured)"),
            shortcut[best_family]["best"] if best_family else float("nan"), c.shortcut_accuracy_max,
            what="the task premise: the answer cannot be chosen without reading which attribute the request asks "
                 "and finding the value the context binds to it"),
    ]
    windowed = [n for n in p.tested_names if p.model(n).kv_window > 1]
    if windowed:  # plain attention has no value window: the gate would be 0 by construction, so it is left out
        premise.append(Premise.at_most(
            f"request tokens the last token still reads through a value window after the patched layer, most over the "
            f"{described}", tested.window_tokens.max(), 0,
            what=f"no value window around the last-token patch (the identifying token sits {distance} positions "
                 f"before the last token)"))
    control_text = ("the same-request patch: the last-token state of x3 = (C3, R2), x2's own request on another "
                    "context, written into x2's last token at the same layer, on the same models, seeds and pairs, "
                    "read by the same measure and criterion; it never presents R1, so R1(C2) must not appear and the "
                    "criterion must not hold (where the patched state carries the request only, the output stays "
                    "R2(C2), read from the unpatched context)")
    routed = ", ".join(f"{n} ({p.seeds} seeds)" for n in p.control_names)
    positive_text = (f"the same per-seed outcome and share criterion on the routed models {routed}, over their "
                     f"seeds past the accuracy gate: in block 1 a request's tokens attend to their own request alone, in the blocks "
                     f"after it to the context and not to their request, so the request reaches the answer only "
                     f"through the last token's state after block 1, which holds nothing of the context (the "
                     f"decomposition planted by construction); gated and patched like the tested models (trained with "
                     f"its own recipe, under What was run), the criterion must hold")
    below = pairs[~pairs.gated]
    below_text = {"pairs_below_gate": [f"{r.model}/{r.family} seed {r.seed} ({r.accuracy:.2f})" for r in below.itertuples()]}
    seeds_kept = {grp: int((reps[reps.group == grp].value_a >= c.keep_fraction).sum()) for grp in tested_groups}
    gated_kept = {grp: int((g.gated & (g.value_a >= c.keep_fraction)).sum())
                  for grp, g in ((grp, tested_reps[tested_reps.group == grp]) for grp in tested_groups)}
    gated_interior = {grp: int((g.gated & (g.value_b > 0)).sum())
                      for grp, g in ((grp, tested_reps[tested_reps.group == grp]) for grp in tested_groups)}
    who = ("for the pretrained LMs together (replicates: the models; where orion.pretrained lists any, the paper's "
           "setting decides and the tiny trained models are reported beside, not deciding)"
           if deciding == [PRETRAINED_GROUP] else
           "for every tested model (replicates: its seeds) and the pretrained LMs together (replicates: the models)")
    post_text = (_post_gate_text(p) + "; ") if any(p.train_for(n).post_gate_steps for n in p.model_names) else ""
    share_text = (f"{post_text}a replicate counts as meeting it when its whole 95% percentile bootstrap interval over its "
                  f"{p.patch_pairs} patching pairs lies on the criterion's side of the cut, as missing it when the whole "
                  f"interval lies on the other side, and as undetermined (left out, counted in the method) otherwise; "
                  f"the claim holds where the exact Clopper-Pearson 95% interval of the share of the determined "
                  f"replicates past the accuracy gate (test accuracy >= {c.gate_accuracy}) that meet it lies above "
                  f"seed_share = {c.seed_share} (a majority), does not hold where it lies at or below it, and is "
                  f"inconclusive otherwise; the paper's share, {c.pairs_fraction_min} (98 of 106 model-task pairs, "
                  f"abstract), is reported beside it, not deciding; at least {MIN_REPLICATES} replicates "
                  f"per group past the gate (a premise)")

    a = Claim(
        "a", f"Request-patching keeps >= {c.keep_fraction:.0%} of the correct token's clean probability at some "
             f"layer (the paper's normalised metric of a model-task pair, max over layers) in a share of the seeds "
             f"(model-task pairs) of every tested model that learn the task that is above {c.seed_share:.0%} (the paper: "
             f"{c.pairs_fraction_min:.0%}, 98 of 106 pairs).",
        "98 of 106 model-task pairs keep >= 70%, models of 125M-70B (abstract)",
        {"per_seed": per_seed("value_a", tested_groups), "control_per_seed": per_seed("control_a", tested_groups),
         "positive_control_per_seed": per_seed("value_a", control_groups),
         # the paper's figure, reported beside the criterion (not deciding): model-task pairs (seeds) that keep 70%
         "pairs_kept": int((tested.gated & (tested.r1c2_max >= c.keep_fraction)).sum()), "pairs_tested": len(tested),
         "seeds_at_or_above_keep_fraction": seeds_kept,
         "gated_seeds_at_or_above_keep_fraction": gated_kept,
         "gated_seeds": gated_per_group, "deciding_groups": deciding,
         "paper_share_of_pairs": c.pairs_fraction_min,
         "per_seed_interval": per_seed_interval("value_a", tested_groups + control_groups),
         "undetermined_gated_seeds": undetermined("value_a", c.keep_fraction, False, tested_groups + control_groups),
         # where the last token attends (stages.attention_shares): block 1 on the context's values, per pair
         "block1_attention_on_values": {f"{r.model}/{r.family} seed {r.seed}": round(float(r.values_b1), 3)
                                        for r in pairs.itertuples() if r.values_b1 == r.values_b1},
         **below_text, **at_gate("value_a")},
        f"{who}, a replicate meets the paper's criterion of a model-task pair when max over layers L of p(R1(C2)) / p_clean "
        f"(the ratio of the mean patched to the mean clean probability over its {p.patch_pairs} patching pairs, the "
        f"paper's normalised metric; with several families, their mean) is >= keep_fraction = {c.keep_fraction}; "
        f"{share_text}. Seeds that put most of block 1's attention on the context's values (the value-first route) "
        f"count as seeds, not as an unmet premise (decided before the run: the route is the mechanism the claim is "
        f"about, so gating on it would select on the outcome; values_b1 is reported beside, per seed)",
        evidence(deciding, "value_a", c.keep_fraction, "seeds with max_L p(R1(C2)) / p_clean >= keep_fraction"),
        Control(control_text, evidence(deciding, "control_a", c.keep_fraction,
                                       "control: seeds with max_L p(R1(C2)) / p_clean >= keep_fraction"), kind="null"),
        threshold_source=convention(f"seed_share {c.seed_share}, a majority of the seeds (ours, a convention: the "
                                    f"weakest reading of the paper's universal decomposition that {p.seeds} seeds can "
                                    f"clear; the paper's 98 of the 106 studied model-task pairs (abstract) = "
                                    f"{c.pairs_fraction_min} is reported beside it, not deciding); the per-seed "
                                    f"criterion is the paper's 70% of the correct token's probability kept "
                                    f"(keep_fraction {c.keep_fraction}, abstract and section 3)"),
        premise=premise,
        positive_control=PositiveControl(positive_text, evidence(control_groups, "value_a", c.keep_fraction,
                                                                 "positive control: seeds with max_L p(R1(C2)) / "
                                                                 "p_clean >= keep_fraction")))

    corollary = b_as_corollary(c, tested_reps[tested_reps.gated & tested_reps.group.isin(deciding)],
                               reps[(reps.role == CONTROL) & reps.gated])
    b = Claim(
        "b", f"At some interior layer (1 .. n_layer - 1) request-patching's output is R1(C2), x1's request applied "
             f"to x2's context: its normalised probability exceeds both R2(C2)'s and R1(C1)'s and keeps >= "
             f"{c.dominance_min:.0%} of its clean probability (the middle of the paper's early R2(C2), middle R1(C2), "
             f"late R1(C1)), in a share of the seeds (model-task pairs) of every tested model that learn the task "
             f"that is above {c.seed_share:.0%}.",
        "early layers R2(C2), middle layers R1(C2), late layers R1(C1) (the paper's layer plots, section 3; no share "
        "given)",
        {"per_seed": per_seed("value_b", tested_groups), "control_per_seed": per_seed("control_b", tested_groups),
         "positive_control_per_seed": per_seed("value_b", control_groups),
         # the layer profile, reported beside the criterion (not deciding): pairs whose dominant outputs follow the
         # order on the interior layers (patching.is_interior_decomposition)
         "pairs_with_interior_profile": int((tested.gated & tested.interior).sum()), "pairs_tested": len(tested),
         "gated_seeds_with_positive_margin": gated_interior, "gated_seeds": gated_per_group,
         "positive_control_pairs_with_interior_profile": int((control_pairs.gated & control_pairs.interior).sum()),
         "n_layer": sorted(int(x) for x in set(pairs.n_layer)),
         "per_seed_interval": per_seed_interval("value_b", tested_groups + control_groups),
         "undetermined_gated_seeds": undetermined("value_b", 0.0, True, tested_groups + control_groups),
         # (b) at other floors (claims.floor_sensitivity): a sensitivity table beside the verdict, not deciding
         "by_floor": floor_table(p, reps, tested_groups + control_groups), **below_text, **at_gate("value_b"),
         **corollary["measured"]},
        f"{who}, a replicate meets the criterion when its interior margin, max over L in 1 .. n_layer - 1 of n_R1(C2)(L) - "
        f"max(n_R2(C2)(L), n_R1(C1)(L), dominance_min = {c.dominance_min}) (n_h: hypothesis h's normalised "
        f"probability, as in (a); with several families, their mean), is above 0; {share_text}. The paper gives no "
        f"share for the layer profile. The count at the floors {', '.join(f'{f:g}' for f in c.floor_sensitivity)} is reported "
        f"beside it, not deciding. Layers 0 and n_layer are left out: R2(C2) there and "
        f"R1(C1) at the last layer hold by construction (a check below). The share of pairs whose dominant outputs "
        f"follow the order R2(C2) -> R1(C2) -> R1(C1) on the interior layers is reported beside it, not deciding",
        evidence(deciding, "value_b", 0.0, "seeds with an interior margin of R1(C2) > 0", strict=True),
        Control(control_text + "; under it the margin's other outputs are R2(C2) and R2(C3), x3's own answer",
                evidence(deciding, "control_b", 0.0, "control: seeds with an interior margin > 0", strict=True),
                kind="null"),
        threshold_source=convention(f"seed_share {c.seed_share}, a majority of the seeds (ours, as (a)); the paper's "
                                    f"98 of the 106 studied model-task pairs (abstract) = {c.pairs_fraction_min} is "
                                    f"reported beside it, not deciding; per seed 0, a "
                                    f"sign: R1(C2) is the dominant output at an interior layer; the floor "
                                    f"dominance_min {c.dominance_min} ('most of its clean probability') is ours; the "
                                    f"paper shows the layer profile in plots and gives no number for it"),
        premise=premise + ([corollary["premise"]] if corollary.get("premise") else []), note=corollary["note"],
        positive_control=PositiveControl(positive_text, evidence(control_groups, "value_b", 0.0,
                                                                 "positive control: seeds with an interior margin > 0",
                                                                 strict=True)))
    return [a, b, _claim_c(p, over)]


def b_as_corollary(c, gated: pd.DataFrame, control: pd.DataFrame | None = None, tolerance: float = 0.01) -> dict:
    """How much claim (b) adds to claim (a) on the deciding replicates past the gate (issue 47's seventh review):
    where R2(C2) and R1(C1) both stay below dominance_min at R1(C2)'s peak and the peak is interior, (b)'s margin is
    (a)'s ratio minus dominance_min, so (b)'s per-seed criterion is (a)'s with the looser cut dominance_min, not a
    second piece of evidence. Returns the largest |value_b - (value_a - dominance_min)| and the seeds whose profile
    shows the paper's late stage inside the model (R1(C1) dominant at an interior layer after the R1(C2) peak;
    summarise's `late_interior`), as figures reported beside (b) and a sentence saying what they mean, when the gap is
    within `tolerance` in every seed; and (b)'s premise that the analogue can tell it from (a) (issue 47's eighth
    review: a corollary counted as a second "holds"): the largest gap above `tolerance` (a convention: a hundredth
    of the normalised probability). Where it is not, the setting lacks what (b) presupposes, room for the paper's
    late stage inside the model after the layer where the request is processed, so (b) reads inconclusive: it
    restates (a) with a looser cut and is no evidence of its own. The same gap and late-stage count on the routed
    positive control's seeds past the gate (`control`) are reported beside (issue 47's ninth review): on a clean
    decomposition the gap is 0 by the margin's form, the planted one included, so where the control's gap is within
    `tolerance` too the note says that more seeds cannot meet this premise at this depth."""
    if gated.empty:
        return {"measured": {}, "note": "", "premise": None}

    def largest_gap(reps: pd.DataFrame) -> float:
        return float((reps.value_b - (reps.value_a - c.dominance_min)).abs().max())

    def late_count(reps: pd.DataFrame) -> int:
        return int(reps.late_interior.sum()) if "late_interior" in reps else 0

    gap, late = largest_gap(gated), late_count(gated)
    measured = {"largest_gap_b_margin_vs_a_ratio_minus_floor": round(gap, 4),
                "gated_seeds_with_interior_late_retrieval": late}
    planted = ""
    if control is not None and not control.empty:
        control_gap, control_late = largest_gap(control), late_count(control)
        measured |= {"positive_control_largest_gap": round(control_gap, 4),
                     "positive_control_seeds_with_interior_late_retrieval": control_late}
        if control_gap <= tolerance:
            planted = (f". The premise is unmet on the routed positive control too (largest difference "
                       f"{control_gap:.4f} over its {len(control)} seeds past the gate), although its late stage lies "
                       f"inside the model in {control_late} of them: on any clean decomposition (b)'s margin is (a)'s "
                       f"ratio minus the floor, so no number of seeds meets this premise; what would decide (b) beyond "
                       f"(a) is the late stage inside the model, which needs tested models whose retrieval ends before "
                       f"their last block (deeper models, or the pretrained LMs of the full scale)")
    premise = Premise(
        "the analogue can tell (b) from (a): some deciding seed past the gate has an interior margin that is not its "
        f"(a) ratio minus dominance_min = {c.dominance_min} (largest difference over those seeds), so that (b) tests "
        "the layer profile and not (a) with a looser cut", round(gap, 4),
        f"> {tolerance:g} (a convention: a hundredth of the normalised probability)", gap > tolerance)
    if gap > tolerance:
        return {"measured": measured, "note": "", "premise": premise}
    note = (f"a corollary of (a) in this run, not a second piece of evidence: in each of the {len(gated)} "
            f"deciding seeds past the gate, (b)'s margin equals (a)'s ratio minus dominance_min = {c.dominance_min} "
            f"(largest difference {gap:.4f}), because R2(C2) and R1(C1) both stay below that floor at R1(C2)'s "
            f"interior peak; so a seed meets (b) exactly when its (a) ratio exceeds {c.dominance_min}, a looser cut "
            f"than (a)'s {c.keep_fraction}. The paper's late stage inside the model, R1(C1) dominant at an interior "
            f"layer after the R1(C2) peak, shows in {late} of {len(gated)} of those seeds (reported, not deciding; at "
            f"the last layer it holds by construction){planted}")
    return {"measured": measured, "note": note, "premise": premise}


def _post_gate_text(p: Params) -> str:
    """The post-gate rule in words (orion.train.post_gate_steps, per trained model)."""
    steps = ", ".join(f"{n} {p.train_for(n).post_gate_steps}" for n in p.model_names)
    return (f"each trained seed is analysed a fixed number of training steps after the step at which it passed the "
            f"validation gate ({steps}; orion.train.post_gate_steps, issue 47's sixth review, fixed before the run, on "
            f"the fresh seeds {p.seed_offset} .. {p.seed_offset + p.seeds - 1}) and must still pass the accuracy gate on "
            f"the test prompts there (the stability premise); a seed that never passed the validation gate by the step "
            f"cap counts as below the gate; the same seeds' figures at the gate are reported beside, not deciding")


def _claim_c(p: Params, over: pd.DataFrame) -> Claim:
    c = p.claims
    statement = (f"Patching the middle-layer last-token state of one trusted prompt raises accuracy under prompt "
                 f"injection by at least {c.injection_gain_min}, in a model not trained to obey the injected note.")
    paper = "15.5% -> 97.5% on Pythia-12b (abstract), a gain of 0.82"
    criterion = (f"for the pretrained LMs together (replicates: the models), the 95% t interval of the mean accuracy "
                 f"gain after - before on the injected stories (the trusted prompt's state patched at the story's best "
                 f"request-patching layer) lies above injection_gain_min = {c.injection_gain_min}")
    control = ("the same gain when the patched state comes from a trusted story that asks another attribute (it "
               "carries a request, but not the right one): it must not restore the asked attribute")
    source = convention(f"injection_gain_min {c.injection_gain_min}: half of the accuracy range regained, ours; the "
                        f"paper's gain is 0.82")
    no_positive = ("the oversight patch is the paper's intervention itself, read off the output's accuracy (no hidden "
                   "analysis that could be blind); its control is the other-attribute patch")
    if over.empty:
        return Claim.not_measured(
            "c", statement, paper, criterion,
            "not measured: it needs a model that was not trained on injected notes and follows them anyway, as a "
            "pretrained LM does (instruction-like text in its training data); our tiny models never saw a note, and "
            "no pretrained LM is given at this scale (orion.pretrained is empty; the full scale analyses any local "
            "Hugging Face model listed there)", control, threshold_source=source, no_positive_control=no_positive,
            paper_effect=0.82)
    premise = [Premise.at_least("test accuracy on the clean stories, least accurate pretrained LM", over.clean_before.min(),
                                c.gate_accuracy, what="the accuracy gate: the model answers the story's question"),
               Premise.at_least("accuracy lost to the injected note (clean - injected), least affected pretrained LM",
                                (over.clean_before - over.before).min(), c.injection_gain_min,
                                what="the injection must cost at least the gain the claim asks to restore")]
    return Claim(
        "c", statement, paper,
        {"models": len(over), "accuracy_before": over.before.tolist(), "accuracy_after": over.after.tolist(),
         "accuracy_after_control": over.after_other.tolist(), "layers": over.layer.tolist()},
        criterion,
        mean_test(over.after - over.before, threshold=c.injection_gain_min, direction=">", what="pretrained models",
                  name="pretrained LMs: accuracy after - before"),
        Control(control, mean_test(over.after_other - over.before, threshold=c.injection_gain_min, direction=">",
                                   what="pretrained models", name="control gain"), kind="null"),
        threshold_source=source, premise=premise, no_positive_control=no_positive, paper_effect=0.82)


def build_checks(pairs: pd.DataFrame, val: pd.DataFrame, test: pd.DataFrame, styles: dict) -> list[Check]:
    """What holds by construction or by the data's design: not claims. `styles`: per family, its training,
    validation and test styles (stages.read_vocab)."""
    from papers.orion.tasks import style_label
    shared = sum(len(set(g["style"]) & ({style_label(s) for s in styles[f]["train"]} | set(test.loc[test.family == f, "style"])))
                 for f, g in val.groupby("family"))
    return [
        Check.at_least("profile_ends", "R2(C2) dominates at L = 0 and R1(C1) at L = n_layer in every pair, past the "
                       "gate or not (at L = 0 the patch is the embedding of the last token, the same token in x1 and x2; "
                       "at L = n_layer it is the state that sets the output), so claim (b) reads the interior layers only",
                       float(pairs.ends_by_construction.mean()) if len(pairs) else float("nan"), 1.0,
                       what="share of pairs"),
        Check.at_most("validation_disjoint", "validation prompts (the early-stopping gate) that are also test prompts "
                      "(the accuracy premise)", float(len(set(val.prompt) & set(test.prompt))), 0,
                      what="the gate never reads a test prompt"),
        Check.at_most("validation_styles_apart", "styles (context wordings) of the validation prompts that are also "
                      "training styles or styles of a test prompt (the validation styles are held out from both)",
                      float(shared), 0, what="the gate reads no training or test style"),
    ]


def size_table(p: Params, pairs: pd.DataFrame) -> pd.DataFrame:
    """Per replicate group: its role, the seeds' gate steps, the claims' deciding shares (the replicates past the
    gate that meet each per-seed criterion, with their exact 95% interval, :func:`share_evidence`), and the mean [95%
    t interval] over replicates of the per-seed measures (and the control's), the reported shares and the relative
    depth of the R1(C2) peak (reported beside, not deciding)."""
    from papers.common.claims import t_interval

    c = p.claims

    reps = per_replicate(p, pairs)
    rows = []
    for grp, g in reps.groupby("group", sort=False):
        first = pairs[pairs.model == g.model.iloc[0]].iloc[0]
        row = {"model": grp, "role": g.role.iloc[0], "layers": int(first.n_layer), "width": int(first.width),
               "replicates": len(g), "gate steps": ", ".join(str(s) for s in g.gate_step),
               "pairs gated": f"{g.pairs_gated.sum()} of {g.pairs_trained.sum()}"}
        for column, cut, strict, label in (("value_a", c.keep_fraction, False, "(a) gated seeds meeting it"),
                                           ("value_b", 0.0, True, "(b) gated seeds meeting it")):
            e = share_evidence(g, column, cut, c.seed_share, label, strict=strict)[0]
            _, determined = seed_outcomes(g[g.gated], column, cut, strict)
            row[label] = (f"{round(e.effect * e.replicates)} of {e.replicates} [{e.interval[0]:.2f}, "
                          f"{e.interval[1]:.2f}], {int((~determined).sum())} undetermined" if e.replicates
                          else "none determined past the gate")
        for f in c.floor_sensitivity:
            met, determined = seed_outcomes(g[g.gated], f"value_b@{f:g}", 0.0, strict=True)
            e = proportion_test(int(met.sum()), int(determined.sum()), threshold=c.seed_share)
            row[f"(b) at floor {f:g}"] = (f"{int(met.sum())} of {int(determined.sum())} [{e.interval[0]:.2f}, "
                                          f"{e.interval[1]:.2f}], {int((~determined).sum())} undetermined"
                                          if determined.any() else "none determined")
        for column, label in (("value_a", "(a) max_L p(R1(C2)) / p_clean"), ("control_a", "(a) control"),
                              ("value_b", "(b) interior margin"), ("control_b", "(b) control"),
                              ("share_kept", "(a) share of pairs >= keep_fraction"),
                              ("share_interior", "(b) share of pairs with the interior profile"),
                              ("depth", "R1(C2) peak depth L / n_layer")):
            x = g[column].dropna().to_numpy()
            if len(x) >= 2:
                m, lo, hi = t_interval(x)
                row[label] = f"{m:.2f} [{lo:.2f}, {hi:.2f}]"
            else:
                row[label] = f"{x[0]:.2f}" if len(x) else "n/a"
        rows.append(row)
    return pd.DataFrame(rows)


# ---- the stage -------------------------------------------------------------------------------------
def report(*, cfg, scale, metrics, sweeps, oversights, histories, vocab, val, test, benchmarks, table_md, table_csv, claims,
           params_json, report_md, verdicts, fig_layers, fig_training, fig_oversight=None, gate_metrics=(),
           gate_sweeps=()):
    """The results table (per model, then per model-task pair; oversight per pretrained model), the figures, the
    claims with computed verdicts, the checks and the report section."""
    from papers.common.claims import write_claims
    from papers.common.io import read_parquet, read_parquets, write_json
    from papers.common.params import to_dict
    from papers.common.report import write_report
    from papers.common.tables import to_markdown, write_table
    from papers.orion import figures

    p = parse(cfg)
    acc, sweep, hist = (read_parquets(x) for x in (metrics, sweeps, histories))
    # stages.train writes a seed's position in its model's stack (0 .. seeds - 1) as the history's `seed`; the seed
    # itself, the one the checkpoints and the tables name, is orion.seed_offset + that position (review orion_r7).
    hist = hist.assign(seed=hist.seed + p.seed_offset)
    over = read_parquets(oversights) if oversights else pd.DataFrame()
    pairs = summarise(acc, sweep, p.claims.gate_accuracy, p.claims.dominance_min, p.claims.floor_sensitivity)
    gate_pairs = summarise(read_parquets(gate_metrics), read_parquets(gate_sweeps), p.claims.gate_accuracy,
                           p.claims.dominance_min, p.claims.floor_sensitivity) if gate_metrics else None
    oversight = summarise_oversight(over) if len(over) else summarise_oversight(
        pd.DataFrame(columns=["model", "chosen_layer", "n_layer", "condition", "trusted", "layer"]))

    role = roles(p, pairs.model.unique())
    yes_no = {True: "yes", False: "no"}
    md = pairs.assign(role=pairs.model.map(role), gated=pairs.gated.map({True: "yes", False: "below"}),
                      interior=pairs.interior.map(yes_no), control_interior=pairs.control_interior.map(yes_no))
    md = md[["model", "role", "seed", "family", "gate_step", "analysed_step", "accuracy", "gated", "values_b1", "request_later",
             "r1c2_max", "r1c2_layer", "profile", "interior", "control_r1c2_max", "control_profile", "control_interior"]]
    md = md.rename(columns={"gate_step": "gate step", "analysed_step": "analysed at step", "accuracy": "test accuracy", "gated": f"gate (>= {p.claims.gate_accuracy})",
                            "values_b1": "block 1: attention on the context's values",
                            "request_later": "blocks 2..: attention on the request",
                            "r1c2_max": "max_L p(R1(C2)) / p_clean", "r1c2_layer": "at layer L",
                            "profile": "dominant output, L = 0 ..", "interior": "interior profile (b)",
                            "control_r1c2_max": "control: max_L p(R1(C2)) / p_clean",
                            "control_profile": "control: dominant output, L = 0 ..",
                            "control_interior": "control: interior profile"})
    long = pairs.melt(id_vars=["model", "seed", "family"],
                      value_vars=["gate_step", "analysed_step", "accuracy", "window_tokens", "values_b1", "request_later", "r1c2_max",
                                  "r1c2_layer", "control_r1c2_max", "control_r2c2_l1"],
                      var_name="quantity")
    if len(oversight):
        long = pd.concat([long, oversight.assign(family="story (injected)").melt(
            id_vars=["model", "seed", "family"], value_vars=["layer", "before", "after", "after_other"],
            var_name="quantity")], ignore_index=True)
    caption = (f"Request-patching on held-out prompts ({p.patch_pairs} pairs per family and layer), every model-task "
               f"pair: the step at which the seed passed the validation gate (every family at the gate at "
               f"{p.train.gate_records} consecutive records; or the model's step cap) and the step of the analysed "
               f"checkpoint (orion.train.post_gate_steps past the gate), test accuracy there, where the last token attends on the test prompts (block 1's "
               f"attention on the context's values and the most any later block puts on the request's tokens, each for "
               f"the head that puts the most there), the largest normalised probability of R1(C2) over the patched "
               f"layers L (the paper's Fig. 3; paper: >= 0.7 for 98 of 106 pairs) and its layer, the dominant "
               f"hypothesis at each layer, and the same under the same-request control (its source x3 = (C3, R2); "
               f"R2(C3) is the source's own answer). Role: tested (decides the claims) or positive control (the routed "
               f"model).")
    write_table(md, table_md, table_csv, caption=caption, csv_df=long)
    with open(table_md, "a") as f:
        f.write(f"\nPer model: the claims' deciding counts, the seeds past the accuracy gate that meet (a)'s per-seed "
                f"criterion (max_L p(R1(C2)) / p_clean >= {p.claims.keep_fraction}) and (b)'s (interior margin of "
                f"R1(C2) > 0) with their whole 95% bootstrap interval over the {p.patch_pairs} patching pairs, over the "
                f"determined seeds (the undetermined, whose interval straddles the cut, are counted apart), with the "
                f"exact 95% interval of the share (a claim holds where its lower bound is above seed_share = "
                f"{p.claims.seed_share}, does not hold where its upper bound is at or below it; the paper's share, "
                f"{p.claims.pairs_fraction_min}, is not deciding); (b) at the floors "
                f"{', '.join(f'{f:g}' for f in p.claims.floor_sensitivity)} (sensitivity, not deciding); then, "
                f"reported beside them, the mean [95% t interval] over every replicate, "
                f"past the gate or not, of the per-seed measures under the request patch and the same-request "
                f"control, and the shares of pairs, in which a pair below the gate counts as a failure:\n\n")
        f.write(to_markdown(size_table(p, pairs)))
        if gate_pairs is not None and len(gate_pairs):
            f.write(f"\n\nPer trained seed, at its gate and at the analysed checkpoint (the claims decide on the "
                    f"analysed one; the at-gate figures are reported, not deciding; issue 47's sixth review): the step "
                    f"at which it passed the validation gate and the analysed step, the lowest test accuracy over the "
                    f"families and whether it is past the accuracy gate ({p.claims.gate_accuracy}) at each, (a)'s "
                    f"max_L p(R1(C2)) / p_clean and (b)'s interior margin at each:\n\n")
            f.write(to_markdown(gate_comparison(p, pairs, gate_pairs).rename(columns={
                "gate_step": "gate step", "analysed_step": "analysed step", "accuracy_gate": "test accuracy at gate",
                "accuracy": "test accuracy analysed", "gated_gate": "past gate at gate", "gated": "past gate analysed",
                "value_a_gate": "(a) at gate", "value_a": "(a) analysed", "value_b_gate": "(b) at gate",
                "value_b": "(b) analysed"})))
        if len(oversight):
            f.write(f"\n\nOversight: {p.inject_prompts} held-out stories asking for the {p.inject_key}, with an "
                    "injected note asking for another attribute; the last-token state of one trusted story is patched "
                    "in at the layer where the story's request-patching peaks (paper: 15.5% -> 97.5% on Pythia-12b); "
                    "control: a trusted story asking another attribute.\n\n")
            f.write(to_markdown(oversight))
        f.write("\n")

    figures.layer_profiles(sweep, pairs, fig_layers)
    figures.training(hist, p.claims.gate_accuracy, fig_training)
    figs = [fig_layers, fig_training]
    if fig_oversight is not None:
        figures.oversight(over, oversight, fig_oversight)
        figs.append(fig_oversight)

    from papers.orion.stages import read_vocab
    test_df, voc = read_parquet(test), read_vocab(vocab)[0]
    shortcut = {f: tasks.shortcut_accuracy(tasks.FAMILIES[f], voc, g) for f, g in test_df.groupby("family", sort=False)}
    claim_list = build_claims(p, pairs, oversight, shortcut, gate_pairs)
    check_list = build_checks(pairs, read_parquet(val), read_parquet(test), read_vocab(vocab)[1])
    write_claims(claim_list, claims, paper=SLUG, scale=scale, scope=SCOPE, checks=check_list)
    write_json(to_dict(p), params_json)
    write_report(report_md, title=TITLE, scale=scale,
                 what_was_run=what_was_run(p) + " " + outcome(p, pairs, gate_pairs) + " " + mechanism(p, pairs, shortcut),
                 table_md=table_md, figures=figs, claims=claim_list, checks=check_list, benchmarks=benchmarks,
                 differences=differences(p, pairs), scope=SCOPE, verdicts_figure=verdicts)


# ---- the report's prose, computed from the parameters and the run -----------------------------------
def _describe_model(p: Params, name: str) -> str:
    m = p.model(name)
    if m.kv_window == 1:
        attention = "plain attention"
    elif m.value_layers == 0:
        attention = f"keys mixed over {m.kv_window} positions, values not"
    else:
        blocks = "every block" if m.value_layers < 0 else f"the first {m.value_layers} blocks"
        attention = f"keys mixed over {m.kv_window} positions, values too in {blocks}"
    routed = ("; routed: in block 1 a request reads its own tokens alone, in blocks 2.. the context and not its "
              "request") if m.routed else ""
    return f"{name} ({m.n_layer} layers, width {m.n_embd}, {m.n_head} heads, {attention}{routed})"


def _recipe(p: Params, name: str) -> str:
    """One model's training recipe in words (orion.train with the model's own overrides)."""
    t = p.train_for(name)
    copies = (f"{t.copy_fraction:.0%} of each batch copy sequences (a list of {t.copy_length[0]}-{t.copy_length[1]} "
              f"words written twice; {t.copy_separated:.0%} of them with a separator after each word)"
              + (f", after a curriculum of {t.copy_warmup} steps on copy sequences alone" if t.copy_warmup else "")
              if t.copy_fraction > 0 else "no copy sequences")
    return (f"{name}: at most {t.max_steps} steps, batch {t.batch_size}, AdamW lr {t.lr} (constant after {t.warmup} "
            f"warmup steps, weight decay {t.weight_decay}), {copies}, 1-{t.max_requests} requests per training "
            f"sequence (at most a family's keys), the loss on their answers plus {t.lm_weight} x the next-token loss "
            f"elsewhere")


def what_was_run(p: Params) -> str:
    t = p.train
    tested = ", ".join(_describe_model(p, n) for n in p.tested_names)
    control = ", ".join(_describe_model(p, n) for n in p.control_names)
    return (f"Tested models: {tested}. Positive control: {control}. {p.seeds} seeds each, the seeds of one model "
            f"trained side by side in one process, from scratch, until every task family passes the accuracy gate "
            f"({p.claims.gate_accuracy} on {p.val_prompts} validation prompts per family, checked every "
            f"{t.eval_every} steps; the validation prompts come from {p.val_share:.0%} of the held-out styles, the test "
            f"prompts from the rest, so the gate reads neither a training nor a test style)"
            + (f", then {', '.join(sorted({str(p.train_for(n).post_gate_steps) for n in p.model_names}))} steps past it, where "
               f"each seed is analysed (the at-gate checkpoint is analysed too and reported beside, not deciding; seeds "
               f"{p.seed_offset} .. {p.seed_offset + p.seeds - 1}),"
               if any(p.train_for(n).post_gate_steps for n in p.model_names) else "")
            + f" or up to the step cap, on "
            f"{len(p.families)} ORION-style task famil{'y' if len(p.families) == 1 else 'ies'} "
            f"({', '.join(p.families)}) whose entity names come from Debian's wamerican word list ({p.pool_size} words "
            f"per pool). Recipes: {'; '.join(_recipe(p, n) for n in p.model_names)}. {_pretrained_sentence(p)}"
            f"Test prompts ({p.test_prompts} per family) use held-out context wordings (the styles held out from "
            f"training, {p.test_fraction:.0%} of them, less the validation styles). Every model-task pair is analysed by request-patching at every layer (the residual stream at "
            f"the last token of x2 = (C2, R2) overwritten by that of x1 = (C1, R1), {p.patch_pairs} pairs per family) "
            f"and by the same patch from x3 = (C3, R2), x2's own request on another context (the negative control).")


def outcome(p: Params, pairs: pd.DataFrame, gate_pairs: pd.DataFrame | None = None) -> str:
    """What the tested pairs past the gate show on the interior layers, and what the positive control shows; with
    `gate_pairs`, the same seeds at their gate (reported, not deciding)."""
    role = pairs.model.map(roles(p, pairs.model.unique()))
    trained = pairs[pairs.model.isin(p.model_names)]
    taken = trained.groupby(["model", "seed"]).gate_step.first()
    analysed = trained.groupby(["model", "seed"])["analysed_step" if "analysed_step" in trained else "gate_step"].first()
    text = ["The seeds (" + ", ".join(f"{m} {', '.join(str(int(s)) for s in g.index.get_level_values(1))}"
                                      for m, g in taken.groupby(level=0))
            + ") passed the validation gate at steps " + ", ".join(
        f"{m} {', '.join(str(int(x)) for x in g)} (cap {p.train_for(m).max_steps})" for m, g in taken.groupby(level=0))
        + " and were analysed at steps " + ", ".join(
        f"{m} {', '.join(str(int(x)) for x in g)} ({p.train_for(m).post_gate_steps} past the gate)"
        for m, g in analysed.groupby(level=0)) + "."] if len(taken) else []
    if gate_pairs is not None and len(gate_pairs):
        cmp = gate_comparison(p, pairs, gate_pairs)
        c = p.claims
        for m, g in cmp.groupby("model", sort=False):
            no_control = "control_measured" in gate_pairs and not gate_pairs[gate_pairs.model == m].control_measured.any()
            text.append(f"{m} at the gate (reported, not deciding"
                        + ("; the request patch alone, the same-request control is measured at the analysed "
                           "checkpoint only" if no_control else "")
                        + f"): {int(g.gated_gate.sum())} of {len(g)} seeds past "
                        f"the accuracy gate on the test prompts, of which {int((g.gated_gate & (g.value_a_gate >= c.keep_fraction)).sum())} "
                        f"with (a)'s ratio >= {c.keep_fraction} and {int((g.gated_gate & (g.value_b_gate > 0)).sum())} with (b)'s "
                        f"margin > 0 (point values, per seed: (a) "
                        f"{', '.join(f'{x:.2f}' for x in g.value_a_gate)}; (b) {', '.join(f'{x:.2f}' for x in g.value_b_gate)}); "
                        f"at the analysed checkpoint {int(g.gated.sum())} of {len(g)} past the gate, "
                        f"{int((g.gated & (g.value_a >= c.keep_fraction)).sum())} and {int((g.gated & (g.value_b > 0)).sum())} "
                        f"(per seed: (a) {', '.join(f'{x:.2f}' for x in g.value_a)}; (b) "
                        f"{', '.join(f'{x:.2f}' for x in g.value_b)}).")
    for label, part in (("tested", pairs[role != CONTROL]), ("positive-control", pairs[role == CONTROL])):
        gated = part[part.gated]
        if gated.empty:
            text.append(f"No {label} pair passed the gate, so no request-patching result describes such a model that "
                        f"does its task.")
            continue
        interior = gated.profile.str.split(" > ").map(lambda layers: layers[1:-1])
        unmoved = int(interior.map(lambda layers: bool(layers) and all(h == "R2(C2)" for h in layers)).sum())
        peaks = ", ".join(f"{r.model}/{r.family} seed {r.seed}: {r.r1c2_max:.2g} at L = {r.r1c2_layer}"
                          for r in gated.itertuples())
        text.append(f"Of the {len(gated)} {label} pairs past the gate, {unmoved} keep R2(C2) dominant at every interior "
                    f"layer (patching the last token does not move their request) and {int(gated.interior.sum())} show "
                    f"the interior profile of claim (b); max_L p(R1(C2)) / p_clean per pair: {peaks}.")
    return " ".join(text)


def mechanism(p: Params, pairs: pd.DataFrame, shortcut: dict) -> str:
    """Where the gated pairs' last token attends (summarise: values_b1, request_later), per model and seed, beside the
    shortcut premise: a model that puts most of block 1's attention on the context's values has gathered them before
    it processed its request, the reverse of the paper's order (independent review of issue 47)."""
    text = []
    if shortcut:
        text.append("Task premise: the best rule that answers without binding a value to its attribute reaches a test "
                    "accuracy of " + ", ".join(f"{f} {v['best']:.3f} (answer-by-type {v['type_rule']:.3f}, "
                                               f"always-one-attribute {v['fixed_key_rule']:.3f})"
                                               for f, v in shortcut.items())
                    + f" (the gate: at most {p.claims.shortcut_accuracy_max}).")
    g = pairs[pairs.values_b1.notna()]
    role = g.model.map(roles(p, pairs.model.unique()))
    for label, part in (("tested", g[role != CONTROL]), ("positive-control", g[role == CONTROL])):
        if part.empty:
            continue
        per_seed = ", ".join(f"{r.model}/{r.family} seed {r.seed}{'' if r.gated else ' (below the gate)'}: "
                             f"{r.values_b1:.2f} in block 1, {r.request_later:.2f} on the request later"
                             for r in part.itertuples())
        text.append(f"Where the last token attends on the test prompts, {label} pairs (the share of one head's "
                    f"attention on the context's values in block 1, and the most a head of blocks 2.. puts on the "
                    f"request's tokens): {per_seed}.")
    return " ".join(text)


def _pretrained_sentence(p: Params) -> str:
    if not p.pretrained:
        return "No pretrained LM was listed (orion.pretrained), so the injection experiment (claim (c)) is not measured. "
    return ("Pretrained LMs analysed as they are: " + ", ".join(f"{m['name']} ({m['path']})" for m in p.pretrained)
            + "; they read the prompts as text and are scored on the first token of each answer. ")


def _rule_change(p: Params, pairs: pd.DataFrame) -> str:
    """How the criteria of (a) and (b) came to be (issue 47's reviews), with what the reported profile rules give on
    this run's gated pairs."""
    role = pairs.model.map(roles(p, pairs.model.unique()))
    counts = []
    for label, part in (("the tested models", pairs[role != CONTROL]), ("the positive control", pairs[role == CONTROL])):
        g = part[part.gated]
        counts.append(f"{label}: {int(g.interior.sum())} of {len(g)} gated pairs with the rule, "
                      f"{int(g.interior_strict.sum())} without the transition")
    return ("How the criteria came to be. After the run whose seeds did not learn the shared-pool story (issue 47) "
            "the claims were decided on each seed's continuous measure with a t interval of its mean; after the "
            "run that showed that measure bimodal (its seeds' ratios near 1 or far below the threshold), issue 47's fourth "
            "review asked for the share of seeds past the gate that meet the per-seed criterion, with an exact "
            "interval, against a share fixed in config.yaml (seed_share); issue 47's fifth review found that rule "
            "unable to decide once a seed missed the gate, and a seed's outcome within the sampling of 100 patching "
            "pairs, so before this run the pairs became 500, each seed's outcome is read with its bootstrap interval, "
            "and the share is also read against the paper's own (the Intervals paragraph). Claim (b)'s layer profile, reported beside it, allows a layer where no "
            "output dominates at the transition from R1(C2) to R1(C1) only (a change after the first independent "
            "review, because the routed model, mid-retrieval there, failed the rule without it; the tested models' "
            "profiles of an earlier run had been seen). In this run, " + "; ".join(counts) + ".")


def _cap_sentence(p: Params, pairs: pd.DataFrame) -> str:
    """What the step caps meant in this run: set beyond the steps the seeds needed, or reached by seeds below the gate."""
    trained = pairs[pairs.model.isin(p.model_names)]
    taken = trained.groupby(["model", "seed"]).gate_step.first()
    caps = {m: p.train_for(m).max_steps for m in p.model_names}
    capped = int((~trained.groupby(["model", "seed"]).passed_gate.first()).sum()) if "passed_gate" in trained \
        else int(sum(step >= caps[m] for (m, _), step in taken.items()))
    cap_text = ", ".join(f"{m} {c}" for m, c in caps.items())
    # a seed that passed at its cap's own record would have been below the gate one record later (review orion_r7)
    passed = trained.groupby(["model", "seed"]).passed_gate.first() if "passed_gate" in trained \
        else pd.Series(True, index=taken.index)
    at_cap = sorted((m, s) for (m, s), step in taken.items() if passed[(m, s)] and step >= caps[m])
    edge = (f" {len(at_cap)} of {len(taken)} seeds passed the gate only at the last record their cap allows (" +
            ", ".join(f"{m} seed {s}" for m, s in at_cap) + "): one record later they would have counted as below "
            "the gate, so the caps do not lie clearly beyond the steps every seed needed.") if at_cap else ""
    if capped:
        return (f"The step caps ({cap_text}, set by the default budget) were reached by {capped} of {len(taken)} "
                f"seeds, which had not passed the gate by then; whether more steps teach them the task is not measured "
                f"here.{edge}")
    if at_cap:
        return f"No seed ended below the gate at its step cap ({cap_text}).{edge}"
    return (f"The step caps ({cap_text}) lie beyond the steps the seeds needed (above), so that whether a seed learns "
            f"does not depend on the CPU's floating-point path (issue 55).")


def _recipe_sentence(p: Params) -> str:
    """Why the models' recipes differ, from the parameters (the pilots behind them are in config.yaml)."""
    copies = {n: p.train_for(n).copy_fraction for n in p.model_names}
    rates = {n: p.train_for(n).lr for n in p.model_names}
    if len(set(copies.values())) == 1 and len(set(rates.values())) == 1:
        return "Every model trains with the same recipe (What was run)."
    return ("The models train with their own recipes (What was run): " + ", ".join(
        f"{n} at lr {rates[n]} with {copies[n]:.0%} copy sequences" for n in p.model_names)
        + ". In one-seed pilots before this run (config.yaml, orion.models), the tested model learned the shared-pool "
          "story within the budget only with copy sequences in its batches (generic repeated text, of which a "
          "pretrained LM has read much), while the routed model, whose blocks after the first cannot read its own "
          "request, stayed below chance with them and learned it quickly without them at a lower rate. The recipe "
          "shapes how a model learns, not what request-patching measures in it; the positive control shows that the "
          "analysis finds the decomposition where it is planted, in a model that does the task.")


def _seeds_to_clear(threshold: float, level: float = 0.95) -> int:
    """The fewest Bernoulli replicates, all successes, whose exact (Clopper-Pearson) lower bound exceeds `threshold`:
    the least n with ((1 - level) / 2)^(1/n) > threshold."""
    n = 1
    while ((1 - level) / 2) ** (1 / n) <= threshold:
        n += 1
    return n


def _pools(family: str) -> list[str]:
    f = tasks.FAMILIES[family]
    return list(dict.fromkeys(f.pool_of(k) for k in f.keys))


def _depth_text(p: Params) -> str:
    """The tested models' block counts and interior layers, in words."""
    depths = sorted({p.model(n).n_layer for n in p.model_names if not p.model(n).routed})
    return " and ".join(f"{d} blocks (interior layers 1 .. {d - 1})" for d in depths)


def differences(p: Params, pairs: pd.DataFrame) -> str:
    """What differs from the paper, in words; the only numbers are this run's parameters and results."""
    left_out = [f for f in ("code", "induction", "quantity", "translation") if f not in p.families]
    one_pool = [f for f in left_out if len(_pools(f)) == 1]
    windowed = [n for n in p.model_names if p.model(n).kv_window > 1]
    story_pools = _pools("story")
    separate = len(story_pools) == len(tasks.FAMILIES["story"].keys)
    routed_layer = 1
    left_text = ""
    if left_out:
        left_text = (f"; {', '.join(left_out)} are implemented (papers/orion/tasks.py) but left out. "
                     + (f"Unlike story, {', '.join(one_pool)} draw{'s' if len(one_pool) == 1 else ''} the values of "
                        f"all {'its' if len(one_pool) == 1 else 'their'} keys from one pool "
                        f"({', '.join(f'{f}: {_pools(f)[0]}' for f in one_pool)}), so the answer cannot be told "
                        f"from the other values by its kind: a model must bind each value to its key in the context. "
                        f"Whether tiny models without a value window (the window premise below) learn that binding "
                        f"within the default budget is not measured in this run, so it makes no statement about "
                        f"these families" if one_pool else ""))
    return f"""\
This is an analogue of the paper's study, not a replication on its models. The paper analyses 18 pretrained
language models (GPT-2, Pythia, Falcon, Llama 2; 125M to 70B parameters) on its ORION prompts; no model weights
can be downloaded here, so we train tiny transformers ({', '.join(_describe_model(p, n) for n in p.model_names)})
on our own ORION-style tasks, and they are trained on the very task families they are then analysed on.
Model size. The tested models' depth and width are set by the default scale's CPU budget (config/config.yaml,
orion.models, records the cost pilots on other seeds that chose them before this run, and the larger model of
earlier runs); with {_depth_text(p)}, a seed's retrieval can end in its last block, where R1(C1) holds by construction.
Families. This run trains and analyses {', '.join(p.families)}{left_text}.
Request-patching overwrites the last token's state only. In any causal model, the paper's LMs included, the blocks
after the patched layer can still read x2's own request tokens at their positions through attention; whether the
answer follows the patched state (R1) or those tokens (R2) is what claims (a) and (b) measure, not a premise.
A value window is different: a model whose values are mixed over the last few positions
(papers/orion/model.py, causal_window, kv_window with values mixed) carries x2's request tokens into the last token's
own value whatever its patched query reads, so for such models a premise gate asks that no value window reads the
request after the patched layer (else inconclusive).
{"Windowed models in this run: " + ", ".join(windowed) + "; the window gate applies to them." if windowed else "No model of this run mixes keys or values over positions (plain causal attention, as in the paper's LMs), so the window gate does not apply and is not counted among the premise gates."}
Question answering over a story is also the task of the paper's fine-grained case study (on Pythia-2.8b).
The story family and the task premise. {"Every story attribute (" + ", ".join(tasks.FAMILIES['story'].keys) + ") draws its values from one shared pool, unlike the paper's stories, whose characters, cities and occupations differ in kind" if not separate else "The story's attributes draw their values from separate pools (" + ", ".join(f"{k}: {tasks.FAMILIES['story'].pool_of(k)}" for k in tasks.FAMILIES['story'].keys) + ")"}.
{"So a value's kind tells nothing of its attribute: only the clause's words bind it (in every wording the word just before the value names the attribute), and the request quotes that clause's words up to the value ('Q : the hero lived in ? A :'), so a model must read the request and find the value that follows its words in the context, a lookup by induction, as in the paper's induction and variable-binding tasks." if not separate else "So a model can find the answer by its kind alone, without binding the value to its key."}
In an earlier run with a pool per attribute the tested models retrieved by kind (measured by the independent review
of issue 47: a block-1 head gathered the context's values before the request was processed and later blocks read the
request's tokens again, the reverse of the paper's order), so its "does not hold" spoke of that shortcut, not of the
paper. A premise gate now measures the
shortcut (papers/orion/tasks.py, shortcut_accuracy): the test accuracy of the best rule that answers without binding
(picking among the context's values of the asked attribute's pool, or always giving one attribute) must be at most
{p.claims.shortcut_accuracy_max} (chance among a story's {len(tasks.FAMILIES["story"].keys)} values plus a sampling margin;
ours, fixed before the run), else (a) and (b) read inconclusive. "What was run" gives the shortcut's accuracy and, per
seed, where the last token attends.
Training recipes. {_recipe_sentence(p)}
(a) and (b) remain statements about tiny models trained on this family, not about the paper's LMs; a "does not
hold" here does not refute the paper.
Intervals. The paper counts model-task pairs that keep 70% (98 of 106). A seed of ours has one model-task pair, and
each seed's measure is bimodal (it localises the request in its last token or it does not; "What was run"), so
each seed past the accuracy gate is one binary outcome: whether it meets the paper's criterion for (a) ({p.claims.keep_fraction:.0%} kept)
and an interior layer where R1(C2) dominates for (b). A seed's outcome is read with its 95% bootstrap interval over
its {p.patch_pairs} patching pairs: met or missed only where the whole interval lies on one side of the cut, else
undetermined and left out of the share (issue 47's fifth review found one seed's (b) outcome flipping with the
draw of 100 pairs). A claim holds when the exact (Clopper-Pearson) 95% interval of the share of determined
seeds meeting it lies above {p.claims.seed_share} (a majority, ours), does not hold when it lies at or below it.
Holding needs at least {_seeds_to_clear(p.claims.seed_share)} determined seeds past the gate that all meet it (with
{p.seeds} trained, all must). The paper's own share, {p.claims.pairs_fraction_min} (98 of 106), is reported beside
the share, not deciding. A rule that read "does not hold" where the share's upper bound falls to or below it was
tried in issue 47's fifth round and withdrawn before this report: it was adopted with these seeds' outcomes known
(the retrained checkpoints are identical), and issue 47's sixth review found that the seeds are analysed a few
evaluations after their validation accuracy jumps, and that further training past the gate carried two of the
seeds that miss (a) above it. Until each seed is analysed after training past its gate (a stability premise), a
shortfall against the paper's share says nothing about the mechanism. (Before: the mean of the per-seed measure
with a Student t interval, which a bimodal measure does not suit, issue 47's fourth review.)
The value-first route. Seeds that put most of block 1's attention on the context's values (values_b1, "What was
run") gather the values before their request is processed, the order the paper's decomposition excludes. They count
as seeds, not as an unmet premise (decided before this run): a premise is a condition for the measurement to be
valid (the task is done, no shortcut answers it, no value window bypasses the patch), while the route a model takes
is the mechanism the claim is about; excluding the seeds that took another route would count only the seeds that
decompose, a test that could not fail. Whether the seeds that took it keep it with more training is the open
question above.
The positive control. A routed model (model.routing_masks) has the same architecture (its own training recipe: What was run; config.yaml gives the pilots behind both recipes), but in its
first block a request's tokens attend to their own request alone (from the request's first token, which only
requests use: papers/orion/tasks.py, request_markers), and in the blocks after it to the context and no token of
their request; the request reaches the answer only through the last token's state after block {routed_layer}, which holds nothing
of the context, so request-patching at layer {routed_layer} gives R1(C2) in a model that does the task. For claim (a) this holds by
construction: patching the routed model's layer-{routed_layer} state reproduces the clean run of (C2, R1) up to the rotary
position offsets, so its (a) control shows that the pairs, the metric and the threshold can register the effect,
not that the analysis detects a decomposition a model learned. For claim (b) it shows that the layer profile, at this
size, is found where it is planted. Claims (a) and (b) count only where this control holds.
{_rule_change(p, pairs)}
The accuracy gate and early stopping. Each seed trains until every family passes the gate on the validation
prompts at {p.train.gate_records} consecutive checks, {p.train.eval_every} steps apart, and is taken there; the
validation prompts come from styles held out from training and apart from the test styles (a check below). The
claims then read their binary outcomes on the seeds that pass the same gate on the test prompts, and need at least
{MIN_REPLICATES} of them per tested model (a premise: fewer make the claim inconclusive, never "does not hold"). {_cap_sentence(p, pairs)}
The seeds of one model train side by side in one process (their weights stacked; papers/orion/ensemble.py), the
same computation as separate runs (a test checks it); each seed's batch is padded to its own length, never to the
other seeds', so a seed trains bit for bit the same alone or in any stack (a test checks; issue 47's fourth review
found the earlier shared padding made a seed's outcome depend on how many seeds were stacked).
Request-patching follows the official code: the residual stream after a block at the last token, normalised by
the clean probability (ratio of means over pairs); we also draw pairs so that R2(C2), R1(C2) and R1(C1) are three
different tokens (the official code allows collisions). At L = 0 the patch is x2's own last token (x1 and x2 end
on the same tokens), so R1(C2)'s normalised probability there is p(R1(C2) | x2) / p(R1(C2) | (C2, R1)), near 1 in a
model that does not read its request (it guesses among C2's values either way): claim (a)'s "kept" can come from
such a model, which the accuracy gate excludes and the control below shows. The negative control is ours: the same patch taken from
x3 = (C3, R2), x2's own request on another context. It never presents R1, so R1(C2) must not appear (it controls
for a metric or a disrupted output that would yield R1(C2) without the request being moved); where the patched state
carries the request only, the output must stay R2(C2), read from the unpatched context C2, and where it carries the
retrieved answer, it becomes R2(C3) (the table's control profile). It replaces a shuffled-position patch (x1's state
at a context position), which broke the output at every layer and so could never hold (independent review of
issue 47).
Prompt injection (claim (c)). The paper's models were never trained to obey injected notes but do; ours would
follow a note only if trained to, which would make the experiment start at zero by design, so our models never
see a note and claim (c) is measured only on pretrained LMs listed under orion.pretrained (a local Hugging Face
directory; nothing is downloaded; full scale). They read our word-level prompts joined by spaces and are scored
on the first token of each answer, with the residual stream patched after each block as in the official code, on
the GPU when there is one; they are analysed on the families of orion.families, as the tiny models. The tiny models
train on {p.device} in this run (orion.device; the full scale trains them on the GPU; the batches are drawn on the
CPU either way), and are analysed on the CPU.
No pretrained weights ship with any package, so no default run includes one; the tests check that path on a tiny
random GPT-2 against Hugging Face's own hidden states.
"""
