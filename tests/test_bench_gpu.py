"""``benchmarks/bench_gpu.py --smoke`` (issue 28): the GPU table's script runs on this machine's
OpenCL device at tiny sizes, every program as kernels, and each of its rows agrees with the numpy
backend.  One subprocess: ~35 s on a cold cache (PoCL compiles the transformer and attention
programs), ~3 s warm, on 2 cores."""
import subprocess
import sys
from pathlib import Path

import pytest

from functrace.backends.opencl import runtime as cl_runtime

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"

# the table: every row must be printed, and none may say FAIL
ROWS = ("sgemm", "transformer block fwd+bwd", "transformer step first call", "causal attention fwd ",
        "causal attention fwd+bwd", "rms_norm grad", "sum of", "MLP step", "Hessian", "transcendental chain",
        "arithmetic chain", "small kernel")

pytestmark = pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")


def test_smoke_run_prints_every_row_without_fail():
    # (the environment as it is: FUNCTRACE_OPENCL_DEVICE_KIND=gpu runs it under the gpu kind)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke"], capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert out.startswith("device: "), out
    table = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| workload")]
    assert len(table) == len(ROWS), out
    for key in ROWS:
        lines = [line for line in table if line.startswith(f"| {key}")]
        assert len(lines) == 1, (key, out)
        assert "FAIL" not in lines[0], lines[0]
    assert "0 row(s) failed" in out, out
