# P18 adamanip: adaptive demonstrations and a 3D diffusion policy for articulated objects with hidden mechanisms.
# prepare (one-go and adaptive expert demonstrations of every category, and the random-primitive reference on the
# evaluation episodes; per seed) -> train (one policy kind,
# both demonstration kinds; per policy and seed) -> evaluate (closed-loop success on randomised episodes; per
# policy and seed) -> report.
# Code: workflow/papers/adamanip/ (stages.py and report.py hold the functions these rules call).

ADAMANIP = f"{RESULTS}/adamanip"


rule adamanip_prepare:
    """Collect one seed's one-go and adaptive expert demonstrations (successes only) of every category; run the random-primitive reference on the seed's evaluation episodes."""
    output:
        demos=f"{ADAMANIP}/prepare/demos_{{seed}}.npz",
        stats=f"{ADAMANIP}/prepare/demo_stats_{{seed}}.parquet",
        reference=f"{ADAMANIP}/prepare/reference_{{seed}}.parquet",
    params:
        call="papers.adamanip.stages:prepare",
        cfg=config["adamanip"],
        seed="{seed}",
    log:
        f"{LOGS}/adamanip/prepare/demos_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/adamanip/prepare/demos_{{seed}}.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="adamanip_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule adamanip_train:
    """Train one policy (diffusion or MLP BC) on one seed's one-go and, separately, its adaptive demonstrations."""
    input:
        demos=rules.adamanip_prepare.output.demos,
    output:
        model=f"{ADAMANIP}/train/{{policy}}_{{seed}}.pt",
        history=f"{ADAMANIP}/train/history_{{policy}}_{{seed}}.parquet",
    params:
        call="papers.adamanip.stages:train",
        cfg=config["adamanip"],
        seed="{seed}",
        policy="{policy}",
    log:
        f"{LOGS}/adamanip/train/{{policy}}_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/adamanip/train/{{policy}}_{{seed}}.tsv"
    wildcard_constraints:
        policy="|".join(config["adamanip"]["policies"]),
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="adamanip_train"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule adamanip_evaluate:
    """Roll out one seed's two trained policies of a kind on the same randomised episodes of every category (diffusion also with its noise fixed per episode; MLP BC on adaptive demonstrations also as a maximum-likelihood Gaussian)."""
    input:
        model=rules.adamanip_train.output.model,
        demos=rules.adamanip_prepare.output.demos,  # MLP BC's Gaussian ablation: sigma fit on its demonstrations
    output:
        successes=f"{ADAMANIP}/evaluate/successes_{{policy}}_{{seed}}.parquet",
    params:
        call="papers.adamanip.stages:evaluate",
        cfg=config["adamanip"],
        seed="{seed}",
        policy="{policy}",
    log:
        f"{LOGS}/adamanip/evaluate/successes_{{policy}}_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/adamanip/evaluate/successes_{{policy}}_{{seed}}.tsv"
    wildcard_constraints:
        policy="|".join(config["adamanip"]["policies"]),
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="adamanip_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule adamanip_report:
    """The success-rate table, the figure, the claims with their verdicts and controls, report.md."""
    input:
        successes=expand(rules.adamanip_evaluate.output.successes, policy=config["adamanip"]["policies"],
                         seed=seeds("adamanip")),
        stats=expand(rules.adamanip_prepare.output.stats, seed=seeds("adamanip")),
        reference=expand(rules.adamanip_prepare.output.reference, seed=seeds("adamanip")),
        history=expand(rules.adamanip_train.output.history, policy=config["adamanip"]["policies"], seed=seeds("adamanip")),
        benchmarks=[
            *expand(rules.adamanip_prepare.benchmark, seed=seeds("adamanip")),
            *expand(rules.adamanip_train.benchmark, policy=config["adamanip"]["policies"], seed=seeds("adamanip")),
            *expand(rules.adamanip_evaluate.benchmark, policy=config["adamanip"]["policies"], seed=seeds("adamanip")),
        ],
    output:
        table_md=report(f"{ADAMANIP}/table.md", caption="../report/adamanip/table.rst", category="adamanip", subcategory="2 results"),
        table_csv=f"{ADAMANIP}/table.csv",
        claims=f"{ADAMANIP}/claims.json",
        params_json=f"{ADAMANIP}/params.json",
        report_md=f"{ADAMANIP}/report.md",
        verdicts=report(f"{ADAMANIP}/figures/verdicts.png", caption="../report/verdicts.rst", category="adamanip",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{ADAMANIP}/figures/verdicts.rst",
        page=report(f"{ADAMANIP}/report.html", caption="../report/page.rst", category="adamanip",
                    subcategory="1 verdicts and report"),
        success_figure=report(f"{ADAMANIP}/figures/success.png", caption="../report/adamanip/success.rst",
                              category="adamanip", subcategory="2 results"),
    params:
        call="papers.adamanip.report:report",
        cfg=config["adamanip"],
        scale=SCALE,
    log:
        f"{LOGS}/adamanip/report.log",
    benchmark:
        f"{BENCHMARKS}/adamanip/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="adamanip_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule adamanip:
    """Everything of paper P18 adamanip: its report, table, figures and claims."""
    input:
        paper_outputs("adamanip"),
