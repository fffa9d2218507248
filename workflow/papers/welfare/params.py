"""Parameters of P2 welfare, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass

from papers.common.params import ALL, for_stage, from_config
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
    settle_tolerance: float = 0.05  # premise of the long-run claims: the slope has stopped drifting
    # The sweep over the theorems' conditions (Sec. 3): each point sets N, K, the g bounds and the
    # factors of the f bounds; the regime (survival, ruin, neither) follows from them (dynamics.regime).
    sweep_points: tuple = ()
    sweep_horizon: int = 6000
    # Income bin edges (income units): None draws N incomes; edges draw N individuals spread over the
    # bins in proportion to their counts, uniformly within each bin (the official read_data's scheme).
    income_bins: tuple | None = None

    def sweep(self) -> list[dict]:
        """The sweep points, each with its Bounds and the theory's prediction."""
        out = []
        for i, pt in enumerate(self.sweep_points):
            n, k = int(pt["individuals"]), int(pt["budget"])
            b = dyn.Bounds.official(n, k, *pt["decay_bounds"], *pt["return_bound_factors"])
            out.append({"point": i, "individuals": n, "budget": k, "bounds": b, **dyn.predicted(b, n, k)})
        return out

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
        for i, pt in enumerate(self.sweep_points):
            if set(pt) != {"individuals", "budget", "decay_bounds", "return_bound_factors"}:
                raise ValueError(f"welfare.sweep_points[{i}]: keys must be individuals, budget, decay_bounds, "
                                 f"return_bound_factors, got {', '.join(map(str, pt))}")
            if not 1 <= pt["budget"] < pt["individuals"]:
                raise ValueError(f"welfare.sweep_points[{i}]: budget must satisfy 1 <= K < N")
        if not 1 <= self.short_run <= self.sweep_horizon:
            raise ValueError(f"welfare.short_run: {self.short_run} must lie in [1, sweep_horizon = {self.sweep_horizon}]")
        if self.income_bins is not None and (len(self.income_bins) < 2 or list(self.income_bins) != sorted(self.income_bins)):
            raise ValueError("welfare.income_bins: at least two increasing edges, or null")



# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": (
        "seeds", "incomes", "income_scale", "income_bins", "individuals", "budget", "decay_bounds",
        "return_bound_factors", "return_knots", "decay_knots",
    ),
    "sweep": (
        "seeds", "incomes", "income_scale", "income_bins", "return_knots", "decay_knots", "noise", "sweep_points",
        "sweep_horizon", "short_run", "long_run_window",
    ),
    "simulate": (
        "seeds", "individuals", "budget", "horizon", "decay_bounds", "return_bound_factors", "noise",
    ),
    "evaluate": ("horizon", "table_horizons", "short_run", "long_run_window"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
