"""Host-side throughput decisions: which elementwise steps of a numpy program write over a dying
operand (``numpy_backend.donations``), and the BLAS thread choice of a program that settled on
the host (``HostExecutable``).  Decisions, not timings."""
import types

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends import blas_threads as bt
from functrace.backends import numpy_backend
from functrace.backends.numpy_backend import NumpyExecutable


def _donated(f, *args) -> list:
    """Primitive names of the equations of jit(f)'s program that write over an operand."""
    closed = ft.jit(f, backend="numpy").lower(*args).jaxpr
    exe = NumpyExecutable(closed)
    return [closed.jaxpr.eqns[i].primitive.name for i in sorted(exe._donated)]


def _no_donations(monkeypatch, f, *args) -> list:
    monkeypatch.setattr(numpy_backend, "donations", lambda jaxpr, analysis, fresh: {})
    flat = ft.tree_util.tree_leaves(args)
    return NumpyExecutable(ft.jit(f, backend="numpy").lower(*args).jaxpr)(*flat)


def test_bias_add_tanh_and_its_derivative_write_over_their_dying_operands(monkeypatch):
    rng = np.random.default_rng(0)
    w, b, x = (rng.standard_normal(s).astype(np.float32) for s in ((6, 5), (5,), (4, 6)))
    layer = lambda w, b, x: fnp.sum(fnp.tanh(x @ w + b) ** 2)
    step = ft.value_and_grad(layer, argnums=(0, 1))
    names = _donated(step, w, b, x)
    assert names.count("add") >= 1 and "tanh" in names and "sub" in names
    got = ft.jit(step, backend="numpy")(w, b, x)
    want = _no_donations(monkeypatch, lambda w, b, x: ft.tree_util.tree_leaves(step(w, b, x)), w, b, x)
    for g, r in zip(ft.tree_util.tree_leaves(got), want):
        np.testing.assert_array_equal(np.asarray(g), r)


def test_inputs_outputs_views_and_casts_are_never_written_over():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    assert _donated(lambda x: x + 1.0, x) == []             # an input
    assert _donated(lambda x: (x * 2.0, (x * 2.0) + 1.0), x) == []  # an output (x * 2 is one value)
    kept = np.array(x)

    def viewed(x):
        a = x * 2.0
        return fnp.reshape(a, (3, 2)), a + 1.0  # a reshape of a (a view in numpy) outlives a + 1
    assert _donated(viewed, x) == []
    r, s = ft.jit(viewed, backend="numpy")(x)
    np.testing.assert_array_equal(np.asarray(r), (kept * 2).reshape(3, 2))
    np.testing.assert_array_equal(np.asarray(s), kept * 2 + 1)
    assert _donated(lambda x: fnp.sum(fnp.exp(x * 2.0)), x) == ["exp"]
    assert _donated(lambda x: (x * 2.0).astype(np.float64) + 1.0, x) == []  # a float32 dies; float64 result
    assert _donated(lambda x: fnp.sum((x * 2.0)[None] + fnp.ones((4, 1, 1), np.float32)), x) == []  # broadcast


def test_donation_is_exact_in_the_mlp_step(monkeypatch):
    """The MLP training step with and without writing over dying operands: the same bits."""
    rng = np.random.default_rng(1)
    params = [(rng.standard_normal((m, n)).astype(np.float32), np.zeros(n, np.float32))
              for m, n in ((12, 8), (8, 8), (8, 3))]
    x = rng.standard_normal((5, 12)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[[0, 2, 1, 1, 0]]

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = fnp.tanh(h @ w + b)
        logits = h @ params[-1][0] + params[-1][1]
        return -fnp.mean(fnp.sum(y * ft.nn.log_softmax(logits), axis=1))
    step = ft.value_and_grad(loss)
    assert len(_donated(step, params, x, y)) >= 8
    got = ft.tree_util.tree_leaves(ft.jit(step, backend="numpy")(params, x, y))
    want = _no_donations(monkeypatch, lambda *a: ft.tree_util.tree_leaves(step(*a)), params, x, y)
    for g, r in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), r)


def test_a_settled_host_program_chooses_its_blas_threads_from_whole_calls(monkeypatch):
    """A program that settled on the host (every matmul on the host BLAS) picks its BLAS threads
    per call: one for small products only; else all cores until calls on them are slower than
    on one (a loaded machine), measured on whole calls."""
    from functrace.backends.opencl import get_runtime
    rt = get_runtime()
    if rt is None or not rt.is_cpu:
        pytest.skip("no OpenCL CPU device: programs do not settle on the host")
    monkeypatch.setattr(ft.config, "matmul", "blas")
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 10**9)
    f = lambda w, x: fnp.tanh(x @ w) * 2.0 + 1.0
    rng = np.random.default_rng(2)
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)  # not run on the host as a small program
    small_w, small_x = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
    small = ft.jit(f, backend="opencl")
    small(small_w, small_x)
    host = small.lower(small_w, small_x).compile().executable._on_host
    assert host is not None and host._threads.counts == (1,)
    n = 160  # 160^3 = 4.1M multiply-adds >= SERIAL_BLAS_MACS
    w, x = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    big = ft.jit(f, backend="opencl")
    big(w, x)
    host = big.lower(w, x).compile().executable._on_host
    cores = bt.blas_threads().default
    if cores == 1:
        assert host._threads.counts == (1,)
        return
    assert host._threads.counts == (cores, 1) and host._threads.current == cores
    clock = [0.0]
    run = host._exe.run_arrays

    def timed_run(*args):  # calls on all cores take 5 s of the fake clock, on one thread 1 s
        clock[0] += 5.0 if bt.blas_threads().current == cores else 1.0
        return run(*args)
    monkeypatch.setattr(host._exe, "run_arrays", timed_run)
    monkeypatch.setattr(bt, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))  # (whole calls timed there)
    want = np.tanh(x @ w) * 2 + 1
    for _ in range(8 + bt.ThreadChoice.TRIAL):
        np.testing.assert_allclose(np.asarray(big(w, x)), want, rtol=1e-4, atol=1e-4)
    assert host._threads.current == 1
    assert bt.blas_threads().current == bt.blas_threads().default  # given back after each call


@pytest.mark.parametrize("units, opencl_ms, chosen", [(2, 0.80, "opencl"), (2, 0.95, "blas"), (2, 1.05, "blas"),
                                                      (1, 0.95, "opencl"), (1, 1.05, "blas")])
def test_the_kernels_must_beat_blas_by_a_margin_to_be_chosen(monkeypatch, units, opencl_ms, chosen):
    """auto mode's measured choice: OpenCL only when its time is under OPENCL_WINS_BELOW (0.9) of
    BLAS's on a device with worker threads, the faster on one running kernels in the calling
    thread; on a fake clock (BLAS 1 ms on every thread count)."""
    from functrace.backends.opencl import matmul
    clock = [0.0]

    def taking(ms):
        def run(ctx, a, b, out, bias):
            clock[0] += ms * 1e-3
        return run
    spec = types.SimpleNamespace(dtype=np.dtype(np.float32), batch=1, M=64, N=64, K=64, ta=False, tb=False,
                                 flops=2 * 512 ** 3)
    plan = types.SimpleNamespace(spec=spec, bias=False, act="none", threads=None,
                                 run_opencl=taking(opencl_ms), run_blas=taking(1.0))
    ctx = types.SimpleNamespace(queue=types.SimpleNamespace(finish=lambda: None),
                                rt=types.SimpleNamespace(device=types.SimpleNamespace(max_compute_units=units)))
    monkeypatch.setattr(matmul, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(matmul, "_TIMINGS", {})
    assert matmul._choose(plan, ctx, None, None, None, None) == chosen


def test_the_numpy_backend_chooses_blas_threads_for_programs_with_large_products(monkeypatch):
    """The numpy backend manages BLAS threads only for a program whose largest product can gain
    from them; it moves to one thread when whole calls on all cores are slower."""
    f = lambda w, x: fnp.tanh(x @ w)
    rng = np.random.default_rng(3)
    small_w, small_x = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2))
    exe = NumpyExecutable(ft.jit(f, backend="numpy").lower(small_w, small_x).jaxpr)
    assert numpy_backend.largest_product(exe.closed.jaxpr) == 16 ** 3 and exe._threads is None
    n = 160
    w, x = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    exe = NumpyExecutable(ft.jit(f, backend="numpy").lower(w, x).jaxpr)
    assert numpy_backend.largest_product(exe.closed.jaxpr) == n ** 3 >= bt.SERIAL_BLAS_MACS
    cores = bt.blas_threads().default
    if cores == 1:
        assert exe._threads is None
        return
    assert exe._threads.counts == (cores, 1)
    clock = [0.0]
    run = exe._run

    def timed_run(*args):  # all cores: 5 s of the fake clock, one thread: 1 s
        clock[0] += 5.0 if bt.blas_threads().current == cores else 1.0
        return run(*args)
    monkeypatch.setattr(exe, "_run", timed_run)
    monkeypatch.setattr(bt, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))  # (whole calls timed there)
    for _ in range(8 + bt.ThreadChoice.TRIAL):
        np.testing.assert_allclose(exe(w, x)[0], np.tanh(x @ w), rtol=1e-4, atol=1e-5)
    assert exe._threads.current == 1 and bt.blas_threads().current == cores


def test_attention_counts_as_a_product():
    q = np.zeros((2, 64, 4, 32), np.float32)
    closed = ft.jit(lambda q: ft.nn.attention(q, q, q), backend="numpy").lower(q).jaxpr
    assert numpy_backend.largest_product(closed.jaxpr) == 2 * 64 * 4 * 32 * 64


@pytest.mark.parametrize("host_ms, device_ms, settles", [(1.0, 2.0, True), (2.0, 1.0, False)])
def test_a_host_trial_keeps_the_faster_of_the_settled_host_program_and_the_device_path(host_ms, device_ms, settles):
    """A program of host steps and matmuls, some of which auto mode put on OpenCL, times its
    next calls on the device path, then as the host program, and keeps the lower median (one
    lucky call of the slower way decides nothing)."""
    from functrace.backends.opencl import executable
    host = object()
    exe = types.SimpleNamespace(_trial=None, _on_host=None, _on_host_why="")
    exe._trial = trial = executable.HostTrial(host, "a test")
    for on_host, ms, slower in ((False, device_ms, not settles), (True, host_ms, settles)):
        for k in range(executable.HostTrial.CALLS):
            assert trial.host_next() == on_host
            lucky = 0.1 if k == 0 and slower else 1.0  # the slower way's one fast call
            executable.OpenCLExecutable._record(exe, trial, on_host, ms * 1e-3 * lucky)
    assert exe._trial is None and (exe._on_host is host) == settles
    assert ("median" in exe._on_host_why and "a test" in exe._on_host_why) == settles


def test_no_host_trial_for_kernels_the_user_forced(monkeypatch):
    """matmul='opencl' keeps its kernels: the program does not try the host instead."""
    from functrace.backends.opencl import get_runtime
    rt = get_runtime()
    if rt is None or not rt.is_cpu:
        pytest.skip("no OpenCL CPU device")
    monkeypatch.setattr(ft.config, "matmul", "opencl")
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 10**9)
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)
    rng = np.random.default_rng(4)
    w, x = rng.standard_normal((24, 16)).astype(np.float32), rng.standard_normal((8, 24)).astype(np.float32)
    f = ft.jit(lambda w, x: fnp.tanh(x @ w) * 2.0 + 1.0, backend="opencl")
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(w, x)), np.tanh(x @ w) * 2 + 1, rtol=1e-4, atol=1e-5)
    exe = f.lower(w, x).compile().executable
    assert exe._settled and exe._trial is None and exe._on_host is None and exe.num_kernel_launches > 0
