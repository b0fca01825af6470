"""Where a loop runs on the cpu device kind (issue 15): a small body as ONE host step with the numpy
backend's implementation (bit-identical values, a reason in the report), a body with real work
driven from the host with its kernels.  Decisions, not timings.  The gpu kind drives every loop
with its kernels: there only the numbers are checked.  Loops whose bodies are elementwise over one
lane shape are compiled whole instead (``test_opencl_loops_whole.py``): the bodies here hold a
reduction (``_not_lanes``), so they keep these designs -- and work-group loops, which would run
them whole too (``test_opencl_group_loops.py``), are off here (``no_work_group_loops``): these are
the designs of bodies too large for one work-group."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import group_loops
from functrace.backends.opencl import runtime as cl_runtime
from functrace.backends.opencl.placement import LaunchCosts

lax = ft.lax


@pytest.fixture(autouse=True)
def no_work_group_loops(monkeypatch):
    monkeypatch.setattr(group_loops, "GROUP_ELEMENTS", 0)


@pytest.fixture
def placement(request, monkeypatch):
    """Set ``opencl_host_step_elements`` (None: the cost estimate) for one test; conftest pins it
    to 0 (kernels everywhere) for test_opencl* modules.  The estimate runs on a quiet machine's
    launch costs (the upper end of those measured: 6 us a dispatch, 110 us a launch and wait), not
    on the ones this process measured: the suite runs two test processes at once, and the other one
    can make a measured wait, hence a placement, anything."""
    saved = ft.config.opencl_host_step_elements
    rt = cl_runtime.get_runtime()
    if rt is not None:
        monkeypatch.setattr(rt, "_launch_costs", LaunchCosts(dispatch=6e-6, wait=110e-6), raising=False)

    def use(value):
        ft.config.update("opencl_host_step_elements", value)
    yield use
    ft.config.update("opencl_host_step_elements", saved)


def _not_lanes(x):
    """``x``, plus a sum over a stack of x and -x (exactly 0): a reduction, which keeps a loop from
    being compiled whole as a lane loop."""
    return x + fnp.sum(fnp.stack([x, -x]), axis=0)


def _pendulum_loss(params, theta0):
    """200 steps of a damped pendulum, carry (theta, omega) scalars."""
    def step(carry, _):
        theta, omega = carry
        omega = omega + 0.01 * (-params[0] * fnp.sin(theta) - params[1] * omega)
        theta = _not_lanes(theta + 0.01 * omega)
        return (theta, omega), theta
    _, thetas = lax.scan(step, (theta0, theta0 * 0.0), None, length=200)
    return fnp.sum(thetas ** 2)


def _fori(params, theta0):
    return lax.fori_loop(0, 50, lambda i, c: (_not_lanes(c[0] + 0.01 * c[1]), c[1] - 0.01 * params[0] * fnp.sin(c[0])),
                         (theta0, theta0 * 0.0))


def _while(params, theta0):
    return lax.while_loop(lambda c: c[0] < 50, lambda c: (c[0] + 1, _not_lanes(c[1] * params[1] + fnp.cos(c[1]))),
                           (0, theta0))


def _cpu_kind() -> bool:
    """Do programs compile for the cpu kind, whose loop placements these tests describe?"""
    rt = cl_runtime.get_runtime()
    return rt is None or rt.kind == "cpu"


def _lines(compiled, kind: str, name: str) -> list:
    return [line for line in compiled.report().splitlines() if line.strip().startswith(f"{kind}  {name}")]


@pytest.mark.parametrize("f,loop", [(ft.value_and_grad(_pendulum_loss), "scan"), (_fori, "scan"), (_while, "while")],
                         ids=["scan_value_and_grad", "fori_loop", "while_loop"])
def test_a_small_loop_is_one_host_step_bit_identical_to_numpy(placement, f, loop):
    placement(None)  # the cost estimate
    args = (np.array([9.8, 0.1]), np.float64(0.5))
    compiled = ft.jit(f, backend="opencl").lower(*args).compile()
    got = ft.tree_util.tree_leaves(ft.tree_util.tree_map(np.asarray, compiled(*args)))
    want = ft.tree_util.tree_leaves(ft.jit(f, backend="numpy")(*args))
    if not _cpu_kind():  # (driven with kernels: numpy's numbers within rounding)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12)
        return
    hosted = _lines(compiled, "host  ", loop)
    assert hosted and all("one numpy loop" in line for line in hosted), compiled.report()
    assert not _lines(compiled, "kernel", loop), compiled.report()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_loop_with_real_work_drives_its_body_as_kernels(placement):
    """A body of transcendentals over 100K elements: kernels win the estimate, the scan is driven."""
    placement(None)
    x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)

    def f(x):
        def step(h, _):
            h = fnp.tanh(fnp.sin(h) * fnp.exp(-h * h) + fnp.cos(h) * fnp.log1p(h * h) + fnp.tanh(h))
            return h, h[:3]
        return lax.scan(step, x, None, length=3)
    compiled = ft.jit(f, backend="opencl").lower(x).compile()
    assert _lines(compiled, "kernel", "scan") and not _lines(compiled, "host  ", "scan"), compiled.report()
    got = [np.asarray(v) for v in compiled(x)]
    for g, w in zip(got, ft.jit(f, backend="numpy")(x)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def test_the_element_pin_places_each_loop_by_its_largest_value(placement):
    """``opencl_host_step_elements`` replaces the estimate: a loop over 8 elements on the host,
    one over 4096 driven with kernels, in one program; a nested loop's values count."""
    placement(1000)
    rng = np.random.default_rng(1)
    small, big = rng.standard_normal(8), rng.standard_normal(4096)

    def f(small, big):
        s = lax.fori_loop(0, 5, lambda i, c: _not_lanes(fnp.sin(c) + 1.0), small)
        b = lax.fori_loop(0, 3, lambda i, c: _not_lanes(fnp.cos(c) * 0.5), big)
        nested = lax.fori_loop(0, 2, lambda i, c: c + lax.fori_loop(0, 2, lambda j, d: d * c[0], big)[:8], small)
        return s, b, nested
    compiled = ft.jit(f, backend="opencl").lower(small, big).compile()
    hosted = 1 if _cpu_kind() else 0
    assert len(_lines(compiled, "host  ", "scan")) == hosted, compiled.report()
    assert len(_lines(compiled, "kernel", "scan")) == 3 - hosted, compiled.report()
    got = [np.asarray(v) for v in compiled(small, big)]
    for g, w in zip(got, ft.jit(f, backend="numpy")(small, big)):
        np.testing.assert_allclose(g, w, rtol=1e-12)
