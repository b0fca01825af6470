"""The hand-written OpenCL kernels (cl_kernels/rmsnorm.cl, cl_kernels/attention.cl) against the
numpy backend: rms_norm / rms_norm_bwd and attention / attention_bwd (flash forward with the
log-sum-exp, backward from it) on random shapes -- sizes 1, 7, 127 and 1000, sequence lengths
that are not multiples of the 16-wide tiles, several leading batch axes, causal, general and
block-sparse masks, fully masked rows, float32 and float64 -- and whole-program gradients.
Every test also checks in the executable's report that the fused primitives ran as kernels,
not as host steps.

Each test jits one function holding all its cases, so each dtype costs one OpenCL program
build (cached on disk afterwards)."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import nn
from functrace.backends.opencl import runtime as cl_runtime
from functrace.primitives import nn as fused

rt = cl_runtime.get_runtime()
pytestmark = pytest.mark.skipif(rt is None, reason="no usable OpenCL device on this machine")

DTYPES = [np.float32, np.float64]


@pytest.fixture(autouse=True)
def _kernels_even_for_small_programs():
    """These shapes are small; the CPU-device shortcut that runs small programs on the host is
    switched off so the kernels run."""
    option = "opencl_small_program_elements"
    if not hasattr(ft.config, option):
        yield
        return
    saved = getattr(ft.config, option)
    ft.config.update(option, 0)
    yield
    ft.config.update(option, saved)


def run_both(f, *args):
    """(OpenCL outputs, numpy-backend outputs, OpenCL report) of jit(f)(*args)."""
    jf = ft.jit(f, backend="opencl")
    got = ft.tree_util.tree_map(np.asarray, jf(*args))
    want = ft.tree_util.tree_map(np.asarray, ft.jit(f, backend="numpy")(*args))
    return got, want, jf.lower(*args).compile().report()


def assert_close(got, want, dtype):
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    gl, wl = ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)
    assert len(gl) == len(wl)
    for i, (g, w) in enumerate(zip(gl, wl)):
        assert g.dtype == w.dtype == np.dtype(dtype) and g.shape == w.shape, (i, g.dtype, w.dtype, g.shape, w.shape)
        # finite values: relative to the array's scale; masked-row lse values (about -1e30): relative
        scale = max(1.0, float(np.abs(w[np.abs(w) < 1e20]).max(initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * 0.1 * scale, err_msg=f"output {i}")


def assert_kernels(report: str, prims: list):
    """Each primitive in ``prims`` ran as an OpenCL kernel (its label names the .cl file), none as a host step."""
    lines = report.splitlines()
    for p in prims:
        kernel_lines = [ln for ln in lines if ln.startswith(f"  kernel  {p}: ")]
        assert kernel_lines, f"{p} did not run as a kernel:\n{report}"
        assert all("OpenCL" in ln and ".cl" in ln for ln in kernel_lines), report
        assert not any(ln.startswith(f"  host    {p} ") for ln in lines), f"{p} ran as a host step:\n{report}"


# --------------------------------------------------------------------------- softmax

SOFTMAX_SHAPES = [(1,), (7,), (127,), (1000,), (3, 1000), (1000, 7), (2, 3, 127), (5, 16)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_and_log_softmax_kernels(dtype):
    """Forward kernels and gradients (with cross-entropy) against numpy, rows of -inf, +inf and
    NaN included (NaN rows, as the reference decomposition gives)."""
    rng = np.random.default_rng(2)
    xs = [(rng.standard_normal(s) * 4).astype(dtype) for s in SOFTMAX_SHAPES]
    xs[-1][0] = -np.inf
    xs[-1][1, 3] = np.inf
    xs[-1][2, 5] = np.nan
    labels = rng.integers(0, 7, 1000)

    def f(xs):
        outs = [nn.softmax(x) for x in xs] + [nn.log_softmax(x) for x in xs]
        loss = lambda xs: sum(fnp.sum(nn.softmax(x) * x) for x in xs[:-1]) + nn.cross_entropy(xs[5], labels)
        return outs, ft.grad(loss)(xs)

    with np.errstate(invalid="ignore"):
        got, want, report = run_both(f, xs)
    assert_close(got, want, dtype)
    assert_kernels(report, ["softmax", "log_softmax"])


# --------------------------------------------------------------------------- RMSNorm

RMS_SHAPES = [(1,), (7,), (127,), (1, 1), (3, 1000), (1000, 7), (2, 3, 4, 127), (127, 127), (2, 1, 7, 16)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_forward_and_grad(dtype):
    rng = np.random.default_rng(1)
    xs = [(rng.standard_normal(s) * 3).astype(dtype) for s in RMS_SHAPES]
    ws = [rng.standard_normal(s[-1:]).astype(dtype) for s in RMS_SHAPES]
    cs = [rng.standard_normal(s).astype(dtype) for s in RMS_SHAPES]
    eps = [1e-6 if i % 2 else 0.1 for i in range(len(RMS_SHAPES))]

    def loss(xs, ws, cs):
        return sum(fnp.sum(nn.rms_norm(x, w, eps=e) * c) for x, w, c, e in zip(xs, ws, cs, eps))

    def f(xs, ws, cs):
        ys = [nn.rms_norm(x, w, eps=e) for x, w, e in zip(xs, ws, eps)]
        return ys, ft.grad(loss, argnums=(0, 1))(xs, ws, cs)

    got, want, report = run_both(f, xs, ws, cs)
    assert_close(got, want, dtype)
    assert_kernels(report, ["rms_norm", "rms_norm_bwd"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_bwd_primitive(dtype):
    """The fused backward primitive directly (dw reduced over row chunks + combine, and in one chunk)."""
    rng = np.random.default_rng(2)
    shapes = [(1000, 7), (4, 250, 3), (1, 1000), (127, 33)]
    args = []
    for s in shapes:
        args += [rng.standard_normal(s).astype(dtype), rng.standard_normal(s[-1:]).astype(dtype),
                 rng.standard_normal(s).astype(dtype)]

    def f(*a):
        return [fused.rms_norm_bwd_p.bind(*a[i:i + 3], eps=1e-5) for i in range(0, len(a), 3)]

    got, want, report = run_both(f, *args)
    assert_close(got, want, dtype)
    assert_kernels(report, ["rms_norm_bwd"])
    assert "combine" in report  # the multi-chunk dw path ran


# --------------------------------------------------------------------------- attention

# (q shape (batch..., T, N, H), S, mask kind); N=2, H=8 throughout, so one kernel specialization
# per dtype; the other dimensions cover sizes 1, 7, 127 and partial 16-wide tiles
ATTN_CASES = [
    ((2, 7, 2, 8), 7, "causal"),
    ((127, 2, 8), 127, "causal"),              # no batch axes; 7 full tiles + a partial one
    ((2, 3, 5, 2, 8), 33, "random"),           # several batch axes; a fully masked row
    ((1, 1, 2, 8), 1, "none"),
    ((40, 2, 8), 37, "causal+random"),         # T > S; the random mask leaves row 0 no key
    ((1, 48, 2, 8), 48, "blocks"),             # whole 16x16 tiles masked (skipped), masked rows
    ((3, 20, 2, 8), 45, "causal"),             # T < S
    ((1, 7, 2, 8), 127, "none"),
]


def _attention_case(rng, qs, S, kind, dtype):
    ks = qs[:-3] + (S,) + qs[-2:]
    q = rng.standard_normal(qs).astype(dtype)
    k = rng.standard_normal(ks).astype(dtype)
    v = rng.standard_normal(ks).astype(dtype)
    cot = rng.standard_normal(qs).astype(dtype)
    T, N = qs[-3], qs[-2]
    mask = None
    if "random" in kind:
        mask = rng.random(qs[:-3] + (N, T, S)) > 0.3
        mask[..., 0, :] = False
    if kind == "blocks":
        t, s = np.arange(T)[:, None], np.arange(S)[None]
        mask = np.broadcast_to((np.abs(t - s) < 5) | (s < 3), qs[:-3] + (N, T, S)).copy()
        mask[..., 20:36, :] = False
    return q, k, v, cot, mask, "causal" in kind


def _full_mask(q, k, mask, causal):
    """The mask nn.attention passes to the primitive."""
    T, S, N = q.shape[-3], k.shape[-3], q.shape[-2]
    full = q.shape[:-3] + (N, T, S)
    m = np.broadcast_to(np.tril(np.ones((T, S), bool)) if causal else np.ones((T, S), bool), full)
    return m & mask if mask is not None else np.ascontiguousarray(m)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # numpy reference, masked rows
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_forward_lse_and_grads(dtype):
    rng = np.random.default_rng(3)
    cases = [_attention_case(rng, qs, S, kind, dtype) for qs, S, kind in ATTN_CASES]
    arrays = [(q, k, v, c) for q, k, v, c, _, _ in cases]
    masks = [(m, causal) for _, _, _, _, m, causal in cases]

    def f(arrays):
        res = []
        for (q, k, v, c), (m, causal) in zip(arrays, masks):
            out = nn.attention(q, k, v, causal=causal, mask=m)
            # the primitive itself, for its log-sum-exp output
            scale = 1.0 / np.sqrt(q.shape[-1])
            _, lse = fused.attention_p.bind(q, k, v, _full_mask(q, k, m, causal), causal=causal, scale=scale)
            grads = ft.grad(lambda q, k, v: fnp.sum(nn.attention(q, k, v, causal=causal, mask=m) * c),
                            argnums=(0, 1, 2))(q, k, v)
            res.append((out, lse, grads))
        return res

    got, want, report = run_both(f, arrays)
    assert_close(got, want, dtype)
    assert_kernels(report, ["attention", "attention_bwd"])
    # fully masked rows average v over all keys, with lse = log(S) - 1e30
    out, lse, _ = got[4]
    assert np.all(lse[:, :1] < -1e29) and np.all(lse[:, 1:] > -1e29)
    np.testing.assert_allclose(out[:1], np.broadcast_to(arrays[4][2].mean(axis=0), (1,) + out.shape[1:]),
                               rtol=1e-5, atol=1e-5)


def test_attention_grad_keeps_float32_precision_with_huge_scores():
    """The backward recomputes P = exp(logit - lse) with the logit rounded as the forward rounded
    it: a fused dot * scale - lse (one fma) moved P by up to half an ulp of the logit, dv off by
    5e-2 at |logit| ~ 1e6 and 6e-5 at 1e3.  Against the numpy backend at every scale, and against
    float64 where float32 logits determine P exactly (small logits; one-hot rows at 1e6).
    T = 17 and S = 19 run the 16-wide tiles and the tails of both backward kernels."""
    rng = np.random.default_rng(6)
    T, S = 17, 19
    k, v = (rng.standard_normal((S, 2, 8)).astype(np.float32) for _ in range(2))
    cot = rng.standard_normal((T, 2, 8)).astype(np.float32)
    scales = (1.0, 1e3, 1e6)
    qs = [(rng.standard_normal((T, 2, 8)) * scale).astype(np.float32) for scale in scales]

    def f(qs, k, v):
        return [ft.grad(lambda v: fnp.sum(nn.attention(q, k, v, causal=causal) * cot))(v)
                for q in qs for causal in (False, True)]

    got, want, report = run_both(f, qs, k, v)
    ref = f(*ft.tree_util.tree_map(lambda a: a.astype(np.float64), (qs, k, v)))  # eager, float64
    for i, (g, w, r) in enumerate(zip(got, want, ref)):
        size = np.abs(w).max()
        assert np.abs(g - w).max() <= 5e-6 * size, (scales[i // 2], np.abs(g - w).max() / size)
        if scales[i // 2] != 1e3:
            assert np.abs(g - np.asarray(r)).max() <= 1e-6 * size, (scales[i // 2], "float64")
    assert_kernels(report, ["attention", "attention_bwd"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_keeps_nan_like_numpy(dtype):
    """A NaN in q makes its row's scores all NaN (the running max stays -inf, as in a fully
    masked row); a NaN in k poisons one key of every row: both give NaN rows, as numpy does."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 37, 2, 16)).astype(dtype) for _ in range(3))
    q[0, 3, 1, 5] = np.nan
    k[1, 20, 0, 2] = np.nan
    for causal in (False, True):
        got, want, report = run_both(lambda q, k, v: nn.attention(q, k, v, causal=causal), q, k, v)
        assert np.isnan(want[0, 3, 1]).all() and np.isnan(want[1, 20:, 0]).all()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert_close(got, want, dtype)
        assert_kernels(report, ["attention"])


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # numpy reference: exp(-inf - -inf)
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_scores_of_minus_inf_like_numpy(dtype):
    """Scores of -inf (a key of -inf against q > 0) weigh 0, as in numpy.  Were wrong: a first
    tile scoring -inf made the running max -inf and exp(-inf - -inf) NaN the row; a causal row
    whose kept keys all score -inf averaged v over all S keys (found by the fuzzer: program 130
    of seed 1000), where the reference's max is the masked keys' -1e30 and the kept keys weigh 0;
    a row of -inf scores with no key masked is NaN (out and lse), as numpy's.  S = 35: the
    16-wide tiles and the tail."""
    rng = np.random.default_rng(7)
    q = np.abs(rng.standard_normal((4, 20, 1, 4))).astype(dtype) + 0.1
    k, v = (rng.standard_normal((4, 35, 1, 4)).astype(dtype) for _ in range(2))
    minus_inf_keys = [slice(0, 1), slice(0, 16), slice(0, 35), slice(0, 32)]  # per batch
    for b, keys in enumerate(minus_inf_keys):
        k[b, keys, 0] = [-np.inf, 0, 0, 0]
    for causal in (False, True):
        scale = 1.0 / np.sqrt(q.shape[-1])
        f = lambda q, k, v: fused.attention_p.bind(q, k, v, _full_mask(q, k, None, causal), causal=causal, scale=scale)
        got, want, report = run_both(f, q, k, v)
        np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
        np.testing.assert_array_equal(np.isnan(got[1]), np.isnan(want[1]))
        assert_close(got, want, dtype)
        assert_kernels(report, ["attention"])
        assert np.isnan(want[0][2]).all() != causal  # all -inf: NaN only with nothing masked
        assert not np.isnan(want[0][[0, 1, 3]]).any()


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_attention_grad_nan_cotangent_stays_off_masked_keys():
    """A NaN in one query row's cotangent makes dP - delta NaN along that row; the backward used
    dS = P * (dP - delta) with P = 0 at masked pairs, and 0 * NaN made dK NaN for keys the row never
    attends to.  Eager, the numpy backend and OpenCL now match the primitive's reference
    decomposition (a select: exactly 0 there).  T = S = 37 runs the 16-wide tiles and the tails."""
    rng = np.random.default_rng(7)
    T, N, H = 37, 2, 8
    q, k, v = (rng.standard_normal((T, N, H)).astype(np.float32) for _ in range(3))
    w = rng.standard_normal((T, N, H)).astype(np.float32)
    w[[2, 20], 1, 0] = np.nan  # query rows in the first tile, and in the second
    extra = rng.random((T, T)) < 0.7
    extra[np.arange(T), np.arange(T)] = True
    for causal, m in ((True, None), (False, extra)):
        full = _full_mask(q, k, m, causal)
        ref = lambda q, k, v: fnp.sum(fused.attention_reference(q, k, v, full, causal=causal,
                                                               scale=1 / np.sqrt(H))[0] * w)
        loss = lambda q, k, v: fnp.sum(nn.attention(q, k, v, causal=causal, mask=m) * w)
        want = [np.asarray(a) for a in ft.grad(ref, argnums=(0, 1, 2))(q, k, v)]
        eager = ft.grad(loss, argnums=(0, 1, 2))(q, k, v)
        got, numpy_backend, report = run_both(ft.grad(loss, argnums=(0, 1, 2)), q, k, v)
        assert not np.isnan(want[1][:, 0]).any() and np.isnan(want[1][:, 1]).any()  # head 0 clean
        for res in (eager, numpy_backend, got):
            for g, r in zip(res, want):  # dV = P^T g keeps the reference's 0 * NaN at masked pairs
                g = np.asarray(g)
                np.testing.assert_array_equal(np.isnan(g), np.isnan(r))
                np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
        assert_kernels(report, ["attention", "attention_bwd"])


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_non_finite_values_at_masked_keys_like_the_reference(dtype):
    """A masked pair weighs exactly 0 in the reference (as in JAX), and 0 * inf or 0 * NaN is NaN:
    an inf or NaN in v at a key a query never attends to makes that query's output NaN, and in q,
    k or the cotangent it reaches dK, dQ or dV the same way.  OpenCL skipped fully masked tiles and
    stayed finite there (a decision left open by the fuzzer's runs): a fully masked tile is now
    skipped only when the rows its zeros multiply are finite.  Causal and block-sparse masks,
    fully masked rows, infinities and NaNs, tiles and tails (T = S = 37)."""
    rng = np.random.default_rng(11)
    T, N, H = 37, 2, 8
    q, k, v, w = (rng.standard_normal((2, T, N, H)).astype(dtype) for _ in range(4))
    v[0, 30, 0, 3], v[1, 5, 1, 1] = np.nan, np.inf       # masked for the causal rows before them
    k[0, 33, 1, 2], q[1, 4, 0, 6], w[0, 2, 1, 4] = np.inf, np.nan, np.nan
    sparse = rng.random((T, T)) < 0.5
    sparse[:16, 16:32] = False                           # a fully masked tile off the diagonal
    sparse[9] = False                                    # a fully masked row
    for causal, m in ((True, None), (False, sparse)):
        full = _full_mask(q, k, m, causal)
        ref = lambda q, k, v: fused.attention_reference(q, k, v, full, causal=causal, scale=1 / np.sqrt(H))[0]
        att = lambda q, k, v: nn.attention(q, k, v, causal=causal, mask=m)
        for f, r in ((att, ref), (lambda *a: fnp.sum(att(*a) * w), lambda *a: fnp.sum(ref(*a) * w))):
            if f is not att:
                f, r = ft.grad(f, argnums=(0, 1, 2)), ft.grad(r, argnums=(0, 1, 2))
            want = [np.asarray(a) for a in ft.tree_util.tree_leaves(r(q, k, v))]
            got, numpy_backend, report = run_both(f, q, k, v)
            for res in (got, numpy_backend):
                for g, r_ in zip(ft.tree_util.tree_leaves(res), want):
                    np.testing.assert_array_equal(np.isnan(g), np.isnan(r_))
                    assert np.isnan(r_).any() and not np.isnan(r_).all()
                    np.testing.assert_allclose(g, r_, rtol=1e-4, atol=1e-5)
            assert_kernels(report, ["attention", "attention_bwd"] if f is not att else ["attention"])


def test_attention_unsupported_head_dim_runs_on_host():
    """head_dim > 256 has no kernel: the equation stays a (correct) host step."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((3, 1, 300)).astype(np.float32) for _ in range(3))
    got, want, report = run_both(lambda q, k, v: nn.attention(q, k, v, causal=True), q, k, v)
    assert_close(got, want, np.float32)
    assert "  host    attention " in report


# --------------------------------------------------------------------------- whole programs


def _block(params, x, cot):
    """RMSNorm -> causal multi-head attention -> residual -> RMSNorm, with per-feature q/k/v
    scalings instead of projections (this file tests the attention and RMSNorm kernels, not the
    matmul lowering; tests/test_opencl.py has whole programs with matmuls)."""
    B, T, D = x.shape
    N, H = 2, D // 2
    h = nn.rms_norm(x, params["n1"])
    q, k, v = (fnp.reshape(fnp.tanh(h * params[n]), (B, T, N, H)) for n in ("wq", "wk", "wv"))
    x = x + fnp.reshape(nn.attention(q, k, v, causal=True), (B, T, D)) * params["wo"]
    y = nn.rms_norm(x, params["n2"], eps=1e-5)
    return fnp.sum(y * cot)


def test_norm_attention_program_grad():
    rng = np.random.default_rng(5)
    B, T, D = 2, 23, 16
    params = {n: (1 + 0.3 * rng.standard_normal(D)).astype(np.float32)
              for n in ("n1", "n2", "wq", "wk", "wv", "wo")}
    x = rng.standard_normal((B, T, D)).astype(np.float32)
    cot = rng.standard_normal((B, T, D)).astype(np.float32)
    got, want, report = run_both(ft.value_and_grad(_block, argnums=(0, 1)), params, x, cot)
    assert_close(got, want, np.float32)
    assert_kernels(report, ["rms_norm", "rms_norm_bwd", "attention", "attention_bwd"])


def _transformer_block(params, x, cot):
    """A pre-norm transformer block: RMSNorm, causal multi-head attention, RMSNorm, SwiGLU MLP."""
    B, T, D = x.shape
    N, H = 2, D // 2
    h = nn.rms_norm(x, params["n1"])
    q, k, v = (fnp.reshape(h @ params[n], (B, T, N, H)) for n in ("wq", "wk", "wv"))
    x = x + fnp.reshape(nn.attention(q, k, v, causal=True), (B, T, D)) @ params["wo"]
    h = nn.rms_norm(x, params["n2"])
    y = x + nn.swiglu(h @ params["wg"], h @ params["wu"]) @ params["wd"]
    return fnp.sum(y * cot)


def test_transformer_block_grad():
    """The same kernels among matmuls (however dot_general is lowered)."""
    rng = np.random.default_rng(6)
    B, T, D, F = 2, 23, 16, 24
    params = {"n1": 1 + 0.1 * rng.standard_normal(D), "n2": 1 + 0.1 * rng.standard_normal(D),
              **{n: rng.standard_normal((D, D)) / 4 for n in ("wq", "wk", "wv", "wo")},
              "wg": rng.standard_normal((D, F)) / 4, "wu": rng.standard_normal((D, F)) / 4,
              "wd": rng.standard_normal((F, D)) / 5}
    params = {n: p.astype(np.float32) for n, p in params.items()}
    x = rng.standard_normal((B, T, D)).astype(np.float32)
    cot = rng.standard_normal((B, T, D)).astype(np.float32)
    got, want, report = run_both(ft.value_and_grad(_transformer_block, argnums=(0, 1)), params, x, cot)
    assert_close(got, want, np.float32)
    assert_kernels(report, ["rms_norm", "rms_norm_bwd", "attention", "attention_bwd"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["rows", "middle_axis", "scalar_index", "repeated"])
def test_gather_and_scatter_add_kernels(case, dtype):
    rng = np.random.default_rng(7)
    if case == "rows":
        x, idx, axis = rng.standard_normal((127, 9)), rng.integers(0, 127, (5, 3)), 0
    elif case == "middle_axis":
        x, idx, axis = rng.standard_normal((3, 7, 5)), rng.integers(0, 7, 11), 1
    elif case == "scalar_index":
        x, idx, axis = rng.standard_normal((7, 1000)), np.array(4), 0
    else:
        x, idx, axis = rng.standard_normal((7, 4)), np.array([1, 1, 1, 6, 1, 0, 6]), 0
    x = x.astype(dtype)
    import functrace.primitives as Pr
    f = lambda x: Pr.take(x, idx.astype(np.int64), axis)
    g = lambda x: ft.grad(lambda x: fnp.sum(Pr.take(x, idx.astype(np.int64), axis) ** 2))(x)  # scatter_add
    for fn in (f, g):
        got = np.asarray(ft.jit(fn, backend="opencl")(x))
        want = ft.jit(fn, backend="numpy")(x)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    report = ft.jit(g, backend="opencl").lower(x).compile().report()
    assert "scatter-add" in report and "gather" in report, report


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_remainder_matches_numpy_at_infinite_and_signed_zero_divisors(dtype):
    """numpy's ``%`` on floats: an infinite divisor gives x or +-inf (the kernel's
    x - floor(x / y) * y gave NaN, found by the fuzzer), a zero result takes the divisor's sign."""
    rng = np.random.default_rng(1)
    x = np.concatenate([np.array([7, 7, 7, -7, 7, 0, -0.0, 4, -4, 1e8, -3.5], dtype),
                        (rng.standard_normal(37) * 10).astype(dtype)])
    d = np.concatenate([np.array([np.inf, -np.inf, np.nan, np.inf, 0, np.inf, 2, -2, 2, 3.3, np.inf], dtype),
                        (rng.standard_normal(37) * 3).astype(dtype)])
    with np.errstate(all="ignore"):
        want = np.remainder(x, d)
    got = np.asarray(ft.jit(lambda a, b: fnp.remainder(a, b), backend="opencl")(x, d))
    np.testing.assert_array_equal(got, want)
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_builtins_with_special_values_in_neighbouring_lanes(dtype):
    """Every float builtin of the generated kernels, at the vector width the device prefers, where
    vectors mix ordinary values with 0, inf and NaN.  On PoCL 3.1 with AVX-512 the vector forms of
    float tan and double pow and fmod returned wrong numbers in the ordinary lanes of such vectors
    (tan(0.0054) = 0.0108; pow 0.94 for 1.5e31) and double8 fmod ran for minutes: those now run
    lane by lane (fusion._LANEWISE_TYPES).  Found by the fuzzer (seed 8000 kernels program 861, seed
    7000 program 2206)."""
    rng = np.random.default_rng(5)
    n = 4099  # full vectors and a tail
    x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 3, n)).astype(dtype)
    y = (rng.standard_normal(n) * 3).astype(dtype)
    for a in (x, y):
        m = rng.random(n) < 0.05
        a[m] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype), m.sum())
    unary = [fnp.sin, fnp.cos, fnp.tan, fnp.tanh, fnp.exp, fnp.expm1, fnp.log, fnp.log1p, fnp.sqrt,
             lambda x: 1 / fnp.sqrt(x), fnp.abs, fnp.floor, fnp.ceil, fnp.rint, fnp.sign, fnp.sigmoid,
             ft.nn.erf]
    binary = [fnp.power, fnp.remainder, fnp.floor_divide, fnp.arctan2, fnp.maximum, fnp.minimum,
              lambda x, y: fnp.power(fnp.abs(x), y)]
    f = lambda x, y: tuple(u(x) for u in unary) + tuple(b(x, y) for b in binary)
    got, want, report = run_both(f, x, y)
    assert "\n  host " not in report, report
    rtol = 4e-6 if dtype == np.float32 else 1e-13
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"NaNs of function {i}")
        np.testing.assert_allclose(g, w, rtol=rtol, atol=4 * np.finfo(dtype).tiny, err_msg=f"function {i}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_floor_divide_is_numpys(dtype):
    """numpy's float ``//`` (x minus its remainder, divided, moved down where the remainder's sign
    differs from y's): the kernels' floor(x / y) gave 10 for 1 // 0.1 (numpy: 9), -0 for
    0.5 // -inf (numpy: -1) and -inf for -inf // 2 (numpy: NaN)."""
    pairs = [(1, 0.1), (0.5, -np.inf), (-np.inf, 2), (7, 0), (0, 0), (-0.0, 3), (5, -0.0), (-7.5, 2),
             (7.5, -2), (1e8, 3.3), (-1, np.inf), (np.nan, 1), (3, np.nan), (0.3, 0.1), (-0.0, -3), (6, 3)]
    x = np.array([p[0] for p in pairs] * 5, dtype)  # vectors and a tail
    y = np.array([p[1] for p in pairs] * 5, dtype)
    got, want, report = run_both(lambda x, y: x // y, x, y)
    assert "\n  host " not in report, report
    np.testing.assert_array_equal(got, want)
    signed = ~np.isnan(want)  # (a NaN's sign bit means nothing)
    np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_grad_with_an_infinite_cotangent_like_the_reference(dtype):
    """delta = rowsum(P * dP) as the reference's softmax backward sums it: the flash shortcut
    rowsum(g * out) is equal where all is finite, but with an inf in g (or out, or v) it gave -inf
    where the reference gives NaN (inf - inf), on every backend (fuzzer seed 9000 program 3265).
    Rows with an inf use the reference's sum; the others keep the shortcut."""
    rng = np.random.default_rng(3)
    T, S, N, H = 21, 37, 2, 4
    q, w = (rng.standard_normal((2, T, N, H)).astype(dtype) for _ in range(2))
    k, v = (rng.standard_normal((2, S, N, H)).astype(dtype) for _ in range(2))
    w[1, 0, 0, :] = np.inf   # an infinite cotangent row
    w[0, 5, 1, 2] = -np.inf
    v[1, 30, 1, 1] = np.inf  # and an infinite value
    for causal in (False, True):
        full = _full_mask(q, k, None, causal)
        loss = lambda q, k, v: fnp.sum(nn.attention(q, k, v, causal=causal) * w)
        ref = lambda q, k, v: fnp.sum(fused.attention_reference(q, k, v, full, causal=causal, scale=1 / np.sqrt(H))[0] * w)
        want = [np.asarray(a) for a in ft.grad(ref, argnums=(0, 1, 2))(q, k, v)]
        got, numpy_backend, report = run_both(ft.grad(loss, argnums=(0, 1, 2)), q, k, v)
        for res in (got, numpy_backend):
            for g, r in zip(res, want):
                np.testing.assert_array_equal(np.isnan(g), np.isnan(r))
                np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
        assert_kernels(report, ["attention", "attention_bwd"])
