"""The sbdd_vs DAG's stages:
prepare (actives, decoys, drug-like set) -> train (the SMILES LM) -> generate (per target: every
generator and seed) -> evaluate (per target: conventional and screening metrics) -> report.
Each function takes its parameters and paths explicitly.
"""
from __future__ import annotations

import dataclasses
import functools
import logging

import numpy as np
import pandas as pd
from rdkit import Chem

from papers.common.claims import write_claims
from papers.common.io import (
    read_json,
    read_parquet,
    read_parquets,
    write_json,
    write_parquet,
)
from papers.common.params import to_dict
from papers.common.progress import progress
from papers.common.report import write_report
from papers.common.seeding import seed_everything
from papers.sbdd_vs import chem, data, docking, generators, screening
from papers.sbdd_vs.params import GENERATORS, SLUG, TARGETS, parse

log = logging.getLogger(__name__)


def _mols(smiles) -> list[Chem.Mol]:
    return [Chem.MolFromSmiles(s) for s in smiles]


def _fps(smiles, p) -> list:
    return chem.fingerprints(_mols(smiles), radius=p.fingerprint.radius, bits=p.fingerprint.bits)


def _rng(seed: int, target: str, generator: str) -> np.random.Generator:
    """An independent stream per (sampling seed, target, generator)."""
    return np.random.default_rng([seed, TARGETS.index(target), GENERATORS.index(generator)])


def _read_files(paths, *, on_bad, limit, bad, counts) -> pd.DataFrame:
    frames = []
    for path in paths:
        before = len(bad)
        df = data.read_smiles(path, on_bad=on_bad, bad=bad, limit=limit)
        counts.append({"file": path, "kept": len(df), "malformed": len(bad) - before})
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


# ---- prepare ------------------------------------------------------------------------------------
def prepare(*, cfg, actives, libraries, druglike, records):
    """Per target: actives split by cluster and a screening library (planted hidden actives + DUD-E-style
    decoys); the drug-like set the generators draw from. `records` reports every malformed record."""
    p = parse(cfg)
    on_bad = p.data.on_bad_record
    bad, counts = [], []

    # The drug-like set (LM training, the random generator's library, the optimiser's starts and fragments).
    dl = _read_files(p.data.druglike or data.packaged_druglike(), on_bad=on_bad, limit=p.data.druglike_limit,
                     bad=bad, counts=counts)
    dl = dl[[Chem.MolFromSmiles(s).GetNumHeavyAtoms() <= p.data.max_heavy_atoms for s in dl.smiles]]

    # The decoy pool: no generator sees it.
    pool = _read_files(p.data.decoy_pool or data.packaged_decoy_pool(), on_bad=on_bad, limit=p.data.pool_limit,
                       bad=bad, counts=counts)
    pool = data.add_properties(pool.drop_duplicates("smiles").reset_index(drop=True))
    pool_fps = _fps(pool.smiles, p)

    all_actives, checks = {}, {}
    for target in p.targets:
        path = p.data.actives.get(target) or data.packaged_actives(target)
        before = len(bad)
        act = data.read_actives(path, on_bad=on_bad, bad=bad)
        counts.append({"file": path, "kept": len(act), "malformed": len(bad) - before})
        all_actives[target] = act.drop_duplicates("smiles").reset_index(drop=True)

    # No active of any target may leak into what generators train on or draw from.
    active_smiles = set().union(*(set(a.smiles) for a in all_actives.values()))
    leaked = int(dl.smiles.isin(active_smiles).sum())
    dl = dl[~dl.smiles.isin(active_smiles)].drop_duplicates("smiles").reset_index(drop=True)
    write_parquet(dl, druglike)

    for target, act_path, lib_path in zip(p.targets, actives, libraries):
        act = data.add_properties(data.split_by_cluster(all_actives[target], hidden_fraction=p.split.hidden_fraction,
                                                        max_hidden=p.split.max_hidden, seed=p.split.seed))
        pool_max_sim = chem.max_similarity(pool_fps, _fps(act.smiles, p))  # (n_pool,) to every active
        planted = act[act.planted]
        decoys = data.select_decoys(planted, pool, pool_max_sim, per_active=p.decoys.per_active,
                                    max_similarity=p.decoys.max_similarity, seed=p.decoys.seed)
        lib = pd.concat([planted.assign(active=1, decoy_for=""), decoys.assign(active=0, cluster=-1)],
                        ignore_index=True)
        lib = lib[["smiles", "id", "active", "decoy_for", *chem.PROPERTIES]]
        lib = lib.sample(frac=1.0, random_state=p.decoys.seed).reset_index(drop=True)  # ties keep this order
        write_parquet(act, act_path)
        write_parquet(lib, lib_path)
        checks[target] = {
            "pocket": dataclasses.asdict(docking.pocket_for(target, p.docking)),
            "actives": len(act), "clusters": int(act.cluster.nunique()),
            "known": int((act.role == "known").sum()), "hidden": int((act.role == "hidden").sum()),
            "planted": len(planted), "decoys": len(decoys),
            "dissimilar_candidates": int((pool_max_sim < p.decoys.max_similarity).sum()),
            # property bias: AUROC of ranking the library by each matching property alone (0.5 = matched)
            "property_auroc": {prop: screening.screening_metrics(lib[prop].to_numpy(float), lib.active.to_numpy(),
                                                                 ef_fraction=p.screen.ef_fraction,
                                                                 alpha=p.screen.bedroc_alpha)["auroc"]
                               for prop in chem.PROPERTIES},
        }
        log.info("%s: %s", target, checks[target])
    write_json({"on_bad_record": on_bad, "files": counts, "malformed": [vars(b) for b in bad],
                "druglike": len(dl), "druglike_actives_removed": leaked, "pool": len(pool), "targets": checks},
               records)


# ---- train --------------------------------------------------------------------------------------
def train(*, cfg, druglike, actives, pretrained, finetuned, history):
    """The SMILES LM: pretrained on the drug-like set, then one copy fine-tuned per target on its known actives."""
    import torch

    from papers.sbdd_vs import lm

    p = parse(cfg)
    q = p.lm
    seed_everything(q.seed)
    dl = read_parquet(druglike).smiles.tolist()
    known = {t: read_parquet(path).query("role == 'known'").smiles.tolist() for t, path in zip(p.targets, actives)}
    vocab = lm.Vocab.from_smiles(dl + [s for ks in known.values() for s in ks])

    def encode(smiles):
        rows = [vocab.encode(s, q.max_tokens) for s in smiles]
        kept = [r for r in rows if r is not None]
        log.info("encoded %d of %d SMILES (longer than %d tokens dropped)", len(kept), len(rows), q.max_tokens)
        return torch.tensor(kept, dtype=torch.long)  # (N, max_tokens + 2)

    model = lm.SmilesGPT(len(vocab.itos), d_model=q.d_model, n_layer=q.n_layer, n_head=q.n_head,
                         block_size=q.max_tokens + 2)
    gen = torch.Generator().manual_seed(q.seed)
    losses = lm.train(model, encode(dl), steps=q.pretrain_steps, batch=q.batch, lr=q.lr, generator=gen,
                      progress=lambda it: progress(it, desc="pretrain", total=q.pretrain_steps))
    rows = [{"phase": "pretrain", "target": "", "step": i + 1, "loss": v} for i, v in enumerate(losses)]
    config = {"vocab": vocab.itos, "d_model": q.d_model, "n_layer": q.n_layer, "n_head": q.n_head,
              "block_size": q.max_tokens + 2}
    torch.save({"model": model.state_dict(), "config": config, "step": q.pretrain_steps}, pretrained)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    for target, path in zip(p.targets, finetuned):
        model.load_state_dict(base)
        gen = torch.Generator().manual_seed(q.seed)
        losses = lm.train(model, encode(known[target]), steps=q.finetune_steps, batch=q.batch, lr=q.finetune_lr,
                          generator=gen, progress=functools.partial(progress, desc=f"finetune {target}",
                                                                    total=q.finetune_steps))
        rows += [{"phase": "finetune", "target": target, "step": i + 1, "loss": v} for i, v in enumerate(losses)]
        torch.save({"model": model.state_dict(), "config": config, "step": q.finetune_steps, "target": target}, path)
    write_parquet(pd.DataFrame(rows), history)


def _load_lm(path):
    import torch

    from papers.sbdd_vs import lm

    ckpt = torch.load(path, weights_only=True)
    c = ckpt["config"]
    model = lm.SmilesGPT(len(c["vocab"]), d_model=c["d_model"], n_layer=c["n_layer"], n_head=c["n_head"],
                         block_size=c["block_size"])
    model.load_state_dict(ckpt["model"])
    return model, lm.Vocab(c["vocab"])


# ---- generate -----------------------------------------------------------------------------------
def _pocket(records, target) -> docking.Pocket:
    return docking.Pocket(**read_json(records)["targets"][target]["pocket"])


def generate(*, cfg, target, actives, druglike, records, checkpoint, generated, optimiser_history):
    """Every generator's molecules for one target, for every sampling seed."""
    p = parse(cfg)
    known = read_parquet(actives).query("role == 'known'").smiles.tolist()
    dl = read_parquet(druglike).smiles.tolist()
    fitness = docking.Scorer(target, p.optimiser.fitness, p.docking, _pocket(records, target))
    rows, hist, model = [], [], None
    for seed in range(p.seeds):
        for name in p.generators:
            rng = _rng(seed, target, name)
            if name == "known":
                out = generators.draw(known, p.n_generate, rng)
            elif name == "random":
                out = generators.draw(dl, p.n_generate, rng)
            elif name == "brics":
                out = generators.brics(known, p.n_generate, rng, max_fragments=p.brics.max_fragments,
                                       max_tries=p.brics.max_tries)
            elif name == "optimiser":
                o = p.optimiser
                out, h = generators.optimise(dl, generators.draw(dl, o.library_molecules, rng), fitness,
                                             p.n_generate, rng, population=o.population, children=o.children,
                                             generations=o.generations, library_fragments=o.library_fragments,
                                             max_fragments=o.max_fragments)
                hist += [{"seed": seed, **r} for r in h]
            else:  # lm
                import torch

                from papers.sbdd_vs import lm

                if model is None:
                    model, vocab = _load_lm(checkpoint)
                out = lm.sample(model, vocab, p.n_generate, temperature=p.lm.temperature,
                                generator=torch.Generator().manual_seed(int(rng.integers(2**31))))
            log.info("%s %s seed %d: %d molecules", target, name, seed, len(out))
            rows += [{"generator": name, "seed": seed, "raw": s} for s in out]
    write_parquet(pd.DataFrame(rows, columns=["generator", "seed", "raw"]), generated)
    write_parquet(pd.DataFrame(hist, columns=["seed", "generation", "best", "mean"]), optimiser_history)


# ---- evaluate -----------------------------------------------------------------------------------
def evaluate(*, cfg, target, library, actives, records, generated, metrics):
    """Conventional metrics and the paper's screening metrics of every (generator, seed) of one target."""
    p = parse(cfg)
    lib = read_parquet(library)
    known = set(read_parquet(actives).query("role == 'known'").smiles)
    lib_fps = _fps(lib.smiles, p)
    active = lib.active.to_numpy()
    gen = read_parquet(generated)
    scorer = docking.Scorer(target, p.docking.engine, p.docking, _pocket(records, target))
    dock_cache: dict[str, float] = {}
    rows = []
    for (name, seed), g in progress(gen.groupby(["generator", "seed"], sort=False), desc=f"evaluate {target}"):
        parsed = [chem.parse_smiles(s) for s in g.raw]
        valid = [chem.canonical(m) for m in parsed if m is not None]
        unique = sorted(set(valid))
        mols = _mols(unique)
        for s, m in zip(unique, mols):
            if s not in dock_cache:
                dock_cache[s] = scorer(m)
        vs = screening.screening_metrics(chem.max_similarity(lib_fps, _fps(unique, p)), active,
                                         ef_fraction=p.screen.ef_fraction, alpha=p.screen.bedroc_alpha)
        rows.append({
            "target": target, "generator": name, "seed": int(seed), "n": len(g),
            "validity": len(valid) / max(len(g), 1), "uniqueness": len(unique) / max(len(valid), 1),
            "novelty": float(np.mean([s not in known for s in unique])) if unique else float("nan"),
            "heavy_atoms": float(np.mean([m.GetNumHeavyAtoms() for m in mols])) if mols else float("nan"),
            "docking": float(np.nanmean([dock_cache[s] for s in unique])) if unique else float("nan"),
            "qed": float(np.mean([chem.qed(m) for m in mols])) if mols else float("nan"),
            "sa": float(np.mean([chem.sa_score(m) for m in mols])) if mols else float("nan"),
            **vs,
        })
    write_parquet(pd.DataFrame(rows), metrics)


# ---- report -------------------------------------------------------------------------------------
TITLE = "P15 sbdd_vs: Evaluating structure-based drug design models by ligand-based virtual screening"
METRICS = ("validity", "uniqueness", "novelty", "heavy_atoms", "docking", "qed", "sa", "ef", "bedroc", "auroc")


def report(*, cfg, scale, metrics, records, lm_history, optimiser_histories, benchmarks,
           table_md, table_csv, claims, params_json, report_md, fig_metrics, fig_decoys):
    from papers.sbdd_vs import (
        report as rep,  # matplotlib: only this stage pays its import
    )

    p = parse(cfg)
    m = read_parquets(metrics)
    rec = read_json(records)
    rep.write_table(m, p, table_md, table_csv)
    rep.figure_metrics(m, p, fig_metrics)
    rep.figure_decoys(m, rec, p, fig_decoys)
    claim_list = rep.claims(m, p)
    write_claims(claim_list, claims, paper=SLUG, scale=scale)
    write_json(to_dict(p), params_json)
    opt_hists = {t: read_parquet(path) for t, path in zip(p.targets, optimiser_histories)}
    what = rep.what_was_run(p, rec, read_parquet(lm_history), opt_hists) + "\n\n" + rep.upper_bound_check(m, p)
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what,
                 table_md=table_md, figures=[fig_metrics, fig_decoys], claims=claim_list, benchmarks=benchmarks,
                 differences=rep.DIFFERENCES)
