"""Parameters of P11 sharpening, checked when the workflow is parsed (before any job runs).

The paper is theoretical: its algorithms have no fixed hyperparameters to copy, so the defaults below are
ours, each saying so.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from papers.common.params import ALL, for_stage, from_config

SLUG = "sharpening"
METHODS = ("sft", "rl")
# The tabular sweep's generators (papers.sharpening.tabular.make_pair_chain): pairs independent (as in the LM task),
# y* only whole, and pairs independent with absorbing decoys (a later pair reachable only through correct earlier
# ones, so online exploration matters; the paper's Section 4).
STRUCTURES = ("compositional", "atomic", "absorbing")


def rl_step_method(lr: float) -> str:
    """The method name of online RL run at step size `lr` (tabular.lr_sensitivity; claim (c)'s sensitivity)."""
    return f"rl_lr{lr:g}"


def premise_method(method: str, samples_per_step: int) -> str:
    """The method name of a tabular RL run (`method`: rl, rl_offline or a step size's) repeated at
    tabular.premise_samples_per_step samples per prompt per step (claim (c)'s sample-limited premise)."""
    return f"{method}_k{samples_per_step}"


@dataclass(frozen=True)
class TabularParams:
    """The exact tabular level (numpy): the task's generator as one Markov-chain table per prompt, swept over
    the number of pairs K (so over C_cov), in the structures of STRUCTURES (papers.sharpening.tabular)."""

    prompts: int = 64  # X prompts per base model
    vocab: int = 8  # V: 4 correct and 4 decoy tokens
    levels: tuple = (0.3, 0.7)  # a(x) = levels[x mod len(levels)], as in the LM task
    pairs: tuple = (1, 2, 3, 4, 5)  # K of the coverage sweep: C_cov = E_x[a(x)^-K]
    seeds: int = 4  # independent base models (fresh y*, decoys) per setting, each sharpened once per method
    # samples per prompt, SFT and RL: a half-octave grid (factors of 1.5 and 4/3), so a required budget is known to
    # a factor of 1.5 and fewer base models tie on one grid point
    budgets: tuple = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
    samples_per_step: int = 4  # RL: samples per prompt per policy-gradient step
    lr: float = 0.1  # RL: Adam step size on the logits
    # claim (c): the required budget is the budget from which accuracy stays at or above this (tabular.required_budget)
    target_accuracy: float = 0.8
    deciding_structure: str = "absorbing"  # claim (c) is decided on this structure's sweep (the others reported)
    convergence_pairs: int = 4  # check (d): K of the base models of the long RL runs
    convergence_samples: int = 16000  # check (d): samples per prompt of each long RL run (one per seed)
    convergence_samples_per_step: int = 16
    record_every: int = 25  # steps between two KL(pi || pi*) measurements of that run
    convergence_decay: bool = True  # check (d): the long runs' step size falls linearly to 0 (settles, not hovers)
    # claim (c): RL's Adam step sizes besides lr at which online RL and its offline ablation also run on the deciding
    # structure; (c) is decided at every one of them and at lr, and holds / does not hold only where all agree
    lr_sensitivity: tuple = (0.03, 0.3)
    # claim (c)'s premise "RL's required budget is sample-limited": online and offline RL again at this many samples
    # per prompt per step (4x samples_per_step), on the deciding structure at K >= claims.budget_fit_min_pairs, at
    # every step size; the budget grid is tabular.budgets' multiples of it
    premise_samples_per_step: int = 16


@dataclass(frozen=True)
class TaskParams:
    """Reversal with correlated, prompt-dependent decoy pairs (papers.sharpening.task)."""

    alphabet: int = 8
    levels: tuple = (0.3, 0.7)  # a(x), set by the prompt's first letter; below 1/2 greedy decoding is wrong
    max_len: int = 8  # longest prompt; pretraining lengths are the even lengths 2 .. max_len
    answer_pairs: dict = field(default_factory=lambda: {"high_coverage": 2, "low_coverage": 4})
    pretrain_examples: int = 40000
    train_prompts: int = 256  # prompts per variant that sharpening samples on (never in the corpus)
    test_prompts: int = 256  # held-out prompts per variant (never in the corpus nor the training prompts)
    val_prompts: int = 256  # prompts per variant the pretraining gate reads (never in the corpus nor the others)


@dataclass(frozen=True)
class ModelParams:
    """The tiny causal transformer (papers.common.gpt)."""

    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64


@dataclass(frozen=True)
class PretrainParams:
    seeds: int = 6  # independent base models (initialisation and data order); each is sharpened once per method
    steps: int = 2000
    batch_size: int = 64
    lr: float = 3e-3  # AdamW peak; linear warm-up then cosine decay to 0 (each round)
    warmup: int = 50
    grad_clip: float = 1.0  # largest global gradient norm
    # Trained to a gate: a model whose KL(law || model) per answer letter on the val prompts exceeds fit_gap_max is
    # pretrained again from a fresh initialisation, up to max_inits in all; the same gap on the test prompts is the
    # claims' premise.
    fit_gap_max: float = 0.02
    fit_draws: int = 8  # law draws per prompt that estimate the gap
    # steps over which the batches' longest prompt length grows 2, 4, .. max_len (a curriculum); 0: none
    length_curriculum: int = 0
    max_inits: int = 3


@dataclass(frozen=True)
class SharpenParams:
    """SFT- and RL-sharpening of the language model at matched sample budgets."""

    budgets: tuple = (4, 16, 64)  # samples per training prompt
    sft_epochs: int = 16
    sft_batch: int = 32
    sft_lr: float = 3e-3
    rl_samples_per_prompt: int = 4
    rl_prompts_per_step: int = 32
    rl_lr: float = 3e-3
    eval_samples: int = 4  # samples per test prompt for the mean log pi_base of a model's outputs


@dataclass(frozen=True)
class PretrainedParams:
    """The paper's own setting (full scale): best-of-N of local pretrained causal LMs on GSM-style math prompts
    (papers.sharpening.pretrained). Empty `models`: not run."""

    models: tuple = ()  # each {name, path, dtype}: path a local Hugging Face directory
    prompts: str | None = None  # JSON lines {"question", "answer": "... #### <number>"} (GSM8K's format)
    questions: int = 200  # the first this many questions of the file
    bon_sizes: tuple = (1, 2, 4, 8, 16)  # N; the pool holds max(bon_sizes) samples per question
    max_new_tokens: int = 256
    template: str = "Question: {question}\nAnswer:"
    stop: str = "\n\nQuestion:"  # the final number is read from the completion before this

    @property
    def names(self) -> list[str]:
        return [m["name"] for m in self.models]


@dataclass(frozen=True)
class ClaimParams:
    """Thresholds of the claims and their premise gates, fixed before the runs that decide them (config.yaml says
    where each comes from; the base models' fit gate is pretrain.fit_gap_max)."""

    bon_slope_min: float = 0.0  # (a) best-of-N accuracy per doubling of N (least-squares slope), above
    amortisation_fraction: float = 0.75  # (b) share of best-of-m's gain over sampling that SFT recovers
    # (c) d log m_req / d log C_cov: SFT's slope minus online RL's above this (half the theory's gap, 1 - 0), and the
    # same margin for the ablation (SFT minus offline RL), which must not clear it
    budget_slope: float = 0.5
    budget_fit_min_pairs: int = 3  # (c) the slopes are fitted over the sweep's K >= this (past RL's optimisation floor)
    # (c) "owed to online exploration": the share (offline - online) / (SFT - online) of the slopes above this
    owed_share: float = 0.5
    # (c) premise per step size: online RL's accuracy at the largest budget within this of the KL optimum's
    convergence_tolerance: float = 0.05
    # (c) premise per step size, "RL's required budget is sample-limited": the 95% interval over base models of the
    # mean over the fitted K of log(m_req at tabular.premise_samples_per_step / m_req at tabular.samples_per_step)
    # wholly below log(this), for online and offline RL (1 sample-limited, the step factor step-limited)
    sample_limited_ratio: float = 2.0
    settled_drop_max: float = 0.5  # check (d): relative fall of KL(pi_RL || pi*) over a run's last quarter


@dataclass(frozen=True)
class Params:
    seed: int = 0  # the data, the tabular base models and the pretraining runs
    beta: float = 0.1  # KL weight of RL-sharpening; its optimum is pi_base^(1 + 1/beta)
    bon_sizes: tuple = (1, 2, 4, 8, 16, 32, 64)  # N of the best-of-N curves (64 = the largest LM budget)
    tabular: TabularParams = field(default_factory=TabularParams)
    task: TaskParams = field(default_factory=TaskParams)
    model: ModelParams = field(default_factory=ModelParams)
    pretrain: PretrainParams = field(default_factory=PretrainParams)
    sharpen: SharpenParams = field(default_factory=SharpenParams)
    pretrained: PretrainedParams = field(default_factory=PretrainedParams)
    claims: ClaimParams = field(default_factory=ClaimParams)

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(self.task.answer_pairs)

    def answer_length(self, variant: str) -> int:
        return 2 * self.task.answer_pairs[variant]

    def check(self) -> None:
        """Cross-field rules the schema cannot state."""
        t, s, tp = self.task, self.sharpen, self.tabular
        for name, k in t.answer_pairs.items():
            if not 1 <= 2 * k <= t.max_len:
                raise ValueError(f"sharpening.task.answer_pairs.{name} = {k}: 2 x {k} letters must lie in "
                                 f"[2, max_len = {t.max_len}]")
        if set(t.answer_pairs) != {"high_coverage", "low_coverage"}:
            raise ValueError("sharpening.task.answer_pairs needs exactly the keys high_coverage and low_coverage")
        # y* must be the unique sequence mode (task.py): every level above 1 / (A + 1); and the mode must differ
        # from greedy decoding's answer on some prompts: some level below 1/2.
        for key, levels, decoys in [("task", t.levels, t.alphabet), ("tabular", tp.levels, tp.vocab // 2)]:
            if not all(1 / (decoys + 1) < a < 1 for a in levels) or not any(a < 0.5 for a in levels):
                raise ValueError(f"sharpening.{key}.levels {list(levels)}: each must lie in (1 / {decoys + 1}, 1) "
                                 "(the correct answer is the mode) and one must be below 0.5 (greedy decoding is "
                                 "wrong there)")
        if tp.vocab % 2:
            raise ValueError(f"sharpening.tabular.vocab = {tp.vocab} must be even (half correct, half decoy tokens)")
        if tp.deciding_structure not in STRUCTURES:
            raise ValueError(f"sharpening.tabular.deciding_structure = {tp.deciding_structure!r} must be one of "
                             f"{list(STRUCTURES)}")
        if len(tp.pairs) < 2:
            raise ValueError("sharpening.tabular.pairs needs at least two settings (claim (c) fits a slope)")
        if sum(K >= self.claims.budget_fit_min_pairs for K in tp.pairs) < 2:
            raise ValueError(f"sharpening.claims.budget_fit_min_pairs = {self.claims.budget_fit_min_pairs}: claim (c) "
                             f"fits its slopes over K >= it, and tabular.pairs {list(tp.pairs)} has fewer than two")
        if tp.lr in tp.lr_sensitivity or len(set(tp.lr_sensitivity)) != len(tp.lr_sensitivity):
            raise ValueError(f"sharpening.tabular.lr_sensitivity {list(tp.lr_sensitivity)}: step sizes besides lr = "
                             f"{tp.lr}, each once")
        if max(s.budgets) > max(self.bon_sizes) or not set(s.budgets) <= set(self.bon_sizes):
            raise ValueError(f"sharpening.sharpen.budgets {list(s.budgets)} must all be in bon_sizes "
                             f"{list(self.bon_sizes)} (claim (b) compares SFT with best-of-m at each budget)")
        if 1 not in self.bon_sizes:
            raise ValueError("sharpening.bon_sizes must contain 1 (plain sampling)")
        for key, budgets, k in [("sharpen", s.budgets, s.rl_samples_per_prompt),
                                ("tabular", tp.budgets, tp.samples_per_step)]:
            if k < 2 or any(b % k for b in budgets):
                raise ValueError(f"sharpening.{key}: every budget {list(budgets)} must be a multiple of the RL "
                                 f"samples per prompt per step ({k}, at least 2 for the leave-one-out baseline)")
        pt = self.pretrained
        if pt.models and not pt.prompts:
            raise ValueError("sharpening.pretrained.prompts must name a GSM-style .jsonl when pretrained.models is set")
        if len(set(pt.names)) != len(pt.names):
            raise ValueError(f"sharpening.pretrained.models: names repeat in {pt.names}")
        if 1 not in pt.bon_sizes or "{question}" not in pt.template:
            raise ValueError("sharpening.pretrained: bon_sizes must contain 1 and template must contain {question}")
        kp = tp.premise_samples_per_step
        if kp <= tp.samples_per_step or kp % tp.samples_per_step or sum(b % kp == 0 for b in tp.budgets) < 2 \
                or max(tp.budgets) % kp:
            raise ValueError(f"sharpening.tabular.premise_samples_per_step = {kp} must be a multiple of samples_per_step "
                             f"({tp.samples_per_step}) above it, dividing max(budgets) and at least two budgets")
        if not 1 < self.claims.sample_limited_ratio < kp / tp.samples_per_step:
            raise ValueError(f"sharpening.claims.sample_limited_ratio = {self.claims.sample_limited_ratio} must lie "
                             f"between 1 (sample-limited) and {kp / tp.samples_per_step:g} (step-limited)")
        if not 0 < self.claims.owed_share < 1 or not self.claims.convergence_tolerance > 0:
            raise ValueError("sharpening.claims: owed_share must lie in (0, 1) and convergence_tolerance be > 0")
        if tp.convergence_samples_per_step < 2:
            raise ValueError("sharpening.tabular.convergence_samples_per_step must be at least 2")


# The parameters each stage reads. Its rule receives only these, so a change to another parameter
# does not rerun the stage; papers.common.params.for_stage keeps the stage from reading any other.
# A report writes every parameter to params.json, so it reads them all.
STAGE_PARAMS = {
    "prepare": ("seed", "task"),
    "tabular": ("seed", "beta", "bon_sizes", "tabular", "claims.budget_fit_min_pairs"),
    "pretrain": ("seed", "task", "model", "pretrain"),
    "sharpen": ("seed", "beta", "task", "sharpen"),
    "evaluate": ("seed", "bon_sizes", "task", "sharpen"),
    "pretrained": ("seed", "pretrained"),
    "report": ALL,
}


def parse(cfg) -> Params:
    params = from_config(Params, cfg, where=SLUG)
    params.check()
    return for_stage(params, cfg)
