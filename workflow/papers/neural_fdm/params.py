"""Parameters of P14 neural_fdm, checked when the workflow is parsed (before any job runs).

Defaults are the official code's (PrincetonLIPS/neural_fdm, ``scripts/bezier.yml``,
``scripts/tower.yml`` and the README's direct-optimisation section); config/config.yaml scales
them down for a 2-core CPU and says where it differs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config
from papers.neural_fdm.shapes import FAMILIES, SYMMETRIES

SLUG = "neural_fdm"
TASKS = ("shell", "tower")
MODELS = ("hybrid", "neural")  # learned arms; direct optimisation runs in the evaluate stage
DIRECT_METHODS = ("SLSQP", "L-BFGS-B")
CONVERGED_ARMS = ("trailing", "all")  # which compared models the convergence premise of claim (a) gates
# The convergence premise's shorter run, as a fraction of the training steps: the premise reads how much the full
# run's held-out error lies below that of a complete run of this fraction of the steps ("the fall over the last
# quarter of training"). At a constant rate with a fixed-length averaging window, that run's model is the full run's
# averaged weights at this fraction (one of train.VALIDATION_FRACTIONS; tested); under a cosine it is a run of its own.
SHORT_RUN = 0.75


@dataclass(frozen=True)
class Train:
    """Adam on fresh random targets every step (bezier.yml: training, optimizer)."""

    steps: int = 10000
    batch_size: int = 64
    lr_hybrid: float = 3.0e-5  # "3.0e-5 (formfinder)"
    lr_neural: float = 5.0e-5  # "5.0e-5 (others)"
    clip_norm: float = 0.0  # global gradient norm; 0 = off
    log_every: int = 100
    schedule: str = "constant"  # learning rate: constant (official) | cosine (decays to 0 over the run; ours)
    # the evaluated weights: the mean of the weights over the last `average` steps (a fixed-length trailing average,
    # ours; 0 = the last iterate, as the official code)
    average: int = 0


@dataclass(frozen=True)
class TowerTrain(Train):
    """tower.yml: batch 16, lr 1e-3 (then 1e-4), gradient clipping at 0.01."""

    batch_size: int = 16
    lr_hybrid: float = 1.0e-3
    lr_neural: float = 1.0e-3
    clip_norm: float = 0.01


@dataclass(frozen=True)
class Direct:
    """Direct optimisation of q per shape with box bounds on |q| (README: SLSQP for shells, bounds [0, 20],
    random init; 5000 iterations at most, tol 1e-6)."""

    method: str = "SLSQP"
    init: float | None = None  # |q| at start; None = uniform in bounds
    bounds: tuple = (0.0, 20.0)
    maxiter: int = 5000
    tol: float = 1e-6
    shapes: int = 100  # test shapes per split (the paper: a batch of 100)


@dataclass(frozen=True)
class TowerDirect(Direct):
    """README: L-BFGS-B for towers, lower bound tau = 1, the "expert" init |q| = 1."""

    method: str = "L-BFGS-B"
    init: float | None = 1.0
    bounds: tuple = (1.0, 20.0)


@dataclass(frozen=True)
class Shell:
    """Masonry shells (bezier.yml): a 10 x 10 grid on a 10 x 10 Bezier patch, area load -0.5."""

    grid: int = 10  # num_uv
    size: float = 10.0
    load: float = -0.5  # vertical area load (fdm.load)
    family: str = "saddle"  # bounds of the training and in-distribution test shapes
    symmetry: str = "double"  # bezier_symmetric_double
    ood_family: str = "saddle"
    ood_symmetry: str = "lerp"  # bezier_lerp: half doubly-symmetric, half asymmetric
    lerp: float = 0.5  # lerp_factor
    width: int = 256  # hidden_layer_size
    depth: int = 3  # hidden_layer_num (linear layers, output included)
    shift: float = 0.0  # tau, the lower bound of |q|
    # kappa of the fully neural model's residual penalty on its latent (train.py: "_pinn" when on): 0 = the
    # paper's NN baseline (an MLP decoder trained on the shape loss alone), > 0 = its PINN baseline
    residual_weight: float = 0.0
    guard: bool = False  # the hybrid's training undoes steps that cross a singular K (ours; official: none)
    train: Train = field(default_factory=Train)
    direct: Direct = field(default_factory=Direct)


@dataclass(frozen=True)
class Tower:
    """Cable-net towers (tower.yml): 21 levels of 16 nodes, 3 compression rings, no load."""

    height: float = 10.0
    radius: float = 2.0
    sides: int = 16  # num_sides
    levels: int = 21  # num_levels
    rings: int = 3  # num_rings (bottom and top are the supports)
    radius_range: tuple = (0.5, 1.5)  # ellipse radii as factors of radius (builders.py)
    twist: float = 15.0  # ring rotation in [-twist, twist] degrees ("twisted")
    # Out of distribution (ours): compression-ring radii factors and |rotation| (degrees) drawn beyond the
    # training ranges, so that neither model can map a test tower back onto a training one.
    ood_radius_range: tuple = (1.5, 1.9)
    ood_twist_range: tuple = (15.0, 30.0)
    width: int = 256
    depth: int = 5
    shift: float = 1.0  # tau
    residual_weight: float = 0.0  # as Shell.residual_weight
    regularization: float = 10.0  # weight of the q-variance regularizer (on force densities: the hybrid's q only)
    # The encoder reads heights as fractions of the target's height (ours; the official encoder reads raw
    # coordinates): a taller tower is presented as a designer draws it, its height given by its supports.
    normalise_height: bool = False
    guard: bool = False  # the hybrid's training undoes steps that cross a singular K (ours; official: none)
    train: TowerTrain = field(default_factory=TowerTrain)
    direct: TowerDirect = field(default_factory=TowerDirect)


@dataclass(frozen=True)
class Params:
    seeds: int = 1  # training seeds per learned model (the paper reports one trained model per task)
    tasks: tuple = TASKS
    models: tuple = MODELS
    test_seed: int = 90  # predict.py --seed
    test_shapes: int = 100  # per split (predict.py --batch_size=100)
    timing_shapes: int = 20  # shapes timed one at a time for the time per shape
    eq_tolerance: float = 0.01  # claim (b): relative residual of a shape in equilibrium to engineering tolerance
    # claim (c): the hybrid's shape error (RMS distance per compared coordinate) exceeds direct optimisation's by
    # less than span / deviation_ratio (EN 1992-1-1 7.4.1(4): sag within span / 250 keeps a structure's appearance)
    deviation_ratio: float = 250.0
    speedup: float = 10.0  # claim (c): direct cost / hybrid cost at least this
    min_learned: float = 0.5  # premise: a learned model's median error at most this fraction of the blind predictor's
    blind_shapes: int = 1000  # training targets averaged into the blind predictor's shape
    equilibrium_shapes: int = 20  # test shapes per split and seed whose best-fit residual claim (b) computes
    # premise of (a) and (c): the full run's held-out validation error lies less than this fraction below that of a
    # complete run of 3/4 of the steps (train.SHORT_RUN; at a constant rate the full run's averaged weights at 3/4 of
    # its steps; the whole t interval over seeds of the per-seed fall)
    converged_gain: float = 0.1
    # which models of a claim (a) comparison pass that premise: "trailing" (in a split decided in distribution, only
    # the one behind: a further fall of the leader widens its lead; report.convergence_gates) or "all" (both, always)
    converged_arms: str = "trailing"
    # claim (c): the hybrid's RMS shape error at most this many times direct optimisation's (median over shapes)
    accuracy_ratio: float = 2.0
    bootstrap: int = 2000  # resamples of the (shapes x seeds) bootstrap of claim (c)
    # A solve fails when cond(K) exceeds this (or its shape is not finite); the hybrid's training guard undoes
    # steps that take cond(K) above it or change the inertia of K (ours: float32 training solves keep >= 3 of
    # their 7 digits below 1e4).
    condition_limit: float = 1.0e4
    # The stiffness guard may undo at most this share of a hybrid's training steps (a premise of the claims on the
    # guarded task's hybrid: a model whose steps were mostly undone did not train as configured); the search
    # excludes a rate whose search runs exceed it.
    max_undone: float = 0.1
    # The learning-rate search, the same for every learned model: each rate of lr_grid trains tune_steps
    # steps from each of tune_seeds seeds (tune_seed, tune_seed + 1, ...); the rate whose worst seed has the
    # lowest median shape error on validation_shapes targets drawn from validation_seed (never the test
    # set) trains every seed. Empty grid: lr_hybrid / lr_neural.
    lr_grid: tuple = ()
    tune_steps: int = 1000
    tune_seeds: int = 2
    tune_seed: int = 1000
    validation_seed: int = 91
    validation_shapes: int = 50
    shell: Shell = field(default_factory=Shell)
    tower: Tower = field(default_factory=Tower)

    def task(self, name: str):
        return {"shell": self.shell, "tower": self.tower}[name]

    def check(self) -> None:
        for name in self.tasks:
            if name not in TASKS:
                raise ValueError(f"neural_fdm.tasks: unknown task {name!r} (known: {', '.join(TASKS)})")
        for name in self.models:
            if name not in MODELS:
                raise ValueError(f"neural_fdm.models: unknown model {name!r} (known: {', '.join(MODELS)})")
        s, t = self.shell, self.tower
        for key, fam in (("family", s.family), ("ood_family", s.ood_family)):
            if fam not in FAMILIES:
                raise ValueError(f"neural_fdm.shell.{key}: {fam!r} is not one of {', '.join(FAMILIES)}")
        for key, sym in (("symmetry", s.symmetry), ("ood_symmetry", s.ood_symmetry)):
            if sym not in SYMMETRIES:
                raise ValueError(f"neural_fdm.shell.{key}: {sym!r} is not one of {', '.join(SYMMETRIES)}")
        if not 0 < t.radius_range[0] < t.radius_range[1]:
            raise ValueError(f"neural_fdm.tower.radius_range: need 0 < low < high, got {list(t.radius_range)}")
        lo, hi = t.ood_radius_range
        if not (0 < lo < hi and (lo >= t.radius_range[1] or hi <= t.radius_range[0])):
            raise ValueError(f"neural_fdm.tower.ood_radius_range {list(t.ood_radius_range)} must lie outside "
                             f"radius_range {list(t.radius_range)} (out of distribution)")
        lo, hi = t.ood_twist_range
        if not t.twist <= lo < hi:
            raise ValueError(f"neural_fdm.tower.ood_twist_range {list(t.ood_twist_range)} must lie beyond twist = "
                             f"{t.twist} (out of distribution)")
        for name in ("shell", "tower"):
            tr = self.task(name).train
            if tr.schedule not in ("constant", "cosine"):
                raise ValueError(f"neural_fdm.{name}.train.schedule must be constant or cosine")
            if not 0 <= tr.average <= tr.steps:
                raise ValueError(f"neural_fdm.{name}.train.average must lie in [0, steps = {tr.steps}], got {tr.average}")
        if t.levels // (t.rings - 1) < 2:
            raise ValueError(f"neural_fdm.tower: {t.rings} rings need more than {t.levels} levels")
        for name in ("shell", "tower"):
            d = self.task(name).direct
            if d.method not in DIRECT_METHODS:
                raise ValueError(f"neural_fdm.{name}.direct.method: {d.method!r} is not one of {DIRECT_METHODS}")
            if not d.bounds[0] < d.bounds[1]:
                raise ValueError(f"neural_fdm.{name}.direct.bounds: low must be below high, got {list(d.bounds)}")
            if d.shapes > self.test_shapes:
                raise ValueError(f"neural_fdm.{name}.direct.shapes ({d.shapes}) exceeds test_shapes ({self.test_shapes})")
        if self.tune_seed < self.seeds:
            raise ValueError(f"neural_fdm.tune_seed ({self.tune_seed}) must not be a training seed (0 .. {self.seeds - 1})")
        if self.validation_seed == self.test_seed:
            raise ValueError("neural_fdm.validation_seed must differ from test_seed (the search must not see the test set)")
        if self.equilibrium_shapes < 1 or self.blind_shapes < 1:
            raise ValueError("neural_fdm.equilibrium_shapes and neural_fdm.blind_shapes must be >= 1")
        if not 0 < self.max_undone <= 1:
            raise ValueError(f"neural_fdm.max_undone must lie in (0, 1], got {self.max_undone}")
        if not self.accuracy_ratio > 1:
            raise ValueError(f"neural_fdm.accuracy_ratio must exceed 1, got {self.accuracy_ratio}")
        if not 0 < self.converged_gain < 1:
            raise ValueError(f"neural_fdm.converged_gain must lie in (0, 1), got {self.converged_gain}")
        if self.converged_arms not in CONVERGED_ARMS:
            raise ValueError(f"neural_fdm.converged_arms must be one of {', '.join(CONVERGED_ARMS)}, got "
                             f"{self.converged_arms!r}")
        if self.timing_shapes > self.test_shapes:
            raise ValueError(f"neural_fdm.timing_shapes ({self.timing_shapes}) exceeds test_shapes ({self.test_shapes})")



# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("tasks", "test_seed", "test_shapes", "shell", "tower"),
    "train": ("seeds", "shell", "tower", "condition_limit", "lr_grid", "tune_steps", "tune_seeds", "tune_seed",
              "validation_seed", "validation_shapes", "max_undone"),
    "evaluate": ("seeds", "test_seed", "timing_shapes", "condition_limit", "eq_tolerance", "deviation_ratio",
                 "validation_seed", "blind_shapes", "equilibrium_shapes", "shell", "tower"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
