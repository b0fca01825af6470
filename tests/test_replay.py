"""Steady calls replayed (``backends/opencl/replay.py``): a one-step program's launches recorded at
its second call and replayed after, giving the bits of the normal path on every input, fresh
outputs each call, and the normal path where the recording cannot tell its arguments apart, in
canary mode, with ``debug_nans``, and for programs of several steps.  (Not a test_opencl module:
those run in canary mode, which takes the normal path.)"""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import executable, loops, replay
from functrace.backends.opencl import runtime as cl_runtime

pytestmark = pytest.mark.opencl_kernels
RNG = np.random.default_rng(41)


@pytest.fixture(autouse=True)
def _opencl():
    if cl_runtime.get_runtime() is None:
        pytest.skip("no OpenCL device")


def _newton_while(a):
    def body(c):
        x, k = c
        return x - (x * x - a) / (2.0 * x), k + 1
    return ft.lax.while_loop(lambda c: (fnp.max(fnp.abs(c[0] * c[0] - a)) > 1e-9) & (c[1] < 50), body, (a, 0))[0]


def _langevin(x0, noise):
    return ft.lax.fori_loop(0, noise.shape[0], lambda i, x: x - 0.01 * x + 0.1 * noise[i], x0)


def _rnn(w, xs):
    return ft.lax.scan(lambda h, x: (fnp.tanh(w @ h + x), fnp.sum(h)), fnp.zeros(w.shape[0], w.dtype), xs)


def _summed_over_lanes(v, xs):  # a uniform carry summed over the lanes: one more launch, its scratch released
    return ft.lax.scan(lambda c, x: ((c[0] * 0.9 + x, c[1] + fnp.sum(c[0])), None), (v, 0.0), xs)[0]


def _wide_lanes(x):  # over SPREAD_LANES lanes: a lane loop across the cores (not in the calling thread)
    return ft.lax.fori_loop(0, 20, lambda i, v: v * 0.9 + fnp.sin(v), x)


CASES = {
    "while loop, program whole": (_newton_while, lambda: (RNG.uniform(0.5, 50.0, 37),)),
    "fori loop reading a table": (_langevin, lambda: (RNG.standard_normal(10).astype(np.float32),
                                                      RNG.standard_normal((300, 10)).astype(np.float32))),
    "scan with products and ys": (_rnn, lambda: (RNG.standard_normal((7, 7)).astype(np.float32) * 0.3,
                                                 RNG.standard_normal((25, 7)).astype(np.float32))),
    "scan summing over its lanes": (_summed_over_lanes, lambda: (RNG.standard_normal(37).astype(np.float32),
                                                                 RNG.standard_normal((20, 37)).astype(np.float32))),
    "lane loop over the cores": (_wide_lanes, lambda: (RNG.standard_normal(loops.SPREAD_LANES + 9).astype(np.float32),)),
}


def _exe(jitted):
    (entry,) = jitted._cache.values()
    return entry.executable()


def _leaves(out):
    return [np.asarray(x).copy() for x in ft.tree_util.tree_leaves(out)]


@pytest.mark.parametrize("case", list(CASES))
def test_replayed_calls_give_the_bits_of_the_normal_path(case):
    f, make = CASES[case]
    inputs = [make() for _ in range(5)]
    reference = [_leaves(ft.jit(f)(*x)) for x in inputs]  # (a first call each: the normal path)
    g = ft.jit(f)
    outs = [_leaves(g(*ft.device_put(x))) for x in inputs + inputs]  # records at the second call
    exe = _exe(g)
    assert exe._replay is not None
    # no launch writes a buffer of the executable's pool as if it were the lowering's own (a made
    # array released or freed by the recorded call, which later calls would be handed out again)
    pooled = {id(b) for free in exe._pool.values() for b, _ in free if b is not None}
    assert not [w for *_, spec in exe._replay.launches for where, w in spec if where == replay.OWN and id(w) in pooled]
    for k, got in enumerate(outs):
        for a, b in zip(got, reference[k % len(inputs)]):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(outs[0], _leaves(ft.jit(f, backend="numpy")(*inputs[0]))):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def test_each_replayed_call_returns_fresh_arrays():
    g = ft.jit(_langevin)
    x0, noise = CASES["fori loop reading a table"][1]()
    kept = [g(x0 + k, noise) for k in range(4)]  # (alive: the pool cannot hand their buffers out)
    assert _exe(g)._replay is not None
    for k, out in enumerate(kept):
        np.testing.assert_array_equal(np.asarray(out), np.asarray(ft.jit(_langevin)(x0 + k, noise)))


def test_an_array_passed_twice_is_not_replayed_as_one_argument():
    f = lambda a, b: ft.lax.fori_loop(0, 5, lambda i, c: c * a + b, a)
    g = ft.jit(f)
    a, b = (RNG.standard_normal(11).astype(np.float32) for _ in range(2))
    da, db = ft.device_put(a), ft.device_put(b)
    for _ in range(2):
        g(da, da)  # (the second call's recording cannot tell which launch argument is which input)
    assert _exe(g)._replay is None
    for _ in range(2):
        got = g(da, db)  # (recorded at the third call)
    assert _exe(g)._replay is not None
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ft.jit(f)(a, b)))
    np.testing.assert_array_equal(np.asarray(g(da, da)), np.asarray(ft.jit(f)(a, a)))


@pytest.mark.parametrize("setting", ["opencl_debug_canaries", "debug_nans"])
def test_canary_mode_and_debug_nans_take_the_normal_path(setting):
    ft.config.update(setting, True)
    try:
        g = ft.jit(_newton_while)
        a = CASES["while loop, program whole"][1]()[0]
        for _ in range(5):
            got = g(a)
        assert _exe(g)._replay is None
    finally:
        ft.config.update(setting, False)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ft.jit(_newton_while)(a)))


def test_programs_of_several_steps_or_launches_are_not_replayed(monkeypatch):
    two_steps = ft.jit(lambda x: fnp.cumsum(_wide_lanes(x)) * 2.0)
    x = CASES["lane loop over the cores"][1]()[0]
    for _ in range(4):
        got = two_steps(x)
    assert len(_exe(two_steps).plan.steps) > 1 and _exe(two_steps)._replay is None
    np.testing.assert_allclose(np.asarray(got), np.cumsum(np.asarray(ft.jit(_wide_lanes)(x))) * 2.0, rtol=1e-5)
    monkeypatch.setattr(loops, "CHUNK_WORK", 64)  # a scan launched in chunks: not one launch
    chunked = ft.jit(_langevin)
    x0, noise = CASES["fori loop reading a table"][1]()
    for _ in range(4):
        got = chunked(x0, noise)
    assert _exe(chunked)._replay is None
    monkeypatch.undo()
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ft.jit(_langevin)(x0, noise)))


def test_records_at_the_second_call():
    assert executable.RECORD_AT[0] == 2
    g = ft.jit(_newton_while)
    a = ft.device_put(CASES["while loop, program whole"][1]()[0])
    g(a)
    assert _exe(g)._replay is None
    g(a)
    assert _exe(g)._replay is not None
