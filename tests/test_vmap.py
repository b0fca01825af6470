"""``ft.vmap`` batching rules against a Python loop over the mapped axis.

For every primitive reachable through ``functrace.numpy`` (and ``scatter_add`` through
``functrace.primitives``) the batched result must equal
``np.stack([f(*args_i) for i in range(B)], axis=out_axes)`` in values, shapes and dtypes,
for batched/unbatched combinations of the operands and for in_axes given as ints, None,
negative ints, tuples and dict pytrees.  Also: out_axes, nested vmap, vmap of grad
(per-example gradients), jacfwd/jacrev/hessian against finite differences, and errors.
"""
from __future__ import annotations

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import primitives as P
from functrace import tree_util
from functrace.core import Tracer

RNG = np.random.default_rng(7)
B = 3  # batch size used throughout


def rn(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def pos(*shape):
    return RNG.uniform(0.5, 2.0, shape)


def ints(*shape, lo=-4, hi=5):
    return RNG.integers(lo, hi, shape).astype(np.int64)


# --------------------------------------------------------------------------- reference


def assert_same(got, want, what=""):
    gl, gt = tree_util.tree_flatten(got)
    wl, wt = tree_util.tree_flatten(want)
    assert len(gl) == len(wl), f"{what}: {len(gl)} outputs vs {len(wl)} expected"
    for k, (g, w) in enumerate(zip(gl, wl)):
        assert not isinstance(g, Tracer), f"{what}[{k}]: a tracer escaped vmap"
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{what}[{k}]: shape {g.shape} != expected {w.shape}"
        assert g.dtype == w.dtype, f"{what}[{k}]: dtype {g.dtype} != expected {w.dtype}"
        if w.dtype.kind in "fc":
            tol = 1e-5 if w.dtype == np.float32 else 1e-9
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=what)
        else:
            np.testing.assert_array_equal(g, w, err_msg=what)


def _slice(arg, ax, i):
    """Example ``i`` of ``arg`` mapped along the in_axes prefix ``ax``."""
    if ax is None:
        return arg
    if isinstance(ax, int):
        return tree_util.tree_map(lambda l: np.take(np.asarray(l), i, axis=ax), arg)
    if isinstance(ax, dict):
        return {k: _slice(arg[k], ax[k], i) for k in arg}
    return type(arg)(_slice(a, x, i) for a, x in zip(arg, ax))


def _size(arg, ax):
    if ax is None:
        return None
    if isinstance(ax, int):
        return np.shape(tree_util.tree_leaves(arg)[0])[ax]
    items = ax.items() if isinstance(ax, dict) else enumerate(ax)
    for k, a in items:
        s = _size(arg[k], a)
        if s is not None:
            return s
    return None


def loop_vmap(f, in_axes=0, out_axes=0):
    """The specification of vmap: a Python loop, results stacked along out_axes."""
    def run(*args):
        axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        n = next(s for s in (_size(a, x) for a, x in zip(args, axes)) if s is not None)
        outs = [f(*[_slice(a, x, i) for a, x in zip(args, axes)]) for i in range(n)]
        leaves0, tree = tree_util.tree_flatten(outs[0])
        per_leaf = [tree_util.tree_leaves(o) for o in outs]
        if isinstance(out_axes, int) or out_axes is None:
            oaxes = [out_axes] * len(leaves0)
        else:
            oaxes = tree_util.tree_leaves(out_axes)
        stacked = []
        for k, oax in enumerate(oaxes):
            vals = [np.asarray(p[k]) for p in per_leaf]
            stacked.append(vals[0] if oax is None else np.stack(vals, axis=oax))
        return tree_util.tree_unflatten(tree, stacked)
    return run


def check(f, args, in_axes=0, out_axes=0, what=""):
    with np.errstate(all="ignore"):
        want = loop_vmap(f, in_axes, out_axes)(*args)
        got = ft.vmap(f, in_axes=in_axes, out_axes=out_axes)(*args)
    assert_same(got, want, what or getattr(f, "__name__", "f"))


def batched(shape, ax, gen=rn):
    """An array with a batch axis of size B inserted at ``ax`` of the per-example ``shape``."""
    full = list(shape)
    full.insert(ax % (len(shape) + 1), B)
    return gen(*full)


# --------------------------------------------------------------------------- elementwise

UNARY = {
    "sin": fnp.sin, "cos": fnp.cos, "tan": fnp.tan, "tanh": fnp.tanh, "exp": fnp.exp, "log": fnp.log,
    "log1p": fnp.log1p, "expm1": fnp.expm1, "sqrt": fnp.sqrt, "abs": fnp.abs, "sign": fnp.sign,
    "floor": fnp.floor, "ceil": fnp.ceil, "rint": fnp.rint, "negative": fnp.negative,
    "isfinite": fnp.isfinite, "sigmoid": fnp.sigmoid, "logical_not": lambda x: fnp.logical_not(x > 1.0),
    "square": fnp.square, "cube": lambda x: x ** 3, "pow-neg": lambda x: x ** -2,
    "astype-f32": lambda x: x.astype(np.float32), "astype-int": lambda x: fnp.asarray(x * 3, np.int64),
    "stop_gradient": ft.stop_gradient, "rsqrt": lambda x: P.rsqrt_p.bind(x),
}


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("ax", [0, 1, -1])
def test_unary(name, ax):
    f = UNARY[name]
    check(f, (batched((2, 4), ax, pos),), in_axes=ax, what=name)


def test_unary_scalar_examples():
    for name, f in UNARY.items():
        check(f, (pos(B),), what=name)


BINARY = {
    "add": fnp.add, "subtract": fnp.subtract, "multiply": fnp.multiply, "divide": fnp.divide,
    "floor_divide": fnp.floor_divide, "remainder": fnp.remainder, "maximum": fnp.maximum,
    "minimum": fnp.minimum, "arctan2": fnp.arctan2, "power": fnp.power, "equal": fnp.equal,
    "not_equal": fnp.not_equal, "less": fnp.less, "less_equal": fnp.less_equal, "greater": fnp.greater,
    "greater_equal": fnp.greater_equal, "logical_and": lambda a, b: (a > 1) & (b > 1),
    "logical_or": lambda a, b: fnp.logical_or(a > 1, b > 1), "logical_xor": lambda a, b: (a > 1) ^ (b > 1),
    "hypot": fnp.hypot, "logaddexp": fnp.logaddexp,
}

# (per-example shape of x, per-example shape of y, in_axes)
BINARY_LAYOUTS = [
    ((3, 4), (3, 4), (0, 0)),
    ((3, 4), (3, 4), (1, -1)),
    ((3, 4), (3, 4), (0, None)),
    ((3, 4), (3, 4), (None, 2)),
    ((3, 1), (4,), (0, 0)),        # broadcasting, batched operand of lower rank
    ((4,), (2, 3, 4), (0, None)),  # unbatched operand of higher rank
    ((4,), (2, 3, 4), (None, 1)),
    ((), (3, 4), (0, 1)),          # scalar examples against arrays
    ((2, 1, 4), (3, 1), (-1, 0)),
]


@pytest.mark.parametrize("layout", BINARY_LAYOUTS, ids=[f"{a}{b}{c}" for a, b, c in BINARY_LAYOUTS])
@pytest.mark.parametrize("name", list(BINARY))
def test_binary(name, layout):
    sx, sy, axes = layout
    x = batched(sx, axes[0], pos) if axes[0] is not None else pos(*sx)
    y = batched(sy, axes[1], pos) if axes[1] is not None else pos(*sy)
    check(BINARY[name], (x, y), in_axes=axes, what=name)


@pytest.mark.parametrize("name", ["add", "multiply", "floor_divide", "remainder", "bitwise_and", "bitwise_or",
                                  "bitwise_xor", "maximum", "less"])
def test_binary_int(name):
    f = getattr(fnp, name)
    x, y = ints(B, 3, 4), RNG.integers(1, 5, (4, B))
    check(f, (x, y), in_axes=(0, 1), what=name)
    check(f, (x, 3), in_axes=(0, None), what=name)
    check(lambda a: f(7, a), (y,), in_axes=1, what=name)


def test_binary_python_scalars_and_dtypes():
    x32 = rn(B, 4, dtype=np.float32)
    check(lambda x: x * 2.0 + 1, (x32,))
    check(lambda x, y: x + y, (x32, rn(4)), in_axes=(0, None))
    check(lambda x, s: x * s, (x32, rn(B)), in_axes=(0, 0))
    check(lambda x: x // 2 + x % 3, (ints(B, 4),))


@pytest.mark.parametrize("axes", [(0, 0, 0), (0, None, None), (None, 0, None), (None, None, 0), (1, 0, None),
                                  (None, 1, 0), (0, 0, None)])
def test_where_select(axes):
    shapes = [(4,), (3, 4), ()]  # cond, x, y per example
    gens = [lambda *s: RNG.random(s) > 0.5, rn, rn]
    args = [batched(s, a, g) if a is not None else g(*s) for s, a, g in zip(shapes, axes, gens)]
    check(fnp.where, tuple(args), in_axes=axes, what=f"where{axes}")
    check(lambda c, x, y: fnp.clip(x, y, y + 1.0) + fnp.where(c, 0.0, x), tuple(args), in_axes=axes)


# --------------------------------------------------------------------------- reductions

REDUCTIONS = {
    "sum": fnp.sum, "prod": fnp.prod, "max": fnp.max, "min": fnp.min, "mean": fnp.mean, "var": fnp.var,
    "std": fnp.std, "all": lambda x, **k: fnp.all(x > 0, **k), "any": lambda x, **k: fnp.any(x > 0, **k),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("axis,kd", [(None, False), (0, False), (1, True), (-1, False), ((0, 2), False),
                                     ((0, 2), True), (None, True)])
@pytest.mark.parametrize("in_ax", [0, 2, -1])
def test_reductions(name, axis, kd, in_ax):
    f = REDUCTIONS[name]
    check(lambda x: f(x, axis=axis, keepdims=kd), (batched((2, 3, 4), in_ax),), in_axes=in_ax,
          what=f"{name}(axis={axis}, keepdims={kd})")


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("in_ax", [0, 1, 2])
def test_arg_reductions(name, axis, in_ax):
    x = np.moveaxis(RNG.permutation(B * 12).reshape(B, 3, 4).astype(np.float64), 0, in_ax)
    check(lambda v: getattr(fnp, name)(v, axis=axis), (x,), in_axes=in_ax, what=f"{name}(axis={axis})")


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("in_ax", [0, 1, 2])
def test_cumsum(axis, in_ax):
    check(lambda x: fnp.cumsum(x, axis=axis), (batched((3, 4), in_ax),), in_axes=in_ax)
    check(lambda x: P.cumsum(x, 1, reverse=True), (batched((3, 4), in_ax),), in_axes=in_ax)


def test_reductions_int_and_bool():
    check(lambda x: fnp.sum(x, axis=0), (ints(B, 3, 4),))
    check(lambda x: fnp.max(x, axis=1), (ints(3, B, 4),), in_axes=1)
    check(lambda x: fnp.argmax(x), (ints(3, 4, B),), in_axes=-1)
    check(lambda x: fnp.mean(x), (ints(B, 5),))


# --------------------------------------------------------------------------- shape ops

SHAPE_FNS = {
    "reshape": lambda x: fnp.reshape(x, (4, 3, 2)),
    "reshape-1": lambda x: x.reshape(-1),
    "ravel": fnp.ravel,
    "transpose": fnp.transpose,
    "transpose-perm": lambda x: fnp.transpose(x, (1, 2, 0)),
    "T": lambda x: x.T,
    "swapaxes": lambda x: fnp.swapaxes(x, 0, 2),
    "moveaxis": lambda x: fnp.moveaxis(x, 0, -1),
    "expand_dims": lambda x: fnp.expand_dims(x, (0, 2)),
    "expand_dims-neg": lambda x: fnp.expand_dims(x, -1),
    "squeeze": lambda x: fnp.squeeze(x[:, :1, :], 1),
    "squeeze-all": lambda x: fnp.squeeze(x[None, :1]),
    "broadcast_to": lambda x: fnp.broadcast_to(x[:, :1, :], (5, 2, 3, 4)),
    "broadcast_arrays": lambda x: fnp.broadcast_arrays(x[:, :1], x[0]),
    "tile": lambda x: fnp.tile(x, (2, 1, 2)),
    "repeat": lambda x: fnp.repeat(x, 2, axis=1),
    "repeat-array": lambda x: fnp.repeat(x, [2, 0, 1], axis=1),
    "repeat-flat": lambda x: fnp.repeat(x, 2),
    "flip": lambda x: fnp.flip(x, (0, 2)),
    "flip-all": fnp.flip,
    "slice": lambda x: x[1:, ::2, 1:3],
    "slice-neg-step": lambda x: x[::-1, 2:0:-1, ::-2],
    "int-index": lambda x: x[1, :, -1],
    "newaxis-ellipsis": lambda x: x[None, ..., 0, None],
    "pad": lambda x: fnp.pad(x, ((1, 0), (0, 2), (1, 1)), constant_values=1.5),
    "split": lambda x: fnp.split(x, [1, 3], axis=2),
    "array_split": lambda x: fnp.array_split(x, 2, axis=1),
    "concatenate-self": lambda x: fnp.concatenate([x, x[:, :1]], axis=1),
    "concatenate-const": lambda x: fnp.concatenate([np.ones((1, 3, 4)), x], axis=0),
    "stack": lambda x: fnp.stack([x, 2 * x, np.zeros((2, 3, 4))], axis=1),
    "hstack": lambda x: fnp.hstack([x, x]),
    "vstack": lambda x: fnp.vstack([x[0], np.ones(4)]),
    "diagonal": lambda x: fnp.diagonal(x, 1, 1, 2),
    "trace": lambda x: fnp.trace(x[0]),
    "diag-vec": lambda x: fnp.diag(x[0, 0], -1),
    "diag-mat": lambda x: fnp.diag(x[1], 1),
    "take-const-idx": lambda x: fnp.take(x, [2, 0, -1], axis=2),
    "take-flat": lambda x: fnp.take(x, [[0, 5], [23, 7]]),
    "take_along_axis": lambda x: fnp.take_along_axis(x, np.array([[[0, 2, 1, 1]], [[2, 2, 0, 1]]]), 1),
    "fancy-const": lambda x: x[[1, 0], :, [3, 3]],
    "bool-mask-const": lambda x: x[:, np.array([True, False, True])],
    "atleast_2d": lambda x: fnp.atleast_2d(x[0, 0]),
    "outer": lambda x: fnp.outer(x[0, 0], x[1, 1]),
    "full-traced": lambda x: fnp.full((2,), x[0, 0, 0]),
}


@pytest.mark.parametrize("name", list(SHAPE_FNS))
@pytest.mark.parametrize("in_ax", [0, 2, -1])
def test_shape_ops(name, in_ax):
    check(SHAPE_FNS[name], (batched((2, 3, 4), in_ax),), in_axes=in_ax, what=name)


@pytest.mark.parametrize("axes", [(0, 0), (0, None), (None, 0), (1, 0)])
def test_pad_batched_value(axes):
    f = lambda x, c: fnp.pad(x, ((1, 2), (0, 1)), constant_values=c)
    x = batched((2, 3), axes[0]) if axes[0] is not None else rn(2, 3)
    c = rn(B) if axes[1] is not None else 0.25
    check(f, (x, c), in_axes=axes)


@pytest.mark.parametrize("axes", [(0, 0), (0, None), (None, 0), (2, -1)])
def test_pad_interior_primitive(axes):
    f = lambda x, v: P.pad(x, v, ((1, 0, 1), (0, 2, 2)))
    x = batched((2, 3), axes[0]) if axes[0] is not None else rn(2, 3)
    v = rn(B) if axes[1] is not None else np.float64(0.5)
    check(f, (x, v), in_axes=axes)


@pytest.mark.parametrize("axes", [(0, 0, None), (0, None, 0), (None, 1, 0), (1, 0, 1), (None, None, 0)])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate_mixed(axes, axis):
    shapes = [(2, 3), (2, 3), (2, 3)]
    args = [batched(s, a) if a is not None else rn(*s) for s, a in zip(shapes, axes)]
    check(lambda a, b, c: fnp.concatenate([a, b, c], axis=axis), tuple(args), in_axes=axes)
    check(lambda a, b, c: fnp.stack([a, b, c], axis=axis), tuple(args), in_axes=axes)


# --------------------------------------------------------------------------- dot_general


DOT_CASES = [
    # name, f, per-example shapes
    ("matmul-mm", fnp.matmul, (3, 4), (4, 5)),
    ("matmul-mv", fnp.matmul, (3, 4), (4,)),
    ("matmul-vm", fnp.matmul, (4,), (4, 5)),
    ("matmul-vv", fnp.matmul, (4,), (4,)),
    ("matmul-batched", fnp.matmul, (2, 3, 4), (2, 4, 5)),
    ("matmul-bcast", fnp.matmul, (2, 1, 3, 4), (5, 4, 2)),
    ("matmul-v-3d", fnp.matmul, (4,), (2, 4, 5)),
    ("matmul-3d-v", fnp.matmul, (2, 3, 4), (4,)),
    ("matmul-2d-3d", fnp.matmul, (3, 4), (2, 4, 5)),
    ("dot-3d-1d", fnp.dot, (2, 3, 4), (4,)),
    ("operator@", lambda a, b: a @ b, (3, 4), (4, 2)),
    ("dot-nd", fnp.dot, (2, 3, 4), (5, 4, 2)),
    ("dot-vv", fnp.dot, (4,), (4,)),
    ("dot-scalar", fnp.dot, (), (3, 2)),
    ("inner", fnp.inner, (2, 4), (3, 4)),
    ("vdot", fnp.vdot, (2, 3), (3, 2)),
    ("outer", fnp.outer, (3,), (4,)),
    ("tensordot", lambda a, b: fnp.tensordot(a, b, ([0, 2], [1, 0])), (2, 3, 4), (4, 2, 5)),
    ("einsum-ij,jk", lambda a, b: fnp.einsum("ij,jk->ik", a, b), (3, 4), (4, 5)),
    ("einsum-bij,bkj", lambda a, b: fnp.einsum("bij,bkj->bki", a, b), (2, 3, 4), (2, 5, 4)),
    ("einsum-ij,ij->i", lambda a, b: fnp.einsum("ij,ij->i", a, b), (3, 4), (3, 4)),
    ("einsum-ell", lambda a, b: fnp.einsum("...ij,...jk->...ik", a, b), (2, 3, 4), (2, 4, 5)),
    ("einsum-implicit", lambda a, b: fnp.einsum("ij,jk", a, b), (3, 4), (4, 2)),
    ("einsum-outer", lambda a, b: fnp.einsum("i,j->ji", a, b), (3,), (4,)),
]


@pytest.mark.parametrize("name,f,sa,sb", DOT_CASES, ids=[c[0] for c in DOT_CASES])
@pytest.mark.parametrize("axes", [(0, 0), (0, None), (None, 0), (-1, 1), (None, -1), (1, None)],
                         ids=["both", "lhs", "rhs", "both-neg", "rhs-last", "lhs-ax1"])
def test_dot_general(name, f, sa, sb, axes):
    ax, bx = axes
    if ax is not None and ax > len(sa):  # per-example scalars have only axis 0 to map over
        ax = 0
    a = batched(sa, ax) if ax is not None else rn(*sa)
    b = batched(sb, bx) if bx is not None else rn(*sb)
    check(f, (a, b), in_axes=(ax, bx), what=name)


def test_dot_general_f32_and_int():
    check(fnp.matmul, (rn(B, 3, 4, dtype=np.float32), rn(4, 2, dtype=np.float32)), in_axes=(0, None))
    check(fnp.matmul, (ints(3, 4), ints(4, B, 2)), in_axes=(None, 1))
    check(lambda a, b: fnp.einsum("i,i", a, b), (ints(B, 4), ints(4, B)), in_axes=(0, 1))


def test_einsum_three_operands():
    f = lambda a, b, c: fnp.einsum("ij,jk,kl->il", a, b, c)
    a, b, c = rn(2, 3), rn(3, 4), rn(4, 5)
    for axes in [(0, None, None), (None, 0, None), (None, None, 0), (0, 1, 2), (None, 2, 0)]:
        args = [np.stack([x * (i + 1) for i in range(B)], ax) if ax is not None else x
                for x, ax in zip((a, b, c), axes)]
        check(f, tuple(args), in_axes=axes, what=f"einsum3{axes}")


# --------------------------------------------------------------------------- gather (take) via indexing

X = np.arange(B * 5 * 6, dtype=np.float64).reshape(B, 5, 6) * 0.5 - 7


def _ix(build):
    """``x[build(i)]`` -- through ``fnp.getitem`` when ``x`` is a plain numpy array (an ndarray
    cannot be indexed by a tracer; that is numpy's ``__getitem__``, not functrace's), and
    with the ``[]`` operator of the tracer otherwise."""
    return lambda x, i: x[build(i)] if isinstance(x, Tracer) else fnp.getitem(x, build(i))


def _np_ix(build):
    return lambda x, i: np.asarray(x)[build(i)]


GATHER = [
    # name, f(x, i), numpy reference (None: f itself on numpy), per-example index maker
    ("x[i]", _ix(lambda i: i), _np_ix(lambda i: i), lambda: RNG.integers(-5, 5, (4,))),
    ("x[i]-2d", _ix(lambda i: i), _np_ix(lambda i: i), lambda: RNG.integers(0, 5, (2, 3))),
    ("x[i]-scalar", _ix(lambda i: i), _np_ix(lambda i: i), lambda: RNG.integers(-5, 5, ())),
    ("x[:,i]", _ix(lambda i: (slice(None), i)), _np_ix(lambda i: (slice(None), i)), lambda: RNG.integers(-6, 6, (4,))),
    ("x[1:,i]", _ix(lambda i: (slice(1, None), i)), _np_ix(lambda i: (slice(1, None), i)),
     lambda: RNG.integers(0, 6, (2, 2))),
    ("x[i,::-1]", _ix(lambda i: (i, slice(None, None, -1))), _np_ix(lambda i: (i, slice(None, None, -1))),
     lambda: RNG.integers(0, 5, (3,))),
    ("x[i,i]", _ix(lambda i: (i, i)), _np_ix(lambda i: (i, i)), lambda: RNG.integers(0, 5, (3,))),
    ("x[...,i]", _ix(lambda i: (Ellipsis, i)), _np_ix(lambda i: (Ellipsis, i)), lambda: RNG.integers(0, 6, (2,))),
    ("x[None,i]", _ix(lambda i: (None, i)), _np_ix(lambda i: (None, i)), lambda: RNG.integers(0, 5, (2,))),
    ("take-ax1", lambda x, i: fnp.take(x, i, axis=1), lambda x, i: np.take(x, i, axis=1),
     lambda: RNG.integers(-6, 6, (2, 2))),
    ("take-flat", lambda x, i: fnp.take(x, i), lambda x, i: np.take(x, i), lambda: RNG.integers(0, 30, (3,))),
    ("take_along_axis", lambda x, i: fnp.take_along_axis(x, i, 1), lambda x, i: np.take_along_axis(x, i, 1),
     lambda: RNG.integers(0, 6, (5, 2))),
    ("take_along_axis0", lambda x, i: fnp.take_along_axis(x, i, 0), lambda x, i: np.take_along_axis(x, i, 0),
     lambda: RNG.integers(0, 5, (3, 6))),
]


def check_against(f, ref, args, in_axes, what=""):
    """vmap of f against the loop over the numpy reference ``ref``."""
    want = loop_vmap(ref, in_axes)(*args)
    got = ft.vmap(f, in_axes=in_axes)(*args)
    assert_same(got, want, what)


@pytest.mark.parametrize("name,f,ref,make_idx", GATHER, ids=[g[0] for g in GATHER])
@pytest.mark.parametrize("which", ["operand", "index", "both", "both-axis1"])
def test_gather(name, f, ref, make_idx, which):
    if which == "operand":
        idx = make_idx()
        check_against(lambda x: f(x, idx), lambda x: ref(x, idx), (X,), 0, name)
        check_against(lambda x: f(x, idx), lambda x: ref(x, idx), (np.moveaxis(X, 0, -1),), -1, name)
    elif which == "index":
        idx = np.stack([make_idx() for _ in range(B)])
        check_against(f, ref, (X[0], idx), (None, 0), name)
    elif which == "both":
        idx = np.stack([make_idx() for _ in range(B)])
        check_against(f, ref, (X, idx), (0, 0), name)
    else:
        idx = np.stack([make_idx() for _ in range(B)], axis=-1)
        check_against(f, ref, (np.moveaxis(X, 0, 1), idx), (1, -1), name)


def test_gather_two_batched_index_arrays():
    i = RNG.integers(0, 5, (B, 4))
    j = RNG.integers(0, 6, (4, B))
    f = lambda x, i, j: fnp.getitem(x, (i, j))
    ref = lambda x, i, j: x[i, j]
    check_against(f, ref, (X, i, j), (0, 0, 1))
    check_against(f, ref, (X[0], i, j), (None, 0, 1))
    check_against(f, ref, (X, i[0], j), (0, None, 1))
    check_against(lambda x, i, j: x[i[:, None], j[None, :2]], lambda x, i, j: x[i[:, None], j[None, :2]],
                  (X, i, j), (0, 0, 1))


def test_batched_index_into_unmapped_array_eager_and_jit():
    """x[i] with x unmapped (in_axes None, or computed from unmapped values) and i batched: eager
    vmap passed x in as a numpy array, whose own indexing converted the index tracer to an array
    (TracerArrayConversionError); unmapped arrays now enter as unbatched tracers, as under jit."""
    x = RNG.standard_normal(21).astype(np.float32)
    idx = RNG.integers(0, 21, (2, 33))
    cases = [(lambda x, i: x[i], lambda x, i: x[i]),
             (lambda x, i: ft.nn.silu(x)[i], lambda x, i: (x / (1 + np.exp(-x)))[i]),
             (lambda x, i: fnp.sin(x * 2)[i, None] + fnp.sum(x), lambda x, i: np.sin(x * 2)[i, None] + x.sum())]
    for f, ref in cases:
        want = np.stack([ref(x, i) for i in idx])
        for g in (ft.vmap(f, in_axes=(None, 0)), ft.jit(ft.vmap(f, in_axes=(None, 0)))):
            np.testing.assert_allclose(np.asarray(g(x, idx)), want, rtol=1e-6)
        xs = RNG.standard_normal((2, 21)).astype(np.float32)  # operand batched too
        np.testing.assert_allclose(np.asarray(ft.vmap(f)(xs, idx)), np.stack([ref(a, i) for a, i in zip(xs, idx)]),
                                   rtol=1e-6)
        np.testing.assert_allclose(np.asarray(ft.jit(ft.vmap(f))(xs, idx)),
                                   np.stack([ref(a, i) for a, i in zip(xs, idx)]), rtol=1e-6)
    # an unmapped concrete argument is still usable by numpy in eager vmap (the same for every element)
    np.testing.assert_allclose(ft.vmap(lambda x, i: np.asarray(x).sum() + i, in_axes=(None, 0))(x, idx[:, 0]),
                               x.sum() + idx[:, 0], rtol=1e-6)


# --------------------------------------------------------------------------- scatter_add

COMBOS = [(0, 0, 0), (0, None, None), (None, 0, None), (None, None, 0), (0, 0, None), (0, None, 0),
          (None, 0, 0)]


@pytest.mark.parametrize("axes", COMBOS, ids=[str(c) for c in COMBOS])
@pytest.mark.parametrize("layout", ["axis0", "axis1", "axis1-2d-idx", "axis0-scalar-idx"])
def test_scatter_add(axes, layout):
    if layout == "axis0":
        xs, isz, us, axis = (4, 5), (6,), (6, 5), 0
    elif layout == "axis1":
        xs, isz, us, axis = (4, 5), (3,), (4, 3), 1
    elif layout == "axis1-2d-idx":
        xs, isz, us, axis = (2, 5, 3), (2, 2), (2, 2, 2, 3), 1
    else:
        xs, isz, us, axis = (4, 5), (), (5,), 0
    n = xs[axis]

    def mk_idx(*shape):
        return RNG.integers(0, n, shape).astype(np.int64)  # duplicates are likely: they must add up
    x = batched(xs, axes[0]) if axes[0] is not None else rn(*xs)
    idx = np.moveaxis(mk_idx(B, *isz), 0, axes[1]) if axes[1] is not None else mk_idx(*isz)
    upd = batched(us, axes[2]) if axes[2] is not None else rn(*us)
    check(lambda x, i, u: P.scatter_add(x, i, u, axis), (x, idx, upd), in_axes=axes,
          what=f"scatter_add{axes} {layout}")


def test_scatter_add_nonzero_in_axes():
    x = rn(4, B, 5)
    idx = RNG.integers(0, 4, (3, B))
    upd = rn(3, 5, B)
    check(lambda x, i, u: P.scatter_add(x, i, u, 0), (x, idx, upd), in_axes=(1, 1, 2))
    check(lambda x, i, u: P.scatter_add(x, i, u, 0), (x, idx, upd), in_axes=(-2, -1, -1), out_axes=1)


def test_diag_and_grad_of_take_use_scatter_add():
    check(fnp.diag, (rn(B, 4),))
    check(ft.grad(lambda x, i: fnp.sum(x[i] ** 2)), (rn(B, 5), RNG.integers(0, 5, (B, 7))), in_axes=(0, 0))
    check(ft.grad(lambda x, i: fnp.sum(x[i] ** 2)), (rn(5), RNG.integers(0, 5, (B, 7))), in_axes=(None, 0))
    check(ft.grad(lambda x, i: fnp.sum(x[i] ** 2)), (rn(B, 5), RNG.integers(0, 5, 7)), in_axes=(0, None))


# --------------------------------------------------------------------------- in_axes / out_axes API


def test_in_axes_forms():
    x, y = rn(B, 4), rn(4, B)
    f = lambda a, b: a * 2 + fnp.sin(b)
    check(f, (x, y), in_axes=(0, 1))
    check(f, (x, y), in_axes=[0, -1])
    check(f, (x, y[:, 0]), in_axes=(0, None))
    check(f, (x[0], y), in_axes=(None, -1))
    check(lambda a: a.sum(0), (rn(2, B, 4),), in_axes=-2)
    check(lambda a: a.sum(0), (rn(2, B, 4),), in_axes=1)


def test_in_axes_pytrees():
    params = {"w": rn(4, 2), "b": rn(B, 2)}
    xs = (rn(B, 4), rn(3, B))

    def f(p, xy):
        x, z = xy
        return x @ p["w"] + p["b"] + fnp.sum(z)
    check(f, (params, xs), in_axes=({"w": None, "b": 0}, (0, 1)))
    check(f, (params, xs), in_axes=({"b": 0, "w": None}, (0, -1)))
    # a dict of pytrees inside a list
    check(lambda d: d["a"][0] * d["a"][1] + d["c"], ({"a": [rn(B, 2), rn(2)], "c": rn(2, B)},),
          in_axes=({"a": [0, None], "c": 1},))
    # a prefix: one int for a whole dict
    check(lambda d: d["u"] - d["v"], ({"u": rn(B, 3), "v": rn(B, 3)},), in_axes=0)
    check(lambda d: d["u"] - d["v"], ({"u": rn(3, B), "v": rn(3, B)},), in_axes=({"u": 1, "v": 1},))


def test_out_axes():
    x = rn(B, 3, 4)
    f = lambda a: (a * 2, fnp.sum(a, 0))
    check(f, (x,), out_axes=1)
    check(f, (x,), out_axes=-1)
    check(f, (x,), out_axes=(2, -1))
    check(lambda a: (a * 2, fnp.sum(a, 0), fnp.max(a)), (x,), out_axes=(-1, 1, 0))
    check(lambda a: {"s": fnp.sum(a), "t": a.T}, (x,), out_axes={"s": 0, "t": 2})
    check(lambda a: a[0], (x,), in_axes=1, out_axes=-1)


def test_out_axes_none_and_unbatched_outputs():
    x = rn(B, 3)
    out = ft.vmap(lambda a, c: (a + c, c * 2), in_axes=(0, None), out_axes=(0, None))(x, rn(3))
    assert out[0].shape == (B, 3) and out[1].shape == (3,)
    # an output that does not depend on the mapped input is broadcast along the batch axis
    check(lambda a: np.ones(2), (x,))
    check(lambda a, c: c * 3.0, (x, rn(2)), in_axes=(0, None), out_axes=1)


def test_axis_size_with_all_none():
    out = ft.vmap(lambda c: c + 1.0, in_axes=None, axis_size=4)(rn(2))
    assert np.shape(out) == (4, 2)


def test_python_scalars_and_int_inputs():
    check(lambda a, s: a * s, (rn(B, 2), 3.0), in_axes=(0, None))
    check(lambda a, s: a + s, (ints(B, 2), 2), in_axes=(0, None))


def test_vmap_of_staged_jaxpr():
    f = lambda a, b: fnp.tanh(a @ b) * fnp.sum(b)
    closed = ft.make_jaxpr(f)(rn(3, 4), rn(4, 2))
    check(lambda a, b: closed(a, b)[0], (rn(B, 3, 4), rn(4, 2)), in_axes=(0, None))
    check(lambda a, b: closed(a, b)[0], (rn(3, 4), rn(4, B, 2)), in_axes=(None, 1))


def test_make_jaxpr_of_vmap():
    f = ft.vmap(lambda a, b: fnp.dot(a, b) + fnp.max(a), in_axes=(0, None))
    a, b = rn(B, 4), rn(4)
    got = ft.make_jaxpr(f)(a, b)(a, b)[0]
    assert_same(got, loop_vmap(lambda a, b: fnp.dot(a, b) + fnp.max(a), (0, None))(a, b))


# --------------------------------------------------------------------------- nested vmap


def test_nested_vmap_outer_product():
    f = lambda a, b: fnp.dot(a, b) * fnp.sin(a[0])
    a, b = rn(4, 3), rn(5, 3)
    inner = ft.vmap(f, in_axes=(None, 0))
    got = ft.vmap(inner, in_axes=(0, None))(a, b)
    want = np.array([[f(a[i], b[j]) for j in range(5)] for i in range(4)])
    assert_same(got, want)


def test_nested_vmap_same_axis_and_different_axes():
    x = rn(2, 3, 4)
    f = lambda v: fnp.sum(v ** 2) - fnp.max(v)
    got = ft.vmap(ft.vmap(f))(x)
    assert_same(got, np.array([[f(x[i, j]) for j in range(3)] for i in range(2)]))
    got = ft.vmap(ft.vmap(f, in_axes=1), in_axes=2)(x)  # outer over axis 2, inner over axis 1 of the rest
    assert_same(got, np.array([[f(x[:, j, k]) for j in range(3)] for k in range(4)]))
    got = ft.vmap(ft.vmap(f, in_axes=0, out_axes=0), in_axes=1, out_axes=1)(x)
    assert_same(got, np.array([[f(x[i, j]) for j in range(3)] for i in range(2)]))


def test_nested_vmap_gather_scatter_dot():
    x = rn(2, 3, 5)
    idx = RNG.integers(0, 5, (2, 3, 4))

    def f(v, i):
        return fnp.cumsum(v[i]) + P.scatter_add(np.zeros(5), i, v[:4], 0)[i]
    got = ft.vmap(ft.vmap(f))(x, idx)
    want = np.array([[f(x[a, b], idx[a, b]) for b in range(3)] for a in range(2)])
    assert_same(got, want)
    w = rn(5, 2)
    g = lambda v, m: fnp.einsum("i,ij->j", v, m)
    got = ft.vmap(ft.vmap(g, in_axes=(0, None)), in_axes=(0, None))(x, w)
    assert_same(got, np.einsum("abi,ij->abj", x, w))
    m = rn(5, 2, 3)
    got = ft.vmap(ft.vmap(g, in_axes=(None, 2)), in_axes=(0, None))(x[:, 0], m)
    assert_same(got, np.einsum("ai,ijc->acj", x[:, 0], m))


def test_nested_vmap_closure_over_outer_tracer():
    xs, ys = rn(2, 3), rn(4, 3)
    got = ft.vmap(lambda a: ft.vmap(lambda b: fnp.dot(a, b) + fnp.sum(a))(ys))(xs)
    assert_same(got, np.array([[np.dot(a, b) + np.sum(a) for b in ys] for a in xs]))
    got = ft.vmap(lambda a: ft.grad(lambda w: fnp.sum(fnp.sin(w * a)))(ys[0]))(xs)
    assert_same(got, np.array([a * np.cos(ys[0] * a) for a in xs]))


def test_norms_and_misc_under_vmap():
    x = rn(B, 4, 3)
    for ord_ in [None, 1, 2, np.inf, -np.inf, 3]:
        check(lambda v, o=ord_: fnp.linalg.norm(v, o, axis=0), (x,), what=f"norm ord={ord_}")
        check(lambda v, o=ord_: fnp.linalg.norm(v[:, 0], o), (x,), in_axes=0, what=f"norm ord={ord_}")
    check(lambda v: fnp.linalg.norm(v, keepdims=True), (x,), in_axes=2)
    check(lambda v: fnp.round(v, 2) + fnp.clip(v, -0.3, 0.3), (x,), in_axes=1)
    check(lambda v: fnp.average(v, axis=0, weights=np.arange(1.0, 5.0)[:, None] * np.ones(3)), (x,))
    check(lambda v: fnp.logaddexp(v, 0.5) + fnp.arcsinh(v) + fnp.exp2(v) + fnp.log10(fnp.abs(v) + 1), (x,))


def test_nested_vmap_three_levels():
    x = rn(2, 3, 4, 2)
    f = lambda v: fnp.linalg.norm(v) * v[0]
    got = ft.vmap(ft.vmap(ft.vmap(f)))(x)
    want = np.array([[[f(x[a, b, c]) for c in range(4)] for b in range(3)] for a in range(2)])
    assert_same(got, want)


# --------------------------------------------------------------------------- vmap of derivatives


def _loss(params, x, y):
    h = fnp.tanh(x @ params["w"] + params["b"])
    return fnp.sum((h - y) ** 2) + 0.1 * fnp.sum(params["w"] ** 2)


def _numeric_grad(f, x, eps=1e-6):
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = eps
        g[k] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def test_per_example_gradients():
    params = {"w": rn(3, 2), "b": rn(2)}
    xs, ys = rn(5, 3), rn(5, 2)
    got = ft.vmap(ft.grad(_loss), in_axes=(None, 0, 0))(params, xs, ys)
    assert set(got) == {"w", "b"}
    assert got["w"].shape == (5, 3, 2) and got["b"].shape == (5, 2)
    for i in range(5):
        ref = ft.grad(_loss)(params, xs[i], ys[i])
        assert_same({"w": got["w"][i], "b": got["b"][i]}, ref, f"example {i}")
        gw = _numeric_grad(lambda w: float(_loss({"w": w, "b": params["b"]}, xs[i], ys[i])), params["w"])
        gb = _numeric_grad(lambda b: float(_loss({"w": params["w"], "b": b}, xs[i], ys[i])), params["b"])
        np.testing.assert_allclose(got["w"][i], gw, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got["b"][i], gb, rtol=1e-6, atol=1e-7)


def test_per_example_gradients_wrt_inputs_and_batched_params():
    params = {"w": rn(3, 2), "b": rn(2)}
    xs, ys = rn(4, 3), rn(4, 2)
    check(ft.grad(_loss, argnums=1), (params, xs, ys), in_axes=(None, 0, 0))
    check(ft.grad(_loss, argnums=(0, 1)), (params, xs, ys), in_axes=(None, 0, 0))
    stacked = {"w": rn(4, 3, 2), "b": rn(4, 2)}
    check(ft.grad(_loss), (stacked, xs, ys), in_axes=(0, 0, 0))
    check(ft.grad(_loss), (stacked, xs[0], ys[0]), in_axes=({"w": 0, "b": 0}, None, None))
    check(ft.value_and_grad(_loss), (params, xs, ys), in_axes=(None, 0, 0))


def test_vmap_of_grad_through_many_primitives():
    def f(x, i):
        y = fnp.concatenate([x, fnp.flip(x)]) * fnp.cumsum(x ** 2)[i]
        z = fnp.pad(fnp.reshape(y, (2, -1)), 1, constant_values=0.5)
        return fnp.sum(fnp.sigmoid(z) * fnp.max(z, axis=0)) + fnp.prod(fnp.cos(x[1:3])) + fnp.mean(
            fnp.where(x > 0, fnp.exp(x), fnp.log1p(x ** 2)))
    xs = rn(B, 4)
    check(ft.grad(f), (xs, 2), in_axes=(0, None))
    check(ft.grad(f), (xs, np.array([0, 3, 1])), in_axes=(0, 0))
    for b in range(B):
        np.testing.assert_allclose(ft.vmap(ft.grad(f), in_axes=(0, None))(xs, 1)[b],
                                   _numeric_grad(lambda v: float(f(v, 1)), xs[b]), rtol=1e-5, atol=1e-6)


def test_grad_of_vmap():
    f = lambda w, x: fnp.sum(fnp.tanh(ft.vmap(lambda xi: xi @ w)(x)) ** 2)
    w, x = rn(3, 2), rn(5, 3)
    g = ft.grad(f)(w, x)
    np.testing.assert_allclose(g, _numeric_grad(lambda w_: float(f(w_, x)), w), rtol=1e-6, atol=1e-7)


def _vec_fn(x):
    return fnp.stack([fnp.sin(x[0]) * x[1], fnp.sum(x ** 3), fnp.prod(x[:2]) + fnp.exp(x[2]),
                      fnp.max(x) * x[0]])


def _numeric_jac(f, x, eps=1e-6):
    x = np.asarray(x, np.float64)
    cols = []
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = eps
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps))
    out_shape = np.shape(f(x))
    return np.stack(cols, axis=-1).reshape(out_shape + x.shape)


@pytest.mark.parametrize("jac", ["jacfwd", "jacrev"])
def test_jacobians_vs_numeric(jac):
    x = np.array([0.3, -1.2, 0.7])
    J = getattr(ft, jac)(_vec_fn)(x)
    assert J.shape == (4, 3)
    np.testing.assert_allclose(J, _numeric_jac(_vec_fn, x), rtol=1e-6, atol=1e-7)
    # matrix input, matrix output
    f = lambda m: fnp.tanh(m @ m.T) + fnp.cumsum(m, axis=1)[:, :2]
    m = rn(2, 2)
    J = getattr(ft, jac)(f)(m)
    assert J.shape == (2, 2, 2, 2)
    np.testing.assert_allclose(J, _numeric_jac(f, m), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("jac", ["jacfwd", "jacrev"])
def test_jacobians_multiple_argnums(jac):
    f = lambda a, b: fnp.sin(a) * fnp.sum(b ** 2) + a[::-1] * b[0]
    a, b = rn(3), rn(2)
    ja, jb = getattr(ft, jac)(f, argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ja, _numeric_jac(lambda v: f(v, b), a), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(jb, _numeric_jac(lambda v: f(a, v), b), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("jac", ["jacfwd", "jacrev"])
def test_jacobians_of_pytrees(jac):
    p = {"a": rn(3), "b": rn(2)}
    f = lambda p: {"u": fnp.sin(p["a"]) * fnp.sum(p["b"]), "v": fnp.sum(p["a"] ** 2) * p["b"][0]}
    J = getattr(ft, jac)(f)(p)
    for out in ("u", "v"):
        for inp in ("a", "b"):
            def fo(v, out=out, inp=inp):
                q = dict(p)
                q[inp] = v
                return np.asarray(f(q)[out])
            np.testing.assert_allclose(J[out][inp], _numeric_jac(fo, p[inp]), rtol=1e-6, atol=1e-7,
                                       err_msg=f"d{out}/d{inp}")


def test_hessian_argnums_blocks():
    g = lambda x, y: fnp.sum(x ** 2) * fnp.sum(y ** 3) + fnp.prod(y)
    x, y = rn(2), rn(3)
    H = ft.hessian(g, argnums=(0, 1))(x, y)
    flat = lambda v: float(g(v[:2], v[2:]))
    v0 = np.concatenate([x, y])
    num = _numeric_jac(lambda v: _numeric_grad(flat, v, 1e-4), v0, 1e-4)
    full = np.block([[H[0][0], H[0][1]], [H[1][0], H[1][1]]])
    np.testing.assert_allclose(full, num, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(H[0][1], 2 * x[:, None] * 3 * y[None, :] ** 2, rtol=1e-10)


def test_hessian_vs_analytic_and_numeric():
    A = rn(3, 3)
    A = A @ A.T
    quad = lambda x: 0.5 * x @ A @ x
    x = rn(3)
    np.testing.assert_allclose(ft.hessian(quad)(x), A, rtol=1e-10, atol=1e-12)
    f = lambda x: fnp.sum(fnp.sin(x) * x ** 3) + fnp.prod(x[:2]) + fnp.logaddexp(x[0], x[2])
    H = ft.hessian(f)(x)
    assert H.shape == (3, 3)
    num = _numeric_jac(lambda v: np.asarray(ft.grad(f)(v)), x)
    np.testing.assert_allclose(H, num, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)


def test_vmap_of_jacobians_and_hessian():
    xs = rn(B, 3)
    check(ft.jacfwd(_vec_fn), (xs,))
    check(ft.jacrev(_vec_fn), (xs,))
    f = lambda x: fnp.sum(fnp.sin(x) * x ** 3)
    check(ft.hessian(f), (xs,))
    for b in range(B):
        np.testing.assert_allclose(ft.vmap(ft.hessian(f))(xs)[b], np.diag(
            6 * xs[b] * np.sin(xs[b]) + 6 * xs[b] ** 2 * np.cos(xs[b]) - xs[b] ** 3 * np.sin(xs[b])),
            rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- errors


def test_inconsistent_axis_sizes_raise():
    with pytest.raises(ValueError, match="inconsistent"):
        ft.vmap(lambda a, b: a + b)(rn(3, 2), rn(4, 2))
    with pytest.raises(ValueError):
        ft.vmap(lambda a, b: a + b, in_axes=(0, 1))(rn(3, 2), rn(3, 2))
    with pytest.raises(ValueError):
        ft.vmap(lambda d: d["a"] + d["b"])({"a": rn(3), "b": rn(2)})
    with pytest.raises(ValueError):
        ft.vmap(lambda a: a, axis_size=5)(rn(3))


def test_in_axes_errors():
    with pytest.raises(ValueError):
        ft.vmap(lambda a: a, in_axes=2)(rn(3, 2))  # out of range
    with pytest.raises(ValueError):
        ft.vmap(lambda a: a, in_axes=-3)(rn(3, 2))
    with pytest.raises(ValueError):
        ft.vmap(lambda a, b: a, in_axes=(0, 0, 0))(rn(3), rn(3))  # wrong number of entries
    with pytest.raises(ValueError):
        ft.vmap(lambda a: a, in_axes=None)(rn(3))  # nothing mapped, no axis_size
    with pytest.raises(ValueError):
        ft.vmap(lambda d: d["a"], in_axes=({"a": 0, "z": 0},))({"a": rn(3), "b": rn(3)})
    with pytest.raises(ValueError):
        ft.vmap(lambda a: a, in_axes=0)(np.float64(2.0))  # a 0-d input has no axis 0


def test_out_axes_errors():
    with pytest.raises(ValueError):
        ft.vmap(lambda a: a * 2, out_axes=None)(rn(3))
    with pytest.raises(ValueError):
        ft.vmap(lambda a: (a, a), out_axes=(0, 0, 0))(rn(3))
    with pytest.raises(ValueError):
        ft.vmap(lambda a: a * 2, out_axes=2)(rn(3, 4))  # outputs are 2-d: out_axes must be in [-2, 2)
    with pytest.raises(ValueError):
        ft.vmap(lambda a: fnp.sum(a), out_axes=-2)(rn(3, 4))
