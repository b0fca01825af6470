"""Structured control flow: ``cond``/``switch``, ``while_loop``, ``fori_loop``, ``scan``, ``map``.

Each binds one primitive holding sub-programs (``cond_p``, ``while_p``, ``scan_p``: declared,
with their derivative and batching rules, in ``primitives/control.py``).  User functions are
traced once with abstract inputs; values they close over become explicit operands, so an
enclosing transformation sees them.  ``fori_loop`` with static bounds is a ``scan`` (so it has
reverse mode), with traced bounds a ``while_loop`` (forward mode only, as in JAX).

Types follow JAX: a ``cond`` predicate is a bool or an integer (nonzero is
true), a ``switch`` index is clamped, loop carries given as Python scalars are weakly typed
(``scan(f, 0.0, xs_float32)`` carries float32), and a ``fori_loop`` index has the bounds'
integer dtype, weakly typed for Python-int bounds.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from . import numpy as fnp
from . import primitives as P
from . import tree_util
from .collectives import (  # noqa: F401  (re-exported: ft.lax.psum, ...)
    all_gather,
    all_to_all,
    axis_index,
    axis_size,
    pmax,
    pmean,
    pmin,
    ppermute,
    psum,
    psum_scatter,
)
from .core import ClosedJaxpr, Jaxpr, ShapedArray, Tracer, Var, get_aval
from .core.errors import ConcretizationError, function_name, user_frame_description
from .primitives import shape_of
from .primitives.control import cond_p, scan_p, while_p
from .transforms.subprograms import as_operand, avals_of, hoist_consts, stage_subprogram

# --------------------------------------------------------------------------- helpers


def _trace_user_fn(fun: Callable, in_avals: list, in_tree):
    """Trace a user function of pytrees; closed-over values are hoisted to leading operands
    (so an enclosing transformation sees them as inputs of the primitive).

    Returns (ClosedJaxpr taking [*hoisted, *inputs], hoisted values, out_tree)."""
    out_tree_box = []

    def flat(*xs):
        out = fun(*tree_util.tree_unflatten(in_tree, xs))
        leaves, tree = tree_util.tree_flatten(out)
        out_tree_box.append(tree)
        return leaves

    opened, consts = hoist_consts(stage_subprogram(flat, in_avals, function_name(fun)))
    return opened, consts, out_tree_box[0]


def _flatten_operands(tree) -> tuple[list, list, Any]:
    """Flatten operands into arrays and their abstract values.  The avals are taken before
    conversion, so Python scalars stay weakly typed, as in JAX (``0`` as a loop counter does
    not turn an int32 or float32 computation into a 64-bit one)."""
    leaves, treedef = tree_util.tree_flatten(tree)
    return [as_operand(x) for x in leaves], avals_of(leaves), treedef


_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def _promote_weak_carry(leaves: list, avals: list, out_avals: Sequence):
    """JAX's rule for weakly typed loop carries: when the body turns a carry that started as a
    Python scalar into a stronger dtype of at least its kind (``0.0`` -> float32, ``0`` ->
    int32 or float32), the initial value is cast to that dtype.

    Returns (leaves, avals), or None when nothing changes (then the body needs no retrace)."""
    new_leaves, new_avals, changed = [], [], False
    for x, a, o in zip(leaves, avals, out_avals):
        if (a.weak_type and a.shape == o.shape and a.dtype != o.dtype
                and _KIND_RANK.get(o.dtype.kind, -1) >= _KIND_RANK.get(a.dtype.kind, 9)):
            x = P.convert_element_type(x, o.dtype) if isinstance(x, Tracer) else np.asarray(x, o.dtype)
            a, changed = ShapedArray(a.shape, o.dtype, o.weak_type), True
        new_leaves.append(x)
        new_avals.append(a)
    return (new_leaves, new_avals) if changed else None


def _check_same_avals(what: str, got: Sequence, want: Sequence, fname: str):
    got_s = [a.str_short() for a in got]
    want_s = [a.str_short() for a in want]
    if got_s != want_s:
        raise TypeError(f"{what} of `{fname}` must keep the same types and shapes: got {got_s}, "
                        f"expected {want_s} {user_frame_description()}")


# --------------------------------------------------------------------------- cond / switch


def _scalar_operand(x, what: str):
    x = as_operand(x)
    aval = get_aval(x)
    if aval.shape != ():
        raise TypeError(f"{what} must be a scalar, got {aval.str_short()} {user_frame_description()}")
    return x, aval


def _describe_outputs(tree, avals) -> str:
    return repr(tree_util.tree_unflatten(tree, [a.str_short() for a in avals])).replace("'", "")


def _bind_branches(index, branches: Sequence[Callable], labels: Sequence[str], operands, what: str):
    """Trace every branch on the operands' types and bind ``cond_p`` (index: int32 scalar)."""
    leaves = [as_operand(x) for x in tree_util.tree_leaves(operands)]
    in_tree = tree_util.tree_structure(operands)
    avals = avals_of(leaves)
    traced = [_trace_user_fn(b, avals, in_tree) for b in branches]
    ref_closed, _, ref_tree = traced[0]
    ref = _describe_outputs(ref_tree, ref_closed.out_avals)
    for (closed, _, tree), b, label in zip(traced[1:], branches[1:], labels[1:]):
        got = _describe_outputs(tree, closed.out_avals)
        if tree != ref_tree or got != ref:
            raise TypeError(f"{what} branches must return the same structure, dtypes and shapes: {labels[0]} "
                            f"`{function_name(branches[0])}` returns {ref}, but {label} `{function_name(b)}` returns {got} "
                            f"{user_frame_description()}")
    # every branch takes the hoisted values of all branches, then the operands
    all_consts = [c for _, consts, _ in traced for c in consts]
    counts = [len(consts) for _, consts, _ in traced]
    new_branches = []
    for k, (closed, _, _) in enumerate(traced):
        before = sum(counts[:k])
        j = closed.jaxpr
        others_before = [Var(get_aval(c)) for c in all_consts[:before]]
        others_after = [Var(get_aval(c)) for c in all_consts[before + counts[k]:]]
        in_vars = others_before + j.in_vars[:counts[k]] + others_after + j.in_vars[counts[k]:]
        new_branches.append(ClosedJaxpr(Jaxpr([], in_vars, j.eqns, j.outs), []))
    index = P.convert_element_type(index, np.int32)
    outs = cond_p.bind(index, *all_consts, *leaves, branches=tuple(new_branches))
    return tree_util.tree_unflatten(ref_tree, outs)


def switch(index, branches: Sequence[Callable], *operands):
    """Apply ``branches[index](*operands)`` as one primitive; ``index`` is clamped to
    ``[0, len(branches) - 1]`` (as in JAX).  Every branch must return the same types."""
    branches = tuple(branches)
    if not branches:
        raise ValueError("switch needs at least one branch")
    index, aval = _scalar_operand(index, "switch index")
    if aval.dtype.kind not in "iub":
        raise TypeError(f"switch index must be an integer scalar, got {aval.str_short()} "
                        f"{user_frame_description()}")
    return _bind_branches(index, branches, [f"branches[{i}]" for i in range(len(branches))], operands, "switch")


def cond(pred, true_fun: Callable, false_fun: Callable, *operands):
    """``true_fun(*operands) if pred else false_fun(*operands)``, staged as one primitive.

    ``pred`` is a boolean or integer scalar (a nonzero integer is true, as in JAX)."""
    pred, aval = _scalar_operand(pred, "cond predicate")
    if aval.dtype.kind in "iu":
        pred = P.ne_p.bind(pred, np.zeros((), aval.dtype))
    elif aval.dtype.kind != "b":
        raise TypeError(f"cond predicate must be a boolean or integer scalar, got {aval.str_short()}; "
                        f"compare it first (e.g. x > 0) {user_frame_description()}")
    return _bind_branches(pred, (false_fun, true_fun), ("false_fun", "true_fun"), operands, "cond")


# --------------------------------------------------------------------------- while_loop


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``while cond_fun(val): val = body_fun(val)``, staged as one primitive.

    Forward mode and vmap work (a batched predicate runs until every member is done);
    reverse mode raises, as in JAX: use ``scan`` or ``fori_loop`` with static bounds."""
    leaves, avals, tree = _flatten_operands(init_val)
    args_tree = tree_util.tree_structure((init_val,))
    body_c, body_consts, body_tree = _trace_user_fn(body_fun, avals, args_tree)
    if body_tree != tree:
        raise TypeError(f"while_loop: body_fun `{function_name(body_fun)}` must return the structure of init_val "
                        f"({tree}), got {body_tree} {user_frame_description()}")
    promoted = _promote_weak_carry(leaves, avals, body_c.out_avals)
    if promoted is not None:
        leaves, avals = promoted
        body_c, body_consts, _ = _trace_user_fn(body_fun, avals, args_tree)
    _check_same_avals("while_loop body output", body_c.out_avals, avals, function_name(body_fun))
    cond_c, cond_consts, _ = _trace_user_fn(cond_fun, avals, args_tree)
    if len(cond_c.out_avals) != 1 or cond_c.out_avals[0].shape != () or cond_c.out_avals[0].dtype != np.dtype(bool):
        raise TypeError(f"while_loop: cond_fun `{function_name(cond_fun)}` must return a boolean scalar, got "
                        f"{[a.str_short() for a in cond_c.out_avals]} {user_frame_description()}")
    outs = while_p.bind(*cond_consts, *body_consts, *leaves, cond_jaxpr=cond_c, body_jaxpr=body_c,
                        cond_nconsts=len(cond_consts), body_nconsts=len(body_consts))
    return tree_util.tree_unflatten(tree, outs)


# --------------------------------------------------------------------------- scan


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False,
         unroll: int | bool = 1):
    """``carry, ys = scan(f, init, xs)`` with ``f(carry, x) -> (carry, y)``; ys are stacked.
    ``unroll`` (JAX's: steps per iteration of the compiled loop) is accepted and checked; it does
    not change the values, and the OpenCL backend decides how a loop runs (a lane loop runs every
    step in one kernel)."""
    fname = function_name(f)
    if not isinstance(unroll, (bool, int, np.integer)) or unroll < 0:
        raise ValueError(f"scan of `{fname}`: unroll must be a non-negative int or a bool, got {unroll!r}")
    x_leaves, x_tree = tree_util.tree_flatten(xs)
    x_leaves = [as_operand(x) for x in x_leaves]
    lengths = {shape_of(x)[0] for x in x_leaves if shape_of(x)}
    if any(shape_of(x) == () for x in x_leaves):
        raise ValueError(f"scan of `{fname}`: every xs leaf needs a leading axis to scan over")
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise ValueError(f"scan of `{fname}`: inconsistent or unknown length; xs leading axes and "
                         f"length give {sorted(lengths)}")
    n = lengths.pop()
    c_leaves, c_avals, c_tree = _flatten_operands(init)
    x_avals = [ShapedArray(shape_of(x)[1:], get_aval(x).dtype) for x in x_leaves]
    out_tree_box = []

    def flat(*args):
        carry = tree_util.tree_unflatten(c_tree, args[:len(c_leaves)])
        x = tree_util.tree_unflatten(x_tree, args[len(c_leaves):])
        res = f(carry, x)
        if not (isinstance(res, (tuple, list)) and len(res) == 2):
            got = "a single array" if isinstance(res, Tracer) else type(res).__name__
            raise TypeError(f"scan body `{fname}` must return a pair (carry, y), got {got} "
                            f"{user_frame_description()}")
        new_carry, y = res
        cl, ct = tree_util.tree_flatten(new_carry)
        if ct != c_tree:
            raise TypeError(f"scan body `{fname}` must return a carry with the structure of init ({c_tree}), "
                            f"got {ct} {user_frame_description()}")
        yl, yt = tree_util.tree_flatten(y)
        out_tree_box.append(yt)
        return cl + yl

    closed = stage_subprogram(flat, c_avals + x_avals, fname)
    promoted = _promote_weak_carry(c_leaves, c_avals, closed.out_avals)
    if promoted is not None:
        c_leaves, c_avals = promoted
        closed = stage_subprogram(flat, c_avals + x_avals, fname)
    _check_same_avals("scan carry", closed.out_avals[:len(c_leaves)], c_avals, fname)
    body, consts = hoist_consts(closed)
    outs = scan_p.bind(*consts, *c_leaves, *x_leaves, jaxpr=body, num_consts=len(consts),
                       num_carry=len(c_leaves), length=n, reverse=reverse)
    carry = tree_util.tree_unflatten(c_tree, outs[:len(c_leaves)])
    return carry, tree_util.tree_unflatten(out_tree_box[-1], outs[len(c_leaves):])


def map(f: Callable, xs, *, batch_size: int | None = None):
    """``stack([f(x) for x in xs])`` over the leading axis of (pytrees of) arrays, as one ``scan``."""
    if batch_size is not None:
        raise NotImplementedError("lax.map(batch_size=...) is not implemented in functrace")
    return scan(lambda carry, x: (carry, f(x)), (), xs)[1]


def _concrete_int(x):
    """The Python int value of a loop bound, or None when it is only known at run time."""
    if isinstance(x, Tracer):
        try:
            return int(x.concrete_value())
        except ConcretizationError:
            return None
    return int(x)


def _index_type(lower, upper) -> tuple[np.dtype, bool]:
    """(dtype, weak) of a ``fori_loop`` index: the bounds' common integer dtype, weakly typed
    when both bounds are Python ints (as in JAX, so ``v + i`` keeps a float32 ``v`` float32)."""
    avals = avals_of((lower, upper))
    for a in avals:
        if a.shape != () or a.dtype.kind not in "iu":
            raise TypeError(f"fori_loop bounds must be integer scalars, got {a.str_short()} "
                            f"{user_frame_description()}")
    strong = [a.dtype for a in avals if not a.weak_type]
    return (np.result_type(*strong), False) if strong else (avals[0].dtype, True)


def fori_loop(lower, upper, body_fun: Callable, init_val: Any, *, unroll: int | bool | None = None) -> Any:
    """``for i in range(lower, upper): val = body_fun(i, val)``.  With concrete bounds this is
    a ``scan`` (reverse-differentiable, no unrolling); with traced bounds a ``while_loop``
    (forward mode only).  ``unroll`` is accepted as JAX's and does not change the values."""
    dtype, weak = _index_type(lower, upper)
    lo, hi = _concrete_int(lower), _concrete_int(upper)
    if lo is not None and hi is not None:
        @functools.wraps(body_fun, updated=())
        def step(carry, _):
            i, val = carry
            return (i + 1, body_fun(i, val)), None

        start = lo if weak else np.asarray(lo, dtype)  # a Python int start is weakly typed
        (_, out), _ = scan(step, (start, init_val), None, length=max(hi - lo, 0))
        return out

    def cond_fun(carry):
        return carry[0] < carry[1]

    @functools.wraps(body_fun, updated=())
    def body(carry):
        i, hi_, val = carry
        return i + 1, hi_, body_fun(i, val)

    if not weak:
        lower, upper = (P.convert_element_type(as_operand(b), dtype) for b in (lower, upper))
    return while_loop(cond_fun, body, (lower, upper, init_val))[2]


# --------------------------------------------------------------------------- bit operations and erf_inv
# (jax.lax's names for the primitives ft.random is built from)

shift_left, shift_right_logical, bitcast_convert_type = P.shift_left, P.shift_right_logical, P.bitcast_convert_type

# numeric operations (lax_numeric.py); erf_inv from nn (nn does not import lax: no cycle)
from .lax_numeric import (  # noqa: E402,F401  (re-exported)
    Precision,
    PrecisionLike,
    associative_scan,
    clamp,
    cummax,
    cummin,
    cumprod,
    cumsum,
    dot,
    dot_general,
    dynamic_index_in_dim,
    dynamic_slice,
    dynamic_slice_in_dim,
    dynamic_update_index_in_dim,
    dynamic_update_slice,
    dynamic_update_slice_in_dim,
    erf,
    padtype_to_pads,
    reduce_window,
    reduce_window_shape_tuple,
    rsqrt,
    select,
    sort,
    sort_key_val,
    top_k,
)
from .nn import erf_inv  # noqa: E402, F401
from .scipy.special import digamma  # noqa: E402, F401
from .scipy.special import gammaln as lgamma  # noqa: E402, F401  (log |Gamma|, as XLA's lgamma)

# jax.lax names that functrace spells otherwise, or does not provide (the AttributeError says so)
_LAX_HINTS = {
    "mul": "fnp.multiply (or *)", "sub": "fnp.subtract (or -)", "div": "fnp.divide, or fnp.floor_divide for integers",
    "neg": "fnp.negative (or unary -)", "pow": "fnp.power (or **)", "integer_pow": "x ** n (an int n)",
    "logistic": "ft.nn.sigmoid", "convert_element_type": "fnp.asarray(x, dtype) or x.astype(dtype)",
    "broadcast_in_dim": "fnp.expand_dims and fnp.broadcast_to", "broadcast": "fnp.broadcast_to",
    "rev": "fnp.flip", "slice": "indexing (x[a:b:s])", "slice_in_dim": "indexing (x[a:b:s])",
    "index_in_dim": "indexing (x[i])", "reduce": "fnp.sum / fnp.prod / fnp.max / fnp.min over axes",
    "reduce_sum": "fnp.sum", "reduce_max": "fnp.max", "reduce_min": "fnp.min", "reduce_prod": "fnp.prod",
    "stop_gradient": "ft.stop_gradient", "ne": "fnp.not_equal (or !=)", "eq": "fnp.equal (or ==)",
    "lt": "fnp.less (or <)", "le": "fnp.less_equal (or <=)", "gt": "fnp.greater (or >)",
    "ge": "fnp.greater_equal (or >=)", "full": "fnp.full", "full_like": "fnp.full_like", "iota": "fnp.arange",
    "gather": "indexing (x[idx]) or fnp.take / fnp.take_along_axis",
    "scatter": "x.at[idx].set(...)", "scatter_add": "x.at[idx].add(...)",
    "ragged_dot": None, "conv_general_dilated_local": None, "conv_general_dilated_patches": None,
    "reduce_precision": None, "rng_uniform": None, "rng_bit_generator": None,
}


def __getattr__(name: str):
    """``lax.add`` / ``lax.max`` / ``lax.min`` (e.g. for ``reduce_window``), looked up here so that
    this module's own ``max`` / ``min`` stay Python's; for a missing name, an AttributeError that
    says what to use instead."""
    ops = {"add": fnp.add, "max": fnp.maximum, "min": fnp.minimum}
    if name in ops:
        return ops[name]
    message = f"module 'functrace.lax' has no attribute {name!r}"
    if not name.startswith("__"):
        hint = _LAX_HINTS.get(name)
        if hint is None and hasattr(fnp, name) and not name.startswith("_"):
            hint = f"fnp.{name} (functrace.numpy)"
        if hint is not None:
            message += f": use {hint}"
        elif name in _LAX_HINTS:
            message += ": functrace does not provide it"
    raise AttributeError(message)


from .convolution import (  # noqa: E402, F401
    ConvDimensionNumbers,
    ConvGeneralDilatedDimensionNumbers,
    conv,
    conv_dimension_numbers,
    conv_general_dilated,
    conv_general_permutations,
    conv_general_shape_tuple,
    conv_shape_tuple,
    conv_transpose,
    conv_transpose_shape_tuple,
    conv_with_general_padding,
)
