# P4 symspace: neural networks on SPD manifolds and the Poincare ball from the Busemann point-to-hyperplane distance.
# prepare (EEG-like covariances, digits region covariances, noisy tree; every seed) -> train (one job per seed:
# every arm, its controls and the metric grid on all three tasks) -> evaluate (accuracies gathered; the closed
# forms checked against their limits) -> report.
# Code: workflow/papers/symspace/ (data.py, stages.py and report.py hold the functions these rules call).

SYMSPACE = f"{RESULTS}/symspace"


rule symspace_prepare:
    """Generate every seed's EEG-like subjects (or read the user's EEG .npz files), noisy tree, and the digits' region covariances."""
    output:
        data=f"{SYMSPACE}/prepare/data.pkl",
    params:
        call="papers.symspace.data:prepare",
        cfg=config["symspace"],
    log:
        f"{LOGS}/symspace/prepare/data.log",
    benchmark:
        f"{BENCHMARKS}/symspace/prepare/data.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule symspace_train:
    """Train every arm (Busemann MLR over the metric grid, LogEig, SPDNet, MLP, attention pair, ball heads) and its controls on one seed."""
    input:
        data=rules.symspace_prepare.output.data,
    output:
        accuracies=f"{SYMSPACE}/train/accuracies_{{seed}}.parquet",
    params:
        call="papers.symspace.stages:train",
        cfg=config["symspace"],
        seed="{seed}",
    log:
        f"{LOGS}/symspace/train/accuracies_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/symspace/train/accuracies_{{seed}}.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule symspace_evaluate:
    """Gather the seeds' accuracies; check the closed-form distances against their limit definitions and special cases (claim a)."""
    input:
        accuracies=expand(rules.symspace_train.output.accuracies, seed=seeds("symspace")),
    output:
        table=f"{SYMSPACE}/evaluate/accuracies.parquet",
        checks=f"{SYMSPACE}/evaluate/distance_checks.parquet",
        gaps=f"{SYMSPACE}/evaluate/limit_gaps.parquet",
    params:
        call="papers.symspace.stages:evaluate",
        cfg=config["symspace"],
    log:
        f"{LOGS}/symspace/evaluate/accuracies.log",
    benchmark:
        f"{BENCHMARKS}/symspace/evaluate/accuracies.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule symspace_report:
    """The accuracy table, the figures, the claims with their verdicts and controls, report.md."""
    input:
        table=rules.symspace_evaluate.output.table,
        checks=rules.symspace_evaluate.output.checks,
        gaps=rules.symspace_evaluate.output.gaps,
        benchmarks=[
            rules.symspace_prepare.benchmark,
            *expand(rules.symspace_train.benchmark, seed=seeds("symspace")),
            rules.symspace_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{SYMSPACE}/table.md", caption="../report/symspace/table.rst", category="symspace"),
        table_csv=f"{SYMSPACE}/table.csv",
        claims=f"{SYMSPACE}/claims.json",
        params_json=f"{SYMSPACE}/params.json",
        report_md=f"{SYMSPACE}/report.md",
        accuracy_figure=report(f"{SYMSPACE}/figures/accuracy.png", caption="../report/symspace/accuracy.rst",
                               category="symspace"),
        gap_figure=report(f"{SYMSPACE}/figures/limit_gap.png", caption="../report/symspace/limit_gap.rst",
                          category="symspace"),
    params:
        call="papers.symspace.report:report",
        cfg=config["symspace"],
        scale=SCALE,
    log:
        f"{LOGS}/symspace/report.log",
    benchmark:
        f"{BENCHMARKS}/symspace/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule symspace:
    """Everything of paper P4 symspace: its report, table, figures and claims."""
    input:
        paper_outputs("symspace"),
