"""DeepGate4's update strategy: level windows, fan-in-cone areas and a history table.

The official code (``data_preparation.get_area``, ``dg4_trainer``) cuts a circuit into areas,
the k-hop fan-in cones of gates at levels k, 2k - 2, ... (k = 8), and processes them area level
by area level, a mini-batch of areas at a time: gates computed before are pulled from a history
table (detached), each gate is updated once and pushed to the table. Peak memory is then that of
one mini-batch, whatever the circuit's size (the paper's sub-linear memory).

We keep the structure and make the partition exact:

* window ``w`` holds the gates of levels ``[w s, (w + 1) s)`` (``s`` = `window_levels`);
* its areas are the in-window fan-in cones of its roots, the gates with no fanout inside the
  window, so every gate of the window lies in some area, and an area holds every not-yet-computed
  gate its root depends on (a path inside the window has fewer than ``s`` hops);
* the context of an area is the direct fanins from earlier windows: they are in the history.

So the level-by-level GNN of a mini-batch sees exactly the inputs the full-graph pass sees, and
the sparse attention, restricted to each gate's fan-in cone inside its window (the official
areas' ``global_virtual_edge``: fan-in cone plus the gate itself), sees the same keys. The
partitioned forward therefore equals the full-graph forward (a unit test checks it); only memory
differs. A gate shared by two mini-batches of a window is computed twice, identically.

Each Sub also carries the fan-in-and-fan-out edges (``att_io``: u attends to v when v is in u's
fan-in cone or u in v's, inside the Sub), the attention the paper describes for its sparse
transformer (Sec. 3.3). A gate's fan-out cone can leave its mini-batch, so with these edges the
partitioned pass sees fewer keys than the full-graph pass: it no longer equals it exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

import kernels

from .aig import AND, NOT, PI


@dataclass
class Sub:
    """One unit of work: context gates (history) then new gates, in local indices.

    nodes (n_ctx + n_new,) global ids, context first; steps: per level of the new gates,
    (and_dst (a,), and_src (a, 2), not_dst (b,), not_src (b, 1)) in local indices;
    att: (2, E) attention edges among the new gates (local new-gate indices: source in the
    destination's in-window fan-in cone, self loops included) and its CSR/CSC layout; att_io,
    att_io_layout: the same with the fan-out cones added (source in the destination's fan-in or
    fan-out cone); part (n_new,): the circuit of each new gate in a union (a global attention
    stays inside its circuit); areas
    (A, L): the root cones as local new-gate indices, -1 padded, with their cone masks
    area_mask (A, L, L) (True: row attends to column) and area_pick (n_new,), the position
    in the flattened (A * L) of one area holding each gate (the dense attention's layout).
    """

    nodes: torch.Tensor
    n_ctx: int
    steps: list
    att: torch.Tensor
    att_layout: kernels.GraphLayout
    areas: torch.Tensor
    area_mask: torch.Tensor
    area_pick: torch.Tensor
    att_io: torch.Tensor
    att_io_layout: kernels.GraphLayout
    part: torch.Tensor

    @property
    def new(self) -> torch.Tensor:
        return self.nodes[self.n_ctx:]

    def to(self, device) -> Sub:
        steps = [tuple(t.to(device) for t in step) for step in self.steps]
        layout = kernels.GraphLayout(*(t.to(device) for t in self.att_layout))
        io_layout = kernels.GraphLayout(*(t.to(device) for t in self.att_io_layout))
        return Sub(self.nodes.to(device), self.n_ctx, steps, self.att.to(device), layout, self.areas.to(device),
                   self.area_mask.to(device), self.area_pick.to(device), self.att_io.to(device), io_layout,
                   self.part.to(device))


@dataclass
class Plan:
    """A circuit ready for the models: node features, and its windows as full and partitioned work."""

    name: str
    num_nodes: int
    gate: torch.Tensor  # (N,) long
    level: torch.Tensor  # (N,) long
    level_frac: torch.Tensor  # (N,) float: level / depth of the node's own circuit, in [0, 1]
    fanout_and: torch.Tensor  # (N,) long: AND gates among the fanouts (the official out_and)
    fanout_not: torch.Tensor  # (N,) long: NOT gates among the fanouts (the official out_not)
    edge_index: torch.Tensor  # (2, E): fanin -> gate
    windows: list  # per window: (full Sub, [Sub per mini-batch of areas])

    def to(self, device) -> Plan:
        t = lambda x: x.to(device)
        windows = [(full.to(device), [b.to(device) for b in batches]) for full, batches in self.windows]
        return Plan(self.name, self.num_nodes, t(self.gate), t(self.level), t(self.level_frac), t(self.fanout_and),
                    t(self.fanout_not), t(self.edge_index), windows)

    def work(self, partitioned: bool):
        """The Subs in processing order: one per window, or one per mini-batch of areas."""
        for full, batches in self.windows:
            yield from (batches if partitioned else [full])


def _reach(fanin_local: np.ndarray, n: int, hops: int) -> sp.csr_matrix:
    """R[u, v] = 1 iff v = u or v reaches u in at most `hops` hops inside the window."""
    rows = np.repeat(np.arange(n), 2)
    cols = fanin_local.reshape(-1)
    keep = cols >= 0
    A = sp.csr_matrix((np.ones(keep.sum(), dtype=np.int8), (rows[keep], cols[keep])), shape=(n, n))
    R = sp.identity(n, dtype=np.int8, format="csr")
    P = R
    for _ in range(hops):
        P = (P @ A).astype(bool).astype(np.int8)
        if P.nnz == 0:
            break
        R = (R + P).astype(bool).astype(np.int8)
    return R.tocsr()


def _sub(new: np.ndarray, gate, level, fanin, R_new: sp.csr_matrix, roots: np.ndarray, part: np.ndarray) -> Sub:
    """Build a Sub for the new gates `new` (sorted by level); R_new = R restricted to them;
    roots: positions in `new` of the roots whose areas (cones) cover `new`."""
    fi = fanin[new]
    ctx = np.setdiff1d(fi[fi >= 0], new)  # fanins computed in earlier windows
    nodes = np.concatenate([ctx, new])
    order = np.argsort(nodes, kind="stable")
    at = np.searchsorted(nodes[order], np.maximum(fi, 0))
    fi_local = np.where(fi >= 0, order[np.minimum(at, nodes.size - 1)], -1)  # every fanin is in `nodes`
    new_local = np.arange(ctx.size, nodes.size)
    steps = []
    lv = level[new]
    for L in np.unique(lv[lv > 0]):
        at = lv == L
        a = at & (gate[new] == AND)
        b = at & (gate[new] == NOT)
        steps.append((torch.from_numpy(new_local[a]), torch.from_numpy(fi_local[a]),
                      torch.from_numpy(new_local[b]), torch.from_numpy(fi_local[b][:, :1].copy())))
    coo = R_new.tocoo()
    att = torch.from_numpy(np.stack([coo.col, coo.row]).astype(np.int64))  # source v -> destination u
    layout = kernels.graph_layout(att, new.size, new.size)
    io = (R_new + R_new.T).tocoo()  # fan-in or fan-out cone (R is reflexive: self loops once)
    att_io = torch.from_numpy(np.stack([io.col, io.row]).astype(np.int64))
    io_layout = kernels.graph_layout(att_io, new.size, new.size)
    R_new = R_new.tocsr()
    R_new.sort_indices()
    ptr, idx = R_new.indptr, R_new.indices
    cones = [idx[ptr[r]:ptr[r + 1]] for r in roots]  # each root's cone, sorted local indices
    L = max(c.size for c in cones)
    areas = np.full((len(cones), L), -1, dtype=np.int64)
    mask = np.zeros((len(cones), L, L), dtype=bool)
    pick = np.zeros(new.size, dtype=np.int64)
    dense = R_new.toarray() > 0 if new.size <= 8192 else None  # (n, n): cone masks by fancy indexing, not scipy
    for a, c in enumerate(cones):
        areas[a, :c.size] = c
        mask[a, :c.size, :c.size] = dense[np.ix_(c, c)] if dense is not None else R_new[c][:, c].toarray() > 0
        pick[c] = a * L + np.arange(c.size)
    mask[:, np.arange(L), np.arange(L)] = True  # padding rows see themselves only (no empty row); never read
    return Sub(torch.from_numpy(nodes), int(ctx.size), steps, att, layout, torch.from_numpy(areas),
               torch.from_numpy(mask), torch.from_numpy(pick), att_io, io_layout,
               torch.from_numpy(part[new].astype(np.int64)))


def plan_circuit(name, gate, fanin, level, *, window_levels: int, areas_per_batch: int, partitioned: bool = True,
                 part=None) -> Plan:
    """Windows, areas and mini-batches of one circuit (numpy arrays from :mod:`.aig`); `part` (N,):
    which circuit of a disjoint union each node belongs to (None: one circuit)."""
    n = gate.size
    part = np.zeros(n, dtype=np.int64) if part is None else np.asarray(part, dtype=np.int64)
    depth = np.maximum(_part_max(part, level), 1)
    level_frac = (level / depth).astype(np.float32)
    window = level // window_levels
    fanout_and = np.bincount(fanin[gate == AND].reshape(-1), minlength=n)
    fanout_not = np.bincount(fanin[gate == NOT][:, 0], minlength=n)
    windows = []
    for w in range(int(window.max()) + 1):
        nodes = np.flatnonzero(window == w)
        nodes = nodes[np.lexsort((nodes, level[nodes]))]
        pos = np.full(n + 1, -1, dtype=np.int64)
        pos[nodes] = np.arange(nodes.size)
        fl = np.where(fanin[nodes] >= 0, pos[fanin[nodes]], -1)  # in-window fanins, local
        R = _reach(fl, nodes.size, window_levels - 1)
        has_fanout = np.zeros(nodes.size, dtype=bool)
        has_fanout[fl[fl >= 0]] = True
        roots = np.flatnonzero(~has_fanout)
        full = _sub(nodes, gate, level, fanin, R, roots, part)
        batches = []
        if partitioned:
            for i in range(0, roots.size, areas_per_batch):
                members = np.unique(R[roots[i:i + areas_per_batch]].indices)  # union of the areas
                batches.append(_sub(nodes[members], gate, level, fanin, R[members][:, members],
                                    np.searchsorted(members, roots[i:i + areas_per_batch]), part))
        windows.append((full, batches))
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a).astype(np.int64))
    edges = np.stack([fanin.reshape(-1), np.repeat(np.arange(n), 2)])
    return Plan(name, n, t(gate), t(level), torch.from_numpy(level_frac), t(fanout_and), t(fanout_not),
                t(edges[:, edges[0] >= 0]), windows)


def _part_max(part: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Per node, the largest level (depth) of its own circuit."""
    depth = np.zeros(int(part.max()) + 1, dtype=np.int64)
    np.maximum.at(depth, part, level)
    return depth[part]


def pi_vectors(num_pi: int, dim: int, seed: int) -> np.ndarray:
    """Structural embeddings of the primary inputs (DeepGate2's ``hs_init``): orthonormal when
    num_pi <= dim (QR of a Gaussian matrix), random unit vectors otherwise (as the official
    ``generate_orthogonal_vectors`` falls back to)."""
    rng = np.random.default_rng(seed)
    if num_pi <= dim:
        q, _ = np.linalg.qr(rng.standard_normal((dim, max(num_pi, 1))))
        return q.T[:num_pi].astype(np.float32)
    v = rng.standard_normal((num_pi, dim))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


__all__ = ["AND", "NOT", "PI", "Plan", "Sub", "pi_vectors", "plan_circuit"]
