"""What P17 profilebfn measures on a generated family (the paper's evaluation: family-likeness, diversity,
novelty, structure): column-frequency fit, covariation contacts, identities, HMM bit scores.

Every function takes encoded alignments, (N, L) indices into ``data.AMINO_ACIDS`` with ``data.GAP``
for gaps, over the family's match columns.
"""
from __future__ import annotations

import numpy as np

from papers.profilebfn.data import AMINO_ACIDS, K, encode, profile


# ---- column statistics ------------------------------------------------------------------------
def column_fit(generated: np.ndarray, reference: np.ndarray) -> dict:
    """Pearson r of the (L x 20) column frequencies, and their mean total-variation distance."""
    p, q = profile(generated, 0.0), profile(reference, 0.0)
    r = float(np.corrcoef(p.ravel(), q.ravel())[0, 1])
    return {"column_r": r, "column_tv": float(0.5 * np.abs(p - q).sum(axis=1).mean())}


# ---- covariation -------------------------------------------------------------------------------
def mutual_information(x: np.ndarray, pseudocount: float = 0.5) -> np.ndarray:
    """(L, L) mutual information between columns, gapped rows of a pair skipped, with `pseudocount`
    added to every pair count (and the matching amount to the single counts) so that rare pairs do
    not dominate; the diagonal is 0.

    MI_ij = sum_ab f_ij(a,b) log(f_ij(a,b) / (f_i(a) f_j(b))) (Dunn et al. 2008).
    """
    n, L = x.shape
    onehot = np.zeros((n, L, K))
    valid = x >= 0
    rows, cols = np.nonzero(valid)
    onehot[rows, cols, x[rows, cols]] = 1.0
    mi = np.zeros((L, L))
    for i in range(L):
        pair = np.einsum("na,nmb->mab", onehot[:, i], onehot)  # (L, K, K) counts of (x_i, x_j)
        pair = pair + pseudocount / K  # a total pseudocount per pair of `pseudocount` x K
        f = pair / pair.sum(axis=(1, 2), keepdims=True)
        fi, fj = f.sum(axis=2, keepdims=True), f.sum(axis=1, keepdims=True)
        mi[i] = (f * np.log(f / (fi * fj))).sum(axis=(1, 2))
    np.fill_diagonal(mi, 0.0)
    return 0.5 * (mi + mi.T)


def apc(mi: np.ndarray) -> np.ndarray:
    """Average-product correction (Dunn et al. 2008): MI_ij - mean_i mean_j / mean, diagonal 0."""
    L = mi.shape[0]
    off = ~np.eye(L, dtype=bool)
    row_mean = (mi * off).sum(axis=1) / (L - 1)
    overall = mi[off].mean()
    out = mi - np.outer(row_mean, row_mean) / overall if overall > 0 else mi.copy()
    np.fill_diagonal(out, 0.0)
    return out


def contact_precision(scores: np.ndarray, contacts: np.ndarray, top: int, min_separation: int) -> float:
    """Share of the `top` highest-scoring pairs i < j with j - i >= min_separation that are contacts."""
    L = scores.shape[0]
    i, j = np.triu_indices(L, k=min_separation)
    order = np.lexsort((j, i, -scores[i, j]))[:top]  # ties broken by position, for reruns
    truth = {tuple(c) for c in np.asarray(contacts).tolist()}
    return float(np.mean([(int(i[o]), int(j[o])) in truth for o in order]))


def contact_auc(scores: np.ndarray, contacts: np.ndarray, min_separation: int) -> float:
    """The area under the ROC curve of `scores` telling the `contacts` from every other pair i < j with
    j - i >= min_separation: the probability that a random contact outscores a random non-contact (ties count
    half; the Mann-Whitney U over the pairs). A continuous covariation statistic: 0.5 for no signal, 1 when
    every contact ranks first."""
    from scipy.stats import rankdata

    L = scores.shape[0]
    i, j = np.triu_indices(L, k=min_separation)
    truth = np.zeros(len(i), dtype=bool)
    index = {(int(a), int(b)): n for n, (a, b) in enumerate(zip(i, j))}
    for a, b in np.asarray(contacts).tolist():
        truth[index[(min(a, b), max(a, b))]] = True
    n_pos, n_neg = int(truth.sum()), int((~truth).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores[i, j])  # average ranks: ties count half
    return float((ranks[truth].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


# ---- identities --------------------------------------------------------------------------------
def identity_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(Na, Nb) identity: equal residues / positions where both rows have a residue (0 if none)."""
    oa = np.zeros(a.shape + (K,), dtype=np.float32)
    ob = np.zeros(b.shape + (K,), dtype=np.float32)
    for arr, oh in ((a, oa), (b, ob)):
        r, c = np.nonzero(arr >= 0)
        oh[r, c, arr[r, c]] = 1.0
    same = np.einsum("ilk,jlk->ij", oa, ob)
    both = (a >= 0).astype(np.float32) @ (b >= 0).astype(np.float32).T
    return np.where(both > 0, same / np.maximum(both, 1), 0.0)


def diversity_novelty(generated: np.ndarray, reference: np.ndarray) -> dict:
    """Mean pairwise identity within the generated set, mean nearest-reference identity (novelty =
    1 - it), as in the paper's evaluation of generated families."""
    within = identity_matrix(generated, generated)
    n = len(generated)
    pairwise = float(within[~np.eye(n, dtype=bool)].mean()) if n > 1 else float("nan")
    nearest = identity_matrix(generated, reference).max(axis=1)
    return {"pairwise_identity": pairwise, "nearest_identity": float(nearest.mean()),
            "novelty": float(1.0 - nearest.mean())}


def uniqueness(generated: np.ndarray) -> float:
    """Share of distinct sequences among the generated ones (the paper removes duplicates)."""
    return len({row.tobytes() for row in np.asarray(generated)}) / max(len(generated), 1)


def unique_rows(x: np.ndarray) -> np.ndarray:
    """The distinct rows of x, in order of first appearance."""
    seen, keep = set(), []
    for i, row in enumerate(np.asarray(x)):
        key = row.tobytes()
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return np.asarray(x)[keep]


# ---- profile HMM (pyhmmer) ---------------------------------------------------------------------
def build_hmm(name: str, aligned: list[str], match_columns: np.ndarray, seed: int = 42):
    """A Plan7 profile HMM built from the family's seed alignment with HMMER's defaults (pyhmmer Builder,
    fixed seed, so reruns give the same model), its match states the family's match columns
    (``hmmbuild --hand`` with the columns as the reference line), so that its M equals our L."""
    import pyhmmer

    alphabet = pyhmmer.easel.Alphabet.amino()
    rows = [pyhmmer.easel.TextSequence(name=f"s{i}".encode(), sequence=r) for i, r in enumerate(aligned)]
    text = pyhmmer.easel.TextMSA(name=name.encode(), sequences=rows)
    marks = np.full(len(aligned[0]), ".")
    marks[np.asarray(match_columns)] = "x"
    text.reference = "".join(marks)
    msa = text.digitize(alphabet)
    builder = pyhmmer.plan7.Builder(alphabet, seed=seed, architecture="hand")
    hmm, _, _ = builder.build_msa(msa, pyhmmer.plan7.Background(alphabet))
    return hmm


def hmm_scores(hmm, sequences: list[str]) -> np.ndarray:
    """The sequence bit score of each sequence against `hmm`, HMMER's full pipeline with its filters
    off (so every sequence gets a score), gaps removed first."""
    import pyhmmer

    alphabet = hmm.alphabet
    seqs = [pyhmmer.easel.TextSequence(name=f"g{i}".encode(), sequence=s.replace("-", "")).digitize(alphabet)
            for i, s in enumerate(sequences)]
    block = pyhmmer.easel.DigitalSequenceBlock(alphabet, seqs)
    pipeline = pyhmmer.plan7.Pipeline(alphabet, bias_filter=False, F1=1.0, F2=1.0, F3=1.0, E=1e12, domE=1e12,
                                      Z=len(seqs))
    hits = pipeline.search_hmm(hmm, block)
    scores = np.full(len(seqs), -np.inf)
    for hit in hits:
        name = hit.name.decode() if isinstance(hit.name, bytes) else hit.name
        scores[int(name[1:])] = hit.score
    return scores


def noise_cutoff(hmm, length: int, composition: np.ndarray, n: int, rng: np.random.Generator) -> float:
    """The highest bit score of `n` random sequences of `length` residues drawn i.i.d. from
    `composition` (K,): a noise cutoff in Pfam's sense (the best score of a non-member)."""
    idx = rng.choice(K, size=(n, length), p=composition)
    letters = np.array(list(AMINO_ACIDS))
    return float(hmm_scores(hmm, ["".join(letters[row]) for row in idx]).max())


def hmm_emit(hmm, n: int, seed: int) -> list[str]:
    """`n` sequences emitted by the HMM's core model (hmmemit), unaligned."""
    import pyhmmer

    rng = pyhmmer.easel.Randomness(seed + 1)  # Randomness(0) would draw a time-dependent seed
    return [hmm.alphabet.decode(hmm.emit_sequence(rng).sequence) for _ in range(n)]


def hmm_align(hmm, sequences: list[str]) -> np.ndarray:
    """Sequences aligned to the HMM's match states (hmmalign), as (N, M) encoded match columns."""
    import pyhmmer

    alphabet = hmm.alphabet
    seqs = [pyhmmer.easel.TextSequence(name=f"g{i}".encode(), sequence=s).digitize(alphabet)
            for i, s in enumerate(sequences)]
    msa = pyhmmer.hmmalign(hmm, seqs, trim=True)
    rows = [alphabet.decode(r) if isinstance(r, (bytes, bytearray)) else str(r) for r in msa.alignment]
    # hmmalign marks match states by reference annotation 'x'; insert columns are '.'.
    rf = msa.reference.decode() if isinstance(msa.reference, (bytes, bytearray)) else str(msa.reference)
    cols = np.array([i for i, c in enumerate(rf) if c not in ".-~"])
    return encode([r.upper().replace(".", "-") for r in rows], columns=cols)

