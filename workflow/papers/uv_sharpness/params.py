"""Parameters of P12 uv_sharpness, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config
from papers.uv_sharpness import uv

SLUG = "uv_sharpness"


ARCHITECTURES = ("fcn", "cnn")
DATASETS = ("digits", "cifar10")


@dataclass(frozen=True)
class MLPParams:
    """The real-network check: full-batch GD with MSE, sharpness by power iteration (Cohen et al. 2021's protocol,
    which the paper follows for its CIFAR-10 networks)."""

    seeds: int = 3  # papers.common.claims.MIN_REPLICATES
    dataset: str = "digits"  # the paper uses CIFAR-10 subsets (cifar10, from `path`); digits ship with scikit-learn
    path: str | None = None  # cifar10: the cifar-10-batches-py folder (or an .npz); digits: None = scikit-learn's copy
    architecture: str = "fcn"  # fcn: tanh MLP; cnn: two tanh conv layers with max pooling and a linear readout
    train_size: int = 500
    hidden: int = 128  # hidden units (fcn) or channels (cnn)
    learning_rates: tuple = (0.08, 0.11, 0.14, 0.17)  # 2 / eta above the initial sharpness (about 9)
    control_lr: float = 0.04  # claim (c)'s ablation: 2 / eta above the sharpness the runs reach (edge of stability out of reach)
    steps: int = 3000
    sharpness_every: int = 100
    power_iterations: int = 20  # Cohen et al. 2021 use 20 power iterations
    eos_tolerance: float = 0.1


@dataclass(frozen=True)
class Params:
    """Parameters of the UV experiments; the paper fixes one example (x, y) and sweeps eta."""

    seeds: int = 3
    width: int = 100
    x: float = 1.0
    y: float = 1.0
    init_scales: tuple = (0.1, 0.35)
    trajectory_ratios: tuple = (0.3, 0.8, 1.05, 1.1)
    steps: int = 20000
    sweep_range: tuple = (0.8, 1.5)
    sweep_points: int = 561
    late_window: int = 2048
    # The sweeps' initialisations, by name, as Theta_0 / lambda_min (eta Theta_0 = 2 r x this): "small" for the route
    # to chaos (claim b, the checks), "large" (five times larger, off the EoS manifold, still below lambda_min and
    # with no catapult anywhere on the sweep) for claim (a).
    sweep_inits: dict = field(default_factory=lambda: {"small": 0.1, "large": 0.5})
    example_range: tuple = (0.5, 2.0)  # each sweep replicate draws x and y log-uniformly in this range
    grid_jitter: bool = True  # each sweep replicate shifts its grid by a uniform fraction of a grid step
    manifold_tolerance: float = 1e-3  # claim (a): late imbalance 1 - 4kf^2/Theta^2 below this
    off_manifold_min: float = 0.5  # claim (a)'s premise: the "large" sweep starts with imbalance at least this
    aperiodic_max: float = 0.05  # claim (b)'s premise: share of unsettled (aperiodic, non-chaotic) sweep points
    max_period: int = 64  # periods tried: 1 .. max_period (any integer, not only powers of two)
    period_rtol: float = 1e-6
    onset_tolerance_steps: int = 2  # checks: grid steps between predicted and measured onsets
    fixed_point_tolerance: float = 1e-3  # checks: 2-cycle mean sharpness x eta/2 = 1 + (r - 1)/4
    divergence_max: float = 0.05  # claim (a)'s premise: largest share of diverged runs among its sweep points
    early_steps: int = 1000  # claims (d), (d_catapult): the early phase (a catapult takes tens of steps)
    # Claims (d), (d_catapult): early-phase runs of the largest init scale whose eta is set from each run's own
    # Theta_0 (eta = product / Theta_0), so every seed sits at the same eta Theta_0: the ablation (< 1), claim (d)'s
    # large learning rate below the catapult (`below`, in (1, 2)), and a grid start, start + step, ..., stop (the
    # catapult window's (2, 4) included) on which each seed's catapult onset is found.
    catapult_products: dict = field(default_factory=lambda: {"ablation": 0.7, "below": 1.8, "start": 1.0, "stop": 2.5,
                                                             "step": 0.05})
    # d_catapult's positive control: the same onset test at this width (exact function-space map), where a reduction
    # without the catapult is a finite-width effect and the catapult's is not.
    positive_width: int = 10000
    # d_catapult's span D: the reduction's change over D across each seed's onset (from the last calm grid point)
    # minus its change over D just below it (a difference in differences); a multiple of catapult_products' step.
    onset_span: float = 0.25
    # Claim (d)'s width sweep (exact function-space map, same init scale, example and seeds): the reduction below the
    # catapult is a finite-width effect, so (d) is stated at `width` and reported at these widths.
    width_sweep: tuple = (100, 300, 1000, 10000)
    valid_pairs_min: float = 0.75  # premise of (d), (d_catapult): share of seeds whose runs pass their run gates
    change_threshold: float = 0.1  # claims (d), (d_catapult), check: 10x gradient flow's largest reduction ~ 1/(2n)
    trained_loss_ratio: float = 0.5  # premise of claim (c), check: final (late) / initial training loss at most this
    mlp: MLPParams = field(default_factory=MLPParams)

    @property
    def lambda_min(self) -> float:
        return uv.lambda_min(self.x, self.y, self.width)

    def check(self) -> None:
        if self.late_window >= self.steps:
            raise ValueError(f"uv_sharpness.late_window ({self.late_window}) must be below steps ({self.steps})")
        if self.early_steps >= self.steps:
            raise ValueError(f"uv_sharpness.early_steps ({self.early_steps}) must be below steps ({self.steps})")
        if 2 * self.max_period > self.late_window:
            raise ValueError(f"uv_sharpness.max_period ({self.max_period}) must be at most late_window / 2")
        if self.sweep_range[1] <= self.sweep_range[0]:
            raise ValueError(f"uv_sharpness.sweep_range: stop must exceed start, got {list(self.sweep_range)}")
        if set(self.sweep_inits) != {"small", "large"}:
            raise ValueError(f"uv_sharpness.sweep_inits must name exactly small and large, got {sorted(self.sweep_inits)}")
        if not 0 < self.example_range[0] <= self.example_range[1]:
            raise ValueError(f"uv_sharpness.example_range: 0 < low <= high, got {list(self.example_range)}")
        c = self.catapult_products
        if set(c) != {"ablation", "below", "start", "stop", "step"}:
            raise ValueError("uv_sharpness.catapult_products must name exactly ablation, below, start, stop and step, "
                             f"got {sorted(c)}")
        if not (0 < c["ablation"] < 1 <= c["start"] < c["stop"] and 2 < c["stop"] < 4 and 1 < c["below"] < 2
                and 0 < c["step"] <= (c["stop"] - c["start"]) / 2):
            raise ValueError("uv_sharpness.catapult_products: need 0 < ablation < 1 <= start < stop, 2 < stop < 4, "
                             f"1 < below < 2 and 0 < step <= (stop - start) / 2; got {c}")
        k = (c["below"] - c["start"]) / c["step"]
        if abs(k - round(k)) > 1e-6 or c["below"] < c["start"]:
            raise ValueError("uv_sharpness.catapult_products: below must lie on the grid start, start + step, ..., stop "
                             f"(each seed's catapult onset is found on that grid); got {c}")
        k = self.onset_span / c["step"]
        if not (self.onset_span > 0 and abs(k - round(k)) < 1e-6 and 2 * self.onset_span <= c["stop"] - c["start"]):
            raise ValueError("uv_sharpness.onset_span must be a positive multiple of catapult_products' step, at most "
                             f"(stop - start) / 2; got {self.onset_span}")
        if not self.width_sweep or any(int(n) != n or n < 1 for n in self.width_sweep):
            raise ValueError(f"uv_sharpness.width_sweep must list integers >= 1, got {list(self.width_sweep)}")
        if self.positive_width <= self.width:
            raise ValueError(f"uv_sharpness.positive_width ({self.positive_width}) must exceed width ({self.width})")
        if not 0 < self.mlp.control_lr < min(self.mlp.learning_rates):
            raise ValueError(f"uv_sharpness.mlp.control_lr ({self.mlp.control_lr}) must lie in (0, min(learning_rates))")
        if self.mlp.architecture not in ARCHITECTURES:
            raise ValueError(f"uv_sharpness.mlp.architecture must be one of {ARCHITECTURES}, got {self.mlp.architecture!r}")
        if self.mlp.dataset not in DATASETS:
            raise ValueError(f"uv_sharpness.mlp.dataset must be one of {DATASETS}, got {self.mlp.dataset!r}")
        if self.mlp.dataset == "cifar10" and self.mlp.path is None:
            raise ValueError("uv_sharpness.mlp.path: the cifar10 dataset needs the cifar-10-batches-py folder (or an .npz)")
        if self.mlp.architecture == "cnn" and self.mlp.dataset != "cifar10":
            raise ValueError("uv_sharpness.mlp.architecture cnn needs images: set mlp.dataset to cifar10")


# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("mlp",),
    "trajectories": ("seeds", "width", "x", "y", "init_scales", "trajectory_ratios", "steps", "early_steps",
                     "catapult_products"),
    "sweep": (
        "seeds", "width", "steps", "sweep_range", "sweep_points", "late_window", "sweep_inits", "example_range",
        "grid_jitter", "max_period", "period_rtol",
    ),
    "train_mlp": ("mlp",),
    "evaluate": ("width", "x", "y", "steps", "late_window", "early_steps"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)

