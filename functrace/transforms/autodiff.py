"""Forward mode (JVP trace) and reverse mode (VJP tape trace).

Design choice: reverse mode uses *direct VJP rules* on a tape, as HIPS autograd does,
rather than JAX's linearize-then-transpose.  Reasons:

* Each primitive's reverse rule is one short function next to its forward rule, which is
  easier to read and to check than a transpose rule plus linearity bookkeeping.
* The forward pass runs on real values when inputs are concrete, so Python control flow
  on values works under ``grad`` (as in autograd), while under ``make_jaxpr``/``jit`` the
  same code records IR: reverse mode is an IR-to-IR transform when the inputs are staged.
* Rules are written with primitives that are themselves differentiable (closure under
  differentiation), so reverse-over-reverse, forward-over-reverse, ... nest to any depth;
  each nested transformation has its own trace level, so tracers never get confused.

The backward sweep walks the tape iteratively (no recursion), so 10^5-op chains are fine.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from .. import core, tree_util
from .. import primitives as P
from ..core import ShapedArray, Trace, Tracer, eval_jaxpr, get_aval, is_float_dtype, new_main
from ..core.errors import ConcretizationError, DtypeError, api_boundary, check_callable, function_name
from ..core.errors import argnum_tuple as _argnum_tuple
from ..dtypes import float0
from ..primitives import add
from .batching import vmap
from .optimize import without_effects
from .staging import check_output, make_jaxpr, trace_to_jaxpr

# --------------------------------------------------------------------------- forward mode


class JVPTracer(Tracer):
    __slots__ = ("primal", "tangent")

    def __init__(self, trace, primal, tangent):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent  # None is a symbolic zero

    @property
    def shape(self) -> tuple:
        return P.shape_of(self.primal)

    @property
    def aval(self) -> ShapedArray:
        return get_aval(self.primal)

    def concrete_value(self, numeric: bool = False):
        if numeric and self.tangent is not None:
            raise ConcretizationError(self, "", "derivative")
        p = self.primal
        return p.concrete_value(numeric) if isinstance(p, Tracer) else p


def _missing_rule(primitive, mode: str):
    return NotImplementedError(f"{mode} differentiation rule for primitive '{primitive.name}' is not implemented")


class JVPTrace(Trace):
    __slots__ = ()
    transform = "ft.jvp (forward mode)"

    def pure(self, val):
        return JVPTracer(self, val, None)

    def process_primitive(self, primitive, tracers, params):
        primals = [t.primal for t in tracers]
        if primitive.jvp_rule is not None:
            return self._process_general(primitive, primals, [t.tangent for t in tracers], params)
        ans = primitive.bind(*primals, **params)
        if not primitive.differentiable:
            return ans
        rules = primitive.jvp
        tangent = None
        for i, t in enumerate(tracers):
            if t.tangent is None:
                continue
            if rules is None:  # a zero tangent here would be a silently wrong derivative
                raise _missing_rule(primitive, "forward-mode")
            rule = rules[i]
            if rule is None:
                continue
            c = rule(t.tangent, ans, *primals, **params)
            if c is not None:
                tangent = c if tangent is None else add(tangent, c)
        if tangent is None:
            return ans
        if P.shape_of(tangent) != P.shape_of(ans):  # a linear rule passed a broadcast operand through
            tangent = P.broadcast_to(tangent, P.shape_of(ans))
        return JVPTracer(self, ans, tangent)

    def _process_general(self, primitive, primals, tangents, params):
        """Primitives with a whole-primitive rule (control flow, custom rules, remat)."""
        if all(t is None for t in tangents):
            return primitive.bind(*primals, **params)
        outs, t_outs = primitive.jvp_rule(primals, tangents, **params)
        if not primitive.multiple_results:
            return JVPTracer(self, outs, t_outs) if t_outs is not None else outs
        return [JVPTracer(self, o, t) if t is not None else o for o, t in zip(outs, t_outs)]


# --------------------------------------------------------------------------- reverse mode


class VJPTracer(Tracer):
    """A value on the tape: its primal and the index of the tape entry that made it."""

    __slots__ = ("primal", "node")

    def __init__(self, trace, primal, node):
        self._trace = trace
        self.primal = primal
        self.node = node  # None: a constant of this trace (no gradient flows)

    @property
    def shape(self) -> tuple:
        return P.shape_of(self.primal)

    @property
    def aval(self) -> ShapedArray:
        return get_aval(self.primal)

    def concrete_value(self, numeric: bool = False):
        if numeric and self.node is not None:
            raise ConcretizationError(self, "", "derivative")
        p = self.primal
        return p.concrete_value(numeric) if isinstance(p, Tracer) else p


class TapeEntry(NamedTuple):
    """One operation recorded by reverse mode.  The two rule styles fill different fields:
    per-argument ``vjp`` rules need the operands' values (``primals``); a whole-primitive
    ``vjp_rule`` has already returned its ``backward`` function.  The other field is None."""

    primitive: Any
    params: Any
    primals: Any   # operand values (per-argument rules) or None
    backward: Any  # backward(cts_out) -> cts_in (whole-primitive rules) or None
    nodes: Any     # the operands' tape indices (None: no derivative flows there)
    ans: Any       # the output(s)


def _record(tape: list, entry_fields: tuple) -> int:
    """Append a ``TapeEntry`` and return its index.  Built with ``tuple.__new__`` (a C call):
    the NamedTuple constructor costs ~1 us per recorded operation, measurable in eager gradients."""
    tape.append(tuple.__new__(TapeEntry, entry_fields))
    return len(tape) - 1


class VJPTrace(Trace):
    __slots__ = ()
    transform = "ft.grad / ft.vjp (reverse mode)"

    def pure(self, val):
        return VJPTracer(self, val, None)

    def process_primitive(self, primitive, tracers, params):
        primals = [t.primal for t in tracers]
        nodes = [t.node for t in tracers]
        if primitive.vjp_rule is not None:
            return self._process_general(primitive, primals, nodes, params)
        ans = primitive.bind(*primals, **params)
        if not (primitive.differentiable and is_float_dtype(get_aval(ans).dtype)) or all(n is None for n in nodes):
            return ans
        return VJPTracer(self, ans, _record(self.main.global_data, (primitive, params, primals, None, nodes, ans)))

    def _process_general(self, primitive, primals, nodes, params):
        """``vjp_rule(primals, needs_ct, **params) -> (outs, backward)``; backward(cts_out) -> cts_in."""
        if all(n is None for n in nodes):
            return primitive.bind(*primals, **params)
        outs, backward = primitive.vjp_rule(primals, [n is not None for n in nodes], **params)
        i = _record(self.main.global_data, (primitive, params, None, backward, nodes, outs))
        if not primitive.multiple_results:
            return VJPTracer(self, outs, i) if is_float_dtype(get_aval(outs).dtype) else outs
        return [VJPTracer(self, o, (i, k)) if is_float_dtype(get_aval(o).dtype) else o
                for k, o in enumerate(outs)]


def backward_pass(tape: list, seeds: dict, num_inputs: int) -> list:
    """Sweep the tape from the end, accumulating cotangents; returns input cotangents (or None).

    Entries are ``TapeEntry`` records; an entry with a ``backward`` function came from a
    whole-primitive ``vjp_rule``, the others apply their primitive's per-argument ``vjp`` rules.

    Node keys are tape indices, or ``(index, k)`` for output ``k`` of a multi-output primitive.
    Equations staged meanwhile are tagged as the backward phase (see ``core.phase``).
    """
    cts = dict(seeds)
    with core.phase("backward"):
        for i in range(len(tape) - 1, num_inputs - 1, -1):
            primitive, params, primals, backward, nodes, ans = tape[i]
            if backward is not None:
                if primitive.multiple_results:
                    gs = [cts.pop((i, k), None) for k in range(len(ans))]
                else:
                    gs = [cts.pop(i, None)]
                if all(g is None for g in gs):
                    continue
                contributions = backward(gs)
            else:
                g = cts.pop(i, None)
                if g is None:
                    continue
                rules = primitive.vjp
                if rules is None:
                    raise _missing_rule(primitive, "reverse-mode")
                contributions = [None if nd is None or rules[j] is None else rules[j](g, ans, *primals, **params)
                                 for j, nd in enumerate(nodes)]
            for nd, c in zip(nodes, contributions):
                if nd is not None and c is not None:
                    cts[nd] = add(cts[nd], c) if nd in cts else c
    return [cts.get(i) for i in range(num_inputs)]


def _as_array(x, fname: str, what: str):
    if isinstance(x, Tracer):
        return x
    try:
        get_aval(x)
    except TypeError as e:
        raise TypeError(f"{what} of `{fname}`: {e}") from None
    return np.asarray(x) if not isinstance(x, np.ndarray) else x


def _check_inputs(leaves, fname: str, transform: str, holomorphic: bool = False,
                  complex_ok: bool = True) -> None:
    """Differentiated inputs are floating point, as JAX's: complex ones with ``holomorphic=True``
    (which requires them), and otherwise where ``complex_ok`` (reverse mode: the gradient of a real
    function of complex inputs follows JAX's convention, ``df/dx - i df/dy``)."""
    for x in leaves:
        d = get_aval(x).dtype
        if holomorphic:
            if d.kind != "c":
                raise DtypeError(f"{transform} of `{fname}` with holomorphic=True requires inputs with "
                                 f"complex dtype, but an input has dtype {d.name}.")
        elif d.kind == "c":
            if not complex_ok:
                raise DtypeError(
                    f"{transform} of `{fname}` requires real-valued inputs (input dtype is {d.name}); for "
                    "holomorphic functions pass holomorphic=True, for other functions of complex inputs "
                    "use ft.jvp directly.")
        elif not is_float_dtype(d):
            raise DtypeError(
                f"{transform} requires floating-point inputs, but an input of `{fname}` being "
                f"differentiated has dtype {d.name}. Convert it with .astype(float) or move it out "
                "of argnums.")


def _check_output_dtype(dtype: np.dtype, fname: str, transform: str, holomorphic: bool) -> None:
    """Reverse-mode derivatives take real outputs, or complex ones with ``holomorphic=True``
    (a complex output's derivative is otherwise not one array: JAX refuses it as well)."""
    if holomorphic:
        if dtype.kind != "c":
            raise DtypeError(f"{transform} of `{fname}` with holomorphic=True requires outputs with complex "
                             f"dtype, but it returned {dtype.name}.")
    elif dtype.kind == "c":
        raise DtypeError(f"{transform} of `{fname}` requires real-valued outputs (output dtype is {dtype.name}); "
                         "for holomorphic functions pass holomorphic=True, for other functions of complex "
                         "outputs use ft.vjp directly.")


def _vjp_flat(fun: Callable, primal_leaves: list, fname: str):
    """Run ``fun`` on a new tape whose first entries are ``primal_leaves``; returns (the tape, its
    main trace, ``fun``'s outputs as traced)."""
    tape: list = []
    with new_main(VJPTrace, tape, fname) as main:
        trace = main.trace
        inputs = [VJPTracer(trace, x, _record(tape, (None, None, None, None, None, x))) for x in primal_leaves]
        outs = fun(*inputs)
    return tape, main, outs


def _lower(x, main):
    """Strip this trace's wrapper from an output: VJPTracer/JVPTracer -> its primal."""
    while isinstance(x, Tracer) and x._trace.main is main:
        x = x.primal
    return x


def _vjp(fun: Callable, primals: tuple, has_aux: bool = False, transform: str = "vjp"):
    """``vjp``'s work, for ``vjp`` and ``jacrev``; its ``vjp_fn`` is not an entry point."""
    check_callable(fun, transform)
    fname = function_name(fun)
    leaves, in_tree = tree_util.tree_flatten(primals)
    leaves = [_as_array(x, fname, "argument") for x in leaves]
    _check_inputs(leaves, fname, transform)
    out_tree_box: list = []

    def flat_fun(*xs):
        out = fun(*tree_util.tree_unflatten(in_tree, xs))
        if has_aux:
            out, aux = out
            out_tree_box.append(aux)
        ol, ot = tree_util.tree_flatten(out)
        out_tree_box.insert(0, ot)
        return ol

    tape, main, outs = _vjp_flat(flat_fun, leaves, fname)
    out_tree = out_tree_box[0]
    out_primals = [_lower(o, main) for o in outs]
    out_nodes = [o.node if isinstance(o, VJPTracer) and o._trace.main is main else None for o in outs]

    def vjp_fn(cotangent):
        ct_leaves, ct_tree = tree_util.tree_flatten(cotangent)
        if ct_tree != out_tree:
            raise ValueError(f"vjp of `{fname}`: cotangent structure {ct_tree} does not match output {out_tree}")
        seeds: dict = {}
        for nd, ct, op in zip(out_nodes, ct_leaves, out_primals):
            if P.shape_of(ct) != P.shape_of(op):
                raise ValueError(f"vjp of `{fname}`: cotangent shape {P.shape_of(ct)} does not match "
                                 f"output shape {P.shape_of(op)}")
            if nd is not None:
                seeds[nd] = add(seeds[nd], ct) if nd in seeds else ct
        cts = backward_pass(tape, seeds, len(leaves))
        cts = [P.zeros_like(x) if c is None else c for c, x in zip(cts, leaves)]
        return tree_util.tree_unflatten(in_tree, cts)

    out = tree_util.tree_unflatten(out_tree, out_primals)
    if has_aux:
        aux = tree_util.tree_map(lambda x: _lower(x, main), out_tree_box[1])
        return out, vjp_fn, aux
    return out, vjp_fn


@api_boundary
def vjp(fun: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """``out, vjp_fn = vjp(f, *primals)``; ``vjp_fn(cotangent)`` returns one cotangent per primal."""
    res = _vjp(fun, primals, has_aux)
    return (res[0], api_boundary(res[1])) + res[2:]


def _value_and_grad(fun: Callable, argnums: int | Sequence[int], has_aux: bool, holomorphic: bool,
                    allow_int: bool = False) -> Callable:
    """``value_and_grad``'s function, not an entry point itself (``grad`` and ``value_and_grad``
    make it one).  ``allow_int``: integer and boolean inputs are held constant, their gradients
    ``float0`` zeros of their shape (as JAX's)."""
    fname = function_name(fun)
    check_callable(fun, "grad")
    multiple = not isinstance(argnums, int)
    argnum_tuple = _argnum_tuple(argnums, "grad")

    def value_and_grad_fun(*args, **kwargs):
        for a in argnum_tuple:
            if not -len(args) <= a < len(args):
                raise ValueError(f"grad of `{fname}`: argnums={argnums} but the function was called "
                                 f"with {len(args)} positional arguments")
        diff_args = [args[a] for a in argnum_tuple]
        all_leaves, in_tree = tree_util.tree_flatten(diff_args)
        all_leaves = [_as_array(x, fname, "argument") for x in all_leaves]
        held = [allow_int and get_aval(x).dtype.kind in "biu" for x in all_leaves]  # (allow_int: constants)
        leaves = [x for x, h in zip(all_leaves, held) if not h]
        _check_inputs(leaves, fname, "grad", holomorphic)
        aux_box: list = []

        def flat_fun(*xs):
            it = iter(xs)
            parts = tree_util.tree_unflatten(in_tree, [x if h else next(it) for x, h in zip(all_leaves, held)])
            full = list(args)
            for a, p in zip(argnum_tuple, parts):
                full[a] = p
            out = fun(*full, **kwargs)
            if has_aux:
                if not (isinstance(out, (tuple, list)) and len(out) == 2):
                    raise TypeError(f"grad of `{fname}` with has_aux=True: the function must return a "
                                    f"pair (output, aux), got {type(out).__name__}")
                out, aux = out
                aux_box.append(aux)
            return [out]

        tape, main, outs = _vjp_flat(flat_fun, leaves, fname)
        out = outs[0]
        try:
            aval = get_aval(out)
        except TypeError:
            raise TypeError(f"grad of `{fname}`: the function must return a scalar array, "
                            f"got {type(out).__name__}") from None
        if aval.shape != ():
            raise TypeError(f"grad of `{fname}` requires a scalar output, but it returned shape "
                            f"{aval.shape}. Use ft.jacrev / ft.vjp for non-scalar outputs, or reduce "
                            "the output (e.g. fnp.sum).")
        if not is_float_dtype(aval.dtype):
            raise DtypeError(f"grad of `{fname}` requires a floating-point output, got {aval.dtype.name}")
        _check_output_dtype(aval.dtype, fname, "grad", holomorphic)
        value = _lower(out, main)
        if isinstance(out, VJPTracer) and out._trace.main is main:
            seeds = {out.node: P.scalar_like(value, 1)}
        else:
            seeds = {}
        cts = backward_pass(tape, seeds, len(leaves))
        cts = iter([P.zeros_like(x) if c is None else c for c, x in zip(cts, leaves)])
        grads = tree_util.tree_unflatten(in_tree, [np.zeros(get_aval(x).shape, float0) if h else next(cts)
                                                   for x, h in zip(all_leaves, held)])
        g = tuple(grads) if multiple else grads[0]
        if has_aux:
            aux = tree_util.tree_map(lambda x: _lower(x, main), aux_box[0])
            return (value, aux), g
        return value, g

    return value_and_grad_fun


@api_boundary
def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                   holomorphic: bool = False, allow_int: bool = False) -> Callable:
    """``value_and_grad(f)(*args) -> (f(*args), df/dargs[argnums])``; f must return a scalar."""
    return api_boundary(_value_and_grad(fun, argnums, has_aux, holomorphic, allow_int), wraps=fun)


@api_boundary
def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
         holomorphic: bool = False, allow_int: bool = False) -> Callable:
    """The gradient of a scalar function, with the structure of the ``argnums`` arguments
    (``holomorphic=True``: the complex derivative of a function of complex inputs and output;
    ``allow_int=True``: integer and boolean arguments get ``ft.dtypes.float0`` zeros, as JAX's)."""
    vg = _value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)

    def grad_fun(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return api_boundary(grad_fun, wraps=fun)


def _jvp(fun: Callable, primals: Sequence, tangents: Sequence, has_aux: bool = False):
    """``jvp``'s work, for ``jvp``, ``jacfwd`` and ``linearize``."""
    check_callable(fun, "jvp")
    fname = function_name(fun)
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError(f"jvp of `{fname}`: primals and tangents must be tuples or lists")
    p_leaves, p_tree = tree_util.tree_flatten(tuple(primals))
    t_leaves, t_tree = tree_util.tree_flatten(tuple(tangents))
    if p_tree != t_tree:
        raise ValueError(f"jvp of `{fname}`: primal structure {p_tree} does not match tangent structure {t_tree}")
    p_leaves = [_as_array(x, fname, "primal") for x in p_leaves]
    for p, t in zip(p_leaves, t_leaves):
        if P.shape_of(p) != P.shape_of(t):
            raise ValueError(f"jvp of `{fname}`: primal shape {P.shape_of(p)} and tangent shape "
                             f"{P.shape_of(t)} differ")
    with new_main(JVPTrace, None, fname) as main:
        trace = main.trace
        ins = [JVPTracer(trace, p, t if is_float_dtype(get_aval(p).dtype) else None)
               for p, t in zip(p_leaves, t_leaves)]
        out = fun(*tree_util.tree_unflatten(p_tree, ins))
        aux = None
        if has_aux:
            out, aux = out
        o_leaves, o_tree = tree_util.tree_flatten(out)
        primal_out, tangent_out = [], []
        for o in o_leaves:
            if isinstance(o, JVPTracer) and o._trace.main is main:
                primal_out.append(o.primal)
                tangent_out.append(P.zeros_like(o.primal) if o.tangent is None else o.tangent)
            else:
                check_output(o, fname, "ft.jvp")
                primal_out.append(o)
                tangent_out.append(P.zeros_like(o))
    res = (tree_util.tree_unflatten(o_tree, primal_out), tree_util.tree_unflatten(o_tree, tangent_out))
    if has_aux:
        return res + (tree_util.tree_map(lambda x: _lower(x, main), aux),)
    return res


@api_boundary
def jvp(fun: Callable, primals: Sequence, tangents: Sequence, has_aux: bool = False) -> tuple:
    """Forward mode: ``(f(*primals), df(primals) . tangents)``."""
    return _jvp(fun, primals, tangents, has_aux)


@api_boundary
def linearize(fun: Callable, *primals: Any) -> tuple:
    """``out, f_jvp = linearize(f, *primals)``: the primal computation runs once; ``f_jvp(*t)``
    replays only the tangent equations (staged into a jaxpr with the primal values as constants)."""
    check_callable(fun, "linearize")
    box = []

    def tangent_fn(*tangents):
        out, t_out = _jvp(fun, primals, tangents)
        box.append(out)
        return t_out

    closed = make_jaxpr(tangent_fn)(*[P.zeros_like(np.asarray(p)) for p in primals])

    def f_jvp(*tangents):
        leaves, _ = tree_util.tree_flatten(tangents)
        return tree_util.tree_unflatten(closed.out_tree, eval_jaxpr(closed.jaxpr, closed.consts, *leaves))

    return box[0], api_boundary(f_jvp)


# --------------------------------------------------------------------------- Jacobians (vmap-based)


@functools.lru_cache(maxsize=4)
def _identity(n: int, dtype) -> np.ndarray:
    """A read-only identity matrix, shared between Jacobian calls (a fresh large one costs a
    memset per call)."""
    eye = np.eye(n, dtype=dtype)
    eye.setflags(write=False)
    return eye


def _std_basis(leaves):
    """An identity matrix over the flattened inputs, split per leaf: (n, *leaf.shape) each."""
    sizes = [int(np.prod(P.shape_of(x), dtype=np.int64)) for x in leaves]
    n = sum(sizes)
    if len(leaves) == 1:
        return [_identity(n, get_aval(leaves[0]).dtype).reshape((n,) + P.shape_of(leaves[0]))]
    out, start = [], 0
    for x, s in zip(leaves, sizes):
        block = np.zeros((n, s), dtype=get_aval(x).dtype)
        block[start:start + s] = np.eye(s, dtype=block.dtype)
        out.append(block.reshape((n,) + P.shape_of(x)))
        start += s
    return out


@api_boundary
def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable:
    """Jacobian by forward mode: ``vmap`` of ``jvp`` over the standard basis of the inputs."""
    fname = function_name(fun)
    check_callable(fun, "jacfwd")
    multiple = not isinstance(argnums, int)
    argnum_tuple = _argnum_tuple(argnums, "jacfwd")

    def jac_fun(*args):
        dyn = [args[a] for a in argnum_tuple]
        leaves, in_tree = tree_util.tree_flatten(dyn)
        leaves = [_as_array(x, fname, "argument") for x in leaves]
        _check_inputs(leaves, fname, "jacfwd", holomorphic, complex_ok=False)

        def f_flat(*xs):
            full = list(args)
            for a, p in zip(argnum_tuple, tree_util.tree_unflatten(in_tree, xs)):
                full[a] = p
            return fun(*full)

        def push(*ts):
            out = _jvp(f_flat, leaves, list(ts), has_aux=has_aux)
            return (out[1], out[2]) if has_aux else out[1]

        basis = _std_basis(leaves)
        if len(basis[0]) == 1:  # one input element: a single jvp, no vmap
            res = push(*[b[0] for b in basis])
            expand = lambda o: P.expand_dims(o, (len(P.shape_of(o)),))
            res = (tree_util.tree_map(expand, res[0]), res[1]) if has_aux else tree_util.tree_map(expand, res)
        else:
            res = vmap(push, in_axes=0, out_axes=-1 if not has_aux else (-1, None))(*basis)
        jac, aux = res if has_aux else (res, None)
        if holomorphic:  # (the tangents have the outputs' dtypes)
            for o in tree_util.tree_leaves(jac):
                _check_output_dtype(get_aval(o).dtype, fname, "jacfwd", True)
        # jac leaves: (out..., n_total); split the last axis per input leaf
        sizes = [int(np.prod(P.shape_of(x), dtype=np.int64)) for x in leaves]

        def split(o):
            oshape = P.shape_of(o)[:-1]
            parts, start = [], 0
            for x, s in zip(leaves, sizes):
                part = P.slice_op(o, (0,) * len(oshape) + (start,), oshape + (start + s,))
                parts.append(P.reshape(part, oshape + P.shape_of(x)))
                start += s
            grouped = tree_util.tree_unflatten(in_tree, parts)
            return tuple(grouped) if multiple else grouped[0]

        out = tree_util.tree_map(split, jac)
        return (out, aux) if has_aux else out

    return api_boundary(jac_fun, wraps=fun)


@api_boundary
def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable:
    """Jacobian by reverse mode: ``vmap`` of the ``vjp`` function over the output basis."""
    check_callable(fun, "jacrev")
    fname = function_name(fun)
    multiple = not isinstance(argnums, int)
    argnum_tuple = _argnum_tuple(argnums, "jacrev")

    def jac_fun(*args):
        dyn = tuple(args[a] for a in argnum_tuple)
        leaves = [_as_array(x, fname, "argument") for x in tree_util.tree_leaves(dyn)]
        _check_inputs(leaves, fname, "jacrev", holomorphic)

        @functools.wraps(fun, updated=())  # errors name the user's function
        def f_dyn(*d):
            full = list(args)
            for a, p in zip(argnum_tuple, d):
                full[a] = p
            return fun(*full)

        res = _vjp(f_dyn, dyn, has_aux, "jacrev")
        out, pullback = res[0], res[1]
        o_leaves, o_tree = tree_util.tree_flatten(out)
        for o in o_leaves:
            _check_output_dtype(get_aval(o).dtype, fname, "jacrev", holomorphic)
        basis = _std_basis(o_leaves)
        sizes = [int(np.prod(P.shape_of(o), dtype=np.int64)) for o in o_leaves]

        def pull(*cts):
            return pullback(tree_util.tree_unflatten(o_tree, list(cts)))

        # cotangent per input: (n_out_total, *in.shape); one output element needs no vmap
        if sum(sizes) == 1:
            cts = tree_util.tree_map(lambda c: P.expand_dims(c, (0,)), pull(*[b[0] for b in basis]))
        else:
            cts = vmap(pull)(*basis)
        in_leaves, in_tree = tree_util.tree_flatten(cts)

        per_out = []
        start = 0
        for o, s in zip(o_leaves, sizes):
            oshape = P.shape_of(o)

            def piece(c, start=start, s=s, oshape=oshape):
                cshape = P.shape_of(c)[1:]
                part = P.slice_op(c, (start,) + (0,) * len(cshape), (start + s,) + cshape)
                return P.reshape(part, oshape + cshape)
            grouped = tree_util.tree_map(piece, cts)
            per_out.append(tuple(grouped) if multiple else grouped[0])
            start += s
        jac = tree_util.tree_unflatten(o_tree, per_out)
        return (jac, res[2]) if has_aux else jac

    return api_boundary(jac_fun, wraps=fun)


@api_boundary
def hessian(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
            holomorphic: bool = False) -> Callable:
    """Hessian as forward-over-reverse: ``jacfwd(jacrev(f))``."""
    return jacfwd(jacrev(fun, argnums, has_aux, holomorphic), argnums, has_aux, holomorphic)


# --------------------------------------------------------------------------- stop_gradient


def stop_gradient(x: Any) -> Any:
    """Identity on values; blocks derivatives of every order (applies to pytrees)."""
    return tree_util.tree_map(lambda v: P.stop_gradient(v) if isinstance(v, Tracer) else v, x)


# --------------------------------------------------------------------------- flat and IR-level forms
# (used by the rules of primitives that hold sub-programs: control flow, custom rules, remat)


def jvp_flat(fun: Callable, primals: Sequence, tangents: Sequence) -> tuple[list, list]:
    """Forward mode on flat lists; a ``None`` tangent is a symbolic zero (in and out)."""
    with new_main(JVPTrace) as main:
        trace = main.trace
        ins = [p if t is None else JVPTracer(trace, p, t) for p, t in zip(primals, tangents)]
        outs = fun(*ins)
        primal_out, tangent_out = [], []
        for o in outs:
            if isinstance(o, JVPTracer) and o._trace is trace:
                primal_out.append(o.primal)
                tangent_out.append(o.tangent)
            else:
                primal_out.append(o)
                tangent_out.append(None)
    return primal_out, tangent_out


def vjp_flat(fun: Callable, primals: Sequence, diff_mask: Sequence[bool]):
    """Reverse mode on flat lists: ``(outs, backward)`` with ``backward(cts) -> cts of the
    differentiated inputs`` (``None`` entries are zeros, in and out)."""
    tape: list = []
    with new_main(VJPTrace, tape) as main:
        trace = main.trace
        ins = []
        for p, d in zip(primals, diff_mask):
            if d:
                tape.append((None, None, None, None, p))
                ins.append(VJPTracer(trace, p, len(tape) - 1))
            else:
                ins.append(p)
        outs = fun(*ins)
    num_inputs = sum(1 for d in diff_mask if d)
    out_primals = [_lower(o, main) for o in outs]
    nodes = [o.node if isinstance(o, VJPTracer) and o._trace is trace else None for o in outs]

    def backward(cts: Sequence) -> list:
        seeds: dict = {}
        for nd, ct in zip(nodes, cts):
            if nd is not None and ct is not None:
                seeds[nd] = add(seeds[nd], ct) if nd in seeds else ct
        return backward_pass(tape, seeds, num_inputs)

    return out_primals, backward


def float_mask(avals) -> list:
    return [is_float_dtype(a.dtype) for a in avals]


def jvp_of_closed(closed) -> "core.ClosedJaxpr":
    """IR-to-IR forward mode: ``[*primals, *tangents of float inputs] -> [*outs, *tangents of
    float outputs]`` (zero tangents instantiated)."""
    in_avals = closed.in_avals
    in_float, out_float = float_mask(in_avals), float_mask(closed.out_avals)
    n = len(in_avals)

    def f(*args):
        it = iter(args[n:])
        tangents = [next(it) if fl else None for fl in in_float]
        outs, touts = jvp_flat(lambda *a: core.eval_jaxpr(closed.jaxpr, closed.consts, *a), args[:n], tangents)
        return list(outs) + [P.zeros_like(o) if t is None else t
                             for o, t, fl in zip(outs, touts, out_float) if fl]

    return trace_to_jaxpr(f, list(in_avals) + [a for a, fl in zip(in_avals, in_float) if fl])


def vjp_of_closed(closed, diff_mask: Sequence[bool]) -> "core.ClosedJaxpr":
    """IR-to-IR reverse mode: ``[*primals, *cts of float outputs] -> [cts of the inputs in
    diff_mask]`` (zeros instantiated).  The forward pass is recomputed inside, without its
    effects (a debug print there ran with the primal pass)."""
    closed = without_effects(closed)
    in_avals, out_avals = closed.in_avals, closed.out_avals
    out_float = float_mask(out_avals)
    n = len(in_avals)

    def f(*args):
        outs, backward = vjp_flat(lambda *a: core.eval_jaxpr(closed.jaxpr, closed.consts, *a),
                                  args[:n], diff_mask)
        it = iter(args[n:])
        cts = backward([next(it) if fl else None for fl in out_float])
        diff_inputs = [p for p, d in zip(args[:n], diff_mask) if d]
        return [P.zeros_like(p) if c is None else c for c, p in zip(cts, diff_inputs)]

    return trace_to_jaxpr(f, list(in_avals) + [a for a, fl in zip(out_avals, out_float) if fl])
