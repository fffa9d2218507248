"""Print the measured CPU cost per simulated step of a full-scale bodygen train job and the minutes it derives.

    .venv/bin/python workflow/papers/bodygen/time_full_scale.py [--task crawler] [--arm bodygen] [--samples 2000]
                                                               [--threads 1] [--margin 1.5]

Reads bodygen's section of config/config.yaml with config/full.yaml over it (what a full-scale run trains), times one
PPO iteration (papers.bodygen.timing.step_cost) and prints the per-step CPU cost (rollouts and update apart), the
wall time per step, and train_minutes for the full scale's env_steps (papers.bodygen.timing.train_minutes) and for one
of its bodygen.train_parts chained jobs, beside the train_minutes (per part) config/full.yaml asks for. About samples
x 13 ms of CPU at the defaults (~30 s).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "workflow"))


def main(argv=None) -> dict:
    import yaml

    from papers.bodygen.timing import merged_config, step_cost, train_minutes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="crawler", help="the task timed (full scale: the paper's ten; default crawler)")
    ap.add_argument("--arm", default="bodygen")
    ap.add_argument("--samples", type=int, default=2000, help="simulated control steps in the timed iteration")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the full scale's train jobs: the train kind's)")
    ap.add_argument("--margin", type=float, default=1.5, help="factor on the measured time (grown bodies, machines)")
    args = ap.parse_args(argv)
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["bodygen"]
    full = yaml.safe_load((ROOT / "config" / "full.yaml").read_text())["bodygen"]
    cfg = merged_config(base, full)
    cost = step_cost(cfg, task=args.task, arm=args.arm, samples=args.samples, threads=args.threads)
    steps, parts = int(cfg["ppo"]["env_steps"]), int(cfg.get("train_parts", 1))
    # one thread: CPU time is wall time; on more, the wall time of the timed iteration
    minutes = train_minutes(cost["ms_per_step" if args.threads == 1 else "wall_ms_per_step"], steps, args.margin)
    print(f"bodygen full scale, {cost['arm']} on {cost['task']}: model {cost['model']}, {cost['integrator']}, "
          f"{cost['epochs']} epochs, minibatch {cost['minibatch']}, {cost['threads']} thread(s), {cost['samples']} "
          "simulated control steps timed")
    print(f"CPU per simulated step: {cost['ms_per_step']:.2f} ms ({cost['rollout_ms_per_step']:.2f} ms rollouts, "
          f"{cost['update_ms_per_step']:.2f} ms PPO update); wall {cost['wall_ms_per_step']:.2f} ms")
    print(f"one run of {steps} steps: {steps * cost['ms_per_step'] / 3.6e6:.0f} h of CPU; {minutes} min on "
          f"{args.threads} thread(s) (x {args.margin:g}), {math.ceil(minutes / parts)} per part of {parts} "
          f"(bodygen.train_parts); config/full.yaml asks {cfg['train_minutes']} per part on the train kind's threads "
          "(scripts/estimate_full_jobs.py credits the update threads x 0.5, the rollouts none)")
    return {**cost, "env_steps": steps, "train_minutes": minutes, "train_parts": parts,
            "configured_minutes": cfg["train_minutes"]}


if __name__ == "__main__":
    main()
