"""hip's claims, decided on the evaluation tables (papers.common.claims): each with its premise gates, its
negative control and, where the analysis could be blind, a positive control on a planted setting; facts true
by construction (the tree search's counted work) are checks, not claims.

Replicates are the independently trained models (seeds); within a seed the prompts are paired across methods.
(a)'s intervals are two-level bootstraps (seeds, then prompts within each drawn seed); (b), (c) and (d) are decided
on Student t intervals over the replicates (for (b), each seed's mean over its prompts: a percentile bootstrap over
a handful of seeds under-covers, issue 47). Thresholds are
``p.claims`` (config, fixed before the deciding runs; config.yaml says where each comes from).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from papers.common.claims import (BOOTSTRAP_SEED, LEVEL, Check, Claim, Control, Evidence, PositiveControl, Premise,
                                  Scope, bootstrap_test, convention, derived, mean_test, t_interval)
from papers.hip.evaluate import fit_exponent
from papers.hip.methods import METHODS
from papers.hip.offload import lru_capacity

LABEL = {"dense": "dense", "hip": "HiP", "oracle": "oracle top-k", "random": "random blocks",
         "window": "sink + window (StreamingLLM)"}
SCOPE = Scope("analogue", "the paper prunes pretrained LLaMA/Gemma LLMs (7-9B) at 32k-1M tokens and measures passkey, "
                          "RULER and LongBench; here tiny byte-level GPTs trained on the KJV with synthetic key records "
                          "stand in for them at a 1k-byte context (at the full scale, with hip.pretrained listing models, "
                          "claim (a) is decided on a pretrained LM's passkey and RULER multi-key retrieval)")
# Resamples of the two-level bootstrap (seeds, then prompts within each drawn seed).
TWO_LEVEL_SAMPLES = 2000
PROMPT_KEY = ["T", "n_keys", "depth", "width", "prompt"]  # one prompt of one seed: the same text for every method
# (d)'s deciding column of the offload table: the hit rate of the tree search's representative reads in the log T cache
# (papers.hip.offload.SplitCache "mask"); "sa_hit_rate" (the sparse-attention reads) and "hit_rate" (both) are reported,
# and so are "mask_unlimited_hit_rate" (an unlimited cache's on the same reads) and "mask_capacity_share" (the log T
# cache's hits over the unlimited cache's: review hip_r12's proposed statistic, tried and withdrawn after review hip_r13,
# config.yaml hip.claims says why).
DECIDING_HIT_RATE = "mask_hit_rate"
CAPACITY_SHARE = "mask_capacity_share"
# (b)'s premise that the models learned text (review hip_r10): their held-out NLL per byte with dense attention minus an
# add-one count bigram's must lie below this, i.e. the model predicts the text better than the bigram (a sign, the
# premise's own statement; config.yaml hip.claims says why; a constant here so that it reruns the report alone).
TEXT_VS_BIGRAM_MAX = 0.0


# ---- intervals over seeds and prompts ------------------------------------------------------------
def two_level_test(items: dict, stat, *, threshold: float, direction: str, name: str, what: str = "prompts",
                   n_boot: int | None = None, seed: int = BOOTSTRAP_SEED) -> Evidence:
    """`stat` (a function of an (N, k) array) of the items of every seed pooled, with a two-level
    percentile bootstrap interval: draw the seeds with replacement (the independent replicates),
    then each drawn seed's items (its prompts, the rows of ``items[seed]``, (n_s, k)) with
    replacement. The k columns of a row are paired arms measured on the same prompt. The per-seed
    values of `stat` are recorded (identical values across seeds are flagged by the contract)."""
    n_boot = n_boot or TWO_LEVEL_SAMPLES
    seeds = sorted(items)
    arrays = [np.asarray(items[s], float) for s in seeds]
    point = float(stat(np.concatenate(arrays)))
    rng = np.random.default_rng(seed)
    draws = np.empty(n_boot)
    for b in range(n_boot):
        picked = [arrays[i] for i in rng.integers(0, len(arrays), len(arrays))]
        draws[b] = stat(np.concatenate([a[rng.integers(0, len(a), len(a))] for a in picked]))
    lo, hi = np.quantile(draws[np.isfinite(draws)], [0.5 - LEVEL / 2, 0.5 + LEVEL / 2])
    n_items = sum(len(a) for a in arrays)
    return Evidence(point, (float(lo), float(hi)), len(seeds),
                    f"two-level percentile bootstrap {LEVEL:.0%} over {len(seeds)} independently trained seeds and "
                    f"their {n_items} {what} (paired arms; {n_boot} resamples, seed {seed})", threshold, direction, name,
                    values=[float(stat(a)) for a in arrays])


def _mean_diff(a):
    return float(a[:, 0].mean() - a[:, 1].mean())


def _far_share(a):
    """1 - NLL with far context / NLL without it (columns: dense, window)."""
    return float(1.0 - a[:, 0].mean() / a[:, 1].mean())


def paired(df: pd.DataFrame, key: list[str], value: str, arms: tuple[str, str], by: str = "method") -> dict:
    """{seed: (n, 2) array}: `value` of the two arms on the same items (rows matched on `key`)."""
    wide = df.pivot_table(index=["seed", *key], columns=by, values=value).reset_index()
    return {int(s): g[list(arms)].to_numpy(float) for s, g in wide.groupby("seed")}


def tlogt_exponent(lengths, mask_k: int) -> float:
    """Local slope over the measured T of HiP's cost model T log2(T / mask_k) (tree depth x T)."""
    return fit_exponent(lengths, [T * math.log2(T / mask_k) for T in lengths])


def wide(ret: pd.DataFrame, p) -> pd.DataFrame:
    """The retrieval rows whose records span at least ``eval.wide_min`` positions (8+ copies of the answer: locality
    given by the data), (a)'s positive control beside the planted needle."""
    return ret[ret.width >= p.eval.wide_min]


def deciding(ret: pd.DataFrame, p) -> pd.DataFrame:
    """The retrieval rows that decide (a): records of width ``eval.decide_width`` (4: the key-value pair written twice,
    the answer twice as in the paper's passkey sentence "The pass key is {key}. Remember it. {key} is the pass key.",
    Sec. 4's passkey test; review hip_r8)."""
    return ret[ret.width == p.eval.decide_width]


def gap_by_width(ret: pd.DataFrame, arm: str = "hip") -> dict:
    """Per record width: dense - `arm` retrieval accuracy, paired over prompts, with its two-level bootstrap 95%
    interval over seeds and prompts (reported for every width, decided at one)."""
    out = {}
    for w in sorted(int(x) for x in ret.width.unique()):
        e = two_level_test(paired(ret[ret.width == w], PROMPT_KEY, "correct", ("dense", arm)), _mean_diff,
                           threshold=0.0, direction=">", name=f"dense - {LABEL[arm]}, width {w}")
        out[str(w)] = {"copies of the answer": w // 2, "dense - HiP": e.effect, "interval": list(e.interval)}
    return out


# ---- (a) retrieval at an equal budget ---------------------------------------------------------------
def quality_parts(ret: pd.DataFrame, arm: str, c, what: str = "prompts", tag: str = "") -> list[Evidence]:
    """Dense - `arm` below acc_tol; `arm` - each other baseline above acc_margin; paired over prompts, pooled over
    the lengths and widths of `ret` (two-level bootstrap over seeds and prompts); `tag` ends each name."""
    out = [two_level_test(paired(ret, PROMPT_KEY, "correct", ("dense", arm)), _mean_diff, threshold=c.acc_tol,
                          direction="<", name=f"accuracy dense - {LABEL[arm]}{tag}", what=what)]
    out += [two_level_test(paired(ret, PROMPT_KEY, "correct", (arm, b)), _mean_diff, threshold=c.acc_margin,
                           direction=">", name=f"accuracy {LABEL[arm]} - {LABEL[b]}{tag}", what=what)
            for b in ("random", "window") if b != arm]
    return out


def pretrained_quality_parts(pre: pd.DataFrame, arm: str, c) -> list[Evidence]:
    """The same comparisons on the pretrained LMs' passkey and multi-key prompts (full scale): per prompt of every
    model, task and length the two methods' correctness, a paired percentile bootstrap over the prompts (one
    pretrained checkpoint per model: its prompts, not independently trained models, are the replicates)."""
    acc = pre[pre.task.isin(("passkey", "multikey"))]
    wide_ = acc.pivot_table(index=["model", "task", "length", "depth", "prompt"], columns="method",
                            values="correct").astype(float)

    def test(a, b, threshold, direction):
        return bootstrap_test(np.mean, (wide_[a] - wide_[b]).to_numpy(), threshold=threshold, direction=direction,
                              name=f"accuracy {LABEL[a]} - {LABEL[b]} (pretrained)",
                              what="prompts of the pretrained LMs (passkey and RULER multi-key)")

    return [test("dense", arm, c.acc_tol, "<")] + [test(arm, b, c.acc_margin, ">") for b in ("random", "window")
                                                   if b != arm]


def needle_width_premise(gaps: dict) -> Premise:
    """What (a) presupposes on the tiny byte-level models and no run measures (review hip_r9): that the analogue's
    needle presents HiP's tree search with the passkey's effective width in a pretrained LM, the width of the
    high-scoring region around it against the search's first-level chunks. A record's copies of its answer stand in
    for the passkey's tokens, and HiP's gap to dense moves from "holds" to "does not hold" with that width (`gaps`:
    width -> dense - HiP, gap_by_width), so the deciding width sets the verdict and the analogue cannot speak for or
    against the paper: (a) is at most inconclusive there; the pretrained LMs' passkey and RULER prompts (the full
    scale) decide it, with no such gate."""
    by_width = ", ".join(f"{w}: {float(g['dense - HiP']):+.2f}" for w, g in sorted(gaps.items(), key=lambda x: int(x[0])))
    return Premise("the analogue's needle has the effective width of the paper's passkey for HiP's search (the "
                   "high-scoring region around it against the first-level chunks): not measured; a record's copies of "
                   f"its answer stand in for the passkey's tokens, and dense - HiP moves with the width ({by_width})",
                   "not measured", "measured and met: the needle's effective width in the model's attention matched "
                   "to a pretrained LM's passkey (or the pretrained LMs decide, full scale)", False)


def learned_text_premise(txt: pd.DataFrame, c) -> tuple[Premise, dict]:
    """(b)'s premise (review hip_r10): the paper's attention locality is that of trained language models, so the
    models must have learned the text: their held-out NLL per byte with dense attention below that of an add-one
    count bigram of bytes fitted on the training text (papers.hip.stages.byte_ngram_logp), on the same bytes (the
    second halves of the held-out text windows, ``txt``'s ``nll_late`` and ``bigram_nll_late``). Per seed the mean
    over windows of the model's NLL minus the bigram's, Student t 95% over seeds, below ``TEXT_VS_BIGRAM_MAX``.
    Returns the premise and what it measured (the unigram and bigram beside the model's, each a mean over seeds and
    windows); a table without the n-gram columns (runs before hip_r11) gives a premise that is not measured."""
    name = ("the models learned the held-out text: NLL per byte with dense attention minus an add-one count bigram's "
            "(fitted on the training text), the same bytes")
    if "bigram_nll_late" not in txt.columns:
        return Premise(name, "not measured", f"< {TEXT_VS_BIGRAM_MAX:g} (TEXT_VS_BIGRAM_MAX)", False), {}
    d = txt[txt.method == "dense"]
    per_seed = (d.nll_late - d.bigram_nll_late).groupby(d.seed).mean().sort_index()
    ev = mean_test(per_seed.to_numpy(), threshold=TEXT_VS_BIGRAM_MAX, direction="<",
                   what="seeds (each the mean over its held-out windows)",
                   name="held-out text NLL, dense attention - count bigram (nats/byte)")
    m, lo, hi = t_interval(d.nll_late.groupby(d.seed).mean().to_numpy())
    measured = {"model, dense attention": {"mean": m, "interval": [lo, hi]},
                "count bigram (add-one, training text)": float(d.bigram_nll_late.mean()),
                "count unigram (add-one, training text)": float(d.unigram_nll_late.mean()),
                "model - bigram": {"mean": ev.effect, "interval": list(ev.interval)}}
    return Premise.from_evidence(name, ev), measured


# ---- the claims ------------------------------------------------------------------------------------
def hip_claims(p, ret: pd.DataFrame, txt: pd.DataFrame, rec: pd.DataFrame, cst: pd.DataFrame, dec: pd.DataFrame,
               pre: pd.DataFrame | None = None) -> tuple[list[Claim], list[Check]]:
    """The paper's claims and the checks. `ret`, `txt`, `rec`, `dec`: the seeds' retrieval (``source`` model or
    planted), text, recall and offload tables; `cst`: cost; `pre`: the pretrained LMs' table (full scale) or None."""
    c, h, e = p.claims, p.hip, p.eval
    model, planted = ret[ret.source == "model"], ret[ret.source == "planted"]

    # premise of (a) and (b): the trained models use far context (loss of the answers with dense attention
    # against the sink + window alone); ordinary held-out bytes, which need no far context, are its check
    far = two_level_test(paired(model, PROMPT_KEY, "answer_nll", ("dense", "window")), _far_share,
                         threshold=c.far_share_min, direction=">", name="answer NLL share removed by far context")
    far_text = two_level_test(paired(txt, ["text_window"], "nll_late", ("dense", "window")), _far_share,
                              threshold=c.far_share_min, direction=">", name="text NLL share removed by far context",
                              what="held-out windows")
    uses_far = Premise.from_evidence("the trained models use far context (share of the repeated keys' answer loss "
                                     "that attention beyond sink + window removes)", far)

    # (a) retrieval at the same budget, at the paper's needle structure: the answer twice (width decide_width); the
    # wide records (8+ copies, locality given by the data) and the planted needle are its positive control
    wide_model, wide_planted, dec_model = wide(model, p), wide(planted, p), deciding(model, p)
    acc = model.groupby(["width", "method"]).correct.mean().unstack("method")
    acc_planted = planted.groupby(["width", "method"]).correct.mean().unstack("method")
    dense_dec = float(dec_model[dec_model.method == "dense"].correct.mean())
    widths_wide = sorted(int(w) for w in wide_model.width.unique())
    narrow = min(e.widths)
    measured_a = {"deciding width": e.decide_width,
                  "accuracy, deciding width": {LABEL[m]: float(dec_model[dec_model.method == m].correct.mean())
                                               for m in METHODS},
                  "accuracy dense - HiP by width (two-level bootstrap 95%)": gap_by_width(model),
                  "positive-control widths": widths_wide,
                  "accuracy, wide records": {LABEL[m]: float(wide_model[wide_model.method == m].correct.mean())
                                             for m in METHODS},
                  f"accuracy, width {narrow} (no locality)": {LABEL[m]: float(acc.loc[narrow, m]) for m in METHODS},
                  f"planted needle accuracy, width {narrow}": {LABEL[m]: float(acc_planted.loc[narrow, m])
                                                               for m in METHODS}}
    premise_a = [uses_far]
    if pre is not None and len(pre):  # full scale: the pretrained LMs decide, the tiny models stay in the table
        ev_a, ctl_a = pretrained_quality_parts(pre, "hip", c), pretrained_quality_parts(pre, "random", c)
        pre_acc = pre[pre.task.isin(("passkey", "multikey"))]
        dense_pre = float(pre_acc[pre_acc.method == "dense"].correct.mean())
        premise_a = [Premise.at_least("dense attention retrieves the pretrained LMs' passkeys and multi-key needles",
                                      dense_pre, c.dense_acc_min, what="dense_acc_min")]
        measured_a["accuracy, pretrained LMs"] = {LABEL[m]: float(pre_acc[pre_acc.method == m].correct.mean())
                                                  for m in METHODS}
        where_a = (f"the pretrained LMs {sorted(pre.model.unique())}: passkey and RULER multi-key prompts, every length "
                   f"and depth pooled, paired percentile bootstrap over prompts")
    else:
        ev_a, ctl_a = quality_parts(dec_model, "hip", c), quality_parts(dec_model, "random", c)
        premise_a.append(Premise.at_least(f"dense attention retrieves records of width {e.decide_width} (the deciding "
                                          "width)", dense_dec, c.dense_acc_min, what="dense_acc_min"))
        premise_a.append(needle_width_premise(measured_a["accuracy dense - HiP by width (two-level bootstrap 95%)"]))
        where_a = (f"records of width {e.decide_width} (the key-value pair written {e.decide_width // 2} times: the "
                   f"answer as often as in the paper's passkey sentence) at T in {list(e.lengths)}, passkey and "
                   "multi-key pooled, paired over the same prompts; two-level bootstrap over seeds and prompts")
    # the positive control: the planted needle, and (where the tiny models decide) their own wide records
    pos_a = quality_parts(wide_planted, "hip", c, what="planted draws", tag=", planted needle")
    if pre is None or not len(pre):
        pos_a += quality_parts(wide_model, "hip", c, what="wide-record prompts", tag=f", records of width >= {e.wide_min}")
    claim_a = Claim(
        "a", f"At the same key budget, HiP retrieves a needle that holds its answer "
             f"{'twice' if e.decide_width == 4 else f'{e.decide_width // 2} times'} (a "
             f"record of width {e.decide_width}, as the paper's passkey sentence holds its key twice) within "
             f"{c.acc_tol:g} of dense attention's accuracy, and more often than random blocks and than sink + window "
             "(StreamingLLM).",
        "LLaMA-3 passkey / RULER: HiP near dense, ahead of StreamingLLM and other training-free baselines at equal "
        "budgets; HiP beats random pruning (Sec. 3)",
        measured_a,
        f"{where_a}: accuracy dense - HiP < acc_tol = {c.acc_tol}, and HiP - b > acc_margin = {c.acc_margin} for b in "
        f"(random blocks, sink + window); 95% intervals. The other widths {[w for w in e.widths if w != e.decide_width]} "
        "are reported with their dense - HiP gap and interval, not decided: a needle of one pair has no attention "
        f"locality for the tree search to follow, and records of width >= {e.wide_min} ({e.wide_min // 2}+ copies of "
        "the answer) plant locality through the data, so they are a positive control",
        ev_a,
        Control("random blocks in HiP's place (the same budget, no tree search): the same tolerance to dense and the "
                "same margin over sink + window", ctl_a, kind="null"),
        threshold_source=convention(f"acc_tol {c.acc_tol}: a tenth of the prompts; acc_margin {c.acc_margin}: the sign "
                                    "(the paper's guarantee is that HiP beats random pruning, an inequality)"),
        premise=premise_a,
        positive_control=PositiveControl(
            f"the same comparisons where locality is given: on one attention head with a planted needle of width >= "
            f"{e.wide_min} (every key of the needle points along the last query, logit about {e.planted_strength:g}; "
            f"{e.planted_prompts} draws per (T, width, depth) and seed; dense retrieves it by construction), and on the "
            f"models' own records of width >= {e.wide_min} ({e.wide_min // 2}+ copies of the answer in a row; not "
            "where pretrained LMs decide): a search that uses locality must find both",
            pos_a))

    # (b) locality as the tree search uses it: HiP's recall of the oracle top-n blocks on the model's keys
    # against the same keys in shuffled block order, per layer, on a seed-level t interval (each seed's mean
    # over its prompts, record-free held-out windows); the null (A/A) control: two independent shuffles (locality
    # removed from both arms)
    model_rec = rec[rec["keys"].isin(("model", "shuffled", "shuffled2"))]
    planted_rec = rec[rec["keys"].isin(("planted", "planted_shuffled"))]
    layers = sorted(int(x) for x in model_rec.layer.unique())

    def locality_parts(r: pd.DataFrame, arms=("model", "shuffled")) -> list[Evidence]:
        out = []
        for layer in sorted(int(x) for x in r.layer.unique()):
            g = r[(r.layer == layer) & (r.method == "hip")]
            where = f"layer {layer}" if layer >= 0 else "planted locality"
            per_seed = [float(a[:, 0].mean() - a[:, 1].mean())
                        for _, a in sorted(paired(g, ["prompt"], "recall", arms, by="keys").items())]
            out.append(mean_test(per_seed, threshold=c.recall_margin, direction=">", what="seeds (each the mean over "
                                 "its prompts, paired)", name=f"recall HiP, {arms[0]} - {arms[1]} keys, {where}"))
        return out

    def untrained_reference(r: pd.DataFrame) -> dict:
        """Per pruned layer, (b)'s difference on the untrained model (the same architecture with each seed's initial
        weights, on the same windows): a reference reported beside (b), not a control and not decided. It rules out
        that the locality (b) measures is planted by the architecture (RoPE, the smeared keys) rather than learned:
        near 0 there, learned. Empty when the table has no untrained rows (runs before review hip_r9)."""
        u = r[r["keys"].isin(("untrained", "untrained_shuffled"))]
        return {str(e.name.rsplit("layer ", 1)[-1]): {"difference": e.effect, "interval": list(e.interval)}
                for e in locality_parts(u, ("untrained", "untrained_shuffled"))} if len(u) else {}

    learned, text_nll = learned_text_premise(txt, c)
    rec_means = rec.groupby(["keys", "method"]).recall.mean()
    n_recall = int(model_rec.groupby("seed").prompt.nunique().min())
    claim_b = Claim(
        "b", f"Attention locality as the tree search uses it: on the model's keys HiP's search recalls at least "
             f"{c.recall_margin:g} more of the true top-k key blocks than on the same keys in shuffled order, in every "
             "pruned layer.",
        "attention locality (nearby keys score alike) lets a chunk's representative stand for its maximum, so HiP "
        "approximates the top-k (Sec. 3); HiP's recall beats random pruning's",
        {"recall_hip": float(rec_means.get(("model", "hip"), float("nan"))),
         "recall_hip_shuffled": float(rec_means.get(("shuffled", "hip"), float("nan"))),
         "recall_hip_shuffled2": float(rec_means.get(("shuffled2", "hip"), float("nan"))),
         "recall_random": float(rec_means.get(("model", "random"), float("nan"))),
         "recall_hip_planted": float(rec_means.get(("planted", "hip"), float("nan"))),
         "recall_hip_planted_shuffled": float(rec_means.get(("planted_shuffled", "hip"), float("nan"))),
         "recall_hip_untrained": float(rec_means.get(("untrained", "hip"), float("nan"))),
         "recall_hip_untrained_shuffled": float(rec_means.get(("untrained_shuffled", "hip"), float("nan"))),
         "untrained reference (reported, not decided): recall HiP, untrained - untrained_shuffled keys, per layer, "
         "Student t 95% over seeds": untrained_reference(rec),
         "held-out text NLL per byte (nats; the premise that the models learned text), Student t 95% over seeds":
             text_nll,
         "prompts_per_seed": n_recall},
        f"for each pruned layer {layers}: recall of the oracle top-n blocks by HiP on the model's keys minus on the "
        f"same keys in shuffled block order (the same set of scores, locality destroyed; {n_recall} record-free "
        f"held-out windows per seed at T = {max(e.lengths)}, the model's own locality) > recall_margin = {c.recall_margin}; Student t 95% interval over the seeds, each "
        "seed's difference the mean over its prompts (the seeds are the independent replicates). Shuffled keys, not "
        "random blocks, are the reference: the search scores about 2n log(L/n) blocks exactly and keeps the best, "
        "which beats n random blocks even without locality",
        locality_parts(model_rec),
        Control("the same difference with locality removed from both arms: HiP's recall on one block shuffle of the "
                "model's keys minus on a second, independent shuffle (random blocks, the earlier control, ignore the "
                "keys, so their difference is 0 by construction); an A/A noise floor: the mechanism itself is removed "
                "in the claim's own reference arm", locality_parts(model_rec, ("shuffled", "shuffled2")),
                kind="null"),
        threshold_source=convention(f"recall_margin {c.recall_margin}: a tenth of the top-n blocks"),
        premise=[uses_far, learned],
        positive_control=PositiveControl(
            "the same difference on keys with planted locality (a slow sinusoid per channel along T, the model's "
            "head shape, as many draws per seed as prompts) against the same keys shuffled",
            locality_parts(planted_rec, ("planted", "planted_shuffled"))))

    # (c) cost: the time of the CPU references (their CPU time) or of the Triton kernels (wall time), fitted
    # exponents over T; the counted work (the reference search's own counter) is a check
    def time_exponents(g: pd.DataFrame, column: str) -> list[float]:
        return [fit_exponent(d["T"], d[column]) for _, d in g.dropna(subset=[column]).groupby("input")]

    hip_cost, ctl_cost = cst[cst.arm == "hip"], cst[cst.arm == "control"]
    timed = {"hip": time_exponents(hip_cost, "hip_seconds"), "dense": time_exponents(hip_cost, "dense_seconds"),
             "control": time_exponents(ctl_cost, "hip_seconds")}
    ev_c = mean_test(timed["hip"], threshold=c.quadratic_min, direction="<", what="random inputs",
                     name="HiP time exponent")
    pos_c = mean_test(timed["dense"], threshold=c.quadratic_min, direction=">", what="random inputs",
                      name="dense time exponent")
    ctl_c = mean_test(timed["control"], threshold=c.quadratic_min, direction="<", what="random inputs",
                      name=f"time exponent, mask_k = T/{p.cost.control_fraction}")
    for x in (ev_c, pos_c, ctl_c):
        x.timed = True
    Tmax = int(hip_cost["T"].max())
    at_max = hip_cost[hip_cost["T"] == Tmax]
    share_max = float((at_max.hip_scores / at_max.dense_scores).mean())
    Ts = sorted(int(t) for t in hip_cost["T"].unique())
    count_diff = [fit_exponent(d["T"], d.hip_scores) - tlogt_exponent(Ts, h.mask_k) for _, d in hip_cost.groupby("input")]
    claim_c = Claim(
        "c", f"HiP's time grows sub-quadratically in T (fitted exponent below {c.quadratic_min:g}).",
        "O(T log T) time for HiP, O(T^2) for dense attention",
        {"time_exponent_hip": float(np.mean(timed["hip"])), "time_exponent_dense": float(np.mean(timed["dense"])),
         "time_exponent_control": float(np.mean(timed["control"])), "T": Ts, "device": p.cost.device,
         "timing": f"fastest of {p.cost.timing_repeats} interleaved timings per input, "
                   + ("wall time" if p.cost.device == "cuda" else "CPU time of the calling thread")},
        f"least-squares slope of log time on log T over T in {Ts} (one head, random q, k; per input the fastest of "
        f"{p.cost.timing_repeats} timings, the arms interleaved in one process; "
        + ("wall time of the Triton kernels" if p.cost.device == "cuda" else
           "CPU time of the single-threaded CPU references, which other work on a shared machine does not inflate")
        + f") < quadratic_min = {c.quadratic_min}; "
        f"Student t 95% over {p.cost.repeats} random inputs. The T log T growth of HiP's work is a check (its counter), "
        "not a claim: timing on a CPU cannot tell T log T from T over a factor of 8 in T",
        ev_c,
        Control(f"the same tree search with a budget growing with the context (mask_k = T / {p.cost.control_fraction}, "
                f"T <= {p.cost.control_max_len}): exactly HiP's fixed key budget removed; the same criterion", ctl_c,
                kind="ablation"),
        threshold_source=convention(f"{c.quadratic_min}: halfway between linear (1) and quadratic (2) growth"),
        premise=[Premise.at_most(f"HiP prunes: its counted key products at T = {Tmax} over dense's", share_max,
                                 c.prune_share_max, what="prune_share_max")],
        positive_control=PositiveControl(
            f"the same timing fit on dense attention (kernels.attention, T <= {p.cost.dense_max_len}), quadratic by "
            "construction: its exponent must exceed the same threshold", pos_c),
        note=("the paper times its Triton kernels on a GPU; here the CPU references of the same algorithm are timed"
              if p.cost.device == "cpu" else ""))

    # (d) offloading (review hip_r8: the paper's headline decides): an LRU cache of log T size keeps the hit rate of
    # HiP's tree-search (mask-estimation) reads as T grows (review hip_r9: the sparse-attention reads, counted apart in
    # their own cache as the official runner's two hit ratios are, are reported, not decided; config.yaml says why).
    # Per seed, the least-squares slope of that hit rate on log2 T over the T where the cache holds at most
    # max_cache_share of the context, times log2(T_max / T_min) of those T (the fitted change across them), above
    # -hit_drop_tol; the ablation control removes attention locality (the same keys in shuffled block order). The
    # locality difference (model's keys minus shuffled, per T) is the mechanism, reported with its A/A and planted
    # controls; the working set's growth is a check (random reads of the same volume pass it too).
    o = p.offload
    cfg_off = dataclasses.replace(h, mask_k=o.mask_k)
    shares = {int(T): lru_capacity(int(T), cfg_off, o.lru_scale) * h.block_k / int(T) for T in dec["T"].unique()}
    small = sorted(T for T, s in shares.items() if s <= o.max_cache_share)
    per_seed = dec.groupby(["arm", "seed", "T"]).mean(numeric_only=True).reset_index()
    span = math.log2(small[-1] / small[0]) if len(small) >= 2 else float("nan")

    def hits(arm: str, T: int, col: str = DECIDING_HIT_RATE) -> np.ndarray:
        return per_seed[(per_seed.arm == arm) & (per_seed["T"] == T)].sort_values("seed")[col].to_numpy()

    def slopes(arm: str, col: str = DECIDING_HIT_RATE) -> list[float]:
        """Per seed, the least-squares slope of `arm`'s hit rate `col` on log2 T over the decided T (per doubling)."""
        d = per_seed[(per_seed.arm == arm) & per_seed["T"].isin(small)]
        return [float(np.polyfit(np.log2(g["T"].to_numpy(float)), g[col].to_numpy(), 1)[0])
                for _, g in d.groupby("seed")]

    def slope(arm: str, col: str = DECIDING_HIT_RATE) -> dict:
        s_ = slopes(arm, col)
        m, lo, hi = t_interval(s_) if len(s_) > 1 else (float("nan"),) * 3
        return {"per_doubling": m, "interval": [lo, hi]}

    def keeps(arm: str, what: str) -> Evidence | None:
        if len(small) < 2:
            return None
        return mean_test([x * span for x in slopes(arm)], threshold=-c.hit_drop_tol, direction=">",
                         what="seeds (each its own fitted slope)",
                         name=f"fitted change of the mask-estimation hit rate from T={small[0]} to T={small[-1]}, "
                              f"{what}")

    def locality(arm: str, reference: str) -> dict:
        out = {}
        for T in small:
            x = hits(arm, T) - hits(reference, T)
            m, lo, hi = t_interval(x) if len(x) > 1 else (float("nan"),) * 3
            out[str(T)] = {"difference": m, "interval": [lo, hi]}
        return out

    def per_t(arm: str, col: str) -> dict:
        """Per decided T: `arm`'s hit rate `col`, mean over seeds with its Student t 95% interval."""
        out = {}
        for T in small:
            m, lo, hi = t_interval(hits(arm, T, col)) if len(hits(arm, T, col)) > 1 else (float("nan"),) * 3
            out[str(T)] = {"mean": m, "interval": [lo, hi]}
        return out

    def frozen_diagnostic() -> dict:
        """Review hip_r10's diagnostic, reported beside (d), not deciding: per arm (HiP on the model's keys, on the
        shuffled keys, on the planted-locality decode) the mask-estimation hit rate per T and the fitted change over
        the decided T with the chunk bounds moving (as the decode runs) and frozen at the first decoded length (the arms
        ``<arm>_frozen``), and the part of the fall the moving bounds account for: per seed the frozen fitted change
        minus the moving one (paired: the same keys and queries), Student t 95% over seeds, and its share of the
        moving fall (mean over seeds of each)."""
        if len(small) < 2 or not (dec.arm == "hip_frozen").any():
            return {}
        out = {}
        for arm in ("hip", "shuffled", "planted"):
            moving = np.array(slopes(arm)) * span
            frozen = np.array(slopes(f"{arm}_frozen")) * span
            part = frozen - moving
            pm, plo, phi = t_interval(part)
            out[arm] = {"hit rate per T, moving bounds": per_t(arm, DECIDING_HIT_RATE),
                        "hit rate per T, frozen bounds": per_t(f"{arm}_frozen", DECIDING_HIT_RATE),
                        "fitted change, moving bounds": dict(zip(("mean", "low", "high"), t_interval(moving))),
                        "fitted change, frozen bounds": dict(zip(("mean", "low", "high"), t_interval(frozen))),
                        "fall the moving bounds account for (frozen - moving change)": {"mean": pm, "low": plo,
                                                                                        "high": phi},
                        "share of the moving fall": pm / -float(moving.mean()) if moving.mean() < 0 else float("nan")}
        return out

    ev_d = keeps("hip", "HiP on the model's keys")
    ctl_d = keeps("shuffled", "HiP on the same keys in shuffled block order")
    traced = dec[dec.arm.isin(("hip", "shuffled", "shuffled2", "planted", "planted_shuffled"))]
    agree = float(traced.mask_agreement.mean())
    trend = {arm: slope(arm) for arm in ("hip", "shuffled", "random", "planted")} if len(small) >= 2 else {}
    trend_share = {arm: slope(arm, CAPACITY_SHARE) for arm in ("hip", "shuffled", "random", "planted")} \
        if len(small) >= 2 else {}
    trend_sa = {arm: slope(arm, "sa_hit_rate") for arm in ("hip", "shuffled", "random", "planted")} \
        if len(small) >= 2 else {}
    both = {kind: {arm: per_t(arm, col) for arm in ("hip", "shuffled", "planted", "planted_shuffled")}
            for kind, col in (("mask estimation (decides)", DECIDING_HIT_RATE),
                              ("mask estimation, share of the re-reads the log T cache serves (reported)",
                               CAPACITY_SHARE),
                              ("mask estimation, unlimited cache's hit rate (reported)", "mask_unlimited_hit_rate"),
                              ("sparse attention (reported)", "sa_hit_rate"))}
    ws = []
    if len(small) >= 2:
        a_log = fit_exponent(small, [math.log2(T / o.mask_k) for T in small])
        d = per_seed[(per_seed.arm == "hip") & per_seed["T"].isin(small)]
        ws = [fit_exponent(g["T"], g.working_set_blocks) - a_log for _, g in d.groupby("seed")]
    claim_d = Claim(
        "d", "With KV-cache offloading, an LRU cache of log T size keeps the hit rate of HiP's tree-search (mask-"
             "estimation) reads as the context grows: over the contexts where the cache holds at most "
             f"{o.max_cache_share:g} of it, the fitted hit rate falls by less than {c.hit_drop_tol:g}.",
        "O(log T) tokens on the GPU while maintaining similar decoding throughput, with a high cache hit ratio, which "
        "attention locality makes possible (abstract, Sec. 3; no hit-ratio number sourced from the paper)",
        {"cache_share": {str(T): s for T, s in sorted(shares.items())}, "T_decided": small, "mask_k": o.mask_k,
         "mask_capacity_share": {arm: {str(T): float(hits(arm, T, CAPACITY_SHARE).mean()) for T in small}
                                 for arm in ("hip", "shuffled", "shuffled2", "random", "planted", "planted_shuffled")},
         "mask_hit_rate": {arm: {str(T): float(hits(arm, T).mean()) for T in small}
                           for arm in ("hip", "shuffled", "shuffled2", "random", "planted", "planted_shuffled")},
         "mask_unlimited_hit_rate": {arm: {str(T): float(hits(arm, T, "mask_unlimited_hit_rate").mean())
                                           for T in small}
                                     for arm in ("hip", "shuffled", "random", "planted")},
         "sa_hit_rate": {arm: {str(T): float(hits(arm, T, "sa_hit_rate").mean()) for T in small}
                         for arm in ("hip", "shuffled", "shuffled2", "random", "planted", "planted_shuffled")},
         "pooled_hit_rate": {arm: {str(T): float(hits(arm, T, "hit_rate").mean()) for T in small}
                             for arm in ("hip", "shuffled", "random", "planted")},
         "hit rate per T by kind of read, Student t 95% over seeds": both,
         "mask_hit_rate_slope_per_doubling_of_T": trend,
         "mask_capacity_share_slope_per_doubling_of_T": trend_share,
         "sa_hit_rate_slope_per_doubling_of_T": trend_sa,
         "locality (mechanism, reported): mask-estimation hit rate, model's - shuffled keys, Student t 95% over seeds":
             locality("hip", "shuffled"),
         "A/A null of the locality difference: shuffled - shuffled2": locality("shuffled", "shuffled2"),
         "planted locality: planted - planted_shuffled": locality("planted", "planted_shuffled"),
         "frozen chunk bounds (diagnostic, reported, not deciding; review hip_r10): mask-estimation hit rate with the "
         "search's chunk bounds frozen at the first decoded length against moving, Student t 95% over seeds":
             frozen_diagnostic()},
        f"decoding held-out text (the model running HiP at mask_k = {o.mask_k}, {o.windows} windows per seed drawn "
        f"with the seed, every pruned layer), at the T in the trained context where the log T cache holds at most "
        f"max_cache_share = {o.max_cache_share} of it ({small}): per seed, the least-squares slope of the hit rate of "
        "HiP's mask-estimation reads (the tree search's representatives, in the log T LRU; mean over windows, layers "
        f"and heads) on log2 T, times log2(T_max / T_min) = {span:.3f} (the fitted change over those T) > "
        f"-hit_drop_tol = -{c.hit_drop_tol}; Student t 95% over seeds. Reported, not deciding: an unlimited cache's "
        "hit rate on the same reads, and the share of its hits the log T cache keeps (tried as the deciding statistic "
        "and withdrawn after review hip_r13: its shuffled-keys ablation met the criterion). The paper's claim is "
        "that O(log T) tokens on "
        "the GPU keep serving HiP as T grows, and the O(log T) reads are the tree search's; the sparse-attention reads "
        "(the mask, every step, in their own cache of the mask's blocks, as the official runner's second hit ratio) "
        "read a fixed mask_k at every T and hit on the re-reads of a refresh interval by construction, so their hit "
        "rate is reported per T with intervals, not decided. The locality part (the mask-estimation hit rate on the "
        "model's keys minus on the same keys shuffled, per T) is reported with its A/A and planted controls",
        ev_d,
        Control("the same criterion on the same keys in shuffled block order (one permutation per window and layer, "
                "fixed while decoding): attention locality, the mechanism the paper credits, removed; the tree's "
                "structure and the queries kept", ctl_d, kind="ablation"),
        note="" if ev_d is not None else (
            f"not measured: fewer than two offload lengths where the log T cache holds at most max_cache_share = "
            f"{o.max_cache_share} of the context (shares " + ", ".join(f"{T}: {s:.0%}" for T, s in sorted(shares.items()))
            + ")"),
        threshold_source=convention(f"hit_drop_tol {c.hit_drop_tol}: a tenth of the reads over the tested contexts (as "
                                    "acc_tol and recall_margin); the paper states no hit-ratio number (the official "
                                    "runner's 0.8 and 0.99 are hit ratios its latency simulation takes as inputs); the "
                                    "earlier hit_rate_min (0.8, then 0.5) was tuned to a result and is removed; 0.1 was "
                                    "set when the earlier pooled fall (-0.13) was known, a choice that could only move "
                                    "the verdict against a pass"),
        premise=[Premise.at_least("the traced decoding search is HiP's own (share of refreshes, every traced arm, whose "
                                  "mask equals kernels.hip_select's)", agree, 1.0, what="every refresh")],
        # Can the analysis see a kept hit rate at all? The same criterion where the paper's mechanism is planted
        # (the lead's review of the hip_r8 fix): if the hit rate falls by more than the tolerance even there, the
        # fall belongs to the simulation (the cache's growth law against the reads of short decodes) and the
        # model's "does not hold" says nothing about the paper.
        positive_control=PositiveControl(
            "the same criterion on the planted-locality decode (one attention head per layer's shape with keys that "
            "vary slowly along the sequence and queries that stay alike while decoding, offload.planted_decode_qk): "
            "attention locality given by construction, the setting where the paper's log T cache should keep HiP's "
            "hit rate; it must hold, or the analysis cannot show a kept hit rate in this simulation",
            keeps("planted", "HiP on the planted-locality decode")) if ev_d is not None else None)

    checks = [
        Check.at_most("tlogt", "HiP's counted key products (the reference search's own counter plus the attended "
                               "keys) grow as T log2(T / mask_k): |fitted exponent - T log T's|, mean over inputs",
                      abs(float(np.mean(count_diff))), c.exponent_tol, what="exponent_tol"),
        Check.at_most("text_far", "ordinary held-out bytes (no records) need little far context: share of their loss "
                                  "that attention beyond sink + window removes", far_text.effect, c.far_share_min,
                      what="far_share_min (the far premise's threshold)"),
    ]
    if ws:
        checks.append(Check.at_most(
            "offload_working_set", f"the blocks HiP reads per refresh while decoding grow like log2(T / mask_k) over "
                                   f"T in {small}: working-set exponent minus log2(T / mask_k)'s, mean over seeds (random "
                                   "reads of the same volume pass it too, so it is a check of the setting)",
            float(np.mean(ws)), c.resident_exponent_tol, what="resident_exponent_tol"))
    return [claim_a, claim_b, claim_c, claim_d], checks
