"""Peak memory and time of a forward pass, against circuit size (the paper's scalability study).

CPU tensors have no allocator statistics in torch, so :class:`PeakMemory` counts them itself: a
``TorchDispatchMode`` that sees every tensor an op creates, adds its storage's bytes when it is
first seen and subtracts them when the storage is freed (a ``weakref.finalize`` on the storage,
whose Python object torch keeps alive exactly as long as the storage). Tensors that existed
before (parameters, the circuit, the preallocated history table) are not counted, so the peak is
that of the activations the pass creates: on a GPU, what ``torch.cuda.max_memory_allocated``
reports above the model and data. Ops inside a fused custom op are hidden from the mode, so the
measurement runs the models on the plain-torch references (every intermediate visible).
"""
from __future__ import annotations

import gc
import time
import weakref

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakMemory(TorchDispatchMode):
    """Live and peak bytes of the tensor storages created inside the ``with`` block."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._seen = set()

    def _free(self, key, nbytes):
        self.live -= nbytes
        self._seen.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                key, nbytes = storage.data_ptr(), storage.nbytes()
                if nbytes == 0 or key in self._seen:
                    continue  # a view or an in-place result: storage already counted
                self._seen.add(key)
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                weakref.finalize(storage, self._free, key, nbytes)
        return out


def forward_cost(model, ex, *, partitioned: bool, track_memory: bool = True):
    """(peak activation bytes, seconds) of one forward pass with autograd on, as in training.

    The partitioned pass gets its history table preallocated (the official code keeps it in host
    memory); its size, 2 N d floats, is reported beside the peak. Time is measured in a separate
    pass without the memory tracker. On CUDA (model and example there) the peak is what
    ``torch.cuda.max_memory_allocated`` reports above what was allocated before the pass; on the CPU it
    is :class:`PeakMemory`'s count of the storages the pass creates.
    """
    model.eval()
    model.set_fused(False)
    N, d = ex.plan.num_nodes, model.d
    cuda = ex.pi_vec.device.type == "cuda"
    dev = ex.pi_vec.device
    history = (torch.zeros(N, d, device=dev), torch.zeros(N, d, device=dev)) if partitioned else None
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.embed(ex.plan, ex.pi_vec, partitioned=partitioned, history=history)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    del out
    if not track_memory:
        model.set_fused(True)
        return float("nan"), seconds
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = model.embed(ex.plan, ex.pi_vec, partitioned=partitioned, history=history)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del out
    else:
        with PeakMemory() as pm:
            out = model.embed(ex.plan, ex.pi_vec, partitioned=partitioned, history=history)
            del out
        peak = pm.peak
    model.set_fused(True)
    return peak, seconds


def planted_peaks(n: int, width: int) -> dict:
    """The memory study's positive control: peaks that grow with `n` by construction, counted by the same
    :class:`PeakMemory` as the forward passes. ``linear``: a pass whose activations are (n, width);
    ``constant``: one whose activations are (1024, width) whatever n. Fitted against n, their exponents must
    come out at 1 and 0, or the counter and the fit could not tell a linear peak from a flat one."""
    out = {}
    for kind, rows in (("linear", n), ("constant", 1024)):
        with PeakMemory() as pm:
            h = torch.ones(rows, width) * 2.0  # two (rows, width) storages live at once
            del h
        out[kind] = pm.peak
    return out


def allocator_peak(fn) -> int:
    """Peak bytes the CPU allocator holds while ``fn()`` runs, above what it held before.

    Read from the allocator's own trace (``torch.profiler`` with ``profile_memory=True``): every
    allocation is charged to the op that made it (its self memory), every free is a ``[memory]``
    event; their running sum in time order peaks where the pass held most. Unlike
    :class:`PeakMemory` it sees inside fused ops and the Triton launcher (the interpreter runs the
    kernel on CPU tensors); a temporary allocated and freed inside one aten op is netted out, in
    both arms alike.
    """
    from torch.profiler import ProfilerActivity, profile

    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
        del out
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    live = peak = 0
    for e in events:
        live += e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
        peak = max(peak, live)
    return int(peak)


def gat_kernel_memory(layer, sub, *, seed: int = 0) -> dict:
    """Claim (c) without a GPU: the bytes one GAT attention of a refinement layer allocates over a
    mini-batch's cone edges, fused against unfused, each counted by :func:`allocator_peak`.

    Fused: the Triton kernel of ``kernels.gat_attention`` (``_triton_graph_fwd``, run by Triton's
    interpreter on CPU tensors, so ``TRITON_INTERPRET=1`` must be set before ``kernels`` is
    imported) with the two per-node score projections it needs; unfused:
    ``kernels.gat_attention_reference``, which materialises per-edge scores and messages. The
    control counts the unfused path twice (an A/A comparison: no reduction can appear).
    """
    import kernels
    from kernels.graph import _triton_graph_fwd  # the kernel itself: on CPU the public op runs the reference

    if not kernels._dispatch.interpreting():
        raise RuntimeError("gat_kernel_memory needs TRITON_INTERPRET=1 set before `import kernels`")
    edges, layout = (sub.att_io, sub.att_io_layout) if layer.cone == "fanin_fanout" else (sub.att, sub.att_layout)
    n = layout.rowptr.numel() - 1
    H, C = layer.heads, layer.att_src.shape[-1]
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, H, C, generator=g)  # the layer's projected features lin(x).view(n, H, C)
    with torch.no_grad():
        def fused():
            a_src = (h * layer.att_src).sum(-1, keepdim=True)
            a_dst = (h * layer.att_dst).sum(-1, keepdim=True)
            return _triton_graph_fwd(a_dst, a_src, h, None, layout.rowptr, layout.col, 1.0, 0.2, True)[0]

        def unfused():
            return kernels.gat_attention_reference(h, None, layer.att_src, layer.att_dst, edges)

        err = float((fused() - unfused()).abs().max())
        return {"nodes": int(n), "edges": int(edges.shape[1]), "heads": H, "channels": C, "max_abs_diff": err,
                "fused_bytes": allocator_peak(fused), "unfused_bytes": allocator_peak(unfused),
                "control_bytes": allocator_peak(unfused)}


def fused_vs_unfused(model, ex, *, device: str, repeats: int):
    """Claims (c), (d) on a GPU: inference time and peak memory of the forward pass with the fused
    graph-attention kernel (``kernels.gat_attention``, Triton on CUDA) against the unfused torch
    reference, and the unfused path once more as the A/A control.

    On CUDA: median of `repeats` timed passes (CUDA events) after a warm-up, and
    ``torch.cuda.max_memory_allocated`` above what was allocated before the pass. Elsewhere the
    same passes run (the code path is exercised) but every arm runs the reference. Each row also holds
    the largest |difference| of the fused pass's function embeddings from the unfused pass's.
    """
    model = model.to(device).eval()
    ex = ex.to(device)
    rows, hf = [], {}
    for arm, fused in (("fused", True), ("unfused", False), ("control", False)):
        model.set_fused(fused)
        with torch.no_grad():
            hf[arm] = model.embed(ex.plan, ex.pi_vec)[1].float().cpu()  # warm-up (Triton compilation, allocator)
            times = []
            for _ in range(repeats):
                if device == "cuda":
                    torch.cuda.synchronize()
                    base = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    out = model.embed(ex.plan, ex.pi_vec)
                    end.record()
                    torch.cuda.synchronize()
                    times.append(start.elapsed_time(end) / 1e3)
                    peak = torch.cuda.max_memory_allocated() - base
                else:
                    t0 = time.perf_counter()
                    with PeakMemory() as pm:
                        out = model.embed(ex.plan, ex.pi_vec)
                    times.append(time.perf_counter() - t0)
                    peak = pm.peak
                del out
        rows.append({"arm": arm, "fused": fused, "seconds": float(np.median(times)), "peak_bytes": int(peak)})
    model.set_fused(True)
    diff = float((hf["fused"] - hf["unfused"]).abs().max())  # the fused pass must compute the same embeddings
    return [{**r, "max_abs_diff": diff} for r in rows]
