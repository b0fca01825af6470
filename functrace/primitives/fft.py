"""The ``fft`` primitive: numpy.fft's transforms, ``fft_type`` in {fft, ifft, rfft, irfft} over the
last ``len(fft_lengths)`` axes, with numpy.fft's default "backward" normalization
(``functrace.numpy.fft`` scales its result for the other ``norm`` modes and moves the axes).

Complex values live inside programs as complex64 / complex128 arrays; the derivative rules follow
JAX's convention (transposes, no conjugation), so ``grad`` of a real loss of real inputs through
complex intermediates is the usual real gradient.  fft and ifft are their own transposes (up to
the type); rfft's transpose is the real part of the fft of the zero-padded half spectrum, irfft's
the conjugated, weighted rfft (JAX's formula).  On OpenCL, complex arrays have no type in generated
kernels: these steps run on the host (numpy.fft), which ``report()`` says.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..core import ShapedArray
from ..core.errors import ShapeError
from ..core.errors import user_frame_description as _where
from . import basic as P

_TYPES = ("fft", "ifft", "rfft", "irfft")

fft_p = P.new_primitive("fft")


def _fft_impl(x, *, fft_type, fft_lengths):
    axes = tuple(range(-len(fft_lengths), 0))
    if fft_type == "fft":
        out = np.fft.fftn(x, axes=axes)
    elif fft_type == "ifft":
        out = np.fft.ifftn(x, axes=axes)
    elif fft_type == "rfft":
        out = np.fft.rfftn(x, axes=axes)
    else:
        out = np.fft.irfftn(x, s=fft_lengths, axes=axes)
    return out.astype(_fft_abstract(ShapedArray(x.shape, x.dtype), fft_type=fft_type, fft_lengths=fft_lengths).dtype,
                      copy=False)


def _fft_abstract(a, *, fft_type, fft_lengths):
    k = len(fft_lengths)
    if len(a.shape) < k:
        raise ShapeError(f"fft: {k} transform axes for an array of shape {a.shape} {_where()}")
    lead, last = a.shape[:-k], a.shape[-k:]
    if fft_type == "rfft":
        if a.dtype.kind != "f" or last != tuple(fft_lengths):
            raise TypeError(f"fft: rfft takes real arrays of the transform lengths, got {a.str_short()} {_where()}")
        return ShapedArray(lead + last[:-1] + (last[-1] // 2 + 1,), P.complex_dtype(a.dtype))
    if a.dtype.kind != "c":
        raise TypeError(f"fft: {fft_type} takes complex arrays, got {a.str_short()} {_where()}")
    if fft_type == "irfft":
        if last != tuple(fft_lengths[:-1]) + (fft_lengths[-1] // 2 + 1,):
            raise ShapeError(f"fft: irfft of shape {a.shape} to lengths {fft_lengths} {_where()}")
        return ShapedArray(lead + tuple(fft_lengths), P.real_dtype(a.dtype))
    return a


def fft(x, fft_type: str, fft_lengths: tuple):
    """``fft_p`` of ``x`` over its last len(fft_lengths) axes."""
    return fft_p.bind(x, fft_type=fft_type, fft_lengths=tuple(int(n) for n in fft_lengths))


def _last_axes_pad(x, widths: Sequence[int]):
    """Zero-pad the last len(widths) axes at their ends by ``widths``."""
    shape = P.shape_of(x)
    config = [(0, 0, 0)] * (len(shape) - len(widths)) + [(0, w, 0) for w in widths]
    return P.pad(x, P.scalar_like(x, 0), config)


def _fft_transpose(g, ans, x, *, fft_type, fft_lengths):
    """The transpose (JAX's convention): fft and ifft are symmetric; rfft's is the real part of the
    fft of the zero-padded half spectrum; irfft's the conjugated, weighted rfft (JAX's formula)."""
    if fft_type in ("fft", "ifft"):
        return fft(g, fft_type, fft_lengths)
    if fft_type == "rfft":
        n = fft_lengths[-1]
        padded = _last_axes_pad(P.convert_element_type(g, P.dtype_of(g)), [n - P.shape_of(g)[-1]])
        return P.real(fft(padded, "fft", fft_lengths))
    spectrum = fft(g, "rfft", fft_lengths)
    m, n = P.shape_of(spectrum)[-1], fft_lengths[-1]
    weights = np.full(m, 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    scale = np.asarray(weights / math.prod(fft_lengths), P.real_dtype(P.dtype_of(spectrum)))
    return P.conj(P.mul(spectrum, P.convert_element_type(scale, P.dtype_of(spectrum))))


fft_p.impl = _fft_impl
fft_p.abstract_eval = _fft_abstract
fft_p.jvp = [lambda t, ans, x, **params: fft_p.bind(t, **params)]
fft_p.vjp = [_fft_transpose]
fft_p.batch = lambda vals, dims, **params: (fft_p.bind(P.moveaxis(vals[0], dims[0], 0), **params), 0)
