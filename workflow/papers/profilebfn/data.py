"""Data of P17 profilebfn: Pfam seed alignments (families and their profiles), single training
sequences, and synthetic Potts families whose contacts are known.

* A family is its seed alignment cut to its match columns (those with fewer than half gaps, HMMER's
  default ``symfrac = 0.5`` for match-state assignment); its **profile** is the per-column frequency of
  the 20 amino acids plus a pseudocount (the official ``profile_from_lists`` adds 1e-3 to the counts
  and renormalises), the prior ProfileBFN starts generation from (the paper's profile view).
* Training data are single sequences (the paper: UniRef50 single sequences, a degenerate profile each):
  here the 2,100 bacterial proteins in pyhmmer's test data.
* A Potts family: L columns, fields that keep a few residues per column, and couplings on planted
  pairs (i, j) that reward matched residue pairs, sampled by Gibbs sampling; its contacts are the
  planted pairs. The null family has the same fields and no couplings.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The 20 standard amino acids, in the order the network's K = 20 outputs use.
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
K = len(AMINO_ACIDS)
GAP = -1  # a gap (or a non-standard residue) in an encoded alignment
_INDEX = {a: i for i, a in enumerate(AMINO_ACIDS)}
_LOOKUP = np.full(256, GAP, dtype=np.int8)  # byte -> residue index
for _a, _i in _INDEX.items():
    _LOOKUP[ord(_a)] = _i
HMMER_EXAMPLES = Path("/usr/share/doc/hmmer/examples")


def default_family_paths() -> dict[str, Path]:
    """The packaged Pfam seed alignments (Debian hmmer-examples) by the name the config uses."""
    return {
        "RRM_1": HMMER_EXAMPLES / "testsuite" / "RRM_1.sto.gz",
        "fn3": HMMER_EXAMPLES / "tutorial" / "fn3.sto",
        "Pkinase": HMMER_EXAMPLES / "tutorial" / "Pkinase.sto",
        "SMC_N": HMMER_EXAMPLES / "testsuite" / "SMC_N.sto.gz",
        "Orn_DAP_Arg_deC": HMMER_EXAMPLES / "easel" / "demotic" / "examples" / "example.sto.gz",
        "NIF3": HMMER_EXAMPLES / "easel" / "demotic" / "examples" / "example.sto.gz",
        "Caudal_act": HMMER_EXAMPLES / "testsuite" / "Caudal_act.sto.gz",
    }


def default_training_path() -> Path:
    """pyhmmer's test proteins (938293.PRJEB85.HG003687.faa: 2,100 bacterial proteins)."""
    import pyhmmer

    return Path(pyhmmer.__file__).parent / "tests" / "data" / "seqs" / "938293.PRJEB85.HG003687.faa"


def _open(path: Path):
    return gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)


@dataclass
class Family:
    """One family: its aligned rows (full alignment, for the HMM) and its match-column view."""

    name: str
    source: str
    names: list[str]
    aligned: list[str]  # the seed alignment's rows, gaps as '-', upper case
    match_columns: np.ndarray  # indices of the match columns
    gathering: float  # the first number of the file's '#=GF GA' line (Pfam's sequence GA), NaN if absent

    @property
    def encoded(self) -> np.ndarray:
        """(N, L) residue indices over the match columns, GAP for gaps and non-standard residues."""
        return encode([row for row in self.aligned], columns=self.match_columns)


def encode(rows: list[str], columns: np.ndarray | None = None) -> np.ndarray:
    """Rows of equal length as (N, L) int8 indices into AMINO_ACIDS; other symbols become GAP."""
    if not rows:
        return np.zeros((0, 0), dtype=np.int8)
    arr = _LOOKUP[np.frombuffer("".join(rows).encode("ascii", "replace"), dtype=np.uint8)].reshape(len(rows), -1)
    return arr if columns is None else arr[:, columns]


def encode_one(sequence: str) -> np.ndarray:
    """One sequence of any length as int8 indices (GAP for symbols outside AMINO_ACIDS)."""
    return _LOOKUP[np.frombuffer(sequence.encode("ascii", "replace"), dtype=np.uint8)]


def decode(x: np.ndarray) -> list[str]:
    """(N, L) indices back to strings ('-' for GAP)."""
    letters = np.array(list(AMINO_ACIDS) + ["-"])
    return ["".join(letters[np.where(row < 0, K, row)]) for row in np.asarray(x)]


def read_stockholm(path: str | Path, name: str | None = None) -> Family:
    """The family `name` (its '#=GF ID') from a Stockholm file; the first one if `name` is None.

    Raises ValueError naming the file (and the family or line) when it cannot be read as Stockholm,
    holds no such family, or its rows are of unequal length.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such alignment file")
    blocks, current = [], None
    with _open(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.rstrip("\n")
            if line.startswith("# STOCKHOLM"):
                current = {"id": None, "ga": float("nan"), "rows": {}, "order": [], "line": lineno}
            elif current is None:
                if line.strip():
                    raise ValueError(f"{path}: line {lineno}: expected '# STOCKHOLM 1.0' before alignment data")
            elif line.startswith("//"):
                blocks.append(current)
                current = None
            elif line.startswith("#=GF ID"):
                current["id"] = line.split()[2]
            elif line.startswith("#=GF GA"):
                try:
                    current["ga"] = float(line.split()[2].rstrip(";"))
                except (IndexError, ValueError):
                    raise ValueError(f"{path}: line {lineno}: malformed gathering threshold {line!r}") from None
            elif line.startswith("#") or not line.strip():
                continue
            else:
                parts = line.split()
                if len(parts) != 2:
                    raise ValueError(f"{path}: line {lineno}: expected '<name> <aligned sequence>', got {line[:60]!r}")
                seq_name, chunk = parts
                if seq_name not in current["rows"]:
                    current["rows"][seq_name] = []
                    current["order"].append(seq_name)
                current["rows"][seq_name].append(chunk)
    if current is not None:
        raise ValueError(f"{path}: alignment starting at line {current['line']} has no closing '//'")
    if not blocks:
        raise ValueError(f"{path}: no Stockholm alignment found")
    if name is None:
        block = blocks[0]
    else:
        found = [b for b in blocks if b["id"] == name]
        if not found:
            raise ValueError(f"{path}: no family with '#=GF ID {name}' (found: {', '.join(str(b['id']) for b in blocks)})")
        block = found[0]
    rows = ["".join(block["rows"][n]).upper().replace(".", "-") for n in block["order"]]
    lengths = {len(r) for r in rows}
    if len(lengths) != 1:
        bad = next(n for n, r in zip(block["order"], rows) if len(r) != len(rows[0]))
        raise ValueError(f"{path}: family {block['id']}: row {bad!r} has length {len(''.join(block['rows'][bad]))}, "
                         f"the first row {len(rows[0])}")
    if len(rows) < 2:
        raise ValueError(f"{path}: family {block['id']}: fewer than 2 sequences")
    gaps = np.array([[c == "-" for c in r] for r in rows])
    match = np.flatnonzero(gaps.mean(axis=0) < 0.5)
    return Family(block["id"] or path.stem, str(path), list(block["order"]), rows, match, block["ga"])


def iter_fasta(path: str | Path):
    """(name, sequence) records one at a time (a FASTA of any size, e.g. UniRef50, streams); raises ValueError
    naming the file and line of a bad record."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such FASTA file")
    name, chunks, any_record = None, [], False
    with _open(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            if not line:
                continue
            if line.startswith(">"):
                if name is not None:
                    any_record = True
                    yield name, "".join(chunks)
                name, chunks = (line[1:].split() or [f"record_{lineno}"])[0], []
            elif name is None:
                raise ValueError(f"{path}: line {lineno}: sequence data before the first '>' header")
            else:
                chunks.append(line.upper().rstrip("*"))
    if name is not None:
        yield name, "".join(chunks)
    elif not any_record:
        raise ValueError(f"{path}: no FASTA records")


def read_fasta(path: str | Path) -> list[tuple[str, str]]:
    """(name, sequence) records; raises ValueError naming the file and line of a bad record."""
    return list(iter_fasta(path))


def profile(encoded: np.ndarray, pseudocount: float) -> np.ndarray:
    """(L, K) per-column amino-acid frequencies of an encoded alignment, gaps ignored, with
    `pseudocount` added to every count before normalising (the official profile_from_lists)."""
    counts = np.stack([(encoded == a).sum(axis=0) for a in range(K)], axis=1).astype(float)
    counts += pseudocount
    return counts / counts.sum(axis=1, keepdims=True)


# ---- Potts families with planted contacts ---------------------------------------------------------
def planted_contacts(length: int, n_contacts: int, min_separation: int, rng: np.random.Generator,
                     attempts: int = 10_000) -> np.ndarray:
    """(n, 2) disjoint pairs i < j with j - i >= min_separation, drawn at random: a random order of the columns,
    paired two by two, kept when its first `n_contacts` pairs are all far enough apart (rejection sampling: with
    20 pairs in 40 columns about one order in 25 is kept)."""
    if 2 * n_contacts > length:
        raise ValueError(f"cannot plant {n_contacts} disjoint contacts in {length} columns")
    for _ in range(attempts):
        order = rng.permutation(length)[: 2 * n_contacts].reshape(n_contacts, 2)
        pairs = np.sort(order, axis=1)
        if (pairs[:, 1] - pairs[:, 0] >= min_separation).all():
            return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))].astype(int)
    raise ValueError(f"cannot plant {n_contacts} disjoint contacts with separation >= {min_separation} "
                     f"in {length} columns ({attempts} random orders tried)")


def potts_model(length: int, contacts: np.ndarray, residues_per_column: int, field: float, coupling: float,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Fields h (L, K) and couplings J (L, L, K, K) of a Potts model with planted contacts.

    Each column favours `residues_per_column` residues (field `field` over the rest, so columns look
    like a protein family's, a few residues each); each planted pair (i, j) gets J_ij(a, pi(a)) =
    `coupling` for a random one-to-one matching pi of i's favoured residues onto j's, so the pair
    co-varies. P(x) ~ exp(sum_i h_i(x_i) + sum_{i<j} J_ij(x_i, x_j)). `coupling` = 0: the null family.
    """
    h = np.zeros((length, K))
    favoured = np.stack([rng.choice(K, size=residues_per_column, replace=False) for _ in range(length)])
    for i in range(length):
        h[i, favoured[i]] = field + rng.normal(0.0, 0.3, residues_per_column)
    J = np.zeros((length, length, K, K))
    for i, j in contacts:
        partner = rng.permutation(favoured[j])
        J[i, j, favoured[i], partner] = coupling
        J[j, i] = J[i, j].T
    return h, J


def gibbs_sample(h: np.ndarray, J: np.ndarray, n: int, sweeps: int, rng: np.random.Generator) -> np.ndarray:
    """(n, L) independent draws of the Potts model, `sweeps` Gibbs sweeps from independent columns.

    Each of the n chains starts from the fields' independent-site distribution and runs `sweeps`
    sweeps of single-site Gibbs updates in column order; the chains are vectorised.
    """
    L = h.shape[0]

    def draw(logits):  # (n, K) -> (n,)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        u = rng.random((logits.shape[0], 1))
        return np.minimum((p.cumsum(axis=1) < u).sum(axis=1), K - 1)

    x = np.stack([draw(np.broadcast_to(h[i], (n, K))) for i in range(L)], axis=1)
    coupled = [np.flatnonzero(np.abs(J[i]).sum(axis=(1, 2)) > 0) for i in range(L)]
    for _ in range(sweeps):
        for i in range(L):
            logits = np.broadcast_to(h[i], (n, K)).copy()
            for j in coupled[i]:
                logits += J[i, j][:, x[:, j]].T  # (n, K): J_ij(a, x_j) for every a
            x[:, i] = draw(logits)
    return x.astype(np.int8)
