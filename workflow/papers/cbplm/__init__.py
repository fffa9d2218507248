"""P7 cbplm: Concept Bottleneck Language Models for protein design (Ismail et al., ICLR 2025).

Paper: https://arxiv.org/abs/2411.06090. Official code: https://github.com/prescient-design/lobster
(read for the model: ``src/lobster/model/_cbmlm.py`` for the loss and its weights, the intervention and
the masking; ``model/lm_base/_lm_base.py`` for ``CBM``, ``LMBaseClassificationHead``,
``LMBaseLinearLMHead`` and the encoder).

Reproduced, at a tiny CPU scale: the three headline results of the paper as one table and three
figures, with verdicts computed from intervals over the training seeds, each claim with a negative
control (shuffled intervention requests, residue frequencies, swapped concepts):

(a) control: intervening on a concept through the bottleneck moves that property of the
    regenerated protein several times more than a conditional-tag LM does (the paper: ~3x);
(b) perplexity: the CB-pLM's held-out masked perplexity is close to a plain masked LM's;
(c) interpretability: the linear concepts-to-tokens map agrees with residue scales (GRAVY weights
    against Kyte-Doolittle, net-charge weights with K/R positive and D/E negative).

Deviations: real proteins from the aaanalysis wheel (30-128 residues) instead of UniRef50 /
SwissProt; 5 Biopython concepts (standardised) instead of 718; a 2-layer encoder of width 64
instead of 24M-3B parameters; random edit positions shared by all models instead of the
official gradient-attribution positions; the conditional-tag baseline is built as the issue
describes (concept bins as prefix tokens). See ``stages.report`` for the wording in the report.

Modules: :mod:`.data` (sequences, concepts), :mod:`.tokens` (token layout), :mod:`.model` (the three models and the
losses), :mod:`.train` (the training loop), :mod:`.evaluate` (perplexity, R^2, interventions,
weights), :mod:`.stages` (the DAG's stages), :mod:`.params` (parameters).
"""
