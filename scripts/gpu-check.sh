#!/usr/bin/env bash
# The kernels' GPU check, in one run of under 5 minutes on a CUDA machine:
#   scripts/gpu-check.sh OUT_DIR        (or: make gpu-check GPU_CHECK_OUT=OUT_DIR)
# 1. the kernel tests compiled for the GPU (TRITON_INTERPRET unset: the CUDA tests run, the
#    interpreter-sized ones run compiled);
# 2. python -m kernels.gpu_check: forward and backward of every op against its reference in
#    bf16 / fp16 / fp32 at D = 64 and 128 with grouped-query heads, bias, Tq != Tk, and
#    torch.library.opcheck on CUDA tensors;
# 3. python -m kernels.bench on a reduced grid: speed ratios against SDPA, FlexAttention and
#    PyG (GATConv, TransformerConv), each timed method checked against the reference first.
# Everything lands in OUT_DIR (pytest.txt, gpu_check.csv/.txt, bench_cuda.csv/.txt, env.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu-check.sh OUT_DIR}
PY=${PYTHON:-.venv/bin/python}
unset TRITON_INTERPRET
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-check: no CUDA device visible to torch ($PY); this check needs a GPU machine. Nothing was run." >&2
    exit 2
fi
mkdir -p "$OUT"
"$PY" -c 'import torch, triton; print(torch.cuda.get_device_name(), "| torch", torch.__version__, "| triton", triton.__version__, "| CUDA", torch.version.cuda)' | tee "$OUT/env.txt"
status=0
echo "== 1/3 kernel tests, compiled (limit 120 s)"
timeout 120 "$PY" -m pytest -q tests/kernels -p no:cacheprovider 2>&1 | tee "$OUT/pytest.txt" || status=1
echo "== 2/3 values and gradients against the references, opcheck on CUDA (limit 60 s)"
timeout 60 "$PY" -m kernels.gpu_check "$OUT" 2>&1 | tee "$OUT/gpu_check.txt" || status=1
echo "== 3/3 benchmark: ratios against SDPA, FlexAttention, PyG (limit 100 s)"
timeout 100 "$PY" -m kernels.bench --device cuda --attn-sizes 4096 --head-dims 64,128 --decode-sizes 8192 \
    --hip-sizes 16384,65536 --graph-sizes 100000,1000000 --out "$OUT/bench_cuda.csv" 2>&1 | tee "$OUT/bench_cuda.txt" \
    || status=1
echo "== summary (figures in $OUT)"
sed -n '/^summary/,$p' "$OUT/bench_cuda.txt" || true
tail -n 1 "$OUT/gpu_check.txt" || true
tail -n 1 "$OUT/pytest.txt" || true
exit $status
