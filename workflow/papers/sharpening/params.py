"""Parameters of P11 sharpening, checked when the workflow is parsed (before any job runs).

The paper is theoretical: its algorithms have no fixed hyperparameters to copy, so the defaults below are
ours (the issue's tabular prototype for the tabular level), each saying so.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config

SLUG = "sharpening"
METHODS = ("sft", "rl")


@dataclass(frozen=True)
class TabularParams:
    """The exact tabular level (numpy): one Markov-chain table per prompt."""

    prompts: int = 64  # the prototype: 64 prompts
    length: int = 8  # L, tokens per sequence (prototype: 8)
    vocab: int = 6  # V (prototype: 6)
    modal_prob: float = 0.45  # pi_base of each state's preferred token (prototype: 0.45)
    seeds: int = 3  # repetitions of the sampled algorithms (the table is fixed by `seed`)
    budgets: tuple = (4, 16, 64, 256, 1024)  # samples per prompt, shared by SFT and RL
    samples_per_step: int = 4  # RL: samples per prompt per policy-gradient step
    lr: float = 0.1  # RL: Adam step size on the logits
    convergence_samples: int = 16000  # claim (d): samples per prompt of the long RL run
    convergence_samples_per_step: int = 16
    record_every: int = 25  # steps between two KL(pi || pi*) measurements of that run


@dataclass(frozen=True)
class TaskParams:
    """Noisy string reversal (papers.sharpening.task)."""

    alphabet: int = 8
    noise: float = 0.5  # per-letter label noise; q = 1 - noise + noise / alphabet
    max_len: int = 8  # longest prompt; pretraining lengths are 1 .. max_len
    answer_lengths: dict = field(default_factory=lambda: {"high_coverage": 4, "low_coverage": 8})
    pretrain_examples: int = 40000
    train_prompts: int = 256  # prompts per variant that sharpening samples on
    test_prompts: int = 256  # held-out prompts per variant for every accuracy


@dataclass(frozen=True)
class ModelParams:
    """The tiny causal transformer (papers.sharpening.model)."""

    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32


@dataclass(frozen=True)
class PretrainParams:
    steps: int = 600
    batch_size: int = 64
    lr: float = 3e-3  # AdamW peak; linear warm-up then cosine decay to 0
    warmup: int = 50


@dataclass(frozen=True)
class SharpenParams:
    """SFT- and RL-sharpening of the language model at matched sample budgets."""

    seeds: int = 3  # repetitions of sampling and fine-tuning from the one pretrained checkpoint
    budgets: tuple = (4, 16, 64)  # samples per training prompt
    sft_epochs: int = 16
    sft_batch: int = 32
    sft_lr: float = 3e-3
    rl_samples_per_prompt: int = 4
    rl_prompts_per_step: int = 32
    rl_lr: float = 3e-3
    eval_samples: int = 4  # samples per test prompt for the mean log pi_base of a model's outputs


@dataclass(frozen=True)
class ClaimParams:
    """Thresholds of the claims, fixed before any result was seen."""

    bon_min_gain: float = 0.1  # (a) best-of-N_max minus sampling accuracy, at least
    monotone_slack: float = 0.02  # sanity check (not a claim): a step up in N may lose at most this much accuracy
    amortisation_fraction: float = 0.75  # (b) share of best-of-m's gain over sampling that SFT recovers
    rl_margin: float = 0.05  # (c) RL minus SFT accuracy at every budget, above
    kl_tolerance: float = 0.05  # (d) KL(pi_RL || pi*_beta) in nats per prompt, at most


@dataclass(frozen=True)
class Params:
    seed: int = 0  # the tabular base model, the task's data and the pretraining run
    beta: float = 0.1  # KL weight of RL-sharpening; its optimum is pi_base^(1 + 1/beta)
    bon_sizes: tuple = (1, 2, 4, 8, 16, 32, 64)  # the issue: N = 1 ... 32 (64 = the largest budget)
    tabular: TabularParams = field(default_factory=TabularParams)
    task: TaskParams = field(default_factory=TaskParams)
    model: ModelParams = field(default_factory=ModelParams)
    pretrain: PretrainParams = field(default_factory=PretrainParams)
    sharpen: SharpenParams = field(default_factory=SharpenParams)
    claims: ClaimParams = field(default_factory=ClaimParams)

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(self.task.answer_lengths)

    def check(self) -> None:
        """Cross-field rules the schema cannot state."""
        t, s = self.task, self.sharpen
        for name, n in t.answer_lengths.items():
            if not 1 <= n <= t.max_len:
                raise ValueError(f"sharpening.task.answer_lengths.{name} = {n} must lie in [1, max_len = {t.max_len}]")
        if set(t.answer_lengths) != {"high_coverage", "low_coverage"}:
            raise ValueError("sharpening.task.answer_lengths needs exactly the keys high_coverage and low_coverage")
        if max(s.budgets) > max(self.bon_sizes) or not set(s.budgets) <= set(self.bon_sizes):
            raise ValueError(f"sharpening.sharpen.budgets {list(s.budgets)} must all be in bon_sizes "
                             f"{list(self.bon_sizes)} (claim (b) compares SFT with best-of-m at each budget)")
        if 1 not in self.bon_sizes:
            raise ValueError("sharpening.bon_sizes must contain 1 (plain sampling)")
        for key, budgets, k in [("sharpen", s.budgets, s.rl_samples_per_prompt),
                                ("tabular", self.tabular.budgets, self.tabular.samples_per_step)]:
            if k < 2 or any(b % k for b in budgets):
                raise ValueError(f"sharpening.{key}: every budget {list(budgets)} must be a multiple of the RL "
                                 f"samples per prompt per step ({k}, at least 2 for the leave-one-out baseline)")
        if self.tabular.convergence_samples_per_step < 2:
            raise ValueError("sharpening.tabular.convergence_samples_per_step must be at least 2")



# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("seed", "tabular", "task"),
    "tabular": ("seed", "beta", "bon_sizes", "tabular"),
    "pretrain": ("seed", "task", "model", "pretrain"),
    "sharpen": ("seed", "beta", "task", "sharpen"),
    "evaluate": ("seed", "beta", "bon_sizes", "task", "sharpen"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
