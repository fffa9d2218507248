# P14 neural_fdm: a neural encoder + a differentiable force density solver for shells and towers.
# prepare (test targets) -> train (per task and learned model: the learning-rate search both models
# share, then every seed) -> evaluate (per task: learned models, the untrained control and direct
# optimisation) -> report.
# Code: workflow/papers/neural_fdm/ (stages.py: prepare and train; evaluate.py; report.py).

NFDM = f"{RESULTS}/neural_fdm"
NFDM_CFG = config["neural_fdm"]
NFDM_RUNS = dict(task=NFDM_CFG["tasks"], model=NFDM_CFG["models"])


rule neural_fdm_prepare:
    """Generate the test target shapes of every task (shells, towers), in and out of distribution."""
    output:
        targets=f"{NFDM}/prepare/targets.parquet",
    params:
        call="papers.neural_fdm.stages:prepare",
        cfg=NFDM_CFG,
    log:
        f"{LOGS}/neural_fdm/prepare/targets.log",
    benchmark:
        f"{BENCHMARKS}/neural_fdm/prepare/targets.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="neural_fdm_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule neural_fdm_train:
    """Train one learned model (encoder + FDM solver, or fully neural) on one task: the shared learning-rate search, then every seed."""
    output:
        checkpoint=f"{NFDM}/train/{{task}}_{{model}}.pt",
        history=f"{NFDM}/train/{{task}}_{{model}}_history.parquet",
        search=f"{NFDM}/train/{{task}}_{{model}}_lr_search.parquet",
    params:
        call="papers.neural_fdm.stages:train",
        cfg=NFDM_CFG,
        task="{task}",
        model="{model}",
    log:
        f"{LOGS}/neural_fdm/train/{{task}}_{{model}}.log",
    benchmark:
        f"{BENCHMARKS}/neural_fdm/train/{{task}}_{{model}}.tsv"
    wildcard_constraints:
        task="|".join(NFDM_CFG["tasks"]),
        model="|".join(NFDM_CFG["models"]),
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="neural_fdm_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule neural_fdm_evaluate:
    """For one task: learned models, the untrained hybrid (control) and direct optimisation; errors, failed solves, cost."""
    input:
        targets=rules.neural_fdm_prepare.output.targets,
        checkpoints=expand(rules.neural_fdm_train.output.checkpoint, task="{task}", model=NFDM_CFG["models"]),
    output:
        metrics=f"{NFDM}/evaluate/{{task}}_metrics.parquet",
        timing=f"{NFDM}/evaluate/{{task}}_timing.json",
        examples=f"{NFDM}/evaluate/{{task}}_examples.parquet",
    params:
        call="papers.neural_fdm.evaluate:evaluate",
        cfg=NFDM_CFG,
        task="{task}",
    log:
        f"{LOGS}/neural_fdm/evaluate/{{task}}.log",
    benchmark:
        f"{BENCHMARKS}/neural_fdm/evaluate/{{task}}.tsv"
    wildcard_constraints:
        task="|".join(NFDM_CFG["tasks"]),
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="neural_fdm_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule neural_fdm_report:
    """The table, the shape-error, training and example-shape figures, the claims with verdicts, report.md."""
    input:
        metrics=expand(rules.neural_fdm_evaluate.output.metrics, task=NFDM_CFG["tasks"]),
        timings=expand(rules.neural_fdm_evaluate.output.timing, task=NFDM_CFG["tasks"]),
        examples=expand(rules.neural_fdm_evaluate.output.examples, task=NFDM_CFG["tasks"]),
        histories=expand(rules.neural_fdm_train.output.history, **NFDM_RUNS),
        searches=expand(rules.neural_fdm_train.output.search, **NFDM_RUNS),
        benchmarks=[
            rules.neural_fdm_prepare.benchmark,
            *expand(rules.neural_fdm_train.benchmark, **NFDM_RUNS),
            *expand(rules.neural_fdm_evaluate.benchmark, task=NFDM_CFG["tasks"]),
        ],
    output:
        table_md=report(f"{NFDM}/table.md", caption="../report/neural_fdm/table.rst", category="neural_fdm", subcategory="2 results"),
        table_csv=f"{NFDM}/table.csv",
        claims=f"{NFDM}/claims.json",
        params_json=f"{NFDM}/params.json",
        report_md=f"{NFDM}/report.md",
        verdicts=report(f"{NFDM}/figures/verdicts.png", caption="../report/verdicts.rst", category="neural_fdm",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{NFDM}/figures/verdicts.rst",
        page=report(f"{NFDM}/report.html", caption="../report/page.rst", category="neural_fdm",
                    subcategory="1 verdicts and report"),
        fig_errors=report(
            f"{NFDM}/figures/shape_errors.png", caption="../report/neural_fdm/errors.rst", category="neural_fdm"
        ),
        fig_training=report(
            f"{NFDM}/figures/training.png", caption="../report/neural_fdm/training.rst", category="neural_fdm"
        ),
        fig_shapes=report(f"{NFDM}/figures/shapes.png", caption="../report/neural_fdm/shapes.rst", category="neural_fdm", subcategory="2 results"),
    params:
        call="papers.neural_fdm.report:report",
        cfg=NFDM_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/neural_fdm/report.log",
    benchmark:
        f"{BENCHMARKS}/neural_fdm/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="neural_fdm_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule neural_fdm:
    """Everything of paper P14 neural_fdm: its report, table, figures and claims."""
    input:
        paper_outputs("neural_fdm"),
