"""ft.debug.print / ft.debug.callback: runtime values from eager code, jit (both backends),
grad, vmap and loops, in program order; the effect survives the optimizer's passes."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp


@pytest.fixture
def opencl_kernels(monkeypatch):
    """Run even small programs as kernels (not on the host of a CPU device) while the test runs."""
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 0)


def f(x):
    ft.debug.print("x={} total={total}", x, total=x.sum())
    y = fnp.exp(x) * 2
    ft.debug.print("y={}", y)
    return (y * x).sum()


X = np.array([0.0, 1.0, 2.0])
EXPECTED = [f"x={X} total=3.0", f"y={np.exp(X) * 2}"]


def lines(capsys) -> list:
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("run", [
    pytest.param(f, id="eager"),
    pytest.param(ft.jit(f, backend="numpy"), id="jit-numpy"),
    pytest.param(ft.jit(f, backend="opencl"), id="jit-opencl"),
    pytest.param(ft.grad(f), id="grad"),
    pytest.param(ft.jit(ft.grad(f), backend="numpy"), id="jit-grad"),
    pytest.param(lambda x: ft.jvp(f, (x,), (np.ones_like(x),)), id="jvp"),
    pytest.param(ft.jacfwd(f), id="jacfwd"),
])
def test_prints_runtime_values_once_in_order(run, capsys):
    run(X)
    assert lines(capsys) == EXPECTED


def test_opencl_runs_the_print_as_a_host_step_between_kernels(opencl_kernels, capsys):
    compiled = ft.jit(f, backend="opencl").lower(X).compile()
    assert compiled.num_host_steps == 2 and compiled.num_kernel_launches >= 2
    report = str(compiled.report())
    assert "debug_callback" in report and "effectful" in report
    np.testing.assert_allclose(float(compiled(X)), float(f(X)))
    assert lines(capsys) == EXPECTED * 2  # the eager reference printed too


def test_every_call_prints_again(capsys):
    g = ft.jit(lambda x: (ft.debug.print("called with {}", x), x + 1)[1], backend="numpy")
    g(1.0)
    g(2.0)
    assert lines(capsys) == ["called with 1.0", "called with 2.0"]


def test_vmap_prints_each_element_in_order(capsys):
    xs = np.arange(6.0).reshape(2, 3)
    ft.vmap(f)(xs)
    assert lines(capsys) == [f"x={xs[0]} total=3.0", f"x={xs[1]} total=12.0",
                             f"y={np.exp(xs[0]) * 2}", f"y={np.exp(xs[1]) * 2}"]
    ft.jit(ft.vmap(lambda x, c: ft.debug.print("{} {}", x, c), in_axes=(1, None)), backend="numpy")(xs, 7.0)
    assert lines(capsys) == ["[0. 3.] 7.0", "[1. 4.] 7.0", "[2. 5.] 7.0"]


def test_loops_print_every_iteration_and_grad_does_not_print_the_recomputed_forward(capsys):
    def body(carry, x):
        ft.debug.print("carry={} x={}", carry, x)
        return carry + x, carry * x

    def loss(xs):
        return ft.lax.scan(body, 0.0, xs)[1].sum()

    want = ["carry=0.0 x=0.0", "carry=0.0 x=1.0", "carry=1.0 x=2.0"]
    for run in (loss, ft.jit(loss, backend="numpy"), ft.jit(loss, backend="opencl"), ft.grad(loss),
                ft.jit(ft.grad(loss), backend="numpy")):
        run(X)
        assert lines(capsys) == want
    # a loop whose result is unused still runs, for its prints
    ft.jit(lambda x: (ft.lax.fori_loop(0, 2, lambda i, c: (ft.debug.print("i={}", i), c)[1], x), x)[1])(X)
    assert lines(capsys) == ["i=0", "i=1"]


def test_optimizer_keeps_effects_in_order(capsys):
    """Identical prints are not merged (CSE), a print of an unused or constant value is not
    removed (DCE) or evaluated when compiled (constant folding), and the order is the program's."""
    def g(x):
        c = np.float64(2.0) * 3
        ft.debug.print("a {}", x)
        ft.debug.print("a {}", x)
        ft.debug.print("unused {}", x * 5)
        ft.debug.print("const {}", c)
        return x
    jaxpr = ft.make_jaxpr(g)(1.0)
    assert [e.primitive.name for e in jaxpr.eqns].count("debug_callback") == 4
    assert "    debug_callback[" in str(jaxpr)  # no outputs: no "=" on the line
    lines(capsys)
    compiled = ft.jit(g, backend="numpy").lower(1.0).compile()
    assert lines(capsys) == []  # nothing printed at compile time
    compiled(1.0)
    assert lines(capsys) == ["a 1.0", "a 1.0", "unused 5.0", "const 6.0"]


def test_format_specs_and_named_fields(capsys):
    step = ft.jit(lambda loss, i: ft.debug.print("step {i:d}: loss {:.3f}", loss, i=i, ordered=True),
                  backend="opencl")
    step(np.float32(0.12345), np.int32(7))
    assert lines(capsys) == ["step 7: loss 0.123"]


def test_callback_gets_numpy_values_and_keyword_arguments():
    seen = []

    def record(a, pair, *, scale):
        seen.append((type(a), a.dtype, a.tolist(), pair[0].tolist(), pair[1], scale.tolist()))

    def g(x):
        ft.debug.callback(record, x, (x * 2, "label"), scale=x.sum())
        return x
    x = np.array([1.0, 2.0], np.float32)
    ft.jit(g, backend="opencl")(x)
    ft.jit(g, backend="numpy")(x)
    g(x)
    assert seen == [(np.ndarray, np.float32, [1.0, 2.0], [2.0, 4.0], "label", 3.0)] * 3


def test_bad_arguments():
    with pytest.raises(TypeError, match="format string"):
        ft.debug.print(np.ones(2))
    with pytest.raises(TypeError, match="debug.callback expects a function"):
        ft.debug.callback(3, np.ones(2))


@pytest.mark.parametrize("fmt, problem", [("x={x}", "KeyError: 'x'"), ("x={} {}", "IndexError"),
                                          ("x={:d", "unmatched"), ("x={:.3q}", "unsupported format string")])
@pytest.mark.parametrize("how", ["eager", "jit"])
def test_a_format_string_the_arguments_cannot_fill_fails_when_called_naming_the_function(capsys, fmt, problem, how):
    def log_values(x):
        ft.debug.print(fmt, x)
        return x
    run = log_values if how == "eager" else ft.jit(log_values, backend="numpy")
    with pytest.raises(ValueError, match=f"ft.debug.print: the format string .* does not fit its arguments "
                                         f"\\(.*{problem}.* in function `log_values`"):
        run(np.ones(3, np.float32))
    assert lines(capsys) == []


def test_format_check_uses_the_traced_shapes(capsys):
    def g(x):
        ft.debug.print("{:.2f} {x[1]}", x[0], x=x)  # a scalar takes .2f, a vector can be indexed
        return x
    ft.jit(g, backend="numpy")(np.array([1.0, 2.0]))
    ft.vmap(g)(np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert lines(capsys) == ["1.00 2.0", "1.00 2.0", "3.00 4.0"]
