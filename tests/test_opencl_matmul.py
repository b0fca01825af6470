"""The OpenCL matmul (``cl_kernels/matmul.cl`` via the ``dot_general`` lowering) against numpy.

The kernels are forced (``ft.config`` option ``matmul`` = ``opencl``, through ``matmul.forced_mode``) so
the host-BLAS alternative cannot hide them.  Sizes 1, 7, 127 and ~1000 in every position, float32
and float64, the four transpose variants, batches, matrix-vector products, gradients, the fused
bias/activation epilogue, and the BLAS / auto modes.  The functions share one program source per
dtype, so the kernels compile once per dtype (and come from the disk caches afterwards)."""
import os

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime as cl_runtime

rt = cl_runtime.get_runtime()
pytestmark = pytest.mark.skipif(rt is None, reason="no usable OpenCL device on this machine")

if rt is not None:
    from functrace.backends.opencl import matmul as mm
    from functrace.backends.opencl.lowerings import LaunchContext

RNG = np.random.default_rng(1)
DTYPES = [np.float32, np.float64]
EPS = {np.float32: np.finfo(np.float32).eps, np.float64: np.finfo(np.float64).eps}

# (M, K, N): 1, 7, 127 and ~1000 in every position (flops kept small); (33, 77, 64): whole
# panels with a K that is not a multiple of the 8-row transposes (their tail in the packing);
# (17, 1300, 40): K beyond mm.ONE_CHUNK_K, in chunks (the last one short)
SHAPES = [(1, 1, 1), (7, 7, 7), (1, 127, 1000), (1000, 127, 1), (127, 1000, 7), (7, 1, 127),
          (1000, 7, 127), (129, 257, 65), (64, 1000, 96), (33, 77, 64), (17, 1300, 40), (1, 1000, 1)]

# the four storage layouts of op(A) (M x K) and op(B) (K x N)
VARIANTS = {
    "AB": ("mk,kn->mn", lambda a: a, lambda b: b),
    "AtB": ("km,kn->mn", lambda a: a.T, lambda b: b),
    "ABt": ("mk,nk->mn", lambda a: a, lambda b: b.T),
    "AtBt": ("km,nk->mn", lambda a: a.T, lambda b: b.T),
}


@pytest.fixture(autouse=True)
def _force_opencl():
    """The kernels forced, and afterwards none of them found unusable on this device (where a
    kernel cannot run the product silently gives way to the host BLAS: the numbers alone would not
    show it)."""
    with mm.forced_mode("opencl"):
        yield
    unusable = {key: (e.failure, e.refused) for key, e in mm._SHARED.items()
                if e.failure is not None or any(e.refused.values())}
    assert unusable == {}


def rand(shape, dtype):
    return RNG.standard_normal(shape).astype(dtype)


def check(got, a, b, dtype, k):
    """|got - a.b| within the rounding bound of a length-k dot product (elementwise)."""
    got = np.asarray(got)
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    want = np.matmul(a64, b64)
    bound = 2 * (k + 2) * EPS[dtype] * np.matmul(np.abs(a64), np.abs(b64)) + 1e-30
    assert got.dtype == dtype and got.shape == want.shape
    excess = np.abs(got - want) / bound
    assert excess.max() <= 1, f"max error {np.abs(got - want).max()} exceeds the rounding bound"


def labels(exe):
    return [line for line in exe.report().splitlines() if "dot_general" in line]


_JITTED = {name: ft.jit(lambda x, y, s=spec: fnp.einsum(s, x, y), backend="opencl")
           for name, (spec, _, _) in VARIANTS.items()}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_transpose_variants_all_shapes(variant, dtype):
    _, store_a, store_b = VARIANTS[variant]
    f = _JITTED[variant]
    for m, k, n in SHAPES:
        a, b = rand((m, k), dtype), rand((k, n), dtype)
        xa, xb = np.ascontiguousarray(store_a(a)), np.ascontiguousarray(store_b(b))
        out = f(xa, xb)
        assert isinstance(out, ft.Array)
        check(out, a, b, dtype, k)
    exe = f.lower(xa, xb).compile()
    (line,) = labels(exe)
    assert "OpenCL" in line and "host" not in line
    want = {"AB": "A B,", "AtB": "A^T B,", "ABt": "A B^T,", "AtBt": "A^T B^T,"}[variant]
    assert want in line, line
    assert exe.num_host_steps == 0 and "matmul_mv_" in exe.as_text()  # the last shape is a dot product


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_operator_and_numpy_transposes(dtype):
    x, y, w = rand((127, 33), dtype), rand((127, 65), dtype), rand((65, 33), dtype)
    f = ft.jit(lambda x, y, w: (x @ w.T, x.T @ y, fnp.dot(y, w), fnp.matmul(x, x.T), x[0] @ w.T, w @ x[0]),
               backend="opencl")
    outs = f(x, y, w)
    check(outs[0], x, w.T, dtype, 33)
    check(outs[1], x.T, y, dtype, 127)
    check(outs[2], y, w, dtype, 65)
    check(outs[3], x, x.T, dtype, 33)
    check(outs[4], x[0], w.T, dtype, 33)
    check(outs[5], w, x[0], dtype, 33)


@pytest.mark.skipif(rt is None or rt.kind != "cpu", reason="describes the cpu kind's packed GEMM")
def test_operands_are_packed_only_where_that_pays():
    plan = lambda m, n, k, ta=False, tb=False, dt=np.float32: mm._Plan(
        mm.MatmulSpec(1, m, n, k, ta, tb, np.dtype(dt)), rt, False, "none")
    assert not plan(128, 512, 784).pack_b and plan(128, 512, 784).launches == 1   # narrow B, A: in place
    assert plan(128, 1024, 784).pack_b and plan(128, 1024, 784).launches == 2     # wide rows: packed
    assert plan(128, 500, 784).pack_b                                              # partial panel
    assert plan(128, 512, 784, tb=True).pack_b                                     # B^T: transposed by packing
    assert not plan(64, 256, 99, dt=np.float64).pack_b and plan(64, 512, 99, dt=np.float64).pack_b
    assert not plan(512, 512, 128, ta=True).pack_a                                 # A^T: its columns in place
    assert plan(130, 512, 784).pack_a and plan(130, 512, 784).launches == 2       # partial micro-tile rows


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_square(dtype):
    a, b = rand((1000, 1000), dtype), rand((1000, 1000), dtype)
    check(_JITTED["AB"](a, b), a, b, dtype, 1000)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched(dtype):
    f = ft.jit(lambda x, y: fnp.einsum("bij,bjk->bik", x, y), backend="opencl")
    for bsz, m, k, n in [(3, 127, 65, 33), (1, 7, 7, 7), (5, 1, 7, 127), (4, 9, 1, 1),
                         (3, 33, 70, 64),  # B read in place (narrow, whole panels), batched
                         (4, 24, 50, 64),  # A read in place, batched
                         (2, 200, 300, 40)]:
        x, y = rand((bsz, m, k), dtype), rand((bsz, k, n), dtype)
        check(f(x, y), x, y, dtype, k)
    exe = f.lower(x, y).compile()
    assert "2 x 200x300 . 300x40" in labels(exe)[0]
    # batched transposed variants, and leading dims folded into M
    g = ft.jit(lambda x, y, u, z, w: (fnp.einsum("bji,bjk->bik", x, y), fnp.einsum("bij,bkj->bik", u, z), y @ w),
               backend="opencl")
    x, y, u, z, w = (rand(s, dtype) for s in [(3, 40, 17), (3, 40, 9), (3, 17, 40), (3, 5, 40), (9, 5)])
    outs = g(x, y, u, z, w)
    check(outs[0], x.transpose(0, 2, 1), y, dtype, 40)
    check(outs[1], u, z.transpose(0, 2, 1), dtype, 40)
    check(outs[2], y, w, dtype, 9)
    text = " ".join(labels(g.lower(x, y, u, z, w).compile()))
    assert "A^T B, 3 x 17x40" in text and "A B^T, 3 x 17x40" in text and "A B, 120x9" in text
    x, y, u, z = (rand(s, dtype) for s in [(3, 40, 16), (3, 40, 9), (3, 16, 40), (3, 5, 40)])  # A in place
    outs = g(x, y, u, z, w)
    check(outs[0], x.transpose(0, 2, 1), y, dtype, 40)
    check(outs[1], u, z.transpose(0, 2, 1), dtype, 40)


def test_vmap_of_matvec_is_batched():
    f = ft.jit(ft.vmap(lambda a, v: a @ v), backend="opencl")
    a, v = rand((6, 130, 70), np.float32), rand((6, 70), np.float32)
    check(np.asarray(f(a, v))[:, :, None], a, v[:, :, None], np.float32, 70)
    assert "mv_rows kernel; A B, 6 x 130x70 . 70x1" in labels(f.lower(a, v).compile())[0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_grad_uses_transposed_variants(dtype):
    x, w, b = rand((127, 65), dtype), rand((65, 33), dtype), rand((33,), dtype)

    def loss(x, w, b):
        return fnp.sum(fnp.tanh(x @ w + b) ** 2)
    f = ft.jit(ft.grad(loss, argnums=(0, 1, 2)), backend="opencl")
    got = f(x, w, b)
    want = ft.jit(ft.grad(loss, argnums=(0, 1, 2)), backend="numpy")(x, w, b)
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for g, r in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=tol, atol=tol)
    text = " ".join(labels(f.lower(x, w, b).compile()))
    assert "A B^T" in text and "A^T B" in text and "host BLAS" not in text


def test_any_layout_runs_as_kernels(monkeypatch):
    spec = mm.matmul_spec
    assert spec((4, 5), (5, 6), (((1,), (0,)), ((), ())), np.float32) == mm.MatmulSpec(1, 4, 6, 5, False, False,
                                                                                         np.dtype(np.float32))
    assert spec((2, 3, 4), (2, 4, 5), (((2,), (1,)), ((0,), (0,))), np.float64).batch == 2
    assert spec((3, 4, 5), (4, 5, 6), (((1, 2), (0, 1)), ((), ())), np.float32).K == 20   # grouped K
    assert spec((3, 4, 5), (5, 4, 6), (((1, 2), (1, 0)), ((), ())), np.float32) is None   # K dims in other orders
    assert spec((3, 2, 4), (2, 4, 5), (((2,), (1,)), ((1,), (0,))), np.float32) is None    # batch dim not leading
    assert spec((3, 4, 5), (5, 6), (((2,), (0,)), ((), ())), np.int32) is None            # integers
    assert spec((4, 3, 5), (5, 6), (((2,), (0,)), ((), ())), np.float32).M == 12          # free dims grouped
    # other layouts: operands copied into matmul order by a permuting kernel, then the matmul
    from functrace.primitives import dot_general
    cases = [((4, 3, 5), (3, 5, 6), (((2,), (1,)), ((1,), (0,)))),      # batch dim not leading
             ((3, 4, 5), (5, 4, 6), (((1, 2), (1, 0)), ((), ()))),      # K dims in other orders
             ((2, 7, 3, 1), (3, 9, 2), (((2,), (0,)), ((0,), (2,)))),   # K between free dims, batch last
             ((5, 1, 6), (6, 5), (((2, 0), (0, 1)), ((), ())))]         # K dims reversed, odd sizes
    monkeypatch.setattr(mm, "_DECISIONS", {})
    monkeypatch.setattr(mm, "_IN_FORCE", {})
    monkeypatch.setattr(mm, "_RUNS", {})
    monkeypatch.setattr(rt, "_matmul_choices_loaded", True, raising=False)
    for dtype, mode in zip(DTYPES, ("opencl", "auto")):  # auto: the launch count follows the decision
        for xs, ys, dn in cases:
            x, y = rand(xs, dtype), rand(ys, dtype)
            f = ft.jit(lambda x, y: dot_general(x, y, dn), backend="opencl")
            with mm.forced_mode(mode):
                exe = f.lower(x, y).compile()
            assert exe.num_host_steps == 0 and "permuted" in labels(exe)[0]
            copies = labels(exe)[0].count("operands permuted") + 1
            want = ft.jit(lambda x, y: dot_general(x, y, dn), backend="numpy")(x, y)
            tol = 1e-4 if dtype == np.float32 else 1e-12
            for _ in range(mm.MEASURE_AT_RUN + 1):  # through auto mode's decision
                np.testing.assert_allclose(np.asarray(f(x, y)), want, rtol=tol, atol=tol)
            line = labels(exe)[0]
            matmul = next(s.lowered.extra["plan"] for s in exe.plan.steps if hasattr(s, "lowered"))
            # OpenCL: the copies and the matmul's kernels; host BLAS decided before compiling: the
            # program is a matmul alone and settles on the host (numpy takes the permuted operands as
            # they are), no copy kernel either; undecided when compiled: copies, then the BLAS (the
            # device path measures the shape for programs compiled later)
            if "matmul (OpenCL" in line:
                assert exe.num_kernel_launches == matmul.launches + copies, line
            else:
                assert exe.num_kernel_launches == (copies if "undecided" in line else 0), line


def _launch_ctx():
    pool = {}

    def alloc(shape, dtype):
        arr = pool.pop((tuple(shape), np.dtype(dtype)), None)
        return rt.empty(shape, dtype) if arr is None else arr
    release = lambda arr: pool.__setitem__((arr.shape, arr.dtype), arr)
    return LaunchContext(rt, rt.queue, {}, alloc, release)


@pytest.mark.parametrize("impl", ["opencl", "blas", "blas on mapped buffers"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_bias_activation_epilogue(dtype, impl, monkeypatch):
    if impl != "opencl" and rt.kind != "cpu":
        pytest.skip("the gpu kind runs every product on the device: no host BLAS to force")
    if impl == "blas on mapped buffers":  # a CPU device without unified memory: BLAS maps the buffers
        monkeypatch.setattr(rt, "unified", False)
    monkeypatch.setattr(mm, "ONE_CHUNK_K", 128)  # K = 300: two K chunks, the epilogue after the last
    variants = [(True, "relu"), (False, "tanh")]
    lowered = {}
    for m, k, n in [(7, 7, 7), (130, 300, 47), (1, 127, 33), (64, 33, 1)]:
        spec = mm.MatmulSpec(1, m, n, k, False, False, np.dtype(dtype))
        for bias, act in variants:
            with mm.forced_mode(impl.split()[0]):
                lowered[(m, k, n, bias, act)] = mm.lower_matmul(spec, rt, bias=bias, act=act)
    ctx = _launch_ctx()  # the kernels come from the shared matmul programs
    act_fn = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0), "tanh": np.tanh}
    for (m, k, n, bias, act), low in lowered.items():
        a, b, c = rand((m, k), dtype), rand((k, n), dtype), rand((n,), dtype)
        a[m // 2, k // 3] = np.nan  # a NaN row stays NaN through the activation, as numpy's
        ins = [rt.to_device(a), rt.to_device(b)] + ([rt.to_device(c)] if bias else [])
        (out,) = low.run(ctx, ins)
        want = act_fn[act](a.astype(np.float64) @ b + (c if bias else 0))
        assert np.isnan(want[m // 2]).all()
        tol = 1e-4 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(np.asarray(out).reshape(m, n), want, rtol=tol, atol=tol)
        assert ("bias" in low.label) == bias and (act == "none" or act in low.label)
        assert low.extra["impl"] == impl.split()[0], low.label


@pytest.mark.skipif(rt is None or rt.kind != "cpu", reason="refuses the cpu kind's packing kernel, which the gpu "
                    "kind's work-group GEMM does not use")
def test_kernels_the_driver_does_not_make_give_way_to_the_host_blas(monkeypatch):
    """A matmul kernel the driver builds but will not make (Oclgrind would not make the cpu kind's
    kernels while they called clang's ``__builtin_prefetch``; test_portability runs that on
    Oclgrind) runs the product on the host BLAS, the report naming the kernel and the driver's
    reason: forced, and in auto mode, whose measuring run then measures nothing."""
    make = cl_runtime.Kernel.make

    def refusing(kernel):
        if kernel._name.startswith("matmul_pack_b"):
            raise RuntimeError("clCreateKernel failed: INVALID_KERNEL_NAME")
        return make(kernel)
    monkeypatch.setattr(cl_runtime.Kernel, "make", refusing)
    monkeypatch.setattr(mm, "_SHARED", {})  # (the kernels asked for again)
    x, w = rand((48, 40), np.float32), rand((40, 50), np.float32)  # 50 columns: B packed
    f = ft.jit(lambda x, w: x @ w * 2.0, backend="opencl")
    check(f(x, w), x, 2 * w, np.float32, 40)
    (line,) = labels(f.lower(x, w).compile())
    assert "host BLAS, its OpenCL kernels cannot run on this device: the driver did not make kernel " \
           "matmul_pack_b_f32 (RuntimeError: clCreateKernel failed: INVALID_KERNEL_NAME)" in line, line
    for table in ("_DECISIONS", "_TIMINGS", "_RUNS", "_WARM", "_IN_FORCE"):
        monkeypatch.setattr(mm, table, {})
    monkeypatch.setattr(mm, "_load_decisions", lambda rt: None)
    with mm.forced_mode("auto"):
        g = ft.jit(lambda x, w: x @ w, backend="opencl")
        exe = g.lower(x, w).compile()
        for _ in range(mm.MEASURE_AT_RUN + 1):
            check(exe(x, w), x, w, np.float32, 40)
    assert mm._DECISIONS == {} and "cannot run on this device" in labels(exe)[0], labels(exe)


@pytest.mark.parametrize("impl", ["opencl", "blas"])
def test_programs_fuse_bias_and_activation_into_the_matmul(impl):
    """``act(x @ w + b)`` in a program is one matmul step with the epilogue (tanh, max(., 0), or
    the bias alone); a chain whose intermediate value something else reads is not fused."""
    x, w, b = rand((33, 70), np.float32), rand((70, 48), np.float32), rand((48,), np.float32)
    cases = {
        "tanh": (lambda x, w, b: fnp.tanh(x @ w + b), lambda z: np.tanh(z), "+ bias + tanh"),
        "relu": (lambda x, w, b: fnp.maximum(b + x @ w, 0.0), lambda z: np.maximum(z, 0), "+ bias + relu"),
        "bias": (lambda x, w, b: x @ w + b, lambda z: z, "+ bias;"),
        # x @ w + b is read twice: the bias is fused, the tanh runs on its own
        "z shared": (lambda x, w, b: fnp.tanh(x @ w + b) + (x @ w + b), lambda z: np.tanh(z) + z, "+ bias;"),
        # x @ w is read twice: no fusion
        "x @ w shared": (lambda x, w, b: fnp.tanh(x @ w + b) + x @ w, lambda z: np.tanh(z) + z - b, None),
    }
    want_z = x.astype(np.float64) @ w + b
    for name, (f, ref, label) in cases.items():
        with mm.forced_mode(impl):
            jf = ft.jit(f, backend="opencl")
            got = np.asarray(jf(x, w, b))
            lines = labels(jf.lower(x, w, b).compile())
        np.testing.assert_allclose(got, ref(want_z), rtol=1e-4, atol=1e-4, err_msg=name)
        if label is None:
            assert all("bias" not in line for line in lines), lines
        else:
            assert len(lines) == 1 and label in lines[0], lines


@pytest.mark.parametrize("impl", ["opencl", "blas"])
def test_a_literal_operand_is_not_fused_into_a_bias_epilogue(impl):
    """The gradient of dot(x, y) * 2.5 + sum(x * w) is dot_general(2.5, y) + w (the constant
    cotangent folded into a literal): the bias fusion accepted the literal operand, which steps
    receive as None ('NoneType' object has no attribute 'reshape' in the host BLAS; fuzz seed
    3037 on PoCL's basic device).  Like an unfused dot_general with a literal, it is no matmul."""
    x, y, w = (rand((5,), np.float32) for _ in range(3))
    g = ft.grad(lambda x, y: fnp.dot(x, y) * 2.5 + fnp.sum(x * w))
    with mm.forced_mode(impl):
        jg = ft.jit(g, backend="opencl")
        got = np.asarray(jg(x, y))
        assert [line.split()[0] for line in labels(jg.lower(x, y).compile())] == ["host"]
    np.testing.assert_allclose(got, 2.5 * y + w, rtol=1e-6)


def test_saved_decisions_are_per_blas_thread_budget(monkeypatch):
    """OpenCL-vs-BLAS choices measured under one host-BLAS thread count do not carry over."""
    for v in mm._BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    paths = {mm._decisions_path(rt)}
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    paths.add(mm._decisions_path(rt))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    paths.add(mm._decisions_path(rt))
    assert len(paths) == 3

@pytest.mark.skipif(rt is None or rt.kind != "cpu", reason="describes the cpu kind's host BLAS and auto mode")
def test_saved_decisions_round_trip_and_a_corrupt_file_is_ignored(monkeypatch, tmp_path):
    """What one process measured, the next loads (same keys, same timings); a file that does not
    verify against its checksum (garbage, truncated, a flipped bit, the older plain-text format)
    only costs a new measurement, and is deleted."""
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path))
    x, w = rand((200, 100), np.float32), rand((100, 50), np.float32)
    monkeypatch.setattr(mm, "_DECISIONS", {})
    monkeypatch.setattr(mm, "_IN_FORCE", {})
    monkeypatch.setattr(mm, "_TIMINGS", {})
    monkeypatch.setattr(mm, "_RUNS", {})
    monkeypatch.setattr(rt, "_matmul_choices_loaded", True, raising=False)
    with mm.forced_mode("auto"):
        g = ft.jit(lambda x, w: x @ w, backend="opencl")
        for _ in range(mm.MEASURE_AT_RUN):
            g(x, w)
    measured = (dict(mm._DECISIONS), dict(mm._TIMINGS))
    assert len(measured[0]) == 1
    path = mm._decisions_path(rt)
    with open(path, "rb") as f:
        valid = f.read()
    old_format = repr({k: (impl, *measured[1][k]) for k, impl in measured[0].items()}).encode()
    for saved in (valid, b"{not a literal", b"[1, 2]", old_format, valid[:-3], valid[:20],
                  valid[:-1] + bytes([valid[-1] ^ 1])):
        with open(path, "wb") as f:
            f.write(saved)
        monkeypatch.setattr(mm, "_DECISIONS", {})
        monkeypatch.setattr(mm, "_IN_FORCE", {})
        monkeypatch.setattr(mm, "_TIMINGS", {})
        monkeypatch.setattr(rt, "_matmul_choices_loaded", False)
        mm._load_decisions(rt)
        assert (mm._DECISIONS, mm._TIMINGS) == (measured if saved is valid else ({}, {}))
        assert os.path.exists(path) == (saved is valid)  # a bad file is deleted

@pytest.mark.skipif(rt is None or rt.kind != "cpu", reason="describes the cpu kind's host BLAS and auto mode")
def test_blas_and_auto_modes(monkeypatch):
    x, w = rand((200, 100), np.float32), rand((100, 50), np.float32)
    with mm.forced_mode("blas"):
        f = ft.jit(lambda x, w: x @ w, backend="opencl")
        exe = f.lower(x, w).compile()
        check(f(x, w), x, w, np.float32, 100)
        assert "host BLAS" in labels(exe)[0] and exe.num_kernel_launches == 0
    monkeypatch.setattr(mm, "_DECISIONS", {})
    monkeypatch.setattr(mm, "_IN_FORCE", {})
    monkeypatch.setattr(mm, "_RUNS", {})
    monkeypatch.setattr(rt, "_matmul_choices_loaded", True, raising=False)  # ignore choices earlier processes saved
    with mm.forced_mode("auto"):
        g = ft.jit(lambda x, w: x @ w, backend="opencl")
        exe = g.lower(x, w).compile()
        assert "run 3 of the shape" in labels(exe)[0] and exe.num_kernel_launches == 0
        first = np.asarray(g(x, w))
        check(first, x, w, np.float32, 100)
        for run in range(2, mm.MEASURE_AT_RUN + 2):  # BLAS for this process's life; run 3 measures
            np.testing.assert_array_equal(np.asarray(g(x, w)), first)  # (for later processes)
            assert bool(mm._DECISIONS) == (run >= mm.MEASURE_AT_RUN)
        assert "host BLAS" in labels(exe)[0] and exe.num_kernel_launches == 0
        again = ft.jit(lambda x, w: x @ w, backend="opencl")  # jitted again in this process: as the first
        np.testing.assert_array_equal(np.asarray(again(x, w)), first)
        assert "undecided when this process first compiled" in labels(again.lower(x, w).compile())[0]
        monkeypatch.setattr(mm, "_IN_FORCE", {})  # a later process: the verdict is in force
        exe2 = ft.jit(lambda x, w: x @ w * 1.0, backend="opencl").lower(x, w).compile()
        line = labels(exe2)[0]  # cached per shape: a new program of this shape knows it
        assert "measured" in line and ("host BLAS" in line or "OpenCL" in line)
        # OpenCL: B (50 columns, not whole panels) packed, then the product; A (200 rows, whole
        # 8-row micro-tiles) is read in place
        assert exe2.num_kernel_launches == (0 if "host BLAS" in line else 2)
        monkeypatch.setattr(mm, "_DECISIONS", {})
        monkeypatch.setattr(mm, "_IN_FORCE", {})
        monkeypatch.setattr(mm, "_RUNS", {})
        h = ft.jit(lambda x, w: (x @ w, (x * 2.0) @ w, x @ (w * 3.0)), backend="opencl")
        for _ in range(2):  # runs of one shape count together: the second call measures once
            outs = h(x, w)
            for out, scale in zip(outs, (1, 2, 3)):
                check(out, x * scale, w, np.float32, 100)
        assert len(mm._DECISIONS) == 1
    with pytest.raises(ValueError, match="matmul must be one of"):
        ft.config.update("matmul", "nonsense")
    monkeypatch.setenv("FUNCTRACE_MATMUL", "nonsense")  # read with the other options, checked alike
    with pytest.raises(ValueError, match="FUNCTRACE_MATMUL"):
        type(ft.config)()


@pytest.mark.skipif(rt is None or rt.kind != "cpu", reason="describes the cpu kind's host BLAS and auto mode")
def test_auto_mode_warms_kernels_up_in_the_background(monkeypatch, tmp_path):
    """Auto mode with the background warm-up: no call builds the kernels; runs go to BLAS until
    the warm-up (a child process on PoCL) is done, and the first run after it measures."""
    import time
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(mm, "BACKGROUND_WARM_UP", True)
    for table in ("_DECISIONS", "_TIMINGS", "_RUNS", "_WARM", "_IN_FORCE"):
        monkeypatch.setattr(mm, table, {})
    monkeypatch.setattr(rt, "_matmul_choices_loaded", True, raising=False)
    x, w = rand((48, 40), np.float32), rand((40, 24), np.float32)
    with mm.forced_mode("auto"):
        g = ft.jit(lambda x, w: x @ w, backend="opencl")
        for _ in range(mm.MEASURE_AT_RUN):
            check(g(x, w), x, w, np.float32, 40)
        assert not mm._DECISIONS and len(mm._WARM) == 1  # the warm-up was handed off, not waited for
        (ready,) = mm._WARM.values()
        assert ready.wait(timeout=240), "the background warm-up did not finish"
        check(g(x, w), x, w, np.float32, 40)
        assert len(mm._DECISIONS) == 1
    deadline = time.monotonic() + 5
    while mm._warm_up_thread.child is not None and time.monotonic() < deadline:
        time.sleep(0.01)  # (the event is set as the worker lets go of its child)
    assert mm._warm_up_thread.child is None


def test_a_long_compile_prints_one_progress_line(monkeypatch, capsys):
    """A build and first call outlasting ``CompileProgress.after_seconds`` print one line to
    stderr; ``verbose`` off prints nothing."""
    monkeypatch.setattr(cl_runtime.CompileProgress, "after_seconds", 0.0)
    for verbose in (True, False):
        monkeypatch.setattr(ft.config, "verbose", verbose)
        x = rand((31, 17), np.float32)
        f = ft.jit(lambda x: fnp.sin(x) * (3.0 if verbose else 5.0), backend="opencl")
        f(x)
        import time
        time.sleep(0.2)  # the timer thread prints
        err = capsys.readouterr().err
        assert (err.count("functrace: compiling") == 1) == verbose, err


def test_auto_mode_does_not_measure_under_mpi(monkeypatch):
    """With more than one MPI process, a product auto mode has not decided yet stays on the host
    BLAS without a measurement or a warm-up (each process would measure on its own)."""
    if rt.kind != "cpu":
        pytest.skip("auto mode measures on the cpu kind only")
    monkeypatch.setattr(ft.config, "matmul", "auto")
    for table in ("_DECISIONS", "_TIMINGS", "_RUNS", "_WARM", "_IN_FORCE"):
        monkeypatch.setattr(mm, table, {})
    monkeypatch.setattr(mm, "_load_decisions", lambda rt: None)
    monkeypatch.setattr(ft.distributed, "process_count", lambda: 2)
    a, b = np.ones((40, 24), np.float32), np.ones((24, 32), np.float32)
    f = ft.jit(lambda a, b: a @ b, backend="opencl")
    for _ in range(mm.MEASURE_AT_RUN + 1):
        np.testing.assert_array_equal(np.asarray(f(a, b)), a @ b)
    assert not mm._RUNS and not mm._WARM and not mm._DECISIONS
    assert "not measured under MPI" in f.lower(a, b).compile().report()
