# P17 profilebfn: profile Bayesian flow networks for protein family design, trained on single sequences.
# prepare (families, training set, Potts families, HMMs) -> train (one job per seed; at the full scale
# train_parts chained jobs per seed, train_part resuming part by part, each on train.gpus GPUs under torchrun)
# -> evaluate (one job per seed: every arm on every family) -> report. profilebfn.device puts train and evaluate
# on CUDA at the full scale: both are gpu-kind jobs.
# Code: workflow/papers/profilebfn/ (stages.py holds the functions these rules call, report.py the report).

PROFILEBFN = f"{RESULTS}/profilebfn"
PROFILEBFN_CFG = config["profilebfn"]
PROFILEBFN_PARTS = PROFILEBFN_CFG.get("train_parts", 1)  # chained training jobs per seed (full scale: > 1)


rule profilebfn_prepare:
    """Held-out Pfam families, the single-sequence training set (minus hits of those families, streamed), the competence gate's held-out sequences, Potts families, HMMs."""
    output:
        families=f"{PROFILEBFN}/prepare/families.parquet",
        training=f"{PROFILEBFN}/prepare/training.parquet",
        heldout=f"{PROFILEBFN}/prepare/heldout.parquet",
        contacts=f"{PROFILEBFN}/prepare/contacts.parquet",
        hmms=f"{PROFILEBFN}/prepare/families.hmm",
        meta=f"{PROFILEBFN}/prepare/meta.json",
    params:
        call="papers.profilebfn.stages:prepare",
        cfg=PROFILEBFN_CFG,
    log:
        f"{LOGS}/profilebfn/prepare/families.log",
    benchmark:
        f"{BENCHMARKS}/profilebfn/prepare/families.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="profilebfn_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule profilebfn_train_part:
    """Chained part {part} (< train_parts - 1) of a seed's training: its steps, resumed from the previous part's full state."""
    input:
        training=rules.profilebfn_prepare.output.training,
        resume=lambda w: expand(profilebfn_previous_part(int(w.part)), seed=w.seed),
    output:
        state=temp(f"{PROFILEBFN}/train/parts/{{seed}}_{{part}}.pt"),  # 16 B per parameter: 10 GB at the full scale
    params:
        call="papers.profilebfn.stages:train_part",
        cfg=PROFILEBFN_CFG,
        seed="{seed}",
        part="{part}",
    log:
        f"{LOGS}/profilebfn/train/parts/{{seed}}_{{part}}.log",
    benchmark:
        f"{BENCHMARKS}/profilebfn/train/parts/{{seed}}_{{part}}.tsv"
    wildcard_constraints:
        part=r"\d+",
    threads: res("gpu", "threads")
    resources:
        **profilebfn_gpus(job_resources("gpu", rule="profilebfn_train_part")),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule profilebfn_train:
    """Train the network on single sequences with the continuous-time Bayesian-flow loss, one seed (its last chained part)."""
    input:
        training=rules.profilebfn_prepare.output.training,
        resume=expand(profilebfn_previous_part(PROFILEBFN_PARTS - 1), seed="{seed}"),
    output:
        checkpoint=f"{PROFILEBFN}/train/{{seed}}.pt",
        curve=f"{PROFILEBFN}/train/{{seed}}_loss.parquet",
    params:
        call="papers.profilebfn.stages:train",
        cfg=PROFILEBFN_CFG,
        seed="{seed}",
    log:
        f"{LOGS}/profilebfn/train/{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/profilebfn/train/{{seed}}.tsv"
    threads: res("gpu", "threads")
    resources:
        **profilebfn_gpus(job_resources("gpu", rule="profilebfn_train")),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule profilebfn_evaluate:
    """Generate from every family's profile with every arm (trained, untrained, profile, HMM, copies) and measure; the held-out denoising losses of the competence gate."""
    input:
        checkpoint=rules.profilebfn_train.output.checkpoint,
        families=rules.profilebfn_prepare.output.families,
        heldout=rules.profilebfn_prepare.output.heldout,
        contacts=rules.profilebfn_prepare.output.contacts,
        hmms=rules.profilebfn_prepare.output.hmms,
        meta=rules.profilebfn_prepare.output.meta,
    output:
        metrics=f"{PROFILEBFN}/evaluate/{{seed}}.parquet",
        generated=f"{PROFILEBFN}/evaluate/{{seed}}_sequences.parquet",
        competence=f"{PROFILEBFN}/evaluate/{{seed}}_competence.parquet",
    params:
        call="papers.profilebfn.stages:evaluate",
        cfg=PROFILEBFN_CFG,
        seed="{seed}",
    log:
        f"{LOGS}/profilebfn/evaluate/{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/profilebfn/evaluate/{{seed}}.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="profilebfn_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule profilebfn_report:
    """The table, the figure, the claims with their verdicts and controls, report.md."""
    input:
        metrics=expand(rules.profilebfn_evaluate.output.metrics, seed=seeds("profilebfn")),
        competence=expand(rules.profilebfn_evaluate.output.competence, seed=seeds("profilebfn")),
        curves=expand(rules.profilebfn_train.output.curve, seed=seeds("profilebfn")),
        families=rules.profilebfn_prepare.output.families,
        contacts=rules.profilebfn_prepare.output.contacts,
        meta=rules.profilebfn_prepare.output.meta,
        benchmarks=[
            rules.profilebfn_prepare.benchmark,
            *expand(rules.profilebfn_train_part.benchmark, seed=seeds("profilebfn"), part=range(PROFILEBFN_PARTS - 1)),
            *expand(rules.profilebfn_train.benchmark, seed=seeds("profilebfn")),
            *expand(rules.profilebfn_evaluate.benchmark, seed=seeds("profilebfn")),
        ],
    output:
        table_md=report(f"{PROFILEBFN}/table.md", caption="../report/profilebfn/table.rst", category="profilebfn", subcategory="2 results"),
        table_csv=f"{PROFILEBFN}/table.csv",
        claims=f"{PROFILEBFN}/claims.json",
        params_json=f"{PROFILEBFN}/params.json",
        report_md=f"{PROFILEBFN}/report.md",
        verdicts=report(f"{PROFILEBFN}/figures/verdicts.png", caption="../report/verdicts.rst", category="profilebfn",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{PROFILEBFN}/figures/verdicts.rst",
        page=report(f"{PROFILEBFN}/report.html", caption="../report/page.rst", category="profilebfn",
                    subcategory="1 verdicts and report"),
        figure=report(f"{PROFILEBFN}/figures/summary.png", caption="../report/profilebfn/summary.rst",
                      category="profilebfn", subcategory="2 results"),
    params:
        call="papers.profilebfn.report:report",
        cfg=PROFILEBFN_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/profilebfn/report.log",
    benchmark:
        f"{BENCHMARKS}/profilebfn/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="profilebfn_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule profilebfn:
    """Everything of paper P17 profilebfn: its report, table, figure and claims."""
    input:
        paper_outputs("profilebfn"),
