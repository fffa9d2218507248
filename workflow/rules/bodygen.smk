# P3 bodygen: embodiment co-design with a topology-aware transformer (MoSAT) and temporal credit assignment.
# prepare (every task's template and its MJCF; the cost of a physics step) -> train (one job per task, arm and seed;
# at the full scale a chain of bodygen.train_parts jobs, train_part 1 .. train_parts - 1 then train, each resuming)
# -> evaluate (every agent's final design, deterministic, and with zero torque; parameter counts) -> report; beside
# them credit (TCA against GAE on a design-only bandit with a scripted gait; every replicate in one job) -> report.
# Code: workflow/papers/bodygen/ (stages.py and report.py hold the functions these rules call).

BODYGEN = f"{RESULTS}/bodygen"
BODYGEN_RUNS = {k: [v for t in config["bodygen"]["tasks"] for a in config["bodygen"]["arms"] for s in seeds("bodygen")
                    for v in [{"task": t, "arm": a, "seed": s}[k]]] for k in ("task", "arm", "seed")}


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
        **job_resources("light", rule="bodygen_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


BODYGEN_PART = f"{BODYGEN}/train/{{task}}/parts/{{arm}}_{{seed}}_part{{part}}.pt"
BODYGEN_TRAIN_WILDCARDS = {"task": "[a-z0-9-]+", "arm": "|".join(config["bodygen"]["arms"]), "seed": "[0-9]+"}


rule bodygen_train_part:
    """Chained part `part` (1 .. train_parts - 1) of one arm's training on one task and seed: its whole state at a PPO iteration boundary, which the next part resumes."""
    input:
        unpack(bodygen_resume),
        template=rules.bodygen_prepare.output.template,
    output:
        state=BODYGEN_PART,
    wildcard_constraints:
        **BODYGEN_TRAIN_WILDCARDS,
        part="[0-9]+",
    params:
        call="papers.bodygen.stages:train_part",
        cfg=config["bodygen"],
        task="{task}",
        arm="{arm}",
        seed="{seed}",
        part="{part}",
    log:
        f"{LOGS}/bodygen/train/{{task}}/parts/{{arm}}_{{seed}}_part{{part}}.log",
    benchmark:
        f"{BENCHMARKS}/bodygen/train/{{task}}/parts/{{arm}}_{{seed}}_part{{part}}.tsv"
    threads: res("train", "threads")
    resources:
        # one part's wall time (bodygen.train_minutes), growing with each retry up to the cap
        **job_resources("train", runtime=config["bodygen"]["train_minutes"], rule="bodygen_train_part"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule bodygen_train:
    """Co-design with PPO: one arm (BodyGen, Transform2Act-style GNN, an ablation, the fixed body, a control) on one task and seed (its last chained part)."""
    input:
        unpack(bodygen_resume),
        template=rules.bodygen_prepare.output.template,
    output:
        checkpoint=f"{BODYGEN}/train/{{task}}/{{arm}}_{{seed}}.pt",
        history=f"{BODYGEN}/train/{{task}}/history_{{arm}}_{{seed}}.parquet",
    wildcard_constraints:
        **BODYGEN_TRAIN_WILDCARDS,
    params:
        call="papers.bodygen.stages:train",
        cfg=config["bodygen"],
        task="{task}",
        arm="{arm}",
        seed="{seed}",
    log:
        f"{LOGS}/bodygen/train/{{task}}/{{arm}}_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/bodygen/train/{{task}}/{{arm}}_{{seed}}.tsv"
    threads: res("train", "threads")
    resources:
        # the config's estimate of one job's (one part's) wall time (bodygen.train_minutes), growing with each retry up to the cap
        **job_resources("train", runtime=config["bodygen"]["train_minutes"], rule="bodygen_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule bodygen_credit:
    """TCA against GAE on the design-only bandit (scripted gait, late design reward), every replicate, and the null control (rewards independent of the design chosen)."""
    output:
        curves=f"{BODYGEN}/credit/curves.parquet",
    params:
        call="papers.bodygen.stages:credit_bandit",
        cfg=config["bodygen"],
    log:
        f"{LOGS}/bodygen/credit/curves.log",
    benchmark:
        f"{BENCHMARKS}/bodygen/credit/curves.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="bodygen_credit"),
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
        **job_resources("light", rule="bodygen_evaluate"),
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
        template=rules.bodygen_prepare.output.template,
        credit=rules.bodygen_credit.output.curves,
        histories=expand(rules.bodygen_train.output.history, zip, **BODYGEN_RUNS),
        benchmarks=[
            rules.bodygen_prepare.benchmark,
            *expand(rules.bodygen_train.benchmark, zip, **BODYGEN_RUNS),
            rules.bodygen_credit.benchmark,
            rules.bodygen_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{BODYGEN}/table.md", caption="../report/bodygen/table.rst", category="bodygen", subcategory="2 results"),
        table_csv=f"{BODYGEN}/table.csv",
        claims=f"{BODYGEN}/claims.json",
        params_json=f"{BODYGEN}/params.json",
        report_md=f"{BODYGEN}/report.md",
        verdicts=report(f"{BODYGEN}/figures/verdicts.png", caption="../report/verdicts.rst", category="bodygen",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{BODYGEN}/figures/verdicts.rst",
        page=report(f"{BODYGEN}/report.html", caption="../report/page.rst", category="bodygen",
                    subcategory="1 verdicts and report"),
        curves_figure=report(f"{BODYGEN}/figures/learning_curves.png", caption="../report/bodygen/curves.rst",
                             category="bodygen", subcategory="2 results"),
        designs_figure=report(f"{BODYGEN}/figures/morphologies.png", caption="../report/bodygen/morphologies.rst",
                              category="bodygen", subcategory="2 results"),
        credit_figure=report(f"{BODYGEN}/figures/credit.png", caption="../report/bodygen/credit.rst", category="bodygen", subcategory="2 results"),
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
        **job_resources("light", rule="bodygen_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule bodygen:
    """Everything of paper P3 bodygen: its report, table, figures and claims."""
    input:
        paper_outputs("bodygen"),
