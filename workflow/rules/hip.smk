# P16 hip: HiP, hierarchically pruned attention, on tiny byte-level models trained with dense attention.
# prepare (KJV bytes) -> train_lm | train_passkey -> evaluate (text | passkey), cost, decode -> report.
# Code: workflow/papers/hip/ (stages.py holds the functions these rules call).

HIP = f"{RESULTS}/hip"
HIP_CFG = config["hip"]
HIP_TASKS = ["text", "passkey"]


rule hip_prepare:
    """Read the King James Bible (diatheke or a text file) as UTF-8 bytes; hold out its last part for validation."""
    output:
        train_tokens=f"{HIP}/prepare/kjv_train.parquet",
        val_tokens=f"{HIP}/prepare/kjv_val.parquet",
    params:
        call="papers.hip.stages:prepare",
        cfg=HIP_CFG,
    log:
        f"{LOGS}/hip/prepare/kjv.log",
    benchmark:
        f"{BENCHMARKS}/hip/prepare/kjv.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_train_lm:
    """Train the tiny byte-level language model on the KJV training bytes with dense attention."""
    input:
        train_tokens=rules.hip_prepare.output.train_tokens,
    output:
        checkpoint=f"{HIP}/train/lm.pt",
        history=f"{HIP}/train/lm_history.parquet",
    params:
        call="papers.hip.stages:train_lm",
        cfg=HIP_CFG,
    log:
        f"{LOGS}/hip/train/lm.log",
    benchmark:
        f"{BENCHMARKS}/hip/train/lm.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_train_passkey:
    """Train a tiny byte-level model with dense attention on synthetic passkey-retrieval prompts."""
    output:
        checkpoint=f"{HIP}/train/passkey.pt",
        history=f"{HIP}/train/passkey_history.parquet",
    params:
        call="papers.hip.stages:train_passkey",
        cfg=HIP_CFG,
    log:
        f"{LOGS}/hip/train/passkey.log",
    benchmark:
        f"{BENCHMARKS}/hip/train/passkey.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_evaluate_text:
    """Held-out perplexity of every attention method; top-k recall of HiP and random blocks; score locality."""
    input:
        checkpoint=rules.hip_train_lm.output.checkpoint,
        val_tokens=rules.hip_prepare.output.val_tokens,
    output:
        metrics=f"{HIP}/evaluate/text.json",
        locality=f"{HIP}/evaluate/locality.parquet",
    params:
        call="papers.hip.stages:evaluate_text",
        cfg=HIP_CFG,
    log:
        f"{LOGS}/hip/evaluate/text.log",
    benchmark:
        f"{BENCHMARKS}/hip/evaluate/text.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_evaluate_passkey:
    """Passkey accuracy of every attention method: does a greedy decode reproduce all five digits?"""
    input:
        checkpoint=rules.hip_train_passkey.output.checkpoint,
    output:
        metrics=f"{HIP}/evaluate/passkey.json",
    params:
        call="papers.hip.stages:evaluate_passkey",
        cfg=HIP_CFG,
    log:
        f"{LOGS}/hip/evaluate/passkey.log",
    benchmark:
        f"{BENCHMARKS}/hip/evaluate/passkey.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_cost:
    """Count key scores and time dense attention against HiP for each context length T, on one random head."""
    output:
        table=f"{HIP}/evaluate/cost.parquet",
    params:
        call="papers.hip.stages:cost",
        cfg=HIP_CFG,
    log:
        f"{LOGS}/hip/evaluate/cost.log",
    benchmark:
        f"{BENCHMARKS}/hip/evaluate/cost.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_decode:
    """Simulate decoding with an offloaded KV cache: HiP's LRU hit rate and working set per context length."""
    input:
        checkpoint=rules.hip_train_lm.output.checkpoint,
        val_tokens=rules.hip_prepare.output.val_tokens,
    output:
        table=f"{HIP}/evaluate/offload.parquet",
    params:
        call="papers.hip.stages:decode_offload",
        cfg=HIP_CFG,
    log:
        f"{LOGS}/hip/evaluate/offload.log",
    benchmark:
        f"{BENCHMARKS}/hip/evaluate/offload.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_report:
    """Write hip's results table, four figures, the claims with their verdicts, and report.md."""
    input:
        text=rules.hip_evaluate_text.output.metrics,
        locality=rules.hip_evaluate_text.output.locality,
        passkey=rules.hip_evaluate_passkey.output.metrics,
        cost=rules.hip_cost.output.table,
        offload=rules.hip_decode.output.table,
        lm_history=rules.hip_train_lm.output.history,
        passkey_history=rules.hip_train_passkey.output.history,
        benchmarks=[
            rules.hip_prepare.benchmark,
            rules.hip_train_lm.benchmark,
            rules.hip_train_passkey.benchmark,
            rules.hip_evaluate_text.benchmark,
            rules.hip_evaluate_passkey.benchmark,
            rules.hip_cost.benchmark,
            rules.hip_decode.benchmark,
        ],
    output:
        table_md=report(f"{HIP}/table.md", caption="../report/hip/table.rst", category="hip"),
        table_csv=f"{HIP}/table.csv",
        claims=f"{HIP}/claims.json",
        params_json=f"{HIP}/params.json",
        report_md=f"{HIP}/report.md",
        fig_quality=report(f"{HIP}/figures/quality.png", caption="../report/hip/quality.rst", category="hip"),
        fig_locality=report(f"{HIP}/figures/locality.png", caption="../report/hip/locality.rst", category="hip"),
        fig_cost=report(f"{HIP}/figures/cost.png", caption="../report/hip/cost.rst", category="hip"),
        fig_offload=report(f"{HIP}/figures/offload.png", caption="../report/hip/offload.rst", category="hip"),
    params:
        call="papers.hip.report:report",
        cfg=HIP_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/hip/report.log",
    benchmark:
        f"{BENCHMARKS}/hip/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip:
    """Everything of paper P16 hip: its report, table, figures and claims."""
    input:
        paper_outputs("hip"),
