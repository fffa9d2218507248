# P19 flexpert: flexibility measures (ANM, GNM, B-factors, MD RMSF), Flexpert-Seq / Flexpert-3D predictors and
# the flexibility-steered inverse-folding designer (Flexpert-Design).
# prepare (structures, ENM profiles, claim a's ensembles, splits per seed, LM sequences) -> pretrain (masked LM) ->
# train (one job per seed: predictors, controls, designers, the outside judge) -> evaluate (seeds gathered) -> report.
# Code: workflow/papers/flexpert/ (data.py, stages.py and report.py hold the functions these rules call).

FLEXPERT = f"{RESULTS}/flexpert"


rule flexpert_prepare:
    """Read the structures, compute ANM/GNM profiles, split all chains by sequence cluster per seed, the ensembles' measures, the LM's sequences."""
    output:
        chains=f"{FLEXPERT}/prepare/chains.pkl",
        ensembles=f"{FLEXPERT}/prepare/ensembles.parquet",
        sequences=f"{FLEXPERT}/prepare/sequences.parquet",
        splits=f"{FLEXPERT}/prepare/splits.parquet",
    params:
        call="papers.flexpert.data:prepare",
        cfg=config["flexpert"],
    log:
        f"{LOGS}/flexpert/prepare/chains.log",
    benchmark:
        f"{BENCHMARKS}/flexpert/prepare/chains.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="flexpert_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule flexpert_pretrain:
    """Pretrain the small masked protein language model on the offline sequences."""
    input:
        sequences=rules.flexpert_prepare.output.sequences,
    output:
        lm=f"{FLEXPERT}/pretrain/lm.pt",
    params:
        call="papers.flexpert.stages:pretrain",
        cfg=config["flexpert"],
    log:
        f"{LOGS}/flexpert/pretrain/lm.log",
    benchmark:
        f"{BENCHMARKS}/flexpert/pretrain/lm.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="flexpert_pretrain"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule flexpert_train:
    """One seed: Flexpert-Seq, Flexpert-3D, their controls and the judge on the held-out proteins; then the designers."""
    input:
        chains=rules.flexpert_prepare.output.chains,
        splits=rules.flexpert_prepare.output.splits,
        lm=rules.flexpert_pretrain.output.lm,
    output:
        predictions=f"{FLEXPERT}/train/predictions_{{seed}}.parquet",
        designs=f"{FLEXPERT}/train/designs_{{seed}}.parquet",
    params:
        call="papers.flexpert.stages:train",
        cfg=config["flexpert"],
        seed="{seed}",
    log:
        f"{LOGS}/flexpert/train/predictions_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/flexpert/train/predictions_{{seed}}.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="flexpert_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule flexpert_evaluate:
    """Gather the seeds' per-protein correlations and designs."""
    input:
        predictions=expand(rules.flexpert_train.output.predictions, seed=seeds("flexpert")),
        designs=expand(rules.flexpert_train.output.designs, seed=seeds("flexpert")),
    output:
        table_predictions=f"{FLEXPERT}/evaluate/predictions.parquet",
        table_designs=f"{FLEXPERT}/evaluate/designs.parquet",
    params:
        call="papers.flexpert.data:evaluate",
        cfg=config["flexpert"],
    log:
        f"{LOGS}/flexpert/evaluate/predictions.log",
    benchmark:
        f"{BENCHMARKS}/flexpert/evaluate/predictions.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="flexpert_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule flexpert_report:
    """The table, the figures, the claims with their verdicts and controls, report.md."""
    input:
        ensembles=rules.flexpert_prepare.output.ensembles,
        chains=rules.flexpert_prepare.output.chains,
        splits=rules.flexpert_prepare.output.splits,
        predictions=rules.flexpert_evaluate.output.table_predictions,
        designs=rules.flexpert_evaluate.output.table_designs,
        sequences=rules.flexpert_prepare.output.sequences,
        benchmarks=[
            rules.flexpert_prepare.benchmark,
            rules.flexpert_pretrain.benchmark,
            *expand(rules.flexpert_train.benchmark, seed=seeds("flexpert")),
            rules.flexpert_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{FLEXPERT}/table.md", caption="../report/flexpert/table.rst", category="flexpert", subcategory="2 results"),
        table_csv=f"{FLEXPERT}/table.csv",
        claims=f"{FLEXPERT}/claims.json",
        params_json=f"{FLEXPERT}/params.json",
        report_md=f"{FLEXPERT}/report.md",
        verdicts=report(f"{FLEXPERT}/figures/verdicts.png", caption="../report/verdicts.rst", category="flexpert",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{FLEXPERT}/figures/verdicts.rst",
        page=report(f"{FLEXPERT}/report.html", caption="../report/page.rst", category="flexpert",
                    subcategory="1 verdicts and report"),
        figure=report(f"{FLEXPERT}/figures/flexpert.png", caption="../report/flexpert/figure.rst", category="flexpert", subcategory="2 results"),
    params:
        call="papers.flexpert.report:report",
        cfg=config["flexpert"],
        scale=SCALE,
    log:
        f"{LOGS}/flexpert/report.log",
    benchmark:
        f"{BENCHMARKS}/flexpert/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="flexpert_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule flexpert:
    """Everything of paper P19 flexpert: its report, table, figures and claims."""
    input:
        paper_outputs("flexpert"),
