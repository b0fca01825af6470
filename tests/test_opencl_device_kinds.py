"""Device kinds (issue 27): the gpu kind forced on this machine's device runs a representative set of
the OpenCL files' numeric tests, its plans put every step on the device, and a machine without
OpenCL falls back to numpy with one warning that says what to install.

The numeric tests below are the other files' own functions, collected here a second time and run
under ``opencl_device_kind = "gpu"`` (the autouse fixture): every program they compile gets the gpu
kind's policy (plain OpenCL C sources, no host steps, no host BLAS, no trials, buffers on the
device).  Attention runs inside the transformer block's gradient (its own test's many shapes took
52 s to compile on a cold PoCL cache under the gpu kind).  ``FUNCTRACE_OPENCL_DEVICE_KIND=gpu python -m
pytest tests/test_opencl*.py`` runs every OpenCL test under the gpu kind (measured: all pass on PoCL).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import test_opencl as base
import test_opencl_sort_scatter as sort_scatter

# the numeric tests run again under the gpu kind (imported: pytest collects them here too); the
# widely parametrized ones through the wrappers below, on a representative few of their cases (each
# case compiles programs: on a cold PoCL cache all of them took 3.7 minutes)
from test_opencl import (  # noqa: F401
    small_steps,
    test_conv2d_and_its_gradient_on_opencl,
    test_float32_transcendentals_are_accurate_everywhere,
    test_hessian,
    test_mlp_grad_with_cross_entropy,
    test_transformer_block_grad,
)
from test_opencl_float16 import test_correctly_rounded_ops_match_bit_for_bit, test_transcendentals_within_one_ulp  # noqa: F401
from test_opencl_kernels import (  # noqa: F401
    test_elementwise_builtins_with_special_values_in_neighbouring_lanes,
    test_float_floor_divide_is_numpys,
    test_float_remainder_matches_numpy_at_infinite_and_signed_zero_divisors,
    test_gather_and_scatter_add_kernels,
    test_rms_norm_forward_and_grad,
    test_softmax_and_log_softmax_kernels,
)
from test_opencl_matmul import test_batched, test_grad_uses_transposed_variants, test_transpose_variants_all_shapes  # noqa: F401
from test_opencl_random import test_samplers_run_as_kernels_and_equal_eager  # noqa: F401

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime as cl_runtime
from functrace.backends.opencl.policy import ROUNDING_OPTION, make_policy, rounds_fp32_correctly

pytestmark = pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")


@pytest.fixture(autouse=True)
def gpu_kind(monkeypatch):
    """Every test here runs with the gpu kind forced on this machine's device."""
    monkeypatch.setattr(ft.config, "opencl_device_kind", "gpu")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_reductions_and_layouts(dtype):
    """test_opencl's elementwise, reduction and layout tests on a ragged size and a broadcast."""
    base.test_unary_elementwise(127, dtype)
    base.test_binary_broadcasting(((127, 1), (1, 8)), dtype)
    base.test_reductions_any_axes((127, 9), dtype)
    base.test_cumsum_and_arg_reductions_are_kernels((5, 4, 3), dtype)
    base.test_pad_and_concatenate_are_kernels((127, 9), dtype)


def test_integer_and_bool_kernels_and_control_flow():
    """Integer and bool layouts and reductions, and loops and branches driving kernels."""
    base.test_cumsum_and_arg_reductions_are_kernels((127, 9), np.int32)
    base.test_pad_and_concatenate_are_kernels((5, 4, 3), np.bool_)
    base.test_control_flow_runs_its_bodies_as_kernels(np.float32)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # numpy's NaN in maximum.at
def test_sorts_and_scatters():
    """test_opencl_sort_scatter's kernels: a float and an integer sort, three scatter updates."""
    sort_scatter.test_argsort_kernel_matches_numpy(1000, np.float32)
    sort_scatter.test_argsort_kernel_matches_numpy(77, np.int64)
    for op, dtype in [("set", np.float64), ("multiply", np.int64), ("max", np.float32)]:
        sort_scatter.test_scatter_kernels_match_numpy(op, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_run_the_work_group_gemm_with_its_epilogue(dtype):
    """The gpu kind's matrix products are one launch of the work-group GEMM (tiles of both operands
    in local memory), bias and tanh fused after it: tile edges (sizes that are not multiples
    of the tiles), K in several chunks, and a NaN row kept through relu / tanh, as numpy's."""
    rng = np.random.default_rng(28)
    for m, k, n in [(65, 17, 63), (130, 300, 47)]:  # ragged tiles; K in several chunks
        x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((m, k), (k, n), (n,)))
        x[m // 2, k // 3] = np.nan
        for act, ref in [(ft.nn.relu, lambda v: np.maximum(v, 0)), (fnp.tanh, np.tanh)]:
            f = ft.jit(lambda x, w, b, act=act: act(x @ w + b))
            want = ref(x.astype(np.float64) @ w + b)
            got = np.asarray(f(x, w, b))
            assert np.isnan(got[m // 2]).all() and got.dtype == dtype
            tol = 1e-4 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
            report = str(f.lower(x, w, b).compile().report())
            assert "work-group tiles" in report and "+ bias" in report, report
            if act is fnp.tanh:  # (relu is max with a select, fused in the next kernel)
                assert "+ bias + tanh" in report and "kernel launches per call: 1" in report, report


@pytest.mark.parametrize("tiles", [(64, 64, 16, 4, 4), (32, 32, 16, 4, 4), (16, 16, 16, 4, 4)])
def test_every_tile_shape_gives_numpys_product(tiles, monkeypatch):
    """Each tile shape a device may get (the largest its work-group size and local memory allow)
    computes the same products, batched and in every transpose form."""
    from functrace.backends.opencl import matmul as mm
    monkeypatch.setattr(mm, "TILES", (tiles,))
    monkeypatch.setattr(mm, "_SHARED", {})
    monkeypatch.setattr(mm, "_TILE_CHOICES", {})
    rng = np.random.default_rng(len(tiles) + tiles[0])
    a, b = rng.standard_normal((3, 37, 70)), rng.standard_normal((3, 70, 29))
    f = ft.jit(lambda a, b: (a @ b, fnp.swapaxes(a, 1, 2).T, a[0].T @ a[1], b[0] @ b[1].T))
    got = f(a, b)
    want = (a @ b, np.swapaxes(a, 1, 2).T, a[0].T @ a[1], b[0] @ b[1].T)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-12)
    assert f"work-group tiles {tiles[0]}x{tiles[1]}" in f.lower(a, b).compile().report()


def test_tiles_fit_the_device():
    """The largest tile shape whose work-group (in all, and along each axis) and local memory fit
    the device; None where even the smallest does not (float64 16x16 tiles need 8704 bytes)."""
    from types import SimpleNamespace

    from functrace.backends.opencl import matmul as mm
    device = lambda items, local, axes=None: SimpleNamespace(device=SimpleNamespace(
        max_work_group_size=items, local_mem_size=local, max_work_item_sizes=axes or (items, items, items)))
    big, small, tiny = device(1024, 48 * 1024), device(128, 16 * 1024), device(32, 8 * 1024)
    assert mm.tiles_for(big, np.float32) == mm.tiles_for(big, np.float64) == (64, 64, 16, 4, 4)
    assert mm.tiles_for(small, np.float32) == (32, 32, 16, 4, 4)
    assert mm.tiles_for(small, np.float64) == mm.tiles_for(tiny, np.float32) == (16, 16, 16, 4, 4)
    assert mm.tiles_for(tiny, np.float64) is None and mm.tiles_for(device(8, 48 * 1024), np.float32) is None
    along_x = lambda n: device(1024, 48 * 1024, (n, 1024, 1024))  # (tiles take 16, 8 and 4 items along x)
    assert mm.tiles_for(along_x(8), np.float32) == (32, 32, 16, 4, 4) and mm.tiles_for(along_x(2), np.float32) is None


def test_a_kernel_taking_smaller_work_groups_than_the_device_gets_smaller_tiles(monkeypatch):
    """The work-group GEMM's tiles are sized from the built kernel too: where its own limit
    (CL_KERNEL_WORK_GROUP_SIZE, lower than the device's for a kernel needing many registers) is
    below a tile's work-group, the next smaller tiles run."""
    from functrace.backends.opencl import matmul as mm
    make = cl_runtime.Kernel.make

    class AtMost64:
        """A kernel whose CL_KERNEL_WORK_GROUP_SIZE is 64."""

        def __init__(self, kernel):
            self.kernel = kernel

        def get_work_group_info(self, param, device):
            wg = cl_runtime.get_runtime().cl.kernel_work_group_info.WORK_GROUP_SIZE
            return 64 if param == wg else self.kernel.get_work_group_info(param, device)

        def __getattr__(self, name):
            return getattr(self.kernel, name)

        def __call__(self, *args):
            return self.kernel(*args)

    monkeypatch.setattr(cl_runtime.Kernel, "make", lambda k: AtMost64(make(k)) if "tiled" in k._name else make(k))
    monkeypatch.setattr(mm, "_SHARED", {})
    monkeypatch.setattr(mm, "_TILE_CHOICES", {})
    rng = np.random.default_rng(64)
    a, b = rng.standard_normal((70, 37)).astype(np.float32), rng.standard_normal((37, 45)).astype(np.float32)
    f = ft.jit(lambda a, b: a @ b)
    np.testing.assert_allclose(np.asarray(f(a, b)), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert "work-group tiles 32x32" in f.lower(a, b).compile().report()


def test_products_where_no_tiles_fit_or_run_take_the_design_without_local_tiles(monkeypatch):
    """Where no tiles fit the device, or the driver does not make the work-group GEMM's kernel, the
    gpu kind's products run the packed design of matmul.cl (work-groups of one; its prefetch hint
    is nothing here), the report saying why; where the driver makes neither, the host BLAS on
    mapped buffers.  Shapes: B read in place over several panels per work-item, transposed
    packing over several work-items, a bias epilogue, a batch."""
    from functrace.backends.opencl import matmul as mm
    make, misfit = cl_runtime.Kernel.make, mm._tile_misfit
    refused = []

    def refusing(kernel):
        if kernel._name.startswith(tuple(refused)):
            raise RuntimeError("clCreateKernel failed: INVALID_KERNEL_NAME")
        return make(kernel)
    monkeypatch.setattr(cl_runtime.Kernel, "make", refusing)
    rng = np.random.default_rng(3)
    x, w, c = rng.standard_normal((256, 150)), rng.standard_normal((150, 512)), rng.standard_normal(512)
    y, p, q = rng.standard_normal((64, 150)), rng.standard_normal((3, 9, 17)), rng.standard_normal((3, 17, 5))
    want = (np.tanh(x @ w + c), x[:17] @ y.T, p @ q)
    args = [v.astype(np.float32) for v in (x, w, c, y, p, q)]
    cases = {  # what the report says -> (whether tiles fit, the kernels the driver does not make)
        "8x32 micro-tiles (read in place), 64x256 blocks, kc 150 + bias + tanh, no work-group tiles: too little "
        "local memory": (False, ()),
        "8x32 micro-tiles (A and B packed), 8x32 blocks, kc 150, no work-group tiles: the driver did not make "
        "kernel matmul_tiled_f32 (RuntimeError: clCreateKernel failed": (True, ("matmul_tiled",)),
        "host BLAS + bias + tanh, its OpenCL kernels cannot run on this device: the driver did not make kernel "
        "matmul_f32_bias_tanh_arows": (True, ("matmul_",)),
    }
    for says, (tiles_fit, refusals) in cases.items():
        refused[:] = refusals
        monkeypatch.setattr(mm, "_tile_misfit", misfit if tiles_fit else lambda *a, **k: "too little local memory")
        monkeypatch.setattr(mm, "_SHARED", {})
        monkeypatch.setattr(mm, "_TILE_CHOICES", {})
        exe = ft.jit(lambda x, w, c, y, p, q: (fnp.tanh(x @ w + c), x[:17] @ y.T, p @ q)).lower(*args).compile()
        for got, ref in zip(exe(*args), want):
            np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-4, atol=1e-4)
        report = exe.report()
        assert says in report and report.count("matmul (") == 3, report


def test_reductions_run_as_work_group_trees():
    """The gpu kind's reductions: a work-group per output, or per slice of one when few outputs have
    many terms (then a second kernel combines the slices), its work-items striding over the terms
    and halving a tree in local memory; fused with their elementwise operand, NaN kept by max / min,
    float16 accumulated in float32, integers exact, any reduced axes."""
    rng = np.random.default_rng(31)
    big = rng.standard_normal(300_001).astype(np.float32)
    big[-1] = np.nan  # in the max only
    f = ft.jit(lambda a: (fnp.sum(fnp.sin(a[:-1]) * 2.0), fnp.max(a), fnp.min(a[1:20_000])))
    total, top, low = f(big)
    np.testing.assert_allclose(np.asarray(total), np.sum(np.sin(big[:-1].astype(np.float64)) * 2), rtol=1e-4)
    assert np.isnan(np.asarray(top)) and np.asarray(low) == big[1:20_000].min()
    report = str(f.lower(big).compile().report())
    assert "kernel launches per call: 6" in report, report  # each in slices, then a kernel combining them
    x16 = rng.standard_normal((3, 5, 7001)).astype(np.float16)
    xi = rng.integers(-1000, 1000, (7, 600, 9)).astype(np.int32)
    g = ft.jit(lambda h, i: (fnp.sum(h, axis=(1, 2)), fnp.max(h, axis=1), fnp.sum(i, axis=(0, 2)), fnp.min(i, axis=1)))
    s16, m16, si, mi = (np.asarray(v) for v in g(x16, xi))
    np.testing.assert_allclose(s16, x16.astype(np.float64).sum(axis=(1, 2)), rtol=2e-3, atol=0.5)
    assert s16.dtype == np.float16 and np.array_equal(m16, x16.max(axis=1))
    assert np.array_equal(si, xi.sum(axis=(0, 2))) and np.array_equal(mi, xi.min(axis=1))
    assert all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True) for a, b in zip(f(big), f(big)))


def test_column_sums_run_as_work_groups_of_columns_and_row_lanes():
    """The gpu kind's sums over leading axes: work-groups of 32 neighbouring columns x 8 row lanes
    over slices of the rows, then a kernel combining the slices in order; float16 partial results
    kept in float (more accurate than numpy's float16 column sums), NaN kept by max."""
    rng = np.random.default_rng(32)
    x = rng.standard_normal((20_000, 33)).astype(np.float32)
    x[7, 3] = np.nan
    h = (rng.random((3, 700, 64)) * 4).astype(np.float16)
    f = ft.jit(lambda x, h: (fnp.sum(fnp.abs(x[:, :32]) * 2.0, axis=0), fnp.max(x, axis=0), fnp.sum(h, axis=(0, 1))))
    s, m, hs = (np.asarray(v) for v in f(x, h))
    np.testing.assert_allclose(s, np.sum(np.abs(x[:, :32]).astype(np.float64) * 2, axis=0), rtol=1e-5)
    assert np.isnan(m[3]) and np.array_equal(np.delete(m, 3), np.delete(np.max(x, axis=0), 3))
    assert hs.dtype == np.float16
    np.testing.assert_allclose(hs, h.astype(np.float64).sum(axis=(0, 1)), rtol=1e-3)  # one float16 rounding
    assert "kernel launches per call: 6" in str(f.lower(x, h).compile().report())  # each: slices + combine


def test_the_option_takes_a_kind_and_is_checked():
    ft.config.update("opencl_device_kind", " GPU ")
    assert ft.config.opencl_device_kind == "gpu"
    with pytest.raises(ValueError, match="opencl_device_kind must be one of"):
        ft.config.update("opencl_device_kind", "tpu")


def test_each_kind_keeps_its_runtime(monkeypatch):
    """Switching kinds back and forth reuses each kind's runtime (one context each)."""
    gpu = cl_runtime.get_runtime()
    assert gpu.kind == "gpu" and gpu.policy.build_options == gpu.policy.build_options
    assert not gpu.unified and not gpu.policy.host_blas and not gpu.policy.host_steps
    monkeypatch.setattr(ft.config, "opencl_device_kind", "cpu")
    cpu = cl_runtime.get_runtime()
    assert cpu.kind == "cpu" and cpu is not gpu and cpu.policy.host_blas
    monkeypatch.setattr(ft.config, "opencl_device_kind", "gpu")
    assert cl_runtime.get_runtime() is gpu


def test_gpu_kind_plans_put_every_step_on_the_device(monkeypatch):
    """At the default placement options a small program, a tiny step and a product with
    ``matmul="blas"`` all stay kernels on the gpu kind; nothing is timed against numpy; inputs are
    copied to device buffers (no host memory wrapped); the report names the kind."""
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 16384)
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", None)
    monkeypatch.setattr(ft.config, "matmul", "blas")
    a, b = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
    f = ft.jit(lambda a, b: fnp.tanh(a @ b) + fnp.sum(a), backend="opencl")
    exe = f.lower(a, b).compile().executable
    assert exe.num_host_steps == 0 and exe.num_kernel_launches >= 3
    np.testing.assert_allclose(np.asarray(f(a, b)), np.tanh(a @ b) + a.sum(), rtol=1e-6)
    assert exe._on_host is None and "(gpu kind)" in exe.report()
    assert not exe.rt.wraps_host_memory(np.ones(1024, np.float32))


def test_float32_programs_are_built_for_correct_rounding():
    """The driver reports the rounding option among the build options of a float32 program."""
    rt = cl_runtime.get_runtime()
    if not rounds_fp32_correctly(rt.device):
        pytest.skip("the device does not report CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT")
    x = np.linspace(1, 2, 100, dtype=np.float32)
    exe = ft.jit(lambda x, y: x / y + fnp.sqrt(y), backend="opencl").lower(x, x[::-1].copy()).compile().executable
    options = exe.program.get_build_info(rt.device, rt.cl.program_build_info.OPTIONS)
    assert ROUNDING_OPTION in options


def test_no_platform_warns_once_with_what_to_install(monkeypatch):
    """No ICD file (no platform): one warning naming the cause and what to install or set, and the
    numpy backend runs the program."""
    class NoPlatforms:
        @staticmethod
        def get_platforms():
            raise RuntimeError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl_runtime, "_cl", lambda: NoPlatforms)
    monkeypatch.setattr(cl_runtime, "_state", {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ft.jit(lambda x: x * 2, backend="opencl")(np.ones(3))
        ft.jit(lambda x: x * 3, backend="opencl")(np.ones(3))
    assert isinstance(out, np.ndarray) and out.tolist() == [2.0, 2.0, 2.0]
    (message,) = [str(w.message) for w in caught if "OpenCL" in str(w.message)]
    for words in ("PLATFORM_NOT_FOUND_KHR", "/etc/OpenCL/vendors", "pocl", "default_backend"):
        assert words in message


def test_no_pyopencl_says_to_install_it(monkeypatch):
    def broken():
        raise RuntimeError("pyopencl is not usable: No module named 'pyopencl'")

    monkeypatch.setattr(cl_runtime, "_cl", broken)
    monkeypatch.setattr(cl_runtime, "_state", {})
    assert cl_runtime.devices() == []
    assert "pip install pyopencl" in cl_runtime._state["no_devices"]


def test_a_device_without_correct_rounding_gets_the_corrected_division():
    """Where the device does not report correctly rounded float32 division and sqrt, fused kernels
    correct the driver's quotient and root (``policy.CORRECTED_DIVISION_PREFIX``): the program builds
    without the option and gives numpy's bits, zeros, infinities, NaNs and subnormals included."""
    from functrace.backends.opencl.executable import OpenCLExecutable
    rt = cl_runtime.Runtime(cl_runtime.get_runtime().device)
    rt.policy = make_policy("gpu", correct_rounding=False, unified=False)
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(997) * 1e3, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 3e38]])
    y = np.concatenate([rng.standard_normal(997), [0.0, 1.0, 2.0, np.inf, 1.0, 3.0, 0.1]])
    x, y = x.astype(np.float32), y.astype(np.float32)
    f = lambda x, y: (x / y, fnp.sqrt(fnp.abs(x)))
    exe = OpenCLExecutable(ft.jit(f, backend="opencl").lower(x, y).jaxpr, rt)
    assert "ft_fdiv_fix" in exe.program.get_info(rt.cl.program_info.SOURCE)
    assert ROUNDING_OPTION not in exe.program.get_build_info(rt.device, rt.cl.program_build_info.OPTIONS)
    with np.errstate(all="ignore"):
        want = (x / y, np.sqrt(np.abs(x)))
    for got, w in zip(exe(x, y), want):
        np.testing.assert_array_equal(np.asarray(got), w)


def test_native_sin_cos_only_where_measured_accurate(monkeypatch):
    """The cpu kind's programs that compute sin or cos use the driver's native forms only when they
    were measured within ``NATIVE_TRIG_ERROR`` of sin / cos on this device (at the first such
    program, once per device and driver, kept on disk); a device whose native forms drift gets the
    plain ones, a program without sin / cos asks nothing, and the gpu kind never has them."""
    from functrace.backends.opencl.policy import NATIVE_TRIG_PREFIX
    rt = cl_runtime.get_runtime()
    verdicts = []
    monkeypatch.setattr(cl_runtime, "_read_verdict", lambda device, kind: None)  # measure afresh
    monkeypatch.setattr(cl_runtime, "_keep_verdict", lambda device, kind, verdict: verdicts.append(verdict))
    measured = cl_runtime.native_trig_accurate(rt)
    assert verdicts == ["accurate" if measured else "inaccurate"]
    if rt.in_thread_queue is not None:  # (measured there when the program asking runs there)
        assert cl_runtime.native_trig_accurate(rt, in_thread=True) == measured
    monkeypatch.setattr(cl_runtime, "NATIVE_TRIG_ERROR", 1e-12)  # a bound no approximation meets
    assert not cl_runtime.native_trig_accurate(rt)
    assert verdicts[-1] == "inaccurate"
    cpu, gpu = make_policy("cpu"), make_policy("gpu")
    assert NATIVE_TRIG_PREFIX in cpu.program_source("", native_trig=True)
    assert "native_" not in cpu.program_source("") + cpu.prefix + gpu.program_source("", native_trig=True)
    monkeypatch.setattr(ft.config, "opencl_device_kind", "cpu")
    fresh = cl_runtime.Runtime(rt.device)  # the cpu kind on this device, asked nothing yet
    built = []
    monkeypatch.setattr(cl_runtime, "_build_checked", lambda device, program, options, key: built.append(key))
    fresh.program("__kernel void k(__global float* a) { a[0] = 1.0f; }")
    assert fresh._native_trig is None  # no sin / cos: no probe
    fresh.program("__kernel void k2(__global float* a) { a[0] = FT_SIN_float(a[0]); }")
    assert fresh._native_trig is False  # asked now (its probe built nothing here: no, the plain forms)


@pytest.mark.parametrize("size", [1021, 4099])
def test_float32_sin_cos_are_right_over_the_whole_range(size, monkeypatch):
    """The cpu kind's sin / cos (the driver's native forms where measured accurate, within
    ``NATIVE_TRIG_BOUND``) against numpy over the whole float32 range: PoCL's native forms return 0
    past |x| ~ 1.7e6 (sin(1e8) gave -0.0), so a vector with a lane past the bound must take the plain
    form.  Large arguments alone, mixed into vectors of small ones, 2^31, negatives, inf and NaN, on
    odd sizes (the masked last vector), and the cos inside grad(sum(sin))."""
    monkeypatch.setattr(ft.config, "opencl_device_kind", "cpu")
    rng = np.random.default_rng(size)
    large = 10.0 ** rng.uniform(7, 30, size) * rng.choice([-1.0, 1.0], size)
    small = rng.uniform(-10, 10, size)
    mixed = np.where(rng.random(size) < 0.1, large, small)  # most vectors: one or two large lanes
    special = [2.0 ** 31, -2.0 ** 31, 1e30, -1e30, 3.4e38, 1e7, 6.6e6, 1e4, np.nextafter(1e4, 2e4), np.inf, -np.inf,
               np.nan, 0.0, -0.0]
    ulps = 4
    for x in (large, mixed, np.resize(special, size)):
        x = x.astype(np.float32)
        with np.errstate(invalid="ignore"):
            want = [np.sin(x.astype(np.float64)), np.cos(x.astype(np.float64))]
        got = [np.asarray(a).astype(np.float64) for a in ft.jit(lambda v: (fnp.sin(v), fnp.cos(v)))(x)]
        got.append(np.asarray(ft.jit(ft.grad(lambda v: fnp.sum(fnp.sin(v))))(x)).astype(np.float64))
        for name, g, w in zip(("sin", "cos", "grad(sum(sin))"), got, want + want[1:]):
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=name)
            ok = np.isfinite(w)
            err = np.abs(g[ok] - w[ok]) / np.spacing(np.abs(w[ok]).astype(np.float32)).astype(np.float64)
            assert err.max() <= ulps, (name, err.max(), x[ok][err.argmax()])
    assert cl_runtime.get_runtime().kind == "cpu"


def test_work_groups_are_cut_to_the_device():
    """The generated designs' work-groups fit whatever the device allows (OpenCL sets no minimum):
    the column sums' 32 x 8 and the elementwise 64 shrank to powers of two within its limits."""
    from types import SimpleNamespace

    from functrace.backends.opencl.planner import COLUMN_TILE, TREE_GROUP, WORK_GROUP, device_group

    def rt(total, extents):
        return SimpleNamespace(device=SimpleNamespace(max_work_group_size=total, max_work_item_sizes=extents))
    roomy = rt(1024, [1024, 1024, 64])
    assert (device_group(roomy, COLUMN_TILE[0]), device_group(roomy, COLUMN_TILE[1], axis=1, beside=32)) == (32, 8)
    assert device_group(roomy, TREE_GROUP) == 256 and device_group(roomy, WORK_GROUP) == 64
    small = rt(128, [128, 2, 1])
    assert device_group(small, COLUMN_TILE[0]) == 32 and device_group(small, COLUMN_TILE[1], axis=1, beside=32) == 2
    assert device_group(small, TREE_GROUP) == 128
    odd = rt(48, [48, 48, 48])
    assert device_group(odd, WORK_GROUP) == 32 and device_group(odd, COLUMN_TILE[1], axis=1, beside=32) == 1
    assert device_group(None, WORK_GROUP) == WORK_GROUP  # planning without a device
