"""Benchmarks of the kernels: ``python -m kernels.bench [--device cpu|cuda] [--out PATH]``.

CPU (the references): time and number of ``q . k`` scores of dense attention and of HiP
against T, with the fitted exponents of ``T^a`` (dense: 2; HiP: about 1, i.e.
``T log T``), and graph attention against PyG ``GATConv``.

GPU (bf16, one run of a few minutes):

* ``attention`` forward and backward TFLOP/s against SDPA (flash backend; memory-efficient
  where there is a bias) and FlexAttention (compiled once per process, block masks once per
  shape), T = 1k..16k, D = 64 and 128: causal, non-causal, grouped-query (Hkv = Hq / 4),
  additive bias, and decoding (Tq = 1). FLOPs as in Triton's tutorial: forward
  ``4 B H D x (visible scores)`` (two matmuls), i.e. ``4 B H T^2 D``, about halved when
  causal; backward 2.5x the forward (five matmuls). Every method's output and gradients
  are checked against the fp32 reference (one batch element and head group) before it is
  timed: a wrong kernel fails the benchmark instead of being reported fast;
* HiP (select + block-sparse attention) latency against dense SDPA-flash, T = 8k..128k,
  the break-even T, and HiP's top-k recall at the largest T (synthetic keys with locality);
* graph attention (fwd + bwd) edges/s and peak memory on AIG-shaped graphs (every node has
  fan-in 2), 1e5..1e6 nodes: the GAT layer against ``GATConv`` and dot-product attention
  against ``TransformerConv``, each checked against PyG's output and input gradient first.

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
    def forward(ctx, q, k, v, bias, causal):
        out, lse = _triton_attention_fwd(q, k, v, bias, causal, q.shape[-1] ** -0.5)
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, bias, out, lse = ctx.saved_tensors
        dq, dk, dv, _ = _triton_attention_bwd(do, q, k, v, bias, out, lse, ctx.causal, q.shape[-1] ** -0.5, False)
        return dq, dk, dv, None, None


def _ours_attention(q, k, v, causal, bias=None):
    if q.is_cuda:
        return kernels.attention(q, k, v, causal=causal, bias=bias)
    return _TritonAttention.apply(q, k, v, bias, causal)


def _ours_hip(q, k, v, **kw):
    if q.is_cuda:
        return kernels.hip_attention(q, k, v, **kw)
    sel = {k_: kw[k_] for k_ in ("block_q", "block_stride_q", "block_k", "mask_k", "sink", "window", "causal")}
    tree, geo = _triton_hip_tree(q, k, **sel)
    return _triton_block_sparse_attention(q, k, v, _assemble(tree, geo), block_q=kw["block_q"], block_k=kw["block_k"],
                                          causal=True, scale=q.shape[-1] ** -0.5)


# FlexAttention: compiled once for the process (not per call or per size); its block masks
# are built once per (Tq, Tk, causal) and reused by every head dim, dtype and batch.
_FLEX = {}


def _flex(device, smoke):
    if "fn" not in _FLEX:
        from torch.nn.attention.flex_attention import flex_attention

        if not smoke and device == "cuda":
            # one compiled function for the whole run; each new shape adds a graph to its cache,
            # so the cache must hold every (family, T, D, dtype) of the grid
            import torch._dynamo

            for knob in ("recompile_limit", "cache_size_limit"):
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 256))
        _FLEX["fn"] = flex_attention if (smoke or device != "cuda") else torch.compile(flex_attention)
    return _FLEX["fn"]


def _flex_block_mask(Tq, Tk, causal, device):
    from torch.nn.attention.flex_attention import create_block_mask

    key = (Tq, Tk, causal, device)
    if key not in _FLEX:
        offset = Tk - Tq  # bottom-right causal, as kernels.attention
        _FLEX[key] = create_block_mask(lambda b, h, i, j: j <= i + offset, None, None, Tq, Tk, device=device)
    return _FLEX[key]


def _competitors(device, causal, Tq, Tk, gqa, bias, smoke):
    """SDPA (flash backend where it applies, else memory-efficient) and FlexAttention callables."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional
    out = {}
    if device == "cuda":
        # flash takes no additive bias; the memory-efficient backend does
        name, backend = ("sdpa-flash", SDPBackend.FLASH_ATTENTION) if bias is None else \
            ("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION)
        mask = None
        if causal and Tq != Tk:
            from torch.nn.attention.bias import causal_lower_right

            mask = causal_lower_right(Tq, Tk)

        def sdpa(q, k, v):
            with sdpa_kernel(backend):
                if mask is not None:
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal, enable_gqa=gqa)
        out[name] = sdpa
    elif not (causal and Tq != Tk):
        out["sdpa"] = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal,
                                                                     enable_gqa=gqa)
    try:
        flex = _flex(device, smoke)
        block_mask = _flex_block_mask(Tq, Tk, causal, device) if causal else None
        def add_bias(score, b, h, i, j):
            return score + bias[0, 0, i, j]
        score_mod = add_bias if bias is not None else None

        def flex_fn(q, k, v):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return flex(q, k, v, block_mask=block_mask, score_mod=score_mod, enable_gqa=gqa)
        out["flex"] = flex_fn
    except Exception as e:  # pragma: no cover - depends on the torch build
        print(f"  FlexAttention unavailable: {e}")
    return out


# tolerances of the benchmark's correctness checks against the fp32 reference
CHECK_TOL = {torch.float32: 2e-2, torch.float16: 2e-2, torch.bfloat16: 6e-2}  # fp32: TF32 on CUDA


def _check_close(name, got, ref, dtype):
    """Assert ``got`` ~ ``ref`` (max abs error relative to ref's scale); returns the error."""
    got, ref = got.detach().float(), ref.detach().float()
    err = float((got - ref).abs().max()) / (1.0 + float(ref.abs().max()))
    if not math.isfinite(err) or err > CHECK_TOL[dtype]:
        raise AssertionError(f"bench correctness: {name}: max error {err:.3g} > {CHECK_TOL[dtype]} (relative "
                             "to the reference's scale)")
    return err


def _reference_slice(q, k, v, bias, causal, do):
    """Reference output and gradients for batch 0 and the first key/value head's query heads:
    enough to check every method at sizes where the full (B, H, T, T) reference would not fit."""
    group = q.shape[1] // k.shape[1]
    leaves = [q[:1, :group].detach().float().requires_grad_(), k[:1, :1].detach().float().requires_grad_(),
              v[:1, :1].detach().float().requires_grad_()]
    b = None if bias is None else bias[:1, :1].float()
    out = kernels.attention_reference(*leaves, causal=causal, bias=b)
    grads = torch.autograd.grad(out, leaves, do[:1, :group].float())
    return out.detach(), grads, group


# (name, causal, kv heads as a fraction of the query heads, bias): the rows of the table
ATTN_FAMILIES = [
    ("causal", True, 1, False),
    ("non-causal", False, 1, False),
    ("causal-gqa4", True, 4, False),  # Hkv = Hq / 4
    ("non-causal-bias", False, 1, True),  # a (1, 1, T, T) additive bias, broadcast over B, H
]


def bench_gpu_attention(rows, device, dtype, sizes, dims, B, H, smoke, families=ATTN_FAMILIES, decode_tk=None):
    """TFLOP/s of fwd and bwd per family, T and D, with every timed method first checked
    (output and gradients) against the fp32 reference on one batch element and head group."""
    ms = timer(device, smoke)
    print(f"\n[{device}] attention {dtype}, B={B}, H={H}: TFLOP/s (fwd, bwd), every method checked against the "
          "reference first")
    ratios = {}
    cases = [(fam, T, T) for fam in families for T in sizes]
    if decode_tk:  # one decoding query against a cache of Tk keys
        cases += [(("decode", True, 4, False), 1, Tk) for Tk in decode_tk]
    for (fam, causal, kv_div, with_bias), Tq, Tk in cases:
        Hkv = max(H // kv_div, 1)
        for D in dims:
            g = torch.Generator().manual_seed(0)
            q = torch.randn(B, H, Tq, D, generator=g).to(device, dtype).requires_grad_()
            k, v = (torch.randn(B, Hkv, Tk, D, generator=g).to(device, dtype).requires_grad_() for _ in range(2))
            bias = torch.randn(1, 1, Tq, Tk, generator=g).to(device, dtype) if with_bias else None
            do = torch.randn_like(q)
            visible = (Tq * Tk - Tq * (Tq - 1) / 2) if causal and Tq == Tk else Tq * Tk  # scores computed
            fwd_flops = 4.0 * B * H * visible * D  # QK^T and PV: 2 * 2 * visible * D
            methods = {"kernels.attention": lambda q, k, v: _ours_attention(q, k, v, causal, bias)}
            methods.update(_competitors(device, causal, Tq, Tk, Hkv != H, bias, smoke))
            ref_out, ref_grads, group = _reference_slice(q, k, v, bias, causal, do)
            res = {}
            for name, fn in methods.items():
                label = f"{name} {fam} Tq={Tq} Tk={Tk} D={D} {dtype}"
                try:  # the check's call also compiles / autotunes, before anything is timed
                    o = fn(q, k, v)
                except Exception as e:  # a backend that does not support this shape / device
                    print(f"  {label}: not measured ({type(e).__name__}: {str(e)[:70]})")
                    continue
                err = _check_close(label + " out", o[:1, :group], ref_out, dtype)
                try:
                    grads = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
                except Exception as e:
                    print(f"  {label}: backward not measured ({type(e).__name__}: {str(e)[:60]})")
                    grads = None
                if grads is not None:
                    for gname, a, r in zip(("dq", "dk", "dv"),
                                           (grads[0][:1, :group], grads[1][:1, :1], grads[2][:1, :1]), ref_grads):
                        err = max(err, _check_close(f"{label} {gname}", a, r, dtype))
                rows.add("attention", f"{name}:{fam}", dtype, f"{Tq}x{Tk}", D, "max_rel_err", err)
                for phase, flops in (("fwd", fwd_flops), ("bwd", 2.5 * fwd_flops)):
                    if phase == "bwd" and grads is None:
                        continue
                    if phase == "fwd":
                        t = ms(lambda: fn(q, k, v))
                    else:
                        t = ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
                    res[(name, phase)] = flops / t * 1e-9
                    rows.add("attention", f"{name}:{fam}", dtype, f"{Tq}x{Tk}", D, f"{phase}_tflops",
                             res[(name, phase)])
            for phase in ("fwd", "bwd"):
                for base in [m for m in methods if m != "kernels.attention"]:
                    if (base, phase) in res and ("kernels.attention", phase) in res:
                        r = res[("kernels.attention", phase)] / res[(base, phase)]
                        ratios[(fam, f"{Tq}x{Tk}", D, phase, base)] = r
                        rows.add("attention", f"ratio-vs-{base}:{fam}", dtype, f"{Tq}x{Tk}", D, f"{phase}_ratio", r)
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

        # checked before timing: HiP's output equals the block-sparse reference over the
        # blocks the reference selection picks (first head; exact ties aside, the same blocks)
        out = _ours_hip(q, k, v, **kw)
        sel = {k_: kw[k_] for k_ in ("block_q", "block_stride_q", "block_k", "mask_k", "sink", "window", "causal")}
        blocks_ref = kernels.hip_select_reference(q[:, :1].float(), k[:, :1].float(), **sel)
        ref = kernels.block_sparse_attention_reference(q[:, :1].float(), k[:, :1].float(), v[:, :1].float(),
                                                       blocks_ref, block_q=kw["block_q"], block_k=kw["block_k"])
        err = _check_close(f"hip_attention T={T} {dtype}", out[:, :1], ref, dtype)
        rows.add("hip", "hip_attention", dtype, T, D, "max_rel_err", err)
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


class _TritonGraph(torch.autograd.Function):
    """The graph op through the Triton launchers (CPU interpreter path of the bench)."""

    @staticmethod
    def forward(ctx, q, k, v, layout, scale, gat):
        out, lse = _triton_graph_fwd(q, k, v, None, layout.rowptr, layout.col, scale, 0.2, gat)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.layout, ctx.scale, ctx.gat = layout, scale, gat
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        lay = ctx.layout
        dq, dk, dv, _ = _triton_graph_bwd(do, q, k, v, None, out, lse, lay.rowptr, lay.col, lay.dst,
                                          lay.colptr, lay.csc_eid, ctx.scale, 0.2, ctx.gat, False)
        return dq, dk, dv, None, None, None


def _pyg_transformer_conv(H, C, device):
    """PyG's TransformerConv without root weight / edge features: exactly graph_attention
    over its own query / key / value projections, with scale 1/sqrt(C)."""
    try:
        from torch_geometric.nn import TransformerConv
    except ImportError:  # pragma: no cover
        return None
    return TransformerConv(H * C, C, heads=H, root_weight=False).to(device)


def bench_gpu_graph(rows, device, sizes, H=4, C=32, smoke=False):
    """GAT layer against PyG GATConv and dot-product graph attention against PyG
    TransformerConv (fwd + bwd), each checked against PyG's output and input gradient first."""
    from torch_geometric.nn import GATConv

    ms = timer(device, smoke)
    print(f"\n[{device}] graph layers fwd+bwd, fp32, AIG graphs (fan-in 2), H={H}, C={C}: edges/s, peak memory")
    res = {}
    for N in sizes:
        ei = aig_graph(N, device=device)
        ei = torch.cat([ei, torch.arange(N, device=device).repeat(2, 1)], 1)  # self loops, given to both
        E = ei.shape[1]
        gat = GATConv(H * C, C, heads=H, add_self_loops=False).to(device)
        tconv = _pyg_transformer_conv(H, C, device)
        x = torch.randn(N, H * C, device=device, requires_grad=True)
        layout = kernels.graph_layout(ei, N, N)  # built once per graph, like a cached adjacency
        t_layout = ms(lambda: kernels.graph_layout(ei, N, N))

        def ours_gat():
            xp = gat.lin(x).view(N, H, C)
            if device == "cuda":
                out = kernels.gat_attention(xp, None, gat.att_src, gat.att_dst, layout)
            else:
                a_src = (xp * gat.att_src).sum(-1, keepdim=True)
                a_dst = (xp * gat.att_dst).sum(-1, keepdim=True)
                out = _TritonGraph.apply(a_dst, a_src, xp, layout, 1.0, True)
            return out.reshape(N, -1) + gat.bias

        def ours_transformer():
            q, k, v = (lin(x).view(N, H, C) for lin in (tconv.lin_query, tconv.lin_key, tconv.lin_value))
            if device == "cuda":
                return kernels.graph_attention(q, k, v, layout).reshape(N, -1)
            return _TritonGraph.apply(q, k, v, layout, C ** -0.5, False).reshape(N, -1)

        pairs = [("gat_attention", ours_gat, "pyg-GATConv", lambda: gat(x, ei))]
        if tconv is not None:
            pairs.append(("graph_attention", ours_transformer, "pyg-TransformerConv", lambda: tconv(x, ei)))
        for ours_name, ours, pyg_name, pyg in pairs:
            # correctness first: output and dL/dx against PyG's layer
            o_ours, o_pyg = ours(), pyg()
            w = torch.randn_like(o_pyg)
            g_ours = torch.autograd.grad((o_ours * w).sum(), x)[0]
            g_pyg = torch.autograd.grad((o_pyg * w).sum(), x)[0]
            err = max(_check_close(f"{ours_name} N={N} out", o_ours, o_pyg, torch.float32),
                      _check_close(f"{ours_name} N={N} dx", g_ours, g_pyg, torch.float32))
            rows.add("graph", ours_name, torch.float32, N, C, "max_rel_err_vs_pyg", err)
            for name, fn in [(ours_name, ours), (pyg_name, pyg)]:
                step = lambda fn=fn: fn().sum().backward()  # noqa: E731
                t = ms(step)
                peak = float("nan")
                if device == "cuda":
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    step()
                    torch.cuda.synchronize()
                    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
                res[(N, name)] = (E / (t / 1e3), peak)
                rows.add("graph", name, torch.float32, N, C, "edges_per_s", E / (t / 1e3))
                rows.add("graph", name, torch.float32, N, C, "peak_mem_mib", peak)
            rows.add("graph", f"ratio-vs-{pyg_name}", torch.float32, N, C, "speed_ratio",
                     res[(N, ours_name)][0] / res[(N, pyg_name)][0])
            rows.add("graph", f"ratio-vs-{pyg_name}", torch.float32, N, C, "memory_ratio",
                     res[(N, ours_name)][1] / res[(N, pyg_name)][1])
        rows.add("graph", "graph_layout", torch.float32, N, C, "layout_ms", t_layout)
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
    p.add_argument("--decode-sizes", type=_ints, default=[4096, 16384],
                   help="GPU attention: key lengths of the decoding rows (Tq = 1, grouped-query)")
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
                                     [16] if smoke else args.head_dims, B=1 if smoke else 4, H=4 if smoke else 16,
                                     smoke=smoke, decode_tk=[40] if smoke else args.decode_sizes)
        hip_sizes = [256] if smoke else (args.hip_sizes or [8192, 16384, 32768, 65536, 131072])
        lat, be, recall = bench_gpu_hip(rows, device, dtype, hip_sizes, H=2 if smoke else 8, D=16 if smoke else 128,
                                        smoke=smoke)
        gres = bench_gpu_graph(rows, device, [200] if smoke else (args.graph_sizes or [100_000, 300_000, 1_000_000]),
                               H=2 if smoke else 4, C=8 if smoke else 32, smoke=smoke)
        for phase in ("fwd", "bwd"):
            for base in sorted({k_[4] for k_ in ratios}):
                got = [f"{fam} T={T} D={D}: {r:.2f}" for (fam, T, D, ph, b), r in ratios.items()
                       if ph == phase and b == base]
                if got:
                    summary.append(f"attention {phase} speed ratio vs {base}"
                                   + (" (target >= 1.0 vs sdpa-flash)" if phase == "fwd" else "") + ": " + ", ".join(got))
        if lat:
            T, d, h = lat[-1]
            summary.append(f"HiP speedup at T={T}: {d / h:.2f}x (target >= 5x), top-k recall {recall:.2f} "
                           f"(target >= 0.9), break-even T {be if isinstance(be, str) else round(be)}")
        for N in sorted({n for n, _ in gres}):
            for ours, pyg in (("gat_attention", "pyg-GATConv"), ("graph_attention", "pyg-TransformerConv")):
                if (N, ours) in gres and (N, pyg) in gres:
                    (s0, m0), (s1, m1) = gres[(N, ours)], gres[(N, pyg)]
                    summary.append(f"graph N={N}: {ours} speed {s0 / s1:.2f}x {pyg} (target >= 3x), memory "
                                   f"{m0 / m1:.2f}x (target <= 0.5x)")
        if device != "cuda":
            summary.append("GPU suite ran on CPU in the Triton interpreter: its timings are not GPU figures")
    rows.write(out)
    print("\nsummary (" + device + "):")
    for line in summary:
        print("  " + line)
    return rows


if __name__ == "__main__":
    main()
