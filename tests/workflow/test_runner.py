"""papers.common.runner and papers.common.cluster: what a job does on a cluster beyond calling its stage: retries
that ask for more up to the partition's limit, no retry of a failure that repeats deterministically, and a GPU job
that stops at once where torch sees no GPU."""
import types

import pytest

from papers.common import runner
from papers.common.cluster import per_attempt
from papers.common.records import export_records, import_records, record_path


def test_retries_ask_for_more_up_to_the_cap():
    mem = per_attempt(32000, 64000)
    assert [mem(None, a) for a in (1, 2, 3)] == [32000, 64000, 64000]
    assert [per_attempt(720, None)(None, a) for a in (1, 3)] == [720, 2160]
    assert per_attempt(100, 50)(None, 2) == 100  # a cap below the first request never lowers it


def _job(tmp_path, call, resources=None):
    log = tmp_path / "logs" / "stage.log"
    return types.SimpleNamespace(
        params=types.SimpleNamespace(items=lambda: [("call", call)]), input=types.SimpleNamespace(items=lambda: []),
        output=types.SimpleNamespace(items=lambda: []), log=[str(log)], threads=1, rule="demo_stage",
        config={}, resources=resources or {}), log


CALLS = {"n": 0}


def failing_config(**_):
    CALLS["n"] += 1
    raise ValueError("demo.horizon must be >= 2, got 1")


def out_of_memory(**_):
    CALLS["n"] += 1
    raise MemoryError("cannot allocate")


def test_a_deterministic_failure_is_not_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "_named", lambda ns: dict(ns.items()))
    job, log = _job(tmp_path, f"{__name__}:failing_config")
    CALLS["n"] = 0
    with pytest.raises(ValueError, match="horizon"):
        runner.run_stage(job)
    with pytest.raises(RuntimeError, match="not retried.*ValueError: demo.horizon must be >= 2"):
        runner.run_stage(job)  # the retry stops before running the stage again
    assert CALLS["n"] == 1
    assert runner.clear_deterministic_markers(tmp_path / "logs") == 1  # what a new run's onstart does
    with pytest.raises(ValueError):
        runner.run_stage(job)
    assert CALLS["n"] == 2


def test_a_machine_fault_may_be_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "_named", lambda ns: dict(ns.items()))
    job, log = _job(tmp_path, f"{__name__}:out_of_memory")
    CALLS["n"] = 0
    for _ in range(2):
        with pytest.raises(MemoryError):
            runner.run_stage(job)
    assert CALLS["n"] == 2 and not runner.deterministic_marker(str(log)).exists()
    assert runner.is_transient(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert runner.is_transient(OSError(116, "Stale file handle"))
    assert not runner.is_transient(FileNotFoundError("data/incomes.csv"))
    assert not runner.is_transient(KeyError("welfare.horizon"))


def test_a_gpu_job_without_a_gpu_stops_at_once_naming_the_build(monkeypatch):
    import torch

    runner.check_gpu({"gpu": 0})  # a CPU job: nothing to check
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"asked for 1 GPU.*torch==2\.13\.0 --index-url .*cu128"):
        runner.check_gpu({"gpu": 1})


def test_records_travel_with_the_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = "results/default/demo/table.md"
    (tmp_path / out).parent.mkdir(parents=True)
    (tmp_path / out).write_text("x")
    record = record_path(out)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text('{"rule": "demo_report", "params": ["a"], "endtime": 10}')
    assert export_records([out, "results/default/demo/missing.md"], "kept.json") == 1
    record.unlink()
    assert import_records("kept.json") == 1 and '"demo_report"' in record.read_text()  # a fresh clone
    record.write_text('{"rule": "demo_report", "params": ["b"], "endtime": 20}')
    assert import_records("kept.json") == 0 and '"b"' in record.read_text()  # a newer local run wins
    record.write_text('{"rule": "demo_report", "params": ["c"], "endtime": 5}')
    assert import_records("kept.json") == 1 and '"a"' in record.read_text()  # a pull of newer results wins


def test_the_cuda_probe_records_cuda_placements_and_keeps_them_on_the_cpu():
    """papers.common.cuda_probe: what test_gpu_routing.py relies on, on a few lines of torch."""
    import torch

    from papers.common.cuda_probe import CudaProbe

    with CudaProbe() as probe:
        x = torch.ones(3).to("cuda") + torch.zeros(3, device="cuda")
        layer = torch.nn.Linear(3, 2).to(torch.device("cuda"))
        y = layer(x)
        torch.cuda.synchronize()
    assert probe.cuda and "test_runner.py" in probe.where
    assert x.device.type == "cpu" and y.device.type == "cpu" and torch.equal(x, torch.ones(3))
    assert not torch.cuda.is_available()  # restored on exit (a CPU build)

    with CudaProbe() as cpu_only:
        device = "cuda" if torch.cuda.is_available() else "cpu"  # a stage that picks CUDA by itself
        torch.ones(2).to("cpu").sum()
    assert device == "cuda" and not cpu_only.cuda
