"""Every kernel family of the OpenCL backend on small odd shapes, for a run on Oclgrind.

Run as a script (``tests/test_oclgrind.py`` does, in a child process whose environment selects
Oclgrind's device, its checks and its limits): ``python oclgrind_programs.py <family>[:<case>]...``.  Each
program is compiled for OpenCL with the small-program and host-step shortcuts off (so the kernels
run) and compared with the numpy backend; each line printed is ``OK <family> <case>``, ``MISMATCH
<family> <case> <what>`` or ``ERROR <family> <case> <exception>``.  Oclgrind itself reports races,
out-of-bounds and uninitialized accesses on stderr, which the caller reads.
"""
from __future__ import annotations

import sys
import traceback

import numpy as np

import functrace as ft
import functrace.numpy as fnp

RNG = np.random.default_rng(37)  # reseeded per family: a family's data whatever runs before it
FLOATS = (np.float16, np.float32, np.float64)


def normal(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def _elementwise():
    for dt in FLOATS:
        x, y = normal(7, 13, dtype=dt), normal(1, 13, dtype=dt)
        yield f"chain-{np.dtype(dt).name}", lambda a, b: fnp.tanh(a * b + 1) - fnp.exp(-a * a) / (1 + b * b), (x, y)
        yield f"unary-{np.dtype(dt).name}", lambda a: (fnp.sin(a), fnp.sqrt(fnp.abs(a)), fnp.log1p(a * a),
                                                      fnp.maximum(a, 0.25), fnp.where(a > 0, a, -2 * a)), (x,)
    ints = RNG.integers(-50, 50, (5, 9))
    yield "integer", lambda a: (a * 3 - 7, a // 4, a % 5, a > 0), (ints,)


def _reductions():
    x = normal(5, 7, 33)
    for axes in (None, 0, 1, 2, (0, 1), (0, 2), (1, 2)):
        yield f"sum-max-axes{axes}", lambda a, axes=axes: (fnp.sum(a, axis=axes), fnp.max(a, axis=axes),
                                                           fnp.min(a, axis=axes), fnp.mean(a * a, axis=axes)), (x,)
    for dt, rows in ((np.float32, 301), (np.float16, 61)):  # (numpy sums float16 in float16: few rows)
        wide = normal(rows, 70, dtype=dt)
        yield f"column-sums-{np.dtype(dt).name}", lambda a: (fnp.sum(a, axis=0), fnp.max(a, axis=0)), (wide,)
        yield f"row-sums-{np.dtype(dt).name}", lambda a: fnp.sum(a, axis=1), (wide,)
    yield "long-vector", lambda a: (fnp.sum(a), fnp.prod(1 + a / 1e3)), (normal(4099),)
    yield "uint32", lambda a: (fnp.max(a, axis=0), fnp.sum(a, axis=1)), (RNG.integers(0, 2**32, (9, 70)).astype(np.uint32),)


def _matmul():
    for dt in (np.float32, np.float64):
        name = np.dtype(dt).name
        a, b, c = normal(37, 29, dtype=dt), normal(29, 41, dtype=dt), normal(41, dtype=dt)
        yield f"gemm-{name}", lambda a, b: a @ b, (a, b)
        yield f"gemm-bias-relu-{name}", lambda a, b, c: ft.nn.relu(a @ b + c), (a, b, c)
        yield f"gemm-transposed-{name}", lambda a, b: (a.T @ a, b @ b.T), (a, b)
        yield f"batched-{name}", lambda p, q: fnp.einsum("bij,bjk->bik", p, q), (normal(3, 9, 17, dtype=dt),
                                                                                normal(3, 17, 5, dtype=dt))
        yield f"matvec-{name}", lambda a, v: a @ v, (a, normal(29, dtype=dt))
        yield f"dense-grad-{name}", ft.grad(lambda w, x: fnp.sum(fnp.tanh(x @ w + 0.5) ** 2)), (b, a)
    yield "gemm-float16", lambda a, b: a @ b, (normal(19, 23, dtype=np.float16), normal(23, 17, dtype=np.float16))


def _layout():
    x = normal(7, 13, 5)
    yield "transpose-concat-pad", lambda a: (a.transpose(2, 0, 1) * 2, fnp.concatenate([a, a[::-1]], axis=1),
                                             fnp.pad(a, ((1, 2), (0, 0), (3, 1))), a[:, ::3, 1:4].reshape(7, -1)), (x,)
    yield "conv2d", lambda a, w: ft.nn.conv2d(a, w, stride=2, padding=1), (normal(2, 3, 11, 9), normal(4, 3, 3, 3))
    yield "conv2d-grad", ft.grad(lambda a, w: fnp.sum(ft.nn.conv2d(a, w, padding=1) ** 2), argnums=(0, 1)), (
        normal(1, 2, 7, 5), normal(3, 2, 3, 3))


def _norms():
    for dt in (np.float32, np.float64):
        x, w, bias = normal(19, 37, dtype=dt), normal(37, dtype=dt), normal(37, dtype=dt)
        yield f"rms-norm-{np.dtype(dt).name}", lambda x, w: ft.nn.rms_norm(x, w), (x, w)
        yield f"rms-norm-grad-{np.dtype(dt).name}", ft.grad(lambda x, w: fnp.sum(ft.nn.rms_norm(x, w) ** 3),
                                                            argnums=(0, 1)), (x, w)
        yield f"layer-norm-grad-{np.dtype(dt).name}", ft.grad(
            lambda x, w, b: fnp.sum(fnp.sin(ft.nn.layer_norm(x, w, b))), argnums=(0, 1, 2)), (x, w, bias)


def _softmax():
    for dt in (np.float32, np.float64):
        x = normal(23, 41, dtype=dt)
        labels = RNG.integers(0, 41, 23)
        yield f"softmax-{np.dtype(dt).name}", lambda a: (ft.nn.softmax(a), ft.nn.log_softmax(a),
                                                          ft.nn.logsumexp(a, axis=-1)), (x,)
        yield f"cross-entropy-grad-{np.dtype(dt).name}", ft.value_and_grad(
            lambda a, l: ft.nn.cross_entropy(a, l)), (x, labels)
    yield "softmax-float16", lambda a: ft.nn.softmax(a), (normal(9, 33, dtype=np.float16),)


def _attention():
    for dt in (np.float32, np.float64):
        q, k, v = (normal(2, 19, 3, 8, dtype=dt) for _ in range(3))
        for causal in (False, True):
            yield f"forward-causal{causal}-{np.dtype(dt).name}", lambda q, k, v, c=causal: ft.nn.attention(
                q, k, v, causal=c), (q, k, v)
            yield f"backward-causal{causal}-{np.dtype(dt).name}", ft.grad(
                lambda q, k, v, c=causal: fnp.sum(ft.nn.attention(q, k, v, causal=c) ** 2), argnums=(0, 1, 2)), (q, k, v)


def _indexing():
    x = normal(13, 7)
    idx = RNG.integers(0, 13, 9)
    yield "gather", lambda a, i: (a[i], fnp.take(a, i[:4], axis=0), a[:, ::-2]), (x, idx)
    yield "scatter", lambda a, i: (a.at[i].add(1.5), a.at[i].set(-2.0), a.at[i].max(0.3), a.at[i].min(0.1)), (x, idx)
    yield "scatter-grad", ft.grad(lambda a, i: fnp.sum(fnp.sin(a[i]) * a[i])), (x, idx)
    yield "embedding", lambda t, i: ft.nn.embedding(t, i), (x, idx)


def _scans():
    x = normal(5, 31, 3)
    for axis in (0, 1, 2):
        yield f"cumulative-axis{axis}", lambda a, ax=axis: (fnp.cumsum(a, axis=ax), fnp.cumprod(a, axis=ax),
                                                            fnp.argmax(a, axis=ax), fnp.argmin(a, axis=ax)), (x,)
    yield "cumsum-grad", ft.grad(lambda a: fnp.sum(fnp.cumsum(a, axis=1) ** 2)), (x,)


def _sorting():
    x = normal(7, 29)
    yield "sort", lambda a: (fnp.sort(a, axis=-1), fnp.sort(a, axis=0), fnp.argsort(a, axis=-1)), (x,)
    yield "top-k", lambda a: ft.lax.top_k(a, 5), (x,)


def _random():
    key = ft.random.PRNGKey(7)
    yield "bits", lambda k: (ft.random.uniform(k, (37, 3)), ft.random.normal(k, (129,)),
                             ft.random.randint(k, (11,), 0, 9)), (key,)
    yield "dropout", lambda k, a: ft.nn.dropout(k, 0.3, a), (key, normal(9, 17))


FAMILIES = {"elementwise": _elementwise, "reductions": _reductions, "layout": _layout, "matmul": _matmul, "norms": _norms,
            "softmax": _softmax, "attention": _attention, "indexing": _indexing, "scans": _scans,
            "sorting": _sorting, "random": _random}


def _tolerance(leaf: np.ndarray) -> float:
    return {np.dtype(np.float16): 2e-2, np.dtype(np.float32): 2e-4}.get(leaf.dtype, 1e-10)


def _compare(got, want) -> str | None:
    """None when every leaf matches (values within the dtype's tolerance, same dtypes and shapes)."""
    got_leaves, want_leaves = ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)
    if len(got_leaves) != len(want_leaves):
        return f"{len(got_leaves)} outputs, want {len(want_leaves)}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {g.dtype}{g.shape}, want {w.dtype}{w.shape}"
        if w.dtype.kind in "fc":
            tol = _tolerance(w)
            if not np.allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol, equal_nan=True):
                err = float(np.nanmax(np.abs(g.astype(np.float64) - w.astype(np.float64))))
                return f"output {i}: max abs error {err:.3g}"
        elif not np.array_equal(g, w):
            return f"output {i}: {int(np.sum(g != w))} entries differ"
    return None


def run(selections: list[str]) -> None:
    """Run the selected cases, printing one line each.  Every compiled program and result stays
    alive until the end: Oclgrind 21.10's uninitialized-value check flagged a later program's
    freshly written buffers after an earlier program's buffers were released (correct values, and
    nothing reported with each case in a process of its own; ``test_oclgrind`` runs that check so)."""
    ft.config.update("opencl_small_program_elements", 0)
    ft.config.update("opencl_host_step_elements", 0)
    kept = []
    for selection in selections:
        family, _, part = selection.partition(":")
        RNG.bit_generator.state = np.random.default_rng(37).bit_generator.state
        for case, f, args in FAMILIES[family]():
            if part and case != part:
                continue
            try:
                want = ft.jit(f, backend="numpy")(*args)
                compiled = ft.jit(f, backend="opencl")
                got = compiled(*args)
                kept.append((compiled, got))
                problem = _compare(got, want)
            except Exception as e:  # reported, not raised: the other cases still run
                first = traceback.format_exception_only(type(e), e)[-1].strip().replace("\n", " ")
                print(f"ERROR {family} {case} {first[:400]}", flush=True)
                continue
            print(f"OK {family} {case}" if problem is None else f"MISMATCH {family} {case} {problem}", flush=True)


if __name__ == "__main__":
    run(sys.argv[1:] or list(FAMILIES))
