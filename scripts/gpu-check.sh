#!/usr/bin/env bash
# The kernels' GPU check, one run on a CUDA machine, cold Triton cache included:
#   scripts/gpu-check.sh OUT_DIR        (or: make gpu-check GPU_CHECK_OUT=OUT_DIR)
# 0. python -m kernels.compile_report: the package's launch variants compiled for this GPU's
#    architecture (registers, spills, compile CPU-s per variant -> compile_report.csv). The
#    slowest variant's compile time sets the limits of steps 1-3 (below).
# 1. the kernel tests compiled (TRITON_INTERPRET unset: the CUDA cases run, the tile tests run at
#    4 warps), KERNELS_AUTOTUNE=0 (correctness, one configuration per shape), each outcome logged as it
#    ends (pytest -v) and each test under LIMIT_PER_TEST seconds where pytest-timeout is installed;
# 2. python -m kernels.gpu_check, KERNELS_AUTOTUNE=0: forward and backward of every op against
#    its reference in bf16 / fp16 / fp32 at D = 64 and 128 with grouped-query heads, bias,
#    Tq != Tk, and torch.library.opcheck on CUDA tensors; gpu_check.csv is written row by row;
# 3. python -m kernels.bench on a reduced grid, autotuned: speed ratios against SDPA,
#    FlexAttention and PyG, each timed method checked against the reference first;
# 4. python -m kernels.gpu_check --figures: OUT_DIR/figures.md, built from the files above only.
#    Paste it into kernels/README.md, section "GPU figures" (the marked place).
# Every step runs even if an earlier one failed; the exit status is 1 if any failed, 2 without CUDA.
#
# Time limits: a cold cache pays one compile per launch variant, so a step's limit is
#   (variants it compiles) x (slowest compile in step 0, CPU-s) x 2 + (its run time),
# with the variant counts below. On the CPU of this repository's development machine (2 shared
# cores, load ~10) `kernels.compile_report` measured 0.3-2.7 CPU-s per attention variant at 4-8
# warps and 0.3-0.5 per graph variant as launched (kernels/compile_report_sm90.csv), 14.5 CPU-s for
# a graph kernel forced to 64 rows at 8 heads x 64 (where it spills 14 KB), against ~110 CPU-s for
# the 1-warp D = 256 variant the tests used to compile (issue 54's review).
# Variant counts (upper bounds): tests, N_TEST_VARIANTS: distinct (kernel, constexprs, dtypes)
# launched by tests/kernels, counted in the interpreter (181), plus about 30 for the CUDA-only
# tests (an estimate), x 2 for the JIT's divisibility-by-16 specialisations of lengths; gpu_check, N_CHECK_VARIANTS: 3 dtypes x 2 head sizes x (5 attention
# cases x 3 kernels + HiP 2 + graph 3) + opcheck 12; bench, N_BENCH_VARIANTS: every autotune
# candidate of 5 attention families x 2 head sizes (7 forward, 7 x 2 backward kernels) + HiP and
# graph 20. Override any limit with LIMIT_COMPILE / LIMIT_TESTS / LIMIT_CHECK / LIMIT_BENCH (seconds).
# Step 1 runs the tests in PYTEST_WORKERS processes where pytest-xdist is installed (default: up to 8, one
# per core): a cold cache's compiles then run side by side (the one GPU is shared; the tests are small), and
# the tests' limit is divided by the workers.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu-check.sh OUT_DIR}
PY=${PYTHON:-.venv/bin/python}
unset TRITON_INTERPRET
N_TEST_VARIANTS=${N_TEST_VARIANTS:-420}
N_CHECK_VARIANTS=${N_CHECK_VARIANTS:-132}
N_BENCH_VARIANTS=${N_BENCH_VARIANTS:-230}
DEFAULT_COMPILE_S=15  # the slowest variant measured on the development machine (see above)

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-check: no CUDA device visible to torch ($PY); this check needs a GPU machine. Nothing was run." >&2
    exit 2
fi
mkdir -p "$OUT"
"$PY" -c 'import torch, triton; print(torch.cuda.get_device_name(), "| torch", torch.__version__, "| triton", triton.__version__, "| CUDA", torch.version.cuda)' | tee "$OUT/env.txt"
ARCH=$("$PY" -c 'import torch; m, n = torch.cuda.get_device_capability(); print(10 * m + n)')
echo "step,status,wall_s,limit_s" > "$OUT/steps.csv"
status=0

# run NAME LIMIT LOG CMD...: one step under `timeout`, its outcome appended to steps.csv as it ends
run() {
    local name=$1 limit=$2 log=$3; shift 3
    echo "== $name (limit ${limit} s)"
    local t0=$SECONDS rc
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$log"
    rc=${PIPESTATUS[0]}
    local st=ok
    if [ "$rc" -eq 124 ]; then st=timeout; elif [ "$rc" -ne 0 ]; then st="failed ($rc)"; fi
    [ "$st" = ok ] || status=1
    echo "$name,$st,$((SECONDS - t0)),$limit" >> "$OUT/steps.csv"
}

run "0/4 compile report (sm_$ARCH)" "${LIMIT_COMPILE:-900}" compile_report.txt \
    "$PY" -m kernels.compile_report --arch "$ARCH" --head-dims 64,128 --out "$OUT/compile_report.csv"
COMPILE_S=$("$PY" - "$OUT/compile_report.csv" "$DEFAULT_COMPILE_S" <<'EOF'
import csv, math, sys
try:
    times = [float(r["compile_cpu_s"]) for r in csv.DictReader(open(sys.argv[1]))]
except (OSError, KeyError, ValueError):
    times = []
print(math.ceil(max(times)) if times else sys.argv[2])
EOF
)
echo "slowest compile: ${COMPILE_S} CPU-s per variant"
XDIST=()
WORKERS=1
if "$PY" -c 'import xdist' 2>/dev/null; then
    CORES=$(nproc 2>/dev/null || echo 1)
    WORKERS=${PYTEST_WORKERS:-$(( CORES < 8 ? CORES : 8 ))}
    [ "$WORKERS" -gt 1 ] && XDIST=(-n "$WORKERS")
fi
LIMIT_TESTS=${LIMIT_TESTS:-$(( (N_TEST_VARIANTS * COMPILE_S * 2 + WORKERS - 1) / WORKERS + 300 ))}
LIMIT_CHECK=${LIMIT_CHECK:-$((N_CHECK_VARIANTS * COMPILE_S * 2 + 120))}
LIMIT_BENCH=${LIMIT_BENCH:-$((N_BENCH_VARIANTS * COMPILE_S * 2 + 600))}

# -v: each test's outcome is logged as it ends, so a step cut by its limit still names its failures;
# a per-test limit (pytest-timeout, where installed) keeps one hung test from taking the whole step
PER_TEST=()
"$PY" -c 'import pytest_timeout' 2>/dev/null && PER_TEST=(--timeout "${LIMIT_PER_TEST:-120}")
KERNELS_AUTOTUNE=0 run "1/4 kernel tests (compiled)" "$LIMIT_TESTS" pytest.txt \
    "$PY" -m pytest -v -rfE --tb=short tests/kernels -p no:cacheprovider "${XDIST[@]}" "${PER_TEST[@]}"
KERNELS_AUTOTUNE=0 run "2/4 values and gradients against the references" "$LIMIT_CHECK" gpu_check.txt \
    "$PY" -m kernels.gpu_check "$OUT"
run "3/4 benchmark (autotuned)" "$LIMIT_BENCH" bench_cuda.txt \
    "$PY" -m kernels.bench --device cuda --attn-sizes 4096 --head-dims 64,128 --decode-sizes 8192 \
    --hip-sizes 16384,65536 --graph-sizes 100000,1000000 --out "$OUT/bench_cuda.csv"
"$PY" -m kernels.gpu_check --figures "$OUT" || status=1
echo "== summary: $OUT/figures.md (paste into kernels/README.md, section 'GPU figures')"
cat "$OUT/steps.csv"
exit $status
