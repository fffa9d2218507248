"""Parameters of P12 uv_sharpness, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import from_config
from papers.uv_sharpness import uv

SLUG = "uv_sharpness"


@dataclass(frozen=True)
class MLPParams:
    """The real-network check: full-batch GD with MSE, sharpness by power iteration."""

    seeds: int = 2
    train_size: int = 1000  # the paper uses CIFAR-10 subsets; we use sklearn's digits
    hidden: int = 128
    learning_rates: tuple = (0.1, 0.2)
    steps: int = 4000
    sharpness_every: int = 50
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
    mlp: MLPParams = field(default_factory=MLPParams)

    @property
    def lambda_min(self) -> float:
        return uv.lambda_min(self.x, self.y, self.width)

    def check(self) -> None:
        if self.late_window >= self.steps:
            raise ValueError(f"uv_sharpness.late_window ({self.late_window}) must be below steps ({self.steps})")
        if self.sweep_range[1] <= self.sweep_range[0]:
            raise ValueError(f"uv_sharpness.sweep_range: stop must exceed start, got {list(self.sweep_range)}")


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return params
