"""The generators compared (the "SBDD models" of this reproduction), each making molecules for a target.

- ``lm``: the SMILES language model fine-tuned on the known actives (:mod:`.lm`), sampled.
- ``optimiser``: a genetic algorithm that climbs the docking score; it sees the pocket (through the
  score) and a drug-like fragment library, never an active: what docking-optimised SBDD models do.
- ``brics``: BRICS recombination of the known actives' fragments (Degen et al. 2008).
- ``random``: random draws from the drug-like library.
- ``known``: the known actives themselves, the upper bound of a ligand-based search.

Each takes a ``numpy.random.Generator`` (the sampling seed) and returns SMILES strings, valid or not,
so that validity is measured the same way for all.
"""
from __future__ import annotations

import functools

import numpy as np
from rdkit import Chem
from rdkit.Chem import BRICS

from papers.sbdd_vs import chem


def draw(smiles: list[str], n: int, rng: np.random.Generator) -> list[str]:
    """`n` distinct molecules drawn uniformly (all of them, shuffled, if there are fewer)."""
    idx = rng.permutation(len(smiles))[:n]
    return [smiles[i] for i in idx]


# ---- BRICS ------------------------------------------------------------------------------------------
# BRICS linking rules (Degen et al. 2008, RDKit's BRICS.reactionDefs): which attachment labels may join,
# and with which bond (rule 7 joins two [7*] by a double bond).
_BOND = {"-": Chem.BondType.SINGLE, "=": Chem.BondType.DOUBLE}
LINKS: dict[tuple[int, int], Chem.BondType] = {}
for _group in BRICS.reactionDefs:
    for _a, _b, _bond in _group:
        _a, _b = int(_a.rstrip("ab")), int(_b.rstrip("ab"))
        LINKS[_a, _b] = LINKS[_b, _a] = _BOND[_bond]

@functools.cache
def fragments(smiles: str) -> tuple[str, ...]:
    """BRICS fragments of one molecule, attachment points as [n*] (every BRICS bond broken; sorted)."""
    broken = BRICS.BreakBRICSBonds(Chem.MolFromSmiles(smiles))
    return tuple(sorted({Chem.MolToSmiles(f) for f in Chem.GetMolFrags(broken, asMols=True)}))


@functools.cache
def _fragment(smiles: str) -> tuple[Chem.Mol, tuple[tuple[int, int], ...]]:
    """A fragment and its attachment points (atom index, BRICS label)."""
    mol = Chem.MolFromSmiles(smiles)
    return mol, tuple((a.GetIdx(), a.GetIsotope()) for a in mol.GetAtoms() if a.GetAtomicNum() == 0)


def _join(mol: Chem.Mol, d: int, frag: Chem.Mol, e: int, bond: Chem.BondType) -> Chem.RWMol:
    """Bond the atom behind attachment point `d` of `mol` to the atom behind point `e` of `frag`."""
    rw = Chem.RWMol(Chem.CombineMols(mol, frag))
    e += mol.GetNumAtoms()
    a = rw.GetAtomWithIdx(d).GetNeighbors()[0].GetIdx()
    b = rw.GetAtomWithIdx(e).GetNeighbors()[0].GetIdx()
    rw.AddBond(a, b, bond)
    for idx in sorted((d, e), reverse=True):
        rw.RemoveAtom(idx)
    return rw


def assemble(frags: list[str], rng: np.random.Generator, *, max_fragments: int) -> Chem.Mol | None:
    """A random molecule of at most `max_fragments` BRICS fragments from `frags`, or None.

    Start from a random fragment; while it has attachment points and fragments remain to add, pick
    a point and join a random fragment whose point may link to it by the BRICS rules. Points left
    open become hydrogens.
    """
    if not frags:
        return None
    mols = [_fragment(f)[0] for f in frags]
    points = [(i, e, lab) for i, f in enumerate(frags) for e, lab in _fragment(f)[1]]  # (fragment, atom, label)
    mol = mols[rng.integers(len(mols))]
    for _ in range(max_fragments - 1):
        open_ = [a for a in mol.GetAtoms() if a.GetAtomicNum() == 0]
        if not open_:
            break
        d = open_[rng.integers(len(open_))]
        options = [(i, e, LINKS[d.GetIsotope(), lab]) for i, e, lab in points if (d.GetIsotope(), lab) in LINKS]
        if not options:
            break
        i, e, bond = options[rng.integers(len(options))]
        mol = _join(mol, d.GetIdx(), mols[i], e, bond)
    rw = Chem.RWMol(mol)
    for a in sorted((a for a in rw.GetAtoms() if a.GetAtomicNum() == 0), key=lambda a: -a.GetIdx()):
        if a.GetBonds()[0].GetBondType() == Chem.BondType.SINGLE:
            a.SetAtomicNum(1)  # an open attachment point becomes a hydrogen ([nH] stays right)
            a.SetIsotope(0)
        else:
            rw.RemoveAtom(a.GetIdx())  # a [7*]= point: the carbon takes two implicit hydrogens
    try:
        out = Chem.RemoveHs(rw)  # sanitises
    except Exception:  # noqa: BLE001 (valence or aromaticity RDKit rejects)
        return None
    return chem.standardise(out)


def brics(known: list[str], n: int, rng: np.random.Generator, *, max_fragments: int, max_tries: int) -> list[str]:
    """`n` distinct new molecules recombined from the known actives' BRICS fragments."""
    pool = sorted({f for s in known for f in fragments(s)})
    out, seen = [], set(known)
    for _ in range(max_tries):
        mol = assemble(pool, rng, max_fragments=max_fragments)
        smi = chem.canonical(mol) if mol is not None else None
        if smi is not None and smi not in seen:
            seen.add(smi)
            out.append(smi)
            if len(out) == n:
                break
    return out


# ---- docking-score optimiser ------------------------------------------------------------------------
def _tournament(pop: list[str], scores: dict[str, float], rng: np.random.Generator) -> str:
    """The fitter (lower score) of two distinct random members of the population."""
    a, b = rng.choice(len(pop), size=2, replace=False)
    return pop[a] if scores[pop[a]] <= scores[pop[b]] else pop[b]


def optimise(start: list[str], library: list[str], score, n: int, rng: np.random.Generator, *, population: int,
             children: int, generations: int, library_fragments: int, max_fragments: int,
             max_heavy_atoms: int | None = None) -> tuple[list[str], list[dict]]:
    """A (mu + lambda) genetic algorithm on the docking score (lower is better).

    Crossover: the BRICS fragments of two tournament-selected parents, plus `library_fragments`
    random fragments of the drug-like `library`, are reassembled into one child of at most
    `max_fragments` fragments; a child with more than `max_heavy_atoms` heavy atoms is discarded (SBDD
    models sample molecules of a drug's size, not ever larger ones). The fittest `population` distinct
    molecules survive. Returns the `n` best molecules ever scored and, per generation, the best and mean
    score and the molecules whose scoring failed so far.

    A molecule whose score is not a finite number (a failed Vina docking: :func:`docking.vina_score` returns
    NaN) is dropped: it never enters the population or the output, and is counted in ``failed``. (Kept with
    a NaN score it would make the population's sort order undefined, since NaN compares false both ways.)
    A start molecule that fails is dropped likewise; if every start fails, it is an error.
    """
    scores: dict[str, float] = {}  # finite scores only
    failed: set[str] = set()

    def scored(smi: str) -> bool:
        """Score `smi` once; False (and remembered in `failed`) where the score is not finite."""
        if smi not in scores and smi not in failed:
            value = float(score(Chem.MolFromSmiles(smi)))
            if np.isfinite(value):
                scores[smi] = value
            else:
                failed.add(smi)
        return smi in scores

    lib_frags = sorted({f for s in library for f in fragments(s)})
    pop = [s for s in draw(start, population, rng) if scored(s)]
    if len(pop) < 2:
        raise ValueError(f"optimiser: {population - len(pop)} of {population} start molecules failed to score; "
                         "the GA needs at least 2 (check the docking engine)")
    history = []
    for g in range(generations):
        for _ in range(children):
            frags = set(fragments(_tournament(pop, scores, rng)) + fragments(_tournament(pop, scores, rng)))
            frags |= {lib_frags[i] for i in rng.choice(len(lib_frags), size=library_fragments, replace=False)}
            mol = assemble(sorted(frags), rng, max_fragments=max_fragments)
            if mol is not None and (max_heavy_atoms is None or mol.GetNumHeavyAtoms() <= max_heavy_atoms):
                child = chem.canonical(mol)
                if scored(child):
                    pop.append(child)
        pop = sorted(set(pop), key=lambda s: (scores[s], s))[:population]
        history.append({"generation": g + 1, "best": scores[pop[0]], "mean": float(np.mean([scores[s] for s in pop])),
                        "failed": len(failed)})
    best = sorted(scores, key=lambda s: (scores[s], s))[:n]
    return best, history
