"""P11 sharpening: Self-improvement in language models: the sharpening mechanism (Huang, Block, Foster,
Rohatgi, Zhang, Simchowitz, Ash and Krishnamurthy, ICLR 2025; arXiv 2412.01951). No official code was found.

The paper formalises self-improvement as *sharpening*: with the self-reward r(y | x) = log pi_base(y | x),
best-of-N at inference time picks the most likely of N samples, and post-training amortises this into the
model, by SFT-sharpening (maximum likelihood on best-of-N winners; minimax optimal when pi_base covers the
mode, i.e. the coverage coefficient C_cov = E_x[1 / pi_base(y*(x) | x)] is small) or by RL-sharpening
(maximising E_pi[log pi_base] - beta KL(pi || pi_base), whose optimum is pi_base^(1 + 1/beta) / Z; with online
exploration it does not need coverage).

Reproduced, on two levels (the paper's own experiments use pretrained LLMs, which do not run offline):
(1) an exact tabular model (prompts x token tables), where coverage, best-of-N and the KL-regularised optimum
are closed forms and the algorithms are checked against them; (2) a tiny character-level transformer
(:mod:`.model`, attention by ``kernels.attention``) pretrained on noisy string reversal, whose correct answer
is the mode while a sample is usually wrong, with a high-coverage (short answers) and a low-coverage (long
answers) variant. Claims: (a) best-of-N beats sampling and improves with N; (b) SFT-sharpening amortises
best-of-N; (c) under low coverage RL beats SFT at a matched sample budget; (d) tabular RL converges to the
closed-form optimum.

Deviations: synthetic task and tiny model instead of LLMs on benchmarks; RL-sharpening is plain on-policy
REINFORCE with the KL term, not the paper's exploration-augmented preference algorithm.

Modules: :mod:`.tabular` (level 1), :mod:`.task`, :mod:`.model`, :mod:`.lm` (level 2), :mod:`.params`,
:mod:`.stages` (the DAG's stages).
"""
