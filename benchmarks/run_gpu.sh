#!/usr/bin/env bash
# The gpu kind's tests and the GPU table (issue 28) on a machine with an NVIDIA GPU and no network.
#
# Run from the repository root:   bash benchmarks/run_gpu.sh
# It finishes in under 9 minutes (each step has its own limit): setup (seconds), then
#   1. pytest tests/test_opencl_device_kinds.py tests/test_opencl_sources.py tests/test_opencl_matmul.py
#      with FUNCTRACE_OPENCL_DEVICE_KIND unset, so the card gets the gpu kind by itself  (TEST_S, 210 s)
#   2. python benchmarks/bench_gpu.py (the full table: device and driver first)          (BENCH_S, 270 s)
# Outputs: $OUT/env.txt, $OUT/tests.txt, $OUT/bench.txt ($OUT defaults to /tmp/out); a summary on stdout.
# Arguments after the script's name go to bench_gpu.py (e.g. --only sgemm,sum, or --smoke).
#
# Python packages: numpy and pytest from the machine's Python; pyopencl (with pytools,
# platformdirs, siphash24) from there too, or else from wheels in $WHEELS (default .whl/ in the
# repository root), installed offline into /tmp/site.  Fetch the wheels beforehand on a machine
# with a network, for the target's Python (here 3.12):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#     pyopencl pytools platformdirs siphash24
# (keep .whl/ out of git: echo .whl/ >> .git/info/exclude).  JAX and PyTorch with CUDA, when the
# machine has them, fill the table's comparison columns; they are never required.
#
# pip's pyopencl bundles the ICD loader, which finds NVIDIA's OpenCL driver only through an ICD
# file: when /etc/OpenCL/vendors has none for NVIDIA, the script writes one naming the
# libnvidia-opencl.so it finds, under /tmp/icd, and points OCL_ICD_VENDORS there.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
unset FUNCTRACE_OPENCL_DEVICE_KIND
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TEST_S=${TEST_S:-210}; BENCH_S=${BENCH_S:-270}
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root"
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-$root/.whl}
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PY" -c "import pyopencl" 2>/dev/null; then
  if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
      || { echo "installing the wheels of $WHEELS failed"; exit 1; }
    export PYTHONPATH="$PYTHONPATH:/tmp/site"
  else
    echo "pyopencl is not installed and $WHEELS has no wheels (see this script's header)"; exit 1
  fi
fi

if ! grep -qsl nvidia /etc/OpenCL/vendors/*.icd 2>/dev/null && [ -z "${OCL_ICD_VENDORS:-}" ]; then
  lib=""
  for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/lib64 /usr/lib; do
    f=$(ls "$d"/libnvidia-opencl.so* 2>/dev/null | head -1); [ -n "$f" ] && { lib=$f; break; }
  done
  echo "NVIDIA OpenCL library: ${lib:-none found}"
  if [ -n "$lib" ]; then
    mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd && export OCL_ICD_VENDORS=/tmp/icd
  fi
fi

{
  date -u; nvidia-smi -L 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null
  git -C "$root" log -1 --format='functrace %h %s' 2>/dev/null | cut -c1-120
  "$PY" -c "import sys, numpy, pyopencl as cl; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'pyopencl', cl.VERSION_TEXT)
for p in cl.get_platforms():
    for d in p.get_devices(): print('OpenCL:', p.name, '|', d.name, '| driver', d.driver_version)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== tests (gpu kind by itself, limit ${TEST_S} s)"
t0=$(date +%s)
timeout -k 5 "$TEST_S" "$PY" -m pytest -q -p no:cacheprovider -o addopts="" --tb=short -rf \
  tests/test_opencl_device_kinds.py tests/test_opencl_sources.py tests/test_opencl_matmul.py > "$OUT/tests.txt" 2>&1
rc_tests=$?
echo "tests rc=$rc_tests ($(( $(date +%s) - t0 )) s; 124: the limit)"
grep -E "^(FAILED|ERROR)|passed|failed|error" "$OUT/tests.txt" | head -40

echo "== bench_gpu.py $* (limit ${BENCH_S} s)"
t0=$(date +%s)
timeout -k 5 "$BENCH_S" "$PY" benchmarks/bench_gpu.py "$@" > "$OUT/bench.txt" 2>&1
rc_bench=$?
cat "$OUT/bench.txt" | grep -v "^functrace: compiling"
echo "bench rc=$rc_bench ($(( $(date +%s) - t0 )) s; 124: the limit)"
[ "$rc_tests" = 0 ] && [ "$rc_bench" = 0 ]
