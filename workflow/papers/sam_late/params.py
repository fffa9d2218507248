"""Parameters of P6 sam_late, checked when the workflow is parsed (before any job runs).

Defaults are the official code's (zzp1012/SAM-in-Late-Phase: the argparse defaults of
script/ERM_to_SAM.py, script/ERM_to_Adv.py, script/LMC.py and script/flatness.py) where it has one;
the default scale (config/config.yaml) overrides them with a small network on sklearn's digits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config

SLUG = "sam_late"

# The arms: the update rule before and after the switch (sgd | sam | adv), and where it switches.
# late_*: the rule changes for the last `late_epochs` epochs; early_*: SAM (or AT) for the first `late_epochs`, then
# SGD: the same number of SAM (or AT) epochs as the late arm, at the start instead of the end (the timing ablation).
ARMS = {
    "sgd": ("sgd", "sgd"),
    "sam": ("sam", "sam"),
    "late_sam": ("sgd", "sam"),
    "early_sam": ("sam", "sgd"),
    "adv": ("adv", "adv"),
    "late_adv": ("sgd", "adv"),
    "early_adv": ("adv", "sgd"),
    # The mechanism-removing controls of (a) and (e) (review sam_late_r20261205): late_rand takes SAM's late phase
    # with a random perturbation direction (sam.random_sam_step; SAM's optimiser, momentum restart) whose norm r is
    # calibrated per seed at w_switch to SAM's loss rise (sam.matched_radius; review sam_late_r20261205b: at SAM's
    # norm rho a random direction is ~1,500x weaker); late_clean takes late AT's loss and optimiser on the clean
    # inputs (sam.clean_step, no PGD).
    "late_rand": ("sgd", "rand"),
    "late_clean": ("sgd", "clean"),
}
# late_rand's calibration per seed (sam.matched_radius), kept as constant columns of its training history
MATCH_COLUMNS = ("match_radius", "match_rise_sam", "match_rise_rand", "match_rise_rand_at_rho")
SAM_ARMS = ("sam", "late_sam", "early_sam", "late_rand")  # trained at the main rho; the other rhos train sam and late_sam
ADV_ARMS = ("adv", "late_adv", "early_adv", "late_clean")
NOISY_ARMS = ("sgd", "sam", "late_sam")  # the noisy-label extension: the switch at the main rho, nothing else


def sweep_arm(k: int) -> str:
    """The name of the late-SAM arm of the switch sweep that takes SAM for the last `k` epochs."""
    return f"late_sam_k{k}"


def early_arm(k: int) -> str:
    """The name of the early-SAM arm that takes SAM for the first `k` epochs, then SGD."""
    return f"early_sam_k{k}"


def is_sam_arm(name: str) -> bool:
    """Whether arm `name` takes SAM steps (so its rows carry a rho)."""
    return name in SAM_ARMS or name.startswith(("late_sam_k", "early_sam_k"))


@dataclass(frozen=True)
class DataParams:
    """The data set: sklearn's digits (default) or CIFAR-10 (the paper's, from a user-given folder)."""

    source: str = "cifar10"  # the paper trains on CIFAR-10 and CIFAR-100
    path: str | None = None  # digits: None = sklearn's packaged digits.csv.gz; cifar10: cifar-10-batches-py/
    train_size: int = 50000  # CIFAR-10's training set
    test_size: int = 10000
    label_noise: float = 0.2  # the noisy-label extension's share of corrupted training labels (the paper: clean)
    seed: int = 0  # seed of every seed's split and label noise (seed s draws from (seed, s))


@dataclass(frozen=True)
class AttackParams:
    """L-inf PGD, ERM_to_Adv.py: epsilon 4/255, step 2/255, 10 steps, random start when training."""

    epsilon: float = 0.0157
    step_size: float = 0.00784
    steps: int = 10


@dataclass(frozen=True)
class Params:
    seeds: int = 10  # independent replicates: each seed its own initialisation, batch order, split and label noise
    data: DataParams = field(default_factory=DataParams)
    conditions: tuple = ("clean",)  # clean: the paper's labels (every claim); noisy: the extension (table only)
    model: str = "vgg16_bn"  # ERM_to_SAM.py --model vgg16_bn; mlp for the digits
    hidden: tuple = (256, 256)  # widths of the MLP's hidden layers (unused by vgg16_bn)
    epochs: int = 160  # --epochs 160
    # --start_SAM 150 of 160: SAM (or AT) for the last 10 epochs, 3910 steps of CIFAR-10 in batches of 128. The
    # late phase of every deciding claim ((a), (b), (e)): late SAM, late AT, and early SAM / early AT of equal length.
    late_epochs: int = 10
    # The sweep over the switch epoch (Sec. 4, "how late is late enough"): extra late-SAM arms at the
    # main rho that take SAM for the last K epochs, K in late_sweep (late_epochs itself is the main arm); reported.
    late_sweep: tuple = ()
    # Epochs of AT at the end of late AT (ERM_to_Adv.py --start_adv 150 of 160: 10): None or late_epochs, the one
    # rule for K across claims (a) and (e) (review of issue 48).
    adv_late_epochs: int | None = None
    # The paper's share of training in its late phase (10 of 160 epochs): late and early SAM of round(share x epochs)
    # epochs are reported beside the deciding late phase (no extra arms where that is late_epochs itself).
    paper_share: float = 10 / 160
    history_every: int = 1  # epochs between test evaluations in the training history (the last epoch always)
    batch_size: int = 128  # --bs 128
    lr: float = 0.01  # --lr 0.01
    momentum: float = 0.9  # --momentum 0.9
    weight_decay: float = 1e-4  # --wd 1e-4
    lr_milestones: tuple = (80, 160)  # --step_size 80 160: lr x lr_gamma from these epochs on
    lr_gamma: float = 0.1  # MultiStepLR(gamma=0.1)
    label_smoothing: float = 0.1  # --label_smoothing 0.1 (SAM runs; AT runs use plain cross-entropy)
    augment: bool = True  # CIFAR random crop (padding 4) + horizontal flip, as the official loader
    rho: float = 2.0  # --rho 2.0: the SAM radius of the main arms
    rhos: tuple = (2.0,)  # the rho sweep: full, late and early SAM at each (must include rho)
    attack: AttackParams = field(default_factory=AttackParams)
    hessian_samples: int = 5000  # flatness.py --abridged_size 5000 (the first training examples)
    lanczos_iters: int = 20
    eigenvalues: int = 2  # flatness.py --neigs 2
    interpolation_range: tuple = (-0.2, 1.2)  # LMC.py: alphas = linspace(-0.2, 1.2, 40)
    interpolation_points: int = 29  # includes alpha = 0 and 1 exactly on this grid
    interpolation_samples: int = 1000  # LMC.py --sample_num 1000
    escape_steps: int = 100  # steps after the switch over which ||w_t - w_switch|| is recorded and fitted
    # late_rand's radius (sam.matched_radius): per seed at w_switch, match_batches training batches (a fixed draw of
    # the seed's (seed, switch, 1) stream) x match_directions seeded Gaussian directions each
    match_batches: int = 6
    match_directions: int = 8
    # Claim thresholds and premise gates (fixed before any run; see config/config.yaml for their sources).
    gap_fraction_min: float = 0.5
    close_share_max: float = 0.5
    early_ratio_max: float = 0.5
    escape_r2_min: float = 0.9
    barrier_tolerance: float = 0.05
    switch_train_acc_min: float = 0.99
    first_step_ratio_max: float = 2.0

    @property
    def share_epochs(self) -> int:
        """Epochs of the paper's share of training (paper_share x epochs, at least 1): the reported short arms."""
        return max(1, round(self.paper_share * self.epochs))

    @property
    def late_ks(self) -> list[int]:
        """K of every extra late-SAM arm (reported): late_sweep and the paper's share, without late_epochs itself."""
        return sorted(({*self.late_sweep, self.share_epochs}) - {self.late_epochs})

    @property
    def early_ks(self) -> list[int]:
        """K of every extra early-SAM arm (reported): the paper's share, unless that is late_epochs itself."""
        return [] if self.share_epochs == self.late_epochs else [self.share_epochs]

    @property
    def switch_epochs(self) -> list[int]:
        """Every epoch a late arm branches from SGD at: the main switch and one per extra late-SAM arm."""
        return sorted({self.epochs - k for k in (self.late_epochs, *self.late_ks)})

    @property
    def switch_epoch(self) -> int:
        """The first epoch of the late phase (ERM_to_SAM.py: start_SAM = epochs - late_epochs)."""
        return self.epochs - self.late_epochs

    @property
    def adv_switch_epoch(self) -> int:
        """The first epoch of late AT: the main switch (one rule for K across (a) and (e))."""
        return self.switch_epoch

    def rule(self, arm: str, epoch: int, switch: int | None = None) -> str:
        """The update rule of `arm` (a name of ARMS) at `epoch`; `switch`: the epoch its rule changes at (default:
        late_epochs for early arms, the main switch for late arms; the extra arms pass theirs)."""
        before, after = ARMS[arm]
        if switch is None:
            switch = self.late_epochs if arm.startswith("early") else self.switch_epoch
        return before if epoch < switch else after

    def lr_at(self, epoch: int) -> float:
        """Step decay: lr x gamma^(milestones reached), as the official MultiStepLR."""
        return self.lr * self.lr_gamma ** sum(epoch >= m for m in self.lr_milestones)

    def check(self) -> None:
        """Rules across keys that the schema cannot state."""
        if not 1 <= self.late_epochs < self.epochs:
            raise ValueError(f"sam_late.late_epochs must lie in [1, epochs = {self.epochs}), got {self.late_epochs}")
        for k in self.late_sweep:
            if not 1 <= k < self.epochs or k == self.late_epochs:
                raise ValueError(f"sam_late.late_sweep: each K must lie in [1, epochs = {self.epochs}) and differ "
                                 f"from late_epochs = {self.late_epochs}, got {list(self.late_sweep)}")
        if self.adv_late_epochs is not None and self.adv_late_epochs != self.late_epochs:
            raise ValueError(f"sam_late.adv_late_epochs = {self.adv_late_epochs} must be null or late_epochs = "
                             f"{self.late_epochs}: one rule for K across claims (a) and (e) (late AT and late SAM "
                             "share the late phase)")
        if 2 * self.late_epochs > self.epochs:
            raise ValueError(f"sam_late.late_epochs = {self.late_epochs} must be at most half of epochs = "
                             f"{self.epochs}: early SAM (the first late_epochs) and late SAM (the last) must not overlap")
        if len(set(self.late_sweep)) != len(self.late_sweep):
            raise ValueError(f"sam_late.late_sweep must not repeat a value, got {list(self.late_sweep)}")
        if self.rho not in self.rhos:
            raise ValueError(f"sam_late.rhos {list(self.rhos)} must include the main rho {self.rho}")
        if len(set(self.rhos)) != len(self.rhos):
            raise ValueError(f"sam_late.rhos must not repeat a value, got {list(self.rhos)}")
        lo, hi = self.interpolation_range
        if not (lo <= 0.0 and hi >= 1.0):
            raise ValueError(f"sam_late.interpolation_range must contain [0, 1], got {[lo, hi]}")
        if self.data.source == "digits" and self.data.train_size + self.data.test_size > 1797:
            raise ValueError(f"sam_late.data: train_size + test_size = {self.data.train_size + self.data.test_size} "
                             "exceeds the 1797 digits")
        late_steps = self.late_epochs * -(-self.data.train_size // self.batch_size)
        if self.escape_steps > late_steps:
            raise ValueError(f"sam_late.escape_steps = {self.escape_steps} exceeds the {late_steps} steps of the late "
                             "phase (late_epochs x steps per epoch): the escape is recorded during it")
        if self.hessian_samples > self.data.train_size or self.interpolation_samples > self.data.train_size:
            raise ValueError("sam_late.hessian_samples and interpolation_samples must not exceed data.train_size "
                             f"= {self.data.train_size}")
        if self.model == "vgg16_bn" and self.data.source != "cifar10":
            raise ValueError("sam_late.model vgg16_bn needs data.source cifar10 (32x32 colour images)")
        unknown = [c for c in self.conditions if c not in ("clean", "noisy")]
        if unknown or "clean" not in self.conditions or len(set(self.conditions)) != len(self.conditions):
            raise ValueError(f"sam_late.conditions must hold 'clean' (the paper's labels; every claim) and may add "
                             f"'noisy' (the extension), each once; got {list(self.conditions)}")



# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("seeds", "data", "conditions"),
    "train_sgd": (
        "seeds", "data", "model", "hidden", "epochs", "late_epochs", "late_sweep", "paper_share", "batch_size", "lr",
        "momentum", "weight_decay", "lr_milestones", "lr_gamma", "label_smoothing", "augment", "escape_steps",
        "history_every",
    ),
    "train_sam": (
        "seeds", "data", "model", "hidden", "epochs", "late_epochs", "late_sweep", "paper_share", "rho", "batch_size",
        "lr", "momentum", "weight_decay", "lr_milestones", "lr_gamma", "label_smoothing", "augment", "escape_steps",
        "history_every", "match_batches", "match_directions",
    ),
    "train_adv": (
        "seeds", "data", "model", "hidden", "epochs", "late_epochs", "late_sweep", "paper_share", "adv_late_epochs",
        "batch_size", "lr", "momentum", "weight_decay", "lr_milestones", "lr_gamma", "label_smoothing", "augment", "attack",
        "escape_steps", "history_every",
    ),
    "evaluate": (
        "seeds", "data", "model", "hidden", "epochs", "late_epochs", "late_sweep", "paper_share", "adv_late_epochs",
        "rho", "attack", "hessian_samples", "lanczos_iters", "eigenvalues", "interpolation_range", "interpolation_points",
        "interpolation_samples",
    ),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
