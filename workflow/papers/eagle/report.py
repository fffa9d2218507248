"""The eagle report: the accuracy table, the figure, claims (a)-(d) with their negative controls, report.md."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from papers.common.claims import Claim, Control, paired_test, write_claims
from papers.common.io import read_parquet, read_parquets, write_json, write_parquet
from papers.common.params import to_dict
from papers.common.plotting import savefig, subplots
from papers.common.report import job_times, write_report
from papers.common.tables import mean_std, write_table
from papers.eagle.params import EXPERTS, FUSIONS, SLUG, full_scale, parse

TITLE = "P8 eagle: Eagle, a mixture of vision encoders for multimodal LLMs (channel concatenation, Pre-Alignment)"


def chance(digit_classes: int, kinds) -> dict[str, float]:
    """Chance level per question kind asked: one of `digit_classes` digit words, of 4 counts, of 4 quadrants;
    "all" is their mean (one question of each kind per canvas)."""
    per_kind = {"global": 1 / digit_classes, "fine": 1 / digit_classes, "count": 0.25, "position": 0.25}
    out = {k: per_kind[k] for k in kinds}
    out["all"] = sum(out.values()) / len(out)
    return out

# Wording only (no verdict depends on it): the notes call a run "near chance" when its best arm is within this.
NEAR_CHANCE = 0.1


def why(df: pd.DataFrame, chance_all: float) -> dict[str, str]:
    """What we know of the reasons, shown for each claim that does not hold or is inconclusive; the numbers
    come from this run's table."""
    test = df[(df.split == "test") & (df.kind == "all")].groupby("arm").accuracy.mean()
    best, best_arm = float(test.max()), str(test.idxmax())
    common = (f"every arm's mean test accuracy lies between {test.min():.3f} and {best:.3f} ({best_arm}), against "
              f"{chance_all:.3f} for uniform guessing")
    if best < chance_all + NEAR_CHANCE:
        common += (": at this budget (a few hundred steps per arm on one CPU core) the joint models have barely "
                   "begun to read their visual tokens, although the experts learned their own objectives (pretrain "
                   "logs), so the arms differ by little more than the seeds' spread")
    else:
        common += ("; every arm is still learning when its step budget ends (a few hundred steps on one CPU core), "
                   "and when an arm leaves the loss plateau varies between arms and seeds")
    fine = df[(df.split == "test") & (df.kind == "fine") & (df.arm == "fusion:concat")].sort_values("seed").accuracy
    n = df.seed.nunique()
    diff = per_seed(df, "fusion:concat") - per_seed(df, "fusion:sequence_append")
    sd = diff.std(ddof=1) if n > 1 else float("nan")
    half = stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n) if n > 1 else float("nan")
    spread = (f"the mixtures read the fine print in some seeds and not in others (fusion:concat's fine-question "
              f"test accuracy per seed: {', '.join(f'{v:.2f}' for v in fine)}), so {n} seeds give intervals far "
              f"wider than the effects (e.g. concat - sequence append: per-seed sd {sd:.3f}, 95% "
              f"half-width t({n - 1}) x sd / sqrt({n}) = {half:.3f}, against a margin of a few hundredths)")
    return {
        "a": common + "; " + spread + ".",
        "b": common + "; " + spread + "; the single experts themselves are clearly specialised (table: CLIP reads "
                      "the big digit, the high-res reader the small one).",
        "c": common + "; " + spread + "; Pre-Alignment does not remove that seed-to-seed split at this budget.",
        "d": common + "; " + spread + "; the round-robin's steps inherit it.",
    }


def per_seed(df: pd.DataFrame, arm: str, kind: str = "all", split: str = "test") -> np.ndarray:
    sel = df[(df.arm == arm) & (df.kind == kind) & (df.split == split)]
    if sel.empty:
        raise ValueError(f"eagle: no accuracies for arm {arm}, kind {kind}, split {split}")
    return sel.sort_values("seed").accuracy.to_numpy()


def rr_step(df: pd.DataFrame, step: int, kind: str = "all") -> np.ndarray:
    """Per seed, the test accuracy of the round-robin's selection with `step` experts."""
    sel = df[(df.rr_step == step) & (df.kind == kind) & (df.split == "test")]
    return sel.groupby("seed").accuracy.first().sort_index().to_numpy()


def eagle_claims(p, df: pd.DataFrame) -> list[Claim]:
    margin, thr = p.claims["equivalence_margin"], p.claims["gain_threshold"]
    concat = per_seed(df, "fusion:concat")
    others = [f for f in FUSIONS if f != "concat"]
    tokens = {f: int(df[df.arm == f"fusion:{f}"].visual_tokens.iloc[0]) for f in FUSIONS}
    budget = {f: int(df[df.arm == f"fusion:{f}"].fusion_params.iloc[0]) for f in FUSIONS}

    def as_accurate(reference_arm):
        ref = per_seed(df, reference_arm)
        return [paired_test(ref, per_seed(df, f"fusion:{f}"), threshold=-margin, direction=">",
                            name=f"{reference_arm} - {f}") for f in others]

    claim_a = Claim(
        "a", "Channel concatenation is as accurate as the more complex fusions, with fewer visual tokens than "
             "sequence append",
        "fusion-strategy study: channel concat on par with sequence append, LLaVA-HR injection, Mini-Gemini and deformable attention, simpler and cheaper",
        {**{f"test acc {f}": float(per_seed(df, f"fusion:{f}").mean()) for f in FUSIONS},
         **{f"visual tokens {f}": tokens[f] for f in FUSIONS}, **{f"fusion params {f}": budget[f] for f in FUSIONS}},
        f"per fusion, paired-by-seed t interval of test accuracy (concat - fusion) > -{margin:g} (equivalence margin, "
        f"config eagle.claims.equivalence_margin, fixed before the run); the token counts are arithmetic "
        f"({tokens['concat']} vs {tokens['sequence_append']}) and are reported, not tested",
        as_accurate("fusion:concat"),
        Control("the CLIP expert alone (no high-resolution experts) in place of the concatenation, same criterion",
                as_accurate("single:clip")))

    def beats_singles(mix_arm):
        mix = per_seed(df, mix_arm)
        parts = [paired_test(mix, per_seed(df, f"single:{e}"), threshold=thr, name=f"{mix_arm} - single {e}")
                 for e in EXPERTS]
        gain = {k: per_seed(df, mix_arm, k) - per_seed(df, "single:clip", k) for k in ("fine", "global")}
        parts.append(paired_test(gain["fine"], gain["global"], threshold=thr,
                                 name=f"gain over clip on fine - on global questions ({mix_arm})"))
        return parts

    claim_b = Claim(
        "b", "The mixture beats every single expert, most on the fine-detail questions",
        "mixture-of-experts study: the mixture above every single encoder, the largest gains on OCR / document benchmarks",
        {**{f"test acc single {e}": float(per_seed(df, f"single:{e}").mean()) for e in EXPERTS},
         "test acc concat": float(concat.mean()),
         **{f"gain over clip on {k}": float((per_seed(df, "fusion:concat", k) - per_seed(df, "single:clip", k)).mean())
            for k in p.data["kinds"]}},
        f"paired-by-seed t intervals: concat - each single expert > {thr:g} (test accuracy), and its gain over CLIP "
        f"on fine-detail questions minus its gain on global questions > {thr:g}",
        beats_singles("fusion:concat"),
        Control("the same concatenation with the high-res and localisation experts fed Gaussian noise instead of "
                "the canvas (no extra visual detail), same criterion", beats_singles("control:blind_hires_experts")))

    pre, shuffled = per_seed(df, "prealign:concat"), per_seed(df, "prealign_shuffled:concat")
    claim_c = Claim(
        "c", "Pre-Alignment improves the mixture over joint training alone",
        "Pre-Alignment study: pre-aligning the non-CLIP experts improves the mixture",
        {"test acc concat": float(concat.mean()), "test acc concat + Pre-Alignment": float(pre.mean()),
         "test acc concat + shuffled Pre-Alignment": float(shuffled.mean())},
        f"paired-by-seed t interval of test accuracy (Pre-Alignment - joint only) > {thr:g}",
        paired_test(pre, concat, threshold=thr, name="prealign - joint"),
        Control("Pre-Alignment on shuffled (question, canvas) pairs: the same extra steps without any alignment "
                "of image and text", paired_test(shuffled, concat, threshold=thr, name="shuffled prealign - joint")))

    steps = [rr_step(df, k) for k in (1, 2, 3)]
    g1, g2 = steps[1] - steps[0], steps[2] - steps[1]
    chosen = df[(df.rr_step > 0) & (df.kind == "all") & (df.split == "test")].sort_values(["seed", "rr_step"])
    orders = chosen.groupby("seed").experts.apply(lambda s: " -> ".join(s)).to_dict()
    blind, clip = per_seed(df, "control:blind_hires_experts"), per_seed(df, "single:clip")
    claim_d = Claim(
        "d", "Round-robin selection: each added expert helps, with diminishing gains",
        "round-robin expert selection: each added expert improves the average benchmark score, with shrinking gains",
        {"test acc by step": [float(s.mean()) for s in steps], "order per seed": {str(k): v for k, v in orders.items()},
         "test acc clip + two experts fed noise": float(blind.mean())},
        f"paired-by-seed t intervals: the gain of each added expert > {thr:g}, and the first gain minus the second > {thr:g}",
        [paired_test(steps[1], steps[0], threshold=thr, name="step 2 - step 1"),
         paired_test(steps[2], steps[1], threshold=thr, name="step 3 - step 2"),
         paired_test(g1, g2, threshold=thr, name="gain 1 - gain 2 (diminishing)")],
        Control("the two non-CLIP experts fed Gaussian noise added to CLIP (experts with no information): their "
                "gain over CLIP alone, same threshold",
                paired_test(blind, clip, threshold=thr, name="clip + noise experts - clip")))
    return [claim_a, claim_b, claim_c, claim_d]


def _table(df: pd.DataFrame, chance_of: dict, kinds: list[str]):
    md, csv = [], []
    for arm in sorted(df.arm.unique(), key=lambda a: (a.split(":")[0] != "single", a.split(":")[0] != "fusion", a)):
        sub = df[(df.arm == arm) & (df.split == "test")]
        if arm.startswith("rr:") and sub.seed.nunique() < df.seed.nunique():
            label = f"{arm} (round-robin, {sub.seed.nunique()} of {df.seed.nunique()} seeds)"
        else:
            label = arm
        row_md = {"arm": label, "visual tokens": int(sub.visual_tokens.iloc[0]), "fusion params": int(sub.fusion_params.iloc[0])}
        row_csv = dict(row_md, arm=arm, seeds=int(sub.seed.nunique()))
        for kind in ("all", *kinds):
            v = sub[sub.kind == kind].sort_values("seed").accuracy.to_numpy()
            row_md[f"test {kind}"] = mean_std(v, 3)
            row_csv[f"test_{kind}_mean"] = v.mean()
            row_csv[f"test_{kind}_std"] = v.std(ddof=1) if v.size > 1 else 0.0
        v = df[(df.arm == arm) & (df.split == "novel") & (df.kind == "all")].sort_values("seed").accuracy.to_numpy()
        if v.size:  # the canvases' held-out templates (the full scale's benchmarks have none)
            row_md["novel templates all"] = mean_std(v, 3)
            row_csv["novel_all_mean"], row_csv["novel_all_std"] = v.mean(), (v.std(ddof=1) if v.size > 1 else 0.0)
        md.append(row_md)
        csv.append(row_csv)
    if chance_of is None:  # free-form answers (full scale): no uniform-guessing level
        return pd.DataFrame(md), pd.DataFrame(csv)
    md.append({"arm": "chance (uniform over the kind's answers)", "visual tokens": 0, "fusion params": 0,
               **{f"test {k}": f"{chance_of[k]:.3g}" for k in ("all", *kinds)},
               "novel templates all": f"{chance_of['all']:.3g}"})
    csv.append({"arm": "chance", "visual tokens": 0, "fusion params": 0, "seeds": 0,
                **{f"test_{k}_mean": chance_of[k] for k in ("all", *kinds)}, **{f"test_{k}_std": 0.0 for k in ("all", *kinds)},
                "novel_all_mean": chance_of["all"], "novel_all_std": 0.0})
    return pd.DataFrame(md), pd.DataFrame(csv)


def _figure(df: pd.DataFrame, path, kinds: list[str]):
    arms = [a for a in df.arm.unique() if not a.startswith("rr:")]
    fig, axes = subplots(1, 1, width=11, height=4)
    ax = axes[0, 0]
    width = 0.8 / len(kinds)
    for i, kind in enumerate(kinds):
        vals = [per_seed(df, a, kind) for a in arms]
        ax.bar(np.arange(len(arms)) + i * width, [v.mean() for v in vals], width,
               yerr=[v.std(ddof=1) if v.size > 1 else 0 for v in vals], label=kind)
    ax.set_xticks(np.arange(len(arms)) + 0.4 - width / 2)
    ax.set_xticklabels(arms, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("test accuracy")
    ax.set_title("held-out canvases and digit images; bars: mean, lines: std over seeds", fontsize=9)
    ax.legend(fontsize=7)
    savefig(fig, path)


def _seed_budget(benchmarks, seeds: int, more: int = 5) -> str:
    """What `more` seeds would cost, from this run's benchmark files (per-seed jobs: pretrain and train)."""
    per_seed = [b for b in benchmarks if "/pretrain/" in str(b) or "/train/" in str(b)]
    every, fixed = job_times(benchmarks), job_times([b for b in benchmarks if b not in per_seed])
    if not per_seed or seeds >= more:
        return ""
    seed = {k: (every[k] - fixed[k]) / seeds for k in ("seconds", "cpu_seconds")}
    return (f"Seeds: {seeds}, not {more}: a seed's pretrain and train jobs took {seed['seconds']:.0f} s "
            f"({seed['cpu_seconds']:.0f} s CPU) here and the other jobs {fixed['seconds']:.0f} s "
            f"({fixed['cpu_seconds']:.0f} s CPU), so {more} seeds would take about "
            f"{fixed['seconds'] + more * seed['seconds']:.0f} s ({fixed['cpu_seconds'] + more * seed['cpu_seconds']:.0f} "
            "s CPU) of job time against the 360 s budget; a train job is nearly all the arms' optimisation steps (SFT, "
            "then alignment; evaluation and the cached lower-layer activations take a few per cent), so only fewer "
            "steps per arm would make room, not removing waste.")


def _full_scale_text(p) -> tuple[str, str]:
    """What was run and what differs, at the full scale (LLaVA-style data, Hugging Face models)."""
    lv, t = p.llava, p.train
    what = (f"{p.seeds} seeds (each initialises every fusion anew and draws its own batches; the pretrained experts "
            f"and LM are the same). Training records {lv['train_json']}, validation (round-robin choices) "
            f"{lv['val_json']}, test (claims) {lv['test_json']}, images under {lv['image_folder']}. Experts: clip "
            f"{lv['experts']['clip']}, hires {lv['experts']['hires']}, det {lv['experts']['det']}; LM {lv['lm']}. "
            f"Every arm: Pre-Alignment {t['prealign_steps']} steps per non-CLIP expert where used (the whole tower and "
            f"its own projector, LM frozen), stage 1 {t['align_steps']} steps (projector only), stage 2 "
            f"{t['sft_steps']} steps (towers, projector, LM), batch {t['batch']}; fusions on a {p.fusion['grid']} x "
            f"{p.fusion['grid']} grid at matched parameter counts. Accuracy: greedy decoding reproduces the reference "
            "answer exactly.")
    differences = ("Adam with constant learning rates and one batch size for every stage (the paper: AdamW, cosine "
                   "schedule, warm-up, batch 256 then 128); images resized to each expert's square input without "
                   "padding; the visual tokens follow BOS instead of standing at the <image> tag; accuracy is exact "
                   "match of the greedy answer, not each benchmark's own metric; LLaVA-HR's adapter acts on the CLIP "
                   "tower's output map, not inside its stages; deformable attention has one head.")
    return what, differences


def report(*, cfg, scale, table, benchmarks, table_md, table_csv, claims, params_json, report_md, accuracy_figure):
    p = parse(cfg)
    df = read_parquet(table)
    kinds = list(p.data["kinds"])
    full = full_scale(p)
    chance_of = None if full else chance(p.data["digit_classes"], kinds)
    md, csv = _table(df, chance_of, kinds)
    caption = (f"Answer accuracy on the test split (held-out canvases and digit images, training question "
               f"templates), mean +- std over {p.seeds} seeds, per question kind; last column: the same canvases "
               "asked with the held-out templates (all kinds). Visual tokens the LM reads; fusion parameters "
               "(matched to the concat projector's). rr: round-robin pairs (only the seeds that tried them).")
    write_table(md, table_md, table_csv, caption=caption, csv_df=csv)
    _figure(df, accuracy_figure, kinds)
    claim_list = eagle_claims(p, df)
    write_claims(claim_list, claims, paper=SLUG, scale=scale)
    write_json(to_dict(p), params_json)
    d, t = p.data, p.train
    what = (
        f"{p.seeds} seeds (each draws its own canvases, pretrains its own experts and LM, initialises every arm). "
        f"Canvases 32 x 32 from sklearn's digits 0-{d['digit_classes'] - 1}: a big digit (x2) in one quadrant, a "
        f"small 8 x 8 digit at a random offset in another, 1-4 marks in the other two; {d['train_canvases']} "
        f"training canvases, {d['val_canvases']} validation and {d['test_canvases']} test canvases (from held-out "
        f"digit images) per seed, one question of each kind in {', '.join(d['kinds'])} each, 5-word templates; the test "
        f"canvases are also asked with one held-out template per kind (column 'novel templates'). Experts "
        f"({p.experts['channels']} channels, layer-normed output): CLIP-style InfoNCE on 8 x 8 views, a reader of the "
        f"small digit at 32 x 32, a localiser at 16 x 16, each {p.experts['pretrain_steps']} steps; LM d="
        f"{p.lm['d_model']}, {p.lm['n_layer']} block(s), {p.lm['pretrain_steps']} steps on the QA text. Every arm: "
        f"Pre-Alignment {t['prealign_steps']} steps per non-CLIP expert where used (its last layer and own projector, "
        f"LM frozen), stage 1 {t['align_steps']} steps (projector only), stage 2 {t['sft_steps']} steps (towers' last "
        f"layers, projector, LM), batch {t['batch']}. Fusions on a {p.fusion['grid']} x {p.fusion['grid']} grid at "
        f"matched parameter counts. Round-robin over the three experts with concatenation, chosen on validation.")
    differences = (
        "Data: synthetic digit canvases and templated one-word answers stand in for LLaVA-1.5 / Eagle-1.8M data and "
        "the paper's benchmarks (GQA, TextVQA, OCRBench, ...). The full scale (config/full.yaml, eagle.llava) runs "
        "the same arms and stages on LLaVA-style JSON data and benchmark files, with the experts and the LM loaded "
        "from local Hugging Face directories (papers.eagle.llava; tested on tiny randomly initialised models, not run "
        f"here: no such data or weights offline). Only the digits 0-{d['digit_classes'] - 1} "
        "are drawn, and only the kinds " + ", ".join(d["kinds"]) + " are asked: with all ten digits no arm left "
        "chance level in the budget, and with all four kinds (global, fine, count, position) an arm learned about one "
        "kind in its few hundred steps, which one varying by seed (session 40's diagnosis on one seed's validation "
        "split; the budget allows about a tenth of the steps the joint model needed to read ten digits). Claims are decided on test canvases asked with the training templates; the "
        "held-out templates measure the LM's generalisation to new wordings, which at this size varies from arm to "
        "arm independently of the fusion, and are reported in their own column. Experts: three-layer ConvNets of a "
        "few thousand parameters pretrained for " + f"{p.experts['pretrain_steps']}" + " steps, not CLIP-L / ConvNeXt "
        "/ EVA-02 / Pix2Struct / SAM; the LM is a one-block transformer, not Vicuna-7B. Towers: the paper unfreezes "
        "the whole vision towers in SFT (Sec. 2.2) and in Pre-Alignment (Sec. 2.5); here only each tower's last "
        "layer trains, its two lower layers stay frozen and are computed once per seed, which pays for the training "
        "steps. LLaVA-HR's adapter is applied to the CLIP tower's output map, not inside its stages; Mini-Gemini's "
        "mining uses the concatenated high-res maps as keys and values; deformable attention has one head. Budget: "
        "the whole default scale must fit 6 minutes of job time on 2 CPU cores, so every arm trains "
        f"{t['align_steps'] + t['sft_steps']} steps (stage 1 + stage 2); step counts, batch and the one-block LM were "
        "chosen from learning curves of single arms (concat, single experts) on one seed's validation split before "
        "the claims were computed; no threshold was changed.")
    if full:
        what, differences = _full_scale_text(p)
    else:
        differences += " " + _seed_budget(benchmarks, p.seeds)
    reasons = why(df, 0.0 if full else chance_of["all"])
    why_lines = [f"- ({c.id}) {reasons[c.id]}" for c in claim_list if c.verdict in ("does not hold", "inconclusive")]
    if why_lines:
        differences += "\n\nWhy a claim does not hold or stays inconclusive here (as far as we can tell):\n\n" + "\n".join(why_lines)
    write_report(report_md, title=TITLE, scale=scale, what_was_run=what, table_md=table_md,
                 figures=[accuracy_figure], claims=claim_list, benchmarks=benchmarks, differences=differences)


def evaluate(*, cfg, accuracies, table):
    """All seeds' accuracies in one table (checked: every seed has the same arms)."""
    p = parse(cfg)
    df = read_parquets(accuracies)
    fixed = df[~df.arm.str.startswith("rr:")].groupby("seed").arm.apply(frozenset)
    if fixed.nunique() != 1 or len(fixed) != p.seeds:
        raise ValueError(f"eagle: the seeds' accuracy files {list(accuracies)} do not hold the same arms")
    write_parquet(df, table)
