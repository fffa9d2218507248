# P6 sam_late: SAM applied late in training selects flatter minima.
# prepare (digits or CIFAR-10) -> train_sgd -> train_sam (one job per rho) and train_adv, both branching
# from SGD's checkpoint at the switch epoch -> evaluate -> report. Seeds run inside each training job.
# Code: workflow/papers/sam_late/ (stages.py holds the functions these rules call).

SL = f"{RESULTS}/sam_late"
SL_CFG = config["sam_late"]
SL_RHOS = SL_CFG["rhos"]


rule sam_late_prepare:
    """Load the digits or CIFAR-10 train/test split, pixels in [0, 1]; corrupt a share of the training labels."""
    output:
        data=f"{SL}/prepare/data.parquet",
    params:
        call="papers.sam_late.stages:prepare",
        cfg=SL_CFG,
    log:
        f"{LOGS}/sam_late/prepare/data.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/prepare/data.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late_train_sgd:
    """Train SGD throughout for every seed; keep its switch-epoch checkpoint for the late arms to branch from."""
    input:
        data=rules.sam_late_prepare.output.data,
    output:
        history=f"{SL}/train/sgd/history.parquet",
        escape=f"{SL}/train/sgd/escape.parquet",
        checkpoints=f"{SL}/train/sgd/checkpoints.pt",
    params:
        call="papers.sam_late.stages:train_sgd",
        cfg=SL_CFG,
    log:
        f"{LOGS}/sam_late/train/sgd.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/train/sgd.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late_train_sam:
    """At one rho, every seed: SAM throughout and late SAM; at the main rho early SAM and the switch sweep too."""
    input:
        data=rules.sam_late_prepare.output.data,
        sgd=rules.sam_late_train_sgd.output.checkpoints,
    output:
        history=f"{SL}/train/sam_rho{{rho}}/history.parquet",
        escape=f"{SL}/train/sam_rho{{rho}}/escape.parquet",
        checkpoints=f"{SL}/train/sam_rho{{rho}}/checkpoints.pt",
    params:
        call="papers.sam_late.stages:train_sam",
        cfg=SL_CFG,
        rho=lambda w: float(w.rho),
    log:
        f"{LOGS}/sam_late/train/sam_rho{{rho}}.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/train/sam_rho{{rho}}.tsv"
    wildcard_constraints:
        rho="|".join(str(r) for r in SL_RHOS),
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late_train_adv:
    """Every seed: adversarial (PGD) training throughout, and late AT branched from SGD's switch checkpoint."""
    input:
        data=rules.sam_late_prepare.output.data,
        sgd=rules.sam_late_train_sgd.output.checkpoints,
    output:
        history=f"{SL}/train/adv/history.parquet",
        escape=f"{SL}/train/adv/escape.parquet",
        checkpoints=f"{SL}/train/adv/checkpoints.pt",
    params:
        call="papers.sam_late.stages:train_adv",
        cfg=SL_CFG,
    log:
        f"{LOGS}/sam_late/train/adv.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/train/adv.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late_evaluate:
    """Per final network: test accuracy, Hessian sharpness, PGD robust accuracy; loss along w_switch lines."""
    input:
        data=rules.sam_late_prepare.output.data,
        sgd=rules.sam_late_train_sgd.output.checkpoints,
        sam=expand(rules.sam_late_train_sam.output.checkpoints, rho=SL_RHOS),
        adv=rules.sam_late_train_adv.output.checkpoints,
    output:
        metrics=f"{SL}/evaluate/metrics.parquet",
        interpolation=f"{SL}/evaluate/interpolation.parquet",
    params:
        call="papers.sam_late.stages:evaluate",
        cfg=SL_CFG,
    log:
        f"{LOGS}/sam_late/evaluate/metrics.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/evaluate/metrics.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late_report:
    """The table, the curve, rho-sweep, mechanism and robustness figures, the claims with verdicts, report.md."""
    input:
        metrics=rules.sam_late_evaluate.output.metrics,
        interpolation=rules.sam_late_evaluate.output.interpolation,
        histories=[
            rules.sam_late_train_sgd.output.history,
            *expand(rules.sam_late_train_sam.output.history, rho=SL_RHOS),
            rules.sam_late_train_adv.output.history,
        ],
        escapes=[
            rules.sam_late_train_sgd.output.escape,
            *expand(rules.sam_late_train_sam.output.escape, rho=SL_RHOS),
            rules.sam_late_train_adv.output.escape,
        ],
        benchmarks=[
            rules.sam_late_prepare.benchmark,
            rules.sam_late_train_sgd.benchmark,
            *expand(rules.sam_late_train_sam.benchmark, rho=SL_RHOS),
            rules.sam_late_train_adv.benchmark,
            rules.sam_late_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{SL}/table.md", caption="../report/sam_late/table.rst", category="sam_late"),
        table_csv=f"{SL}/table.csv",
        claims=f"{SL}/claims.json",
        params_json=f"{SL}/params.json",
        report_md=f"{SL}/report.md",
        fig_curves=report(f"{SL}/figures/curves.png", caption="../report/sam_late/curves.rst", category="sam_late"),
        fig_sweep=report(f"{SL}/figures/rho_sweep.png", caption="../report/sam_late/sweep.rst", category="sam_late"),
        fig_mechanism=report(
            f"{SL}/figures/mechanism.png", caption="../report/sam_late/mechanism.rst", category="sam_late"
        ),
        fig_robust=report(f"{SL}/figures/robust.png", caption="../report/sam_late/robust.rst", category="sam_late"),
        fig_switch=report(
            f"{SL}/figures/switch_sweep.png", caption="../report/sam_late/switch.rst", category="sam_late"
        ),
    params:
        call="papers.sam_late.stages:report",
        cfg=SL_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/sam_late/report.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late:
    """Everything of paper P6 sam_late: its report, table, figures and claims."""
    input:
        paper_outputs("sam_late"),
