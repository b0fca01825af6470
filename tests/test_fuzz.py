"""The differential fuzzer (functrace.fuzz): its reference bounds, its checks, the defects it must
catch (planted), and fixed-seed runs that must find nothing (``python -m functrace.fuzz --n 5000``
runs the long version; ``--extremes --dtypes all --against jax`` the new modes)."""
import hashlib
import re
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
from functrace.fuzz import oracles as fuzz_oracles

HAVE_OPENCL = cl_runtime.get_runtime() is not None
U32 = np.finfo(np.float32).eps / 2


def bounds(f, *args, dtype=np.float32):
    """Reference bounds of ``f``'s outputs for ``args`` (values of ``dtype``) in that dtype."""
    interp = fuzz.BoundInterpreter(dtype)
    args = [np.asarray(a, dtype).astype(np.float64) for a in args]
    closed = ft.make_jaxpr(f)(*args)
    return interp.run(closed, [interp.exact(a) for a in args])


# --------------------------------------------------------------------------- reference bounds


@pytest.mark.parametrize("table", ["TRANSCENDENTAL", "EXACT", "ULPS", "PERIODIC", "STRUCTURAL", "RULES",
                                   "FUSED_REFERENCES"])
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


def test_integer_and_bool_results_are_exact_and_wrap_around_as_numpy():
    """No rounding allowance for integers: uint8 sums, products and cumulative products wrap
    (numpy's results, exactly), and a bool's any / all / argmax are certain."""
    x = np.array([200, 100, 3, 0, 255], np.uint8)
    interp = fuzz.BoundInterpreter(np.float64)
    f = lambda x: (x * x, fnp.cumprod(x), fnp.max(x), fnp.argmin(x), fnp.asarray(x).at[np.array([0, 0])].add(x[:2]),
                   fnp.any(x > 250), fnp.cumsum(x))
    outs = interp.run(ft.make_jaxpr(f)(x), [interp.exact(x)])
    want = (x * x, np.cumprod(x, dtype=np.uint64), 255, 3, np.array([244, 100, 3, 0, 255], np.uint8), True,
            np.cumsum(x, dtype=np.uint64))
    for got, w in zip(outs, want):
        np.testing.assert_array_equal(got.v, w)
        assert not np.any(got.e)


def test_a_scatter_moves_bounds_with_values_and_keeps_the_widest_at_a_min_or_max():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    idx = np.array([2, 0, 2])
    setted, maxed = bounds(lambda x: (fnp.asarray(x).at[np.array([0, 2])].set(fnp.sin(x[:2])),
                                      fnp.asarray(x).at[idx].max(fnp.exp(x))), x)
    assert setted.e[1] == 0 and setted.e[0] > 0 and setted.e[2] > 0  # sin rounds; x[1] is untouched
    np.testing.assert_allclose(maxed.v, [np.exp(2.0), 2.0, np.exp(3.0)], rtol=1e-12)
    assert maxed.e[1] == 0 and maxed.e[0] > 0


def test_a_float_read_as_a_bool_near_zero_is_uncertain():
    """``all(x)`` is ``x != 0`` per element: where rounding may make x exactly 0 it could be either."""
    (flag,) = bounds(lambda x: fnp.all(x - 0.1, axis=0), np.array([[0.1], [0.5]], np.float32))
    assert flag.e.tolist() == [1.0]


def test_a_negative_base_to_an_exponent_that_may_round_to_an_integer_is_unchecked():
    """(-8) ** (y - 1) for y = -6.8e-13 is NaN in float64 but (-8) ** -1 in float32, where y - 1
    rounds to -1: the reference cannot say which."""
    (p,) = bounds(lambda x, y: fnp.power(x, y - 1.0), np.array([-8.0], np.float32), np.array([-6.8e-13], np.float32))
    assert np.isinf(p.e[0])


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


def test_extreme_inputs_span_the_dtype_range():
    """Extremes mode: over a few input sets, float32 inputs hold subnormals, values within a decade
    of overflow, trigonometric arguments past 1e6, both signs, signed zeros, infinities and NaN;
    integers their dtype's edges, bools both all-true and mixed sets."""
    def values(dtype, kind, sets=12):
        prog = fuzz.Program(3, 4, np.dtype(dtype), [fuzz.InputSpec("x0", (200,), kind)], [], ["x0"], 2,
                            {"x0": ((200,), np.dtype(dtype))}, extremes=True)
        return np.concatenate([fuzz.make_inputs(prog, k).args[0] for k in range(sets)])

    x = values(np.float32, "float")
    info = np.finfo(np.float32)
    finite = x[np.isfinite(x)]
    mag = np.abs(finite)
    assert np.any((mag > 0) & (mag < info.tiny)) and np.any(mag > info.max / 10) and np.any((mag > 1e6) & (mag < 1e9))
    assert np.any(mag < 1e-20) and np.any(finite < 0) and np.any(np.signbit(finite[finite == 0]))
    assert np.any(np.isnan(x)) and np.any(np.isposinf(x)) and np.any(np.isneginf(x))
    for dtype in (np.uint64, np.int8):
        x = values(dtype, "int")
        assert x.dtype == dtype and x.min() == np.iinfo(dtype).min and x.max() == np.iinfo(dtype).max
    assert values(bool, "int").dtype == bool


def test_default_programs_are_those_of_before_the_new_options():
    """Without ``extremes`` or ``dtypes="all"`` a seed's programs are what they were (the fixed-seed
    run below and any reported ``--program I`` keep meaning the same program)."""
    digest = hashlib.sha256("".join(fuzz.generate(CI_SEED, i).source() for i in range(12)).encode()).hexdigest()
    assert digest[:16] == "793fa858132a97c4"


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
    assert "--extremes" in run.stdout and "--dtypes {float,all}" in run.stdout and "--against {numpy,jax}" in run.stdout


# --------------------------------------------------------------------------- planted defects, new modes


def _one_statement(code: str, dtype, shapes: dict, extremes: bool = True):
    """A program of one statement ``v0 = code`` of inputs ``shapes`` (name -> shape), in ``dtype``."""
    kind = "float" if np.dtype(dtype).kind == "f" else "int"
    specs = [fuzz.InputSpec(n, s, kind) for n, s in shapes.items()]
    avals = {n: (s, np.dtype(dtype)) for n, s in shapes.items()}
    closed = ft.make_jaxpr(lambda *a: eval(code, {"fnp": fnp, "ft": ft}, dict(zip(shapes, a))))(
        *[np.zeros(s, dtype) for s in shapes.values()])
    avals["v0"] = (tuple(closed.out_avals[0].shape), closed.out_avals[0].dtype)
    return fuzz.Program(9, 0, np.dtype(dtype), specs, [fuzz.Stmt(["v0"], f"v0 = {code}", list(shapes))], ["v0"], 2,
                        avals, extremes)


def _planted(monkeypatch, prim, wrong):
    """``prim``'s implementation replaced by ``wrong`` on the numpy backend only (its compiled
    program keeps the implementation it was built with)."""
    real_call, right = fuzz_check._call, prim.impl

    def call(impl, *args):
        if impl != "numpy":
            return real_call(impl, *args)
        monkeypatch.setattr(prim, "impl", wrong)
        try:
            return real_call(impl, *args)
        finally:
            monkeypatch.setattr(prim, "impl", right)
    monkeypatch.setattr(fuzz_check, "_call", call)
    return right


def test_a_sine_wrong_for_large_arguments_is_caught_in_extremes_mode_only(monkeypatch):
    """sin flushed to 0 past |x| = 1e5 (as PoCL's native float sin was past 1.7e6): arguments of
    1e8 come with extremes mode's inputs; inputs around 1 never show it."""
    right = _planted(monkeypatch, P.sin_p, lambda x: np.where(np.abs(x) > 1e5, np.zeros_like(x), right(x)))
    found = {}
    for extremes in (True, False):
        fz = fuzz.Fuzzer(9, sets=6, impls=("eager", "numpy"), log=lambda s: None, extremes=extremes)
        found[extremes] = fz.check(_one_statement("fnp.sin(x0)", np.float32, {"x0": (64,)}, extremes), range(6))
    assert {(f.impl, f.what) for f in found[True]} == {("numpy", "values")} and found[False] == []


def test_a_function_written_from_others_that_overflows_is_caught_by_numpy_itself(monkeypatch):
    """hypot as sqrt(x * x + y * y): in float32, 1e30 squared overflows, so the reference (which
    interprets that decomposition as written) says inf; numpy's hypot says 1e30."""
    monkeypatch.setattr(fnp, "hypot", lambda x, y: fnp.sqrt(x * x + y * y))
    fz = fuzz.Fuzzer(9, sets=6, impls=("eager",), log=lambda s: None, extremes=True)
    prog = _one_statement("fnp.hypot(x0, x1)", np.float32, {"x0": (64,), "x1": (64,)})
    assert fz.oracles == ("numpy-lib",)
    assert {f.impl for f in fz.check(prog, range(6)) if f.kind == "value"} == {"numpy-lib"}


def test_an_unsigned_max_read_as_signed_is_caught_with_every_dtype(monkeypatch):
    """uint32's max taken over the values read as int32 (the high half of the range is negative
    there): extremes mode's integers span the whole range, so it shows."""
    right = _planted(monkeypatch, P.reduce_max_p, lambda x, *, axes: right(x.view(np.int32), axes=axes).view(x.dtype)
                     if x.dtype == np.uint32 else right(x, axes=axes))
    fz = fuzz.Fuzzer(9, sets=3, impls=("eager", "numpy"), log=lambda s: None, extremes=True, dtypes="all")
    failures = fz.check(_one_statement("fnp.max(x0, axis=1)", np.uint32, {"x0": (5, 40)}), range(3))
    assert {(f.impl, f.what) for f in failures} == {("numpy", "values")}


def test_jax_is_imported_only_when_its_comparison_is_asked_for():
    code = ("import sys\nfrom functrace import fuzz\nfz = fuzz.Fuzzer(1, extremes=True, dtypes='all', log=print)\n"
            "fz.run(range(2))\nprint('jax' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "False"


def test_an_absent_jax_is_skipped_with_its_reason(monkeypatch):
    def no_jax(name):
        raise ImportError(f"No module named {name!r}")
    monkeypatch.setattr(fuzz_oracles.importlib, "import_module", no_jax)
    fz = fuzz.Fuzzer(1, against=("jax",), impls=("eager",), log=lambda s: None)
    assert fz.oracles == () and "jax comparison skipped: jax is not importable (No module named 'jax')" \
        in fz.stats.summary()


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


# Programs of seed 37 with extremes and every dtype: each of the first 13 failed at 03a7e6b, before
# issue 37's fixes (float32 sin / cos of 1e8 on OpenCL kernels: 599, 1115; hypot, arcsinh, arccosh
# overflowing against numpy itself: 612, 755, 854, 551, 712; bool ** 2's dtype: 339; uint32 /
# uint64 max and min kernels that did not build: 122, 251, 1456; x.at[i].max of uint32 / uint64,
# KeyError 'uint' / 'ulong': 41, 620); the others cover, by their source, the rest of what the
# issue lists (sinh, cosh, logaddexp, logaddexp2, softplus, cumprod on extreme values, every
# reduction and x.at[i] update in uint8 ... uint64, bool, int8 and int16 programs).
EXTREME_SEED = 37
EXTREME_PROGRAMS = (599, 1115, 612, 755, 854, 551, 712, 339, 122, 251, 1456, 41, 620,
                    83, 165, 168, 596, 796, 848, 858, 893, 931, 982, 1049, 1230, 1293, 1298, 1347)
ON_KERNELS = (599, 1115, 122, 251, 1456, 41, 620)  # the ones whose defect was in OpenCL kernels
EXTREME_FEATURES = (
    [r"float32 .*fnp\.(sin|cos)\(x\d+\)"] +
    [rf"float(32|64) .*fnp\.{f}\(" for f in ("sinh", "cosh", "arcsinh", "arccosh", "hypot", "logaddexp",
                                              "logaddexp2", "cumprod")] + [r"float(32|64) .*ft\.nn\.softplus\("] +
    [rf"{d} " for d in ("uint8", "uint16", "uint32", "uint64", "bool", "int8", "int16")] +
    [rf"(u?int\d+|bool) .*fnp\.{r}\(" for r in ("sum", "prod", "max", "min", "argmax", "argmin", "cumsum", "cumprod",
                                                 "any", "all")] +
    [rf"(u?int\d+|bool) .*\.at\[\w+\]\.{op}\(" for op in ("set", "add", "mul", "min", "max")] +
    [rf"float(32|64) .*\.at\[\w+\]\.{op}\(" for op in ("set", "add", "mul", "min", "max")] +
    [r"uint32 .*fnp\.(max|min)\(", r"uint64 .*fnp\.(max|min)\(", r"bool .*(\*\* 2|square)"])


def test_the_extreme_programs_cover_the_features_of_issue_37():
    """Each feature shows in the source of one of the fixed programs (dtype and source on one line)."""
    texts = [f"{p.dtype.name} " + p.source().replace("\n", " ") for p in
             (fuzz.generate(EXTREME_SEED, i, extremes=True, dtypes="all") for i in EXTREME_PROGRAMS)]
    missing = [f for f in EXTREME_FEATURES if not any(re.search(f, t) for t in texts)]
    assert missing == []


@pytest.mark.parametrize("mode,programs", [("default", EXTREME_PROGRAMS), ("kernels", ON_KERNELS)])
def test_fixed_seed_with_extremes_and_every_dtype_finds_no_mismatch(mode, programs):
    """Those programs, three input sets each, on every backend and numpy itself: all within the
    reference's bounds (with IEEE infinities and NaN where numpy has them) and of numpy's dtypes;
    with every step a kernel, the ones whose defect was in OpenCL kernels."""
    reports = []
    fz = fuzz.Fuzzer(EXTREME_SEED, mode, 3, impls=fuzz.IMPLS if HAVE_OPENCL else ("eager", "numpy"),
                     log=reports.append, extremes=True, dtypes="all")
    stats = fz.run(programs)
    assert stats.programs == len(programs) and stats.comparisons > 0 and not stats.rejected, stats.summary()
    assert not stats.failures, stats.summary() + "\n\n" + "\n\n".join(reports)


def test_fixed_seed_against_jax_finds_no_mismatch():
    """Programs of every dtype with extremes, their values, gradients and vmap run by JAX (x64) too."""
    pytest.importorskip("jax", reason="jax is optional: the comparison against JAX runs where it is installed")
    reports = []
    fz = fuzz.Fuzzer(EXTREME_SEED, "default", 2, impls=("eager", "numpy"), log=reports.append, extremes=True,
                     dtypes="all", against=("jax",))
    assert fz.oracles == ("numpy-lib", "jax")
    stats = fz.run(EXTREME_PROGRAMS[13:21])  # (551: JAX's arcsinh derivative is 0 at 1e30 in float32)
    assert not stats.failures, stats.summary() + "\n\n" + "\n\n".join(reports)
