"""IR passes and the bookkeeping backends need.

Passes (each ``ClosedJaxpr -> ClosedJaxpr``; every primitive but the *effectful* ones
(``Primitive.effectful``: debug prints, callbacks, collectives) is pure, so any other equation
whose outputs are unused can go; effectful equations are never removed, merged or folded, and
no pass reorders equations -- but for ``merge_psums``, which joins consecutive ``psum`` equations
into one message, see its docstring):

* ``cse``: equal equations on equal inputs are computed once;
* ``fold_constants``: equations whose inputs are all known are evaluated at compile time
  (unless that would turn a small constant into a large one, e.g. a broadcast); a ``cond`` with
  a known index becomes the equations of the branch it takes;
* ``simplify``: the algebra differentiation leaves behind (``x*1``, ``x+0``, ``neg(neg x)``,
  chains of reshapes / transposes / broadcasts, identity conversions);
* ``dce``: dead-code elimination;
* ``merge_psums``: consecutive ``psum`` equations over one axis as one (``collectives.py``);
* ``inline_calls`` (not in the pipeline: a backend's last step): custom-rule calls and
  checkpoints replaced by their bodies.  The rules only matter to transformations, and the
  optimized program is still transformed when a jitted function is differentiated.

``analyze`` gives each value's last use, the values the backward phase reads from the
forward phase (saved residuals) and peak live bytes.  ``optimize`` runs the pipeline and
returns a report of equation counts per pass.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import primitives as P
from ..core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, ShapedArray, Tracer, Var
from ..primitives import broadcast_in_dim_p, convert_element_type_p, mul_p, reduce_sum_p, repeat_dtype, reshape_p

_FOLD_MAX_GROWTH = 4096  # fold only if the result has at most this many elements more than its inputs


def _rebuild(closed: ClosedJaxpr, const_vars, consts, eqns, outs) -> ClosedJaxpr:
    return ClosedJaxpr(Jaxpr(const_vars, closed.jaxpr.in_vars, eqns, outs), consts,
                       closed.in_tree, closed.out_tree)


def has_effects(eqn: JaxprEqn) -> bool:
    """Does running ``eqn`` do more than compute its outputs (an effectful primitive, or a
    sub-program -- a loop body, a branch -- holding one)?"""
    if eqn.primitive.effectful:
        return True
    for v in eqn.params.values():
        for sub in (v if isinstance(v, tuple) else (v,)):
            if isinstance(sub, (ClosedJaxpr, Jaxpr)) and any(
                    has_effects(e) for e in (sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub).eqns):
                return True
    return False


def without_effects(closed: ClosedJaxpr) -> ClosedJaxpr:
    """``closed`` without its equations that are only effects (no outputs: debug prints and
    callbacks), at any depth: a forward pass that reverse mode recomputes must not print again
    (as in JAX, the effect belongs to the primal pass).  Collectives compute values the
    recomputation uses: they stay (every process recomputes them in the same order)."""
    if not any(has_effects(e) for e in closed.jaxpr.eqns):
        return closed

    def strip(v):
        if isinstance(v, tuple) and v and all(isinstance(s, ClosedJaxpr) for s in v):
            return tuple(without_effects(s) for s in v)
        return without_effects(v) if isinstance(v, ClosedJaxpr) else v
    eqns = [JaxprEqn(e.primitive, e.inputs, {k: strip(v) for k, v in e.params.items()}, e.out_vars, e.phase)
            for e in closed.jaxpr.eqns if not (e.primitive.effectful and not e.out_vars)]
    return _rebuild(closed, closed.jaxpr.const_vars, closed.consts, eqns, closed.jaxpr.outs)


def dce(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Dead-code elimination: keep only equations that an output depends on, and effects."""
    jaxpr = closed.jaxpr
    live = {v for v in jaxpr.outs if type(v) is not Literal}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        outs = eqn.out_vars
        if ((outs[0] in live) if len(outs) == 1 else not live.isdisjoint(outs)) or has_effects(eqn):
            kept.append(eqn)
            for a in eqn.inputs:
                if type(a) is not Literal:
                    live.add(a)
    kept.reverse()
    pairs = [(v, c) for v, c in zip(jaxpr.const_vars, closed.consts) if v in live]
    return _rebuild(closed, [v for v, _ in pairs], [c for _, c in pairs], kept, jaxpr.outs)



def prune_inputs(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list[bool]]:
    """``closed`` without the inputs nothing reads, and the mask of the inputs kept: a call
    then passes (and so keeps alive, e.g. saved for the backward phase) only what it uses."""
    jaxpr = closed.jaxpr
    read = {a for e in jaxpr.eqns for a in e.inputs if type(a) is not Literal}
    read.update(a for a in jaxpr.outs if type(a) is not Literal)
    kept = [v in read for v in jaxpr.in_vars]
    return ClosedJaxpr(Jaxpr(jaxpr.const_vars, [v for v, k in zip(jaxpr.in_vars, kept) if k], jaxpr.eqns,
                             jaxpr.outs), closed.consts), kept


def unique_outputs(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list[int]]:
    """``closed`` returning each variable once, and for each original output the position of
    the returned value giving it: a value returned twice (an output that is also a residual)
    would otherwise be two values, both counted as saved."""
    first: dict = {}
    outs, source = [], []
    for a in closed.jaxpr.outs:
        if type(a) is not Literal and a in first:
            source.append(first[a])
            continue
        if type(a) is not Literal:
            first[a] = len(outs)
        source.append(len(outs))
        outs.append(a)
    return _rebuild(closed, closed.jaxpr.const_vars, closed.consts, closed.jaxpr.eqns, outs), source

def _param_key(v):
    if isinstance(v, np.ndarray):
        return ("array", v.shape, v.dtype.str, v.tobytes())
    if isinstance(v, (list, tuple)):
        return tuple(_param_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _param_key(x)) for k, x in v.items()))
    try:
        hash(v)
        return v
    except TypeError:
        return ("id", id(v))


def _literal_key(a: Literal):
    v = np.asarray(a.val)
    return ("lit", v.dtype.str, v.item())


class _Renamer:
    """Substitutions of variables by other variables or literals, applied to atoms."""

    def __init__(self):
        self.map: dict = {}

    def __call__(self, a):
        if type(a) is Literal:
            return a
        while a in self.map:
            a = self.map[a]
            if type(a) is Literal:
                break
        return a


def cse(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Common-subexpression elimination: equal equations on equal inputs are computed once
    (effects happen each time: never merged)."""
    rename = _Renamer()
    seen: dict = {}
    eqns = []
    for eqn in closed.jaxpr.eqns:
        inputs = [rename(a) for a in eqn.inputs]
        if has_effects(eqn):
            eqns.append(JaxprEqn(eqn.primitive, inputs, eqn.params, eqn.out_vars, eqn.phase))
            continue
        key = (eqn.primitive, tuple(_literal_key(a) if type(a) is Literal else a for a in inputs),
               _param_key(eqn.params))
        prev = seen.get(key)
        if prev is not None:
            for old, new in zip(eqn.out_vars, prev.out_vars):
                rename.map[old] = new
            continue
        new_eqn = JaxprEqn(eqn.primitive, inputs, eqn.params, eqn.out_vars, eqn.phase)
        seen[key] = new_eqn
        eqns.append(new_eqn)
    return _rebuild(closed, closed.jaxpr.const_vars, closed.consts, eqns, [rename(a) for a in closed.jaxpr.outs])


def shape_size(shape) -> int:
    """Elements of an array of this shape (math.prod: np.prod costs ~5 us a call)."""
    return math.prod(int(d) for d in shape)


def _static_branch(eqn: JaxprEqn, vals: list):
    """The branch a ``cond``/``switch`` equation with a known index takes (clamped, as its
    impl does), or None."""
    if eqn.primitive.branches_param is None or vals[0] is _MISSING:
        return None
    branches = eqn.params[eqn.primitive.branches_param]
    return branches[int(np.clip(int(np.asarray(vals[0])), 0, len(branches) - 1))]


def fold_constants(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Evaluate equations whose inputs are all constants (when the result stays small); a
    ``cond`` whose index is known is replaced by the equations of the branch it takes."""
    known = {v: c for v, c in zip(closed.jaxpr.const_vars, closed.consts) if not isinstance(c, Tracer)}
    const_vars, consts = list(closed.jaxpr.const_vars), list(closed.consts)
    rename = _Renamer()
    eqns = []
    pending = list(reversed(closed.jaxpr.eqns))  # a stack: an inlined branch's equations go on top
    while pending:
        eqn = pending.pop()
        inputs = [rename(a) for a in eqn.inputs]
        vals = [a.val if type(a) is Literal else known.get(a, _MISSING) for a in inputs]
        branch = _static_branch(eqn, vals)
        if branch is not None:
            n_consts = len(const_vars)
            body_eqns, outs = _copy_body(branch, inputs[1:], eqn.phase, const_vars, consts)
            known.update((v, c) for v, c in zip(const_vars[n_consts:], consts[n_consts:]) if not isinstance(c, Tracer))
            rename.map.update(zip(eqn.out_vars, outs))
            pending.extend(reversed(body_eqns))
            continue
        foldable = (not eqn.primitive.multiple_results and eqn.primitive.impl is not None
                    and all(v is not _MISSING for v in vals) and not has_effects(eqn)
                    and shape_size(eqn.out_vars[0].aval.shape) <= _FOLD_MAX_GROWTH + max(
                        [shape_size(np.shape(v)) for v in vals], default=0))
        if foldable:
            out = np.asarray(eqn.primitive.impl(*vals, **eqn.params))
            var = eqn.out_vars[0]
            if out.shape == ():
                rename.map[var] = Literal(out.astype(var.aval.dtype)[()])
            else:
                known[var] = out
                const_vars.append(var)
                consts.append(out)
            continue
        eqns.append(JaxprEqn(eqn.primitive, inputs, eqn.params, eqn.out_vars, eqn.phase))
    return _rebuild(closed, const_vars, consts, eqns, [rename(a) for a in closed.jaxpr.outs])


_MISSING = object()


def _is_scalar_literal(a, value) -> bool:
    return type(a) is Literal and np.asarray(a.val).item() == value


def _unit_reshape_dims(src: tuple, mid: tuple, dims: tuple, out: tuple):
    """Broadcast dimensions taking ``src`` straight to ``out`` when ``src -> mid`` only adds or
    removes unit axes and ``mid`` broadcasts to ``out`` along ``dims``; None if impossible."""
    mid_targets = [d for n, d in zip(mid, dims) if n != 1]
    if [n for n in src if n != 1] != [n for n in mid if n != 1]:
        return None
    it = iter(mid_targets)
    targets = [next(it) if n != 1 else None for n in src]
    used = set(t for t in targets if t is not None)
    prev = -1
    for i, t in enumerate(targets):
        if t is None:  # a unit axis: the first free output position before the next fixed one
            nxt = next((u for u in targets[i + 1:] if u is not None), len(out))
            t = next((c for c in range(prev + 1, nxt) if c not in used), None)
            if t is None:
                return None
            targets[i] = t
            used.add(t)
        prev = t
    return tuple(targets)


def _swapped_dot(dot_eqn: JaxprEqn, perm: tuple):
    """Dimension numbers computing ``transpose(dot(x, y), perm)`` as ``dot(y, x)`` directly, when the
    permutation just swaps the lhs-free and rhs-free blocks (no batch dimensions); else None."""
    (lc, rc), (lb, rb) = dot_eqn.params["dimension_numbers"]
    if lb:
        return None
    nl = len(dot_eqn.inputs[0].aval.shape) - len(lc)
    nr = len(dot_eqn.inputs[1].aval.shape) - len(rc)
    if tuple(perm) != tuple(range(nl, nl + nr)) + tuple(range(nl)):
        return None
    return ((rc, lc), ((), ()))


def _simplify_eqn(eqn: JaxprEqn, inputs: list, producer: dict, uses: dict):
    """Return an atom equal to the equation's output, a replacement equation, or None."""
    prim = eqn.primitive
    out = eqn.out_vars[0]
    same_shape = lambda a: a.aval.shape == out.aval.shape and a.aval.dtype == out.aval.dtype
    if prim is P.mul_p:
        x, y = inputs
        if _is_scalar_literal(y, 1) and same_shape(x):
            return x
        if _is_scalar_literal(x, 1) and same_shape(y):
            return y
        # (v * c1) * c2 -> v * (c1 * c2) for scalar literals, when the inner product has no other use
        lit, var = (x, y) if type(x) is Literal else (y, x)
        prev = producer.get(var) if type(lit) is Literal and type(var) is not Literal else None
        if prev is not None and prev.primitive is P.mul_p and uses.get(var) == 1:
            a, b = prev.inputs
            inner_lit, inner_var = (a, b) if type(a) is Literal else (b, a)
            if type(inner_lit) is Literal and type(inner_var) is not Literal and np.shape(inner_lit.val) == () \
                    and np.shape(lit.val) == ():
                c = Literal(np.asarray(np.asarray(inner_lit.val) * np.asarray(lit.val), dtype=out.aval.dtype)[()])
                return JaxprEqn(eqn.primitive, [inner_var, c], {}, eqn.out_vars, eqn.phase)
    elif prim in (P.add_p, P.sub_p):
        x, y = inputs
        if _is_scalar_literal(y, 0) and same_shape(x):
            return x
        if prim is P.add_p and _is_scalar_literal(x, 0) and same_shape(y):
            return y
    elif prim is P.div_p:
        if _is_scalar_literal(inputs[1], 1) and same_shape(inputs[0]):
            return inputs[0]
    elif prim is P.integer_pow_p and eqn.params["y"] == 1:
        return inputs[0]
    elif prim in (P.neg_p, P.reshape_p, P.transpose_p, P.broadcast_in_dim_p, P.convert_element_type_p):
        x = inputs[0]
        if type(x) is not Literal and same_shape(x) and prim in (P.reshape_p, P.convert_element_type_p):
            return x
        if prim is P.transpose_p and eqn.params["permutation"] == tuple(range(len(out.aval.shape))):
            return x
        prev = producer.get(x)
        if prev is None or not prev.inputs:  # (an operand-free producer: axis_index)
            return None
        inner = prev.inputs[0]
        if prim is P.neg_p and prev.primitive is P.neg_p:
            return inner
        if prim is P.reshape_p and prev.primitive in (P.reshape_p, P.expand_dims_p, P.squeeze_p):
            if type(inner) is not Literal and same_shape(inner):
                return inner
            return JaxprEqn(eqn.primitive, [inner], eqn.params, eqn.out_vars, eqn.phase)
        if prim is P.transpose_p and prev.primitive is P.dot_general_p and uses.get(x) == 1:
            swapped = _swapped_dot(prev, eqn.params["permutation"])
            if swapped is not None:
                return JaxprEqn(prev.primitive, [prev.inputs[1], prev.inputs[0]], {"dimension_numbers": swapped},
                                eqn.out_vars, eqn.phase)
        if prim is P.transpose_p and prev.primitive is P.transpose_p:
            p1, p2 = prev.params["permutation"], eqn.params["permutation"]
            perm = tuple(p1[i] for i in p2)
            if perm == tuple(range(len(perm))):
                return inner
            return JaxprEqn(eqn.primitive, [inner], {"permutation": perm}, eqn.out_vars, eqn.phase)
        if prim is P.broadcast_in_dim_p and prev.primitive in (P.reshape_p, P.squeeze_p, P.expand_dims_p):
            dims = _unit_reshape_dims(inner.aval.shape, x.aval.shape, eqn.params["broadcast_dimensions"],
                                      eqn.params["shape"])
            if dims is not None and type(inner) is not Literal:
                return JaxprEqn(eqn.primitive, [inner], {"shape": eqn.params["shape"], "broadcast_dimensions": dims},
                                eqn.out_vars, eqn.phase)
        if prim is P.broadcast_in_dim_p and prev.primitive is P.broadcast_in_dim_p:
            d1, d2 = prev.params["broadcast_dimensions"], eqn.params["broadcast_dimensions"]
            return JaxprEqn(eqn.primitive, [inner], {"shape": eqn.params["shape"],
                                                     "broadcast_dimensions": tuple(d2[d] for d in d1)},
                            eqn.out_vars, eqn.phase)
    elif prim is P.reduce_sum_p and not eqn.params["axes"]:
        return inputs[0]
    elif prim is P.dot_general_p:
        return _fold_transposes_into_dot(eqn, inputs, producer)
    return None


def _fold_transposes_into_dot(eqn: JaxprEqn, inputs: list, producer: dict):
    """``dot_general(transpose(x), y)`` reads x through its dimension numbers instead (no copy),
    when the free dimensions keep their relative order (so the output layout is unchanged)."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    new_inputs, dims, changed = list(inputs), [[lc, lb], [rc, rb]], False
    for k, a in enumerate(inputs):
        prev = producer.get(a) if type(a) is not Literal else None
        if prev is None or prev.primitive is not P.transpose_p:
            continue
        perm = prev.params["permutation"]
        contract, batch = dims[k]
        free = [i for i in range(len(perm)) if i not in contract and i not in batch]
        mapped_free = [perm[i] for i in free]
        if mapped_free != sorted(mapped_free):
            continue
        dims[k] = [tuple(perm[i] for i in contract), tuple(perm[i] for i in batch)]
        new_inputs[k] = prev.inputs[0]
        changed = True
    if not changed:
        return None
    dn = ((dims[0][0], dims[1][0]), (dims[0][1], dims[1][1]))
    return JaxprEqn(eqn.primitive, new_inputs, {"dimension_numbers": dn}, eqn.out_vars, eqn.phase)


def _uniform_value(c):
    """The scalar a constant array holds everywhere, if it is a broadcast scalar (else None)."""
    if not isinstance(c, np.ndarray) or c.size == 0:
        return None
    first = c.reshape(-1)[0]
    if c.size == 1 or all(s == 0 for s in c.strides):
        return first
    if c.size <= _UNIFORM_CHECK_MAX and c.dtype.kind in "fiub" and np.all(c == first):
        return first  # e.g. a cotangent seed of ones materialized by an eager rule
    return None


_UNIFORM_CHECK_MAX = 1 << 16


def _implicit_broadcasts(eqn: JaxprEqn, inputs: list, producer: dict, eqns: list) -> list:
    """Let an elementwise op broadcast its operands itself (numpy rules) instead of reading a
    materialized ``broadcast_in_dim``: the operand is used as is, or through a cheap reshape to
    its keep-dims form (which CSE then shares, e.g. with a forward ``keepdims`` reshape)."""
    out_shape = eqn.out_vars[0].aval.shape
    new_inputs = list(inputs)
    for k, a in enumerate(inputs):
        prev = producer.get(a) if type(a) is not Literal else None
        if prev is None or prev.primitive is not broadcast_in_dim_p or type(prev.inputs[0]) is Literal:
            continue
        src = prev.inputs[0]
        dims = prev.params["broadcast_dimensions"]
        keep = [1] * len(out_shape)
        if len(prev.params["shape"]) != len(out_shape):
            continue
        for i, d in enumerate(dims):
            keep[d] = src.aval.shape[i]
        keep = tuple(keep)
        others = [b.aval.shape for j, b in enumerate(new_inputs) if j != k]
        if tuple(np.broadcast_shapes(keep, *others)) != out_shape:
            continue  # the broadcast is what gives the output its shape
        if src.aval.shape == keep or len(src.aval.shape) < len(keep) and \
                src.aval.shape == keep[len(keep) - len(src.aval.shape):] and \
                tuple(np.broadcast_shapes(src.aval.shape, *others)) == out_shape:  # (rank kept by another)
            new_inputs[k] = src
            continue
        var = Var(ShapedArray(keep, src.aval.dtype, src.aval.weak_type))
        reshape_eqn = JaxprEqn(reshape_p, [src], {"new_sizes": keep}, [var], prev.phase)
        producer[var] = reshape_eqn
        eqns.append(reshape_eqn)
        new_inputs[k] = var
    return new_inputs


def _sum_of_broadcast(eqn: JaxprEqn, inputs: list, producer: dict, eqns: list):
    """``reduce_sum(broadcast_in_dim(y))`` over broadcast axes is ``count * reduce_sum(y)``: an
    atom or equation computing that (its helper equations appended to ``eqns``), else None.

    Summing the ``count`` copies one by one costs O(count) and, in float32, loses the sum: a
    kernel's per-lane accumulators stop growing at 2^24 additions (a 1e12-element broadcast summed
    to 2^36).  The product is rounded once: in float64 when ``count`` is not exact in the dtype."""
    prev = producer.get(inputs[0]) if type(inputs[0]) is not Literal else None
    if prev is None or prev.primitive is not broadcast_in_dim_p:
        return None
    y, shape, dims = prev.inputs[0], prev.params["shape"], prev.params["broadcast_dimensions"]
    axes, out = eqn.params["axes"], eqn.out_vars[0]
    dtype = out.aval.dtype
    source = {d: i for i, d in enumerate(dims)}
    count = math.prod(shape[d] for d in axes if d not in source or y.aval.shape[source[d]] != shape[d])
    if count <= 1 or dtype.kind not in "fciu":
        return None
    wide = repeat_dtype(dtype)
    factor = np.array(count).astype(wide)

    def add_eqn(prim, ins, params, aval):
        var = Var(aval)
        new = JaxprEqn(prim, ins, params, [var], eqn.phase)
        producer[var] = new
        eqns.append(new)
        return var
    reduced = tuple(i for i, d in enumerate(dims) if d in axes)
    kept_shape = tuple(n for i, n in enumerate(y.aval.shape) if i not in reduced)
    if type(y) is Literal:  # a broadcast scalar: the product is a literal
        scaled = Literal(np.asarray(np.asarray(y.val, wide) * factor).astype(dtype)[()])
    else:
        part = add_eqn(reduce_sum_p, [y], {"axes": reduced}, ShapedArray(kept_shape, dtype, y.aval.weak_type)) \
            if reduced else y
        if factor.astype(dtype) == factor:  # exact in the dtype: one correctly rounded product
            scaled = add_eqn(mul_p, [part, Literal(factor.astype(dtype)[()])], {}, part.aval)
        else:
            wide_part = add_eqn(convert_element_type_p, [part], {"new_dtype": wide}, ShapedArray(kept_shape, wide))
            product = add_eqn(mul_p, [wide_part, Literal(factor[()])], {}, wide_part.aval)
            scaled = add_eqn(convert_element_type_p, [product], {"new_dtype": dtype}, part.aval)
    position = {d: d - sum(a < d for a in axes) for d in range(len(shape)) if d not in axes}
    new_dims = tuple(position[d] for i, d in enumerate(dims) if i not in reduced)
    if kept_shape == out.aval.shape and new_dims == tuple(range(len(new_dims))):
        return scaled
    return JaxprEqn(broadcast_in_dim_p, [scaled], {"shape": out.aval.shape, "broadcast_dimensions": new_dims},
                    eqn.out_vars, eqn.phase)


def simplify(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Algebraic simplification of the zeros, ones, reshapes and transposes autodiff leaves."""
    rename = _Renamer()
    producer: dict = {}
    eqns = []
    uniform = {v: Literal(u) for v, c in zip(closed.jaxpr.const_vars, closed.consts)
               if (u := _uniform_value(c)) is not None}
    uses: dict = {}
    for a in [a for e in closed.jaxpr.eqns for a in e.inputs] + list(closed.jaxpr.outs):
        if type(a) is not Literal:
            uses[a] = uses.get(a, 0) + 1
    for eqn in closed.jaxpr.eqns:
        inputs = [rename(a) for a in eqn.inputs]
        if eqn.primitive.elementwise and uniform:
            # a broadcast-scalar constant operand becomes a literal when another operand
            # already has the output's shape (numpy broadcasting makes them equivalent)
            out_shape = eqn.out_vars[0].aval.shape
            if any(type(a) is not Literal and a.aval.shape == out_shape and a not in uniform for a in inputs):
                inputs = [uniform.get(a, a) if type(a) is not Literal else a for a in inputs]
        if eqn.primitive.elementwise:
            inputs = _implicit_broadcasts(eqn, inputs, producer, eqns)
        result = None if eqn.primitive.multiple_results else _simplify_eqn(eqn, inputs, producer, uses)
        if result is None and eqn.primitive is reduce_sum_p:
            result = _sum_of_broadcast(eqn, inputs, producer, eqns)
        if isinstance(result, JaxprEqn):
            eqn, inputs = result, result.inputs
            result = None
        if result is not None:
            rename.map[eqn.out_vars[0]] = result
            continue
        new = JaxprEqn(eqn.primitive, inputs, eqn.params, eqn.out_vars, eqn.phase)
        for v in eqn.out_vars:
            producer[v] = new
        eqns.append(new)
    return _rebuild(closed, closed.jaxpr.const_vars, closed.consts, eqns, [rename(a) for a in closed.jaxpr.outs])


def merge_psums(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Consecutive equations of a ``merges_consecutive`` primitive (``psum``) with equal params
    become one (a psum's small operands then travel in one MPI message, see ``collectives.py``).
    An equation moves down to the next one it joins only across equations that do not read its
    outputs and have no effects (so effects keep their order and every process still runs the
    same collectives in the same order); equations of different phases (forward / backward) are
    not merged."""
    eqns: list = []
    pending = None  # index in ``eqns`` of the psum the next one may join, and its outputs
    for eqn in closed.jaxpr.eqns:
        if eqn.primitive.merges_consecutive:
            if pending is not None:
                index, outputs = pending
                earlier = eqns[index]
                if earlier.primitive is eqn.primitive and earlier.params == eqn.params and earlier.phase == eqn.phase and \
                        not any(a in outputs for a in eqn.inputs if type(a) is not Literal):
                    eqns[index] = None
                    eqn = JaxprEqn(eqn.primitive, earlier.inputs + eqn.inputs, eqn.params,
                                   earlier.out_vars + eqn.out_vars, eqn.phase)
            eqns.append(eqn)
            pending = len(eqns) - 1, set(eqn.out_vars)
            continue
        if pending is not None and (has_effects(eqn) or any(
                a in pending[1] for a in eqn.inputs if type(a) is not Literal)):
            pending = None
        eqns.append(eqn)
    if None not in eqns:
        return closed
    return ClosedJaxpr(Jaxpr(closed.jaxpr.const_vars, closed.jaxpr.in_vars, [e for e in eqns if e is not None],
                             closed.jaxpr.outs), closed.consts, closed.in_tree, closed.out_tree)


PIPELINE = (("fold_constants", fold_constants), ("simplify", simplify), ("cse", cse), ("dce", dce),
            ("merge_psums", merge_psums))


@dataclass
class Analysis:
    """Buffer bookkeeping of an optimized program."""

    last_use: dict = field(default_factory=dict)     # Var -> index of the last equation reading it
    saved_for_backward: list = field(default_factory=list)  # forward values read by backward equations
    peak_bytes: int = 0
    peak_at: int = -1


def aval_nbytes(aval) -> int:
    return shape_size(aval.shape) * aval.dtype.itemsize


def analyze(closed: ClosedJaxpr) -> Analysis:
    """Last uses (for freeing buffers), residuals saved for the backward phase, peak live bytes."""
    jaxpr = closed.jaxpr
    n = len(jaxpr.eqns)
    last_use: dict = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for a in eqn.inputs:
            if type(a) is not Literal:
                last_use[a] = i
    for a in jaxpr.outs:
        if type(a) is not Literal:
            last_use[a] = n  # outputs live to the end
    forward_defined = set(jaxpr.in_vars) | set(jaxpr.const_vars)
    saved: dict = {}
    for eqn in jaxpr.eqns:
        if eqn.phase == "backward":
            for a in eqn.inputs:
                if type(a) is not Literal and a in forward_defined:
                    saved[a] = None
        else:
            forward_defined.update(eqn.out_vars)
    # peak of live intermediate bytes (inputs and constants are owned by the caller)
    live = 0
    peak, peak_at = 0, -1
    dying: dict = {}
    for v, i in last_use.items():
        dying.setdefault(i, []).append(v)
    produced = set()
    for i, eqn in enumerate(jaxpr.eqns):
        for v in eqn.out_vars:
            live += aval_nbytes(v.aval)
            produced.add(v)
        if live > peak:
            peak, peak_at = live, i
        for v in dying.get(i, ()):
            if v in produced:
                live -= aval_nbytes(v.aval)
    return Analysis(last_use, list(saved), peak, peak_at)


@dataclass
class Report:
    """What each pass did, and the buffer analysis of the result."""

    counts: list  # [(stage, equation count)]
    analysis: Analysis

    def __str__(self) -> str:
        lines = ["pass                 equations"]
        for name, n in self.counts:
            lines.append(f"{name:<20} {n:>9}")
        a = self.analysis
        lines.append(f"saved for backward: {len(a.saved_for_backward)} values, "
                     f"{sum(aval_nbytes(v.aval) for v in a.saved_for_backward)} bytes")
        lines.append(f"peak live intermediate bytes: {a.peak_bytes}")
        return "\n".join(lines)

    __repr__ = __str__


def _copy_body(body: ClosedJaxpr, inputs: list, phase, const_vars: list, consts: list) -> tuple[list, list]:
    """The equations of ``body`` applied to the atoms ``inputs``, on fresh variables (one body may
    be inlined several times), in phase ``phase``; the body's constants are appended to
    ``const_vars``/``consts``.  Returns (equations, the atoms of the body's outputs)."""
    env = dict(zip(body.jaxpr.in_vars, inputs))
    for v, c in zip(body.jaxpr.const_vars, body.consts):
        env[v] = Var(v.aval)
        const_vars.append(env[v])
        consts.append(c)
    get = lambda a: env.get(a, a) if type(a) is not Literal else a
    eqns = []
    for e in body.jaxpr.eqns:
        outs = [Var(v.aval) for v in e.out_vars]
        env.update(zip(e.out_vars, outs))
        eqns.append(JaxprEqn(e.primitive, [get(a) for a in e.inputs], e.params, outs, phase))
    return eqns, [get(a) for a in body.jaxpr.outs]


def inline_calls(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Replace every call with an ``inline_body`` (at any depth) by the body's equations, on
    fresh variables (one body may be called several times); the body's constants join the
    program's."""
    if not any(e.primitive.inline_body for e in closed.jaxpr.eqns):
        return closed
    const_vars, consts = list(closed.jaxpr.const_vars), list(closed.consts)
    subst: dict = {}  # an inlined call's output var -> the atom its body computed
    get = lambda a: subst.get(a, a) if type(a) is not Literal else a
    eqns: list = []
    for eqn in closed.jaxpr.eqns:
        inputs = [get(a) for a in eqn.inputs]
        if not eqn.primitive.inline_body:
            eqns.append(JaxprEqn(eqn.primitive, inputs, eqn.params, eqn.out_vars, eqn.phase))
            continue
        body = inline_calls(eqn.params[eqn.primitive.inline_body])
        body_eqns, outs = _copy_body(body, inputs, eqn.phase, const_vars, consts)
        eqns.extend(body_eqns)
        subst.update(zip(eqn.out_vars, outs))
    return _rebuild(closed, const_vars, consts, eqns, [get(a) for a in closed.jaxpr.outs])


def optimize(closed: ClosedJaxpr, passes=PIPELINE) -> tuple[ClosedJaxpr, Report]:
    """Run the pass pipeline; returns the optimized program and a report."""
    counts = [("input", len(closed.eqns))]
    for name, p in passes:
        closed = p(closed)
        counts.append((name, len(closed.eqns)))
    return closed, Report(counts, analyze(closed))


def partial_eval(closed: ClosedJaxpr, unknown_inputs, saveable) -> tuple[ClosedJaxpr, ClosedJaxpr, list]:
    """Split a program into a *known* part (computable from the known inputs now) and an
    *unknown* part (needing the unknown inputs), as reverse mode does for fwd/bwd.

    ``saveable(eqn) -> bool`` decides which known values the unknown part may read as saved
    residuals; the other known values it needs are recomputed inside it (rematerialization).
    Returns ``(known, unknown, known_out_mask)`` where ``known`` maps the known inputs to the
    known outputs plus residuals, and ``unknown`` maps [known inputs, residuals, unknown
    inputs] to the unknown outputs.
    """
    jaxpr = closed.jaxpr
    unknown = {v for v, u in zip(jaxpr.in_vars, unknown_inputs) if u}
    known_eqns, unknown_eqns = [], []
    for eqn in jaxpr.eqns:
        if any(type(a) is not Literal and a in unknown for a in eqn.inputs):
            unknown.update(eqn.out_vars)
            unknown_eqns.append(eqn)
        else:
            known_eqns.append(eqn)
    known_out_mask = [type(a) is Literal or a not in unknown for a in jaxpr.outs]
    producer = {v: e for e in known_eqns for v in e.out_vars}
    known_in = [v for v, u in zip(jaxpr.in_vars, unknown_inputs) if not u]
    # residuals: known values read by the unknown part; unsaveable ones are recomputed
    needed = [a for e in unknown_eqns for a in e.inputs] + [a for a, k in zip(jaxpr.outs, known_out_mask) if not k]
    residuals: dict = {}  # ordered set
    recompute: set = set()
    stack = [a for a in needed if type(a) is not Literal and a not in unknown]
    while stack:
        v = stack.pop()
        if v in residuals or v in known_in or v in jaxpr.const_vars:
            continue
        eqn = producer[v]
        if eqn in recompute:
            continue
        if saveable(eqn):
            residuals[v] = None
        else:
            recompute.add(eqn)
            stack.extend(a for a in eqn.inputs if type(a) is not Literal)
    res_vars = list(residuals)
    known = dce(ClosedJaxpr(Jaxpr(jaxpr.const_vars, known_in, known_eqns,
                                  [a for a, k in zip(jaxpr.outs, known_out_mask) if k] + res_vars), closed.consts))
    unknown_in = [v for v, u in zip(jaxpr.in_vars, unknown_inputs) if u]
    rec_eqns = [e for e in known_eqns if e in recompute]
    unk = ClosedJaxpr(Jaxpr(jaxpr.const_vars, known_in + res_vars + unknown_in, rec_eqns + unknown_eqns,
                            [a for a, k in zip(jaxpr.outs, known_out_mask) if not k]), closed.consts)
    return known, dce(unk), known_out_mask
