"""Parameters of P3 bodygen, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field

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
    arms: tuple = tuple(ARMS)  # arms trained (each a key of ARMS); the claims need all of them
    # The crawler template (official crawler.yml + ant.xml: size 0.08, gear 150, max depth 4, max 2 children;
    # planar here: two legs, front and back, pointing down and out).
    body: dict = field(default_factory=lambda: {
        "legs": [[0.3, -0.3], [-0.3, -0.3]], "size": 0.08, "gear": 30.0, "max_depth": 4, "max_children": 2})
    # Episode (official: 5 skeleton steps, frame skip 4, timestep 0.01, ctrl cost 1e-4, 1000 control steps; no
    # tilt termination: the official default max_ang 3600).
    env: dict = field(default_factory=lambda: {
        "skel_steps": 5, "control_steps": 200, "frame_skip": 4, "timestep": 0.01, "ctrl_cost": 1.0e-4,
        "root_radius": 0.25, "init_height": 0.5, "joint_range": 30.0, "max_tilt": 3600.0, "integrator": "Euler"})
    # Networks (official: hidden 64, 3 blocks, MLP heads 128 x 128, attr log-std -2.3, control log-std -0.5).
    model: dict = field(default_factory=lambda: {
        "hidden": 32, "blocks": 2, "head_hidden": 64, "attr_log_std": -2.3, "control_log_std": -0.5})
    # PPO (official: gamma 0.995, tau 0.95, clip 0.2, 10 epochs, minibatch 2048, grad norm 40, policy lr 5e-5,
    # value lr 3e-4, 50k samples x 1000 iterations).
    ppo: dict = field(default_factory=lambda: {
        "env_steps": 14400, "samples": 1600, "episodes": 8, "epochs": 5, "minibatch": 512, "gamma": 0.995, "lam": 0.95,
        "clip": 0.2,
        "max_grad_norm": 40.0, "policy_lr": 3.0e-4, "value_lr": 1.0e-3})
    # Evaluation of the final design: deterministic design and control, episodes with their own start noise.
    evaluate: dict = field(default_factory=lambda: {"episodes": 8})
    # Thresholds of the claims (config/config.yaml says where each comes from).
    claims: dict = field(default_factory=lambda: {"return_margin": 0.0, "max_parameters": 2_000_000})

    def check_rules(self) -> None:
        """Cross-field rules the schema cannot state."""
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise ValueError(f"bodygen.arms: unknown arm(s) {unknown} (known: {list(ARMS)})")
        if len(self.body["legs"]) > 3 ** (self.body["max_depth"]) or self.body["max_children"] > 2:
            raise ValueError("bodygen.body.max_children must be <= 2 (TopoPE's path code has base 3)")
        if len(self.body["legs"]) > 2:
            raise ValueError("bodygen.body.legs: at most 2 (TopoPE's path code has base 3)")


# The parameters each stage reads (papers.common.params.for_stage enforces it).
STAGE_PARAMS = {
    "prepare": ("body", "env"),
    "train": ("arms", "body", "env", "model", "ppo"),
    "evaluate": ("arms", "body", "env", "model", "evaluate"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check_rules()
    return for_stage(params, cfg)
