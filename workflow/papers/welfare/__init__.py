"""P2 welfare: Policy design in long-run welfare dynamics (Wu, Abebe, Hardt and Stoica, ICLR 2025).

Official code:
https://github.com/wujiduan/Rawls_vs_Utils (read for the dynamics, bounds, noise and tie-breaking).

Reproduced: Fig. 1(a) as a table (mean welfare growth rate per policy at several horizons) and a
figure (growth rate against time), with computed verdicts on three claims: a utilitarian policy
leads in the short run, the Rawlsian policy leads in the long run (with the crossing time), and
the long-run rates match the theoretical (K f_ub - (N-K) g_lb)/N and (K f_ub - (N-K) g_ub)/N.
A sweep over the theorems' conditions (Sec. 3: survival K f_lb > (N-K) g_ub, ruin K f_ub < (N-K) g_lb,
and points where neither holds) checks the short-run lead at every point (claim a), the predicted winner
and rates at every theorem point (claims c-e), where Rawlsian and random treatment part (claim f), and
draws a phase diagram (predicted vs observed winner). :mod:`.claims` says which premise gates and
controls stand behind each verdict.

Deviation: the initial welfare comes from the Engel (1857) household incomes that ship in
statsmodels, not from SIPP 2014 (not installable offline); see `stages.report` for the wording.

Modules: :mod:`.dynamics` (the model, the policies, the theory), :mod:`.stages` (the DAG's stages),
:mod:`.claims` (the claims, their premise gates and controls, the check).
"""
