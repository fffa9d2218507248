"""Parameters of P9 ensembles, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from papers.common.params import ALL, for_stage, from_config

SLUG = "ensembles"
ARCHS = ("mlp", "resnet18")


@dataclass(frozen=True)
class Setting:
    """One training pipeline; its members differ only in the seed (initialisation, batch order).

    The paper trains CNNs and ResNets whose width is set by k in {10, 20, 40, 80, 160} on CIFAR-10/100 and
    Tiny ImageNet; `widths` x `depths` lists more than one architecture only for the heterogeneous control.
    """

    arch: str = "mlp"  # mlp (digits) or resnet18 (the paper's width-k ResNet, images 3x32x32)
    train_size: int | None = None  # training images (the first n of the training pool); None = all
    widths: tuple = (64,)  # MLP hidden width, or the ResNet's k (layer widths k, 2k, 4k, 8k)
    depths: tuple = (1,)  # MLP hidden layers (resnet18: must be (1,), its depth is fixed)
    init_gain: float = 1.0  # MLP weights ~ U(+-gain sqrt(6 / (fan_in + fan_out))) (Glorot, as sklearn's MLP)
    epochs: int = 200
    batch_size: int = 32
    lr: float = 1e-3  # Adam, cosine-annealed to 0 over the epochs
    weight_decay: float = 0.0
    augment: bool = False  # images only: random 4-pixel shifts and horizontal flips (CIFAR practice)

    @property
    def architectures(self) -> list[tuple[int, int]]:
        """(width, depth) pairs; member m of M takes the (m * A // M)-th of the A pairs (contiguous blocks)."""
        return [(w, d) for d in self.depths for w in self.widths]

    def architecture(self, member: int, members: int) -> tuple[int, int]:
        archs = self.architectures
        return archs[member * len(archs) // members]

    @property
    def heterogeneous(self) -> bool:
        return len(self.architectures) > 1


@dataclass(frozen=True)
class Params:
    """Parameters of the ensemble experiments (the paper's protocol, scaled to sklearn's digits)."""

    data: str | None = None  # None = sklearn digits; else CIFAR-10/100 (python-pickle folder or .npz)
    test_size: int = 1000  # digits only: held-out test images (CIFAR uses its official test split)
    data_seed: int = 0  # the random digits split
    members: int = 32  # M_max: members per setting (the M = 1 ... 32)
    members_per_job: int = 8  # members trained in one job (one process, one torch import)
    orderings: int = 50  # random member orderings averaged in the measured curves over M
    estimator_members: int = 4  # K: members the estimator sees (the issue: K = 3-5)
    alpha: float = 0.05  # level of the distributional-equivalence test
    chosen: str = "converged_300"  # the homogeneous setting whose numbers the claims' `measured` show
    control: str = "heterogeneous_300"  # the heterogeneous negative control of claims (c) and (d)
    pools: int = 4  # disjoint member pools (members // pools each): the replicates of ensemble-level claims
    equivalence_share_min: float = 0.5  # claim (c): share of disjoint member pairs the KS test does not reject
    monotone_slack: float = 1e-4  # sanity check: NLL(M + 1) <= NLL(M) + slack (Monte Carlo noise)
    estimator_rel_tolerance: float = 0.25  # claim (d): |error| <= this x the measured gain ...
    estimator_acc_floor: float = 0.002  # ... but never below this for accuracy (2 of 1000 test images)
    jensen_overstatement: float = 2.0  # sanity check: control's Jensen gap / its gain over the best member
    selected: tuple = ()  # the settings to run, in table order (a config overlay can replace a list)
    settings: Mapping[str, Setting] = field(default_factory=dict)  # after parse(): the selected ones only

    @property
    def jobs(self) -> int:
        """Training jobs: the (setting, member) list cut into blocks of `members_per_job`."""
        return -(-len(self.settings) * self.members // self.members_per_job)

    def job_members(self, job: int) -> list[tuple[str, int]]:
        """The (setting, member) pairs that training job `job` trains."""
        pairs = [(name, m) for name in self.settings for m in range(self.members)]
        return pairs[job * self.members_per_job:(job + 1) * self.members_per_job]

    def check(self) -> None:
        """Cross-field rules the schema cannot state."""
        for key in ("chosen", "control"):
            if getattr(self, key) not in self.settings:
                raise ValueError(f"{SLUG}.{key}: '{getattr(self, key)}' is not one of {SLUG}.selected "
                                 f"({', '.join(self.settings)})")
        if self.settings[self.chosen].heterogeneous:
            raise ValueError(f"{SLUG}.chosen: setting '{self.chosen}' must be homogeneous (one width, one depth)")
        if not self.settings[self.control].heterogeneous:
            raise ValueError(f"{SLUG}.control: setting '{self.control}' must list several widths or depths")
        if not 2 <= self.estimator_members <= self.members:
            raise ValueError(f"{SLUG}.estimator_members must lie in [2, members = {self.members}]")
        if self.pools < 1 or self.members // self.pools < 2:
            raise ValueError(f"{SLUG}.pools: {self.pools} pools of members // pools = {self.members // max(self.pools, 1)} "
                             f"members; each pool must hold at least 2 members (members = {self.members})")
        for name, s in self.settings.items():
            if s.arch not in ARCHS:
                raise ValueError(f"{SLUG}.settings.{name}.arch: '{s.arch}' is not one of {', '.join(ARCHS)}")
            if s.arch == "resnet18" and tuple(s.depths) != (1,):
                raise ValueError(f"{SLUG}.settings.{name}.depths must be [1] for resnet18 (its depth is fixed)")
            if len(s.architectures) > self.members:
                raise ValueError(f"{SLUG}.settings.{name}: {len(s.architectures)} architectures for "
                                 f"{self.members} members")
        if self.data is None:
            pool = 1797 - self.test_size  # sklearn's digits: 1,797 images
            for name, s in self.settings.items():
                if s.arch != "mlp":
                    raise ValueError(f"{SLUG}.settings.{name}.arch: the digits (data: null) take arch mlp")
                if s.train_size is not None and s.train_size > pool:
                    raise ValueError(f"{SLUG}.settings.{name}.train_size: {s.train_size} exceeds the "
                                     f"{pool} digits left after test_size = {self.test_size}")



# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("data", "test_size", "data_seed"),
    "train": ("members", "members_per_job", "settings"),
    "evaluate": ("data_seed", "orderings", "estimator_members", "alpha", "settings"),
    "report": ALL,
}


def parse(cfg) -> Params:
    """Params from the config section; `settings` keeps the `selected` ones, in that order."""
    section = dict(cfg)
    every = {name: from_config(Setting, s, where=f"{SLUG}.settings.{name}")
             for name, s in (section.pop("settings", None) or {}).items()}
    params = from_config(Params, section, where=SLUG)
    unknown = [name for name in params.selected if name not in every]
    if unknown:
        raise ValueError(f"{SLUG}.selected: {', '.join(unknown)} not in {SLUG}.settings ({', '.join(every)})")
    params = Params(**{**params.__dict__, "settings": {name: every[name] for name in params.selected}})
    params.check()
    return for_stage(params, cfg)
