# P2 welfare: Rawlsian vs utilitarian policies in long-run welfare dynamics.
# prepare (populations) -> simulate (one job per population and policy, seeds vectorised) -> evaluate -> report;
# sweep (one job per policy: every point of the sweep over the theorems' conditions, seeds vectorised) -> report.
# Two populations: `heterogeneous` (the paper's) and `flat` (the negative control: f and g flat in welfare).
# Code: workflow/papers/welfare/ (stages.py holds the functions these rules call).

WELFARE = f"{RESULTS}/welfare"


rule welfare_prepare:
    """Draw each seed's population (initial welfare from real incomes, knots of f and g) and its flat-returns control."""
    output:
        population=f"{WELFARE}/prepare/population.parquet",
        control=f"{WELFARE}/prepare/control.parquet",
    params:
        call="papers.welfare.stages:prepare",
        cfg=config["welfare"],
    log:
        f"{LOGS}/welfare/prepare/population.log",
    benchmark:
        f"{BENCHMARKS}/welfare/prepare/population.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="welfare_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule welfare_simulate:
    """Simulate one policy on one population (the paper's, or the flat-returns control) for every seed."""
    input:
        population=lambda w: rules.welfare_prepare.output.population if w.population == "heterogeneous"
        else rules.welfare_prepare.output.control,
    output:
        trajectory=f"{WELFARE}/simulate/{{population}}/{{policy}}.parquet",
    params:
        call="papers.welfare.stages:simulate",
        cfg=config["welfare"],
        policy="{policy}",
        population_name="{population}",
    log:
        f"{LOGS}/welfare/simulate/{{population}}/{{policy}}.log",
    benchmark:
        f"{BENCHMARKS}/welfare/simulate/{{population}}/{{policy}}.tsv"
    wildcard_constraints:
        policy="|".join(config["welfare"]["policies"]),
        population="heterogeneous|flat",
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="welfare_simulate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule welfare_sweep:
    """Simulate one policy at every point of the sweep over the theorems' conditions (N, K, f and g bounds), with its flat control; keep per-seed slopes and rates, and the mean-welfare curves of the paper's population (for the crossing times)."""
    output:
        metrics=f"{WELFARE}/sweep/{{policy}}.parquet",
        curves=f"{WELFARE}/sweep/{{policy}}_curves.parquet",
    params:
        call="papers.welfare.stages:sweep",
        cfg=config["welfare"],
        policy="{policy}",
    log:
        f"{LOGS}/welfare/sweep/{{policy}}.log",
    benchmark:
        f"{BENCHMARKS}/welfare/sweep/{{policy}}.tsv"
    wildcard_constraints:
        policy="|".join(config["welfare"]["policies"]),
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="welfare_sweep"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule welfare_evaluate:
    """Growth rates, long-run slopes and the crossing time, per policy and seed."""
    input:
        trajectories=expand(rules.welfare_simulate.output.trajectory, population="heterogeneous",
                            policy=config["welfare"]["policies"]),
        control_trajectories=expand(rules.welfare_simulate.output.trajectory, population="flat",
                                    policy=config["welfare"]["policies"]),
    output:
        metrics=f"{WELFARE}/evaluate/metrics.parquet",
        rates=f"{WELFARE}/evaluate/growth_rates.parquet",
        crossing=f"{WELFARE}/evaluate/crossing.json",
    params:
        call="papers.welfare.stages:evaluate",
        cfg=config["welfare"],
    log:
        f"{LOGS}/welfare/evaluate/metrics.log",
    benchmark:
        f"{BENCHMARKS}/welfare/evaluate/metrics.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="welfare_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule welfare_report:
    """The table, the growth-rate figure, the claims with their verdicts and controls, report.md."""
    input:
        metrics=rules.welfare_evaluate.output.metrics,
        rates=rules.welfare_evaluate.output.rates,
        crossing=rules.welfare_evaluate.output.crossing,
        population=rules.welfare_prepare.output.population,
        control=rules.welfare_prepare.output.control,
        sweep_metrics=expand(rules.welfare_sweep.output.metrics, policy=config["welfare"]["policies"]),
        sweep_curves=expand(rules.welfare_sweep.output.curves, policy=config["welfare"]["policies"]),
        benchmarks=[
            rules.welfare_prepare.benchmark,
            *expand(rules.welfare_simulate.benchmark, population=["heterogeneous", "flat"],
                    policy=config["welfare"]["policies"]),
            rules.welfare_evaluate.benchmark,
            *expand(rules.welfare_sweep.benchmark, policy=config["welfare"]["policies"]),
        ],
    output:
        table_md=report(f"{WELFARE}/table.md", caption="../report/welfare/table.rst", category="welfare", subcategory="2 results"),
        table_csv=f"{WELFARE}/table.csv",
        sweep_csv=f"{WELFARE}/sweep_table.csv",
        claims=f"{WELFARE}/claims.json",
        params_json=f"{WELFARE}/params.json",
        report_md=f"{WELFARE}/report.md",
        verdicts=report(f"{WELFARE}/figures/verdicts.png", caption="../report/verdicts.rst", category="welfare",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{WELFARE}/figures/verdicts.rst",
        page=report(f"{WELFARE}/report.html", caption="../report/page.rst", category="welfare",
                    subcategory="1 verdicts and report"),
        figure=report(f"{WELFARE}/figures/growth_rate.png", caption="../report/welfare/growth_rate.rst", category="welfare", subcategory="2 results"),
        phase_figure=report(f"{WELFARE}/figures/phase_diagram.png", caption="../report/welfare/phase_diagram.rst",
                            category="welfare", subcategory="2 results"),
    params:
        call="papers.welfare.stages:report",
        cfg=config["welfare"],
        scale=SCALE,
    log:
        f"{LOGS}/welfare/report.log",
    benchmark:
        f"{BENCHMARKS}/welfare/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="welfare_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule welfare:
    """Everything of paper P2 welfare: its report, table, figure and claims."""
    input:
        paper_outputs("welfare"),
