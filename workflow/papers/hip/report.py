"""The hip report: the results table, four figures, the claims with computed verdicts, report.md."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from papers.common.claims import Claim, Control, Evidence, mean_test, paired_test, write_claims
from papers.common.io import read_json, read_parquet, write_json
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.report import write_report
from papers.common.tables import to_markdown, write_table
from papers.hip.evaluate import fit_exponent
from papers.hip.methods import METHODS
from papers.hip.params import SLUG, parse

TITLE = "P16 hip: HiP, hierarchically pruned attention, O(T log T) and training-free (Lee et al., ICLR 2025)"
LABEL = {"dense": "dense", "hip": "HiP", "oracle": "oracle top-k", "random": "random blocks",
         "window": "sink + window"}


def _tlogt_exponent(lengths, mask_k: int) -> float:
    """Local slope over the measured T of HiP's cost model T log2(T / mask_k) (tree depth x T)."""
    return fit_exponent(lengths, [T * math.log2(T / mask_k) for T in lengths])


def report(*, cfg, scale, text, locality, passkey, cost, offload, lm_history, passkey_history, benchmarks,
           table_md, table_csv, claims, params_json, report_md, fig_quality, fig_locality, fig_cost, fig_offload):
    p = parse(cfg)
    tm, pk = read_json(text), read_json(passkey)
    loc, cst, dec = read_parquet(locality), read_parquet(cost), read_parquet(offload)

    # ---- numbers behind the table and the claims
    ppl = {m: tm["ppl"][m]["ppl"] for m in METHODS}
    acc = {m: pk[m]["accuracy"] for m in METHODS}
    recall = tm["recall"]
    a_dense = fit_exponent(cst["T"], cst.dense_scores)
    a_hip = fit_exponent(cst["T"], cst.hip_scores)
    a_model = _tlogt_exponent(cst["T"].tolist(), p.hip.mask_k)
    timed = cst.dropna(subset=["dense_seconds"])
    a_dense_time = fit_exponent(timed["T"], timed.dense_seconds) if len(timed) >= 2 else float("nan")
    a_hip_time = fit_exponent(cst["T"], cst.hip_seconds)
    by_T = dec.groupby("T")[["hit_rate", "working_set_blocks", "capacity_blocks", "mask_agreement"]].mean()
    resident = by_T.working_set_blocks * p.hip.block_k  # tokens read per refresh interval, outside sink+window
    a_resident = fit_exponent(by_T.index, resident)

    # ---- table: quality by method, then cost and offloading against T
    budget = f"{p.hip.sink} + {p.hip.window} + {p.hip.mask_k} (+ block)"
    quality = pd.DataFrame([{
        "method": LABEL[m],
        "keys per query block": "all (causal)" if m == "dense" else budget,
        "text ppl": ppl[m], "NLL, 2nd half (nats/byte)": tm["ppl"][m]["nll_late"],
        "passkey accuracy": acc[m], "passkey digits": pk[m]["digit_accuracy"],
        "top-k recall": recall.get(m, 1.0 if m == "oracle" else float("nan")),
    } for m in METHODS])
    cost_md = cst.assign(ratio=cst.dense_scores / cst.hip_scores)[
        ["T", "dense_scores", "hip_select_scores", "hip_scores", "ratio"]].rename(columns={
            "dense_scores": "dense key scores", "hip_select_scores": "HiP tree-search scores",
            "hip_scores": "HiP key scores (search + attention)", "ratio": "dense / HiP"})
    off_md = pd.DataFrame({"T": by_T.index, "working set (tokens / refresh)": resident.to_numpy(),
                           "LRU capacity (tokens)": (by_T.capacity_blocks * p.hip.block_k).to_numpy(),
                           "hit rate": by_T.hit_rate.to_numpy(), "trace = hip_select": by_T.mask_agreement.to_numpy()})
    caption = (f"Byte-level models trained with dense attention (text: {p.lm.n_layer} layers, context "
               f"{p.lm_train.seq_len}; passkey: {p.passkey_model.n_layer} layers, context {p.passkey_train.seq_len}); "
               f"every pruned method keeps sink {p.hip.sink}, window {p.hip.window} and {p.hip.mask_k} more keys "
               f"(blocks of {p.hip.block_k}) per query block of {p.hip.block_q}; the first {p.hip.dense_layers} "
               f"layer(s) stay dense. Perplexity on {p.eval.text_windows} held-out windows; passkey accuracy over "
               f"{p.eval.passkey_samples} prompts.")
    long_rows = [{"section": "quality", "method": r["method"], "T": "", "metric": k, "value": r[k]}
                 for r in quality.to_dict("records") for k in quality.columns[2:]]
    long_rows += [{"section": "cost", "method": "", "T": int(r["T"]), "metric": k, "value": r[k]}
                  for r in cost_md.to_dict("records") for k in cost_md.columns[1:]]
    long_rows += [{"section": "offload", "method": "HiP", "T": int(r["T"]), "metric": k, "value": r[k]}
                  for r in off_md.to_dict("records") for k in off_md.columns[1:]]
    ablation = pd.DataFrame([{
        "method": f"{LABEL[m]}, first {d} layer(s) dense", "text ppl": tm["ppl"][f"{m}@dl{d}"]["ppl"],
        "passkey accuracy": pk[f"{m}@dl{d}"]["accuracy"], "passkey digits": pk[f"{m}@dl{d}"]["digit_accuracy"],
    } for d in p.eval.dense_layers_ablation for m in METHODS[1:]], columns=["method", "text ppl", "passkey accuracy",
                                                                           "passkey digits"])
    long_rows += [{"section": "dense layers ablation", "method": r["method"], "T": "", "metric": k, "value": r[k]}
                  for r in ablation.to_dict("records") for k in ablation.columns[1:]]
    write_table(quality, table_md, table_csv, caption=caption, csv_df=pd.DataFrame(long_rows))
    with open(table_md, "a") as f:
        if len(ablation):
            f.write("\nThe paper's dense-layer ablation: the pruned methods with their first layer(s) dense "
                    "(dense attention: text ppl {:.4g}, passkey {:.3g}).\n\n".format(ppl["dense"], acc["dense"])
                    + to_markdown(ablation))
        f.write(f"\nCost of one attention head against T (CPU references, head size {p.cost.head_dim}): "
                f"q.k products computed. Fitted exponents: dense {a_dense:.3f}, HiP {a_hip:.3f}; "
                f"T log2(T/mask_k) has {a_model:.3f} over the same T. A sanity check, not a claim: these are counts "
                f"(dense T^2 by definition, HiP's from the tree's depth), true by construction; claim (c) tests the "
                f"measured time (HiP ~ T^{a_hip_time:.2f}, dense ~ T^{a_dense_time:.2f}).\n\n" + to_markdown(cost_md))
        f.write(f"\nDecoding with an offloaded KV cache ({p.offload.decode_steps} steps before each T, mask refreshed "
                f"every {p.offload.refresh_interval} steps, LRU of s = {p.offload.lru_scale}): mean over pruned "
                f"layers, heads and {p.offload.windows} held-out windows.\n\n" + to_markdown(off_md))

    # ---- figures
    _quality_figure(fig_quality, ppl, acc, pk, read_parquet(lm_history), read_parquet(passkey_history))
    _locality_figure(fig_locality, loc)
    _cost_figure(fig_cost, cst, p.hip.mask_k, a_dense, a_hip, a_dense_time, a_hip_time)
    _offload_figure(fig_offload, by_T, p.hip.block_k, a_resident)

    # ---- claims (each decided by papers.common.claims from its evidence and its negative control)
    claims_list = hip_claims(p, tm, pk, loc, cst, dec)
    write_claims(claims_list, claims, paper=SLUG, scale=scale)
    write_json(to_dict(p), params_json)

    timing = (f"Timings of this run (noisy, shared CPU): dense reference time ~ T^{a_dense_time:.2f} "
              f"(T <= {p.cost.dense_max_len}), HiP reference time ~ T^{a_hip_time:.2f}; at T = {int(cst['T'].max())} "
              f"HiP took {float(cst.hip_seconds.iloc[-1]):.2f} s.")
    what = (
        f"Data: the King James Bible ({p.data.module}, Debian sword-text-kjv via diatheke) as UTF-8 bytes, the last "
        f"{p.data.val_fraction:.0%} held out. Models: byte-level GPTs with RoPE trained with dense attention "
        f"(AdamW, cosine schedule): a language model ({p.lm.n_layer} layers, {p.lm.n_head} heads, width {p.lm.n_embd}, "
        f"{p.lm_train.steps} steps of {p.lm_train.batch} x {p.lm_train.seq_len} bytes) and a passkey model "
        f"({p.passkey_model.n_layer} layers, {p.passkey_train.steps} steps; prompts of the official passkey format: a "
        f"five-digit key in repeated filler, then the question). Evaluation at the trained contexts with dense "
        f"attention (kernels.attention), HiP (kernels.hip_select + block_sparse_attention), the oracle top-k blocks "
        f"(kernels.oracle_select), random blocks and a sink + longer window, all at the same key budget. Cost: "
        f"key scores of one head for T in {list(p.cost.lengths)} with the CPU references. Offloading: decoding "
        f"the last {p.offload.decode_steps} positions before each T in {list(p.offload.lengths)} with the mask refreshed "
        f"every {p.offload.refresh_interval} steps, per head an LRU of s b log2(T_blocks / b + 1) blocks "
        f"(b = 2 mask_k / block_k, s = {p.offload.lru_scale}, the official simulation's budget). {timing} "
        f"Claims: every quantity comes from one trained model per task (seed {p.seed}) or one timing sweep; "
        "prompts, windows and layers are test items of that model, so each claim's interval over them is shown "
        "but counts as 1 independent replicate, and no claim can hold or fail before independently trained "
        "seeds exist (issue 19).")
    differences = (
        "The paper prunes LLaMA-2/3 and Gemma models (7-9B parameters) at 32k-1M tokens and measures PG19 and "
        "LongBench; we train tiny byte-level models on the KJV (no pretrained weights ship offline) and evaluate at "
        f"their trained context of {p.lm_train.seq_len} bytes, since RoPE does not extrapolate beyond it. HiP's "
        f"hyper-parameters are scaled down with the context (official block_q 64, block_k 2, mask_k 512, sink 16, "
        f"window 256, 3 dense layers of 32; ours block_q {p.hip.block_q}, block_k {p.hip.block_k}, mask_k "
        f"{p.hip.mask_k}, sink {p.hip.sink}, window {p.hip.window}, {p.hip.dense_layers} dense layer(s) of "
        f"{p.lm.n_layer} and {p.passkey_model.n_layer}). Training and evaluation use the kernels "
        "(kernels.attention runs PyTorch's fused attention on the CPU). The passkey prompt keeps the official filler and layout but is shortened for bytes: no chat "
        f"template, a short key sentence repeated {p.passkey.key_repeats} times (official: a long one, 5 times), and "
        "the key follows 'is: ' in the sentence and the question (a byte model cannot tell the question's 'is ' "
        "from the three in every filler sentence); the passkey model is trained on it. Cost is measured with the CPU references on random q, k (the counts do not "
        "depend on the data); the paper times its Triton kernels on GPUs. The offloading simulation replays "
        "teacher-forced held-out text rather than generated tokens, and uses a plain LRU (the official runner also "
        "prefetches). The full scale trains the same kind of model, larger, on a user-given long-document text on a "
        "GPU (Triton kernels); pruning a pretrained LLM loaded from a path is not implemented (no model library "
        "ships in this environment).")
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[fig_quality, fig_locality, fig_cost, fig_offload], claims=claims_list,
                 benchmarks=benchmarks, differences=differences)


# ---- claims --------------------------------------------------------------------------------------
# Every quantity below comes from ONE trained model per task (seed `p.seed`): prompts, text windows,
# layers and heads are test items of that model, not independent replicates. Their interval is shown
# (it says how far the point estimate is from the threshold within this model), but the evidence
# counts 1 replicate, so no claim can hold or fail until issue 19 adds independently trained seeds.
def _one_model(e: Evidence, items: str) -> Evidence:
    """`e` computed over test items of one trained model, recorded as the 1 replicate it is."""
    return dataclasses.replace(e, replicates=1, method=f"{e.method}; the {items} are test items of one trained "
                                                       "model, so 1 independent replicate")


def _point(value: float, threshold: float, direction: str, name: str, what: str, timed: bool = False) -> Evidence:
    """A single number of one trained model or one sweep (no per-item values stored): no interval."""
    return Evidence(value, (value, value), 1, f"{what}: one value, no interval (1 replicate)", threshold,
                    direction, name, timed)


def _lag1_items(loc: pd.DataFrame, keys: str) -> pd.Series:
    """Lag-1 score autocorrelation per (window, layer) of the pruned layers, for `keys` (model | shuffled keys)."""
    g = loc[(loc.lag == 1) & (loc["keys"] == keys)]
    return g.groupby(["window", "layer"]).autocorr.mean()


def _item_exponents(dec: pd.DataFrame, column: str) -> np.ndarray:
    """Fitted exponent of `column` against T for each (window, layer) of the offload simulation."""
    out = []
    for _, g in dec.groupby(["window", "layer"]):
        g = g.groupby("T")[column].mean()
        ok = g > 0
        out.append(fit_exponent(g.index[ok], g[ok]) if int(ok.sum()) >= 2 else float("nan"))
    return np.asarray(out, float)


def hip_claims(p, tm: dict, pk: dict, loc: pd.DataFrame, cst: pd.DataFrame, dec: pd.DataFrame) -> list[Claim]:
    """The paper's claims (a)-(d) and locality, decided on evidence with intervals, each with a control.

    `tm`, `pk`: evaluate/text.json and evaluate/passkey.json; `loc`, `cst`, `dec`: the locality,
    cost and offload tables. Thresholds: ``p.claims`` (config, fixed before the run).
    """
    c, h = p.claims, p.hip
    ppl = {m: tm["ppl"][m]["ppl"] for m in METHODS}
    acc = {m: pk[m]["accuracy"] for m in METHODS}
    correct = {m: np.asarray(pk[m]["correct"], float) for m in METHODS}  # per prompt, the same prompts for all
    excess = {m: ppl[m] / ppl["dense"] - 1 for m in METHODS}
    n_prompts, n_windows = len(correct["dense"]), p.eval.text_windows
    one = f"one trained model (seed {p.seed})"

    # (a) close to dense and ahead of the baselines; the control puts random blocks in HiP's place
    def quality(arm: str, baselines) -> list[Evidence]:
        ev = [_point(excess[arm], c.ppl_rel_tol, "<", f"{LABEL[arm]} ppl / dense ppl - 1",
                     f"held-out perplexity over {n_windows} windows of {one}"),
              _one_model(paired_test(correct["dense"], correct[arm], threshold=c.passkey_tol, direction="<",
                                     name=f"passkey acc dense - {LABEL[arm]}", what="prompts"), "prompts")]
        for b in baselines:
            ev += [_point(excess[arm] - c.ahead_fraction * excess[b], 0.0, "<",
                          f"excess ppl {LABEL[arm]} - {c.ahead_fraction} x {LABEL[b]}'s",
                          f"held-out perplexity over {n_windows} windows of {one}"),
                   _one_model(paired_test(correct[arm], correct[b], threshold=c.passkey_margin, direction=">",
                                          name=f"passkey acc {LABEL[arm]} - {LABEL[b]}", what="prompts"), "prompts")]
        return ev

    ev_a, ctl_a = quality("hip", ("random", "window")), quality("random", ("window",))
    spread = max(excess.values()) - min(excess.values())
    note_a = [f"rests on {one} per task: the {n_prompts} passkey prompts and {n_windows} text windows are test items, "
              "not replicates (issue 19 adds seeds)"]
    if spread < c.ppl_rel_tol:
        note_a.append(f"all methods' perplexities lie within {spread:.2%} of each other, inside the tolerance itself: "
                      "the model uses little context beyond the window, so text perplexity barely separates the "
                      "methods, and without per-window NLL (not stored) nor seeds the run cannot tell such "
                      "differences from noise")
    note_a.append(f"point estimates: HiP ppl {excess['hip']:+.2%}, passkey {acc['hip']:.3f} (dense {acc['dense']:.3f}, "
                  f"oracle top-k {acc['oracle']:.3f}, random {acc['random']:.3f}, window {acc['window']:.3f})")
    for d in p.eval.dense_layers_ablation:
        if f"hip@dl{d}" in pk:
            note_a.append(f"with the first {d} layer(s) dense, passkey: HiP {pk[f'hip@dl{d}']['accuracy']:.3f}, random "
                          f"{pk[f'random@dl{d}']['accuracy']:.3f}, window {pk[f'window@dl{d}']['accuracy']:.3f}")

    # (b) top-k recall against random pruning, paired over the same (window, layer) q, k
    rec = tm["recall_per_layer"]
    ev_b = _one_model(paired_test(rec["hip"], rec["random"], threshold=c.recall_margin, direction=">",
                                  what="(window, pruned layer) pairs"), "(window, layer) pairs")

    # (c) measured time against T; the counts of q.k products follow T log T by construction (report only)
    timed = cst.dropna(subset=["dense_seconds"])
    T_all, T_dense = [int(t) for t in cst["T"]], [int(t) for t in timed["T"]]
    a_hip_time = fit_exponent(cst["T"], cst.hip_seconds)
    a_dense_time = fit_exponent(timed["T"], timed.dense_seconds) if len(timed) >= 2 else float("nan")
    a_model = _tlogt_exponent(T_all, h.mask_k)
    a_model_dense_T = _tlogt_exponent(T_dense, h.mask_k) if len(T_dense) >= 2 else float("nan")
    where = "Triton kernels" if p.cost.device == "cuda" else "CPU references"
    sweep = f"one timing sweep of the {where} (one input per T, median of {p.cost.repeats} timing(s))"
    ev_c = [_point(abs(a_hip_time - a_model), c.exponent_tol, "<", "|HiP time exponent - T log T's|", sweep, True),
            _point(abs(a_dense_time - 2), c.dense_exponent_tol, "<", "|dense time exponent - 2|", sweep, True)]
    ctl_c = [_point(abs(a_dense_time - a_model_dense_T), c.exponent_tol, "<", "|dense time exponent - T log T's|",
                    sweep, True),
             _point(abs(a_hip_time - 2), c.dense_exponent_tol, "<", "|HiP time exponent - 2|", sweep, True)]

    # (d) offloading: working-set exponent against log T's, and the LRU hit rate at every T of the run
    by_T = dec.groupby("T")[["hit_rate", "working_set_blocks", "capacity_blocks"]].mean()
    Ts = [int(t) for t in by_T.index]
    a_log = fit_exponent(Ts, [math.log2(T / h.mask_k) for T in Ts])
    ws_exp = _item_exponents(dec, "working_set_blocks")
    items_d = "(window, pruned layer) pairs"
    ev_d = [_one_model(mean_test(ws_exp - a_log, threshold=c.resident_exponent_tol, direction="<",
                                 name="working-set exponent - log2(T/mask_k)'s", what=items_d), items_d)]
    for T in Ts:
        hits = dec[dec["T"] == T].groupby(["window", "layer"]).hit_rate.mean()
        ev_d.append(_one_model(mean_test(hits, threshold=c.hit_rate_min, direction=">", name=f"LRU hit rate at T = {T}",
                                         what=items_d), items_d))
    full = [T for T in Ts if float(by_T.capacity_blocks[T]) * h.block_k >= T]
    note_d = (f"rests on {one}: the held-out windows and layers are test items; T only reaches the trained context "
              f"({max(Ts)} bytes, {max(Ts) // h.mask_k} x mask_k; the paper: 32k-1M tokens, 64-2000 x mask_k), where "
              f"the log-sized LRU still holds {float(by_T.capacity_blocks.iloc[-1]) * h.block_k / Ts[-1]:.0%} of the "
              f"context at the largest T" + (f" and all of it at T = {', '.join(map(str, full))} (there a high hit "
                                             "rate is nearly guaranteed)" if full else "")
              + "; at the smallest T the tree search still reads most of its search range, which steepens the exponent")

    # locality: lag-1 score autocorrelation, against the same statistic on a shuffled key order
    model_items, shuffled_items = _lag1_items(loc, "model"), _lag1_items(loc, "shuffled keys")
    shuffled_items = shuffled_items.reindex(model_items.index)
    items_l = "(window, pruned layer) pairs"
    ev_l = [_one_model(mean_test(model_items, threshold=c.locality_min, direction=">", name="lag-1 autocorrelation",
                                 what=items_l), items_l),
            _one_model(paired_test(model_items.to_numpy(), shuffled_items.to_numpy(), threshold=c.locality_margin,
                                   direction=">", name="model - shuffled keys", what=items_l), items_l)]
    ctl_l = _one_model(mean_test(shuffled_items, threshold=c.locality_min, direction=">",
                                 name="lag-1 autocorrelation, shuffled keys", what=items_l), items_l)
    by_layer = model_items.groupby(level="layer").mean()

    return [
        Claim("a", "HiP's perplexity and passkey accuracy stay close to dense attention and clearly ahead of "
                   "random block pruning and of a sink + sliding window at the same key budget.",
              "LLaMA-2/3: HiP within a few % of dense perplexity and passkey accuracy, ahead of StreamingLLM and "
              "other training-free baselines at equal budgets",
              {"ppl": ppl, "passkey_accuracy": acc, "ppl_excess_over_dense": excess},
              f"all of: ppl_hip / ppl_dense - 1 < ppl_rel_tol = {c.ppl_rel_tol}; passkey accuracy dense - HiP < "
              f"passkey_tol = {c.passkey_tol} (paired over the same prompts); for b in (random blocks, sink + window): "
              f"excess ppl of HiP - {c.ahead_fraction} (ahead_fraction) x b's < 0, and passkey accuracy HiP - b > "
              f"passkey_margin = {c.passkey_margin}. Tolerances from the config (the paper's 'within a few %', fixed "
              "before the run); 95% intervals; perplexity has no interval (per-window NLL is not stored)",
              ev_a,
              Control("random blocks in HiP's place (the same budget, no tree search): the same tolerances to dense "
                      "and the same margins over the sink + window", ctl_a,
                      measured={"ppl_excess": excess["random"], "passkey_accuracy": acc["random"]}),
              note="; ".join(note_a)),
        Claim("b", "HiP's top-k recall beats random block pruning (the paper's guarantee).",
              "HiP's expected recall of the top-k keys is at least random pruning's, under attention locality",
              {"recall_hip": tm["recall"]["hip"], "recall_random": tm["recall"]["random"]},
              f"the paired 95% interval of recall_hip - recall_random (the same q, k per window and pruned layer) "
              f"lies above recall_margin = {c.recall_margin} (config, fixed before the run)",
              ev_b,
              Control("not run yet: issue 19 redesigns this experiment with HiP's recall on a shuffled key order "
                      "(attention locality, the mechanism the guarantee needs, absent) under the same criterion"),
              note=f"rests on {one}: windows and layers are test items, not replicates"),
        Claim("c", "HiP's time grows as T log T, dense attention's as T^2.",
              "O(T log T) time for HiP, O(T^2) for dense attention",
              {"time_exponent_hip": a_hip_time, "tlogt_exponent": a_model, "time_exponent_dense": a_dense_time,
               "T": T_all, "T_dense_timed": T_dense, "device": p.cost.device},
              f"measured wall time ~ T^a ({where}, one head of size {p.cost.head_dim}): |a_hip - a(T log2(T/mask_k))| "
              f"< exponent_tol = {c.exponent_tol} over T = {T_all}, and |a_dense - 2| < dense_exponent_tol = "
              f"{c.dense_exponent_tol} over T = {T_dense} (config tolerances, fixed before the run). The counts of "
              "q.k products are not the test: they follow the tree's depth by construction (a sanity check in the "
              "report)",
              ev_c,
              Control("the arms swapped (no pruning where the claim expects it): dense attention's time tested "
                      "against T log T over its timed T, and HiP's against T^2, with the same tolerances", ctl_c),
              note=f"rests on {sweep}, 1 replicate; shared-CPU timings are noisy"
                   + ("" if p.cost.device == "cuda" else "; the paper times its Triton kernels on a GPU, here the CPU "
                      "references of the same algorithm are timed")),
        Claim("d", "With KV-cache offloading, the tokens that must be resident grow like log T and an LRU "
                   "of log T size serves reads at a high hit rate.",
              "O(log T) tokens on the GPU with a high cache hit ratio",
              {"resident_exponent": float(np.nanmean(ws_exp)), "log_model_exponent": a_log,
               "min_hit_rate": float(by_T.hit_rate.min()), "T": Ts},
              f"all of: the mean over {items_d} of the working-set exponent (working set ~ T^p) minus that of "
              f"log2(T/mask_k) over the same T ({a_log:.3f}) < resident_exponent_tol = {c.resident_exponent_tol} (a "
              f"full cache has p = 1), and the LRU hit rate > hit_rate_min = {c.hit_rate_min} at every T of the run "
              f"({Ts}); config tolerances fixed before the run; 95% t intervals",
              ev_d,
              Control("not run yet: issue 19 redesigns this experiment with the offload simulation at T >= 64 x mask_k "
                      "and a mechanism-absent arm under the same criterion (random blocks at the same budget, whose "
                      "reads have no locality for the LRU to reuse)"),
              note=note_d),
        Claim("locality", "Attention locality: neighbouring keys have similar scores in the trained model.",
              "attention scores of nearby tokens are similar (the observation behind the tree search)",
              {"lag1_model": float(model_items.mean()), "lag1_shuffled": float(shuffled_items.mean()),
               "lag1_by_layer": {int(k): float(v) for k, v in by_layer.items()}},
              f"mean lag-1 autocorrelation of q.k over the keys (pruned layers) > locality_min = {c.locality_min}, and "
              f"its paired lead over the same queries with the key order shuffled > locality_margin = "
              f"{c.locality_margin} (config, fixed before the run); 95% t intervals over {items_l}",
              ev_l,
              Control("the key order shuffled (locality destroyed, the same queries and statistic): its lag-1 "
                      f"autocorrelation > locality_min = {c.locality_min}", ctl_l),
              note=(f"rests on {one}: windows and layers are test items, not replicates; a Pearson correlation over all "
                    "keys is dominated by the bulk of low scores, not the peaks the tree search needs (issue 19); by "
                    "layer: " + ", ".join(f"layer {layer} {v:.2f}" for layer, v in by_layer.items()))),
    ]


# ---- figures ---------------------------------------------------------------------------------------
def _quality_figure(path, ppl, acc, pk, lm_hist, pk_hist):
    fig, axes = subplots(1, 4, width=3.6, height=3.2)
    names = [LABEL[m] for m in METHODS]
    axes[0, 0].bar(names, [ppl[m] for m in METHODS], color="tab:blue")
    axes[0, 0].set_ylim(min(ppl.values()) * 0.98, max(ppl.values()) * 1.02)
    axes[0, 0].set_ylabel("held-out perplexity (bytes)")
    axes[0, 1].bar(names, [acc[m] for m in METHODS], color="tab:green")
    axes[0, 1].set_ylabel("passkey accuracy")
    for ax in axes[0, :2]:
        ax.tick_params(axis="x", rotation=45, labelsize=7)
    depth = np.asarray(pk["key_depth"])
    bins = np.linspace(0, 1, 6)
    idx = np.clip(np.digitize(depth, bins) - 1, 0, len(bins) - 2)
    for m in METHODS:
        ok = np.asarray(pk[m]["correct"], float)
        axes[0, 2].plot((bins[:-1] + bins[1:]) / 2, [ok[idx == i].mean() if (idx == i).any() else np.nan
                                                      for i in range(len(bins) - 1)], "o-", label=LABEL[m])
    axes[0, 2].set_xlabel("key position / prompt length")
    axes[0, 2].set_ylabel("passkey accuracy")
    axes[0, 2].legend(fontsize=6)
    for hist, name in ((lm_hist, "language model"), (pk_hist, "passkey model")):
        axes[0, 3].plot(hist.step, hist.loss.rolling(10, min_periods=1).mean(), label=name)
    axes[0, 3].set_xlabel("step")
    axes[0, 3].set_ylabel("training loss (nats/byte)")
    axes[0, 3].legend(fontsize=7)
    savefig(fig, path)


def _locality_figure(path, loc):
    fig, axes = subplots(1, 1, width=5.0, height=3.4)
    ax = axes[0, 0]
    for (layer, keys), g in loc.groupby(["layer", "keys"]):
        m = g.groupby("lag").autocorr.mean()
        ax.plot(m.index, m.values, ls="-" if keys == "model" else ":", label=f"layer {layer}, {keys}")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("key distance (lag)")
    ax.set_ylabel("autocorrelation of q.k over keys")
    ax.set_title("Attention locality")
    ax.legend(fontsize=6)
    savefig(fig, path)


def _cost_figure(path, cst, mask_k, a_dense, a_hip, a_dense_time, a_hip_time):
    fig, axes = subplots(1, 2, width=4.4, height=3.4)
    T = cst["T"].to_numpy(float)
    ax = axes[0, 0]
    ax.loglog(T, cst.dense_scores, "o-", label=f"dense (a = {a_dense:.2f})")
    ax.loglog(T, cst.hip_scores, "s-", label=f"HiP (a = {a_hip:.2f})")
    model = T * np.log2(T / mask_k)
    ax.loglog(T, model * cst.hip_scores.iloc[-1] / model[-1], "k:", label="T log2(T/mask_k), scaled")
    ax.set_xlabel("T")
    ax.set_ylabel("q.k products")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    timed = cst.dropna(subset=["dense_seconds"])
    ax.loglog(timed["T"], timed.dense_seconds, "o-", label=f"dense reference (a = {a_dense_time:.2f})")
    ax.loglog(T, cst.hip_seconds, "s-", label=f"HiP reference (a = {a_hip_time:.2f})")
    ax.set_xlabel("T")
    ax.set_ylabel("seconds (this run)")
    for ax in axes[0]:
        ax.set_xscale("log", base=2)
    ax.legend(fontsize=7)
    savefig(fig, path)


def _offload_figure(path, by_T, block_k, a_resident):
    fig, axes = subplots(1, 2, width=4.4, height=3.4)
    T = by_T.index.to_numpy(float)
    ax = axes[0, 0]
    ax.semilogx(T, by_T.working_set_blocks * block_k, "o-", base=2, label=f"working set (~T^{a_resident:.2f})")
    ax.semilogx(T, by_T.capacity_blocks * block_k, "s--", base=2, label="LRU capacity")
    ax.semilogx(T, T, "k:", base=2, label="full cache (T)")
    ax.set_xlabel("context T")
    ax.set_ylabel("tokens per head")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    ax.semilogx(T, by_T.hit_rate, "o-", base=2)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("context T")
    ax.set_ylabel("LRU hit rate")
    savefig(fig, path)
