# P3 bodygen: embodiment co-design with a topology-aware transformer (MoSAT) and temporal credit assignment.
# prepare (every task's template and its MJCF) -> train (one job per task and seed: every arm, baseline, ablation
# and negative control) -> evaluate (every agent's final design, deterministic; parameter counts) -> report.
# Code: workflow/papers/bodygen/ (stages.py and report.py hold the functions these rules call).

BODYGEN = f"{RESULTS}/bodygen"
BODYGEN_RUNS = {"task": [t for t in config["bodygen"]["tasks"] for _ in seeds("bodygen")],
                "seed": [s for _ in config["bodygen"]["tasks"] for s in seeds("bodygen")]}


rule bodygen_prepare:
    """Build every task's initial limb tree and MJCF and check that MuJoCo compiles it."""
    output:
        template=f"{BODYGEN}/prepare/template.json",
    params:
        call="papers.bodygen.stages:prepare",
        cfg=config["bodygen"],
    log:
        f"{LOGS}/bodygen/prepare/template.log",
    benchmark:
        f"{BENCHMARKS}/bodygen/prepare/template.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule bodygen_train:
    """Co-design with PPO on one task and seed for every arm (BodyGen, Transform2Act-style GNN, ablations, controls)."""
    input:
        template=rules.bodygen_prepare.output.template,
    output:
        checkpoint=f"{BODYGEN}/train/{{task}}/agents_{{seed}}.pt",
        history=f"{BODYGEN}/train/{{task}}/history_{{seed}}.parquet",
    wildcard_constraints:
        task="[a-z0-9-]+",
        seed="[0-9]+",
    params:
        call="papers.bodygen.stages:train",
        cfg=config["bodygen"],
        task="{task}",
        seed="{seed}",
    log:
        f"{LOGS}/bodygen/train/{{task}}/agents_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/bodygen/train/{{task}}/agents_{{seed}}.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule bodygen_evaluate:
    """Roll out every trained agent's final design with deterministic design and control; count parameters."""
    input:
        checkpoints=expand(rules.bodygen_train.output.checkpoint, zip, **BODYGEN_RUNS),
    output:
        returns=f"{BODYGEN}/evaluate/returns.parquet",
        designs=f"{BODYGEN}/evaluate/designs.json",
        parameters=f"{BODYGEN}/evaluate/parameters.parquet",
    params:
        call="papers.bodygen.stages:evaluate",
        cfg=config["bodygen"],
    log:
        f"{LOGS}/bodygen/evaluate/returns.log",
    benchmark:
        f"{BENCHMARKS}/bodygen/evaluate/returns.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule bodygen_report:
    """The return table, learning curves and morphologies, the claims with their verdicts and controls, report.md."""
    input:
        returns=rules.bodygen_evaluate.output.returns,
        designs=rules.bodygen_evaluate.output.designs,
        parameters=rules.bodygen_evaluate.output.parameters,
        histories=expand(rules.bodygen_train.output.history, zip, **BODYGEN_RUNS),
        benchmarks=[
            rules.bodygen_prepare.benchmark,
            *expand(rules.bodygen_train.benchmark, zip, **BODYGEN_RUNS),
            rules.bodygen_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{BODYGEN}/table.md", caption="../report/bodygen/table.rst", category="bodygen"),
        table_csv=f"{BODYGEN}/table.csv",
        claims=f"{BODYGEN}/claims.json",
        params_json=f"{BODYGEN}/params.json",
        report_md=f"{BODYGEN}/report.md",
        curves_figure=report(f"{BODYGEN}/figures/learning_curves.png", caption="../report/bodygen/curves.rst",
                             category="bodygen"),
        designs_figure=report(f"{BODYGEN}/figures/morphologies.png", caption="../report/bodygen/morphologies.rst",
                              category="bodygen"),
    params:
        call="papers.bodygen.report:report",
        cfg=config["bodygen"],
        scale=SCALE,
    log:
        f"{LOGS}/bodygen/report.log",
    benchmark:
        f"{BENCHMARKS}/bodygen/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule bodygen:
    """Everything of paper P3 bodygen: its report, table, figures and claims."""
    input:
        paper_outputs("bodygen"),
