# P10 linear_mechanisms: exact dynamics of a linear network and three mechanisms of feature learning.
# prepare (1-D data, images) -> trajectories (mechanism points) | phase (per panel) | nonlinear (per seed)
# -> evaluate -> report. Code: workflow/papers/linear_mechanisms/ (stages.py holds the functions these rules call).

LM = f"{RESULTS}/linear_mechanisms"
LM_CFG = config["linear_mechanisms"]
LM_PANELS = LM_CFG["phase_panels"]
LM_SEEDS = range(LM_CFG["nonlinear"]["seeds"])


rule linear_mechanisms_prepare:
    """Draw the 1-D regression set (y = slope x + noise) and load the images of the nonlinear check."""
    output:
        regression=f"{LM}/prepare/regression.parquet",
        images=f"{LM}/prepare/images.parquet",
    params:
        call="papers.linear_mechanisms.stages:prepare",
        cfg=LM_CFG,
    log:
        f"{LOGS}/linear_mechanisms/prepare/data.log",
    benchmark:
        f"{BENCHMARKS}/linear_mechanisms/prepare/data.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="linear_mechanisms_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule linear_mechanisms_trajectories:
    """At each mechanism point and seed: GD at steps h and h/2 beside the exact solution."""
    input:
        regression=rules.linear_mechanisms_prepare.output.regression,
    output:
        trajectories=f"{LM}/train/trajectories.parquet",
    params:
        call="papers.linear_mechanisms.stages:trajectories",
        cfg=LM_CFG,
    log:
        f"{LOGS}/linear_mechanisms/train/trajectories.log",
    benchmark:
        f"{BENCHMARKS}/linear_mechanisms/train/trajectories.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="linear_mechanisms_trajectories"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule linear_mechanisms_phase:
    """One phase-diagram panel: GD to convergence at every point and seed, with the exact states."""
    input:
        regression=rules.linear_mechanisms_prepare.output.regression,
    output:
        grid=f"{LM}/train/phase_{{panel}}.parquet",
    params:
        call="papers.linear_mechanisms.stages:run_phase",
        cfg=LM_CFG,
        panel="{panel}",
    log:
        f"{LOGS}/linear_mechanisms/train/phase_{{panel}}.log",
    benchmark:
        f"{BENCHMARKS}/linear_mechanisms/train/phase_{{panel}}.tsv"
    wildcard_constraints:
        panel="|".join(LM_PANELS),
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="linear_mechanisms_phase"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule linear_mechanisms_nonlinear:
    """Train the tanh MLP on real images at every init scale for one seed: NTK change, test accuracy."""
    input:
        images=rules.linear_mechanisms_prepare.output.images,
    output:
        runs=f"{LM}/train/nonlinear_seed{{seed}}.parquet",
    params:
        call="papers.linear_mechanisms.stages:nonlinear",
        cfg=LM_CFG,
        seed=lambda w: int(w.seed),
    log:
        f"{LOGS}/linear_mechanisms/train/nonlinear_seed{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/linear_mechanisms/train/nonlinear_seed{{seed}}.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="linear_mechanisms_nonlinear"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule linear_mechanisms_evaluate:
    """GD-vs-exact errors, mechanism labels, phase-diagram agreement, width scaling, the MLP check."""
    input:
        regression=rules.linear_mechanisms_prepare.output.regression,
        trajectories=rules.linear_mechanisms_trajectories.output.trajectories,
        grids=expand(rules.linear_mechanisms_phase.output.grid, panel=LM_PANELS),
        runs=expand(rules.linear_mechanisms_nonlinear.output.runs, seed=LM_SEEDS),
    output:
        metrics=f"{LM}/evaluate/metrics.json",
    params:
        call="papers.linear_mechanisms.stages:evaluate",
        cfg=LM_CFG,
    log:
        f"{LOGS}/linear_mechanisms/evaluate/metrics.log",
    benchmark:
        f"{BENCHMARKS}/linear_mechanisms/evaluate/metrics.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="linear_mechanisms_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule linear_mechanisms_report:
    """The table, the trajectory, phase, width-scaling and nonlinear figures, the claims, report.md."""
    input:
        metrics=rules.linear_mechanisms_evaluate.output.metrics,
        trajectories=rules.linear_mechanisms_trajectories.output.trajectories,
        # per-seed rows: the claims' intervals are over seeds
        grids=expand(rules.linear_mechanisms_phase.output.grid, panel=LM_PANELS),
        runs=expand(rules.linear_mechanisms_nonlinear.output.runs, seed=LM_SEEDS),
        benchmarks=[
            rules.linear_mechanisms_prepare.benchmark,
            rules.linear_mechanisms_trajectories.benchmark,
            *expand(rules.linear_mechanisms_phase.benchmark, panel=LM_PANELS),
            *expand(rules.linear_mechanisms_nonlinear.benchmark, seed=LM_SEEDS),
            rules.linear_mechanisms_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{LM}/table.md", caption="../report/linear_mechanisms/table.rst", category="linear_mechanisms", subcategory="2 results"),
        table_csv=f"{LM}/table.csv",
        claims=f"{LM}/claims.json",
        params_json=f"{LM}/params.json",
        report_md=f"{LM}/report.md",
        verdicts=report(f"{LM}/figures/verdicts.png", caption="../report/verdicts.rst", category="linear_mechanisms",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{LM}/figures/verdicts.rst",
        page=report(f"{LM}/report.html", caption="../report/page.rst", category="linear_mechanisms",
                    subcategory="1 verdicts and report"),
        fig_trajectories=report(
            f"{LM}/figures/trajectories.png",
            caption="../report/linear_mechanisms/trajectories.rst",
            category="linear_mechanisms",
        ),
        fig_phase=report(
            f"{LM}/figures/phase_diagram.png",
            caption="../report/linear_mechanisms/phase_diagram.rst",
            category="linear_mechanisms",
        ),
        fig_scaling=report(
            f"{LM}/figures/width_scaling.png",
            caption="../report/linear_mechanisms/width_scaling.rst",
            category="linear_mechanisms",
        ),
        fig_nonlinear=report(
            f"{LM}/figures/nonlinear.png",
            caption="../report/linear_mechanisms/nonlinear.rst",
            category="linear_mechanisms",
        ),
    params:
        call="papers.linear_mechanisms.stages:report",
        cfg=LM_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/linear_mechanisms/report.log",
    benchmark:
        f"{BENCHMARKS}/linear_mechanisms/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="linear_mechanisms_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule linear_mechanisms:
    """Everything of paper P10 linear_mechanisms: its report, table, figures and claims."""
    input:
        paper_outputs("linear_mechanisms"),
