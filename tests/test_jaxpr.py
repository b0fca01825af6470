"""The IR: printing, evaluation, Jupyter rendering, structure."""
import numpy as np

import functrace as ft
import functrace.numpy as fnp


def test_printed_jaxpr_is_readable():
    closed = ft.make_jaxpr(lambda x, y: fnp.sum(fnp.sin(x) * y + 2.0, axis=0))(np.ones((3, 2), np.float32),
                                                                               np.ones(2, np.float32))
    text = str(closed)
    assert text.startswith("{ lambda ")
    assert "a:f32[3,2] b:f32[2]. let" in text
    assert "sin a" in text and "mul" in text and "reduce_sum[axes=(0,)]" in text
    assert "2.0:f32" in text  # a Python scalar is a literal of the array's dtype
    assert text.rstrip().endswith("}")


def test_repr_html_for_jupyter():
    closed = ft.make_jaxpr(lambda x: x < 1.0)(np.ones(2))
    html = closed._repr_html_()
    assert html.startswith("<pre>") and "&lt;" not in html.split("let")[0]
    assert "lt" in html


def test_eval_jaxpr_matches_python():
    f = lambda x: fnp.tanh(x @ x.T) [0] * 3
    x = np.random.default_rng(0).standard_normal((3, 4))
    closed = ft.make_jaxpr(f)(x)
    np.testing.assert_allclose(ft.eval_jaxpr(closed.jaxpr, closed.consts, x)[0], f(x))
    np.testing.assert_allclose(closed(x)[0], f(x))


def test_constants_and_dead_code():
    w = np.arange(6.0).reshape(2, 3)

    def f(x):
        fnp.exp(x)  # dead: removed
        return x @ w
    closed = ft.make_jaxpr(f)(np.ones(2))
    assert [e.primitive.name for e in closed.eqns] == ["dot_general"]
    assert len(closed.consts) == 1 and np.array_equal(closed.consts[0], w)
    assert not np.shares_memory(closed.consts[0], w)  # fixed when traced, as in JAX


def test_grad_jaxpr_is_ir_of_reverse_mode():
    f = lambda x: fnp.sum(fnp.sin(x) * x)
    closed = ft.make_jaxpr(ft.grad(f))(np.ones(3))
    names = [e.primitive.name for e in closed.eqns]
    assert "cos" in names and "sin" in names
    np.testing.assert_allclose(closed(np.full(3, 0.5))[0], np.cos(0.5) * 0.5 + np.sin(0.5))


def test_pytree_in_and_out_structure():
    closed = ft.make_jaxpr(lambda p: {"s": p["a"] + p["b"], "t": (p["a"],)})({"a": 1.0, "b": np.ones(2)})
    assert len(closed.in_avals) == 2
    assert closed.out_tree == ft.tree_util.tree_structure({"s": 0, "t": (0,)})


def test_static_argnums():
    closed = ft.make_jaxpr(lambda x, n: x ** n, static_argnums=1)(np.ones(2), 3)
    assert "integer_pow[y=3]" in str(closed)
