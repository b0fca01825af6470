"""IR passes.  Every primitive is pure, so unused equations can always be dropped."""
from __future__ import annotations

import numpy as np

from .core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal


def dce(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Dead-code elimination: keep only equations that an output depends on."""
    jaxpr = closed.jaxpr
    live = {v for v in jaxpr.outs if type(v) is not Literal}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        outs = eqn.out_vars
        if (outs[0] in live) if len(outs) == 1 else not live.isdisjoint(outs):
            kept.append(eqn)
            for a in eqn.inputs:
                if type(a) is not Literal:
                    live.add(a)
    kept.reverse()
    const_pairs = [(v, c) for v, c in zip(jaxpr.const_vars, closed.consts) if v in live]
    new = Jaxpr([v for v, _ in const_pairs], jaxpr.in_vars, kept, jaxpr.outs)
    return ClosedJaxpr(new, [c for _, c in const_pairs], closed.in_tree, closed.out_tree)


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


def cse(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Common-subexpression elimination: equal equations on equal inputs are computed once."""
    jaxpr = closed.jaxpr
    rename: dict = {}
    seen: dict = {}
    eqns = []

    def atom(a):
        if type(a) is Literal:
            v = np.asarray(a.val)
            return ("lit", v.dtype.str, v.item())
        return id(rename.get(a, a))

    for eqn in jaxpr.eqns:
        inputs = [a if type(a) is Literal else rename.get(a, a) for a in eqn.inputs]
        key = (eqn.primitive, tuple(atom(a) for a in eqn.inputs), _param_key(eqn.params))
        prev = seen.get(key)
        if prev is not None:
            for old, new in zip(eqn.out_vars, prev.out_vars):
                rename[old] = new
            continue
        new_eqn = JaxprEqn(eqn.primitive, inputs, eqn.params, eqn.out_vars)
        seen[key] = new_eqn
        eqns.append(new_eqn)
    outs = [a if type(a) is Literal else rename.get(a, a) for a in jaxpr.outs]
    return ClosedJaxpr(Jaxpr(jaxpr.const_vars, jaxpr.in_vars, eqns, outs), closed.consts,
                       closed.in_tree, closed.out_tree)


def optimize(closed: ClosedJaxpr) -> ClosedJaxpr:
    """The default pipeline so far: CSE then DCE."""
    return dce(cse(closed))
