# P15 sbdd_vs: judge molecule generators by ligand-based virtual screening, not by docking scores.
# prepare (actives, decoys, drug-like set) -> train (SMILES LM) -> generate (per target) -> evaluate (per target)
#                                                                                        -> dock (per target, Vina on a sample)
# -> report. Code: workflow/papers/sbdd_vs/ (stages.py holds the stages; report.py the report).

# Minutes one target job asks a scheduler for: the `train` kind's, or more where its Vina dockings need more
# (papers.sbdd_vs.params.vina_minutes: dockings x docking.vina_cpu_seconds / vina_cpus, x2).
from papers.sbdd_vs.params import job_minutes as _sbdd_minutes

SBDD = f"{RESULTS}/sbdd_vs"
SBDD_CFG = config["sbdd_vs"]
SBDD_TARGETS = SBDD_CFG["targets"]
# The SMILES LM is trained only when it generates or its embedding screens (config generators, screen.embedding).
SBDD_LM = "lm" in SBDD_CFG["generators"] or SBDD_CFG["screen"]["embedding"]



rule sbdd_vs_prepare:
    """Per target and replicate: a similarity-stringent split, DUD-E decoys (and unmatched ones), the drug-like set."""
    output:
        actives=expand(f"{SBDD}/prepare/{{target}}_actives.parquet", target=SBDD_TARGETS),
        libraries=expand(f"{SBDD}/prepare/{{target}}_library.parquet", target=SBDD_TARGETS),
        druglike=f"{SBDD}/prepare/druglike.parquet",
        records=f"{SBDD}/prepare/records.json",
    params:
        call="papers.sbdd_vs.stages:prepare",
        cfg=SBDD_CFG,
    log:
        f"{LOGS}/sbdd_vs/prepare/records.log",
    benchmark:
        f"{BENCHMARKS}/sbdd_vs/prepare/records.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="sbdd_vs_prepare"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


if SBDD_LM:

    rule sbdd_vs_train:
        """Pretrain the SMILES LM on the drug-like set, then fine-tune one copy per target and replicate on its known actives."""
        input:
            druglike=rules.sbdd_vs_prepare.output.druglike,
            actives=rules.sbdd_vs_prepare.output.actives,
        output:
            pretrained=f"{SBDD}/train/lm_pretrained.pt",
            finetuned=expand(f"{SBDD}/train/lm_{{target}}.pt", target=SBDD_TARGETS),
            history=f"{SBDD}/train/lm_history.parquet",
        params:
            call="papers.sbdd_vs.stages:train",
            cfg=SBDD_CFG,
        log:
            f"{LOGS}/sbdd_vs/train/lm.log",
        benchmark:
            f"{BENCHMARKS}/sbdd_vs/train/lm.tsv"
        threads: res("train", "threads")
        resources:
            **job_resources("train", rule="sbdd_vs_train"),
        conda:
            "../../envs/base.yaml"
        script:
            CALL


rule sbdd_vs_generate:
    """Every generator's molecules for one target, for every replicate."""
    input:
        actives=f"{SBDD}/prepare/{{target}}_actives.parquet",
        druglike=rules.sbdd_vs_prepare.output.druglike,
        records=rules.sbdd_vs_prepare.output.records,
        checkpoint=f"{SBDD}/train/lm_{{target}}.pt" if SBDD_LM else [],
        # the other targets' actives: claim (b)'s ablation queries (another target's actives in the known ones' place)
        cross_actives=lambda w: [f"{SBDD}/prepare/{t}_actives.parquet" for t in SBDD_TARGETS if t != w.target],
    output:
        generated=f"{SBDD}/generate/{{target}}.parquet",
        optimiser_history=f"{SBDD}/generate/{{target}}_optimiser.parquet",
    params:
        call="papers.sbdd_vs.stages:generate",
        cfg=SBDD_CFG,
        target="{target}",
    log:
        f"{LOGS}/sbdd_vs/generate/{{target}}.log",
    benchmark:
        f"{BENCHMARKS}/sbdd_vs/generate/{{target}}.tsv"
    wildcard_constraints:
        target="|".join(SBDD_TARGETS),
    threads: res("train", "threads")
    resources:
        **job_resources("train", runtime=_sbdd_minutes(SBDD_CFG, "generate", res("train", "runtime")), rule="sbdd_vs_generate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sbdd_vs_evaluate:
    """For one target: docking (proxy), QED, SA, and EF1%, BEDROC, AUROC (Morgan and LM embedding) per generator and replicate."""
    input:
        library=f"{SBDD}/prepare/{{target}}_library.parquet",
        actives=f"{SBDD}/prepare/{{target}}_actives.parquet",
        records=rules.sbdd_vs_prepare.output.records,
        generated=rules.sbdd_vs_generate.output.generated,
        pretrained=f"{SBDD}/train/lm_pretrained.pt" if SBDD_LM else [],
    output:
        metrics=f"{SBDD}/evaluate/{{target}}.parquet",
    params:
        call="papers.sbdd_vs.stages:evaluate",
        cfg=SBDD_CFG,
        target="{target}",
    log:
        f"{LOGS}/sbdd_vs/evaluate/{{target}}.log",
    benchmark:
        f"{BENCHMARKS}/sbdd_vs/evaluate/{{target}}.tsv"
    wildcard_constraints:
        target="|".join(SBDD_TARGETS),
    threads: res("train", "threads")
    resources:
        **job_resources("train", runtime=_sbdd_minutes(SBDD_CFG, "evaluate", res("train", "runtime")), rule="sbdd_vs_evaluate"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sbdd_vs_dock:
    """For one target: AutoDock Vina (dockstring) on a sample: the optimiser's top molecule, known actives and DUD-E decoys."""
    input:
        generated=rules.sbdd_vs_generate.output.generated,
        library=f"{SBDD}/prepare/{{target}}_library.parquet",
        records=rules.sbdd_vs_prepare.output.records,
    output:
        vina=f"{SBDD}/dock/{{target}}.parquet",
    params:
        call="papers.sbdd_vs.stages:dock",
        cfg=SBDD_CFG,
        target="{target}",
    log:
        f"{LOGS}/sbdd_vs/dock/{{target}}.log",
    benchmark:
        f"{BENCHMARKS}/sbdd_vs/dock/{{target}}.tsv"
    wildcard_constraints:
        target="|".join(SBDD_TARGETS),
    threads: res("train", "threads")
    resources:
        **job_resources("train", runtime=_sbdd_minutes(SBDD_CFG, "dock", res("train", "runtime")), rule="sbdd_vs_dock"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sbdd_vs_report:
    """The table, the docking-vs-screening and decoy figures, the claims with verdicts and the checks, report.md."""
    input:
        metrics=expand(rules.sbdd_vs_evaluate.output.metrics, target=SBDD_TARGETS),
        vina=expand(rules.sbdd_vs_dock.output.vina, target=SBDD_TARGETS),
        records=rules.sbdd_vs_prepare.output.records,
        lm_history=f"{SBDD}/train/lm_history.parquet" if SBDD_LM else [],
        optimiser_histories=expand(rules.sbdd_vs_generate.output.optimiser_history, target=SBDD_TARGETS),
        benchmarks=[
            rules.sbdd_vs_prepare.benchmark,
            *([f"{BENCHMARKS}/sbdd_vs/train/lm.tsv"] if SBDD_LM else []),
            *expand(rules.sbdd_vs_generate.benchmark, target=SBDD_TARGETS),
            *expand(rules.sbdd_vs_evaluate.benchmark, target=SBDD_TARGETS),
            *expand(rules.sbdd_vs_dock.benchmark, target=SBDD_TARGETS),
        ],
    output:
        table_md=report(f"{SBDD}/table.md", caption="../report/sbdd_vs/table.rst", category="sbdd_vs", subcategory="2 results"),
        table_csv=f"{SBDD}/table.csv",
        claims=f"{SBDD}/claims.json",
        params_json=f"{SBDD}/params.json",
        report_md=f"{SBDD}/report.md",
        verdicts=report(f"{SBDD}/figures/verdicts.png", caption="../report/verdicts.rst", category="sbdd_vs",
                        subcategory="1 verdicts and report"),
        verdicts_caption=f"{SBDD}/figures/verdicts.rst",
        page=report(f"{SBDD}/report.html", caption="../report/page.rst", category="sbdd_vs",
                    subcategory="1 verdicts and report"),
        fig_metrics=report(
            f"{SBDD}/figures/docking_vs_screening.png",
            caption="../report/sbdd_vs/docking_vs_screening.rst",
            category="sbdd_vs",
        ),
        fig_decoys=report(f"{SBDD}/figures/decoy_bias.png", caption="../report/sbdd_vs/decoy_bias.rst", category="sbdd_vs", subcategory="2 results"),
    params:
        call="papers.sbdd_vs.report:report",
        cfg=SBDD_CFG,
        scale=SCALE,
    log:
        f"{LOGS}/sbdd_vs/report.log",
    benchmark:
        f"{BENCHMARKS}/sbdd_vs/report.tsv"
    threads: res("light", "threads")
    resources:
        **job_resources("light", rule="sbdd_vs_report"),
    conda:
        "../../envs/base.yaml"
    script:
        CALL


rule sbdd_vs:
    """Everything of paper P15 sbdd_vs: its report, table, figures and claims."""
    input:
        paper_outputs("sbdd_vs"),
