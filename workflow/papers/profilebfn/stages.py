"""The profilebfn DAG's stages: prepare -> train (one job per seed) -> evaluate (one job per seed) -> report.

Each function takes its parameters and its input and output paths explicitly, so it runs under
Snakemake (workflow/rules/profilebfn.smk) and in tests alike. The report lives in report.py.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from papers.common.io import ensure_parent, read_json, read_parquet, write_json, write_parquet
from papers.common.seeding import seed_everything
from papers.profilebfn import bfn, data
from papers.profilebfn import metrics as M
from papers.profilebfn import train as T
from papers.profilebfn.params import ARMS, parse
from papers.profilebfn.train import TrainingPool, build_net  # noqa: F401 (TrainingPool: tests import it from here)

log = logging.getLogger(__name__)


# ---- prepare -----------------------------------------------------------------------------------
STREAM_CHUNK = 50_000  # training records searched and written at a time (UniRef50 never sits in memory whole)
POTTS_NULL = "potts_null"


def potts_names(p) -> list[str]:
    """The planted Potts families' names, then the null family's."""
    return [f"potts_planted_{f}" for f in range(p.potts.families)] + [POTTS_NULL]


def _check_record(path, name, seq):
    if not seq or set(seq) - set(data.AMINO_ACIDS + "XBZUOJ"):
        raise ValueError(f"{path}: record {name!r} holds symbols outside the amino-acid alphabet: "
                         f"{sorted(set(seq) - set(data.AMINO_ACIDS))[:5]}")


def _chunks(records, size: int):
    chunk = []
    for r in records:
        chunk.append(r)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def filter_training(path, held_out_hmms: list, evalue: float, heldout: dict, rng: np.random.Generator,
                    training_out, extra: dict, chunk_size: int = STREAM_CHUNK) -> dict:
    """Stream the training FASTA: drop every record that hits a held-out family's HMM below `evalue` (whole
    families held out), set aside each other record with probability heldout['fraction'] (at most
    heldout['max']) for the competence gate, and write the rest to `training_out` (Parquet, one row group per
    chunk) as it goes, then the `extra` rows (name, sequence, source: the Potts draws); count the proteins'
    residues for the composition. Memory: one chunk, never the whole file (UniRef50)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pyhmmer

    alphabet = pyhmmer.easel.Alphabet.amino()
    counts = np.zeros(data.K)
    kept = removed = 0
    held = []
    writer = None
    try:
        for chunk in _chunks(data.iter_fasta(path), chunk_size):
            for name, seq in chunk:
                _check_record(path, name, seq)
            block = pyhmmer.easel.DigitalSequenceBlock(alphabet, [
                pyhmmer.easel.TextSequence(name=f"t{i}", sequence=s).digitize(alphabet) for i, (_, s) in enumerate(chunk)])
            hits = set()
            for hmm in held_out_hmms:
                pipeline = pyhmmer.plan7.Pipeline(alphabet, E=evalue, Z=len(chunk))
                for hit in pipeline.search_hmm(hmm, block):
                    if hit.evalue < evalue:
                        hits.add(int(str(hit.name.decode() if isinstance(hit.name, bytes) else hit.name)[1:]))
            removed += len(hits)
            rows = {"name": [], "sequence": []}
            for i, (name, seq) in enumerate(chunk):
                if i in hits:
                    continue
                if len(held) < heldout["max"] and rng.random() < heldout["fraction"]:
                    held.append((name, seq))
                    continue
                rows["name"].append(name)
                rows["sequence"].append(seq)
                x = data.encode_one(seq)
                counts += np.bincount(x[x >= 0], minlength=data.K)
            kept += len(rows["name"])
            table = pa.table({**rows, "source": ["proteins"] * len(rows["name"])})
            if writer is None:
                writer = pq.ParquetWriter(str(ensure_parent(training_out)), table.schema)
            writer.write_table(table)
        writer.write_table(pa.table(extra, schema=writer.schema))
    finally:
        if writer is not None:
            writer.close()
    return {"kept": kept, "removed": removed, "heldout": held, "composition": (counts + 1.0) / (counts + 1.0).sum()}


def prepare(*, cfg, families, training, heldout, contacts, hmms, meta):
    """Families (match-column rows), the held-out-filtered training set (streamed), the competence gate's held-out
    sequences, planted contacts, HMMs, thresholds."""
    p = parse(cfg)
    rng = seed_everything(12345)  # the data are the same for every training seed
    paths = {**data.default_family_paths(), **p.family_paths}
    fams = [data.read_stockholm(paths[name], name) for name in p.families]

    # Potts families: each planted one has its own fields and contacts; the null family its own fields and no
    # couplings (its "contacts" are the first planted family's pairs, scored where nothing co-varies).
    q = p.potts
    potts_rows, potts_heldout, potts_train, planted = {}, [], [], {}
    for name in potts_names(p):
        pairs = data.planted_contacts(q.length, q.contacts, q.min_separation, rng) if name != POTTS_NULL \
            else planted[potts_names(p)[0]]
        planted[name] = pairs
        h, J = data.potts_model(q.length, pairs, q.residues_per_column, q.field, 0.0 if name == POTTS_NULL else q.coupling, rng)
        x = data.gibbs_sample(h, J, q.reference + q.heldout + q.train, q.sweeps, rng)
        potts_rows[name] = x[: q.reference]
        potts_heldout += [(name, s) for s in data.decode(x[q.reference:q.reference + q.heldout])]
        potts_train += [(f"{name}_{i}", s) for i, s in enumerate(data.decode(x[q.reference + q.heldout:]))]

    # Training set: single sequences, minus those that hit a held-out family (whole families held out), streamed.
    built = {f.name: M.build_hmm(f.name, f.aligned, f.match_columns) for f in fams}
    for name, x in potts_rows.items():
        built[name] = M.build_hmm(name, data.decode(x), np.arange(q.length))
    path = Path(p.training_fasta) if p.training_fasta else data.default_training_path()
    stream = filter_training(path, [built[f.name] for f in fams], p.holdout_evalue, p.heldout_proteins, rng, training,
                             {"name": [n for n, _ in potts_train], "sequence": [s for _, s in potts_train],
                              "source": [n.rsplit("_", 1)[0] for n, _ in potts_train]})
    write_parquet(pd.DataFrame({"family": ["proteins"] * len(stream["heldout"]) + [f for f, _ in potts_heldout],
                                "sequence": [s for _, s in stream["heldout"]] + [s for _, s in potts_heldout]}), heldout)
    composition = stream["composition"]

    rows, info = [], {}
    for f in fams:
        enc = f.encoded
        rows += [{"family": f.name, "kind": "pfam", "row": i, "sequence": s} for i, s in enumerate(data.decode(enc))]
        info[f.name] = {"kind": "pfam", "source": f.source, "length": int(enc.shape[1]), "members": int(enc.shape[0]),
                        "gathering": f.gathering}
    for name, x in potts_rows.items():
        rows += [{"family": name, "kind": "potts", "row": i, "sequence": s} for i, s in enumerate(data.decode(x))]
        info[name] = {"kind": "potts", "source": "Gibbs sampling (papers.profilebfn.data)", "length": q.length,
                      "members": int(len(x)), "gathering": float("nan"), "planted": name != POTTS_NULL}
    for name, hmm in built.items():
        # Pfam's gathering threshold is set above the best-scoring non-member (its noise cutoff); the
        # seed files' GA lines are HMMER2 scores, so we take the larger of the two.
        nc = M.noise_cutoff(hmm, info[name]["length"], composition, p.noise_sequences, rng)
        info[name]["noise_cutoff"] = nc
        info[name]["threshold"] = float(np.nanmax([nc, info[name]["gathering"]]))
    write_parquet(pd.DataFrame(rows), families)
    write_parquet(pd.DataFrame([{"family": name, "i": int(i), "j": int(j)} for name, pairs in planted.items()
                                for i, j in pairs]), contacts)
    with open(ensure_parent(hmms), "wb") as fh:
        for name in sorted(built):
            built[name].write(fh, binary=False)
    write_json({"families": info, "training_sequences": stream["kept"], "removed_as_held_out": stream["removed"],
                "heldout_proteins": len(stream["heldout"]), "potts_training_sequences": len(potts_train),
                "composition": composition.tolist()}, meta)
    log.info("prepare: %d training proteins kept, %d removed as hits of held-out families, %d held out for the gate",
             stream["kept"], stream["removed"], len(stream["heldout"]))


# ---- train (the loop, its state and the data-parallel launch: train.py) --------------------------------------------
def _run_part(cfg, p, seed: int, part: int, training, resume, out):
    """Part `part` of a seed's training in this process, or in train.gpus processes under torchrun."""
    if not isinstance(resume, (str, os.PathLike)):  # a rule's input: one path in a list, or none for part 0
        resume = resume[0] if resume else None
    if p.train.gpus > 1:
        return T.launch(cfg, seed=seed, part=part, training=training, resume=resume, out=out, world=p.train.gpus)
    return T.train_part(p, seed=seed, part=part, training=training, resume=resume, out=out)


def train_part(*, cfg, seed, part, training, resume, state):
    """A chained part before the last (profilebfn.train_parts > 1): train its steps from the previous part's `resume`
    and write the full state to `state` (papers.profilebfn.train)."""
    p = parse(cfg)
    _run_part(cfg, p, int(seed), int(part), training, resume, state)


def train(*, cfg, seed, training, checkpoint, curve, resume=None):
    """Train the network on single sequences with the continuous-time loss (BFN's continuous-time loss for discrete
    data): the whole run, or the last of profilebfn.train_parts chained parts (from the previous part's `resume`)."""
    p = parse(cfg)
    scratch = Path(str(checkpoint) + ".state")  # rank 0's state when torchrun runs the part
    try:
        state = _run_part(cfg, p, int(seed), p.train_parts - 1, training, resume, scratch if p.train.gpus > 1 else None)
    finally:
        scratch.unlink(missing_ok=True)
    T.write_outputs(p, state, checkpoint, curve)


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
        x = bfn.sample(model, torch.tensor(prior, dtype=torch.float32, device=p.device), n, t0=p.t0, steps=p.sample_steps,
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
        out["contact_auc"] = M.contact_auc(scored, contacts, min_separation)
    else:
        out["contact_precision"] = out["contact_auc"] = float("nan")
    return out


@torch.no_grad()
def denoising_losses(net, sequences: list[str], beta1: float, composition: np.ndarray, crop: int, seed: int,
                     repeats: int = 4, batch: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence, the continuous-time loss (bfn.continuous_loss, mean over `repeats` draws of t ~ U(0, 1) and
    of the flow) of the network and of the context-free predictor (bfn.context_free_prediction: the composition
    prior times the position's own belief, the best any predictor does without reading other positions), on the
    same draws. A sequence longer than `crop` is cut to its first `crop` residues (a fixed window)."""
    g = torch.Generator().manual_seed(seed)
    device = next(net.parameters()).device  # the flow's draws stay on the CPU generator, the network on its device
    x_all = [x[x >= 0][:crop] for x in map(data.encode_one, sequences)]
    prior = torch.tensor(composition, dtype=torch.float32)
    net_out, cf_out = [], []
    for start in range(0, len(x_all), batch):
        part = x_all[start:start + batch]
        L = max(len(x) for x in part)
        x = torch.full((len(part), L), data.GAP, dtype=torch.long)
        for i, xi in enumerate(part):
            x[i, :len(xi)] = torch.from_numpy(xi.astype(np.int64))
        mask = x >= 0
        net_l, cf_l = torch.zeros(len(part)), torch.zeros(len(part))
        for _ in range(repeats):
            t = torch.rand(len(part), generator=g)
            e_x = torch.nn.functional.one_hot(x.clamp(min=0), data.K).float()
            theta = bfn.flow(e_x, t, beta1, g)
            theta = torch.where(mask[..., None], theta, torch.full_like(theta, 1.0 / data.K))
            logits = net(theta.to(device), t.to(device), (~mask).to(device)).cpu()
            for out, e_hat in ((net_l, torch.softmax(logits, dim=-1)),
                               (cf_l, bfn.context_free_prediction(theta, prior))):
                out += bfn.continuous_loss_per_sequence(x, e_hat, t, beta1, mask) / repeats
        net_out.append(net_l.numpy())
        cf_out.append(cf_l.numpy())
    return np.concatenate(net_out), np.concatenate(cf_out)


def evaluate(*, cfg, seed, checkpoint, families, heldout, contacts, hmms, meta, metrics, generated, competence):
    """Generate with every arm on every family and measure it; the held-out denoising losses of the trained and the
    untrained network against the context-free predictor (the competence gate; one training seed)."""
    import pyhmmer

    p = parse(cfg)
    seed = int(seed)
    rng = seed_everything(1000 + seed)
    g = torch.Generator().manual_seed(1000 + seed)
    ckpt = torch.load(checkpoint, map_location="cpu", weights_only=False)
    net, untrained = build_net(p), build_net(p)
    net.load_state_dict(ckpt["model"])
    untrained.load_state_dict(ckpt["untrained"])
    device = torch.device(p.device)
    net.to(device).eval()
    untrained.to(device).eval()
    fams = read_parquet(families)
    pairs = read_parquet(contacts)
    planted = {name: g[["i", "j"]].to_numpy() for name, g in pairs.groupby("family")}
    info_all = read_json(meta)
    info = info_all["families"]
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
                               planted[name] if is_potts else None, p.potts.min_separation)
            rows.append({"seed": seed, "family": name, "kind": info[name]["kind"], "arm": arm, **m,
                         "seconds": time.perf_counter() - start})
            gen_rows += [{"seed": seed, "family": name, "arm": arm, "sequence": s} for s in raw]
            log.info("evaluate/%s/%s: %s", name, arm, {k: round(v, 3) for k, v in m.items()})
    write_parquet(pd.DataFrame(rows).drop(columns="seconds"), metrics)
    write_parquet(pd.DataFrame(gen_rows), generated)

    held = read_parquet(heldout)
    composition = np.asarray(info_all["composition"])
    comp_rows = []
    for group, g_rows in held.groupby("family", sort=True):
        for which, model in (("trained", net), ("untrained", untrained)):
            net_l, cf_l = denoising_losses(model, list(g_rows.sequence), p.beta1, composition, p.train.crop, 2000 + seed)
            comp_rows.append({"seed": seed, "group": group, "network": which, "sequences": len(g_rows),
                              "network_loss": float(net_l.mean()), "context_free_loss": float(cf_l.mean())})
            log.info("evaluate/competence/%s/%s: network %.4f, context-free %.4f", group, which, net_l.mean(), cf_l.mean())
    write_parquet(pd.DataFrame(comp_rows), competence)

