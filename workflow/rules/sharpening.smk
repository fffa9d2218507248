# P11 sharpening: self-improvement as sharpening, SFT- against RL-sharpening, on two levels.
# prepare -> tabular (level 1, exact model) | pretrain -> sharpen (per method) (level 2, tiny transformer)
# -> evaluate -> report. Code: workflow/papers/sharpening/ (stages.py holds the functions these rules call).
from papers.sharpening.params import METHODS as SHARPENING_METHODS

SH = f"{RESULTS}/sharpening"
SH_CFG = config["sharpening"]


rule sharpening_prepare:
    """Generate the tabular base model, the noisy string-reversal corpus and the sharpening prompts."""
    output:
        tabular_base=f"{SH}/prepare/tabular_base.parquet",
        corpus=f"{SH}/prepare/corpus.parquet",
        prompts=f"{SH}/prepare/prompts.parquet",
    params:
        call="papers.sharpening.stages:prepare",
        cfg=SH_CFG,
    log:
        f"{LOGS}/sharpening/prepare/data.log",
    benchmark:
        f"{BENCHMARKS}/sharpening/prepare/data.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening_tabular:
    """Level 1: exact best-of-N, SFT- and RL-sharpening on the tabular model; one long RL run."""
    input:
        tabular_base=rules.sharpening_prepare.output.tabular_base,
    output:
        curves=f"{SH}/train/tabular.parquet",
        convergence=f"{SH}/train/tabular_convergence.parquet",
    params:
        call="papers.sharpening.stages:tabular",
        cfg=SH_CFG,
    log:
        f"{LOGS}/sharpening/train/tabular.log",
    benchmark:
        f"{BENCHMARKS}/sharpening/train/tabular.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening_pretrain:
    """Level 2: pretrain the tiny character-level transformer on the noisy string-reversal corpus."""
    input:
        corpus=rules.sharpening_prepare.output.corpus,
    output:
        checkpoint=f"{SH}/train/base.pt",
        history=f"{SH}/train/pretrain_history.parquet",
    params:
        call="papers.sharpening.stages:pretrain",
        cfg=SH_CFG,
    log:
        f"{LOGS}/sharpening/train/base.log",
    benchmark:
        f"{BENCHMARKS}/sharpening/train/base.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening_sharpen:
    """Level 2: sharpen the pretrained transformer by one method (SFT or RL) over every budget and seed."""
    input:
        checkpoint=rules.sharpening_pretrain.output.checkpoint,
        prompts=rules.sharpening_prepare.output.prompts,
    output:
        results=f"{SH}/train/sharpen_{{method}}.parquet",
    params:
        call="papers.sharpening.stages:sharpen",
        cfg=SH_CFG,
        method=lambda w: w.method,
    log:
        f"{LOGS}/sharpening/train/sharpen_{{method}}.log",
    benchmark:
        f"{BENCHMARKS}/sharpening/train/sharpen_{{method}}.tsv"
    wildcard_constraints:
        method="|".join(SHARPENING_METHODS),
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening_evaluate:
    """The base model's accuracies and coverage, and both levels' results in one table."""
    input:
        checkpoint=rules.sharpening_pretrain.output.checkpoint,
        prompts=rules.sharpening_prepare.output.prompts,
        tabular_base=rules.sharpening_prepare.output.tabular_base,
        tabular_curves=rules.sharpening_tabular.output.curves,
        sharpened=expand(rules.sharpening_sharpen.output.results, method=SHARPENING_METHODS),
    output:
        results=f"{SH}/evaluate/results.parquet",
        summary=f"{SH}/evaluate/summary.json",
    params:
        call="papers.sharpening.stages:evaluate",
        cfg=SH_CFG,
    log:
        f"{LOGS}/sharpening/evaluate/results.log",
    benchmark:
        f"{BENCHMARKS}/sharpening/evaluate/results.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening_report:
    """The table, the best-of-N, sharpening and convergence figures, the claims with verdicts, report.md."""
    input:
        results=rules.sharpening_evaluate.output.results,
        summary=rules.sharpening_evaluate.output.summary,
        convergence=rules.sharpening_tabular.output.convergence,
        history=rules.sharpening_pretrain.output.history,
        benchmarks=[
            rules.sharpening_prepare.benchmark,
            rules.sharpening_tabular.benchmark,
            rules.sharpening_pretrain.benchmark,
            *expand(rules.sharpening_sharpen.benchmark, method=SHARPENING_METHODS),
            rules.sharpening_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{SH}/table.md", caption="../report/sharpening/table.rst", category="sharpening"),
        table_csv=f"{SH}/table.csv",
        claims=f"{SH}/claims.json",
        params_json=f"{SH}/params.json",
        report_md=f"{SH}/report.md",
        fig_bon=report(
            f"{SH}/figures/best_of_n.png", caption="../report/sharpening/best_of_n.rst", category="sharpening"
        ),
        fig_sharpening=report(
            f"{SH}/figures/sharpening.png", caption="../report/sharpening/sharpening.rst", category="sharpening"
        ),
        fig_convergence=report(
            f"{SH}/figures/convergence.png", caption="../report/sharpening/convergence.rst", category="sharpening"
        ),
    params:
        call="papers.sharpening.stages:report",
        cfg=SH_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/sharpening/report.log",
    benchmark:
        f"{BENCHMARKS}/sharpening/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening:
    """Everything of paper P11 sharpening: its report, table, figures and claims."""
    input:
        paper_outputs("sharpening"),
