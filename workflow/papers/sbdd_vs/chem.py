"""Molecules with RDKit: standardisation, Morgan fingerprints, the properties decoys are matched on,
and the conventional per-molecule metrics of SBDD papers (QED, SA score).

Every molecule is standardised the same way (largest fragment, neutralised where a neutral form
exists, canonical SMILES without stereochemistry), so that actives, decoys and generated molecules
are compared on one footing: the same protonation model cannot leak a charge difference into the
decoy matching.
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
from rdkit import Chem, DataStructs, RDConfig, RDLogger
from rdkit.Chem import (
    QED,
    Crippen,
    Descriptors,
    rdFingerprintGenerator,
    rdMolDescriptors,
)
from rdkit.Chem.MolStandardize import rdMolStandardize

RDLogger.DisableLog("rdApp.*")  # parse failures are reported by the loaders, file and record named

# The DUD-E matching properties (Mysinger et al. 2012): molecular weight, logP, H-bond donors,
# H-bond acceptors, rotatable bonds and net formal charge.
PROPERTIES = ("mw", "logp", "hbd", "hba", "rotb", "charge")

_uncharger = rdMolStandardize.Uncharger()
_remove_hs = Chem.RemoveHsParameters()
_remove_hs.removeDefiningBondStereo = True  # stereo is dropped anyway (canonical SMILES without it)


def standardise(mol: Chem.Mol | None) -> Chem.Mol | None:
    """Largest fragment (salts and solvents dropped), neutralised; None if RDKit cannot sanitise it."""
    if mol is None:
        return None
    try:
        frags = Chem.GetMolFrags(mol, asMols=True, sanitizeFrags=True)
        mol = max(frags, key=lambda m: (m.GetNumHeavyAtoms(), Chem.MolToSmiles(m)))
        mol = _uncharger.uncharge(mol)
        Chem.SanitizeMol(mol)
    except Exception:  # noqa: BLE001 (RDKit raises several unrelated types on bad chemistry)
        return None
    mol = Chem.RemoveHs(mol, _remove_hs)  # explicit hydrogens some SDF records keep
    return mol if mol.GetNumHeavyAtoms() > 0 else None


def canonical(mol: Chem.Mol) -> str:
    """Canonical SMILES without stereochemistry (Morgan fingerprints ignore it by default too)."""
    return Chem.MolToSmiles(mol, isomericSmiles=False)


def parse_smiles(smiles: str) -> Chem.Mol | None:
    """A standardised molecule from SMILES, or None if the string is not a valid molecule."""
    if not isinstance(smiles, str) or not smiles:
        return None
    return standardise(Chem.MolFromSmiles(smiles))


def fingerprints(mols, *, radius: int, bits: int) -> list:
    """Morgan bit vectors (radius 2 = ECFP4)."""
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits)
    return [gen.GetFingerprint(m) for m in mols]


def max_similarity(query_fps, reference_fps) -> np.ndarray:
    """For every query, its maximum Tanimoto similarity to any reference. Shape (len(query_fps),).

    This is the paper's fusion rule when a set of molecules is the search query: a library
    compound scores as high as its nearest generated molecule.
    """
    if not reference_fps:
        return np.zeros(len(query_fps))
    return np.array([max(DataStructs.BulkTanimotoSimilarity(fp, reference_fps)) for fp in query_fps])


def properties(mol: Chem.Mol) -> dict:
    """The DUD-E matching properties of one molecule."""
    return {
        "mw": Descriptors.MolWt(mol),
        "logp": Crippen.MolLogP(mol),
        "hbd": rdMolDescriptors.CalcNumHBD(mol),
        "hba": rdMolDescriptors.CalcNumHBA(mol),
        "rotb": rdMolDescriptors.CalcNumRotatableBonds(mol),
        "charge": Chem.GetFormalCharge(mol),
    }


def qed(mol: Chem.Mol) -> float:
    """Quantitative estimate of drug-likeness (Bickerton et al. 2012), in [0, 1]."""
    return float(QED.qed(mol))


_sascorer = None


def sa_score(mol: Chem.Mol) -> float:
    """Synthetic accessibility (Ertl and Schuffenhauer 2009), 1 (easy) to 10 (hard), RDKit Contrib."""
    global _sascorer
    if _sascorer is None:
        path = os.path.join(RDConfig.RDContribDir, "SA_Score", "sascorer.py")
        spec = importlib.util.spec_from_file_location("sascorer", path)
        _sascorer = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_sascorer)
    return float(_sascorer.calculateScore(mol))
