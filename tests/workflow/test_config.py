"""The configuration is validated at parse time: bad values stop the run before any job, naming the key."""
import re

import pytest

from smk import ROOT, snakemake


def _dry_run(tmp_path, *args):
    return snakemake("-n", *args, workdir=tmp_path, timeout=600)


@pytest.mark.parametrize(
    "overlay, message",
    [
        ("scale: huge\n", "key 'scale': 'huge' is not one of"),
        ("papers: [welfare, nonsense]\n", "key 'papers.1': 'nonsense' is not one of"),
        ("welfare:\n  horizon: soon\n", "key 'welfare.horizon': 'soon' is not of type 'integer'"),
        ("welfare:\n  horizonn: 10\n", "key 'welfare': Additional properties are not allowed ('horizonn'"),
        ("uv_sharpness:\n  mlp:\n    learning_rates: []\n", "key 'uv_sharpness.mlp.learning_rates'"),
        ("welfare:\n  budget: 50\n", "welfare.budget must satisfy 1 <= K < N = 50"),
        ("welfare:\n  short_run: 100000\n", "welfare.short_run: 100000 must lie in [1, horizon"),
        # Input paths are checked at parse time, not by the job that reads them (after submission).
        ("sam_late:\n  data:\n    path: no/cifar-10-batches-py\n",
         "key 'sam_late.data.path': no such file or directory: 'no/cifar-10-batches-py'"),
        ("sbdd_vs:\n  data:\n    decoy_pool: [no_such.smi]\n", "key 'sbdd_vs.data.decoy_pool[0]': no such file"),
    ],
)
def test_bad_config_fails_before_any_job_and_names_the_key(tmp_path, overlay, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(overlay)
    result = _dry_run(tmp_path, "--configfile", str(bad))
    assert result.returncode != 0
    assert message in result.stderr + result.stdout
    assert not (tmp_path / "results").exists()


def test_an_input_path_that_exists_passes(tmp_path):
    (tmp_path / "incomes.csv").write_text("income\n10\n20\n")
    (tmp_path / "mine.yaml").write_text("welfare:\n  incomes: incomes.csv\n")  # relative to the workdir
    result = _dry_run(tmp_path, "--configfile", str(tmp_path / "mine.yaml"))
    assert result.returncode == 0, result.stderr[-2000:]


def test_missing_key_is_named(tmp_path):
    # Edit a copy of the workflow: delete welfare.seeds from its config.yaml.
    import shutil
    import subprocess

    from smk import SNAKEMAKE

    copy = tmp_path / "repo"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".venv", ".git", "results", "logs", "benchmarks",
                                                               ".snakemake", "__pycache__", "tests"))
    cfg = copy / "config" / "config.yaml"
    text, removed = re.subn(r"(\nwelfare:\n(?:.*\n)*?)  seeds: \d+.*\n", r"\1", cfg.read_text(), count=1)
    assert removed == 1
    cfg.write_text(text)
    result = subprocess.run([SNAKEMAKE, "-n"], cwd=copy, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert "key 'welfare': 'seeds' is a required property" in result.stdout + result.stderr


def test_unknown_paper_is_refused(tmp_path):
    result = _dry_run(tmp_path, "--config", "papers=[no_such_paper]")
    assert result.returncode != 0
    assert "invalid configuration at key 'papers.0': 'no_such_paper' is not one of ['orion'," in result.stdout + result.stderr


def test_command_line_values_are_typed_by_the_schema(tmp_path):
    # Snakemake reads the nested form as YAML with string leaves; the workflow types them.
    ok = _dry_run(tmp_path, "welfare", "--config", "welfare={horizon: 8000, noise: false, table_horizons: [10, 8000]}")
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = _dry_run(tmp_path, "welfare", "--config", "welfare={horizon: soon}")
    assert bad.returncode != 0
    assert "key 'welfare.horizon': 'soon' is not of type 'integer'" in bad.stderr + bad.stdout


def test_a_named_run_writes_to_its_own_folder(tmp_path):
    result = _dry_run(tmp_path, "welfare", "--config", "run=long_horizon", "welfare={horizon: 8000}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "results/long_horizon/welfare/report.md" in result.stdout
    assert "results/default/" not in result.stdout
    bad = _dry_run(tmp_path, "welfare", "--config", "run=../elsewhere")
    assert bad.returncode != 0 and "key 'run'" in bad.stderr + bad.stdout


def test_overrides_are_listed_against_the_scale_defaults():
    from papers.common.provenance import differences, scale_defaults

    smoke = scale_defaults("smoke")
    assert smoke["scale"] == "smoke" and smoke["welfare"]["seeds"] == 3  # config/smoke.yaml over config.yaml
    changed = {**smoke["welfare"], "horizon": 500, "decay_bounds": [10.0, 60.0]}  # a list equal to the default
    assert differences(changed, smoke["welfare"], "welfare") == {"welfare.horizon": (500, 400)}
