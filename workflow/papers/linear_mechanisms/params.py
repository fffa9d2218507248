"""Parameters of P10 linear_mechanisms, checked when the workflow is parsed (before any job runs).

The paper gives no table of hyperparameters that we could read; defaults are ours and say so. Its axes
(width, init scale, output scale, ratio of layer-wise learning rates) are the grid's axes.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config
from papers.linear_mechanisms.phase import HYPER, MECHANISMS

SLUG = "linear_mechanisms"
DATASETS = ("digits", "mnist1d")
PARAMETERISATIONS = ("ntk", "mean_field")


@dataclass(frozen=True)
class Data:
    """1-D regression data, y = slope x + noise, x ~ N(0, 1) (the paper's setting is any 1-D data)."""

    samples: int = 256
    slope: float = 1.0
    noise: float = 0.1
    seed: int = 0


@dataclass(frozen=True)
class Grid:
    """Hyperparameter points: the product of the four lists (a panel has two with several values)."""

    widths: tuple = (1000,)
    sigmas: tuple = (1.0,)
    kappa_exponents: tuple = (0.5,)  # kappa = width ** -exponent; 0.5 = NTK, 1 = mean-field
    lr_ratios: tuple = (1.0,)  # eta_u / eta_w

    def points(self) -> list[dict]:
        lists = (self.widths, self.sigmas, self.kappa_exponents, self.lr_ratios)
        return [dict(zip(HYPER, values)) for values in itertools.product(*lists)]

    def axes(self) -> list[str]:
        """The hyperparameters this grid varies (those with more than one value)."""
        lists = (self.widths, self.sigmas, self.kappa_exponents, self.lr_ratios)
        return [name for name, values in zip(HYPER, lists) if len(values) > 1]


@dataclass(frozen=True)
class Thresholds:
    """How a learned state is labelled (phase.classify); set before any run."""

    kernel_ntk: float = 0.02
    cos_change: float = 0.1
    rescale_dir: float = 0.05
    rescale_norm: float = 0.1


@dataclass(frozen=True)
class Nonlinear:
    """The nonlinear check: two-layer tanh MLP, NTK parameterisation, full-batch GD on MSE."""

    seeds: int = 10
    dataset: str = "digits"  # the paper uses larger real tasks; digits ship with scikit-learn
    path: str | None = None  # digits CSV (None: the copy inside scikit-learn)
    train_size: int = 300  # config.yaml says why (the training budget)
    test_size: int = 1497
    hidden: int = 128
    init_scales: tuple = (0.25, 0.5, 1.0, 2.0, 4.0)
    steps: int = 20000  # the most GD steps a run may take (a cap); it stops earlier once converged
    # converged: the training accuracy reached converge_accuracy (1: the training set is fit)
    converge_accuracy: float = 1.0
    # subtract the output at initialisation (Chizat, Oyallon and Bach 2019: the centred model starts at zero)
    centred: bool = True
    # every arm claims e_* read (the mechanism arms at the smallest and largest init scale, the rescaling arm, and
    # their frozen twins) converges on the training loss instead: loss <= this (the learned state)
    rescaling_converge_loss: float = 1e-3
    lr_factor: float = 0.5
    power_iterations: int = 20
    probe: int = 200
    accuracy_margin: float = 0.01
    # the rescaling arm: one more run per seed at this init scale with the first layer's rate divided by
    # rescaling_lr_ratio (readout / first layer; the linear model's rescaling point has eta_u / eta_w = 100)
    rescaling_scale: float = 1.0
    rescaling_lr_ratio: float = 100.0
    # the rescaling arm's output scaling: mean_field (f = U tanh(.) / h, as the linear model's rescaling point,
    # kappa = d^-1) or ntk (/ sqrt(h)); in NTK scaling the readout can fit the data alone
    rescaling_parameterisation: str = "mean_field"
    # claim (e): the layer alignment ||U W|| / (||U|| ||W||) rises (alignment) / falls (disalignment) by more than
    # this fraction of its initial value (the linear model's cos_change = 0.1, made relative: at h hidden units
    # the initial alignment is ~ 1/sqrt(h), far below 0.1)
    alignment_change: float = 0.1
    # claim e_alignment's positive control: the init scale of the planted linear two-layer network (mlp.planted_alignment)
    planted_scale: float = 0.01
    # claim (d)'s lazy arm: base init = the largest of init_scales not above lazy_base_scale, output x (largest / base)^2
    lazy_base_scale: float = 1.0
    # claim (d)'s premise: |log NTK change of the lazy arm - of the largest init| within this (paired 95% interval)
    lazy_log_margin: float = 2.3
    # claim e_alignment's premise: the small init's r = 1 / (kappa h sigma^2) (NTK kappa = h^-1/2) is at least this
    alignment_regime_min: float = 10.0


@dataclass(frozen=True)
class Params:
    seeds: int = 3
    # per-point / per-panel seed counts where the measured seed-to-seed spread needs more (missing: `seeds`)
    point_seeds: dict = field(default_factory=dict)  # mechanism name -> seeds at that point
    panel_seeds: dict = field(default_factory=dict)  # panel name -> seeds per point of that panel
    data: Data = field(default_factory=Data)
    # claim (a) and the mechanism points: GD at step h (flow time per step = h / top curvature) and h / 2
    trajectory_step: float = 0.01
    trajectory_records: int = 200
    points: dict = field(default_factory=dict)  # mechanism name -> Grid of one point
    # the phase diagram: GD per grid point until converged
    phase_step: float = 0.02
    converge_tol: float = 1e-4
    min_steps: int = 200
    max_steps: int = 20000
    panels: dict = field(default_factory=dict)  # panel name -> Grid
    phase_panels: tuple = ()  # the panels that run (one job each)
    thresholds: Thresholds = field(default_factory=Thresholds)
    # claims (set before looking)
    error_tolerance: float = 0.02
    order_min: float = 1.5
    scaling_panel: str = "width_kappa"
    ntk_exponent: float = 0.5
    mean_field_exponent: float = 1.0
    ntk_slope_max: float = -0.5
    mean_field_min: float = 0.1
    mean_field_slope_max: float = 0.1
    agreement_min: float = 0.7  # the check c_phase (phase diagram: measured label = predicted label)
    nonlinear: Nonlinear = field(default_factory=Nonlinear)

    def seeds_at(self, point: str) -> int:
        """Initialisation seeds at a mechanism point (point_seeds, else seeds)."""
        return int(self.point_seeds.get(point, self.seeds))

    def seeds_of(self, panel: str) -> int:
        """Initialisation seeds per point of a phase panel (panel_seeds, else seeds)."""
        return int(self.panel_seeds.get(panel, self.seeds))

    def check(self) -> None:
        for key, names, known in (("point_seeds", self.point_seeds, MECHANISMS), ("panel_seeds", self.panel_seeds,
                                                                                  tuple(self.panels))):
            unknown = [n for n in names if n not in known]
            if unknown:
                raise ValueError(f"{SLUG}.{key} names {unknown}: not among {list(known)}")
            bad = {n: v for n, v in names.items() if not (isinstance(v, int) and v >= self.seeds)}
            if bad:
                raise ValueError(f"{SLUG}.{key} must be integers >= seeds ({self.seeds}); got {bad}")
        if set(self.points) != set(MECHANISMS):
            raise ValueError(f"{SLUG}.points must name exactly {', '.join(MECHANISMS)}; got {', '.join(self.points)}")
        for name, grid in self.points.items():
            if len(grid.points()) != 1:
                raise ValueError(f"{SLUG}.points.{name} must be a single point (one value per list)")
        for name, grid in self.panels.items():
            if len(grid.axes()) > 2:
                raise ValueError(f"{SLUG}.panels.{name} varies {grid.axes()}: at most two hyperparameters")
        unknown = [name for name in self.phase_panels if name not in self.panels]
        if unknown or not self.phase_panels:
            raise ValueError(f"{SLUG}.phase_panels must name some of panels ({', '.join(self.panels)}); got {list(self.phase_panels)}")
        if self.scaling_panel not in self.phase_panels:
            raise ValueError(f"{SLUG}.scaling_panel '{self.scaling_panel}' is not one of phase_panels: {list(self.phase_panels)}")
        panel = self.panels[self.scaling_panel]
        for key in ("ntk_exponent", "mean_field_exponent"):
            if getattr(self, key) not in panel.kappa_exponents:
                raise ValueError(f"{SLUG}.{key} = {getattr(self, key)} is not among "
                                 f"panels.{self.scaling_panel}.kappa_exponents {list(panel.kappa_exponents)}")
        if len(panel.widths) < 2:
            raise ValueError(f"{SLUG}.panels.{self.scaling_panel} needs at least two widths (claim b)")
        nl = self.nonlinear
        if nl.dataset not in DATASETS:
            raise ValueError(f"{SLUG}.nonlinear.dataset must be one of {DATASETS}, got {nl.dataset!r}")
        if nl.dataset == "digits" and nl.train_size + nl.test_size > 1797:
            raise ValueError(f"{SLUG}.nonlinear: train_size + test_size = {nl.train_size + nl.test_size} > 1797 digits")
        if nl.probe > nl.train_size:
            raise ValueError(f"{SLUG}.nonlinear.probe ({nl.probe}) exceeds train_size ({nl.train_size})")
        if len(nl.init_scales) < 2:
            raise ValueError(f"{SLUG}.nonlinear.init_scales needs at least two scales (claim d)")
        if not any(s <= nl.lazy_base_scale for s in nl.init_scales):
            raise ValueError(f"{SLUG}.nonlinear.lazy_base_scale = {nl.lazy_base_scale} is below every init scale "
                             f"{list(nl.init_scales)}: claim (d)'s lazy arm has no base init")
        if not isinstance(nl.centred, bool):
            raise ValueError(f"{SLUG}.nonlinear.centred must be true or false, got {nl.centred!r}")
        if not nl.rescaling_converge_loss > 0:
            raise ValueError(f"{SLUG}.nonlinear.rescaling_converge_loss must be > 0, got {nl.rescaling_converge_loss!r}")
        if nl.rescaling_parameterisation not in PARAMETERISATIONS:
            raise ValueError(f"{SLUG}.nonlinear.rescaling_parameterisation must be one of {PARAMETERISATIONS}, "
                             f"got {nl.rescaling_parameterisation!r}")


def _grids(raw, where: str) -> dict:
    return {name: from_config(Grid, value, f"{where}.{name}") for name, value in (raw or {}).items()}



# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("data", "nonlinear"),
    "trajectories": (
        "seeds", "point_seeds", "trajectory_step", "trajectory_records", "points", "converge_tol", "min_steps",
        "max_steps",
    ),
    "phase": ("seeds", "panel_seeds", "phase_step", "converge_tol", "min_steps", "max_steps", "panels"),
    "nonlinear": ("nonlinear",),
    "evaluate": (
        "trajectory_step", "points", "thresholds", "scaling_panel", "ntk_exponent", "mean_field_exponent",
    ),
    "report": ALL,
}


def parse(cfg) -> Params:
    section = dict(cfg)
    points, panels = section.pop("points", {}), section.pop("panels", {})
    point_seeds, panel_seeds = section.pop("point_seeds", None) or {}, section.pop("panel_seeds", None) or {}
    params = from_config(Params, section, where=SLUG)
    params = dataclasses.replace(params, points=_grids(points, f"{SLUG}.points"), panels=_grids(panels, f"{SLUG}.panels"),
                                 point_seeds=dict(point_seeds), panel_seeds=dict(panel_seeds))
    params.check()
    return for_stage(params, cfg)
