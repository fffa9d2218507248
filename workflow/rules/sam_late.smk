# P6 sam_late: SAM applied late in training selects flatter minima.
# prepare (digits or CIFAR-10, one split per seed) -> train_sgd (per label condition) -> train_sam (per condition
# and rho) and train_adv (clean labels), their late arms branching from SGD's checkpoints at the switch epochs -> evaluate ->
# report. Seeds run inside each training job. Conditions: clean (the paper's labels, every claim) and, where
# configured, noisy (an extension). Code: workflow/papers/sam_late/ (stages.py holds the functions these rules call;
# report.py the report's).

SL = f"{RESULTS}/sam_late"
SL_CFG = config["sam_late"]
SL_RHOS = SL_CFG["rhos"]
SL_LABELS = SL_CFG["conditions"]
# The (condition, rho) jobs of train_sam: every rho with clean labels; the noisy extension at the main rho only.
SL_SAM_JOBS = [("clean", r) for r in SL_RHOS] + [("noisy", SL_CFG["rho"]) for c in SL_LABELS if c == "noisy"]


rule sam_late_prepare:
    """Load the digits or CIFAR-10, pixels in [0, 1]; per seed a train/test split and (noisy condition) corrupted labels."""
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
        **job_resources("light", rule="sam_late_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late_train_sgd:
    """Train SGD throughout for every seed on one label condition; keep its switch-epoch checkpoints for the late arms."""
    input:
        data=rules.sam_late_prepare.output.data,
    output:
        history=f"{SL}/train/{{labels}}/sgd/history.parquet",
        escape=f"{SL}/train/{{labels}}/sgd/escape.parquet",
        checkpoints=f"{SL}/train/{{labels}}/sgd/checkpoints.pt",
    params:
        call="papers.sam_late.stages:train_sgd",
        cfg=SL_CFG,
        labels=lambda w: w.labels,
    log:
        f"{LOGS}/sam_late/train/{{labels}}/sgd.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/train/{{labels}}/sgd.tsv"
    wildcard_constraints:
        labels="|".join(SL_LABELS),
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="sam_late_train_sgd"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late_train_sam:
    """At one condition and rho, every seed: SAM throughout and late SAM; clean labels at the main rho: early SAM (equal length), late SAM with random directions at SAM's strength (claim a's control) and the extra late and early arms too."""
    input:
        data=rules.sam_late_prepare.output.data,
        sgd=f"{SL}/train/{{labels}}/sgd/checkpoints.pt",
    output:
        history=f"{SL}/train/{{labels}}/sam_rho{{rho}}/history.parquet",
        escape=f"{SL}/train/{{labels}}/sam_rho{{rho}}/escape.parquet",
        checkpoints=f"{SL}/train/{{labels}}/sam_rho{{rho}}/checkpoints.pt",
    params:
        call="papers.sam_late.stages:train_sam",
        cfg=SL_CFG,
        labels=lambda w: w.labels,
        rho=lambda w: float(w.rho),
    log:
        f"{LOGS}/sam_late/train/{{labels}}/sam_rho{{rho}}.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/train/{{labels}}/sam_rho{{rho}}.tsv"
    wildcard_constraints:
        labels="|".join(SL_LABELS),
        rho="|".join(str(r) for r in SL_RHOS),
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="sam_late_train_sam"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late_train_adv:
    """Every seed, clean labels: adversarial (PGD) training throughout, late AT branched from SGD's switch checkpoint, early AT of equal length, and late training on clean inputs (claim e's control)."""
    input:
        data=rules.sam_late_prepare.output.data,
        sgd=f"{SL}/train/clean/sgd/checkpoints.pt",
    output:
        history=f"{SL}/train/clean/adv/history.parquet",
        escape=f"{SL}/train/clean/adv/escape.parquet",
        checkpoints=f"{SL}/train/clean/adv/checkpoints.pt",
    params:
        call="papers.sam_late.stages:train_adv",
        cfg=SL_CFG,
    log:
        f"{LOGS}/sam_late/train/clean/adv.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/train/clean/adv.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="sam_late_train_adv"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


# The training outputs of `kind` (history, escape, checkpoints) of every job, in a fixed order.
_sl_train = lambda kind: [  # noqa: E731 (a lambda: Snakemake's lint keeps functions out of rule files)
    *expand(f"{SL}/train/{{labels}}/sgd/{kind}", labels=SL_LABELS),
    *[f"{SL}/train/{labels}/sam_rho{rho}/{kind}" for labels, rho in SL_SAM_JOBS],
    f"{SL}/train/clean/adv/{kind}",
]


rule sam_late_evaluate:
    """Per final network: test accuracy and loss, Hessian sharpness, PGD robust accuracy; lines from w_switch; SGD's fit at the switch."""
    input:
        data=rules.sam_late_prepare.output.data,
        sgd=expand(f"{SL}/train/{{labels}}/sgd/checkpoints.pt", labels=SL_LABELS),
        sam=[f"{SL}/train/{labels}/sam_rho{rho}/checkpoints.pt" for labels, rho in SL_SAM_JOBS],
        adv=f"{SL}/train/clean/adv/checkpoints.pt",
    output:
        metrics=f"{SL}/evaluate/metrics.parquet",
        interpolation=f"{SL}/evaluate/interpolation.parquet",
        switch=f"{SL}/evaluate/switch.parquet",
    params:
        call="papers.sam_late.stages:evaluate",
        cfg=SL_CFG,
    log:
        f"{LOGS}/sam_late/evaluate/metrics.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/evaluate/metrics.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="sam_late_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late_report:
    """The table, the curve, rho-sweep, mechanism and robustness figures, the claims with verdicts, report.md."""
    input:
        metrics=rules.sam_late_evaluate.output.metrics,
        interpolation=rules.sam_late_evaluate.output.interpolation,
        switch=rules.sam_late_evaluate.output.switch,
        histories=_sl_train("history.parquet"),
        escapes=_sl_train("escape.parquet"),
        benchmarks=[
            rules.sam_late_prepare.benchmark,
            *expand(f"{BENCHMARKS}/sam_late/train/{{labels}}/sgd.tsv", labels=SL_LABELS),
            *[f"{BENCHMARKS}/sam_late/train/{labels}/sam_rho{rho}.tsv" for labels, rho in SL_SAM_JOBS],
            rules.sam_late_train_adv.benchmark,
            rules.sam_late_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{SL}/table.md", caption="../report/sam_late/table.rst", category="sam_late", subcategory="2 results"),
        table_csv=f"{SL}/table.csv",
        claims=f"{SL}/claims.json",
        params_json=f"{SL}/params.json",
        report_md=f"{SL}/report.md",
        verdicts=report(f"{SL}/figures/verdicts.png", caption="../report/verdicts.rst", category="sam_late",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{SL}/figures/verdicts.rst",
        page=report(f"{SL}/report.html", caption="../report/page.rst", category="sam_late",
                    subcategory="1 verdicts and report"),
        fig_curves=report(f"{SL}/figures/curves.png", caption="../report/sam_late/curves.rst", category="sam_late", subcategory="2 results"),
        fig_sweep=report(f"{SL}/figures/rho_sweep.png", caption="../report/sam_late/sweep.rst", category="sam_late", subcategory="2 results"),
        fig_mechanism=report(
            f"{SL}/figures/mechanism.png", caption="../report/sam_late/mechanism.rst", category="sam_late"
        ),
        fig_robust=report(f"{SL}/figures/robust.png", caption="../report/sam_late/robust.rst", category="sam_late", subcategory="2 results"),
        fig_switch=report(
            f"{SL}/figures/switch_sweep.png", caption="../report/sam_late/switch.rst", category="sam_late"
        ),
    params:
        call="papers.sam_late.report:report",
        cfg=SL_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/sam_late/report.log",
    benchmark:
        f"{BENCHMARKS}/sam_late/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="sam_late_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sam_late:
    """Everything of paper P6 sam_late: its report, table, figures and claims."""
    input:
        paper_outputs("sam_late"),
