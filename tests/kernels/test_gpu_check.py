"""kernels.gpu_check's bookkeeping (no GPU needed): rows reach the CSV as they are made, and the
figures block is built from a run's files only."""

import csv

import pytest
import torch

from kernels.gpu_check import Rows, _row, figures, main


def test_rows_are_written_as_they_come(tmp_path):
    path = tmp_path / "gpu_check.csv"
    rows = Rows(path)
    _row(rows, "attention B=1", torch.float16, "out", 1e-3, 6e-3)
    first = list(csv.DictReader(path.open()))  # readable before the run ends
    assert [(r["check"], r["ok"]) for r in first] == [("attention B=1", "True")]
    _row(rows, "graph_attention N=3", torch.bfloat16, "dq", 0.5, 8e-2)
    rows.close()
    got = list(csv.DictReader(path.open()))
    assert [(r["check"], r["dtype"], r["ok"]) for r in got] == [("attention B=1", "float16", "True"),
                                                                 ("graph_attention N=3", "bfloat16", "False")]


def test_figures_come_from_the_run_files(tmp_path):
    (tmp_path / "env.txt").write_text("NVIDIA H200 | torch 2.x | triton 3.x | CUDA 12.x\n")
    (tmp_path / "steps.csv").write_text("step,status,wall_s,limit_s\n1/4 kernel tests,ok,321,2000\n")
    (tmp_path / "pytest.txt").write_text("....\n===== 130 passed in 300.00s =====\n")
    rows = Rows(tmp_path / "gpu_check.csv")
    _row(rows, "attention B=2 D=64", torch.float16, "out", 1e-3, 6e-3)
    _row(rows, "attention B=2 D=128", torch.float16, "dq", 5e-3, 2e-2)  # worse relative to its bound
    _row(rows, "graph_attention N=20000", torch.float32, "out", 1e-4, 6e-3)
    rows.close()
    (tmp_path / "bench_cuda.txt").write_text("timing...\nsummary (cuda):\nattention fwd speed ratio vs sdpa 1.10\n")
    md = figures(tmp_path)
    assert md.startswith("### GPU check, NVIDIA H200")
    assert "| 1/4 kernel tests | ok | 321 | 2000 |" in md
    assert "130 passed in 300.00s" in md
    assert "3/3 within bounds" in md
    assert "| attention | float16 | dq | 0.005 | 0.02 |" in md and "| attention | float16 | out |" not in md
    assert "attention fwd speed ratio vs sdpa 1.10" in md


def test_figures_of_an_empty_run_invent_nothing(tmp_path):
    md = figures(tmp_path)
    assert "no summary line" in md and not any(ch.isdigit() for ch in md.replace("###", ""))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_main_without_cuda_exits_2(tmp_path):
    assert main([str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_figures_of_a_cut_test_step_count_what_was_logged(tmp_path):
    # a step stopped by its time limit prints no summary: the outcomes logged until then are counted,
    # named where pytest ran with -v, and a step name with a comma (runs before 2026-12-04) stays whole
    (tmp_path / "steps.csv").write_text("step,status,wall_s,limit_s\n1/4 kernel tests, compiled,timeout,170,170\n")
    (tmp_path / "pytest.txt").write_text("bringing up nodes...\n\n....F..s [ 51%]\n..F.\n")
    md = figures(tmp_path)
    assert "| 1/4 kernel tests, compiled | timeout | 170 | 170 |" in md
    assert "9 passed, 2 failed, 0 errors, 1 skipped" in md
    (tmp_path / "pytest.txt").write_text(
        "[gw0] [ 50%] PASSED tests/kernels/test_graph.py::test_a \n"
        "[gw1] [ 60%] FAILED tests/kernels/test_attention.py::test_b[x] \n"
        "[gw0] [ 70%] PASSED tests/kernels/test_graph.py::test_c \n")
    md = figures(tmp_path)
    assert "2 passed, 1 failed" in md and "`tests/kernels/test_attention.py::test_b[x]`" in md


def test_figures_say_where_the_check_stopped(tmp_path):
    (tmp_path / "gpu_check.txt").write_text("kernels.gpu_check on X\n  ok   a\nTraceback (most recent call last):\n"
                                            "  File \"x.py\", line 1\nOutOfResources: shared memory\n")
    rows = Rows(tmp_path / "gpu_check.csv")
    _row(rows, "attention B=2 D=64", torch.float16, "out", 1e-3, 6e-3)
    rows.close()
    assert "stopped at an error after its last row: `OutOfResources: shared memory`" in figures(tmp_path)
