"""sinh, cosh, arcsinh, arccosh, hypot, exp2, logaddexp, logaddexp2 (and nn.softplus, nn.log_sigmoid
built on logaddexp) where their textbook formulas overflow, underflow or cancel (issue 37, item 2:
arcsinh(-1e8) was -inf, sinh(1e-20) 0, hypot(1e200, 1e200) inf, softplus(-40) 0, grad(arcsinh)(-1e8)
NaN): numpy's values within a few ulps, eagerly, under ``jit`` on the numpy backend and as OpenCL
kernels, in float32 and float64 (float16 for the primitives), and their derivatives there."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime as cl_runtime

pytestmark = [pytest.mark.opencl_kernels,  # (conftest: small programs run as OpenCL kernels too)
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]  # numpy's overflow / invalid warnings

_F64 = {"unary": [-1e8, -1e200, 1e200, -1e4, 1e-20, -1e-12, -710.0, 710.0, 711.0, 1e160, 0.5, 3.0, -0.0,
                  np.inf, -np.inf, np.nan],
        "acosh": [1.0, 1.0 + 2 ** -52, 1.5, 1e4, 1e160, 1e300, np.inf, np.nan, 0.5],
        "exp2": [-60.0, 100.0, 1023.0, 1023.5, 1024.0, -1074.0, -1080.0, 0.5, -0.5, np.inf, -np.inf, np.nan],
        "softplus": [-40.0, -800.0, -1e300, 0.0, 1e-20, 40.0, 800.0, np.inf, -np.inf, np.nan],
        "pairs": [(1e200, 1e200), (1e-200, 1e-200), (3.0, 4.0), (-1e300, 1e-300), (1e-310, 1e-310), (0.0, -0.0),
                  (-40.0, 0.0), (0.0, -60.0), (1.0, 1.0), (-745.0, -745.0), (1e300, 1e300), (-1e308, 5.0),
                  (np.inf, np.inf), (-np.inf, -np.inf), (np.inf, -np.inf), (np.inf, np.nan), (np.nan, np.inf), (np.nan, -np.inf), (np.nan, 0.0),
                  (0.0, np.nan)]}
_F32 = {"unary": [-1e8, -1e30, 1e30, -1e4, 1e-20, -1e-12, -89.0, 89.0, 90.0, 1e20, 0.5, 3.0, -0.0,
                  np.inf, -np.inf, np.nan],
        "acosh": [1.0, 1.0 + 2 ** -23, 1.5, 1e4, 1e20, 1e38, np.inf, np.nan, 0.5],
        "exp2": [-60.0, 100.0, 127.0, 127.5, 128.0, -149.0, -155.0, 0.5, -0.5, np.inf, -np.inf, np.nan],
        "softplus": [-40.0, -200.0, -1e30, 0.0, 1e-20, 40.0, 200.0, np.inf, -np.inf, np.nan],
        "pairs": [(1e30, 1e30), (1e-30, 1e-30), (3.0, 4.0), (-1e38, 1e-38), (1e-40, 1e-40), (0.0, -0.0),
                  (-40.0, 0.0), (0.0, -60.0), (1.0, 1.0), (-100.0, -100.0), (1e38, 1e38), (-3e38, 5.0),
                  (np.inf, np.inf), (-np.inf, -np.inf), (np.inf, -np.inf), (np.inf, np.nan), (np.nan, np.inf), (np.nan, -np.inf), (np.nan, 0.0),
                  (0.0, np.nan)]}
ARGUMENTS = {np.float64: _F64, np.float32: _F32}


def _inputs(dtype) -> dict:
    a = ARGUMENTS[dtype]
    pairs = np.array(a["pairs"], dtype).T
    return {"unary": np.array(a["unary"], dtype), "acosh": np.array(a["acosh"], dtype),
            "exp2": np.array(a["exp2"], dtype), "softplus": np.array(a["softplus"], dtype), "x": pairs[0], "y": pairs[1]}


def _functions(M, v: dict) -> dict:
    """The functions at the arguments ``v`` (``_inputs``), written with ``M`` (fnp or numpy)."""
    softplus, log_sigmoid = (ft.nn.softplus, ft.nn.log_sigmoid) if M is fnp else \
        (lambda x: np.logaddexp(x, 0), lambda x: -np.logaddexp(0, -x))
    return {"sinh": M.sinh(v["unary"]), "cosh": M.cosh(v["unary"]), "arcsinh": M.arcsinh(v["unary"]),
            "arccosh": M.arccosh(v["acosh"]), "exp2": M.exp2(v["exp2"]), "hypot": M.hypot(v["x"], v["y"]),
            "logaddexp": M.logaddexp(v["x"], v["y"]), "logaddexp2": M.logaddexp2(v["x"], v["y"]),
            "softplus": softplus(v["softplus"]), "log_sigmoid": log_sigmoid(v["softplus"])}


def ulps(got, want) -> np.ndarray:
    """Distance in units in the last place (0 where both are the same infinity or both NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[got.dtype.itemsize]
    ordered = [np.where(b < 0, np.iinfo(bits).min - b, b).astype(np.float64) for b in (got.view(bits), want.view(bits))]
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    return np.where(same, 0.0, np.abs(ordered[0] - ordered[1]))


def _run(how: str, f, *args):
    """``f(*args)`` eagerly, or jitted on a backend (OpenCL: every step a kernel)."""
    if how == "eager":
        return f(*args)
    if how == "opencl" and cl_runtime.get_runtime() is None:
        pytest.skip("no usable OpenCL device on this machine")
    compiled = ft.jit(f, backend=how).lower(*args).compile()
    assert how != "opencl" or compiled.num_host_steps == 0, compiled.report()
    return compiled(*args)


HOW = ["eager", "numpy", "opencl"]
ULPS = {"eager": 0, "numpy": 0, "opencl": 4}  # (kernels: OpenCL's builtins, within 3 ulps on PoCL, and composites)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_where_textbook_formulas_fail(dtype, how):
    v = _inputs(dtype)
    got = _run(how, lambda v: _functions(fnp, v), v)
    for name, want in _functions(np, v).items():
        g = np.asarray(got[name])
        assert g.dtype == want.dtype, (name, g.dtype)
        bad = ulps(g, want) > ULPS[how]
        assert not bad.any(), f"{name}: {g[bad]} for numpy's {want[bad]}"


@pytest.mark.parametrize("how", ["eager", "opencl"])
def test_float16_primitives_within_one_ulp(how):
    """float16 computes in float32 and rounds once, numpy's way (kernels: float32 builtins)."""
    x = np.concatenate([np.linspace(-12, 12, 401), [-0.0, 1e-7, 6e-5, 1e4, 65504, np.inf, -np.inf, np.nan]]).astype(np.float16)
    f = lambda M, x: {"sinh": M.sinh(x), "cosh": M.cosh(x), "arcsinh": M.arcsinh(x), "exp2": M.exp2(x),
                      "arccosh": M.arccosh(M.abs(x) + np.float16(1)), "hypot": M.hypot(x, x[::-1])}
    got = _run(how, lambda x: f(fnp, x), x)
    for name, want in f(np, x).items():
        assert ulps(np.asarray(got[name]), want).max() <= 1, name


def _grad_cases(dtype) -> dict:
    """name -> (derivative function, its arguments, the exact derivative as a float64 value)."""
    big, small, far = (1e200, 1e-200, 1e160) if dtype == np.float64 else (1e30, 1e-30, 1e20)
    edge = 710.0 if dtype == np.float64 else 89.0
    sig = lambda t: 1 / (1 + np.exp(-t))  # noqa: E731  (exact enough in float64 at these points)
    return {
        "arcsinh'(-1e8)": (ft.grad(fnp.arcsinh), (-1e8,), 1 / np.hypot(1e8, 1.0)),
        "arcsinh'(-1e4)": (ft.grad(fnp.arcsinh), (-1e4,), 1 / np.hypot(1e4, 1.0)),
        "arcsinh'(big)": (ft.grad(fnp.arcsinh), (big,), 1 / big),
        "arccosh'(far)": (ft.grad(fnp.arccosh), (far,), 1 / far),
        "sinh'(-edge)": (ft.grad(fnp.sinh), (-edge,), np.cosh(edge)),
        "cosh'(edge)": (ft.grad(fnp.cosh), (edge,), np.sinh(edge)),
        "d hypot(x, big)/dx at big": (ft.grad(fnp.hypot), (big, big), np.sqrt(0.5)),
        "d hypot(x, small)/dy at small": (ft.grad(fnp.hypot, argnums=1), (small, small), np.sqrt(0.5)),
        "d hypot/dx at the origin": (ft.grad(fnp.hypot), (0.0, 0.0), 0.0),  # (JAX's; 0 / 0 was NaN)
        "d logaddexp(-40, 0)/dx": (ft.grad(fnp.logaddexp), (-40.0, 0.0), sig(-40.0)),
        "d logaddexp(-40, 0)/dy": (ft.grad(fnp.logaddexp, argnums=1), (-40.0, 0.0), sig(40.0)),
        "d logaddexp(1, 1)/dx": (ft.grad(fnp.logaddexp), (1.0, 1.0), 0.5),
        "d logaddexp2(-60, 0)/dx": (ft.grad(fnp.logaddexp2), (-60.0, 0.0), 2.0 ** -60 / (1 + 2.0 ** -60)),
        "softplus'(-40)": (ft.grad(ft.nn.softplus), (-40.0,), sig(-40.0)),
        "softplus'(800)": (ft.grad(ft.nn.softplus), (800.0,), 1.0),
        "log_sigmoid'(-800)": (ft.grad(ft.nn.log_sigmoid), (-800.0,), 1.0),
        "exp2'(-60)": (ft.grad(fnp.exp2), (-60.0,), 2.0 ** -60 * np.log(2)),
    }


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_derivatives_where_textbook_formulas_fail(dtype, how):
    for name, (df, args, exact) in _grad_cases(dtype).items():
        got = np.asarray(_run(how, df, *(np.asarray(a, dtype) for a in args)))
        want = np.asarray(exact).astype(dtype)
        assert got.dtype == want.dtype and ulps(got, want) <= 4, f"{name}: {got!r}, exactly {want!r}"
