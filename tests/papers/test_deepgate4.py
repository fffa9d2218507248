"""P5 deepgate4: AIG conversion against circuitgraph, simulation and labels against brute force,
the exact partition (partitioned pass == full-graph pass), layers against PyG, the memory counter."""
import itertools
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch
from papers.deepgate4 import aig as A
from papers.deepgate4 import memory as Mem
from papers.deepgate4 import model as M
from papers.deepgate4 import partition as P
from papers.deepgate4 import train as T
from papers.deepgate4.params import parse
from papers.deepgate4.report import deepgate4_claims, errors, fit_exponent, improvements, slope_test

ROOT = Path(__file__).resolve().parents[2]


# ---- netlists -> AIG -------------------------------------------------------------------------
def _cg_eval(c, values):
    """Evaluate a circuitgraph Circuit on uint64 words (an independent reading of the netlist)."""
    ops = {"and": np.bitwise_and.reduce, "or": np.bitwise_or.reduce, "xor": np.bitwise_xor.reduce,
           "buf": lambda xs: xs[0]}
    inv = {"nand": "and", "nor": "or", "xnor": "xor", "not": "buf"}
    shape = next(iter(values.values())).shape
    val = {}
    for n in nx.topological_sort(c.graph):
        t = c.type(n)
        if n in values:
            val[n] = values[n]
            continue
        xs = [val[f] for f in c.fanin(n)]
        if t in ops:
            val[n] = ops[t](xs)
        elif t in inv:
            val[n] = ~ops[inv[t]](xs)
        elif t in ("0", "1"):
            val[n] = np.full(shape, 0 if t == "0" else ~np.uint64(0), dtype=np.uint64)
        elif t == "bb_input":
            val[n] = xs[0]
        else:
            raise ValueError(t)
    return val


@pytest.mark.parametrize("name", ["c17", "c17_assign", "c432", "c880", "s27", "ctrl"])
def test_converted_aig_is_functionally_equal_to_the_netlist(name):
    cg = pytest.importorskip("circuitgraph")
    path = A.netlist_dir() / f"{name}.v"
    g = A.read_netlist(path)
    c = cg.from_lib(name)
    sim = A.simulate(g, 4, np.random.default_rng(0))
    strip = lambda n: n.removeprefix("\\")
    values = {}
    for n in c.graph.nodes:
        if c.type(n) == "input":  # circuitgraph keeps unused inputs; the AIG drops them
            values[n] = sim[g.inputs[strip(n)]] if strip(n) in g.inputs else np.zeros(4, np.uint64)
        elif c.type(n) == "bb_output":  # a flop's Q: the AIG's pseudo primary input of that net
            q = [s for s in c.fanout(n) if s in g.inputs]
            values[n] = sim[g.inputs[q[0]]] if q else np.zeros(4, np.uint64)
    val = _cg_eval(c, values)
    assert g.outputs
    for out, node in g.outputs.items():
        if out.endswith(".D"):  # pseudo primary output: the data input of the flop driving `out`
            flop = next(n for n in c.graph.nodes if c.type(n) == "bb_output" and out[:-2] in c.fanout(n))
            ref = val[flop[:-2] + ".D"]
        else:
            ref = val[out] if out in val else val["\\" + out]
        mine = sim[node] if node >= 0 else np.full(4, 0 if node == A.CONST0 else ~np.uint64(0), dtype=np.uint64)
        np.testing.assert_array_equal(mine, ref, err_msg=f"{name}: output {out}")


def _eval_aig(g, bits):
    """Evaluate an AIG on one input assignment (dict PI node -> bool), node by node."""
    v = {}
    for n in range(g.num_nodes):
        if g.gate[n] == A.PI:
            v[n] = bits[n]
        elif g.gate[n] == A.AND:
            v[n] = v[g.fanin[n, 0]] and v[g.fanin[n, 1]]
        else:
            v[n] = not v[g.fanin[n, 0]]
    return v


@pytest.mark.parametrize("kind,ref", [("and", all), ("nand", lambda x: not all(x)), ("or", any),
                                      ("nor", lambda x: not any(x)), ("xor", lambda x: sum(x) % 2 == 1),
                                      ("xnor", lambda x: sum(x) % 2 == 0)])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_gate_conversion_truth_tables(kind, ref, n):
    b = A.Builder()
    ins = [b.pi(f"x{i}") for i in range(n)]
    g = b.finish("t", [("y", b.apply(kind, ins))])
    for bits in itertools.product([False, True], repeat=n):
        v = _eval_aig(g, {g.inputs[f"x{i}"]: bits[i] for i in range(n)})
        assert v[g.outputs["y"]] == ref(bits)


def test_structural_hashing_and_constant_folding():
    b = A.Builder()
    x, y = b.pi("x"), b.pi("y")
    assert b.and_(x, y) == b.and_(y, x)
    assert b.not_(b.not_(x)) == x
    assert b.and_(x, b.not_(x)) == A.CONST0
    assert b.and_(x, A.CONST1) == x and b.and_(x, A.CONST0) == A.CONST0
    assert b.apply("nand", [x, A.CONST0]) == A.CONST1


def _outputs(g, bits):
    """Output values y0, y1, ... of a generated circuit on an input assignment (name -> bool)."""
    v = _eval_aig(g, {node: bits[name] for name, node in g.inputs.items()})
    const = {A.CONST0: False, A.CONST1: True}
    return [const[g.outputs[k]] if g.outputs[k] < 0 else v[g.outputs[k]]
            for k in sorted(g.outputs, key=lambda k: int(k[1:]))]


def _operand_bits(a, c, width):
    return {f"a{i}": bool(a >> i & 1) for i in range(width)} | {f"b{i}": bool(c >> i & 1) for i in range(width)}


@pytest.mark.parametrize("width", [3, 4])
def test_generated_circuits_compute_their_functions(width):
    for kind, fn in [("adder", lambda a, b: a + b), ("multiplier", lambda a, b: a * b)]:
        g = A.GENERATORS[kind](width)
        for a, c in itertools.product(range(2**width), repeat=2):
            got = sum(int(x) << k for k, x in enumerate(_outputs(g, _operand_bits(a, c, width))))
            assert got == fn(a, c), (kind, a, c)
    g = A.comparator(width)
    for a, c in itertools.product(range(2**width), repeat=2):
        assert _outputs(g, _operand_bits(a, c, width)) == [a > c, a == c, a < c]
    g = A.multiplexer(2)
    for d, s in itertools.product(range(16), range(4)):
        bits = {f"d{i}": bool(d >> i & 1) for i in range(4)} | {f"s{i}": bool(s >> i & 1) for i in range(2)}
        assert _outputs(g, bits) == [bool(d >> s & 1)]


def test_malformed_netlists_name_file_and_line(tmp_path):
    cases = {
        "undriven.v": ("module m(a, y);\n input a;\n output y;\n and g1 (y, a, b);\nendmodule\n", 4, "never driven"),
        "loop.v": ("module m(a, y);\n input a;\n output y;\n wire w;\n and g1 (w, a, y);\n not g2 (y, w);\nendmodule\n",
                   None, "combinational loop"),
        "cell.v": ("module m(a, y);\n input a;\n output y;\n\n frob g1 (y, a);\nendmodule\n", 5, "unknown cell"),
        "twice.v": ("module m(a, y);\n input a;\n output y;\n not g1 (y, a);\n buf g2 (y, a);\nendmodule\n", 5, "driven twice"),
        "bad.bench": ("INPUT(a)\nOUTPUT(y)\ny = AND(a\n", 3, "cannot parse"),
        "gate.bench": ("INPUT(a)\nOUTPUT(y)\n# comment\ny = MAJ(a, a, a)\n", 4, "unknown gate"),
    }
    for fname, (text, line, what) in cases.items():
        path = tmp_path / fname
        path.write_text(text)
        with pytest.raises(A.NetlistError, match=what) as err:
            A.read_netlist(path)
        msg = str(err.value)
        assert msg.startswith(f"{path}:"), msg
        if line is not None:
            assert msg.startswith(f"{path}:{line}:"), msg


def test_bench_reader_with_flops_and_assign_expressions(tmp_path):
    bench = tmp_path / "t.bench"
    bench.write_text("INPUT(a)\nINPUT(b)\nOUTPUT(y)\nq = DFF(d)\nd = XOR(a, q)\ny = NAND(q, b)\n")
    g = A.read_netlist(bench)
    assert set(g.inputs) == {"a", "b", "q"} and set(g.outputs) == {"y", "q.D"}
    v = tmp_path / "e.v"
    v.write_text("module e(a, b, c, y);\n input a, b, c;\n output y;\n assign y = ~(a & b) | c ^ 1'b1;\nendmodule\n")
    g = A.read_netlist(v)
    for bits in itertools.product([False, True], repeat=3):
        val = _eval_aig(g, {g.inputs[k]: x for k, x in zip("abc", bits)})
        a, b, c = bits
        assert val[g.outputs["y"]] == ((not (a and b)) or (not c))


# ---- simulation and labels -------------------------------------------------------------------
@pytest.fixture(scope="module")
def c880():
    return A.read_netlist(A.netlist_dir() / "c880.v")


def test_simulation_matches_pattern_by_pattern_evaluation(c880):
    sim = A.simulate(c880, 1, np.random.default_rng(3))
    pis = np.flatnonzero(c880.gate == A.PI)
    for bit in (0, 17, 63):
        v = _eval_aig(c880, {p: bool(int(sim[p, 0]) >> bit & 1) for p in pis})
        got = np.array([int(sim[n, 0]) >> bit & 1 for n in range(c880.num_nodes)], dtype=bool)
        np.testing.assert_array_equal(got, np.array([v[n] for n in range(c880.num_nodes)]))
    prob = A.signal_probability(sim)
    np.testing.assert_allclose(prob, [int(w).bit_count() / 64 for w in sim[:, 0]])


def test_signal_probability_converges_to_the_exact_value():
    b = A.Builder()
    x = [b.pi() for _ in range(3)]
    g = b.finish("t", [("and", b.and_n(x)), ("or", b.or_n(x))])  # P(AND3) = 1/8, P(OR3) = 7/8
    prob = A.signal_probability(A.simulate(g, 2000, np.random.default_rng(0)))
    assert abs(prob[g.outputs["and"]] - 1 / 8) < 0.005 and abs(prob[g.outputs["or"]] - 7 / 8) < 0.005


def test_pi_cover_and_pairs_respect_the_official_filters(c880):
    rng = np.random.default_rng(0)
    sim = A.simulate(c880, 64, rng)
    prob = A.signal_probability(sim)
    cover = A.pi_cover(c880)
    G = nx.DiGraph(c880.edge_index.T.tolist())
    pis = np.flatnonzero(c880.gate == A.PI)
    for n in (50, 300, c880.num_nodes - 1):
        anc = nx.ancestors(G, n) | {n}
        want = {i for i, p in enumerate(pis) if p in anc}
        got = {i for i in range(pis.size) if int(cover[n, i // 64]) >> (i % 64) & 1}
        assert got == want
    a, b, dist = A.sample_tt_pairs(c880, sim, prob, rng, max_pairs=200, candidates=20000, max_prob_gap=0.1,
                                   extreme=(0.2, 0.8))
    assert a.size > 10 and np.all(a < b)
    np.testing.assert_array_equal(cover[a], cover[b])
    assert np.all(np.abs(prob[a] - prob[b]) <= 0.1)
    assert np.all((dist <= 0.2) | (dist >= 0.8))
    assert not any(G.has_edge(x, y) or G.has_edge(y, x) for x, y in zip(a, b))
    brute = [np.mean(np.unpackbits((sim[x] ^ sim[y]).view(np.uint8))) for x, y in zip(a[:5], b[:5])]
    np.testing.assert_allclose(dist[:5], brute)


# ---- the partition ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def c432():
    return A.read_netlist(A.netlist_dir() / "c432.v")


@pytest.fixture(scope="module")
def example(c432):
    return T.Example("c432", c432.gate, c432.fanin, c432.level, np.zeros(c432.num_nodes), np.zeros((2, 0)),
                     np.zeros(0), hidden=8, window_levels=4, areas_per_batch=4, pi_seed=0)


def test_partition_covers_every_gate_and_attends_to_in_window_fanin_cones(c432, example):
    s = 4
    G = nx.DiGraph(c432.edge_index.T.tolist())
    G.add_nodes_from(range(c432.num_nodes))
    window = c432.level // s
    seen = np.zeros(c432.num_nodes, dtype=bool)
    for full, batches in example.plan.windows:
        new = full.new.numpy()
        w = window[new[0]]
        assert np.all(window[new] == w)
        sub_g = G.subgraph(new)
        want = {(int(v), int(u)) for u in new for v in nx.ancestors(sub_g, u) | {u}}
        got = {(int(new[j]), int(new[i])) for j, i in full.att.T.tolist()}
        assert got == want  # source v in the in-window fan-in cone of destination u, self loops included
        want_io = want | {(int(v), int(u)) for u in new for v in nx.descendants(sub_g, u)}
        assert {(int(new[j]), int(new[i])) for j, i in full.att_io.T.tolist()} == want_io  # fan-in or fan-out cone
        for sub in batches:
            bnew = set(sub.new.tolist())
            seen[list(bnew)] = True
            for u in bnew:  # an area holds every not-yet-computed gate it depends on ...
                assert (nx.ancestors(sub_g, u) & set(new)) <= bnew
            ctx = set(sub.nodes[:sub.n_ctx].tolist())  # ... and its context is from earlier windows
            assert all(window[c] < w for c in ctx)
            assert ctx == {int(f) for u in bnew for f in c432.fanin[u] if f >= 0} - bnew
    assert seen.all()
    assert max(len(b) for _, b in example.plan.windows) > 1  # some window really is split


@pytest.mark.parametrize("attention", ["gat", "dot", "dense"])
def test_partitioned_update_equals_the_full_graph_pass(example, attention):
    torch.manual_seed(0)
    model = M.build({"kind": "circuit", "layers": 2, "attention": attention, "local_encoding": True},
                    hidden=8, mlp_hidden=8, heads=2, dropout=0.0, max_degree=8)
    with torch.no_grad():
        hs, hf = model.embed(example.plan, example.pi_vec)
        hs_p, hf_p = model.embed(example.plan, example.pi_vec, partitioned=True)
    assert hf.abs().sum() > 0
    torch.testing.assert_close(hf_p, hf, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hs_p, hs, rtol=1e-5, atol=1e-5)


def test_fanout_cones_and_global_attention_see_other_keys_than_the_partitioned_pass(example):
    """With fan-out cones (or a global window) a gate's keys can lie in another mini-batch: the two passes differ."""
    for arm in ({"attention": "gat", "cone": "fanin_fanout"}, {"attention": "global"}):
        torch.manual_seed(0)
        model = M.build({"kind": "circuit", "layers": 1, "local_encoding": False, **arm},
                        hidden=8, mlp_hidden=8, heads=2, dropout=0.0, max_degree=8)
        with torch.no_grad():
            _, hf = model.embed(example.plan, example.pi_vec)
            _, hf_p = model.embed(example.plan, example.pi_vec, partitioned=True)
        assert (hf - hf_p).abs().max() > 1e-4


def test_global_attention_is_a_softmax_over_the_gates_of_the_same_circuit():
    """The global layer against an explicit per-head softmax(q k^T / sqrt(C)) v restricted to one circuit of a union."""
    torch.manual_seed(0)
    layer = M.RefineLayer(8, 2, 16, "global", 0.0)
    n = 7
    part = torch.tensor([0, 0, 1, 1, 1, 0, 1])
    sub = type("S", (), {"part": part})()
    x = torch.randn(n, 8)
    q, k, v = layer.qkv(x).view(n, 3, 2, 4).unbind(1)
    want = torch.empty(n, 2, 4)
    for i in range(n):
        same = part == part[i]
        for h in range(2):
            w = torch.softmax(q[i, h] @ k[same, h].T / 2.0, 0)
            want[i, h] = w @ v[same, h]
    torch.testing.assert_close(layer.attend(x, sub), layer.out(want.reshape(n, 8)), rtol=1e-5, atol=1e-5)


def test_normalised_level_is_relative_to_each_circuit_of_a_union(c432):
    small = A.GENERATORS["adder"](4)
    to = lambda g, name: {"name": name, "gate": g.gate, "fanin": g.fanin, "level": g.level,
                          "prob": np.zeros(g.num_nodes, np.float32), "pairs": np.zeros((2, 0), np.int64),
                          "tt": np.zeros(0, np.float32)}
    u = T.union([to(c432, "c432"), to(small, "adder4")])
    plan = P.plan_circuit("u", u["gate"], u["fanin"], u["level"], window_levels=6, areas_per_batch=8, part=u["part"])
    frac = plan.level_frac.numpy()
    n = c432.num_nodes
    np.testing.assert_allclose(frac[:n], c432.level / c432.level.max(), rtol=1e-6)
    np.testing.assert_allclose(frac[n:], small.level / small.level.max(), rtol=1e-6)
    assert frac.max() == 1.0 and frac.min() == 0.0


def test_partitioned_training_step_runs_and_changes_the_model(c432):
    rng = np.random.default_rng(0)
    sim = A.simulate(c432, 4, rng)
    prob = A.signal_probability(sim)
    a, b, dist = A.sample_tt_pairs(c432, sim, prob, rng, max_pairs=50, candidates=5000, max_prob_gap=0.1,
                                   extreme=(0.2, 0.8))
    ex = T.Example("c432", c432.gate, c432.fanin, c432.level, prob, np.stack([a, b]), dist, hidden=8,
                   window_levels=6, areas_per_batch=8, pi_seed=0)
    torch.manual_seed(0)
    model = M.build({"kind": "circuit", "layers": 1, "attention": "gat", "local_encoding": True},
                    hidden=8, mlp_hidden=8, heads=2, dropout=0.0, max_degree=8)
    before = [p.detach().clone() for p in model.parameters()]
    rows = T.train(model, [ex], [ex], partitioned=True, epochs=3, lr=1e-2, patience=5, seed=0, flat_window=3,
                   flat_tol=0.0, log=lambda *_: None)
    assert all(np.isfinite(r["train/prob_l1"]) for r in rows)  # every step has new gates;
    assert any(np.isfinite(r["train/tt_l1"]) for r in rows)  # pairs once both gates are computed
    assert any(not torch.equal(x, y) for x, y in zip(before, model.parameters()))


@pytest.mark.parametrize("partitioned", [False, True])
def test_every_arm_gets_the_epoch_budget_and_stops_once_flat_with_the_best_weights(c432, partitioned):
    rng = np.random.default_rng(0)
    sim = A.simulate(c432, 4, rng)
    prob = A.signal_probability(sim)
    ex = T.Example("c432", c432.gate, c432.fanin, c432.level, prob, np.zeros((2, 0)), np.zeros(0), hidden=8,
                   window_levels=6, areas_per_batch=8, pi_seed=0, partitioned=partitioned)
    build = lambda: M.build({"kind": "circuit", "layers": 0, "attention": "gat", "local_encoding": False},
                            hidden=8, mlp_hidden=8, heads=2, dropout=0.0, max_degree=8)
    torch.manual_seed(0)
    rows = T.train(build(), [ex, ex], [ex], partitioned=partitioned, epochs=3, lr=1e-3, patience=100, seed=0,
                   flat_window=2, flat_tol=0.0, log=lambda *_: None)
    assert [r["epoch"] for r in rows] == [1, 2, 3]  # the budget, counted in passes over the data
    per_epoch = 2 * (sum(len(b) for _, b in ex.plan.windows) if partitioned else 1)  # steps of one pass over 2 unions
    assert [r["step"] for r in rows] == [per_epoch, 2 * per_epoch, 3 * per_epoch]
    torch.manual_seed(0)
    model = build()
    rows = T.train(model, [ex], [ex], partitioned=partitioned, epochs=60, lr=0.5, patience=2, seed=0, flat_window=3,
                   flat_tol=0.01, log=lambda *_: None)  # a huge learning rate: the error swings until it is lowered
    lowered = [r for r in rows if r["lr"] < 0.5]  # the weights kept: the best epoch after the first lowering
    best = min(lowered, key=lambda r: r["val/overall"])
    assert rows[-1]["epoch"] < 60 and rows[-1]["best_epoch"] == best["epoch"]
    assert rows[-1]["lr"] < 0.5 and all(a["lr"] >= b["lr"] for a, b in zip(rows, rows[1:]))  # lowered on plateaus
    assert sum(T.validation_error(model, [ex], partitioned=partitioned)) == pytest.approx(best["val/overall"], rel=1e-5)
    flat, spread = T.converged([r["val/overall"] for r in rows], window=3, tol=0.01, rates=[r["lr"] for r in rows])
    assert flat and spread <= 0.01  # stopped because the last 3 validation errors lie within 1%


def test_the_weights_kept_are_the_best_epoch_after_the_first_lowering_of_the_rate(c432, monkeypatch):
    # a planted validation history whose whole-run best (epoch 1, 0.5) comes at the first rate: the gate certifies
    # the end of the curve, after a lowering, so the weights kept are epoch 5's (0.6, the best after the first
    # lowering at the end of epoch 3; the earliest of the tie with epochs 6-7), not epoch 1's (the old rule)
    planted = [0.5, 0.9, 0.9, 0.8, 0.6, 0.6, 0.6]
    snapshots = []

    def fake_validation(model, val, partitioned):
        snapshots.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return planted[len(snapshots) - 1], 0.0

    monkeypatch.setattr(T, "validation_error", fake_validation)
    rng = np.random.default_rng(0)
    prob = A.signal_probability(A.simulate(c432, 4, rng))
    ex = T.Example("c432", c432.gate, c432.fanin, c432.level, prob, np.zeros((2, 0)), np.zeros(0), hidden=8,
                   window_levels=6, areas_per_batch=8, pi_seed=0, partitioned=False)
    torch.manual_seed(0)
    model = M.build({"kind": "circuit", "layers": 0, "attention": "gat", "local_encoding": False},
                    hidden=8, mlp_hidden=8, heads=2, dropout=0.0, max_degree=8)
    rows = T.train(model, [ex], [ex], partitioned=False, epochs=30, lr=1e-2, patience=2, seed=0, flat_window=3,
                   flat_tol=0.01, log=lambda *_: None)
    assert [r["val/overall"] for r in rows] == planted  # stopped once flat after a lowering, at epoch 7
    assert [r["lr"] for r in rows] == [1e-2] * 3 + [5e-3] * 2 + [2.5e-3] * 2  # the schedule counts the run's best
    assert rows[-1]["best_epoch"] == 5 == T.kept_epoch(planted, [r["lr"] for r in rows])
    state = model.state_dict()
    assert all(torch.equal(state[k], snapshots[4][k]) for k in state)  # epoch 5's weights, evaluated
    assert not all(torch.equal(state[k], snapshots[0][k]) for k in state)  # not epoch 1's
    # the rule alone: ties go to the earliest epoch; a run never lowered keeps its whole-run best
    assert T.kept_epoch([0.5, 0.9, 0.7, 0.7], [1.0, 1.0, 0.5, 0.5]) == 3
    assert T.kept_epoch([0.5, 0.9, 0.7], [1.0, 1.0, 1.0]) == 1


def test_full_graph_batch_nodes_of_one_gives_a_step_per_circuit():
    # the full-graph arms' examples (train.full_graph_batch_nodes): 1 keeps every circuit alone, so an epoch holds
    # one step per circuit; the partitioned arms' unions (train.batch_nodes) merge the small circuits
    circ = lambda name, n, depth: {"name": name, "gate": np.zeros(n, np.int64), "fanin": -np.ones((n, 2), np.int64),
                                   "level": np.minimum(np.arange(n), depth), "prob": np.zeros(n, np.float32),
                                   "pairs": np.zeros((2, 0), np.int64), "tt": np.zeros(0, np.float32)}
    data = [circ("a", 50, 3), circ("b", 30, 5), circ("c", 400, 9)]
    assert [u["name"] for u in T.pack(data, 1)] == ["a", "b", "c"]  # sorted by depth, one circuit each
    assert [u["name"] for u in T.pack(data, 100)] == ["a+b", "c"]


def test_convergence_reads_the_spread_of_the_last_epochs():
    assert T.converged([1.0, 0.5, 0.49, 0.495], window=2, tol=0.05) == (True, pytest.approx(0.005 / 0.49))
    assert not T.converged([1.0, 0.5, 0.4, 0.3], window=2, tol=0.05)[0]  # still falling by a third
    assert not T.converged([1.0, 0.3, 0.5, 0.3, 0.5], window=3, tol=0.05)[0]  # a patience stop that still swings
    assert not T.converged([1.0], window=2, tol=0.05)[0]  # too short to tell
    flat_start = [0.50, 0.499, 0.498]  # a slow start at the initial rate is not convergence
    assert not T.converged(flat_start, window=3, tol=0.05, rates=[1e-3] * 3)[0]
    assert T.converged(flat_start, window=3, tol=0.05, rates=[1e-3, 1e-3, 5e-4])[0]


def test_the_constant_predictor_is_the_label_median(c432):
    rng = np.random.default_rng(0)
    sim = A.simulate(c432, 4, rng)
    prob = A.signal_probability(sim)
    ex = T.Example("c432", c432.gate, c432.fanin, c432.level, prob, np.zeros((2, 0)), np.zeros(0), hidden=8,
                   window_levels=6, areas_per_batch=8, pi_seed=0)
    p0 = ex.prob[ex.gates].median()
    assert T.constant_error([ex], [ex]) == pytest.approx(float((ex.prob[ex.gates] - p0).abs().mean()))


def test_dense_arm_gradients_stay_finite_with_padded_areas(example):
    """Areas are padded to one length; no padded attention row may be empty (its backward is NaN)."""
    torch.manual_seed(0)
    model = M.build({"kind": "circuit", "layers": 1, "attention": "dense", "local_encoding": False},
                    hidden=8, mlp_hidden=8, heads=2, dropout=0.0, max_degree=8)
    _, hf = model.embed(example.plan, example.pi_vec)
    model.heads(hf).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ---- layers against independent implementations ----------------------------------------------
def test_gat_refinement_attention_matches_pyg_gatconv():
    pyg = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    n, width, heads = 30, 8, 2
    layer = M.RefineLayer(width, heads, 16, "gat", 0.0)
    src = torch.randint(0, n, (80,))
    dst = torch.randint(0, n, (80,))
    keep = src != dst
    edges = torch.cat([torch.stack([src[keep], dst[keep]]), torch.arange(n).repeat(2, 1)], 1)
    edges = torch.unique(edges, dim=1)
    layout = P.kernels.graph_layout(edges, n, n)
    sub = P.Sub(torch.arange(n), 0, [], edges, layout, None, None, None, edges, layout, torch.zeros(n, dtype=torch.long))
    conv = pyg.GATConv(width, width // heads, heads=heads, add_self_loops=False)
    with torch.no_grad():
        conv.lin.weight.copy_(layer.lin.weight)
        conv.att_src.copy_(layer.att_src)
        conv.att_dst.copy_(layer.att_dst)
        conv.bias.copy_(torch.randn(width))
        layer.bias.copy_(conv.bias)
    x = torch.randn(n, width)
    torch.testing.assert_close(layer.attend(x, sub), conv(x, edges), rtol=1e-5, atol=1e-5)


def test_dense_per_area_attention_equals_sparse_dot_product_attention(example):
    torch.manual_seed(0)
    dense = M.RefineLayer(8, 2, 16, "dense", 0.0)
    dot = M.RefineLayer(8, 2, 16, "dot", 0.0)
    dot.load_state_dict(dense.state_dict())
    full, _ = example.plan.windows[1]
    x = torch.randn(full.new.numel(), 8)
    torch.testing.assert_close(dense.attend(x, full), dot.attend(x, full), rtol=1e-5, atol=1e-5)
    dense.fused = dot.fused = False  # the unfused references agree too
    torch.testing.assert_close(dense.attend(x, full), dot.attend(x, full), rtol=1e-5, atol=1e-5)


def test_aggregator_destination_term_cancels_in_the_softmax():
    """The official TFMlpAggr score w.[q(x_i), k(x_j)] + c and our w_k.k(x_j) give one softmax over j."""
    torch.manual_seed(0)
    x_i, x_j = torch.randn(5, 1, 6), torch.randn(5, 3, 6)
    q, k, w_q, w_k = torch.nn.Linear(6, 4), torch.nn.Linear(6, 4), torch.randn(4), torch.randn(4)
    official = torch.softmax(q(x_i) @ w_q + k(x_j) @ w_k + 0.3, dim=1)
    ours = torch.softmax(k(x_j) @ w_k, dim=1)
    torch.testing.assert_close(official, ours)


# ---- memory ----------------------------------------------------------------------------------
def test_peak_memory_counts_storages_once_and_frees_them():
    mb = 2**20
    with Mem.PeakMemory() as pm:
        a = torch.empty(mb // 4)  # 1 MB
        b = torch.empty(2 * mb // 4)  # 2 MB
        view = b[: mb // 8]  # a view: no new storage
        b.add_(1.0)  # in place: no new storage
        assert pm.live == 3 * mb
        del a
        c = torch.empty(mb // 8)  # 0.5 MB
        assert pm.live == 2.5 * mb
        del b, view, c
    assert pm.peak == 3 * mb and pm.live == 0


def test_forward_cost_partitioned_peak_is_below_the_full_graph_peak(example):
    torch.manual_seed(0)
    model = M.build({"kind": "circuit", "layers": 1, "attention": "gat", "local_encoding": True},
                    hidden=8, mlp_hidden=8, heads=2, dropout=0.0, max_degree=8)
    full, _ = Mem.forward_cost(model, example, partitioned=False)
    part, _ = Mem.forward_cost(model, example, partitioned=True)
    assert 0 < part < full
    rows = Mem.fused_vs_unfused(model, example, device="cpu", repeats=1)  # the GPU code path of claims (c), (d)
    assert [r["arm"] for r in rows] == ["fused", "unfused", "control"] and all(r["peak_bytes"] > 0 for r in rows)


def test_allocator_peak_follows_allocations_and_frees():
    """The allocator trace's peak, against hand-counted bytes: 1 MB + 2 MB live at once, then 0.5 MB."""
    mb = 2**20

    def work():
        a = torch.empty(mb // 4)
        b = torch.empty(2 * mb // 4)
        del a
        c = torch.empty(mb // 8)
        return b, c

    assert Mem.allocator_peak(work) == 3 * mb
    assert Mem.allocator_peak(lambda: torch.empty(mb // 4)) == mb


def test_gat_kernel_memory_counts_the_triton_kernel_against_the_reference(example):
    """Under the interpreter the Triton kernel computes the reference's output, and allocates only its
    outputs (out: n H C floats, lse: n H, the per-node scores, the row order) while the reference's
    per-edge tensors grow with the edges; the A/A control equals the unfused count."""
    torch.manual_seed(0)
    model = M.build({"kind": "circuit", "layers": 1, "attention": "gat", "local_encoding": True,
                     "cone": "fanin_fanout"}, hidden=8, mlp_hidden=8, heads=2, dropout=0.0, max_degree=8)
    sub = max((b for _, bs in example.plan.windows for b in bs), key=lambda b: b.att_io.shape[1])
    r = Mem.gat_kernel_memory(model.refine[0], sub)
    n, H, C, E = r["nodes"], r["heads"], r["channels"], r["edges"]
    assert r["max_abs_diff"] < 1e-5 and E > n
    fused_outputs = 4 * (n * H * C + n * H) + 4 * 2 * n * H + 8 * n  # out, lse; a_src, a_dst; int64 order
    assert fused_outputs <= r["fused_bytes"] <= fused_outputs + 8 * (n + 1) * 4  # + the degree-order temporaries
    assert r["unfused_bytes"] >= 4 * E * H * C  # at least the gathered per-edge messages
    assert r["control_bytes"] == r["unfused_bytes"]


def test_fit_exponent_recovers_a_power_law():
    n = np.array([1e3, 3e3, 1e4, 3e4])
    assert fit_exponent(n, 5 * n**0.5)[0] == pytest.approx(0.5)
    assert fit_exponent(n, 2 * n)[0] == pytest.approx(1.0)


def test_improvement_over_the_next_best_baseline():
    import pandas as pd

    rows = []
    for arm, prob, tt in [("m", 0.08, 0.2), ("b1", 0.10, 0.25), ("b2", 0.12, 0.15)]:
        rows.append({"arm": arm, "seed": 0, "family": "F", "prob_err_sum": prob * 10, "gates": 10,
                     "tt_err_sum": tt * 4, "pairs": 4})
    imp = improvements(errors(pd.DataFrame(rows)), "m")
    assert imp["F prob"] == pytest.approx(20.0) and imp["F prob next-best"] == "b1"
    assert imp["F tt"] == pytest.approx(100 * (0.15 - 0.2) / 0.15) and imp["F tt next-best"] == "b2"
    # the overall figure: sums 0.28 (m), 0.35 (b1), 0.27 (b2): next-best by overall is b2
    assert imp["F overall"] == pytest.approx(100 * (0.27 - 0.28) / 0.27) and imp["F overall next-best"] == "b2"
    assert improvements(errors(pd.DataFrame(rows)), "m", exclude=["b2"])["F overall next-best"] == "b1"


def test_slope_test_interval_covers_the_exponent_and_decides():
    n = np.array([1e3, 3e3, 1e4, 3e4, 1e5])
    noise = np.array([1.05, 0.97, 1.02, 0.96, 1.01])
    ev = slope_test(n, 7 * n**0.4 * noise, threshold=1.0, direction="<")
    assert ev.replicates == 5 and ev.interval[0] < 0.4 < ev.interval[1] and ev.verdict == "holds"
    assert slope_test(n, 7 * n**1.2 * noise, threshold=1.0, direction="<").verdict == "does not hold"
    assert slope_test(n[:2], n[:2], threshold=0.5, direction=">").verdict == "inconclusive"  # 2 circuits


def _claims_inputs(method_prob, seeds=3, full_exponent=0.95, kernel=None, control_prob=0.13, converged=True,
                   sizes=(1e3, 3e3, 1e4, 3e4, 1e5), part_exponent=0.3, families=("F",)):
    """Errors of a method m, baselines b1, b2 and the ablation c on held-out families; control_prob may be a
    dict family -> the ablation's probability error there."""
    import pandas as pd

    rows, runs = [], []
    for seed in range(seeds):
        for fam in families:
            ctl = control_prob[fam] if isinstance(control_prob, dict) else control_prob
            for arm, prob, tt in [("m", method_prob, 0.10), ("b1", 0.10, 0.25), ("b2", 0.12, 0.15), ("c", ctl, 0.2)]:
                jitter = 1 + 0.02 * (seed - 1)
                rows.append({"arm": arm, "seed": seed, "family": fam, "prob_err_sum": prob * jitter * 10, "gates": 10,
                             "tt_err_sum": tt * jitter * 4, "pairs": 4})
        for arm in ("m", "b1", "b2", "c"):
            runs.append({"arm": arm, "seed": seed, "epoch": 8, "converged": converged or arm != "b2",
                         "best_val": 0.2, "val/constant": 0.4, "train_cpu_seconds": 16.0,
                         "final_spread": 0.01 if converged or arm != "b2" else 0.1})
    err = errors(pd.DataFrame(rows))
    nodes = np.array(sizes)
    wobble = np.array([1.03, 0.98, 1.01, 0.97, 1.02])[: len(nodes)]
    piv = pd.DataFrame({"circuit": list("abcde")[: len(nodes)], "nodes": nodes, "full": nodes**full_exponent * wobble,
                        "partitioned": 1e5 * nodes**part_exponent * wobble, "planted_linear": 64 * nodes,
                        "planted_constant": np.full(len(nodes), 1e5)})
    cfg = {**_config(), "method": "m", "control": "c",
           "arms": {"m": {"kind": "circuit", "layers": 1, "attention": "gat"}, "b1": {"kind": "gat", "layers": 1},
                    "b2": {"kind": "gat", "layers": 1}, "c": {"kind": "circuit", "layers": 0, "attention": "gat"}},
           "data": {**_config()["data"], "test": {f: [f"x{i}"] for i, f in enumerate(families)}}}
    p = parse(cfg)
    return (p, err, improvements(err, "m", exclude=["c"]), piv,
            kernel or {"memory": False, "runtime": False, "device": None, "runs": [], "reason": "no GPU in this run"},
            pd.DataFrame(runs))


def test_claims_decide_on_seed_intervals_and_the_gpu_claim_is_not_measured():
    (a, b, c, _), checks = deepgate4_claims(*_claims_inputs(method_prob=0.08))  # overall 0.18 against b2's 0.27
    assert a.id == "a_f" and a.verdict == "holds" and a.evidence.replicates == 3 and a.premise_met
    assert a.evidence.effect == pytest.approx((0.27 - 0.18) / 0.27)
    assert a.control.verdict == "does not hold" and a.control.kind == "ablation"  # the control arm (0.33) is behind b2
    # relative exponent 0.3 - 0.95 < 0; a linear pass (relative +0.05) does not read as slower than the full graph
    assert b.verdict == "holds" and b.control.verdict == "does not hold" and b.control.kind == "null"
    assert b.evidence.effect == pytest.approx(0.3 - 0.95, abs=0.02)
    assert b.positive_control.verdict == "holds"  # a constant pass grows more slowly than the full graph
    assert c.verdict == "not measured" and c.evidence is None and "no GPU" in c.note and checks == []
    (a, *_), _ = deepgate4_claims(*_claims_inputs(method_prob=0.18))  # overall 0.28 > b2's 0.27
    assert a.verdict == "does not hold" and "behind the next-best baseline on prob (vs b1" in a.note
    (a, *_), _ = deepgate4_claims(*_claims_inputs(method_prob=0.08, control_prob=0.05))
    assert a.control.verdict == "holds" and a.verdict == "inconclusive"  # the control beats b2 too: vacuous
    (a, *_), _ = deepgate4_claims(*_claims_inputs(method_prob=0.08, seeds=2))
    assert a.verdict == "inconclusive"  # two seeds are too few for a verdict


def test_the_ablation_control_is_decided_per_family():
    # the ablation beats b2 on F (0.25 < 0.27) but not on G: F's claim is inconclusive, G's holds; a control
    # combined over the families (holds only where it holds on both) would have let F pass
    (a_f, a_g, *_), _ = deepgate4_claims(*_claims_inputs(method_prob=0.08, control_prob={"F": 0.05, "G": 0.2},
                                                         families=("F", "G")))
    assert (a_f.id, a_g.id) == ("a_f", "a_g")
    assert a_f.control.verdict == "holds" and a_f.verdict == "inconclusive" and "negative control" in a_f.note
    assert a_g.control.verdict == "does not hold" and a_g.verdict == "holds"
    # the method (0.18 overall) is ahead of its ablation on both (0.25 on F, 0.40 on G): the note opens with it
    assert a_g.note.startswith("m is behind its own ablation c (higher overall error than the ablation trained from "
                               "the same seed) in 0 of 3 seeds on G (one-sided sign test p = 1); the relative")
    # the sensitivity reading counts the ablation as a baseline: on F it is then the next-best (0.25 < b2's 0.27)
    assert "c counted as a baseline: the next-best on G is then b2 (unchanged)" in a_g.note
    assert "c counted as a baseline: the next-best on F is then c, F overall: m vs c (sensitivity)" in a_f.note


def test_behind_ablation_counts_seed_family_pairs():
    import pandas as pd

    from papers.deepgate4.report import ablation_seeds_text, behind_ablation, sign_test_p

    err = pd.DataFrame({"arm": ["m", "c"] * 4, "seed": [0, 0, 1, 1] * 2, "family": ["F"] * 4 + ["G"] * 4,
                        "overall": [0.3, 0.2, 0.1, 0.2, 0.5, 0.4, 0.6, 0.1]})
    assert behind_ablation(err, "m", "c") == (3, 4, ["F seed 0", "G seed 0", "G seed 1"])
    # counted in seeds, the independent replicates (F and G of a seed are one trained network): behind on every
    # family in seed 0 only; the sign test P(X >= 1 | 2, 1/2) = 3/4, and 3 of 3 seeds give 1/8
    text = ablation_seeds_text(err, "m", "c")
    assert "on every held-out family in 1 of 2 seeds (one-sided sign test p = 0.75;" in text
    assert "3 of 4 seed x family evaluations" in text
    assert sign_test_p(3, 3) == pytest.approx(0.125) and sign_test_p(0, 3) == 1.0


def test_seeds_to_decide_is_the_fewest_whose_t_interval_excludes_the_threshold():
    from scipy import stats

    from papers.deepgate4.report import half_width, seeds_to_decide

    d = np.array([0.08, -1.148, -0.798])  # the EPFL reductions of review r5: mean -0.622, sd 0.633
    n = seeds_to_decide(d)
    half = lambda k: stats.t.ppf(0.975, k - 1) * d.std(ddof=1) / np.sqrt(k)
    assert n == 7 and half(n) < abs(d.mean()) <= half(n - 1)  # r5: ~7 seeds
    assert half_width(d, 5) == pytest.approx(half(5)) and half(5) > abs(d.mean())  # 5 seeds still straddle
    assert 900 < seeds_to_decide([0.398, -0.384, 0.061]) < 1000  # the ITC99 reductions: r5's ~960
    assert seeds_to_decide([0.1, 0.2, 0.3], threshold=0.2) is None  # a mean on the threshold: never
    assert seeds_to_decide([1.0, 1.1, 1.2]) == 3  # already decided at 3 seeds


def test_the_report_line_on_what_would_decide_claim_a_costs_seeds_from_the_train_benchmarks(tmp_path):
    import types

    import pandas as pd

    from papers.deepgate4.report import OVERALL, seeds_to_decide_text

    bench = []
    for name, cpu in [("prepare/circuits", 20.0), ("train/seed0", 90.0), ("train/seed1", 100.0),
                      ("train/seed2", 110.0), ("evaluate/metrics", 30.0)]:  # 350 CPU s, 100 a train job
        f = tmp_path / f"{name}.tsv"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"s\tcpu_time\n{2 * cpu}\t{cpu}\n")
        bench.append(f)
    reductions = {"A": [0.398, -0.384, 0.061], "B": [0.08, -1.148, -0.798]}  # relative reductions of m over b
    err = pd.DataFrame([{"arm": arm, "seed": seed, "family": fam, OVERALL: 1.0 - d if arm == "m" else 1.0}
                        for fam, ds in reductions.items() for seed, d in enumerate(ds) for arm in ("m", "b")])
    p = types.SimpleNamespace(method="m", min_improvement=0.0, data=types.SimpleNamespace(test=["A", "B"]))
    text = seeds_to_decide_text(err, p, {"A": "b", "B": "b"}, bench, 360.0)
    # B: 7 seeds (4 more at 100 CPU s: 750 CPU s, 2.1x the budget); 5 seeds (550 CPU s) still straddle
    assert ('B (mean -0.622, sd 0.633 over 3 seeds): ~7 seeds would read "does not hold", 4 more at 100 CPU s a '
            "seed, ~750 CPU s in all (2.1x the 360 CPU s budget); 5 seeds (~550 CPU s)") in text
    assert "still straddling" in text and "undecidable at any affordable count" in text.split("; B")[0]
    assert seeds_to_decide_text(err, p, {"A": "b", "B": "b"}, bench[:1], 360.0) == ""  # no train job: no estimate


def test_an_unconverged_baseline_or_a_narrow_size_range_leaves_the_claims_inconclusive():
    from papers.deepgate4.report import epochs_to_flat, open_runs_text

    inputs = _claims_inputs(method_prob=0.18, converged=False)
    (a, *_), _ = deepgate4_claims(*inputs)  # b2, the next-best, still learning
    assert a.verdict == "inconclusive" and "premise not met: compared arms converged" in a.note
    # the note names the open runs but no timing (claims.json is identical between reruns)
    assert "b2 seed 0 (final spread 10.0%)" in a.note and "CPU" not in a.note
    # how many more epochs each open run would need, projected from its final spread (10% against flat_tol 2%:
    # ceil(log2(5)) = 3 halvings of the rate, 2 epochs each (patience), then 3 flat epochs = 9), and the cost
    p = inputs[0]
    t = type(p.train)(flat_tol=0.02, patience=2, lr_decay=0.5, flat_window=3, epochs=8)
    text = open_runs_text(inputs[-1], ["m", "b2", "c"], t)
    assert "3 of 9" in text and "b2 seed 0 (final spread 10.0%: ~9 more epochs, ~18 CPU s)" in text
    assert open_runs_text(inputs[-1], ["m", "c"], t) == ""  # every compared run flat
    assert epochs_to_flat(0.01, tol=0.02, patience=2, lr_decay=0.5, window=3) == 0
    (_, b, *_), _ = deepgate4_claims(*_claims_inputs(method_prob=0.08, sizes=(1e3, 1.5e3, 2e3, 3e3, 4e3)))
    assert b.verdict == "inconclusive" and "circuit sizes spanned" in b.note  # 4x: less than a decade


def test_memory_claim_needs_a_linear_reference_and_can_fail():
    # a super-linear full graph: a linear pass grows more slowly than it too, so the test is vacuous
    (_, b, *_), _ = deepgate4_claims(*_claims_inputs(method_prob=0.08, full_exponent=1.2))
    assert b.control.verdict == "holds" and b.verdict == "inconclusive" and "negative control" in b.note
    # partitioned memory growing faster than the full graph's: the claim does not hold
    (_, b, *_), _ = deepgate4_claims(*_claims_inputs(method_prob=0.08, part_exponent=1.1))
    assert b.verdict == "does not hold"


def test_peaks_the_allocator_did_not_report_leave_the_gpu_claims_not_measured_with_a_note():
    # the CUDA probe (tests/workflow/test_gpu_routing.py): torch.cuda's allocator statistics read 0
    row = {"fused_seconds": 1.0, "unfused_seconds": 2.0, "control_seconds": 2.0, "fused_peak_bytes": 0,
           "unfused_peak_bytes": 0, "control_peak_bytes": 0, "max_abs_diff": 1e-6}
    kernel = {"memory": True, "runtime": True, "device": "probe", "what": "forward",
              "runs": [{"circuit": c, **row} for c in "xyz"]}
    p, err, imp, piv, _, runs = _claims_inputs(method_prob=0.08, kernel=kernel)
    piv = piv.assign(full=0, partitioned=0)
    (_, b, c, d), _ = deepgate4_claims(p, err, imp, piv, kernel, runs)
    assert b.verdict == c.verdict == "not measured" and "not positive" in b.note and "not positive" in c.note
    assert d.verdict == "holds" and d.note  # runtime was measured: said where


def test_the_interpreter_trace_is_a_check_not_a_claim():
    runs = [{"circuit": c, "fused_bytes": f, "unfused_bytes": 1000, "control_bytes": 1000, "max_abs_diff": 1e-7}
            for c, f in (("x", 100), ("y", 150), ("z", 120))]
    kernel = {"memory": False, "runtime": False, "device": "cpu (Triton interpreter)", "what": "one layer",
              "reason": "no GPU", "runs": runs}
    (*_, c, d), checks = deepgate4_claims(*_claims_inputs(method_prob=0.08, kernel=kernel))
    assert c.verdict == d.verdict == "not measured"
    assert {k.id: k.passed for k in checks} == {"fused_kernel_op_trace": True, "fused_kernel_matches_reference": True}
    assert checks[0].measured == pytest.approx(0.85)  # the smallest reduction over the circuits


def test_kernel_claims_on_a_gpu_need_three_circuits():
    row = {"fused_seconds": 1.0, "unfused_seconds": 2.0, "control_seconds": 2.0, "fused_peak_bytes": 50,
           "unfused_peak_bytes": 100, "control_peak_bytes": 100, "max_abs_diff": 1e-6}
    kernel = {"memory": True, "runtime": True, "device": "GPU", "what": "forward", "runs": [
        {"circuit": c, **row} for c in "xy"]}
    (*_, c, d), _ = deepgate4_claims(*_claims_inputs(method_prob=0.08, kernel=kernel))
    assert c.verdict == d.verdict == "inconclusive"  # two circuits: fewer than 3 replicates
    kernel["runs"] = [{"circuit": c, **row, "fused_peak_bytes": 50 + i} for i, c in enumerate("xyz")]
    (*_, c, d), _ = deepgate4_claims(*_claims_inputs(method_prob=0.08, kernel=kernel))
    assert c.verdict == "holds" and c.control.verdict == "does not hold"  # A/A: no reduction
    assert d.evidence.identical and "identical values" in d.note  # the same timing on every circuit is said
    assert c.premise_met and c.note  # measured: the premise (same embeddings) and where it was measured are stated
    kernel["runs"] = [{**r, "max_abs_diff": 0.5} for r in kernel["runs"]]  # the fused pass computes something else
    (*_, c, d), _ = deepgate4_claims(*_claims_inputs(method_prob=0.08, kernel=kernel))
    assert c.verdict == "inconclusive" and "premise not met" in c.note


def test_planted_peaks_are_linear_and_constant():
    small, large = Mem.planted_peaks(1000, 8), Mem.planted_peaks(4000, 8)
    assert large["linear"] == 4 * small["linear"] == 4 * 2 * 1000 * 8 * 4  # two (n, width) float storages
    assert large["constant"] == small["constant"]


# ---- configuration ---------------------------------------------------------------------------
def _config(overlay=None):
    import yaml

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["deepgate4"]

    def merge(a, b):
        for k, v in b.items():
            a[k] = merge(dict(a.get(k, {})), v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
        return a

    if overlay:
        merge(cfg, yaml.safe_load((ROOT / "config" / overlay).read_text())["deepgate4"])
    return cfg


@pytest.mark.parametrize("overlay", [None, "smoke.yaml", "full.yaml"])
def test_every_scale_parses(overlay):
    p = parse(_config(overlay))
    assert p.method in p.arms and p.kernel.device in ("cuda", "cpu") and p.train.epochs >= 1


def test_cross_field_rules_are_checked():
    cfg = _config()
    with pytest.raises(ValueError, match="method"):
        parse({**cfg, "method": "nope"})
    with pytest.raises(ValueError, match="both in train and test"):
        parse({**cfg, "data": {**cfg["data"], "train": ["cavlc"]}})
    with pytest.raises(ValueError, match="both in train and val"):
        parse({**cfg, "data": {**cfg["data"], "train": ["c3540"]}})
    with pytest.raises(ValueError, match="control"):
        parse({**cfg, "control": cfg["method"]})
    with pytest.raises(ValueError, match="cone"):
        parse({**cfg, "arms": {**cfg["arms"], "deepgate4": {**cfg["arms"]["deepgate4"], "cone": "fanout"}}})
    with pytest.raises(KeyError, match="deepgate4.typo"):
        parse({**cfg, "typo": 1})


def test_heldout_text_names_the_held_out_circuits_deeper_than_every_training_one():
    import pandas as pd

    from papers.deepgate4.report import heldout_text

    info = pd.DataFrame({"circuit": ["t1", "t2", "h1", "h2"], "family": ["generated", "EPFL", "ITC99", "EPFL"],
                         "train": [True, True, False, False], "test": [False, False, True, True],
                         "depth": [136, 20, 152, 30]})
    p = parse({**_config(), "data": {**_config()["data"], "test": {"ITC99": ["h1"], "EPFL": ["h2"]}}})
    text = heldout_text(info, p)
    assert "deepest training circuit is t1 (depth 136)" in text and "h1 (depth 152)" in text
    assert "h2 (depth" not in text and "t2 (EPFL)" in text  # a trained netlist of a held-out family is named
    assert "no held-out circuit is deeper" in heldout_text(info.assign(depth=[200, 20, 152, 30]), p)


def test_dropped_baselines_are_explained_from_the_recorded_earlier_run():
    import json

    from papers.deepgate4.report import EARLIER_RUN, dropped_baselines_text

    er = json.loads(EARLIER_RUN.read_text())
    (p, err, *_) = _claims_inputs(method_prob=0.08)
    text = dropped_baselines_text(p, err)  # the test config trains none of deepgate2, gat, plain_gt
    assert f"commit {er['commit'][:7]}" in text and f"at most {er['train']['epochs']} epochs" in text
    assert "not measured" in text and "c (" in text  # the ablation's standing in this run is stated
