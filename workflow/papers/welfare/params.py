"""Parameters of P2 welfare, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass

from papers.common.params import from_config
from papers.welfare import dynamics as dyn

SLUG = "welfare"


@dataclass(frozen=True)
class Params:
    """Parameters; defaults are the official code's (multi_budget_real_initial_linear.py, Fig. 1)."""

    seeds: int = 100  # sample_num = 100
    incomes: str | None = None  # the paper uses SIPP 2014 incomes; None = Engel incomes (statsmodels)
    income_scale: float = 0.001  # SIPP dollars / 1000
    individuals: int = 50  # the paper groups SIPP individuals; we draw N households
    budget: int = 1  # Fig. 1(a): budget_num = 1
    horizon: int = 10000  # max_time_horizon
    decay_bounds: tuple = (10.0, 60.0)  # homo_decay_lb, homo_decay_ub
    return_bound_factors: tuple = (4.0, 0.5)  # f_lb = 4 N g_ub / K, f_ub = f_lb + N (g_lb + g_ub) / (2K)
    return_knots: tuple = ((-2100.0, -2000.0), (400.0, 800.0))  # return_{left,right}_turning_x
    decay_knots: tuple = ((-1900.0, -1850.0), (-1600.0, -1500.0))  # decay_{left,right}_turning_x
    noise: bool = True
    policies: tuple = dyn.POLICIES
    table_horizons: tuple = (10, 100, 1000, 10000)
    short_run: int = 10
    long_run_window: float = 0.5
    rate_tolerance: float = 0.05

    def bounds(self) -> dyn.Bounds:
        g_lb, g_ub = self.decay_bounds
        a, b = self.return_bound_factors
        return dyn.Bounds.official(self.individuals, self.budget, g_lb, g_ub, a, b)

    def check(self) -> None:
        """Cross-field rules the schema cannot state."""
        if not 1 <= self.budget < self.individuals:
            raise ValueError(f"welfare.budget must satisfy 1 <= K < N = {self.individuals}, got {self.budget}")
        for key, value in [("short_run", self.short_run), *(("table_horizons", h) for h in self.table_horizons)]:
            if not 1 <= value <= self.horizon:
                raise ValueError(f"welfare.{key}: {value} must lie in [1, horizon = {self.horizon}]")
        if not (set(self.policies) & set(dyn.RAWLSIAN) and set(self.policies) & set(dyn.UTILITARIAN)):
            raise ValueError("welfare.policies needs at least one Rawlsian and one utilitarian policy")


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return params
