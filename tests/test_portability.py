"""The OpenCL backend on a driver other than PoCL, with device limits other than PoCL's: Oclgrind's
simulated device (``oclgrind_util``), in a child process each.

Oclgrind is a clang-based CPU driver: its device type includes CPU, so the default ``auto`` kind
gives it the cpu kind's sources, which must not need PoCL (clang's ``__builtin_prefetch`` became
``llvm.prefetch``, which Oclgrind cannot run: it refused to make the matrix-product kernels).
Its work-group size and local memory can be set, so the gpu kind's designs are run on devices
smaller than the ones they were written for.  Every run also checks Oclgrind's reports: no
invalid access, race or API error.
"""
from __future__ import annotations

import json

import pytest
from oclgrind_util import requires_oclgrind, run_python

pytestmark = requires_oclgrind

# the child: each product's report line and its largest error against numpy's float64 product,
# relative to the product's scale, as one JSON line per product
PRODUCTS = """
import json, sys
import numpy as np
import functrace as ft, functrace.numpy as fnp
ft.config.update("opencl_small_program_elements", 0)  # (small programs too: the kernels run)
rng = np.random.default_rng(0)
for dt in (np.float32, np.float64):
    a, b, c = rng.standard_normal((37, 29)), rng.standard_normal((29, 41)), rng.standard_normal(41)
    cases = {"a @ b": (lambda a, b, c: a @ b, lambda a, b, c: a @ b),
             "tanh(a @ b + c)": (lambda a, b, c: fnp.tanh(a @ b + c), lambda a, b, c: np.tanh(a @ b + c)),
             "a.T @ a": (lambda a, b, c: a.T @ a, lambda a, b, c: a.T @ a),
             "b @ b.T": (lambda a, b, c: b @ b.T, lambda a, b, c: b @ b.T)}
    for name, (f, ref) in cases.items():
        args = [v.astype(dt) for v in (a, b, c)]
        exe = ft.jit(f).lower(*args).compile()
        got = np.asarray(exe(*args)).astype(np.float64)
        want = ref(a, b, c)
        line = next(l for l in str(exe.report()).splitlines() if "matmul (" in l)
        print(json.dumps({"dtype": np.dtype(dt).name, "case": name, "report": line,
                          "error": float(np.max(np.abs(got - want)) / np.max(np.abs(want)))}), flush=True)
"""


def _products(run) -> list:
    """The JSON lines of ``PRODUCTS`` from a child run, after checking it ended well and Oclgrind
    reported nothing."""
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.reports == [], run.reports[:3]
    found = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(found) == 8, run.stdout
    for p in found:
        assert p["error"] < (1e-5 if p["dtype"] == "float32" else 1e-13), p
    return found


def test_the_cpu_kinds_matrix_product_kernels_run_on_a_driver_other_than_pocl():
    """The cpu kind (Oclgrind's default: its device type includes CPU) with the matmul kernels
    forced: every product variant (bias and tanh fused, transposed operands, both dtypes) makes
    its kernels and runs them, without a report from Oclgrind."""
    run = run_python("import functrace as ft; ft.config.update('matmul', 'opencl')\n" + PRODUCTS, kind="auto")
    for p in _products(run):
        assert "matmul (OpenCL" in p["report"], p


def test_kernels_the_driver_does_not_make_give_way_to_the_host_blas():
    """A shared matmul program the driver builds but whose kernels it will not make (clang's
    ``__builtin_prefetch`` put back, as the cpu kind's sources had it: Oclgrind cannot make the
    kernels) runs on the host BLAS instead, with the driver's reason in the report; in auto mode
    the measuring run measures nothing and keeps the host BLAS."""
    broken = ("from functrace.backends.opencl import policy\n"
              "policy.CPU_PREFIX += '#undef MM_PREFETCH\\n#define MM_PREFETCH(p) __builtin_prefetch((p), 0, 3)\\n'\n")
    run = run_python(broken + "import functrace as ft; ft.config.update('matmul', 'opencl')\n" + PRODUCTS, kind="cpu")
    assert run.returncode == 0, run.stderr[-3000:]
    found = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(found) == 8, run.stdout
    for p in found:
        assert "matmul (host BLAS" in p["report"] and "cannot run on this device" in p["report"], p
        assert "llvm.prefetch" in run.stderr and p["error"] < (1e-5 if p["dtype"] == "float32" else 1e-13), p
    auto = run_python(broken + AUTO_MODE, kind="cpu")
    assert auto.returncode == 0, auto.stderr[-3000:]
    assert "decisions: 0" in auto.stdout and "cannot run on this device" in auto.stdout, auto.stdout


# the child: the default settings (kind auto, matmul auto with its warm-up in the background) but
# every step on the device (a program of host steps and products would run as one numpy program,
# and never measure), and a product feeding a kernel, called until the warm-up is done and the next
# run has measured
AUTO_MODE = """
import numpy as np
import functrace as ft, functrace.numpy as fnp
from functrace.backends.opencl import matmul as mm
ft.config.update("opencl_small_program_elements", 0)
ft.config.update("opencl_host_step_elements", 0)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 32)).astype(np.float32)
f = ft.jit(lambda a, b: fnp.tanh(a @ b))
for i in range(mm.MEASURE_AT_RUN + 2):
    out = np.asarray(f(a, b))
    assert np.max(np.abs(out - np.tanh(a.astype(np.float64) @ b))) < 1e-5
    for ready in list(mm._WARM.values()):
        assert ready.wait(300)
print("decisions:", len(mm._DECISIONS))
print(f.lower(a, b).compile().report())
"""


def test_auto_mode_measures_its_kernels_on_a_driver_other_than_pocl():
    """The default settings on Oclgrind: the product's kernels are built in the background (not
    launched there: two threads waiting on one queue made Oclgrind run two kernels at once, and
    abort), then the measuring run times them against the host BLAS in the caller's thread."""
    run = run_python(AUTO_MODE, kind="auto")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.reports == [], run.reports[:3]
    assert "decisions: 1" in run.stdout, run.stdout


@pytest.mark.parametrize("local_mem, work_group, f32_tiles, f64_tiles", [
    (8192, None, "16x16", None),   # float64 16x16 tiles need 8704 bytes: none fit
    (None, 64, "32x32", "32x32"),  # 64x64 tiles take 256 items
    (None, 8, None, None),         # even 16x16 tiles take 16 items
])
def test_the_gpu_kinds_product_fits_the_device(local_mem, work_group, f32_tiles, f64_tiles):
    """The gpu kind's work-group GEMM gets the largest tiles whose work-group and local memory the
    device has, and where none fit, the design without local tiles: right products and no report
    from Oclgrind (a float64 16x16 tile in 8 KB of local memory failed to launch,
    OUT_OF_RESOURCES)."""
    run = run_python(PRODUCTS, kind="gpu", local_mem_size=local_mem, max_work_group_size=work_group)
    for p in _products(run):
        tiles = f32_tiles if p["dtype"] == "float32" else f64_tiles
        if tiles is not None:
            assert f"work-group tiles {tiles}" in p["report"], p
        else:
            assert "micro-tiles" in p["report"] and "no work-group tiles" in p["report"], p
