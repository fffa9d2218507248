# P8 eagle: a mixture of vision encoders for a multimodal LM (channel concatenation, other fusions, Pre-Alignment,
# round-robin expert selection). prepare (digit canvases and templated questions, every seed) -> pretrain (one job
# per seed: three experts on their own objectives, the LM on the QA text) -> train (one job per seed: every arm and
# control, the round-robin selection) -> evaluate (accuracies gathered) -> report.
# Full scale (config eagle.llava set): prepare checks LLaVA-style records, pretrain loads the experts and the LM
# from their local Hugging Face directories, train runs the same arms on them (papers.eagle.llava).
# Code: workflow/papers/eagle/ (data.py, stages.py and report.py hold the functions these rules call).

EAGLE = f"{RESULTS}/eagle"


rule eagle_prepare:
    """Build every seed's train / val / test canvases from sklearn's digits and their templated questions."""
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
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule eagle_pretrain:
    """Pretrain the CLIP-style, high-res reading and localisation experts and the LM on one seed."""
    input:
        data=rules.eagle_prepare.output.data,
    output:
        experts=f"{EAGLE}/pretrain/experts_{{seed}}.pt",
    params:
        call="papers.eagle.stages:pretrain",
        cfg=config["eagle"],
        seed="{seed}",
    log:
        f"{LOGS}/eagle/pretrain/experts_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/eagle/pretrain/experts_{{seed}}.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule eagle_train:
    """Train every arm (single experts, five fusions, Pre-Alignment, controls, round-robin) on one seed."""
    input:
        data=rules.eagle_prepare.output.data,
        experts=rules.eagle_pretrain.output.experts,
    output:
        accuracies=f"{EAGLE}/train/accuracies_{{seed}}.parquet",
    params:
        call="papers.eagle.stages:train",
        cfg=config["eagle"],
        seed="{seed}",
    log:
        f"{LOGS}/eagle/train/accuracies_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/eagle/train/accuracies_{{seed}}.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule eagle_evaluate:
    """Gather the seeds' accuracies into one table."""
    input:
        accuracies=expand(rules.eagle_train.output.accuracies, seed=seeds("eagle")),
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
        **job_resources("light"),
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
            *expand(rules.eagle_pretrain.benchmark, seed=seeds("eagle")),
            *expand(rules.eagle_train.benchmark, seed=seeds("eagle")),
            rules.eagle_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{EAGLE}/table.md", caption="../report/eagle/table.rst", category="eagle"),
        table_csv=f"{EAGLE}/table.csv",
        claims=f"{EAGLE}/claims.json",
        params_json=f"{EAGLE}/params.json",
        report_md=f"{EAGLE}/report.md",
        accuracy_figure=report(f"{EAGLE}/figures/accuracy.png", caption="../report/eagle/accuracy.rst",
                               category="eagle"),
    params:
        call="papers.eagle.report:report",
        cfg=config["eagle"],
        scale=SCALE,
    log:
        f"{LOGS}/eagle/report.log",
    benchmark:
        f"{BENCHMARKS}/eagle/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule eagle:
    """Everything of paper P8 eagle: its report, table, figure and claims."""
    input:
        paper_outputs("eagle"),
