"""Parameters of P12 uv_sharpness, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config
from papers.uv_sharpness import uv

SLUG = "uv_sharpness"


@dataclass(frozen=True)
class MLPParams:
    """The real-network check: full-batch GD with MSE, sharpness by power iteration."""

    seeds: int = 3  # papers.common.claims.MIN_REPLICATES
    train_size: int = 500  # the paper uses CIFAR-10 subsets; we use sklearn's digits
    hidden: int = 128
    learning_rates: tuple = (0.08, 0.11, 0.14, 0.17)  # 2 / eta above the initial sharpness (about 9)
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
    trajectory_ratios: tuple = (0.8, 1.05, 1.1)
    steps: int = 20000
    sweep_range: tuple = (0.8, 1.5)
    sweep_points: int = 561
    late_window: int = 2048
    sweep_init_scale: float = 0.1
    eos_tolerance: float = 0.05
    max_period: int = 64  # periods tried: 1 .. max_period (any integer, not only powers of two)
    period_rtol: float = 1e-6
    onset_tolerance_steps: int = 2  # claim (f): grid steps between predicted and measured onsets
    fixed_point_tolerance: float = 1e-3  # claim (f): 2-cycle mean sharpness x eta/2 = 1 + (r - 1)/4
    early_steps: int = 1000  # claims (d), (e): the early phase (a catapult takes tens of steps)
    change_threshold: float = 0.1  # claims (d), (e): 10x gradient flow's largest reduction ~ 1/(2n)
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


# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("mlp",),
    "trajectories": ("seeds", "width", "x", "y", "init_scales", "trajectory_ratios", "steps"),
    "sweep": (
        "seeds", "width", "x", "y", "steps", "sweep_range", "sweep_points", "late_window",
        "sweep_init_scale", "max_period", "period_rtol",
    ),
    "train_mlp": ("mlp",),
    "evaluate": ("width", "x", "y", "steps", "late_window", "period_rtol", "early_steps"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)

