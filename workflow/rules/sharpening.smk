# P11 sharpening: self-improvement as sharpening, SFT- against RL-sharpening, on two levels.
# prepare -> pretrain -> sharpen (per method) (level 2, tiny transformers) | tabular (level 1, exact sweep)
# -> evaluate -> report. Code: workflow/papers/sharpening/ (stages.py holds the functions these rules call).
from papers.sharpening.params import METHODS as SHARPENING_METHODS

SH = f"{RESULTS}/sharpening"
SH_CFG = config["sharpening"]
# Pretrained LMs (sharpening.pretrained.models; full scale): evaluated as they are, no training job.
SH_PRETRAINED = [m["name"] for m in SH_CFG["pretrained"]["models"]]


rule sharpening_prepare:
    """Generate the sharpening prompts and, from other prompts, the noisy reversal corpus."""
    output:
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
        **job_resources("light", rule="sharpening_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening_tabular:
    """Level 1: the exact coverage sweep of SFT-, RL- and offline RL-sharpening; long RL runs to the optimum."""
    output:
        curves=f"{SH}/train/tabular.parquet",
        convergence=f"{SH}/train/tabular_convergence.parquet",
        formulas=f"{SH}/train/tabular_formulas.parquet",
    params:
        call="papers.sharpening.stages:tabular",
        cfg=SH_CFG,
    log:
        f"{LOGS}/sharpening/train/tabular.log",
    benchmark:
        f"{BENCHMARKS}/sharpening/train/tabular.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="sharpening_tabular"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening_pretrain:
    """Level 2: pretrain one tiny character-level transformer per seed on the noisy corpus, to a fit gate."""
    input:
        corpus=rules.sharpening_prepare.output.corpus,
        prompts=rules.sharpening_prepare.output.prompts,
    output:
        checkpoint=f"{SH}/train/base.pt",
        history=f"{SH}/train/pretrain_history.parquet",
        fit=f"{SH}/train/pretrain_fit.parquet",
    params:
        call="papers.sharpening.stages:pretrain",
        cfg=SH_CFG,
    log:
        f"{LOGS}/sharpening/train/base.log",
    benchmark:
        f"{BENCHMARKS}/sharpening/train/base.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="sharpening_pretrain"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening_sharpen:
    """Level 2: sharpen every pretrained transformer by one method (SFT, or RL online and offline) over every budget."""
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
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="sharpening_sharpen"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening_evaluate:
    """The base models' accuracies, best-of-N curves and coverage; both levels' results in one table."""
    input:
        checkpoint=rules.sharpening_pretrain.output.checkpoint,
        prompts=rules.sharpening_prepare.output.prompts,
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
        **job_resources("light", rule="sharpening_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening_pretrained:
    """The paper's own setting: best-of-N of one local pretrained LM on the user's GSM-style prompts."""
    input:
        prompts=lambda w: SH_CFG["pretrained"]["prompts"],
    output:
        results=f"{SH}/evaluate/pretrained_{{name}}.parquet",
    params:
        call="papers.sharpening.stages:pretrained",
        cfg=SH_CFG,
        name=lambda w: w.name,
    log:
        f"{LOGS}/sharpening/evaluate/pretrained_{{name}}.log",
    benchmark:
        f"{BENCHMARKS}/sharpening/evaluate/pretrained_{{name}}.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="sharpening_pretrained"),
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
        formulas=rules.sharpening_tabular.output.formulas,
        history=rules.sharpening_pretrain.output.history,
        fit=rules.sharpening_pretrain.output.fit,
        pretrained=expand(rules.sharpening_pretrained.output.results, name=SH_PRETRAINED),
        benchmarks=[
            rules.sharpening_prepare.benchmark,
            rules.sharpening_tabular.benchmark,
            rules.sharpening_pretrain.benchmark,
            *expand(rules.sharpening_sharpen.benchmark, method=SHARPENING_METHODS),
            rules.sharpening_evaluate.benchmark,
            *expand(rules.sharpening_pretrained.benchmark, name=SH_PRETRAINED),
        ],
    output:
        table_md=report(f"{SH}/table.md", caption="../report/sharpening/table.rst", category="sharpening", subcategory="2 results"),
        table_csv=f"{SH}/table.csv",
        claims=f"{SH}/claims.json",
        params_json=f"{SH}/params.json",
        report_md=f"{SH}/report.md",
        verdicts=report(f"{SH}/figures/verdicts.png", caption="../report/verdicts.rst", category="sharpening",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{SH}/figures/verdicts.rst",
        page=report(f"{SH}/report.html", caption="../report/page.rst", category="sharpening",
                    subcategory="1 verdicts and report"),
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
        call="papers.sharpening.report:report",
        cfg=SH_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/sharpening/report.log",
    benchmark:
        f"{BENCHMARKS}/sharpening/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="sharpening_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sharpening:
    """Everything of paper P11 sharpening: its report, table, figures and claims."""
    input:
        paper_outputs("sharpening"),
