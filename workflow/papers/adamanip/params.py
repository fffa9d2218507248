"""Parameters of P18 adamanip, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from papers.common.params import ALL, for_stage, from_config

SLUG = "adamanip"


@dataclass(frozen=True)
class Params:
    """Defaults: this reproduction's default scale (the paper's own settings are in config/full.yaml)."""

    seeds: int = 3  # independent replicates: demonstrations, initialisation, evaluation episodes
    # The policies trained (one train and one evaluate job each per seed); the claims need both.
    policies: tuple = ("diffusion", "mlp_bc")
    # Object categories (env.CATEGORIES); must include the control `bottle_visible` (claims' controls).
    categories: tuple = ("bottle", "microwave", "lamp", "bottle_visible")
    # env.Physics overrides (step sizes, compliance, thresholds, points per cloud); {} = env.Physics defaults.
    physics: dict = field(default_factory=dict)
    # Demonstrations per category and kind (successes kept), and the step cap of an expert episode.
    demos: dict = field(default_factory=lambda: {"per_category": 60, "max_steps": 30})
    # The policy: obs horizon 2, prediction horizon 4, 1 action executed per prediction (official diffusion_train.py);
    # PointNet widths, U-Net channels, DDPM steps (official: 100), denoising steps at evaluation (K: DDPM; fewer:
    # DDIM), the MLP BC head's width.
    policy: dict = field(default_factory=lambda: {
        "obs_horizon": 2, "pred_horizon": 4, "action_horizon": 1, "hidden": 16, "feat": 32,
        "unet_dims": [32, 64], "diffusion_steps": 100, "inference_steps": 10, "mlp_hidden": 128})
    # AdamW minibatch steps, cosine schedule, EMA of the weights (the official trains for many epochs at lr 1e-4).
    # Peak learning rate per policy, each picked by its held-out loss on the control's demonstrations.
    train: dict = field(default_factory=lambda: {"steps": {"diffusion": 1800, "mlp_bc": 900}, "batch": 64, "weight_decay": 1.0e-6,
                                                 "lr": {"diffusion": 3.0e-3, "mlp_bc": 1.0e-3}})
    # Evaluation: randomised episodes per category, step cap (the official evaluates 100 episodes per object).
    evaluate: dict = field(default_factory=lambda: {"episodes": 100, "max_steps": 30})
    # Thresholds of the claims (config/config.yaml says where each comes from).
    claims: dict = field(default_factory=lambda: {"adaptive_gain": 0.0, "diffusion_gain": 0.0, "method_gain": 0.0})

    def check_rules(self) -> None:
        """Cross-field rules the schema cannot state."""
        from papers.adamanip.env import CATEGORIES, CONTROL, Physics

        unknown = sorted(set(self.categories) - set(CATEGORIES))
        if unknown:
            raise ValueError(f"adamanip.categories: unknown {', '.join(unknown)} (known: {', '.join(CATEGORIES)})")
        if CONTROL not in self.categories or len(self.categories) < 2:
            raise ValueError(f"adamanip.categories must hold the control {CONTROL!r} and at least one hidden-mechanism category")
        known = {f.name for f in fields(Physics)}
        bad = sorted(set(self.physics) - known)
        if bad:
            raise ValueError(f"adamanip.physics: unknown key(s) {', '.join(bad)} (known: {', '.join(sorted(known))})")
        if sorted(self.policies) != ["diffusion", "mlp_bc"]:
            raise ValueError(f"adamanip.policies must be [diffusion, mlp_bc] (the claims compare them), got {list(self.policies)}")
        p = self.policy
        if p["pred_horizon"] % 2 ** (len(p["unet_dims"]) - 1):
            raise ValueError("adamanip.policy.pred_horizon must be divisible by 2^(len(unet_dims) - 1)")
        if p["action_horizon"] > p["pred_horizon"]:
            raise ValueError("adamanip.policy: action_horizon must not exceed pred_horizon")
        if p["inference_steps"] > p["diffusion_steps"]:
            raise ValueError("adamanip.policy.inference_steps must not exceed diffusion_steps")
        if any(d % 8 for d in p["unet_dims"]):
            raise ValueError("adamanip.policy.unet_dims must be multiples of 8 (GroupNorm with 8 groups)")

    def physics_obj(self):
        from papers.adamanip.env import Physics

        return Physics(**{k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in self.physics.items()})


# The parameters each stage reads (papers.common.params.for_stage enforces it).
STAGE_PARAMS = {
    "prepare": ("categories", "physics", "demos", "evaluate"),
    "train": ("policy", "train"),
    "evaluate": ("categories", "physics", "policy", "evaluate"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check_rules()
    return for_stage(params, cfg)
