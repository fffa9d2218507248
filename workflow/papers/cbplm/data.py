"""Protein sequences, their concepts (Biopython) and the token layout the four models share.

Sequences: the real proteins that ship in PyPI's ``aaanalysis`` (``_data/benchmarks/SEQ_*.tsv``;
installed with ``--no-deps``, only its data files are read), or a FASTA / TSV / CSV file the user
names (UniRef at the full scale). Concepts: the biophysical descriptors of Biopython's
``ProteinAnalysis``, a subset of the official code's 14 (lobster's ``PmlmConceptTokenizerTransform``).
Token layout: :mod:`papers.cbplm.tokens`.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from papers.common.fasta import fasta_records, reservoir_sample

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"  # the 20 standard residues; the LM heads predict these
_AA_INDEX = np.full(128, -1, dtype=np.int64)
_AA_INDEX[[ord(a) for a in AMINO_ACIDS]] = np.arange(len(AMINO_ACIDS))


def residue_index(sequence: str) -> np.ndarray:
    """Residue indices 0..19 in AMINO_ACIDS order."""
    return _AA_INDEX[np.frombuffer(sequence.encode(), dtype=np.uint8)]


# ---- concepts --------------------------------------------------------------------------------
def concept_values(sequence: str, names) -> list[float]:
    """Biopython's descriptors of one sequence, in the order of `names` (raw units).

    gravy: mean Kyte-Doolittle hydropathy; charge: net charge at pH 7; aromaticity: fraction of
    F, W, Y; instability_index: Guruprasad et al.; helix_fraction, turn_fraction, sheet_fraction:
    Biopython's (>= 1.82) propensity groups E M A L K, N P G S D, V I Y F W L T; flexibility: mean of
    Vihinen's windowed flexibility (Biopython ``flexibility``, 9-residue windows); isoelectric_point.
    """
    from Bio.SeqUtils.ProtParam import ProteinAnalysis

    pa = ProteinAnalysis(sequence)
    get = {
        "gravy": pa.gravy,
        "charge": lambda: pa.charge_at_pH(7.0),
        "aromaticity": pa.aromaticity,
        "instability_index": pa.instability_index,
        "helix_fraction": lambda: pa.secondary_structure_fraction()[0],
        "turn_fraction": lambda: pa.secondary_structure_fraction()[1],
        "sheet_fraction": lambda: pa.secondary_structure_fraction()[2],
        "flexibility": lambda: float(np.mean(pa.flexibility())),
        "isoelectric_point": pa.isoelectric_point,
    }
    return [float(get[n]()) for n in names]


def concept_matrix(sequences, names) -> np.ndarray:
    """(N, K) raw concept values."""
    return np.array([concept_values(s, names) for s in sequences], dtype=np.float64).reshape(len(sequences), len(names))


def kyte_doolittle() -> np.ndarray:
    """Biopython's Kyte-Doolittle hydropathy per residue, in AMINO_ACIDS order."""
    from Bio.SeqUtils.ProtParamData import kd

    return np.array([kd[a] for a in AMINO_ACIDS])


def residue_slopes(sequences, z: np.ndarray) -> np.ndarray:
    """The no-model reference of the concept-to-token weights (Sec. 4.2, Fig. 5): per concept k and residue a, the
    least-squares slope of the residue's centred log-frequency on the standardised concept,

    .. math:: s_{ak} = \\mathrm{cov}(\\ell_a, z_k) / \\mathrm{var}(z_k), \\qquad
              \\ell_a = \\log f_a - \\tfrac{1}{20} \\sum_b \\log f_b,

    with f_a = (count_a + 0.5) / (length + 10) (add-half pseudo-counts). A decoder whose logits are linear in the
    concept, trained with the true concept fed in, should learn about these. Returns (20, K) in AMINO_ACIDS order.
    """
    counts = np.stack([np.bincount(residue_index(s), minlength=len(AMINO_ACIDS)) for s in sequences]).astype(float)
    freq = (counts + 0.5) / (counts.sum(1, keepdims=True) + 0.5 * len(AMINO_ACIDS))
    ell = np.log(freq)
    ell -= ell.mean(1, keepdims=True)
    z = np.asarray(z, dtype=float).reshape(len(ell), -1)
    zc = z - z.mean(0)
    return (ell - ell.mean(0)).T @ zc / (zc ** 2).sum(0)


# ---- reading sequences -----------------------------------------------------------------------
def aaanalysis_dir() -> Path:
    """The benchmark folder of the installed aaanalysis wheel (found without importing it)."""
    spec = importlib.util.find_spec("aaanalysis")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("aaanalysis is not installed: pip install --no-deps aaanalysis==1.1.0")
    return Path(spec.submodule_search_locations[0]) / "_data" / "benchmarks"


def _check_letters(seq: str, path, line: int) -> str:
    """A non-empty sequence without blanks (its characters are judged later by `standard_only`)."""
    seq = seq.strip()
    if not seq or any(ch.isspace() for ch in seq):
        raise ValueError(f"{path}: line {line}: not a protein sequence: {seq[:40]!r}")
    return seq


def read_fasta(path) -> pd.DataFrame:
    """Records of a FASTA file: columns sequence, source, line (the header's line number)."""
    rows = [(_check_letters(seq, path, line), line) for seq, line in fasta_records(path)]
    return pd.DataFrame({"sequence": [r[0] for r in rows], "source": Path(path).name, "line": [r[1] for r in rows]})


def read_table(path) -> pd.DataFrame:
    """A TSV or CSV file with a `sequence` column (the aaanalysis benchmarks are TSV)."""
    sep = "," if str(path).endswith(".csv") else "\t"
    try:
        df = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
    except Exception as e:
        raise ValueError(f"{path}: cannot read as {'CSV' if sep == ',' else 'TSV'} ({e})") from e
    if "sequence" not in df.columns:
        raise ValueError(f"{path}: no column 'sequence' (columns: {', '.join(map(str, df.columns))})")
    lines = np.arange(len(df)) + 2  # line 1 is the header
    seqs = [_check_letters(s, path, int(n)) for s, n in zip(df["sequence"], lines)]
    return pd.DataFrame({"sequence": seqs, "source": Path(path).name, "line": lines})


def sample_fasta(path, n: int, accept, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """At most `n` records of a FASTA file drawn uniformly from those `accept(sequence)` names None, streamed (one
    record in memory at a time beside the sample: :func:`papers.common.fasta.reservoir_sample`), so that a
    UniRef50-sized file never sits in memory whole. `accept` returns None to keep a record or the reason to drop it.
    Returns (records: sequence, source, line; {"read": records read, reason: count, "examples": {reason: [...]}})."""
    stats: dict = {"read": 0, "examples": {}}

    def accepted():
        for seq, line in fasta_records(path):
            seq = _check_letters(seq, path, line)
            stats["read"] += 1
            reason = accept(seq)
            if reason is None:
                yield seq, line
                continue
            stats[reason] = stats.get(reason, 0) + 1
            examples = stats["examples"].setdefault(reason, [])
            if len(examples) < 5:
                examples.append(f"{Path(path).name}:{line}")

    sample, _ = reservoir_sample(accepted(), n, np.random.default_rng(seed))
    return pd.DataFrame({"sequence": [r[0] for r in sample], "source": Path(path).name,
                         "line": [r[1] for r in sample]}), stats


def is_fasta(path) -> bool:
    return Path(path).suffix.lower() in (".fasta", ".fa", ".faa", ".fas")


def load_sequences(path=None, files=()) -> pd.DataFrame:
    """Sequences from `path` (FASTA, or TSV/CSV with a `sequence` column), or, if None, from the
    aaanalysis benchmark `files` (names without `.tsv`). Columns: sequence, source, line."""
    if path is None:
        base = aaanalysis_dir()
        return pd.concat([read_table(base / f"{name}.tsv") for name in files], ignore_index=True)
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (cbplm.sequences: a FASTA, e.g. UniRef50, or a TSV/CSV)")
    return read_fasta(path) if is_fasta(path) else read_table(path)


def standard_only(seqs: pd.Series) -> np.ndarray:
    """True where a sequence holds only the 20 standard residues, upper case (the exclusion rule:
    X, B, Z, U, O, lower-case letters and marks such as '!' in SEQ_DISULFIDE exclude a sequence)."""
    allowed = set(AMINO_ACIDS)
    return np.array([set(s) <= allowed for s in seqs])
