"""Parameters of P16 hip, checked when the workflow is parsed (before any job runs).

Defaults are the default scale's; each field says where it comes from. HiP's own
hyper-parameters (``methods.HiPConfig``) are the official defaults scaled down to a model
whose context is 1k bytes instead of 32k-128k tokens. Seeds are not a field: the rules fan
out over ``range(seeds)`` and pass the seed to each stage.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config
from papers.hip import data
from papers.hip.methods import HiPConfig

SLUG = "hip"
MULTIKEY_WORDS = 64  # distinct key words of the multi-key task (len(papers.hip.pretrained.KEY_WORDS))


@dataclass(frozen=True)
class DataParams:
    text: str | None = None  # a UTF-8 text file; None: the KJV from diatheke
    module: str = "engKJV2006eb"  # SWORD module of Debian's sword-text-kjv
    books: str = "Genesis-Revelation"  # the diatheke key: the whole Bible
    val_fraction: float = 0.05  # the last 5% of the bytes are held out (Revelation and before)


@dataclass(frozen=True)
class ModelParams:
    """A tiny GPT with RoPE (the paper prunes LLaMA-2/3 7-8B; nothing that size trains here)."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    rope_base: float = 10000.0  # LLaMA's RoPE theta
    smear_keys: bool = False  # keys mixed with the previous position's (model.GPTConfig)
    smear_from: int = 0  # ... in layers smear_from and up (model.GPTConfig)


@dataclass(frozen=True)
class TrainParams:
    """AdamW with linear warm-up and cosine decay (nanoGPT's recipe), on KJV windows with key records."""

    seq_len: int = 1024  # training context in bytes
    batch: int = 2
    steps: int = 400
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    max_records: int = 8  # distinct keys per window, 1 .. max_records (data.training_sample)
    repeats: int = 3  # times each key is written in a window (all but the first are answers)
    recall_weight: float = 20.0  # extra loss weight of the repeats' values, the bytes only far context predicts
    drill_steps: int = 0  # the first drill_steps steps train on record drills (data.record_drill)
    short_len: int = 128  # steps before short_steps train on short_batch windows of short_len bytes
    short_batch: int = 32
    short_steps: int = 0


@dataclass(frozen=True)
class EvalParams:
    lengths: tuple = (1024,)  # prompt lengths T of the retrieval test
    depths: tuple = (0.1, 0.3, 0.5, 0.7, 0.9)  # needle depth: where the queried record sits, 0 = start
    n_keys: tuple = (1, 4)  # records per prompt: 1 = passkey, more = multi-key retrieval (distractors)
    widths: tuple = (2, 4, 8, 16, 32)  # positions each record spans in the haystack (data.retrieval_prompt)
    decide_width: int = 4  # the width that decides claim (a): the answer twice, as in the paper's passkey sentence
    wide_min: int = 16  # widths >= this (8+ answer copies, locality given by the data): (a)'s positive control
    prompts: int = 4  # prompts per (T, n_keys, depth, width) and seed
    text_windows: int = 8  # held-out windows of seq_len bytes for text NLL (no records)
    recall_prompts: int = 16  # record-free held-out windows (at max T) whose q, k feed the top-k recall per layer
    planted_prompts: int = 4  # planted-needle and planted-locality draws per (T, depth, width) and seed
    planted_strength: float = 12.0  # the planted needle's attention logit (q . k / sqrt(D)) for its query


@dataclass(frozen=True)
class CostParams:
    """Counted key scores and time against T (the paper's latency figure), random q, k."""

    lengths: tuple = (2048, 4096, 8192, 16384, 32768)
    dense_max_len: int = 8192  # the dense reference materialises T x T scores: time it up to here
    head_dim: int = 16  # the model's head size
    repeats: int = 3  # independent inputs (seeds of q, k) per T
    timing_repeats: int = 5  # timings per input, arms interleaved; the minimum is kept (robust to machine load)
    control_fraction: int = 16  # the control's mask_k = T / control_fraction (a budget growing with T)
    control_max_len: int = 8192  # the control (quadratic) is run up to here
    device: str = "cpu"  # cpu: the torch references; cuda: the Triton kernels


@dataclass(frozen=True)
class OffloadParams:
    """Decoding with a GPU-resident cache of the blocks HiP visits (the paper's KV offloading)."""

    lengths: tuple = (384, 512, 768, 1024)  # context lengths T at the end of the decoded stretch
    mask_k: int = 4  # HiP's mask_k while decoding with offloading (a log T cache under 1/4 of a 1k context)
    decode_steps: int = 64  # decoding steps simulated before each T
    refresh_interval: int = 8  # the mask is recomputed every this many steps (official: 8)
    lru_scale: float = 2.0  # s in the official cache budget s * mask_k * log2(T / mask_k + 1)
    windows: int = 4  # held-out text windows decoded per seed
    max_cache_share: float = 0.25  # T where the log T cache holds more of the context is not evidence


@dataclass(frozen=True)
class ClaimParams:
    """Thresholds of the claims and their premise gates, fixed before the runs that decide them; each claim
    is decided on a 95% interval against them (papers.common.claims), and so is its negative control.
    config.yaml says where each comes from."""

    far_share_min: float = 0.5  # premise of (a), (b): far context removes more than half of the answers' loss
    dense_acc_min: float = 0.8  # premise of (a): dense attention retrieves the decided needles this often
    acc_tol: float = 0.1  # (a) dense - HiP retrieval accuracy below this (a tenth of the prompts)
    acc_margin: float = 0.0  # (a) HiP - each baseline above this (the paper's guarantee: better than random)
    recall_margin: float = 0.1  # (b) HiP's recall on the model's keys minus on the same keys shuffled, above this
    exponent_tol: float = 0.15  # check: |HiP's counted-work exponent - T log T's| below this
    quadratic_min: float = 1.5  # (c) HiP's time exponent below this, dense's (positive control) above
    prune_share_max: float = 0.25  # premise of (c): HiP's counted products at the largest T / dense's, at most
    hit_drop_tol: float = 0.1  # (d) the fitted change of HiP's hit rate over the decided offload T, above -this
    resident_exponent_tol: float = 0.15  # check: working set ~ T^p with p below that of log2(T / mask_k) + this


@dataclass(frozen=True)
class MultiKeyParams:
    """RULER's multi-key needle-in-a-haystack (Hsieh et al. 2024) on the pretrained LMs (papers.hip.pretrained)."""

    needles: int = 4  # key-value needles per prompt: the asked one and needles - 1 distractors
    prompts: int = 4  # prompts per (length, depth)
    lengths: tuple = (2048, 4096, 8192)  # prompt lengths in tokens (the 2k-8k)
    depths: tuple = (0.1, 0.5, 0.9)  # depths in [0, 1] of the asked needle; distractors spread over the rest


@dataclass(frozen=True)
class PretrainedEvalParams:
    """The pretrained LMs' evaluation (papers.hip.pretrained; full scale): every method at ``hip``'s budget."""

    documents: str | None = None  # a UTF-8 text file of long documents; null when no models are listed
    lengths: tuple = (4096, 8192)  # context lengths in tokens (document windows and passkey prompts)
    depths: tuple = (0.1, 0.5, 0.9)  # passkey depths in [0, 1]
    prompts: int = 4  # passkeys per (length, depth)
    windows: int = 4  # document windows per length
    seed: int = 0  # the passkeys', needles', random blocks' and bootstrap's seed
    multikey: MultiKeyParams = field(default_factory=MultiKeyParams)
    bootstrap: int = 1000  # resamples of the paired bootstrap of each method's accuracy against dense


@dataclass(frozen=True)
class Params:
    seeds: int = 3  # independently trained models (initialisation, batches, records, prompts)
    device: str = "cpu"  # where the models train and run: cpu | cuda (kernels.attention and HiP in Triton)
    data: DataParams = field(default_factory=DataParams)
    lm: ModelParams = field(default_factory=ModelParams)
    train: TrainParams = field(default_factory=TrainParams)
    hip: HiPConfig = field(default_factory=HiPConfig)
    eval: EvalParams = field(default_factory=EvalParams)
    cost: CostParams = field(default_factory=CostParams)
    offload: OffloadParams = field(default_factory=OffloadParams)
    claims: ClaimParams = field(default_factory=ClaimParams)
    pretrained: tuple = ()  # local Hugging Face models HiP is patched into, each {name, path, dtype}
    pretrained_eval: PretrainedEvalParams = field(default_factory=PretrainedEvalParams)

    @property
    def pretrained_names(self) -> list[str]:
        return [m["name"] for m in self.pretrained]

    def pretrained_model(self, name: str) -> dict:
        if name not in self.pretrained_names:
            raise KeyError(f"hip.pretrained: no model named {name!r} (listed: {self.pretrained_names})")
        return dict(self.pretrained[self.pretrained_names.index(name)])

    def check(self) -> None:
        h, m, t = self.hip, self.lm, self.train
        if h.block_q % h.block_stride_q:
            raise ValueError(f"hip.hip.block_q ({h.block_q}) must be a multiple of block_stride_q ({h.block_stride_q})")
        if h.mask_k % h.block_k:
            raise ValueError(f"hip.hip.mask_k ({h.mask_k}) must be a multiple of block_k ({h.block_k})")
        if m.n_embd % m.n_head or (m.n_embd // m.n_head) % 2:
            raise ValueError("hip.lm: n_embd / n_head must be an even integer (RoPE rotates pairs)")
        if h.dense_layers >= m.n_layer:
            raise ValueError(f"hip.hip.dense_layers ({h.dense_layers}) leaves no pruned layer of hip.lm "
                             f"({m.n_layer} layers)")
        for name, dev in (("device", self.device), ("cost.device", self.cost.device)):
            if dev not in ("cpu", "cuda"):
                raise ValueError(f"hip.{name} must be cpu or cuda, got {dev!r}")
        if t.short_steps > t.steps:
            raise ValueError(f"hip.train.short_steps ({t.short_steps}) exceeds steps ({t.steps})")
        if t.drill_steps > t.short_steps:
            raise ValueError(f"hip.train.drill_steps ({t.drill_steps}) exceeds short_steps ({t.short_steps}): the "
                             "drills use the short windows")
        if t.max_records > len(data.KEY_BYTES):
            raise ValueError(f"hip.train.max_records ({t.max_records}) exceeds the {len(data.KEY_BYTES)} key bytes")
        for name, length in (("seq_len", t.seq_len), ("short_len", t.short_len if t.short_steps else t.seq_len)):
            if length < t.max_records * t.repeats * data.RECORD_LEN:
                raise ValueError(f"hip.train.{name} ({length}) cannot hold max_records x repeats "
                                 f"({t.max_records} x {t.repeats}) records")
        for T in self.eval.lengths:
            if T <= h.budget + h.block_q + 2 * data.RECORD_LEN:
                raise ValueError(f"hip.eval.lengths: {T} must exceed HiP's key budget sink + window + mask_k + "
                                 f"block_q ({h.budget + h.block_q}) and two records, or nothing is pruned")
            if T > t.seq_len:
                raise ValueError(f"hip.eval.lengths: {T} exceeds the trained context train.seq_len ({t.seq_len}): "
                                 "RoPE models are evaluated at trained lengths only")
        if any(not 0 <= d <= 1 for d in self.eval.depths):
            raise ValueError("hip.eval.depths must lie in [0, 1]")
        if max(self.eval.n_keys) > len(data.KEY_BYTES):
            raise ValueError(f"hip.eval.n_keys: at most {len(data.KEY_BYTES)} distinct keys (data.KEY_BYTES)")
        ev, o = self.eval, self.offload
        if not ev.widths or any(not isinstance(w, int) or w < data.RECORD_LEN or w % data.RECORD_LEN
                                for w in ev.widths):
            raise ValueError(f"hip.eval.widths must be positive multiples of {data.RECORD_LEN}, got {list(ev.widths)}")
        if not any(w >= ev.wide_min for w in ev.widths):
            raise ValueError(f"hip.eval.wide_min ({ev.wide_min}) exceeds every width of hip.eval.widths "
                             f"({list(ev.widths)}): claim (a) would have no wide-record positive control")
        if ev.decide_width not in ev.widths or ev.decide_width >= ev.wide_min:
            raise ValueError(f"hip.eval.decide_width ({ev.decide_width}) must be one of hip.eval.widths "
                             f"({list(ev.widths)}) and below wide_min ({ev.wide_min}): it decides claim (a)")
        for T in ev.lengths:
            if max(ev.n_keys) * max(ev.widths) + data.RECORD_LEN > T:
                raise ValueError(f"hip.eval: {max(ev.n_keys)} records of width {max(ev.widths)} and the query do not fit "
                                 f"a prompt of {T} bytes")
        for name, value in (("recall_prompts", ev.recall_prompts), ("planted_prompts", ev.planted_prompts),
                            ("prompts", ev.prompts)):
            if value < 1:
                raise ValueError(f"hip.eval.{name} must be at least 1, got {value}")
        if o.mask_k % h.block_k or o.mask_k < h.block_k:
            raise ValueError(f"hip.offload.mask_k ({o.mask_k}) must be a positive multiple of hip.block_k ({h.block_k})")
        if min(o.lengths) <= max(o.decode_steps + o.refresh_interval, 2 * o.mask_k):
            raise ValueError("hip.offload.lengths must exceed decode_steps + refresh_interval and 2 offload.mask_k")
        if max(o.lengths) > t.seq_len:
            raise ValueError(f"hip.offload.lengths: {max(o.lengths)} exceeds the trained context train.seq_len "
                             f"({t.seq_len}): the decoded q, k would come from RoPE positions never trained on")
        if self.cost.timing_repeats < 1:
            raise ValueError(f"hip.cost.timing_repeats must be at least 1, got {self.cost.timing_repeats}")
        if len(self.cost.lengths) < 2 or len(self.offload.lengths) < 2:
            raise ValueError("hip.cost.lengths and hip.offload.lengths need two or more values to fit an exponent")
        if sum(T <= self.cost.control_max_len for T in self.cost.lengths) < 2:
            raise ValueError("hip.cost.control_max_len must admit two or more lengths to fit the control's exponent")
        if len(set(self.pretrained_names)) != len(self.pretrained):
            raise ValueError(f"hip.pretrained: names repeat in {self.pretrained_names}")
        if self.pretrained and min(self.pretrained_eval.lengths) <= h.budget + h.block_q:
            raise ValueError(f"hip.pretrained_eval.lengths: each must exceed sink + window + mask_k + block_q "
                             f"({h.budget + h.block_q}), or nothing is pruned")
        self._check_pretrained_eval()
        if self.pretrained and self.pretrained_eval.documents is None:
            raise ValueError("hip.pretrained_eval.documents: set it to a UTF-8 text file when hip.pretrained lists models")
        if min(self.cost.lengths) // self.cost.control_fraction < h.block_k:
            raise ValueError("hip.cost: the control's mask_k = T / control_fraction must be at least block_k")

    def _check_pretrained_eval(self) -> None:
        """Counts, depths and the multi-key lengths of ``hip.pretrained_eval`` (checked with or without models:
        a typo fails at parse time on every scale)."""
        ev, mk, h = self.pretrained_eval, self.pretrained_eval.multikey, self.hip
        where = "hip.pretrained_eval"
        for name, value, low in (("prompts", ev.prompts, 1), ("windows", ev.windows, 1),
                                 ("bootstrap", ev.bootstrap, 100), ("multikey.needles", mk.needles, 1),
                                 ("multikey.prompts", mk.prompts, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{where}.{name} must be an integer >= {low}, got {value!r}")
        if mk.needles > MULTIKEY_WORDS:
            raise ValueError(f"{where}.multikey.needles ({mk.needles}) exceeds the {MULTIKEY_WORDS} distinct key "
                             "words (papers.hip.pretrained.KEY_WORDS)")
        for name, depths in (("depths", ev.depths), ("multikey.depths", mk.depths)):
            if not depths or any(not isinstance(d, (int, float)) or not 0 <= d <= 1 for d in depths):
                raise ValueError(f"{where}.{name} must be a non-empty list of numbers in [0, 1], got {list(depths)}")
        if not mk.lengths or any(not isinstance(T, int) or T < 1 for T in mk.lengths):
            raise ValueError(f"{where}.multikey.lengths must be a non-empty list of positive integers, "
                             f"got {list(mk.lengths)}")
        if self.pretrained and min(mk.lengths) <= h.budget + h.block_q:
            raise ValueError(f"{where}.multikey.lengths: each must exceed sink + window + mask_k + block_q "
                             f"({h.budget + h.block_q}), or nothing is pruned")


# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("data",),
    "train_lm": ("device", "lm", "train"),
    "evaluate": ("device", "train", "hip", "eval", "offload"),
    "cost": ("hip", "cost"),
    "evaluate_pretrained": ("device", "hip", "pretrained", "pretrained_eval"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
