# P9 ensembles: homogeneous deep ensembles through distributional equivalence.
# prepare (data, one split per replicate) -> train (per replicate, blocks of members_per_job (setting, member)
# pairs) -> evaluate -> report. Code: workflow/papers/ensembles/ (stages.py and report.py hold the functions
# these rules call).
from papers.ensembles.params import parse as _ensembles_parse

ENS = f"{RESULTS}/ensembles"
ENS_CFG = config["ensembles"]
ENS_JOBS = list(range(_ensembles_parse(ENS_CFG).jobs))


rule ensembles_prepare:
    """Load the digits or the user's CIFAR files as one table with a train/val/test split per replicate."""
    output:
        data=f"{ENS}/prepare/data.parquet",
    params:
        call="papers.ensembles.stages:prepare",
        cfg=ENS_CFG,
    log:
        f"{LOGS}/ensembles/prepare/data.log",
    benchmark:
        f"{BENCHMARKS}/ensembles/prepare/data.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="ensembles_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule ensembles_train:
    """Train one block of (replicate, setting, member) triples; save validation and test probabilities."""
    input:
        data=rules.ensembles_prepare.output.data,
    output:
        probs=f"{ENS}/train/job{{job}}_probs.parquet",
        members=f"{ENS}/train/job{{job}}_members.parquet",
        snapshots=f"{ENS}/train/job{{job}}_snapshots.parquet",
        checkpoint=f"{ENS}/train/job{{job}}.pt",
    params:
        call="papers.ensembles.stages:train",
        cfg=ENS_CFG,
        job=lambda w: int(w.job),
    log:
        f"{LOGS}/ensembles/train/job{{job}}.log",
    benchmark:
        f"{BENCHMARKS}/ensembles/train/job{{job}}.tsv"
    wildcard_constraints:
        job=r"\d+",
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="ensembles_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule ensembles_evaluate:
    """Per setting and replicate: ensemble vs chosen member, curves over M vs the estimator, KS pair tests."""
    input:
        probs=expand(rules.ensembles_train.output.probs, job=ENS_JOBS),
        members=expand(rules.ensembles_train.output.members, job=ENS_JOBS),
        snapshots=expand(rules.ensembles_train.output.snapshots, job=ENS_JOBS),
    output:
        metrics=f"{ENS}/evaluate/metrics.json",
        curves=f"{ENS}/evaluate/curves.parquet",
    params:
        call="papers.ensembles.stages:evaluate",
        cfg=ENS_CFG,
    log:
        f"{LOGS}/ensembles/evaluate/metrics.log",
    benchmark:
        f"{BENCHMARKS}/ensembles/evaluate/metrics.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="ensembles_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule ensembles_report:
    """The table, the ensemble-curve, output-distribution and chosen-member figures, the claims, report.md."""
    input:
        metrics=rules.ensembles_evaluate.output.metrics,
        curves=rules.ensembles_evaluate.output.curves,
        probs=expand(rules.ensembles_train.output.probs, job=ENS_JOBS),
        members=expand(rules.ensembles_train.output.members, job=ENS_JOBS),
        benchmarks=[
            rules.ensembles_prepare.benchmark,
            *expand(rules.ensembles_train.benchmark, job=ENS_JOBS),
            rules.ensembles_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{ENS}/table.md", caption="../report/ensembles/table.rst", category="ensembles", subcategory="2 results"),
        table_csv=f"{ENS}/table.csv",
        claims=f"{ENS}/claims.json",
        params_json=f"{ENS}/params.json",
        report_md=f"{ENS}/report.md",
        verdicts=report(f"{ENS}/figures/verdicts.png", caption="../report/verdicts.rst", category="ensembles",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{ENS}/figures/verdicts.rst",
        page=report(f"{ENS}/report.html", caption="../report/page.rst", category="ensembles",
                    subcategory="1 verdicts and report"),
        fig_curves=report(
            f"{ENS}/figures/ensemble_curves.png", caption="../report/ensembles/curves.rst", category="ensembles"
        ),
        fig_distributions=report(
            f"{ENS}/figures/output_distributions.png",
            caption="../report/ensembles/distributions.rst",
            category="ensembles",
        ),
        fig_chosen=report(
            f"{ENS}/figures/ensemble_vs_chosen.png", caption="../report/ensembles/chosen.rst", category="ensembles"
        ),
    params:
        call="papers.ensembles.report:report",
        cfg=ENS_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/ensembles/report.log",
    benchmark:
        f"{BENCHMARKS}/ensembles/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="ensembles_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule ensembles:
    """Everything of paper P9 ensembles: its report, table, figures and claims."""
    input:
        paper_outputs("ensembles"),
