"""Training of P17 profilebfn: BFN's continuous-time loss for discrete data on single sequences (ProfileBFN's
training with a sequence as a degenerate profile), resumable across chained jobs and data parallel over GPUs.

* Chained parts (``profilebfn.train_parts``, P): part k trains steps [k S / P, (k + 1) S / P) and saves the full
  state: the weights (and the untrained control's), AdamW's moments and step counts, the step, every RNG (python's,
  numpy's global one and the data generator, torch's global one and the flow's generator), the training pool's position
  (its draws so far and, when streaming, its row group) and the loss history. The learning rate is a closed form of the
  step (linear warm-up, cosine decay), so the step is the scheduler's whole state. Whole or in parts, the weights and
  the curve are the same bit for bit (tests/papers/test_profilebfn_split.py).
* Data parallel (``profilebfn.train.gpus`` = n > 1): the stage launches ``torchrun`` with n processes (NCCL on CUDA,
  gloo on the CPU). Every process draws the same union batch (sequences, t, flow noise: one data stream whatever n is)
  and trains on its own 1/n of the rows; DDP averages the gradients and each process's loss is normalised by the union
  batch's residue count x n, so the averaged gradient is the union batch's gradient, and the optimiser steps as one
  process on the whole batch would (to float rounding; tested with gloo on 2 CPU processes).
* Precision (``profilebfn.train.precision``): fp32, or the network under bf16 autocast (the flow, the softmax and
  the loss stay fp32).
* Device (``profilebfn.device``): cpu or cuda. Randomness is drawn on the CPU generators and moved, so the data
  stream is the same on either device; no CUDA random op is used (no dropout), hence no CUDA RNG state is kept.
"""
from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from papers.common.io import ensure_parent, write_parquet
from papers.common.seeding import seed_everything
from papers.profilebfn import bfn, data
from papers.profilebfn.model import ProfileBFNNet
from papers.profilebfn.params import parse

log = logging.getLogger(__name__)


def build_net(p) -> ProfileBFNNet:
    m = p.model
    return ProfileBFNNet(d_model=m.d_model, n_layer=m.n_layer, n_head=m.n_head, time_dim=m.time_dim)


class TrainingPool:
    """The training sequences, drawn at random. A file of at most `in_memory` rows is read whole; a larger one (the
    full scale's UniRef50) is read one Parquet row group at a time, a random group (weighted by its rows) every
    `refresh` batches, so that memory holds one group, never the whole set."""

    def __init__(self, path, rng: np.random.Generator, in_memory: int = 2_000_000, refresh: int = 50):
        import pyarrow.parquet as pq

        self.file, self.rng, self.refresh = pq.ParquetFile(str(path)), rng, refresh
        meta = self.file.metadata
        self.group_rows = np.array([meta.row_group(i).num_rows for i in range(meta.num_row_groups)], dtype=float)
        self.streaming = meta.num_rows > in_memory
        self.pool, self.drawn, self.group = [], 0, None
        if not self.streaming:
            self.pool = self._encode(self.file.read(columns=["sequence"]).column("sequence").to_pylist())

    @staticmethod
    def _encode(sequences) -> list[np.ndarray]:
        pool = [x[x >= 0] for x in map(data.encode_one, sequences)]
        return [x for x in pool if len(x)]

    def _load(self, group: int) -> None:
        self.group = group
        self.pool = self._encode(self.file.read_row_group(group, columns=["sequence"]).column("sequence").to_pylist())

    def sample(self, n: int) -> list[np.ndarray]:
        if self.streaming and self.drawn % self.refresh == 0:
            self._load(int(self.rng.choice(len(self.group_rows), p=self.group_rows / self.group_rows.sum())))
        self.drawn += 1
        return [self.pool[i] for i in self.rng.integers(0, len(self.pool), n)]

    def state(self) -> dict:
        """Where the pool stands (the draws come from the caller's generator, saved with it)."""
        return {"drawn": self.drawn, "group": self.group}

    def restore(self, state: dict) -> None:
        self.drawn = state["drawn"]
        if self.streaming and state["group"] is not None:
            self._load(state["group"])


def _batch(pool: TrainingPool, batch: int, crop: int, rng: np.random.Generator) -> torch.Tensor:
    """(B, crop) residue indices, GAP (-1) on padding: random sequences, each a random window."""
    x = np.full((batch, crop), data.GAP, dtype=np.int64)
    for b, s in enumerate(pool.sample(batch)):
        if len(s) > crop:
            start = rng.integers(0, len(s) - crop + 1)
            s = s[start:start + crop]
        x[b, : len(s)] = s
    return torch.from_numpy(x)


def part_range(steps: int, parts: int, part: int) -> tuple[int, int]:
    """Steps [start, stop) of chained part `part` of `parts`."""
    return steps * part // parts, steps * (part + 1) // parts


def learning_rate(tr, step: int) -> float:
    """Linear warm-up over tr.warmup steps, then cosine decay to 0 at tr.steps."""
    return tr.lr * min(1.0, (step + 1) / tr.warmup) * 0.5 * (1 + np.cos(np.pi * step / tr.steps))


def _rng_state(rng: np.random.Generator, g: torch.Generator) -> dict:
    return {"python": random.getstate(), "numpy_global": np.random.get_state(), "numpy": rng.bit_generator.state,
            "torch_global": torch.get_rng_state(), "flow": g.get_state()}


def _restore_rng(state: dict, rng: np.random.Generator, g: torch.Generator) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy_global"])
    rng.bit_generator.state = state["numpy"]
    torch.set_rng_state(state["torch_global"])
    g.set_state(state["flow"])


def _cpu(state_dict: dict) -> dict:
    return {k: v.detach().to("cpu").clone() for k, v in state_dict.items()}


def train_part(p, *, seed: int, part: int, training, resume=None, out=None, rank: int = 0, world: int = 1) -> dict:
    """Train steps part_range(steps, train_parts, part) of one seed from `resume` (the previous part's state; None for
    part 0) and return the state after them (written to `out` by rank 0 when given). `rank` of `world` processes
    (an initialised process group when world > 1) trains on its slice of every union batch."""
    tr = p.train
    device = torch.device(p.device if p.device == "cpu" or world == 1 else f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}")
    rng = seed_everything(seed)
    g = torch.Generator().manual_seed(seed)
    pool = TrainingPool(training, rng)
    net = build_net(p)
    init_state = {k: v.clone() for k, v in net.state_dict().items()}  # the untrained control's weights
    losses = []
    if resume is not None:
        state = torch.load(resume, map_location="cpu", weights_only=False, mmap=True)  # mapped: n processes share it
        if state["part"] != part - 1 or state["seed"] != seed:
            raise ValueError(f"{resume}: holds part {state['part']} of seed {state['seed']}, not part {part - 1} of {seed}")
        net.load_state_dict(state["model"])
        init_state, losses = state["untrained"], list(state["losses"])
    net.to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=tr.lr, weight_decay=tr.weight_decay)
    if resume is not None:
        opt.load_state_dict(state["optimizer"])
        pool.restore(state["pool"])
        _restore_rng(state["rng"], rng, g)
    model = net
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    lo, hi = rank * tr.batch // world, (rank + 1) * tr.batch // world  # this process's rows of the union batch
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=tr.precision == "bf16")
    start, stop = part_range(tr.steps, p.train_parts, part)
    if len(losses) != start:
        raise ValueError(f"{resume}: holds {len(losses)} steps, part {part} starts at step {start}")
    clock = time.perf_counter()
    for step in range(start, stop):
        # the union batch, drawn alike by every process (on the CPU generators), then this process's rows
        x = _batch(pool, tr.batch, tr.crop, rng)
        mask = x >= 0  # (B, crop)
        t = torch.rand(tr.batch, generator=g)  # (B,) t ~ U(0, 1), one per sequence
        e_x = torch.nn.functional.one_hot(x.clamp(min=0), data.K).float()  # a degenerate profile per sequence
        theta = bfn.flow(e_x, t, p.beta1, g)
        theta = torch.where(mask[..., None], theta, torch.full_like(theta, 1.0 / data.K))
        # union residues x world / world: DDP's mean of the processes' gradients is the union batch's gradient
        count = None if world == 1 else torch.tensor(max(int(mask.sum()), 1) / world, device=device)
        x, mask, t, theta = (v[lo:hi].to(device) for v in (x, mask, t, theta))
        with autocast:
            logits = model(theta, t, ~mask)
        e_hat = torch.softmax(logits.float(), dim=-1)
        loss = bfn.continuous_loss(x, e_hat, t, p.beta1, mask, count=count)
        for group in opt.param_groups:
            group["lr"] = learning_rate(tr, step)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), tr.grad_clip)
        opt.step()
        value = loss.detach()
        if world > 1:  # the union batch's loss: the mean of the processes' normalised losses
            torch.distributed.all_reduce(value)
            value = value / world
        losses.append(float(value))
        if step % 100 == 0:
            log.info("train/step %d loss %.4f (%.1f s)", step, losses[-1], time.perf_counter() - clock)
    state = {"seed": seed, "part": part, "step": stop, "model": _cpu(net.state_dict()), "untrained": init_state,
             "optimizer": opt.state_dict(), "losses": losses, "pool": pool.state(), "rng": _rng_state(rng, g),
             "world": world}
    if out is not None and rank == 0:
        torch.save(state, ensure_parent(out))
    return state


def write_outputs(p, state: dict, checkpoint, curve) -> None:
    """The last part's outputs, which evaluate and report read: the trained and untrained weights, the loss curve."""
    torch.save({"model": state["model"], "untrained": state["untrained"], "seed": state["seed"], "step": state["step"],
                "optimizer": state["optimizer"]}, ensure_parent(checkpoint))
    parameters = sum(x.numel() for x in build_net(p).parameters())
    write_parquet(pd.DataFrame({"seed": state["seed"], "step": np.arange(len(state["losses"])), "loss": state["losses"],
                                "parameters": parameters}), curve)


# ---- data parallel: the stage launches torchrun, each process runs _rank_main ---------------------------------------
def launch(cfg, *, seed: int, part: int, training, resume, out, world: int) -> dict:
    """Run train_part in `world` processes under torchrun (this job's GPUs, one process each) and return the state
    rank 0 wrote to `out`."""
    job = Path(str(out) + ".job")
    torch.save({"cfg": dict(cfg), "seed": seed, "part": part, "training": str(training),
                "resume": None if resume is None else str(resume), "out": str(out)}, ensure_parent(job))
    root = Path(__file__).resolve().parents[2]  # workflow/: the `papers` package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": str(max(1, torch.get_num_threads() // world))}  # the job's threads, shared
    streams = {}
    for name in ("stdout", "stderr"):  # the job's log (papers.common.runner redirects sys.stdout/stderr to it)
        try:
            getattr(sys, name).flush()
            streams[name] = getattr(sys, name).fileno()
        except (AttributeError, OSError, ValueError):  # a stream without a file (pytest's capture): inherit
            pass
    try:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
                        "-m", "papers.profilebfn.train", str(job)], check=True, env=env, **streams)
    finally:
        job.unlink(missing_ok=True)
    return torch.load(out, map_location="cpu", weights_only=False, mmap=True)


def _rank_main(job_path: str) -> None:
    job = torch.load(job_path, weights_only=False)
    p = parse(job["cfg"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if p.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.distributed.init_process_group("nccl" if p.device == "cuda" else "gloo")
    try:
        train_part(p, seed=job["seed"], part=job["part"], training=job["training"], resume=job["resume"],
                   out=job["out"], rank=rank, world=world)
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    _rank_main(sys.argv[1])
