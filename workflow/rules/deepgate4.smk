# P5 deepgate4: DeepGate4, a scalable graph transformer for And-Inverter Graphs.
# prepare (netlists -> AIGs, labels) -> train (all arms, one job per seed) -> evaluate (held-out circuits)
#                                    -> scaling (memory and time against size; fused kernel on a GPU) -> report.
# Code: workflow/papers/deepgate4/ (stages.py holds the functions these rules call).

DG4 = f"{RESULTS}/deepgate4"
DG4_CFG = config["deepgate4"]


rule deepgate4_prepare:
    """Read the netlists into AIGs, add generated circuits, label nodes and gate pairs by random simulation."""
    output:
        circuits=f"{DG4}/prepare/circuits.parquet",
        nodes=f"{DG4}/prepare/nodes.parquet",
        pairs=f"{DG4}/prepare/pairs.parquet",
    params:
        call="papers.deepgate4.stages:prepare",
        cfg=DG4_CFG,
    log:
        f"{LOGS}/deepgate4/prepare/circuits.log",
    benchmark:
        f"{BENCHMARKS}/deepgate4/prepare/circuits.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="deepgate4_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule deepgate4_train:
    """Train every arm (DeepGate4 and its baselines) for one seed on the training circuits."""
    input:
        circuits=rules.deepgate4_prepare.output.circuits,
        nodes=rules.deepgate4_prepare.output.nodes,
        pairs=rules.deepgate4_prepare.output.pairs,
    output:
        checkpoint=f"{DG4}/train/seed{{seed}}.pt",
        history=f"{DG4}/train/seed{{seed}}_history.parquet",
    params:
        call="papers.deepgate4.stages:train",
        cfg=DG4_CFG,
        seed=lambda w: int(w.seed),
    log:
        f"{LOGS}/deepgate4/train/seed{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/deepgate4/train/seed{{seed}}.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="deepgate4_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule deepgate4_evaluate:
    """Signal-probability and truth-table errors of every arm and seed on the held-out circuits."""
    input:
        circuits=rules.deepgate4_prepare.output.circuits,
        nodes=rules.deepgate4_prepare.output.nodes,
        pairs=rules.deepgate4_prepare.output.pairs,
        checkpoints=expand(rules.deepgate4_train.output.checkpoint, seed=seeds("deepgate4")),
    output:
        metrics=f"{DG4}/evaluate/metrics.parquet",
        consistency=f"{DG4}/evaluate/consistency.json",
    params:
        call="papers.deepgate4.stages:evaluate",
        cfg=DG4_CFG,
    log:
        f"{LOGS}/deepgate4/evaluate/metrics.log",
    benchmark:
        f"{BENCHMARKS}/deepgate4/evaluate/metrics.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="deepgate4_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule deepgate4_scaling:
    """Forward-pass memory and time against circuit size, full vs partitioned; the fused kernel on a GPU."""
    input:
        circuits=rules.deepgate4_prepare.output.circuits,
        nodes=rules.deepgate4_prepare.output.nodes,
    output:
        memory=f"{DG4}/scaling/memory.parquet",
        kernel=f"{DG4}/scaling/kernel.json",
    params:
        call="papers.deepgate4.stages:scaling",
        cfg=DG4_CFG,
    log:
        f"{LOGS}/deepgate4/scaling/memory.log",
    benchmark:
        f"{BENCHMARKS}/deepgate4/scaling/memory.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="deepgate4_scaling"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule deepgate4_report:
    """The table, the error, memory and training figures, the claims with their verdicts, report.md."""
    input:
        circuits=rules.deepgate4_prepare.output.circuits,
        metrics=rules.deepgate4_evaluate.output.metrics,
        consistency=rules.deepgate4_evaluate.output.consistency,
        histories=expand(rules.deepgate4_train.output.history, seed=seeds("deepgate4")),
        memory=rules.deepgate4_scaling.output.memory,
        kernel=rules.deepgate4_scaling.output.kernel,
        benchmarks=[
            rules.deepgate4_prepare.benchmark,
            *expand(rules.deepgate4_train.benchmark, seed=seeds("deepgate4")),
            rules.deepgate4_evaluate.benchmark,
            rules.deepgate4_scaling.benchmark,
        ],
    output:
        table_md=report(f"{DG4}/table.md", caption="../report/deepgate4/table.rst", category="deepgate4", subcategory="2 results"),
        table_csv=f"{DG4}/table.csv",
        claims=f"{DG4}/claims.json",
        params_json=f"{DG4}/params.json",
        report_md=f"{DG4}/report.md",
        verdicts=report(f"{DG4}/figures/verdicts.png", caption="../report/verdicts.rst", category="deepgate4",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{DG4}/figures/verdicts.rst",
        page=report(f"{DG4}/report.html", caption="../report/page.rst", category="deepgate4",
                    subcategory="1 verdicts and report"),
        fig_errors=report(f"{DG4}/figures/errors.png", caption="../report/deepgate4/errors.rst", category="deepgate4", subcategory="2 results"),
        fig_memory=report(f"{DG4}/figures/memory.png", caption="../report/deepgate4/memory.rst", category="deepgate4", subcategory="2 results"),
        fig_training=report(
            f"{DG4}/figures/training.png", caption="../report/deepgate4/training.rst", category="deepgate4"
        ),
    params:
        call="papers.deepgate4.report:report",
        cfg=DG4_CFG,
        scale=SCALE,
        time_budget=config["time_budget"].get(SCALE, {}).get("deepgate4", config["time_budget"].get(SCALE, {}).get("default")),
    log:
        f"{LOGS}/deepgate4/report.log",
    benchmark:
        f"{BENCHMARKS}/deepgate4/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="deepgate4_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule deepgate4:
    """Everything of paper P5 deepgate4: its report, table, figures and claims."""
    input:
        paper_outputs("deepgate4"),
