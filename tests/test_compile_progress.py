"""A long compile shows that it runs and leaves no trace (issue 35, part 6): on a terminal one line
erased when the part ends, in a notebook a progress bar cleared then, in a log one plain line; and
``log_compiles`` (JAX's ``jax_log_compiles``) logs each compile to the "functrace" logger."""
import io
import logging
import sys
import time

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime as cl_runtime

ERASE = "\r\x1b[K"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _shown(progress, stream, timeout: float = 5.0) -> None:
    """Start ``progress`` at once and wait until its timer thread has written to ``stream``."""
    progress.after_seconds = 0.0
    progress.start()
    deadline = time.monotonic() + timeout
    while "compiling" not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_on_a_terminal_the_line_is_erased_when_the_part_ends(monkeypatch):
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    progress = cl_runtime.CompileProgress("a program of 3 operations")
    _shown(progress, term)
    assert term.getvalue().startswith("functrace: compiling a program of 3 operations") and "\n" not in term.getvalue()
    progress.stop()
    assert term.getvalue().endswith(ERASE)
    _shown(progress, term)  # (the next part, its first call, shows again if it is long too)
    progress.stop()
    assert term.getvalue().count("compiling") == term.getvalue().count(ERASE) == 2


def test_in_a_log_one_plain_line_stays(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    progress = cl_runtime.CompileProgress("a program")
    _shown(progress, log)
    progress.stop()
    progress.start()  # (printed once: no second line)
    progress.stop()
    assert log.getvalue().count("functrace: compiling") == 1 and log.getvalue().endswith("...\n")


def test_in_a_notebook_a_progress_bar_is_cleared(monkeypatch):
    display_mod = pytest.importorskip("IPython.display", reason="IPython is in the test extra")
    shown = []

    class Handle:
        def update(self, obj):
            shown.append(("update", obj.data))

    def display(obj, display_id=False):
        shown.append(("display", obj.data))
        return Handle()

    class OutStream(io.StringIO):  # (ipykernel's stderr, by its module)
        pass
    OutStream.__module__ = "ipykernel.iostream"
    stream = OutStream()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(display_mod, "display", display)
    progress = cl_runtime.CompileProgress("a program")
    progress.after_seconds = 0.0
    progress.start()
    deadline = time.monotonic() + 5
    while not shown and time.monotonic() < deadline:
        time.sleep(0.005)
    progress.stop()
    assert shown[0][0] == "display" and "<progress>" in shown[0][1] and "compiling a program" in shown[0][1]
    assert shown[1] == ("update", "") and stream.getvalue() == ""


def test_a_real_first_call_on_a_terminal_leaves_nothing(monkeypatch):
    if cl_runtime.get_runtime() is None:
        pytest.skip("no OpenCL device")
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(cl_runtime.CompileProgress, "after_seconds", 0.0)
    x = np.random.default_rng(71).standard_normal((13, 7)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(ft.jit(lambda v: fnp.cos(v) * 7.5 - 1.25)(x)), np.cos(x) * 7.5 - 1.25,
                               rtol=1e-5, atol=1e-6)
    out = term.getvalue()
    assert out.count("functrace: compiling") == out.count(ERASE)


@pytest.mark.parametrize("name", ["log_compiles", "jax_log_compiles"])
def test_log_compiles_logs_each_compile(name, caplog):
    def affine(x):
        return x * 2.0 + 1.0
    ft.config.update(name, True)
    try:
        with caplog.at_level(logging.WARNING, logger="functrace"):
            f = ft.jit(affine, backend="numpy")
            f(np.ones(3))
            f(np.ones(3))  # (compiled once)
            f(np.ones(4, np.float32))
    finally:
        ft.config.update("log_compiles", False)
    records = [r.getMessage() for r in caplog.records if r.name == "functrace"]
    assert len(records) == 2, records
    assert records[0].startswith("Compiled `affine` (2 operations, inputs (f64[3])) for numpy in ")
    assert "f32[4]" in records[1] and records[1].endswith(" s")


def test_no_compile_is_logged_by_default(caplog):
    with caplog.at_level(logging.DEBUG, logger="functrace"):
        ft.jit(lambda x: x - 3.0, backend="numpy")(np.ones(2))
    assert not [r for r in caplog.records if r.name == "functrace"]
