# P13 infoprop: rollouts that separate aleatoric from epistemic uncertainty and stop when information is lost.
# prepare (logged transitions of a noisy policy, held-out start states and their true continuations; per seed)
# -> train (the probabilistic ensemble; per seed) -> evaluate (every propagation scheme's rollouts against the
# true continuations, Infoprop's termination; per seed) -> report; beside them dyna (claim c: SAC on model rollouts of
# each arm, every seed and arm vectorised in one job) -> report, at the scales that run it (infoprop.dyna.run).
# Code: workflow/papers/infoprop/ (data.py, stages.py, dyna.py and report.py hold the functions these rules call).

INFOPROP = f"{RESULTS}/infoprop"
# Whether this scale runs the Dyna comparison (claim c); where it does not, the report says why from the measured
# cost (config infoprop.dyna.run and dyna.trial).
INFOPROP_DYNA = bool(config["infoprop"]["dyna"].get("run", True))


rule infoprop_prepare:
    """Log one seed's transitions of the noisy policy, draw held-out start states and continue the true simulator from them."""
    output:
        data=f"{INFOPROP}/prepare/data_{{seed}}.npz",
    params:
        call="papers.infoprop.data:prepare",
        cfg=config["infoprop"],
        seed="{seed}",
    log:
        f"{LOGS}/infoprop/prepare/data_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/infoprop/prepare/data_{{seed}}.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="infoprop_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule infoprop_train:
    """Fit one seed's ensemble of Gaussian MLPs (state delta and reward, Gaussian NLL, learned variance bounds)."""
    input:
        data=rules.infoprop_prepare.output.data,
    output:
        model=f"{INFOPROP}/train/ensemble_{{seed}}.pt",
        history=f"{INFOPROP}/train/history_{{seed}}.parquet",
    params:
        call="papers.infoprop.stages:train",
        cfg=config["infoprop"],
        seed="{seed}",
    log:
        f"{LOGS}/infoprop/train/ensemble_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/infoprop/train/ensemble_{{seed}}.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="infoprop_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule infoprop_evaluate:
    """Roll out every propagation scheme from the start states; distances to the true continuations, Infoprop's cuts."""
    input:
        data=rules.infoprop_prepare.output.data,
        model=rules.infoprop_train.output.model,
    output:
        curves=f"{INFOPROP}/evaluate/curves_{{seed}}.parquet",
        cuts=f"{INFOPROP}/evaluate/cuts_{{seed}}.parquet",
    params:
        call="papers.infoprop.stages:evaluate",
        cfg=config["infoprop"],
        seed="{seed}",
    log:
        f"{LOGS}/infoprop/evaluate/curves_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/infoprop/evaluate/curves_{{seed}}.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="infoprop_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule infoprop_dyna:
    """SAC on model rollouts, MBPO-style against Infoprop and the K = 1 control, every seed vectorised in one job."""
    output:
        returns=f"{INFOPROP}/dyna/returns.parquet",
        rollout_stats=f"{INFOPROP}/dyna/rollouts.parquet",
    params:
        call="papers.infoprop.dyna:dyna",
        cfg=config["infoprop"],
    log:
        f"{LOGS}/infoprop/dyna/dyna.log",
    benchmark:
        f"{BENCHMARKS}/infoprop/dyna/dyna.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="infoprop_dyna"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule infoprop_report:
    """The rollout-quality table, the figures, the claims with their verdicts and controls, report.md."""
    input:
        curves=expand(rules.infoprop_evaluate.output.curves, seed=seeds("infoprop")),
        cuts=expand(rules.infoprop_evaluate.output.cuts, seed=seeds("infoprop")),
        histories=expand(rules.infoprop_train.output.history, seed=seeds("infoprop")),
        dyna_returns=rules.infoprop_dyna.output.returns if INFOPROP_DYNA else [],
        dyna_rollouts=rules.infoprop_dyna.output.rollout_stats if INFOPROP_DYNA else [],
        benchmarks=[
            *([rules.infoprop_dyna.benchmark] if INFOPROP_DYNA else []),
            *expand(rules.infoprop_prepare.benchmark, seed=seeds("infoprop")),
            *expand(rules.infoprop_train.benchmark, seed=seeds("infoprop")),
            *expand(rules.infoprop_evaluate.benchmark, seed=seeds("infoprop")),
        ],
    output:
        table_md=report(f"{INFOPROP}/table.md", caption="../report/infoprop/table.rst", category="infoprop", subcategory="2 results"),
        table_csv=f"{INFOPROP}/table.csv",
        claims=f"{INFOPROP}/claims.json",
        params_json=f"{INFOPROP}/params.json",
        report_md=f"{INFOPROP}/report.md",
        verdicts=report(f"{INFOPROP}/figures/verdicts.png", caption="../report/verdicts.rst", category="infoprop",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{INFOPROP}/figures/verdicts.rst",
        page=report(f"{INFOPROP}/report.html", caption="../report/page.rst", category="infoprop",
                    subcategory="1 verdicts and report"),
        w1_figure=report(f"{INFOPROP}/figures/w1.png", caption="../report/infoprop/w1.rst", category="infoprop", subcategory="2 results"),
        cut_figure=report(f"{INFOPROP}/figures/cuts.png", caption="../report/infoprop/cuts.rst", category="infoprop", subcategory="2 results"),
        dyna_figure=report(f"{INFOPROP}/figures/dyna.png", caption="../report/infoprop/dyna.rst", category="infoprop", subcategory="2 results"),
    params:
        call="papers.infoprop.report:report",
        cfg=config["infoprop"],
        scale=SCALE,
        # the paper's CPU budget at this scale (claim c's reason where the Dyna comparison is not run); None if none
        budget=config["time_budget"].get(SCALE, {}).get("infoprop", config["time_budget"].get(SCALE, {}).get("default")),
    log:
        f"{LOGS}/infoprop/report.log",
    benchmark:
        f"{BENCHMARKS}/infoprop/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="infoprop_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule infoprop:
    """Everything of paper P13 infoprop: its report, table, figures and claims."""
    input:
        paper_outputs("infoprop"),
