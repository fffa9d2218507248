# P8 eagle: a mixture of vision encoders for a multimodal LM (channel concatenation, other fusions, Pre-Alignment,
# round-robin expert selection with three experts). prepare (digit canvases and templated questions: the pretraining
# draw and every seed's) -> pretrain (one job: the experts on their own objectives, the LM on the QA text, shared by
# every seed and arm) -> train (the arms of each seed's groups, eagle.arm_seeds; each arm trains from the pretrained
# models alone, Pre-Alignment included; a round-robin slot trains after the arms its choice reads, the seed's single
# experts and earlier slots. At the synthetic scales the arms that every seed trains share one job per seed,
# eagle_train_seed, whose start-up, data and frozen tower activations are paid once per seed (issue 52: the time
# budget); every other arm, and at the full scale every arm, has a job per seed and arm, eagle_train, issue 54)
# -> evaluate (accuracies gathered) -> report (the round-robin's
# path read from each seed's validation accuracies).
# Full scale (config eagle.llava set): prepare checks LLaVA-style records, pretrain loads the experts and the LM
# from their local Hugging Face directories, train runs the same arms on them (papers.eagle.llava).
# Code: workflow/papers/eagle/ (data.py, stages.py and report.py hold the functions these rules call).

from papers.eagle import arms as _eagle_arms
from papers.eagle.params import full_scale as _eagle_full_scale, parse as _eagle_parse

EAGLE = f"{RESULTS}/eagle"
_EAGLE_P = _eagle_parse(config["eagle"])
# The train jobs of each seed index: its fixed arms and round-robin slots (papers.eagle.arms.seed_jobs), a file each.
EAGLE_JOBS = {seed: _eagle_arms.seed_jobs(_EAGLE_P.experts["names"], _eagle_arms.seed_groups(_EAGLE_P.arm_seeds, seed))
              for seed in seeds("eagle")}
# The jobs that one job per seed trains together (eagle_train_seed): at the synthetic scales those every seed trains
# (papers.eagle.arms.shared_jobs), none at the full scale (issue 54: a 7B LM's arm per job). The rest, one job each
# (eagle_train). Every job keeps its accuracy file, so evaluate and report read the same files either way.
EAGLE_SEED_JOBS = [] if _eagle_full_scale(_EAGLE_P) else _eagle_arms.shared_jobs(EAGLE_JOBS.values())
EAGLE_ARM_JOBS = sorted({job for jobs in EAGLE_JOBS.values() for job in jobs} - set(EAGLE_SEED_JOBS))
# The train jobs' benchmark files: one per seed (eagle_train_seed), one per seed and arm for the others.
EAGLE_TRAIN_BENCHMARKS = ([f"{BENCHMARKS}/eagle/train/{seed}.tsv" for seed in EAGLE_JOBS if EAGLE_SEED_JOBS]
                          + [f"{BENCHMARKS}/eagle/train/{seed}/{job}.tsv" for seed, jobs in EAGLE_JOBS.items()
                             for job in jobs if job not in EAGLE_SEED_JOBS])


rule eagle_prepare:
    """Build the pretraining canvases and every seed's train / val / test canvases from sklearn's digits, with their templated questions."""
    output:
        data=f"{EAGLE}/prepare/data.npz",
    params:
        call="papers.eagle.data:prepare",
        cfg=config["eagle"],
    log:
        f"{LOGS}/eagle/prepare/data.log",
    benchmark:
        f"{BENCHMARKS}/eagle/prepare/data.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="eagle_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule eagle_pretrain:
    """Pretrain the experts (CLIP-style, high-res reading, localisation: eagle.experts.names) and the LM, once for every seed."""
    input:
        data=rules.eagle_prepare.output.data,
    output:
        experts=f"{EAGLE}/pretrain/experts.pt",
    params:
        call="papers.eagle.stages:pretrain",
        cfg=config["eagle"],
    log:
        f"{LOGS}/eagle/pretrain/experts.log",
    benchmark:
        f"{BENCHMARKS}/eagle/pretrain/experts.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="eagle_pretrain"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


if EAGLE_SEED_JOBS:

    rule eagle_train_seed:
        """Train the arms that every seed trains (the synthetic scales), one job per seed: each arm's file as its own job would write it."""
        input:
            data=rules.eagle_prepare.output.data,
            experts=rules.eagle_pretrain.output.experts,
        output:
            accuracies=[f"{EAGLE}/train/{{seed}}/{job}.parquet" for job in EAGLE_SEED_JOBS],
        params:
            call="papers.eagle.stages:train_seed",
            cfg=config["eagle"],
            seed="{seed}",
            arms=EAGLE_SEED_JOBS,
        log:
            f"{LOGS}/eagle/train/{{seed}}.log",
        benchmark:
            f"{BENCHMARKS}/eagle/train/{{seed}}.tsv"
        threads: res("train", "threads")
        resources:
            **job_resources("train", rule="eagle_train_seed"),
        conda:
            "../../envs/base.yaml"
        script:
            CALL


rule eagle_train:
    """Train one arm of one seed's groups (a fusion, a single expert, a trained control, Pre-Alignment or its control; or a round-robin slot, after the arms its choice reads): every arm at the full scale; at the synthetic scales the arms that some seeds only train."""
    input:
        data=rules.eagle_prepare.output.data,
        experts=rules.eagle_pretrain.output.experts,
        selection=lambda w: [f"{EAGLE}/train/{w.seed}/{job}.parquet"
                             for job in _eagle_arms.selection(_EAGLE_P.experts["names"], w.arm)],
    output:
        accuracies=f"{EAGLE}/train/{{seed}}/{{arm}}.parquet",
    wildcard_constraints:
        arm="|".join(EAGLE_ARM_JOBS) or "(?!)",  # (?!): matches nothing, where every job is a seed's
    params:
        call="papers.eagle.stages:train",
        cfg=config["eagle"],
        seed="{seed}",
        arm="{arm}",
    log:
        f"{LOGS}/eagle/train/{{seed}}/{{arm}}.log",
    benchmark:
        f"{BENCHMARKS}/eagle/train/{{seed}}/{{arm}}.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="eagle_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule eagle_evaluate:
    """Gather every seed's and arm's accuracies into one table."""
    input:
        accuracies=[f"{EAGLE}/train/{seed}/{job}.parquet" for seed, jobs in EAGLE_JOBS.items() for job in jobs],
    output:
        table=f"{EAGLE}/evaluate/accuracies.parquet",
    params:
        call="papers.eagle.report:evaluate",
        cfg=config["eagle"],
    log:
        f"{LOGS}/eagle/evaluate/accuracies.log",
    benchmark:
        f"{BENCHMARKS}/eagle/evaluate/accuracies.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="eagle_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule eagle_report:
    """The accuracy table, the figure, the claims with their verdicts and controls, report.md."""
    input:
        table=rules.eagle_evaluate.output.table,
        benchmarks=[
            rules.eagle_prepare.benchmark,
            rules.eagle_pretrain.benchmark,
            *EAGLE_TRAIN_BENCHMARKS,
            rules.eagle_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{EAGLE}/table.md", caption="../report/eagle/table.rst", category="eagle", subcategory="2 results"),
        table_csv=f"{EAGLE}/table.csv",
        claims=f"{EAGLE}/claims.json",
        params_json=f"{EAGLE}/params.json",
        report_md=f"{EAGLE}/report.md",
        verdicts=report(f"{EAGLE}/figures/verdicts.png", caption="../report/verdicts.rst", category="eagle",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{EAGLE}/figures/verdicts.rst",
        page=report(f"{EAGLE}/report.html", caption="../report/page.rst", category="eagle",
                    subcategory="1 verdicts and report"),
        accuracy_figure=report(f"{EAGLE}/figures/accuracy.png", caption="../report/eagle/accuracy.rst",
                               category="eagle", subcategory="2 results"),
    params:
        call="papers.eagle.report:report",
        cfg=config["eagle"],
        scale=SCALE,
        time_budget=config["time_budget"].get(SCALE, {}).get("eagle", config["time_budget"].get(SCALE, {}).get("default")),
    log:
        f"{LOGS}/eagle/report.log",
    benchmark:
        f"{BENCHMARKS}/eagle/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="eagle_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule eagle:
    """Everything of paper P8 eagle: its report, table, figure and claims."""
    input:
        paper_outputs("eagle"),
