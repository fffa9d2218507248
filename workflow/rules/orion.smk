# P1 orion: retrieval tasks decompose into request processing and retrieval (request-patching).
# prepare (vocabulary, held-out test and validation prompts, patching pairs, injected stories) -> train (per model:
# its seeds side by side, each until the validation gate; the routed model is the positive control) -> evaluate
# (per model: test accuracy, request-patching sweep and its control) -> report. Pretrained LMs (full scale) are
# evaluated as they are, with the oversight experiment.
# Code: workflow/papers/orion/ (stages.py and report.py hold the functions these rules call).

ORION = f"{RESULTS}/orion"
ORION_CFG = config["orion"]
ORION_MODELS = [m["name"] for m in ORION_CFG["models"]]
ORION_SEEDS = range(ORION_CFG["seeds"])
# Pretrained LMs (orion.pretrained; full scale): evaluated as they are, no training job.
ORION_PRETRAINED = [m["name"] for m in ORION_CFG["pretrained"]]


rule orion_prepare:
    """Build the vocabulary and style split, the test and validation prompts, patching pairs and injected stories."""
    output:
        vocab=f"{ORION}/prepare/vocab.json",
        test=f"{ORION}/prepare/test.parquet",
        val=f"{ORION}/prepare/val.parquet",
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
        **job_resources("light", rule="orion_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule orion_train:
    """Train every seed of one model side by side on the task mixture, each to the validation accuracy gate and a fixed number of steps past it."""
    input:
        vocab=rules.orion_prepare.output.vocab,
        val=rules.orion_prepare.output.val,
    output:
        checkpoints=[f"{ORION}/train/{{model}}_seed{seed}.pt" for seed in ORION_SEEDS],
        gate_checkpoints=[f"{ORION}/train/{{model}}_seed{seed}_gate.pt" for seed in ORION_SEEDS],
        history=f"{ORION}/train/{{model}}_history.parquet",
    params:
        call="papers.orion.stages:train",
        cfg=ORION_CFG,
        model_name="{model}",
    log:
        f"{LOGS}/orion/train/{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/orion/train/{{model}}.tsv"
    wildcard_constraints:
        model="|".join(ORION_MODELS),
    # a gpu job: orion.device (cuda at the full scale, cpu at the default) says where its seeds train
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="orion_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule orion_evaluate:
    """For every seed of one model, at its analysed (post-gate) checkpoint: test accuracy, request-patching sweep and its control; at its gate checkpoint (reported, not deciding): the same without the control, reused where the two checkpoints are one."""
    input:
        checkpoints=rules.orion_train.output.checkpoints,
        gate_checkpoints=rules.orion_train.output.gate_checkpoints,
        vocab=rules.orion_prepare.output.vocab,
        test=rules.orion_prepare.output.test,
        pairs=rules.orion_prepare.output.pairs,
    output:
        metrics=f"{ORION}/evaluate/{{model}}_accuracy.parquet",
        sweep=f"{ORION}/evaluate/{{model}}_patching.parquet",
        gate_metrics=f"{ORION}/evaluate/{{model}}_gate_accuracy.parquet",
        gate_sweep=f"{ORION}/evaluate/{{model}}_gate_patching.parquet",
    params:
        call="papers.orion.stages:evaluate_trained",
        cfg=ORION_CFG,
        model_name="{model}",
    log:
        f"{LOGS}/orion/evaluate/{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/orion/evaluate/{{model}}.tsv"
    wildcard_constraints:
        model="|".join(ORION_MODELS),
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="orion_evaluate"),
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
        **job_resources("gpu", rule="orion_evaluate_pretrained"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule orion_report:
    """The table, the request-patching, oversight and training figures, the claims with verdicts, report.md."""
    input:
        metrics=expand(rules.orion_evaluate.output.metrics, model=ORION_MODELS)
        + expand(rules.orion_evaluate_pretrained.output.metrics, name=ORION_PRETRAINED),
        sweeps=expand(rules.orion_evaluate.output.sweep, model=ORION_MODELS)
        + expand(rules.orion_evaluate_pretrained.output.sweep, name=ORION_PRETRAINED),
        gate_metrics=expand(rules.orion_evaluate.output.gate_metrics, model=ORION_MODELS),
        gate_sweeps=expand(rules.orion_evaluate.output.gate_sweep, model=ORION_MODELS),
        oversights=expand(rules.orion_evaluate_pretrained.output.oversight, name=ORION_PRETRAINED),
        histories=expand(rules.orion_train.output.history, model=ORION_MODELS),
        vocab=rules.orion_prepare.output.vocab,
        val=rules.orion_prepare.output.val,
        test=rules.orion_prepare.output.test,
        benchmarks=[
            rules.orion_prepare.benchmark,
            *expand(rules.orion_train.benchmark, model=ORION_MODELS),
            *expand(rules.orion_evaluate.benchmark, model=ORION_MODELS),
            *expand(rules.orion_evaluate_pretrained.benchmark, name=ORION_PRETRAINED),
        ],
    output:
        table_md=report(f"{ORION}/table.md", caption="../report/orion/table.rst", category="orion", subcategory="2 results"),
        table_csv=f"{ORION}/table.csv",
        claims=f"{ORION}/claims.json",
        params_json=f"{ORION}/params.json",
        report_md=f"{ORION}/report.md",
        verdicts=report(f"{ORION}/figures/verdicts.png", caption="../report/verdicts.rst", category="orion",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{ORION}/figures/verdicts.rst",
        page=report(f"{ORION}/report.html", caption="../report/page.rst", category="orion",
                    subcategory="1 verdicts and report"),
        fig_layers=report(f"{ORION}/figures/request_patching.png", caption="../report/orion/layers.rst", category="orion", subcategory="2 results"),
        fig_training=report(f"{ORION}/figures/training.png", caption="../report/orion/training.rst", category="orion", subcategory="2 results"),
        # the oversight experiment runs on pretrained LMs only (claim (c))
        **({"fig_oversight": report(f"{ORION}/figures/oversight.png", caption="../report/orion/oversight.rst",
                                    category="orion", subcategory="2 results")} if ORION_PRETRAINED else {}),
    params:
        call="papers.orion.report:report",
        cfg=ORION_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/orion/report.log",
    benchmark:
        f"{BENCHMARKS}/orion/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="orion_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule orion:
    """Everything of paper P1 orion: its report, table, figures and claims."""
    input:
        paper_outputs("orion"),
