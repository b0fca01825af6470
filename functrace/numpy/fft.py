"""``functrace.numpy.fft``: numpy.fft's transforms, differentiable and batched.

One primitive, ``fft``, with ``fft_type`` in {fft, ifft, rfft, irfft} over the last
``len(fft_lengths)`` axes (numpy.fft's default "backward" normalization; the other ``norm`` modes
scale its result).  Complex values live inside programs as complex64 / complex128 arrays, with
``x.real``, ``x.imag``, ``x.conj()``, ``abs`` and arithmetic; their derivatives follow JAX's
convention (transposes, no conjugation), so ``grad`` of a real loss of real inputs through
complex intermediates (``fnp.sum(fnp.abs(fnp.fft.rfft(x)) ** 2)``, a spectral filter
``irfft(rfft(x) * h)``) is the usual real gradient.  ``grad`` with respect to a complex input
is refused (see ``autodiff``): differentiate with respect to real and imaginary parts.

On OpenCL, complex arrays have no type in generated kernels: these steps run on the host
(numpy.fft), which ``report()`` says.
"""
import math as _math
from typing import Sequence as _Sequence

import numpy as _np

from .. import arrays as _arrays
from .. import primitives as _P
from ..core import ShapedArray as _ShapedArray
from ..errors import NotInFunctrace as _NotInFunctrace
from ..errors import ShapeError as _ShapeError
from ..errors import user_frame_description as _where
from . import _base as _fnp

_TYPES = ("fft", "ifft", "rfft", "irfft")

fft_p = _P.new_primitive("fft")


def _fft_impl(x, *, fft_type, fft_lengths):
    axes = tuple(range(-len(fft_lengths), 0))
    if fft_type == "fft":
        out = _np.fft.fftn(x, axes=axes)
    elif fft_type == "ifft":
        out = _np.fft.ifftn(x, axes=axes)
    elif fft_type == "rfft":
        out = _np.fft.rfftn(x, axes=axes)
    else:
        out = _np.fft.irfftn(x, s=fft_lengths, axes=axes)
    return out.astype(_fft_abstract(_ShapedArray(x.shape, x.dtype), fft_type=fft_type, fft_lengths=fft_lengths).dtype,
                      copy=False)


def _fft_abstract(a, *, fft_type, fft_lengths):
    k = len(fft_lengths)
    if len(a.shape) < k:
        raise _ShapeError(f"fft: {k} transform axes for an array of shape {a.shape} {_where()}")
    lead, last = a.shape[:-k], a.shape[-k:]
    if fft_type == "rfft":
        if a.dtype.kind != "f" or last != tuple(fft_lengths):
            raise TypeError(f"fft: rfft takes real arrays of the transform lengths, got {a.str_short()} {_where()}")
        return _ShapedArray(lead + last[:-1] + (last[-1] // 2 + 1,), _P.complex_dtype(a.dtype))
    if a.dtype.kind != "c":
        raise TypeError(f"fft: {fft_type} takes complex arrays, got {a.str_short()} {_where()}")
    if fft_type == "irfft":
        if last != tuple(fft_lengths[:-1]) + (fft_lengths[-1] // 2 + 1,):
            raise _ShapeError(f"fft: irfft of shape {a.shape} to lengths {fft_lengths} {_where()}")
        return _ShapedArray(lead + tuple(fft_lengths), _P.real_dtype(a.dtype))
    return a


def _fft(x, fft_type: str, fft_lengths: tuple):
    return fft_p.bind(x, fft_type=fft_type, fft_lengths=tuple(int(n) for n in fft_lengths))


def _last_axes_pad(x, widths: _Sequence[int]):
    """Zero-pad the last len(widths) axes at their ends by ``widths``."""
    shape = _P.shape_of(x)
    config = [(0, 0, 0)] * (len(shape) - len(widths)) + [(0, w, 0) for w in widths]
    return _P.pad(x, _P.scalar_like(x, 0), config)


def _fft_transpose(g, ans, x, *, fft_type, fft_lengths):
    """The transpose (JAX's convention): fft and ifft are symmetric; rfft's is the real part of the
    fft of the zero-padded half spectrum; irfft's the conjugated, weighted rfft (JAX's formula)."""
    if fft_type in ("fft", "ifft"):
        return _fft(g, fft_type, fft_lengths)
    if fft_type == "rfft":
        n = fft_lengths[-1]
        padded = _last_axes_pad(_P.convert_element_type(g, _P.dtype_of(g)), [n - _P.shape_of(g)[-1]])
        return _P.real(_fft(padded, "fft", fft_lengths))
    spectrum = _fft(g, "rfft", fft_lengths)
    m, n = _P.shape_of(spectrum)[-1], fft_lengths[-1]
    weights = _np.full(m, 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    scale = _np.asarray(weights / _math.prod(fft_lengths), _P.real_dtype(_P.dtype_of(spectrum)))
    return _P.conj(_P.mul(spectrum, _P.convert_element_type(scale, _P.dtype_of(spectrum))))


fft_p.impl = _fft_impl
fft_p.abstract_eval = _fft_abstract
fft_p.jvp = [lambda t, ans, x, **params: fft_p.bind(t, **params)]
fft_p.vjp = [_fft_transpose]
fft_p.batch = lambda vals, dims, **params: (fft_p.bind(_P.moveaxis(vals[0], dims[0], 0), **params), 0)


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
