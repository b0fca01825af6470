"""The ``argsort`` primitive: the stable sorting permutation along the last axis.

Everything that sorts is built on it: ``sort`` gathers the operand by the permutation
(``take_along_axis``), so its derivative is a gather by the same permutation, as in JAX;
``top_k``, ``quantile``, ``median``, ``lexsort`` and ``unique(size=)`` follow.

Order: ascending with NaNs last (numpy's); ``descending=True`` is the exact reverse order of
keys with NaNs first, ties still in their original order (JAX's stable descending sort).
"""
from __future__ import annotations

import numpy as np

from ..core import ShapedArray
from ..core.errors import user_frame_description
from . import basic as P

argsort_p = P.new_primitive("argsort")


def _argsort_impl(x, *, descending):
    x = np.asarray(x)
    if not descending:
        return np.argsort(x, axis=-1, kind="stable").astype(np.int64)
    n = x.shape[-1]
    # a stable ascending sort of the reversed keys, reversed: descending, ties in original order
    return (n - 1 - np.argsort(x[..., ::-1], axis=-1, kind="stable"))[..., ::-1].astype(np.int64)


def _argsort_abstract(a, *, descending):
    if not a.shape:
        raise ValueError(f"argsort: the operand needs at least one axis {user_frame_description()}")
    if a.dtype.kind == "c":
        raise NotImplementedError("sorting complex values is not implemented in functrace")
    return ShapedArray(a.shape, np.dtype(np.int64))


argsort_p.impl = _argsort_impl
argsort_p.abstract_eval = _argsort_abstract
argsort_p.differentiable = False  # an integer permutation
argsort_p.batch = lambda vals, dims, *, descending: (
    argsort_p.bind(P.moveaxis(vals[0], dims[0], 0), descending=descending), 0)


def argsort_last(x, descending: bool = False):
    """The stable sorting permutation of ``x`` along its last axis (int64)."""
    return argsort_p.bind(x, descending=bool(descending))
