"""The deepgate4 report stage: tables, figures, claims and the paper's section of the summary."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from papers.common.claims import (
    LEVEL,
    Check,
    Claim,
    Control,
    Evidence,
    PositiveControl,
    Premise,
    Scope,
    convention,
    derived,
    mean_test,
    write_claims,
)
from papers.common.io import read_json, read_parquet, read_parquets, write_json
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.report import job_times, write_report
from papers.common.tables import mean_std, to_markdown, write_table
from papers.deepgate4.params import SLUG, parse

TITLE = "P5 deepgate4: DeepGate4: scalable graph transformer for circuits"
TASKS = {"prob": "Prob (signal probability L1)", "tt": "TTDis (truth-table distance L1)"}
# The paper's overall figure: the sum of the task errors (its "Overall" column), reduced relative to the
# next-best model's overall error; here the sum of our two tasks' pooled L1 errors.
OVERALL = "overall"
PAPER_IMPROVEMENT = {"ITC99": 15.5, "EPFL": 31.1}  # the paper's abstract: over the next-best model
# The paper's baselines that config/full.yaml trains; the default scale may leave the weaker ones out.
PAPER_BASELINES = ("deepgate2", "gat", "plain_gt")
PAPER_FUSED = {"runtime": 35.1, "memory": 46.8}  # the paper's abstract: Fused-DeepGate4 reductions
PAPER_HIDDEN, PAPER_LAYERS, PAPER_EPOCHS = 128, 12, 200  # official src/config.py, run/train_large.sh


def size_text(p) -> str:
    """The model and training size of this scale against the paper's, in words (the same function at every scale)."""
    layers = sorted({a["layers"] for a in p.arms.values() if a.get("kind") == "circuit" and a["layers"]})
    official = p.model.hidden >= PAPER_HIDDEN and layers and min(layers) >= PAPER_LAYERS and p.train.epochs >= PAPER_EPOCHS
    if official:
        return (f"at the paper's model size (hidden {p.model.hidden}, {max(layers)} refinement layers, up to "
                f"{p.train.epochs} epochs)")
    return (f"at a reduced size (hidden {p.model.hidden}, the paper's {PAPER_HIDDEN}; "
            f"{'/'.join(map(str, layers)) or 0} refinement layers, the paper's {PAPER_LAYERS}; at most "
            f"{p.train.epochs} epochs, the paper's {PAPER_EPOCHS})")


def scope(p) -> Scope:
    return Scope("analogue", "the paper's models (DeepGate2, GAT, a plain graph transformer, DeepGate4 with its "
                 f"partitioned update and sparse attention) and its two gate-level tasks, {size_text(p)}, on real "
                 "ISCAS, ITC-99 and EPFL netlists (circuitgraph) and generated arithmetic circuits; the training set, "
                 "the shared epoch schedule (each run stopped once its validation error is flat) and the held-out "
                 "circuits stand in for the paper's large-circuit data sets")


def fit_exponent(sizes, values) -> tuple[float, float]:
    """Least-squares fit of log(value) = a log(size) + b; returns (a, b), NaN where a value is not positive (an
    allocator that reported nothing, as under the CUDA probe)."""
    if not (np.asarray(values, float) > 0).all():
        return float("nan"), float("nan")
    a, b = np.polyfit(np.log(np.asarray(sizes, float)), np.log(np.asarray(values, float)), 1)
    return float(a), float(b)


def errors(metrics: pd.DataFrame) -> pd.DataFrame:
    """Pooled errors per arm, seed and family: sum of absolute errors over gates (pairs) / count,
    and the overall error, their sum (the paper's overall figure)."""
    g = metrics.groupby(["arm", "seed", "family"], sort=False)[["prob_err_sum", "gates", "tt_err_sum", "pairs"]].sum()
    out = pd.DataFrame({"prob": g.prob_err_sum / g.gates, "tt": g.tt_err_sum / g.pairs.where(g.pairs > 0)})
    out[OVERALL] = out.prob + out.tt
    return out.reset_index()


def improvements(err: pd.DataFrame, method: str, exclude=()) -> dict:
    """Relative error reduction (%) of the method over the best baseline (the arms but the method
    and `exclude`), per family and metric (each task and the overall error), on seed means; the
    next-best baseline is picked per metric by its seed-mean error, as the paper picks it."""
    means = err.groupby(["arm", "family"], sort=False)[[*TASKS, OVERALL]].mean()
    out = {}
    for fam in err.family.unique():
        for task in (*TASKS, OVERALL):
            base = means.xs(fam, level="family")[task].drop([method, *exclude], errors="ignore")
            best_arm = base.idxmin()
            imp = 100 * (base[best_arm] - means.loc[(method, fam), task]) / base[best_arm]
            out[f"{fam} {task}"] = float(imp)
            out[f"{fam} {task} next-best"] = best_arm
    return out


def report(*, cfg, scale, circuits, metrics, consistency, histories, memory, kernel, benchmarks,
           table_md, table_csv, claims, params_json, report_md, verdicts, fig_errors, fig_memory, fig_training,
           time_budget=None):
    """`time_budget`: this scale's budget of summed job seconds for deepgate4 (config time_budget), for the line
    on what would decide claim (a)."""
    p = parse(cfg)
    info = read_parquet(circuits)
    err = errors(read_parquet(metrics))
    arms = list(p.arms)
    families = list(p.data.test)
    imp = improvements(err, p.method, exclude=[p.control] if p.control else [])
    metrics_cols = (*TASKS, OVERALL)

    # --- table 1: held-out errors, mean +- std over seeds
    rows, csv_rows = [], []
    for arm in arms:
        row = {"model": arm + (" (control)" if arm == p.control else "")}
        for fam in families:
            e = err[(err.arm == arm) & (err.family == fam)]
            for task in metrics_cols:
                row[f"{fam} {task}"] = mean_std(e[task], 3)
                csv_rows.append({"table": "errors", "row": arm, "column": f"{fam}/{task}_l1",
                                 "mean": e[task].mean(), "std": e[task].std(ddof=1) if len(e) > 1 else 0.0})
        rows.append(row)
    imp_row = {"model": f"{p.method}: error reduction over the next-best (%)"}
    paper_row = {"model": "paper: improvement over the next-best (%)"}
    for fam in families:
        for task in metrics_cols:
            imp_row[f"{fam} {task}"] = f"{imp[f'{fam} {task}']:.1f} (vs {imp[f'{fam} {task} next-best']})"
            csv_rows.append({"table": "improvement", "row": p.method, "column": f"{fam}/{task}",
                             "mean": imp[f"{fam} {task}"], "std": 0.0})
            paper_row[f"{fam} {task}"] = (f"{PAPER_IMPROVEMENT[fam]}" if fam in PAPER_IMPROVEMENT and task == OVERALL
                                          else "")
    rows += [imp_row, paper_row]
    errors_md = pd.DataFrame(rows)

    # --- table 2: peak memory of a forward pass against size
    mem_all = read_parquet(memory)
    mem = mem_all[mem_all["mode"].isin(["full", "partitioned"])]
    piv = mem_all.pivot_table(index=["circuit", "nodes"], columns="mode", values="peak_bytes").reset_index()
    piv = piv.sort_values(["nodes", "circuit"])
    hist = mem[mem["mode"] == "partitioned"].set_index("circuit").history_bytes
    mem_md = pd.DataFrame({"circuit": piv.circuit, "nodes": piv.nodes,
                           "full graph (MB)": piv["full"] / 2**20, "partitioned (MB)": piv["partitioned"] / 2**20,
                           "history table, host (MB)": piv.circuit.map(hist) / 2**20})
    for r in mem_md.itertuples(index=False):
        csv_rows += [{"table": "memory", "row": r.circuit, "column": c, "mean": v, "std": 0.0}
                     for c, v in (("nodes", r.nodes), ("full_peak_mb", r[2]), ("partitioned_peak_mb", r[3]),
                                  ("history_mb", r[4]))]
    a_full, b_full = fit_exponent(piv.nodes, piv["full"])
    a_part, b_part = fit_exponent(piv.nodes, piv["partitioned"])
    csv_rows += [{"table": "memory", "row": "fitted exponent", "column": "full", "mean": a_full, "std": 0.0},
                 {"table": "memory", "row": "fitted exponent", "column": "partitioned", "mean": a_part, "std": 0.0}]

    # --- table 3: per held-out circuit (seed means), what the pooled family errors are made of
    met = read_parquet(metrics)
    met = met.assign(prob=met.prob_err_sum / met.gates, tt=met.tt_err_sum / met.pairs.where(met.pairs > 0))
    per = met.groupby(["family", "circuit", "arm"], sort=False)[["prob", "tt", "gates", "pairs"]].mean()
    circ_rows = []
    for (fam, circ), g in per.groupby(level=["family", "circuit"], sort=False):
        g = g.droplevel(["family", "circuit"])
        row = {"circuit": circ, "family": fam, "gates": int(g.gates.iloc[0]), "pairs": int(g.pairs.iloc[0])}
        for task in TASKS:
            for arm in arms:
                row[f"{task} {arm}"] = g.loc[arm, task]
                csv_rows.append({"table": "per_circuit", "row": circ, "column": f"{arm}/{task}_l1",
                                 "mean": g.loc[arm, task], "std": 0.0})
        circ_rows.append(row)
    circ_md = pd.DataFrame(circ_rows)

    # --- table 4: the training budgets (same epoch schedule, stopped when flat), convergence, CPU and wall time
    hist_df = read_parquets(histories)
    last = hist_df.sort_values("epoch").groupby(["arm", "seed"]).last().reset_index()
    budget_rows = []
    for arm in arms:
        h = last[last.arm == arm]
        budget_rows.append({"model": arm, "epochs run": mean_std(h.epoch, 3), "best epoch (kept)": mean_std(h.best_epoch, 3),
                            "optimiser steps": mean_std(h.step, 3),
                            "converged": f"{int(h.converged.sum())} of {len(h)}",
                            "final spread (%)": mean_std(100 * h.final_spread, 3),
                            "final lr": mean_std(h.lr, 3),
                            "training CPU (s)": mean_std(h.train_cpu_seconds, 3),
                            "validation CPU (s)": mean_std(h.val_cpu_seconds, 3),
                            "training wall (s)": mean_std(h.train_seconds, 3)})
        csv_rows += [{"table": "budget", "row": arm, "column": c, "mean": float(h[c].mean()),
                      "std": float(h[c].std(ddof=1)) if len(h) > 1 else 0.0}
                     for c in ("epoch", "best_epoch", "step", "converged", "train_cpu_seconds")]
    budget_md = pd.DataFrame(budget_rows)

    seeds = sorted(err.seed.unique())
    caption = (f"Held-out errors (lower is better), mean +- std over {len(seeds)} seed(s); L1 of the signal "
               f"probability over every AND/NOT gate and of the truth-table distance over the sampled pairs, "
               f"pooled per family, and the overall error, their sum. The paper reports the overall improvement of "
               f"DeepGate4 over the next-best model (its overall column); the per-task reductions are beside it. "
               f"{p.control} is claim (a)'s negative control, not a baseline.")
    write_table(errors_md, table_md, table_csv, caption=caption, csv_df=pd.DataFrame(csv_rows))
    planted = {k: fit_exponent(piv.nodes, piv[f"planted_{k}"])[0] for k in ("linear", "constant")
               if f"planted_{k}" in piv}
    mem_caption = (f"Peak activation memory of one forward pass (autograd on) of the {p.method} model "
                   f"(hidden {p.scaling.hidden}, {p.scaling.layers} refinement layers), full graph against the "
                   f"partitioned update ({p.scaling.areas_per_batch} areas per mini-batch); fitted exponents of "
                   f"peak ~ N^a: full {a_full:.2f}, partitioned {a_part:.2f}"
                   + (f"; the positive control's planted peaks: linear {planted['linear']:.2f}, constant "
                      f"{planted['constant']:.2f}" if len(planted) == 2 else "") + ".")
    circ_caption = ("Per held-out circuit (seed means): L1 errors of every model; the family values above pool "
                    "the gates (pairs) of these circuits, so large circuits weigh most.")
    budget_caption = (f"Training budgets: every arm the same schedule, at most {p.train.epochs} epochs over the same "
                      f"training circuits (one optimiser step per "
                      + ("circuit" if p.train.full_graph_batch_nodes == 1 else
                         f"circuit union of at most {p.train.full_graph_batch_nodes} nodes")
                      + f" for the full-graph arms, one per mini-batch of areas for the partitioned update), validation "
                      f"after every epoch on {', '.join(p.data.val)}, learning rate x {p.train.lr_decay:g} after "
                      f"{p.train.patience} epochs without a new best, stopped once flat, weights of the best epoch after the first lowering of the rate kept; converged = "
                      f"flat = the last {p.train.flat_window} validation errors within flat_tol = "
                      f"{100 * p.train.flat_tol:g}% of their minimum after the rate was lowered at least once (final "
                      f"spread: (max - min) / min of those errors). CPU seconds of the training process (mean +- std "
                      f"over seeds); the wall time beside them is inflated by the load of the shared machine.")
    with open(table_md, "a") as f:
        f.write("\n" + budget_caption + "\n\n" + to_markdown(budget_md))
        f.write("\n" + circ_caption + "\n\n" + to_markdown(circ_md))
        f.write("\n" + mem_caption + "\n\n" + to_markdown(mem_md))

    # --- figures
    fig, axes = subplots(1, len(families) * len(metrics_cols), width=3.4, height=3.2)
    for i, (fam, task) in enumerate((f, t) for f in families for t in metrics_cols):
        ax = axes[0, i]
        m = err[err.family == fam].groupby("arm")[task]
        ax.bar(arms, [m.mean()[a] for a in arms], yerr=[m.std(ddof=1)[a] if len(seeds) > 1 else 0 for a in arms],
               color=["tab:red" if a == p.method else "tab:gray" for a in arms])
        ax.set_title(f"{fam}: {task}")
        ax.tick_params(axis="x", rotation=45)
    axes[0, 0].set_ylabel("L1 error")
    savefig(fig, fig_errors)

    fig, axes = subplots(1, 2, width=4.6, height=3.6)
    ax = axes[0, 0]
    for mode, color, (a, b) in (("full", "tab:gray", (a_full, b_full)), ("partitioned", "tab:red", (a_part, b_part))):
        d = mem[mem["mode"] == mode].sort_values("nodes")
        ax.loglog(d.nodes, d.peak_bytes / 2**20, "o", color=color, label=f"{mode} (a = {a:.2f})")
        ax.loglog(d.nodes, np.exp(b) * d.nodes.to_numpy(float) ** a / 2**20, "-", color=color, lw=0.8)
    d = mem[mem["mode"] == "partitioned"].sort_values("nodes")
    ax.loglog(d.nodes, d.history_bytes / 2**20, "--", color="tab:blue", label="history table (host)")
    ax.set_xlabel("circuit size N (nodes)"); ax.set_ylabel("peak activation memory (MB)")
    ax.legend(fontsize=7); ax.set_title("forward pass, autograd on")
    ax = axes[0, 1]
    for mode, color in (("full", "tab:gray"), ("partitioned", "tab:red")):
        d = mem[mem["mode"] == mode].sort_values("nodes")
        ax.loglog(d.nodes, d.seconds, "o-", color=color, label=mode)
    ax.set_xlabel("circuit size N (nodes)"); ax.set_ylabel("forward time (s, CPU, 1 thread)")
    ax.legend(fontsize=7); ax.set_title("time (varies run to run)")
    for ax in axes[0]:
        ax.xaxis.set_minor_formatter(NullFormatter())
    savefig(fig, fig_memory)

    fig, axes = subplots(1, 2, width=4.4, height=3.4)
    for arm in arms:
        h = hist_df[hist_df.arm == arm].groupby("epoch")[["train/prob_l1", "train/tt_l1", "val/overall"]].mean()
        axes[0, 0].plot(h.index, h["train/prob_l1"] + h["train/tt_l1"], label=arm)
        axes[0, 1].plot(h.index, h["val/overall"], label=arm)
    axes[0, 0].set_title("training L1, prob + TT (seed mean)"); axes[0, 1].set_title("validation overall L1")
    for ax in axes[0]:
        ax.set_xlabel("epoch"); ax.legend(fontsize=7)
    savefig(fig, fig_training)

    # --- claims: computed from per-seed errors, per-circuit memory and the kernel run (see deepgate4_claims)
    k = read_json(kernel)
    claim_list, check_list = deepgate4_claims(p, err, imp, piv, k, last)
    nb_a = {fam: imp[f"{fam} {OVERALL} next-best"] for fam in p.data.test}
    compared_a = sorted({p.method, *nb_a.values(),
                         *([p.control] if p.control else [])})
    write_claims(claim_list, claims, paper=SLUG, scale=scale, scope=scope(p), checks=check_list)
    write_json(to_dict(p), params_json)

    # --- report
    train_c = info[info.train]
    test_c = info[info.test]
    val_c = info[info.val]
    cons = read_json(consistency)["max_abs_prob_diff_full_vs_partitioned"]
    mem_time = mem.pivot_table(index="circuit", columns="mode", values="seconds")
    mem_dev = str(mem.device.iloc[0]) if "device" in mem else "cpu"
    steps = last.groupby("arm").apply(lambda h: float((h.step / h.epoch).mean()), include_groups=False)
    steps_text = "; ".join(f"{a} {steps[a]:.0f} optimiser steps" for a in arms if a in steps)
    dropped_text = dropped_baselines_text(p, err)
    full_steps_text = ("one step per circuit, the most an epoch can hold without cutting a circuit (cutting one is the "
                       "partitioned update itself)" if p.train.full_graph_batch_nodes == 1 else
                       f"one step per union of at most {p.train.full_graph_batch_nodes} nodes")
    numbers_text = ("Numbers are therefore far from the paper's." if size_text(p).startswith("at a reduced")
                    else "The data still differ from the paper's, so the numbers need not match it.")
    where = {"cpu": "the CPU", "cuda": "a GPU"}
    train_device = (" and ".join(where.get(d.split(":")[0], d) for d in sorted(set(hist_df.device.astype(str))))
                    if "device" in hist_df else "the CPU")
    if p.control:
        ablation_count = f" {ablation_seeds_text(err, p.method, p.control)}."

    else:
        ablation_count = ""
    t = job_times(benchmarks)
    budget_text = (f"this run: {t['seconds']:.0f} s of summed job time, {t['cpu_seconds']:.0f} s of CPU time over "
                   f"{t['jobs']} jobs")
    what = f"""
Circuits from the netlists in PyPI circuitgraph 0.2.1, converted to AIGs (PI / AND / NOT nodes, as DeepGate) by
`papers.deepgate4.aig` (checked against circuitgraph's own reading by random simulation in the tests), plus generated
adders, multipliers, comparators and multiplexers. Labels from bit-parallel random simulation
({p.data.patterns} patterns): every node's signal probability, and the normalised truth-table distance of up to
{p.data.max_pairs} sampled gate pairs per circuit (the official filters: same PI support, probabilities within
{p.data.max_prob_gap}, not directly connected, distance <= {p.data.extreme[0]} or >= {p.data.extreme[1]}).
Training: {len(train_c)} circuits ({int(train_c.nodes.sum())} nodes, depth up to {int(train_c.depth.max())};
{', '.join(train_c.circuit)}); validation (learning-rate schedule, stopping, best epoch): {', '.join(f"{r.circuit} (depth {r.depth})" for r in val_c.itertuples())};
held out: {', '.join(f"{r.circuit} ({r.family}, {r.nodes} nodes, depth {r.depth})" for r in test_c.itertuples())}.

Arms ({', '.join(arms)}), each trained with Adam (lr {p.train.lr}) on the summed L1 losses for at most
{p.train.epochs} epochs over the same training circuits (equal data per epoch for every arm: {steps_text}), validated
after every epoch, the rate multiplied by {p.train.lr_decay:g} after {p.train.patience} epochs without a new best,
stopped once the last {p.train.flat_window} validation errors lie within {100 * p.train.flat_tol:g}% of each other
(converged) or after {p.train.epochs} epochs (not converged), the weights of the best validation epoch after the
first lowering of the rate kept (the model the convergence gate certifies); hidden {p.model.hidden},
{len(seeds)} seeds (every arm of a seed starts from that seed): {'; '.join(f"{a}: {v}" for a, v in p.arms.items())}.
{p.method} uses the partitioned update (windows of {p.model.window_levels} levels, up to {p.model.areas_per_batch}
cone areas per mini-batch, history table) in training and evaluation, and the {p.model.level_encoding} level
encoding; its sparse attention covers the {p.arms[p.method].get('cone', 'fanin').replace('_', ' and ')} cone(s).
Full-graph against partitioned forward on the held-out circuits, maximal |difference| of the probability:
{max(cons.values()) if cons else float('nan'):.2g} (0 up to rounding with fan-in cones only; fan-out cones crossing
mini-batches make them differ).

Scaling: one forward pass with autograd of the {p.method} model on {', '.join(piv.circuit)}
({len(piv)} circuits, {int(piv.nodes.min())}-{int(piv.nodes.max())} nodes); peak activation memory
{'with torch.cuda.max_memory_allocated on ' + mem_dev if mem_dev != 'cpu' else 'counted tensor by tensor on the CPU (`papers.deepgate4.memory.PeakMemory`)'}; beside it the
positive control, passes whose peak is linear and constant in N by construction, counted and fitted the same way.
Forward times on this machine (s, full / partitioned):
{'; '.join(f"{c} {mem_time.loc[c, 'full']:.2f} / {mem_time.loc[c, 'partitioned']:.2f}" for c in piv.circuit)}.
"""
    differences = f"""
- Scale: {size_text(p)}, lr {p.train.lr} (official 1e-4), training on {int(train_c.nodes.sum())} nodes of
  {len(train_c)} netlists and generated circuits on {train_device}; the paper trains on large ITC-99 / EPFL circuits
  on a GPU (its data sets do not ship offline). {numbers_text}
- Training budget: the same schedule in epochs (passes over the same circuits) for every arm, as the paper trains
  every model {PAPER_EPOCHS} epochs, but stopped when the validation error is flat (the paper has no validation split),
  with the rate lowered on plateaus (the paper's constant rate would leave the error swinging here). An epoch is
  {steps_text}: the partitioned arms take a step per mini-batch of areas (unions of at most {p.train.batch_nodes}
  nodes), the full-graph arms {full_steps_text}. The budget (at most {p.train.epochs} epochs, {len(seeds)} seeds) is
  what the {scale} scale's time budget allows ({budget_text}); claim (a) is gated on every compared arm's
  convergence.{seeds_to_decide_text(err, p, nb_a, benchmarks, time_budget)}{open_runs_text(last, compared_a, p.train)}{ablation_count}{dropped_text}
- Level encoding: {p.model.level_encoding} ({'sinusoid of ' + str(p.model.level_scale) + ' x level / depth of the circuit; the paper encodes the level itself, which on circuits deeper than any training one falls outside the trained range' if p.model.level_encoding == 'normalised' else 'the level itself, as the paper'}).
- Held-out set: {heldout_text(info, p)}
- Overall figure: the sum of our two tasks' errors (the paper's overall column sums more tasks).
- Tasks: only the two gate-level tasks of the paper's table (signal probability, truth-table distance); the official
  trainer also trains connection, hop-level and path tasks.
- Data: the held-out ITC-99 circuits are circuitgraph's b17/b20/b22 netlists (the paper's splits of b-circuits and
  the DeepGate3 data set do not ship offline); pairs are sampled among same-support candidates, not enumerated.
- Partition: windows of {p.model.window_levels} levels with areas = in-window fan-in cones of the window's roots, instead of the
  official 8-hop cones every 6 levels; with fan-in-cone attention this makes the partitioned pass equal the
  full-graph pass (tested). The method's attention uses fan-in and fan-out cones inside the mini-batch (the paper);
  the official `global_virtual_edge` uses the fan-in cone only (config `cone: fanin`).
- Models: DeepGate2's aggregator scores only the source (the official destination term cancels in the softmax); no
  batch norm / dropout in the readouts; PI structural vectors (DeepGate2's hs_init) for all circuit models; the plain
  transformer attends globally within each level window of a circuit (DeepGate3 pools sub-circuits instead); the GAT
  baseline is the official one-hot-input GAT.
- Memory: measured {'on ' + mem_dev + ' with the allocator' if mem_dev != 'cpu' else 'on CPU tensors with a dispatch-mode counter (activations, unfused references)'}, in the
  memory study with {p.scaling.areas_per_batch} areas per mini-batch (circuits here are at most {int(piv.nodes.max())} nodes, so a
  smaller mini-batch than the official 256 areas keeps the circuits much larger than one mini-batch, as the paper's are).
- Fused kernel (claims c, d): {kernel_text(k)}.
"""
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[fig_errors, fig_memory, fig_training], claims=claim_list, benchmarks=benchmarks,
                 differences=differences, scope=scope(p), verdicts_figure=verdicts, checks=check_list)


def heldout_text(info: pd.DataFrame, p) -> str:
    """The held-out set against the training set, from circuits.parquet and the config: the real netlists of the
    held-out families that are trained on, and which held-out circuits are deeper than every training circuit."""
    train_c, test_c = info[info.train], info[info.test]
    held = "; ".join(f"{fam}: {', '.join(names)}" for fam, names in p.data.test.items())
    trained = train_c[train_c.family.isin(list(p.data.test))]
    deepest = train_c.loc[train_c.depth.idxmax()]
    deeper = test_c[test_c.depth > deepest.depth]
    text = (f"{held} (config data.test); the training circuits of these families: "
            + (", ".join(f"{r.circuit} ({r.family})" for r in trained.itertuples()) if len(trained) else "none")
            + f". The deepest training circuit is {deepest.circuit} (depth {int(deepest.depth)}); ")
    if len(deeper):
        text += ("held-out circuits deeper than every training circuit: "
                 + ", ".join(f"{r.circuit} (depth {int(r.depth)})" for r in deeper.itertuples())
                 + ": there the propagation runs more levels than in any training circuit.")
    else:
        text += "no held-out circuit is deeper."
    return text


EARLIER_RUN = Path(__file__).with_name("earlier_run.json")


def dropped_baselines_text(p, err: pd.DataFrame) -> str:
    """Why the paper's baselines that this scale does not train were dropped: the earlier default run they were
    dropped on (earlier_run.json: its committed table, commit and schedule), and how the ablation, the arm closest
    to DeepGate2 that is trained here, fares in this run. Empty when every paper baseline is trained."""
    dropped = [a for a in PAPER_BASELINES if a not in p.arms]
    if not dropped:
        return ""
    er = json.loads(EARLIER_RUN.read_text())
    fams = [f for f in p.data.test if all(f in er["overall"].get(a, {}) for a in er["overall"])]
    base = [a for a in er["overall"] if a not in (p.method, p.control)]
    nb_then = {f: min((a for a in base if a not in dropped), key=lambda a: er["overall"][a][f]) for f in fams}
    tr = er["train"]
    text = (f" The paper's baselines {', '.join(dropped)} are not trained at this scale (config/full.yaml trains "
            f"them). They were dropped on the basis of an earlier default run (commit {er['commit'][:7]}) with another "
            f"schedule: {er['seeds']} seeds, at most {tr['epochs']} epochs, patience {tr['patience']}, flat_tol "
            f"{tr['flat_tol']:g}, " + ("a constant learning rate" if "lr_decay" not in tr else
                                       f"lr_decay {tr['lr_decay']:g}")
            + f", validation on {', '.join(er['data']['val'])}; its seed-mean overall errors: "
            + "; ".join(f"{f}: " + ", ".join(f"{a} {er['overall'][a][f]:.3f}" for a in (*dropped, nb_then[f]))
                        for f in fams)
            + ". They were not rerun under this run's schedule, so whether they stay behind it is not measured.")
    if p.control:
        means = err.groupby(["arm", "family"])[OVERALL].mean()
        rivals = [a for a in p.arms if a not in (p.method, p.control)]
        parts = []
        for f in p.data.test:
            best = min(rivals, key=lambda a: means[(a, f)])
            c = means[(p.control, f)]
            parts.append(f"{f} {c:.3f} ({'ahead of' if c < means[(best, f)] else 'behind'} the best baseline "
                         f"{best}, {means[(best, f)]:.3f})")
        text += (f" {p.control} ({p.arms[p.control]}: DeepGate2's model, which has no refinement layers either, with "
                 f"DeepGate4's local encoding and partitioned update) is the trained arm closest to deepgate2; in this "
                 f"run its "
                 f"seed-mean overall error is " + "; ".join(parts) + ".")
    return text


# ---- claims ------------------------------------------------------------------------------------

def slope_test(sizes, values, *, threshold: float, direction: str, name: str = "", level: float = LEVEL) -> Evidence:
    """The exponent a of values ~ sizes^a (least squares on the logs) against `threshold`.

    The interval is the Student t interval of the OLS slope with n - 2 degrees of freedom, n = the
    number of circuits (the independent units: a forward pass's memory is deterministic for a given
    circuit, so what varies is the circuit). With 3-5 points a percentile bootstrap over circuits
    would be too narrow (papers.common.claims.bootstrap_interval), hence the t interval.
    """
    from scipy import stats

    x = np.log(np.asarray(sizes, dtype=float))
    y = np.log(np.asarray(values, dtype=float))
    n = x.size
    a, b = np.polyfit(x, y, 1)
    if n > 2:
        resid = y - (a * x + b)
        se = float(np.sqrt(resid @ resid / (n - 2) / ((x - x.mean()) @ (x - x.mean()))))
        half = float(stats.t.ppf(0.5 + level / 2, n - 2)) * se
    else:
        half = 0.0  # two points fit exactly: no interval (and too few replicates for a verdict)
    return Evidence(float(a), (float(a) - half, float(a) + half), n,
                    f"OLS slope of log peak on log N, Student t {level:.0%} interval over {n} circuits ({max(n - 2, 0)} dof)",
                    threshold, direction, name)


def _interval(ev: Evidence) -> str:
    """'0.956 [0.926, 0.987]': an effect with its interval, for prose."""
    return f"{ev.effect:.3g} [{ev.interval[0]:.3g}, {ev.interval[1]:.3g}]"


def relative_reductions(err: pd.DataFrame, method: str, baseline: str, family: str, task: str) -> np.ndarray:
    """Per seed: (baseline error - method error) / baseline error, pooled over the family's circuits.
    The arms of one seed are trained in the same job from the same seed, so the arms are paired by seed."""
    e = err[err.family == family].pivot_table(index="seed", columns="arm", values=task)
    return ((e[baseline] - e[method]) / e[baseline]).to_numpy()


def behind_ablation(err: pd.DataFrame, method: str, control: str, task: str = OVERALL) -> tuple[int, int, list[str]]:
    """Seed x family pairs where the method's error is above its ablation's (the arms of a seed are trained in
    one job from one seed, so they are paired by seed): (count behind, pairs, the pairs behind)."""
    e = err.pivot_table(index=["family", "seed"], columns="arm", values=task)
    behind = e[e[method] > e[control]]
    return len(behind), len(e), [f"{fam} seed {seed}" for fam, seed in behind.index]


def sign_test_p(k: int, n: int) -> float:
    """One-sided sign test: P(at least k of n independent replicates on one side) when either side has chance 1/2."""
    from scipy import stats

    return float(stats.binom.sf(k - 1, n, 0.5))


def ablation_seeds_text(err: pd.DataFrame, method: str, control: str, task: str = OVERALL) -> str:
    """How often the method is behind its own ablation, counted in seeds (the independent replicates: the held-out
    families of a seed are evaluations of one trained network), with the one-sided sign test, then in seed x
    family evaluations."""
    e = err.pivot_table(index=["family", "seed"], columns="arm", values=task)
    behind = (e[method] > e[control]).groupby(level="seed").all()
    k, n = int(behind.sum()), len(behind)
    k_pairs, pairs, _ = behind_ablation(err, method, control, task)
    return (f"{method} is behind its own ablation {control} (higher overall error than the ablation trained from "
            f"the same seed) on every held-out family in {k} of {n} seeds (one-sided sign test p = "
            f"{sign_test_p(k, n):.3g}; the families of a seed are evaluations of one trained network, so the seeds "
            f"are the independent count: {k_pairs} of {pairs} seed x family evaluations)")


def sensitivity_next_best(err: pd.DataFrame, method: str, family: str, task: str = OVERALL) -> str:
    """The next-best arm on `family` when every other trained arm counts as a baseline, the ablation control
    included (a sensitivity reading of claim (a): the control is no baseline of the paper's)."""
    means = err[(err.family == family) & (err.arm != method)].groupby("arm")[task].mean()
    return str(means.idxmin())


def epochs_to_flat(spread: float, *, tol: float, patience: int, lr_decay: float, window: int) -> int:
    """More epochs a run whose last `window` validation errors spread by `spread` ((max - min) / min) would need to
    be flat (spread <= tol), assuming the swing shrinks in proportion to the learning rate: ceil(log(spread / tol) /
    log(1 / lr_decay)) more lowerings of the rate, at least `patience` epochs each, then `window` flat epochs.
    A projection from the measured curve's end, not a measurement."""
    if spread <= tol:
        return 0
    if not lr_decay < 1 or not np.isfinite(spread):
        return -1  # the rate is never lowered, or the spread is unknown: no estimate
    return int(np.ceil(np.log(spread / tol) / np.log(1 / lr_decay))) * patience + window


def open_runs_text(runs: pd.DataFrame | None, compared: list[str], t) -> str:
    """The compared runs that ended at the epoch cap without being flat: how many more epochs each would need
    (:func:`epochs_to_flat`) and what that costs at its arm's measured CPU per epoch; empty when every run is flat."""
    if runs is None or not len(runs):
        return ""
    sel = runs[runs.arm.isin(compared)]
    open_ = sel[~sel.converged.astype(bool)]
    if not len(open_):
        return ""
    cpu = sel.assign(per_epoch=sel.train_cpu_seconds / sel.epoch).groupby("arm").per_epoch.mean()
    need = [(r, epochs_to_flat(r.final_spread, tol=t.flat_tol, patience=t.patience, lr_decay=t.lr_decay,
                               window=t.flat_window)) for r in open_.itertuples()]
    flat = sel[sel.converged.astype(bool)]
    return (f" Runs not flat at the cap of {t.epochs} epochs: {len(open_)} of {len(sel)}; "
            + "; ".join(f"{r.arm} seed {r.seed} (final spread {100 * r.final_spread:.1f}%: ~{n} more epochs, "
                        f"~{n * cpu[r.arm]:.0f} CPU s)" for r, n in need)
            + f" (projected from each curve's final spread: the swing taken to shrink with the rate, x "
            f"{t.lr_decay:g} after {t.patience} epochs without a new best, then {t.flat_window} flat epochs)"
            + (f"; the flat runs took a median of {flat.epoch.median():.0f} epochs ({int(flat.epoch.min())}-"
               f"{int(flat.epoch.max())})." if len(flat) else ".")
            + f" All of them: ~{sum(n * cpu[r.arm] for r, n in need if n > 0):.0f} CPU s more.")


# The seed count issue 49 asked for (config/full.yaml's): the report says whether it would decide claim (a).
ISSUE_SEEDS = 5
# A seed count whose cost exceeds this many times the scale's time budget is read as unaffordable (prose only,
# no verdict depends on it).
AFFORDABLE_BUDGETS = 10


def seeds_to_decide(values, threshold: float = 0.0, level: float = LEVEL, max_seeds: int = 10**6) -> int | None:
    """The fewest seeds (at least 3, the fewest a verdict may rest on) whose Student t `level` interval, at the
    measured mean and sd of the per-seed `values`, would exclude `threshold`: the smallest n with
    t_{(1+level)/2, n-1} sd / sqrt(n) < |mean - threshold|. None where no count up to `max_seeds` would (a mean
    on the threshold). A projection from the measured spread, not a measurement."""
    from scipy import stats

    x = np.asarray(values, float)
    gap, sd = abs(float(x.mean()) - threshold), float(x.std(ddof=1))
    if sd == 0:
        return 3 if gap > 0 else None
    n = np.arange(3, max_seeds + 1)
    ok = np.nonzero(stats.t.ppf(0.5 + level / 2, n - 1) * sd / np.sqrt(n) < gap)[0]
    return int(n[ok[0]]) if len(ok) else None


def half_width(values, n: int, level: float = LEVEL) -> float:
    """The half-width of the Student t `level` interval of the mean over n seeds at the measured sd of `values`."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, n - 1) * np.std(np.asarray(values, float), ddof=1) / np.sqrt(n))


def seeds_to_decide_text(err: pd.DataFrame, p, nb: dict, benchmarks, time_budget: float | None) -> str:
    """Per held-out family, what would decide claim (a) at its measured paired spread: the seeds its interval needs
    to exclude min_improvement (:func:`seeds_to_decide`) and their CPU cost, this run's CPU with each further seed
    costing the mean CPU of this run's train jobs (one a seed, every arm; the other jobs held fixed), against the
    time budget; and whether ISSUE_SEEDS seeds would decide."""
    paths = [str(b) for b in benchmarks]
    train = [b for b in paths if "/train/" in b]
    if not train:
        return ""
    per_seed = job_times(train)["cpu_seconds"] / len(train)
    total = job_times(paths)["cpu_seconds"]
    n_now = err.seed.nunique()
    cost = lambda n: total + (n - n_now) * per_seed
    versus = lambda c: f" ({c / time_budget:.1f}x the {time_budget:.0f} CPU s budget)" if time_budget else ""
    parts = []
    for fam in p.data.test:
        d = relative_reductions(err, p.method, nb[fam], fam, OVERALL)
        m, sd = float(np.mean(d)), float(np.std(d, ddof=1))
        n = seeds_to_decide(d, p.min_improvement)
        head = f"{fam} (mean {m:.3g}, sd {sd:.3g} over {len(d)} seeds): "
        if n is None:
            parts.append(head + "no seed count would decide it (the mean lies on the threshold)")
            continue
        verdict = "holds" if m > p.min_improvement else "does not hold"
        h5 = half_width(d, ISSUE_SEEDS)
        five = (f"; {ISSUE_SEEDS} seeds (~{cost(ISSUE_SEEDS):.0f} CPU s) would give a half-width of {h5:.2f} against "
                f"|mean - {p.min_improvement:g}| = {abs(m - p.min_improvement):.2f}: "
                + ("decided" if h5 < abs(m - p.min_improvement) else "still straddling"))
        if time_budget and cost(n) > AFFORDABLE_BUDGETS * time_budget:
            parts.append(head + f"~{n} seeds, ~{cost(n):.0f} CPU s{versus(cost(n))}: undecidable at any affordable "
                         f"count" + five)
        elif n <= n_now:
            parts.append(head + f"decided at {n} seeds ({verdict})")
        else:
            parts.append(head + f"~{n} seeds would read \"{verdict}\", {n - n_now} more at {per_seed:.0f} CPU s a "
                         f"seed, ~{cost(n):.0f} CPU s in all{versus(cost(n))}" + five)
    return (f" What would decide claim (a), at the measured paired spread of the per-seed relative reduction (the "
            f"interval excluding {p.min_improvement:g}; a projection, each further seed costing this run's mean train "
            f"job, {per_seed:.0f} CPU s, the other jobs held fixed; unaffordable: over {AFFORDABLE_BUDGETS}x the "
            f"budget): " + "; ".join(parts) + ".")


def deepgate4_claims(p, err: pd.DataFrame, imp: dict, piv: pd.DataFrame, k: dict,
                     runs: pd.DataFrame | None = None) -> tuple[list[Claim], list[Check]]:
    """The paper's claims, decided on intervals over independent replicates, and the checks.

    (a) one claim per held-out family (ids a_<family>): the per-seed relative reduction of the overall error of the
        method over that family's next-best baseline (chosen by its seed mean, as the paper picks the next-best
        model), t interval over seeds, must exceed min_improvement; gated on the convergence of every compared arm
        (`runs`: one row per arm and seed, the last epoch of its training history) and on the method beating a
        constant predictor; the control is the method without its refinement layers (an ablation), tested on the
        same family, so that a gain the ablation shows as well on one family leaves that family's claim
        inconclusive whatever the other family shows;
    (b) the fitted exponent of the partitioned peak relative to the full-graph pass's (the method against its
        ablation, paired per circuit), t interval over the circuits of the study, below max_relative_exponent (0):
        one boundary, the full-graph pass being the linear reference measured in the run; the positive control puts a
        pass constant in N by construction in the partitioned pass's place (it must hold), the negative control a
        pass linear in N (it must not);
    (c), (d) the fused kernel's memory and runtime reductions on a GPU (see :func:`kernel_claims`); without one,
        the interpreter's op-level trace is a check.
    """
    families = list(p.data.test)
    seeds = sorted(err.seed.unique())
    n = len(seeds)
    nb = {fam: imp[f"{fam} {OVERALL} next-best"] for fam in families}

    def overall_evidence(arm: str, fam: str, suffix: str = ""):
        return mean_test(relative_reductions(err, arm, nb[fam], fam, OVERALL), threshold=p.min_improvement,
                         direction=">", what="seeds", name=f"{fam} overall: {arm} vs {nb[fam]}{suffix}")

    premise_a = []
    compared = sorted({p.method, *nb.values(), *([p.control] if p.control else [])})
    if runs is not None and len(runs):
        sel = runs[runs.arm.isin(compared)]
        premise_a.append(Premise.at_least(
            f"compared arms converged ({', '.join(compared)}: share of runs whose last {p.train.flat_window} "
            f"validation errors lie within flat_tol of their minimum, after the rate was lowered)",
            float(sel.converged.mean()), 1.0, what=f"every run; flat_tol = {p.train.flat_tol:g}"))
        m = runs[runs.arm == p.method]
        premise_a.append(Premise.at_most(f"{p.method} learned: best validation error / the constant predictor's "
                                         "(mean over seeds)", float((m.best_val / m["val/constant"]).mean()), 1.0,
                                         what="below a constant prediction"))
    ablation_text = ""
    if p.control:  # the method against its own ablation, paired by seed: does the refinement add anything?
        _, _, which = behind_ablation(err, p.method, p.control)
        if runs is not None and len(runs):
            open_runs = runs[runs.arm.isin(compared) & ~runs.converged.astype(bool)]
            if len(open_runs):
                # No timing enters a claim (claims.json is identical between reruns): the cost of more epochs is
                # in the report's prose (open_runs_text).
                ablation_text += (
                    f"; not converged within {p.train.epochs} epochs: " + ", ".join(
                        f"{r.arm} seed {r.seed} (final spread {100 * r.final_spread:.1f}%)"
                        for r in open_runs.itertuples())
                    + "; how many more epochs they would need, and their cost: the report's training budget")

    claims_a = []
    for fam in families:
        ev = overall_evidence(p.method, fam)
        if p.control:
            ctl = Control(f"the same criterion on {fam} applied to {p.control}, the method without its refinement "
                          "layers (the GAT-based sparse transformer) but with its encodings, partitioned update and "
                          f"epochs, against the same next-best baseline ({nb[fam]}): where it holds too, the gain on "
                          f"{fam} is not the transformer's",
                          overall_evidence(p.control, fam, " (control)"),
                          {f"{fam} overall": round(100 * float(np.mean(relative_reductions(err, p.control, nb[fam], fam,
                                                                                             OVERALL))), 2)},
                          kind="ablation")
            vs = mean_test(relative_reductions(err, p.method, p.control, fam, OVERALL), threshold=0.0, direction=">",
                           what="seeds", name=f"{fam} overall: {p.method} vs {p.control}")
            # the headline of the note: the method against its own ablation, then the sensitivity reading that
            # counts the ablation as a baseline (the next-best among the baselines and the control)
            k_fam = sum(w.startswith(f"{fam} seed") for w in which)
            n_fam = err[err.family == fam].seed.nunique()
            nb_sens = sensitivity_next_best(err, p.method, fam)
            sens = mean_test(relative_reductions(err, p.method, nb_sens, fam, OVERALL), threshold=p.min_improvement,
                             direction=">", what="seeds", name=f"{fam} overall: {p.method} vs {nb_sens} (sensitivity)")
            vs_text = (f"{p.method} is behind its own ablation {p.control} (higher overall error than the ablation "
                       f"trained from the same seed) in {k_fam} of {n_fam} seeds on {fam} (one-sided sign test p = "
                       f"{sign_test_p(k_fam, n_fam):.3g}); the relative overall error reduction of {p.method} over "
                       f"{p.control} on {fam} (paired by seed; negative: the ablation is ahead): {vs.describe()} "
                       f"({vs.verdict}). Sensitivity reading, {p.control} counted as a baseline: the next-best on {fam} "
                       f"is then {nb_sens}" + (" (unchanged)" if nb_sens == nb[fam] else "")
                       + f", {sens.describe()} ({sens.verdict}). ")
        else:
            ctl = Control("not run: config `control` is null (no arm without the method's mechanism)", kind="ablation")
            vs_text = ""
        behind = [f"{t} (vs {imp[f'{fam} {t} next-best']}, {imp[f'{fam} {t}']:.1f}%)"
                  for t in (*TASKS, OVERALL) if not imp[f"{fam} {t}"] > 100 * p.min_improvement]
        claims_a.append(Claim(
            id=f"a_{fam.lower()}",
            statement=f"{p.method} lowers the overall error below the next-best baseline's on held-out {fam} circuits",
            paper=(f"{PAPER_IMPROVEMENT[fam]}% improvement over the next-best model on {fam}" if fam in PAPER_IMPROVEMENT
                   else "an improvement over the next-best model (15.5% on ITC99, 31.1% on EPFL)"),
            measured={f"{fam} {t}": round(imp[f"{fam} {t}"], 2) for t in (*TASKS, OVERALL)},
            criterion=(f"on the held-out {fam} circuits, the {n}-seed 95% interval of the per-seed relative reduction "
                       f"of the overall error (probability L1 + truth-table L1, the paper's overall figure) of "
                       f"{p.method} against the next-best baseline (lowest seed-mean overall error on {fam}; arms "
                       f"paired by seed, the same epoch schedule, each run stopped once flat) lies above "
                       f"min_improvement = {p.min_improvement:g}; the ablation control is tested on {fam} alone"),
            evidence=ev,
            control=ctl,
            note=(vs_text + f"Seed means on {fam}: " + ("behind the next-best baseline on " + "; ".join(behind)
                                                         if behind else "ahead of the next-best baseline on every task")
                  + f". Scale: at most {p.train.epochs} epochs per arm (the paper's {PAPER_EPOCHS}), stopped once flat; "
                  f"hidden {p.model.hidden} (the paper's {PAPER_HIDDEN})" + ablation_text),
            threshold_source=convention("a sign: the paper claims an improvement over the next-best model of any size "
                                        "(it reports 15.5% on ITC-99, 31.1% on EPFL)"),
            premise=premise_a,
            no_positive_control="held-out errors are measured directly against simulation labels; no estimator "
                                "stands between the models and the numbers compared",
            paper_effect=PAPER_IMPROVEMENT[fam] / 100 if fam in PAPER_IMPROVEMENT else None))

    s = p.scaling
    span = float(piv.nodes.max() / piv.nodes.min())
    measured_peaks = [c for c in ("full", "partitioned") if c in piv and (piv[c] > 0).all()]
    if len(measured_peaks) < 2:
        claim_b = Claim.not_measured(
            "b", "the update strategy's peak memory grows more slowly with circuit size than the full-graph model's, "
                 "which holds every node's activations (sub-linear against linear)",
            "memory complexity reduced to sub-linear",
            f"the fitted exponent of partitioned / full-graph peak over the circuits of the memory study below "
            f"max_relative_exponent = {s.max_relative_exponent:g}",
            why="not measured: the memory study's peaks were not positive on every circuit (an allocator that reported "
                "nothing, as under the CUDA probe)",
            threshold_source=derived("the full-graph pass of the same model on the same circuits, measured in this run"),
            no_positive_control="nothing was measured")
        claim_c, claim_d, checks = kernel_claims(p, k)
        return [*claims_a, claim_b, claim_c, claim_d], checks
    full_ref = slope_test(piv.nodes, piv["full"], threshold=1.0, direction=">", name="full-graph exponent")
    part_abs = slope_test(piv.nodes, piv["partitioned"], threshold=1.0, direction="<", name="partitioned exponent")

    def relative(column: str, name: str):
        """The exponent of `column`'s peak relative to the full-graph pass's, paired per circuit."""
        return slope_test(piv.nodes, piv[column] / piv["full"], threshold=s.max_relative_exponent, direction="<",
                          name=name)

    ev_b = relative("partitioned", "exponent of partitioned / full-graph peak")
    positive_b = negative_b = None
    if {"planted_linear", "planted_constant"} <= set(piv.columns):
        positive_b = PositiveControl(
            "the same counter and fit with a pass whose activations are constant in N by construction "
            "(papers.deepgate4.memory.planted_peaks) in the partitioned pass's place: it must grow more slowly than the "
            "full-graph pass", relative("planted_constant", "exponent of planted constant / full-graph peak"))
        negative_b = Control(
            "the same counter and fit with a pass whose activations are linear in N by construction in the partitioned "
            "pass's place: a linear peak must not read as growing more slowly than the full-graph pass",
            relative("planted_linear", "exponent of planted linear / full-graph peak (control)"), kind="null")
    claim_b = Claim(
        id="b", statement="the update strategy's peak memory grows more slowly with circuit size than the full-graph "
                          "model's, which holds every node's activations (sub-linear against linear)",
        paper="memory complexity reduced to sub-linear",
        measured={"exponent of partitioned / full": round(ev_b.effect, 3),
                  "partitioned exponent": round(part_abs.effect, 3), "full-graph exponent": round(full_ref.effect, 3),
                  "sizes": f"{int(piv.nodes.min())}-{int(piv.nodes.max())} nodes ({span:.1f}x)"},
        criterion=(f"the fitted exponent a of partitioned / full-graph peak ~ N^a over the {len(piv)} circuits of the "
                   f"memory study (the two passes paired per circuit; 95% t interval of the OLS slope over circuits) "
                   f"lies below max_relative_exponent = {s.max_relative_exponent:g}"),
        evidence=ev_b,
        control=negative_b or Control("not run: the memory table has no planted passes", kind="null"),
        note=(f"one boundary: the full-graph pass of the same model on the same circuits, measured in this run, is the "
              f"linear reference (its fitted exponent alone {_interval(full_ref)}"
              + (", below 1: a part of its peak does not grow with N" if full_ref.interval[1] < 1 else
                 ", above 1" if full_ref.interval[0] > 1 else ", 1 within its interval")
              + f"); the partitioned exponent alone {_interval(part_abs)}. Activations only: the history table "
              f"(2 N hidden floats, its own column of the memory table) grows linearly and is not counted in the "
              f"partitioned peak; the official History module (src/models/history.py) allocates it in pinned host "
              f"memory and leaves it there when the model moves to the GPU. The interval rests on "
              f"{len(piv)} circuits ({max(len(piv) - 2, 0)} degrees of freedom), up to {int(piv.nodes.max())} nodes"),
        threshold_source=derived(f"the full-graph pass of the same model on the same circuits, measured in this run: "
                                 f"it holds every node's activations, linear in N (the paper's 'at least linear'); "
                                 f"a relative exponent below {s.max_relative_exponent:g} is growth slower than it"),
        premise=[Premise.at_least("circuit sizes spanned (largest / smallest)", span, 10.0, what="a decade")],
        positive_control=positive_b,
        no_positive_control="" if positive_b is not None else "the memory table has no planted passes")

    claim_c, claim_d, checks = kernel_claims(p, k)
    return [*claims_a, claim_b, claim_c, claim_d], checks


def kernel_text(k: dict) -> str:
    """One line on where and how the fused kernel was measured, with the counts per circuit."""
    if not k["runs"]:
        return f"not measured ({k['reason']})"
    cols = [c for c in ("fused_bytes", "unfused_bytes", "fused_peak_bytes", "unfused_peak_bytes",
                        "fused_seconds", "unfused_seconds") if c in k["runs"][0]]
    per = "; ".join(f"{r['circuit']}: " + ", ".join(f"{c} {r[c]:.4g}" for c in cols) for r in k["runs"])
    extra = f"; the claims not measured ({k['reason']})" if not k["memory"] else ""
    return f"{k['device']}, {k['what']}: {per}{extra}"


def kernel_claims(p, k: dict) -> tuple[Claim, Claim, list[Check]]:
    """(c) memory and (d) runtime of the fused graph-attention kernel against the unfused path, and the checks.

    On a GPU, per circuit of the memory study (the replicates), the fractional reduction 1 - fused / unfused of
    the whole forward pass, t interval over circuits, must exceed min_reduction. The control is an A/A comparison:
    the unfused path measured a second time stands in for the fused one, so the kernel is absent and no reduction
    may appear. Without a GPU the claims are not measured: the kernel's own allocation in Triton's interpreter (an
    op-level trace, whose temporaries the CPU allocator cannot see as a GPU's would) is a check.
    """
    runs = pd.DataFrame(k["runs"])
    criterion = (f"per-circuit reduction 1 - fused / unfused of the whole forward pass on a GPU, 95% t interval over "
                 f"the circuits of the memory study, > min_reduction = {100 * p.kernel.min_reduction:g}%")
    control_what = ("A/A: the unfused path measured twice, the second run in the fused arm's place (the fused "
                    "kernel absent)")
    source = convention("a sign: the paper claims the fused kernel lowers both (by 35.1% and 46.8%), of any size")
    paper = f"Fused-DeepGate4: runtime -{PAPER_FUSED['runtime']}%, memory -{PAPER_FUSED['memory']}%"
    no_pos = "the reduction is read from the allocator and the clock directly; no estimator stands in between"

    def claim(id_, statement, measured_key, fused_col, unfused_col, control_col, paper_effect):
        if not k[measured_key]:
            return Claim.not_measured(id_, statement, paper, criterion,
                                      why=f"not measured: {k['reason']} (scaling stage, papers.deepgate4.memory)",
                                      threshold_source=source, no_positive_control=no_pos)
        if not (runs[unfused_col] > 0).all():  # e.g. an allocator that reported nothing (the CUDA probe)
            return Claim.not_measured(id_, statement, paper, criterion,
                                      why=f"not measured: the unfused path's {measured_key} on {k['device']} was not "
                                          f"positive on every circuit ({', '.join(f'{c}: {v:.3g}' for c, v in zip(runs.circuit, runs[unfused_col]))}), "
                                          "so no reduction can be formed",
                                      threshold_source=source, no_positive_control=no_pos)
        red = (1 - runs[fused_col] / runs[unfused_col]).to_numpy()
        ctl = (1 - runs[control_col] / runs[unfused_col]).to_numpy()
        test = lambda v, name: mean_test(v, threshold=p.kernel.min_reduction, direction=">", what="circuits",
                                         name=name)
        # measured premise: the fused pass is the same computation as the unfused one (else it is not a fair race)
        same = Premise.at_most("the fused forward pass computes the unfused pass's embeddings (largest |difference| "
                               "over the circuits; NaN: not recorded)",
                               float(runs.max_abs_diff.max()) if "max_abs_diff" in runs else float("nan"), 1e-3,
                               what="float32 rounding")
        return Claim(
            id_, statement, paper,
            {"reduction % per circuit": {c: round(100 * r, 1) for c, r in zip(runs.circuit, red)},
             "device": k["device"], "measured on": k["what"]},
            criterion, test(red, f"{measured_key} reduction"),
            Control(control_what, test(ctl, f"{measured_key} reduction, A/A"), kind="null"),
            threshold_source=source, no_positive_control=no_pos, paper_effect=paper_effect, premise=[same],
            note=f"measured on {k['device']} ({k['what']}) over {len(runs)} circuits")

    c = claim("c", "the fused graph-attention kernel lowers the model's memory against the unfused path", "memory",
              "fused_peak_bytes", "unfused_peak_bytes", "control_peak_bytes", PAPER_FUSED["memory"] / 100)
    d = claim("d", "the fused graph-attention kernel lowers the model's runtime against the unfused path", "runtime",
              "fused_seconds", "unfused_seconds", "control_seconds", PAPER_FUSED["runtime"] / 100)
    checks = []
    if len(runs) and {"fused_bytes", "unfused_bytes"} <= set(runs.columns):
        red = 1 - runs.fused_bytes / runs.unfused_bytes
        checks.append(Check.at_least(
            "fused_kernel_op_trace", "one GAT attention of the model, run by Triton's interpreter on CPU tensors over "
            "each circuit's largest mini-batch, allocates less with the fused kernel than the unfused reference "
            f"(smallest reduction over {len(runs)} circuits; an op-level trace, not the model on a GPU)",
            float(red.min()), p.kernel.min_reduction))
        if "max_abs_diff" in runs:
            checks.append(Check.at_most("fused_kernel_matches_reference", "the fused kernel's output equals the "
                                        "unfused reference's (largest |difference| over the circuits)",
                                        float(runs.max_abs_diff.max()), 1e-4, what="float32 rounding"))
    return c, d, checks
