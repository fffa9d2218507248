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
from papers.adamanip.experts import KINDS, collect, expert_success, random_primitive_success
from papers.adamanip.params import parse
from papers.common.io import write_parquet
from papers.common.seeding import seed_everything

log = logging.getLogger(__name__)

# SeedSequence keys: (seed, STREAM, category index in env.CATEGORIES, ...), so adding a category does
# not change another's draws.
DEMO_STREAM, EVAL_STREAM, REFERENCE_STREAM, POSITIVE_STREAM = 1, 2, 3, 4


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
                 "policy": "random_primitive", "kind": "none", "noise": "none", "jammed": int(ep.jammed),
                 "small_share": ep.small_moves / max(ep.moves, 1)} for i, (ep, s_) in enumerate(zip(eps, done))]
        log.info("seed %d: random-primitive reference on %s: success %.2f", seed, cat, done.mean())
    write_parquet(pd.DataFrame(ref), reference)


def expert_rates(p, seed: int) -> dict:
    """Success rate of the adaptive expert and of the guessing one-go expert (experts.expert_success) per category on
    the seed's evaluation episodes (the policies' own): {(category, kind): rate}. Claim (a)'s positive control: the
    difference in differences of the experts is planted by construction (the one-go expert guesses what is hidden and
    reads what is visible); the report runs it (a few CPU-seconds)."""
    phys = p.physics_obj()
    out = {}
    for cat in p.categories:
        for k, kind in enumerate(KINDS):
            eps = make_episodes(cat, p.evaluate["episodes"], _key(seed, EVAL_STREAM, cat), phys)
            rng = np.random.default_rng(_key(seed, POSITIVE_STREAM, cat, k))
            out[cat, kind] = float(expert_success(eps, kind, p.evaluate["max_steps"], rng).mean())
    return out


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
def evaluate(*, cfg, seed: str, policy: str, model, demos, successes):
    """Roll out the seed's two policies of `policy` (one per demonstration kind) on the same randomised episodes.

    Besides the policy as trained (noise ``fresh`` for diffusion, ``none`` for the deterministic MLP BC):
    * diffusion, both kinds, once more with its noise fixed per episode (noise ``fixed``): a policy that learned to
      adapt (Sec. 4.1-4.2: it reads the outcome of a try) switches its choice because the observation changed, not
      because a new draw did; the premise gate of claims (a) and (c);
    * MLP BC, both kinds, sampled from a diagonal Gaussian around its prediction, with the
      maximum-likelihood sigma on its own training demonstrations (noise ``gaussian``; policy.GaussianBC): the
      unimodal stochastic ablation of the diffusion policy for claim (b). Its sigma is recorded per action dimension.
    """
    import torch

    from papers.adamanip import train as T
    from papers.adamanip.policy import GaussianBC, Normalizer

    p = parse(cfg)
    seed = int(seed)
    seed_everything(seed)
    phys = p.physics_obj()
    ckpt = torch.load(model, weights_only=False)
    rows = []
    # (kind index, kind, noise, rollout seed)
    plain = "fresh" if policy == "diffusion" else "none"
    passes = [(k, kind, plain, seed * 100 + k) for k, kind in enumerate(KINDS)]
    if policy == "diffusion":
        passes += [(k, kind, "fixed", seed * 100 + k) for k, kind in enumerate(KINDS)]
    else:
        passes += [(k, kind, "gaussian", seed * 100 + 10 + k) for k, kind in enumerate(KINDS)]
    for k, kind, noise, rollout_seed in passes:
        zeros = Normalizer(np.zeros(3), np.ones(3), np.zeros(T.LOW_DIM), np.ones(T.LOW_DIM))
        net = T.build(policy, zeros, p.policy)
        net.load_state_dict(ckpt["states"][kind])
        extra = {}
        if noise == "gaussian":
            sigma = T.gaussian_sigma(net, read_demos(demos, ckpt["categories"], kind), p.policy)
            net = GaussianBC(net, sigma)
            extra = {f"sigma_{i}": float(v) for i, v in enumerate(sigma)}
            log.info("seed %d %s %s: maximum-likelihood Gaussian sigma per action dimension %s", seed, policy, kind,
                     np.round(sigma, 3))
        eps = [ep for cat in p.categories for ep in
               make_episodes(cat, p.evaluate["episodes"], _key(seed, EVAL_STREAM, cat), phys)]
        done = T.rollout(net, eps, p.evaluate["max_steps"], p.policy, rollout_seed, fixed_noise=noise == "fixed")
        # jammed: the episode ended on a jam; small_share: the share of its moves whose pull / push and turn were
        # both under half a step (how far the arm moves hesitantly; env.Episode.step)
        rows += [{"category": ep.category, "episode": i % p.evaluate["episodes"], "success": int(s),
                  "mechanism": mechanism_of(ep), "kind": kind, "noise": noise, "jammed": int(ep.jammed),
                  "small_share": ep.small_moves / max(ep.moves, 1), **extra}
                 for i, (ep, s) in enumerate(zip(eps, done))]
        for cat in p.categories:
            rate = np.mean([r["success"] for r in rows[-len(eps):] if r["category"] == cat])
            log.info("seed %d %s %s (%s noise) %s: success %.2f", seed, policy, kind, noise, cat, rate)
    write_parquet(pd.DataFrame(rows).assign(seed=seed, policy=policy), successes)
