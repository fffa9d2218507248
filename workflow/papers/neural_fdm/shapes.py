"""The two design tasks: their bar structures and random target shapes (numpy, float64).

Masonry shells (the paper's first task): a square grid of bars, its boundary pinned, loaded by its
self-weight; targets are points on a bicubic Bezier patch whose 4 x 4 control points are wiggled
at random inside the bounds of a shape family. The official code (``generators/grids.py``,
``builders.py``) wiggles one quarter tile of control points and mirrors it (double symmetry):

    tile point      where (quarter)   pillow        dome                saddle
    interior        ( s,  s)          dz in [1,10]  dz in [1,10]        dz in [1,10]
    boundary (x)    ( h,  s)          -             dx in [-5,5]        dx in [-5,5], dz in [0,10]
    boundary (y)    ( s,  h)          -             dy in [-5,5]        dy in [-5,5]
    corner          ( h,  h)          -             -                   -

with h = size / 2 and s = h / 3 (bounds for size 10; we scale them with size / 10). "asymmetric"
wiggles each quadrant independently and "lerp" blends a doubly-symmetric and an asymmetric patch.

Cable-net towers (the second task): a tube of `levels` polygonal rings of `sides` nodes; ring bars
and vertical bars. `rings` levels (the bottom, the top and equally spaced ones between) are
compression rings; every other bar is a tension cable. The bottom and top rings are pinned. A target
gives each compression ring random elliptical radii (factors of `radius`) and a rotation; the
tension rings must only keep their heights (official ``generators/tubes.py``, ``mesh.py``).

A :class:`Structure` holds what the force density method needs; node order is row-major over
(u, v) grid indices for shells and (level, side) for towers.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np

# Quarter-tile wiggle bounds of the official code (size 10): rows interior, boundary-x, boundary-y,
# corner; columns dx, dy, dz. (low, high) per family.
FAMILIES = {
    "pillow": (np.array([[0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0]], float),
               np.array([[0, 0, 10], [0, 0, 0], [0, 0, 0], [0, 0, 0]], float)),
    "dome": (np.array([[0, 0, 1], [-5, 0, 0], [0, -5, 0], [0, 0, 0]], float),
             np.array([[0, 0, 10], [5, 0, 0], [0, 5, 0], [0, 0, 0]], float)),
    "saddle": (np.array([[0, 0, 1], [-5, 0, 0], [0, -5, 0], [0, 0, 0]], float),
               np.array([[0, 0, 10], [5, 0, 10], [0, 5, 0], [0, 0, 0]], float)),
}
SYMMETRIES = ("double", "asymmetric", "lerp")


@dataclass(frozen=True)
class Structure:
    """A pin-jointed bar network: what the force density method needs (numpy, built once)."""

    edges: np.ndarray  # (E, 2) int, node indices (u, v) of each bar
    fixed: np.ndarray  # (N,) bool, pinned supports
    signs: np.ndarray  # (E,) +1 tension, -1 compression (the sign constraint on q)
    active: np.ndarray  # (E,) bool; False for bars between two supports (they do nothing)
    faces: np.ndarray | None  # (F, 4) int quads that collect the area load, or None

    @property
    def num_nodes(self) -> int:
        return int(self.fixed.size)

    @property
    def free(self) -> np.ndarray:
        return np.flatnonzero(~self.fixed)

    @property
    def supports(self) -> np.ndarray:
        return np.flatnonzero(self.fixed)


# ---- shells ------------------------------------------------------------------------------------
def grid_structure(n: int) -> Structure:
    """An n x n grid of bars (2 n (n - 1) edges), boundary nodes pinned, quads for the area load."""
    idx = np.arange(n * n).reshape(n, n)
    edges = np.concatenate([np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], 1),   # along u
                            np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1)])  # along v
    fixed = np.zeros((n, n), bool)
    fixed[[0, -1], :] = True
    fixed[:, [0, -1]] = True
    fixed = fixed.ravel()
    faces = np.stack([idx[:-1, :-1].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel(), idx[:-1, 1:].ravel()], 1)
    active = ~(fixed[edges[:, 0]] & fixed[edges[:, 1]])
    return Structure(edges=edges, fixed=fixed, signs=-np.ones(len(edges)), active=active, faces=faces)


def bernstein(degree: int, t: np.ndarray) -> np.ndarray:
    """B_i(t) = C(d, i) t^i (1 - t)^(d - i); (T, d + 1)."""
    i = np.arange(degree + 1)
    coef = np.array([comb(degree, k) for k in i], float)
    return coef * t[:, None] ** i * (1 - t[:, None]) ** (degree - i)


def control_grid(size: float, num_points: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """The flat control grid (P, P, 3) and the quarter-tile role of each point (P, P) in 0..3."""
    if num_points != 4:
        raise ValueError("the official shape families are defined on a 4 x 4 control grid")
    h = size / 2
    s = h / (num_points - 1)
    coords = np.array([-h, -s, s, h])
    grid = np.zeros((4, 4, 3))
    grid[..., 0], grid[..., 1] = np.meshgrid(coords, coords, indexing="ij")
    on_edge = np.isclose(np.abs(coords), h)
    role = np.where(on_edge[:, None] & on_edge[None, :], 3,
                    np.where(on_edge[:, None], 1, np.where(on_edge[None, :], 2, 0)))
    return grid, role


def wiggle(rng: np.random.Generator, n: int, family: str, size: float, symmetry: str) -> np.ndarray:
    """Random translations (n, 4, 4, 3) of the control points inside a family's bounds.

    double: one quarter-tile draw mirrored to all quadrants; asymmetric: one draw per quadrant.
    """
    low, high = (b * size / 10.0 for b in FAMILIES[family])
    grid, role = control_grid(size)
    sx, sy = np.sign(grid[..., 0]), np.sign(grid[..., 1])  # (4, 4) mirror signs
    quadrant = (sx > 0).astype(int) * 2 + (sy > 0).astype(int)  # (4, 4) in 0..3
    draws = 1 if symmetry == "double" else 4
    tile = rng.uniform(low, high, size=(n, draws, 4, 3))  # (n, draws, roles, xyz)
    q = quadrant if draws == 4 else np.zeros_like(quadrant)
    t = tile[:, q, role]  # (n, 4, 4, 3)
    return t * np.stack([sx, sy, np.ones_like(sx)], -1)


def shell_controls(rng: np.random.Generator, n: int, *, size: float, family: str, symmetry: str,
                   lerp: float = 0.5) -> np.ndarray:
    """The control points (n, 4, 4, 3) of n random Bezier patches (the random draws of :func:`shell_targets`)."""
    if symmetry not in SYMMETRIES:
        raise ValueError(f"symmetry must be one of {SYMMETRIES}, got {symmetry!r}")
    base, _ = control_grid(size)
    if symmetry == "lerp":
        a = wiggle(rng, n, family, size, "double")
        b = wiggle(rng, n, family, size, "asymmetric")
        return base + (1 - lerp) * a + lerp * b
    return base + wiggle(rng, n, family, size, symmetry)


def bezier_points(control: np.ndarray, grid: int) -> np.ndarray:
    """Bicubic Bezier patches with control points (..., 4, 4, 3) on a grid x grid (u, v) lattice: (..., grid * grid, 3),
    sum_ij B_i(u_a) B_j(v_b) P_ij."""
    basis = bernstein(3, np.linspace(0.0, 1.0, grid))  # (grid, 4)
    lead = control.shape[:-3]
    c = control.reshape(-1, 4, 4, 3)
    points = np.einsum("ai,nijk->najk", basis, c)  # (n, grid, 4, 3): along u, then along v
    points = np.einsum("bj,najk->nabk", basis, points)  # (n, grid, grid, 3)
    return points.reshape(*lead, grid * grid, 3)


def shell_targets(rng: np.random.Generator, n: int, *, grid: int, size: float, family: str, symmetry: str,
                  lerp: float = 0.5) -> np.ndarray:
    """n target shells (n, grid * grid, 3): Bezier patches evaluated on a grid x grid (u, v) lattice."""
    return bezier_points(shell_controls(rng, n, size=size, family=family, symmetry=symmetry, lerp=lerp), grid)


# ---- towers ------------------------------------------------------------------------------------
def ring_levels(levels: int, rings: int) -> np.ndarray:
    """The compression-ring levels: bottom, top and every `levels // (rings - 1)` in between."""
    if rings < 3:
        raise ValueError("a tower needs at least 3 compression rings (2 of them are the supports)")
    step = levels // (rings - 1)
    out = np.array([0, *range(step, levels - 1, step)][: rings - 1] + [levels - 1])
    if out.size != rings:
        raise ValueError(f"cannot place {rings} rings on {levels} levels")
    return out


def tube_structure(levels: int, sides: int, rings: int) -> Structure:
    """A tube of `levels` rings of `sides` nodes: ring bars, then vertical bars; ends pinned."""
    idx = np.arange(levels * sides).reshape(levels, sides)
    ring_edges = np.stack([idx.ravel(), np.roll(idx, -1, axis=1).ravel()], 1)  # (levels * sides, 2)
    vertical = np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1)  # ((levels - 1) * sides, 2)
    edges = np.concatenate([ring_edges, vertical])
    fixed = np.zeros((levels, sides), bool)
    fixed[[0, -1]] = True
    fixed = fixed.ravel()
    compression = np.zeros(len(edges), bool)
    compression[: levels * sides] = np.isin(np.repeat(np.arange(levels), sides), ring_levels(levels, rings))
    signs = np.where(compression, -1.0, 1.0)
    active = ~(fixed[edges[:, 0]] & fixed[edges[:, 1]])
    return Structure(edges=edges, fixed=fixed, signs=signs, active=active, faces=None)


def tower_targets(rng: np.random.Generator, n: int, *, height: float, radius: float, sides: int, levels: int,
                  rings: int, radius_range: tuple, twist: float, twist_range: tuple | None = None) -> np.ndarray:
    """n target towers (n, levels * sides, 3): elliptical, rotated compression rings at their heights.

    Each compression ring's two radii are `radius` times factors drawn from `radius_range`, its rotation
    is uniform in [-twist, twist] degrees (the official generator), or, with `twist_range` (lo, hi), of a
    magnitude uniform in [lo, hi] and a random sign. Tension levels sit at radius `radius` (only their
    heights enter the loss).
    """
    comp = ring_levels(levels, rings)
    radii = np.full((n, levels, 2), float(radius))
    angle = np.zeros((n, levels))
    radii[:, comp] = radius * rng.uniform(*radius_range, size=(n, rings, 2))
    if twist_range is None:
        angle[:, comp] = np.radians(rng.uniform(-twist, twist, size=(n, rings)))
    else:
        sign = rng.choice([-1.0, 1.0], size=(n, rings))
        angle[:, comp] = np.radians(sign * rng.uniform(*twist_range, size=(n, rings)))
    phi = 2 * np.pi * np.arange(sides) / sides
    x = radii[..., 0, None] * np.cos(phi)  # (n, levels, sides)
    y = radii[..., 1, None] * np.sin(phi)
    c, s = np.cos(angle)[..., None], np.sin(angle)[..., None]
    z = np.broadcast_to(np.linspace(0.0, height, levels)[None, :, None], x.shape)
    points = np.stack([c * x - s * y, s * x + c * y, z], -1)  # (n, levels, sides, 3)
    return points.reshape(n, levels * sides, 3)


def sample_stacked(task: str, p, rngs, n: int, split: str = "id") -> np.ndarray:
    """n random targets from each generator of `rngs` (M, n, N, 3): row m is exactly
    ``sample_targets(task, p, rngs[m], n, split)`` (the same draws of each stream), the shells' Bezier patches of
    every stream evaluated in one pass (the training loop's batch of every stacked member)."""
    if task != "shell":
        return np.stack([sample_targets(task, p, rng, n, split) for rng in rngs])
    family, symmetry = (p.family, p.symmetry) if split == "id" else (p.ood_family, p.ood_symmetry)
    control = np.stack([shell_controls(rng, n, size=p.size, family=family, symmetry=symmetry, lerp=p.lerp)
                        for rng in rngs])
    return bezier_points(control, p.grid)


def sample_targets(task: str, p, rng: np.random.Generator, n: int, split: str = "id") -> np.ndarray:
    """n random targets (n, N, 3) of `task` ("shell" | "tower", parameters `p`), in distribution ("id")
    or out of it ("ood": the shells' ood family and symmetry; the towers' compression rings wider and more
    rotated than any training ring, radii factors in ood_radius_range and |rotation| in ood_twist_range)."""
    if task == "shell":
        family, symmetry = (p.family, p.symmetry) if split == "id" else (p.ood_family, p.ood_symmetry)
        return shell_targets(rng, n, grid=p.grid, size=p.size, family=family, symmetry=symmetry, lerp=p.lerp)
    common = dict(height=p.height, radius=p.radius, sides=p.sides, levels=p.levels, rings=p.rings, twist=p.twist)
    if split == "id":
        return tower_targets(rng, n, radius_range=p.radius_range, **common)
    return tower_targets(rng, n, radius_range=p.ood_radius_range, twist_range=p.ood_twist_range, **common)
