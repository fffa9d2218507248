"""The sbdd_vs DAG's stages:
prepare (actives, decoys, drug-like set) -> train (the SMILES LM) -> generate (per target: every
generator and seed) -> evaluate (per target: conventional and screening metrics) -> report.
Each function takes its parameters and paths explicitly.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import zlib

import numpy as np
import pandas as pd
from rdkit import Chem, DataStructs

from papers.common.io import read_json, read_parquet, write_json, write_parquet
from papers.common.progress import progress
from papers.common.seeding import seed_everything
from papers.sbdd_vs import chem, data, docking, generators, screening
from papers.sbdd_vs.params import GENERATORS, TARGETS, parse

log = logging.getLogger(__name__)


def _mols(smiles) -> list[Chem.Mol]:
    return [Chem.MolFromSmiles(s) for s in smiles]


def _fps(smiles, p) -> list:
    return chem.fingerprints(_mols(smiles), radius=p.fingerprint.radius, bits=p.fingerprint.bits)


def _rng(seed: int, target: str, generator: str) -> np.random.Generator:
    """An independent stream per (sampling seed, target, generator); an external generator or a control query set
    is keyed by its name."""
    key = GENERATORS.index(generator) if generator in GENERATORS else zlib.crc32(generator.encode())
    return np.random.default_rng([seed, TARGETS.index(target), key])


def _read_files(paths, *, on_bad, limit, bad, counts) -> pd.DataFrame:
    frames = []
    for path in paths:
        before = len(bad)
        df = data.read_smiles(path, on_bad=on_bad, bad=bad, limit=limit)
        counts.append({"file": path, "kept": len(df), "malformed": len(bad) - before})
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


# ---- prepare ------------------------------------------------------------------------------------
def qualifying_splits(act: pd.DataFrame, fps, p) -> list[tuple[int, pd.DataFrame]]:
    """The library replicates' splits: scanning split seeds split.seed, split.seed + 1, ..., the first `seeds`
    similarity-stringent splits that leave at least split.min_planted eligible hidden actives to plant. The rule
    reads the actives alone (no result of any generator), so it is fixed before any screening is run."""
    out = []
    for seed in range(p.split.seed, p.split.seed + p.split.max_split_seeds):
        try:
            split = data.split_by_cluster(act, hidden_fraction=p.split.hidden_fraction, max_hidden=p.split.max_hidden,
                                          seed=seed, fps=fps, max_known_similarity=p.split.max_known_similarity)
        except ValueError:  # no eligible hidden active at all
            continue
        if int(split.planted.sum()) >= p.split.min_planted:
            out.append((seed, split))
            if len(out) == p.seeds:
                return out
    raise ValueError(f"sbdd_vs.split: only {len(out)} of split seeds {p.split.seed}..{p.split.seed + p.split.max_split_seeds - 1} "
                     f"leave >= min_planted = {p.split.min_planted} eligible hidden actives; {p.seeds} are needed "
                     "(raise split.hidden_fraction or max_split_seeds, or lower min_planted)")


def _library(split: pd.DataFrame, split_seed: int, pool: pd.DataFrame, pool_fps, p, replicate: int):
    """One library replicate of one target from its split: the planted hidden actives, their DUD-E decoys (decoy
    seed decoys.seed + replicate); and, for the decoy check, as many unmatched decoys (their property AUROCs only)."""
    planted = split[split.planted]
    pool_max_sim = chem.max_similarity(pool_fps, _fps(planted.smiles, p))  # (n_pool,) to the planted actives
    seed = p.decoys.seed + replicate
    decoys = data.select_decoys(planted, pool, pool_max_sim, per_active=p.decoys.per_active,
                                max_similarity=p.decoys.max_similarity, seed=seed, balance=p.decoys.balance)
    unmatched = data.unmatched_decoys(pool, pool_max_sim, len(decoys), max_similarity=p.decoys.max_similarity,
                                      seed=seed)
    cols = ["smiles", "id", "active", "decoy_for", *chem.PROPERTIES]
    actives_ = planted.assign(active=1, decoy_for="")[cols]
    lib = pd.concat([actives_, decoys.assign(active=0)[cols]], ignore_index=True)
    lib = lib.sample(frac=1.0, random_state=seed).reset_index(drop=True)  # ties keep this order
    control = pd.concat([actives_, unmatched.assign(active=0, decoy_for="")[cols]], ignore_index=True)
    check = {
        "replicate": replicate, "split_seed": split_seed, "decoy_seed": seed,
        "known": int((split.role == "known").sum()), "hidden": int((split.role == "hidden").sum()),
        "eligible": int(((split.role == "hidden") & (split.known_similarity < p.split.max_known_similarity)).sum()),
        "planted": len(planted), "planted_clusters": int(planted.cluster.nunique()), "decoys": len(decoys),
        "planted_known_similarity_max": float(planted.known_similarity.max()),
        "dissimilar_candidates": int((pool_max_sim < p.decoys.max_similarity).sum()),
        # property bias: AUROC of ranking the library by each matching property alone (0.5 = matched; ties 1/2)
        "property_auroc": {name: {prop: data.property_auroc(l[prop], l.active == 1) for prop in chem.PROPERTIES}
                           for name, l in (("dude", lib), ("unmatched", control))},
    }
    return split.assign(replicate=replicate), lib.assign(replicate=replicate, library="dude"), check


def prepare(*, cfg, actives, libraries, druglike, records):
    """Per target and library replicate: actives split by cluster (similarity-stringent, qualifying splits only) and
    a screening library (planted hidden actives + DUD-E decoys; the property AUROCs of an unmatched-decoy control
    in `records`); the drug-like set the generators draw from, with every decoy-pool compound removed. `records`
    reports every malformed record."""
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

    all_actives, checks = {}, {}
    for target in p.targets:
        path = p.data.actives.get(target) or data.packaged_actives(target)
        before = len(bad)
        act = data.read_actives(path, on_bad=on_bad, bad=bad)
        counts.append({"file": path, "kept": len(act), "malformed": len(bad) - before})
        all_actives[target] = act.drop_duplicates("smiles").reset_index(drop=True)

    # No active of any target may leak into what generators train on or draw from, and no decoy either:
    # the decoy pool leaves the drug-like set (and an active the decoy pool).
    active_smiles = set().union(*(set(a.smiles) for a in all_actives.values()))
    dl = dl.drop_duplicates("smiles")
    leaked, n_dl = int(dl.smiles.isin(active_smiles).sum()), len(dl)
    dl = data.exclude(data.exclude(dl, active_smiles), pool.smiles)
    pool_in_druglike = n_dl - leaked - len(dl)
    pool = data.exclude(pool, active_smiles)
    write_parquet(dl, druglike)
    pool_fps = _fps(pool.smiles, p)

    for target, act_path, lib_path in zip(p.targets, actives, libraries):
        act = data.add_properties(all_actives[target])
        splits, libs, reps = [], [], []
        for r, (split_seed, split) in enumerate(qualifying_splits(act, _fps(act.smiles, p), p)):
            split, lib, check = _library(split, split_seed, pool, pool_fps, p, r)
            splits.append(split)
            libs.append(lib)
            reps.append(check)
            log.info("%s replicate %d: %s", target, r, check)
        write_parquet(pd.concat(splits, ignore_index=True), act_path)
        write_parquet(pd.concat(libs, ignore_index=True), lib_path)
        checks[target] = {"pocket": dataclasses.asdict(docking.pocket_for(target, p.docking)),
                          "actives": len(act), "clusters": int(act.cluster.nunique()), "replicates": reps}
    write_json({"on_bad_record": on_bad, "files": counts, "malformed": [vars(b) for b in bad],
                "druglike": len(dl), "druglike_actives_removed": leaked, "druglike_pool_removed": pool_in_druglike,
                "pool": len(pool), "targets": checks}, records)


# ---- train --------------------------------------------------------------------------------------
def train(*, cfg, druglike, actives, pretrained, finetuned, history):
    """The SMILES LM: pretrained on the drug-like set, then one copy fine-tuned per target and library replicate on
    that replicate's known actives (so that no copy sees the actives planted in its library)."""
    import torch

    from papers.sbdd_vs import lm

    p = parse(cfg)
    q = p.lm
    seed_everything(q.seed)
    dl = read_parquet(druglike).smiles.tolist()
    act = {t: read_parquet(path) for t, path in zip(p.targets, actives)}
    known = {(t, r): a[(a.replicate == r) & (a.role == "known")].smiles.tolist() for t, a in act.items()
             for r in range(p.seeds)}
    # The vocabulary is the drug-like set's: a token seen only in actives (planted ones included) would tell
    # the model that it exists. A known active with such a token cannot be encoded and is left out (logged).
    vocab = lm.Vocab.from_smiles(dl)

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
    rows = [{"phase": "pretrain", "target": "", "replicate": -1, "step": i + 1, "loss": v} for i, v in enumerate(losses)]
    config = {"vocab": vocab.itos, "d_model": q.d_model, "n_layer": q.n_layer, "n_head": q.n_head,
              "block_size": q.max_tokens + 2}
    torch.save({"model": model.state_dict(), "config": config, "step": q.pretrain_steps}, pretrained)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    for target, path in zip(p.targets, finetuned):
        states = []
        for r in range(p.seeds if "lm" in p.generators else 0):  # no fine-tuning when the LM only embeds
            model.load_state_dict(base)
            gen = torch.Generator().manual_seed(q.seed)
            losses = lm.train(model, encode(known[target, r]), steps=q.finetune_steps, batch=q.batch,
                              lr=q.finetune_lr, generator=gen,
                              progress=functools.partial(progress, desc=f"finetune {target} {r}", total=q.finetune_steps))
            rows += [{"phase": "finetune", "target": target, "replicate": r, "step": i + 1, "loss": v}
                     for i, v in enumerate(losses)]
            states.append({k: v.clone() for k, v in model.state_dict().items()})
        torch.save({"models": states, "config": config, "step": q.finetune_steps, "target": target}, path)
    write_parquet(pd.DataFrame(rows), history)


def _load_lm(path, replicate: int | None = None):
    """The LM fine-tuned on library replicate `replicate`'s known actives, or (replicate None, `path` the
    pretrained checkpoint) the LM pretrained on the drug-like set alone."""
    import torch

    from papers.sbdd_vs import lm

    ckpt = torch.load(path, weights_only=True)
    c = ckpt["config"]
    model = lm.SmilesGPT(len(c["vocab"]), d_model=c["d_model"], n_layer=c["n_layer"], n_head=c["n_head"],
                         block_size=c["block_size"])
    model.load_state_dict(ckpt["model"] if replicate is None else ckpt["models"][replicate])
    return model, lm.Vocab(c["vocab"])


# ---- generate -----------------------------------------------------------------------------------
def _pocket(records, target) -> docking.Pocket:
    return docking.Pocket(**read_json(records)["targets"][target]["pocket"])


# The positive control's query set (not a generator): hidden actives left unplanted, drawn from the clusters of
# the planted ones, so that by construction they are analogues of what they must retrieve.
SIBLINGS = "siblings"


def siblings(act: pd.DataFrame, replicate: int) -> list[str]:
    """The hidden, unplanted actives of replicate `replicate` whose cluster holds a planted active."""
    a = act[act.replicate == replicate]
    clusters = set(a[a.planted].cluster)
    return a[(a.role == "hidden") & ~a.planted & a.cluster.isin(clusters)].smiles.tolist()


# Claim (b)'s ablation query set (not a generator): the known actives' target-specific chemistry removed, by taking
# the actives of another target in their place (real ligands all the same, as many as the known actives drawn).
CROSS = "cross_target"


def cross_target(act: pd.DataFrame, others: list[pd.DataFrame], replicate: int, n: int,
                 rng: np.random.Generator) -> list[str]:
    """As many molecules as the known-actives query set of replicate `replicate` holds (at most `n`), drawn from
    the actives of the other targets (`others`, each target's actives once), leaving out any molecule that is
    also an active of this target. Fewer where the other targets have fewer actives."""
    own = set(act.smiles)
    pool = sorted({s for o in others for s in o.smiles} - own)
    k = min(n, int(((act.replicate == replicate) & (act.role == "known")).sum()))
    return generators.draw(pool, k, rng)


def generate(*, cfg, target, actives, druglike, records, generated, optimiser_history, checkpoint=None,
             cross_actives=()):
    """Every generator's molecules for one target, for every replicate (seed): the generators that use actives
    see that replicate's known ones only; an external generator's molecules are drawn from its file. Also the
    control query sets, screened like a generator's molecules: the positive control's (:func:`siblings`) and,
    where `cross_actives` (the other targets' actives files) are given, the ablation's (:func:`cross_target`)."""
    p = parse(cfg)
    act = read_parquet(actives)
    # every other target's actives, each molecule once (a target's actives file repeats them per replicate)
    cross_actives = [cross_actives] if isinstance(cross_actives, str) else list(cross_actives)
    others = [read_parquet(path).drop_duplicates("smiles") for path in cross_actives]
    dl = read_parquet(druglike).smiles.tolist()
    fitness = docking.Scorer(target, p.optimiser.fitness, p.docking, _pocket(records, target))
    external = {name: data.read_smiles(files[target]).smiles.tolist() for name, files in p.external.items()
                if name in p.generators}
    rows, hist = [], []
    for seed in range(p.seeds):
        known = act[(act.replicate == seed) & (act.role == "known")].smiles.tolist()
        model = None
        for name in (*p.generators, SIBLINGS, *([CROSS] if others else [])):
            rng = _rng(seed, target, name)
            if name == SIBLINGS:
                out = generators.draw(siblings(act, seed), p.n_generate, rng)
            elif name == CROSS:
                out = cross_target(act, others, seed, p.n_generate, rng)
            elif name in external:
                out = generators.draw(external[name], p.n_generate, rng)
            elif name == "known":
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
                                             max_fragments=o.max_fragments, max_heavy_atoms=o.max_heavy_atoms)
                hist += [{"seed": seed, **r} for r in h]
            else:  # lm
                import torch

                from papers.sbdd_vs import lm

                if model is None:
                    model, vocab = _load_lm(checkpoint, seed)
                out = lm.sample(model, vocab, p.n_generate, temperature=p.lm.temperature,
                                generator=torch.Generator().manual_seed(int(rng.integers(2**31))))
            log.info("%s %s seed %d: %d molecules", target, name, seed, len(out))
            rows += [{"generator": name, "seed": seed, "raw": s} for s in out]
    write_parquet(pd.DataFrame(rows, columns=["generator", "seed", "raw"]), generated)
    write_parquet(pd.DataFrame(hist, columns=["seed", "generation", "best", "mean", "failed"]), optimiser_history)


# ---- evaluate -----------------------------------------------------------------------------------
def evaluate(*, cfg, target, library, actives, records, generated, metrics, pretrained=None):
    """Conventional metrics and the paper's screening metrics of every (generator, seed) of one target, each
    screened against its seed's library replicate, with Morgan fingerprints and, with screen.embedding, a learned
    embedding (the pretrained SMILES LM's, :func:`lm.embed`; columns ``*_emb``).

    The embedding comes from the LM pretrained on the drug-like set alone, one fixed representation for
    every generator and replicate: it has seen no active, and no generator is screened in its own space.
    """
    from papers.sbdd_vs import lm

    p = parse(cfg)
    encoder, vocab = _load_lm(pretrained) if p.screen.embedding else (None, None)
    libs = read_parquet(library)
    act = read_parquet(actives)
    gen = read_parquet(generated)
    scorer = docking.Scorer(target, p.docking.engine, p.docking, _pocket(records, target))
    dock_cache: dict[str, float] = {}
    rows, screens = [], {}
    for r in sorted(libs.replicate.unique()):
        lib = libs[libs.replicate == r].reset_index(drop=True)
        emb = lm.embed(encoder, vocab, lib.smiles).numpy() if encoder is not None else None
        screens[int(r)] = (_fps(lib.smiles, p), emb, lib.active.to_numpy())
    for (name, seed), g in progress(gen.groupby(["generator", "seed"], sort=False), desc=f"evaluate {target}"):
        known = set(act[(act.replicate == seed) & (act.role == "known")].smiles)
        lib_fps, lib_emb, active = screens[int(seed)]
        parsed = [chem.parse_smiles(s) for s in g.raw]
        valid = [chem.canonical(m) for m in parsed if m is not None]
        unique = sorted(set(valid))
        mols = _mols(unique)
        for s, m in zip(unique, mols):
            if s not in dock_cache:
                dock_cache[s] = scorer(m)
        vs = screening.screening_metrics(chem.max_similarity(lib_fps, _fps(unique, p)), active,
                                         ef_fraction=p.screen.ef_fraction, alpha=p.screen.bedroc_alpha)
        emb = {} if encoder is None else screening.screening_metrics(
            screening.max_cosine(lib_emb, lm.embed(encoder, vocab, unique).numpy()), active,
            ef_fraction=p.screen.ef_fraction, alpha=p.screen.bedroc_alpha)
        rows.append({
            "target": target, "generator": name, "seed": int(seed), "n": len(g),
            "validity": len(valid) / max(len(g), 1), "uniqueness": len(unique) / max(len(valid), 1),
            "novelty": float(np.mean([s not in known for s in unique])) if unique else float("nan"),
            "heavy_atoms": float(np.mean([m.GetNumHeavyAtoms() for m in mols])) if mols else float("nan"),
            "docking": float(np.nanmean([dock_cache[s] for s in unique])) if unique else float("nan"),
            # ligand efficiency: the docking score per heavy atom, the size-normalised score (Hopkins et al. 2004)
            "docking_per_atom": (float(np.nanmean([dock_cache[s] / m.GetNumHeavyAtoms() for s, m in zip(unique, mols)]))
                                 if unique else float("nan")),
            "qed": float(np.mean([chem.qed(m) for m in mols])) if mols else float("nan"),
            "sa": float(np.mean([chem.sa_score(m) for m in mols])) if mols else float("nan"),
            **vs,
            **{f"{k}_emb": v for k, v in emb.items()},
        })
    write_parquet(pd.DataFrame(rows), metrics)


# ---- dock ---------------------------------------------------------------------------------------
def dock(*, cfg, target, generated, library, records, vina):
    """AutoDock Vina (dockstring's receptor and box) on a sample: for each of the first `vina.pairs` library
    replicates, the docking optimiser's top molecule by the fitness it climbed (the first of its output: the GA
    returns its molecules best first by that fitness, proxy or Vina), and `vina.per_replicate` known actives and as
    many of the replicate's property-matched DUD-E decoys, drawn without replacement (claim a's docking gate: Vina
    must dock the known actives better than the decoys). Each molecule is also scored by the proxy, and each Vina
    run's CPU time is measured (its child processes); a molecule docked twice (the same known active drawn in two
    replicates) is docked once and its score reused (its CPU time counted once)."""
    p = parse(cfg)
    gen = read_parquet(generated)
    libs = read_parquet(library)
    proxy = docking.Scorer(target, "proxy", p.docking, _pocket(records, target))
    cache: dict[str, tuple[float, float]] = {}
    rows = []
    for seed in range(p.vina.pairs):
        rng = np.random.default_rng([p.vina.seed, seed, TARGETS.index(target)])
        lib = libs[libs.replicate == seed]
        picks = []
        opt = [m for m in map(chem.parse_smiles, gen[(gen.generator == "optimiser") & (gen.seed == seed)].raw)
               if m is not None]
        if opt:
            picks.append(("optimiser", chem.canonical(opt[0])))  # its best by the fitness it climbed
        for name, pool in (("known", gen[(gen.generator == "known") & (gen.seed == seed)].raw),
                           ("decoy", lib[lib.active == 0].smiles)):
            pool = sorted({chem.canonical(m) for m in map(chem.parse_smiles, pool) if m is not None})
            k = min(p.vina.per_replicate, len(pool))
            picks += [(name, pool[i]) for i in sorted(rng.choice(len(pool), size=k, replace=False))]
        for name, smi in picks:
            mol = Chem.MolFromSmiles(smi)
            first = smi not in cache
            if first:
                cache[smi] = docking.vina_score(smi, target, cpus=p.docking.vina_cpus, seed=p.vina.seed,
                                                exhaustiveness=p.docking.vina_exhaustiveness, box=p.docking.vina_box)
            score, seconds = cache[smi]
            rows.append({"target": target, "seed": seed, "generator": name, "smiles": smi, "vina": score,
                         "proxy": proxy(mol), "heavy_atoms": mol.GetNumHeavyAtoms(),
                         "cpu_seconds": seconds if first else 0.0})
            log.info("%s seed %d %s: Vina %.2f, proxy %.2f, %d heavy atoms, %.1f CPU s", target, seed, name,
                     score, rows[-1]["proxy"], rows[-1]["heavy_atoms"], rows[-1]["cpu_seconds"])
    write_parquet(pd.DataFrame(rows, columns=["target", "seed", "generator", "smiles", "vina", "proxy", "heavy_atoms",
                                              "cpu_seconds"]), vina)
