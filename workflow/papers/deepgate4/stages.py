"""The deepgate4 DAG's stages: prepare (circuits, labels) -> train (all arms, one job per seed)
-> evaluate (held-out circuits) | scaling (memory and time against size; the fused kernel on a
GPU) -> report (in :mod:`.report`). Each function takes its parameters and paths explicitly;
torch is imported inside the stages that need it (the prepare job runs without it).
"""
from __future__ import annotations

import logging
import math
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from papers.common.io import read_parquet, write_json, write_parquet
from papers.common.params import to_dict
from papers.common.progress import progress
from papers.common.seeding import seed_everything
from papers.deepgate4 import aig
from papers.deepgate4.params import parse

log = logging.getLogger(__name__)

# ---- prepare ---------------------------------------------------------------------------------
def family(name: str) -> str:
    """Benchmark suite of a circuit of circuitgraph's collection, by its name."""
    if name.startswith("b") and name[1:3].isdigit():
        return "ITC99"
    if name.startswith("c") and name[1:2].isdigit():
        return "ISCAS85"
    if name.startswith("s") and name[1:2].isdigit():
        return "ISCAS89"
    return "EPFL"


def generated_kind(name: str) -> str | None:
    """The generator of a generated circuit's name (``adder16`` -> ``adder``), else None."""
    for kind in aig.GENERATORS:
        if name.startswith(kind) and name[len(kind):].isdigit():
            return kind
    return None


def netlist_path(folder: Path, name: str) -> Path:
    for ext in (".v", ".bench"):
        if (folder / f"{name}{ext}").exists():
            return folder / f"{name}{ext}"
    raise FileNotFoundError(f"no netlist {name}.v or {name}.bench in {folder}")


def _circuit_seed(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def prepare(*, cfg, circuits, nodes, pairs):
    """Read the netlists into AIGs (see :mod:`.aig`), generate the parametric circuits, label the
    training and held-out ones by random simulation (signal probability of every node, truth-table
    distance of sampled gate pairs) and write three tables."""
    p = parse(cfg).data
    folder = Path(p.netlists) if p.netlists else aig.netlist_dir()
    roles = {}  # name -> (family, source, set of roles)
    for name in p.train:
        roles.setdefault(name, [family(name), "", set()])[2].add("train")
    for kind, widths in p.generated.items():
        for w in widths:
            roles.setdefault(f"{kind}{w}", ["generated", f"generated {kind}({w})", set()])[2].add("train")
    for name in p.val:
        fam = "generated" if generated_kind(name) else family(name)
        roles.setdefault(name, [fam, f"generated {name}" if generated_kind(name) else "", set()])[2].add("val")
    for fam, names in p.test.items():
        for name in names:
            roles.setdefault(name, [fam, "", set()])[2].add("test")
    for name in p.scaling:  # netlists or generated circuits (forward pass only, no labels)
        fam = "generated" if generated_kind(name) else family(name)
        roles.setdefault(name, [fam, f"generated {name}" if generated_kind(name) else "", set()])[2].add("scaling")

    circuit_rows, node_frames, pair_frames = [], [], []
    for name, (fam, source, role) in progress(roles.items(), desc="circuits"):
        kind = generated_kind(name)
        if kind is not None and fam == "generated":
            g = aig.GENERATORS[kind](int(name[len(kind):]))
        else:
            path = netlist_path(folder, name)
            source = path.name
            g = aig.read_netlist(path, name)
        if g.num_nodes < p.min_nodes:
            log.warning("%s: %d nodes < min_nodes = %d, skipped (as the official data preparation)",
                        name, g.num_nodes, p.min_nodes)
            continue
        prob = np.full(g.num_nodes, np.nan)
        a = b = dist = np.zeros(0)
        if role & {"train", "val", "test"}:
            rng = _circuit_seed(p.seed, name)
            val = aig.simulate(g, math.ceil(p.patterns / 64), rng)
            prob = aig.signal_probability(val)
            a, b, dist = aig.sample_tt_pairs(g, val, prob, rng, max_pairs=p.max_pairs, candidates=p.pair_candidates,
                                             max_prob_gap=p.max_prob_gap, extreme=tuple(p.extreme))
        circuit_rows.append({"circuit": name, "family": fam, "source": source, "train": "train" in role,
                             "val": "val" in role, "test": "test" in role, "scaling": "scaling" in role, "nodes": g.num_nodes,
                             "pis": int((g.gate == aig.PI).sum()), "pos": int(g.po.sum()),
                             "ands": int((g.gate == aig.AND).sum()), "nots": int((g.gate == aig.NOT).sum()),
                             "depth": int(g.level.max()), "pairs": int(a.size)})
        node_frames.append(pd.DataFrame({"circuit": name, "node": np.arange(g.num_nodes, dtype=np.int32),
                                         "gate": g.gate, "level": g.level, "po": g.po,
                                         "fanin0": g.fanin[:, 0].astype(np.int32), "fanin1": g.fanin[:, 1].astype(np.int32),
                                         "prob": prob.astype(np.float32)}))
        pair_frames.append(pd.DataFrame({"circuit": name, "a": a.astype(np.int32), "b": b.astype(np.int32),
                                         "tt": np.asarray(dist, dtype=np.float32)}))
        log.info("%s (%s): %d nodes, depth %d, %d pairs", name, fam, g.num_nodes, g.level.max(), a.size)
    write_parquet(pd.DataFrame(circuit_rows), circuits)
    write_parquet(pd.concat(node_frames, ignore_index=True), nodes)
    write_parquet(pd.concat(pair_frames, ignore_index=True), pairs)


def load_circuits(nodes: pd.DataFrame, pairs: pd.DataFrame | None, names) -> list[dict]:
    """Circuits as dicts of numpy arrays (the format of :func:`.train.union` and :class:`.train.Example`)."""
    if pairs is None:
        pairs = pd.DataFrame({"circuit": pd.Series(dtype=str), "a": pd.Series(dtype=np.int64),
                              "b": pd.Series(dtype=np.int64), "tt": pd.Series(dtype=np.float32)})
    by_node = dict(tuple(nodes.groupby("circuit", sort=False)))
    by_pair = dict(tuple(pairs.groupby("circuit", sort=False)))
    out = []
    for name in names:
        n = by_node[name]
        pr = by_pair.get(name, pairs.iloc[:0])
        out.append({"name": name, "gate": n.gate.to_numpy(np.int64), "level": n.level.to_numpy(np.int64),
                    "fanin": n[["fanin0", "fanin1"]].to_numpy(np.int64), "prob": n.prob.to_numpy(np.float32),
                    "pairs": pr[["a", "b"]].to_numpy(np.int64).T.reshape(2, -1), "tt": pr.tt.to_numpy(np.float32)})
    return out


def _example(c: dict, p, *, hidden: int, areas_per_batch: int, partitioned: bool):
    from papers.deepgate4.train import Example

    return Example(c["name"], c["gate"], c["fanin"], c["level"], c["prob"], c["pairs"], c["tt"], hidden=hidden,
                   window_levels=p.model.window_levels, areas_per_batch=areas_per_batch, pi_seed=p.data.seed,
                   partitioned=partitioned, part=c.get("part"))


def _build(p, arm: dict, **override):
    from papers.deepgate4.model import build

    m = p.model
    kw = {"hidden": m.hidden, "mlp_hidden": m.mlp_hidden, "heads": m.heads, "dropout": m.dropout,
          "max_degree": m.max_degree, "level_encoding": m.level_encoding, "level_scale": m.level_scale}
    return build(arm, **{**kw, **override})


# ---- train -----------------------------------------------------------------------------------
def train(*, cfg, circuits, nodes, pairs, seed, checkpoint, history):
    """Train every arm on the training circuits, the partitioned arms on unions of at most batch_nodes (a step
    per mini-batch of areas), the full-graph arms on unions of at most full_graph_batch_nodes (a step per union;
    1: one circuit per step, the most steps an epoch can hold without cutting a circuit), the same schedule in
    epochs each (rate lowered on validation plateaus, stopped once the validation error is flat, at
    most train.epochs; the weights kept are the best validation epoch's after the first lowering of the rate,
    :func:`.train.kept_epoch`). The history has one row per arm and epoch, with the validation error of the kept
    weights (``best_val``) and of the best constant predictor (``val/constant``) beside it, and whether the arm's
    validation curve ended flat (``converged``, :func:`.train.converged`, with the spread of its last flat_window
    errors)."""
    import torch

    from papers.deepgate4 import train as T

    p = parse(cfg)
    info = read_parquet(circuits)
    node_df, pair_df = read_parquet(nodes), read_parquet(pairs)
    data = load_circuits(node_df, pair_df, info.circuit[info.train].tolist())
    val_data = load_circuits(node_df, pair_df, info.circuit[info.val].tolist())
    partitioned = any(arm.get("partitioned") for arm in p.arms.values())
    dev = T.device(p.train.device)
    make = lambda c: _example(c, p, hidden=p.model.hidden, areas_per_batch=p.model.areas_per_batch,
                              partitioned=partitioned).to(dev)
    examples = {True: [make(u) for u in T.pack(data, p.train.batch_nodes)]}  # by `partitioned`
    if not all(arm.get("partitioned") for arm in p.arms.values()):
        examples[False] = [make(u) for u in T.pack(data, p.train.full_graph_batch_nodes)]
    val = [make(c) for c in val_data]
    constant = T.constant_error(examples[True], val)
    log.info("%d training circuits in %s unions (partitioned / full-graph arms), %d validation circuits, on %s; "
             "constant predictor's validation error %.4f", len(data), " / ".join(str(len(e)) for e in examples.values()),
             len(val), dev, constant)
    states, rows = {}, []
    t = p.train
    for name, arm in p.arms.items():
        seed_everything(seed)
        model = _build(p, arm).to(dev)
        part = bool(arm.get("partitioned"))
        curve = T.train(model, examples[part], val, partitioned=part, epochs=t.epochs, lr=t.lr,
                        patience=t.patience, lr_decay=t.lr_decay, flat_window=t.flat_window, flat_tol=t.flat_tol,
                        seed=seed, log=lambda msg, name=name: log.info("%s %s", name, msg))
        flat, spread = T.converged([r["val/overall"] for r in curve], window=t.flat_window, tol=t.flat_tol,
                                   rates=[r["lr"] for r in curve])
        # the validation error of the kept weights (the best epoch after the first lowering of the rate)
        best = curve[T.kept_epoch([r["val/overall"] for r in curve], [r["lr"] for r in curve]) - 1]["val/overall"]
        rows += [{"arm": name, "seed": seed, **r, "val/constant": constant, "best_val": best, "converged": flat,
                  "final_spread": spread, "device": str(dev)} for r in curve]
        states[name] = {k: v.cpu() for k, v in model.state_dict().items()}
    torch.save({"arms": states, "seed": seed, "config": to_dict(p)}, Path(checkpoint))
    write_parquet(pd.DataFrame(rows), history)


# ---- evaluate --------------------------------------------------------------------------------
def evaluate(*, cfg, circuits, nodes, pairs, checkpoints, metrics, consistency):
    """Errors of every arm and seed on the held-out circuits: L1 of the signal probability over
    the gates (AND and NOT nodes) and of the truth-table distance over the sampled pairs."""
    import torch

    from papers.deepgate4 import train as T

    p = parse(cfg)
    info = read_parquet(circuits)
    test = info[info.test]
    data = load_circuits(read_parquet(nodes), read_parquet(pairs), test.circuit.tolist())
    dev = T.device(p.train.device)
    examples = {c["name"]: _example(c, p, hidden=p.model.hidden, areas_per_batch=p.model.areas_per_batch,
                                    partitioned=True).to(dev) for c in data}
    fam = dict(zip(test.circuit, test.family))
    rows, checks = [], {}
    for path in checkpoints:
        ckpt = torch.load(path, weights_only=False)
        seed = ckpt["seed"]
        for name, arm in p.arms.items():
            model = _build(p, arm)
            model.load_state_dict(ckpt["arms"][name])
            model.to(dev)
            for cname, ex in examples.items():
                prob, tt = T.predict(model, ex, partitioned=bool(arm.get("partitioned")))
                e_prob = (prob[ex.gates] - ex.prob[ex.gates]).abs()
                e_tt = (tt - ex.tt).abs()
                rows.append({"arm": name, "seed": seed, "family": fam[cname], "circuit": cname,
                             "gates": int(ex.gates.numel()), "prob_err_sum": float(e_prob.sum()),
                             "pairs": int(ex.tt.numel()), "tt_err_sum": float(e_tt.sum())})
                if name == p.method and seed == 0 and arm.get("partitioned"):
                    other, _ = T.predict(model, ex, partitioned=False)
                    checks[cname] = float((other - prob).abs().max())
        log.info("evaluated %s", path)
    write_parquet(pd.DataFrame(rows), metrics)
    write_json({"max_abs_prob_diff_full_vs_partitioned": checks}, consistency)


# ---- scaling ---------------------------------------------------------------------------------
def scaling(*, cfg, circuits, nodes, memory, kernel):
    """Claim (b): peak activation memory and time of the method's forward pass (autograd on, as in training)
    against circuit size, full graph against the partitioned update (on a GPU when present, else counted on the
    CPU), with the planted linear and constant peaks of the positive control; claims (c), (d): the fused
    graph-attention kernel against the unfused reference on every circuit of the study -- on a GPU the whole
    forward pass (time and memory); without one the kernel's memory alone, run by Triton's interpreter on the
    largest mini-batch of each circuit (an op-level check, not the claim; interpreted time means nothing)."""
    import os

    import torch

    p = parse(cfg)
    s = p.scaling
    on_gpu = p.kernel.device == "cuda" and torch.cuda.is_available()
    if not on_gpu:  # must precede the first `import kernels` of this process (the model imports it)
        os.environ.setdefault("TRITON_INTERPRET", "1")

    from papers.deepgate4.memory import forward_cost, fused_vs_unfused, gat_kernel_memory, planted_peaks

    dev = "cuda" if on_gpu else "cpu"
    info = read_parquet(circuits)
    info = info[info.scaling].sort_values(["nodes", "circuit"])
    data = load_circuits(read_parquet(nodes), None, info.circuit.tolist())
    arm = {**p.arms[p.method], "layers": s.layers}
    seed_everything(0)
    model = _build(p, arm, hidden=s.hidden).to(dev)
    rows, kernel_rows = [], []
    traced = {data[int(i)]["name"] for i in np.unique(np.linspace(0, len(data) - 1, p.kernel.trace_circuits).round())}
    for c in progress(data, desc="scaling"):
        ex = _example(c, p, hidden=s.hidden, areas_per_batch=s.areas_per_batch, partitioned=True)
        batches = sum(len(b) for _, b in ex.plan.windows)
        for partitioned in (False, True):
            peak, seconds = forward_cost(model, ex.to(dev), partitioned=partitioned)
            rows.append({"circuit": c["name"], "nodes": ex.plan.num_nodes, "mode": "partitioned" if partitioned else "full",
                         "peak_bytes": int(peak), "seconds": seconds, "windows": len(ex.plan.windows),
                         "batches": batches if partitioned else len(ex.plan.windows),
                         "history_bytes": 2 * ex.plan.num_nodes * s.hidden * 4 if partitioned else 0, "device": dev})
            log.info("%s (%d nodes) %s: peak %.1f MB, %.2f s", c["name"], ex.plan.num_nodes, rows[-1]["mode"],
                     peak / 2**20, seconds)
        for kind, peak in planted_peaks(ex.plan.num_nodes, s.hidden).items():
            rows.append({"circuit": c["name"], "nodes": ex.plan.num_nodes, "mode": f"planted_{kind}", "peak_bytes": int(peak),
                         "seconds": float("nan"), "windows": 0, "batches": 0, "history_bytes": 0, "device": "cpu"})
        if on_gpu:
            seed_everything(0)
            runs = fused_vs_unfused(_build(p, arm, hidden=s.hidden), ex, device="cuda", repeats=p.kernel.repeats)
            kernel_rows.append({"circuit": c["name"], **{f"{r['arm']}_{m}": r[m] for r in runs
                                                          for m in ("seconds", "peak_bytes")},
                                "max_abs_diff": runs[0]["max_abs_diff"]})
        elif model.refine and model.refine[0].attention == "gat" and c["name"] in traced:
            biggest = max((b for _, bs in ex.plan.windows for b in bs), key=lambda b: b.att_io.shape[1])
            kernel_rows.append({"circuit": c["name"], **gat_kernel_memory(model.refine[0], biggest)})
            log.info("%s kernel memory: %s", c["name"], kernel_rows[-1])
    write_parquet(pd.DataFrame(rows), memory)
    if on_gpu:
        result = {"memory": True, "runtime": True, "device": torch.cuda.get_device_name(), "runs": kernel_rows,
                  "what": "whole forward pass (batch of the memory study), torch.cuda.max_memory_allocated, "
                          f"median of {p.kernel.repeats} timed passes"}
    elif kernel_rows:
        result = {"memory": False, "runtime": False, "device": "cpu (Triton interpreter)", "runs": kernel_rows,
                  "what": "one GAT attention over the largest mini-batch's cone edges, CPU allocator trace",
                  "reason": "no GPU in this run: the claims are about the whole model on a GPU (config/full.yaml); "
                            "the interpreter's op-level trace is a check, its run time says nothing of the kernel's"}
    else:
        why = "the method has no GAT refinement layer"
        result = {"memory": False, "runtime": False, "device": None, "runs": [], "reason": why}
    write_json(result, kernel)
