"""Which stages put work on a GPU: run a stage on the CPU as a GPU node would see it, and record it.

The cluster profile sends a job to a GPU node when its rule is of the `gpu` kind (config `resources`), a
declaration. Whether the stage really uses the GPU depends on its code: some pick CUDA when
``torch.cuda.is_available()``, some follow a config key (``hip.device``), some never leave the CPU. A
declaration that disagrees with the code either wastes a GPU or sends a CUDA stage to a CPU node, where it fails
(issue 54). This probe finds what the code does, without a GPU:

* ``torch.cuda.is_available()`` answers True, as on a GPU node;
* a :class:`~torch.overrides.TorchFunctionMode` sees every torch call; each one that names a CUDA device
  (``.to("cuda")``, ``.cuda()``, ``torch.zeros(..., device="cuda")``, a module's ``.to(device)``, which calls
  ``Tensor.to`` per parameter) is recorded and run on the CPU instead;
* the few ``torch.cuda`` calls that need a device (synchronize, memory statistics, events) do nothing.

So the stage runs to its end on the CPU, computing what it computes there, and the record says whether it asked
for CUDA, with the first place it did. ``papers.common.runner`` turns the probe on for a job when the environment
variable ``REPRO_CUDA_PROBE`` names a folder; the job appends ``{"rule", "cuda", "where"}`` to
``<folder>/<rule>.jsonl``. tests/workflow/test_gpu_routing.py runs the smoke DAG's stages that way, with the
full scale's device settings, and compares the records with each rule's kind.
"""
from __future__ import annotations

import contextlib
import json
import os
import traceback
from pathlib import Path

PROBE_ENV = "REPRO_CUDA_PROBE"

# torch.cuda functions that need a device; on the probe they return what an idle GPU would.
_IDLE_GPU = {"synchronize": None, "memory_allocated": 0, "max_memory_allocated": 0, "reset_peak_memory_stats": None,
             "empty_cache": None, "get_device_name": "probe (CPU standing in for a GPU)", "device_count": 1,
             "current_device": 0}


def _is_cuda(value) -> bool:
    import torch

    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value.split(":")[0] == "cuda"
    return False


class _CpuEvent:
    """Stands in for torch.cuda.Event: timing falls back to the host clock."""

    def __init__(self, enable_timing: bool = False, **_):
        self.time = None

    def record(self, stream=None) -> None:
        import time

        self.time = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "_CpuEvent") -> float:
        return 1000.0 * (end.time - self.time)


class CudaProbe:
    """Context manager: inside it, CUDA placements are recorded and kept on the CPU (see the module docstring)."""

    def __init__(self):
        self.cuda = False
        self.where = None

    def _record(self, what: str) -> None:
        if not self.cuda:
            self.cuda = True
            frames = [f for f in traceback.extract_stack() if "/torch/" not in f.filename and f.filename != __file__]
            self.where = f"{what} at {frames[-1].filename}:{frames[-1].lineno}" if frames else what

    def _mode(self):
        import torch
        from torch.overrides import TorchFunctionMode

        probe = self

        class RedirectCuda(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = dict(kwargs or {})
                name = getattr(func, "__name__", str(func))
                if func in (torch.Tensor.cuda, torch.Tensor.pin_memory):
                    probe._record(f"Tensor.{name}()")
                    return args[0]
                if _is_cuda(kwargs.get("device")):
                    probe._record(f"{name}(device=cuda)")
                    kwargs["device"] = "cpu"
                if any(_is_cuda(a) for a in args):
                    probe._record(f"{name}(cuda)")
                    args = tuple("cpu" if _is_cuda(a) else a for a in args)
                return func(*args, **kwargs)

        return RedirectCuda()

    @contextlib.contextmanager
    def _patched_cuda(self):
        import torch

        saved = {name: getattr(torch.cuda, name) for name in (*_IDLE_GPU, "is_available", "Event")}
        try:
            torch.cuda.is_available = lambda: True
            torch.cuda.Event = _CpuEvent
            for name, value in _IDLE_GPU.items():
                setattr(torch.cuda, name, lambda *a, _value=value, **k: _value)
            yield
        finally:
            for name, fn in saved.items():
                setattr(torch.cuda, name, fn)

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(self._patched_cuda())
        self._stack.enter_context(self._mode())
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)


@contextlib.contextmanager
def probe_if_asked(rule: str):
    """Run the body under :class:`CudaProbe` when ``REPRO_CUDA_PROBE`` names a folder, and append its record."""
    folder = os.environ.get(PROBE_ENV)
    if not folder:
        yield
        return
    with CudaProbe() as probe:
        yield
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"{rule}.jsonl", "a") as out:
        out.write(json.dumps({"rule": rule, "cuda": probe.cuda, "where": probe.where}) + "\n")


def read_records(folder: str | Path) -> dict[str, bool]:
    """{rule: whether any of its jobs asked for CUDA} from a probe folder."""
    used = {}
    for path in sorted(Path(folder).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            used[record["rule"]] = used.get(record["rule"], False) or record["cuda"]
    return used
