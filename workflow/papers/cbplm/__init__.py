"""P7 cbplm: Concept Bottleneck Language Models for protein design (Ismail et al., ICLR 2025).

Paper: https://arxiv.org/abs/2411.06090. Official code: https://github.com/prescient-design/lobster
(read for the model: ``src/lobster/model/_cbmlm.py`` for the loss and its weights, the intervention and
the masking; ``model/lm_base/_lm_base.py`` for ``CBM``, ``LMBaseClassificationHead``,
``LMBaseLinearLMHead`` and the encoder).

Reproduced, at a tiny CPU scale: the paper's headline results as one table and three figures, with verdicts
computed from intervals over the training seeds, each claim with premise gates (among them that CB-pLM's concept
prediction has converged: a shorter CB-pLM run on its own schedule against the full run), a negative control and,
for (a), a planted positive control:

(a) control (Sec. 4.1): intervening on a concept through the bottleneck moves that property at least the
    paper's 3x more than a conditional LM does, both measured above the noise floor that regenerating the
    same residues with a plain LM gives; the requests are equal: a continuous-concept conditional LM gets
    exactly CB-pLM's request (a), and against the conditional-tag LM CB-pLM is asked for the mean concept of
    the tag's bin (a_tag). The control is the ablation of the mechanism: the intervened concept's embedding
    zeroed, so that the request reaches no logit; the positive control plants an arm 3.5x the baseline's;
(b) perplexity (Sec. 4.3): the CB-pLM keeps at least a fixed share of the plain masked LM's
    log-perplexity gain over residue frequencies, read where concept prediction has converged;
and, as checks rather than claims, interpretability (Sec. 4.2): the linear concepts-to-tokens map agrees with residue
scales (GRAVY weights against Kyte-Doolittle, net-charge weights with K/R positive and D/E negative), which a no-model
regression of residue frequencies on the concept already reproduces.

The intervention follows the official ``intervene_on_sequences``: the concept set to its extreme
(training minimum / maximum, the official 0 / 1 of the normalised concept), the residues chosen by
gradient x input attribution of the predicted concept. Deviations: real proteins from the aaanalysis
wheel (`min_length` to `max_length` residues) instead of UniRef50 / SwissProt (a UniRef FASTA at the full scale,
streamed); 8 Biopython concepts (standardised) instead
of 718; a 2-layer encoder instead of 24M-3B parameters; sampled instead of argmax decoding (so that the
plain LM's drift is a measured floor); the other LMs redraw the residues CB-pLM's attribution chose; the
two conditional baselines are built here (concept bins as prefix tokens, their embeddings also added at
every position; or a linear map of the continuous concepts added at every position). See :mod:`.report`
for the wording in the report.

Modules: :mod:`.data` (sequences, concepts), :mod:`.tokens` (token layout), :mod:`.model` (the four models and the
losses), :mod:`.train` (the training loop), :mod:`.evaluate` (perplexity, R^2, attribution, interventions,
weights), :mod:`.report` (table, figures, claims), :mod:`.stages` (the DAG's stages), :mod:`.params`
(parameters).
"""
