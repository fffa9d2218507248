"""Fixtures of the workflow tests: the smoke DAG, run once per session (twice, for determinism)."""
import pytest

from smk import ROOT, snakemake


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory):
    """The smoke DAG of every paper, run from scratch in two directories; returns both."""
    runs = []
    for name in ("first", "second"):
        workdir = tmp_path_factory.mktemp(f"smoke-{name}")
        result = snakemake("--cores", "2", "--configfile", str(ROOT / "config" / "smoke.yaml"), workdir=workdir)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        runs.append(workdir)
    return runs
