# P7 cbplm: Concept Bottleneck protein language models (CB-pLM) against a plain masked LM and two conditional LMs
# (continuous concepts, concept-bin tags).
# prepare (sequences + Biopython concepts) -> train (the four models, per seed) -> evaluate (per seed) -> report.
# Code: workflow/papers/cbplm/ (stages.py holds the functions these rules call).

CBPLM = f"{RESULTS}/cbplm"
CBPLM_CFG = config["cbplm"]
CBPLM_SEEDS = dict(seed=seeds("cbplm"))  # one training and one evaluation job per seed


rule cbplm_prepare:
    """Filter and split the protein sequences; annotate their Biopython concepts (raw, standardised, binned)."""
    output:
        sequences=f"{CBPLM}/prepare/sequences.parquet",
        summary=f"{CBPLM}/prepare/summary.json",
    params:
        call="papers.cbplm.stages:prepare",
        cfg=CBPLM_CFG,
    log:
        f"{LOGS}/cbplm/prepare/sequences.log",
    benchmark:
        f"{BENCHMARKS}/cbplm/prepare/sequences.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="cbplm_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule cbplm_train:
    # One job per seed, not per model: a job's start-up costs about what a tiny model's training does.
    """Train the four models (CB-pLM, plain, conditional-tag, continuous-concept) of one seed on the same batches and masks; CB-pLM and the plain LM also keep their weights at the sweep's steps."""
    input:
        sequences=rules.cbplm_prepare.output.sequences,
    output:
        checkpoints=expand(f"{CBPLM}/train/{{model}}_seed{{seed}}.pt", model=CBPLM_CFG["models"], allow_missing=True),
        histories=expand(f"{CBPLM}/train/{{model}}_seed{{seed}}.parquet", model=CBPLM_CFG["models"], allow_missing=True),
    params:
        call="papers.cbplm.stages:train",
        cfg=CBPLM_CFG,
        seed=lambda w: int(w.seed),
    log:
        f"{LOGS}/cbplm/train/seed{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/cbplm/train/seed{{seed}}.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="cbplm_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule cbplm_evaluate:
    """For one seed: held-out perplexity and concept R^2 (also along the sweep), concept interventions, the CB-pLM's weights."""
    input:
        sequences=rules.cbplm_prepare.output.sequences,
        summary=rules.cbplm_prepare.output.summary,
        checkpoints=rules.cbplm_train.output.checkpoints,
    output:
        metrics=f"{CBPLM}/evaluate/seed{{seed}}_metrics.parquet",
        interventions=f"{CBPLM}/evaluate/seed{{seed}}_interventions.parquet",
        weights=f"{CBPLM}/evaluate/seed{{seed}}_weights.parquet",
    params:
        call="papers.cbplm.stages:evaluate",
        cfg=CBPLM_CFG,
        seed=lambda w: int(w.seed),
    log:
        f"{LOGS}/cbplm/evaluate/seed{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/cbplm/evaluate/seed{{seed}}.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="cbplm_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule cbplm_report:
    """The table, the intervention, concept-weight and training figures, the claims with verdicts, report.md."""
    input:
        summary=rules.cbplm_prepare.output.summary,
        metrics=expand(rules.cbplm_evaluate.output.metrics, **CBPLM_SEEDS),
        interventions=expand(rules.cbplm_evaluate.output.interventions, **CBPLM_SEEDS),
        weights=expand(rules.cbplm_evaluate.output.weights, **CBPLM_SEEDS),
        histories=expand(rules.cbplm_train.output.histories, **CBPLM_SEEDS),
        benchmarks=[
            rules.cbplm_prepare.benchmark,
            *expand(rules.cbplm_train.benchmark, **CBPLM_SEEDS),
            *expand(rules.cbplm_evaluate.benchmark, **CBPLM_SEEDS),
        ],
    output:
        table_md=report(f"{CBPLM}/table.md", caption="../report/cbplm/table.rst", category="cbplm", subcategory="2 results"),
        table_csv=f"{CBPLM}/table.csv",
        claims=f"{CBPLM}/claims.json",
        params_json=f"{CBPLM}/params.json",
        report_md=f"{CBPLM}/report.md",
        verdicts=report(f"{CBPLM}/figures/verdicts.png", caption="../report/verdicts.rst", category="cbplm",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{CBPLM}/figures/verdicts.rst",
        page=report(f"{CBPLM}/report.html", caption="../report/page.rst", category="cbplm",
                    subcategory="1 verdicts and report"),
        fig_interventions=report(
            f"{CBPLM}/figures/interventions.png", caption="../report/cbplm/interventions.rst", category="cbplm"
        ),
        fig_weights=report(f"{CBPLM}/figures/concept_weights.png", caption="../report/cbplm/weights.rst", category="cbplm", subcategory="2 results"),
        fig_training=report(f"{CBPLM}/figures/training.png", caption="../report/cbplm/training.rst", category="cbplm", subcategory="2 results"),
    params:
        call="papers.cbplm.stages:report",
        cfg=CBPLM_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/cbplm/report.log",
    benchmark:
        f"{BENCHMARKS}/cbplm/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="cbplm_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule cbplm:
    """Everything of paper P7 cbplm: its report, table, figures and claims."""
    input:
        paper_outputs("cbplm"),
