"""float16 on OpenCL against the numpy backend (conftest: kernels even for small programs, canary
mode).  Generated kernels hold float16 buffers through OpenCL 1.x core's ``vload_half`` /
``vstore_half_rte`` (no cl_khr_fp16 needed), compute in float and round every float16 result to
float16, as numpy's float16 loops do: single operations and chains of correctly rounded ones
(+ - * / sqrt, conversions) match bit for bit.  Stated bounds elsewhere:

* transcendentals: both backends compute a float32 value and round it; the float32 values differ
  by a few float32 ulps, which moves the float16 result by at most 1 ulp (ulps of float16);
* composites whose numpy forms round float16 intermediates more often (sigmoid: exp of a rounded
  logaddexp) are checked against float64 truth: within 1 ulp, where the numpy backend is within 4;
* sums accumulate in float and round once; numpy's float16 sums differ (pairwise in float along
  a contiguous axis, but rounded to float16 after every add along other axes): both are checked
  against the float64 sum with the bound of each method.
"""
import re
import warnings

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime

pytestmark = pytest.mark.skipif(runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")
RNG = np.random.default_rng(1616)
HALF_EPS = 2.0 ** -11  # float16's unit roundoff


def _run(f, *args):
    """(compiled OpenCL executable, its results, the numpy backend's results) of ``f(*args)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = ft.jit(f, backend="opencl").lower(*args).compile()
        got, want = compiled(*args), ft.jit(f, backend="numpy")(*args)
    flat = lambda t: [np.asarray(v) for v in ft.tree_util.tree_leaves(t)]
    return compiled, flat(got), flat(want)


def _ulps(got, want) -> np.ndarray:
    """|got - want| in ulps of float16 at ``want`` (0 where both are the same NaN / infinity)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore", over="ignore"):
        spacing = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
        return np.where(same, 0.0, np.abs(got - want) / spacing)


def _assert_bitwise(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    got, want = np.ascontiguousarray(np.atleast_1d(got)), np.ascontiguousarray(np.atleast_1d(want))
    same = (got.view(np.uint8) == want.view(np.uint8)).reshape(got.shape + (-1,)).all(-1) if got.size else got
    if got.dtype.kind == "f":
        same = same | (np.isnan(got) & np.isnan(want))
    assert np.all(same), (got[~same][:5], want[~same][:5])


def _halves(n: int, scale: float = 3.0, specials: bool = True) -> np.ndarray:
    x = (RNG.standard_normal(n) * scale).astype(np.float16)
    if specials:
        x[:9] = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504, -6e-8, 3e-5, 1e-4]
    return x


def test_conversions_to_float16_round_like_numpy():
    """float32 and float64 -> float16 in a kernel, bit for bit numpy's casts: random bit patterns,
    the float16 range densely, every float16 tie (ties to even), subnormals, overflow, NaN."""
    bits = RNG.integers(0, 2 ** 32, 1 << 14, dtype=np.uint64).astype(np.uint32)
    near = (RNG.integers(100, 146, 1 << 15).astype(np.uint32) << 23) | RNG.integers(0, 1 << 23, 1 << 15).astype(np.uint32)
    ties = (np.arange(1 << 16, dtype=np.uint32) << 13) | 0x1000
    x32 = np.concatenate([bits, near, ties]).view(np.float32)
    x32 = np.concatenate([x32, np.float32([65504, 65519.99, 65520, 5.96e-8, 2.98e-8, 2.99e-8, 1e-45])])
    # doubles: the float32 values nudged past the ties (double rounding through float would miss them)
    with np.errstate(invalid="ignore"):  # (signalling NaN patterns)
        x64 = np.concatenate([x32.astype(np.float64) * (1 + 2.0 ** -30), ties.view(np.float32).astype(np.float64)])
    x64[~np.isfinite(x64)] = np.inf
    for x in (x32, x64):
        compiled, got, want = _run(lambda a: a.astype(np.float16), x)
        _assert_bitwise(got[0], want[0])
        assert compiled.num_host_steps == 0, compiled.report()


BITWISE_OPS = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x / y,
    "sqrt": lambda x, y: fnp.sqrt(x), "neg_abs": lambda x, y: -fnp.abs(x), "floor_ceil": lambda x, y: fnp.floor(x) + fnp.ceil(y),
    "round": lambda x, y: fnp.round(x), "max_min": lambda x, y: fnp.maximum(x, y) - fnp.minimum(x, 0.5),
    "where": lambda x, y: fnp.where(x > y, x, y * 2), "compare": lambda x, y: (x < y, x == y, fnp.isfinite(x)),
    "remainder": lambda x, y: x % y, "floor_divide": lambda x, y: x // y, "square_cube": lambda x, y: (x ** 2, x ** 3),
    "to_f32_i32": lambda x, y: (x.astype(np.float32) * 3, fnp.nan_to_num(x).astype(np.int32)),
    "from_int": lambda x, y: fnp.arange(1003, dtype=np.int32).astype(np.float16) * x,
    "literal": lambda x, y: x * 0.1 + 1e-3, "sign_copysign": lambda x, y: fnp.sign(x) + fnp.copysign(y, x),
    "chain": lambda x, y: (x * y + x / y - y * y) * 0.3 - fnp.sqrt(fnp.abs(x * x - y)),
}


def test_correctly_rounded_ops_match_bit_for_bit():
    """Every op of ``BITWISE_OPS`` (one program: kernels compile once) over an odd size with
    specials, and broadcast (7, 143) + (143,): bit for bit the numpy backend, chains included
    (every float16 result is rounded)."""
    x, y = _halves(1003), (_halves(1003, 1.0, specials=False) + np.float16(0.25))
    for a, b in [(x, y), (x[:1001].reshape(7, 143), y[:143])]:
        ops = {k: f for k, f in BITWISE_OPS.items() if k != "from_int" or a.shape == (1003,)}
        compiled, got, want = _run(lambda a, b: {k: f(a, b) for k, f in ops.items()}, a, b)
        for g, w in zip(got, want):
            _assert_bitwise(g, w)
        assert compiled.num_host_steps == 0, compiled.report()


def _kernel_forms(a, b):
    """An elementwise chain over a broadcast and a transposed operand, a sum of a float16
    product, max along either axis, a padded concatenation (float16 kept bit for bit)."""
    c = (a * b + a.T[::-1].T / (b + 2)) * 0.5
    return c, fnp.sum(c * a, axis=1), fnp.max(c, axis=0), fnp.pad(fnp.concatenate([a, c]), ((1, 0), (0, 2)), constant_values=0.3)


@pytest.mark.parametrize("form", ["vec4", "vec8", "streaming", "batched"])
def test_every_kernel_form(monkeypatch, form):
    """Vector widths 4 and 8 (the device's is 16 on AVX-512), stores past the caches (float16 has
    no non-temporal form: plain half stores), and small steps batched into one launch: bit for
    bit the numpy backend."""
    from functrace.backends.opencl import planner
    if form.startswith("vec"):
        monkeypatch.setattr(planner, "_vector_width", lambda rt, eqns: int(form[3:]))
    elif form == "streaming":
        monkeypatch.setattr(planner, "cache_bytes", lambda rt: 1024)
    else:
        monkeypatch.setattr(ft.config, "opencl_host_step_elements", 10 ** 6)
        monkeypatch.setattr(planner, "_batch_min_eqns", lambda rt: 2)
    a, b = _halves(13 * 37, 1.0).reshape(13, 37), _halves(37, 1.0, specials=False)
    compiled, got, want = _run(_kernel_forms, a, b)
    for g, w in zip(got[:1] + got[2:], want[:1] + want[2:]):
        _assert_bitwise(g, w)
    assert _ulps(got[1], want[1]).max() <= 1  # 37 terms, float16 pairwise vs float: rarely 1 ulp
    assert compiled.num_host_steps == 0, compiled.report()
    if form == "batched" and runtime.get_runtime().kind == "cpu":  # (the gpu kind batches nothing)
        assert compiled.num_kernel_launches == 1, compiled.report()


TRANSCENDENTAL = {
    "exp": fnp.exp, "log": lambda x: fnp.log(fnp.abs(x)), "log1p": lambda x: fnp.log1p(fnp.abs(x)),
    "expm1": fnp.expm1, "sin": fnp.sin, "cos": fnp.cos, "tan": fnp.tan, "tanh": fnp.tanh,
    "arctan2": lambda x: fnp.arctan2(x, x[::-1]), "power": lambda x: fnp.abs(x) ** 0.7, "erf": ft.nn.erf,
    "chain": lambda x: fnp.tanh(x) * x + fnp.exp(-x * x) + fnp.sin(x) * 0.5 - fnp.log1p(x * x),
}


def test_transcendentals_within_one_ulp():
    """float32 values from different libraries rounded to float16: within 1 ulp (the chain: 2)."""
    x = _halves(1003, 2.0)
    compiled, got, want = _run(lambda x: {k: f(x) for k, f in TRANSCENDENTAL.items()}, x)
    for name, g, w in zip(sorted(TRANSCENDENTAL), got, want):  # (dict leaves come in key order)
        assert g.dtype == np.float16 and np.array_equal(np.isnan(g), np.isnan(w)), name
        assert _ulps(g, w).max() <= (2 if name == "chain" else 1), name
    assert compiled.num_host_steps == 0, compiled.report()


def test_sigmoid_is_closer_to_the_truth_than_numpy():
    """sigmoid in one rounding: within 1 ulp of float64 truth (the numpy backend's float16
    logaddexp / exp rounds three times: within 4)."""
    x = _halves(1003, 4.0, specials=False)
    compiled, got, want = _run(ft.nn.sigmoid, x)
    truth = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert _ulps(got[0], truth).max() <= 1 and _ulps(want[0], truth).max() <= 4
    assert compiled.num_host_steps == 0, compiled.report()


def _sum_bound(x: np.ndarray, axis, steps: float) -> np.ndarray:
    """Error bound of a float16 sum rounded ``steps`` times relative to the sum of |x|, plus the
    final rounding (half an ulp)."""
    wide = x.astype(np.float64)
    total = np.abs(np.sum(wide, axis=axis))
    return steps * HALF_EPS * np.sum(np.abs(wide), axis=axis) + np.spacing(total.astype(np.float16)).astype(np.float64) / 2


@pytest.mark.parametrize("axis", [0, 1, 2, (0, 2), None])
def test_reductions_over_any_axis(axis):
    """max / min bit for bit; sums (accumulated in float, one rounding) within half an ulp plus
    float32's rounding of the float64 sum; the numpy backend's sums within their own bound (a
    rounding per add along non-contiguous axes)."""
    x = _halves(5 * 37 * 9, 1.0, specials=False).reshape(5, 37, 9)
    compiled, got, want = _run(lambda a: (fnp.max(a, axis), fnp.min(a * 2, axis), fnp.sum(a, axis),
                                          fnp.sum(a * a - 0.25, axis)), x)
    for g, w in zip(got[:2], want[:2]):
        _assert_bitwise(g, w)
    terms = x.size // np.asarray(got[2]).size
    for g, w, operand in zip(got[2:], want[2:], (x, (x * x - np.float16(0.25)))):
        exact = np.sum(operand.astype(np.float64), axis=axis)
        assert g.dtype == w.dtype == np.float16
        assert np.all(np.abs(g - exact) <= _sum_bound(operand, axis, terms * 2.0 ** -13))
        assert np.all(np.abs(w - exact) <= _sum_bound(operand, axis, terms))
    assert compiled.num_host_steps == 0, compiled.report()


def test_long_sums_in_chunks():
    """Few outputs over many terms: partial sums per chunk and a combining kernel (max exact)."""
    x = _halves(3 * 20000, 1.0, specials=False).reshape(3, 20000)
    compiled, got, want = _run(lambda a: (fnp.sum(a, axis=1), fnp.max(a, axis=1), fnp.mean(a)), x)
    report = str(compiled.report())  # each sum and max: two launches (chunks, then their combination)
    assert int(re.search(r"kernel launches per call: (\d+)", report)[1]) == report.count("  kernel ") + 3, report
    _assert_bitwise(got[1], want[1])
    exact = np.sum(x.astype(np.float64), axis=1)
    # chunk partials are rounded to float16 before the combining kernel adds them
    assert np.all(np.abs(got[0] - exact) <= _sum_bound(x, 1, 2.0))
    assert abs(float(got[2]) - x.astype(np.float64).mean()) <= 2 ** -12
    assert compiled.num_host_steps == 0, compiled.report()


def test_layout_and_gathers_move_bits():
    """Slices, transposes, reversals, pad (a literal and a traced padding value), concatenate and
    take copy float16 bits exactly, NaN payloads included."""
    x = _halves(9 * 111).reshape(9, 111)
    x.view(np.uint16)[0, 10] = 0x7C01  # a signalling-NaN pattern: copied, not computed
    idx = RNG.integers(0, 111, 37)

    def f(a, v):
        return (a[1:8:2, ::-3].T + 1, fnp.pad(a, ((1, 2), (3, 0)), constant_values=1.1), fnp.pad(a, 2, constant_values=v),
                fnp.concatenate([a, a[:, ::-1] * 2, a[:4].reshape(-1, 111)], axis=0), fnp.take(a, idx, axis=1),
                a[2:5, 7:90].T.reshape(-1) * 3)
    compiled, got, want = _run(f, x, np.float16(-2.5))
    for g, w in zip(got, want):
        _assert_bitwise(g, w)
    _assert_bitwise(got[1][1:10, 3:], x)  # the copied bits, payload and all
    assert compiled.num_host_steps == 0, compiled.report()


def _mlp(params, x):
    (w1, b1), (w2, b2) = params
    h = fnp.tanh(x @ w1 + b1)
    return ft.nn.log_softmax(h @ w2 + b2)


def _mlp_params():
    return [((RNG.standard_normal((20, 16)) * 0.3).astype(np.float16), (RNG.standard_normal(16) * 0.1).astype(np.float16)),
            ((RNG.standard_normal((16, 5)) * 0.3).astype(np.float16), (RNG.standard_normal(5) * 0.1).astype(np.float16))]


def test_mlp_forward_in_float16():
    """An MLP forward, all on the device: the matmuls and log_softmax are their float32 kernels
    with float16 converted at their edges (numpy's float16 matmul is the float32 product rounded),
    the rest generated kernels; within 2 ulp of the numpy backend."""
    params, x = _mlp_params(), _halves(33 * 20, 1.0, specials=False).reshape(33, 20)
    compiled, got, want = _run(_mlp, params, x)
    assert got[0].dtype == np.float16 and np.isfinite(got[0]).all()
    assert _ulps(got[0], want[0]).max() <= 2
    assert compiled.num_host_steps == 0, compiled.report()
    assert "float16 converted at its edges" in str(compiled.report())


def test_hand_written_kernels_in_float32():
    """Products, softmax, rms_norm, argmax, scatter-add, sorts and scatters of float16 values: the
    float32 kernels between conversions.  numpy's float16 products are float32 products rounded: within 1 ulp
    (float32 sums in another order).  The numpy backend's softmax and rms_norm round float16
    intermediates (up to 7 ulp off); these are within 1 ulp of float64 truth.  A cumulative sum
    stays on the host (numpy rounds a float16 running sum at every step)."""
    a, b = _halves(9 * 40, 1.0, specials=False).reshape(9, 40), _halves(40 * 7, 1.0, specials=False).reshape(40, 7)
    scale, idx = _halves(40, 1.0, specials=False), RNG.integers(0, 9, 13)

    def f(a, b, scale):
        return (a @ b, fnp.einsum("ij,kj->ik", a, a), fnp.argmax(a, axis=1),
                ft.grad(lambda a: fnp.sum(fnp.take(a, idx, axis=0) * 3))(a),  # a scatter-add
                ft.nn.softmax(a * 3), ft.nn.rms_norm(a, scale))
    compiled, got, want = _run(f, a, b, scale)
    for g, w in zip(got[:4], want[:4]):
        assert g.dtype == w.dtype and _ulps(g, w).max() <= 1
    _assert_bitwise(got[2], want[2])
    wide = (a * np.float16(3)).astype(np.float64)
    e = np.exp(wide - wide.max(1, keepdims=True))
    wide = a.astype(np.float64)
    truths = (e / e.sum(1, keepdims=True), wide / np.sqrt((wide ** 2).mean(1, keepdims=True) + 1e-6) * scale)
    for g, w, truth in zip(got[4:], want[4:], truths):
        assert g.dtype == w.dtype and _ulps(g, truth).max() <= 1 and _ulps(w, truth).max() <= 8
    assert compiled.num_host_steps == 0, compiled.report()
    flat, at = a.reshape(-1), RNG.integers(0, 360, 50)
    compiled, got, want = _run(lambda a, f, v: (fnp.sort(a, axis=1), fnp.argsort(-a, axis=0), f.at[at].set(v),
                                                f.at[at].max(v * 2)), a, flat, flat[:50] * 3)
    for g, w in zip(got, want):  # sorting and scattering without accumulation: exact
        _assert_bitwise(g, w)
    assert compiled.num_host_steps == 0, compiled.report()
    compiled, got, want = _run(lambda a: fnp.cumsum(a, axis=1), a)
    _assert_bitwise(got[0], want[0])
    assert compiled.num_host_steps == 1 and "no float16 form" in str(compiled.report())


def test_grad_of_a_float16_loss():
    """The value and gradient of a float16 loss, all in generated kernels (elementwise chains,
    broadcasting, reductions), each within 4 float16 roundings of its largest entry: the sums
    differ (d/dw sums 7 rows, which numpy rounds at every add along that axis)."""
    x = _halves(7 * 33, 1.0, specials=False).reshape(7, 33)

    def loss(w, b):
        return fnp.mean((fnp.tanh(x * w + b) - 0.5) ** 2) + 0.1 * fnp.sum(ft.nn.sigmoid(w))
    w, b = _halves(33, 0.5, specials=False), np.float16(0.2)
    compiled, got, want = _run(ft.value_and_grad(loss, argnums=(0, 1)), w, b)
    assert [g.dtype for g in got] == [np.float16] * 3 and [g.shape for g in got] == [(), (33,), ()]
    for g, v in zip(got, want):
        assert np.abs(g.astype(np.float64) - v).max() <= 4 * HALF_EPS * np.abs(v.astype(np.float64)).max(), (g, v)
    assert compiled.num_host_steps == 0, compiled.report()
