"""Compile the kernels ahead of time for a CUDA architecture, without a GPU, and report what
``ptxas`` says of each launch variant: registers per thread, spill stores, stack frame, and
the CPU time the compile took.

``python -m kernels.compile_report [--arch 90] [--only attn_fwd,graph] [--out FILE.csv]``

Triton lowers a kernel to PTX on the CPU and assembles it with the ``ptxas`` it ships; no
device is needed for either. A variant that spills (``spill stores > 0`` or a stack frame)
keeps part of its tiles in local memory, which costs bandwidth on every loop step: the launch
candidates are ordered so that the first (taken with ``KERNELS_AUTOTUNE=0``) does not.
The compile time is what a cold Triton cache costs per variant on first launch
(``scripts/gpu-check.sh`` sizes its time limits from it).

Must run with ``TRITON_INTERPRET`` unset (the kernels are then defined for compilation).
The variants are typical launches: 16-byte aligned pointers, unit innermost strides and
other strides divisible by 16 (what the JIT specialises on for contiguous tensors).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)
os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"  # ptxas -v's report, printed by Triton when it assembles
os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # a cache hit would skip ptxas (no report) and the compile time

import importlib  # noqa: E402

import torch  # noqa: E402

from ._dispatch import HAS_TRITON, next_pow2, triton  # noqa: E402

# the modules (the package's `attention`, `graph` names are the public functions)
attn = importlib.import_module("kernels.attention")
graph = importlib.import_module("kernels.graph")
_TRITON_DTYPE = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_INDEX_POINTERS = {"Rowptr", "Col", "Order", "Colptr", "CscEid", "Dst", "Perm", "Segptr"}
_FP32_POINTERS = {"LSE", "Delta", "DS", "P", "G", "DBias", "Scores", "Bias"}
_INT32_POINTERS = {"Tree", "Starts", "Sizes", "Blocks"}
_FLOAT_SCALARS = {"sm_scale", "negative_slope"}
# innermost strides of contiguous tensors: 1, which the JIT turns into a constant
_UNIT_STRIDES = re.compile(r"stride_(q|k|v|o|do|dk|dv|dq)[dc]$|stride_(s|o)f$|stride_(bn|is)$")


def _signature(fn, dtype, constexprs):
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            sig[name] = "constexpr"
        elif name[0].isupper() and name not in ("H", "Hq", "Tq", "Tk", "N_dst", "N_src", "N_seg", "F"):
            kind = ("i64" if name in _INDEX_POINTERS else "fp32" if name in _FP32_POINTERS
                    else "i32" if name in _INT32_POINTERS else _TRITON_DTYPE[dtype])
            sig[name] = "*" + kind
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in _FLOAT_SCALARS:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
            if name.startswith("stride_"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, attrs


def compile_variant(fn, dtype, constexprs, num_warps, num_stages, arch=90):
    """Compile one variant for ``sm_<arch>``; returns (registers, spill stores, stack bytes, cpu s)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    unit = {n: 1 for n in fn.arg_names if _UNIT_STRIDES.match(n) and n not in constexprs}
    constexprs = {**constexprs, **unit}
    sig, attrs = _signature(fn, dtype, constexprs)
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c0 = time.process_time()
    read, write = os.pipe()  # Triton prints ptxas' log on stdout: capture it
    saved = os.dup(1)
    sys.stdout.flush()
    os.dup2(write, 1)
    try:
        triton.compile(src, target=GPUTarget("cuda", arch, 32), options=dict(num_warps=num_warps,
                                                                           num_stages=num_stages))
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(write)
    log = os.read(read, 1 << 20).decode(errors="replace")
    os.close(read)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - c0 + (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

    def grab(pattern):
        m = re.search(pattern, log)
        return int(m.group(1)) if m else -1

    return grab(r"Used (\d+) registers"), grab(r"(\d+) bytes spill stores"), grab(r"(\d+) bytes stack frame"), cpu


def attention_variants(D, dtype, causal=True, bias=False):
    """The forward and backward candidates of :mod:`kernels.attention` for one head size and dtype."""
    common = dict(GROUP=1, HEAD_DIM=D, BLOCK_D=next_pow2(D, 16), CAUSAL=causal, HAS_BIAS=bias,
                  IN_PRECISION="tf32", **({} if bias else dict(Bias=None)))
    for cfg in attn.attention_configs(D, dtype, "fwd", smem_limit=227 * 1024):
        yield "attn_fwd", attn._attn_fwd, dict(common, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n), cfg
    for cfg in attn.attention_configs(D, dtype, "bwd", smem_limit=227 * 1024):
        yield "attn_bwd_dkdv", attn._attn_bwd_dkdv, dict(common, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n), cfg
        yield "attn_bwd_dq", attn._attn_bwd_dq, dict(common, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                                                     STORE_DS=bias, **({} if bias else dict(DS=None))), cfg


def graph_variants(H, D, C, rows=None, gat=False):
    """The three graph kernels at ``rows`` rows per program (default: the rows the package launches)."""
    main_rows = rows or graph._rows_per_program(None, H, max(D, C))
    src_rows = rows or graph._src_rows(main_rows, H, gat)
    meta = dict(HEAD_DIM=D, BLOCK_D=next_pow2(D), V_DIM=C, BLOCK_C=next_pow2(C), BLOCK_H=next_pow2(H), GAT=gat)
    cfg = attn.BlockConfig(main_rows, 0, graph.GRAPH_WARPS, 1)
    yield "graph_fwd", graph._graph_attn_fwd, dict(meta, BLOCK_M=main_rows, HAS_BIAS=True, stride_bh=1), cfg
    yield ("graph_bwd_dst", graph._graph_attn_bwd_dst,
           dict(meta, BLOCK_M=main_rows, HAS_BIAS=True, STORE_DBIAS=True, stride_bh=1), cfg)
    yield "graph_bwd_src", graph._graph_attn_bwd_src, dict(meta, BLOCK_M=src_rows), cfg._replace(block_m=src_rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 (H100/H200), 80 (A100)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--only", default="attn_fwd,attn_bwd,graph", help="attn_fwd, attn_bwd, graph (comma-separated)")
    ap.add_argument("--graph-rows", default="", help="rows per program of the graph kernels to compile, comma-"
                    "separated (default: the rows the package launches at each shape)")
    ap.add_argument("--graph-shapes", default="gat:1,1,128;dot:4,32,32",
                    help="score:H,D,C of the graph kernels, ';'-separated (default: DeepGate4's GAT, width 128, "
                         "and a 4-head dot-product layer of width 128)")
    ap.add_argument("--out", default=None, help="CSV file (default: print only)")
    args = ap.parse_args(argv)
    if not HAS_TRITON:
        print("kernels.compile_report: triton is not installed")
        return 2
    dtype = getattr(torch, args.dtype)
    only = set(args.only.split(","))
    jobs = []
    for D in map(int, args.head_dims.split(",")):
        for name, fn, ce, cfg in attention_variants(D, dtype):
            if name == "attn_fwd" and "attn_fwd" in only or name.startswith("attn_bwd") and "attn_bwd" in only:
                jobs.append((name, fn, ce, cfg, f"D={D}"))
    if "graph" in only:
        for shape in args.graph_shapes.split(";"):
            score, dims = shape.split(":")
            H, D, C = map(int, dims.split(","))
            for rows in [int(r) for r in args.graph_rows.split(",") if r] or [None]:
                for name, fn, ce, cfg in graph_variants(H, D, C, rows, gat=score == "gat"):
                    jobs.append((name, fn, ce, cfg, f"{score} H={H} D={D} C={C}"))
    rows = []
    fields = ["kernel", "shape", "dtype", "block_m", "block_n", "num_warps", "num_stages", "registers",
              "spill_store_bytes", "stack_bytes", "compile_cpu_s"]
    writer = None
    if args.out:
        f = open(args.out, "w", newline="")
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
    print(" ".join(fields), flush=True)
    failed = 0
    for name, fn, ce, cfg, shape in jobs:
        try:
            regs, spill, stack, cpu = compile_variant(fn, dtype, ce, cfg.num_warps, cfg.num_stages, args.arch)
        except Exception as e:  # a compiler error is a finding: record it, go on
            print(f"{name} {shape} {cfg}: compile failed: {type(e).__name__}", file=sys.stderr, flush=True)
            regs, spill, stack, cpu, failed = "failed", "", "", 0.0, failed + 1
        row = dict(kernel=name, shape=shape, dtype=args.dtype, block_m=cfg.block_m, block_n=cfg.block_n,
                   num_warps=cfg.num_warps, num_stages=cfg.num_stages, registers=regs, spill_store_bytes=spill,
                   stack_bytes=stack, compile_cpu_s=f"{cpu:.1f}")
        rows.append(row)
        print(" ".join(str(row[k]) for k in fields), flush=True)
        if writer:
            writer.writerow(row)
            f.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
