"""Host-side throughput decisions: which elementwise steps of a numpy program write over a dying
operand (``numpy_backend.donations``), auto mode's OpenCL-vs-BLAS verdict, and the trial of a
program both ways at its first call.  Decisions, not timings."""
import types

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
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


@pytest.mark.parametrize("units, opencl_ms, chosen", [(2, 0.80, "opencl"), (2, 0.95, "blas"), (2, 1.05, "blas"),
                                                      (1, 0.95, "opencl"), (1, 1.05, "blas")])
def test_the_kernels_must_beat_blas_by_a_margin_to_be_chosen(monkeypatch, units, opencl_ms, chosen):
    """auto mode's measured choice: OpenCL only when its time is under OPENCL_WINS_BELOW (0.9) of
    BLAS's on a device with worker threads, the faster on one running kernels in the calling
    thread; on a fake clock (BLAS 1 ms)."""
    from functrace.backends.opencl import matmul
    clock = [0.0]

    def taking(ms):
        def run(ctx, a, b, out, bias):
            clock[0] += ms * 1e-3
        return run
    spec = types.SimpleNamespace(dtype=np.dtype(np.float32), batch=1, M=64, N=64, K=64, ta=False, tb=False,
                                 flops=2 * 512 ** 3)
    plan = types.SimpleNamespace(spec=spec, bias=False, act="none",
                                 run_opencl=taking(opencl_ms), run_blas=taking(1.0))
    ctx = types.SimpleNamespace(queue=types.SimpleNamespace(finish=lambda: None),
                                rt=types.SimpleNamespace(device=types.SimpleNamespace(max_compute_units=units)))
    monkeypatch.setattr(matmul, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(matmul, "_TIMINGS", {})
    assert matmul._choose(plan, ctx, None, None, None, None) == chosen


@pytest.mark.parametrize("host_ms, device_ms, settles", [(1.0, 2.0, True), (2.0, 1.0, False)])
def test_a_host_trial_keeps_the_faster_of_the_settled_host_program_and_the_device_path(monkeypatch, host_ms,
                                                                                      device_ms, settles):
    """The trial inside a program's first call: two device-path calls, then CALLS timed calls each
    way in blocks (fake clock); the lower median stays (one lucky call of the slower way decides
    nothing), and the first call returns the winner's results."""
    from functrace.backends.opencl import executable
    clock, calls = [0.0], []

    def way(on_host, ms, slower):
        def run(*args):
            lucky = 0.1 if slower and calls.count(on_host) == (2 if not on_host else 0) else 1.0
            calls.append(on_host)
            clock[0] += ms * 1e-3 * lucky
            return ["host" if on_host else "device"]
        return run
    exe = types.SimpleNamespace(_on_host=None, _on_host_why="", rt=types.SimpleNamespace(finish=lambda: None))
    exe._device_call = lambda args: way(False, device_ms, not settles)(*args)
    trial = executable.HostTrial(way(True, host_ms, settles), "a test")
    monkeypatch.setattr(executable, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    outs = executable.OpenCLExecutable._run_trial(exe, trial, ())
    assert calls == [False] * (2 + trial.CALLS) + [True] * trial.CALLS
    assert outs == (["host"] if settles else ["device"])
    assert (exe._on_host is trial.host) == settles
    assert ("median" in exe._on_host_why and "a test" in exe._on_host_why) == settles


def test_no_host_trial_for_kernels_the_user_forced(monkeypatch):
    """matmul='opencl' keeps its kernels: the program does not try the host instead."""
    from functrace.backends.opencl import get_runtime
    rt = get_runtime()
    if rt is None or rt.kind != "cpu":
        pytest.skip("describes the cpu kind (timed trials)")
    monkeypatch.setattr(ft.config, "matmul", "opencl")
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 10**9)
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)
    rng = np.random.default_rng(4)
    w, x = rng.standard_normal((24, 16)).astype(np.float32), rng.standard_normal((8, 24)).astype(np.float32)
    f = ft.jit(lambda w, x: fnp.tanh(x @ w) * 2.0 + 1.0, backend="opencl")
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(w, x)), np.tanh(x @ w) * 2 + 1, rtol=1e-4, atol=1e-5)
    exe = f.lower(w, x).compile().executable
    assert exe._settled and exe._on_host is None and exe.num_kernel_launches > 0
