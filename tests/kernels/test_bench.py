"""kernels.bench runs end to end on tiny sizes: the CPU scaling section and, through the
Triton interpreter (or on a GPU where there is one), the GPU suite's code path."""

import csv

import torch
from kernels_testing import needs_triton

from kernels import bench


def test_fit_exponent_recovers_powers():
    xs = [1e3, 2e3, 4e3, 8e3]
    assert abs(bench.fit_exponent(xs, [x**2 for x in xs]) - 2) < 1e-9
    assert abs(bench.fit_exponent(xs, [3 * x for x in xs]) - 1) < 1e-9


def test_aig_graph_has_fan_in_two_and_is_acyclic():
    ei = bench.aig_graph(1000)
    assert ei.shape == (2, 2 * 900)
    assert torch.all(ei[0] < ei[1])  # sources come before their destination
    assert torch.all(torch.bincount(ei[1], minlength=1000)[100:] == 2)


@needs_triton
def test_bench_smoke(tmp_path):
    out = tmp_path / "bench.csv"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bench.main(["--device", device, "--smoke", "--gpu-suite", "--out", str(out)])
    rows = list(csv.DictReader(out.open()))
    suites = {r["suite"] for r in rows}
    assert {"attention", "hip", "graph"} <= suites
    if device == "cpu":
        fits = {r["method"]: float(r["value"]) for r in rows if r["metric"] == "exponent"}
        assert abs(fits["dense-key-scores"] - 2) < 1e-6
    timed = {(r["suite"], r["method"], r["size"], r["D"]) for r in rows if r["metric"] == "fwd_tflops"}
    checked = {(r["suite"], r["method"], r["size"], r["D"]) for r in rows if r["metric"] == "max_rel_err"}
    assert timed and timed <= checked
    assert {r["method"].split(":")[1] for r in rows if r["metric"] == "fwd_tflops"} >= {
        "causal", "non-causal", "causal-gqa4", "non-causal-bias", "decode"}
    assert any(r["method"] == "pyg-TransformerConv" for r in rows)
    recall = [float(r["value"]) for r in rows if r["metric"] == "topk_recall"]
    assert recall and 0 <= recall[0] <= 1


def test_bench_checks_what_it_times(tmp_path):
    # every (method, family, size, D) with a timing has a correctness row next to it, and the
    # check raises on a wrong result instead of reporting it
    import pytest

    with pytest.raises(AssertionError, match="bench correctness"):
        bench._check_close("wrong", torch.ones(3), torch.zeros(3), torch.float32)
    assert bench._check_close("right", torch.ones(3), torch.ones(3) + 1e-4, torch.float32) < 1e-3
    families = {f[0] for f in bench.ATTN_FAMILIES}
    assert {"causal", "non-causal", "causal-gqa4", "non-causal-bias"} <= families
