# P12 uv_sharpness: sharpness dynamics of the UV model, and an MLP check on real digits.
# prepare (images) -> trajectories | sweep (per init: small, large) | train_mlp (per learning rate and seed)
# -> evaluate -> report.
# Code: workflow/papers/uv_sharpness/ (stages.py holds the functions these rules call).

UV = f"{RESULTS}/uv_sharpness"
UV_CFG = config["uv_sharpness"]


rule uv_sharpness_prepare:
    """Load the network check's images (sklearn's digits, or CIFAR-10 from mlp.path), pixels scaled to [0, 1]."""
    output:
        digits=f"{UV}/prepare/digits.parquet",
    params:
        call="papers.uv_sharpness.stages:prepare",
        cfg=UV_CFG,
    log:
        f"{LOGS}/uv_sharpness/prepare/digits.log",
    benchmark:
        f"{BENCHMARKS}/uv_sharpness/prepare/digits.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="uv_sharpness_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule uv_sharpness_trajectories:
    """Run GD on the UV model for every init scale, learning rate and seed; sharpness at every step."""
    output:
        trajectory=f"{UV}/train/uv_trajectories.parquet",
    params:
        call="papers.uv_sharpness.stages:trajectories",
        cfg=UV_CFG,
    log:
        f"{LOGS}/uv_sharpness/train/uv_trajectories.log",
    benchmark:
        f"{BENCHMARKS}/uv_sharpness/train/uv_trajectories.tsv"
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="uv_sharpness_trajectories"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule uv_sharpness_sweep:
    """Sweep the learning rate over the UV model's (f, Theta) map from one init (small or large): period, Lyapunov exponent, late imbalance, orbit, per replicate (its own example, initial point and grid offset)."""
    output:
        points=f"{UV}/train/sweep_points_{{init}}.parquet",
        orbits=f"{UV}/train/sweep_orbits_{{init}}.parquet",
    params:
        call="papers.uv_sharpness.stages:sweep",
        cfg=UV_CFG,
        init="{init}",
    log:
        f"{LOGS}/uv_sharpness/train/sweep_{{init}}.log",
    benchmark:
        f"{BENCHMARKS}/uv_sharpness/train/sweep_{{init}}.tsv"
    wildcard_constraints:
        init="|".join(UV_CFG["sweep_inits"]),
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="uv_sharpness_sweep"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule uv_sharpness_train_mlp:
    """Train the tanh MLP on the digits by full-batch GD at one learning rate and seed, tracking sharpness."""
    input:
        digits=rules.uv_sharpness_prepare.output.digits,
    output:
        history=f"{UV}/train/mlp_lr{{lr}}_seed{{seed}}.parquet",
    params:
        call="papers.uv_sharpness.stages:train_mlp",
        cfg=UV_CFG,
        lr=lambda w: float(w.lr),
        seed=lambda w: int(w.seed),
    log:
        f"{LOGS}/uv_sharpness/train/mlp_lr{{lr}}_seed{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/uv_sharpness/train/mlp_lr{{lr}}_seed{{seed}}.tsv"
    wildcard_constraints:
        lr="|".join(str(lr) for lr in [*UV_CFG["mlp"]["learning_rates"], UV_CFG["mlp"]["control_lr"]]),
    threads: res("train", "threads")
    resources:
        **job_resources("train", rule="uv_sharpness_train_mlp"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


UV_MLP_RUNS = dict(lr=[*UV_CFG["mlp"]["learning_rates"], UV_CFG["mlp"]["control_lr"]], seed=range(UV_CFG["mlp"]["seeds"]))
UV_SWEEPS = dict(init=list(UV_CFG["sweep_inits"]))


rule uv_sharpness_evaluate:
    """EoS statistics and early-time sharpness changes, the sweeps' orbit labels, the network's sharpness and loss."""
    input:
        trajectory=rules.uv_sharpness_trajectories.output.trajectory,
        points=expand(rules.uv_sharpness_sweep.output.points, **UV_SWEEPS),
        histories=expand(rules.uv_sharpness_train_mlp.output.history, **UV_MLP_RUNS),
    output:
        metrics=f"{UV}/evaluate/metrics.json",
    params:
        call="papers.uv_sharpness.stages:evaluate",
        cfg=UV_CFG,
    log:
        f"{LOGS}/uv_sharpness/evaluate/metrics.log",
    benchmark:
        f"{BENCHMARKS}/uv_sharpness/evaluate/metrics.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="uv_sharpness_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule uv_sharpness_report:
    """The table, the trajectory, bifurcation and MLP figures, the claims with their verdicts, report.md."""
    input:
        metrics=rules.uv_sharpness_evaluate.output.metrics,
        trajectory=rules.uv_sharpness_trajectories.output.trajectory,
        points=expand(rules.uv_sharpness_sweep.output.points, **UV_SWEEPS),
        orbits=expand(rules.uv_sharpness_sweep.output.orbits, **UV_SWEEPS),
        histories=expand(rules.uv_sharpness_train_mlp.output.history, **UV_MLP_RUNS),
        benchmarks=[
            rules.uv_sharpness_prepare.benchmark,
            rules.uv_sharpness_trajectories.benchmark,
            *expand(rules.uv_sharpness_sweep.benchmark, **UV_SWEEPS),
            *expand(rules.uv_sharpness_train_mlp.benchmark, **UV_MLP_RUNS),
            rules.uv_sharpness_evaluate.benchmark,
        ],
    output:
        table_md=report(f"{UV}/table.md", caption="../report/uv_sharpness/table.rst", category="uv_sharpness", subcategory="2 results"),
        table_csv=f"{UV}/table.csv",
        claims=f"{UV}/claims.json",
        params_json=f"{UV}/params.json",
        report_md=f"{UV}/report.md",
        verdicts=report(f"{UV}/figures/verdicts.png", caption="../report/verdicts.rst", category="uv_sharpness",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{UV}/figures/verdicts.rst",
        page=report(f"{UV}/report.html", caption="../report/page.rst", category="uv_sharpness",
                    subcategory="1 verdicts and report"),
        fig_trajectories=report(
            f"{UV}/figures/sharpness_trajectories.png",
            caption="../report/uv_sharpness/trajectories.rst",
            category="uv_sharpness",
        ),
        fig_bifurcation=report(
            f"{UV}/figures/bifurcation.png", caption="../report/uv_sharpness/bifurcation.rst", category="uv_sharpness"
        ),
        fig_mlp=report(f"{UV}/figures/mlp_sharpness.png", caption="../report/uv_sharpness/mlp.rst", category="uv_sharpness", subcategory="2 results"),
    params:
        call="papers.uv_sharpness.stages:report",
        cfg=UV_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/uv_sharpness/report.log",
    benchmark:
        f"{BENCHMARKS}/uv_sharpness/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="uv_sharpness_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule uv_sharpness:
    """Everything of paper P12 uv_sharpness: its report, table, figures and claims."""
    input:
        paper_outputs("uv_sharpness"),
