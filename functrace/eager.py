"""The eager array type: what ``functrace.numpy`` calls return outside any transformation.

``EagerArray`` is a subclass of ``numpy.ndarray`` that adds JAX's ``.at[...]`` functional
updates (``X = fnp.zeros((T, n)); X = X.at[t].set(x)``) and nothing else.

Why a numpy subclass rather than ``ft.Array`` (the OpenCL device array): eager results are
computed by numpy on the host, and users (and functrace's own tests) hand them straight to numpy,
scipy and matplotlib, compare them with ``np.testing``, pickle them and mutate them.  A subclass
keeps every one of those working unchanged (``isinstance(x, np.ndarray)`` holds, numpy functions
and methods accept it, ``np.asarray(x)`` returns the plain ndarray without a copy, pickling
round-trips), costs one ``view`` per eager call (no data copy), and still gives JAX code the
``.at`` it calls.  ``ft.Array`` would move every eager result behind a device abstraction that
numpy code cannot take without a conversion.  numpy ufuncs applied to an ``EagerArray`` return an
``EagerArray`` (numpy's subclass wrapping), so results stay updatable.
"""
from __future__ import annotations

import numpy as np


class EagerArray(np.ndarray):
    """A numpy array with JAX's ``.at[...]`` (functional index updates); it prints as numpy's."""

    @property
    def at(self):
        """``x.at[idx].set(v)`` / ``.add`` / ``.multiply`` / ``.min`` / ``.max`` / ``.get`` ...:
        a new array, ``x`` unchanged (see ``functrace/numpy/_indexing.py``)."""
        from .numpy._indexing import IndexUpdateHelper
        return IndexUpdateHelper(self)

    def __getitem__(self, index):
        """numpy's indexing; an index holding a traced value (``X[t]`` inside ``jit`` or ``scan``)
        is ``functrace.numpy.getitem``, as a JAX array indexed by a tracer."""
        if _holds_tracer(index):
            from .numpy import getitem
            return getitem(self, index)
        return super().__getitem__(index)

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))

    def __str__(self) -> str:
        return str(self.view(np.ndarray))


def _holds_tracer(index) -> bool:
    if isinstance(index, (np.ndarray, int, slice)) or index is None:  # the common cases, at once
        return False
    from .core import Tracer
    if isinstance(index, Tracer):
        return True
    return isinstance(index, (tuple, list)) and any(_holds_tracer(i) for i in index)


def as_eager(value):
    """``value`` as an ``EagerArray`` view when it is a plain ndarray (other values unchanged)."""
    return value.view(EagerArray) if type(value) is np.ndarray else value
