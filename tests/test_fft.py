"""functrace.numpy.fft: values against numpy.fft (every transform, norms, lengths, axes),
derivatives through complex intermediates (check_grads order 2, forward and reverse, real
inputs and outputs), vmap against a loop, jit on both backends, stored JAX gradients."""
from __future__ import annotations

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.test_util import check_grads

F = fnp.fft
rng = np.random.default_rng(5)
_R = rng.standard_normal((3, 8))
_C = _R + 1j * rng.standard_normal((3, 8))
_R3 = rng.standard_normal((2, 5, 6))

VALUE_CASES = [  # (name, function of fft module f, args)
    ("fft", lambda m: m.fft(_C), ()), ("fft-real_input", lambda m: m.fft(_R), ()),
    ("fft-n_axis_ortho", lambda m: m.fft(_C, n=5, axis=0, norm="ortho"), ()),
    ("fft-pad_forward", lambda m: m.fft(_R, n=11, norm="forward"), ()),
    ("ifft", lambda m: m.ifft(_C), ()), ("ifft-n_ortho", lambda m: m.ifft(_C, n=6, norm="ortho"), ()),
    ("rfft", lambda m: m.rfft(_R), ()), ("rfft-odd_n_axis0", lambda m: m.rfft(_R, n=5, axis=0), ()),
    ("irfft", lambda m: m.irfft(np.fft.rfft(_R)), ()), ("irfft-odd_n", lambda m: m.irfft(np.fft.rfft(_R), n=7), ()),
    ("irfft-forward", lambda m: m.irfft(np.fft.rfft(_R), norm="forward"), ()),
    ("fft2", lambda m: m.fft2(_C), ()), ("ifft2", lambda m: m.ifft2(_C, s=(4, 5)), ()),
    ("rfft2", lambda m: m.rfft2(_R3), ()), ("irfft2", lambda m: m.irfft2(np.fft.rfft2(_R3), s=(5, 6)), ()),
    ("fftn", lambda m: m.fftn(_R3, axes=(0, 2)), ()), ("ifftn", lambda m: m.ifftn(_C, s=(4, 10), axes=(0, 1)), ()),
    ("rfftn", lambda m: m.rfftn(_R3), ()), ("irfftn", lambda m: m.irfftn(np.fft.rfftn(_R3), s=(2, 5, 7), axes=(0, 1, 2)), ()),
    ("fftshift", lambda m: m.fftshift(_R3), ()), ("fftshift-axis", lambda m: m.fftshift(_R3, axes=1), ()),
    ("ifftshift", lambda m: m.ifftshift(_R3, axes=(0, 2)), ()),
    ("fftfreq", lambda m: m.fftfreq(7, 0.25), ()), ("rfftfreq", lambda m: m.rfftfreq(8, 0.5), ()),
]


@pytest.mark.parametrize("name,f,args", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_values_match_numpy(name, f, args):
    got, want = f(F), f(np.fft)
    assert np.asarray(got).dtype == want.dtype and np.shape(got) == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
@pytest.mark.parametrize("name", ["fft", "irfft-odd_n", "rfft2", "irfftn", "fftshift"])
def test_jit_matches_numpy(name, backend):
    f = dict((c[0], c[1]) for c in VALUE_CASES)[name]
    got = ft.jit(lambda: f(F), backend=backend)()
    np.testing.assert_allclose(np.asarray(got), f(np.fft), rtol=1e-12, atol=1e-12)


def test_single_precision_stays_single():
    x = _R.astype(np.float32)
    assert F.rfft(x).dtype == np.complex64 and F.irfft(F.rfft(x)).dtype == np.float32
    assert ft.jit(lambda v: F.fft(v))(x).dtype == np.complex64


_W = rng.standard_normal(5)
GRAD_CASES = {  # real inputs, real outputs, complex values in between
    "rfft-power": (lambda a: fnp.abs(F.rfft(a)) ** 2 * _W, (rng.standard_normal(8),)),
    "irfft-filter": (lambda a: F.irfft(F.rfft(a) * (_W + 1.0)), (rng.standard_normal(8),)),
    "irfft-odd": (lambda a: F.irfft(F.rfft(a) * fnp.arange(1.0, 5.0), n=7), (rng.standard_normal(7),)),
    "fft-parts": (lambda a, b: [F.fft(a + 1j * b).real, F.ifft(a * 1j + b, n=6).imag, fnp.abs(F.fft2(fnp.reshape(a, (2, 4))))],
                  (rng.standard_normal(8), rng.standard_normal(8))),
    "fft-ortho-conj": (lambda a: (F.fft(a, norm="ortho") * F.fft(a).conj()).real, (rng.standard_normal(6),)),
    "irfft2": (lambda a, b: F.irfft2(a + 1j * b, s=(3, 4)), (rng.standard_normal((3, 3)), rng.standard_normal((3, 3)))),
    "rfftn": (lambda a: fnp.abs(F.rfftn(a, norm="forward")), (rng.standard_normal((3, 4)),)),
    "ifftn-shift": (lambda a: F.fftshift(F.ifftn(a, axes=(0, 1))).imag, (rng.standard_normal((3, 4)),)),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_grads(name):
    f, args = GRAD_CASES[name]
    check_grads(f, args, order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("name", ["rfft-power", "irfft-filter", "fft-ortho-conj"])
def test_vmap_matches_a_loop(name, axis):
    f, (x,) = GRAD_CASES[name]
    batch = np.stack([x, x * 0.5 + 0.1, -x], axis=axis)
    want = np.stack([f(np.take(batch, i, axis=axis)) for i in range(3)])
    np.testing.assert_allclose(ft.vmap(f, in_axes=axis)(batch), want, rtol=1e-12, atol=1e-12)
    g = ft.grad(lambda v: fnp.sum(f(v) ** 2))
    np.testing.assert_allclose(ft.vmap(g, in_axes=axis)(batch), np.stack([g(np.take(batch, i, axis=axis)) for i in range(3)]),
                               rtol=1e-12, atol=1e-12)


def test_gradient_on_opencl_runs_fft_on_the_host_and_says_so(monkeypatch):
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 0)
    g = ft.grad(lambda a: fnp.sum(fnp.abs(F.rfft(a)) ** 2 * _W))
    x = rng.standard_normal(8)
    exe = ft.jit(g, backend="opencl").lower(x).compile()
    assert any(line.strip().startswith("host    fft") and "complex128" in line for line in exe.report().splitlines())
    np.testing.assert_allclose(np.asarray(exe(x)), g(x), rtol=1e-12)


def test_errors():
    with pytest.raises(TypeError, match="rfft of a complex"):
        F.rfft(_C)
    with pytest.raises(ValueError, match="norm"):
        F.fft(_R, norm="sideways")
    with pytest.raises(ValueError, match="data points"):
        F.fft(_R, n=0)
    # a complex input: JAX's convention, df/dx - i df/dy (central differences)
    f = lambda z: fnp.abs(F.fft(z))[0]
    h, z = 1e-6, _C[0]
    g = np.asarray(ft.grad(f)(z))
    for k in range(z.size):
        e = np.zeros_like(z)
        e[k] = h
        dx = (float(f(z + e)) - float(f(z - e))) / (2 * h)
        dy = (float(f(z + 1j * e)) - float(f(z - 1j * e))) / (2 * h)
        np.testing.assert_allclose(g[k], dx - 1j * dy, rtol=1e-6, atol=1e-8)
    with pytest.raises(NotImplementedError, match="hfft"):
        F.hfft(_C)


# Values and gradients computed once with JAX 0.4 (x64).
_X = np.array([0.3, -1.2, 0.8, 1.1, 0.4, -0.6, 2.0])
_Wj = np.array([1.0, 0.5, -0.3, 2.0])
_Y = np.array([[0.1, 0.5, -0.3, 0.7], [0.2, -0.4, 0.6, -0.1], [0.0, 0.3, 0.2, 0.9]])


def _jax_cases(np_):
    fft = np_.fft
    return {
        "rfft_power": (lambda a: np_.sum(np_.abs(fft.rfft(a)) ** 2 * _Wj), _X),
        "irfft_filter": (lambda a: np_.sum(fft.irfft(fft.rfft(a) * _Wj, n=7) ** 3), _X),
        "fft2_abs": (lambda a: np_.sum(np_.abs(fft.fft2(a, norm="ortho")) ** 3), _Y),
        "irfftn_even": (lambda a: np_.sum(fft.irfftn(fft.rfftn(a) * 1j + fft.rfftn(a) ** 2) * _Y), _Y),
        "ifft_parts": (lambda a: np_.sum(fft.ifft(a, n=9).imag * np_.arange(9.0)) + np_.sum(fft.fftshift(fft.fft(a).real) ** 2), _X),
    }


JAX_VALUES = {
    "rfft_power": (9.930673306152485, [1.9571857040779168, 6.338729618735934, 8.34189594811168, -3.0177199159874206, 15.758850145486244, 0.9303905633400977, 8.890667936235547]),
    "irfft_filter": (7.033890703032663, [-1.6836968178252563, 0.7021812339278597, 5.910640939670005, -1.4614498263721136, 9.454262867373634, -2.435263862540671, 7.042808613979231]),
    "fft2_abs": (1.4492448433376304, [[0.036449272810739286, 1.0904824558991444, -0.24642243563165972, 1.3074489035604135], [1.053908494227401, -0.5333310022732609, 1.3945722681463466, -0.3118068215590014], [0.1291762630590219, 0.7506173193125296, 0.2650333648928461, 1.3771971111440409]]),
    "irfftn_even": (0.05600000000000027, [[4.799999999999999, -0.5999999999999999, 2.899999999999999, -0.9999999999999998], [0.5500000000000003, 1.9799999999999998, -0.14999999999999988, 1.8599999999999997], [0.7000000000000003, 1.5599999999999996, -0.29999999999999993, 2.28]]),
    "ifft_parts": (12.228429145416188, [4.199999999999999, 4.226261290272689, 0.8041232037028962, 10.211324865405187, 10.411836509645768, 1.4881634903542338, 5.888675134594813]),
}


@pytest.mark.parametrize("name", sorted(JAX_VALUES))
def test_values_and_grads_match_stored_jax_results(name):
    f, x = _jax_cases(fnp)[name]
    value, grad = ft.value_and_grad(f)(x)
    want_value, want_grad = JAX_VALUES[name]
    np.testing.assert_allclose(value, want_value, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(JAX_VALUES))
def test_values_and_grads_match_jax(name, jax_x64):
    jax = jax_x64
    import jax.numpy as jnp
    f, x = _jax_cases(fnp)[name]
    jf, _ = _jax_cases(jnp)[name]
    got, want = ft.value_and_grad(f)(x), jax.jit(jax.value_and_grad(jf))(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-12)


def test_real_imag_conj_angle_of_traced_complex_values_differentiate():
    """fnp.real / imag / conj / angle bind the complex primitives on traced complex values (they
    were real-only before the complex primitives existed); derivatives against finite differences."""
    def f(x):
        z = fnp.fft.fft(x) + 0.5j
        return fnp.sum(fnp.real(z) * fnp.imag(fnp.conj(z)) + fnp.angle(z) * x[0] + fnp.imag(z) ** 2)
    x = np.array([0.3, -1.2, 0.7, 2.0, 0.4])
    ft.test_util.check_grads(f, (x,), order=2, modes=("fwd", "rev"))
    np.testing.assert_allclose(ft.jit(f, backend="numpy")(x), f(x), rtol=1e-12)


def test_real_if_close():
    np.testing.assert_array_equal(fnp.real_if_close(np.array([1 + 1e-18j, 2])), [1.0, 2.0])
    assert fnp.real_if_close(np.array([1 + 1e-3j])).dtype.kind == "c"
    assert fnp.real_if_close(np.ones(2)).dtype == np.float64
    with pytest.raises(NotImplementedError, match="real_if_close"):
        ft.jit(lambda x: fnp.real_if_close(fnp.fft.fft(x)), backend="numpy")(np.ones(4))
