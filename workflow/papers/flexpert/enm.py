"""Elastic network models on C-alpha atoms and the per-protein Pearson correlation (paper Sec. 3).

The paper's structure-based flexibility measures are the square fluctuations of an anisotropic (ANM)
and a Gaussian (GNM) network model, cutoff 16 A, all non-trivial modes, taken as their square root
(official code: ``data/scripts/get_enm_fluctuations_for_dataset.py`` and ``get_correlation_analysis.py``,
``np.sqrt(calcSqFlucts(enm))``). ProDy computes them (:func:`anm_fluctuations`, :func:`gnm_fluctuations`);
:func:`gnm_fluctuations_numpy` and :func:`anm_fluctuations_numpy` are independent numpy implementations
that the tests hold against ProDy; they compute the profiles of the data set (ProDy's full
eigendecomposition costs several times an inverse, which the default scale's time budget cannot spare).

GNM (Bahar et al. 1997): the Kirchhoff matrix

.. math::
    \\Gamma_{ij} = -\\gamma \\,[d_{ij} \\le r_c] \\;(i \\ne j), \\qquad \\Gamma_{ii} = -\\sum_{j \\ne i} \\Gamma_{ij},

and the mean square fluctuation of residue i is proportional to :math:`(\\Gamma^{+})_{ii}`, the diagonal
of its pseudo-inverse (the zero mode of rigid translation removed).

ANM (Atilgan et al. 2001): the 3N x 3N Hessian with 3 x 3 super-elements
:math:`H_{ij} = -\\gamma\\, d_{ij} d_{ij}^T / |d_{ij}|^2` for :math:`|d_{ij}| \\le r_c`,
:math:`H_{ii} = -\\sum_{j \\ne i} H_{ij}`; the square fluctuation of residue i is the trace of the
i-th 3 x 3 diagonal block of :math:`H^{+}` (six rigid-body modes removed).
"""
from __future__ import annotations

import numpy as np


def _prody():
    import prody

    prody.confProDy(verbosity="none")
    return prody


# ---- ProDy (the paper's tool) ------------------------------------------------------------------
def anm_model(coords: np.ndarray, cutoff: float, gamma: float = 1.0, n_modes: int | None = None):
    """A ProDy ANM on C-alpha coordinates (N, 3) with its modes (default: all 3N - 6 non-trivial)."""
    prody = _prody()
    anm = prody.ANM("anm")
    anm.buildHessian(np.asarray(coords, float), cutoff=float(cutoff), gamma=float(gamma))
    anm.calcModes(n_modes=3 * len(coords) - 6 if n_modes is None else n_modes)
    return anm


def gnm_model(coords: np.ndarray, cutoff: float, gamma: float = 1.0, n_modes: int | None = None):
    """A ProDy GNM on C-alpha coordinates with its modes (default: all N - 1 non-trivial)."""
    prody = _prody()
    gnm = prody.GNM("gnm")
    gnm.buildKirchhoff(np.asarray(coords, float), cutoff=float(cutoff), gamma=float(gamma))
    gnm.calcModes(n_modes=len(coords) - 1 if n_modes is None else n_modes)
    return gnm


def anm_fluctuations(coords: np.ndarray, cutoff: float = 16.0, gamma: float = 1.0) -> np.ndarray:
    """sqrt of ProDy's ANM square fluctuations per residue, (N,) (the official code's profile)."""
    return np.sqrt(_prody().calcSqFlucts(anm_model(coords, cutoff, gamma)))


def gnm_fluctuations(coords: np.ndarray, cutoff: float = 16.0, gamma: float = 1.0) -> np.ndarray:
    """sqrt of ProDy's GNM square fluctuations per residue, (N,)."""
    return np.sqrt(_prody().calcSqFlucts(gnm_model(coords, cutoff, gamma)))


# ---- numpy (independent implementation, for the tests) ------------------------------------------
def kirchhoff(coords: np.ndarray, cutoff: float, gamma: float | np.ndarray = 1.0) -> np.ndarray:
    """The GNM Kirchhoff (connectivity Laplacian) matrix, (N, N); `gamma` a number or an (N, N) matrix of spring
    constants per pair."""
    d = np.linalg.norm(coords[:, None, :] - coords[None, :, :], axis=-1)
    contact = (d <= cutoff) & ~np.eye(len(coords), dtype=bool)
    g = -gamma * contact.astype(float)
    g[np.diag_indices_from(g)] = -g.sum(1)
    return g


def gnm_fluctuations_numpy(coords: np.ndarray, cutoff: float = 16.0, gamma: float | np.ndarray = 1.0) -> np.ndarray:
    """sqrt(diag(Gamma^+)), with Gamma^+ = (Gamma + u u^T)^{-1} - u u^T for the unit zero mode u = 1 / sqrt(N)
    (exact when the network is connected; an inverse costs a fraction of a full eigendecomposition)."""
    g = kirchhoff(np.asarray(coords, float), cutoff, gamma)
    uu = np.full(g.shape, 1.0 / len(g))
    sq = np.diag(np.linalg.inv(g + uu) - uu)
    if not np.all(sq > 0):  # a network in pieces: pseudo-inverse over the non-zero modes
        w, v = np.linalg.eigh(g)
        nz = w > 1e-6 * w.max()
        sq = ((v[:, nz] ** 2) / w[nz]).sum(1)
    return np.sqrt(sq)


def hessian(coords: np.ndarray, cutoff: float, gamma: float | np.ndarray = 1.0) -> np.ndarray:
    """The ANM Hessian, (3N, 3N); `gamma` a number or an (N, N) matrix of spring constants per pair."""
    n = len(coords)
    r = coords[None, :, :] - coords[:, None, :]  # (N, N, 3): r[i, j] = x_j - x_i
    d2 = (r ** 2).sum(-1)
    contact = (d2 <= cutoff ** 2) & ~np.eye(n, dtype=bool)
    g = np.broadcast_to(np.asarray(gamma, float), (n, n))[..., None, None]
    blocks = -g * r[..., :, None] * r[..., None, :] / np.where(contact, d2, 1.0)[..., None, None]
    blocks *= contact[..., None, None]  # (N, N, 3, 3)
    blocks[np.arange(n), np.arange(n)] = -blocks.sum(1)
    return blocks.transpose(0, 2, 1, 3).reshape(3 * n, 3 * n)


def rigid_body_modes(coords: np.ndarray) -> np.ndarray:
    """An orthonormal basis (3N, 6) of the ANM's null space: three translations and three rotations
    about the centroid (the displacement of atom i under rotation about axis a is a x (x_i - c))."""
    x = coords - coords.mean(0)
    n = len(x)
    modes = np.zeros((n, 3, 6))
    for a in range(3):
        modes[:, a, a] = 1.0
        axis = np.eye(3)[a]
        modes[:, :, 3 + a] = np.cross(axis, x)
    q, _ = np.linalg.qr(modes.reshape(3 * n, 6))
    return q


def anm_fluctuations_numpy(coords: np.ndarray, cutoff: float = 16.0, gamma: float | np.ndarray = 1.0) -> np.ndarray:
    """sqrt of tr of the 3 x 3 diagonal blocks of H^+, with H^+ = (H + U U^T)^{-1} - U U^T for the
    rigid-body basis U (exact when the six rigid-body modes are H's only zero modes)."""
    coords = np.asarray(coords, float)
    u = rigid_body_modes(coords)
    uu = u @ u.T
    h = hessian(coords, cutoff, gamma)
    sq = np.diag(np.linalg.inv(h + uu) - uu).reshape(-1, 3).sum(1)  # (N,)
    if not np.all(sq > 0):  # more zero modes than six (a network in pieces, e.g. at a chain break):
        w, v = np.linalg.eigh(h)  # the pseudo-inverse over the non-zero modes, as ProDy's calcModes
        nz = w > 1e-6 * w.max()
        sq = ((v[:, nz] ** 2) / w[nz]).sum(1).reshape(-1, 3).sum(1)
    return np.sqrt(sq)


# ---- a judge from outside the Flexpert family: the designed sequence threaded onto the backbone ---------------
def contact_strengths(sequence: str) -> np.ndarray:
    """Per residue, its Miyazawa-Jernigan contact energy (Miyazawa & Jernigan, Macromolecules 18:534, 1985; the
    per-residue scale Biopython ships as ``ProtParamData.mi``) over the 20 residues' mean: hydrophobic residues
    (I, L, F, M) make stronger contacts than small or charged ones (G, D, E, K, N)."""
    from Bio.SeqUtils.ProtParamData import mi

    mean = float(np.mean(list(mi.values())))
    return np.array([mi[a] / mean for a in sequence])


def threaded_gnm_fluctuations(coords: np.ndarray, sequence: str, cutoff: float = 16.0, gamma: float = 1.0) -> np.ndarray:
    """sqrt of the GNM square fluctuations of `sequence` threaded onto the backbone `coords`: the spring between
    residues i and j in contact has the constant gamma (s_i + s_j) / 2, s the residues' contact strengths
    (:func:`contact_strengths`): the sequence-dependent elastic network of Hamacher & McCammon (J. Chem. Theory
    Comput. 2, 873, 2006), with their pair energies replaced by the additive per-residue scale and on the GNM,
    whose N x N inverse costs a 27th of the ANM's 3N x 3N one. The same backbone with another sequence gives other
    fluctuations, so it judges a designed sequence without any network.

    .. math::
        \\Gamma_{ij} = -\\gamma_{ij} [d_{ij} \\le r_c] \\; (i \\ne j), \\qquad \\gamma_{ij} = \\gamma\\,(s_i + s_j)/2
    """
    coords = np.asarray(coords, float)
    if len(sequence) != len(coords):
        raise ValueError(f"threaded GNM: {len(sequence)} residues for {len(coords)} C-alpha positions")
    s = contact_strengths(sequence)
    return gnm_fluctuations_numpy(coords, cutoff, gamma * 0.5 * (s[:, None] + s[None, :]))


# ---- ensembles: RMSF over conformers ------------------------------------------------------------
def ensemble_rmsf(conformers: np.ndarray, iterations: int = 10) -> np.ndarray:
    """Per-residue RMSF (N,) of C-alpha conformers (M, N, 3), after iterative superposition onto their mean
    (Kabsch; as ProDy's ``Ensemble.iterpose``): the flexibility an NMR ensemble or an MD trajectory shows."""
    x = np.asarray(conformers, float)
    x = x - x.mean(1, keepdims=True)
    ref = x[0]
    for _ in range(iterations):
        for m in range(len(x)):
            u, _, vt = np.linalg.svd(x[m].T @ ref)
            d = np.sign(np.linalg.det(u @ vt))
            x[m] = x[m] @ (u @ np.diag([1.0, 1.0, d]) @ vt)
        ref = x.mean(0)
    return np.sqrt(((x - ref) ** 2).sum(-1).mean(0))


# ---- comparing profiles ----------------------------------------------------------------------
def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's r of two per-residue profiles (NaN if either is constant)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    a, b = a - a.mean(), b - b.mean()
    den = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / den) if den > 0 else float("nan")


def zscore(x: np.ndarray) -> np.ndarray:
    """(x - mean) / std over one protein: the per-protein normalisation of the targets."""
    x = np.asarray(x, float)
    s = x.std()
    return (x - x.mean()) / (s if s > 0 else 1.0)


# Claim b2's positive control: a target that sequence determines in part by construction. Biopython's per-residue
# flexibility scale (ProtParamData.Flex, Vihinen et al. 1994, from B-factors of 19 proteins), averaged over a
# window of FLEX_WINDOW residues (ProtParam's flexibility window), z-scored and blended half and half with the
# chain's own z-scored target.
FLEX_SCALE = {"A": 0.984, "C": 0.906, "E": 1.094, "D": 1.068, "G": 1.031, "F": 0.915, "I": 0.927, "H": 0.95,
              "K": 1.102, "M": 0.952, "L": 0.935, "N": 1.048, "Q": 1.037, "P": 1.049, "S": 1.046, "R": 1.008,
              "T": 0.997, "W": 0.904, "V": 0.931, "Y": 0.929}
FLEX_WINDOW = 9


def planted_target(sequence: str, flex: np.ndarray, window: int = FLEX_WINDOW) -> np.ndarray:
    """zscore(0.5 zscore(window mean of the residues' flexibility scale) + 0.5 zscore(flex)): half of the blend is a
    function of the sequence alone, so a sequence predictor that learns what the paper's Flexpert-Seq learns (Sec. 4,
    Table 2: sequence alone beats the ANM) must track it better than the ANM profile does; the same pipeline as claim
    b2 with the effect planted (its positive control)."""
    scale = np.array([FLEX_SCALE[a] for a in sequence])
    kernel = np.ones(window)
    smooth = np.convolve(scale, kernel, "same") / np.convolve(np.ones(len(scale)), kernel, "same")
    return zscore(0.5 * zscore(smooth) + 0.5 * zscore(flex))


def residue_type_means(chains: list[dict], key: str = "target") -> dict:
    """The residue-type baseline of claims b1 and b2: the mean training target of each amino acid (20 numbers; the
    overall mean for a type absent from training). A sequence predictor that cannot beat it has learned no more
    than residue composition."""
    residues = np.array(list("".join(r["sequence"] for r in chains)))
    values = np.concatenate([r[key] for r in chains])
    return {a: float(values[residues == a].mean()) if (residues == a).any() else float(values.mean())
            for a in FLEX_SCALE}
