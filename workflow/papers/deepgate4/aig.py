"""And-Inverter Graphs from gate-level netlists, with DeepGate's node types (PI, AND, NOT).

DeepGate (and the official DeepGate4 code, ``aiger_utils.aig_to_xdata``) represents a circuit as
a DAG of three node types: primary inputs (0), two-input ANDs (1) and NOTs (2), the inverters
being explicit nodes. :class:`Builder` builds such a graph with structural hashing (one node per
distinct ``AND(a, b)`` / ``NOT(a)``), double-inverter removal and constant folding, and
:func:`read_netlist` converts the netlists that ship in PyPI's ``circuitgraph`` (structural
Verilog and ISCAS ``.bench``) gate by gate:

    AND(x1..xn)  -> balanced tree of 2-input ANDs      NAND -> NOT(AND)
    OR(x1..xn)   -> NOT(AND(NOT x1 .. NOT xn))          NOR  -> AND(NOT x1 .. NOT xn)
    XOR(a, b)    -> AND(NOT(AND(a, b)), NOT(AND(NOT a, NOT b)))   XNOR -> NOT(XOR); n-ary: folded
    BUF, assign  -> the same node                       1'b0, 1'b1 -> folded away

Flip-flops are cut as in the official ``data_preparation.py`` (DFF -> PI): each flop's output
becomes a pseudo primary input and its data input a pseudo primary output. Nodes that reach no
output are dropped. A malformed netlist raises :class:`NetlistError` naming the file and line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PI, AND, NOT = 0, 1, 2  # DeepGate's gate_to_index (the official code also has DFF = 3, cut here)
CONST0, CONST1 = -1, -2  # literals of the constants, folded before they reach the graph


class NetlistError(ValueError):
    """A netlist that cannot be read; the message starts with ``file:line:``."""

    def __init__(self, path, line, message):
        super().__init__(f"{path}:{line}: {message}")


@dataclass
class Aig:
    """An AIG in topological order (by level, then creation order).

    gate (N,) int8 in {PI, AND, NOT}; fanin (N, 2) int64, -1 where absent; level (N,) forward
    level (PI = 0, a gate = 1 + its deepest fanin); po (N,) bool, the (pseudo) primary outputs.
    """

    name: str
    gate: np.ndarray
    fanin: np.ndarray
    level: np.ndarray
    po: np.ndarray
    inputs: dict = field(default_factory=dict)  # primary input name -> node (inputs that reach an output)
    outputs: dict = field(default_factory=dict)  # output name -> node, or CONST0 / CONST1

    @property
    def num_nodes(self) -> int:
        return int(self.gate.size)

    @property
    def edge_index(self) -> np.ndarray:
        """(2, E): row 0 the fanin (source), row 1 the gate (destination)."""
        dst = np.repeat(np.arange(self.num_nodes), 2)
        src = self.fanin.reshape(-1)
        keep = src >= 0
        return np.stack([src[keep], dst[keep]])


# ---- building ------------------------------------------------------------------------------
class Builder:
    """Structurally hashed AIG construction; literals are node ids or CONST0 / CONST1."""

    def __init__(self):
        self.gate, self.fanin, self.names = [], [], {}
        self._and, self._not = {}, {}

    def _new(self, gate, a=-1, b=-1):
        self.gate.append(gate)
        self.fanin.append((a, b))
        return len(self.gate) - 1

    def pi(self, name=None):
        node = self._new(PI)
        if name is not None:
            self.names[name] = node
        return node

    def not_(self, a):
        if a == CONST0 or a == CONST1:
            return CONST1 if a == CONST0 else CONST0
        if self.gate[a] == NOT:  # NOT(NOT(x)) = x
            return self.fanin[a][0]
        if a not in self._not:
            self._not[a] = self._new(NOT, a)
        return self._not[a]

    def _complement(self, a, b):
        return (self.gate[a] == NOT and self.fanin[a][0] == b) or (self.gate[b] == NOT and self.fanin[b][0] == a)

    def and_(self, a, b):
        if a == CONST0 or b == CONST0:
            return CONST0
        if a == CONST1:
            return b
        if b == CONST1 or a == b:
            return a
        if self._complement(a, b):  # x AND NOT x = 0
            return CONST0
        key = (min(a, b), max(a, b))
        if key not in self._and:
            self._and[key] = self._new(AND, *key)
        return self._and[key]

    def and_n(self, xs):
        """Balanced tree of 2-input ANDs (depth ceil(log2 n))."""
        xs = list(xs)
        if not xs:
            return CONST1
        while len(xs) > 1:
            xs = [self.and_(xs[i], xs[i + 1]) if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]
        return xs[0]

    def or_n(self, xs):
        return self.not_(self.and_n([self.not_(x) for x in xs]))

    def xor(self, a, b):
        return self.and_(self.not_(self.and_(a, b)), self.not_(self.and_(self.not_(a), self.not_(b))))

    def xor_n(self, xs):
        xs = list(xs)
        acc = xs[0] if xs else CONST0
        for x in xs[1:]:
            acc = self.xor(acc, x)
        return acc

    def mux(self, sel, a, b):
        """sel ? b : a."""
        return self.or_n([self.and_(self.not_(sel), a), self.and_(sel, b)])

    def apply(self, kind, ins):
        """A gate of a netlist (lower-case kind) on literals."""
        if kind in ("and", "nand"):
            out = self.and_n(ins)
        elif kind in ("or", "nor"):
            out = self.or_n(ins)
        elif kind in ("xor", "xnor"):
            out = self.xor_n(ins)
        elif kind in ("buf", "not"):
            out = ins[0]
        else:
            raise KeyError(kind)
        return self.not_(out) if kind in ("nand", "nor", "xnor", "not") else out

    def finish(self, name: str, outputs) -> Aig:
        """Keep what the outputs need; sort by (level, creation order); constant outputs are dropped.

        `outputs`: literals, or (name, literal) pairs to keep the output names.
        """
        named = [o if isinstance(o, tuple) else (None, o) for o in outputs]
        outputs = [lit for _, lit in named]
        n = len(self.gate)
        gate = np.array(self.gate, dtype=np.int8)
        fanin = np.array(self.fanin, dtype=np.int64).reshape(n, 2)
        outs = sorted({o for o in outputs if o >= 0})
        if not outs:
            raise ValueError(f"{name}: every output is constant")
        need = np.zeros(n, dtype=bool)
        need[outs] = True
        for v in range(n - 1, -1, -1):  # creation order is topological: fanins were created first
            if need[v]:
                need[fanin[v][fanin[v] >= 0]] = True
        level = np.zeros(n, dtype=np.int64)
        for v in range(n):
            f = fanin[v][fanin[v] >= 0]
            if f.size:
                level[v] = 1 + level[f].max()
        keep = np.flatnonzero(need)
        order = keep[np.lexsort((keep, level[keep]))]
        new_id = np.full(n, -1, dtype=np.int64)
        new_id[order] = np.arange(order.size)
        new_fanin = np.where(fanin[order] >= 0, new_id[np.maximum(fanin[order], 0)], -1)
        po = np.zeros(order.size, dtype=bool)
        po[new_id[outs]] = True
        remap = lambda lit: int(new_id[lit]) if lit >= 0 else lit
        inputs = {k: int(new_id[v]) for k, v in self.names.items() if new_id[v] >= 0}
        return Aig(name, gate[order], new_fanin, level[order].astype(np.int32), po, inputs,
                   {k: remap(lit) for k, lit in named if k is not None})


# ---- reading netlists ----------------------------------------------------------------------
PRIMITIVES = {"and", "nand", "or", "nor", "xor", "xnor", "not", "buf"}
FLOPS = {"ff", "fflopd", "dff"}  # flip-flop cells of circuitgraph's ISCAS-89 files (ports D, Q)
_TOKEN = re.compile(r"\\\S+|[A-Za-z_][A-Za-z0-9_$]*|\d+'[bB][01]|\d+|<=|\S")
_CONST = {"1'b0": CONST0, "1'b1": CONST1, "1'B0": CONST0, "1'B1": CONST1}


def _strip_comments(text: str) -> str:
    """Blank out // and /* */ comments, keeping every newline (line numbers stay right)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def _statements(text: str):
    """(line, tokens) per statement: split at ';' and around `module` / `endmodule`."""
    stmt, line = [], None
    for lineno, row in enumerate(text.split("\n"), 1):
        for tok in _TOKEN.findall(row):
            if tok == "endmodule":
                if stmt:
                    yield line, stmt
                yield lineno, [tok]
                stmt = []
                continue
            if tok == "module" and stmt:
                yield line, stmt
                stmt = []
            if not stmt:
                line = lineno
            if tok == ";":
                yield line, stmt
                stmt = []
            else:
                stmt.append(tok)
    if stmt:
        yield line, stmt


def _name(tok: str) -> str:
    return tok.removeprefix("\\")


def _split_commas(tokens):
    """Top-level comma-separated groups of tokens."""
    groups, cur, depth = [], [], 0
    for t in tokens:
        depth += (t == "(") - (t == ")")
        if t == "," and depth == 0:
            groups.append(cur)
            cur = []
        else:
            cur.append(t)
    groups.append(cur)
    return groups


class _Expr:
    """Recursive descent over `~ a`, `a & b`, `a ^ b`, `a | b` (Verilog precedence), parentheses."""

    def __init__(self, tokens, where):
        self.toks, self.i, self.where = tokens, 0, where

    def parse(self):
        node = self._or()
        if self.i != len(self.toks):
            raise NetlistError(*self.where, f"cannot parse expression near {' '.join(self.toks[self.i:self.i + 3])!r}")
        return node

    def _binary(self, op, sub, kind):
        terms = [sub()]
        while self.i < len(self.toks) and self.toks[self.i] == op:
            self.i += 1
            terms.append(sub())
        return terms[0] if len(terms) == 1 else (kind, terms)

    def _or(self):
        return self._binary("|", self._xor, "or")

    def _xor(self):
        return self._binary("^", self._and, "xor")

    def _and(self):
        return self._binary("&", self._unary, "and")

    def _unary(self):
        if self.i >= len(self.toks):
            raise NetlistError(*self.where, "expression ends early")
        t = self.toks[self.i]
        self.i += 1
        if t == "~":
            return ("not", [self._unary()])
        if t == "(":
            node = self._or()
            if self.i >= len(self.toks) or self.toks[self.i] != ")":
                raise NetlistError(*self.where, "missing ')'")
            self.i += 1
            return node
        if t in _CONST or re.fullmatch(r"\\\S+|[A-Za-z_][A-Za-z0-9_$]*", t):
            return _name(t)
        raise NetlistError(*self.where, f"unexpected {t!r} in expression")


class _Netlist:
    """Signals and their drivers, read from a file; `build` turns them into an AIG."""

    def __init__(self, path):
        self.path = str(path)
        self.inputs, self.outputs = [], []
        self.drivers = {}  # signal -> (expression tree, line)
        self.flops = []  # (q, d, line)

    def drive(self, signal, expr, line):
        if signal in self.drivers or signal in self.inputs:
            raise NetlistError(self.path, line, f"signal {signal!r} is driven twice")
        self.drivers[signal] = (expr, line)

    def build(self, name: str) -> Aig:
        b = Builder()
        lit = {}
        for s in self.inputs:
            lit[s] = b.pi(s)
        for q, _, line in self.flops:  # flop outputs: pseudo primary inputs
            if q in lit or q in self.drivers:
                raise NetlistError(self.path, line, f"flop output {q!r} is driven elsewhere")
            lit[q] = b.pi(q)

        def leaves(expr):
            if isinstance(expr, str):
                return [] if expr in _CONST else [expr]
            return [x for sub in expr[1] for x in leaves(sub)]

        def evaluate(expr):
            if isinstance(expr, str):
                return _CONST[expr] if expr in _CONST else lit[expr]
            kind, args = expr
            return b.apply(kind, [evaluate(a) for a in args])

        def resolve(signal, line):
            """Iterative depth-first search; a driver is built once every signal it reads is."""
            entered, stack = set(), [(signal, line)]
            while stack:
                s, ln = stack[-1]
                if s in lit:
                    stack.pop()
                    continue
                if s not in self.drivers:
                    raise NetlistError(self.path, ln, f"signal {s!r} is used but never driven")
                expr, dline = self.drivers[s]
                if s in entered:  # second visit: everything it reads is built
                    lit[s] = evaluate(expr)
                    stack.pop()
                    continue
                entered.add(s)
                for x in leaves(expr):
                    if x in lit:
                        continue
                    if x in entered:  # entered, not finished: x is an ancestor of s
                        raise NetlistError(self.path, dline, f"combinational loop through {x!r}")
                    stack.append((x, dline))

        outs = []
        for s, line in self.outputs:
            resolve(s, line)
            outs.append((s, lit[s]))
        for q, d, line in self.flops:  # flop data inputs: pseudo primary outputs
            resolve(d, line)
            outs.append((f"{q}.D", lit[d]))
        return b.finish(name, outs)


def _read_verilog(path: Path) -> _Netlist:
    text = _strip_comments(path.read_text())
    modules, current = [], None
    for line, toks in _statements(text):
        if toks[0] == "module":
            current = {"name": _name(toks[1]), "line": line, "body": [], "behavioural": False}
            modules.append(current)
        elif toks[0] == "endmodule":
            current = None
        elif current is None:
            raise NetlistError(path, line, f"statement outside a module: {' '.join(toks[:4])!r}")
        else:
            current["behavioural"] |= toks[0] in ("always", "reg", "initial")
            current["body"].append((line, toks))
    flops = FLOPS | {m["name"] for m in modules if m["behavioural"]}
    tops = [m for m in modules if not m["behavioural"]]
    if len(tops) != 1:
        raise NetlistError(path, tops[1]["line"] if len(tops) > 1 else 1,
                           f"expected one structural module, found {len(tops)}")
    net = _Netlist(path)
    outputs = []
    for line, toks in tops[0]["body"]:
        head = toks[0]
        if head in ("input", "output", "wire"):
            if "[" in toks:
                raise NetlistError(path, line, "bus declarations are not supported (bit-blast the netlist first)")
            names = [_name(t) for t in toks[1:] if t != ","]
            if head == "input":
                net.inputs += names
            elif head == "output":
                outputs += [(n, line) for n in names]
        elif head == "assign":
            if "=" not in toks:
                raise NetlistError(path, line, "assign without '='")
            eq = toks.index("=")
            if eq != 2:
                raise NetlistError(path, line, f"cannot parse assign target {' '.join(toks[1:eq])!r}")
            net.drive(_name(toks[1]), _Expr(toks[eq + 1:], (path, line)).parse(), line)
        elif head in PRIMITIVES or head in flops:
            if "(" not in toks or toks[-1] != ")":
                raise NetlistError(path, line, f"malformed instance of {head!r}")
            ports = _split_commas(toks[toks.index("(") + 1:-1])
            if head in flops:
                named = {}
                for p in ports:  # .PORT ( signal )
                    if len(p) != 5 or p[0] != "." or p[2] != "(" or p[4] != ")":
                        raise NetlistError(path, line, f"flop {head!r} needs named ports .D (x), .Q (y)")
                    named[p[1]] = _name(p[3])
                if "D" not in named or "Q" not in named:
                    raise NetlistError(path, line, f"flop {head!r} needs ports D and Q")
                net.flops.append((named["Q"], named["D"], line))
            else:
                if any(len(p) != 1 for p in ports) or len(ports) < 2:
                    raise NetlistError(path, line, f"gate {head!r} needs (output, input, ...) with plain signals")
                out, ins = _name(ports[0][0]), [_name(p[0]) for p in ports[1:]]
                if head in ("not", "buf") and len(ins) != 1:
                    raise NetlistError(path, line, f"{head} takes one input, got {len(ins)}")
                net.drive(out, (head, ins), line)
        else:
            raise NetlistError(path, line, f"unknown cell or statement {head!r}")
    net.outputs = outputs
    return net


_BENCH_GATE = re.compile(r"^([^\s=]+)\s*=\s*([A-Za-z]+)\s*\(([^)]*)\)\s*$")
_BENCH_IO = re.compile(r"^(INPUT|OUTPUT)\s*\(\s*([^\s)]+)\s*\)\s*$", re.IGNORECASE)


def _read_bench(path: Path) -> _Netlist:
    net = _Netlist(path)
    for line, row in enumerate(path.read_text().split("\n"), 1):
        row = row.split("#", 1)[0].strip()
        if not row:
            continue
        m = _BENCH_IO.match(row)
        if m:
            if m.group(1).upper() == "INPUT":
                net.inputs.append(m.group(2))
            else:
                net.outputs.append((m.group(2), line))
            continue
        m = _BENCH_GATE.match(row)
        if not m:
            raise NetlistError(path, line, f"cannot parse {row!r}")
        out, kind, args = m.group(1), m.group(2).lower(), [a.strip() for a in m.group(3).split(",") if a.strip()]
        kind = "buf" if kind == "buff" else kind
        if kind == "dff":
            if len(args) != 1:
                raise NetlistError(path, line, "DFF takes one input")
            net.flops.append((out, args[0], line))
        elif kind in PRIMITIVES and args:
            if kind in ("not", "buf") and len(args) != 1:
                raise NetlistError(path, line, f"{kind.upper()} takes one input, got {len(args)}")
            net.drive(out, (kind, args), line)
        else:
            raise NetlistError(path, line, f"unknown gate {m.group(2)!r}")
    return net


def read_netlist(path, name: str | None = None) -> Aig:
    """Read a structural Verilog (``.v``) or ISCAS ``.bench`` netlist into an :class:`Aig`."""
    path = Path(path)
    reader = _read_bench if path.suffix == ".bench" else _read_verilog
    return reader(path).build(name or path.stem)


def netlist_dir() -> Path:
    """The netlists shipped in PyPI's circuitgraph (ISCAS-85/89, ITC-99 b17-b22, EPFL)."""
    import importlib.util

    spec = importlib.util.find_spec("circuitgraph")
    if spec is None:
        raise FileNotFoundError("PyPI package circuitgraph (==0.2.1) is not installed")
    return Path(spec.origin).parent / "netlists"


# ---- generated circuits (training variety) ---------------------------------------------------
def _operands(b: Builder, width: int):
    """Two width-bit operands a, b (least significant bit first), named a0.., b0.."""
    return [b.pi(f"a{i}") for i in range(width)], [b.pi(f"b{i}") for i in range(width)]


def _named(outs):
    """Outputs y0, y1, ... (least significant first)."""
    return [(f"y{i}", o) for i, o in enumerate(outs)]


def adder(width: int) -> Aig:
    """Ripple-carry adder a + b (width-bit operands, width + 1 outputs)."""
    b = Builder()
    a, c = _operands(b, width)
    carry, outs = CONST0, []
    for x, y in zip(a, c):
        outs.append(b.xor(b.xor(x, y), carry))
        carry = b.or_n([b.and_(x, y), b.and_(carry, b.xor(x, y))])
    return b.finish(f"adder{width}", _named(outs + [carry]))


def multiplier(width: int) -> Aig:
    """Array multiplier a * b (shift-and-add of the partial products with ripple-carry rows)."""
    b = Builder()
    a, c = _operands(b, width)
    acc = [CONST0] * (2 * width)
    for j, y in enumerate(c):
        carry = CONST0
        for i in range(width + 1):
            pp = b.and_(a[i], y) if i < width else CONST0
            x = acc[i + j]
            acc[i + j] = b.xor(b.xor(x, pp), carry)
            carry = b.or_n([b.and_(x, pp), b.and_(carry, b.xor(x, pp))])
    return b.finish(f"multiplier{width}", _named(acc))


def comparator(width: int) -> Aig:
    """Unsigned magnitude comparator: a > b, a == b, a < b."""
    b = Builder()
    a, c = _operands(b, width)
    gt, eq = CONST0, CONST1
    for x, y in zip(reversed(a), reversed(c)):  # from the most significant bit
        gt = b.or_n([gt, b.and_n([eq, x, b.not_(y)])])
        eq = b.and_(eq, b.not_(b.xor(x, y)))
    return b.finish(f"comparator{width}", _named([gt, eq, b.not_(b.or_n([gt, eq]))]))


def multiplexer(select_bits: int) -> Aig:
    """2^k-to-1 multiplexer as a tree of 2-to-1 muxes."""
    b = Builder()
    data = [b.pi(f"d{i}") for i in range(2**select_bits)]
    sel = [b.pi(f"s{i}") for i in range(select_bits)]
    for s in sel:
        data = [b.mux(s, data[i], data[i + 1]) for i in range(0, len(data), 2)]
    return b.finish(f"mux{2**select_bits}", _named(data))


GENERATORS = {"adder": adder, "multiplier": multiplier, "comparator": comparator, "mux": multiplexer}


# ---- bit-parallel random simulation ----------------------------------------------------------
def simulate(aig: Aig, words: int, rng: np.random.Generator) -> np.ndarray:
    """Values of every node under 64 * `words` uniform random input patterns: (N, words) uint64.

    Level by level, like the official simulator (simulator/simulator.cpp): an AND is the bitwise
    AND of its fanins' words, a NOT the complement.
    """
    val = np.zeros((aig.num_nodes, words), dtype=np.uint64)
    pis = np.flatnonzero(aig.gate == PI)
    val[pis] = rng.integers(0, 2**64, size=(pis.size, words), dtype=np.uint64, endpoint=False)
    order = np.argsort(aig.level, kind="stable")
    bounds = np.searchsorted(aig.level[order], np.arange(aig.level.max() + 2))
    for lv in range(1, aig.level.max() + 1):
        nodes = order[bounds[lv]:bounds[lv + 1]]
        ands, nots = nodes[aig.gate[nodes] == AND], nodes[aig.gate[nodes] == NOT]
        val[ands] = val[aig.fanin[ands, 0]] & val[aig.fanin[ands, 1]]
        val[nots] = ~val[aig.fanin[nots, 0]]
    return val


def signal_probability(val: np.ndarray) -> np.ndarray:
    """Fraction of patterns at which each node is 1: (N,) float64."""
    return np.bitwise_count(val).sum(axis=1) / (64.0 * val.shape[1])


def tt_distance(val: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Normalised Hamming distance between the simulated truth tables of nodes a and b."""
    return np.bitwise_count(val[a] ^ val[b]).sum(axis=1) / (64.0 * val.shape[1])


def pi_cover(aig: Aig) -> np.ndarray:
    """For each node, the set of primary inputs in its fan-in cone as a packed bitset (N, ceil(P/64))."""
    pis = np.flatnonzero(aig.gate == PI)
    cover = np.zeros((aig.num_nodes, max(1, -(-pis.size // 64))), dtype=np.uint64)
    cover[pis, np.arange(pis.size) // 64] = np.uint64(1) << (np.arange(pis.size) % 64).astype(np.uint64)
    order = np.argsort(aig.level, kind="stable")
    bounds = np.searchsorted(aig.level[order], np.arange(aig.level.max() + 2))
    for lv in range(1, aig.level.max() + 1):
        nodes = order[bounds[lv]:bounds[lv + 1]]
        f0, f1 = aig.fanin[nodes, 0], aig.fanin[nodes, 1]
        cover[nodes] = cover[f0] | np.where((f1 >= 0)[:, None], cover[np.maximum(f1, 0)], 0)
    return cover


def sample_tt_pairs(aig: Aig, val: np.ndarray, prob: np.ndarray, rng: np.random.Generator, *, max_pairs: int,
                    candidates: int, max_prob_gap: float, extreme: tuple[float, float]):
    """Gate pairs for the truth-table-distance task, filtered as the official simulator does.

    A candidate pair (i, j) is kept if i and j depend on the same primary inputs, their signal
    probabilities differ by at most `max_prob_gap`, neither feeds the other directly, and their
    distance is outside the open interval `extreme` (the official code keeps distance <= 0.2 or
    >= 0.8). The official code scans every pair; we draw `candidates` random same-cover pairs and
    keep at most `max_pairs`. Returns (a, b, distance).
    """
    gates = np.flatnonzero(aig.gate != PI)
    if gates.size < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    _, group = np.unique(pi_cover(aig)[gates], axis=0, return_inverse=True)
    group = group.reshape(-1)
    order = np.argsort(group, kind="stable")
    starts = np.searchsorted(group[order], np.arange(group.max() + 2))
    size = starts[1:] - starts[:-1]
    i = rng.integers(0, gates.size, candidates)
    gi = group[i]
    ok = size[gi] > 1
    i, gi = i[ok], gi[ok]
    j = order[starts[gi] + rng.integers(0, size[gi] - 1, i.size)]
    j = np.where(j == i, order[starts[gi] + size[gi] - 1], j)  # not the node itself
    a, b = gates[np.minimum(i, j)], gates[np.maximum(i, j)]
    keep = a != b
    a, b = a[keep], b[keep]
    pairs = np.unique(np.stack([a, b], 1), axis=0)
    a, b = pairs[:, 0], pairs[:, 1]
    direct = (aig.fanin[b] == a[:, None]).any(1) | (aig.fanin[a] == b[:, None]).any(1)
    dist = tt_distance(val, a, b)
    keep = ~direct & (np.abs(prob[a] - prob[b]) <= max_prob_gap) & ((dist <= extreme[0]) | (dist >= extreme[1]))
    a, b, dist = a[keep], b[keep], dist[keep]
    if a.size > max_pairs:
        pick = np.sort(rng.choice(a.size, max_pairs, replace=False))
        a, b, dist = a[pick], b[pick], dist[pick]
    return a, b, dist
