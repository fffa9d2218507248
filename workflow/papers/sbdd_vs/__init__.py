"""P15 sbdd_vs: Evaluating structure-based drug design models by ligand-based virtual screening
(Gao et al., ICLR 2025; arXiv 2406.08980, first titled "From Theory to Therapy: Reframing SBDD Model
Evaluation via Practical Metrics"). No official code was found.

Reproduced: the paper's model-level evaluation. A generator's molecules are used as the queries of a
similarity search over a library of actives and decoys; the library is ranked by each compound's
maximum Tanimoto similarity (Morgan fingerprints) to the generated set and the ranking is judged by
EF1%, BEDROC (alpha = 80.5) and AUROC. Beside the conventional metrics (docking score, QED, SA,
validity, uniqueness) this shows that a generator can win on docking and lose on screening.

Deviations: the published SBDD models and their pocket data cannot be had offline, so generators of
different natures stand in (:mod:`.generators`: a SMILES LM fine-tuned on known actives (full scale), a GA that
climbs the docking score, BRICS recombination, random draws, and the known actives); a real SBDD model's
molecules plug in as files (``sbdd_vs.external``). None of the stand-ins is a structure-based model that neither
climbed the judged score nor was fitted on the known actives, so the claims are decided only on such external
samples (without them, not measured; the stand-ins' comparisons are checks or an extension in the report). The screening library is built DUD-E style from RDKit's real
EGFR and CDK2 actives and from WEHI/NCI compounds (:mod:`.data`), in independent replicates: each a
similarity-stringent cluster split (planted actives dissimilar to the known ones, at least ``min_planted`` of
them) with decoys property-matched to the planted actives (balanced) and dissimilar to them; the decoy pool is
kept out of everything the generators see. The docking score of every molecule is a shape-and-size proxy against
the real DUD-E pocket; AutoDock Vina (dockstring) docks a sample (the optimiser's top molecule, known actives and
DUD-E decoys: claim a's docking gate) and, at the full scale, everything (:mod:`.docking`).

Modules: :mod:`.chem` (RDKit), :mod:`.data`, :mod:`.docking`, :mod:`.lm` (the transformer),
:mod:`.generators`, :mod:`.screening` (the paper's metrics), :mod:`.params`, :mod:`.stages`, :mod:`.report`.
"""
