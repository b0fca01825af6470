"""How arrays, programs and reports show themselves: ft.Array as JAX's Array, one-line reprs,
readable text and HTML tables for Lowered / Compiled and their reports, make_jaxpr's HTML."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.core.reports import CompiledReport, LoweredReport, ProgramReport


def test_array_repr_and_str_follow_jax_and_numpy():
    assert repr(ft.device_put(np.float32(0.588))) == "Array(0.588, dtype=float32)"
    assert repr(ft.device_put(np.arange(4, dtype=np.int32))) == "Array([0, 1, 2, 3], dtype=int32)"
    assert repr(ft.device_put(np.array([True, False]))) == "Array([ True, False], dtype=bool)"
    matrix = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert repr(ft.device_put(matrix)) == "Array([[0., 1., 2.],\n       [3., 4., 5.]], dtype=float32)"
    assert str(ft.device_put(matrix)) == str(matrix)
    out = ft.jit(lambda x: x * 2, backend="opencl")(np.float32(1.5))
    assert repr(out) == "Array(3., dtype=float32)" and str(out) == "3.0"


def test_array_repr_names_a_device_that_is_not_the_default(monkeypatch):
    from functrace.backends.opencl import runtime
    a = ft.device_put(np.ones(2, np.float32))
    if not isinstance(a, runtime.Array):
        pytest.skip("no OpenCL device: device_put returns numpy arrays")
    monkeypatch.setitem(runtime._state, "runtime", object())  # another device is now the default
    assert repr(a) == f"Array([1., 1.], dtype=float32, device={a.runtime.name!r})"


def _program(x, z):
    ft.debug.print("x={}", x)
    ft.debug.print("3x={}", x * 3)
    return fnp.tanh(x).sum() * 2, z * 2 + 1


@pytest.fixture
def kernels_for_small_programs(monkeypatch):
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)


def test_lowered_and_compiled_show_themselves(kernels_for_small_programs):
    args = (np.ones(4), np.ones(3, np.complex64))
    lowered = ft.jit(_program, backend="opencl").lower(*args)
    compiled = lowered.compile()
    for obj, kind in ((lowered, "Lowered"), (compiled, "Compiled")):
        text = repr(obj)
        assert "\n" not in text and text.startswith(f"<{kind} `_program`") and "complex64[3]" in text
        assert "<table>" in obj._repr_html_() and "_program" in obj._repr_html_()
    assert "tanh" in str(lowered) and "pass" in str(lowered)  # the program and the passes
    assert "kernel launches per call" in str(compiled)


def test_reports_are_one_kind_of_object_with_text_summary_and_tables(kernels_for_small_programs):
    lowered = ft.jit(_program, backend="opencl").lower(np.ones(4), np.ones(3, np.complex64))
    passes, running = lowered.report(), lowered.compile().report()
    assert isinstance(passes, LoweredReport) and isinstance(running, CompiledReport)
    for report in (passes, running):
        assert isinstance(report, ProgramReport) and isinstance(report, str)  # text searches keep working
        assert "\n" not in repr(report) and report.summary in repr(report)
        assert "<table>" in report._repr_html_()
    assert [name for name, _ in passes.counts][0] == "input" and passes.analysis.peak_bytes > 0
    # host steps grouped by reason, with counts: two prints, two complex64 equations
    assert running.host_steps[("debug_callback", "effectful: debug_callback runs on the host, in program order")] == 2
    assert sum(n for (p, why), n in running.host_steps.items() if why.startswith("complex64")) == 2
    html = running._repr_html_()
    assert "Host steps, by reason" in html and "debug_callback x2" in html and "mul, add" in html
    assert running.count("  host    debug_callback") == 2  # the text lists every step, in program order


def test_numpy_backend_report():
    report = ft.jit(_program, backend="numpy").lower(np.ones(4), np.ones(3)).compile().report()
    assert isinstance(report, CompiledReport) and "numpy" in repr(report) and "equations" in report


def test_make_jaxpr_html_shows_constants_with_shapes():
    w = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    html = ft.make_jaxpr(lambda x: x @ w + np.arange(4.0))(np.ones((2, 3), np.float32))._repr_html_()
    assert "Constants (2)" in html and "f32[3,4]" in html and "f64[4]" in html and "11." in html
    assert "<table>" not in ft.make_jaxpr(lambda x: x * 2)(1.0)._repr_html_()  # no constants: no table


def test_a_jitted_function_shows_its_function_and_keeps_its_name_docs_and_signature():
    import inspect

    def loss(w, x):
        """The mean squared loss."""
        return fnp.mean((x @ w) ** 2)
    jitted = ft.jit(loss)
    assert repr(jitted).startswith("<jitted function test_a_jitted_function_shows_its_function_and_keeps_its_name_"
                                   "docs_and_signature.<locals>.loss at 0x")
    assert jitted.__name__ == "loss" and jitted.__doc__ == "The mean squared loss." and jitted.__wrapped__ is loss
    assert list(inspect.signature(jitted).parameters) == ["w", "x"]
    ufunc = ft.jit(np.sin)
    assert repr(ufunc) == f"<jitted function sin at {hex(id(ufunc))}>" and "\n" not in repr(ufunc)


def test_a_small_program_counts_the_same_host_steps_in_its_text_summary_and_tables():
    """A program small enough to run on the host: the summary's equations are the table's host
    steps (not 0), with their reason, in the text and the HTML."""
    def loss(w, x):
        return fnp.sum(fnp.tanh(x @ w) ** 2) + fnp.sum(w * w)
    args = (np.ones((3, 2)), np.ones((4, 3)))
    for backend in ("opencl", "numpy"):
        report = ft.jit(loss, backend=backend).lower(*args).compile().report()
        assert "7 equations run by numpy on the host" in report.summary
        program = dict((m, v) for title, _, rows in report.tables if title == "Program" for m, v in rows)
        assert program["host steps per call"] == 7 == sum(report.host_steps.values())
        assert "host steps per call: 7" in report
        assert "Host steps, by reason" in report._repr_html_() and "reduce_sum x2" in report._repr_html_()


def test_titles_render_code_spans_as_html(kernels_for_small_programs):
    lowered = ft.jit(_program, backend="opencl").lower(np.ones(4), np.ones(3))
    for obj in (lowered, lowered.compile()):
        html = obj._repr_html_()
        assert "<code>_program</code>" in html and "`" not in html
