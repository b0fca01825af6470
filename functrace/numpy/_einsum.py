"""``einsum`` in all of numpy's forms: subscript strings (explicit or implicit output, ellipses)
and the sublist format, repeated labels within one operand (diagonals, traces), size-1
broadcasting; written with ``take`` (diagonals), ``reduce_sum`` and ``dot_general``, so it
differentiates and batches."""
from __future__ import annotations

import string as _string

import numpy as _np

from .. import arrays as _arrays
from .. import primitives as _P
from ..core.errors import ShapeError as _ShapeError
from ..core.errors import user_frame_description as _where_in_user_code
from ..precision import dot_operands as _dot_operands
from . import _base as _fnp

_LABELS = _string.ascii_letters


def _error(msg: str) -> ValueError:
    return ValueError(f"einsum: {msg} {_where_in_user_code()}")


def _sublist_to_string(sub) -> str:
    """numpy's sublist labels (ints in [0, 52), Ellipsis) as subscript letters."""
    out = []
    for s in sub:
        if s is Ellipsis:
            out.append("...")
        elif isinstance(s, (int, _np.integer)) and 0 <= s < len(_LABELS):
            out.append(_LABELS[int(s)])
        else:
            raise _error(f"sublist labels must be integers in [0, {len(_LABELS)}) or Ellipsis, got {s!r}")
    return "".join(out)


def _parse_arguments(args) -> tuple:
    """(subscripts string, operands) from either calling convention."""
    if not args:
        raise TypeError("einsum: no subscripts given")
    if isinstance(args[0], str):
        return args[0], list(args[1:])
    operands, terms = list(args[0::2]), list(args[1::2])
    out = operands.pop() if len(operands) > len(terms) else None  # a trailing output sublist
    if out is not None and not isinstance(out, (list, tuple)):
        raise _error("the sublist format takes operand, sublist pairs and an optional output sublist")
    subscripts = ",".join(_sublist_to_string(t) for t in terms)
    return subscripts + ("->" + _sublist_to_string(out) if out is not None else ""), operands


def _expand_ellipses(terms: list, out: str | None, ops: list) -> tuple:
    """Replace each ``...`` by fresh labels for the axes it covers (right-aligned across operands,
    as numpy broadcasts them); returns (terms, out, the ellipsis labels)."""
    used = set("".join(terms) + (out or ""))
    fresh = [c for c in _LABELS if c not in used]
    widths = []
    for t, o in zip(terms, ops):
        explicit = len(t.replace("...", ""))
        if "..." in t:
            if t.count("...") > 1:
                raise _error(f"more than one ellipsis in '{t}'")
            if o.ndim < explicit:
                raise _ShapeError(f"einsum: operand of shape {o.shape} has fewer axes than '{t}' names "
                                  f"{_where_in_user_code()}")
            widths.append(o.ndim - explicit)
    width = max(widths, default=0)
    if width > len(fresh):
        raise _error("too many axes under the ellipsis")
    ell = "".join(fresh[:width])
    terms = [t.replace("...", ell[width - (o.ndim - len(t.replace('...', ''))):] if width else "")
             if "..." in t else t for t, o in zip(terms, ops)]
    if out is not None:
        if out.count("...") > 1:
            raise _error(f"more than one ellipsis in the output '{out}'")
        out = out.replace("...", ell)
    return terms, out, ell


def _take_diagonals(term: str, x) -> tuple:
    """An operand whose term repeats a label: its diagonal over those axes (one axis per label)."""
    while True:
        repeated = next((c for c in term if term.count(c) > 1), None)
        if repeated is None:
            return term, x
        axes = [i for i, c in enumerate(term) if c == repeated]
        sizes = {x.shape[i] for i in axes}
        if len(sizes) != 1:
            raise _ShapeError(f"einsum: label '{repeated}' repeated over axes of different sizes "
                              f"{[x.shape[i] for i in axes]} {_where_in_user_code()}")
        n = sizes.pop()
        rest = [i for i in range(x.ndim) if i not in axes]
        x = _P.transpose(x, rest + axes)
        x = _fnp.reshape(x, tuple(x.shape[i] for i in range(len(rest))) + (n ** len(axes),))
        stride = sum(n ** k for k in range(len(axes)))  # element (i, i, ..., i) of the merged axes
        x = _P.take(x, _np.arange(n, dtype=_np.int64) * stride, len(rest))
        term = "".join(term[i] for i in rest) + repeated


def einsum(*operands, out=None, optimize="auto", precision=None, preferred_element_type=None):
    """numpy.einsum: ``einsum("ij,jk->ik", a, b)``, ``einsum(a, [0, 1], b, [1, 2], [0, 2])``,
    ``einsum("ii->i", a)``, ``einsum("...ij,...jk", a, b)``.  The contraction order is numpy's
    ``einsum_path`` for ``optimize`` ("auto" (JAX's default) / True: greedy; "greedy", "optimal", or
    an explicit path), left to right for ``optimize=False``; ``precision`` and
    ``preferred_element_type`` as jax.numpy's: the precision is checked and changes nothing
    (``ft.lax.Precision`` says why), a preferred dtype that holds the operands' values converts them
    first (so the products accumulate in it), another casts the result."""
    if out is not None:
        raise NotImplementedError("einsum: out= is not supported (arrays are immutable)")
    subscripts, ops = _parse_arguments(operands)
    ops = [_arrays.to_array(o) for o in ops]
    ops = list(_arrays.promote(*ops)) if len(ops) > 1 else ops
    out_dtype = None
    if precision is not None or preferred_element_type is not None:
        ops, out_dtype = _dot_operands("einsum", ops, precision, preferred_element_type)
    subscripts = subscripts.replace(" ", "")
    lhs, arrow, out_term = subscripts.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        raise _error(f"{len(terms)} operand subscripts for {len(ops)} operands")
    for t in terms + [out_term]:
        bad = set(t.replace("...", "")) - set(_LABELS)
        if bad:
            raise _error(f"invalid subscript characters {sorted(bad)} in '{subscripts}'")
    terms, out_term, ell = _expand_ellipses(terms, out_term if arrow else None, ops)
    for t, o in zip(terms, ops):
        if len(t) != o.ndim:
            raise _ShapeError(f"einsum: subscripts '{t}' do not match operand shape {o.shape} "
                              f"{_where_in_user_code()}")
    if out_term is None:  # implicit output: the ellipsis axes, then the labels used once, sorted
        counts: dict = {}
        for c in "".join(terms):
            counts[c] = counts.get(c, 0) + 1
        out_term = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    if len(set(out_term)) != len(out_term):
        raise _error(f"output subscript '{out_term}' repeats a label")
    missing = set(out_term) - set("".join(terms))
    if missing:
        raise _error(f"output labels {sorted(missing)} appear in no operand")
    # sizes, with size-1 axes broadcast against the other operands' sizes
    sizes: dict = {}
    for t, o in zip(terms, ops):
        for c, n in zip(t, o.shape):
            if n != 1:
                if sizes.get(c, n) != n:
                    raise _ShapeError(f"einsum: label '{c}' has sizes {sizes[c]} and {n} {_where_in_user_code()}")
                sizes[c] = n
    ops = [o if all(n != 1 or sizes.get(c, 1) == 1 for c, n in zip(t, o.shape))
           else _fnp.broadcast_to(o, tuple(sizes.get(c, 1) for c in t)) for t, o in zip(terms, ops)]
    terms, ops = map(list, zip(*(_take_diagonals(t, o) for t, o in zip(terms, ops))))
    result_term, result = _contract(terms, ops, out_term, _path(terms, ops, out_term, optimize))
    result = _P.transpose(result, tuple(result_term.index(c) for c in out_term))
    return result if out_dtype is None else _fnp.asarray(result, out_dtype)


def _sum_labels_not_in(term: str, x, keep: set) -> tuple:
    axes = tuple(i for i, c in enumerate(term) if c not in keep)
    if not axes:
        return term, x
    return "".join(c for c in term if c in keep), _P.reduce_sum(x, axes)


def _path(terms: list, ops: list, out_term: str, optimize) -> list:
    """The contraction order: numpy's einsum_path on the shapes (zero-stride stand-ins: no memory),
    or left to right."""
    if optimize is False or len(ops) < 3:
        return [(0, 1)] * (len(ops) - 1)
    if isinstance(optimize, (list, tuple)) and optimize and optimize[0] == "einsum_path":
        return [tuple(p) for p in optimize[1:]]
    strategy = optimize if optimize in ("greedy", "optimal") else "greedy"
    stand_ins = [_np.broadcast_to(_np.zeros((), _np.float64), o.shape) for o in ops]
    path = _np.einsum_path(",".join(terms) + "->" + out_term, *stand_ins, optimize=strategy)[0]
    return [tuple(p) for p in path[1:]]


def _contract(terms: list, ops: list, out_term: str, path: list) -> tuple:
    """Contractions in ``path`` order (numpy's convention: the operands at those positions are
    removed, their product appended), each by ``dot_general``; a label is summed as soon as no
    remaining operand and not the output names it."""
    terms, ops = list(terms), list(ops)
    for step in path:
        picked = [(terms.pop(i), ops.pop(i)) for i in sorted(step, reverse=True)][::-1]
        rest = set(out_term) | set("".join(terms))
        cur_t, cur = picked[0]
        for k in range(1, len(picked)):
            cur_t, cur = _contract_pair(cur_t, cur, *picked[k], rest | set("".join(t for t, _ in picked[k + 1:])))
        if len(picked) == 1:
            cur_t, cur = _sum_labels_not_in(cur_t, cur, rest)
        terms.append(cur_t)
        ops.append(cur)
    return _sum_labels_not_in(terms[0], ops[0], set(out_term))


def _contract_pair(cur_t: str, cur, t2: str, o2, later: set) -> tuple:
    """One ``dot_general`` of two operands; labels neither in ``later`` nor shared are summed first."""
    cur_t, cur = _sum_labels_not_in(cur_t, cur, later | set(t2))
    t2, o2 = _sum_labels_not_in(t2, o2, later | set(cur_t))
    shared = [c for c in cur_t if c in t2]
    batch = [c for c in shared if c in later]
    summed = [c for c in shared if c not in later]
    dims = ((tuple(cur_t.index(c) for c in summed), tuple(t2.index(c) for c in summed)),
            (tuple(cur_t.index(c) for c in batch), tuple(t2.index(c) for c in batch)))
    out = _P.dot_general(cur, o2, dims)
    return "".join(batch) + "".join(c for c in cur_t if c not in shared) + "".join(c for c in t2 if c not in shared), out


def einsum_path(subscripts, *operands, optimize="greedy"):
    """numpy.einsum_path on the operands' shapes (traced ones too)."""
    stand_ins = [_np.broadcast_to(_np.zeros((), _np.float64), _fnp.shape(o)) for o in operands]
    return _np.einsum_path(subscripts, *stand_ins, optimize=optimize)
