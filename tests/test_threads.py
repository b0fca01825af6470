"""Thread safety: one jitted function called from 8 threads at once (OpenCL kernels, host steps,
host BLAS; the numpy backend), threads tracing, differentiating and jitting their own functions
at the same time, and concurrent first calls of one signature.  Every result must equal, bit for
bit, what a single thread computes: the same program on the same inputs."""
import sys
import threading

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime as cl_runtime

THREADS = 8


def run_threads(work, n: int = THREADS) -> None:
    """``work(i)`` in ``n`` threads released together, with a short switch interval so that
    threads interleave inside calls; the first exception of any thread is raised."""
    errors = []
    barrier = threading.Barrier(n)

    def target(i):
        try:
            barrier.wait()
            work(i)
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    if errors:
        raise errors[0]


def assert_same_in_every_thread(f, inputs: list, calls: int) -> None:
    """Thread i calls ``f(*inputs[i])`` ``calls`` times; each result must equal a single-threaded one."""
    for args in inputs[:1]:  # (an auto-mode matmul decides its implementation by its third run)
        for _ in range(3):
            ft.block_until_ready(f(*args))
    want = [[np.asarray(o) for o in f(*args)] for args in inputs]
    wrong = []

    def work(i):
        for _ in range(calls):
            got = f(*inputs[i])
            if not all(np.array_equal(np.asarray(g), w) for g, w in zip(got, want[i])):
                wrong.append(i)

    run_threads(work)
    assert not wrong, f"{len(wrong)} of {THREADS * calls} calls from {THREADS} threads returned wrong results"


def mixed_program(x, y, w):
    """Fused elementwise kernels and a reduction over 131584 elements, a 512-element keepdims sum
    (a host step, or a batched launch), and a matrix product (host BLAS or OpenCL)."""
    h = fnp.tanh(x * 1.5 + y) * fnp.sin(y) + fnp.sum(x * y, axis=1, keepdims=True) / 257.0
    return h, h @ w, fnp.sum(h * h)


def _inputs(device_put: bool) -> list:
    rng = np.random.default_rng(0)
    out = []
    for i in range(THREADS):
        args = [rng.standard_normal(s).astype(np.float32) for s in ((512, 257), (512, 257), (257, 16))]
        out.append(ft.device_put(args) if device_put and i % 2 else args)  # half of them on the device
    return out


@pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")
def test_one_opencl_function_shared_by_eight_threads(monkeypatch):
    # one cl.Kernel per kernel, its arguments set then launched: interleaved threads launched with
    # each other's arguments (2-17 wrong results of 2400) or a freed buffer (PoCL aborted), and a
    # finish() in one thread let go of the inputs other threads' queued kernels still read
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 1024)  # (kernels, whatever the estimate)
    f = ft.jit(mixed_program, backend="opencl")
    assert f.lower(*_inputs(False)[0]).compile().num_kernel_launches > 0
    assert_same_in_every_thread(f, _inputs(True), calls=50)


@pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")
def test_small_host_step_program_shared_by_eight_threads():
    f = ft.jit(lambda x, y: (fnp.sin(x) * y + 1.0, fnp.sum(x * y)), backend="opencl")
    rng = np.random.default_rng(1)
    inputs = [[rng.standard_normal(100), rng.standard_normal(100)] for _ in range(THREADS)]
    assert f.lower(*inputs[0]).compile().num_kernel_launches == 0  # run on the host of the CPU device
    assert_same_in_every_thread(f, inputs, calls=30)


def test_one_numpy_backend_function_shared_by_eight_threads():
    assert_same_in_every_thread(ft.jit(mixed_program, backend="numpy"), _inputs(False), calls=6)


def _thread_function(i: int):
    k = float(i + 1)
    return lambda x: fnp.sum(fnp.sin(x * k) ** 2 + fnp.tanh(x) * k)


def _transforms(f, x, xs) -> list:
    """Nested transformations of ``f``, each pushing levels on the trace stack."""
    return [np.asarray(ft.grad(f)(x)), np.asarray(ft.hessian(f)(x)),
            np.asarray(ft.jit(ft.grad(f))(x)), np.asarray(ft.vmap(ft.grad(f))(xs)),
            np.asarray(ft.jvp(ft.grad(f), (x,), (np.ones_like(x),))[1]),
            np.asarray(ft.grad(lambda a: ft.grad(lambda b: f(x * a + x * b))(0.5))(1.5)),  # levels meet
            str(ft.make_jaxpr(ft.grad(ft.grad(lambda s: f(x * s))))(1.0))]


def test_threads_trace_and_differentiate_their_own_functions():
    # the trace stack was global: one thread's exit popped another's transformation, and nested
    # levels of one thread collided ("reached level 1 from level 1") or mixed up derivatives
    x = np.linspace(-1.0, 1.0, 5)
    xs = np.stack([x, x * 0.5])
    want = [_transforms(_thread_function(i), x, xs) for i in range(THREADS)]

    def work(i):
        for _ in range(3):
            got = _transforms(_thread_function(i), x, xs)
            for g, w in zip(got, want[i]):
                assert g == w if isinstance(w, str) else np.array_equal(g, w)

    run_threads(work)


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
def test_concurrent_first_calls_trace_and_compile_each_signature_once(backend, monkeypatch):
    from functrace import backends
    traces, compiles = [], []
    compile_for = backends.compile_for
    monkeypatch.setattr(backends, "compile_for", lambda *a: compiles.append(1) or compile_for(*a))

    def f(x):
        traces.append(x.shape)
        return fnp.cos(x) * 2.0

    g = ft.jit(f, backend=backend)
    xs = [np.full(3 + i % 2, float(i)) for i in range(THREADS)]  # two signatures
    results = [None] * THREADS

    def work(i):
        results[i] = np.asarray(g(xs[i]))

    run_threads(work)
    assert sorted(traces) == [(3,), (4,)] and len(compiles) == 2
    for x, r in zip(xs, results):
        np.testing.assert_array_equal(r, np.cos(x) * 2.0)


@pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")
def test_launches_of_one_executable_never_interleave(monkeypatch):
    """A kernel's arguments are set, then it is launched: two calls in between would launch with
    each other's buffers.  Here each launch yields the GIL between the two."""
    import time
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 1024)  # (kernels, whatever the estimate)
    exe = ft.jit(mixed_program, backend="opencl").lower(*_inputs(False)[0]).compile().executable
    inside, most = [0], [0]

    def slow(kernel):
        def launch(*args):
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            time.sleep(1e-3)  # another thread runs here
            inside[0] -= 1
            return kernel(*args)
        return launch

    exe.kernels.update({name: slow(k) for name, k in exe.kernels.items()})
    inputs = _inputs(False)
    run_threads(lambda i: [exe(*inputs[i]) for _ in range(3)])
    assert most[0] == 1


@pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")
def test_a_finish_keeps_what_other_threads_hold_meanwhile(monkeypatch):
    """``finish()`` may free the host memory held for the commands queued before it began, never
    what another thread holds (for the kernels it queues) while the wait is on."""
    rt = cl_runtime.get_runtime()
    rt.finish()
    before, during = object(), object()

    class Queue:  # the queue's wait, during which another thread queues work and holds its inputs
        def finish(self):
            rt.hold(during)

    monkeypatch.setattr(rt, "queue", Queue())
    monkeypatch.setattr(rt, "unified", True)
    rt.hold(before)
    rt.finish()
    assert rt._in_flight == [(during,)]
    rt._in_flight.clear()


@pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")
def test_an_interrupted_finish_keeps_what_was_held(monkeypatch):
    """A Ctrl-C before the wait began leaves the queued commands running: what was held for them
    stays held (freeing it would let kernels read and write freed host memory)."""
    rt = cl_runtime.get_runtime()
    rt.finish()
    held = object()

    class Queue:
        def finish(self):
            raise KeyboardInterrupt

    monkeypatch.setattr(rt, "queue", Queue())
    monkeypatch.setattr(rt, "unified", True)
    rt.hold(held)
    with pytest.raises(KeyboardInterrupt):
        rt.finish()
    assert rt._in_flight == [(held,)]
    rt._in_flight.clear()
