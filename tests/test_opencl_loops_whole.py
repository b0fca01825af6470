"""Lane loops (issue 34's first slice): a scan / fori_loop / while_loop whose body is elementwise
over one lane shape runs as ONE kernel launch, each work-item running every iteration for its lanes
(``backends/opencl/loops.py``).  Checked against the numpy backend on both device kinds: random
odd shapes, float32 / float64 / integers / bools, reverse, lengths 0 and 1, consts, carries passed
through or swapped, a y that is a carry, tables read at the step index, while loops with uniform and
vmap's per-lane predicates, derivatives of order 2 and vmap through loops, the programs of the
issue's table; and that loops a lane cannot run (a reduction, a product) keep today's design with
the report saying why.  Decisions, not timings: the benchmark is ``benchmarks/bench_loops.py``."""
import numpy as np
import pytest
import test_opencl_sources
from oclgrind_util import requires_oclgrind, run_python

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import loops
from functrace.backends.opencl import runtime as cl_runtime
from functrace.test_util import check_grads

lax = ft.lax


@pytest.fixture(params=["cpu", "gpu"], autouse=True)
def kind(request, monkeypatch):
    """Every test runs on both device kinds (the gpu kind forced on this machine's device)."""
    monkeypatch.setattr(ft.config, "opencl_device_kind", request.param)
    return request.param


@pytest.fixture(autouse=True)
def lane_loops_spread(monkeypatch):
    """This file's programs keep their lane loops: a program holding a loop with a lane form runs
    as its plan, not as one work-group's kernel (that is ``test_opencl_group_loops.py``'s)."""
    monkeypatch.setattr(loops, "SPREAD_LANES", 1)


@pytest.fixture(params=[False, True], ids=["spread", "interleaved"])
def interleave(request, monkeypatch):
    """Both forms of a lane scan: each vector a work-item (the lanes spread over the device), and,
    on the cpu kind, one work-item running up to ``loops.INTERLEAVE`` vectors at once (a loop of
    fewer than ``SPREAD_LANES`` lanes: one compute unit's work, raised here past every shape these
    tests use)."""
    if request.param:
        monkeypatch.setattr(loops, "SPREAD_LANES", 1 << 20)
    return request.param


def _interleaved(compiled, kind: str, interleave: bool, lanes: int) -> None:
    """On the cpu kind a lane scan over 2 to ``loops.INTERLEAVE`` vectors of lanes interleaves them,
    where asked (a program with glue around its loop runs whole as one work-group's kernel instead)."""
    report = compiled.report()
    if kind == "cpu" and interleave and 16 < lanes <= 32 and "lane shape" in report:
        assert "interleaved" in report, report


def _compile(f, *args):
    return ft.jit(f, backend="opencl").lower(*args).compile()


def _loop_lines(compiled) -> list:
    """The report's lines of loops (scan / while), whichever way they run, and of a program
    compiled whole with its loops."""
    return [line.strip() for line in compiled.report().splitlines()
            if line.strip().split(" ")[0] in ("kernel", "host") and line.split()[1] in ("scan:", "scan", "while:",
                                                                                         "while", "program:")]


def _whole(compiled) -> int:
    """Loops compiled whole: alone, or in a program compiled whole (its line counts them)."""
    count = 0
    for line in _loop_lines(compiled):
        if line.split()[1] == "program:":
            count += int(line.rsplit(", ", 1)[1].split()[0])
        else:
            count += "compiled whole:" in line and "not compiled whole" not in line
    return count


def _leaves(tree) -> list:
    return [np.asarray(x) for x in ft.tree_util.tree_leaves(tree)]


def _check(f, args, *, whole: int, exact: bool = False, rtol: float = 1e-12, atol: float = 0.0):
    """``f`` on OpenCL with ``whole`` loops compiled whole, twice the same bits, and the numpy
    backend's values (bit for bit where ``exact``).  Returns the compiled program."""
    compiled = _compile(f, *args)
    assert _whole(compiled) == whole, compiled.report()
    got = _leaves(compiled(*args))
    again = _leaves(compiled(*args))
    want = _leaves(ft.jit(f, backend="numpy")(*args))
    assert len(got) == len(want)
    for g, a, w in zip(got, again, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, a)
        if exact or w.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return compiled


# --------------------------------------------------------------------------- scans


@pytest.mark.parametrize("lanes", [2, 3, 5])
def test_few_lanes_get_the_float32_helpers_of_their_vector_width(lanes):
    """Fewer lanes than the cpu kind's vector halve its width to 2: the program lacked float2's
    ft_tanh / ft_exp / ft_log (a build failure the fuzzer found: vmap of a scan over 3 members)."""
    x = np.linspace(0.1, 0.9, lanes).astype(np.float32)

    def f(x):
        step = lambda c, _: (fnp.tanh(c) + fnp.exp(-c) * fnp.log1p(c * c) - fnp.log(c + 2.0), c)  # noqa: E731
        return lax.scan(step, x, None, length=4)
    _check(f, (x,), whole=1, rtol=1e-5, atol=1e-6)

# (lane shape, dtype, reverse, length): odd sizes, a vector's remainder, every length kind
SCANS = [((), np.float32, False, 6), ((), np.float64, True, 0), ((1,), np.float64, True, 6),
         ((7,), np.float32, True, 1), ((7,), np.float64, False, 6), ((3, 5), np.float64, False, 0),
         ((33,), np.float64, True, 6), ((33,), np.float32, False, 1), ((2, 3, 7), np.float32, False, 6),
         ((2, 3, 7), np.float64, True, 6)]


@pytest.mark.parametrize("shape, dtype, reverse, length", SCANS, ids=str)
def test_scan_of_arithmetic_is_one_launch_with_numpys_bits(shape, dtype, reverse, length, kind, interleave):
    """Carries of the lane shape and uniform ones, a carry passed through, two swapped, a lane
    const and a uniform one, lane and uniform xs, lane and uniform ys and a y that is a carry:
    + - * / and selects are correctly rounded, so numpy's bits."""
    rng = np.random.default_rng(len(shape) * 100 + length)
    a = rng.standard_normal(shape).astype(dtype)
    b = dtype(rng.standard_normal())
    xs = rng.standard_normal((length,) + shape).astype(dtype)
    us = rng.standard_normal((length,)).astype(dtype)

    def f(a, b, xs, us):
        def step(carry, x):
            h, s, kept, p, q = carry
            xl, xu = x
            h = h * b + xl / (1.5 + a * a) - s
            s = s * 0.5 + xu
            h = fnp.where(h > 2.0, h - 1.0, h)
            return (h, s, kept, q, p), (h, s, p * xl, q)
        init = (a, b * 0.25, a + 1.0, a * 2.0, a - 3.0)
        return lax.scan(step, init, (xs, us), length=length, reverse=reverse)
    _interleaved(_check(f, (a, b, xs, us), whole=1, exact=True), kind, interleave, int(np.prod(shape)))


@pytest.mark.parametrize("reverse", [False, True])
def test_a_long_scan_is_several_launches_over_consecutive_steps(monkeypatch, reverse):
    """Past ``CHUNK_WORK`` lane-equations a scan is launched in chunks of steps (Ctrl-C lands
    between them): the carries, uniform and lane, pass from launch to launch."""
    monkeypatch.setattr(loops, "CHUNK_WORK", 7 * 8 * 5)  # 7 lanes, about 8 equations: about 5 steps a launch
    rng = np.random.default_rng(2)
    a, xs = rng.standard_normal(7), rng.standard_normal((23, 7))

    def f(a, xs):
        def step(c, x):
            h, t, total, count = c
            total = total + fnp.sum(h * x)  # lane sums: each lane's total passes from launch to launch too
            count = count + fnp.sum((h > x).astype(np.int32))
            return (h * 0.75 + x * t, t + 0.5, total, count), h - x
        return lax.scan(step, (a, 0.0, 1.5, np.int64(3)), xs, reverse=reverse)
    compiled = _check(f, (a, xs), whole=1, rtol=1e-13)
    assert compiled.num_kernel_launches > 3 and " launches (" in compiled.report(), compiled.report()
    assert "2 carries summed over the lanes" in compiled.report()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transcendentals_within_rounding(dtype):
    """exp / tanh / log1p / sin in a body: the fused kernels' functions, numpy's values within
    float rounding (both compound over the steps)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (37,)).astype(dtype)

    def f(x):
        def step(h, _):
            h = 0.9 * fnp.tanh(h) + 0.1 * fnp.sin(3.0 * h) - 0.05 * fnp.log1p(h * h) + 0.01 * fnp.exp(-h)
            return h, h * h
        return lax.scan(step, x, None, length=50)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    _check(f, (x,), whole=1, rtol=tol, atol=tol)


def test_integers_and_bools_as_lanes(kind, interleave):
    """int32 / int64 lanes with numpy's % and //, a bool carry, an int counter (uniform), and a
    conversion back to float: exact."""
    rng = np.random.default_rng(4)
    a = rng.integers(-50, 50, (13,)).astype(np.int32)
    b = rng.integers(-9, 9, (13,)).astype(np.int64)
    flag = rng.random(13) < 0.5

    def f(a, b, flag):
        def step(carry, _):
            i, x, y, m, z = carry
            x = x * 3 % 17 - i
            y = (y * 5 + x.astype(np.int64)) // 3
            m = fnp.logical_xor(m, x > y)
            z = z + fnp.where(m, 1.0, -0.5) * y.astype(np.float64)
            return (i + 1, x, y, m, z), m
        return lax.scan(step, (np.int32(0), a, b, flag, np.zeros(13)), None, length=9)
    _interleaved(_check(f, (a, b, flag), whole=1, exact=True), kind, interleave, 13)


def test_fori_loop_reads_a_table_at_the_step(interleave):
    """``noise[i]`` in a fori_loop (a take of a closed-over (steps, 10) array at the counter) and a
    uniform table of step sizes: still one launch."""
    rng = np.random.default_rng(5)
    x0, noise, eps = rng.standard_normal(10), rng.standard_normal((40, 10)), rng.uniform(0, 0.1, 40)

    def f(x0, noise, eps):
        return lax.fori_loop(0, 40, lambda i, x: x + eps[i] * (-x) + 0.1 * noise[i], x0)
    _check(f, (x0, noise, eps), whole=1, exact=True)


def test_closed_over_arrays_and_literals():
    """Arrays made inside the body (closed-over constants of the sub-program) and literal inits."""
    def f(x):
        w = np.linspace(0.5, 1.5, 9)

        def step(h, _):
            return h * w + np.float64(0.25), h
        return lax.scan(step, x, None, length=4)
    _check(f, (np.arange(9.0),), whole=1, exact=True)


# --------------------------------------------------------------------------- while loops

def test_while_with_a_uniform_predicate():
    def f(x, k):
        return lax.while_loop(lambda c: c[0] < k, lambda c: (c[0] + 1, c[1] * 0.5 + 1.0 / (1.0 + c[1] * c[1])),
                              (0, x))
    _check(f, (np.linspace(-2, 2, 11), 23), whole=1, exact=True)


def _newton(a):
    """Newton's method for sqrt(a), each member stopping at its own tolerance."""
    def cond(c):
        x, i = c
        return (fnp.abs(x * x - a) > 1e-12 * a) & (i < 60)

    def body(c):
        x, i = c
        return x - (x * x - a) / (2.0 * x), i + 1
    return lax.while_loop(cond, body, (a + 1.0, 0))


@pytest.mark.parametrize("n", [1, 5, 64, 67])
def test_vmapped_while_stops_each_lane_on_its_own(n):
    """vmap's while (run while any member's predicate holds, each member's carry kept once its own is
    false) as lanes that each stop on their own: numpy's trip counts and bits."""
    a = np.random.default_rng(n).uniform(0.01, 1e4, n)
    compiled = _check(ft.vmap(_newton), (a,), whole=1, exact=True)
    assert any("each until its lanes' predicates are false" in line for line in _loop_lines(compiled))


def test_while_reducing_an_unguarded_predicate_is_a_work_group_loop():
    """``while max(|x*x - a|) > tol``: every lane updates while any lane's holds, which is not
    lane-local: the loop runs as one work-group's (``group_loops.py``), numpy's values."""
    def f(a):
        return lax.while_loop(lambda c: (fnp.max(fnp.abs(c[0] * c[0] - a)) > 1e-9) & (c[1] < 60),
                              lambda c: (c[0] - (c[0] * c[0] - a) / (2.0 * c[0]), c[1] + 1), (a + 1.0, 0))
    compiled = _check(f, (np.linspace(1.0, 9.0, 16),), whole=1, exact=True)
    assert any("one work-group" in line for line in _loop_lines(compiled)), compiled.report()


def test_while_guarding_its_lanes_by_another_predicate_is_a_work_group_loop():
    """``while any(x < a): x = where(x < b, x + 1, x)``: the guard is not the predicate (b, not a),
    so a lane may not stop on its own: every lane runs until the last stops (all reach 5 here, not
    their own a) -- as one work-group's loop, the lane loop saying why not."""
    def f(x, a, b):
        return lax.while_loop(lambda x: fnp.any(x < a), lambda x: fnp.where(x < b, x + 1.0, x), x)
    args = (np.zeros(5), np.arange(1.0, 6.0), np.full(5, 10.0))
    compiled = _check(f, args, whole=1, exact=True)
    np.testing.assert_array_equal(np.asarray(compiled(*args)), np.full(5, 5.0))
    assert any("one work-group" in line for line in _loop_lines(compiled)), compiled.report()


# --------------------------------------------------------------------------- fallbacks

@pytest.mark.parametrize("body", [
    lambda h, w, x: (h * 0.9 + fnp.sum(h) * 0.01 + x, h),
    lambda h, w, x: (fnp.tanh(w @ h + x), h),
], ids=["reduction", "matvec"])
def test_a_body_a_lane_cannot_run_is_a_work_group_loop(body):
    rng = np.random.default_rng(6)
    h0, w, xs = rng.standard_normal(8), rng.standard_normal((8, 8)) * 0.3, rng.standard_normal((5, 8))

    def f(h0, w, xs):
        return lax.scan(lambda h, x: body(h, w, x), h0, xs)
    compiled = _check(f, (h0, w, xs), whole=1)
    assert all("one work-group" in line for line in _loop_lines(compiled)), compiled.report()


def test_a_body_neither_design_runs_keeps_todays_design_and_says_why():
    rng = np.random.default_rng(6)

    def f(h0, xs):
        return lax.scan(lambda h, x: (fnp.sort(h * x), h), h0, xs)
    compiled = _check(f, (rng.standard_normal(8), rng.standard_normal((5, 8))), whole=0)
    lines = _loop_lines(compiled)
    assert lines and all("not compiled whole: it has argsort" in line for line in lines), compiled.report()


def test_float16_keeps_todays_design_and_empty_lanes_are_a_work_group_loop():
    def f(x):
        return lax.scan(lambda h, _: (h * 0.5 + 1.0, h), x, None, length=3)
    compiled = _check(f, (np.linspace(0, 1, 9).astype(np.float16),), whole=0, rtol=1e-3)
    assert all("float16" in line for line in _loop_lines(compiled)), compiled.report()
    compiled = _check(f, (np.zeros((0,)),), whole=1)
    assert all("one work-group" in line for line in _loop_lines(compiled)), compiled.report()


# --------------------------------------------------------------------------- transformations


def _pendulum(params, theta0, steps=200):
    """RK4 of a damped pendulum: theta'' = -g sin(theta) - c theta' + a cos(t)."""
    g, c, a = params[0], params[1], params[2]
    dt = 0.01

    def deriv(t, th, om):
        return om, -g * fnp.sin(th) - c * om + a * fnp.cos(t)

    def step(carry, _):
        t, th, om = carry
        k1 = deriv(t, th, om)
        k2 = deriv(t + dt / 2, th + dt / 2 * k1[0], om + dt / 2 * k1[1])
        k3 = deriv(t + dt / 2, th + dt / 2 * k2[0], om + dt / 2 * k2[1])
        k4 = deriv(t + dt, th + dt * k3[0], om + dt * k3[1])
        th = th + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        om = om + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        return (t + dt, th, om), th
    _, ths = lax.scan(step, (theta0 * 0.0, theta0, theta0 * 0.0), None, length=steps)
    return ths


def _pendulum_loss(params, theta0):
    return fnp.mean(_pendulum(params, theta0) ** 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_value_and_grad_of_an_integrator_is_two_lane_loops(dtype):
    """grad of a scan is a forward scan saving its carries and a reverse scan reading them: both
    compiled whole."""
    params, theta0 = np.array([9.8, 0.3, 0.5], dtype), dtype(0.7)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    compiled = _check(ft.value_and_grad(_pendulum_loss), (params, theta0), whole=2, rtol=tol, atol=tol)
    assert len(_loop_lines(compiled)) == 2


def test_a_uniform_carry_summing_the_lanes_each_step(kind, interleave):
    """A uniform carry adding a sum over the lanes every step: each lane (vector) adds up its own
    terms, one more launch adds the lanes' totals; 29 lanes (vectors of 4 or 8, the last one's
    window overlapping its neighbour's) and a reverse scan."""
    rng = np.random.default_rng(8)
    x0, xs = rng.standard_normal(29), rng.standard_normal((12, 29))

    def f(x0, xs):
        def step(c, x):
            h, total = c
            h = h * 0.75 + x
            return (h, total + fnp.sum(h * h)), h * 2.0
        return lax.scan(step, (x0, 0.0), xs, reverse=True)
    compiled = _check(f, (x0, xs), whole=1, rtol=1e-12, atol=1e-12)
    assert "carries summed over the lanes by one more launch" in compiled.report()
    assert kind != "cpu" or ("interleaved" in compiled.report()) == interleave, compiled.report()


def test_moving_average_grad_sums_the_rates_cotangent_over_the_lanes():
    """The rate's cotangent sums over the lanes every step: in the reverse scan each lane adds up
    its own terms, and one more launch adds the lanes' totals (within rounding of numpy's order)."""
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((100, 256)).astype(np.float32)

    def loss(rate, xs):
        def step(m, x):
            m = (1 - rate) * m + rate * x
            return m, m
        _, ms = lax.scan(step, xs[0], xs)
        return fnp.mean(ms * ms)
    compiled = _check(ft.grad(loss), (np.float32(0.1), xs), whole=2, rtol=1e-4, atol=1e-6)
    assert "carries summed over the lanes by one more launch" in compiled.report()


def test_grad_of_a_batched_integrator_wrt_shared_parameters():
    """The parameters are uniform, the 1,000 initial conditions lanes: their cotangents are lane
    sums; check_grads (order 1: the finite differences of 200 steps) and both loops whole."""
    theta0 = np.random.default_rng(10).uniform(-1, 1, 333)

    def loss(params, theta0):
        return fnp.mean(ft.vmap(_pendulum, in_axes=(None, 0))(params, theta0) ** 2)
    params = np.array([9.8, 0.3, 0.5])
    _check(ft.grad(loss), (params, theta0), whole=2, rtol=1e-10, atol=1e-12)
    check_grads(ft.jit(loss, backend="opencl"), (params, theta0), order=1, modes=("rev",))


def test_vmap_of_an_integrator_is_one_launch_over_the_batch():
    theta0 = np.random.default_rng(8).uniform(-1, 1, 1000)
    params = np.array([9.8, 0.3, 0.5])
    compiled = _check(ft.vmap(_pendulum, in_axes=(None, 0)), (params, theta0), whole=1, rtol=1e-10, atol=1e-12)
    assert "lane shape (1000,)" in compiled.report()


def test_newton_in_fori_loop_and_langevin_with_noise_as_xs():
    rng = np.random.default_rng(9)
    a = rng.uniform(0.5, 4.0, 64)

    def newton(a):
        return lax.fori_loop(0, 20, lambda i, x: x - (x * x * x - a) / (3.0 * x * x), a)

    def langevin(x0, noise):
        return lax.scan(lambda x, n: (x + 0.01 * (-x) + 0.1 * n, x), x0, noise)
    _check(newton, (a,), whole=1, exact=True)
    _check(langevin, (rng.standard_normal(10), rng.standard_normal((1000, 10))), whole=1, exact=True)


def test_derivatives_of_order_two_through_a_whole_loop():
    """check_grads (float64, forward and reverse, order 2) vouches for the rules (eagerly: check_grads
    differentiates a jitted function without compiling its derivatives); the jitted derivatives of
    orders 1 and 2, forward and reverse, compile to lane loops only and give the numpy backend's
    values.  (Forward over forward, vmap of vmap, makes values of shapes (3, 1) and (3, 3): not one
    lane shape, one work-group's loop.)"""
    def f(params, theta0):
        return _pendulum(params, theta0, steps=12)[-1]
    args = (np.array([9.8, 0.3, 0.5]), np.float64(0.7))
    check_grads(f, args, order=2, modes=("fwd", "rev"))
    derivatives = {"rev": ft.grad(f), "fwd": ft.jacfwd(f), "fwd of rev": ft.hessian(f),
                   "rev of rev": ft.grad(lambda p, t: ft.grad(f)(p, t).sum(), argnums=(0, 1)),
                   "fwd of fwd": ft.jacfwd(ft.jacfwd(f))}
    for name, d in derivatives.items():
        compiled = _compile(d, *args)
        loops_ = _loop_lines(compiled)
        assert loops_ and _whole(compiled) == len(loops_), (name, compiled.report())
        for g, w in zip(_leaves(compiled(*args)), _leaves(ft.jit(d, backend="numpy")(*args))):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_jvp_of_a_while_is_a_lane_loop():
    def f(x):
        return lax.while_loop(lambda c: c[0] < 30, lambda c: (c[0] + 1, fnp.sin(c[1]) * 0.9 + 0.1), (0, x))[1]
    x, t = np.linspace(-1, 1, 9), np.ones(9)
    _check(lambda x, t: ft.jvp(f, (x,), (t,)), (x, t), whole=1, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------- GPU compilers and Oclgrind


@pytest.mark.skipif(test_opencl_sources.CLANG is None, reason="clang-16 is not installed")
def test_lane_loop_sources_compile_for_gpu_targets(kind, monkeypatch):
    """The lane loops' sources of each kind (a scan with tables, lane and uniform values and lane
    sums, vmap's while, a uniform while; float32 and float64) compile with clang-16 for NVIDIA's and
    AMD's OpenCL targets, as every other source does (``test_opencl_sources.py``)."""
    recorded = []
    monkeypatch.setattr(cl_runtime.Runtime, "program", lambda self, source, options="", in_thread=False: recorded.append(
        (self.policy.program_source(source), " ".join(filter(None, (self.policy.build_options, options))))))
    rng = np.random.default_rng(11)
    for dtype in (np.float32, np.float64):
        a, xs, table = (rng.standard_normal(s).astype(dtype) for s in ((13,), (6, 13), (6,)))

        def f(a, xs, table):
            def step(c, x):
                h, i, m = c
                h = fnp.where(h > x, h * table[i], fnp.tanh(h) + x) // 1.5
                return (h, i + 1, m | (h > 0)), h.astype(np.int32)
            return lax.scan(step, (a, 0, a > 1), xs)
        programs = [(f, (a, xs, table)), (ft.vmap(_newton), (np.abs(a) + 1,)),
                    (lambda a: lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 2), (0, a))[1], (a,)),
                    (ft.grad(lambda r, xs: fnp.sum(lax.scan(lambda m, x: ((1 - r) * m + r * x, m), xs[0], xs)[1])),
                     (dtype(0.3), xs))]
        for g, args in programs:
            assert _whole(_compile(g, *args)) >= 1
    sources = [(src, opts) for src, opts in recorded if "lane_" in src]
    assert sources
    for target in sorted(test_opencl_sources.TARGETS):
        errors = [test_opencl_sources._clang(src, opts, test_opencl_sources.TARGETS[target]) for src, opts in sources]
        assert not any(errors), f"{target}: " + "\n".join(e for e in errors if e)

_OCLGRIND_PROGRAM = """
import sys
import numpy as np, functrace as ft, functrace.numpy as fnp
ft.config.update("opencl_host_step_elements", 0)
lax = ft.lax
def f(a, xs):
    def step(c, x):
        h, i = c
        h = fnp.where(h > 1.0, h * 0.5, h * 1.25) + x / (1.0 + a * a)
        return (h, i + 1), h
    return lax.scan(step, (a, 0), xs)
def newton(a):
    return lax.while_loop(lambda c: (fnp.abs(c * c - a) > 1e-6 * a), lambda c: c - (c * c - a) / (2.0 * c), a + 1.0)
def average(rate, xs):
    return fnp.mean(lax.scan(lambda m, x: ((1 - rate) * m + rate * x, m), xs[0], xs)[1] ** 2)
def alone(a, xs):  # one scan, nothing around it: a lane loop (on the cpu kind its vectors interleaved)
    return lax.scan(lambda h, x: (fnp.where(h > 1.0, h * 0.5, h * 1.25) + x / (1.5 + x * x), h), a, xs)
rng = np.random.default_rng(0)
a, xs = rng.uniform(0.1, 2, 19).astype(np.float32), rng.standard_normal((5, 19)).astype(np.float32)
b, bs = rng.uniform(0.1, 2, 29).astype(np.float32), rng.standard_normal((5, 29)).astype(np.float32)
cases = ((f, (a, xs)), (ft.vmap(newton), (a,)), (ft.grad(average), (np.float32(0.3), xs)), (alone, (b, bs)))
for g, args in [cases[int(sys.argv[1])]]:
    c = ft.jit(g).lower(*args).compile()
    print(c.report())
    assert "compiled whole" in c.report() and "not compiled whole" not in c.report(), c.report()
    got = ft.tree_util.tree_leaves(c(*args))
    want = ft.tree_util.tree_leaves(ft.jit(g, backend="numpy")(*args))
    for x, y in zip(got, want):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6)
print("OK")
"""


@requires_oclgrind
@pytest.mark.parametrize("case", ["scan", "vmapped while", "lane sums", "a scan alone"])
@pytest.mark.parametrize("uninitialized", [False, True], ids=["races", "uninitialized"])
def test_lane_loops_run_clean_on_oclgrind(kind, case, uninitialized):
    """A scan, a vmapped while, a gradient's lane sums and a scan alone (on the cpu kind, its
    vectors interleaved on one work-item) as lane loops on Oclgrind's device (of each kind: one lane per work-item, or vectors of them): no race,
    no access out of bounds, no API error, no read of an uninitialized value, numpy's values.  One
    case per process (Oclgrind's uninitialized-value plugin flags buffers of a program run after
    another's were released)."""
    index = str(["scan", "vmapped while", "lane sums", "a scan alone"].index(case))
    run = run_python(_OCLGRIND_PROGRAM, index, kind=kind, max_work_group_size=64, uninitialized=uninitialized,
                     timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout[-3000:] + run.stderr[-3000:]
    assert case != "a scan alone" or ("interleaved" in run.stdout) == (kind == "cpu"), run.stdout
    assert not run.reports, "\n\n".join(run.reports[:3])
