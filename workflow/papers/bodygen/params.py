"""Parameters of P3 bodygen, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.bodygen.tasks import get_task
from papers.common.params import ALL, for_stage, from_config

SLUG = "bodygen"

# The arms, all trained on the same number of episodes and control (simulated) steps per seed.
#   arch: encoder of all four networks; tca: temporal credit assignment (else GAE everywhere, one
#   normaliser); design: design steps run (else the initial morphology, control only); blind: design steps
#   run and are trained but do not change the body (the execution reward does not depend on the design);
#   seed_offset: added to the run's seed (bodygen_repeat: a second, independent group of BodyGen seeds).
ARMS = {
    "bodygen": {"arch": "mosat", "tca": True, "design": True, "blind": False, "seed_offset": 0},
    "t2a": {"arch": "gnn", "tca": False, "design": True, "blind": False, "seed_offset": 0},
    "no_topope": {"arch": "mosat_no_topope", "tca": True, "design": True, "blind": False, "seed_offset": 0},
    "no_tca": {"arch": "mosat", "tca": False, "design": True, "blind": False, "seed_offset": 0},
    "fixed": {"arch": "mosat", "tca": True, "design": False, "blind": False, "seed_offset": 0},
    # negative controls
    "bodygen_repeat": {"arch": "mosat", "tca": True, "design": True, "blind": False, "seed_offset": 1000},
    "blind_bodygen": {"arch": "mosat", "tca": True, "design": True, "blind": True, "seed_offset": 0},
    "blind_no_tca": {"arch": "mosat", "tca": False, "design": True, "blind": True, "seed_offset": 0},
}


@dataclass(frozen=True)
class Params:
    """Defaults: this reproduction's default scale (the paper's own settings are in config/full.yaml)."""

    seeds: int = 3  # independent replicates; every arm trains once per seed (project standard: >= 3)
    # Arms trained (each a key of ARMS; one train job per task, arm and seed). A claim whose arms are not all trained
    # is reported as not measured; `fixed` is the learnability reference of every return claim.
    arms: tuple = tuple(ARMS)
    # Tasks, each a template of papers.bodygen.tasks (the paper's ten, and crawler2d: the default scale's planar
    # crawler); every arm trains on each task once per seed.
    tasks: tuple = ("crawler2d",)
    # Episode (official: 5 skeleton steps, frame skip 4, ctrl cost 1e-4, 1000 control steps; the template's
    # integrator RK4). The body, its world, timestep and termination come from the task's template.
    env: dict = field(default_factory=lambda: {
        "skel_steps": 5, "control_steps": 200, "frame_skip": 4, "ctrl_cost": 1.0e-4, "integrator": "Euler"})
    # Networks (official: hidden 64, 3 blocks, MLP heads 128 x 128, attr log-std -2.3; control log-std per task,
    # design_opt/cfg/<task>.yml: None takes the task's).
    model: dict = field(default_factory=lambda: {
        "hidden": 32, "blocks": 2, "head_hidden": 64, "attr_log_std": -2.3, "control_log_std": None})
    # PPO (official: gamma 0.995, tau 0.95, clip 0.2, 10 epochs, minibatch 2048, grad norm 40, policy lr 5e-5,
    # value lr 3e-4, 50k samples x 1000 iterations).
    ppo: dict = field(default_factory=lambda: {
        "env_steps": 14400, "samples": 1600, "episodes": 8, "epochs": 5, "minibatch": 512, "gamma": 0.995, "lam": 0.95,
        "clip": 0.2,
        "max_grad_norm": 40.0, "policy_lr": 3.0e-4, "value_lr": 1.0e-3})
    # Evaluation of the final design: deterministic design and control, episodes with their own start noise.
    evaluate: dict = field(default_factory=lambda: {"episodes": 8})
    # The design-only bandit that tests TCA's mechanism (papers.bodygen.bandit): replicates, designs per replicate,
    # start draws per design, policy iterations, episodes per iteration, the logits' and the critic's step sizes,
    # the scripted gait's period (control steps).
    credit: dict = field(default_factory=lambda: {
        "seeds": 8, "designs": 8, "noise_draws": 4, "iterations": 100, "episodes": 32, "policy_lr": 0.2,
        "value_lr": 0.1, "gait_period": 20.0})
    # Estimated wall minutes of one train job (one part of one arm's training on a task and seed), what a cluster is
    # asked for.
    train_minutes: int = 15
    # Chained jobs one arm's training (one task, arm and seed) is split into, each resuming from the previous one's
    # state at a PPO iteration boundary (papers.bodygen.stages.train_part); 1: one job. The result does not depend on it.
    train_parts: int = 1
    # Thresholds of the claims (config/config.yaml says where each comes from).
    claims: dict = field(default_factory=lambda: {"return_margin": 0.0, "max_parameters": 2_000_000,
                                                  "credit_gain": 0.0, "late_share": 0.5})

    def check_rules(self) -> None:
        """Cross-field rules the schema cannot state."""
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise ValueError(f"bodygen.arms: unknown arm(s) {unknown} (known: {list(ARMS)})")
        if not self.tasks or len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"bodygen.tasks: a non-empty list of distinct task names, got {list(self.tasks)}")
        for name in self.tasks:
            get_task(name, where="bodygen.tasks")
        most = max(1, self.ppo["env_steps"] // self.ppo["samples"])  # a part spans at least one iteration's samples
        if not 1 <= self.train_parts <= most:
            raise ValueError(f"bodygen.train_parts: between 1 and ppo.env_steps // ppo.samples ({most}), "
                             f"got {self.train_parts}")
        if self.credit["designs"] < 2:
            raise ValueError("bodygen.credit.designs must be at least 2 (a choice to learn)")


# The parameters each stage reads (papers.common.params.for_stage enforces it).
STAGE_PARAMS = {
    "prepare": ("tasks", "env"),
    "train": ("arms", "tasks", "env", "model", "ppo", "train_parts"),
    "train_part": ("arms", "tasks", "env", "model", "ppo", "train_parts"),
    "credit": ("tasks", "env", "ppo", "credit"),
    "evaluate": ("arms", "tasks", "env", "model", "evaluate"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check_rules()
    return for_stage(params, cfg)
