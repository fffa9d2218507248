"""Parameters of P4 symspace, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config

SLUG = "symspace"

# The arms of claim (b): the paper's head and SPDNet's on the same BiMap -> ReEig backbone (the ablation of the head);
# of claim (e): the attention network and the same network without attention (the ablation); of claim (d): the ball heads.
SPD_HEADS = ("logeig_linear", "busemann_mlr")
BALL_HEADS = ("euclidean_mlr", "ganea_mlr", "busemann_mlr")


@dataclass(frozen=True)
class Params:
    """Defaults: this reproduction's default scale (the paper's own settings are in config/full.yaml)."""

    seeds: int = 6  # train jobs; replicates of claim (b)'s permuted-label controls
    head_seeds: int = 30  # replicates of claim (b)'s two heads (>= seeds), dealt to the train jobs in turn
    # the mixing model's seed of claim (b)'s first head replicate (replicate i: seed head_seed_offset + i)
    head_seed_offset: int = 0
    # EEG-like mixing model (issue 27, Data (1)); the paper uses BCIC-IV-2a (22 channels, 4 classes, 9 subjects).
    eeg: dict = field(default_factory=lambda: {
        "subjects": 1, "channels": 6, "classes": 4, "trials_per_class": 30, "windows": 4, "samples": 64,
        "power_spread": 0.3, "class_gain": 3.0, "session_shift": 0.2, "noise": 0.3, "shrink": 0.01})
    # Real EEG (full scale): {dataset name: folder with one .npz per subject (data.load_trials_npz)}; empty = the
    # mixing model. With real EEG the replicates of an EEG task are its subjects (seeds vary the initialisation).
    eeg_datasets: dict = field(default_factory=dict)
    # Region covariances of sklearn's digits (Data (2)): eps I regularises; train_fraction of the images train.
    # seeds: the first n seeds that run them (context for claim b, deciding nothing; 0 = not run).
    digits: dict = field(default_factory=lambda: {"eps": 1.0e-3, "train_fraction": 0.3, "max_images": 600, "seeds": 0})
    # Claim (b)'s positive control: random SPD(channels) matrices (log-eigenvalues ~ N(0, log_spread^2), random
    # eigenvectors) labelled by a random SPDNet with the Busemann MLR head, equal classes; on the first `seeds` seeds
    # (at most head_seeds: a scale with fewer head seeds runs fewer).
    # The generating head's normals are a_k = -e_m: the log of a quadratic form of the BiMap output, outside the
    # LogEig head's function class (train.planted_spd).
    spd_planted: dict = field(default_factory=lambda: {"seeds": 6, "classes": 3, "per_class": 240, "log_spread": 2.0,
                                                        "train_fraction": 0.5})
    # The noisy tree in the Poincare disk (Data (3)), moved by a random isometry per seed (root_shift: the
    # hyperbolic distance of its root from the origin), so that no angle rule about the origin gives the labels.
    tree: dict = field(default_factory=lambda: {"seeds": 20, "branching": 3, "depth": 5, "label_depth": 2,
                                                 "edge_length": 1.0, "noise": 0.6, "root_shift": 3.0,
                                                 "train_fraction": 0.3, "angle_bins": 36, "planted_seeds": 20,
                                                 "planted_classes": 3, "planted_share": 0.67})
    # Models: BiMap output size of the shared backbone (capped at each task's input size), hyperplanes of the attention's query/key FC layers,
    # fixed-point iterations of the Frechet mean (Sec. 4.3: "a few").
    model: dict = field(default_factory=lambda: {"bimap_dim": 4, "attention_dim": 4, "frechet_iters": 1})
    # Full-batch Adam: steps (of the SPD arms but the attention pair), the attention pair's steps and the EEG subjects
    # per seed it trains on (the first n; null: all, as real EEG needs, its subjects being the replicates), learning
    # rate; the
    # ball heads' steps and learning-rate grid (claim d: each head and tree seed keeps the rate chosen on
    # validation);
    # val_fraction of the training data held out (the convergence gate); eval_every: steps between validation
    # accuracies (the gate reads that curve).
    train: dict = field(default_factory=lambda: {"steps": 300, "digits_step_factor": 2, "head_inits": 3,
                                                 "attention_steps": 200, "attention_subjects": 1,
                                                 "planted_attention_seeds": 7, "burst_attention_seeds": 7,
                                                 "spread_attention_seeds": 0,
                                                 "lr": 0.05, "tree_steps": 3000,
                                                 "tree_lrs": [0.02, 0.2, 1.0], "restarts": 2,
                                                 "val_fraction": 0.25, "eval_every": 25})
    # The (alpha, beta) metrics of the family (Sec. 3.3) at which claim (a) checks the closed form; (1, 0) is the
    # affine-invariant metric and must be in it.
    metrics: tuple = ((1.0, 0.0), (1.0, 0.5), (1.0, 2.0))
    # Claim (a)'s numerical check: random matrices per metric (in all), their size, the t of the limit (doubling), digits.
    check: dict = field(default_factory=lambda: {"matrices": 12, "dim": 4, "times": [128, 256, 512], "dps": 350})
    # Thresholds and gates (config/config.yaml says where each comes from).
    claims: dict = field(default_factory=lambda: {"distance_tol": 1.0e-4, "order_tol": 0.1, "noninferiority_margin": 0.02,
                                                  "min_effect": 0.02,
                                                  "convergence_tol": 0.05, "stability_tol": 0.05,
                                                  "angle_rule_max": 0.75, "trainability_min": 0.95})

    def check_rules(self) -> None:
        """Cross-field rules the schema cannot state."""
        metrics = [tuple(float(v) for v in m) for m in self.metrics]
        if (1.0, 0.0) not in metrics:
            raise ValueError("symspace.metrics must contain [1.0, 0.0], the affine-invariant metric")
        for alpha, beta in metrics:
            n = max(self.eeg["channels"], 5)  # beta < 0 binds at the largest n
            if not (alpha > 0 and alpha + n * beta > 0):
                raise ValueError(f"symspace.metrics: ({alpha}, {beta}) is not a metric on SPD({n}): alpha > 0, alpha + n beta > 0")
        if self.eeg["classes"] > self.eeg["channels"]:
            raise ValueError(f"symspace.eeg.classes = {self.eeg['classes']} exceeds eeg.channels = {self.eeg['channels']}")
        if self.head_seeds < self.seeds:
            raise ValueError(f"symspace.head_seeds ({self.head_seeds}) must be at least symspace.seeds ({self.seeds})")
        for key in ("planted_attention_seeds", "burst_attention_seeds", "spread_attention_seeds"):
            if self.train[key] < 0:
                raise ValueError(f"symspace.train.{key} must be >= 0")
        if not self.claims["min_effect"] > 0:
            raise ValueError("symspace.claims.min_effect must be > 0")
        if not 0 <= self.digits.get("seeds", 0) <= self.seeds:
            raise ValueError("symspace.digits.seeds must lie in [0, symspace.seeds]")
        if not 0 <= self.tree["planted_seeds"] <= self.tree["seeds"]:
            raise ValueError("symspace.tree.planted_seeds must lie in [0, tree.seeds]")
        if not self.train["tree_lrs"] or min(self.train["tree_lrs"]) <= 0:
            raise ValueError("symspace.train.tree_lrs must name at least one learning rate, all > 0")
        if self.train["restarts"] < 1:
            raise ValueError("symspace.train.restarts must be >= 1")
        if self.train["head_inits"] < 1:
            raise ValueError("symspace.train.head_inits must be >= 1")
        if not 0 < self.tree["planted_share"] <= 1:
            raise ValueError("symspace.tree.planted_share must lie in (0, 1]")
        if self.train["digits_step_factor"] < 1:
            raise ValueError("symspace.train.digits_step_factor must be >= 1")
        if self.tree["label_depth"] >= self.tree["depth"]:
            raise ValueError("symspace.tree.label_depth must be below tree.depth")
        for key in ("steps", "attention_steps", "tree_steps"):
            if self.train["eval_every"] * 4 > self.train[key]:
                raise ValueError(f"symspace.train.{key} ({self.train[key]}) must be at least 4 x train.eval_every "
                                 f"({self.train['eval_every']}): the convergence gate compares the last quarter of "
                                 "the validation curve with the rest")
        times = list(self.check["times"])
        if len(times) < 2 or any(b != 2 * a for a, b in zip(times, times[1:])):
            raise ValueError(f"symspace.check.times must double (e.g. [128, 256, 512]), got {times}")


def real_eeg(p) -> bool:
    """True when config symspace.eeg_datasets names real EEG (the full scale); empty = the mixing model."""
    return bool(p.eeg_datasets)


# The parameters each stage reads (papers.common.params.for_stage enforces it).
STAGE_PARAMS = {
    "prepare": ("seeds", "head_seeds", "head_seed_offset", "eeg", "eeg_datasets", "digits", "tree.seeds", "tree.branching", "tree.depth",
                "tree.label_depth", "tree.edge_length", "tree.noise", "tree.root_shift", "tree.planted_classes",
                "tree.planted_share", "train.planted_attention_seeds", "train.burst_attention_seeds",
                "train.spread_attention_seeds"),
    # train reads eeg too: claim (b)'s premise reference draws from the same generator (stages.REFERENCE_TRIALS_PER_CLASS)
    "train": ("seeds", "head_seeds", "head_seed_offset", "eeg", "digits", "spd_planted", "model",
              "train.planted_attention_seeds", "train.burst_attention_seeds",
              "train.spread_attention_seeds", "train.steps", "train.digits_step_factor", "train.head_inits",
              "train.attention_steps",
              "train.attention_subjects", "train.lr", "train.val_fraction", "train.eval_every"),
    "tree": ("tree.seeds", "tree.planted_seeds", "tree.train_fraction", "tree.angle_bins", "train.tree_steps",
             "train.tree_lrs", "train.restarts", "train.val_fraction", "train.eval_every"),
    "evaluate": ("check", "metrics"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check_rules()
    return for_stage(params, cfg)
