"""JAX's semantics where JAX code depends on them: clamped out-of-range reads, immutable arrays,
one error for a bad shape eagerly and under ``jit``, numpy-scalar formatting, one array repr,
JAX's option names."""
import os
import subprocess
import sys

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.core.errors import ShapeError

REPROS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "repros")


def _device_result(x):
    """``x`` as the OpenCL backend's result (an ``ft.Array``), or skip without a device."""
    from functrace.backends.opencl import get_runtime
    if get_runtime() is None:
        pytest.skip("no usable OpenCL device on this machine")
    return ft.device_put(np.asarray(x))


@pytest.mark.parametrize("where", ["eager", "jit", "jit-numpy", "device"])
def test_static_out_of_range_reads_clamp(where):
    """``x[11]`` of a 10-vector is x[9] and ``x[-12]`` is x[0], as in JAX; rows too."""
    x, q = fnp.arange(10.0), fnp.zeros((11, 3)) + fnp.arange(11.0)[:, None]
    if where == "device":
        x, q = _device_result(x), _device_result(q)
    read = {"eager": lambda f, a: f(a), "device": lambda f, a: f(a),
            "jit": lambda f, a: ft.jit(f)(a), "jit-numpy": lambda f, a: ft.jit(f, backend="numpy")(a)}[where]
    assert float(read(lambda v: v[11], x)) == 9.0
    assert float(read(lambda v: v[-12], x)) == 0.0
    assert float(read(lambda v: v[9], x)) == 9.0 and float(read(lambda v: v[-1], x)) == 9.0  # in range: as before
    np.testing.assert_array_equal(np.asarray(read(lambda m: m[12], q)), [10.0] * 3)
    np.testing.assert_array_equal(np.asarray(read(lambda m: m[-20, 1], q)), 0.0)
    np.testing.assert_array_equal(np.asarray(read(lambda v: v[np.array([11, -12, 3])], x)), [9.0, 0.0, 3.0])


def test_out_of_range_index_in_a_loop_body_clamps():
    q = fnp.zeros((11, 3)) + fnp.arange(11.0)[:, None]
    total = ft.lax.fori_loop(0, 3, lambda t, acc: acc + q[11 - t + 1][0], 0.0)
    assert float(total) == 30.0


def test_numpy_arrays_keep_numpys_rules_and_empty_axes_still_raise():
    with pytest.raises(IndexError):
        np.arange(10.0)[11]
    with pytest.raises(IndexError, match="out of bounds"):
        fnp.zeros(0)[0]
    with pytest.raises(IndexError, match="too many indices"):
        fnp.zeros(3)[0, 0]


def test_static_index_repro_prints_ok():
    script = os.path.join(REPROS, "static_index_out_of_range.py")
    if not os.path.exists(script):
        pytest.skip("the shared repros are not beside this checkout")
    run = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300)
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0 and lines and all(line.startswith("OK") for line in lines), run.stdout + run.stderr


def test_in_place_writes_raise_the_same_type_error_eagerly_and_traced():
    x = fnp.zeros(3)
    with pytest.raises(TypeError, match=r"immutable.*x\.at\[i\]\.set") as eager:
        x[0] = 1.0

    def f(v):
        v[0] = 1.0
        return v
    with pytest.raises(TypeError, match=r"immutable.*x\.at\[i\]\.set") as traced:
        ft.jit(f)(np.zeros(3))
    assert str(eager.value) == str(traced.value)
    np.testing.assert_array_equal(np.asarray(x), 0.0)  # unchanged
    with pytest.raises(TypeError, match="immutable"):
        _device_result(np.zeros(3))[0] = 1.0
    assert np.asarray(x.at[0].set(1.0))[0] == 1.0


def test_augmented_assignment_makes_a_new_array():
    x = fnp.zeros(3)
    alias = x
    x += 1.0
    x *= 3.0
    np.testing.assert_array_equal(np.asarray(x), 3.0)
    np.testing.assert_array_equal(np.asarray(alias), 0.0)  # as JAX's: the old array is unchanged


@pytest.mark.parametrize("op", [lambda a, b: a @ b, lambda a, b: a + b, lambda a, b: a * b,
                                lambda a, b: fnp.add(a, b), lambda a, b: fnp.matmul(a, b)])
def test_shape_errors_are_shape_errors_eagerly_and_under_jit(op):
    a, b = fnp.ones((2, 3)), fnp.ones((4, 5))
    with pytest.raises(ShapeError) as eager:
        op(a, b)
    with pytest.raises(ShapeError) as traced:
        ft.jit(op)(a, b)
    assert str(eager.value).split(" in function")[0] == str(traced.value).split(" in function")[0]


def test_results_format_as_numpy_scalars():
    loss = fnp.sum(fnp.ones(3)) / 4.0
    jitted = ft.jit(lambda v: fnp.sum(v) / 4.0)(np.ones(3))
    assert f"{loss:.6f}" == f"{jitted:.6f}" == "0.750000"
    assert f"{_device_result(np.float32(0.75)):.3f}" == "0.750"
    assert f"{fnp.arange(3.0)}" == str(np.arange(3.0))


def test_eager_and_jitted_results_print_alike():
    eager = fnp.arange(3.0) * 2.0
    jitted = ft.jit(lambda v: v * 2.0, backend="numpy")(np.arange(3.0))
    assert repr(eager) == repr(jitted) == "Array([0., 2., 4.], dtype=float64)"
    assert repr(_device_result(np.arange(3.0, dtype=np.float32))) == "Array([0., 1., 2.], dtype=float32)"
    assert str(eager) == str(np.arange(3.0) * 2.0)


def test_jax_option_names():
    ft.config.update("jax_enable_x64", True)
    assert ft.config.enable_x64 is True
    with pytest.raises(NotImplementedError, match="float32"):
        ft.config.update("jax_enable_x64", False)
    assert ft.config.enable_x64 is True
    previous = ft.config.debug_nans
    try:
        ft.config.update("jax_debug_nans", True)
        assert ft.config.debug_nans is True
    finally:
        ft.config.update("debug_nans", previous)
    with pytest.raises(KeyError, match="unknown functrace option"):
        ft.config.update("jax_no_such_option", 1)


def test_iteration_stops_at_the_end_although_reads_clamp():
    """numpy iterates by indexing until an IndexError, which a clamped read never raises."""
    assert [float(v) for v in fnp.arange(3.0)] == [0.0, 1.0, 2.0]
    first, second = ft.random.split(ft.random.PRNGKey(0))
    assert first.shape == second.shape == (2,)
    rows = list(_device_result(np.ones((2, 3), np.float32)))
    assert len(rows) == 2 and all(r.shape == (3,) for r in rows)
    with pytest.raises(TypeError, match="0-d"):
        iter(fnp.float32(1.0) * fnp.ones(()))


def test_initializers_import_as_a_submodule_as_jax_code_writes_it():
    from functrace.nn.initializers import glorot_normal, normal
    assert glorot_normal()(ft.random.PRNGKey(0), (3, 2), np.float32).shape == (3, 2)
    assert normal()(ft.random.PRNGKey(1), (4,)).shape == (4,)
