"""Parameters of P8 eagle, checked when the workflow is parsed (before any job runs)."""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config

SLUG = "eagle"
EXPERTS = ("clip", "hires", "det")  # the low-res contrastive, high-res reading and localisation experts
FUSIONS = ("concat", "sequence_append", "llava_hr", "mini_gemini", "deformable")


@dataclass(frozen=True)
class Params:
    """Defaults: this reproduction's default scale (config/config.yaml says where each value comes from)."""

    seeds: int = 3  # independent replicates: canvases, pretraining and every arm's initialisation
    # Canvases per split and seed; the question kinds asked of each canvas; the digit classes drawn
    # (0 .. digit_classes - 1); share of the digit images held out for val/test canvases; an .npz of digits
    # (images (N, 8, 8), labels) instead of sklearn's (null).
    data: dict = field(default_factory=lambda: {"train_canvases": 1000, "val_canvases": 150, "test_canvases": 500,
                                                "kinds": ["global", "fine"], "digit_classes": 4,
                                                "heldout_fraction": 0.4, "digits_file": None})
    # Experts: channels of every tower's output map; pretraining steps, batch and lr of each objective;
    # the CLIP loss's temperature (CLIP's initial 0.07).
    experts: dict = field(default_factory=lambda: {"channels": 16, "pretrain_steps": 300, "batch": 32, "lr": 3.0e-3,
                                                   "temperature": 0.07})
    # The causal LM: width, layers, heads; pretraining steps on the QA text, batch, lr.
    lm: dict = field(default_factory=lambda: {"d_model": 32, "n_layer": 1, "n_head": 2, "pretrain_steps": 200,
                                              "batch": 32, "lr": 3.0e-3})
    # Fusion: the common grid side (Eagle interpolates every map to it), the concat projector's hidden width
    # (every other fusion's width is solved to match its parameter count), sampling points per expert of
    # the deformable fusion.
    fusion: dict = field(default_factory=lambda: {"grid": 4, "hidden": 64, "deformable_points": 4})
    # Training of each arm: Pre-Alignment steps per expert, stage-1 (alignment) and stage-2 (SFT) steps,
    # batch, learning rates (a tower's lower layers stay frozen throughout; its last layer trains in
    # Pre-Alignment and SFT).
    train: dict = field(default_factory=lambda: {"prealign_steps": 30, "align_steps": 30, "sft_steps": 180,
                                                 "batch": 96, "align_lr": 3.0e-3, "sft_lr": 3.0e-3})
    # Full scale (papers.eagle.llava): LLaVA-style train / val / test JSON files and their image folder, the
    # three experts' and the LM's local Hugging Face directories; null everywhere = the synthetic canvases. Each
    # expert's input side (null = its config's image_size), the hidden state read from a ViT expert (LLaVA: -2),
    # the longest text in tokens.
    llava: dict = field(default_factory=lambda: {"train_json": None, "val_json": None, "test_json": None,
                                                 "image_folder": None,
                                                 "experts": {"clip": None, "hires": None, "det": None}, "lm": None,
                                                 "image_sizes": {"clip": None, "hires": None, "det": None},
                                                 "select_layer": -2, "max_text_tokens": 512})
    # Claim thresholds, fixed before the run (config/config.yaml says where each comes from).
    claims: dict = field(default_factory=lambda: {"equivalence_margin": 0.03, "gain_threshold": 0.0})

    def check_rules(self) -> None:
        d = self.data
        from papers.eagle.data import KINDS

        kinds = list(d["kinds"])
        if len(set(kinds)) != len(kinds) or not set(kinds) <= set(KINDS) or not {"global", "fine"} <= set(kinds):
            raise ValueError(f"eagle.data.kinds must be distinct kinds of {list(KINDS)} including global and fine "
                             f"(claim b compares them), got {kinds}")
        if not 2 <= d["digit_classes"] <= 10:
            raise ValueError(f"eagle.data.digit_classes must be in 2 .. 10, got {d['digit_classes']}")
        if not 0 < d["heldout_fraction"] < 1:
            raise ValueError(f"eagle.data.heldout_fraction must be in (0, 1), got {d['heldout_fraction']}")
        if self.lm["d_model"] % self.lm["n_head"]:
            raise ValueError(f"eagle.lm.d_model ({self.lm['d_model']}) must be a multiple of lm.n_head ({self.lm['n_head']})")
        lv = self.llava
        paths = {**{k: lv.get(k) for k in ("train_json", "val_json", "test_json", "image_folder", "lm")},
                 **{f"experts.{e}": (lv.get("experts") or {}).get(e) for e in EXPERTS}}
        unset = [k for k, v in paths.items() if v is None]
        if unset and len(unset) != len(paths):
            raise ValueError(f"eagle.llava: set every path or none (null = the synthetic canvases); unset: "
                             f"{', '.join('eagle.llava.' + k for k in unset)}")
        if not unset:
            return  # the full scale: the grid is checked against the experts' maps when they are loaded
        if self.fusion["grid"] not in (2, 4, 8):
            raise ValueError(f"eagle.fusion.grid must be 2, 4 or 8 (the towers' maps are 4 x 4 and 8 x 8), got {self.fusion['grid']}")


def full_scale(p) -> bool:
    """True when config eagle.llava points at data (papers.eagle.llava); null paths = the synthetic canvases."""
    return p.llava.get("train_json") is not None


STAGE_PARAMS = {
    "prepare": ("seeds", "data", "llava"),
    "pretrain": ("experts", "lm", "llava"),
    "train": ("experts", "lm", "fusion", "train", "llava"),
    "evaluate": ("seeds",),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check_rules()
    return for_stage(params, cfg)
