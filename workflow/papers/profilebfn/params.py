"""Parameters of P17 profilebfn, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config

SLUG = "profilebfn"
# The generators compared on every family. profilebfn: the trained network with the official sampler;
# untrained: the same sampler and architecture at its initialisation (control of claim a: no learning);
# profile: independent column-by-column draws from the profile (no covariation by construction);
# hmm: emissions of the family's profile HMM (hmmemit); copies: reference rows with point mutations
# (control of claim b: family-like but not novel).
ARMS = ("profilebfn", "untrained", "profile", "hmm", "copies")


@dataclass(frozen=True)
class Potts:
    """The synthetic families with planted contacts (ours: the paper has no synthetic family)."""

    families: int = 3  # planted families, each with its own fields and contacts (and one null family besides)
    length: int = 40  # columns L
    contacts: int = 20  # planted pairs (L / 2: the top-L/2 precision of the paper's contact metric)
    min_separation: int = 4  # |i - j| of planted and scored pairs
    residues_per_column: int = 4  # favoured residues per column (a family column's few residues)
    field: float = 3.0  # field of the favoured residues over the rest
    coupling: float = 2.0  # J_ij(a, pi(a)) on the planted pairs
    sweeps: int = 30  # Gibbs sweeps per draw
    reference: int = 500  # sequences of the reference MSA (the profile and the comparison set)
    heldout: int = 200  # further draws, never trained on: the held-out denoising loss of the coupling premise
    train: int = 1000  # other draws, added to the training set as single sequences


@dataclass(frozen=True)
class Model:
    """Official bfn_roberta.py: ESM-2-sized (150M and 650M checkpoints); ours is tiny (CPU budget)."""

    d_model: int = 64
    n_layer: int = 2
    n_head: int = 4
    time_dim: int = 16  # official BFNInputLayer time_dim (Gaussian basis of t)


@dataclass(frozen=True)
class Train:
    steps: int = 600
    batch: int = 32
    crop: int = 64  # residues per training window (the paper: 1024-token crops of UniRef50)
    lr: float = 3.0e-3
    warmup: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    gpus: int = 1  # data-parallel processes (torchrun, one per GPU; gloo CPU processes when device is cpu)
    precision: str = "fp32"  # fp32 | bf16 (autocast of the network; not stated by the paper or the official code)


@dataclass(frozen=True)
class Thresholds:
    family_margin: float = 0.1  # (a), (b) non-inferiority: share above the HMM threshold >= the profile arm's - this
    covariation_share: float = 0.5  # (c) share of the reference MSA's covariation lead over profile draws kept


@dataclass(frozen=True)
class Params:
    """Defaults from the paper and the official code (profile_seqgen.py, bflow.py) where they exist."""

    seeds: int = 3  # training seeds (independent replicates)
    device: str = "cpu"  # cpu | cuda: where the network trains and generates (kernels.attention in Triton on cuda)
    train_parts: int = 1  # chained training jobs per seed, each resuming the previous one's full state
    families: tuple = ("RRM_1", "fn3")  # held-out Pfam families (names in data.default_family_paths)
    family_paths: dict = field(default_factory=dict)  # name -> Stockholm file; absent = the packaged one
    training_fasta: str | None = None  # single training sequences; None = pyhmmer's 2,100 test proteins
    pseudocount: float = 1.0e-3  # official profile_from_lists: counts + 1e-3
    holdout_evalue: float = 1.0e-3  # training proteins hitting a held-out family's HMM at this E are removed
    heldout_proteins: dict = field(default_factory=lambda: {"fraction": 0.05, "max": 200})  # competence gate's set
    noise_sequences: int = 500  # random sequences behind each family's noise cutoff
    potts: Potts = Potts()
    model: Model = Model()
    train: Train = Train()
    beta1: float = 2.0  # official beta1 (model cfg) with beta_time_order = 2
    t0: float = 0.6  # official --time 60 (t0 = 60 / 100)
    sample_steps: int = 25  # official: 500 (np.linspace(t0, 1, 500)); ours: CPU budget
    n_generate: int = 100  # sequences generated per Pfam family and arm
    n_generate_potts: int = 300  # per Potts family and arm (covariation needs hundreds of sequences)
    mutation_rate: float = 0.1  # the copying control: reference rows with this share of residues mutated
    thresholds: Thresholds = Thresholds()

    def check(self) -> None:
        """Cross-field rules the schema cannot state."""
        from papers.profilebfn.data import default_family_paths

        known = default_family_paths()
        for name in self.families:
            if name not in known and name not in self.family_paths:
                raise ValueError(f"profilebfn.families: {name!r} is neither packaged ({', '.join(known)}) "
                                 "nor given in profilebfn.family_paths")
        if not 0.0 < self.t0 < 1.0:
            raise ValueError(f"profilebfn.t0: {self.t0} must lie in (0, 1)")
        if self.potts.length > self.train.crop:
            raise ValueError(f"profilebfn.potts.length ({self.potts.length}) must not exceed train.crop ({self.train.crop})")
        if self.model.d_model % self.model.n_head:
            raise ValueError(f"profilebfn.model: d_model {self.model.d_model} is not a multiple of n_head {self.model.n_head}")
        if not 0 < self.heldout_proteins["fraction"] < 1 or self.heldout_proteins["max"] < 1:
            raise ValueError(f"profilebfn.heldout_proteins: fraction in (0, 1) and max >= 1, got {self.heldout_proteins}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"profilebfn.device: {self.device!r} is neither cpu nor cuda")
        if self.train.precision not in ("fp32", "bf16"):
            raise ValueError(f"profilebfn.train.precision: {self.train.precision!r} is neither fp32 nor bf16")
        if not 1 <= self.train_parts <= self.train.steps:
            raise ValueError(f"profilebfn.train_parts: {self.train_parts} must lie in [1, train.steps = {self.train.steps}]")
        if self.train.gpus < 1 or self.train.batch % self.train.gpus:
            raise ValueError(f"profilebfn.train.gpus: {self.train.gpus} processes must divide train.batch "
                             f"({self.train.batch}) evenly")
        if 2 * self.potts.contacts > self.potts.length:
            raise ValueError(f"profilebfn.potts.contacts: {self.potts.contacts} disjoint pairs need "
                             f"{2 * self.potts.contacts} > length {self.potts.length} columns")


# The parameters each stage reads (papers.common.params.for_stage keeps a stage from reading others).
STAGE_PARAMS = {
    "prepare": ("families", "family_paths", "training_fasta", "pseudocount", "holdout_evalue", "heldout_proteins",
                "noise_sequences", "potts"),
    "train": ("device", "train_parts", "model", "train", "beta1"),
    "train_part": ("device", "train_parts", "model", "train", "beta1"),
    "evaluate": ("device", "model", "train.crop", "beta1", "pseudocount", "t0", "sample_steps", "n_generate", "n_generate_potts",
                 "mutation_rate", "potts"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
