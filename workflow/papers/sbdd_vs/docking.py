"""Docking scores: a shape-and-size proxy against the real pocket, and AutoDock Vina (full scale).

The paper's point is that Vina scores reward size: bigger, rigid molecules that fill the pocket
score better whether or not they bind. The proxy keeps exactly that behaviour, cheaply enough for
an optimiser to climb it on a CPU. Its pocket is the real one: the cavity inside dockstring's
search box of the DUD-E receptor (the same receptor and box Vina docks into at the full scale),
found on a grid as the empty, buried points (LIGSITE-style rays) connected to the box centre.

Proxy for a ligand with N heavy atoms, R rotatable bonds and a longest path of P bonds:

    capacity  = packing * V_pocket / atom_volume           (heavy atoms the pocket can hold)
    N_in      = min(N * min(1, L_pocket / (P * bond_span)), capacity)
    score     = -(e_buried * N_in + e_exposed * (N - N_in)) / (1 + w_rot * R)     [kcal/mol-like]

The last factor is Vina's own conformational-entropy normalisation (Trott and Olson 2010).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import math
import os

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdMolDescriptors
from scipy import ndimage
from scipy.spatial import cKDTree


def dockstring_dir() -> str:
    """dockstring's folder of DUD-E receptors (``<TARGET>_target.pdbqt``) and boxes (``<TARGET>_conf.txt``)."""
    spec = importlib.util.find_spec("dockstring")
    if spec is None:
        raise FileNotFoundError("the docking pocket needs PyPI package dockstring (pip install dockstring==0.3.4)")
    return os.path.join(os.path.dirname(spec.origin), "resources", "targets")


def read_receptor(path: str) -> np.ndarray:
    """Heavy-atom coordinates of a PDBQT receptor. Shape (n_atoms, 3)."""
    xyz = []
    with open(path) as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.startswith(("ATOM", "HETATM")):
                continue
            element = line[77:79].strip() or line.split()[-1]
            if element in ("H", "HD"):
                continue
            try:
                xyz.append([float(line[30:38]), float(line[38:46]), float(line[46:54])])
            except ValueError:
                raise ValueError(f"{path}:{line_no}: cannot read coordinates from {line.rstrip()!r}") from None
    if not xyz:
        raise ValueError(f"{path}: no receptor atoms")
    return np.array(xyz)


def read_box(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Vina's search box (centre, size) from a ``key = value`` config file."""
    values = {}
    with open(path) as fh:
        for line in fh:
            if "=" in line:
                key, value = line.split("=", 1)
                values[key.strip()] = float(value)
    try:
        return (np.array([values[f"center_{a}"] for a in "xyz"]), np.array([values[f"size_{a}"] for a in "xyz"]))
    except KeyError as e:
        raise ValueError(f"{path}: missing {e.args[0]}") from None


@dataclasses.dataclass(frozen=True)
class Pocket:
    volume: float  # A^3
    length: float  # A, extent along the pocket's principal axis
    points: int  # grid points of the cavity


# LIGSITE's 14 scan directions on the grid: 6 along the axes and 8 body diagonals.
_RAYS = [d for d in itertools.product((-1, 0, 1), repeat=3) if sum(map(abs, d)) in (1, 3)]


def find_pocket(atoms: np.ndarray, center: np.ndarray, size: np.ndarray, *, spacing: float, clearance: float,
                ray_length: float, min_buried_rays: int) -> Pocket:
    """The cavity at the box centre: empty grid points whose rays hit the receptor in most directions.

    A grid point is empty if no receptor heavy atom is within `clearance`; an empty point is buried
    if walking the grid from it in at least `min_buried_rays` of the 14 directions meets a non-empty
    point within `ray_length`. The cavity is the 6-connected set of buried points nearest the box
    centre (dockstring's boxes are centred on the crystal ligand).
    """
    pad = int(np.ceil(ray_length / spacing))  # rays from the box's points stay inside the padded grid
    axes = [c - s / 2 + spacing * np.arange(-pad, round(s / spacing) + 1 + pad) for c, s in zip(center, size)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)  # (nx, ny, nz, 3)
    dist = cKDTree(atoms).query(grid.reshape(-1, 3), distance_upper_bound=clearance)[0]
    occupied = (dist < np.inf).reshape(grid.shape[:3])  # (nx, ny, nz)
    hits = np.zeros(occupied.shape, dtype=int)
    for d in _RAYS:
        steps = int(ray_length / (spacing * np.linalg.norm(d)))
        hit = np.zeros_like(occupied)
        for k in range(1, steps + 1):
            hit |= np.roll(occupied, shift=(-k * d[0], -k * d[1], -k * d[2]), axis=(0, 1, 2))
        hits += hit
    buried = ~occupied & (hits >= min_buried_rays)
    inner = (slice(pad, -pad),) * 3  # the search box itself
    buried, points = buried[inner], grid[inner]
    labels, n = ndimage.label(buried)  # 6-connected components
    if n == 0:
        raise ValueError("no buried cavity in the search box")
    flat, points = labels.reshape(-1), points.reshape(-1, 3)
    cand = np.flatnonzero(flat > 0)
    nearest = cand[np.argmin(np.linalg.norm(points[cand] - center, axis=1))]
    cavity = points[flat == flat[nearest]]  # (m, 3)
    centred = cavity - cavity.mean(axis=0)
    axis = np.linalg.svd(centred, full_matrices=False)[2][0]
    proj = centred @ axis
    return Pocket(volume=float(len(cavity) * spacing ** 3), length=float(proj.max() - proj.min() + spacing),
                  points=len(cavity))


def pocket_for(target: str, p) -> Pocket:
    """The pocket of `target` (dockstring's receptor and box), with DockingParams `p`."""
    base = dockstring_dir()
    atoms = read_receptor(os.path.join(base, f"{target}_target.pdbqt"))
    center, size = read_box(os.path.join(base, f"{target}_conf.txt"))
    return find_pocket(atoms, center, size, spacing=p.grid_spacing, clearance=p.probe_clearance,
                       ray_length=p.ray_length, min_buried_rays=p.min_buried_rays)


def longest_path(mol: Chem.Mol) -> int:
    """Topological diameter: the most bonds on a shortest path between two heavy atoms."""
    if mol.GetNumAtoms() < 2:
        return 0
    return int(Chem.GetDistanceMatrix(mol).max())


def proxy_score(mol: Chem.Mol, pocket: Pocket, p) -> float:
    """The shape-and-size docking proxy (module docstring); lower is better, like Vina."""
    n = mol.GetNumHeavyAtoms()
    rot = rdMolDescriptors.CalcNumRotatableBonds(mol)
    capacity = p.packing * pocket.volume / p.atom_volume
    extent = longest_path(mol) * p.bond_span
    fits = 1.0 if extent <= pocket.length else pocket.length / extent
    n_in = min(n * fits, capacity)
    return -(p.e_buried * n_in + p.e_exposed * (n - n_in)) / (1.0 + p.w_rot * rot)


def _vina_target(target: str, *, exhaustiveness: int, box: float | None):
    """dockstring's Target for `target`, its Vina call given an exhaustiveness and, if `box` is set, a cubic search
    box of that edge around dockstring's centre (everything else, ligand preparation included, is dockstring's)."""
    import subprocess

    from dockstring import load_target
    from dockstring.utils import get_vina_path

    t = load_target(target)

    def dock_pdbqt(pdbqt_path, log_path, out_path, seed, num_cpus=None):
        conf = t.conf_path
        if box is not None:
            conf = os.path.join(t.working_dir, "conf_box.txt")
            with open(t.conf_path) as fh, open(conf, "w") as out:
                out.writelines(line for line in fh if not line.strip().startswith("size_"))
                out.writelines(f"size_{a} = {box}\n" for a in "xyz")
        cmd = [get_vina_path(), "--receptor", t.pdbqt_path, "--config", conf, "--ligand", pdbqt_path, "--log", log_path,
               "--out", out_path, "--seed", str(seed), "--exhaustiveness", str(exhaustiveness)]
        if num_cpus is not None:
            cmd += ["--cpu", str(num_cpus)]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise RuntimeError(f"Vina failed: {done.stdout.decode()[-500:]}")

    t._dock_pdbqt = dock_pdbqt
    return t


def vina_score(smiles: str, target: str, *, cpus: int, seed: int, exhaustiveness: int = 8,
               box: float | None = None) -> tuple[float, float]:
    """AutoDock Vina through dockstring (needs Debian's openbabel): (best score, CPU seconds of the child
    processes, Vina and Open Babel); NaN where docking fails."""
    import resource

    def child_cpu():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    start = child_cpu()
    try:
        score, _ = _vina_target(target, exhaustiveness=exhaustiveness, box=box).dock(smiles, num_cpus=cpus, seed=seed)
    except Exception:  # noqa: BLE001 (dockstring raises on ligand preparation or Vina failures)
        score = None
    return (math.nan if score is None else float(score)), child_cpu() - start


class Scorer:
    """Docking scores of one target with one engine: ``scorer(mol) -> float`` (lower is better).

    `pocket` (the proxy's, from :func:`pocket_for`) is found once in the prepare stage and passed on.
    """

    def __init__(self, target: str, engine: str, p, pocket: Pocket | None = None, seed: int = 0):
        if engine == "proxy" and pocket is None:
            raise ValueError("the docking proxy needs the target's pocket")
        self.target, self.engine, self.p, self.pocket, self.seed = target, engine, p, pocket, seed

    def __call__(self, mol: Chem.Mol) -> float:
        if self.engine == "proxy":
            return proxy_score(mol, self.pocket, self.p)
        return vina_score(Chem.MolToSmiles(mol), self.target, cpus=self.p.vina_cpus, seed=self.seed,
                          exhaustiveness=self.p.vina_exhaustiveness, box=self.p.vina_box)[0]
