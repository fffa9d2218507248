"""P8 eagle: Eagle, exploring the design space for multimodal LLMs with a mixture of encoders (Shi et al., ICLR 2025).

Paper: arXiv:2408.15998. Official code: NVlabs/EAGLE, read for the
released fusion (``MultiBackboneChannelConcatenationVisionTower``: every expert's feature map bilinearly
interpolated, align_corners=True, to one grid, concatenated along channels, then the ``mlp2x_gelu`` projector);
nothing is copied from it.

What is reproduced, at toy scale: the design-space exploration of Sec. 2 -- vision experts of complementary kinds
(a CLIP-style contrastive low-resolution encoder, a high-resolution "text-reading" encoder, a localisation
encoder), each pretrained on its own objective; a tiny causal LM pretrained on the question/answer text; the
fusions of Sec. 2.4 (Fusion strategy) at matched parameter budgets (channel concatenation, sequence append, LLaVA-HR-style
injection, Mini-Gemini-style cross-attention, deformable attention); the two training stages (projector
alignment with frozen towers and LM, then SFT with the towers unfrozen, Sec. 2.1 and 2.2); Pre-Alignment
(Sec. 2.5) and the round-robin expert selection (Sec. 2.6, Extension to multi-experts; with three experts, i.e. at the
full scale). Claims (a)-(d) of issue 28, each with its premise gates (every arm converged on validation through the
whole SFT schedule, every mixture reads the fine print, every single expert learned the kinds its view serves) and a
negative control, claim (a) with a planted-deficit positive control (issue 52). The default scale's time budget holds
claim (b)'s arms trained to convergence on enough seeds and not those of (a) and (c) (config/config.yaml computes it).

How we deviate: synthetic 32 x 32 canvases built from sklearn's 8 x 8 digits (a big digit, a small digit, marks)
(default: digits 0-3, global and fine questions only, so two experts, CLIP and the high-res reader) with templated
questions instead of LLaVA data and benchmarks; convolutional towers of a few thousand parameters, pretrained once
and shared by every seed, whose lower layers stay frozen (only the last layer trains in Pre-Alignment and SFT); a
two-block LM; one answer word per question. The report's "What differs from the paper" lists
every difference.

Modules: data.py (canvases, questions, the prepare stage), experts.py (towers and their pretraining),
fusion.py (the five fusions), model.py (the LM and the multimodal model), arms.py (the arms, the round-robin's
choice and the train jobs: one per seed and arm, or a seed's shared arms in one), train.py (an arm's stages), stages.py (the functions the rules call), report.py (table, figures, claims), llava.py (the full scale: LLaVA-style
data and benchmark files, experts and LM from local Hugging Face directories, the same fusions, stages and arms).
"""
