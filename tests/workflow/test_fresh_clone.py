"""What the workflow promises a new user, tried on a fresh clone (a copy of the working tree's tracked files, with no
.snakemake folder, no logs and no intermediate data): the committed results are current; a parameter change reruns
what reads it; an edited data file reruns what reads it; a smoke run cannot write into the reference results; every
command of the README's "Running" table works as written (dry run).
"""
import os
import re
import shlex
import shutil
import subprocess
import time

import pytest

from papers.common.records import RECORDS
from smk import ROOT, snakemake


def fresh_clone(target):
    """The working tree's tracked and untracked-but-not-ignored files, as `git clone` of a commit of it would give:
    the files' content, and modification times in the order git writes them (the index's path order, one after
    the other), so that a committed output may look older than its committed input, as on a real clone. (A real
    `git clone` would miss the uncommitted work a developer tests; on CI's clean checkout the two agree.)"""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.split("\0")
    checkout_time = time.time_ns()
    for order, rel in enumerate(sorted(filter(None, listed))):
        source = ROOT / rel
        if source.is_file():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target / rel)
            shutil.copymode(source, target / rel)
            stamp = checkout_time + order * 1000  # a microsecond apart, in path order
            os.utime(target / rel, ns=(stamp, stamp))
    return target


def planned(stdout: str) -> dict[str, int]:
    """{rule: jobs} of a dry run's job table."""
    counts = {}
    for line in stdout.splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m and m.group(1) not in ("total", "count", "all"):  # `all`: the target rule, no work
            counts[m.group(1)] = int(m.group(2))
    return counts


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    return fresh_clone(tmp_path_factory.mktemp("clone"))


def test_the_committed_results_are_current_and_a_parameter_change_reruns_its_paper(clone):
    unchanged = snakemake("-n", workdir=clone, timeout=600)
    assert unchanged.returncode == 0, unchanged.stderr[-3000:]
    assert "Nothing to be done" in unchanged.stdout + unchanged.stderr, planned(unchanged.stdout)
    changed = snakemake("-n", "welfare", "--config", "welfare={horizon: 8000}", workdir=clone, timeout=600)
    assert changed.returncode == 0, changed.stderr[-3000:]
    jobs = planned(changed.stdout)
    # The report's record (restored from results/default/welfare/snakemake_records.json) names the old horizon;
    # its intermediate data is not committed, so the paper's stages run from the start. No other paper reruns.
    assert "welfare_report" in jobs and "welfare_simulate" in jobs, jobs
    assert all(rule.startswith("welfare") for rule in jobs), jobs
    assert "horizon" in changed.stdout  # the reason names the changed parameter


def test_records_make_a_clone_rerun_exactly_what_reads_a_parameter(smoke_runs, tmp_path):
    """A clone of a finished run (outputs and intermediate data, but none of Snakemake's own metadata) reruns the
    stages that read a changed parameter, and only those, from the records kept beside the results."""
    source = smoke_runs[0]
    for folder in ("results", "benchmarks"):  # the run's outputs (its benchmarks are the summary's inputs)
        shutil.copytree(source / folder, tmp_path / folder)
    assert (tmp_path / "results" / "smoke" / "welfare" / RECORDS).is_file()
    args = ("-n", "--configfile", str(ROOT / "config" / "smoke.yaml"))
    assert "Nothing to be done" in (lambda r: r.stdout + r.stderr)(snakemake(*args, workdir=tmp_path, timeout=600))
    threshold = snakemake(*args, "--config", "welfare={rate_tolerance: 0.5}", workdir=tmp_path, timeout=600)
    assert planned(threshold.stdout) == {"welfare_report": 1, "summary": 1}, threshold.stdout[-2000:]


def test_an_edited_data_file_reruns_what_reads_it(tmp_path):
    incomes = tmp_path / "incomes.csv"
    incomes.write_text("income\n" + "\n".join(str(100 + 37 * i) for i in range(300)) + "\n")
    args = ("--configfile", str(ROOT / "config" / "smoke.yaml"), "--config", f"welfare={{incomes: {incomes}}}")
    target = "results/smoke/welfare/prepare/population.parquet"
    first = snakemake("-c", "1", target, *args, workdir=tmp_path, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Nothing to be done" in (lambda r: r.stdout + r.stderr)(snakemake("-n", target, *args, workdir=tmp_path))
    incomes.write_text(incomes.read_text() + "99999\n")  # edited in place: same path, same config
    again = snakemake("-n", target, *args, workdir=tmp_path, timeout=600)
    assert planned(again.stdout) == {"welfare_prepare": 1}, again.stdout[-2000:]
    assert "incomes.csv" in again.stdout


def test_a_smoke_run_cannot_write_into_the_default_results(clone):
    result = snakemake("-n", "--configfile", str(clone / "config" / "smoke.yaml"), "--config", "run=default",
                       "papers=[welfare]", workdir=clone, timeout=600)
    assert result.returncode != 0
    said = result.stdout + result.stderr  # Snakemake prints a WorkflowError raised at parse time on stdout
    assert "results/default/ holds results of the `default` scale" in said and "run=" in said, said[-2000:]


def readme_commands() -> list[str]:
    """The Snakemake commands of the README's "Running" table, as written."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## Running", 1)[1].split("\n\n", 2)[1]
    return [c for c in re.findall(r"`([^`]+)`", table) if c.startswith(".venv/bin/snakemake")]


def test_every_command_of_the_readme_table_runs_as_written(clone):
    commands = readme_commands()
    assert len(commands) >= 7, commands
    for command in commands:
        words = shlex.split(command)[1:]  # as a shell reads it; the test's own Snakemake runs it
        result = snakemake("-n", *words, workdir=clone, timeout=600)
        assert result.returncode == 0, f"{command}\n{result.stderr[-2000:]}"
