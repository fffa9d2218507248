"""P1 orion: Look Before You Leap: a universal emergent decomposition of retrieval tasks in language models
(Variengien and Winsor, ICLR 2025; official code: github.com/aVariengien/causal-checker).

What we reproduce: request-patching (the paper's Fig. 3 and layer plots): the last-token residual stream of
x1 = (C1, R1) written into x2 = (C2, R2) at layer L makes the model answer R1 on C2 (claim (a): for 98 of 106
model-task pairs it keeps >= 70% of the normalised probability; claim (b): the layer profile R2(C2) -> R1(C2) ->
R1(C1)); and the oversight application under prompt injection (claim (c): 15.5% -> 97.5% on Pythia-12b).

How we deviate: an analogue. Tiny causal transformers (model.py) trained from scratch on ORION-style tasks
(tasks.py) stand in for the paper's 18 pretrained LMs; a routed model (model.routing_masks), in which the
request reaches the answer only through the last token, is the positive control of the analysis; pretrained LMs
run through the same code where orion.pretrained lists local ones (lm.py, full scale). The report's "What differs"
gives the rest. Stages: stages.py (prepare, train, evaluate) and report.py (claims and report).
"""
