"""Parameters of P9 ensembles, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from papers.common.params import ALL, for_stage, from_config

SLUG = "ensembles"
ARCHS = ("mlp", "cnn", "resnet18")
DIGITS = 1797  # sklearn's digits: 1,797 images


@dataclass(frozen=True)
class Setting:
    """One training pipeline; its members differ only in the seed (initialisation, batch order, augmentation).

    The paper trains CNNs and ResNets whose width is set by k in {10, 20, 40, 80, 160} on CIFAR-10/100 and
    Tiny ImageNet (Sec. 5); `widths` x `depths` lists more than one architecture only for the heterogeneous control.
    """

    arch: str = "cnn"  # cnn (digits: two 3x3 conv layers of k and 2k channels), mlp (digits) or resnet18 (CIFAR)
    widths: tuple = (8,)  # the CNN's or the ResNet's k (layer widths k, 2k, ...), or the MLP hidden width
    depths: tuple = (1,)  # MLP hidden layers (cnn and resnet18: must be (1,), their depth is fixed)
    init_gain: float = 1.0  # weights ~ U(+-gain sqrt(6 / (fan_in + fan_out))) (Glorot, as sklearn's MLP)
    epochs: int = 200  # trained to convergence (the premise gates of the claims check it)
    batch_size: int = 32
    lr: float = 1e-2  # Adam, cosine-annealed to 0 over the epochs
    weight_decay: float = 0.0
    augment: bool = True  # random shifts (digits: 1 pixel; CIFAR: 4 pixels and horizontal flips)

    @property
    def architectures(self) -> list[tuple[int, int]]:
        """(width, depth) pairs; member m of M takes the (m * A // M)-th of the A pairs (contiguous blocks)."""
        return [(w, d) for d in self.depths for w in self.widths]

    def architecture(self, member: int, members: int) -> tuple[int, int]:
        archs = self.architectures
        return archs[member * len(archs) // members]

    def single(self, width: int, depth: int) -> "Setting":
        """This pipeline with one architecture: what trains a member of that width and depth."""
        return replace(self, widths=(width,), depths=(depth,))

    @property
    def heterogeneous(self) -> bool:
        return len(self.architectures) > 1


@dataclass(frozen=True)
class Params:
    """Parameters of the ensemble experiments (the paper's protocol, scaled to sklearn's digits)."""

    data: str | None = None  # None = sklearn digits; else CIFAR-10/100 (python-pickle folder or .npz)
    replicates: int = 10  # independent replicates: each its own random train/val/test split and member seeds
    train_size: int | None = 200  # training images per replicate (None = all not held out)
    val_size: int = 300  # validation images per replicate (the member of claim (a) is chosen on them)
    data_seed: int = 0  # seed of the splits (replicate r draws from data_seed + r) and of the member orderings
    members: int = 16  # M_max: members per setting and replicate
    members_per_job: int = 48  # distinct member trainings (replicate, pipeline, member) in one training job
    orderings: int = 50  # random member orderings averaged in the measured curves over M
    estimator_members: int = 4  # K: members the estimator sees (a subset of K; the curve uses the other members - K)
    subsets: int = 16  # claims (b), (d): random K-subsets of seen members per replicate (all when fewer exist)
    snapshots: int = 16  # claim (a)'s control: the last `snapshots` epochs of member 0, as an ensemble
    alpha: float = 0.05  # level of the two-sample KS test, reported in the table (no claim rests on it)
    chosen: str = "cnn_k8"  # the homogeneous setting whose numbers the claims' `measured` show
    control: str = "cnn_k8_k16"  # the heterogeneous negative control of claims (b), (c) and (d)
    estimator_rel_tolerance: float = 0.25  # claims (b), (d): |predicted - measured change beyond K| <= this x it
    # The premise gates (convergence, disagreement): the paper's members are trained to fit their training set.
    train_acc_min: float = 0.99  # every replicate's mean member training accuracy (un-augmented images)
    flat_window: float = 0.25  # the last share of the epochs over which the training loss must be flat ...
    train_loss_fall_max: float = 0.05  # ... falling by at most this (nats, mean member) over that window
    disagreement_min: float = 0.01  # mean share of test images on which two members' predicted classes differ
    selected: tuple = ()  # the settings to run, in table order (a config overlay can replace a list)
    settings: Mapping[str, Setting] = field(default_factory=dict)  # after parse(): the selected ones only

    @property
    def held_out(self) -> int:
        """Members the measured curve averages (those the estimator does not see): M = 1 ... held_out."""
        return self.members - self.estimator_members

    @property
    def beyond(self) -> int:
        """The first size the K seen members cannot measure themselves (claims (b), (d) test the change from K to
        held_out)."""
        return self.estimator_members + 1

    def member_pipeline(self, name: str, member: int) -> Setting:
        """The single-architecture pipeline that trains member `member` of setting `name`."""
        s = self.settings[name]
        return s.single(*s.architecture(member, self.members))

    @property
    def pipelines(self) -> list[Setting]:
        """Every distinct single-architecture pipeline the settings use, in order of first use. A heterogeneous
        setting's member m is the member m of the pipeline of its architecture: trained once, whoever uses it
        (member m's seed depends on the replicate and m only, so the two would be the same run)."""
        out = []
        for name in self.settings:
            for m in range(self.members):
                q = self.member_pipeline(name, m)
                if q not in out:
                    out.append(q)
        return out

    @property
    def trainings(self) -> list[tuple[int, int, int]]:
        """The distinct member trainings (replicate, pipeline index, member), each once, in order of first use."""
        pipes, out, seen = self.pipelines, [], set()
        for r in range(self.replicates):
            for name in self.settings:
                for m in range(self.members):
                    key = (r, pipes.index(self.member_pipeline(name, m)), m)
                    if key not in seen:
                        seen.add(key)
                        out.append(key)
        return out

    @property
    def jobs(self) -> int:
        """Training jobs: the distinct member trainings cut into blocks of `members_per_job`."""
        return -(-len(self.trainings) // self.members_per_job)

    def job_members(self, job: int) -> list[tuple[int, int, int]]:
        """The (replicate, pipeline index, member) trainings of training job `job`."""
        return self.trainings[job * self.members_per_job:(job + 1) * self.members_per_job]

    @property
    def snapshot_pipelines(self) -> list[int]:
        """The pipelines whose member 0 records its last epochs (claim (a)'s control): the homogeneous settings'."""
        pipes = self.pipelines
        return sorted({pipes.index(s.single(*s.architectures[0])) for s in self.settings.values()
                       if not s.heterogeneous})

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
        if not 2 <= self.estimator_members <= (self.members - 2) // 2:
            raise ValueError(f"{SLUG}.estimator_members must lie in [2, (members - 2) // 2 = {(self.members - 2) // 2}]"
                             " (claims (b), (d) compare M = K + 1 ... members - K: at least two sizes beyond K)")
        if self.members % 2:
            raise ValueError(f"{SLUG}.members must be even (claim (c) pairs the members)")
        for name, s in self.settings.items():
            if s.arch not in ARCHS:
                raise ValueError(f"{SLUG}.settings.{name}.arch: '{s.arch}' is not one of {', '.join(ARCHS)}")
            if s.arch in ("cnn", "resnet18") and tuple(s.depths) != (1,):
                raise ValueError(f"{SLUG}.settings.{name}.depths must be [1] for {s.arch} (its depth is fixed)")
            if len(s.architectures) > self.members:
                raise ValueError(f"{SLUG}.settings.{name}: {len(s.architectures)} architectures for "
                                 f"{self.members} members")
            if self.snapshots > s.epochs:
                raise ValueError(f"{SLUG}.snapshots: {self.snapshots} exceeds settings.{name}.epochs = {s.epochs}")
            if (s.arch == "resnet18") != (self.data is not None):
                raise ValueError(f"{SLUG}.settings.{name}.arch: the digits (data: null) take mlp or cnn, "
                                 "CIFAR (a data path) takes resnet18")
        if self.data is None and (self.train_size or 0) + self.val_size >= DIGITS - 100:
            raise ValueError(f"{SLUG}: train_size + val_size = {(self.train_size or 0) + self.val_size} leaves fewer "
                             f"than 100 of the {DIGITS} digits for the test set")


# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("data", "replicates", "train_size", "val_size", "data_seed"),
    "train": ("replicates", "members", "members_per_job", "snapshots", "flat_window", "settings"),
    "evaluate": ("replicates", "data_seed", "members", "orderings", "estimator_members", "subsets", "alpha",
                 "settings"),
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
