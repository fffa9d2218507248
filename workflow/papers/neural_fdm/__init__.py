"""P14 neural_fdm: Real-time design of architectural structures with differentiable mechanics and
neural networks (Pastrana, Medina, de Oliveira, Adriaenssens and Adams, ICLR 2025; arXiv 2409.02606).
Official code: arpastrana/neural_fdm (JAX, jax_fdm; read at PrincetonLIPS/neural_fdm).

Reproduced: the paper's model, an MLP encoder that maps a target shape to force densities q (signs
fixed per bar) followed by a differentiable force density solver that returns a shape in
equilibrium; its fully neural baseline (the paper's NN: the same encoder and an MLP decoder from the latent
and the supports to the coordinates, trained on the same shape loss; residual_weight > 0 gives its PINN
variant); and direct optimisation of q per shape. Both tasks of the paper: masonry shells (Bezier-patch targets in shape
families) and cable-net towers (elliptical, twisted compression rings), each in and out of
distribution; shape error, equilibrium residual, sign constraints and cost per shape.

Deviations: far fewer training steps than the paper's 10,000 (a CPU budget of minutes) with a cosine
decay of the learning rate, smaller towers at the default scale; the force density method is our torch
port (batched Cholesky or LU with an adjoint backward, segment-sum assembly), not jax_fdm. Ours, for a fair
test: one learning-rate search shared by both learned models (validation targets, never the test set; at the
default scale its earlier choices are fixed in the config);
every seed (and every searched rate) trains side by side in one stack (:class:`.train.Stack`, members
independent, each as it would train alone); towers out of distribution whose compression rings are wider
and more rotated than any training ring (neither model can map them back); a guard against near-singular
stiffness (training steps that move K across a singular matrix or above a condition number are undone)
and the failure rate by condition number; medians beside means; the untrained hybrid as a negative
control, the blind predictor (the mean training shape) as the reference a learned model must beat, a
convergence premise on held-out validation error at 50/75/100% of training (t interval over seeds; in claim (a)
only the model behind in a split decided in distribution must pass it, since a further fall of the leader widens
its lead; both models out of distribution), and the
targets displaced by the fully neural model's own RMS error as claim (b)'s positive control; the equilibrium of
a fully neural shape judged with the force densities that best balance it (could it stand at all?), against the
targets' own best-fit residual; comparable accuracy judged relative to direct optimisation's error on the same
shapes (a factor 2), the paper stating no number.

Modules: :mod:`.shapes` (structures and target generators), :mod:`.fdm` (the solver),
:mod:`.models` (encoder, decoders, losses), :mod:`.tasks` (a task in one object), :mod:`.train`,
:mod:`.direct` (direct optimisation), :mod:`.params`, :mod:`.stages` (prepare and train),
:mod:`.evaluate` (the evaluate stage), :mod:`.report` (table, figures, claims).
"""
