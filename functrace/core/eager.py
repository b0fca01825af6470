"""The eager array type: what ``functrace.numpy`` calls return outside any transformation.

``EagerArray`` is a subclass of ``numpy.ndarray`` that adds JAX's ``.at[...]`` functional
updates (``X = fnp.zeros((T, n)); X = X.at[t].set(x)``) and JAX's rules a JAX program relies on:
immutability, clamped out-of-range reads, functrace's shape errors and ``Array(...)`` printing --
one behaviour eagerly and under ``jit``.

Why a numpy subclass rather than ``ft.Array`` (the OpenCL device array): eager results are
computed by numpy on the host, and users (and functrace's own tests) hand them straight to numpy,
scipy and matplotlib, compare them with ``np.testing`` and pickle them.  A subclass
keeps every one of those working unchanged (``isinstance(x, np.ndarray)`` holds, numpy functions
and methods accept it, ``np.asarray(x)`` returns the plain ndarray without a copy, pickling
round-trips), costs one ``view`` per eager call (no data copy), and still gives JAX code the
``.at`` it calls.  ``np.asarray(x)`` is the way to a mutable numpy array.  ``ft.Array`` would move every eager result behind a device abstraction that
numpy code cannot take without a conversion.  numpy ufuncs applied to an ``EagerArray`` return an
``EagerArray`` (numpy's subclass wrapping), so results stay updatable.
"""
from __future__ import annotations

import numpy as np

from .array import Array

IMMUTABLE = ("functrace arrays are immutable, as JAX's: `x[i] = v` cannot change one (eagerly or traced); "
             "write x = x.at[i].set(v) instead")


class EagerArray(np.ndarray):
    """A numpy array with JAX's ``.at[...]`` (functional index updates) and JAX's rules where a
    JAX program depends on them: immutable (``x[i] = v`` raises, ``x += 1`` makes a new array),
    out-of-range reads clamp, shape errors are functrace's ``ShapeError`` as under ``jit``; it
    prints as ``Array(...)``, as jitted results do.

    What needs ``functrace.numpy`` (``.at``, indexing with traced or out-of-range indices, the
    operators' shape errors) is installed by ``functrace/numpy/_tracer_methods.py``, with the
    tracers' operators: this module sits below the numpy API and imports nothing of functrace."""

    def __setitem__(self, index, value):
        raise TypeError(IMMUTABLE)

    def __iter__(self):
        """numpy iterates by indexing until an IndexError, which clamped reads never raise."""
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        item = np.ndarray.__getitem__
        return (item(self, i) for i in range(len(self)))

    def __repr__(self) -> str:
        return array_repr(self.view(np.ndarray))

    def block_until_ready(self) -> "EagerArray":
        """Itself: computed when it was made (as ``jax.Array.block_until_ready``)."""
        return self

    def devices(self) -> set:
        """Where it lives: the host's memory, ``{"cpu"}`` (numpy's ``.device``)."""
        return {self.device}

    def __str__(self) -> str:
        return str(self.view(np.ndarray))

    def __format__(self, spec: str) -> str:
        """As numpy scalars format (``f"{loss:.6f}"``) for a 0-d array, else as ``str``."""
        if self.ndim == 0:
            return format(self.view(np.ndarray)[()], spec)
        return super().__format__(spec)


def array_repr(value: np.ndarray) -> str:
    """JAX's form for every functrace array: ``Array([1., 2.], dtype=float32)``."""
    body = np.array2string(value, separator=", ", prefix="Array(")
    return f"Array({body}, dtype={value.dtype.name})"


def _out_of_place(name: str):
    """``x += y`` on an immutable array: ``x = x + y`` (a new array, as JAX's)."""
    operator = getattr(np.ndarray, name.replace("__i", "__", 1))
    return lambda self, other: operator(self, other)


for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift",
            "rshift"):
    setattr(EagerArray, f"__i{_op}__", _out_of_place(f"__i{_op}__"))


Array.register(EagerArray)


def as_eager(value):
    """``value`` as an ``EagerArray`` view when it is a plain ndarray, as a 0-d one when it is a
    numpy scalar (JAX returns arrays, never numpy scalars); other values unchanged."""
    if type(value) is np.ndarray:
        return value.view(EagerArray)
    return np.asarray(value).view(EagerArray) if isinstance(value, np.generic) else value
