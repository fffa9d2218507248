"""The cbplm DAG's stages: prepare -> train (per model and seed) -> evaluate (per seed) -> report
(the report and the claims live in :mod:`papers.cbplm.report`).

Each function takes its parameters and its input and output paths explicitly, so it runs under
Snakemake (see workflow/rules/cbplm.smk) and in tests alike.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from papers.cbplm import data as D
from papers.cbplm.params import parse
from papers.common.io import ensure_parent, read_parquet, write_json, write_parquet
from papers.common.params import to_dict
from papers.common.seeding import seed_everything

log = logging.getLogger(__name__)

TITLE = "P7 cbplm: Concept Bottleneck protein language models (CB-pLM)"
SWEPT = ("cb",)  # the models trained again at every length of train.sweep (the convergence premise reads CB-pLM's R^2)


def _device() -> str:
    import torch  # not at module level: prepare and report run without it

    return "cuda" if torch.cuda.is_available() else "cpu"


# ---- prepare ---------------------------------------------------------------------------------
def build_dataset(p) -> tuple[pd.DataFrame, dict]:
    """Filter, split and annotate the sequences; returns (table, summary of what was excluded).

    Rules, in order: drop exact duplicates; keep lengths in [min_length, max_length]; exclude any
    sequence with a character other than the 20 standard upper-case residues; shuffle (seed 0)
    and keep at most `max_sequences`; hold out `test_fraction`. A FASTA with `max_sequences` set (UniRef50 at the
    full scale) is streamed instead (:func:`papers.cbplm.data.sample_fasta`): the length and residue rules apply
    while reading, `max_sequences` of the records that pass are drawn uniformly, and duplicates are dropped within
    that sample. Concepts are standardised with the training split's mean and std; tag bins are the training
    split's quantiles.
    """
    if p.sequences is not None and p.max_sequences is not None and D.is_fasta(p.sequences):
        def accept(seq):
            if not p.min_length <= len(seq) <= p.max_length:
                return "outside_length_range"
            return None if D.standard_only([seq])[0] else "non_standard_excluded"

        if not Path(p.sequences).exists():
            raise FileNotFoundError(f"{p.sequences}: no such file (cbplm.sequences: a FASTA, e.g. UniRef50, or a TSV/CSV)")
        raw, stats = D.sample_fasta(p.sequences, p.max_sequences, accept, seed=0)
        df = raw.drop_duplicates("sequence").reset_index(drop=True)
        summary = {"read": stats["read"], "streamed_sample": len(raw), "duplicates_dropped": len(raw) - len(df),
                   "outside_length_range": stats.get("outside_length_range", 0),
                   "non_standard_excluded": stats.get("non_standard_excluded", 0),
                   "non_standard_examples": stats["examples"].get("non_standard_excluded", [])}
    else:
        raw = D.load_sequences(p.sequences, p.files)
        summary = {"read": len(raw)}
        df = raw.drop_duplicates("sequence").reset_index(drop=True)
        summary["duplicates_dropped"] = len(raw) - len(df)
        length = df.sequence.str.len()
        in_range = (length >= p.min_length) & (length <= p.max_length)
        summary["outside_length_range"] = int((~in_range).sum())
        df = df[in_range].reset_index(drop=True)
        standard = D.standard_only(df.sequence)
        summary["non_standard_excluded"] = int((~standard).sum())
        summary["non_standard_examples"] = [f"{r.source}:{r.line}" for r in df[~standard].head(5).itertuples()]
        df = df[standard].reset_index(drop=True)
    df = df.iloc[np.random.default_rng(0).permutation(len(df))].reset_index(drop=True)
    if p.max_sequences is not None:
        df = df.iloc[: p.max_sequences].reset_index(drop=True)
    n_test = max(1, int(round(p.test_fraction * len(df))))
    df["split"] = np.where(np.arange(len(df)) < n_test, "test", "train")
    df["length"] = df.sequence.str.len()

    names = list(p.concepts)
    raw_c = D.concept_matrix(df.sequence.tolist(), names)  # (N, K)
    train = (df.split == "train").to_numpy()
    mean, std = raw_c[train].mean(0), raw_c[train].std(0)
    z = (raw_c - mean) / std
    edges = np.quantile(z[train], np.linspace(0, 1, p.tag_bins + 1)[1:-1], axis=0)  # (n_bins - 1, K)
    for k, name in enumerate(names):
        df[name] = raw_c[:, k]
        df[f"z_{name}"] = z[:, k]
        df[f"bin_{name}"] = np.searchsorted(edges[:, k], z[:, k], side="right")
    # The note: charge and isoelectric point correlate; we keep one of the two.
    pi = D.concept_matrix(df.sequence[train].tolist(), ["isoelectric_point"])[:, 0]
    other = "charge" if "charge" in names else "isoelectric_point"
    ref = D.concept_matrix(df.sequence[train].tolist(), [other])[:, 0] if other not in names else raw_c[train, names.index(other)]
    summary.update({
        "kept": len(df), "train": int(train.sum()), "test": int((~train).sum()),
        "length_mean": float(df.length.mean()),
        "concept_mean": dict(zip(names, mean.tolist())), "concept_std": dict(zip(names, std.tolist())),
        # The intervention's targets: the official code sets the [0, 1]-normalised concept to 0 or 1.
        "concept_min_sd": dict(zip(names, z[train].min(0).tolist())),
        "concept_max_sd": dict(zip(names, z[train].max(0).tolist())),
        "tag_bin_edges_sd": {n: edges[:, k].tolist() for k, n in enumerate(names)},
        # The equal-strength request of claim (a): the mean standardised concept of the training proteins in the
        # lowest and in the highest tag bin, what the tag LM's extreme bins ask for on average.
        "tag_bin_mean_sd": {n: [float(z[train & (df[f"bin_{n}"] == b).to_numpy(), k].mean()) for b in (0, p.tag_bins - 1)]
                            for k, n in enumerate(names)},
        "concept_correlation": pd.DataFrame(z[train], columns=names).corr().round(4).to_dict(),
        "charge_vs_isoelectric_point_r": float(np.corrcoef(ref, pi)[0, 1]),
        # The no-model reference of the concept-to-token weights (checks c_*): per concept, 20 slopes (AMINO_ACIDS).
        "residue_slopes": {n: col.tolist() for n, col in zip(names, D.residue_slopes(df.sequence[train].tolist(), z[train]).T)},
    })
    return df, summary


def prepare(*, cfg, sequences, summary):
    """Sequences, concepts (raw, standardised, binned) and split as Parquet; a JSON summary."""
    p = parse(cfg)
    seed_everything(0)
    df, info = build_dataset(p)
    write_parquet(df, sequences)
    write_json(info, summary)
    log.info("sequences: %d kept of %d read (%d duplicates, %d outside length, %d non-standard); %d train / %d test",
             info["kept"], info["read"], info["duplicates_dropped"], info["outside_length_range"],
             info["non_standard_excluded"], info["train"], info["test"])


# ---- train -----------------------------------------------------------------------------------
def shorter_run(t, steps: int):
    """The training parameters (`t`: the full run's TrainParams) of a sweep run of `steps`: the same optimiser, its own
    warm-up (the same fraction of the run) and cosine decay to 0 at its own end, so that it is annealed as the full
    run is (review of issue 50: snapshots inside one schedule are not)."""
    import dataclasses

    warmup = int(round(t.warmup_steps * steps / t.steps))
    return dataclasses.replace(t, steps=int(steps), warmup_steps=warmup, sweep=())


def train(*, cfg, seed: int, sequences, checkpoints, histories):
    """Train the models of `cfg.models` for one seed, one after another (same batches and masks); write
    each one's checkpoint and loss history (`checkpoints`, `histories`: one path per model, in that order).
    CB-pLM's checkpoint also holds the weights of the sweep's shorter CB-pLM runs (`train.sweep`), each trained
    from scratch with the same seed on its own schedule (:func:`shorter_run`)."""
    import torch

    from papers.cbplm.train import train as train_model

    p = parse(cfg)
    df = read_parquet(sequences)
    device = _device()
    for kind, checkpoint, history in zip(p.models, checkpoints, histories, strict=True):
        seed_everything(seed)  # each model as if trained alone
        net, opt, hist = train_model(kind, p, df, seed, device=device)
        hist = hist.assign(run_steps=p.train.steps)  # the full run; the sweep's shorter runs follow
        states = {}
        for steps in p.train.sweep if kind in SWEPT else ():
            seed_everything(seed)
            short, _, short_hist = train_model(kind, p, df, seed, device=device, schedule=shorter_run(p.train, steps))
            states[int(steps)] = {k: v.detach().clone().cpu() for k, v in short.state_dict().items()}
            hist = pd.concat([hist, short_hist.assign(run_steps=int(steps))], ignore_index=True)
        hist["device"] = device
        torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "kind": kind, "seed": seed,
                    "step": p.train.steps, "sweep": states, "config": to_dict(p)}, ensure_parent(checkpoint))
        write_parquet(hist, history)


# ---- evaluate --------------------------------------------------------------------------------
def _derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A random pairing of each of n items with another one (a shifted random order: no fixed points)."""
    order = rng.permutation(n)
    other = np.empty(n, dtype=np.int64)
    other[order] = np.roll(order, 1)
    return other


def load_model(path, p, step: int | None = None):
    """(kind, model) from a checkpoint: the final weights, or those of the sweep's run of `step` steps."""
    import torch

    from papers.cbplm.train import build

    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model = build(ckpt["kind"], p)
    model.load_state_dict(ckpt["model"] if step is None or step == ckpt["step"] else ckpt["sweep"][step])
    return ckpt["kind"], model.to(_device()).eval()


def evaluate(*, cfg, seed: int, sequences, summary, checkpoints, metrics, interventions, weights):
    """Perplexity and concept R^2 on the held-out split (CB-pLM also for every run of the sweep), interventions,
    CB-pLM weights; one seed."""
    from papers.cbplm import evaluate as E
    from papers.common.io import read_json

    p = parse(cfg)
    rng = seed_everything(seed)
    info = read_json(summary)
    names = list(p.concepts)
    df = read_parquet(sequences)
    test = df[df.split == "test"].reset_index(drop=True)
    seqs = np.array(test.sequence.tolist(), dtype=object)
    z = test[[f"z_{c}" for c in names]].to_numpy(np.float32)
    bins = test[[f"bin_{c}" for c in names]].to_numpy(np.int64)
    mean = np.array([info["concept_mean"][c] for c in names])
    std = np.array([info["concept_std"][c] for c in names])
    paths = dict(zip(p.models, checkpoints, strict=True))
    models = {kind: load_model(paths[kind], p)[1] for kind in p.models}

    # Perplexity: one mask draw for every model (training mask rate). `other` pairs each held-out protein
    # with another one: its tags (tag LM) or concepts (CB-pLM, conditional LM) are fed in place of the protein's
    # own, which shows how much each model's handle carries (issue 24) and is the control of claim (b).
    masks = E.residue_masks([len(s) for s in seqs], p.train.mask_prob, rng)
    other = _derangement(len(seqs), rng)
    final = p.train.steps

    def row(kind, metric, value, concept="", n_params=0, step=final):
        return {"seed": seed, "model": kind, "metric": metric, "concept": concept, "parameters": n_params,
                "step": int(step), "value": float(value)}

    rows = [row("unigram", "perplexity", E.unigram_perplexity(df[df.split == "train"].sequence, seqs, masks))]
    for kind, model in models.items():
        n_params = sum(q.numel() for q in model.parameters())
        rows.append(row(kind, "perplexity", E.perplexity(model, kind, seqs, z, bins, masks, p.tag_bins), n_params=n_params))
        if kind == "tag":
            rows.append(row(kind, "perplexity_shuffled_tags",
                            E.perplexity(model, kind, seqs, z, bins[other], masks, p.tag_bins), n_params=n_params))
        if kind == "cond":
            rows.append(row(kind, "perplexity_shuffled_concepts",
                            E.perplexity(model, kind, seqs, z[other], bins, masks, p.tag_bins), n_params=n_params))
    # CB-pLM along the training-length sweep (separate runs; the full run included).
    for step in [*p.train.sweep, final]:
        for kind in SWEPT:
            model = models[kind] if step == final else load_model(paths[kind], p, step)[1]
            n_params = sum(q.numel() for q in model.parameters())
            if step != final:
                rows.append(row(kind, "perplexity", E.perplexity(model, kind, seqs, z, bins, masks, p.tag_bins),
                                n_params=n_params, step=step))
            if kind == "cb":
                for metric, fed in (("perplexity_true_concepts", z), ("perplexity_shuffled_concepts", z[other])):
                    rows.append(row(kind, metric, E.perplexity(model, kind, seqs, fed, bins, masks, p.tag_bins, teacher=True),
                                    n_params=n_params, step=step))
                r2 = E.r_squared(E.predicted_concepts(model, seqs), z)
                rows += [row(kind, "concept_r2", v, concept=c, n_params=n_params, step=step) for c, v in zip(names, r2)]
    write_parquet(pd.DataFrame(rows), metrics)
    log.info("metrics:\n%s", pd.DataFrame(rows).to_string())

    # Interventions on the first `sequences` held-out proteins: per concept and direction, the residues
    # CB-pLM's attribution picks, shared by every model. Requests: the training extremes (CB-pLM, the conditional
    # LM, and CB-pLM with the concept's embedding zeroed, the mechanism's ablation); the tag LM's extreme bins, and
    # CB-pLM at those bins' mean concept (equal request strength).
    n = min(p.intervention.sequences, len(seqs))
    extremes = [(info["concept_min_sd"][c], info["concept_max_sd"][c]) for c in names]
    bin_means = [tuple(info["tag_bin_mean_sd"][c]) for c in names]
    target_bins = [(0, p.tag_bins - 1)] * len(names)  # the tag model's most extreme requests
    edit = {}
    for k in range(len(names)):
        attr = E.attribution(models["cb"], seqs[:n], k)
        for direction in (+1, -1):
            edit[(k, direction)] = E.edit_masks(attr, p.intervention.edit_fraction, direction)
    arms = {"cb": E.Arm(models["cb"], "cb", extremes), "cb_equal": E.Arm(models["cb"], "cb", bin_means),
            "cb_ablated": E.Arm(models["cb"], "cb", extremes, ablate=True), "cond": E.Arm(models["cond"], "cond", extremes),
            "tag": E.Arm(models["tag"], "tag", target_bins=target_bins), "plain": E.Arm(models["plain"], "plain")}
    iv = E.intervene(arms, seqs[:n], z[:n], bins[:n], edit, names, mean, std, p.tag_bins, p.intervention.temperature, seed)
    iv.insert(0, "seed", seed)
    write_parquet(iv, interventions)
    log.info("interventions (mean delta, SD units):\n%s", iv.groupby(["model", "concept"]).delta.mean().unstack().to_string())

    w = E.concept_weights(models["cb"], names)
    w.insert(0, "seed", seed)
    write_parquet(w, weights)


# ---- report ----------------------------------------------------------------------------------
def report(**paths):
    """The table, figures, claims and report.md (:func:`papers.cbplm.report.report`)."""
    from papers.cbplm.report import report as write_all

    write_all(**paths)
