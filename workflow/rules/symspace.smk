# P4 symspace: neural networks on SPD manifolds and the Poincare ball from the Busemann point-to-hyperplane distance.
# prepare (EEG-like covariances or the user's EEG, digits region covariances where run, noisy trees) -> train (one
# job per seed: both heads on the shared BiMap/ReEig backbone from several initialisations on the EEG of the head
# seeds dealt to it, with the tangent-space logistic regression as their ceiling reference, and its share of claim
# (b)'s positive control; claim (e)'s attention networks on the burst seeds dealt to it (the class event in a random
# run of windows), the setting that decides (e), and on the window-event EEG seeds, its positive control) and tree (one job: the ball heads from several initialisations, the angle rule and the positive control,
# labels drawn by a random horocycle head, on every tree seed) -> evaluate (accuracies gathered; the closed forms
# checked against their limits) -> report.
# Code: workflow/papers/symspace/ (data.py, stages.py and report.py hold the functions these rules call).

SYMSPACE = f"{RESULTS}/symspace"


rule symspace_prepare:
    """Generate every seed's EEG-like subjects (event in one window; in a random run of windows, the burst; spread over every window where run; or read the user's EEG data sets), every tree seed's noisy tree, and the digits' region covariances where run."""
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
        **job_resources("light", rule="symspace_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule symspace_train:
    """Train both heads on the shared BiMap/ReEig backbone from several initialisations on this job's head seeds (EEG, with the tangent-space logistic regression on the trial covariances and on each trained backbone's output as ceiling references) and on its share of claim (b)'s positive control (labels drawn by a random Busemann SPDNet), and claim (e)'s networks (attention, the ablation, the mean- and the log-sum-exp-pooled non-attentive baselines) on this job's burst seeds (the class event in a random run of windows: the setting that decides claim e), window-event EEG seeds (its positive control) and spread-window seeds where run (context)."""
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
        **job_resources("train", rule="symspace_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule symspace_tree:
    """Train the three ball heads from several initialisations each (and the two hyperbolic heads on labels drawn by a random horocycle head, the positive control) and fit the angle rule on every tree seed."""
    input:
        data=rules.symspace_prepare.output.data,
    output:
        accuracies=f"{SYMSPACE}/tree/accuracies.parquet",
    params:
        call="papers.symspace.stages:tree",
        cfg=config["symspace"],
    log:
        f"{LOGS}/symspace/tree/accuracies.log",
    benchmark:
        f"{BENCHMARKS}/symspace/tree/accuracies.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="symspace_tree"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule symspace_evaluate:
    """Gather the accuracies; check the closed-form distances against their limit definitions (claim a) and the checks."""
    input:
        accuracies=expand(rules.symspace_train.output.accuracies, seed=seeds("symspace")),
        tree_accuracies=rules.symspace_tree.output.accuracies,
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
        **job_resources("light", rule="symspace_evaluate"),
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
            rules.symspace_tree.benchmark,
            rules.symspace_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{SYMSPACE}/table.md", caption="../report/symspace/table.rst", category="symspace", subcategory="2 results"),
        table_csv=f"{SYMSPACE}/table.csv",
        claims=f"{SYMSPACE}/claims.json",
        params_json=f"{SYMSPACE}/params.json",
        report_md=f"{SYMSPACE}/report.md",
        verdicts=report(f"{SYMSPACE}/figures/verdicts.png", caption="../report/verdicts.rst", category="symspace",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{SYMSPACE}/figures/verdicts.rst",
        page=report(f"{SYMSPACE}/report.html", caption="../report/page.rst", category="symspace",
                    subcategory="1 verdicts and report"),
        accuracy_figure=report(f"{SYMSPACE}/figures/accuracy.png", caption="../report/symspace/accuracy.rst",
                               category="symspace", subcategory="2 results"),
        gap_figure=report(f"{SYMSPACE}/figures/limit_gap.png", caption="../report/symspace/limit_gap.rst",
                          category="symspace", subcategory="2 results"),
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
        **job_resources("light", rule="symspace_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule symspace:
    """Everything of paper P4 symspace: its report, table, figures and claims."""
    input:
        paper_outputs("symspace"),
