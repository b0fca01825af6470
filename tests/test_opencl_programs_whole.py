"""Programs compiled whole (issue 34): a small program holding loops -- its glue, its loops nested to
any depth, conds, random bits and calls inside them -- runs as ONE work-group's kernel
(``group_loops.program_kernel``).  Checked against the numpy backend on both device kinds: the
decision (which programs, and why the others are not), nested loops, cond / switch, threefry and
checkpoint inside bodies, derivatives of order 2, the sources compiling for NVIDIA's and AMD's
OpenCL targets, and the fallback to the per-equation plan when the driver will not build the
kernel.  Decisions, not timings: the benchmark is ``benchmarks/bench_loops.py``."""
import numpy as np
import pytest
import test_opencl_sources
from test_opencl_loops_whole import _check, _compile, _loop_lines, kind  # noqa: F401  (kind: both device kinds)

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import group_loops, group_writer, loops
from functrace.backends.opencl import runtime as cl_runtime
from functrace.test_util import check_grads

lax = ft.lax
RNG = np.random.default_rng(34)


def _program_line(compiled) -> str:
    lines = [line for line in _loop_lines(compiled) if line.split()[1] == "program:"]
    return lines[0] if lines else ""


def _rnn_loss(w, u, xs, target):
    h = lax.scan(lambda h, x: (fnp.tanh(w @ h + u * x), None), fnp.zeros(w.shape[0], w.dtype), xs)[0]
    return fnp.mean((h - target) ** 2)


def _rnn_args(dtype, hidden=7, steps=11):
    return (RNG.standard_normal((hidden, hidden)).astype(dtype) * 0.4, RNG.standard_normal(hidden).astype(dtype),
            RNG.standard_normal(steps).astype(dtype), RNG.standard_normal(hidden).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_gradient_of_an_rnn_is_one_launch(dtype):
    """value_and_grad of an RNN: the forward scan, the glue and the reverse scan in one kernel."""
    tol = 2e-5 if dtype == np.float32 else 1e-12
    compiled = _check(ft.value_and_grad(_rnn_loss, argnums=(0, 1)), _rnn_args(dtype), whole=2, rtol=tol, atol=tol)
    assert compiled.num_kernel_launches == 1 and "2 loops" in _program_line(compiled), compiled.report()


def test_which_programs_are_compiled_whole_and_why_not_the_others(monkeypatch):
    """A program that is one loop keeps the loop's own lowering (one launch too); a program
    without a loop keeps its plan; a lane loop over SPREAD_LANES lanes keeps the device's cores;
    a value over GROUP_ELEMENTS keeps the per-equation designs."""
    x = RNG.standard_normal(9)
    one_loop = lambda x: lax.scan(lambda c, _: (fnp.sin(c) + fnp.sum(c), None), x, None, length=4)[0]  # noqa: E731
    glue = lambda x: fnp.cos(one_loop(x * 2.0))  # noqa: E731
    assert not _program_line(_check(one_loop, (x,), whole=1))
    assert _program_line(_check(glue, (x,), whole=1))
    assert not _program_line(_compile(lambda x: fnp.tanh(x) * 2.0, x))
    wide = RNG.standard_normal(loops.SPREAD_LANES)
    lanes = lambda x: fnp.cos(lax.scan(lambda c, _: (c * 0.5 + 1.0, None), x, None, length=3)[0])  # noqa: E731
    compiled = _check(lanes, (wide,), whole=1)
    assert not _program_line(compiled) and "lane shape" in compiled.report()
    monkeypatch.setattr(group_loops, "GROUP_ELEMENTS", 8)
    compiled = _check(glue, (x,), whole=0)
    assert "not compiled whole: a value of 9 elements" in compiled.report()


def test_nested_loops_conds_and_calls_inside_a_body():
    """A fori_loop inside a scan, a while inside that, a switch and a checkpoint in the body."""
    def f(x, w):
        def step(c, i):
            inner = lax.fori_loop(0, 3, lambda k, v: fnp.tanh(w @ v) + k * 0.1, c)
            n, r = lax.while_loop(lambda s: (s[0] < 4) & (fnp.max(fnp.abs(s[1])) > 0.01),
                                  lambda s: (s[0] + 1, s[1] * 0.5), (0, inner))
            picked = lax.switch(i % 3, [lambda v: v * 2.0, lambda v: fnp.sin(v), lambda v: v - fnp.sum(v)], r)
            out = ft.checkpoint(lambda v: fnp.cos(v) * 1.5)(picked)
            return out, n
        return lax.scan(step, x, np.arange(5))
    args = (RNG.standard_normal(6), RNG.standard_normal((6, 6)) * 0.5)
    compiled = _check(f, args, whole=1)
    assert any("one work-group" in line for line in _loop_lines(compiled)), compiled.report()
    compiled = _check(lambda x, w: f(x, w)[0] * 2.0, args, whole=1)
    assert "kernel  program" in compiled.report()


def test_random_bits_inside_a_sampler_body():
    """A sampler splitting its key and drawing normal noise every step: threefry in the kernel, the
    numpy backend's bits for the integers, its values within rounding for the floats."""
    def sample(key, x0):
        def step(c, _):
            key, x = c
            key, sub = ft.random.split(key)
            x = x - 0.1 * x + 0.3 * ft.random.normal(sub, x.shape, dtype=x.dtype)
            return (key, x), fnp.sum(x)
        return lax.scan(step, (key, x0), None, length=30)
    _check(sample, (ft.random.PRNGKey(5), np.zeros(7)), whole=1, rtol=1e-12, atol=1e-12)
    _check(lambda k, x: sample(k, x)[1] * 2.0, (ft.random.PRNGKey(6), np.zeros(7, np.float32)), whole=1,
           rtol=1e-5, atol=1e-5)


def test_derivatives_of_order_two_through_nested_loops():
    """check_grads (float64, forward and reverse, order 2) vouches for the rules; the jitted
    gradient, Hessian and jacfwd of jacfwd compile whole and give the numpy backend's values."""
    w = RNG.standard_normal((4, 4)) * 0.4

    def f(x):
        def step(c, _):
            return lax.fori_loop(0, 2, lambda k, v: fnp.tanh(w @ v + c), c), None
        return fnp.sum(lax.scan(step, x, None, length=3)[0] ** 2)
    x = RNG.standard_normal(4)
    check_grads(f, (x,), order=2, modes=("fwd", "rev"))
    for d in (ft.grad(f), ft.hessian(f), ft.jacfwd(ft.jacfwd(f))):
        compiled = _compile(d, x)
        assert "kernel  program" in compiled.report() or all(
            "compiled whole" in line and "not compiled" not in line for line in _loop_lines(compiled)), compiled.report()
        np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(ft.jit(d, backend="numpy")(x)),
                                   rtol=1e-11, atol=1e-12)


def test_a_kernel_the_driver_will_not_build_falls_back_to_the_plan(monkeypatch):
    """A program kernel the driver rejects: the program runs as its per-equation plan (here its
    loops as work-group loops), the report says why, the values are right."""
    writer_kernel = group_writer.GroupWriter.kernel

    def broken(self, form, what, bounds):
        source, name = writer_kernel(self, form, what, bounds)
        return (source.replace("const long lid", "not C; const long lid") if form == "program" else source), name
    monkeypatch.setattr(group_writer.GroupWriter, "kernel", broken)
    compiled = _check(ft.value_and_grad(_rnn_loss), _rnn_args(np.float64), whole=2)
    assert "not compiled whole: the driver did not build its kernel" in compiled.report()
    assert not _program_line(compiled)


@pytest.mark.skipif(test_opencl_sources.CLANG is None, reason="clang-16 is not installed")
def test_work_group_sources_compile_for_gpu_targets(monkeypatch):
    """The work-group loops' and programs' sources of each kind (products, reductions, a while on a
    reduced predicate, nested loops, a switch, threefry; float32 and float64) compile with clang-16
    for NVIDIA's and AMD's OpenCL targets, as every other source does (``test_opencl_sources.py``)."""
    recorded = []
    monkeypatch.setattr(cl_runtime.Runtime, "program", lambda self, source, options="", in_thread=False: recorded.append(
        (self.policy.program_source(source), " ".join(filter(None, (self.policy.build_options, options))))))
    for dtype in (np.float32, np.float64):
        a = RNG.uniform(1, 9, 6).astype(dtype)

        def newton(a):
            return lax.while_loop(lambda c: (fnp.max(fnp.abs(c[0] * c[0] - a)) > 1e-6) & (c[1] < 50),
                                  lambda c: (c[0] - (c[0] * c[0] - a) / (2 * c[0]), c[1] + 1), (a + 1, 0))[0]

        def mixed(key, a):
            def step(c, i):
                bits = ft.random.uniform(ft.random.fold_in(key, i), a.shape, dtype=a.dtype)
                inner = lax.fori_loop(0, 2, lambda k, v: v * 0.5 + bits, c)
                return lax.switch(i % 2, [lambda v: v + 1, lambda v: fnp.flip(v)], inner), fnp.argmax(inner)
            return lax.scan(step, a, np.arange(3))
        for g, args in [(ft.value_and_grad(_rnn_loss), _rnn_args(dtype)), (newton, (a,)),
                        (mixed, (ft.random.PRNGKey(1), a))]:
            _compile(g, *args)
    sources = [(src, opts) for src, opts in recorded if "group_" in src]
    assert len(sources) >= 6
    for target in sorted(test_opencl_sources.TARGETS):
        errors = [test_opencl_sources._clang(src, opts, test_opencl_sources.TARGETS[target]) for src, opts in sources]
        assert not any(errors), f"{target}: " + "\n".join(e for e in errors if e)


def test_a_program_whose_scan_outlasts_one_launch_keeps_its_chunked_loop(monkeypatch):
    """A program whose loops run more than one launch's work (``loops.CHUNK_WORK``) is not one
    kernel: its scan runs alone, in chunks of steps (Ctrl-C lands between them, no GPU watchdog
    fires), with the numpy backend's values."""
    monkeypatch.setattr(loops, "CHUNK_WORK", 200)
    w = RNG.standard_normal((5, 5)) * 0.4

    def f(x):
        return fnp.cos(lax.scan(lambda c, _: (fnp.tanh(w @ c), fnp.sum(c)), x * 2.0, None, length=40)[0])
    compiled = _check(f, (RNG.standard_normal(5),), whole=1)
    assert not _program_line(compiled) and "launches (" in compiled.report(), compiled.report()


# --------------------------------------------------------------------------- a work-group per member

def _rows_lines(compiled) -> list:
    return [line for line in _loop_lines(compiled) if "running its rows" in line]


@pytest.fixture
def small_rows(monkeypatch):
    """Batched loops of a few elements' work run a work-group per member too (the tests' sizes)."""
    monkeypatch.setattr(group_loops, "ROWS_WORK", 1)


def _batched_rnn(h0, xs, w):
    return lax.scan(lambda h, x: (fnp.tanh(w @ h + x), fnp.sum(h * h)), h0, xs)


def test_vmap_of_a_matvec_scan_runs_a_work_group_per_member(small_rows):
    """vmap of an RNN over 37 sequences: one launch of several work-groups, each its members' rows
    (the cpu kind: one per compute unit; the gpu kind: one per member), numpy's values; and its
    gradient's reverse scan (outer products of batched vectors) the same way."""
    w = RNG.standard_normal((5, 5)) * 0.4
    h0, xs = RNG.standard_normal((37, 5)), RNG.standard_normal((37, 6, 5))
    compiled = _check(ft.vmap(lambda h, x: _batched_rnn(h, x, w)), (h0, xs), whole=1, atol=1e-13)
    assert len(_rows_lines(compiled)) == 1, compiled.report()
    loss = lambda w, h, x: fnp.sum(_batched_rnn(h, x, w)[0] ** 2)  # noqa: E731
    compiled = _check(ft.vmap(ft.grad(loss), in_axes=(None, 0, 0)), (w, h0, xs), whole=2, atol=1e-13)
    assert len(_rows_lines(compiled)) == 2, compiled.report()


def test_vmap_of_a_while_stops_each_members_rows_on_their_own(small_rows):
    """vmap of Newton's method whose predicate reduces the member's values: each work-group runs
    until its own members are done (vmap's guard keeps a finished member's carry): numpy's bits and
    trip counts."""
    def newton(a):
        return lax.while_loop(lambda c: (fnp.max(fnp.abs(c[0] * c[0] - a)) > 1e-12 * fnp.max(a)) & (c[1] < 60),
                              lambda c: (c[0] - (c[0] * c[0] - a) / (2.0 * c[0]), c[1] + 1), (a + 1.0, 0))
    a = RNG.uniform(1.0, 10.0, (23, 7)) * 10.0 ** (np.arange(23) % 12 - 6)[:, None]  # members' scales differ
    compiled = _check(ft.vmap(newton), (a,), whole=1, exact=True)
    assert any("each until its rows' predicates are false" in line for line in _rows_lines(compiled)), \
        compiled.report()
    assert len(set(np.asarray(compiled(a)[1]).tolist())) > 1  # the members' trip counts differ


def test_a_batched_loop_reading_across_members_keeps_one_work_group(small_rows):
    """A body that centres the batch (a mean over the members) reads across rows: one work-group."""
    def f(h0):
        return lax.scan(lambda h, _: (fnp.tanh(h - fnp.mean(h, axis=0)), None), h0, None, length=4)[0]
    compiled = _check(f, (RNG.standard_normal((9, 4)),), whole=1)
    assert not _rows_lines(compiled) and "one work-group" in compiled.report(), compiled.report()


def test_a_kernel_allowing_fewer_work_items_gets_fewer():
    """A work-group kernel runs with any work-group size (it reads its own): where the driver allows
    a kernel fewer work-items than the design asked (a large kernel's registers), the launch uses
    the largest power of two it allows."""
    import types
    rt = cl_runtime.get_runtime()
    made = types.SimpleNamespace(get_work_group_info=lambda what, device: 100)
    ctx = types.SimpleNamespace(rt=rt, queue=rt.queue, kernels={"k": types.SimpleNamespace(make=lambda: made)})
    assert group_loops.launch_items(ctx, "k", 256) == 64
    assert group_loops.launch_items(ctx, "k", 32) == 32
    assert group_loops.launch_items(ctx, "k", 1) == 1
