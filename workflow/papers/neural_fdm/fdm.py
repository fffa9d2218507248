"""The force density method (Schek 1974), batched and differentiable in torch: the paper's decoder.

A bar network with E bars, N nodes and edge-node incidence C (E x N; +1 at a bar's first node,
-1 at its second) carries nodal loads P when every free node is in equilibrium:

.. math::
    r = P - C^\\top Q C X = 0 \\text{ on the free nodes}, \\qquad Q = \\mathrm{diag}(q),

with q the force densities (force / length; q > 0 tension, q < 0 compression). Splitting C into its
free and fixed columns, C = [C_f  C_s], turns equilibrium into one linear system per shape,

.. math::
    K X_f = P_f - C_f^\\top Q C_s X_s, \\qquad K = C_f^\\top Q C_f,

which we solve with a batched Cholesky factorisation of s K when every bar has the same sign s
(masonry shells: s = -1, so -K is positive definite), and with a batched LU solve otherwise (the
towers mix tension and compression, so K is indefinite). K and the right-hand side are assembled
bar by bar as segment sums (message passing from bars to nodes: :func:`kernels.segment_sum`, and
``index_add`` along each shape's row for K), as is the residual r. Autograd differentiates through the factorisation.
"""
from __future__ import annotations

import numpy as np
import torch

from kernels import segment_sum
from papers.neural_fdm.shapes import Structure


class LinearSolve(torch.autograd.Function):
    """X = K^-1 B for a batch of symmetric K (B, n, n) and B (B, n, 3), with an implicit backward.

    Forward: Cholesky of s K when `sign` s is +-1 (s K positive definite), LU when `sign` is 0 or
    when s K turns out not to be positive definite.
    Backward (adjoint method, as jax_fdm's ``implicit_diff``): with g = dL/dX and K symmetric,
    lambda = K^-1 g, dL/dB = lambda and dL/dK = -lambda X^T, reusing the forward factorisation.
    """

    @staticmethod
    def forward(ctx, k, b, sign: float):
        if sign != 0.0:
            factor, info = torch.linalg.cholesky_ex(sign * k)  # (B, n, n) lower triangular
            if bool((info != 0).any()):  # a bar at q = 0 (direct optimisation's bound) can make s K singular
                sign = 0.0
        if sign != 0.0:
            x = torch.cholesky_solve(sign * b, factor)
            pivots = None
        else:  # LU; a singular K gives inf / nan, which the callers treat as a failed evaluation
            factor, pivots, _ = torch.linalg.lu_factor_ex(k)
            x = torch.linalg.lu_solve(factor, pivots, b)
        ctx.sign = sign
        ctx.save_for_backward(factor, pivots, x) if pivots is not None else ctx.save_for_backward(factor, x)
        return x

    @staticmethod
    def backward(ctx, grad):
        if ctx.sign != 0.0:
            factor, x = ctx.saved_tensors
            lam = torch.cholesky_solve(ctx.sign * grad, factor)
        else:
            factor, pivots, x = ctx.saved_tensors
            lam = torch.linalg.lu_solve(factor, pivots, grad, adjoint=True)
        return -lam @ x.transpose(-1, -2), lam, None


class FDM:
    """The force density solver of one :class:`Structure`: index tables built once, tensors per call."""

    def __init__(self, structure: Structure, dtype=torch.float64):
        s = structure
        self.structure = s
        self.num_nodes = s.num_nodes
        self.free = torch.as_tensor(s.free)
        self.supports = torch.as_tensor(s.supports)
        self.num_free = int(self.free.numel())
        e = torch.as_tensor(s.edges)
        self.u, self.v = e[:, 0], e[:, 1]  # (E,)
        self.signs = torch.as_tensor(s.signs, dtype=dtype)
        self.active = torch.as_tensor(s.active)
        act = s.signs[s.active]
        self.definite_sign = float(act[0]) if np.all(act == act[0]) else 0.0  # s, or 0 when mixed

        # K = C_f^T Q C_f, entry by entry: bar e adds q_e at (u, u) and (v, v), -q_e at (u, v) and (v, u),
        # wherever both nodes are free. Flattened entry index f(a) * Nf + f(b), f = free numbering.
        fidx = np.full(s.num_nodes, -1)
        fidx[s.free] = np.arange(self.num_free)
        fu, fv = fidx[s.edges[:, 0]], fidx[s.edges[:, 1]]
        bars, rows, cols, coef = [], [], [], []
        for a, b, c in ((fu, fu, 1.0), (fv, fv, 1.0), (fu, fv, -1.0), (fv, fu, -1.0)):
            ok = (a >= 0) & (b >= 0)
            bars.append(np.flatnonzero(ok)); rows.append(a[ok]); cols.append(b[ok]); coef.append(np.full(ok.sum(), c))
        self.k_bar = torch.as_tensor(np.concatenate(bars))  # (M,)
        self.k_index = torch.as_tensor(np.concatenate(rows) * self.num_free + np.concatenate(cols))  # (M,)
        self.k_coef = torch.as_tensor(np.concatenate(coef), dtype=dtype)  # (M,)
        # Right-hand side: a bar from free node a to support b adds q_e x_b to node a.
        ub, vb = s.fixed[s.edges[:, 1]] & ~s.fixed[s.edges[:, 0]], s.fixed[s.edges[:, 0]] & ~s.fixed[s.edges[:, 1]]
        self.rhs_bar = torch.as_tensor(np.concatenate([np.flatnonzero(ub), np.flatnonzero(vb)]))
        self.rhs_to = torch.as_tensor(np.concatenate([fu[ub], fv[vb]]))  # free index of the loaded node
        self.rhs_from = torch.as_tensor(np.concatenate([s.edges[ub, 1], s.edges[vb, 0]]))  # the support
        self.faces = None if s.faces is None else torch.as_tensor(s.faces)

    # ---- assembly -----------------------------------------------------------------------------
    def stiffness(self, q: torch.Tensor) -> torch.Tensor:
        """K = C_f^T diag(q) C_f for a batch of force densities q (B, E) -> (B, Nf, Nf), contiguous.

        The entries' sum runs along each shape's row (``index_add`` over dim 1, the segment sum of
        :func:`kernels.segment_sum` with the batch leading): a batch-major K, which the factorisation reads
        ~2x faster than the transposed view of a node-major sum (the layout a segment sum over dim 0 gives)."""
        src = q[:, self.k_bar] * self.k_coef  # (B, M)
        k = q.new_zeros(q.shape[0], self.num_free * self.num_free).index_add(1, self.k_index, src)
        return k.view(-1, self.num_free, self.num_free)

    def rhs(self, q: torch.Tensor, x: torch.Tensor, loads: torch.Tensor) -> torch.Tensor:
        """P_f - C_f^T Q C_s X_s (B, Nf, 3) from q (B, E), supports taken from x (B, N, 3), loads (B, N, 3)."""
        msg = q[:, self.rhs_bar, None] * x[:, self.rhs_from]  # (B, R, 3)
        b = segment_sum(msg.transpose(0, 1), self.rhs_to, self.num_free).transpose(0, 1)  # (B, Nf, 3)
        return loads[:, self.free] + b

    # ---- solve --------------------------------------------------------------------------------
    def equilibrium(self, q: torch.Tensor, x: torch.Tensor, loads: torch.Tensor) -> torch.Tensor:
        """The equilibrium shape X (B, N, 3) for force densities q (B, E), supports from x, and loads.

        Free nodes solve K X_f = P_f - C_f^T Q C_s X_s; the supports keep their positions in x.
        """
        k = self.stiffness(q)  # (B, Nf, Nf)
        b = self.rhs(q, x, loads)  # (B, Nf, 3)
        x_free = LinearSolve.apply(k, b, self.definite_sign)
        out = x.clone()
        out[:, self.free] = x_free
        return out

    def residual(self, q: torch.Tensor, x: torch.Tensor, loads: torch.Tensor) -> torch.Tensor:
        """Nodal residual forces r = P - C^T Q C X (B, N, 3); zero on free nodes in equilibrium.

        Each bar sends q_e (x_v - x_u) to node u and the opposite to node v (a segment sum).
        """
        f = q[..., None] * (x[:, self.v] - x[:, self.u])  # (B, E, 3): force of bar e on node u
        msg = torch.cat([f, -f], 1).transpose(0, 1)  # (2E, B, 3)
        index = torch.cat([self.u, self.v])
        return loads + segment_sum(msg, index, self.num_nodes).transpose(0, 1)

    def equilibrium_matrix(self, x: torch.Tensor) -> torch.Tensor:
        """A (B, 3 Nf, E) with r_free = P_free + A q for a shape x (B, N, 3): the residual at the free nodes is
        linear in q (column e holds bar e's force per unit force density at its two nodes, where free)."""
        d = x[:, self.v] - x[:, self.u]  # (B, E, 3): bar e pulls node u towards v by q_e d_e
        fidx = torch.full((self.num_nodes,), -1, dtype=torch.long)
        fidx[self.free] = torch.arange(self.num_free)
        out = x.new_zeros(x.shape[0], self.num_free, 3, len(self.u))
        bars = torch.arange(len(self.u))
        for node, sign in ((self.u, 1.0), (self.v, -1.0)):
            ok = fidx[node] >= 0
            out[:, fidx[node][ok], :, bars[ok]] = sign * d[:, ok].transpose(0, 1)  # (E_ok, B, 3)
        return out.reshape(x.shape[0], 3 * self.num_free, len(self.u))

    def force_scale(self, q: torch.Tensor, x: torch.Tensor, loads: torch.Tensor) -> torch.Tensor:
        """Per node, the sum of the magnitudes of the forces that meet there, sum_e |q_e| l_e + |p| (B, N).

        The scale against which a residual is small: r / force_scale is 1 when nothing balances.
        """
        f = q.abs() * (x[:, self.v] - x[:, self.u]).norm(dim=-1)  # (B, E)
        msg = torch.cat([f, f], 1).T  # (2E, B)
        return segment_sum(msg, torch.cat([self.u, self.v]), self.num_nodes).T + loads.norm(dim=-1)

    # ---- cost (a deterministic stand-in for time in the claims) ---------------------------------
    def solve_flops(self) -> int:
        """Floating-point operations of one solve: assembly (2 per entry of K), the factorisation
        (n^3 / 3 for Cholesky, 2 n^3 / 3 for LU) and two triangular solves with 3 right-hand sides."""
        n = self.num_free
        factor = n**3 // 3 if self.definite_sign else 2 * n**3 // 3
        return factor + 12 * n * n + 2 * int(self.k_index.numel())

    def adjoint_flops(self) -> int:
        """The backward pass: two triangular solves (12 n^2) and dK = -lambda X^T (6 n^2)."""
        return 18 * self.num_free**2

    # ---- loads --------------------------------------------------------------------------------
    def area_loads(self, x: torch.Tensor, load: float) -> torch.Tensor:
        """Vertical nodal loads (B, N, 3) from an area load `load` (per unit area, along z) on the quads.

        As jax_fdm's ``nodes_load_from_faces``: each quad side takes the load on the triangle it makes
        with the face centroid, and gives half of it to each of its two nodes. Corner k of a face thus
        receives half of sides (k-1, k) and (k, k+1); the corners' shares are summed into their nodes.
        """
        out = torch.zeros_like(x)
        if self.faces is None or load == 0.0:
            return out
        a = self.faces  # (F, 4)
        corners = x[:, a.reshape(-1)].view(x.shape[0], -1, 4, 3)  # (B, F, 4, 3)
        rel = corners - corners.mean(2, keepdim=True)  # corners relative to the face centroid
        nxt = torch.roll(rel, -1, dims=2)  # the next corner: sides (a_k, a_k+1)
        u0, u1, u2 = rel.unbind(-1)
        v0, v1, v2 = nxt.unbind(-1)
        cross = torch.stack([u1 * v2 - u2 * v1, u2 * v0 - u0 * v2, u0 * v1 - u1 * v0], -1)
        half = (0.25 * load) * cross.norm(dim=-1)  # (B, F, 4): half of side k's triangle load (0.5 * area)
        share = half + torch.roll(half, 1, dims=2)  # corner k: sides k and k - 1
        out[..., 2] = out.new_zeros(x.shape[0], self.num_nodes).index_add(1, a.reshape(-1), share.flatten(1))
        return out
