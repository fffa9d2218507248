# P16 hip: HiP, hierarchically pruned attention, on tiny byte-level models trained with dense attention.
# prepare (KJV bytes) -> train (one model per seed, KJV with repeated key records) -> evaluate (per seed:
# retrieval, text loss, top-k recall per layer, offloaded decoding) | cost against T -> report.
# Code: workflow/papers/hip/ (stages.py holds the functions these rules call).

HIP = f"{RESULTS}/hip"
HIP_CFG = config["hip"]
HIP_PRETRAINED = [m["name"] for m in HIP_CFG.get("pretrained", [])]


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
        **job_resources("light", rule="hip_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_train_lm:
    """Train one byte-level language model (one seed) with dense attention on KJV windows with repeated key records."""
    input:
        train_tokens=rules.hip_prepare.output.train_tokens,
    output:
        checkpoint=f"{HIP}/train/lm_{{seed}}.pt",
        history=f"{HIP}/train/lm_history_{{seed}}.parquet",
    params:
        call="papers.hip.stages:train_lm",
        cfg=HIP_CFG,
        seed="{seed}",
    log:
        f"{LOGS}/hip/train/lm_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/hip/train/lm_{{seed}}.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="hip_train_lm"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_evaluate:
    """One seed's model: retrieval and text loss of every method, top-k recall per layer, offloaded decoding."""
    input:
        checkpoint=rules.hip_train_lm.output.checkpoint,
        train_tokens=rules.hip_prepare.output.train_tokens,
        val_tokens=rules.hip_prepare.output.val_tokens,
    output:
        retrieval=f"{HIP}/evaluate/retrieval_{{seed}}.parquet",
        text=f"{HIP}/evaluate/text_{{seed}}.parquet",
        recall=f"{HIP}/evaluate/recall_{{seed}}.parquet",
        offload=f"{HIP}/evaluate/offload_{{seed}}.parquet",
    params:
        call="papers.hip.stages:evaluate",
        cfg=HIP_CFG,
        seed="{seed}",
    log:
        f"{LOGS}/hip/evaluate/seed_{{seed}}.log",
    benchmark:
        f"{BENCHMARKS}/hip/evaluate/seed_{{seed}}.tsv"
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="hip_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_cost:
    """Count (the reference's own counter) and time HiP and dense attention against T; control: mask_k growing with T."""
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
        **job_resources("gpu", rule="hip_cost"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_evaluate_pretrained:
    """HiP and the baselines patched into one local pretrained LM: long-document NLL, passkey and multi-key accuracy."""
    output:
        table=f"{HIP}/pretrained/{{name}}.parquet",
    params:
        call="papers.hip.pretrained:evaluate",
        cfg=HIP_CFG,
        model_name="{name}",
    log:
        f"{LOGS}/hip/pretrained/{{name}}.log",
    benchmark:
        f"{BENCHMARKS}/hip/pretrained/{{name}}.tsv"
    wildcard_constraints:
        name="[A-Za-z0-9]+",
    threads: res("gpu", "threads")
    resources:
        **job_resources("gpu", rule="hip_evaluate_pretrained"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip_report:
    """Write hip's results table, four figures, the claims with their verdicts, and report.md."""
    input:
        retrieval=expand(rules.hip_evaluate.output.retrieval, seed=seeds("hip")),
        text=expand(rules.hip_evaluate.output.text, seed=seeds("hip")),
        recall=expand(rules.hip_evaluate.output.recall, seed=seeds("hip")),
        offload=expand(rules.hip_evaluate.output.offload, seed=seeds("hip")),
        history=expand(rules.hip_train_lm.output.history, seed=seeds("hip")),
        cost=rules.hip_cost.output.table,
        # the pretrained LMs (full scale): joins the DAG only when hip.pretrained lists models
        pretrained=expand(rules.hip_evaluate_pretrained.output.table, name=HIP_PRETRAINED),
        benchmarks=[
            rules.hip_prepare.benchmark,
            *expand(rules.hip_train_lm.benchmark, seed=seeds("hip")),
            *expand(rules.hip_evaluate.benchmark, seed=seeds("hip")),
            rules.hip_cost.benchmark,
            *expand(rules.hip_evaluate_pretrained.benchmark, name=HIP_PRETRAINED),
        ],
    output:
        table_md=report(f"{HIP}/table.md", caption="../report/hip/table.rst", category="hip", subcategory="2 results"),
        table_csv=f"{HIP}/table.csv",
        claims=f"{HIP}/claims.json",
        params_json=f"{HIP}/params.json",
        report_md=f"{HIP}/report.md",
        verdicts=report(f"{HIP}/figures/verdicts.png", caption="../report/verdicts.rst", category="hip",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{HIP}/figures/verdicts.rst",
        page=report(f"{HIP}/report.html", caption="../report/page.rst", category="hip",
                    subcategory="1 verdicts and report"),
        fig_quality=report(f"{HIP}/figures/quality.png", caption="../report/hip/quality.rst", category="hip", subcategory="2 results"),
        fig_locality=report(f"{HIP}/figures/locality.png", caption="../report/hip/locality.rst", category="hip", subcategory="2 results"),
        fig_cost=report(f"{HIP}/figures/cost.png", caption="../report/hip/cost.rst", category="hip", subcategory="2 results"),
        fig_offload=report(f"{HIP}/figures/offload.png", caption="../report/hip/offload.rst", category="hip", subcategory="2 results"),
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
        **job_resources("light", rule="hip_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule hip:
    """Everything of paper P16 hip: its report, table, figures and claims."""
    input:
        paper_outputs("hip"),
