"""P17 profilebfn: ProfileBFN, profile Bayesian flow networks for protein family design.

"ProfileBFN: Steering Protein Family Design through Profile Bayesian Flow", ICLR 2025
(https://openreview.net/forum?id=PSiijdQjNU, the link of the official README); official code AlgoMole/ProfileBFN-pro (bfn_model/bflow.py,
profile_seqgen.py).

What is reproduced: the method end to end. The discrete Bayesian flow over the 20 amino acids
(beta(t) = beta1 t^2, theta = softmax(y), y ~ N(beta (K e_x - 1), beta K I); bfn.py), a bidirectional
transformer over theta and t (model.py) trained on single sequences (degenerate profiles) with the
continuous-time loss, and generation from a family's MSA profile started at t0 = 0.6 (the official
sampler). Claims (a)-(c): generated members of held-out families score above the family's profile-HMM
threshold; they are diverse and novel yet family-like; their MSA carries the family's contacts better than
independent profile sampling (tested on a Potts family with planted contacts).

How we deviate: a tiny network trained for seconds on pyhmmer's 2,100 bacterial proteins (plus single draws
of two synthetic Potts families) instead of ESM-2-sized ones on UniRef50; Pfam seed alignments of Debian's
hmmer-examples as held-out families; 25 sampler steps instead of 500; contacts from APC-corrected mutual
information against planted contacts instead of a structure predictor. See report.py for the full list.
"""
