"""JAX's ``precision=`` and ``preferred_element_type=`` options of products and convolutions
(``dot``, ``matmul``, ``einsum``, ``lax.dot_general``, ``lax.conv_general_dilated``, ...), shared by
``functrace.numpy`` and ``ft.lax``.

They mean here what they mean in JAX, with one difference that ``Precision`` explains: functrace
computes every product in its operands' dtype at full precision on every device, so a precision
is checked and changes nothing.
"""
from __future__ import annotations

import enum
from typing import Any, Callable, Sequence, Union

import numpy as np

from . import arrays
from .core.errors import user_frame_description


class Precision(enum.Enum):
    """``lax.Precision`` as JAX's: ``DEFAULT``, ``HIGH``, ``HIGHEST``, also made from JAX's names
    ("default" / "fastest" / "bfloat16", "high" / "bfloat16_3x" / "tensorfloat32", "highest" /
    "float32").

    In JAX it trades float32 accuracy for speed on TPUs and GPUs (bfloat16 passes, tensorfloat32),
    so numerics are per device there.  functrace has no such setting: every product and convolution
    computes in its operands' dtype at full precision, with the same numbers on every device (its
    performance choices never change numerics), so a precision given to ``dot`` / ``matmul`` /
    ``einsum`` / ``conv_general_dilated`` and their kin is checked and changes nothing."""

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value: object) -> "Precision | None":
        return _PRECISION_NAMES.get(value) if isinstance(value, str) or value is None else None

    def __repr__(self) -> str:
        return f"Precision.{self.name}"

    def __str__(self) -> str:
        return self.name


_PRECISION_NAMES = {None: Precision.DEFAULT, "default": Precision.DEFAULT, "fastest": Precision.DEFAULT,
                    "bfloat16": Precision.DEFAULT, "high": Precision.HIGH, "bfloat16_3x": Precision.HIGH,
                    "tensorfloat32": Precision.HIGH, "highest": Precision.HIGHEST, "float32": Precision.HIGHEST}


# what ``precision=`` takes: a Precision or its name, or a (lhs, rhs) pair of them
PrecisionLike = Union[Precision, str, tuple, None]


def _one_precision(value, fname: str) -> Precision:
    if isinstance(value, Precision):
        return value
    if isinstance(value, str):
        if value in _PRECISION_NAMES:
            return _PRECISION_NAMES[value]
        names = ", ".join(repr(n) for n in _PRECISION_NAMES if n is not None)
        raise ValueError(f"{fname}: unknown precision {value!r}: use None, a ft.lax.Precision or one of {names} "
                         f"{user_frame_description()}")
    raise TypeError(f"{fname}: precision must be None, a ft.lax.Precision, a string or a pair of them, got "
                    f"{value!r} {user_frame_description()}")


def canonicalize_precision(precision: PrecisionLike, fname: str = "precision") -> tuple[Precision, Precision] | None:
    """JAX's ``precision=`` argument checked and as a (lhs, rhs) pair (None stays None)."""
    if precision is None:
        return None
    if isinstance(precision, (tuple, list)):
        if len(precision) != 2:
            raise TypeError(f"{fname}: a precision pair needs two entries (lhs, rhs), got {precision!r} "
                            f"{user_frame_description()}")
        return _one_precision(precision[0], fname), _one_precision(precision[1], fname)
    p = _one_precision(precision, fname)
    return p, p


def preferred_dtypes(fname: str, dtype: Any, preferred_element_type: Any) -> tuple[np.dtype | None, np.dtype | None]:
    """(the dtype operands of ``dtype`` convert to, the dtype the result is cast to) for a product's
    ``preferred_element_type`` (None: no change).  A dtype that holds the operands' values (a wider
    one, or integers to floats) converts the operands, so the products accumulate in it, as in JAX;
    another (narrower, floats to integers) casts the result, which is what JAX returns then."""
    if preferred_element_type is None:
        return None, None
    dtype = np.dtype(dtype)
    try:
        want = np.dtype(preferred_element_type)
    except TypeError:
        raise TypeError(f"{fname}: preferred_element_type {preferred_element_type!r} is not a dtype "
                        f"{user_frame_description()}") from None
    if want.kind not in "biufc":
        raise TypeError(f"{fname}: preferred_element_type must be a numeric dtype, got {want} "
                        f"{user_frame_description()}")
    if want == dtype:
        return None, None
    if np.can_cast(dtype, want, "safe") or (dtype.kind in "biu" and want.kind in "fc"):
        return want, None
    return None, want


def dot_operands(fname: str, operands: Sequence, precision: PrecisionLike,
                 preferred_element_type) -> tuple[list, np.dtype | None]:
    """(the operands in one dtype, the dtype to cast the result to or None), after checking
    ``precision`` and ``preferred_element_type`` (``preferred_dtypes`` says what it does)."""
    canonicalize_precision(precision, fname)
    ops = [arrays.to_array(x) for x in operands]
    ops = list(arrays.promote(*ops)) if len(ops) > 1 else ops
    if preferred_element_type is None or not ops:
        return ops, None
    compute, out = preferred_dtypes(fname, arrays.dtype_info(ops[0])[0], preferred_element_type)
    return (ops if compute is None else [arrays.cast(x, compute) for x in ops]), out


def dot_with_options(fname: str, product: Callable, operands: Sequence, precision: PrecisionLike,
                     preferred_element_type) -> Any:
    """``product(*operands)`` with JAX's ``precision`` and ``preferred_element_type`` options."""
    ops, out = dot_operands(fname, operands, precision, preferred_element_type)
    result = product(*ops)
    return result if out is None else arrays.cast(arrays.to_array(result), out)
