"""``check_grads``: derivatives against central finite differences, to any order."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from . import tree_util
from .transforms.autodiff import jvp, vjp


def _inner(a, b) -> float:
    la, lb = tree_util.tree_leaves(a), tree_util.tree_leaves(b)
    return float(sum(np.vdot(np.asarray(x, np.float64), np.asarray(y, np.float64)) for x, y in zip(la, lb)))


def _random_like(tree, rng):
    return tree_util.tree_map(
        lambda x: rng.standard_normal(np.shape(x)).astype(np.asarray(x).dtype), tree)


def _axpy(a, x, y):
    return tree_util.tree_map(lambda u, v: np.asarray(v + a * np.asarray(u), dtype=np.asarray(v).dtype), x, y)


def _numerical_jvp(f, args, tangents, eps):
    plus = f(*_axpy(eps, tangents, args))
    minus = f(*_axpy(-eps, tangents, args))
    return tree_util.tree_map(lambda p, m: (np.asarray(p, np.float64) - np.asarray(m, np.float64)) / (2 * eps),
                              plus, minus)


def _assert_close(what, got, want, atol, rtol):
    for g, w in zip(tree_util.tree_leaves(got), tree_util.tree_leaves(want)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            raise AssertionError(f"{what}: shape {g.shape} != expected {w.shape}")
        if not np.allclose(g, w, atol=atol, rtol=rtol):
            err = np.max(np.abs(g - w))
            raise AssertionError(f"{what}: max abs error {err:.3g} (atol={atol}, rtol={rtol})\n"
                                 f"got:\n{g}\nexpected:\n{w}")


def numerical_grad(f: Callable, x, eps: float = 1e-6) -> np.ndarray:
    """Central-difference gradient of a scalar function of one float64 array (for tests)."""
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (float(f(x + e)) - float(f(x - e))) / (2 * eps)
    return g


def check_grads(f: Callable, args: Sequence, order: int = 2, modes: Sequence[str] = ("fwd", "rev"),
                atol: float | None = None, rtol: float | None = None, eps: float | None = None,
                seed: int = 0) -> None:
    """Check forward (jvp) and reverse (vjp) derivatives of ``f`` at ``args`` against central
    finite differences, and recursively the derivatives of those derivatives up to ``order``.
    Use float64 arguments; raises AssertionError with the error size on a mismatch."""
    rng = np.random.default_rng(seed)
    args = tuple(tree_util.tree_map(np.asarray, tuple(args)))
    low_precision = any(np.asarray(x).dtype != np.float64 for x in tree_util.tree_leaves(args))
    eps = eps or (1e-3 if low_precision else 1e-6)
    atol = atol or (5e-2 if low_precision else 1e-5)
    rtol = rtol or (5e-2 if low_precision else 1e-5)

    def check(fun, depth):
        tangents = _random_like(args, rng)
        want = _numerical_jvp(fun, args, tangents, eps)
        if "fwd" in modes:
            _, got = jvp(fun, args, tangents)
            _assert_close(f"jvp of order {depth}", got, want, atol, rtol)
        if "rev" in modes:
            out, pullback = vjp(fun, *args)
            ct = _random_like(out, rng)
            got = _inner(pullback(ct), tangents)
            expected = _inner(ct, want)
            _assert_close(f"vjp of order {depth} (<ct, J t>)", got, expected, atol, rtol)
        if depth < order:
            if "fwd" in modes:
                check(lambda *a: jvp(fun, a, tangents)[1], depth + 1)
            if "rev" in modes:
                ct = _random_like(fun(*args), rng)
                check(lambda *a: vjp(fun, *a)[1](ct), depth + 1)

    check(f, 1)
