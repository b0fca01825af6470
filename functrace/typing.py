"""Type annotations for code written against functrace, as ``jax.typing``: ``ArrayLike`` for any
value functrace takes as an array, ``DTypeLike`` for anything naming a dtype."""
from __future__ import annotations

from typing import Union

import numpy as np

from .core.array import Array

# what functions of functrace.numpy and the transformations accept as an array
ArrayLike = Union[Array, np.ndarray, np.generic, bool, int, float, complex]
# what they accept as a dtype: a name, a numpy scalar type, a numpy dtype
DTypeLike = Union[str, type, np.dtype]

__all__ = ["Array", "ArrayLike", "DTypeLike"]
