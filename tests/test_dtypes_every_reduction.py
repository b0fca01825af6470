"""Every dtype numpy has, in every reduction and every ``x.at[...]`` update, under ``jit`` on OpenCL
(both device kinds) against numpy: the same dtypes and values (issue 37, item 5: max / min of
unsigned integers failed to build, their scatter max / min raised KeyError).  Dtypes that kernels
have a type for run as kernels (no host step); the others (int8, int16, uint8, uint16; bool and
float16 where a lowering has no form for them) run as host steps, never fail.

One program per dtype, shape and kind holds all the reductions over several axes (compiled
programs are cached), so the file stays quick although it covers many dtypes."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime as cl_runtime

pytestmark = [pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine"),
              pytest.mark.opencl_kernels,  # (conftest: small programs run as kernels too)
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]  # numpy's NaN

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
          np.float16, np.float32, np.float64]
KERNEL_DTYPES = {np.dtype(d) for d in (np.int32, np.int64, np.uint32, np.uint64, np.float32, np.float64)}
SHAPES = [(3, 5, 130)]  # every axis pattern: leading (the gpu kind's column sums), middle, trailing, (0, 2)
RNG = np.random.default_rng(37)


@pytest.fixture(params=["cpu", "gpu"])
def device_kind(request, monkeypatch):
    monkeypatch.setattr(ft.config, "opencl_device_kind", request.param)
    return request.param


def _small(dtype, shape):
    """Values whose sums and products fit every dtype's accumulator: +-1 (unsigned: 1), with a few
    0s, 2s and 3s (at most 40 factors above 1 in the whole array); bools at random; floats in
    [0.9, 1.1) (no cancellation: a relative tolerance holds; products of 2000 stay normal float16s)."""
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        return RNG.uniform(0.9, 1.1, shape).astype(dtype)
    x = (RNG.choice([-1, 1], shape) if np.dtype(dtype).kind == "i" else np.ones(shape, np.int64)).astype(dtype)
    special = RNG.choice(x.size, min(60, x.size // 2), replace=False)
    x.flat[special] = np.array([0, 2, 3], dtype)[np.arange(special.size) % 3]
    return x


def _wide(dtype, shape):
    """Values over the dtype's whole range (its extremes included), for max / min / argmax / argmin
    (unsigned: above the signed range too); floats with infinities and a NaN."""
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        x = (RNG.standard_normal(shape) * 100).astype(dtype)
        x.flat[[1, 4, 9]] = [np.inf, -np.inf, np.nan]
        return x
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    x.flat[[1, 4]] = [info.min, info.max]
    return x


EXACT = ("max", "min", "argmax", "argmin")  # (float sums, products and cumulative sums: to rounding)


def _reductions(xp, small, wide, axes) -> dict:
    """Every reduction over each of ``axes`` (the cumulative and arg ones over single axes), by
    ``"name, axis=..."``."""
    out = {}
    for ax in axes:
        for name in ("sum", "prod", "any", "all", "cumsum", "max", "min", "argmax", "argmin"):
            if isinstance(ax, int) or name not in ("cumsum", "argmax", "argmin"):
                out[f"{name}, axis={ax}"] = getattr(xp, name)(wide if name in EXACT else small, axis=ax)
    return out


def _assert_matches(got, want, dtype, exact_floats=False):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if got.dtype.kind != "f" or exact_floats:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol={np.float16: 2e-2, np.float32: 1e-5}.get(dtype, 1e-12))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_reduction_of_every_dtype_matches_numpy(dtype, shape, device_kind):
    small, wide = _small(dtype, shape), _wide(dtype, shape)
    axes = [None, *range(len(shape))] + ([(0, len(shape) - 1)] if len(shape) > 2 else [])
    f = lambda s, w: _reductions(fnp, s, w, axes)
    compiled = ft.jit(f, backend="opencl").lower(small, wide).compile()
    if np.dtype(dtype) in KERNEL_DTYPES:
        assert compiled.num_host_steps == 0, compiled.report()
    got = compiled(small, wide)
    for key, want in _reductions(np, small, wide, axes).items():
        _assert_matches(np.asarray(got[key]), np.asarray(want), dtype, exact_floats=key.split(",")[0] in EXACT)


SCATTERS = ("set", "add", "multiply", "min", "max")
_UFUNC = {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}


def _operand_and_updates(op, wide, small):
    """Sums and products of small values (in range); the others over the whole range."""
    return small if op in ("add", "multiply") else wide


def _numpy_update(x, idx, u, op):
    out = x.copy()
    if op == "set":
        out[idx] = u  # (numpy: the last update at a repeated index wins)
    else:
        _UFUNC[op].at(out, idx, u)
    return out


@pytest.mark.parametrize("shape", [(11,), (11, 3)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_scatter_of_every_dtype_matches_numpy(dtype, shape, device_kind):
    """``x.at[idx].set / add / multiply / min / max`` with repeated indices, on a vector and on the
    rows of a matrix."""
    idx = RNG.integers(0, shape[0], 40)
    wide = (_wide(dtype, shape), _wide(dtype, (40,) + shape[1:]))
    small = (_small(dtype, shape), _small(dtype, (40,) + shape[1:]))
    f = lambda i, wide, small: tuple(getattr(x.at[i], op)(u) for op in SCATTERS
                                     for x, u in [_operand_and_updates(op, wide, small)])
    compiled = ft.jit(f, backend="opencl").lower(idx, wide, small).compile()
    if np.dtype(dtype) in KERNEL_DTYPES:  # (the scatter_add kernel is float-only: integers add on the host)
        hosted = {line.split()[1] for line in compiled.report().splitlines() if line.strip().startswith("host    ")}
        assert hosted <= ({"scatter_add"} if np.dtype(dtype).kind in "iu" else set()), compiled.report()
    for got, op in zip(compiled(idx, wide, small), SCATTERS):
        x, u = _operand_and_updates(op, wide, small)
        _assert_matches(np.asarray(got), _numpy_update(x, idx, u, op), dtype, exact_floats=op in ("set", "min", "max"))
