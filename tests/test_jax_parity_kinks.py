"""JAX parity where a derivative has a choice to make (issue 30, items 4 and 5).

* Kinks: ``relu6``, ``hard_sigmoid``, ``hard_silu``, ``hard_tanh`` (and ``relu``, ``celu``, ...) have
  JAX's one-sided derivatives at their kinks (``relu6'(0) = relu6'(6) = 0``, ``hard_silu'(3) = 1``),
  not the 1/2 of a max/min tie, in every mode: grad, jvp, grad of grad, vmap, jit on both backends.
* Out-of-bounds reads: ``x[i]`` and ``x.at[i].get()`` clamp out-of-bounds indices (values as JAX);
  through index arrays (JAX's gather) such a read carries no derivative, through scalars and slices
  (JAX's dynamic slice) the clamped element keeps it; negative in-range indices wrap and keep it.

The numbers are JAX's (0.10.2, float64), stored here; with JAX installed the same cases are also
compared live.  One deliberate difference: JAX's *forward* mode of an out-of-bounds gather reads
the clamped tangent (so JAX's jacfwd and jacrev disagree there); functrace drops it in both modes.
"""
import math

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.test_util import check_grads

NAN = math.nan
BACKENDS = ("numpy", "opencl")


# small programs run as OpenCL kernels (not the host shortcut for tiny programs), as in test_opencl
pytestmark = pytest.mark.opencl_kernels


# --------------------------------------------------------------------------- kinks

POINTS = np.array([-3.0, -1.0, 0.0, 1.0, 3.0, 6.0, NAN])
_S = 1.0 / 6.0
_T = 1.0 / 3.0
# name: (values, first derivatives, second derivatives) at POINTS, from JAX
KINKS = {
    "relu": ([0.0, 0.0, 0.0, 1.0, 3.0, 6.0, NAN],
             [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0],
             [0.0] * 7),
    "relu6": ([0.0, 0.0, 0.0, 1.0, 3.0, 6.0, NAN],
              [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0],
              [0.0] * 7),
    "hard_sigmoid": ([0.0, _T, 0.5, 2 * _T, 1.0, 1.0, NAN],
                     [0.0, _S, _S, _S, 0.0, 0.0, 0.0],
                     [0.0] * 7),
    "hard_silu": ([-0.0, -_T, 0.0, 2 * _T, 3.0, 6.0, NAN],
                  [0.0, _S, 0.5, 5 * _S, 1.0, 1.0, NAN],
                  [0.0, _T, _T, _T, 0.0, 0.0, 0.0]),
    "hard_tanh": ([-1.0, -1.0, 0.0, 1.0, 1.0, 1.0, NAN],
                  [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0],
                  [0.0] * 7),
    "leaky_relu": ([-0.03, -0.01, 0.0, 1.0, 3.0, 6.0, NAN],
                   [0.01, 0.01, 1.0, 1.0, 1.0, 1.0, 0.01],
                   [0.0] * 7),
    "elu": ([-0.950212931632136, -0.6321205588285577, 0.0, 1.0, 3.0, 6.0, NAN],
            [0.04978706836786395, 0.36787944117144233, 1.0, 1.0, 1.0, 1.0, NAN],
            [0.04978706836786395, 0.36787944117144233, 1.0, 0.0, 0.0, 0.0, NAN]),
    "celu": ([-0.950212931632136, -0.6321205588285577, 0.0, 1.0, 3.0, 6.0, NAN],
             [0.04978706836786395, 0.36787944117144233, 1.0, 1.0, 1.0, 1.0, NAN],
             [0.04978706836786395, 0.36787944117144233, 0.25, 0.0, 0.0, 0.0, NAN]),
}
# points away from every kink, for check_grads
SMOOTH = np.array([-4.5, -2.2, -0.7, 0.4, 2.5, 4.1, 7.3])


def _close(got, want, rtol=1e-12):
    got = np.asarray(got, np.float64)
    np.testing.assert_allclose(got, np.asarray(want, np.float64), rtol=rtol, atol=rtol, equal_nan=True)


def _elementwise_derivatives(f, mode):
    """(first, second) derivatives of the elementwise ``f`` at POINTS, computed in ``mode``."""
    d1 = ft.grad(f)
    d2 = ft.grad(d1)
    if mode == "grad":
        return [d1(p) for p in POINTS], [d2(p) for p in POINTS]
    if mode == "jvp":
        first = ft.jvp(f, (POINTS,), (np.ones_like(POINTS),))[1]
        second = ft.jvp(lambda x: ft.jvp(f, (x,), (np.ones_like(x),))[1], (POINTS,), (np.ones_like(POINTS),))[1]
        return first, second
    if mode == "vmap":
        return ft.vmap(d1)(POINTS), ft.vmap(d2)(POINTS)
    if mode == "jacrev":  # whole Jacobians and Hessians (NaN left out: it spreads through their products)
        x = POINTS[:-1]
        return np.diag(np.asarray(ft.jacrev(f)(x))), np.diag(np.asarray(ft.hessian(lambda x: fnp.sum(f(x)))(x)))
    backend = mode.split("_")[1]
    return ft.jit(ft.vmap(d1), backend=backend)(POINTS), ft.jit(ft.vmap(d2), backend=backend)(POINTS)


@pytest.mark.parametrize("name", sorted(KINKS))
def test_kink_values_match_jax(name):
    f = getattr(ft.nn, name)
    want = KINKS[name][0]
    _close(f(POINTS), want)
    for backend in BACKENDS:
        _close(ft.jit(f, backend=backend)(POINTS), want)
    # the signs of zeros too (hard_silu(-3) is -0.0, as JAX)
    np.testing.assert_array_equal(np.signbit(np.asarray(f(POINTS))[:-1]), np.signbit(np.asarray(want[:-1])))


@pytest.mark.parametrize("mode", ["grad", "jvp", "vmap", "jacrev", "jit_numpy", "jit_opencl"])
@pytest.mark.parametrize("name", sorted(KINKS))
def test_kink_derivatives_match_jax(name, mode):
    """First and second derivatives at the kinks (and at NaN) are JAX's in every mode."""
    _, d1_want, d2_want = KINKS[name]
    first, second = _elementwise_derivatives(getattr(ft.nn, name), mode)
    if mode == "jacrev":
        d1_want, d2_want = d1_want[:-1], d2_want[:-1]
    _close(first, d1_want)
    _close(second, d2_want)


@pytest.mark.parametrize("name", ["relu", "relu6", "hard_sigmoid", "hard_silu", "hard_tanh"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_kink_derivatives_float32(name, backend):
    x = POINTS.astype(np.float32)
    d1 = ft.jit(ft.vmap(ft.grad(getattr(ft.nn, name))), backend=backend)(x)
    assert np.asarray(d1).dtype == np.float32
    _close(d1, KINKS[name][1], rtol=1e-6)


@pytest.mark.parametrize("name", sorted(KINKS))
def test_kink_functions_check_grads_away_from_kinks(name):
    check_grads(getattr(ft.nn, name), (SMOOTH,), order=2, modes=("fwd", "rev"))


def test_kink_derivatives_match_jax_live(jax_x64):
    jax = jax_x64
    for name in KINKS:
        f, jf = getattr(ft.nn, name), getattr(jax.nn, name)
        _close(f(POINTS), jf(POINTS))
        _close(ft.vmap(ft.grad(f))(POINTS), jax.vmap(jax.grad(jf))(POINTS))
        _close(ft.vmap(ft.grad(ft.grad(f)))(POINTS), jax.vmap(jax.grad(jax.grad(jf)))(POINTS))
        _close(ft.jit(ft.vmap(ft.grad(f)), backend="opencl")(POINTS), jax.vmap(jax.grad(jf))(POINTS))


# --------------------------------------------------------------------------- out-of-bounds reads

X7 = np.arange(1.0, 8.0)
Y34 = np.arange(12.0).reshape(3, 4)
W3 = np.array([1.0, 2.0, 3.0])


def _cases(m):
    """name: (x -> x indexed, operand), written once for ``m`` = functrace.numpy or jax.numpy."""
    A, I = m.asarray, np.array
    return {
        "array_index": (lambda x: x[A(I([2, 9, -10]))], X7),
        "numpy_array_index": (lambda x: x[I([2, 9, -10])], X7),
        "at_get": (lambda x: x.at[A(I([2, 9, -10]))].get(), X7),
        "at_get_clip": (lambda x: x.at[A(I([2, 9, -10]))].get(mode="clip"), X7),
        "at_get_fill": (lambda x: x.at[A(I([2, 9, -10]))].get(mode="fill", fill_value=0.0), X7),
        "negative_in_range": (lambda x: x[A(I([-1, -7, 3]))], X7),
        "static_int_high": (lambda x: x[9], X7),
        "static_int_low": (lambda x: x[-10], X7),
        "zero_d_array": (lambda x: x[I(9)], X7),
        "at_get_static_int": (lambda x: x.at[9].get(), X7),
        "two_arrays": (lambda y: y[A(I([0, 3])), A(I([1, 7]))], Y34),
        "array_and_int": (lambda y: y[A(I([0, 3])), 1], Y34),
        "oob_int_with_array": (lambda y: y[5, A(I([1, 2]))], Y34),
        "column_array": (lambda y: y[:, A(I([1, 5, -5]))], Y34),
        "static_row": (lambda y: y[5], Y34),
        "static_pair": (lambda y: y[5, 1], Y34),
        "slice_and_int": (lambda y: y[1:, 7], Y34),
        "zero_d_and_strided_slice": (lambda y: y[I(5), ::2], Y34),
        "zero_d_and_unit_slice": (lambda y: y[I(5), 1:], Y34),
        "newaxis_and_array": (lambda x: x[None, A(I([9, 1]))], X7),
    }


# name: (value, gradient of sum(value * (1, 2, 3, ...))), from JAX
_Z4 = [0.0, 0.0, 0.0, 0.0]
OOB = {
    "array_index": ([3.0, 7.0, 1.0], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
    "numpy_array_index": ([3.0, 7.0, 1.0], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
    "at_get": ([3.0, 7.0, 1.0], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
    "at_get_clip": ([3.0, 7.0, 1.0], [3.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0]),
    "at_get_fill": ([3.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
    "negative_in_range": ([7.0, 1.0, 4.0], [2.0, 0.0, 0.0, 3.0, 0.0, 0.0, 1.0]),
    "static_int_high": (7.0, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]),
    "static_int_low": (1.0, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    "zero_d_array": (7.0, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]),
    "at_get_static_int": (7.0, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]),
    "two_arrays": ([1.0, 11.0], [[0.0, 1.0, 0.0, 0.0], _Z4, _Z4]),
    "array_and_int": ([1.0, 9.0], [[0.0, 1.0, 0.0, 0.0], _Z4, _Z4]),
    "oob_int_with_array": ([9.0, 10.0], [_Z4, _Z4, _Z4]),
    "column_array": ([[1.0, 3.0, 0.0], [5.0, 7.0, 4.0], [9.0, 11.0, 8.0]],
                     [[0.0, 1.0, 0.0, 0.0], [0.0, 4.0, 0.0, 0.0], [0.0, 7.0, 0.0, 0.0]]),
    "static_row": ([8.0, 9.0, 10.0, 11.0], [_Z4, _Z4, [1.0, 2.0, 3.0, 4.0]]),
    "static_pair": (9.0, [_Z4, _Z4, [0.0, 1.0, 0.0, 0.0]]),
    "slice_and_int": ([7.0, 11.0], [_Z4, [0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 2.0]]),
    "zero_d_and_strided_slice": ([8.0, 10.0], [_Z4, _Z4, _Z4]),
    "zero_d_and_unit_slice": ([9.0, 10.0, 11.0], [_Z4, _Z4, [0.0, 1.0, 2.0, 3.0]]),
    "newaxis_and_array": ([[7.0, 2.0]], [0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
}


def _weights(shape):
    return 1.0 + np.arange(int(np.prod(shape))).reshape(shape)


def _weighted_loss(f, shape):
    w = _weights(shape)
    return lambda x: (f(x) * w).sum()


@pytest.mark.parametrize("mode", ["eager", "jit_numpy", "jit_opencl"])
@pytest.mark.parametrize("name", sorted(OOB))
def test_out_of_bounds_reads_match_jax(name, mode):
    f, x = _cases(fnp)[name]
    want_value, want_grad = OOB[name]
    loss = _weighted_loss(f, np.shape(want_value))
    if mode == "eager":
        value, grad = f(fnp.asarray(x)), ft.grad(loss)(x)
    else:
        backend = mode.split("_")[1]
        value, grad = ft.jit(f, backend=backend)(x), ft.jit(ft.grad(loss), backend=backend)(x)
    _close(value, want_value)
    _close(grad, want_grad)


# JAX's numbers for traced indices (i = [2, 9, -10] on X7 unless said)
TRACED_ARRAY_GRAD = [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
VMAP_SCALAR_INDICES = np.array([2, 9, -10, -7, 6, 7])
VMAP_SCALAR_GRADS = [[0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
                     [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                     [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]]
VMAP_ROW_INDICES = np.array([[2, 9], [-10, 1]])
VMAP_ROW_GRADS = [[0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0]]
VMAP_BOTH_INDICES = np.array([[2, 9, -10], [0, 7, -1]])
VMAP_BOTH_GRADS = [[0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0]]
CUBES_GRAD_OF_GRAD = [0.0, 0.0, 18.0, 0.0, 0.0, 0.0, 0.0]


def _traced_programs():
    """name: (function, arguments, JAX's result)."""
    i = np.array([2, 9, -10])
    x2 = np.stack([X7, X7 + 10])
    return {
        "array": (ft.grad(lambda x, i: (x[i] * W3).sum()), (X7, i), TRACED_ARRAY_GRAD),
        "at_get": (ft.grad(lambda x, i: (x.at[i].get() * W3).sum()), (X7, i), TRACED_ARRAY_GRAD),
        "at_get_clip": (ft.grad(lambda x, i: (x.at[i].get(mode="clip") * W3).sum()), (X7, i),
                        [3.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0]),
        "scalar_high": (ft.grad(lambda x, i: x[i]), (X7, 9), [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]),
        "scalar_low": (ft.grad(lambda x, i: x[i]), (X7, -8), [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        "vmap_scalar": (ft.vmap(ft.grad(lambda x, i: x[i]), (None, 0)), (X7, VMAP_SCALAR_INDICES),
                        VMAP_SCALAR_GRADS),
        "vmap_rows": (ft.vmap(ft.grad(lambda x, i: (x[i] * np.array([1.0, 2.0])).sum()), (None, 0)),
                      (X7, VMAP_ROW_INDICES), VMAP_ROW_GRADS),
        "vmap_both_values": (ft.vmap(lambda x, i: x[i]), (x2, np.array([9, -10])), [7.0, 11.0]),
        "vmap_both": (ft.vmap(ft.grad(lambda x, i: (x[i] * W3).sum())), (x2, VMAP_BOTH_INDICES), VMAP_BOTH_GRADS),
        "grad_of_grad": (ft.grad(lambda x, i: ft.grad(lambda x: (x[i] ** 3 * W3).sum())(x).sum()), (X7, i),
                         CUBES_GRAD_OF_GRAD),
        "hessian_diagonal": (lambda x, i: fnp.diagonal(ft.hessian(lambda x: (x[i] ** 3 * W3).sum())(x)), (X7, i),
                             CUBES_GRAD_OF_GRAD),
    }


@pytest.mark.parametrize("mode", ["eager", "jit_numpy", "jit_opencl"])
@pytest.mark.parametrize("name", sorted(_traced_programs()))
def test_out_of_bounds_reads_with_traced_indices_match_jax(name, mode):
    f, args, want = _traced_programs()[name]
    got = f(*args) if mode == "eager" else ft.jit(f, backend=mode.split("_")[1])(*args)
    _close(got, want)


def test_out_of_bounds_reads_keep_the_dtype():
    x = X7.astype(np.float32)
    for backend in BACKENDS:
        g = ft.jit(ft.grad(lambda x, i: (x[i] * W3.astype(np.float32)).sum()), backend=backend)(x, np.array([2, 9, -10]))
        assert np.asarray(g).dtype == np.float32
        _close(g, TRACED_ARRAY_GRAD)


def test_out_of_bounds_gather_forward_mode_agrees_with_reverse_mode():
    """The dropped derivative is dropped in forward mode too (JAX's jvp gathers the clamped tangent,
    [12, 16, 10] here, so that its jacfwd and jacrev differ); functrace's forward and reverse agree."""
    i = np.array([2, 9, -10])
    f = lambda x: fnp.asarray(x)[i]
    _, tangent = ft.jvp(f, (X7,), (X7 + 9.0,))
    _close(tangent, [12.0, 0.0, 0.0])
    _close(ft.jacfwd(f)(X7), ft.jacrev(f)(X7))
    for backend in BACKENDS:
        _close(ft.jit(lambda x, t: ft.jvp(f, (x,), (t,))[1], backend=backend)(X7, X7 + 9.0), [12.0, 0.0, 0.0])


def test_in_bounds_reads_check_grads():
    check_grads(lambda x: fnp.asarray(x)[np.array([-1, 0, 3, 3])] ** 2, (X7,), order=2, modes=("fwd", "rev"))
    check_grads(lambda y: fnp.asarray(y)[np.array([0, 2]), np.array([-1, 1])] ** 2, (Y34,), order=2,
                modes=("fwd", "rev"))


def test_out_of_bounds_reads_match_jax_live(jax_x64):
    jax = jax_x64
    jnp = jax.numpy
    ours, theirs = _cases(fnp), _cases(jnp)
    for name in OOB:
        (f, x), (jf, _) = ours[name], theirs[name]
        want = np.asarray(jf(jnp.asarray(x)))
        _close(f(fnp.asarray(x)), want)
        w = _weights(want.shape)
        want_grad = jax.grad(lambda x: (jf(x) * w).sum())(jnp.asarray(x))
        _close(ft.grad(lambda x: (f(x) * w).sum())(x), want_grad)
        _close(ft.jit(ft.grad(lambda x: (f(x) * w).sum()), backend="opencl")(x), want_grad)
    i = np.array([2, 9, -10])
    _close(ft.jit(ft.grad(lambda x, i: (x[i] * W3).sum()), backend="opencl")(X7, i),
           jax.jit(jax.grad(lambda x, i: (x[i] * W3).sum()))(X7, i))
    _close(ft.vmap(ft.grad(lambda x, i: x[i]), (None, 0))(X7, VMAP_SCALAR_INDICES),
           jax.vmap(jax.grad(lambda x, i: x[i]), (None, 0))(X7, VMAP_SCALAR_INDICES))
    row_w = np.array([1.0, 2.0])
    _close(ft.vmap(ft.grad(lambda x, i: (x[i] * row_w).sum()), (None, 0))(X7, VMAP_ROW_INDICES),
           jax.vmap(jax.grad(lambda x, i: (x[i] * row_w).sum()), (None, 0))(X7, VMAP_ROW_INDICES))
    _close(ft.grad(lambda x: ft.grad(lambda x: (x[i] ** 3 * W3).sum())(x).sum())(X7),
           jax.grad(lambda x: jax.grad(lambda x: (x[i] ** 3 * W3).sum())(x).sum())(X7))
