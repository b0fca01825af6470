"""Errors raised through the public entry points (grad, jit, vmap, ...) show the user's frames
only, as JAX's do: the last frame is the user's line; ``traceback_filtering`` "off" shows all."""
import os
import sys
import traceback

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="filtering needs Python 3.11's bare re-raise")

PACKAGE = os.path.dirname(os.path.abspath(ft.__file__)) + os.sep
HERE = os.path.abspath(__file__)


@pytest.fixture
def filtering():
    """Set ``traceback_filtering`` for one test, then restore it."""
    saved = ft.config.traceback_filtering
    yield lambda mode: ft.config.update("traceback_filtering", mode)
    ft.config.update("traceback_filtering", saved)


def _frames(e: BaseException) -> list:
    return traceback.extract_tb(e.__traceback__)


def _library_frames(e: BaseException) -> list:
    return [f for f in _frames(e) if os.path.abspath(f.filename).startswith(PACKAGE)]


def _mismatched_add(x):
    return fnp.sum(x + fnp.ones(4))  # the user's failing line (a ShapeError when traced, numpy's eagerly)


def _branch_on_value(x):
    if x > 0:  # the user's failing line under jit
        return x
    return -x


def _raises_own_error(x):
    raise KeyError("the user's own error")


def _line_of(fun, text: str) -> int:
    """The line number of the line of ``fun``'s source containing ``text``."""
    import inspect
    lines, start = inspect.getsourcelines(fun)
    return start + next(i for i, line in enumerate(lines) if text in line)


USER_ERRORS = {
    "grad": (lambda: ft.grad(_mismatched_add)(np.ones(3)), _mismatched_add, ValueError),
    "value_and_grad": (lambda: ft.value_and_grad(_mismatched_add)(np.ones(3)), _mismatched_add, ValueError),
    "jit": (lambda: ft.jit(_mismatched_add)(np.ones(3)), _mismatched_add, ValueError),
    "jit-concretization": (lambda: ft.jit(_branch_on_value)(1.0), _branch_on_value, ft.ConcretizationError),
    "grad-of-jit": (lambda: ft.grad(ft.jit(_branch_on_value))(1.0), _branch_on_value, ft.ConcretizationError),
    "jit-of-grad": (lambda: ft.jit(ft.grad(_branch_on_value))(1.0), _branch_on_value, ft.ConcretizationError),
    "jit.lower": (lambda: ft.jit(_mismatched_add).lower(np.ones(3)), _mismatched_add, ValueError),
    "vmap": (lambda: ft.vmap(_mismatched_add)(np.ones((2, 3))), _mismatched_add, ValueError),
    "vmap-concretization": (lambda: ft.vmap(_branch_on_value)(np.ones(2)), _branch_on_value, ft.ConcretizationError),
    "jvp": (lambda: ft.jvp(_mismatched_add, (np.ones(3),), (np.ones(3),)), _mismatched_add, ValueError),
    "vjp": (lambda: ft.vjp(_mismatched_add, np.ones(3)), _mismatched_add, ValueError),
    "jacfwd": (lambda: ft.jacfwd(_mismatched_add)(np.ones(3)), _mismatched_add, ValueError),
    "jacrev": (lambda: ft.jacrev(_mismatched_add)(np.ones(3)), _mismatched_add, ValueError),
    "hessian": (lambda: ft.hessian(_mismatched_add)(np.ones(3)), _mismatched_add, ValueError),
    "make_jaxpr": (lambda: ft.make_jaxpr(_mismatched_add)(np.ones(3)), _mismatched_add, ValueError),
    "eval_shape": (lambda: ft.eval_shape(_mismatched_add, np.ones(3)), _mismatched_add, ValueError),
    "linearize": (lambda: ft.linearize(_mismatched_add, np.ones(3)), _mismatched_add, ValueError),
    "user-exception-under-jit": (lambda: ft.jit(_raises_own_error)(1.0), _raises_own_error, KeyError),
    "user-exception-under-grad": (lambda: ft.grad(_raises_own_error)(1.0), _raises_own_error, KeyError),
}


@pytest.mark.parametrize("case", sorted(USER_ERRORS))
def test_an_error_in_the_users_function_ends_at_the_users_line(case):
    call, fun, kind = USER_ERRORS[case]
    with pytest.raises(kind) as info:
        call()
    frames = _frames(info.value)
    assert _library_frames(info.value) == [], [f"{f.filename}:{f.lineno}" for f in frames]
    last = frames[-1]
    assert (os.path.abspath(last.filename), last.name) == (HERE, fun.__name__)
    assert last.lineno == _line_of(fun, "the user's" if fun is not _raises_own_error else "KeyError(")


LIBRARY_ERRORS = {
    "grad-of-a-vector": (lambda: ft.grad(lambda x: x * 2)(np.ones(3)), TypeError, "scalar output"),
    "grad-of-integers": (lambda: ft.grad(lambda x: x * 2.0)(3), ft.DtypeError, "floating-point inputs"),
    "grad-of-a-complex-output": (lambda: ft.grad(lambda x: fnp.exp(1j * x))(1.0), TypeError, "real-valued"),
    "grad-of-a-non-function": (lambda: ft.grad(3), TypeError, "expects a function"),
    "jit-of-a-non-function": (lambda: ft.jit("f"), TypeError, "expects a function"),
    "vmap-sizes": (lambda: ft.vmap(lambda a, b: a + b)(np.ones(2), np.ones(3)), ValueError, "inconsistent"),
    "compiled-signature": (lambda: ft.jit(lambda x: x * 2, backend="numpy").lower(np.ones(3)).compile()(np.ones(4)),
                           TypeError, "was lowered for"),
    "vjp-cotangent": (lambda: ft.vjp(lambda x: x * 2, np.ones(3))[1](np.ones(4)), ValueError, "cotangent shape"),
}


@pytest.mark.parametrize("case", sorted(LIBRARY_ERRORS))
def test_a_misuse_caught_by_functrace_ends_at_the_users_call(case):
    """The error is raised inside functrace: the last frame is the user's call of the entry point."""
    call, kind, text = LIBRARY_ERRORS[case]
    with pytest.raises(kind, match=text) as info:
        call()
    assert _library_frames(info.value) == []
    last = _frames(info.value)[-1]
    assert os.path.abspath(last.filename) == HERE and last.name == "<lambda>"


def test_off_shows_functrace_frames_and_remove_frames_does_not(filtering):
    filtering("off")
    with pytest.raises(ValueError) as info:
        ft.grad(_mismatched_add)(np.ones(3))
    library = _library_frames(info.value)
    assert any(f.filename.endswith("autodiff.py") for f in library)
    assert _frames(info.value)[-1].filename.startswith(PACKAGE)  # raised where functrace found the mismatch
    with pytest.raises(ft.ConcretizationError) as info:
        ft.jit(_branch_on_value)(1.0)
    assert any(f.filename.endswith("jit.py") for f in _library_frames(info.value))
    filtering("remove_frames")
    with pytest.raises(ValueError) as info:
        ft.grad(_mismatched_add)(np.ones(3))
    assert _library_frames(info.value) == []


def test_tracebackhide_keeps_every_frame_and_marks_functrace_s(filtering):
    """JAX's "tracebackhide": the frames stay, functrace's carry ``__tracebackhide__`` (which
    pytest and IPython honour)."""
    filtering("tracebackhide")
    with pytest.raises(ft.ShapeError) as info:
        ft.jit(_mismatched_add)(np.ones(3))
    tb, marked, unmarked_library = info.value.__traceback__, 0, []
    while tb is not None:
        inside = os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(PACKAGE)
        hidden = tb.tb_frame.f_locals.get("__tracebackhide__", False)
        if inside and hidden:
            marked += 1
        elif inside:
            unmarked_library.append(tb.tb_frame.f_code.co_name)
        else:
            assert not hidden
        tb = tb.tb_next
    assert marked > 3 and unmarked_library == []


def test_the_option_is_checked(filtering):
    with pytest.raises(ValueError, match="traceback_filtering must be one of"):
        ft.config.update("traceback_filtering", "sometimes")
    filtering("OFF")
    assert ft.config.traceback_filtering == "off"


def test_type_message_and_chained_exceptions_stay():
    class Mistake(Exception):
        pass

    def wraps_a_cause(x):
        try:
            {}["missing"]
        except KeyError as e:
            raise Mistake("while looking up") from e

    with pytest.raises(Mistake, match="^while looking up$") as info:
        ft.jit(wraps_a_cause)(1.0)
    cause = info.value.__cause__
    assert type(cause) is KeyError and cause.args == ("missing",)
    assert _frames(cause)[-1].name == "wraps_a_cause"
    text = "".join(traceback.format_exception(info.value))
    assert "direct cause" in text and "KeyError: 'missing'" in text and PACKAGE not in text


def test_only_the_outermost_entry_point_filters():
    """Inside a transformation, the user's code that catches an error of a nested entry point sees
    the whole traceback (the outer entry point filters what finally reaches the user)."""
    seen = []

    def outer(x):
        try:
            ft.jit(_mismatched_add)(x)
        except ft.ShapeError as e:
            seen.append(_library_frames(e))
        return fnp.sum(x)

    ft.grad(outer)(np.ones(3))
    assert seen and seen[0] != []


def test_a_filtered_error_can_be_caught_and_raised_again():
    """The exception object is the same one: re-raising it from the user's code works."""
    def again():
        try:
            ft.grad(_mismatched_add)(np.ones(3))
        except ValueError as e:
            raise RuntimeError("context") from e

    with pytest.raises(RuntimeError) as info:
        again()
    assert isinstance(info.value.__cause__, ValueError)
    assert _library_frames(info.value) == [] and _library_frames(info.value.__cause__) == []


def test_entry_points_keep_the_wrapped_functions_name_docs_and_signature():
    import inspect

    def loss(w, x, scale=1.0):
        """The loss."""
        return fnp.sum(w * x) * scale

    for transformed in (ft.grad(loss), ft.value_and_grad(loss), ft.jacfwd(loss), ft.jacrev(loss),
                        ft.hessian(loss), ft.vmap(loss), ft.jit(loss), ft.make_jaxpr(loss)):
        assert transformed.__name__ == "loss" and transformed.__doc__ == "The loss."
        assert transformed.__wrapped__ is loss or transformed.__wrapped__.__wrapped__ is loss
        assert list(inspect.signature(transformed).parameters) == ["w", "x", "scale"]
    for api in (ft.grad, ft.value_and_grad, ft.vjp, ft.jvp, ft.jacfwd, ft.jacrev, ft.hessian, ft.vmap,
                ft.jit, ft.make_jaxpr, ft.eval_shape, ft.linearize):
        assert api.__doc__ and "fun" in inspect.signature(api).parameters
