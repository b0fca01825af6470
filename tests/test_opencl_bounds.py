"""Generated kernels stay inside the views they read ("bounds by construction": a vector load only
where the whole vector lies in one contiguous run of the view), checked in canary mode, which
this module runs in as every OpenCL test module does (see conftest): each buffer lies between
guard regions of NaN bytes, so a read outside a view shows in the result, and a write outside
a buffer raises naming the kernel.  Shapes of at least 131072 elements take the chunked
two-pass reductions, whose slices once began mid-vector and read across row ends and past
buffer ends (``fnp.sum(x + b)`` gave -1.4e23, ``fnp.sum(x[::-1])`` NaN)."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime as cl_runtime

rt = cl_runtime.get_runtime()
pytestmark = pytest.mark.skipif(rt is None, reason="no usable OpenCL device on this machine")

RNG = np.random.default_rng(0)
DTYPES = [np.float32, np.float64]


def assert_matches_numpy(f, args, dtype, calls=2):
    """``jit(f)`` on OpenCL equals numpy's float64 result, for host inputs and for ``device_put``
    ones, over ``calls`` calls of each (a read outside a view shows as NaN or a changed value)."""
    want = [np.asarray(w, np.float64) for w in ft.jit(f, backend="numpy")(*[a.astype(np.float64) for a in args])]
    g = ft.jit(f, backend="opencl")
    rtol, atol = (1e-4, 0.05) if dtype == np.float32 else (1e-10, 1e-8)
    for inputs in [args] * calls + [ft.device_put(args)] * calls:
        for k, (got, w) in enumerate(zip(g(*inputs), want)):
            np.testing.assert_allclose(np.asarray(got, np.float64), w, rtol=rtol, atol=atol, err_msg=f"output {k}")


_PROBES = """
__kernel void read_outside(__global const float* a, __global const int* i, __global float* out, const long n) {
    out[0] = a[n]; out[1] = a[-1]; out[2] = (float)(i[n] == 0x7f7f7f7f);
}
__kernel void write_after(__global float* a, const long n) { a[n + 3] = 1.0f; }
__kernel void write_before(__global float* a) { a[-2] = 1.0f; }
__kernel void write_inside(__global float* a, const long n) { a[n - 1] = 1.0f; a[0] = 2.0f; }
"""


@pytest.mark.parametrize("unified", [True, False])
def test_canaries_show_reads_and_catch_writes_outside_a_buffer(unified, monkeypatch):
    """The mechanism itself, on host memory (CPU devices) and on device memory (sub-buffers of
    a guarded allocation): out-of-bounds reads give NaN (floats) or 0x7f7f7f7f (integers),
    unwritten elements read NaN, and an out-of-bounds write raises naming the kernel and where."""
    assert ft.config.opencl_debug_canaries
    monkeypatch.setattr(rt, "unified", rt.unified and unified)
    prog = rt.program(_PROBES)
    run = lambda name, *args: rt.kernel(prog, name)(rt.queue, (1,), (1,), *args)
    n = 10
    a, i = rt.to_device(np.arange(n, dtype=np.float32)), rt.to_device(np.zeros(n, np.int32))
    out = rt.empty((3,), np.float32)
    assert np.isnan(np.asarray(out)).all()  # nothing wrote it yet
    run("read_outside", a.buffer, i.buffer, out.buffer, np.int64(n))
    got = np.asarray(out)
    assert np.isnan(got[:2]).all() and got[2] == 1.0
    run("write_inside", a.buffer, np.int64(n))
    assert np.asarray(a)[[0, n - 1]].tolist() == [2.0, 1.0]
    with pytest.raises(cl_runtime.CanaryError, match=r"'write_after' wrote outside buffer argument 0 \(40 bytes\)"
                                                     r".* the first 12 bytes after its end"):
        run("write_after", a.buffer, np.int64(n))
    b = rt.to_device(np.arange(n, dtype=np.float32))
    with pytest.raises(cl_runtime.CanaryError, match="'write_before' .* the first 8 bytes before its start"):
        run("write_before", b.buffer)


def test_host_arrays_get_guarded_buffers_in_canary_mode():
    """A host-backed array (a host step's result) wraps its numpy memory zero-copy, which has no
    guard regions: in canary mode its buffer is a guarded copy."""
    host = np.arange(7.0)
    buffer = cl_runtime.Array.from_host(rt, host).buffer
    assert buffer.ft_canaries.nbytes == host.nbytes
    got = np.empty_like(host)
    rt.cl.enqueue_copy(rt.queue, got, buffer)
    np.testing.assert_array_equal(got, host)


def test_buffers_pooled_before_canary_mode_are_not_reused_in_it():
    """An executable's pool outlives a switch into canary mode.  On unified memory (CPU devices)
    a pooled array no kernel wrote (a host-BLAS matmul result) has no buffer yet; given in canary mode to a kernel, its buffer
    was a guarded copy of its host memory: the kernel wrote the copy, and the result read the
    untouched host memory (the matmul's old result)."""
    from functrace.backends.opencl import matmul
    x = np.linspace(0.0, 1.0, 64 * 64, dtype=np.float32).reshape(64, 64)
    eye = np.eye(64, dtype=np.float32)
    f = ft.jit(lambda x, a: (fnp.sin(x), a @ a), backend="opencl")
    ft.config.update("opencl_debug_canaries", False)
    with matmul.forced_mode("blas"):  # (compiled at the first call)
        s, m = f(x, eye)
    del s, m  # the matmul's (bufferless) array returns to the pool last: the next sin takes it
    ft.config.update("opencl_debug_canaries", True)
    s, _ = f(x + 1.0, eye)
    np.testing.assert_allclose(np.asarray(s), np.sin(x + 1.0), rtol=1e-6)


@pytest.mark.parametrize("unified", [True, False])
def test_a_pooled_buffer_reused_in_canary_mode_is_refilled(unified, monkeypatch):
    """Outputs come from an executable's pool: a kernel that left elements unwritten would
    return its last call's values (with the same inputs: the right ones), not canaries."""
    from functrace.backends.opencl.executable import _pooled_alloc
    monkeypatch.setattr(rt, "unified", rt.unified and unified)
    pool = {}
    a = _pooled_alloc(rt, rt.queue, pool, (5,), np.float32)
    rt.write(a, np.arange(5.0))
    assert np.asarray(a).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    buffer = a.buffer
    del a  # back to the pool
    b = _pooled_alloc(rt, rt.queue, pool, (5,), np.float32)
    assert b.buffer is buffer and np.isnan(np.asarray(b)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_full_reductions_of_broadcast_operands_and_views(dtype):
    """The shapes of the reports: full and row reductions whose fused producer reads a broadcast
    row or a reversed, sliced or strided view, chunked into slices of 4055 (full) and 3750 (rows)
    elements, not multiples of any vector width."""
    x = RNG.standard_normal((5, 30000)).astype(dtype)
    b = RNG.standard_normal(30000).astype(dtype)

    def f(x, b):
        return (fnp.sum(x + b), fnp.mean((x - b) ** 2), fnp.sum(fnp.broadcast_to(x, (2, 5, 30000))),
                fnp.max(x[::-1]), fnp.sum(x[::-1] * 2.0), fnp.sum(x[::2]), fnp.sum(x[:, :29984]),
                fnp.sum(x[::-1] + b, axis=1))
    assert_matches_numpy(f, (x, b), dtype)


VIEWS = {  # of a (6, 24016) array (144096 elements; reductions over rows in slices of 4003), times c
    "broadcast row": lambda x, r, c: x * c + r,
    "broadcast column": lambda x, r, c: x * (x[:, :1] + c),
    "reversed rows": lambda x, r, c: x[::-1] * c - r,
    "reversed columns": lambda x, r, c: x[:, ::-1] + c,
    "sliced": lambda x, r, c: x[1:, 5:] * c,
    "strided": lambda x, r, c: x[::2, ::3] - c,
    "transposed": lambda x, r, c: x.T[::-1] * c,
    "3-d view": lambda x, r, c: fnp.flip(x.reshape(6, 19, 1264), 1) * c + r[:1264],
}


def test_every_kernel_kind_reads_views_within_bounds():
    """Elementwise kernels (vector and masked tail), column reductions (vector and scalar
    columns) and chunked reductions over trailing axes, each reading each kind of view, in one
    program (float32: the widest vectors; the other tests here cover float64).  Each consumer
    scales the view by its own ``c``: a value several kernels read would be computed once."""
    x = RNG.standard_normal((6, 24016)).astype(np.float32)
    r = RNG.standard_normal(24016).astype(np.float32)

    def f(x, r):
        outs = []
        for view in VIEWS.values():
            outs += [view(x, r, 3.0), fnp.sum(view(x, r, 2.0), axis=0), fnp.max(view(x, r, 0.5), axis=-1)]
        v = VIEWS["3-d view"]  # reversed rows of 1264: slices of 4003 must not read across them
        return (*outs, fnp.sum(v(x, r, 1.5), axis=(1, 2)), fnp.sum(v(x, r, -2.0)[:, :, 7:], axis=(0, 1)))
    assert_matches_numpy(f, (x, r), np.float32, calls=1)


def test_empty_views_read_nothing():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    f = lambda x: (x[:0] * 2.0, fnp.sum(x[:, :0], axis=1), fnp.sum(x[:0]), fnp.sum(x[::-1][:, 6:], axis=0))
    got = [np.asarray(o) for o in ft.jit(f, backend="opencl")(x)]
    assert [o.shape for o in got] == [(0, 6), (4,), (), (0,)]
    assert got[1].tolist() == [0.0] * 4 and got[2] == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_select_masks_build_in_every_kernel_form(dtype):
    """``sign``, ``maximum``, ``minimum`` and ``where`` keep NaN as numpy does, through select(),
    whose mask must have the values' lane width: a float64 ``sign`` in the scalar columns of a
    column reduction (17 columns: not a multiple of the vector width) did not build
    (``select(double, double, int)`` is ambiguous in PoCL).  Vector, masked-tail and scalar
    forms, and integer ``//`` and ``%`` (select on long lanes)."""
    x = RNG.standard_normal((13, 17)).astype(dtype)
    y = RNG.standard_normal((13, 17)).astype(dtype)
    x[2, 3] = x[7, 16] = y[4, 16] = np.nan
    i = RNG.integers(-9, 9, (13, 17)).astype(np.int64)
    j = RNG.integers(-3, 3, (13, 17)).astype(np.int64)

    def g(x, y):
        return fnp.sign(x) * x + fnp.maximum(x, y) - fnp.minimum(x, y) + fnp.where(x > y, x, y)

    def f(x, y, i, j):  # distinct operands: each reduction absorbs its own elementwise group
        return (g(x, y), fnp.sum(g(y, x), axis=0), fnp.sum(g(x + 1.0, y), axis=1), fnp.sum(g(x, y + 1.0)),
                fnp.sum(i // j + i % j, axis=0), fnp.max(i // j, axis=1))
    got = ft.jit(f, backend="opencl")(x, y, i, j)
    want = ft.jit(f, backend="numpy")(x, y, i, j)
    for k, (a, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(a), w, rtol=1e-6, err_msg=f"output {k}")


def test_float64_l1_bias_gradient_and_power_gradient_build():
    """The realistic forms of the float64 select build failure: d/db sum|X + b| (a column sum of
    sign(X + b)) and value_and_grad of x ** y."""
    X, b = RNG.standard_normal((1000, 300)), np.zeros(300)
    grad_b = ft.grad(lambda b, X: fnp.sum(fnp.abs(X + b)))
    np.testing.assert_allclose(np.asarray(ft.jit(grad_b, backend="opencl")(b, X)), np.sign(X).sum(0))
    x, y = np.linspace(0.5, 2.0, 17), np.linspace(-1.0, 1.0, 17)
    vg = ft.value_and_grad(lambda x, y: fnp.sum((fnp.abs(x) + 0.5) ** fnp.tanh(y)), argnums=(0, 1))
    got, want = ft.jit(vg, backend="opencl")(x, y), ft.jit(vg, backend="numpy")(x, y)
    for a, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(a), w, rtol=1e-12)
