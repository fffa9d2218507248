"""Benchmarks of the kernels: ``python -m kernels.bench [--device cpu|cuda] [--out PATH]``.

CPU (the references): time and number of ``q . k`` scores of dense attention and of HiP
against T, with the fitted exponents of ``T^a`` (dense: 2; HiP: about 1, i.e.
``T log T``), and graph attention against PyG ``GATConv``.

GPU (bf16, one run of a few minutes):

* ``attention`` forward and backward TFLOP/s against SDPA's flash backend and
  FlexAttention, T = 1k..16k, D = 64 and 128, causal. FLOPs as in Triton's tutorial:
  forward ``4 B H T^2 D`` (two matmuls of ``2 T^2 D``), halved when causal; backward
  2.5x the forward (five matmuls);
* HiP (select + block-sparse attention) latency against dense SDPA-flash, T = 8k..128k,
  the break-even T, and HiP's top-k recall at the largest T (synthetic keys with locality);
* graph attention (GAT layer, fwd + bwd) edges/s and peak memory against ``GATConv`` on
  AIG-shaped graphs (every node has fan-in 2), 1e5..1e6 nodes.

``--smoke`` runs every section on tiny sizes; on CPU with ``TRITON_INTERPRET=1`` set before
the import it runs the Triton launchers in the interpreter (the test suite does this), so
the GPU code path is exercised without a GPU. Rows go to a CSV in long format:
``suite, method, device, dtype, size, D, metric, value``.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import time
import warnings
from pathlib import Path

import torch

import kernels
from kernels.attention import _triton_attention_bwd, _triton_attention_fwd
from kernels.graph import _triton_graph_bwd, _triton_graph_fwd
from kernels.hip import (
    _assemble,
    _tree_search_reference,
    _triton_block_sparse_attention,
    _triton_hip_tree,
    oracle_select,
)

# ----------------------------------------------------------------------------------------
# data and helpers
# ----------------------------------------------------------------------------------------


def smooth_keys(B, H, T, D, generator=None, n_freq=6, device="cpu", dtype=torch.float32):
    """Keys that vary smoothly along T (attention locality): a few low-frequency sines.
    The random draws come from ``generator`` on the CPU; the sines are summed on ``device``."""
    t = torch.arange(T, device=device).float()[:, None] / T
    k = torch.zeros(B, H, T, D, device=device)
    for _ in range(n_freq):
        f = torch.randint(1, 6, (B, H, 1, D), generator=generator).float().to(device)
        phase = (torch.rand(B, H, 1, D, generator=generator) * 2 * math.pi).to(device)
        amp = torch.randn(B, H, 1, D, generator=generator).to(device)
        k += amp * torch.sin(2 * math.pi * f * t + phase)
    return k.to(dtype)


def aig_graph(N, fan_in=2, n_inputs=None, seed=0, device="cpu"):
    """An AIG-shaped DAG: nodes past the first ``n_inputs`` have ``fan_in`` earlier sources."""
    g = torch.Generator().manual_seed(seed)
    n_inputs = n_inputs or max(N // 10, 1)
    dst = torch.arange(n_inputs, N).repeat_interleave(fan_in)
    src = (torch.rand(dst.numel(), generator=g) * dst).long()  # uniform over earlier nodes
    return torch.stack([src, dst]).to(device)


def timer(device, smoke=False):
    """ms per call: triton.testing.do_bench on CUDA, else the median of a few wall-clock runs
    (smoke: one run, no warm-up: it checks the code path, it does not measure)."""
    if device == "cuda" and not smoke:
        import triton.testing

        return lambda fn: triton.testing.do_bench(fn, warmup=10, rep=50)

    def once(fn):
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    def run(fn):
        first = once(fn)  # also the warm-up
        if smoke or first > 1000:  # a long run is its own measurement
            return first
        return statistics.median(once(fn) for _ in range(3))

    return run


def fit_exponent(xs, ys):
    """Least-squares slope of log y against log x: y ~ x^a."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


class Rows:
    def __init__(self, device):
        self.rows, self.device = [], device

    def add(self, suite, method, dtype, size, D, metric, value):
        self.rows.append(dict(suite=suite, method=method, device=self.device, dtype=str(dtype).replace("torch.", ""),
                              size=size, D=D, metric=metric, value=value))
        v = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"  {suite:<10} {method:<22} {str(dtype).replace('torch.', ''):<9} size={size:<8} D={D:<4} "
              f"{metric:<14} {v}", flush=True)

    def write(self, path):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(self.rows[0]))
            w.writeheader()
            w.writerows(self.rows)
        print(f"wrote {len(self.rows)} rows to {path}")


# ----------------------------------------------------------------------------------------
# CPU: the references' cost against T
# ----------------------------------------------------------------------------------------


def bench_cpu_scaling(rows, dense_sizes, hip_sizes, D=64, H=1, smoke=False):
    ms = timer("cpu", smoke)
    g = torch.Generator().manual_seed(0)
    print(f"\n[cpu] dense reference vs HiP reference (causal, fp32, B=1, H={H}, D={D}, HiP defaults; "
          "key scores = q.k products the reference computes)")
    fits = {}
    dense = []
    for T in dense_sizes:
        q, k, v = (torch.randn(1, H, T, D, generator=g) for _ in range(3))
        t = ms(lambda: kernels.attention_reference(q, k, v, causal=True))
        rows.add("scaling", "dense-reference", torch.float32, T, D, "time_ms", t)
        rows.add("scaling", "dense-reference", torch.float32, T, D, "key_scores", H * T * T)
        dense.append((T, t, H * T * T))
    hip = []
    for T in hip_sizes:
        q, v = torch.randn(1, H, T, D, generator=g), torch.randn(1, H, T, D, generator=g)
        k = smooth_keys(1, H, T, D, g)

        def run():
            blocks = kernels.hip_select_reference(q, k)
            return kernels.block_sparse_attention_reference(q, k, v, blocks)

        t = ms(run)
        _, _, n_select = _tree_search_reference(q, k, block_q=64, block_stride_q=2, block_k=2, mask_k=512, sink=16,
                                                window=256, causal=True)
        blocks = kernels.hip_select_reference(q, k)
        n_attend = int((blocks >= 0).sum()) * 2 * 64  # the gathered reference scores every selected key
        rows.add("scaling", "hip-reference", torch.float32, T, D, "time_ms", t)
        rows.add("scaling", "hip-reference", torch.float32, T, D, "select_scores", n_select)
        rows.add("scaling", "hip-reference", torch.float32, T, D, "key_scores", n_select + n_attend)
        hip.append((T, t, n_select + n_attend, n_select))
    if len(dense) >= 2:
        fits["dense time"] = fit_exponent([r[0] for r in dense], [r[1] for r in dense])
        fits["dense key scores"] = fit_exponent([r[0] for r in dense], [r[2] for r in dense])
    if len(hip) >= 2:
        fits["hip time"] = fit_exponent([r[0] for r in hip], [r[1] for r in hip])
        fits["hip key scores"] = fit_exponent([r[0] for r in hip], [r[2] for r in hip])
        fits["hip selection scores"] = fit_exponent([r[0] for r in hip], [r[3] for r in hip])
        # what O(T log T) looks like at these T: the selection's model T * log2(T / mask_k)
        # (log2(T / mask_k) levels of the tree) has this local exponent, well above 1
        fits["model T log2(T/512)"] = fit_exponent([r[0] for r in hip], [r[0] * math.log2(r[0] / 512) for r in hip])
    print("\nfitted exponents a of cost ~ T^a (least squares on log-log):")
    for name, a in fits.items():
        print(f"  {name:<24} a = {a:.2f}")
        rows.add("scaling", name.replace(" ", "-"), torch.float32, "fit", D, "exponent", a)
    return fits


def bench_cpu_graph(rows, sizes, H=4, C=32, smoke=False):
    from torch_geometric.nn import GATConv

    ms = timer("cpu", smoke)
    print(f"\n[cpu] GAT layer fwd+bwd, fp32, fan-in 2 AIG graphs, H={H}, C={C}: gat_attention reference vs GATConv")
    for N in sizes:
        ei = aig_graph(N)
        ei = torch.cat([ei, torch.arange(N).repeat(2, 1)], 1)  # self loops, given to both
        conv = GATConv(H * C, C, heads=H, add_self_loops=False)
        x = torch.randn(N, H * C, requires_grad=True)
        layout = kernels.graph_layout(ei, N, N)
        ours = lambda: (kernels.gat_attention(conv.lin(x).view(N, H, C), None, conv.att_src, conv.att_dst, layout)
                        .reshape(N, -1) + conv.bias).sum().backward()  # noqa: E731
        pyg = lambda: conv(x, ei).sum().backward()  # noqa: E731
        E = ei.shape[1]
        for name, fn in [("gat_attention-ref", ours), ("pyg-GATConv", pyg)]:
            t = ms(fn)
            rows.add("graph", name, torch.float32, N, C, "time_ms", t)
            rows.add("graph", name, torch.float32, N, C, "edges_per_s", E / (t / 1e3))


# ----------------------------------------------------------------------------------------
# GPU suite (also runs with --smoke on CPU under TRITON_INTERPRET=1)
# ----------------------------------------------------------------------------------------


class _TritonAttention(torch.autograd.Function):
    """The Triton launchers behind autograd, for CPU tensors under the interpreter (on CUDA
    the benchmark calls the public :func:`kernels.attention`, which launches the same)."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        out, lse = _triton_attention_fwd(q, k, v, None, causal, q.shape[-1] ** -0.5)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv, _ = _triton_attention_bwd(do, q, k, v, None, out, lse, ctx.causal, q.shape[-1] ** -0.5, False)
        return dq, dk, dv, None


def _ours_attention(q, k, v, causal):
    if q.is_cuda:
        return kernels.attention(q, k, v, causal=causal)
    return _TritonAttention.apply(q, k, v, causal)


def _ours_hip(q, k, v, **kw):
    if q.is_cuda:
        return kernels.hip_attention(q, k, v, **kw)
    sel = {k_: kw[k_] for k_ in ("block_q", "block_stride_q", "block_k", "mask_k", "sink", "window", "causal")}
    tree, geo = _triton_hip_tree(q, k, **sel)
    return _triton_block_sparse_attention(q, k, v, _assemble(tree, geo), block_q=kw["block_q"], block_k=kw["block_k"],
                                          causal=True, scale=q.shape[-1] ** -0.5)


def _competitors(device, causal, T, smoke):
    """SDPA-flash and FlexAttention callables, where they are available on this device."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional
    out = {}
    if device == "cuda":
        def sdpa_flash(q, k, v):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out["sdpa-flash"] = sdpa_flash
    else:
        out["sdpa"] = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        block_mask = create_block_mask(lambda b, h, i, j: i >= j, None, None, T, T, device=device) if causal else None
        flex = flex_attention if (smoke or device != "cuda") else torch.compile(flex_attention)

        def flex_fn(q, k, v):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return flex(q, k, v, block_mask=block_mask)
        out["flex"] = flex_fn
    except Exception as e:  # pragma: no cover - depends on the torch build
        print(f"  FlexAttention unavailable: {e}")
    return out


def bench_gpu_attention(rows, device, dtype, sizes, dims, B, H, smoke, causal=True):
    ms = timer(device, smoke)
    print(f"\n[{device}] attention {dtype}, causal={causal}, B={B}, H={H}: TFLOP/s (fwd, bwd)")
    ratios = {}
    for D in dims:
        for T in sizes:
            q, k, v = (torch.randn(B, H, T, D, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
            do = torch.randn_like(q)
            fwd_flops = 4.0 * B * H * T * T * D * (0.5 if causal else 1.0)
            methods = {"kernels.attention": lambda q, k, v: _ours_attention(q, k, v, causal)}
            methods.update(_competitors(device, causal, T, smoke))
            res = {}
            for name, fn in methods.items():
                for phase, flops in (("fwd", fwd_flops), ("bwd", 2.5 * fwd_flops)):
                    try:  # one untimed call first: torch.compile / autotuning happen there
                        if phase == "fwd":
                            fn(q, k, v)
                            t = ms(lambda: fn(q, k, v))
                        else:
                            o = fn(q, k, v)
                            torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
                            t = ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
                    except Exception as e:  # a backend that does not support this shape / device
                        print(f"  {name} {phase} T={T} D={D}: not measured ({type(e).__name__}: {str(e)[:70]})")
                        continue
                    res[(name, phase)] = flops / t * 1e-9
                    rows.add("attention", name, dtype, T, D, f"{phase}_tflops", res[(name, phase)])
            base = "sdpa-flash" if device == "cuda" else "sdpa"
            for phase in ("fwd", "bwd"):
                if (base, phase) in res and ("kernels.attention", phase) in res:
                    ratios[(T, D, phase)] = res[("kernels.attention", phase)] / res[(base, phase)]
                    rows.add("attention", f"ratio-vs-{base}", dtype, T, D, f"{phase}_ratio", ratios[(T, D, phase)])
    return ratios


def bench_gpu_hip(rows, device, dtype, sizes, H, D, smoke, recall_blocks=8):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ms = timer(device, smoke)
    kw = dict(block_q=64, block_stride_q=2, block_k=2, mask_k=512, sink=16, window=256, causal=True)
    if smoke:  # tiny sizes: a budget that still prunes
        kw = dict(block_q=32, block_stride_q=2, block_k=2, mask_k=16, sink=4, window=32, causal=True)
    print(f"\n[{device}] HiP vs dense, {dtype}, B=1, H={H}, D={D}: latency (ms)")
    g = torch.Generator().manual_seed(0)
    lat = []
    for T in sizes:
        q = torch.randn(1, H, T, D, generator=g).to(device, dtype)
        k = smooth_keys(1, H, T, D, g, device=device, dtype=dtype)
        v = torch.randn(1, H, T, D, generator=g).to(device, dtype)

        def dense():
            if device == "cuda":
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        t_dense = ms(dense)
        t_hip = ms(lambda: _ours_hip(q, k, v, **kw))
        rows.add("hip", "dense-sdpa", dtype, T, D, "latency_ms", t_dense)
        rows.add("hip", "hip_attention", dtype, T, D, "latency_ms", t_hip)
        rows.add("hip", "hip_attention", dtype, T, D, "speedup", t_dense / t_hip)
        lat.append((T, t_dense, t_hip))
    # break-even: first T where HiP is faster, interpolated in log-log between sizes
    be = None
    for (t0, d0, h0), (t1, d1, h1) in zip(lat, lat[1:]):
        if h0 >= d0 and h1 < d1:
            r0, r1 = math.log(h0 / d0), math.log(h1 / d1)
            be = math.exp(math.log(t0) + (math.log(t1) - math.log(t0)) * r0 / (r0 - r1))
    if lat and lat[0][2] < lat[0][1]:
        be = f"<= {lat[0][0]}"
    elif be is None:
        be = f"> {lat[-1][0]}"
    rows.add("hip", "hip_attention", dtype, "break-even", D, "T", be if isinstance(be, str) else round(be))
    # recall of the oracle's top-n blocks at the largest T, on a sample of late query blocks
    T = sizes[-1]
    q = torch.randn(1, H, T, D, generator=g).to(device, dtype)
    k = smooth_keys(1, H, T, D, g, device=device, dtype=dtype)
    blocks = kernels.hip_select(q, k, **kw) if q.is_cuda else _assemble(*_triton_hip_tree(q, k, **kw))
    NQB = blocks.shape[2]
    sample = torch.linspace(NQB // 2, NQB - 1, min(recall_blocks, NQB - NQB // 2)).long()
    oracle = oracle_select(q, k, sample, **kw)
    n = kw["mask_k"] // kw["block_k"]
    hits = [len(set(oracle[0, h, r].tolist()) - {-1} & set(blocks[0, h, qb].tolist())) / n
            for h in range(H) for r, qb in enumerate(sample.tolist())]
    recall = sum(hits) / len(hits)
    rows.add("hip", "hip_attention", dtype, T, D, "topk_recall", recall)
    return lat, be, recall


class _TritonGAT(torch.autograd.Function):
    """gat_attention's op through the Triton launchers (CPU interpreter path of the bench)."""

    @staticmethod
    def forward(ctx, a_dst, a_src, x, layout):
        out, lse = _triton_graph_fwd(a_dst, a_src, x, None, layout.rowptr, layout.col, 1.0, 0.2, True)
        ctx.save_for_backward(a_dst, a_src, x, out, lse)
        ctx.layout = layout
        return out

    @staticmethod
    def backward(ctx, do):
        a_dst, a_src, x, out, lse = ctx.saved_tensors
        lay = ctx.layout
        dq, dk, dv, _ = _triton_graph_bwd(do, a_dst, a_src, x, None, out, lse, lay.rowptr, lay.col, lay.dst,
                                          lay.colptr, lay.csc_eid, 1.0, 0.2, True, False)
        return dq, dk, dv, None


def bench_gpu_graph(rows, device, sizes, H=4, C=32, smoke=False):
    from torch_geometric.nn import GATConv

    ms = timer(device, smoke)
    print(f"\n[{device}] GAT layer fwd+bwd, fp32, AIG graphs (fan-in 2), H={H}, C={C}: edges/s, peak memory")
    res = {}
    for N in sizes:
        ei = aig_graph(N, device=device)
        ei = torch.cat([ei, torch.arange(N, device=device).repeat(2, 1)], 1)  # self loops, given to both
        E = ei.shape[1]
        conv = GATConv(H * C, C, heads=H, add_self_loops=False).to(device)
        x = torch.randn(N, H * C, device=device, requires_grad=True)
        layout = kernels.graph_layout(ei, N, N)  # built once per graph, like a cached adjacency
        t_layout = ms(lambda: kernels.graph_layout(ei, N, N))

        def ours():
            xp = conv.lin(x).view(N, H, C)
            if device == "cuda":
                out = kernels.gat_attention(xp, None, conv.att_src, conv.att_dst, layout)
            else:
                a_src = (xp * conv.att_src).sum(-1, keepdim=True)
                a_dst = (xp * conv.att_dst).sum(-1, keepdim=True)
                out = _TritonGAT.apply(a_dst, a_src, xp, layout)
            (out.reshape(N, -1) + conv.bias).sum().backward()

        def pyg():
            conv(x, ei).sum().backward()

        for name, fn in [("gat_attention", ours), ("pyg-GATConv", pyg)]:
            t = ms(fn)
            peak = float("nan")
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                fn()
                torch.cuda.synchronize()
                peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            res[(N, name)] = (E / (t / 1e3), peak)
            rows.add("graph", name, torch.float32, N, C, "edges_per_s", E / (t / 1e3))
            rows.add("graph", name, torch.float32, N, C, "peak_mem_mib", peak)
        rows.add("graph", "gat_attention", torch.float32, N, C, "layout_ms", t_layout)
        rows.add("graph", "ratio-vs-GATConv", torch.float32, N, C, "speed_ratio",
                 res[(N, "gat_attention")][0] / res[(N, "pyg-GATConv")][0])
        rows.add("graph", "ratio-vs-GATConv", torch.float32, N, C, "memory_ratio",
                 res[(N, "gat_attention")][1] / res[(N, "pyg-GATConv")][1])
    return res


# ----------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------


def _ints(s):
    return [int(float(x)) for x in s.split(",") if x]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="cpu: the references' scaling (and, with --gpu-suite, the GPU suite in the interpreter); "
                        "cuda: the GPU suite. auto: cuda if available")
    p.add_argument("--out", default=None, help="CSV path (default: results/kernels/bench_<device>.csv)")
    p.add_argument("--dense-sizes", type=_ints, default=[512, 1024, 2048, 4096], help="CPU dense T values")
    p.add_argument("--hip-sizes", type=_ints, default=None,
                   help="HiP T values (default: CPU 2048..16384; GPU 8192..131072)")
    p.add_argument("--attn-sizes", type=_ints, default=[1024, 2048, 4096, 8192, 16384], help="GPU attention T values")
    p.add_argument("--head-dims", type=_ints, default=[64, 128], help="GPU attention head dims")
    p.add_argument("--graph-sizes", type=_ints, default=None, help="graph node counts (default: CPU 1e4,3e4; GPU 1e5,3e5,1e6)")
    p.add_argument("--gpu-suite", action="store_true", help="on CPU: also run the GPU suite (needs TRITON_INTERPRET=1)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes everywhere (checks the code path, not speed)")
    args = p.parse_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    rows = Rows(device)
    out = args.out or f"results/kernels/bench_{device}{'_smoke' if args.smoke else ''}.csv"
    print(f"kernels.bench on {device} ({torch.cuda.get_device_name() if device == 'cuda' else os.cpu_count()} "
          f"{'' if device == 'cuda' else 'cores'}), torch {torch.__version__}")
    summary = []
    if device == "cpu":
        dense = [128, 256] if args.smoke else args.dense_sizes
        hip = [1024, 1536] if args.smoke else (args.hip_sizes or [2048, 4096, 8192, 16384])
        fits = bench_cpu_scaling(rows, dense, hip, D=32 if args.smoke else 64, smoke=args.smoke)
        bench_cpu_graph(rows, [300] if args.smoke else (args.graph_sizes or [10_000, 30_000]), smoke=args.smoke)
        summary += ["CPU exponents: " + ", ".join(f"{k} {v:.2f}" for k, v in fits.items())]
    if device == "cuda" or args.gpu_suite:
        smoke = args.smoke or device == "cpu"
        dtype = torch.bfloat16 if device == "cuda" else torch.float32  # the interpreter mis-computes bf16 dots
        ratios = bench_gpu_attention(rows, device, dtype, [48] if smoke else args.attn_sizes,
                                     [16] if smoke else args.head_dims, B=1 if smoke else 4, H=2 if smoke else 16,
                                     smoke=smoke)
        hip_sizes = [256] if smoke else (args.hip_sizes or [8192, 16384, 32768, 65536, 131072])
        lat, be, recall = bench_gpu_hip(rows, device, dtype, hip_sizes, H=2 if smoke else 8, D=16 if smoke else 128,
                                        smoke=smoke)
        gres = bench_gpu_graph(rows, device, [200] if smoke else (args.graph_sizes or [100_000, 300_000, 1_000_000]),
                               H=2 if smoke else 4, C=8 if smoke else 32, smoke=smoke)
        base = "SDPA-flash" if device == "cuda" else "SDPA (CPU)"
        for phase in ("fwd", "bwd"):
            got = [f"T={T} D={D}: {r:.2f}" for (T, D, ph), r in ratios.items() if ph == phase]
            if got:
                summary.append(f"attention {phase} ratio vs {base}" + (" (target >= 1.0)" if phase == "fwd" else "")
                               + ": " + ", ".join(got))
        if lat:
            T, d, h = lat[-1]
            summary.append(f"HiP speedup at T={T}: {d / h:.2f}x (target >= 5x), top-k recall {recall:.2f} "
                           f"(target >= 0.9), break-even T {be if isinstance(be, str) else round(be)}")
        for N in sorted({n for n, _ in gres}):
            (s0, m0), (s1, m1) = gres[(N, "gat_attention")], gres[(N, "pyg-GATConv")]
            summary.append(f"graph N={N}: speed {s0 / s1:.2f}x GATConv (target >= 3x), memory {m0 / m1:.2f}x "
                           f"(target <= 0.5x)")
        if device != "cuda":
            summary.append("GPU suite ran on CPU in the Triton interpreter: its timings are not GPU figures")
    rows.write(out)
    print("\nsummary (" + device + "):")
    for line in summary:
        print("  " + line)
    return rows


if __name__ == "__main__":
    main()
