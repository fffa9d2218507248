"""P11 sharpening: Self-improvement in language models: the sharpening mechanism (Huang, Block, Foster,
Rohatgi, Zhang, Simchowitz, Ash and Krishnamurthy, ICLR 2025; arXiv 2412.01951). No official code was found.

The paper formalises self-improvement as *sharpening*: with the self-reward r(y | x) = log pi_base(y | x),
best-of-N at inference time picks the most likely of N samples, and post-training amortises this into the
model, by SFT-sharpening (maximum likelihood on best-of-N winners; minimax optimal when pi_base covers the
mode, i.e. the coverage coefficient C_cov = E_x[1 / pi_base(y*(x) | x)] is small) or by RL-sharpening
(maximising E_pi[log pi_base] - beta KL(pi || pi_base), whose optimum is pi_base^(1 + 1/beta) / Z; with online
exploration it does not need coverage).

Reproduced, on two levels (the paper's own experiments use pretrained LLMs, which do not run offline), on one
task whose sequence mode is NOT greedy decoding's answer (:mod:`.task`: reversal read as pairs, each pair
correct with a prompt-dependent probability a(x), else a decoy pair whose first letter fools greedy decoding
when a(x) < 1/2): (1) an exact tabular version of the task's generator, swept over the number of pairs K
(so over C_cov = E_x[a(x)^-K]) in a compositional, an atomic and an absorbing form (after a decoy every later
token is a decoy, so a later pair is reachable only through correct earlier ones), where coverage, best-of-N and
the KL-regularised optimum are closed forms; (2) tiny character-level transformers (``papers.common.gpt``,
attention by ``kernels.attention``), several independently pretrained base models, each trained to a gate on its
fit to the task's law, with a few pairs (high coverage) and more pairs (low coverage; task.answer_pairs). Claims: (a) best-of-N improves with N and beats
greedy decoding, decided by a pretrained LM at the full scale (not measured at the default scale: the synthetic task
makes the mode correct, so on the tiny transformers it is the check a_law, the law's prediction beside the measured
curve); (b) SFT-sharpening amortises best-of-N (ablation: SFT on unselected samples); (c) RL's required budget grows
markedly more slowly with C_cov than SFT's and the lead is owed to online exploration, on the absorbing sweep, slopes
over K >= claims.budget_fit_min_pairs, at every RL step size (ablation: offline RL, the same RL restricted to a fixed
pool of base samples; the paper's Sections 3 and 4); (e) under low coverage RL beats SFT and the same RL
restricted to SFT's own base samples (no exploration), at matched budgets (null control: greedy decoding in RL's
place; the paper's Section 4). Checks: a_law, and
d_optimum (tabular RL converges to the closed-form optimum, nearer to it than to the exponents one above and below
and to the neighbouring formulas, which fail the same test).

Deviations: synthetic task and tiny models instead of LLMs on benchmarks; RL-sharpening is plain on-policy
REINFORCE with the KL term, not the paper's exploration-augmented preference algorithm.

Modules: :mod:`.tabular` (level 1), :mod:`.task`, :mod:`.lm` (level 2), :mod:`.pretrained` (the full scale's LMs),
:mod:`.params`, :mod:`.stages` (the DAG's stages), :mod:`.verdicts` (the claims), :mod:`.report`.
"""
