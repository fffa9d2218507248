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
    rows, header_line, chunks = [], None, []
    with open(path) as f:
        for n, text in enumerate(f, start=1):
            text = text.strip()
            if text.startswith(">"):
                if header_line is not None:
                    rows.append((_check_letters("".join(chunks), path, header_line), header_line))
                header_line, chunks = n, []
            elif text:
                if header_line is None:
                    raise ValueError(f"{path}: line {n}: sequence before the first '>' header")
                chunks.append(text)
    if header_line is not None:
        rows.append((_check_letters("".join(chunks), path, header_line), header_line))
    if not rows:
        raise ValueError(f"{path}: no FASTA records")
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


def load_sequences(path=None, files=()) -> pd.DataFrame:
    """Sequences from `path` (FASTA, or TSV/CSV with a `sequence` column), or, if None, from the
    aaanalysis benchmark `files` (names without `.tsv`). Columns: sequence, source, line."""
    if path is None:
        base = aaanalysis_dir()
        return pd.concat([read_table(base / f"{name}.tsv") for name in files], ignore_index=True)
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (cbplm.sequences: a FASTA, e.g. UniRef50, or a TSV/CSV)")
    return read_fasta(path) if path.suffix.lower() in (".fasta", ".fa", ".faa", ".fas") else read_table(path)


def standard_only(seqs: pd.Series) -> np.ndarray:
    """True where a sequence holds only the 20 standard residues, upper case (the exclusion rule:
    X, B, Z, U, O, lower-case letters and marks such as '!' in SEQ_DISULFIDE exclude a sequence)."""
    allowed = set(AMINO_ACIDS)
    return np.array([set(s) <= allowed for s in seqs])
