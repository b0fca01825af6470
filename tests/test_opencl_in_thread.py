"""PoCL's in-thread device beside its pthread device (``backends/opencl/in_thread.py``): which
programs run there, that their values and bits are those of the numpy backend and of the pthread
device, that the two queues order each other's results, and that the user's environment and
device list are left as they were."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import in_thread, loops
from functrace.backends.opencl import runtime as cl_runtime

RNG = np.random.default_rng(23)
IN_THREAD_LINE = "runs in the calling thread"


def _runtime():
    rt = cl_runtime.get_runtime()
    if rt is None or rt.in_thread_queue is None:
        pytest.skip("no in-thread device here: not PoCL with only its pthread and basic drivers installed "
                    "(in_thread.request), or POCL_DEVICES set by the user")
    return rt


def _newton(a):
    return ft.lax.fori_loop(0, 30, lambda i, x: x - (x * x - a) / (2.0 * x), a + 1.0)


def _langevin(x0, noise):
    step = lambda i, x: x - 0.01 * x + 0.1 * noise[i]
    return ft.lax.fori_loop(0, noise.shape[0], step, x0)


def _report(f, *args) -> str:
    return ft.jit(f).lower(*args).compile().report()


def _same_as_numpy(f, *args):
    """``f`` jitted on OpenCL: twice the same bits, and the numpy backend's values."""
    got = np.asarray(ft.jit(f)(*args))
    again = np.asarray(ft.jit(f)(*args))
    np.testing.assert_array_equal(got, again)
    np.testing.assert_allclose(got, np.asarray(ft.jit(f, backend="numpy")(*args)), rtol=1e-6, atol=1e-6)
    return got


def test_a_program_compiled_whole_runs_in_the_calling_thread():
    _runtime()
    a = RNG.uniform(0.5, 100.0, 63)
    assert IN_THREAD_LINE in _report(_newton, a)
    np.testing.assert_allclose(_same_as_numpy(_newton, a), np.sqrt(a), rtol=1e-12)


def test_a_lane_loop_over_few_lanes_runs_in_thread_and_a_wide_one_spreads():
    _runtime()
    few = (RNG.standard_normal(10).astype(np.float32), RNG.standard_normal((300, 10)).astype(np.float32))
    report = _report(_langevin, *few)
    assert IN_THREAD_LINE in report and "lane shape (10,)" in report, report
    _same_as_numpy(_langevin, *few)
    lanes = loops.SPREAD_LANES + 3
    wide = (RNG.standard_normal(lanes).astype(np.float32), RNG.standard_normal((40, lanes)).astype(np.float32))
    report = _report(_langevin, *wide)
    assert IN_THREAD_LINE not in report and "compiled whole" in report, report
    _same_as_numpy(_langevin, *wide)


def test_a_program_with_a_kernel_over_the_cores_stays_on_the_pthread_device():
    _runtime()
    x = RNG.standard_normal(5000)
    f = lambda x: fnp.sin(x) * 2.0 + fnp.cos(x)  # a fused kernel across the device: no loop
    assert IN_THREAD_LINE not in _report(f, x)
    _same_as_numpy(f, x)


def test_the_option_off_keeps_every_program_on_the_pthread_device(monkeypatch):
    _runtime()
    a = RNG.uniform(0.5, 100.0, 16)
    on = np.asarray(ft.jit(_newton)(a))
    monkeypatch.setattr(ft.config, "opencl_in_thread_device", False)
    assert IN_THREAD_LINE not in _report(_newton, a)
    np.testing.assert_array_equal(np.asarray(ft.jit(_newton)(a)), on)  # the same kernel: the same bits


def test_results_cross_between_the_two_queues_in_order():
    """A kernel over the cores (pthread queue) feeds a loop in the calling thread, which feeds
    another kernel over the cores, 20 times over, without waiting in between: each reads its
    producer's finished results."""
    _runtime()
    n = 1 << 16
    spread = ft.jit(lambda x: fnp.sqrt(fnp.abs(x) + 1.0) * 3.0)
    loop = ft.jit(lambda x: ft.lax.fori_loop(0, 5, lambda i, c: c * 0.5 + 1.0, x[:32]))
    back = ft.jit(lambda x, y: x + fnp.sum(y))
    assert IN_THREAD_LINE in loop.lower(np.zeros(n)).compile().report()
    x = RNG.standard_normal(n)
    want_x = x
    for _ in range(20):
        y = loop(spread(x))
        x = back(x, y)
        s = np.sqrt(np.abs(want_x) + 1.0) * 3.0
        c = s[:32]
        for _ in range(5):
            c = c * 0.5 + 1.0
        want_x = want_x + np.sum(c)
    np.testing.assert_allclose(np.asarray(x), want_x, rtol=1e-12)


def test_threads_running_in_thread_programs_at_once():
    """Four threads, two of them calling one program (its calls take turns) and two another, all
    launching on the one in-thread queue at once: each result its own."""
    _runtime()
    a = [RNG.uniform(0.5, 100.0, 40) for _ in range(4)]
    newton = ft.jit(_newton)
    halving = ft.jit(lambda x: ft.lax.fori_loop(0, 20, lambda i, c: c * 0.5 + 1.0, x))
    fs = [newton, halving, newton, halving]
    assert IN_THREAD_LINE in halving.lower(a[0]).compile().report()
    want = [np.asarray(f(x)) for f, x in zip(fs, a)]
    errors = []

    def work(k):
        try:
            for _ in range(50):
                np.testing.assert_array_equal(np.asarray(fs[k](a[k])), want[k])
        except Exception as e:  # (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_the_in_thread_device_is_not_listed_and_the_environment_is_restored():
    rt = _runtime()
    assert all(d.int_ptr != rt.in_thread_queue.device.int_ptr for d in ft.devices())
    assert "POCL_DEVICES" not in os.environ or os.environ["POCL_DEVICES"] != " ".join(in_thread.DRIVERS)


def test_request_asks_only_where_nothing_else_is_dropped(monkeypatch):
    """``request`` sets POCL_DEVICES only before PoCL loads, where the user set none, the option is
    on, and PoCL's drivers are pthread and basic alone."""
    def asked(loaded=False, drivers=("pthread", "basic"), user=None, option=True) -> bool:
        monkeypatch.setattr(in_thread, "_state", {})
        monkeypatch.setattr(in_thread, "_pocl_driver_modules", lambda: None if drivers is None else set(drivers))
        monkeypatch.setattr(ft.config, "opencl_in_thread_device", option)
        if user is None:
            monkeypatch.delenv("POCL_DEVICES", raising=False)
        else:
            monkeypatch.setenv("POCL_DEVICES", user)
        in_thread.request(loaded)
        return in_thread._state["requested"] and os.environ.get("POCL_DEVICES") == "pthread basic"

    assert asked()
    assert not asked(loaded=True)
    assert not asked(drivers=("pthread", "basic", "cuda"))
    assert not asked(drivers=None)
    assert not asked(user="pthread")
    assert not asked(option=False)
    monkeypatch.setattr(in_thread, "_state", {"requested": True})
    monkeypatch.setenv("POCL_DEVICES", "pthread basic")
    assert in_thread.listed([]) == [] and "POCL_DEVICES" not in os.environ


_CHILD = """
import os, sys, functrace as ft
from functrace.backends.opencl import runtime
rt = runtime.get_runtime()
print(rt.in_thread_queue is not None, os.environ.get("POCL_DEVICES"), [d.name.split("-")[0] for d in ft.devices()])
"""


@pytest.mark.parametrize("env, companion", [({}, True), ({"FUNCTRACE_OPENCL_IN_THREAD_DEVICE": "0"}, False),
                                            ({"POCL_DEVICES": "pthread"}, False)])
def test_a_fresh_process(env, companion):
    """In a new process: the in-thread device opens unless the option is off or the user chose
    PoCL's devices, whose setting stays as the user left it; ``ft.devices()`` never lists it."""
    _runtime()
    child_env = {k: v for k, v in os.environ.items() if k not in ("POCL_DEVICES", "FUNCTRACE_OPENCL_IN_THREAD_DEVICE")}
    child_env.update(env)
    run = subprocess.run([sys.executable, "-c", _CHILD], env=child_env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    has, pocl_devices, names = run.stdout.split(" ", 2)
    assert has == str(companion)
    assert pocl_devices == env.get("POCL_DEVICES", "None").split()[0]
    assert "basic" not in names
