"""Measured per-job run time and memory of the full-scale jobs (issue 54, item 4), and config/full.yaml's job_estimates.

    nice -n 10 .venv/bin/python scripts/estimate_full_jobs.py [--rules orion_train,hip_train_lm] [--write-config]

For each rule that trains or evaluates at the full scale, this times a few steps (or one small unit of work) of the
paper's OWN code at the full-scale configuration (config/config.yaml with config/full.yaml laid over it, as Snakemake
merges them: widths, depths, batches, sequence lengths) on this machine's CPU, each rule in a child process of its own
(so that its peak RSS is its own), on one torch thread:

* time: process CPU time (resource.getrusage, children included; less distorted by a shared machine's load than
  wall time) of the timed steps, after one untimed warm-up step;
* memory: the child's peak RSS (ru_maxrss) while it built the full-width model and ran its steps.

The seconds per unit are extrapolated to one job's whole work (steps x seeds x arms x members in that job: the "units"
column, computed from the merged config the way the rule's stage code loops) and said in the "how" column. Where a
step at the full shape would take minutes here, the full-width network is timed on a smaller batch and the time (and,
for CPU jobs, the activations' memory) scaled linearly in the batch, or on a shorter sequence and the time scaled by the
ratio of the two shapes' FLOPs (6 N per token for the weights, plus attention's 12 L T D per token): said in "how". Where the full-width model cannot be held here (over ~16 GB: a 7B LM,
a 650M network with AdamW), the job's FLOPs are divided by the CPU FLOP rate measured on the same network at a width
that fits, and "how" says so.

Assumptions (the columns of the CSV carry every factor):

* `train` jobs run on the CPU with the kind's threads (papers.common.runner sets torch's threads to the job's):
  wall time = the CPU time measured on one thread / (threads x THREAD_EFFICIENCY), THREAD_EFFICIENCY 0.5 (torch's
  intra-op parallelism on matrices of these sizes; assumed, not measured: this machine's 2 shared cores cannot
  measure an 8-thread speed-up). A stage that sets one thread itself (bodygen's train) gets no credit.
* `gpu` jobs: the CPU time is an upper bound of the GPU's. The factor applied is the ratio of FLOP rates: the job's
  FLOPs (counted on the timed step by torch.utils.flop_counter, or from the transformer formula where said) run at
  GPU_TFLOPS (15) on the GPU, against the rate the CPU step reached here. Why 15 TFLOP/s: every stage here trains in
  float32 (no autocast, no bf16), whose dense peak on an H100/H200 is ~60-67 TFLOP/s; 15 (about a quarter of it) is
  a sustained rate that networks of these sizes (convolutions on 32 x 32 images, transformers of 20-90M parameters)
  reach or beat, so the runtime errs long, the side a scheduler's limit must err on. The factor is per rule (the
  `factor` column: CPU minutes / GPU minutes). No GPU was used to measure it; --gpu-tflops replaces the rate
  (e.g. with gpu-check.sh's figures).
* SAFETY (1.5) multiplies the time and the memory of the first attempt (machines slower than this one, data loading,
  evaluation passes the steps leave out); a retry still doubles them up to the kind's max_runtime / max_mem_mb.
  Memory has a floor of MEM_FLOOR_MB (the Python process with torch and the paper's data), the time one of
  RUNTIME_FLOOR (start-up, the job's workflow parse, loading data, writing outputs).

A job whose estimate exceeds its kind's max_runtime (or max_mem_mb) does not fit a partition's limit: its row says
`fits: False` and its config entry keeps what it needs, not a capped request that would time out after 48 h (the
scheduler holds it, visibly; tests/workflow/test_job_estimates.py lists such rules as needing a split). Rules without a
measurement here keep their kind's values (or their paper's own estimate); every train/gpu rule without one is in
UNMEASURED, with the reason (checked by that test).

Where a stage can run whole at the full shape with fewer steps (uv_sharpness, neural_fdm), it is run at two step
counts and the difference gives the cost per step apart from the set-up and the outputs (_linear); the "how" column
gives both parts.

Writes config/full_estimates.csv and prints the `job_estimates:` block; --write-config replaces that block in
config/full.yaml (between its marker comments).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

GPU_TFLOPS = 15.0
GPU_BF16_TFLOPS = 200.0  # a quarter of an H100/H200's ~790 TFLOP/s dense bf16: stages whose big matmuls run in bf16
THREAD_EFFICIENCY = 0.5
SAFETY = 1.5
MEM_FLOOR_MB = 4000
RUNTIME_FLOOR = 15  # minutes: start-up, the workflow's parse in the job, loading the data, writing the outputs
BEGIN = "# ---- job_estimates (written by scripts/estimate_full_jobs.py; do not edit by hand) ----"
END = "# ---- end of job_estimates ----"


# ---- helpers --------------------------------------------------------------------------------------------------------
def merged_config() -> dict:
    """config/config.yaml with config/full.yaml laid over it, as `snakemake --configfile config/full.yaml` merges."""
    import yaml
    from snakemake.utils import update_config

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(cfg, yaml.safe_load((ROOT / "config" / "full.yaml").read_text()))
    return cfg


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def peak_mb() -> float:
    """Peak resident memory of this process (ru_maxrss is in KB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """Resident memory of this process now (MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return peak_mb()


def per_step(step, n: int, warmup: int = 1) -> float:
    """CPU seconds of one call of `step()`: `warmup` untimed calls, then the mean of `n` timed ones."""
    for _ in range(warmup):
        step()
    c0 = cpu_seconds()
    for _ in range(n):
        step()
    return (cpu_seconds() - c0) / n


def torch_step(model, loss_of, lr: float = 1e-4, clip: float | None = 1.0):
    """One AdamW step of `model` on loss_of(model), as the stages' loops do (zero_grad, backward, clip, step)."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step():
        loss = loss_of(model)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()

    return step


def transformer_flops(params: float, n_layer: int, d: int, seq: int, tokens: float) -> float:
    """Training FLOPs of `tokens` tokens in sequences of `seq`: 6 N per token for the weights, 12 L T D per token for
    attention's scores and mixing (forward and backward; Kaplan et al. 2020, Table 1, with T the context)."""
    return tokens * (6.0 * params + 12.0 * n_layer * seq * d)


def step_flops(step) -> float:
    """FLOPs of one call of `step()` (forward, backward and the optimiser's matmuls), by torch's FLOP counter."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        step()
    return float(counter.get_total_flops())


def n_params(model, embeddings: bool = True) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if embeddings or "wte" not in name)


def cpu_gflops(n: int = 512, reps: int = 20) -> float:
    """This CPU's fp32 matrix-multiply rate on one thread (GFLOP per CPU second)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    s = per_step(lambda: a @ b, reps)
    return 2 * n**3 / s / 1e9


# ---- the units: one function per rule, each returns what it measured ------------------------------------------------
MEASURE = {}


def unit(rule: str, kind: str):
    def deco(fn):
        MEASURE[rule] = (kind, fn)
        return fn

    return deco


@unit("bodygen_train_part", "train")
@unit("bodygen_train", "train")
def _bodygen_train(cfg):
    """papers.bodygen.timing.step_cost: one PPO iteration of BodyGen on the crawler at the full settings. One job is one
    part of one run (bodygen.train_parts chained jobs per task, arm and seed: bodygen_train_part 1 .. parts - 1, then
    bodygen_train), on the train kind's threads (papers.common.runner sets torch's): the PPO update (minibatches of 2048
    samples' limb tokens; ~95% of the CPU time) is credited threads x THREAD_EFFICIENCY as every train job, the
    rollouts (MuJoCo and the policy's forward pass for the bodies of one control step) are serial, so their CPU time is
    counted x that factor here and estimate()'s division leaves them whole (Amdahl)."""
    from papers.bodygen.timing import step_cost

    b = cfg["bodygen"]
    cost = step_cost(b, task=b["tasks"][0], arm="bodygen", samples=600, control_steps=150, threads=1)
    growth = 1.5  # bodies grow during co-design (papers.bodygen.timing's margin): later iterations cost more
    threads, parts = cfg["resources"]["train"]["threads"], b["train_parts"]
    speedup = threads * THREAD_EFFICIENCY
    seconds = (cost["update_ms_per_step"] + cost["rollout_ms_per_step"] * speedup) / 1e3
    return {"unit": "simulated control step (rollout + PPO update share)", "seconds": seconds,
            "units": b["ppo"]["env_steps"] * growth / parts,
            "how": f"papers.bodygen.timing.step_cost: one PPO iteration of {cost['samples']} steps (BodyGen, crawler, "
                   f"1 thread) at the full model/epochs/minibatch: {cost['update_ms_per_step']:.2f} ms of update + "
                   f"{cost['rollout_ms_per_step']:.2f} ms of rollouts per step, the rollouts serial (x {speedup:g} "
                   f"here, / {speedup:g} by the {threads} threads); x env_steps {b['ppo']['env_steps']:.0f} x {growth} "
                   f"(bodies grow during co-design) / train_parts {parts}; one job = one part of one task, arm and seed"}


@unit("orion_train", "gpu")
def _orion_train(cfg):
    """papers.orion.train's step as train_until_gate takes it (the stacked seeds' member_losses, per-member clipping,
    AdamW) for one member of the largest model, on a batch of the longest task sequences; a gpu job (orion.device
    cuda at the full scale, issue 54), so its FLOPs (torch's counter) at the GPU's rate decide the estimate."""
    import torch

    from papers.orion import model as gpt
    from papers.orion import train as trainer
    from papers.orion.ensemble import EnsembleGPT, clip_per_member, decay_groups
    from papers.orion.params import BLOCK_SIZE, parse

    p = parse(cfg["orion"])
    t = p.train
    big = p.model(max(p.model_names, key=lambda n: p.model(n).n_layer * p.model(n).n_embd ** 2))
    vocab = 4 * p.pool_size + 200  # the pool's words per binding slot, numbers and markers: a generous upper bound
    T = 80  # papers.orion.params: "our longest task sequence is ~80 tokens"
    B = 16  # timed at 16 sequences (a full-batch step of the largest model takes ~30 CPU-s here), scaled to the batch
    torch.manual_seed(0)
    ens = EnsembleGPT.from_members([gpt.GPT(gpt.GPTConfig(vocab_size=vocab, block_size=BLOCK_SIZE, n_layer=big.n_layer,
                                                          n_head=big.n_head, n_embd=big.n_embd))])
    opt = torch.optim.AdamW(decay_groups(ens, t.weight_decay), lr=t.lr, betas=(0.9, 0.95))
    x = torch.randint(1, vocab, (1, B, T))
    mask = torch.rand(1, B, T - 1) < 0.1
    parts = [(torch.tensor([0]), x, mask)]

    def step():
        losses = trainer.member_losses(ens, parts, t.lm_weight)
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        clip_per_member(ens.parameters(), t.grad_clip)
        opt.step()

    base = rss_mb()
    s = per_step(step, 2)
    scale = t.batch_size / B
    # the activations grow with the batch: the full batch's peak = the model's resident memory + the step's growth x scale
    return {"peak_mb": base + (peak_mb() - base) * scale, "flops": step_flops(step) * scale,
            "unit": f"AdamW step of one {big.name} member (batch {t.batch_size} x {T} tokens)",
            "seconds": s * scale,
            "units": (t.max_steps + t.post_gate_steps) * p.seeds,
            "how": f"papers.orion.train.member_losses + clip_per_member + AdamW (the stage's step) on the largest model "
                   f"({big.name}, one member) timed at batch {B} of the longest sequences, x {t.batch_size}/{B}; x "
                   f"(max_steps {t.max_steps} + post_gate_steps {t.post_gate_steps}) x {p.seeds} seeds side by side (an "
                   f"upper bound: a member leaves post_gate_steps after its accuracy gate); on the GPU (orion.device {p.device}) at the FLOP rate; validation (every "
                   f"{t.eval_every} steps, on CPU copies of the members) left out"}


@unit("hip_train_lm", "gpu")
def _hip_train_lm(cfg):
    """papers.hip.train.train (the stage's loop) on the full-width GPT, 3 steps of a short batch, scaled by FLOPs."""
    import dataclasses

    import torch

    from papers.hip.model import GPT, GPTConfig
    from papers.hip.params import parse
    from papers.hip.train import train

    p = parse({**cfg["hip"], "device": "cpu"})
    m, tp = p.lm, p.train
    model = GPT(GPTConfig(n_layer=m.n_layer, n_head=m.n_head, n_embd=m.n_embd, rope_base=m.rope_base))
    B, T = 1, 512

    def batch(step):
        return torch.randint(0, 256, (B, T + 1)), torch.ones(B, T)

    run = lambda steps: train(model, dataclasses.replace(tp, steps=steps, warmup=1), batch, desc="timing")  # noqa: E731
    run(1)
    c0 = cpu_seconds()
    run(2)
    s = (cpu_seconds() - c0) / 2
    N = n_params(model, embeddings=False)
    measured = transformer_flops(N, m.n_layer, m.n_embd, T, B * T)
    short = (tp.short_steps) * tp.short_batch * tp.short_len  # drill + short phases: short_batch x short_len
    long = (tp.steps - tp.short_steps) * tp.batch * tp.seq_len
    flops = transformer_flops(N, m.n_layer, m.n_embd, tp.short_len, short) + \
        transformer_flops(N, m.n_layer, m.n_embd, tp.seq_len, long)
    return {"flops": 1.0, "unit": f"FLOP (timed: 3 steps of the full-width GPT at {B} x {T} bytes)", "seconds": s / measured,
            "units": flops,
            "how": f"papers.hip.train.train timed on the {m.n_layer}-layer, {m.n_embd}-wide GPT at {B}x{T} bytes "
                   f"({s:.1f} CPU-s/step, {measured / s / 1e9:.0f} GFLOP/s); the job's FLOPs (6N + 12LTD per token: "
                   f"{tp.short_steps} steps of {tp.short_batch}x{tp.short_len}, {tp.steps - tp.short_steps} of "
                   f"{tp.batch}x{tp.seq_len}) at that rate; one job = one seed"}


@unit("cbplm_train", "gpu")
def _cbplm_train(cfg):
    """papers.cbplm.train.train (the stage's loop) for CB-pLM, 3 steps at batch 4 of full-length sequences."""
    import dataclasses

    import numpy as np
    import pandas as pd

    from papers.cbplm.params import parse
    from papers.cbplm.train import train

    p = parse(cfg["cbplm"])
    B = 4
    rng = np.random.default_rng(0)
    aa = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    n = 64
    df = pd.DataFrame({"split": "train", "sequence": ["".join(rng.choice(aa, p.max_length)) for _ in range(n)]})
    for c in p.concepts:
        df[f"z_{c}"] = rng.normal(size=n).astype(np.float32)
        df[f"bin_{c}"] = rng.integers(0, p.tag_bins, n)
    times = {}
    flops = step_flops(lambda: train("cb", p, df, 0, schedule=dataclasses.replace(p.train, steps=1, batch_size=B,
                                                                                 warmup_steps=1)))
    for steps in (1, 3):
        c0 = cpu_seconds()
        train("cb", p, df, 0, schedule=dataclasses.replace(p.train, steps=steps, batch_size=B, warmup_steps=1))
        times[steps] = cpu_seconds() - c0
    s = (times[3] - times[1]) / 2
    t = p.train
    steps = 4 * t.steps + sum(t.sweep)  # four models (plain, tag, cond, CB) and the sweep's CB-pLM runs
    return {"flops": flops * t.batch_size / B,
            "unit": f"training step at batch {t.batch_size} x {p.max_length} residues", "seconds": s * t.batch_size / B,
            "units": steps,
            "how": f"papers.cbplm.train.train (CB-pLM, the largest of the four) timed at batch {B} of {p.max_length}-residue "
                   f"sequences, x {t.batch_size}/{B} (linear in the batch); x (4 models x {t.steps} + sweep "
                   f"{list(t.sweep)}) steps; one job = one seed"}


@unit("profilebfn_train_part", "gpu")
@unit("profilebfn_train", "gpu")
def _profilebfn_train(cfg):
    """One chained part of a seed's training (profilebfn.train_parts parts, the last one the rule profilebfn_train, the
    others profilebfn_train_part; each 1/train_parts of the steps) on train.gpus GPUs (DDP, torchrun). The
    ESM-2-650M-sized ProfileBFNNet cannot train here (AdamW state ~10 GB, one step minutes): 2 of its blocks at its
    full width timed on a short crop; the unit is one GPU's FLOPs of one part (the part's FLOPs / gpus), run at the
    GPU's rate for the configured precision (bf16: GPU_BF16_TFLOPS)."""
    import torch

    from papers.profilebfn import bfn, data
    from papers.profilebfn.model import ProfileBFNNet
    from papers.profilebfn.params import parse

    p = parse(cfg["profilebfn"])
    m, tr = p.model, p.train
    small = ProfileBFNNet(d_model=m.d_model, n_layer=2, n_head=m.n_head, time_dim=m.time_dim)
    B, L = 1, 256
    x = torch.randint(0, data.K, (B, L))
    mask = torch.ones(B, L, dtype=torch.bool)
    g = torch.Generator().manual_seed(0)

    def loss_of(net):
        t = torch.rand(B, generator=g)
        theta = bfn.flow(torch.nn.functional.one_hot(x, data.K).float(), t, p.beta1, g)
        return bfn.continuous_loss(x, torch.softmax(net(theta, t, ~mask), -1), t, p.beta1, mask)

    s = per_step(torch_step(small, loss_of), 2)
    per_layer = 12 * m.d_model ** 2  # qkv, proj and the 4x MLP of one block
    N = m.n_layer * per_layer
    measured = transformer_flops(2 * per_layer, 2, m.d_model, L, B * L)
    full = transformer_flops(N, m.n_layer, m.d_model, tr.crop, tr.steps * tr.batch * tr.crop)
    per_gpu_part = full / (p.train_parts * tr.gpus)
    bf16 = tr.precision == "bf16"
    # Host memory of the job (its mem_mb): train.gpus processes, each a Python process with torch, CUDA and its share
    # of the data (MEM_FLOOR_MB each), plus one copy of the full state (16 B per parameter: fp32 weights, gradients,
    # AdamW's two moments), saved by rank 0 and mapped by the processes that resume it. GPU memory per process (not
    # a scheduler request, stated): 16 B x N + DDP's gradient buckets (4 B x N) + the activations a backward keeps at
    # batch/gpus x crop, ~ 34 s b h bytes per layer in 16-bit (Korthikanti et al. 2022, eq. 2, without the s^2
    # scores: the fused attention keeps none), twice that in fp32.
    act = 34 * (2 if bf16 else 4) / 2 * tr.crop * (tr.batch // tr.gpus) * m.d_model * m.n_layer
    gpu_gb = (20 * N + act) / 1e9
    host_mb = tr.gpus * MEM_FLOOR_MB + 16 * N / 2 ** 20
    rate = GPU_BF16_TFLOPS if bf16 else GPU_TFLOPS
    return {"peak_mb": host_mb, "flops": 1.0, "gpu_tflops": rate,
            "unit": f"FLOP of one GPU in one of {p.train_parts} parts on {tr.gpus} GPUs (timed: 2 of the {m.n_layer} "
                    f"blocks at width {m.d_model}, {B} x {L})", "seconds": s / measured,
            "units": per_gpu_part,
            "how": f"ProfileBFNNet + bfn.continuous_loss, 2 blocks at the full width {m.d_model} timed ({measured / s / 1e9:.0f} "
                   f"GFLOP/s on the CPU); the full network's FLOPs ({m.n_layer} layers, {tr.steps} steps x batch {tr.batch} x "
                   f"crop {tr.crop}: {full:.4g}) / ({p.train_parts} parts x {tr.gpus} GPUs, DDP) at {rate:g} TFLOP/s "
                   f"({tr.precision}); memory: host {tr.gpus} processes x {MEM_FLOOR_MB} MB + the 16 B/parameter state "
                   f"once; per GPU {gpu_gb:.0f} GB (20 B/parameter + activations, Korthikanti et al. 2022, not a request); "
                   "one job = one part of one seed"}


@unit("ensembles_train", "gpu")
def _ensembles_train(cfg):
    """The widest ResNet18 (papers.ensembles.models.build) timed on a batch of 8 CIFAR images, scaled to 128."""
    import torch

    from papers.ensembles.models import build

    e = cfg["ensembles"]
    settings = {k: v for k, v in e["settings"].items() if k in e["selected"]}
    name, s_cfg = max(settings.items(), key=lambda kv: max(kv[1]["widths"]))
    width = max(s_cfg["widths"])
    model = build("resnet18", [torch.Generator().manual_seed(0)], d_in=3072, width=width, depth=1, n_classes=10, gain=1.0)
    B = 4
    x, y = torch.randn(1, B, 3 * 32 * 32), torch.randint(0, 10, (B,))
    step = torch_step(model, lambda m: torch.nn.functional.cross_entropy(m(x)[0], y))
    s = per_step(step, 2)
    n_train = 50000 - e["val_size"] if e["train_size"] is None else e["train_size"]
    steps = s_cfg["epochs"] * math.ceil(n_train / s_cfg["batch_size"])
    return {"flops": step_flops(step) * s_cfg["batch_size"] / B, "unit": f"step of a width-{width} ResNet18 at batch {s_cfg['batch_size']}", "seconds": s * s_cfg["batch_size"] / B,
            "units": steps * e["members_per_job"],
            "how": f"the widest setting ({name}, k={width}) timed at batch {B}, x {s_cfg['batch_size']}/{B}; x "
                   f"{s_cfg['epochs']} epochs x {math.ceil(n_train / s_cfg['batch_size'])} steps x {e['members_per_job']} "
                   "members per job (narrower settings' jobs ask the same)"}


@unit("sam_late_train_sgd", "gpu")
def _sam_late_train_sgd(cfg):
    return _sam_late(cfg, "sgd")


@unit("sam_late_train_sam", "gpu")
def _sam_late_train_sam(cfg):
    return _sam_late(cfg, "sam")


@unit("sam_late_train_adv", "gpu")
def _sam_late_train_adv(cfg):
    return _sam_late(cfg, "adv")


def _sam_late(cfg, which):
    """VGG-16-BN (papers.sam_late.train.new_model) SGD step at batch 16, scaled to the batch; SAM costs two passes,
    PGD-k adversarial training k + 1."""
    import torch

    from papers.sam_late.params import parse
    from papers.sam_late.train import new_model

    p = parse(cfg["sam_late"])
    model = new_model(p, 0, "cpu")
    B = 8
    x, y = torch.randn(B, 3, 32, 32), torch.randint(0, 10, (B,))
    step = torch_step(model, lambda m: torch.nn.functional.cross_entropy(m(x), y), clip=None)
    s = per_step(step, 2)
    steps_per_epoch = math.ceil(p.data.train_size / p.batch_size)
    seeds = p.seeds
    E, K = p.epochs, p.late_epochs
    if which == "sgd":
        passes, note = E, f"{E} epochs of SGD"
    elif which == "sam":  # the main rho's job (the largest): SAM throughout, early SAM, late SAM and the sweep's arms
        late = [K, *p.late_ks]  # late arms branch off SGD's checkpoint and train their last k epochs with SAM
        passes = 2 * E + (E + K) + sum(2 * k for k in late)
        note = (f"SAM {E} epochs at 2 passes + early SAM ({K} of {E} epochs at 2) + late arms {late} epochs at 2 "
                f"= {passes} epoch-passes")
    else:
        k = p.attack.steps
        ka = p.adv_late_epochs or K
        passes = (k + 1) * E + (E + k * ka) + (k + 1) * ka  # AT throughout, early AT, late AT from SGD's checkpoint
        note = f"AT {E} epochs at {k + 1} passes (PGD-{k}) + early AT + late AT ({ka} epochs) = {passes} epoch-passes"
    return {"flops": step_flops(step) * p.batch_size / B, "unit": f"SGD step of VGG-16-BN at batch {p.batch_size}", "seconds": s * p.batch_size / B,
            "units": passes * steps_per_epoch * seeds,
            "how": f"papers.sam_late.train.new_model timed at batch {B}, x {p.batch_size}/{B}; x {note} x "
                   f"{steps_per_epoch} steps x {seeds} seeds"}


@unit("eagle_train", "gpu")
def _eagle_train(cfg):
    """A 7B LM cannot run here: one job's FLOPs (one arm of one seed: frozen LM with LoRA, trained experts) against
    this CPU's measured matrix rate. The job is the costliest arm's: Pre-Alignment's steps once per non-CLIP expert."""
    from papers.eagle.arms import fixed_arms, prealigned, round_robin, rr_slots, seed_groups

    e = cfg["eagle"]
    tr, ll = e["train"], e["llava"]
    rate = cpu_gflops() * 1e9
    lm_params = 6.7e9  # a 7B LLaMA/Vicuna (papers.eagle.llava.static_memory_gb's figure)
    expert_params = {"clip": 0.3e9, "hires": 0.85e9, "det": 0.3e9}
    names = tuple(e["experts"]["names"])
    groups = seed_groups(e["arm_seeds"], 0)
    arms = fixed_arms(names, groups)
    jobs = len(arms) + (len(rr_slots(names)) if round_robin(names, groups) else 0)
    grid = e["fusion"]["grid"]
    tokens = grid * grid + ll["max_text_tokens"]  # visual tokens + text per sample
    per_sample = 6 * lm_params * tokens + 6 * sum(expert_params.values()) * 577  # LM (LoRA: backward through it) + experts
    costliest = max(arms, key=lambda a: len(prealigned(a)))
    n_pre = len(prealigned(costliest))
    steps = n_pre * tr["prealign_steps"] + tr["align_steps"] + tr["sft_steps"]
    flops = per_sample * tr["batch"] * steps
    # host memory: the LM's weights in lm_dtype and the experts' in fp32 pass through the host on their way to the GPU
    lm_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}[ll["lm_dtype"]]
    memory = (lm_bytes * lm_params + 4 * sum(expert_params.values())) / 2 ** 20
    return {"peak_mb": memory, "flops": 1.0, "gpu_tflops": GPU_BF16_TFLOPS, "unit": "FLOP (7B LM + experts; rate of a 512^2 fp32 matmul on this CPU)", "seconds": 1.0 / rate,
            "units": flops,
            "how": f"FLOPs only (a 7B LM does not fit here): 6 x ({lm_params:.1e} LM x {tokens} tokens + "
                   f"{sum(expert_params.values()):.2e} expert params x 577 patches) per sample x batch {tr['batch']} x "
                   f"{steps} steps ({n_pre} x {tr['prealign_steps']} Pre-Alignment + {tr['align_steps']} align + "
                   f"{tr['sft_steps']} SFT: {costliest['name']}, the costliest arm; every stage at the full mixture's "
                   f"tokens) per job = one arm of one seed ({jobs} jobs per seed, {len(arms)} arms and "
                   f"{jobs - len(arms)} round-robin slots; text at its max_text_tokens cap: an upper bound), at "
                   f"{rate / 1e9:.0f} GFLOP/s on the CPU; on the GPU at {GPU_BF16_TFLOPS:g} TFLOP/s (the LM runs in "
                   "bfloat16, llava.lm_dtype)"}


@unit("sbdd_vs_train", "train")
def _sbdd_vs_train(cfg):
    """papers.sbdd_vs.lm.train (the stage's loop) on the full-size SmilesGPT, 3 steps of a full batch of full-length rows."""
    import torch

    from papers.sbdd_vs import lm
    from papers.sbdd_vs.params import parse

    p = parse(cfg["sbdd_vs"])
    q = p.lm
    vocab = 64  # SMILES tokens: atoms, bonds, rings, brackets (papers.sbdd_vs.lm.tokenize), an upper bound
    model = lm.SmilesGPT(vocab, d_model=q.d_model, n_layer=q.n_layer, n_head=q.n_head, block_size=q.max_tokens + 2)
    data = torch.randint(1, vocab, (512, q.max_tokens + 2))
    run = lambda steps: lm.train(model, data, steps=steps, batch=q.batch, lr=q.lr,  # noqa: E731
                                 generator=torch.Generator().manual_seed(0))
    run(1)
    c0 = cpu_seconds()
    run(2)
    s = (cpu_seconds() - c0) / 2
    finetunes = len(p.targets) * (p.seeds if "lm" in p.generators else 0)
    return {"unit": f"AdamW step at batch {q.batch} x {q.max_tokens + 2} tokens", "seconds": s,
            "units": q.pretrain_steps + finetunes * q.finetune_steps,
            "how": f"papers.sbdd_vs.lm.train timed on SmilesGPT (d {q.d_model}, {q.n_layer} layers) at the full batch of "
                   f"full-length rows (an upper bound: batches are trimmed to their longest row); x pretrain "
                   f"{q.pretrain_steps} + {finetunes} fine-tunings (targets x replicates) x {q.finetune_steps} steps"}


@unit("flexpert_pretrain", "gpu")
def _flexpert_pretrain(cfg):
    """papers.flexpert.train.pretrain_lm (the stage's loop): 1 and 3 steps of a full batch of max_length sequences."""
    import numpy as np

    from papers.flexpert import train as T

    lm = dict(cfg["flexpert"]["lm"])
    rng = np.random.default_rng(0)
    L = lm["max_length"]
    seqs = ["".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), L)) for _ in range(256)]
    B = 4  # a full batch of 64 x 512 residues takes minutes here: timed at 4, scaled to the batch
    times, base = {}, rss_mb()
    for steps in (1, 3):
        c0 = cpu_seconds()
        T.pretrain_lm(seqs, {**lm, "steps": steps, "batch": B}, seed=0)
        times[steps] = cpu_seconds() - c0
    scale = lm["batch"] / B
    s = (times[3] - times[1]) / 2 * scale
    from papers.flexpert import model as M

    net = M.ProteinLM(lm["d_model"], lm["layers"], lm["heads"])
    flops = transformer_flops(n_params(net), lm["layers"], lm["d_model"], L, lm["batch"] * L)
    return {"peak_mb": base + (peak_mb() - base) * scale, "flops": flops,
            "unit": f"masked-LM step at batch {lm['batch']} x {L} residues", "seconds": s, "units": lm["steps"],
            "how": f"papers.flexpert.train.pretrain_lm timed on ProteinLM (d {lm['d_model']}, {lm['layers']} layers) at "
                   f"batch {B} of {L}-residue sequences (an upper bound: real chains are shorter), x {lm['batch']}/{B}; x "
                   f"{lm['steps']} steps; FLOPs from the transformer formula (6 N + 12 L T d per token)"}


@unit("uv_sharpness_train_mlp", "train")
def _uv_sharpness_train_mlp(cfg):
    """papers.uv_sharpness.mlp.train (the stage's call): full-batch GD on train_size images for sharpness_every steps
    (one sharpness measurement with its power iterations inside)."""
    import torch

    from papers.uv_sharpness import mlp
    from papers.uv_sharpness.params import parse

    p = parse(cfg["uv_sharpness"])
    m = p.mlp
    x = torch.randn(m.train_size, 3 * 32 * 32)
    labels = torch.randint(0, 10, (m.train_size,))
    n = min(m.sharpness_every, m.steps)
    run = lambda steps: mlp.train(x, labels, hidden=m.hidden, lr=m.learning_rates[0], steps=steps,  # noqa: E731
                                  sharpness_every=m.sharpness_every, power_iterations=m.power_iterations, seed=0,
                                  architecture=m.architecture)
    run(1)
    c0 = cpu_seconds()
    run(n)
    s = (cpu_seconds() - c0) / n
    return {"unit": f"full-batch GD step on {m.train_size} images (sharpness every {m.sharpness_every} amortised)",
            "seconds": s, "units": m.steps,
            "how": f"papers.uv_sharpness.mlp.train timed for {n} steps ({m.architecture}, hidden {m.hidden}, "
                   f"{m.power_iterations} power iterations per sharpness); x {m.steps} steps; one job = one rate and seed"}


@unit("linear_mechanisms_nonlinear", "train")
def _linear_mechanisms_nonlinear(cfg):
    """papers.linear_mechanisms.mlp.train (the stage's call) at the full width on train_size MNIST-1D-sized inputs."""
    import torch

    from papers.linear_mechanisms import mlp
    from papers.linear_mechanisms.params import parse
    from papers.linear_mechanisms.stages import mlp_arms

    p = parse(cfg["linear_mechanisms"])
    nl = p.nonlinear
    g = torch.Generator().manual_seed(0)
    d_in = 40  # MNIST-1D's 40 features
    x_tr, y_tr = torch.randn(nl.train_size, d_in, generator=g), torch.randint(0, 10, (nl.train_size,), generator=g)
    x_te, y_te = torch.randn(nl.test_size, d_in, generator=g), torch.randint(0, 10, (nl.test_size,), generator=g)
    arm = mlp_arms(nl)[0]
    run = lambda steps: mlp.train(x_tr, y_tr, x_te, y_te, scale=arm["init_scale"], hidden=nl.hidden,  # noqa: E731
                                  steps=steps, lr_factor=nl.lr_factor, power_iterations=nl.power_iterations,
                                  probe=nl.probe, seed=0, converge_accuracy=2.0)  # 2.0: never stops early here
    n = min(nl.probe, nl.steps)
    times = {}
    for steps in (1, n + 1):
        c0 = cpu_seconds()
        run(steps)
        times[steps] = cpu_seconds() - c0
    s = (times[n + 1] - times[1]) / n
    arms = len(mlp_arms(nl))
    return {"unit": f"full-batch GD step of the width-{nl.hidden} MLP on {nl.train_size} inputs", "seconds": s,
            "units": arms * nl.steps,
            "how": f"papers.linear_mechanisms.mlp.train timed for {n} steps (one probe every {nl.probe} amortised; the "
                   f"init's power iteration subtracted); x {arms} arms x the {nl.steps}-step cap (an upper bound: runs "
                   "stop once they fit); one job = one seed"}


@unit("sharpening_pretrain", "train")
def _sharpening_pretrain(cfg):
    """The stage's step (papers.common.gpt.token_logprobs on prompt + answer rows, AdamW) on the full-size model."""
    import torch

    from papers.common.gpt import GPT, GPTConfig, token_logprobs
    from papers.common.params import to_dict
    from papers.sharpening import task
    from papers.sharpening.params import parse

    p = parse(cfg["sharpening"])
    tk, pp = p.task, p.pretrain
    V = task.vocab_size(tk.alphabet)
    model = GPT(GPTConfig(vocab_size=V, block_size=2 * tk.max_len, **to_dict(p.model)))
    seq = torch.randint(0, V, (pp.batch_size, 2 * tk.max_len))

    def loss_of(m):
        return -token_logprobs(m, seq)[:, tk.max_len:].mean()

    s = per_step(torch_step(model, loss_of, clip=pp.grad_clip), 3)
    return {"unit": f"AdamW step at batch {pp.batch_size} x {2 * tk.max_len} tokens", "seconds": s,
            "units": pp.seeds * pp.max_inits * pp.steps,
            "how": f"the stage's step on GPT ({p.model.n_layer} layers, width {p.model.n_embd}) at the full batch of "
                   f"longest rows; x {pp.seeds} seeds x {pp.max_inits} initialisations (the gate's cap: an upper bound) x "
                   f"{pp.steps} steps"}


@unit("infoprop_train", "train")
def _infoprop_train(cfg):
    """papers.infoprop.model.train_ensemble (the stage's call): 1 and 2 epochs on 20,000 HalfCheetah-sized transitions."""
    import numpy as np
    import torch

    from papers.infoprop.model import train_ensemble
    from papers.infoprop.params import parse

    p = parse(cfg["infoprop"])
    m = dict(p.model)
    n, d_in, d_out = 20000, 17 + 6, 17 + 1  # HalfCheetah: 17 observations, 6 actions; targets (s' - s, r)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(n, d_in)), rng.normal(size=(n, d_out))
    epochs = 5
    train_ensemble(x[:1000], y[:1000], {**m, "epochs": 1}, torch.Generator().manual_seed(0))  # warm-up
    c0 = cpu_seconds()
    train_ensemble(x, y, {**m, "epochs": epochs, "patience": 10 ** 6}, torch.Generator().manual_seed(0))
    s = (cpu_seconds() - c0) / epochs  # the set-up (normalisers, bootstrap) included: an upper bound
    episodes = p.data["train_episodes"] if isinstance(p.data, dict) else p.data.train_episodes
    N = episodes * 1000  # HalfCheetah never terminates: 1000 steps per episode
    return {"unit": f"epoch over {n} transitions ({m['ensemble']} members, {m['layers']} x {m['hidden']})", "seconds": s,
            "units": m["epochs"] * N / n,
            "how": f"papers.infoprop.model.train_ensemble timed for {epochs} epochs on {n} transitions (per epoch, set-up "
                   f"included); x "
                   f"{N}/{n} (linear in the data) x {m['epochs']} epochs (the cap: patience may stop it earlier); "
                   "one job = one seed"}


def _welfare_step(p, policy: str, seeds: int, n: int, k: int, bounds, steps: int) -> float:
    """CPU seconds of one step of papers.welfare.dynamics.simulate for `policy` on (seeds, n) individuals."""
    import numpy as np

    from papers.welfare import dynamics as dyn

    rng = np.random.default_rng(0)
    shape = (seeds, n)
    u0 = rng.uniform(0, 100, shape)
    ones = np.ones(shape)
    dyn.simulate(policy, u0, 0.5 * ones, ones, 0.1 * ones, ones, bounds, k=k, horizon=2, noise=p.noise, rng=rng)
    c0 = cpu_seconds()
    dyn.simulate(policy, u0, 0.5 * ones, ones, 0.1 * ones, ones, bounds, k=k, horizon=steps, noise=p.noise, rng=rng)
    return (cpu_seconds() - c0) / steps


@unit("welfare_simulate", "train")
def _welfare_simulate(cfg):
    """papers.welfare.dynamics.simulate (the stage's call) for every seed at once, the slowest policy, 300 steps."""
    from papers.welfare.params import parse

    p = parse(cfg["welfare"])
    per = {pol: _welfare_step(p, pol, p.seeds, p.individuals, p.budget, p.bounds(), 300) for pol in p.policies}
    worst = max(per, key=per.get)
    return {"single_thread": True, "unit": f"simulated step of {p.seeds} seeds x {p.individuals} individuals ({worst})", "seconds": per[worst],
            "units": p.horizon,
            "how": f"papers.welfare.dynamics.simulate timed for 300 steps per policy on the full population and seeds; "
                   f"the slowest ({worst}) x horizon {p.horizon}; one job = one policy and population"}


@unit("welfare_sweep", "train")
def _welfare_sweep(cfg):
    """papers.welfare.dynamics.simulate at every sweep point (paper's population and its control: 2 x seeds rows)."""
    from papers.welfare.params import parse

    p = parse(cfg["welfare"])
    pol = "rawlsian_min_u" if "rawlsian_min_u" in p.policies else p.policies[0]
    points = p.sweep()
    big = max(points, key=lambda pt: pt["individuals"])
    s = _welfare_step(p, pol, 2 * p.seeds, big["individuals"], big["budget"], big["bounds"], 100)
    return {"single_thread": True, "unit": f"simulated step of {2 * p.seeds} rows x {big['individuals']} individuals", "seconds": s,
            "units": len(points) * p.sweep_horizon,
            "how": f"papers.welfare.dynamics.simulate timed for 100 steps ({pol}) at the largest sweep point (N = "
                   f"{big['individuals']}), paper's population and control; x {len(points)} points x sweep_horizon "
                   f"{p.sweep_horizon} (an upper bound: smaller points cost less); one job = one policy"}


@unit("adamanip_train", "train")
def _adamanip_train(cfg):
    """papers.adamanip.train.fit (the stage's call) for each policy on demonstrations of the full point count."""
    import numpy as np

    from papers.adamanip import train as T
    from papers.adamanip.params import parse

    p = parse(cfg["adamanip"])
    pol, tr = dict(p.policy), dict(p.train)
    rng = np.random.default_rng(0)
    n, P = 2000, p.physics["points"] if isinstance(p.physics, dict) else p.physics.points
    demos = {"points": rng.normal(size=(n, P, 3)).astype(np.float32), "state": rng.normal(size=(n, 8)),
             "action": rng.normal(size=(n, 4)), "episode": np.repeat(np.arange(n // 40), 40)}
    per = {}
    for policy in tr["steps"]:
        times = {}
        for steps in (2, 6):
            c0 = cpu_seconds()
            T.fit(policy, demos, pol, {**tr, "steps": {**tr["steps"], policy: steps}}, 0)
            times[steps] = cpu_seconds() - c0
        per[policy] = (times[6] - times[2]) / 4
    worst = max(per, key=lambda k: per[k] * tr["steps"][k])
    kinds = 2  # both demonstration kinds (one-go and adaptive) in one job
    return {"unit": f"AdamW step of the {worst} policy at batch {tr['batch']}", "seconds": per[worst],
            "units": kinds * tr["steps"][worst],
            "how": f"papers.adamanip.train.fit timed (6 steps - 2) per policy at batch {tr['batch']} of {P}-point clouds "
                   f"({', '.join(f'{k} {v:.3f} s' for k, v in per.items())}); the costlier ({worst}) x {kinds} "
                   f"demonstration kinds x {tr['steps'][worst]} steps; one job = one policy and seed"}


# ---- issue 54 item 4, second round: the remaining train/gpu rules (cheapest first) ---------------------------------
def _linear(run, n1: int, n2: int) -> tuple[float, float, float, float]:
    """run(n) at n1 and then n2 units of work (steps): (CPU-s of run(n1), CPU-s per extra unit, peak MB after n1,
    peak MB growth per extra unit). The difference isolates the per-unit cost from the set-up and the outputs."""
    c0 = cpu_seconds()
    run(n1)
    t1 = cpu_seconds() - c0
    m1 = peak_mb()
    c0 = cpu_seconds()
    run(n2)
    t2 = cpu_seconds() - c0
    return t1, max(t2 - t1, 0.0) / (n2 - n1), m1, max(peak_mb() - m1, 0.0) / (n2 - n1)


@unit("uv_sharpness_trajectories", "train")
def _uv_sharpness_trajectories(cfg):
    """papers.uv_sharpness.stages.trajectories (the stage itself, numpy, vectorised over runs) at the full width, seeds,
    init scales and ratios, for two short step counts; the per-step cost and memory extrapolated to `steps`."""
    import tempfile

    from papers.uv_sharpness import stages
    from papers.uv_sharpness.params import parse

    u = cfg["uv_sharpness"]
    p = parse(u)
    n1 = max(p.early_steps, p.late_window) + 100  # params.check: steps above both
    n2 = n1 + 500
    with tempfile.TemporaryDirectory() as tmp:
        run = lambda n: stages.trajectories(cfg={**u, "steps": n}, trajectory=f"{tmp}/t.parquet")  # noqa: E731
        t1, per, m1, dm = _linear(run, n1, n2)
    total = t1 + (p.steps - n1) * per
    return {"single_thread": True, "peak_mb": m1 + dm * (p.steps - n1),
            "unit": f"GD step of every run (width {p.width}; set-up and output amortised)", "seconds": total / p.steps,
            "units": p.steps,
            "how": f"papers.uv_sharpness.stages.trajectories run at {n1} and {n2} steps ({t1:.1f} CPU-s, then "
                   f"{per * 1e6:.0f} us per further step); {t1:.1f} + ({p.steps} - {n1}) steps x that; memory (the "
                   "per-step records and their table) extrapolated linearly in the steps; numpy on one thread (no "
                   "credit for the job's threads); one job"}


@unit("uv_sharpness_sweep", "train")
def _uv_sharpness_sweep(cfg):
    """papers.uv_sharpness.stages.sweep (the stage itself) at the full grid and replicates, run once just past the late
    window; the further map iterations (papers.uv_sharpness.uv.iterate on the same (replicates, points) shape) timed
    apart and added for the full `steps`."""
    import tempfile

    import numpy as np

    from papers.uv_sharpness import stages, uv
    from papers.uv_sharpness.params import parse

    u = cfg["uv_sharpness"]
    p = parse(u)
    init = max(p.sweep_inits, key=p.sweep_inits.get)
    n1 = p.late_window + 200
    with tempfile.TemporaryDirectory() as tmp:
        c0 = cpu_seconds()
        stages.sweep(cfg={**u, "steps": n1}, init=init, points=f"{tmp}/p.parquet", orbits=f"{tmp}/o.parquet")
        t1 = cpu_seconds() - c0
    shape = (p.seeds, p.sweep_points)
    ratios = np.broadcast_to(np.linspace(*p.sweep_range, p.sweep_points), shape)
    eta = ratios * 2 / uv.lambda_min(1.0, 1.0, p.width)
    f0, theta0 = np.full(shape, 0.5), np.full(shape, 1.0)  # values do not change numpy's per-element cost
    run = lambda n: uv.iterate(f0, theta0, 1.0, 1.0, p.width, eta, n, 10)  # noqa: E731
    run(20)
    times = {}
    for n in (200, 2200):
        c0 = cpu_seconds()
        run(n)
        times[n] = cpu_seconds() - c0
    per = (times[2200] - times[200]) / 2000
    total = t1 + (p.steps - n1) * per
    return {"single_thread": True,
            "unit": f"map iteration of {p.seeds} replicates x {p.sweep_points} points (set-up, late window, output amortised)",
            "seconds": total / p.steps, "units": p.steps,
            "how": f"papers.uv_sharpness.stages.sweep ({init} init) run at {n1} steps ({t1:.1f} CPU-s: set-up, the late "
                   f"window of {p.late_window}, periods and output), + ({p.steps} - {n1}) further iterations of "
                   f"uv.iterate on the same shape ({per * 1e6:.0f} us each, 2200 - 200 timed); memory: the stage's peak "
                   "(the late window's arrays, the same at any step count); numpy, one thread; one job = one init"}


def _lm_steps(p, rows, x, y, h: float, chunk: int = 200) -> int:
    """The step count papers.linear_mechanisms.stages.simulate chooses for `rows` (one width): clip(max over rows of
    ceil(time_to_converge / step_size), min_steps, max_steps), from the paper's exact.* functions, in chunks of rows."""
    import numpy as np

    from papers.linear_mechanisms import exact, phase

    m2, mxy = exact.moments(x, y)
    needed = 0.0
    for i in range(0, len(rows), chunk):
        part = rows[i:i + chunk]
        width = part[0]["width"]
        kappa, eta_u, eta_w = phase.constants(*(np.array([r[k] for r in part], float)
                                                for k in ("width", "kappa_exponent", "lr_ratio")))
        sigma = np.array([r["sigma"] for r in part])[:, None]
        draws = {seed: exact.init(seed, width) for seed in sorted({r["seed"] for r in part})}
        u0 = sigma * np.stack([draws[r["seed"]][0] for r in part])
        w0 = sigma * np.stack([draws[r["seed"]][1] for r in part])
        a, b, c = exact.rescaled_gram(u0, w0, eta_u, eta_w)
        problem = dict(kappa=kappa, eta_u=eta_u, eta_w=eta_w, m2=m2, mxy=mxy)
        dt = exact.step_size(a, b, c, h=h, **problem)
        t_converge = exact.time_to_converge(a, b, c, tol=p.converge_tol, **problem)
        needed = max(needed, float(np.nanmax(np.ceil(t_converge / dt))))
    return int(np.clip(needed, p.min_steps, p.max_steps))


def _lm_rows_timed(p, rows, x, y, h, n1, n2):
    """CPU-s per GD step (papers.linear_mechanisms.stages.simulate) of `rows`, from runs of n1 and n2 steps."""
    from papers.linear_mechanisms.stages import simulate

    run = lambda n: simulate(rows, x, y, h=h, tol=p.converge_tol, min_steps=n, max_steps=n, records=2)  # noqa: E731
    t1, per, m1, dm = _linear(run, n1, n2)
    return t1, per


@unit("linear_mechanisms_phase", "train")
def _linear_mechanisms_phase(cfg):
    """papers.linear_mechanisms.stages.simulate (run_phase's call) per width of the costliest panel, on a share of its
    seeds, for two step counts; x the seeds' share and max_steps (the cap: an upper bound)."""
    import numpy as np

    from papers.linear_mechanisms.params import parse

    p = parse(cfg["linear_mechanisms"])
    rng = np.random.default_rng(p.data.seed)
    x = rng.standard_normal(p.data.samples)
    y = p.data.slope * x + p.data.noise * rng.standard_normal(p.data.samples)
    cost = {}
    for name in p.phase_panels:  # rows x (width + samples) per step: the costliest panel by that count
        pts = p.panels[name].points()
        cost[name] = sum(p.seeds_of(name) * (pt["width"] + p.data.samples) for pt in pts)
    panel = max(cost, key=cost.get)
    pts, seeds = p.panels[panel].points(), p.seeds_of(panel)
    sub = 5  # seeds timed per point (memory: rows x width floats), scaled to the panel's seeds
    total, base, steps_of = 0.0, rss_mb(), {}
    for width in sorted({pt["width"] for pt in pts}):
        rows = [{**pt, "seed": s} for pt in pts if pt["width"] == width for s in range(seeds)]
        steps_of[width] = _lm_steps(p, rows, x, y, p.phase_step)
        _, per = _lm_rows_timed(p, rows[:len(rows) * sub // seeds], x, y, p.phase_step, 20, 60)
        total += per * seeds / sub * steps_of[width]
    widest = max(pt["width"] for pt in pts)
    n_wide = sum(1 for pt in pts if pt["width"] == widest) * seeds
    mem = base + 8 * 8 * n_wide * widest / 2 ** 20  # u, w, u0, w0 and the step's temporaries: ~8 (rows, width) float64
    return {"single_thread": True, "peak_mb": mem,
            "unit": f"the panel {panel} ({seeds} seeds per point), every width", "seconds": total, "units": 1,
            "how": f"papers.linear_mechanisms.stages.simulate timed per width of the costliest panel ({panel}) on {sub} "
                   f"seeds per point (60 - 20 steps), x {seeds}/{sub} seeds; x each width's step count as simulate "
                   f"chooses it (exact.time_to_converge / step_size over all rows, capped at {p.max_steps}: "
                   f"{', '.join(f'd={w}: {n}' for w, n in steps_of.items())}); memory: 8 float64 arrays of the "
                   f"widest width's rows ({n_wide} x {widest}); numpy, one thread; one job = one panel"}


@unit("linear_mechanisms_trajectories", "train")
def _linear_mechanisms_trajectories(cfg):
    """papers.linear_mechanisms.stages.simulate (trajectories' call) at each mechanism point with its seeds, two step
    counts; x (max_steps at h + 2 max_steps at h/2) (the cap: an upper bound)."""
    import numpy as np

    from papers.linear_mechanisms.params import parse

    p = parse(cfg["linear_mechanisms"])
    rng = np.random.default_rng(p.data.seed)
    x = rng.standard_normal(p.data.samples)
    y = p.data.slope * x + p.data.noise * rng.standard_normal(p.data.samples)
    total, steps_of = 0.0, {}
    for name, grid in p.points.items():
        rows = [{**grid.points()[0], "seed": s} for s in range(p.seeds_at(name))]
        steps_of[name] = _lm_steps(p, rows, x, y, p.trajectory_step)
        _, per = _lm_rows_timed(p, rows, x, y, p.trajectory_step, 20, 60)
        total += per * 3 * steps_of[name]  # the run at h, then at h/2 with twice its steps
    return {"single_thread": True, "unit": "every mechanism point (all its seeds), at h and h/2", "seconds": total,
            "units": 1,
            "how": f"papers.linear_mechanisms.stages.simulate timed (60 - 20 steps) at each mechanism point with all its "
                   f"seeds; x 3 x the steps simulate chooses at h (exact.time_to_converge / step_size, capped at "
                   f"{p.max_steps}: {', '.join(f'{k} {v}' for k, v in steps_of.items())}; twice as many at h/2); "
                   "numpy, one thread; one job"}


@unit("neural_fdm_train", "train")
def _neural_fdm_train(cfg):
    """papers.neural_fdm.stages.train (the stage itself: the shared learning-rate search, then every seed side by
    side) with every step count at two small fractions of the full scale's; the cost, linear in that fraction,
    extrapolated to 1. The costlier task with the hybrid model (the FDM solver in the loop)."""
    import copy
    import tempfile

    from papers.neural_fdm import stages

    n = cfg["neural_fdm"]
    f1, f2 = 0.002, 0.006

    def scaled(f, task):
        c = copy.deepcopy(n)
        c["tune_steps"] = max(1, round(n["tune_steps"] * f))
        c[task]["train"] = {**c[task]["train"], "steps": max(4, round(n[task]["train"]["steps"] * f)), "log_every": 1}
        return c

    per, fixed, peaks = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for task in n["tasks"]:
            run = lambda f: stages.train(cfg=scaled(f, task), task=task, model="hybrid",  # noqa: B023,E731
                                         checkpoint=f"{tmp}/c.pt", history=f"{tmp}/h.parquet", search=f"{tmp}/s.parquet")
            t1, k, m1, _ = _linear(run, f1, f2)
            per[task], fixed[task], peaks[task] = k, t1 - k * f1, m1
    task = max(per, key=lambda t: fixed[t] + per[t])
    return {"peak_mb": max(peaks.values()),
            "unit": f"the job ({task}, hybrid: lr search over {len(n['lr_grid'])} rates x {n['tune_steps']} steps, then "
                    f"{n['seeds']} seeds x {n[task]['train']['steps']} steps)", "seconds": fixed[task] + per[task],
            "units": 1,
            "how": f"papers.neural_fdm.stages.train run with tune_steps and steps at {f1:g} and {f2:g} of the full "
                   f"scale's (per task, hybrid; log_every 1 in the short runs, so the logging is over-counted: an upper "
                   f"bound); CPU-s linear in that fraction (set-up {fixed[task]:.1f} s + "
                   f"{per[task]:.0f} s per whole job; "
                   f"{', '.join(f'{t} {fixed[t] + per[t]:.0f} s' for t in per)}); the costlier task; one job = one task "
                   "and model"}


@unit("adamanip_evaluate", "train")
def _adamanip_evaluate(cfg):
    """papers.adamanip.train.rollout (the stage's call) of an untrained diffusion policy (T.build at the full policy
    config: it never succeeds, so every episode runs max_steps, an upper bound) on a share of the episodes; x the
    episodes' share and the stage's four passes."""
    import numpy as np

    from papers.adamanip import train as T
    from papers.adamanip.env import make_episodes
    from papers.adamanip.params import parse
    from papers.adamanip.policy import Normalizer
    from papers.adamanip.stages import EVAL_STREAM, _key

    p = parse(cfg["adamanip"])
    phys = p.physics_obj()
    ev = p.evaluate
    sub = 10  # episodes per category timed (the stage batches all of a pass's episodes: linear in the batch)
    net = T.build("diffusion", Normalizer(np.zeros(3), np.ones(3), np.zeros(T.LOW_DIM), np.ones(T.LOW_DIM)), p.policy)
    eps = lambda: [ep for cat in p.categories for ep in make_episodes(cat, sub, _key(0, EVAL_STREAM, cat), phys)]  # noqa: E731
    T.rollout(net, eps(), 2, p.policy, 0)  # warm-up
    base = rss_mb()
    c0 = cpu_seconds()
    T.rollout(net, eps(), ev["max_steps"], p.policy, 0)
    s = cpu_seconds() - c0
    scale = ev["episodes"] / sub
    passes = 4  # both demonstration kinds, each with fresh and with fixed noise (diffusion: the costlier policy)
    return {"peak_mb": base + (peak_mb() - base) * scale, "single_thread": False,
            "unit": f"pass over {len(p.categories)} categories x {ev['episodes']} episodes x {ev['max_steps']} steps "
                    f"(diffusion, {p.policy['inference_steps']} denoising steps)", "seconds": s * scale,
            "units": passes,
            "how": f"papers.adamanip.train.rollout of an untrained diffusion policy at the full policy config (never "
                   f"succeeds: all {ev['max_steps']} steps, an upper bound) on {sub} episodes per category ({s:.1f} "
                   f"CPU-s), x {ev['episodes']}/{sub} (linear in the batch); x {passes} passes (2 kinds x fresh/fixed "
                   "noise); one job = one policy and seed"}


@unit("flexpert_train", "gpu")
def _flexpert_train(cfg):
    """papers.flexpert.train's loops as the stage calls them (train_predictor for the five predictor arms,
    pretrain_designer, finetune_designer for the three designer arms), each at 1 and 2 steps on chains longer than
    the crop (so every step has the full crop), the per-step cost x the full step counts."""
    import numpy as np

    from papers.flexpert import model as M
    from papers.flexpert import train as T

    f = cfg["flexpert"]
    lm, pr, ds = dict(f["lm"]), dict(f["predictor"]), dict(f["design"])
    rng = np.random.default_rng(0)
    L = max(pr["crop"], ds["crop"]) + 50
    chains = [{"sequence": "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), L)),
               "coords": np.cumsum(rng.normal(size=(L, 3)), 0).astype(np.float32) * 1.5,
               **{k: rng.normal(size=L).astype(np.float32) for k in ("target", "anm", "target_flex")}}
              for _ in range(16)]
    lm_state = M.ProteinLM(lm["d_model"], lm["layers"], lm["heads"]).state_dict()

    counted = []  # FLOPs of one step of each loop, in the order `per` is called (counted apart from the timing)

    def per(call):
        times = {}
        for steps in (1, 2):
            c0 = cpu_seconds()
            call(steps)
            times[steps] = cpu_seconds() - c0
        counted.append(step_flops(lambda: call(2)) - step_flops(lambda: call(1)))
        return times[2] - times[1]

    seq = per(lambda n: T.train_predictor(chains, lm_state, lm, {**pr, "steps": n}, False, 0))
    three_d = per(lambda n: T.train_predictor(chains, lm_state, lm, {**pr, "steps": n}, True, 0))
    pre = per(lambda n: T.pretrain_designer(chains, {**ds, "pretrain_steps": n}, 0))
    flex_model = T.make_predictor(lm_state, lm, pr, True)
    base = T.pretrain_designer(chains, {**ds, "pretrain_steps": 1}, 0)
    fine = per(lambda n: T.finetune_designer(base, chains, {**ds, "finetune_steps": n}, 0, ds["flex_weight"], True,
                                             flex_model))
    total = (3 * seq + 2 * three_d) * pr["steps"] + pre * ds["pretrain_steps"] + 3 * fine * ds["finetune_steps"]
    f_seq, f_3d, f_pre, f_fine = counted
    flops = (3 * f_seq + 2 * f_3d) * pr["steps"] + f_pre * ds["pretrain_steps"] + 3 * f_fine * ds["finetune_steps"]
    return {"unit": "the job (5 predictor arms, the designer's pretraining and 3 fine-tunings)", "seconds": total,
            "units": 1, "flops": flops,
            "how": f"papers.flexpert.train.train_predictor (seq {seq:.2f} s, 3d {three_d:.2f} s per step at batch "
                   f"{pr['batch']} x crop {pr['crop']}), pretrain_designer ({pre:.2f} s) and finetune_designer (steered, "
                   f"{fine:.2f} s; batch {ds['batch']} x crop {ds['crop']}) timed (2 steps - 1) on chains longer than the "
                   f"crops; x (3 seq + 2 3d arms) x {pr['steps']} + {ds['pretrain_steps']} + 3 arms x "
                   f"{ds['finetune_steps']} steps (predictions and designs left out); FLOPs of each loop's step by torch's counter (2 steps - 1); one job = one seed"}


# ---- issue 54 item 4, third round: rules measured after their papers' edits ------------------------------------------
def _steps_every(run, timed: int, evals: int, steps: int):
    """CPU-s of a run of `steps` steps with `evals` validations, from run(n, every) at `timed` steps with the validation
    every step and at 2 x `timed` steps with it every 2 (the same `timed` validations): the difference is `timed`
    steps; the rest of the first run (set-up, outputs, `timed` validations) is counted as validations and scaled by
    evals / timed (an upper bound: the set-up scaled too). Returns (total, per step, rest of the first run, peak MB)."""
    c0 = cpu_seconds()
    run(timed, 1)
    t1 = cpu_seconds() - c0
    m1 = peak_mb()
    c0 = cpu_seconds()
    run(2 * timed, 2)
    t2 = cpu_seconds() - c0
    per = max(t2 - t1, 0.0) / timed
    rest = max(t1 - per * timed, 0.0)
    return rest * max(evals, timed) / timed + per * steps, per, rest, m1


@unit("symspace_train", "train")
def _symspace_train(cfg):
    """papers.symspace.stages.train's inner calls for job 0 at the full scale's shapes, on stand-ins of prepare's real
    EEG (BCIC-IV-2a: 22 channels, 288 trials per session, 4 classes) as random SPD window covariances: one subject's
    claim (b) heads (papers.symspace.train.heads_task, head_inits initialisations, the permuted control, the
    ceilings) and claim (e) networks (attention_task), and one seed's positive control (planted_spd_task), each at 4
    and 8 steps with the validation every 1 and 2 steps; x the job's subjects and planted seeds. (The whole stage at
    4 and 8 steps ran over 400 s of wall time here before it was stopped.)"""
    import copy

    import numpy as np
    import torch

    from papers.symspace import train as T
    from papers.symspace.params import parse

    s = cfg["symspace"]
    p = parse(s)
    t = p.train
    subjects, C, N, classes = 9, 22, 288, 4  # BCIC-IV-2a (params.py: 22 channels, 4 classes, 9 subjects)
    W = p.eeg["windows"]
    rng = np.random.default_rng(0)

    def session():
        a = rng.normal(size=(N, W, C, 2 * C))
        tokens = a @ a.transpose(0, 1, 3, 2) / (2 * C) + 1e-3 * np.eye(C)
        return (torch.as_tensor(tokens, dtype=torch.float64),
                torch.as_tensor(np.repeat(np.arange(classes), N // classes), dtype=torch.long))

    (xtr, ytr), (xte, yte) = session(), session()

    def params(steps, every):
        c = copy.deepcopy(s)
        c["train"] = {**c["train"], "steps": steps, "attention_steps": steps, "eval_every": every}
        return parse(c)

    calls = {
        "heads": lambda n, e: T.heads_task("eeg:x", 0, 0, xtr.mean(1), ytr, xte.mean(1), yte, params(n, e), 0,
                                           np.random.default_rng([0, 4]), controls=True, inits=t["head_inits"],
                                           ceiling=True),
        "attention": lambda n, e: T.attention_task("eeg:x", 0, 0, xtr, ytr, xte, yte, params(n, e), 0,
                                                   np.random.default_rng([0, 6])),
        "planted": lambda n, e: T.planted_spd_task(0, params(n, e), C),
    }
    evals = t["steps"] // t["eval_every"]
    timed = 4  # validations timed (params: steps >= 4 x eval_every; the rest counted as validations: an upper bound)
    cost, parts, m = {}, {}, 0.0
    for name, call in calls.items():
        steps = t["attention_steps"] if name == "attention" else t["steps"]
        cost[name], per, rest, m1 = _steps_every(call, timed, evals, steps)
        parts[name] = f"{name} {per:.2f} s/step + {rest:.1f} s rest"
        m = max(m, m1)
    planted = len(range(0, min(p.spd_planted["seeds"], p.head_seeds), p.seeds))
    total = subjects * (cost["heads"] + cost["attention"]) + planted * cost["planted"]
    return {"peak_mb": m, "unit": f"the job (seed 0: {subjects} subjects' heads and attention networks, "
                                  f"{planted} planted-SPD seeds)", "seconds": total, "units": 1,
            "how": f"papers.symspace.train.heads_task / attention_task on one stand-in subject (random SPD window "
                   f"covariances, {N} trials x {W} windows x {C} x {C} per session: BCIC-IV-2a's sizes) and "
                   f"planted_spd_task on one seed, each at {timed} and {2 * timed} steps with the validation every 1 "
                   f"and 2 ({'; '.join(parts.values())}; the rest x {evals}/{timed} validations, an upper bound), x "
                   f"{t['steps']} steps; x {subjects} subjects + {planted} planted seeds (job 0); the digits "
                   f"(5 x 5 region covariances) left out; one job = one seed"}


@unit("symspace_tree", "train")
def _symspace_tree(cfg):
    """papers.symspace.stages.tree (the stage itself) on prepare's trees (papers.symspace.data.noisy_tree, the full
    depth and seeds), at 1 and 2 steps per validation (the full run's validation count kept): the difference the
    per-step cost, x tree_steps."""
    import copy
    import pickle
    import tempfile

    from papers.symspace import data as D
    from papers.symspace import stages
    from papers.symspace.params import parse

    s = cfg["symspace"]
    p = parse(s)
    t = p.train
    evals = t["tree_steps"] // t["eval_every"]
    with tempfile.TemporaryDirectory() as tmp:
        with open(f"{tmp}/data.pkl", "wb") as fh:
            pickle.dump({"tree": {seed: D.noisy_tree(p.tree, seed) for seed in range(p.tree["seeds"])}}, fh)

        def run(steps, every):
            c = copy.deepcopy(s)
            c["train"] = {**c["train"], "tree_steps": steps, "eval_every": every}
            stages.tree(cfg=c, data=f"{tmp}/data.pkl", accuracies=f"{tmp}/a.parquet")

        timed = 40  # validations timed (each run's set-up and outputs counted as validations: an upper bound)
        total, per, rest, m1 = _steps_every(run, timed, evals, t["tree_steps"])
    return {"peak_mb": m1, "unit": f"the job ({p.tree['seeds']} tree seeds x {t['restarts']} restarts side by side, "
                                   f"{t['tree_steps']} steps)", "seconds": total, "units": 1,
            "how": f"papers.symspace.stages.tree on prepare's noisy trees (depth {p.tree['depth']}, {p.tree['seeds']} "
                   f"seeds, {p.tree['planted_seeds']} planted), run at {timed} and {2 * timed} steps with the "
                   f"validation every 1 and 2 steps: {per:.3f} CPU-s per step of every head x tree_steps "
                   f"{t['tree_steps']}, the first run's rest ({rest:.0f} s: set-up, outputs, {timed} validations) "
                   f"counted as validations x {evals}/{timed} (an upper bound); one job"}


@unit("cbplm_evaluate", "gpu")
def _cbplm_evaluate(cfg):
    """papers.cbplm.stages.evaluate's calls (papers.cbplm.evaluate: perplexity, predicted_concepts, attribution,
    regenerate) on CB-pLM at the full width (papers.cbplm.train.build, random weights: a stand-in of the trained
    checkpoint) and 2 random max_length sequences, each timed and FLOP-counted, x the number of calls the stage
    makes per held-out and per intervened sequence, x the full held-out split and intervention count. (The whole
    stage on even 1-2 sequences runs over 60 CPU-s here: ~70 forward passes per intervened sequence.)"""
    import numpy as np
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from papers.cbplm import evaluate as E
    from papers.cbplm.params import parse
    from papers.cbplm.stages import SWEPT
    from papers.cbplm.train import build

    p = parse(cfg["cbplm"])
    names = list(p.concepts)
    rng = np.random.default_rng(0)
    aa = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    k = 2
    seqs = np.array(["".join(rng.choice(aa, p.max_length)) for _ in range(k)], dtype=object)
    z = rng.normal(size=(k, len(names))).astype(np.float32)
    bins = rng.integers(0, p.tag_bins, (k, len(names)))
    torch.manual_seed(0)
    model = build("cb", p).eval()
    masks = E.residue_masks([len(s) for s in seqs], p.train.mask_prob, rng)
    attr = E.attribution(model, seqs, 0)
    edit = E.edit_masks(attr, p.intervention.edit_fraction, +1)
    gen = torch.Generator().manual_seed(0)
    calls = {"perplexity": lambda: E.perplexity(model, "cb", seqs, z, bins, masks, p.tag_bins),
             "predicted_concepts": lambda: E.predicted_concepts(model, seqs),
             "attribution": lambda: E.attribution(model, seqs, 0),
             "regenerate": lambda: E.regenerate(model, "cb", seqs, bins, edit, p.tag_bins, gen,
                                                p.intervention.temperature, concept=0, target=1.0, z=z)}
    sec, flops = {}, {}
    for name, call in calls.items():
        sec[name] = per_step(call, 1) / k
        with FlopCounterMode(display=False) as counter:
            call()
        flops[name] = float(counter.get_total_flops()) / k
    runs = len(p.train.sweep) + 1  # CB-pLM's sweep runs and its full run
    # per held-out sequence: perplexity of the 4 models and the tag / conditional LMs' shuffled handles (6), the
    # sweep's runs' perplexity, and every CB-pLM run's true / shuffled-concept perplexities and concept R^2
    n_calls = {"perplexity": 6 + len(p.train.sweep) * len(SWEPT) + 2 * runs, "predicted_concepts": runs,
               "attribution": 0, "regenerate": 0}
    # per intervened sequence: CB-pLM's attribution per concept; 6 arms x concepts x 2 directions regenerated
    iv_calls = {"attribution": len(names), "regenerate": 6 * len(names) * 2}
    n_test = int(round(p.max_sequences * p.test_fraction))
    n_iv = min(p.intervention.sequences, n_test)
    count = {c: n_calls.get(c, 0) * n_test + iv_calls.get(c, 0) * n_iv for c in calls}
    total = sum(sec[c] * count[c] for c in calls)
    return {"flops": sum(flops[c] * count[c] for c in calls),
            "unit": f"the job ({n_test} held-out sequences, {n_iv} intervened)", "seconds": total, "units": 1,
            "how": f"papers.cbplm.evaluate's calls on CB-pLM at the full width (random weights: stand-in checkpoint), "
                   f"{k} random {p.max_length}-residue sequences, per sequence: "
                   + ", ".join(f"{c} {sec[c]:.2f} s x {count[c]}" for c in calls)
                   + f" calls (per held-out sequence of {n_test}: {n_calls['perplexity']} perplexities, "
                   f"{n_calls['predicted_concepts']} concept predictions; per intervened one of {n_iv}: "
                   f"{iv_calls['attribution']} attributions, {iv_calls['regenerate']} regenerations); every model's "
                   f"calls at CB-pLM's cost (same encoder); FLOPs by torch's counter on the same calls; one job = "
                   "one seed"}


@unit("sharpening_sharpen", "train")
def _sharpening_sharpen(cfg):
    """papers.sharpening.stages.sharpen (the stage itself, each method) on stand-ins of its inputs: prepare's prompts
    (stages.prepare at the full config but a small corpus: the prompts are drawn first, so they are the full run's)
    cut to the first n train and test prompts per variant, and a checkpoint of one base model (papers.common.gpt at
    the full model config, random weights; the stage loops over the checkpoint's models). Run at two prompt counts:
    the cost linear in the prompts (both splits scaled together), x the full prompts, x pretrain.seeds models."""
    import copy
    import dataclasses
    import tempfile

    import torch

    from papers.common.gpt import GPT, GPTConfig
    from papers.common.io import read_parquet, write_parquet
    from papers.common.params import to_dict
    from papers.sharpening import stages, task
    from papers.sharpening.params import METHODS, parse

    s = cfg["sharpening"]
    p = parse(s)
    tk = p.task
    n1, n2 = 8, 16
    per, fixed, peaks = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        small = copy.deepcopy(s)
        small["task"] = {**small["task"], "pretrain_examples": 2000}
        stages.prepare(cfg=small, corpus=f"{tmp}/corpus.parquet", prompts=f"{tmp}/prompts_all.parquet")
        prompts = read_parquet(f"{tmp}/prompts_all.parquet")
        torch.manual_seed(0)
        cfg_model = GPTConfig(vocab_size=task.vocab_size(tk.alphabet), block_size=2 * tk.max_len, **to_dict(p.model))
        torch.save({"config": dataclasses.asdict(cfg_model), "models": [GPT(cfg_model).state_dict()],
                    "params": to_dict(p)}, f"{tmp}/base.pt")
        for method in METHODS:
            def run(n, method=method):
                write_parquet(prompts.groupby(["variant", "split"], sort=False).head(n).reset_index(drop=True),
                              f"{tmp}/prompts.parquet")
                stages.sharpen(cfg=s, method=method, checkpoint=f"{tmp}/base.pt", prompts=f"{tmp}/prompts.parquet",
                               results=f"{tmp}/r.parquet")

            t1, k, m1, _ = _linear(run, n1, n2)
            per[method], fixed[method], peaks[method] = k, t1 - k * n1, m1
    n_full = max(tk.train_prompts, tk.test_prompts)
    seeds = p.pretrain.seeds
    cost = {m: seeds * (fixed[m] + per[m] * n_full) for m in per}
    method = max(cost, key=cost.get)
    return {"peak_mb": max(peaks.values()), "unit": f"the job ({method}: {seeds} base models x {len(p.variants)} "
                                                    f"variants, {n_full} prompts per split)",
            "seconds": cost[method], "units": 1,
            "how": f"papers.sharpening.stages.sharpen on prepare's prompts cut to {n1} and {n2} per variant and split "
                   f"and one base model of the full config (random weights): "
                   + "; ".join(f"{m} {fixed[m]:.1f} s + {per[m]:.2f} s per prompt" for m in per)
                   + f" (linear in the prompts), x {n_full} prompts, x {seeds} base models; the costlier method; one "
                   "job = one method"}


@unit("infoprop_evaluate", "train")
def _infoprop_evaluate(cfg):
    """papers.infoprop.stages.evaluate (the stage itself) on stand-ins of its inputs at the full shapes: prepare's
    npz (125 x 1000 logged HalfCheetah-sized transitions, random; the rollout policy; true continuations of samples x
    horizon per start, random) with 4 and 8 start states, and a checkpoint of the full ensemble (papers.infoprop.model
    .GaussianEnsemble at the full model config, random weights); the cost linear in the starts, x rollout.starts."""
    import copy
    import tempfile

    import numpy as np
    import torch

    from papers.infoprop import stages
    from papers.infoprop.model import GaussianEnsemble
    from papers.infoprop.params import parse

    c0 = cfg["infoprop"]
    p = parse(c0)
    r, m = p.rollout, p.model
    obs, act = 17, 6  # HalfCheetah-v5
    n_train = p.data["train_episodes"] * p.data.get("episode_steps", 1000)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        net = GaussianEnsemble(obs + act, obs + 1, m["ensemble"], m["hidden"], m["layers"], m["learn_logvar_bounds"])
        torch.save({"state_dict": net.state_dict(), "d_in": obs + act, "d_out": obs + 1, "members": net.ensemble,
                    "model": dict(m), "seed": 0}, f"{tmp}/model.pt")
        train = {k: rng.normal(size=(n_train, obs)) for k in ("obs", "next_obs")}
        train["act"] = rng.uniform(-1, 1, (n_train, act))
        train["rew"] = rng.normal(size=n_train)
        w = rng.normal(size=(act, obs)) / np.sqrt(obs)

        def run(k):
            np.savez(f"{tmp}/data.npz", w=w, w_rollout=w[None], shifts=np.zeros(1), starts=rng.normal(size=(k, obs)),
                     true_states=rng.normal(size=(1, k, r["samples"], r["horizon"], obs)),
                     true_alive=np.ones((1, k, r["samples"], r["horizon"]), dtype=bool),
                     **{f"train_{key}": v for key, v in train.items()})
            c = copy.deepcopy(c0)
            c["rollout"] = {**c["rollout"], "starts": k}
            stages.evaluate(cfg=c, seed="0", data=f"{tmp}/data.npz", model=f"{tmp}/model.pt",
                            curves=f"{tmp}/c.parquet", cuts=f"{tmp}/x.parquet")

        t1, k, m1, dm = _linear(run, 4, 8)
    fixed = t1 - 4 * k
    return {"peak_mb": m1 + dm * (r["starts"] - 4),
            "unit": f"the job ({r['starts']} starts x {r['samples']} samples x {r['horizon']} steps, 3 schemes)",
            "seconds": fixed + k * r["starts"], "units": 1,
            "how": f"papers.infoprop.stages.evaluate on stand-ins (random npz of prepare's full shapes: {n_train} "
                   f"transitions, true continuations {r['samples']} x {r['horizon']} per start; the full ensemble "
                   f"{m['ensemble']} x {m['layers']} x {m['hidden']}, random weights) at 4 and 8 starts: {fixed:.0f} s "
                   f"+ {k:.2f} s per start (linear), x {r['starts']} starts; memory likewise; one job = one seed"}


@unit("sam_late_evaluate", "gpu")
def _sam_late_evaluate(cfg):
    """papers.sam_late.evaluate.evaluate_runs' calls per network, each timed and FLOP-counted at batch 8 on VGG-16-BN
    (papers.sam_late.train.new_model, random weights: a stand-in of a trained state) and scaled to the images it
    reads: the train / test loss and accuracy (a forward pass of every image), the Lanczos Hessian (lanczos_iters
    Hessian-vector products on hessian_samples images, papers.common.hessian.hvp), PGD robust accuracy (attack.steps
    input gradients and a forward of every test image, papers.sam_late.sam.pgd), and the loss lines (interpolation
    points x interpolation_samples forwards per line); x the networks and lines the stage evaluates."""
    import torch

    from papers.common.hessian import hvp
    from papers.sam_late.params import ADV_ARMS, SAM_ARMS, parse
    from papers.sam_late.sam import pgd
    from papers.sam_late.train import new_model

    p = parse(cfg["sam_late"])
    model = new_model(p, 0, "cpu").eval()
    B = 8
    x, y = torch.rand(B, 3, 32, 32), torch.randint(0, 10, (B,))
    params = [w for w in model.parameters() if w.requires_grad]
    vec = [torch.randn_like(w) for w in params]
    loss_fn = lambda: torch.nn.functional.cross_entropy(model(x), y)  # noqa: E731

    def forward():
        with torch.no_grad():
            model(x)

    calls = {"forward": forward, "hvp": lambda: hvp(loss_fn, params, vec),
             "pgd_step": lambda: pgd(model, x, y, epsilon=p.attack.epsilon, step_size=p.attack.step_size, steps=1,
                                     random_start=False)}
    def input_gradient():  # a PGD step's matmuls (pgd's leaf input trips torch's FLOP counter: a non-leaf here)
        x_in = x.clone().requires_grad_(True) * 1.0
        torch.autograd.grad(torch.nn.functional.cross_entropy(model(x_in), y), x_in)

    sec, flops = {}, {}
    for name, call in calls.items():
        sec[name] = per_step(call, 2) / B
        flops[name] = step_flops(input_gradient if name == "pgd_step" else call) / B
    n_train, n_test = p.data.train_size, p.data.test_size
    per_net = {"forward": n_train + 2 * n_test, "hvp": p.lanczos_iters * p.hessian_samples,
               "pgd_step": p.attack.steps * n_test}
    # networks: SGD; at the main rho SAM's arms, the extra late and early arms; SAM and late SAM at each other rho;
    # the adversarial arms; each on every seed (clean labels: the full scale's conditions)
    nets = p.seeds * (1 + len(SAM_ARMS) + len(p.late_ks) + len(p.early_ks) + 2 * (len(p.rhos) - 1) + len(ADV_ARMS))
    lines = p.seeds * (len(p.rhos) + 1 + 1)  # late SAM at each rho, late AT, the matched-distance control
    per_line = p.interpolation_points * p.interpolation_samples
    total = sum(sec[c] * per_net[c] for c in calls) * nets + sec["forward"] * per_line * lines
    total_flops = sum(flops[c] * per_net[c] for c in calls) * nets + flops["forward"] * per_line * lines
    data_mb = (n_train + n_test) * 3 * 32 * 32 * 4 / 2**20  # the images as float32 tensors (load_tensors)
    return {"peak_mb": peak_mb() + data_mb, "flops": total_flops,
            "unit": f"the job ({nets} networks, {lines} loss lines)", "seconds": total, "units": 1,
            "how": f"VGG-16-BN (random weights: stand-in of a trained state) at batch {B}, CPU-s per image: forward "
                   f"{sec['forward']:.4f}, Hessian-vector product {sec['hvp']:.4f}, PGD step {sec['pgd_step']:.4f}; "
                   f"per network {per_net['forward']} forwards (train, test, robust accuracy's final pass), "
                   f"{p.lanczos_iters} x {p.hessian_samples} HVPs, {p.attack.steps} x {n_test} PGD steps; x {nets} "
                   f"networks; + {lines} lines x {p.interpolation_points} points x {p.interpolation_samples} "
                   f"forwards; FLOPs by torch's counter on the same calls; memory + the {data_mb:.0f} MB of images; "
                   "the Hessian on the job's device (papers.sam_late.evaluate)"}


# ---- not measured: the train/gpu rules without an entry, and why (they keep their kind's values, or their paper's
# own runtime estimate); tests/workflow/test_job_estimates.py checks that every train/gpu rule is measured or here.
UNMEASURED = {
    # papers other sessions were editing while these were measured (their stage code was changing)
    "eagle_pretrain": "at the full scale the stage trains nothing: it loads each pretrained expert and the 7B LM once "
                      "(papers.eagle.llava.describe), none of which is here; its cost is reading ~19 GB of weights "
                      "(the LM in bfloat16 and one fp32 expert resident at a time: over ~17 GB of memory)",
    "orion_evaluate_pretrained": "a user's pretrained LM (orion.pretrained), none here; and orion was being edited",
    # no job at the full scale
    "eagle_train_seed": "with eagle.llava set every arm trains in an eagle_train job of its own (issue 54); only the "
                        "synthetic scales train a seed's shared arms in one job, CPU-minutes",
    # the paper's own estimate of its jobs' wall time (job_resources(kind, runtime=...)), from its own work count
    "sbdd_vs_generate": "the paper's own estimate (papers.sbdd_vs.params.job_minutes)",
    "sbdd_vs_dock": "the paper's own estimate (papers.sbdd_vs.params.job_minutes)",
    "sbdd_vs_evaluate": "the paper's own estimate (papers.sbdd_vs.params.job_minutes)",
    # a user's pretrained LLM (nothing downloaded): nothing to time here
    "hip_evaluate_pretrained": "a user's pretrained long-context LLM (hip.pretrained), none here",
    "sharpening_pretrained": "a user's pretrained causal LM (sharpening.pretrained), none here",
    # over ~60 CPU-s for one measurement here, or inputs only earlier stages make (not done in this round)
    "hip_evaluate": "the full-width GPT at 2k-8k tokens over the eval grid (depths x keys x prompts x widths): one "
                    "full-length forward is minutes on this CPU; FLOP count not yet written",
    "hip_cost": "attention at up to 131,072 tokens (hip.cost): one dense step there is far over 60 CPU-s here",
    "profilebfn_evaluate": "sampling the 650M-parameter network (500 steps x 1000 sequences): no full-width forward fits "
                           "in ~60 CPU-s here; as profilebfn_train, a FLOP count would be needed",
    "neural_fdm_evaluate": "the stage (papers.neural_fdm.evaluate.evaluate) on prepare's targets and full-size "
                           "checkpoints, run with direct.shapes 1 and 2 per task (direct optimisation at maxiter "
                           "5000), ran over 130 CPU-s here before it was stopped: over this round's ~60 CPU-s",
    "deepgate4_train": "its cost follows the user's netlists (node counts of the ITC99/EPFL circuits, not here)",
    "deepgate4_evaluate": "its cost follows the user's netlists (not here)",
    "deepgate4_scaling": "its cost follows the user's netlists (not here)",
    "infoprop_dyna": "each round refits the model on all real steps so far (cost quadratic in real_steps): a few "
                     "rounds cannot be extrapolated, and the full run is far over 60 CPU-s",
}


# ---- the run ---------------------------------------------------------------------------------------------------------
def measure_one(rule: str) -> dict:
    """Run in the child: the measurement of `rule`, with its peak RSS."""
    import torch

    torch.set_num_threads(1)
    kind, fn = MEASURE[rule]
    w0, c0 = time.perf_counter(), cpu_seconds()
    out = fn(merged_config())
    return {"peak_mb": peak_mb(), **out, "rule": rule, "kind": kind, "measure_cpu_s": cpu_seconds() - c0,
            "measure_wall_s": time.perf_counter() - w0}


def estimate(row: dict, kinds: dict, gpu_tflops: float) -> dict:
    """Minutes and MB of one job's first attempt, from a child's measurement."""
    spec = kinds[row["kind"]]
    cpu_min = row["seconds"] * row["units"] / 60
    factor = 1.0 if row.get("single_thread") else spec["threads"] * THREAD_EFFICIENCY
    if row["kind"] == "gpu":  # the job's FLOPs at the GPU's assumed sustained rate
        gpu_min = row["flops"] * row["units"] / (row.get("gpu_tflops", gpu_tflops) * 1e12) / 60
        factor = max(1.0, cpu_min / gpu_min)  # never slower than the CPU
    minutes = cpu_min / factor
    runtime = max(RUNTIME_FLOOR, math.ceil(minutes * SAFETY))
    cap = spec.get("max_runtime")
    fits = cap is None or runtime <= cap
    mem = max(MEM_FLOOR_MB, int(math.ceil(row["peak_mb"] * SAFETY / 100) * 100))
    fits = fits and (spec.get("max_mem_mb") is None or mem <= spec["max_mem_mb"])
    return {**row, "cpu_minutes": cpu_min, "factor": factor, "estimate_minutes": minutes, "runtime": runtime,
            "mem_mb": mem, "fits": fits}


def yaml_block(rows: list[dict]) -> str:
    """The config block: one line per rule measured (this run's rows and, after a partial run, the CSV's others)."""
    lines = [BEGIN,
             f"# Measured by scripts/estimate_full_jobs.py (safety x{SAFETY}; train jobs: CPU time / (threads x "
             f"{THREAD_EFFICIENCY:g}); gpu jobs: FLOPs at {GPU_TFLOPS:g} TFLOP/s); see",
             "# config/full_estimates.csv for each rule's unit, measurement and extrapolation. An entry above its kind's",
             "# max_runtime is what the job needs, not a request a partition grants: that rule needs a split (README).",
             "job_estimates:"]
    for r in sorted(rows, key=lambda r: r["rule"]):
        fits = r["fits"] in (True, "True")
        note = "" if fits else "  # does not fit the kind's max_runtime / max_mem_mb: split it"
        lines.append(f"  {r['rule']}: {{runtime: {int(r['runtime'])}, mem_mb: {int(r['mem_mb'])}}}{note}")
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_config(block: str) -> None:
    """Replace the block between the markers in config/full.yaml (append it where there is none)."""
    path = ROOT / "config" / "full.yaml"
    text = path.read_text()
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END + "\n", 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", help="comma-separated rules (default: every rule measured here)")
    ap.add_argument("--out", default=str(ROOT / "config" / "full_estimates.csv"))
    ap.add_argument("--gpu-tflops", type=float, default=GPU_TFLOPS, help="sustained fp32 rate of the GPU (TFLOP/s)")
    ap.add_argument("--write-config", action="store_true", help="replace config/full.yaml's job_estimates block")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure_one(args.child)))
        return
    rules = args.rules.split(",") if args.rules else sorted(MEASURE)
    kinds = merged_config()["resources"]
    rows = []
    for rule in rules:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        done = subprocess.run(["nice", "-n", "10", sys.executable, __file__, "--child", rule], capture_output=True,
                              text=True, env=env, cwd=ROOT)
        if done.returncode:
            print(f"{rule}: measurement failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        row = estimate(json.loads(done.stdout.strip().splitlines()[-1]), kinds, args.gpu_tflops)
        rows.append(row)
        print(f"{rule} ({row['kind']}): {row['seconds']:.3g} s/unit x {row['units']:.3g} = {row['cpu_minutes']:.0f} "
              f"CPU-min / {row['factor']:.3g} -> {row['runtime']} min{'' if row['fits'] else ' (DOES NOT FIT)'}, "
              f"{row['mem_mb']} MB (measured in {row['measure_cpu_s']:.0f} CPU-s, {row['measure_wall_s']:.0f} s wall)",
              file=sys.stderr)
    cols = ["rule", "kind", "unit", "seconds", "flops", "units", "cpu_minutes", "factor", "estimate_minutes", "peak_mb",
            "runtime", "mem_mb", "fits", "how", "measure_cpu_s", "measure_wall_s"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    out_rows = [{k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
    if args.rules and Path(args.out).exists():  # a partial remeasurement keeps the other rules' rows
        with open(args.out, newline="") as f:
            done = {r["rule"] for r in rows}
            out_rows += [r for r in csv.DictReader(f) if r["rule"] not in done]
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, cols, extrasaction="ignore")
        w.writeheader()
        for r in sorted(out_rows, key=lambda r: r["rule"]):
            w.writerow(r)
    block = yaml_block(out_rows)
    print(block)
    if args.write_config:
        write_config(block)


if __name__ == "__main__":
    main()
