"""Training one arm (Sec. 2.1, 2.2 and 2.5 of the paper) and the arms of the study.

An arm is a set of experts (each fed the canvas, noise or a constant), a fusion and an optional Pre-Alignment
(the arms and their jobs: papers.eagle.arms). Its training, as the paper's:

1. **Pre-Alignment** (Sec. 2.5, step 1 of its three), when asked: each non-CLIP expert with its own projector is
   trained on the SFT data against the *frozen* LM (expert and projector train); the projectors are then
   dropped. The ``shuffled`` variant (control) pairs every question with another canvas.
2. **Stage 1, alignment** (Sec. 2.1; step 2 of Sec. 2.5): towers and LM frozen, the fusion/projector trains.
3. **Stage 2, SFT** (Sec. 2.1 and 2.2, towers unfrozen): each tower's last layer, the fusion and the LM train,
   under eagle.train.sft_schedule (LLaVA-1.5's cosine after a linear warm-up: papers.eagle.schedule).

Lighter than the paper: a tower's lower layers stay frozen in every stage (Pre-Alignment and SFT train its
last layer only), so that their activations are computed once per job (:func:`trunk_bank`) and the
budget goes to training steps.

During SFT the validation accuracy is read every ``eval_every`` steps: the convergence gate bounds its rise in the
last quarter (:func:`late_gain`). Then accuracy of the answer word per question kind on validation (held-out
canvases, training templates) and test (other held-out canvases, training templates). The data also hold split
novel (the test canvases asked with held-out templates); no claim reads it and the time budget does not evaluate it
(issue 52's fourth review: the budget goes to converged arms).
"""
from __future__ import annotations

import logging
import zlib

import numpy as np
import torch
from torch.nn import functional as F

from papers.eagle import arms as A
from papers.eagle import fusion as Fu
from papers.eagle.data import KINDS
from papers.eagle.experts import Tower
from papers.eagle.model import LM, MLLM
from papers.eagle.arms import prealigned
from papers.eagle.params import BLINDED, PLANTED
from papers.eagle.schedule import lr_factor

log = logging.getLogger(__name__)


@torch.no_grad()
def trunk_bank(pretrained: dict, canvas: np.ndarray, channels: int) -> dict[str, torch.Tensor]:
    """Every pretrained expert's frozen lower-layer activations (:meth:`Tower.trunk`) on every canvas of a
    split, computed once per job (a seed in run_seed): {expert: (N, width, S, S)}. Every arm reads its experts' inputs here."""
    canvas = torch.as_tensor(canvas)
    bank = {}
    for name, state in pretrained["towers"].items():
        tower = Tower(name, channels)
        tower.load_state_dict(state)
        bank[name] = tower.trunk(tower.view(canvas))
    return bank


def constant_inputs(model: MLLM, train_bank: dict) -> None:
    """Give `model` the constants its experts fed a constant read (input "constant": claim b's trained ablation,
    group blind_clip; issue 52's review r7): each such expert's frozen lower-layer activation map averaged over the
    training split's canvases (`train_bank`, :func:`trunk_bank` of split train), one (1, width, S, S) map per expert,
    the same at training, validation and test (no validation or test canvas enters it). It carries no information
    about the canvas asked about and no variance between canvases; the expert's last layer, the fusion and the LM keep
    their parameters. Stored as a plain attribute (no parameter or buffer: the state dict and the parameter count are
    the concatenation's)."""
    model.constants = {i: train_bank[tower.kind].mean(0, keepdim=True)
                       for i, (tower, source) in enumerate(zip(model.towers, model.inputs)) if source == "constant"}


def trunks(model: MLLM, bank: dict, canvases: torch.Tensor) -> list[torch.Tensor]:
    """The experts' lower-layer activations for these canvases: from the bank; for an expert fed noise, its (frozen)
    lower layers run on fresh Gaussian noise; for an expert fed a constant (input "constant", claim b's trained
    ablation), the training canvases' mean activation map that :func:`constant_inputs` gave the model, for every
    canvas alike (it draws no random numbers)."""
    out = []
    for i, (tower, source) in enumerate(zip(model.towers, model.inputs)):
        if source == "noise":
            with torch.no_grad():
                out.append(tower.trunk(torch.randn(len(canvases), 1, tower.in_size, tower.in_size)))
        elif source == "constant":
            const = model.constants[i]
            out.append(const.expand(len(canvases), *const.shape[1:]))
        else:  # index_select: the rows bank[kind][canvases] holds, gathered about 5 x faster on the CPU
            out.append(bank[tower.kind].index_select(0, canvases))
    return out


class FusedAdam:
    """Adam (Kingma & Ba 2015, Algorithm 1; PyTorch's defaults betas (0.9, 0.999), eps 1e-8, no weight decay) as
    ``torch.optim.Adam(params, fused=True)`` computes it: the same fused kernel on the same state (a float32 step
    count per parameter, zero-initialised moments), so every step is bit-identical to it (tested). Called directly
    because constructing any ``torch.optim`` optimizer imports TorchDynamo (about 1.2 CPU-s per job, a twentieth of a
    train job's time) which this tiny model never uses. `step(lr)` takes the step's learning rate (the schedule's)."""

    def __init__(self, params, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params = list(params)
        self.betas, self.eps = betas, eps
        self.steps: dict[int, int] = {}  # parameter index -> its step count (torch.optim keeps a float32 tensor)
        self.moments: dict[int, tuple] = {}  # parameter index -> (exp_avg, exp_avg_sq), zero at its first gradient

    def zero_grad(self) -> None:
        for q in self.params:
            q.grad = None

    @torch.no_grad()
    def step(self, lr: float) -> None:
        live = [(k, q) for k, q in enumerate(self.params) if q.grad is not None]
        if not live:
            return
        for k, q in live:
            if k not in self.moments:
                self.moments[k] = (torch.zeros_like(q, memory_format=torch.preserve_format),
                                   torch.zeros_like(q, memory_format=torch.preserve_format))
            self.steps[k] = self.steps.get(k, 0) + 1
        # The step counts as float32 scalars, one tensor per distinct (count, device) (every parameter shares one
        # here): the values torch.optim's per-parameter tensors hold (integers, exact in float32), without its
        # per-tensor increment (a tenth of a millisecond per step on the CPU); each on its parameter's device, where
        # the fused kernel reads it (the speed-pass review: a CPU count beside a GPU parameter would fail there).
        counts = {(c, d): torch.tensor(float(c), dtype=torch.float32, device=d)
                  for c, d in {(self.steps[k], q.device) for k, q in live}}
        torch._fused_adam_([q for _, q in live], [q.grad for _, q in live], [self.moments[k][0] for k, _ in live],
                           [self.moments[k][1] for k, _ in live], [], [counts[self.steps[k], q.device] for k, q in live],
                           amsgrad=False, lr=float(lr), beta1=self.betas[0], beta2=self.betas[1], weight_decay=0.0,
                           eps=self.eps, maximize=False, grad_scale=None, found_inf=None)


def fit(model: MLLM, params, split: dict, bank: dict, *, steps: int, batch: int, lr: float,
        rng: np.random.Generator, shuffle_images: bool = False, every: int = 0, evaluate=None,
        schedule: str = "constant", warmup: float = 0.0, stop=None) -> tuple[float, list]:
    """Up to `steps` Adam steps on the answer's cross-entropy, updating `params` only, the learning rate `lr` times
    :func:`lr_factor` (`schedule`, `warmup`: the schedule is defined over all `steps`); returns the last loss and,
    with `evaluate` (a function of the model giving a validation accuracy), that accuracy every `every` steps. With
    `stop` (a function of that curve so far), training ends at the first evaluation where it is true (the steps run
    are then len(curve) * every)."""
    n_canvas = len(split["scene_canvas"])
    q_canvas, q_tokens = split["q_canvas"], torch.as_tensor(split["q_tokens"])
    answer = torch.as_tensor(split["q_answer"])
    params = [p for p in params if p.requires_grad]
    opt = FusedAdam(params)  # fused: one kernel per step (the tiny model is overhead-bound)
    loss, curve = torch.tensor(float("nan")), []
    for step in range(1, steps + 1):
        i = rng.integers(0, len(answer), batch)
        c = q_canvas[i] if not shuffle_images else rng.integers(0, n_canvas, batch)
        loss = F.cross_entropy(model(trunks(model, bank, torch.as_tensor(c)), q_tokens[i]), answer[i])
        opt.zero_grad()
        loss.backward()
        opt.step(lr * lr_factor(step - 1, steps, schedule, warmup))
        if evaluate is not None and every and step % every == 0:
            curve.append(evaluate(model))
            if stop is not None and stop(curve):
                break
    return loss.item(), curve


def plateaued(curve, every: int, min_steps: int, tol: float) -> bool:
    """The early-stopping rule of SFT (eagle.train.sft_min_steps): at least `min_steps` steps run (len(curve) *
    `every`) and the convergence gate met on the validation curve so far (:func:`late_gain` <= `tol`). It reads
    validation accuracies only."""
    return len(curve) * every >= min_steps and late_gain(curve) <= tol


def late_gain(curve) -> float:
    """How much the validation accuracy still rose in the last quarter of SFT: the best of the curve's last quarter
    minus the best before it (<= 0: it had peaked; the convergence gate bounds it). NaN without a curve."""
    curve = list(curve)
    if len(curve) < 4:
        return float("nan")
    cut = len(curve) - max(1, len(curve) // 4)
    return float(max(curve[cut:]) - max(curve[:cut]))


@torch.no_grad()
def accuracy(model: MLLM, split: dict, bank: dict, chunk: int = 1000) -> dict[str, float]:
    """Share of questions whose arg-max answer word is right, per kind and overall."""
    model.eval()
    q_canvas, q_tokens = torch.as_tensor(split["q_canvas"]), torch.as_tensor(split["q_tokens"])
    pred = torch.cat([model(trunks(model, bank, q_canvas[s:s + chunk]), q_tokens[s:s + chunk]).argmax(-1)
                      for s in range(0, len(q_canvas), chunk)]).numpy()
    model.train()
    right = pred == split["q_answer"]
    out = {kind: float(right[split["q_kind"] == k].mean()) for k, kind in enumerate(KINDS) if (split["q_kind"] == k).any()}
    out["all"] = float(right.mean())
    return out


def set_trainable(module, flag: bool) -> None:
    for p in module.parameters():
        p.requires_grad_(flag)


def build(arm: dict, pretrained: dict, p) -> MLLM:
    """The arm's model from the pretrained towers and LM (fresh copies) and a new fusion whose hidden
    width matches the parameter budget of the channel concatenation over the same experts."""
    towers = []
    for name in arm["experts"]:
        t = Tower(name, p.experts["channels"])
        if name in pretrained["towers"]:
            t.load_state_dict(pretrained["towers"][name])
        towers.append(t)
    lm = LM(**pretrained["lm_config"])
    lm.load_state_dict(pretrained["lm"])
    channels = [t.channels for t in towers]
    sizes = [t.out_size for t in towers]
    return MLLM(towers, arm["inputs"], Fu.matched(arm["fusion"], channels, sizes, lm.wte.embedding_dim, p.fusion), lm)


def unfreeze(model: MLLM, towers: bool, fusion: bool, lm: bool) -> None:
    """Which parts train. A tower's lower layers stay frozen in every stage (their activations are cached,
    :func:`trunk_bank`); `towers` unfreezes each expert's last layer (:meth:`Tower.top`)."""
    set_trainable(model, False)
    for tower in model.towers:
        set_trainable(tower.convs[-1], towers)
    set_trainable(model.fusion, fusion)
    set_trainable(model.lm, lm)


def run_arm(arm: dict, pretrained: dict, splits: dict, banks: dict, p, rng: np.random.Generator) -> list[dict]:
    """Train one arm through its stages; one row per (split, kind) with its accuracy, and the convergence gate's
    measure (the validation curve's late gain). `banks[split]`: the experts' cached lower-layer activations
    (:func:`trunk_bank`)."""
    model = build(arm, pretrained, p)
    constant_inputs(model, banks["train"])  # an expert fed a constant reads the training canvases' mean map
    t = p.train
    for i in prealigned(arm):
        tower = model.towers[i]
        solo = MLLM([tower], ["image"], Fu.matched("concat", [tower.channels], [tower.out_size],
                                                   model.lm.wte.embedding_dim, p.fusion), model.lm)
        unfreeze(solo, towers=True, fusion=True, lm=False)  # the expert and its own projector; LM frozen
        fit(solo, solo.parameters(), splits["train"], banks["train"], steps=t["prealign_steps"], batch=t["batch"],
            lr=t["align_lr"], rng=rng, shuffle_images=arm["prealign"] == "shuffled")
    unfreeze(model, towers=False, fusion=True, lm=False)  # stage 1: the projector (fusion) alone
    fit(model, model.parameters(), splits["train"], banks["train"], steps=t["align_steps"], batch=t["batch"],
        lr=t["align_lr"], rng=rng)
    unfreeze(model, towers=True, fusion=True, lm=True)  # stage 2: SFT, up to sft_steps (the schedule's length)
    min_steps, tol = t.get("sft_min_steps"), p.claims["convergence_tol"]
    stop = None if min_steps is None else (lambda c: plateaued(c, t["eval_every"], min_steps, tol))
    loss, curve = fit(model, model.parameters(), splits["train"], banks["train"], steps=t["sft_steps"],
                      batch=t["batch"], lr=t["sft_lr"], rng=rng, every=t["eval_every"],
                      schedule=t["sft_schedule"], warmup=t["warmup_ratio"], stop=stop,
                      evaluate=lambda m: accuracy(m, splits["val"], banks["val"])["all"])
    gain = late_gain(curve)
    n_val = len(splits["val"]["q_answer"])
    # The gate's measure in validation questions (an integer: accuracies are counts over n_val), so that it is
    # compared with the tolerance exactly, not through float rounding (issue 52's fourth review).
    gain_questions = int(round(gain * n_val)) if np.isfinite(gain) else None
    steps_run = t["sft_steps"] if stop is None or not stop(curve) else len(curve) * t["eval_every"]
    rows = []
    for split in ("val", "test"):
        for kind, acc in accuracy(model, splits[split], banks[split]).items():
            rows.append({"arm": arm["name"], "split": split, "kind": kind, "accuracy": acc,
                         "visual_tokens": model.fusion.n_tokens, "fusion_params": Fu.n_params(model.fusion),
                         "experts": "+".join(arm["experts"]), "final_loss": loss, "late_gain": gain,
                         "late_gain_questions": gain_questions, "val_questions": n_val, "sft_steps_run": steps_run})
    log.info("%s: val %.3f test %.3f; %d SFT steps; validation curve %s", arm["name"],
             *(r["accuracy"] for r in rows if r["kind"] == "all"), steps_run, " ".join(f"{v:.3f}" for v in curve))
    if arm["name"] == "fusion:concat":
        extra = {"sft_steps_run": steps_run, "late_gain_questions": gain_questions, "val_questions": n_val}
        rows += [dict(r, **extra) for r in blinded_at_test(model, splits, banks, loss, gain, rng)]
        # Claim (a)'s positive control (it trains nothing): read against the other fusions where they train, and
        # against the concatenation itself always (the equivalence test shown able to say "not equivalent").
        rows += [dict(r, **extra) for r in planted_deficit(model, splits, banks, loss, gain,
                                                           p.claims.get("planted_fraction", 0.2), rng)]
    return rows


def derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A permutation of 0 .. n-1 without fixed points (n >= 2): a random cyclic order, each index sent to the next."""
    if n < 2:
        raise ValueError(f"eagle: a derangement needs at least 2 canvases, got {n}")
    order = rng.permutation(n)
    out = np.empty(n, dtype=np.int64)
    out[order] = np.roll(order, -1)
    return out


def blinded_at_test(model: MLLM, splits: dict, banks: dict, loss: float, gain: float,
                    rng: np.random.Generator) -> list[dict]:
    """Claim (b)'s ablation when the trained one (group blind) is not run: the trained mixture asked the test
    questions with every non-CLIP expert reading *another* test canvas (a derangement of the split's canvases: each
    canvas's non-CLIP activations replaced by those of a different canvas), CLIP's activations, every weight and
    the fusion kept. What it removes: exactly the non-CLIP experts' information about the canvas asked about; their
    features keep their distribution (they are real canvases' features), so the fusion's shared layers see the
    inputs they were trained on, unlike features of noise. The rows of arm :data:`BLINDED` (test split), with the
    mixture's late gain."""
    bank = banks["test"]
    other = torch.as_tensor(derangement(len(splits["test"]["scene_canvas"]), rng))
    swapped = {name: (act if name == "clip" else act[other]) for name, act in bank.items()}
    acc = accuracy(model, splits["test"], swapped)
    return [{"arm": BLINDED, "split": "test", "kind": kind, "accuracy": a, "visual_tokens": model.fusion.n_tokens,
             "fusion_params": Fu.n_params(model.fusion), "experts": "+".join(t.kind for t in model.towers),
             "final_loss": loss, "late_gain": gain} for kind, a in acc.items()]


def planted_deficit(model: MLLM, splits: dict, banks: dict, loss: float, gain: float, fraction: float,
                    rng: np.random.Generator) -> list[dict]:
    """Claim (a)'s positive control, a deficit planted in the trained concatenation: the test questions asked with
    its non-CLIP experts reading another canvas (a derangement among the chosen canvases) on a random `fraction` of
    the test canvases, every other canvas, every weight and the fusion kept. Such a mixture reads the fine print on
    only 1 - `fraction` of the canvases, so it is worse than the concatenation by about `fraction` x the accuracy that
    blinding every canvas costs (:func:`blinded_at_test`); the equivalence test of claim (a) must reject it. The
    rows of arm :data:`PLANTED` (test split)."""
    bank = banks["test"]
    n = len(splits["test"]["scene_canvas"])
    chosen = rng.choice(n, size=max(2, int(round(fraction * n))), replace=False)
    other = torch.arange(n)
    other[torch.as_tensor(chosen)] = torch.as_tensor(chosen[derangement(len(chosen), rng)])
    swapped = {name: (act if name == "clip" else act[other]) for name, act in bank.items()}
    acc = accuracy(model, splits["test"], swapped)
    return [{"arm": PLANTED, "split": "test", "kind": kind, "accuracy": a, "visual_tokens": model.fusion.n_tokens,
             "fusion_params": Fu.n_params(model.fusion), "experts": "+".join(t.kind for t in model.towers),
             "final_loss": loss, "late_gain": gain} for kind, a in acc.items()]


def seeded(train_arm, a: dict, seed: int) -> list[dict]:
    """Train arm `a` with `train_arm(arm, rng)`, its initialisation (torch) and batches (`rng`) seeded from (seed,
    its name): so an arm trains the same whatever else its job or process trained before it."""
    key = [seed, zlib.crc32(a["name"].encode())]
    torch.manual_seed(int(np.random.default_rng(key).integers(2 ** 31)))
    return train_arm(a, np.random.default_rng(key))


def val_accuracy(rows):
    """name -> an arm's validation accuracy on all questions, from accuracy rows (the round-robin's choice reads it)."""
    return lambda name: next(r["accuracy"] for r in rows if r["arm"] == name and r["split"] == "val" and r["kind"] == "all")


def job_arm(job: str, experts: list[str], groups, selected: list[dict]) -> dict:
    """The arm a train job trains: the fixed arm of that job name (papers.eagle.arms.seed_jobs), or a round-robin
    slot's candidate, chosen from `selected` (the accuracy rows of the slot's selection: the single experts and the
    earlier steps' slots, papers.eagle.arms.selection)."""
    slot = A.parse_slot(job)
    if slot is not None:
        if not A.round_robin(experts, groups):
            raise ValueError(f"eagle: job {job} is a round-robin slot, but the selection does not run on this seed "
                             f"(experts {experts}, groups {groups})")
        return A.rr_candidates(experts, val_accuracy(selected), slot[0])[slot[1]]
    fixed = {A.job_name(a["name"]): a for a in A.fixed_arms(experts, groups)}
    if job not in fixed:
        raise ValueError(f"eagle: no arm {job!r} on this seed (its groups {groups} train {sorted(fixed)})")
    return fixed[job]


def label_rr(rows: list[dict], experts: list[str], groups) -> list[dict]:
    """The rows with rr_step: an arm's place (1 .. number of experts) on the round-robin's path
    (papers.eagle.arms.rr_order), 0 off it or where the selection does not run."""
    steps = {}
    if A.round_robin(experts, groups):
        steps = {name: i + 1 for i, name in enumerate(A.rr_order(experts, val_accuracy(rows)))}
    return [dict(r, rr_step=steps.get(r["arm"], 0)) for r in rows]


def run_seed(pretrained: dict, splits: dict, p, seed: int, index: int | None = None) -> list[dict]:
    """Every arm of this seed's groups, then, with three experts, the round-robin selection (Sec. 2.6; :func:`study`),
    in one process (the workflow trains each in a job of its own, papers.eagle.stages.train; this is what those jobs
    are tested against). `index`: the seed's place in its block (eagle.seed_offset + index = seed), which decides its
    groups (eagle.arm_seeds: the first n of the block); None: the seed itself."""
    banks = {split: trunk_bank(pretrained, splits[split]["scene_canvas"], p.experts["channels"]) for split in splits}
    return study(lambda a, rng: run_arm(a, pretrained, splits, banks, p, rng), seed, list(p.experts["names"]),
                 A.seed_groups(p.arm_seeds, seed if index is None else index))


def study(train_arm, seed: int, experts: list[str], groups=("fusion", "single", "prealign", "blind", "shuffled")) -> list[dict]:
    """The arms of `groups`, then, with three or more experts and the single experts trained, the round-robin
    selection (Sec. 2.6: start from the best single expert, add the expert whose addition gives the best validation
    accuracy, until all are in; the last step is the all-expert concatenation, a fixed arm), one job after another as
    the workflow's jobs (papers.eagle.arms.seed_jobs) train them; `train_arm(arm, rng)` trains one arm and returns its
    rows (papers.eagle.train.run_arm here, papers.eagle.llava.run_arm at the full scale)."""
    rows = []
    for job in A.seed_jobs(experts, groups):
        rows += seeded(train_arm, job_arm(job, experts, groups, rows), seed)
    return label_rr(rows, experts, groups)


def pretrain_all(canvases: dict, p, seed: int = 0) -> dict:
    """The experts on their own objectives and the LM on the QA text, on the pretraining canvases (training digit
    images only; papers.eagle.data.prepare). One set for every seed, as the paper's experts are one set of
    pretrained checkpoints."""
    from papers.eagle.data import vocabulary
    from papers.eagle.experts import pretrain
    from papers.eagle.model import pretrain_lm

    scene = {k[len("scene_"):]: v for k, v in canvases.items() if k.startswith("scene_")}
    out = {"towers": {}, "curves": {}}
    e = p.experts
    for i, name in enumerate(e["names"]):
        torch.manual_seed(seed * 100 + i)
        tower = Tower(name, e["channels"])
        out["curves"][name] = pretrain(tower, scene, steps=e["pretrain_steps"], batch=e["batch"], lr=e["lr"],
                                       temperature=e["temperature"], rng=np.random.default_rng([seed, i]))
        out["towers"][name] = tower.state_dict()
    lm_cfg = {"vocab": len(vocabulary()), "length": canvases["q_tokens"].shape[1] + 1, "d_model": p.lm["d_model"],
              "n_layer": p.lm["n_layer"], "n_head": p.lm["n_head"]}
    torch.manual_seed(seed * 100 + 9)
    lm = LM(**lm_cfg)
    out["curves"]["lm"] = pretrain_lm(lm, torch.as_tensor(canvases["q_tokens"]), torch.as_tensor(canvases["q_answer"]),
                                      steps=p.lm["pretrain_steps"], batch=p.lm["batch"], lr=p.lm["lr"],
                                      rng=np.random.default_rng([seed, 9]))
    out["lm"], out["lm_config"] = lm.state_dict(), lm_cfg
    return out
