# The cross-paper summary: one row per claim of every selected paper (results/<scale>/summary.md).
# `snakemake --report results/<scale>/report.html` adds Snakemake's HTML report of every figure.


rule summary:
    """The cross-paper summary: one row per claim of every selected paper, with its verdict; run times against the budget."""
    input:
        claims=[f"{RESULTS}/{slug}/claims.json" for slug in PAPERS],
        reports=[f"{RESULTS}/{slug}/report.md" for slug in PAPERS],
    output:
        summary_md=report(f"{RESULTS}/summary.md", caption="../report/summary.rst", category="summary"),
        summary_csv=f"{RESULTS}/summary.csv",
        job_times_csv=f"{RESULTS}/job_times.csv",
        verdicts_figure=report(f"{RESULTS}/summary_verdicts.png", caption="../report/summary_verdicts.rst", category="summary"),
    # The run times are read from the jobs' benchmark files where they exist, but are not inputs: benchmarks/ is not
    # committed, so a clone could not otherwise regenerate the summary without rerunning every paper.
    params:
        call="papers.common.summary:write_summary",
        scale=SCALE,
        job_benchmarks={slug: paper_benchmarks(slug) for slug in PAPERS},
        time_budget=config["time_budget"].get(SCALE, {}),
    log:
        f"{LOGS}/summary.log",
    benchmark:
        f"{BENCHMARKS}/summary.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="summary"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL
