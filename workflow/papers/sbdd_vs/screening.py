"""The paper's model-level metric: ligand-based virtual screening with the generated molecules.

A generator's molecules are the query set. Every library compound (hidden actives + decoys) is
scored by its maximum similarity to the generated set: Tanimoto on Morgan fingerprints, and, as a
learned representation beside them, the cosine of the SMILES LM's embeddings (:func:`max_cosine`);
the library is ranked by that score and the ranking judged by EF at 1%, BEDROC (alpha = 80.5) and
AUROC, all from RDKit's ``rdkit.ML.Scoring.Scoring``.
"""
from __future__ import annotations

import numpy as np
from rdkit.ML.Scoring import Scoring
from scipy import stats


def ranking(scores: np.ndarray, active: np.ndarray) -> list[list]:
    """Rows ``[score, is_active]`` sorted best first, as RDKit's Scoring functions take them.

    Ties keep library order (a stable sort), and the library is shuffled once when it is built, so
    a tie neither favours nor punishes actives.
    """
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    return [[float(scores[i]), int(active[i])] for i in order]


def screening_metrics(scores: np.ndarray, active: np.ndarray, *, ef_fraction: float, alpha: float) -> dict:
    """EF at `ef_fraction`, BEDROC(alpha) and AUROC of ranking the library by `scores` (higher first)."""
    ranked = ranking(scores, active)
    return {
        "ef": float(Scoring.CalcEnrichment(ranked, 1, [ef_fraction])[0]),
        "bedroc": float(Scoring.CalcBEDROC(ranked, 1, alpha)),
        "auroc": float(Scoring.CalcAUC(ranked, 1)),
    }


def max_cosine(library, queries) -> np.ndarray:
    """For every library embedding (rows of `library`, unit length), its largest cosine similarity to any
    of `queries` (unit length). Shape (len(library),); zeros when there is no query."""
    library, queries = np.asarray(library, dtype=np.float64), np.asarray(queries, dtype=np.float64)
    if len(queries) == 0:
        return np.zeros(len(library))
    return (library @ queries.T).max(axis=1)


def rank_correlation(x, y) -> float:
    """Spearman's rho between two scores of the same generators (ties get average ranks).

    Over a handful of generators rho takes a few exact rational values (0.5 for five, say); it is
    rounded to 12 decimals so that floating-point noise cannot decide a comparison with a threshold.
    """
    return round(float(stats.spearmanr(x, y).statistic), 12)
