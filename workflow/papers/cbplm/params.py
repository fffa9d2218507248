"""Parameters of P7 cbplm, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config

SLUG = "cbplm"
MODELS = ("cb", "plain", "tag", "cond")  # CB-pLM, plain masked LM, conditional-tag LM, continuous-concept conditional LM
CONCEPTS = ("gravy", "charge", "aromaticity", "instability_index", "helix_fraction", "turn_fraction",
            "sheet_fraction", "flexibility", "isoelectric_point")  # papers.cbplm.data.concept_values


def unknown_width(n_concepts: int, concept_emb: int, d_model: int, width: int | None = None) -> int:
    """Width of CB-pLM's unknown part z_u: `width` if given, else max(K E, d_model) (the paper's Sec. 3 bottleneck;
    the official ``token_unk`` is K E wide, which at the paper's 718 concepts exceeds every encoder width)."""
    return int(width) if width is not None else max(n_concepts * concept_emb, d_model)


@dataclass(frozen=True)
class ModelParams:
    """One encoder size for all four models (the paper's smallest CB-pLM is 24M parameters:
    official MLM_24M = 10 layers, 12 heads, width 408, feed-forward 2048)."""

    d_model: int = 408
    n_layers: int = 10
    n_heads: int = 12
    d_ff: int = 2048
    concept_emb: int = 2  # official: config.concept_emb = 2 (width of each concept's embedding)
    unknown_width: int | None = None  # width of z_u; None = max(K x concept_emb, d_model) (papers.cbplm.model.unknown_width)


@dataclass(frozen=True)
class TrainParams:
    """Optimisation; defaults from the official LobsterCBMPMLM where it sets them."""

    steps: int = 10_000  # official num_training_steps default
    warmup_steps: int = 1_000  # official num_warmup_steps default
    batch_size: int = 32
    lr: float = 1e-3  # official lr
    betas: tuple = (0.9, 0.98)  # official beta1, beta2
    eps: float = 1e-12  # official eps
    weight_decay: float = 0.01  # torch AdamW default (the official code does not set it)
    mask_prob: float = 0.15  # official mask_percentage; every selected residue becomes <mask>
    concept_weight: float = 0.1  # official concept_hp (times the number of concepts, as there)
    orthogonality_weight: float = 0.1  # official orthogonality_hp
    log_every: int = 50
    sweep: tuple = ()  # shorter CB-pLM runs (steps), each from scratch on its own schedule: the convergence premise


@dataclass(frozen=True)
class InterventionParams:
    """Single-concept intervention (Sec. 4.1; official ``intervene_on_sequences``): set one concept to
    its training extreme, regenerate the residues CB-pLM's attribution picks, re-measure."""

    edit_fraction: float = 0.15  # residues regenerated per sequence (official `edits` is a count; the mask rate)
    temperature: float = 1.0  # sampled decoding (official: argmax = 0), so the plain LM's drift is measured
    sequences: int = 500  # held-out sequences intervened on


@dataclass(frozen=True)
class ClaimParams:
    """Thresholds of the claims, fixed before any run; each is met by a 95% interval over the seeds."""

    min_ratio: float = 3.0  # (a) CB excess change / baseline excess change over the floor; the paper's ~3x (Sec. 4.1)
    min_gain_share: float = 0.9  # (b) share of the plain LM's log-perplexity gain over residue frequencies kept
    min_kd_rank_correlation: float = 0.5  # check c_gravy_kd: mean Spearman of the GRAVY weights with Kyte-Doolittle
    max_r2_gain: float = 0.02  # (a), (a_tag), (b) premise: concept R^2 gained from the longest sweep run to `steps`


@dataclass(frozen=True)
class Params:
    seeds: int = 3
    sequences: str | None = None  # FASTA or TSV/CSV with a `sequence` column; None = aaanalysis benchmarks
    files: tuple = ("SEQ_SOLUBLE", "SEQ_CAPSID", "SEQ_TAIL", "SEQ_DISULFIDE", "SEQ_LOCATION")
    min_length: int = 30
    max_length: int = 512  # official max_length
    max_sequences: int | None = None  # keep at most this many (after filtering, a seeded shuffle)
    test_fraction: float = 0.1
    concepts: tuple = ("gravy", "charge", "aromaticity", "instability_index", "helix_fraction")
    tag_bins: int = 10  # bins (quantiles of the training set) per concept for the conditional-tag model
    models: tuple = MODELS
    model: ModelParams = field(default_factory=ModelParams)
    train: TrainParams = field(default_factory=TrainParams)
    intervention: InterventionParams = field(default_factory=InterventionParams)
    claims: ClaimParams = field(default_factory=ClaimParams)

    def check(self) -> None:
        """Cross-field rules the schema cannot state."""
        unknown = sorted(set(self.concepts) - set(CONCEPTS))
        if unknown:
            raise ValueError(f"cbplm.concepts: unknown {unknown} (known: {', '.join(CONCEPTS)})")
        for needed in ("gravy", "charge"):  # claim (c) reads their weights
            if needed not in self.concepts:
                raise ValueError(f"cbplm.concepts must include '{needed}' (claim (c) reads its weights)")
        if "charge" in self.concepts and "isoelectric_point" in self.concepts:
            raise ValueError("cbplm.concepts: keep one of charge and isoelectric_point (they correlate, r = 0.89)")
        if self.intervention.temperature < 0:
            raise ValueError(f"cbplm.intervention.temperature ({self.intervention.temperature}) must be >= 0 (0 = argmax)")
        if set(self.models) != set(MODELS):
            raise ValueError(f"cbplm.models must be {list(MODELS)} (the claims compare all four)")
        if self.min_length > self.max_length:
            raise ValueError(f"cbplm.min_length ({self.min_length}) exceeds max_length ({self.max_length})")
        if self.model.unknown_width is not None and self.model.unknown_width < 1:
            raise ValueError(f"cbplm.model.unknown_width ({self.model.unknown_width}) must be >= 1 or null")
        if self.model.d_model % self.model.n_heads:
            raise ValueError(f"cbplm.model.d_model ({self.model.d_model}) must be a multiple of n_heads ({self.model.n_heads})")
        if not 0 < self.claims.min_gain_share <= 1:
            raise ValueError(f"cbplm.claims.min_gain_share ({self.claims.min_gain_share}) must be in (0, 1]")
        if self.train.warmup_steps >= self.train.steps:
            raise ValueError(f"cbplm.train.warmup_steps ({self.train.warmup_steps}) must be below steps ({self.train.steps})")
        if any(not 0 < s < self.train.steps for s in self.train.sweep) or list(self.train.sweep) != sorted(set(self.train.sweep)):
            raise ValueError(f"cbplm.train.sweep {list(self.train.sweep)}: increasing steps between 0 and train.steps "
                             f"({self.train.steps}) (the last point of the sweep is train.steps itself)")



# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": (
        "sequences", "files", "min_length", "max_length", "max_sequences", "test_fraction", "concepts",
        "tag_bins",
    ),
    "train": ("max_length", "concepts", "tag_bins", "models", "model", "train"),
    "evaluate": ("max_length", "concepts", "tag_bins", "models", "model", "train", "intervention"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
