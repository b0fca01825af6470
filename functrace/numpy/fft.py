"""``functrace.numpy.fft``: numpy.fft's transforms, differentiable and batched.

One primitive, ``fft`` (declared with its rules in ``functrace.primitives.fft``), with ``fft_type``
in {fft, ifft, rfft, irfft} over the last ``len(fft_lengths)`` axes (numpy.fft's default
"backward" normalization; the other ``norm`` modes scale its result).  Complex values live
inside programs as complex64 / complex128 arrays, with ``x.real``, ``x.imag``, ``x.conj()``,
``abs`` and arithmetic; their derivatives follow JAX's convention (transposes, no conjugation),
so ``grad`` of a real loss of real inputs through complex intermediates
(``fnp.sum(fnp.abs(fnp.fft.rfft(x)) ** 2)``, a spectral filter ``irfft(rfft(x) * h)``) is the
usual real gradient.  ``grad`` with respect to a complex input is refused (see ``autodiff``):
differentiate with respect to real and imaginary parts.

On OpenCL, complex arrays have no type in generated kernels: these steps run on the host
(numpy.fft), which ``report()`` says.
"""
import math as _math

import numpy as _np

from .. import arrays as _arrays
from .. import primitives as _P
from ..core.errors import NotInFunctrace as _NotInFunctrace
from ..core.errors import user_frame_description as _where
from ..primitives.fft import fft as _fft
from ..primitives.fft import fft_p  # noqa: F401 (fnp.fft.fft_p)
from . import _base as _fnp

# --------------------------------------------------------------------------- user functions


def _norm_scale(norm, n: int, inverse: bool) -> float | None:
    """The factor applied to the primitive's ("backward") result for numpy's ``norm``."""
    if norm in (None, "backward"):
        return None
    if norm == "ortho":
        return _math.sqrt(n) if inverse else 1 / _math.sqrt(n)
    if norm == "forward":
        return n if inverse else 1 / n
    raise ValueError(f'fft: invalid norm {norm!r} (use "backward", "ortho" or "forward")')


def _resize(x, axis: int, n: int):
    """Truncate or zero-pad ``x`` along ``axis`` to length n (numpy.fft's ``n`` / ``s``)."""
    have = x.shape[axis]
    if n < 1:
        raise ValueError(f"fft: invalid number of data points ({n}) {_where()}")
    if n < have:
        index = [slice(None)] * x.ndim
        index[axis] = slice(0, n)
        return x[tuple(index)]
    if n > have:
        config = [(0, 0, 0)] * x.ndim
        config[axis] = (0, n - have, 0)
        return _P.pad(x, _P.scalar_like(x, 0), config)
    return x


def _axes_and_lengths(x, s, axes, real_inverse: bool = False):
    if axes is None:
        axes = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    axes = tuple(int(a) % x.ndim if -x.ndim <= a < x.ndim else _raise(f"fft: axis {a} out of range for shape "
                                                                     f"{x.shape}") for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"fft: repeated axes {axes} are not supported")
    if s is None:
        s = [x.shape[a] for a in axes]
        if real_inverse:
            s[-1] = 2 * (s[-1] - 1)
    elif len(s) != len(axes):
        raise ValueError(f"fft: s {tuple(s)} and axes {axes} must have the same length")
    return axes, tuple(int(n) for n in s)


def _raise(message):
    raise ValueError(message)


def _transform(a, fft_type: str, s, axes, norm):
    """numpy.fft.<fft_type>n(a, s, axes, norm) through the primitive over the last axes."""
    x = _fnp.asarray(a)
    if fft_type == "rfft":
        if x.dtype.kind == "c":
            raise TypeError("fft: rfft of a complex array (take its real part first, numpy would drop it)")
        x = _arrays.to_float(x, _np.float64)
    elif x.dtype.kind != "c":
        x = _P.convert_element_type(_arrays.to_float(x, _np.float64), _P.complex_dtype(_arrays.to_float(x, _np.float64).dtype))
    if x.ndim == 0:
        raise ValueError(f"fft: the input must have at least one dimension {_where()}")
    axes, lengths = _axes_and_lengths(x, s, axes, real_inverse=fft_type == "irfft")
    for axis, n in zip(axes, lengths):
        if fft_type == "irfft" and axis == axes[-1]:
            n = n // 2 + 1
        x = _resize(x, axis, n)
    k = len(axes)
    moved = _fnp.moveaxis(x, axes, tuple(range(x.ndim - k, x.ndim)))
    out = _fnp.moveaxis(_fft(moved, fft_type, lengths), tuple(range(x.ndim - k, x.ndim)), axes)
    scale = _norm_scale(norm, _math.prod(lengths), fft_type in ("ifft", "irfft"))
    return out if scale is None else out * _np.asarray(scale, _P.real_dtype(out.dtype))


def fft(a, n=None, axis: int = -1, norm=None):
    return _transform(a, "fft", None if n is None else (n,), (axis,), norm)


def ifft(a, n=None, axis: int = -1, norm=None):
    return _transform(a, "ifft", None if n is None else (n,), (axis,), norm)


def rfft(a, n=None, axis: int = -1, norm=None):
    return _transform(a, "rfft", None if n is None else (n,), (axis,), norm)


def irfft(a, n=None, axis: int = -1, norm=None):
    return _transform(a, "irfft", None if n is None else (n,), (axis,), norm)


def fftn(a, s=None, axes=None, norm=None):
    return _transform(a, "fft", s, axes, norm)


def ifftn(a, s=None, axes=None, norm=None):
    return _transform(a, "ifft", s, axes, norm)


def rfftn(a, s=None, axes=None, norm=None):
    return _transform(a, "rfft", s, axes, norm)


def irfftn(a, s=None, axes=None, norm=None):
    return _transform(a, "irfft", s, axes, norm)


def fft2(a, s=None, axes=(-2, -1), norm=None):
    return _transform(a, "fft", s, axes, norm)


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    return _transform(a, "ifft", s, axes, norm)


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    return _transform(a, "rfft", s, axes, norm)


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    return _transform(a, "irfft", s, axes, norm)


def _roll(x, shifts: dict):
    """x rolled by shifts[axis] along each axis (slices and concatenations)."""
    for axis, shift in shifts.items():
        n = x.shape[axis]
        shift %= n if n else 1
        if shift:
            head = [slice(None)] * x.ndim
            tail = [slice(None)] * x.ndim
            head[axis], tail[axis] = slice(n - shift, n), slice(0, n - shift)
            x = _fnp.concatenate([x[tuple(head)], x[tuple(tail)]], axis=axis)
    return x


def _shift_axes(x, axes):
    if axes is None:
        return tuple(range(x.ndim))
    return (axes,) if isinstance(axes, (int, _np.integer)) else tuple(axes)


def fftshift(x, axes=None):
    """The zero frequency moved to the center."""
    x = _fnp.asarray(x)
    return _roll(x, {a % x.ndim: x.shape[a] // 2 for a in _shift_axes(x, axes)})


def ifftshift(x, axes=None):
    x = _fnp.asarray(x)
    return _roll(x, {a % x.ndim: -(x.shape[a] // 2) for a in _shift_axes(x, axes)})


def fftfreq(n: int, d=1.0, *, dtype=None):
    """Sample frequencies k / (n d) (d may be traced)."""
    return _fnp.asarray(_np.fft.fftfreq(n), dtype) / d


def rfftfreq(n: int, d=1.0, *, dtype=None):
    return _fnp.asarray(_np.fft.rfftfreq(n), dtype) / d


def __getattr__(name: str):
    """Missing names raise AttributeError (``hasattr`` works); numpy.fft's are also NotImplementedError."""
    if name.startswith("_") or not hasattr(_np.fft, name):
        raise AttributeError(f"module 'functrace.numpy.fft' has no attribute {name!r}", name=name)
    raise _NotInFunctrace(f"functrace.numpy.fft does not implement {name} (Hermitian transforms are not built "
                          "yet)", name=name)
