"""Work-group loops (``backends/opencl/group_loops.py``, issue 34): a scan / fori_loop / while_loop
whose body holds products, reductions and index operations over small values runs as ONE kernel of
ONE work-group (one work-item on the cpu kind and on PoCL's CPU device whatever the kind; several,
with barriers, on the gpu kind elsewhere: Oclgrind's device here).  Every op with a group form
inside a body, the carry forms (several shapes, scalars beside arrays, swapped, passed through,
constant and literal new values, ints and bools), xs / ys forms, reverse, lengths 0 and 1, a scan
split into several launches, while loops with reduced predicates, the issue's RNN and its
derivatives, vmap, the fallbacks (a value over ``GROUP_ELEMENTS``; values past local memory in
global scratch); and on Oclgrind's gpu-kind device with 8 work-items the work-group form itself
(barriers, a while testing its predicate before the loop and at each iteration's end; no races,
no uninitialized reads).  Each checked against the numpy backend on both device kinds (``kind``,
imported from ``test_opencl_loops_whole``, is autouse here too), the loop asserted to be a
work-group loop."""
import numpy as np
import pytest
from oclgrind_util import requires_oclgrind, run_python
from test_opencl_loops_whole import _check, _compile, _loop_lines, _whole, kind  # noqa: F401 (kind: autouse)

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import group_loops, loops
from functrace.core import ClosedJaxpr
from functrace.test_util import check_grads

lax = ft.lax

F32 = {"rtol": 2e-5, "atol": 2e-6}
F64 = {"rtol": 1e-12, "atol": 1e-13}


def _tol(dtype) -> dict:
    return F32 if np.dtype(dtype) == np.float32 else F64


def _groups(compiled) -> int:
    """How many of the program's loops run as one work-group's: loops compiled whole alone, or in a
    program compiled whole (its line counts its loops)."""
    count = 0
    for line in _loop_lines(compiled):
        if "one work-group" in line and "not compiled whole" not in line:
            count += int(line.rsplit(", ", 1)[1].split()[0]) if line.split()[1] == "program:" else 1
    return count


def _primitives(f, *args) -> set:
    """The names of the primitives in ``f``'s program and its sub-programs (loop bodies)."""
    names, stack = set(), [ft.make_jaxpr(f)(*args).jaxpr]
    while stack:
        for e in stack.pop().eqns:
            names.add(e.primitive.name)
            for v in e.params.values():
                stack.extend(s.jaxpr for s in (v if isinstance(v, tuple) else (v,)) if isinstance(s, ClosedJaxpr))
    return names


def _check_group(f, args, *, groups: int = 1, has=(), **tolerances):
    """``_check`` (numpy's values, the same bits twice) with every one of the ``groups`` loops a
    work-group loop, and the primitives ``has`` in the program (the op under test is really there)."""
    missing = set(has) - _primitives(f, *args)
    assert not missing, f"the program has no {missing}: the case does not test what it says"
    compiled = _check(f, args, whole=groups, **tolerances)
    assert _groups(compiled) == groups, compiled.report()
    return compiled


# --------------------------------------------------------------------------- every op with a group form

def _rng(seed=0):
    return np.random.default_rng(seed)


def _matvec(dtype):
    rng = _rng(1)
    w, h0, xs = rng.standard_normal((7, 7)) * 0.4, rng.standard_normal(7), rng.standard_normal((5, 7))

    def f(w, h0, xs):
        return lax.scan(lambda h, x: (fnp.tanh(w @ h + x), h @ w), h0, xs)  # matvec, and vecmat as y
    return f, tuple(a.astype(dtype) for a in (w, h0, xs))


def _outer(dtype):
    rng = _rng(2)
    m0, xs = rng.standard_normal((5, 7)), rng.standard_normal((4, 5))

    def f(m0, xs):
        def step(m, x):
            o = fnp.einsum("i,j->ij", x, m[0])   # (5, 7): a dot_general without contraction
            k = x[:, None] @ m[1][None, :]       # and one contracting an axis of 1
            return fnp.tanh(m * 0.5 + o * 0.25 - k * 0.125), fnp.sum(fnp.outer(x, m[2]))
        return lax.scan(step, m0, xs)
    return f, tuple(a.astype(dtype) for a in (m0, xs))


def _matmat(dtype):
    rng = _rng(3)
    m0, w, xs = rng.standard_normal((5, 7)), rng.standard_normal((7, 7)) * 0.4, rng.standard_normal((3, 5, 7))

    def f(m0, w, xs):
        return lax.scan(lambda m, x: (fnp.tanh(m @ w + x), m.T @ m), m0, xs)  # (5,7)@(7,7), (7,5)@(5,7)
    return f, tuple(a.astype(dtype) for a in (m0, w, xs))


def _batched_dot(dtype):
    rng = _rng(4)
    a, h0 = rng.standard_normal((3, 5, 5)) * 0.4, rng.standard_normal((3, 5))

    def f(a, h0):
        def step(h, _):
            h = fnp.tanh(fnp.einsum("bij,bj->bi", a, h) + 0.1)  # a batch dimension
            return h, fnp.einsum("bi,bi->b", h, h)
        return lax.scan(step, h0, None, length=4)
    return f, (a.astype(dtype), h0.astype(dtype))


def _reductions(dtype):
    rng = _rng(5)
    m0, xs = rng.uniform(0.5, 1.5, (5, 7)), rng.uniform(0.5, 1.5, (4, 5, 7))

    def f(m0, xs):
        def step(m, x):
            s0, s1 = fnp.sum(m, axis=0), fnp.sum(m, axis=1, keepdims=True)
            new = m * x * 0.5 + s0 * 0.01 - s1 * 0.01 + fnp.max(m, axis=0) * 0.1 - fnp.min(m) * 0.1
            ys = (fnp.sum(m), fnp.prod(m, axis=1), fnp.prod(x), fnp.max(m), fnp.min(m, axis=0), fnp.max(m, axis=1))
            return new, ys
        return lax.scan(step, m0, xs)
    return f, (m0.astype(dtype), xs.astype(dtype))


def _int_reductions(dtype):
    rng = _rng(6)
    m0 = rng.integers(-20, 20, (5, 7)).astype(np.int32)
    v0 = rng.integers(0, 9, (13,)).astype(np.int64)

    def f(m0, v0):
        def step(c, _):
            m, v = c
            m = ((m * 3 + fnp.sum(m, axis=1, keepdims=True) - fnp.max(m, axis=0)) % 101 - 50).astype(np.int32)
            v = (v + fnp.min(v) + fnp.sum(v) + fnp.prod(v[:3] % 3 + 1)) % 1000
            return (m, v), (fnp.sum(m), fnp.max(v), fnp.min(m, axis=1))
        return lax.scan(step, (m0, v0), None, length=5)
    return f, (m0, v0)


def _bool_reductions(dtype):
    rng = _rng(7)
    b0, xs = rng.random((5, 7)) < 0.5, rng.random((6, 5, 7)) < 0.3

    def f(b0, xs):
        def step(b, x):
            b = fnp.logical_xor(b, x) | (fnp.any(b, axis=0) & ~fnp.all(x, axis=1, keepdims=True))
            return b, (fnp.any(b), fnp.all(b), fnp.any(b & x, axis=1), fnp.all(b | x, axis=0))
        return lax.scan(step, b0, xs)
    return f, (b0, xs)


def _arg_extrema(dtype):
    rng = _rng(8)
    m0, xs = rng.standard_normal((5, 7)), rng.standard_normal((4, 5, 7))

    def f(m0, xs):
        def step(m, x):
            m = m * 0.5 + x
            return m, (fnp.argmax(m, axis=1), fnp.argmin(m, axis=0), fnp.argmax(m), fnp.argmin(x))
        return lax.scan(step, m0, xs)
    return f, (m0.astype(dtype), xs.astype(dtype))


def _broadcast_transpose(dtype):
    rng = _rng(9)
    m0, h0, xs = rng.standard_normal((5, 7)), rng.standard_normal(5), rng.standard_normal((4, 7))

    def f(m0, h0, xs):
        def step(c, x):
            m, h = c
            m = fnp.tanh(m * 0.5 + h[:, None] * x[None, :] + x)   # broadcasts of h and x
            t = m.T                                               # (7, 5)
            h = fnp.tanh(h + t[2] - t[-1] * 0.5)
            return (m, h), (t, fnp.transpose(fnp.broadcast_to(h, (3, 5)), (1, 0)))
        return lax.scan(step, (m0, h0), xs)
    return f, tuple(a.astype(dtype) for a in (m0, h0, xs))


def _flip_slice_pad_concat(dtype):
    rng = _rng(10)
    h0, m0 = rng.standard_normal(13), rng.standard_normal((5, 7))

    def f(h0, m0):
        def step(c, _):
            h, m = c
            inner = h[1:-1]                                            # slices, strided too
            h = fnp.concatenate([fnp.flip(h)[:2], inner[:2], inner[::2] * 0.5, h[::6]])  # rev, concatenate
            p = fnp.pad(m[1:-1, 1:-1], ((1, 1), (2, 0)), constant_values=0.5)  # (5, 7)
            m = fnp.concatenate([fnp.flip(m, axis=1)[:, :3], p[:, :4]], axis=1) + fnp.flip(m)
            return (h, m * 0.5), (fnp.pad(h[:3], 2), p)
        return lax.scan(step, (h0, m0), None, length=5)
    return f, (h0.astype(dtype), m0.astype(dtype))


def _tril_roll(dtype):
    """(``iota`` has a group form, but no body holds one: an iota has no operands, so tracing
    folds it into a constant -- ``tril``'s and ``roll``'s here are read as consts.)"""
    rng = _rng(11)
    m0, k = rng.standard_normal((5, 7)), np.int32(2)

    def f(m0, k):
        def step(c, _):
            m, s = c
            m = fnp.tril(m * 0.5 + 1.0) + fnp.triu(m, 1) * 0.25          # selects by constant iotas
            r = fnp.roll(m[0], s)                                       # a take at (iota - shift) % 7
            return (m, s + 1), r
        return lax.scan(step, (m0, k), None, length=4)
    return f, (m0.astype(dtype), k)


def _gathers(dtype):
    rng = _rng(12)
    h0, m0 = rng.standard_normal(13), rng.standard_normal((5, 7))
    idx = np.array([12, 0, 3, 3, 7, 1, 12], np.int64)
    rows = np.array([4, 0, 2], np.int32)

    def f(h0, m0):
        def step(c, _):
            h, m, i = c
            g = h[idx]                              # take with an index array, repeats
            h = h * 0.5 + fnp.sum(g) * 0.01 + h[i] + m[i % 5, (i * 3) % 7]   # traced scalar indices
            m = m[rows][:, ::-1].sum(axis=0) * 0.1 + m * 0.9
            return (h, m, (i + 4) % 13), (g, m[:, i % 7], m[i % 5])
        return lax.scan(step, (h0, m0, np.int64(1)), None, length=6)
    return f, (h0.astype(dtype), m0.astype(dtype))


def _scatters(dtype):
    rng = _rng(13)
    h0, xs = rng.uniform(0.5, 1.5, 13), rng.uniform(0.5, 1.5, (5, 4))
    idx = np.array([3, 11, 3, 0], np.int64)   # a repeated index: the last set wins, adds and products repeat

    def f(h0, xs):
        def step(h, x):
            s = h.at[idx].set(x)
            p = h.at[idx].mul(x)
            lo = h.at[idx].min(x)
            hi = h.at[idx].max(x)
            a = h.at[idx].add(x)
            return (s + p + lo + hi + a) * 0.2, (s, p, lo, hi, a)
        return lax.scan(step, h0, xs)
    return f, (h0.astype(dtype), xs.astype(dtype))


def _scatter_add_2d(dtype):
    rng = _rng(14)
    m0, xs = rng.standard_normal((5, 7)), rng.standard_normal((4, 3, 7))
    rows = np.array([4, 1, 4], np.int64)

    def f(m0, xs):
        def step(m, x):
            m = m.at[rows].add(x) * 0.5 + m[rows].sum(axis=0) * 0.1   # scatter_add along axis 0 of a matrix
            return m, m.at[:, 2].add(x[0, :5])
        return lax.scan(step, m0, xs)
    return f, (m0.astype(dtype), xs.astype(dtype))


def _running(dtype):
    rng = _rng(15)
    m0, xs = rng.uniform(0.8, 1.2, (5, 7)), rng.uniform(0.8, 1.2, (4, 7))

    def f(m0, xs):
        def step(m, x):
            c = fnp.cumsum(m, axis=1) * 0.1 + fnp.cumprod(m, axis=0) * 0.1
            r = lax.cumsum(x, reverse=True) + lax.cumprod(m, axis=1, reverse=True)
            return fnp.tanh(c + r) + 0.5, (fnp.cumsum(x), lax.cumsum(m, axis=0, reverse=True))
        return lax.scan(step, m0, xs)
    return f, (m0.astype(dtype), xs.astype(dtype))


def _dynamic_slices(dtype):
    rng = _rng(16)
    table, h0 = rng.standard_normal((9, 7)), rng.standard_normal(13)

    def f(table, h0):
        def body(i, h):
            window = lax.dynamic_slice(table, (i, 1), (3, 5))          # rows i..i+2 at the step counter
            h = lax.dynamic_update_slice(h, fnp.sum(window, axis=0) * 0.5, (2 * i,))
            return fnp.tanh(h + lax.dynamic_slice(h, (i,), (13,))[0])
        return lax.fori_loop(0, 6, body, h0)
    return f, (table.astype(dtype), h0.astype(dtype))


# (case, its arguments' maker, dtypes, the primitives it must have, exact)
OPS = [
    ("matvec", _matvec, (np.float32, np.float64), {"dot_general"}, False),
    ("outer", _outer, (np.float32, np.float64), {"dot_general"}, False),
    ("matmat", _matmat, (np.float32, np.float64), {"dot_general", "transpose"}, False),
    ("batched dot", _batched_dot, (np.float32, np.float64), {"dot_general"}, False),
    ("reductions", _reductions, (np.float32, np.float64), {"reduce_sum", "reduce_prod", "reduce_max", "reduce_min"},
     False),
    ("int reductions", _int_reductions, (np.int32,), {"reduce_sum", "reduce_prod", "reduce_max", "reduce_min"}, True),
    ("bool reductions", _bool_reductions, (np.bool_,), {"reduce_max", "reduce_min"}, True),
    ("argmax argmin", _arg_extrema, (np.float32, np.float64), {"argmax", "argmin"}, True),
    ("broadcast transpose", _broadcast_transpose, (np.float64,), {"broadcast_in_dim", "transpose"}, False),
    ("rev slice pad concatenate", _flip_slice_pad_concat, (np.float32, np.float64),
     {"rev", "slice", "pad", "concatenate"}, True),
    ("tril roll", _tril_roll, (np.float64,), {"select", "take", "rem"}, True),
    ("take", _gathers, (np.float64,), {"take"}, False),
    ("scatter", _scatters, (np.float32, np.float64), {"scatter", "scatter_add"}, False),
    ("scatter_add 2d", _scatter_add_2d, (np.float64,), {"scatter_add"}, False),
    ("cumsum cumprod", _running, (np.float32, np.float64), {"cumsum", "cumprod"}, False),
    ("dynamic slices", _dynamic_slices, (np.float64,), {"take", "scatter"}, False),
]


@pytest.mark.parametrize("case, dtype", [(c, d) for c, _, ds, _, _ in OPS for d in ds],
                         ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
def test_every_op_with_a_group_form_in_a_scan_body(case, dtype):
    """Each case's op(s) in a scan body (asserted present in the program), the loop one work-group's,
    numpy's values: bit for bit for the index operations, integers and bools, within rounding else."""
    _, make, _, has, exact = next(o for o in OPS if o[0] == case)
    f, args = make(dtype)
    tolerances = {"exact": True} if exact or np.dtype(dtype).kind not in "f" else _tol(dtype)
    _check_group(f, args, has=has, **tolerances)


# --------------------------------------------------------------------------- carries, xs, ys, lengths

@pytest.mark.parametrize("reverse, length", [(False, 6), (True, 5), (False, 0), (True, 1), (False, 1)])
def test_carries_xs_and_ys_of_every_form(reverse, length):
    """Array carries of three shapes, a scalar carry beside them, two swapped, one passed through
    unchanged, an array given a constant new value (zeros_like: a const of the body) and a scalar a
    literal one (from a literal initial value), int and bool carries; xs of shapes (T,) and (T, n, m);
    scalar and array ys (some of them carries)."""
    rng = _rng(20 + length)
    h0, m0, w = rng.standard_normal(7), rng.standard_normal((5, 7)), rng.standard_normal((7, 7)) * 0.3
    p0, q0 = rng.standard_normal(13), rng.standard_normal(13)
    us, xs = rng.standard_normal(length), rng.standard_normal((length, 5, 7))
    n0 = rng.integers(-5, 5, (5,)).astype(np.int32)
    b0 = rng.random(7) < 0.5

    def f(h0, m0, w, p0, q0, us, xs, n0, b0):
        def step(c, x):
            h, m, s, p, q, kept, z, n, b, i, r = c
            u, xm = x
            h = fnp.tanh(w @ h * s + fnp.sum(m, axis=0) * 0.1 + u)
            m = m * 0.5 + xm + z[:, None] * 0.01
            s = s * 0.9 + fnp.max(h) * 0.1 + u
            n = ((n * 3 + fnp.sum(n) + i) % 17).astype(np.int32)
            b = fnp.logical_xor(b, h > fnp.mean(h))
            ys = (s, h, fnp.sum(xm, axis=1), p, n[0] + i, b, r * u)
            return (h, m, s, q, p, kept, fnp.zeros_like(z), n, b, i + 1, 0.25), ys
        init = (h0, m0, np.float64(0.5), p0, q0, p0 * 2.0, fnp.ones(5), n0, b0, np.int32(0), 2.0)
        return lax.scan(step, init, (us, xs), length=length, reverse=reverse)
    _check_group(f, (h0, m0, w, p0, q0, us, xs, n0, b0), **F64)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_long_scan_is_several_launches(monkeypatch, reverse):
    """Past ``loops.CHUNK_WORK`` elements' work a work-group loop is launched in chunks of steps:
    its array, scalar and int carries pass from launch to launch, ys rows land at their steps."""
    monkeypatch.setattr(loops, "CHUNK_WORK", 7 * 7 * 4 * 3)  # a (7, 7) value, a handful of equations: few steps
    rng = _rng(21)
    w, h0, xs = rng.standard_normal((7, 7)) * 0.4, rng.standard_normal(7), rng.standard_normal((23, 7))

    def f(w, h0, xs):
        def step(c, x):
            h, s, k = c
            h = fnp.tanh(w @ h + x * s)
            return (h, s * 0.99 + fnp.sum(h) * 0.01, k + fnp.argmax(h)), (fnp.sum(h * x), h)
        return lax.scan(step, (h0, 1.0, np.int64(0)), xs, reverse=reverse)
    compiled = _check_group(f, (w, h0, xs), **F64)
    assert compiled.num_kernel_launches > 2 and " launches (" in compiled.report(), compiled.report()


# --------------------------------------------------------------------------- while loops

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_while_until_a_reduced_value_is_small(dtype):
    """``while max(|x*x - a|) > tol``: a predicate over every element (with several work-items the
    same value on each, tested before the loop and at each iteration's end: the Oclgrind test's)."""
    a = np.linspace(1.0, 9.0, 13).astype(dtype)
    tol = dtype(1e-5 if dtype == np.float32 else 1e-12)

    def f(a):
        def cond(c):
            return (fnp.max(fnp.abs(c[0] * c[0] - a)) > tol * 9) & (c[1] < 40)

        def body(c):
            x, i = c
            return x - (x * x - a) / (2.0 * x), i + 1
        return lax.while_loop(cond, body, (a + 1.0, 0))
    compiled = _check_group(f, (a,), has={"while", "reduce_max"}, exact=True)
    x, i = compiled(a)
    assert 3 < int(i) < 40 and np.allclose(np.asarray(x) ** 2, a, rtol=1e-5)


def test_while_with_a_predicate_from_a_dot_product():
    """Power iteration until the Rayleigh quotient settles: the predicate reads a dot product and
    the body a matvec and a norm."""
    rng = _rng(22)
    b = rng.standard_normal((7, 7))
    a = b @ b.T + np.diag(np.arange(7.0))
    v0 = rng.standard_normal(7)

    def f(a, v0):
        def cond(c):
            v, lam, old, i = c
            return (fnp.abs(v @ (a @ v) - old) > 1e-10) & (i < 200)

        def body(c):
            v, lam, old, i = c
            w = a @ v
            return w / fnp.sqrt(w @ w), v @ w, v @ (a @ v), i + 1
        v0 = v0 / np.linalg.norm(v0)
        return lax.while_loop(cond, body, (v0, 0.0, -1.0, 0))
    compiled = _check_group(f, (a, v0), has={"while", "dot_general"}, **F64)
    v, lam, _, i = compiled(a, v0)
    assert int(i) > 2
    np.testing.assert_allclose(float(lam), np.linalg.eigvalsh(a)[-1], rtol=1e-6)


def test_while_of_zero_iterations():
    """The predicate false at once: the carries come back as given (the gpu kind's predicate before
    the loop decides it)."""
    h0, w = np.linspace(-1, 1, 7), np.eye(7) * 0.5

    def f(h0, w, k):
        return lax.while_loop(lambda c: (fnp.sum(c[0] * c[0]) > 100.0) | (c[1] < k),
                              lambda c: (fnp.tanh(w @ c[0]) + 1.0, c[1] + 1), (h0, np.int32(0)))
    compiled = _check_group(f, (h0, w, np.int32(0)), has={"while"}, exact=True)
    h, i = compiled(h0, w, np.int32(0))
    np.testing.assert_array_equal(np.asarray(h), h0)
    assert int(i) == 0
    h, i = compiled(h0, w, np.int32(3))   # (and three iterations when asked for them)
    assert int(i) == 3 and not np.array_equal(np.asarray(h), h0)


# --------------------------------------------------------------------------- the issue's RNN and derivatives

def _rnn_loss(params, xs, target):
    w, u, h0 = params

    def step(h, x):
        h = fnp.tanh(w @ h + u * x)
        return h, h
    _, hs = lax.scan(step, h0, xs)
    return fnp.mean((hs - target) ** 2)


def test_value_and_grad_of_the_issues_rnn():
    """H=16, T=50, float32: the forward scan and the gradient's reverse scan both work-group loops,
    numpy's values within float32 rounding."""
    rng = _rng(23)
    H, T = 16, 50
    params = ((rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32),
              rng.standard_normal(H).astype(np.float32), np.zeros(H, np.float32))
    xs, target = rng.standard_normal((T, H)).astype(np.float32), rng.standard_normal((T, H)).astype(np.float32)
    _check_group(ft.value_and_grad(_rnn_loss), (params, xs, target), groups=2, rtol=1e-4, atol=1e-6)


def _small_rnn(w, h0):
    def step(h, x):
        h = fnp.tanh(w @ h + x * fnp.sum(h) * 0.1)
        return h, fnp.sum(h * h)
    _, ys = lax.scan(step, h0, np.linspace(-1.0, 1.0, 4))
    return fnp.sum(ys)


def test_derivatives_of_order_two_of_a_work_group_loop():
    """check_grads (float64, forward and reverse, order 2; eagerly, as in test_opencl_loops_whole),
    then the jitted grad / jacfwd / hessian compiled with every loop whole, numpy's values."""
    rng = _rng(24)
    args = (rng.standard_normal((3, 3)) * 0.5, rng.standard_normal(3))
    check_grads(_small_rnn, args, order=2, modes=("fwd", "rev"))
    derivatives = {"grad": ft.grad(_small_rnn, argnums=(0, 1)), "jacfwd": ft.jacfwd(_small_rnn),
                   "hessian": ft.hessian(_small_rnn, argnums=1)}
    for name, d in derivatives.items():
        compiled = _compile(d, *args)
        lines = _loop_lines(compiled)
        assert lines and all("compiled whole:" in line and "not compiled whole" not in line for line in lines), \
            (name, compiled.report())
        assert _groups(compiled) == _whole(compiled) >= 1, (name, compiled.report())
        got = ft.tree_util.tree_leaves(compiled(*args))
        want = ft.tree_util.tree_leaves(ft.jit(d, backend="numpy")(*args))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-11, atol=1e-12, err_msg=name)


def test_vmap_of_a_scan_with_a_reduction():
    """vmap over 3 members of a scan with a sum in its body: one work-group loop over the batch."""
    rng = _rng(25)
    h0, xs = rng.standard_normal((3, 7)), rng.standard_normal((3, 5, 7))

    def f(h0, xs):
        return lax.scan(lambda h, x: (h * 0.5 + fnp.sum(h * x) * 0.1 + x, fnp.max(h)), h0, xs)
    _check_group(ft.vmap(f), (h0, xs), has={"reduce_sum", "reduce_max"}, **F64)


# --------------------------------------------------------------------------- products and carries on one work-item

# (w's shape, h's shape, the product, the form one work-item writes it in: group_writer's
# emit_dot_by_terms, emit_dot_blocked, or a private accumulator per output)
PRODUCTS = [
    ("matvec 16", (16, 16), (16,), lambda w, h: w @ h, "blocked"),
    ("vecmat 16", (16, 16), (16,), lambda w, h: h @ w, "terms"),
    ("matvec 12x5", (12, 5), (5,), lambda w, h: w @ h, "blocked"),  # 12: blocks of 4
    ("matvec 7x5 (odd)", (7, 5), (5,), lambda w, h: w @ h, "plain"),
    ("matmul 6x5 by 5x3", (6, 5), (5, 3), lambda w, h: w @ h, "terms"),  # 3 along h's last axis
    ("6x5 by 3x5 over their last axes", (6, 5), (3, 5),  # 3 along h's first axis; along the 6: blocks of 2
     lambda w, h: lax.dot_general(w, h, (((1,), (1,)), ((), ()))), "blocked"),
    ("matmul 5x4 by 4x9", (5, 4), (4, 9), lambda w, h: w @ h, "terms"),  # 9 along h's last axis
    ("batched 3x4x5 by 3x5x2", (3, 4, 5), (3, 5, 2), lambda w, h: w @ h, "terms"),
    ("outer 7 by 9 (one term)", (7,), (9,), lambda w, h: w[:, None] * h[None, :] + fnp.outer(w, h), "plain"),
]
_FORMS = {"blocked": "_0 = 0;", "terms": "[e] = 0;"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", [c[0] for c in PRODUCTS])
def test_products_in_a_body_in_each_form_one_work_item_writes(case, dtype, kind):  # noqa: F811
    """Each product form a work-item writes (terms outside outputs where the outputs' axis is
    contiguous; a block of outputs each in its own accumulator; one accumulator per output) sums
    its terms in the same order: numpy's values (integers exactly), the same bits on every call,
    alone and under vmap (the form along the members' rows); the cpu kind writes the form named."""
    _, ws, hs, product, form = next(c for c in PRODUCTS if c[0] == case)
    rng = _rng(41)
    as_dtype = (lambda a: (a * 4).astype(dtype)) if np.dtype(dtype).kind == "i" else (lambda a: a.astype(dtype))
    w, h0, xs = (as_dtype(rng.standard_normal(s) * 0.5) for s in (ws, hs, (4,) + hs))

    def f(w, h0, xs):
        def step(h, x):
            y = product(w, h)
            return h + x * 2 - x, fnp.sum(y) + y.ravel()[0]
        return lax.scan(step, h0, xs)
    tolerances = {"exact": True} if np.dtype(dtype).kind == "i" else _tol(dtype)
    compiled = _check_group(f, (w, h0, xs), has={"dot_general"} if ws[-1] != 1 and len(ws) > 1 else (), **tolerances)
    if kind == "cpu":
        source = compiled.as_text()
        for name, mark in _FORMS.items():
            assert (mark in source) == (name == form), (name, source[source.find("__kernel"):])
    _check_group(ft.vmap(f, in_axes=(None, 0, 0)), (w, np.stack([h0, h0 * 3]), np.stack([xs, xs[::-1]])),
                 **tolerances)


def test_a_blocked_product_with_an_empty_axis():
    """A product written in blocks of outputs along one axis while another is empty (16 x 0): its
    kernel builds (the empty axis's loop names its counter) and gives numpy's values."""
    w, h0, xs = np.ones((16, 16)), np.ones((0, 16)), np.ones((3, 0, 16))

    def f(w, h0, xs):
        return lax.scan(lambda h, x: (h + x, fnp.sum(lax.dot_general(w, h, (((1,), (1,)), ((), ()))))), h0, xs)
    _check_group(f, (w, h0, xs), has={"dot_general"}, exact=True)


def test_carries_updated_in_place_and_carries_that_must_not_be():
    """On one work-item a carry's new value from an elementwise run is written in the carry's own
    storage when nothing reads the old value after it; a carry read after its new value is made
    (here as a ys value, by a later product, or as another carry's new value) keeps its copy."""
    rng = _rng(43)
    a0, b0, c0, w, xs = (rng.standard_normal(s) for s in ((6,), (6,), (6,), (6, 6), (5, 6)))

    def f(a0, b0, c0, w, xs):
        def step(carry, x):
            a, b, c = carry
            a_new = a * 0.5 + x          # in place: nothing reads a after this
            c_new = c + 1.0              # not in place: the product below reads the old c
            d = w @ c
            return (a_new, a + b * 0.25, c_new + d), (b, fnp.sum(d))   # b's old value is a ys
        return lax.scan(step, (a0, b0, c0), xs)
    _check_group(f, (a0, b0, c0, w, xs), **F64)

    def swap(a0, b0, xs):  # a new value that is another carry's old one: copied out first
        return lax.scan(lambda c, x: ((c[1], c[0] + c[1] * 0.5 + x + fnp.max(c[0])), c[0]), (a0, b0), xs)
    _check_group(swap, (a0, b0, xs), **F64)
    _check_group(ft.vmap(swap), (np.stack([a0, b0]), np.stack([b0, a0]), np.stack([xs, xs * 2])), **F64)


# --------------------------------------------------------------------------- fallbacks and storage

def _matvec_scan(w, h0, xs):
    return lax.scan(lambda h, x: (fnp.tanh(w @ h + x), fnp.sum(h)), h0, xs)


def test_a_value_over_group_elements_keeps_todays_design_and_says_why(monkeypatch):
    """(A const such as w is read in place from global memory: only the loop's own values count.)"""
    monkeypatch.setattr(group_loops, "GROUP_ELEMENTS", 6)  # h's 7 elements are over it
    rng = _rng(26)
    args = (rng.standard_normal((7, 7)) * 0.4, rng.standard_normal(7), rng.standard_normal((5, 7)))
    compiled = _check(_matvec_scan, args, whole=0, **F64)
    lines = _loop_lines(compiled)
    assert lines and all("not compiled whole: a value of 7 elements is over a work-group loop's 6" in line
                         for line in lines), compiled.report()
    monkeypatch.setattr(group_loops, "GROUP_ELEMENTS", 7)  # (and at the limit, a work-group loop again)
    _check_group(_matvec_scan, args, **F64)


def test_values_past_local_memory_live_in_global_scratch(monkeypatch):
    monkeypatch.setattr(group_loops, "LOCAL_RESERVE", 1 << 40)  # no local memory left: every value in scratch
    rng = _rng(27)
    args = (rng.standard_normal((7, 7)) * 0.4, rng.standard_normal(7), rng.standard_normal((5, 7)))
    compiled = _check_group(_matvec_scan, args, **F64)
    assert "global scratch" in compiled.report() and "local memory" not in "".join(_loop_lines(compiled)), \
        compiled.report()
    monkeypatch.undo()
    assert "values in local memory" in "".join(_loop_lines(_compile(_matvec_scan, *args)))


# --------------------------------------------------------------------------- Oclgrind

_OCLGRIND_PROGRAM = """
import sys
import numpy as np, functrace as ft, functrace.numpy as fnp
ft.config.update("opencl_host_step_elements", 0)
lax = ft.lax
def matvec(w, h0, xs):
    return lax.scan(lambda h, x: (fnp.tanh(w @ h + x), fnp.sum(h * x)), h0, xs)
def newton(a):
    return lax.while_loop(lambda c: (fnp.max(fnp.abs(c[0] * c[0] - a)) > 1e-4) & (c[1] < 30),
                          lambda c: (c[0] - (c[0] * c[0] - a) / (2.0 * c[0]), c[1] + 1), (a + 1.0, 0))
idx = np.array([3, 11, 3, 0, 17], np.int64)
def indexed(h0, xs):
    def step(c, x):
        h, i = c
        g = h[idx] * 0.5 + h[i]
        h = h.at[idx].set(g).at[idx].add(x) * 0.5 + fnp.sum(g) * 0.01
        return (h, (i + 7) % 19), fnp.cumsum(h)[::3]
    return lax.scan(step, (h0, np.int64(2)), xs)
def loss(w, h0, xs):  # a program compiled whole: the loss's glue, a scan with a scalar carry only, its gradient
    def step(s, x):
        v = fnp.tanh(w @ (x * s) + h0)
        return s * 0.5 + fnp.sum(v) * 0.01, fnp.max(v)
    s, ys = lax.scan(step, np.float32(1.0), xs)
    return fnp.mean(ys) + s
def extrema(m0, n0, xs):  # per-row argmax, a scalar argmin and integer reductions (PoCL miscompiled these at 64 items)
    def step(c, x):
        m, n = c
        m = m * 0.5 + x
        n = ((n * 3 + fnp.sum(n, axis=1, keepdims=True) - fnp.max(n, axis=0)) % 101 - 50).astype(np.int32)
        return (m, n), (fnp.argmax(m, axis=1), fnp.argmin(x), fnp.min(n, axis=1))
    return lax.scan(step, (m0, n0), xs)
def products(w, h0, xs):  # one work-item's forms: a block of outputs (w @ h), by terms (h @ w), a carry in place
    def step(c, x):
        h, g = c
        h = fnp.tanh(w @ h + x)
        g = g * 0.5 + h @ w
        return (h, g), fnp.sum(g)
    return lax.scan(step, (h0, h0 * 2), xs)
rng = np.random.default_rng(0)
f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
cases = ((matvec, (f32(19, 19) * 0.3, f32(19), f32(4, 19))), (newton, (rng.uniform(1, 4, 19).astype(np.float32),)),
         (indexed, (f32(19), f32(4, 5))), (ft.value_and_grad(loss), (f32(13, 13) * 0.3, f32(13), f32(4, 13))),
         (extrema, (f32(5, 7), rng.integers(-20, 20, (5, 7)).astype(np.int32), f32(4, 5, 7))),
         (products, (f32(16, 16) * 0.3, f32(16), f32(4, 16))))
for g, args in [cases[int(sys.argv[1])]]:
    c = ft.jit(g).lower(*args).compile()
    assert f"one work-group of {sys.argv[2]}" in c.report() and "not compiled whole" not in c.report(), c.report()
    got = ft.tree_util.tree_leaves(c(*args))
    want = ft.tree_util.tree_leaves(ft.jit(g, backend="numpy")(*args))
    for x, y in zip(got, want):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
print("OK")
"""


_OCLGRIND_CASES = ["matvec scan", "while of a reduced predicate", "take and scatter", "grad of a scalar-carry scan",
                   "arg extrema and int reductions", "products in blocks and by terms, a carry in place"]


@requires_oclgrind
@pytest.mark.parametrize("kind", ["gpu", "cpu"], indirect=True)
@pytest.mark.parametrize("case", _OCLGRIND_CASES)
@pytest.mark.parametrize("uninitialized", [False, True], ids=["races", "uninitialized"])
def test_work_group_loops_run_clean_on_oclgrind(kind, case, uninitialized):  # noqa: F811
    """Work-group loops (and a program compiled whole around one) on Oclgrind's device: the gpu kind
    with work-groups of at most 8 work-items (several elements per work-item, barriers between
    them), the cpu kind with one work-item (products in blocks or by terms, carries in place, loops
    marked safe to vectorize) and 2 KB of local memory (the rest in global scratch): no race, no
    access out of bounds, no API error, no read of an uninitialized value, numpy's values.  One case
    per process (as test_opencl_loops_whole's)."""
    index = str(_OCLGRIND_CASES.index(case))
    items, local = ("8 work-items", None) if kind == "gpu" else ("1 work-item", 2048)
    run = run_python(_OCLGRIND_PROGRAM, index, items, kind=kind, max_work_group_size=8, local_mem_size=local,
                     uninitialized=uninitialized, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout[-3000:] + run.stderr[-3000:]
    assert not run.reports, "\n\n".join(run.reports[:3])


_OCLGRIND_ROWS = """
import sys
import numpy as np, functrace as ft, functrace.numpy as fnp
from functrace.backends.opencl import group_loops
group_loops.ROWS_WORK = 1
group_loops.compute_units = lambda rt: 3  # (the cpu kind: a work-group per compute unit; Oclgrind's device has one)
lax = ft.lax
rng = np.random.default_rng(1)
w = rng.standard_normal((19, 19)).astype(np.float32) * 0.3
def rnn(h0, xs):
    return lax.scan(lambda h, x: (fnp.tanh(w @ h + x), fnp.max(h)), h0, xs)
def newton(a):
    return lax.while_loop(lambda c: (fnp.max(fnp.abs(c[0] * c[0] - a)) > 1e-4 * fnp.max(a)) & (c[1] < 30),
                          lambda c: (c[0] - (c[0] * c[0] - a) / (2.0 * c[0]), c[1] + 1), (a + 1.0, 0))
v = rng.standard_normal((16, 16)).astype(np.float32) * 0.3
def loss(u, x, t):  # its gradient's reverse scan reads the residuals per member (batched xs)
    return fnp.mean((lax.scan(lambda h, x: (fnp.tanh(v @ h + u * x), None), fnp.zeros(16, np.float32), x)[0] - t) ** 2)
cases = [(ft.vmap(rnn), (rng.standard_normal((5, 19)).astype(np.float32), rng.standard_normal((5, 3, 19)).astype(np.float32))),
         (ft.vmap(newton), (rng.uniform(1, 4, (5, 19)).astype(np.float32) * np.float32([[1], [10], [100], [1e3], [1e4]]),)),
         (ft.vmap(ft.value_and_grad(loss), in_axes=(None, 0, 0)),
          (rng.standard_normal(16).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32),
           rng.standard_normal((5, 16)).astype(np.float32)))]
g, args = cases[int(sys.argv[1])]
c = ft.jit(g).lower(*args).compile()
assert sys.argv[2] in c.report(), c.report()
for x, y in zip(ft.tree_util.tree_leaves(c(*args)), ft.tree_util.tree_leaves(ft.jit(g, backend="numpy")(*args))):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
print("OK")
"""


@requires_oclgrind
@pytest.mark.parametrize("kind", ["gpu", "cpu"], indirect=True)
@pytest.mark.parametrize("case", ["vmapped matvec scan", "vmapped while", "vmapped gradient of a scan"])
@pytest.mark.parametrize("uninitialized", [False, True], ids=["races", "uninitialized"])
def test_a_work_group_per_member_runs_clean_on_oclgrind(kind, case, uninitialized):  # noqa: F811
    """vmap of work-group loops as a work-group per member (the gpu kind: 5 work-groups of 8
    work-items; the cpu kind: 3 work-groups of one work-item, its products in blocks or by terms; each
    its members' rows in the shared global scratch, a while's work-groups stopping on their own, a
    gradient's reverse scan reading its residuals per member): no race within or across
    work-groups, no access out of bounds, no uninitialized read, numpy's values."""
    index = str(["vmapped matvec scan", "vmapped while", "vmapped gradient of a scan"].index(case))
    shape = "5 work-groups of 8 work-items" if kind == "gpu" else "3 work-groups of 1 work-item"
    run = run_python(_OCLGRIND_ROWS, index, shape, kind=kind, max_work_group_size=8, uninitialized=uninitialized,
                     timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout[-3000:] + run.stderr[-3000:]
    assert not run.reports, "\n\n".join(run.reports[:3])
