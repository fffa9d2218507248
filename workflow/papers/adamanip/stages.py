"""The adamanip DAG's stages: prepare (demonstrations; per seed), train and evaluate (per policy and seed);
the report is papers.adamanip.report.

Each function takes its parameters and its input and output paths explicitly, so it runs under
Snakemake (workflow/rules/adamanip.smk) and in tests alike.

Seeds: a replicate's demonstrations, initialisation and evaluation episodes all derive from its seed
(numpy SeedSequence keys below), so replicates are independent and reruns identical. Every arm of a
seed meets the same evaluation episodes (paired comparisons).
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from papers.adamanip.env import CATEGORIES, make_episodes
from papers.adamanip.experts import KINDS, collect, random_primitive_success
from papers.adamanip.params import parse
from papers.common.io import write_parquet
from papers.common.seeding import seed_everything

log = logging.getLogger(__name__)

# SeedSequence keys: (seed, STREAM, category index in env.CATEGORIES, ...), so adding a category does
# not change another's draws.
DEMO_STREAM, EVAL_STREAM, REFERENCE_STREAM = 1, 2, 3


def _key(seed: int, stream: int, category: str, *more: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, stream, CATEGORIES.index(category), *more])


# ---- prepare -----------------------------------------------------------------------------------
def mechanism_of(ep) -> str:
    """The hidden mechanism of an episode, in words (for the table of where each arm fails)."""
    if ep.category == "lamp":
        return ep.hidden["mode"]
    if ep.category == "microwave":
        return "locked" if ep.hidden["locked"] else "unlocked"
    return "cw" if ep.hidden["direction"] < 0 else "ccw"


def prepare(*, cfg, seed: str, demos, stats, reference):
    """Collect one seed's one-go and adaptive demonstrations of every category (successes only), and run the
    random-primitive reference on the seed's evaluation episodes (the same episodes the policies meet)."""
    p = parse(cfg)
    seed = int(seed)
    seed_everything(seed)
    phys = p.physics_obj()
    arrays, rows = {}, []
    for cat in p.categories:
        for k, kind in enumerate(KINDS):
            eps, st = collect(cat, kind, p.demos["per_category"], p.demos["max_steps"], _key(seed, DEMO_STREAM, cat, k), phys)
            arrays[f"{cat}|{kind}|points"] = np.concatenate([d["points"] for d in eps]).astype(np.float32)
            arrays[f"{cat}|{kind}|state"] = np.concatenate([d["state"] for d in eps]).astype(np.float32)
            arrays[f"{cat}|{kind}|action"] = np.concatenate([d["action"] for d in eps]).astype(np.float32)
            arrays[f"{cat}|{kind}|episode"] = np.concatenate([np.full(len(d["action"]), i) for i, d in enumerate(eps)])
            rows.append({**st, "seed": seed, "expert_success_rate": st["demos"] / st["attempts"]})
            log.info("seed %d: %s %s: %d demos of mean length %.1f from %d attempts", seed, cat, kind,
                     st["demos"], st["mean_length"], st["attempts"])
    np.savez_compressed(demos, **arrays)
    write_parquet(pd.DataFrame(rows), stats)
    ref = []
    for cat in p.categories:
        eps = make_episodes(cat, p.evaluate["episodes"], _key(seed, EVAL_STREAM, cat), phys)
        done = random_primitive_success(eps, p.evaluate["max_steps"], np.random.default_rng(_key(seed, REFERENCE_STREAM, cat)))
        ref += [{"category": cat, "episode": i, "success": int(s_), "mechanism": mechanism_of(ep), "seed": seed,
                 "policy": "random_primitive", "kind": "none", "noise": "none"} for i, (ep, s_) in enumerate(zip(eps, done))]
        log.info("seed %d: random-primitive reference on %s: success %.2f", seed, cat, done.mean())
    write_parquet(pd.DataFrame(ref), reference)


def read_demos(path, categories, kind: str) -> dict:
    """One kind's demonstrations of the given categories, pooled (episode ids kept distinct)."""
    try:
        z = np.load(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"adamanip: cannot read demonstrations {path}: {e}") from None
    out = {k: [] for k in ("points", "state", "action", "episode")}
    offset = 0
    for cat in categories:
        for k in out:
            key = f"{cat}|{kind}|{k}"
            if key not in z.files:
                raise ValueError(f"adamanip: {path} has no array {key!r} (rerun prepare)")
        for k in ("points", "state", "action"):
            out[k].append(z[f"{cat}|{kind}|{k}"])
        ep = z[f"{cat}|{kind}|episode"]
        out["episode"].append(ep + offset)
        offset += int(ep.max()) + 1
    return {k: np.concatenate(v) for k, v in out.items()}


# ---- train -------------------------------------------------------------------------------------
def train(*, cfg, seed: str, policy: str, demos, model, history):
    """Train `policy` on one seed's demonstrations, once per demonstration kind (all categories pooled:
    one multi-task policy per kind, the category read from the point cloud)."""
    import torch

    from papers.adamanip import train as T

    p = parse(cfg)
    seed = int(seed)
    seed_everything(seed)
    z = np.load(demos)
    categories = sorted({k.split("|")[0] for k in z.files}, key=CATEGORIES.index)
    states, rows = {}, []
    for k, kind in enumerate(KINDS):
        d = read_demos(demos, categories, kind)
        net, losses = T.fit(policy, d, p.policy, p.train, seed * 100 + k)
        states[kind] = net.state_dict()
        rows += [{"kind": kind, "step": i, "loss": v} for i, v in enumerate(losses)]
        log.info("seed %d %s %s: loss %.4f -> %.4f", seed, policy, kind, np.mean(losses[:10]), np.mean(losses[-50:]))
    torch.save({"policy": policy, "states": states, "config": dict(p.policy), "categories": categories}, model)
    write_parquet(pd.DataFrame(rows).assign(seed=seed, policy=policy), history)


# ---- evaluate ------------------------------------------------------------------------------------
def evaluate(*, cfg, seed: str, policy: str, model, successes):
    """Roll out both of the seed's policies (one per demonstration kind) on the same randomised episodes; the
    diffusion policy trained on one-go demonstrations once more with its noise fixed per episode (the diagnosis of
    whether fresh noise per prediction lets it switch a committed choice by chance)."""
    import torch

    from papers.adamanip import train as T
    from papers.adamanip.policy import Normalizer

    p = parse(cfg)
    seed = int(seed)
    seed_everything(seed)
    phys = p.physics_obj()
    ckpt = torch.load(model, weights_only=False)
    rows = []
    passes = [(k, kind, False) for k, kind in enumerate(KINDS)]
    if policy == "diffusion":
        passes.append((KINDS.index("one_go"), "one_go", True))
    for k, kind, fixed in passes:
        zeros = Normalizer(np.zeros(3), np.ones(3), np.zeros(T.LOW_DIM), np.ones(T.LOW_DIM))
        net = T.build(policy, zeros, p.policy)
        net.load_state_dict(ckpt["states"][kind])
        eps = [ep for cat in p.categories for ep in
               make_episodes(cat, p.evaluate["episodes"], _key(seed, EVAL_STREAM, cat), phys)]
        done = T.rollout(net, eps, p.evaluate["max_steps"], p.policy, seed * 100 + k, fixed_noise=fixed)
        noise = "fixed" if fixed else ("fresh" if policy == "diffusion" else "none")
        rows += [{"category": ep.category, "episode": i % p.evaluate["episodes"], "success": int(s),
                  "mechanism": mechanism_of(ep), "kind": kind, "noise": noise}
                 for i, (ep, s) in enumerate(zip(eps, done))]
        for cat in p.categories:
            rate = np.mean([r["success"] for r in rows[-len(eps):] if r["category"] == cat])
            log.info("seed %d %s %s (%s noise) %s: success %.2f", seed, policy, kind, noise, cat, rate)
    write_parquet(pd.DataFrame(rows).assign(seed=seed, policy=policy), successes)
