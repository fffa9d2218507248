"""Parameters of P5 deepgate4, checked when the workflow is parsed (before any job runs).

Defaults are the official code's (zyzheng17/DeepGate4-ICLR-25: ``src/config.py``,
``run/train_large.sh``, ``src/models/*.py``, ``src/dg_datasets/data_preparation.py``,
``simulator/simulator.cpp``) where a CPU allows them; config/config.yaml overrides what differs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config

SLUG = "deepgate4"
ARM_KINDS = ("circuit", "gat")
ATTENTIONS = ("gat", "dot", "dense", "global")
CONES = ("fanin", "fanin_fanout")
LEVEL_ENCODINGS = ("absolute", "normalised")


@dataclass(frozen=True)
class DataParams:
    """Circuits and labels (``data_preparation.py``, ``simulator.cpp``)."""

    netlists: str | None = None  # folder of .v / .bench netlists; None = circuitgraph's packaged ones
    train: tuple = ("c432", "c499", "c880", "c1355", "c1908", "c2670", "c3540", "c5315", "c7552", "s13207",
                    "ctrl", "dec", "int2float", "router")
    generated: dict = field(default_factory=lambda: {"adder": [8, 16], "multiplier": [4, 6], "comparator": [8, 16],
                                                     "mux": [3, 4]})
    val: tuple = ("c3540", "multiplier8")  # validation circuits (early stopping), neither trained on nor tested
    test: dict = field(default_factory=lambda: {"ITC99": ["b17_C", "b20_C", "b22_C"], "EPFL": ["cavlc", "i2c"]})
    scaling: tuple = ("c5315", "c7552", "s38584", "b20_Cg", "b22_Cg", "b17_Cg")
    patterns: int = 15000  # random input patterns of the simulation (official: 15000)
    max_pairs: int = 1000  # truth-table pairs kept per circuit
    pair_candidates: int = 40000  # same-cover candidate pairs drawn per circuit
    max_prob_gap: float = 0.1  # official: |p_i - p_j| <= 0.1
    extreme: tuple = (0.2, 0.8)  # official: keep distance <= 0.2 or >= 0.8
    min_nodes: int = 30  # official NO_NODES lower bound (smaller circuits are skipped)
    seed: int = 0  # simulation and pair sampling


@dataclass(frozen=True)
class ModelParams:
    """Sizes (official: hidden 128, mlp_hidden 128, 12 GAT layers with 4 heads, dropout 0.1)."""

    hidden: int = 128
    mlp_hidden: int = 128
    heads: int = 4
    dropout: float = 0.1
    max_degree: int = 4999  # official nn.Embedding(5000, hidden) for out_and / out_not
    window_levels: int = 6  # official areas: 8-hop cones every k_hop - 2 = 6 levels
    areas_per_batch: int = 256  # official mini_batch_size
    level_encoding: str = "absolute"  # official: sinusoid of the level itself; normalised: of level / depth
    level_scale: float = 100.0  # normalised encoding: positions level_scale * level / depth


@dataclass(frozen=True)
class TrainParams:
    epochs: int = 200  # at most this many passes over the training circuits, every arm (official: 200 epochs)
    patience: int = 10  # epochs without a new best validation error before the learning rate is lowered
    lr_decay: float = 0.5  # factor of that lowering (reduce-on-plateau)
    flat_window: int = 3  # converged: the last `flat_window` validation errors ...
    flat_tol: float = 0.02  # ... lie within this fraction of their minimum; training stops there
    lr: float = 1e-4  # official run/train_large.sh
    batch_nodes: int = 4000  # small circuits are merged into unions of at most this many nodes (partitioned update)
    full_graph_batch_nodes: int = 4000  # the same for the full-graph arms, one optimiser step per union (official: merged)
    device: str = "auto"  # training and evaluation: auto (CUDA when present) | cpu | cuda


@dataclass(frozen=True)
class ScalingParams:
    """Claim (b): peak memory and time of a forward pass against circuit size."""

    areas_per_batch: int = 16  # mini-batch of the partitioned pass in this study
    hidden: int = 128
    layers: int = 12
    # the exponent of the partitioned peak relative to the full graph's (slope of log(partitioned / full) on
    # log N) must lie below this: 0, the partitioned peak grows more slowly than the full-graph pass's, which
    # holds every node's activations (linear in N): the one boundary of "sub-linear" against "linear"
    max_relative_exponent: float = 0.0


@dataclass(frozen=True)
class KernelParams:
    """Claims (c), (d): fused graph-attention kernel against the unfused reference, on every circuit
    of data.scaling: on a GPU memory and runtime, without one memory only (Triton's interpreter)."""

    device: str = "cuda"  # cuda: the GPU when present, else the CPU; cpu: always the CPU
    repeats: int = 5
    min_reduction: float = 0.0  # holds if runtime and memory both drop by more than this fraction
    trace_circuits: int = 3  # without a GPU: circuits (smallest, largest, evenly between) of the op-trace check


@dataclass(frozen=True)
class Params:
    seeds: int = 1
    arms: dict = field(default_factory=lambda: {
        "deepgate2": {"kind": "circuit", "layers": 0, "attention": "gat", "local_encoding": False, "partitioned": False},
        "gat": {"kind": "gat", "layers": 9, "partitioned": False},
        "plain_gt": {"kind": "circuit", "layers": 12, "attention": "dense", "local_encoding": False, "partitioned": False},
        "deepgate4": {"kind": "circuit", "layers": 12, "attention": "gat", "local_encoding": True, "partitioned": True},
    })
    method: str = "deepgate4"  # the arm claim (a) is about; the others but `control` are the baselines
    control: str | None = None  # claim (a)'s negative control: an arm without the method's mechanism
    min_improvement: float = 0.0  # claim (a): relative error reduction over the best baseline must exceed this
    data: DataParams = field(default_factory=DataParams)
    model: ModelParams = field(default_factory=ModelParams)
    train: TrainParams = field(default_factory=TrainParams)
    scaling: ScalingParams = field(default_factory=ScalingParams)
    kernel: KernelParams = field(default_factory=KernelParams)

    def check(self) -> None:
        if self.method not in self.arms:
            raise ValueError(f"deepgate4.method: {self.method!r} is not one of the arms {sorted(self.arms)}")
        if self.control is not None and (self.control not in self.arms or self.control == self.method):
            raise ValueError(f"deepgate4.control: {self.control!r} must be an arm other than the method")
        if len(set(self.arms) - {self.method, self.control}) < 1:
            raise ValueError("deepgate4.arms: claim (a) needs the method and at least one baseline")
        if self.model.level_encoding not in LEVEL_ENCODINGS:
            raise ValueError(f"deepgate4.model.level_encoding must be one of {LEVEL_ENCODINGS}")
        for name, arm in self.arms.items():
            kind = arm.get("kind")
            if kind not in ARM_KINDS:
                raise ValueError(f"deepgate4.arms.{name}.kind must be one of {ARM_KINDS}, got {kind!r}")
            if kind == "circuit" and arm.get("attention") not in ATTENTIONS:
                raise ValueError(f"deepgate4.arms.{name}.attention must be one of {ATTENTIONS}")
            if arm.get("cone", "fanin") not in CONES:
                raise ValueError(f"deepgate4.arms.{name}.cone must be one of {CONES}, got {arm.get('cone')!r}")
            if kind == "gat" and arm.get("partitioned"):
                raise ValueError(f"deepgate4.arms.{name}: the GAT baseline has no partitioned update")
        if (2 * self.model.hidden) % self.model.heads:
            raise ValueError(f"deepgate4.model.heads ({self.model.heads}) must divide 2 x hidden ({2 * self.model.hidden})")
        if (2 * self.scaling.hidden) % self.model.heads:
            raise ValueError(f"deepgate4.scaling.hidden: 2 x hidden must be divisible by model.heads ({self.model.heads})")
        if len(self.data.scaling) < 2:
            raise ValueError("deepgate4.data.scaling: the exponent fit needs at least two circuits")
        if not self.data.test:
            raise ValueError("deepgate4.data.test: at least one held-out family is needed")
        test = {c for cs in self.data.test.values() for c in cs}
        for a, b, names in (("train", "test", set(self.data.train) & test), ("train", "val", set(self.data.train) & set(self.data.val)),
                            ("val", "test", set(self.data.val) & test)):
            if names:
                raise ValueError(f"deepgate4.data: circuits both in {a} and {b}: {sorted(names)}")
        if self.train.flat_window < 2:
            raise ValueError("deepgate4.train.flat_window: a flat curve needs at least 2 validation errors")
        if not 0 < self.train.lr_decay <= 1:
            raise ValueError(f"deepgate4.train.lr_decay must lie in (0, 1], got {self.train.lr_decay}")
        if not self.data.val:
            raise ValueError("deepgate4.data.val: early stopping needs at least one validation circuit")
        lo, hi = self.data.extreme
        if not 0 <= lo <= hi <= 1:
            raise ValueError(f"deepgate4.data.extreme must satisfy 0 <= lo <= hi <= 1, got {list(self.data.extreme)}")



# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("data",),
    "train": ("arms", "data", "model", "train"),
    "evaluate": ("arms", "method", "data", "model", "train"),
    "scaling": ("arms", "method", "data", "model", "scaling", "kernel"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
