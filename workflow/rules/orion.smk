# P1 orion: retrieval tasks decompose into request processing and retrieval (request-patching).
# prepare (vocabulary, held-out prompts, patching pairs, injected stories) -> train (per model size and seed)
# -> evaluate (per model: accuracy gate, request-patching sweep, oversight) -> report.
# Code: workflow/papers/orion/ (stages.py holds the functions these rules call).

ORION = f"{RESULTS}/orion"
ORION_CFG = config["orion"]
ORION_MODELS = [m["name"] for m in ORION_CFG["models"]]
ORION_RUNS = dict(model=ORION_MODELS, seed=range(ORION_CFG["seeds"]))
# Pretrained LMs (orion.pretrained; full scale): evaluated as they are, no training job.
ORION_PRETRAINED = [m["name"] for m in ORION_CFG["pretrained"]]


rule orion_prepare:
    """Build the vocabulary and style split, the held-out prompts, patching pairs and injected stories."""
    output:
        vocab=f"{ORION}/prepare/vocab.json",
        test=f"{ORION}/prepare/test.parquet",
        pairs=f"{ORION}/prepare/pairs.parquet",
        injection=f"{ORION}/prepare/injection.parquet",
    params:
        call="papers.orion.stages:prepare",
        cfg=ORION_CFG,
    log:
        f"{LOGS}/orion/prepare/prepare.log",
    benchmark:
        f"{BENCHMARKS}/orion/prepare/prepare.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule orion_train:
    """Train one tiny transformer (one model size, one seed) on the retrieval-task mixture."""
    input:
        vocab=rules.orion_prepare.output.vocab,
        test=rules.orion_prepare.output.test,
    output:
        checkpoint=f"{ORION}/train/{{model}}_seed{{seed}}.pt",
        history=f"{ORION}/train/{{model}}_seed{{seed}}_history.parquet",
    params:
        call="papers.orion.stages:train",
        cfg=ORION_CFG,
        model_name="{model}",
        seed=lambda w: int(w.seed),
    log:
        f"{LOGS}/orion/train/{{model}}_seed{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/orion/train/{{model}}_seed{{seed}}.tsv"
    wildcard_constraints:
        model="|".join(ORION_MODELS),
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule orion_evaluate:
    """For one trained model: held-out accuracy (the gate), the request-patching sweep, the oversight test."""
    input:
        checkpoint=rules.orion_train.output.checkpoint,
        vocab=rules.orion_prepare.output.vocab,
        test=rules.orion_prepare.output.test,
        pairs=rules.orion_prepare.output.pairs,
        injection=rules.orion_prepare.output.injection,
    output:
        metrics=f"{ORION}/evaluate/{{model}}_seed{{seed}}_accuracy.parquet",
        sweep=f"{ORION}/evaluate/{{model}}_seed{{seed}}_patching.parquet",
        oversight=f"{ORION}/evaluate/{{model}}_seed{{seed}}_oversight.parquet",
    params:
        call="papers.orion.stages:evaluate",
        cfg=ORION_CFG,
        model_name="{model}",
        seed=lambda w: int(w.seed),
    log:
        f"{LOGS}/orion/evaluate/{{model}}_seed{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/orion/evaluate/{{model}}_seed{{seed}}.tsv"
    wildcard_constraints:
        model="|".join(ORION_MODELS),
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule orion_evaluate_pretrained:
    """The same accuracy, request-patching and oversight analysis on one local pretrained LM."""
    input:
        test=rules.orion_prepare.output.test,
        pairs=rules.orion_prepare.output.pairs,
        injection=rules.orion_prepare.output.injection,
    output:
        metrics=f"{ORION}/evaluate/pretrained_{{name}}_accuracy.parquet",
        sweep=f"{ORION}/evaluate/pretrained_{{name}}_patching.parquet",
        oversight=f"{ORION}/evaluate/pretrained_{{name}}_oversight.parquet",
    params:
        call="papers.orion.stages:evaluate_pretrained",
        cfg=ORION_CFG,
        model_name="{name}",
    log:
        f"{LOGS}/orion/evaluate/pretrained_{{name}}.log",
    benchmark:
        f"{BENCHMARKS}/orion/evaluate/pretrained_{{name}}.tsv"
    wildcard_constraints:
        name="[A-Za-z0-9]+",
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule orion_report:
    """The table, the request-patching, oversight and training figures, the claims with verdicts, report.md."""
    input:
        metrics=expand(rules.orion_evaluate.output.metrics, **ORION_RUNS)
        + expand(rules.orion_evaluate_pretrained.output.metrics, name=ORION_PRETRAINED),
        sweeps=expand(rules.orion_evaluate.output.sweep, **ORION_RUNS)
        + expand(rules.orion_evaluate_pretrained.output.sweep, name=ORION_PRETRAINED),
        oversights=expand(rules.orion_evaluate.output.oversight, **ORION_RUNS)
        + expand(rules.orion_evaluate_pretrained.output.oversight, name=ORION_PRETRAINED),
        histories=expand(rules.orion_train.output.history, **ORION_RUNS),
        benchmarks=[
            rules.orion_prepare.benchmark,
            *expand(rules.orion_train.benchmark, **ORION_RUNS),
            *expand(rules.orion_evaluate.benchmark, **ORION_RUNS),
            *expand(rules.orion_evaluate_pretrained.benchmark, name=ORION_PRETRAINED),
        ],
    output:
        table_md=report(f"{ORION}/table.md", caption="../report/orion/table.rst", category="orion"),
        table_csv=f"{ORION}/table.csv",
        claims=f"{ORION}/claims.json",
        params_json=f"{ORION}/params.json",
        report_md=f"{ORION}/report.md",
        fig_layers=report(f"{ORION}/figures/request_patching.png", caption="../report/orion/layers.rst", category="orion"),
        fig_oversight=report(f"{ORION}/figures/oversight.png", caption="../report/orion/oversight.rst", category="orion"),
        fig_training=report(f"{ORION}/figures/training.png", caption="../report/orion/training.rst", category="orion"),
    params:
        call="papers.orion.stages:report",
        cfg=ORION_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/orion/report.log",
    benchmark:
        f"{BENCHMARKS}/orion/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule orion:
    """Everything of paper P1 orion: its report, table, figures and claims."""
    input:
        paper_outputs("orion"),
