"""The differential fuzzer (functrace.fuzz): its reference bounds, its checks, and a fixed-seed
run that must find nothing (``python -m functrace.fuzz --n 5000`` runs the long version)."""
import subprocess
import sys

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import fuzz
from functrace import primitives as P
from functrace.backends.opencl import runtime as cl_runtime
from functrace.core import Primitive
from functrace.fuzz import bounds as fuzz_bounds
from functrace.fuzz import check as fuzz_check

HAVE_OPENCL = cl_runtime.get_runtime() is not None
U32 = np.finfo(np.float32).eps / 2


def bounds(f, *args, dtype=np.float32):
    """Reference bounds of ``f``'s outputs for ``args`` (values of ``dtype``) in that dtype."""
    interp = fuzz.BoundInterpreter(dtype)
    args = [np.asarray(a, dtype).astype(np.float64) for a in args]
    closed = ft.make_jaxpr(f)(*args)
    return interp.run(closed, [interp.exact(a) for a in args])


# --------------------------------------------------------------------------- reference bounds


@pytest.mark.parametrize("table", ["TRANSCENDENTAL", "ULPS", "PERIODIC", "STRUCTURAL", "RULES", "FUSED_REFERENCES"])
def test_the_bound_tables_are_keyed_by_registered_primitives(table):
    """Each table of facts about primitives is keyed by the primitive objects themselves (the ones
    ``primitives.registry`` holds), so a stale or misspelled entry cannot silently match nothing."""
    keys = list(getattr(fuzz_bounds, table))
    assert keys and all(isinstance(p, Primitive) and P.registry.get(p.name) is p for p in keys), keys


def test_a_primitive_without_a_rule_is_refused():
    """A primitive the interpreter has no rule for raises instead of getting a made-up bound."""
    unknown = Primitive("not_a_real_primitive")
    interp = fuzz.BoundInterpreter(np.float32)
    with pytest.raises(NotImplementedError, match="not_a_real_primitive"):
        interp.apply(unknown, [interp.exact(np.zeros(2))], {})


def test_a_sum_may_be_off_by_its_count_in_ulp_of_its_magnitudes():
    x = np.array([1.0, -1.0, 0.5, -0.5, 3.0], np.float32)
    (s,) = bounds(lambda x: fnp.sum(x), x)
    assert float(s.v) == 3.0 and float(s.e) == pytest.approx(5 * U32 * 6.0, rel=1e-6)


def test_copies_are_exact_and_arithmetic_rounds_once():
    x = np.array([[1.5, -2.0], [0.25, 3.0]], np.float32)
    view, scaled = bounds(lambda x: (x[::-1].T, x * 3.0), x)
    assert not np.any(view.e)
    np.testing.assert_allclose(scaled.e, U32 * np.abs(x * 3.0), rtol=1e-6, atol=1e-37)


def test_comparisons_rounding_could_flip_are_uncertain_and_carry_on():
    x = np.array([0.5, 0.5], np.float32)
    y = np.array([np.nextafter(np.float32(0.5), np.float32(1)), 0.7], np.float32)
    flag, picked = bounds(lambda x, y: (fnp.sin(x) < fnp.sin(y), fnp.where(fnp.sin(x) < fnp.sin(y), x, 10.0 * y)),
                          x, y)
    assert flag.e.tolist() == [1.0, 0.0]  # sin rounds: the first could go either way
    assert picked.e[0] >= 10 * 0.5 - 0.5 and picked.e[1] <= np.finfo(np.float32).tiny  # (a flush to zero)


def test_a_max_and_the_element_it_picked_are_equal_unless_there_is_a_near_tie():
    g = lambda x: ft.grad(lambda x: fnp.max(x * 1.5))(x)
    (sure,) = bounds(g, np.array([1.0, 3.0, 2.0], np.float32))
    assert sure.v.tolist() == [0.0, 1.5, 0.0] and np.all(sure.e < 1e-5)
    near = np.float32(3.0) + np.array([0, 1], np.float32) * np.spacing(np.float32(3.0))
    (unsure,) = bounds(g, np.concatenate([near, [2.0]]).astype(np.float32))
    assert np.all(unsure.e[:2] >= 0.7)  # either may be the max: the gradient may go to either


def test_values_that_may_overflow_the_dtype_are_left_unchecked():
    """exp(88.72284) is within its rounding of float32's largest value: it may overflow or not;
    exp(88.8) overflows in any correct implementation (a certain inf)."""
    (y,) = bounds(lambda x: fnp.exp(x), np.array([1.0, 88.72284, 88.8], np.float32))
    assert np.isfinite(y.e[0]) and np.isinf(y.e[1]) and np.isposinf(y.v[2]) and y.e[2] == 0
    (y,) = bounds(lambda x: fnp.exp(x), np.array([1.0, 88.72284, 88.8]), dtype=np.float64)
    assert np.all(np.isfinite(y.e)) and np.all(np.isfinite(y.v))


def test_values_keep_the_dtype_range_as_ieee_arithmetic_does():
    """The reference computes in float64 but overflows where float32 does: x * x of 1e30 is a
    certain inf, so x * x - x * x is a certain NaN (numpy's float32 result), and a cumulative
    product that overflows stays inf, then NaN after a zero (numpy's order)."""
    x = np.array([1e30, 2.0], np.float32)
    (d,) = bounds(lambda x: x * x - x * x, x)
    assert np.isnan(d.v[0]) and d.e[0] == 0 and d.v[1] == 0
    (c,) = bounds(lambda x: fnp.cumprod(x), np.array([1e30, 1e30, 1e-30, 0.0, 3.0], np.float32))
    assert np.isposinf(c.v[1]) and np.isposinf(c.v[2]) and np.isnan(c.v[3]) and np.all(c.e[1:] == 0)


def test_a_pole_inside_an_operand_bound_leaves_the_result_unchecked():
    """1 / x where rounding may put x on either side of 0 (a log_softmax of the row's max):
    corners on both sides see two finite values, not the unbounded ones between."""
    x = np.array([[0.0, -30.0], [0.0, -1.0]], np.float32)
    (y,) = bounds(lambda x: 1.0 / ft.nn.log_softmax(x * 1.5), x)
    assert np.isinf(y.e[0, 0]) and np.all(np.isfinite(y.e[:, 1])) and np.isfinite(y.e[1, 0])


def test_sums_whose_partial_sums_may_overflow_are_left_unchecked():
    """3e38 - 3e38 + 1 fits float32, but a partial sum of 3e38 and 3e38 may not (in float64 it
    does); 3e38 @ [1, 1] likewise."""
    x = np.array([3e38, 3e38, -3e38, 1.0], np.float32)
    s, d = bounds(lambda x: (fnp.sum(x), x[:2] @ np.ones(2, np.float32)), x)
    assert np.isinf(s.e) and np.isinf(d.e)
    (s,) = bounds(lambda x: fnp.sum(x), np.array([1e38, 1e38, -1e38, 1.0], np.float32))
    assert np.isfinite(s.e)


def test_an_unknown_nan_stays_unknown():
    """0 * inf in a product may be 0 or NaN by the product's path: unknown, and so is what is
    computed from it (its corners are NaN again and must not make it a certain NaN)."""
    m = np.array([[1.0], [np.inf]], np.float32)
    s, y = bounds(lambda v, m: (fnp.sum((m @ v) * 2.0), fnp.max(m @ v)), np.zeros(1, np.float32), m)
    assert np.isinf(s.e) and np.isinf(y.e)


def test_nan_positions_are_certain_where_their_operands_are():
    (y,) = bounds(lambda x: fnp.log(x), np.array([-1.0, 0.0, 2.0], np.float32))
    assert np.isnan(y.v[0]) and np.isneginf(y.v[1]) and y.e.tolist()[:2] == [0.0, 0.0]


def test_fused_primitives_are_bounded_through_their_reference_decomposition():
    x = np.random.default_rng(0).standard_normal((4, 7)).astype(np.float32)
    (y,) = bounds(lambda x: ft.nn.softmax(x), x)
    np.testing.assert_allclose(y.v, ft.nn.softmax(x.astype(np.float64)), rtol=1e-12)
    assert np.all(y.e > 0) and np.all(y.e < 1e-5)


# --------------------------------------------------------------------------- checks


def test_compare_flags_values_outside_three_bounds_and_nan_moves():
    want = fuzz.Bound(np.array([1.0, 2.0, np.nan]), np.array([1e-3, 1e-3, 0.0]))
    aval = ft.ShapedArray((3,), np.dtype(np.float64))
    assert fuzz.compare(np.array([1.002, 1.998, np.nan]), want, aval) is None
    assert fuzz.compare(np.array([1.004, 2.0, np.nan]), want, aval)[0] == "values"
    assert fuzz.compare(np.array([1.0, 2.0, 0.0]), want, aval)[0] == "nan"
    assert fuzz.compare(np.array([1.0, 2.0, np.nan], np.float32), want, aval)[0] == "dtype"


def test_a_count_of_uncertain_comparisons_may_be_off_by_their_number():
    """tan(x) == x is exact in float32 for tiny x and false in the float64 reference: the count of
    such comparisons may be anything up to their number (it was checked exactly: seed 7000 program
    2206 gave 291 for a reference 0), while a count off by more, or of certain ones, is flagged."""
    x = np.array([1e-4, -3e-4, 1e-3, 0.5, 1.0], np.float32)
    (count,) = bounds(lambda x: fnp.sum(fnp.tan(x) == x), x)
    assert int(count.v) == 0 and float(count.e) == 3.0  # the three tiny ones could round to equal
    aval = ft.ShapedArray((), np.dtype(np.int64))
    assert fuzz.compare(np.int64(3), count, aval) is None
    assert fuzz.compare(np.int64(4), count, aval)[0] == "values"
    exact = fuzz.Bound(np.array(5), np.array(0.0))
    assert fuzz.compare(np.int64(6), exact, aval)[0] == "values"


def _three_steps():
    """x0 -> sin -> cumsum -> * 2, as three statements (so the smallest failing one is known)."""
    specs = [fuzz.InputSpec("x0", (9, 4))]
    stmts = [fuzz.Stmt(["v0"], "v0 = fnp.sin(x0)", ["x0"]), fuzz.Stmt(["v1"], "v1 = fnp.cumsum(v0, axis=0)", ["v0"]),
             fuzz.Stmt(["v2"], "v2 = v1 * 2.0", ["v1"])]
    avals = {n: ((9, 4), np.dtype(np.float32)) for n in ("x0", "v0", "v1", "v2")}
    return fuzz.Program(5, 1, np.dtype(np.float32), specs, stmts, ["v2"], 2, avals)


def test_a_wrong_backend_is_reported_with_the_smallest_program_that_shows_it(monkeypatch):
    """A cumsum that drops its last row, planted in the numpy backend only (its program keeps
    the implementation it was compiled with), is found in value, grad and vmap, and the
    report's program stops at the cumsum."""
    real_call = fuzz_check._call
    right = P.cumsum_p.impl

    def dropping_last_row(x, *, axis, reverse):
        out = right(x, axis=axis, reverse=reverse)
        return np.concatenate([out[:-1], np.zeros_like(out[-1:])]) if out.shape[0] > 1 else out

    def call(impl, *args):
        if impl != "numpy":
            return real_call(impl, *args)
        monkeypatch.setattr(P.cumsum_p, "impl", dropping_last_row)
        try:
            return real_call(impl, *args)
        finally:
            monkeypatch.setattr(P.cumsum_p, "impl", right)

    monkeypatch.setattr(fuzz_check, "_call", call)
    fz = fuzz.Fuzzer(5, sets=1, impls=("eager", "numpy"), log=lambda s: None)
    prog = _three_steps()
    failures = fz.check(prog, [0])
    assert sorted((f.kind, f.impl, f.what) for f in failures) == [
        ("grad", "numpy", "values"), ("value", "numpy", "values"), ("vmap", "numpy", "values")]
    small = fz.minimized(failures[0])
    assert [s.code for s in small.stmts] == ["v0 = fnp.sin(x0)", "v1 = fnp.cumsum(v0, axis=0)"]
    assert "v1 = fnp.cumsum(v0, axis=0)" in fz.report(fuzz.Failure(prog, "value", "numpy", 0, "values", "", small))


def test_rounding_differences_are_not_reported(monkeypatch):
    """Results moved by an ulp (what another summation order or exp gives) pass."""
    real_call = fuzz_check._call

    def call(impl, *args):
        out = real_call(impl, *args)
        return out if impl != "numpy" else ft.tree_util.tree_map(
            lambda a: np.nextafter(np.asarray(a), np.asarray(np.inf, np.asarray(a).dtype)), out)

    monkeypatch.setattr(fuzz_check, "_call", call)
    fz = fuzz.Fuzzer(5, sets=1, impls=("eager", "numpy"), log=lambda s: None)
    assert fz.check(_three_steps(), [0]) == []


def test_programs_and_inputs_depend_on_seed_and_index_only():
    a, b = fuzz.generate(3, 17), fuzz.generate(3, 17)
    assert a.source() == b.source() and a.describe_inputs() == b.describe_inputs()
    assert fuzz.generate(3, 18).source() != a.source()
    for x, y in zip(fuzz.make_inputs(a, 1).args, fuzz.make_inputs(b, 1).args):
        np.testing.assert_array_equal(x, y)


def test_the_command_line_runs_as_a_module():
    """``python -m functrace.fuzz`` is the package's command line (its ``__main__``)."""
    run = subprocess.run([sys.executable, "-m", "functrace.fuzz", "--help"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: python -m functrace.fuzz [-h] [--n N] [--seed SEED]")
    assert "Differential fuzzer: seeded random programs" in run.stdout and "--program PROGRAM" in run.stdout


# --------------------------------------------------------------------------- the fixed-seed run

CI_SEED = 2026


@pytest.mark.parametrize("mode,programs,sets", [("kernels", range(0, 4), 3), ("default", range(0, 12), 2)])
def test_fixed_seed_finds_no_mismatch(mode, programs, sets):
    """A few programs of a fixed seed, each with several input sets (compiled once): OpenCL,
    the numpy backend and eager evaluation all within the reference's bounds."""
    reports = []
    fz = fuzz.Fuzzer(CI_SEED, mode, sets, impls=fuzz.IMPLS if HAVE_OPENCL else ("eager", "numpy"),
                     log=reports.append)
    stats = fz.run(programs)
    assert stats.programs == len(programs) and stats.comparisons > 0
    assert not stats.failures, stats.summary() + "\n\n" + "\n\n".join(reports)
