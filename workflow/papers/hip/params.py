"""Parameters of P16 hip, checked when the workflow is parsed (before any job runs).

Defaults are the default scale's; each field says where it comes from. HiP's own
hyper-parameters (``methods.HiPConfig``) are the official defaults scaled down to a model
whose context is 1k bytes instead of 32k-128k tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config
from papers.hip import data
from papers.hip.methods import HiPConfig

SLUG = "hip"


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


@dataclass(frozen=True)
class TrainParams:
    """AdamW with linear warm-up and cosine decay (nanoGPT's recipe)."""

    seq_len: int = 1024  # training context in bytes; also the evaluation context
    batch: int = 4
    steps: int = 300
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0


@dataclass(frozen=True)
class PasskeyParams:
    """Passkey retrieval (the official repository's passkey data set, shortened for bytes)."""

    answer_weight: float = 1.0  # loss = mean NLL + answer_weight x mean NLL of the key's digits
    key_repeats: int = 3  # key sentences in a row (official: 5)
    # prompt lengths used by turns while training (the short ones at a proportionally larger batch:
    # copying is learnt on short prompts first); passkey_train.seq_len is the evaluation length
    train_lengths: tuple = (256, 512)


@dataclass(frozen=True)
class EvalParams:
    text_windows: int = 16  # held-out windows of seq_len bytes for perplexity
    passkey_samples: int = 64  # passkey prompts per method
    locality_rows: int = 8  # query positions per window at which locality is measured
    locality_windows: int = 2  # held-out windows used for locality and recall
    max_lag: int = 32  # lags of the score autocorrelation
    # the pruned methods again with the first d layers dense, for each d (the paper's ablation of l_d)
    dense_layers_ablation: tuple = (1,)


@dataclass(frozen=True)
class CostParams:
    """Key scores and time against T with the CPU references (the paper's Fig. on latency)."""

    lengths: tuple = (2048, 4096, 8192, 16384, 32768)
    dense_max_len: int = 8192  # the dense reference materialises T x T scores: time it up to here
    head_dim: int = 32  # the model's head size
    repeats: int = 1  # timing repeats (median)
    device: str = "cpu"  # cpu: the torch references; cuda: the Triton kernels


@dataclass(frozen=True)
class OffloadParams:
    """Decoding with a GPU-resident cache of the blocks HiP visits (the paper's KV offloading)."""

    lengths: tuple = (160, 256, 384, 512, 768, 1024)  # context lengths T at the end of the decoded stretch
    decode_steps: int = 64  # decoding steps simulated before each T
    refresh_interval: int = 8  # the mask is recomputed every this many steps (official: 8)
    lru_scale: float = 2.0  # s in the official cache budget s * mask_k * log2(T / mask_k + 1)
    windows: int = 2  # held-out text windows decoded


@dataclass(frozen=True)
class ClaimParams:
    """Thresholds of the claims, set before any result was seen; each claim is decided on a 95%
    interval against them (papers.common.claims), and so is its negative control."""

    ppl_rel_tol: float = 0.05  # (a) HiP's perplexity less than 5% above dense (the paper: "within a few %")
    passkey_tol: float = 0.1  # (a) HiP's passkey accuracy less than 0.1 below dense (a tenth of the prompts)
    ahead_fraction: float = 0.5  # (a) HiP's excess perplexity below half a baseline's
    passkey_margin: float = 0.3  # (a) HiP's passkey accuracy more than 0.3 above a baseline's (a clear lead)
    recall_margin: float = 0.1  # (b) HiP's top-k recall more than 0.1 above random pruning's (paired)
    exponent_tol: float = 0.15  # (c) |HiP's measured time exponent - T log T slope| below this
    dense_exponent_tol: float = 0.05  # (c) |dense measured time exponent - 2| below this
    resident_exponent_tol: float = 0.15  # (d) working set ~ T^p with p below that of log2(T / mask_k) + this
    hit_rate_min: float = 0.8  # (d) cache hit rate above this at every T (at most 1 read in 5 from the host)
    locality_min: float = 0.3  # (locality) lag-1 score autocorrelation above this
    locality_margin: float = 0.2  # (locality) and more than this above the shuffled-key control (paired)


@dataclass(frozen=True)
class Params:
    seed: int = 0
    device: str = "cpu"  # where the models train and run: cpu | cuda (kernels.attention and HiP in Triton)
    data: DataParams = field(default_factory=DataParams)
    lm: ModelParams = field(default_factory=ModelParams)
    lm_train: TrainParams = field(default_factory=TrainParams)
    passkey_model: ModelParams = field(default_factory=ModelParams)
    passkey_train: TrainParams = field(default_factory=TrainParams)
    passkey: PasskeyParams = field(default_factory=PasskeyParams)
    hip: HiPConfig = field(default_factory=HiPConfig)
    eval: EvalParams = field(default_factory=EvalParams)
    cost: CostParams = field(default_factory=CostParams)
    offload: OffloadParams = field(default_factory=OffloadParams)
    claims: ClaimParams = field(default_factory=ClaimParams)

    def check(self) -> None:
        h = self.hip
        if h.block_q % h.block_stride_q:
            raise ValueError(f"hip.hip.block_q ({h.block_q}) must be a multiple of block_stride_q ({h.block_stride_q})")
        if h.mask_k % h.block_k:
            raise ValueError(f"hip.hip.mask_k ({h.mask_k}) must be a multiple of block_k ({h.block_k})")
        for name, m in (("lm", self.lm), ("passkey_model", self.passkey_model)):
            if m.n_embd % m.n_head or (m.n_embd // m.n_head) % 2:
                raise ValueError(f"hip.{name}: n_embd / n_head must be an even integer (RoPE rotates pairs)")
            for d in (h.dense_layers, *self.eval.dense_layers_ablation):
                if d >= m.n_layer:
                    raise ValueError(f"hip: {d} dense layers (hip.dense_layers, eval.dense_layers_ablation) leave no "
                                     f"pruned layer in hip.{name} ({m.n_layer} layers)")
        for name, dev in (("device", self.device), ("cost.device", self.cost.device)):
            if dev not in ("cpu", "cuda"):
                raise ValueError(f"hip.{name} must be cpu or cuda, got {dev!r}")
        if self.lm_train.seq_len <= h.budget + h.block_q:
            raise ValueError(f"hip.lm_train.seq_len ({self.lm_train.seq_len}) must exceed HiP's key budget "
                             f"sink + window + mask_k + block_q ({h.budget + h.block_q}), or nothing is pruned")
        if max(self.passkey.train_lengths) > self.passkey_train.seq_len:
            raise ValueError("hip.passkey.train_lengths must not exceed passkey_train.seq_len (the evaluation length)")
        shortest = data.passkey_min_length(self.passkey.key_repeats)
        if min(self.passkey.train_lengths) < shortest:
            raise ValueError(f"hip.passkey.train_lengths: a prompt with {self.passkey.key_repeats} key sentence(s) "
                             f"needs at least {shortest} bytes")
        if max(self.offload.lengths) > self.lm_train.seq_len:
            raise ValueError(f"hip.offload.lengths must not exceed the trained context lm_train.seq_len "
                             f"({self.lm_train.seq_len}): the model is evaluated at trained lengths only")
        if min(self.offload.lengths) <= max(self.offload.decode_steps + self.offload.refresh_interval, 2 * h.mask_k):
            raise ValueError("hip.offload.lengths must exceed decode_steps + refresh_interval and 2 mask_k")
        if len(self.cost.lengths) < 2 or len(self.offload.lengths) < 2:
            raise ValueError("hip.cost.lengths and hip.offload.lengths need two or more values to fit an exponent")



# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("data",),
    "train_lm": ("seed", "device", "lm", "lm_train"),
    "train_passkey": ("seed", "device", "passkey_model", "passkey_train", "passkey"),
    "evaluate_text": ("seed", "device", "lm_train", "hip", "eval"),
    "evaluate_passkey": ("seed", "device", "passkey_train", "passkey", "hip", "eval"),
    "cost": ("seed", "hip", "cost"),
    "decode": ("seed", "device", "hip", "offload"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
