"""The profilebfn DAG's stages: prepare -> train (one job per seed) -> evaluate (one job per seed) -> report.

Each function takes its parameters and its input and output paths explicitly, so it runs under
Snakemake (workflow/rules/profilebfn.smk) and in tests alike. The report lives in report.py.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from papers.common.io import ensure_parent, read_json, read_parquet, write_json, write_parquet
from papers.common.seeding import seed_everything
from papers.profilebfn import bfn, data
from papers.profilebfn import metrics as M
from papers.profilebfn.model import ProfileBFNNet
from papers.profilebfn.params import ARMS, parse

log = logging.getLogger(__name__)



# ---- prepare -----------------------------------------------------------------------------------
def _training_sequences(p) -> list[tuple[str, str]]:
    path = Path(p.training_fasta) if p.training_fasta else data.default_training_path()
    records = data.read_fasta(path)
    bad = [(n, s) for n, s in records if not s or set(s) - set(data.AMINO_ACIDS + "XBZUOJ")]
    if bad:
        raise ValueError(f"{path}: record {bad[0][0]!r} holds symbols outside the amino-acid alphabet: "
                         f"{sorted(set(bad[0][1]) - set(data.AMINO_ACIDS))[:5]}")
    return records


def prepare(*, cfg, families, training, contacts, hmms, meta):
    """Families (match-column rows), the held-out-filtered training set, planted contacts, HMMs, thresholds."""
    import pyhmmer

    p = parse(cfg)
    rng = seed_everything(12345)  # the data are the same for every training seed
    paths = {**data.default_family_paths(), **p.family_paths}
    fams = [data.read_stockholm(paths[name], name) for name in p.families]

    # Potts families: planted couplings, and a null family with its own fields and no couplings.
    q = p.potts
    planted = data.planted_contacts(q.length, q.contacts, q.min_separation, rng)
    potts_rows, potts_train = {}, []
    for name, coupling in (("potts_planted", q.coupling), ("potts_null", 0.0)):
        h, J = data.potts_model(q.length, planted, q.residues_per_column, q.field, coupling, rng)
        x = data.gibbs_sample(h, J, q.reference + q.train, q.sweeps, rng)
        potts_rows[name] = x[: q.reference]
        potts_train += [(f"{name}_{i}", s) for i, s in enumerate(data.decode(x[q.reference:]))]

    # Training set: single sequences, minus those that hit a held-out family (whole families held out).
    records = _training_sequences(p)
    alphabet = pyhmmer.easel.Alphabet.amino()
    built = {f.name: M.build_hmm(f.name, f.aligned, f.match_columns) for f in fams}
    for name, x in potts_rows.items():
        built[name] = M.build_hmm(name, data.decode(x), np.arange(q.length))
    target = pyhmmer.easel.DigitalSequenceBlock(alphabet, [
        pyhmmer.easel.TextSequence(name=f"t{i}", sequence=s).digitize(alphabet) for i, (_, s) in enumerate(records)])
    removed = set()
    for f in fams:
        pipeline = pyhmmer.plan7.Pipeline(alphabet, E=p.holdout_evalue, Z=len(records))
        for hit in pipeline.search_hmm(built[f.name], target):
            if hit.evalue < p.holdout_evalue:
                removed.add(int(str(hit.name.decode() if isinstance(hit.name, bytes) else hit.name)[1:]))
    kept = [(n, s) for i, (n, s) in enumerate(records) if i not in removed]
    composition = data.profile(data.encode(["".join(s for _, s in kept)]).reshape(-1, 1), 1.0)[0]
    train_df = pd.DataFrame({"name": [n for n, _ in kept] + [n for n, _ in potts_train],
                             "sequence": [s for _, s in kept] + [s for _, s in potts_train],
                             "source": ["proteins"] * len(kept) + [n.rsplit("_", 1)[0] for n, _ in potts_train]})
    write_parquet(train_df, training)

    rows, info = [], {}
    for f in fams:
        enc = f.encoded
        rows += [{"family": f.name, "kind": "pfam", "row": i, "sequence": s} for i, s in enumerate(data.decode(enc))]
        info[f.name] = {"kind": "pfam", "source": f.source, "length": int(enc.shape[1]), "members": int(enc.shape[0]),
                        "gathering": f.gathering}
    for name, x in potts_rows.items():
        rows += [{"family": name, "kind": "potts", "row": i, "sequence": s} for i, s in enumerate(data.decode(x))]
        info[name] = {"kind": "potts", "source": "Gibbs sampling (papers.profilebfn.data)", "length": q.length,
                      "members": int(len(x)), "gathering": float("nan")}
    for name, hmm in built.items():
        # Pfam's gathering threshold is set above the best-scoring non-member (its noise cutoff); the
        # seed files' GA lines are HMMER2 scores, so we take the larger of the two.
        nc = M.noise_cutoff(hmm, info[name]["length"], composition, p.noise_sequences, rng)
        info[name]["noise_cutoff"] = nc
        info[name]["threshold"] = float(np.nanmax([nc, info[name]["gathering"]]))
    write_parquet(pd.DataFrame(rows), families)
    write_parquet(pd.DataFrame(planted, columns=["i", "j"]), contacts)
    with open(ensure_parent(hmms), "wb") as fh:
        for name in sorted(built):
            built[name].write(fh, binary=False)
    write_json({"families": info, "training_sequences": len(kept), "removed_as_held_out": len(removed),
                "potts_training_sequences": len(potts_train), "composition": composition.tolist()}, meta)
    log.info("prepare: %d training proteins kept, %d removed as hits of held-out families", len(kept), len(removed))


# ---- train -------------------------------------------------------------------------------------
def build_net(p) -> ProfileBFNNet:
    m = p.model
    return ProfileBFNNet(d_model=m.d_model, n_layer=m.n_layer, n_head=m.n_head, time_dim=m.time_dim)


def _batch(pool: list[np.ndarray], batch: int, crop: int, rng: np.random.Generator) -> torch.Tensor:
    """(B, crop) residue indices, GAP (-1) on padding: random sequences, each a random window."""
    x = np.full((batch, crop), data.GAP, dtype=np.int64)
    for b, i in enumerate(rng.integers(0, len(pool), batch)):
        s = pool[i]
        if len(s) > crop:
            start = rng.integers(0, len(s) - crop + 1)
            s = s[start:start + crop]
        x[b, : len(s)] = s
    return torch.from_numpy(x)


def train(*, cfg, seed, training, checkpoint, curve):
    """Train the network on single sequences with the continuous-time loss (BFN's continuous-time loss for discrete data)."""
    p = parse(cfg)
    seed = int(seed)
    rng = seed_everything(seed)
    g = torch.Generator().manual_seed(seed)
    df = read_parquet(training)
    pool = [x[x >= 0] for x in map(data.encode_one, df.sequence)]
    pool = [x for x in pool if len(x)]
    net = build_net(p)
    init_state = {k: v.clone() for k, v in net.state_dict().items()}  # the untrained control's weights
    tr = p.train
    opt = torch.optim.AdamW(net.parameters(), lr=tr.lr, weight_decay=tr.weight_decay)
    losses, start = [], time.perf_counter()
    for step in range(tr.steps):
        x = _batch(pool, tr.batch, tr.crop, rng)
        mask = x >= 0  # (B, crop)
        t = torch.rand(tr.batch, generator=g)  # (B,) t ~ U(0, 1), one per sequence
        e_x = torch.nn.functional.one_hot(x.clamp(min=0), data.K).float()  # a degenerate profile per sequence
        theta = bfn.flow(e_x, t, p.beta1, g)
        theta = torch.where(mask[..., None], theta, torch.full_like(theta, 1.0 / data.K))
        e_hat = torch.softmax(net(theta, t, ~mask), dim=-1)
        loss = bfn.continuous_loss(x, e_hat, t, p.beta1, mask)
        lr = tr.lr * min(1.0, (step + 1) / tr.warmup) * 0.5 * (1 + np.cos(np.pi * step / tr.steps))
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), tr.grad_clip)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 100 == 0:
            log.info("train/step %d loss %.4f (%.1f s)", step, losses[-1], time.perf_counter() - start)
    torch.save({"model": net.state_dict(), "untrained": init_state, "seed": seed, "step": tr.steps,
                "optimizer": opt.state_dict()}, ensure_parent(checkpoint))
    parameters = sum(x.numel() for x in net.parameters())
    write_parquet(pd.DataFrame({"seed": seed, "step": np.arange(tr.steps), "loss": losses, "parameters": parameters}),
                  curve)


# ---- evaluate ----------------------------------------------------------------------------------
def _independent(prior: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, L) column-by-column draws from the profile (the baseline without covariation)."""
    cdf = prior.cumsum(axis=1)
    u = rng.random((n, prior.shape[0], 1))
    return np.minimum((cdf[None] < u).sum(axis=2), data.K - 1).astype(np.int8)


def _copies(reference: np.ndarray, n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """(n, L) reference rows with a share `rate` of residues replaced by uniformly drawn others."""
    x = reference[rng.integers(0, len(reference), n)].copy()
    hit = (rng.random(x.shape) < rate) & (x >= 0)
    x[hit] = (x[hit] + rng.integers(1, data.K, hit.sum())) % data.K
    return x


def generate(p, net, untrained, arm: str, prior: np.ndarray, reference: np.ndarray, hmm, n: int,
             seed: int, rng: np.random.Generator, g: torch.Generator) -> tuple[np.ndarray, list[str]]:
    """(aligned (n, L) rows over the match columns, raw sequences for the HMM) of one arm."""
    if arm in ("profilebfn", "untrained"):
        model = net if arm == "profilebfn" else untrained
        x = bfn.sample(model, torch.tensor(prior, dtype=torch.float32), n, t0=p.t0, steps=p.sample_steps,
                       beta1=p.beta1, generator=g).numpy().astype(np.int8)
        return x, data.decode(x)
    if arm == "profile":
        x = _independent(prior, n, rng)
        return x, data.decode(x)
    if arm == "copies":
        x = _copies(reference, n, p.mutation_rate, rng)
        return x, [s.replace("-", "") for s in data.decode(x)]
    if arm == "hmm":
        raw = M.hmm_emit(hmm, n, seed)
        return M.hmm_align(hmm, raw), raw
    raise ValueError(f"unknown arm {arm!r}")


def family_metrics(x: np.ndarray, raw: list[str], reference: np.ndarray, hmm, threshold: float,
                   contacts: np.ndarray | None, min_separation: int) -> dict:
    """Every measure of one generated set: uniqueness on all, the rest on the distinct sequences."""
    keys = [r.tobytes() + s.encode() for r, s in zip(x, raw)]
    first = sorted({k: i for i, k in reversed(list(enumerate(keys)))}.values())
    xu, raw_u = x[first], [raw[i] for i in first]
    scores = M.hmm_scores(hmm, raw_u)
    out = {"generated": len(x), "uniqueness": len(first) / len(x), "above_threshold": float(np.mean(scores > threshold)),
           "median_bits": float(np.nanmedian(np.where(np.isfinite(scores), scores, np.nan))) if np.isfinite(scores).any()
           else float("nan"), **M.column_fit(xu, reference),
           **M.diversity_novelty(xu, reference)}
    if contacts is not None and len(xu) > 1:
        scored = M.apc(M.mutual_information(xu))
        out["contact_precision"] = M.contact_precision(scored, contacts, len(contacts), min_separation)
    else:
        out["contact_precision"] = float("nan")
    return out


def evaluate(*, cfg, seed, checkpoint, families, contacts, hmms, meta, metrics, generated):
    """Generate with every arm on every family and measure it (one training seed)."""
    import pyhmmer

    p = parse(cfg)
    seed = int(seed)
    rng = seed_everything(1000 + seed)
    g = torch.Generator().manual_seed(1000 + seed)
    ckpt = torch.load(checkpoint, map_location="cpu", weights_only=False)
    net, untrained = build_net(p), build_net(p)
    net.load_state_dict(ckpt["model"])
    untrained.load_state_dict(ckpt["untrained"])
    net.eval()
    untrained.eval()
    fams = read_parquet(families)
    planted = read_parquet(contacts)[["i", "j"]].to_numpy()
    info = read_json(meta)["families"]
    with pyhmmer.plan7.HMMFile(hmms) as fh:
        models = {(h.name.decode() if isinstance(h.name, bytes) else h.name): h for h in fh}
    rows, gen_rows = [], []
    for name in sorted(info):
        reference = data.encode(list(fams[fams.family == name].sort_values("row").sequence))
        prior = data.profile(reference, p.pseudocount)
        is_potts = info[name]["kind"] == "potts"
        n = p.n_generate_potts if is_potts else p.n_generate
        for arm in ARMS:
            start = time.perf_counter()
            x, raw = generate(p, net, untrained, arm, prior, reference, models[name], n, seed, rng, g)
            m = family_metrics(x, raw, reference, models[name], info[name]["threshold"],
                               planted if is_potts else None, p.potts.min_separation)
            rows.append({"seed": seed, "family": name, "kind": info[name]["kind"], "arm": arm, **m,
                         "seconds": time.perf_counter() - start})
            gen_rows += [{"seed": seed, "family": name, "arm": arm, "sequence": s} for s in raw]
            log.info("evaluate/%s/%s: %s", name, arm, {k: round(v, 3) for k, v in m.items()})
    write_parquet(pd.DataFrame(rows).drop(columns="seconds"), metrics)
    write_parquet(pd.DataFrame(gen_rows), generated)

