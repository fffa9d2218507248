"""The workflow as a whole: lint, dry-runs at every scale, the smoke DAG end to end, determinism."""
import json
import re

import jsonschema
import pytest

from smk import PAPERS, ROOT, full_scale_stand_ins, snakemake



def _job_counts(stdout: str) -> dict[str, int]:
    """Parse the 'Job stats' table of a dry run into {rule: count}."""
    counts = {}
    for line in stdout.splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m:
            counts[m.group(1)] = int(m.group(2))
    return counts


def test_lint_is_clean(tmp_path):
    result = snakemake("--lint", workdir=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr


# Jobs of the fanned-out rules at (smoke, default, full), from each paper's config: what a cluster
# runs side by side. Rules not listed run once per scale.
FANNED_OUT = {
    "welfare_simulate": (12, 12, 12),  # one per policy and population (the paper's and the flat-returns control)
    "welfare_sweep": (6, 6, 6),  # one per policy (sweep points, seeds and the flat control inside)
    "uv_sharpness_train_mlp": (2, 15, 25),  # (learning rates + the control rate) x seeds
    "uv_sharpness_sweep": (2, 2, 2),  # one per initialisation (small: the route to chaos; large: the EoS manifold)
    "sam_late_train_sgd": (1, 1, 1),  # one per label condition (clean; the noisy extension is off at every scale)
    "sam_late_train_sam": (1, 1, 3),  # one per (condition, rho): clean at every rho (default 0.3 only; full 0.5, 1.0, 2.0)
    "linear_mechanisms_phase": (1, 3, 3),  # one per phase-diagram panel
    "linear_mechanisms_nonlinear": (1, 10, 10),  # one per seed (every arm and its frozen-first-layer twin inside)
    "cbplm_train": (1, 3, 5),  # one per seed (the four models and the sweep's CB-pLM runs inside)
    "cbplm_evaluate": (1, 3, 5),  # one per seed
    "sharpening_sharpen": (2, 2, 2),  # SFT and RL
    "ensembles_train": (1, 7, 400),  # blocks of distinct member trainings (replicate, pipeline, member)
    "neural_fdm_train": (4, 4, 4),  # tasks x models
    "neural_fdm_evaluate": (2, 2, 2),  # one per task
    "deepgate4_train": (1, 3, 5),  # one per seed
    "sbdd_vs_generate": (2, 2, 2),  # one per target
    "sbdd_vs_evaluate": (2, 2, 2),  # one per target
    "sbdd_vs_dock": (2, 2, 2),  # one per target (Vina on a sample; none docked at smoke)
    "orion_train": (2, 2, 4),  # one per model (its seeds side by side): the tested sizes and the routed control
    "orion_evaluate": (2, 2, 4),  # one per model
    "profilebfn_train_part": (1, 0, 15),  # the chained parts before the last (profilebfn.train_parts: smoke 2, default 1, full 4) per seed
    "profilebfn_train": (1, 3, 5),  # one per training seed
    "profilebfn_evaluate": (1, 3, 5),  # one per training seed (every arm and family inside)
    "symspace_train": (1, 6, 5),  # one per seed (claim b's heads on its share of head_seeds, the attention pairs)
    "eagle_train_seed": (1, 5, 0),  # one per seed at the synthetic scales (the arms every seed trains: smoke 9, default 3)
    "eagle_train": (0, 0, 65),  # one per seed and arm of the others: at the full scale every arm (11 fixed and the round-robin's 2 slots per seed)
    "infoprop_prepare": (1, 12, 5),  # one per seed
    "infoprop_train": (1, 12, 5),  # one per seed
    "infoprop_evaluate": (1, 12, 5),  # one per seed (every propagation scheme inside)
    "bodygen_train_part": (2, 0, 2000),  # the chained parts before the last (bodygen.train_parts: smoke 2, default 1, full 6) per run
    "bodygen_train": (2, 9, 400),  # one per task, arm and seed (smoke 2 arms; default 3 arms x 3 seeds; full 10 tasks x 8 arms x 5 seeds)
    "adamanip_prepare": (1, 3, 5),  # one per seed (every category and demonstration kind inside)
    "adamanip_train": (2, 6, 10),  # policies x seeds (both demonstration kinds inside)
    "adamanip_evaluate": (2, 6, 10),  # policies x seeds
    "flexpert_train": (1, 6, 5),  # one per seed (predictors, controls and designers inside)
    "hip_train_lm": (1, 7, 7),  # one language model per seed
    "hip_evaluate": (1, 7, 7),  # one per seed (every method, recall and offloading inside)
}


@pytest.mark.parametrize("scale", ["smoke", "default", "full"])
def test_dry_run_lists_every_paper_stage(tmp_path, scale):
    args = [] if scale == "default" else ["--configfile", str(ROOT / "config" / f"{scale}.yaml")]
    if scale == "full":
        full_scale_stand_ins(tmp_path)
    result = snakemake("-n", *args, workdir=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    counts = _job_counts(result.stdout)
    assert counts["summary"] == 1 and counts["all"] == 1
    for slug in PAPERS:
        stages = {rule: n for rule, n in counts.items() if rule.startswith(f"{slug}_")}
        assert stages.get(f"{slug}_report") == 1, stages
        assert len(stages) >= 3, f"{slug}: fewer than prepare/train/report stages: {stages}"
        for rule, n in stages.items():
            expected = FANNED_OUT.get(rule, (1, 1, 1))[("smoke", "default", "full").index(scale)]
            assert n == expected, f"{rule}: {n} jobs at {scale}, expected {expected}"


def test_one_paper_by_its_target_rule(tmp_path):
    result = snakemake("-n", "welfare", workdir=tmp_path, timeout=120)
    assert result.returncode == 0
    counts = _job_counts(result.stdout)
    assert "welfare_report" in counts and not any(k.startswith("uv_sharpness") for k in counts)


@pytest.mark.slow
def test_smoke_dag_writes_every_declared_output(smoke_runs):
    workdir = smoke_runs[0]
    result = snakemake("--configfile", str(ROOT / "config" / "smoke.yaml"), "--summary", workdir=workdir, timeout=120)
    assert result.returncode == 0
    rows = [line.split("\t") for line in result.stdout.splitlines()[1:] if "\t" in line]
    assert rows, result.stdout
    for row in rows:
        # a temp() output (profilebfn's chained training states) is gone once its consumers ran, as declared
        assert (workdir / row[0]).exists() or row[-2].strip() == "removed temp file", row
        assert row[-1].strip() == "no update", row  # a complete run leaves nothing to redo
    schema = json.loads((ROOT / "workflow" / "schemas" / "claims.schema.json").read_text())
    for slug in PAPERS:
        base = workdir / "results" / "smoke" / slug
        for name in ("table.md", "table.csv", "claims.json", "report.md"):
            assert (base / name).stat().st_size > 0
        claims = json.loads((base / "claims.json").read_text())
        jsonschema.validate(claims, schema)
        assert claims["paper"] == slug and claims["scale"] == "smoke"
        assert list((base / "figures").glob("*.png"))
        assert (workdir / "logs" / "smoke" / slug).is_dir()
    summary = (workdir / "results" / "smoke" / "summary.md").read_text()
    for slug in PAPERS:
        assert f"[{slug}]({slug}/report.md)" in summary


@pytest.mark.slow
def test_smoke_reruns_are_deterministic(smoke_runs):
    """On one machine, two runs give byte-identical tables and claims (wall-clock evidence aside).

    Across machines only the conclusions must agree (verdicts, overlapping intervals): floating-point
    paths differ there, which scripts/compare_results.py checks and tests/workflow/test_compare_results.py tests.
    """
    first, second = smoke_runs
    for slug in PAPERS:
        a, b = (_untimed((run / "results" / "smoke" / slug / "table.csv").read_text()) for run in (first, second))
        assert a == b, f"{slug}: table.csv differs between two identical smoke runs"
        ca = json.loads((first / "results" / "smoke" / slug / "claims.json").read_text())
        cb = json.loads((second / "results" / "smoke" / slug / "claims.json").read_text())
        assert [c["id"] for c in ca["claims"]] == [c["id"] for c in cb["claims"]]
        for x, y in zip(ca["claims"], cb["claims"]):
            if _timed(x):  # wall-clock evidence (hip's cost exponents) differs between runs by nature
                assert x["criterion"] == y["criterion"], slug
            else:
                assert x == y, f"{slug}/{x['id']}: claims differ between two identical smoke runs"


def _untimed(table: str) -> list[str]:
    """A table's rows but those of wall-clock measurements (a measure named `*_seconds`, e.g. hip's cost rows)."""
    return [row for row in table.splitlines() if "_seconds" not in row]


def _timed(claim: dict) -> bool:
    tests = [claim.get("evidence") or {}, *(claim.get("evidence") or {}).get("parts", [])]
    return any(t.get("timed") for t in tests)


@pytest.mark.slow
def test_html_report_builds(smoke_runs, tmp_path):
    workdir = smoke_runs[0]
    out = workdir / "report.html"
    result = snakemake("--configfile", str(ROOT / "config" / "smoke.yaml"), "--report", str(out), workdir=workdir,
                       timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert out.stat().st_size > 10_000
    # A caption that docutils cannot read shows as an error box in the report, and only there.
    html = out.read_text()
    assert "System Message" not in html, [line for line in (result.stderr + result.stdout).splitlines()
                                          if "(ERROR/" in line or "(WARNING/" in line or "(SEVERE/" in line]


def test_every_rule_explains_itself(tmp_path):
    result = snakemake("--list-rules", workdir=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) > 60
    # Snakemake lists a rule with a docstring as "name (docstring)", one without as "name".
    undocumented = [line for line in lines if not re.fullmatch(r"\w+ \(.{10,}\)", line)]
    assert not undocumented, f"rules without a docstring: {undocumented}"
