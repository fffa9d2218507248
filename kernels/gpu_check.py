"""Numerical check of the CUDA path: ``python -m kernels.gpu_check OUT_DIR`` (run by
``scripts/gpu-check.sh``; needs a CUDA device). ``python -m kernels.gpu_check --figures OUT_DIR``
gathers a finished run's files into ``OUT_DIR/figures.md`` (no GPU needed).

Every registered op's CUDA implementation (Triton) against its torch reference, through the
public functions and autograd, in bf16 / fp16 / fp32 (TF32 products) at D = 64 and 128 with
grouped-query heads, an additive bias and Tq != Tk; then ``torch.library.opcheck`` on CUDA
tensors. Writes ``OUT_DIR/gpu_check.csv`` row by row as the comparisons are made (the max absolute error,
the bound, pass/fail, seconds since the start), so a run stopped by its time limit keeps what it
finished, and exits non-zero if a comparison fails. ``scripts/gpu-check.sh`` runs it with
``KERNELS_AUTOTUNE=0`` (one configuration per shape: correctness, not speed).
"""

from __future__ import annotations

import csv
import os
import sys
import time
from pathlib import Path

import torch

import kernels

# bound on max |ours - reference| / (1 + max |reference|), per dtype (fp32: TF32 products)
BOUND = {torch.bfloat16: 4e-2, torch.float16: 6e-3, torch.float32: 6e-3}
GRAD_BOUND = {torch.bfloat16: 8e-2, torch.float16: 2e-2, torch.float32: 2e-2}


def _err(a, b):
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).abs().max()) / (1.0 + float(b.abs().max()))


def check_attention(rows):
    # (B, Hq, Hkv, Tq, Tk, causal, bias)
    cases = [(2, 8, 8, 1024, 1024, True, False), (2, 8, 2, 1024, 1024, True, True),
             (2, 8, 2, 300, 1500, True, True), (2, 8, 1, 1, 2048, True, False),
             (2, 8, 2, 700, 500, False, True)]
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for D in (64, 128):
            for B, Hq, Hkv, Tq, Tk, causal, with_bias in cases:
                g = torch.Generator().manual_seed(0)
                q = torch.randn(B, Hq, Tq, D, generator=g).cuda().to(dtype).requires_grad_()
                k, v = (torch.randn(B, Hkv, Tk, D, generator=g).cuda().to(dtype).requires_grad_() for _ in range(2))
                bias = torch.randn(1, Hq, Tq, Tk, generator=g).cuda().requires_grad_() if with_bias else None
                out = kernels.attention(q, k, v, causal=causal, bias=bias)
                leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
                b_ref = bias.detach().requires_grad_() if with_bias else None
                ref = kernels.attention_reference(*leaves, causal=causal, bias=b_ref)
                do = torch.randn_like(out)
                grads = torch.autograd.grad(out, [q, k, v] + ([bias] if with_bias else []), do)
                grads_ref = torch.autograd.grad(ref, leaves + ([b_ref] if with_bias else []), do.float())
                name = f"attention B={B} Hq={Hq} Hkv={Hkv} Tq={Tq} Tk={Tk} D={D} causal={causal} bias={with_bias}"
                _row(rows, name, dtype, "out", _err(out, ref), BOUND[dtype])
                for gname, a, r in zip(("dq", "dk", "dv", "dbias"), grads, grads_ref):
                    _row(rows, name, dtype, gname, _err(a, r), GRAD_BOUND[dtype])


def check_hip(rows):
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for D in (64, 128):
            g = torch.Generator().manual_seed(1)
            q = torch.randn(1, 8, 4096, D, generator=g).cuda().to(dtype)
            k, v = (torch.randn(1, 2, 4096, D, generator=g).cuda().to(dtype) for _ in range(2))
            blocks = kernels.hip_select(q, k)
            out = kernels.block_sparse_attention(q, k, v, blocks)
            ref = kernels.block_sparse_attention_reference(q.float(), k.float(), v.float(), blocks)
            _row(rows, f"block_sparse_attention T=4096 D={D} GQA", dtype, "out", _err(out, ref), BOUND[dtype])
            if dtype == torch.float32:  # selection: exact ties aside, the reference's choice
                same = float((blocks == kernels.hip_select_reference(q, k)).float().mean())
                _row(rows, f"hip_select T=4096 D={D} GQA", dtype, "agreement", 1 - same, 1e-2)


def check_graph(rows):
    N, H = 20000, 4
    g = torch.Generator().manual_seed(2)
    src = (torch.rand(3 * N, generator=g) * N).long()
    dst = torch.randint(0, N, (3 * N,), generator=g)
    ei = torch.stack([src, dst]).cuda()
    lay = kernels.graph_layout(ei, N, N)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for D in (64, 128):
            q, k, v = (torch.randn(N, H, D, generator=g).cuda().to(dtype).requires_grad_() for _ in range(3))
            bias = torch.randn(ei.shape[1], H, generator=g).cuda().requires_grad_()
            out = kernels.graph_attention(q, k, v, lay, edge_bias=bias)
            leaves = [t.detach().float().requires_grad_() for t in (q, k, v, bias)]
            ref = kernels.graph_attention_reference(*leaves[:3], ei, edge_bias=leaves[3])
            do = torch.randn_like(out)
            grads = torch.autograd.grad(out, (q, k, v, bias), do)
            grads_ref = torch.autograd.grad(ref, leaves, do.float())
            name = f"graph_attention N={N} E={ei.shape[1]} H={H} D={D}"
            _row(rows, name, dtype, "out", _err(out, ref), BOUND[dtype])
            for gname, a, r in zip(("dq", "dk", "dv", "dbias"), grads, grads_ref):
                _row(rows, name, dtype, gname, _err(a, r), GRAD_BOUND[dtype])


def check_opcheck(rows, dev="cuda"):
    q, k, v = (torch.randn(2, 4, 70, 64, device=dev) for _ in range(3))
    k, v = k[:, :2].contiguous(), v[:, :2].contiguous()
    bias = torch.randn(1, 4, 70, 70, device=dev)
    for args in [(q, k, v, None, True, 0.125), (q, k, v, bias, False, 0.125)]:
        args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
        torch.library.opcheck(torch.ops.kernels.attention_fwd.default, args)
    lay = kernels.graph_layout(torch.randint(0, 50, (2, 300), device=dev), 50, 50)
    qg, kg, vg = (torch.randn(50, 2, 16, device=dev).requires_grad_() for _ in range(3))
    torch.library.opcheck(torch.ops.kernels.graph_attention_fwd.default,
                          (qg, kg, vg, None, lay.rowptr, lay.col, lay.dst, lay.colptr, lay.csc_eid, 0.25, 0.2, False))
    torch.library.opcheck(torch.ops.kernels.segment_sum.default,
                          (torch.randn(300, 8, device=dev).requires_grad_(), torch.randint(0, 40, (300,), device=dev), 40))
    qh, kh = torch.randn(1, 2, 512, 64, device=dev), torch.randn(1, 1, 512, 64, device=dev)
    torch.library.opcheck(torch.ops.kernels.hip_select.default, (qh, kh, 64, 2, 2, 128, 16, 64, True))
    blocks = kernels.hip_select(qh, kh, mask_k=128, window=64)
    torch.library.opcheck(torch.ops.kernels.block_sparse_attention.default, (qh, kh, kh, blocks, 64, 2, True, 0.125))
    _row(rows, "opcheck attention_fwd, graph_attention_fwd, segment_sum, hip_select, block_sparse_attention",
         torch.float32, "opcheck", 0.0, 0.0)


class Rows(list):
    """The comparisons so far; each is also written to the CSV as it is made (flushed), so that a
    run cut short by its time limit leaves every finished row on disk."""

    FIELDS = ["check", "dtype", "quantity", "error", "bound", "ok", "elapsed_s"]

    def __init__(self, path=None):
        super().__init__()
        self.t0 = time.time()
        self._file = path.open("w", newline="") if path is not None else None
        self._writer = csv.DictWriter(self._file, fieldnames=self.FIELDS) if self._file else None
        if self._writer:
            self._writer.writeheader()
            self._file.flush()

    def append(self, row):
        row = dict(row, elapsed_s=f"{time.time() - self.t0:.1f}")
        super().append(row)
        if self._writer:
            self._writer.writerow(row)
            self._file.flush()

    def close(self):
        if self._file:
            self._file.close()


def _row(rows, name, dtype, what, err, bound):
    ok = err <= bound
    rows.append(dict(check=name, dtype=str(dtype).replace("torch.", ""), quantity=what, error=f"{err:.3g}",
                     bound=bound, ok=ok))
    print(f"  {'ok  ' if ok else 'FAIL'} {name} {str(dtype).replace('torch.', '')} {what}: {err:.3g} (bound {bound})",
          flush=True)


def _test_outcome(log: str) -> str:
    """pytest's summary line; for a run cut by its time limit (no summary), the outcomes logged so far:
    `-v` lines name each test (PASSED / FAILED ...), `-q` progress lines only count them."""
    import re

    summary = [ln for ln in log.splitlines() if re.search(r"\d+ (passed|failed)", ln) and ln.startswith("=")]
    if summary:
        return f"`{summary[-1].strip('= ')}`"
    named = re.findall(r"(PASSED|FAILED|SKIPPED|ERROR) (tests/\S+)|(tests/\S+) (PASSED|FAILED|SKIPPED|ERROR)", log)
    outcomes = [(a or d, b or c) for a, b, c, d in named]
    if outcomes:
        counts = {k: sum(o == k for o, _ in outcomes) for k in ("PASSED", "FAILED", "SKIPPED", "ERROR")}
        failed = [t for o, t in outcomes if o in ("FAILED", "ERROR")]
        return ("no summary line (the step was cut); logged so far: "
                + ", ".join(f"{n} {k.lower()}" for k, n in counts.items() if n)
                + (" (failed: " + ", ".join(f"`{t}`" for t in failed) + ")" if failed else ""))
    dots = "".join(re.sub(r"\s*\[\s*\d+%\]\s*$", "", ln) for ln in log.splitlines()
                   if re.fullmatch(r"[.FEsxX]+\s*(\[\s*\d+%\])?\s*", ln))
    if dots:
        return (f"no summary line (the step was cut); progress logged so far: {dots.count('.')} passed, "
                f"{dots.count('F')} failed, {dots.count('E')} errors, {dots.count('s')} skipped "
                "(a `-q` log does not name them)")
    return "no summary line and no outcome logged (see pytest.txt)"


def figures(out_dir: Path) -> str:
    """The Markdown block that ``scripts/gpu-check.sh`` leaves in ``OUT_DIR/figures.md``, built only
    from the files of that run (nothing typed by hand): machine, step times, spills per launch
    variant, the tests' and the numerical check's outcome (worst error / bound per op and dtype),
    and the benchmark's summary lines. It is what goes into kernels/README.md's GPU section."""
    out_dir = Path(out_dir)

    def read(name):
        f = out_dir / name
        return f.read_text(errors="replace") if f.exists() else ""

    lines = ["### GPU check, " + (read("env.txt").strip().splitlines() or ["(no env.txt)"])[0], ""]
    # a step's name may hold commas (runs before 2026-12-04 wrote them unquoted): the last three fields
    steps = [dict(zip(("step", "status", "wall_s", "limit_s"), ln.rsplit(",", 3)))
             for ln in read("steps.csv").splitlines()[1:] if ln.count(",") >= 3]
    if steps:
        lines += ["| step | status | wall s | limit s |", "| --- | --- | --- | --- |"]
        lines += [f"| {r['step']} | {r['status']} | {r['wall_s']} | {r['limit_s']} |" for r in steps] + [""]
    spills = list(csv.DictReader(read("compile_report.csv").splitlines()))
    if spills:
        lines += ["Launch variants compiled for this GPU (`kernels.compile_report`): registers, spill stores, "
                  "compile CPU-s:", "", "| kernel | shape | tiles | warps, stages | registers | spill B | compile s |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r['kernel']} | {r['shape']} | {r['block_m']}x{r['block_n']} | {r['num_warps']}, "
                  f"{r['num_stages']} | {r['registers']} | {r['spill_store_bytes']} | {r['compile_cpu_s']} |"
                  for r in spills] + [""]
    lines += ["Kernel tests, compiled: " + _test_outcome(read("pytest.txt")), ""]
    checks = list(csv.DictReader(read("gpu_check.csv").splitlines()))
    if checks:
        worst = {}
        for r in checks:
            op = r["check"].split(" ")[0]
            key = (op, r["dtype"])
            ratio = float(r["error"]) / float(r["bound"]) if float(r["bound"]) > 0 else 0.0
            if key not in worst or ratio > worst[key][0]:
                worst[key] = (ratio, r)
        n_ok = sum(r["ok"] == "True" for r in checks)
        lines += [f"Values and gradients against the references (`kernels.gpu_check`): {n_ok}/{len(checks)} "
                  "within bounds. Worst per op and dtype:", "", "| op | dtype | quantity | error | bound |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {op} | {dt} | {r['quantity']} | {r['error']} | {r['bound']} |"
                  for (op, dt), (_, r) in sorted(worst.items())] + [""]
    error = [ln for ln in read("gpu_check.txt").splitlines() if ln and not ln.startswith(" ")]
    if "Traceback (most recent call last):" in error:
        lines += [f"The check stopped at an error after its last row: `{error[-1][:300]}`", ""]
    bench = read("bench_cuda.txt").splitlines()
    start = next((i for i, ln in enumerate(bench) if ln.startswith("summary")), None)
    if start is not None:
        lines += ["Benchmark (`kernels.bench --device cuda`, reduced grid):", "", "```"] + bench[start:] + ["```", ""]
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--figures":
        out_dir = Path(argv[1])
        (out_dir / "figures.md").write_text(figures(out_dir))
        print(f"wrote {out_dir / 'figures.md'}")
        return 0
    out_dir = Path(argv[0] if argv else "results/kernels/gpu_check")
    if not torch.cuda.is_available():
        print("kernels.gpu_check: no CUDA device; nothing to check")
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"kernels.gpu_check on {torch.cuda.get_device_name()} (torch {torch.__version__}, "
          f"KERNELS_AUTOTUNE={os.environ.get('KERNELS_AUTOTUNE', '1')})", flush=True)
    path = out_dir / "gpu_check.csv"
    rows = Rows(path)
    try:
        for check in (check_attention, check_hip, check_graph, check_opcheck):
            check(rows)
    finally:
        rows.close()
    failed = [r for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)}/{len(rows)} comparisons within bounds in {time.time() - rows.t0:.0f} s; "
          f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
