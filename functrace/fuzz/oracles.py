"""The program run by other libraries, checked against the same bounds as functrace's own
results: ``numpy-lib``, numpy itself (its functions, in the program's dtype), and ``jax``, JAX
with 64-bit types enabled, jitted.  The reference interprets functrace's IR, so a function that
functrace writes from others (``logaddexp`` from ``log1p`` and ``exp``; ``sinh`` and ``hypot``
were once exps and a root of squares) is bounded as written; only a library that computes it as
one function shows where that decomposition overflows, cancels or gives another NaN or dtype
than numpy's.

The same source runs with ``fnp`` bound to ``numpy`` / ``jax.numpy`` and ``ft.nn`` / ``ft.lax`` to
their counterparts (numpy's written here, as numpy has none); a function without one raises
:class:`Unsupported` and that comparison is skipped.  JAX is imported only when its comparison is
asked for (:func:`load_jax`), never with functrace.
"""
from __future__ import annotations

import importlib
import math
from types import SimpleNamespace
from typing import Callable

import numpy as np

from .programs import Program

ORACLES = ("numpy-lib", "jax")
# the kinds each library runs: numpy has no derivatives (and its vmap would be the reference's loop)
ORACLE_KINDS = {"numpy-lib": ("value",), "jax": ("value", "grad", "vmap")}


class Unsupported(Exception):
    """The program uses a function the library has no counterpart of: nothing to compare."""


def load_jax():
    """The ``jax`` module with 64-bit types enabled (numpy's dtypes, as functrace's), or the
    reason it cannot be loaded (a string).  Imported here, at the first request, and never by
    ``import functrace``: JAX is optional and slow to import."""
    try:
        jax = importlib.import_module("jax")
    except ImportError as e:
        return f"jax is not importable ({e})"
    jax.config.update("jax_enable_x64", True)
    return jax


class _Namespace:
    """Attribute access into ``extra`` then ``module``; any other name is :class:`Unsupported`."""

    def __init__(self, label: str, module, extra: dict):
        self._label, self._module, self._extra = label, module, extra

    def __getattr__(self, name: str):
        if name in self._extra:
            return self._extra[name]
        if self._module is not None and hasattr(self._module, name):
            return getattr(self._module, name)
        raise Unsupported(f"{self._label} has no {name}")


class _AtArray(np.ndarray):
    """A numpy array with JAX's ``x.at[i].set / add / mul / min / max(u)`` (numpy's rules:
    repeated indices all apply, in order; a set keeps the last)."""

    @property
    def at(self):
        return _AtIndex(np.asarray(self))


class _AtIndex:
    def __init__(self, x):
        self.x = x

    def __getitem__(self, idx):
        return _AtUpdate(self.x, idx)


class _AtUpdate:
    def __init__(self, x, idx):
        self.x, self.idx = x, idx

    def _apply(self, ufunc, u):
        out = self.x.copy()
        ufunc.at(out, self.idx, np.asarray(u).astype(out.dtype))
        return out

    def set(self, u):
        out = self.x.copy()
        out[self.idx] = u
        return out

    def add(self, u):
        return self._apply(np.add, u)

    def mul(self, u):
        return self._apply(np.multiply, u)

    def min(self, u):
        return self._apply(np.minimum, u)

    def max(self, u):
        return self._apply(np.maximum, u)


def _np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _np_logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


def _np_erf(x):
    x = np.asarray(x)
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _np_gelu(x, approximate=True):
    if not approximate:
        return 0.5 * x * (1 + _np_erf(x / np.sqrt(np.asarray(2, x.dtype))))
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi).astype(x.dtype) * (x + 0.044715 * x * x * x)))


def _np_scan(f, init, xs, reverse=False):
    order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    carry, ys = init, []
    for i in order:
        carry, y = f(carry, xs[i])
        ys.append(y)
    if not ys:
        raise Unsupported("numpy: a scan over no rows (the shape of its outputs is unknown)")
    return carry, np.stack(ys[::-1] if reverse else ys)


def _np_fori_loop(lo, hi, body, init):
    for i in range(lo, hi):
        init = body(i, init)
    return init


def _numpy_names() -> dict:
    nn = {"relu": lambda x: np.maximum(x, 0), "sigmoid": _np_sigmoid, "silu": lambda x: x * _np_sigmoid(x),
          "swiglu": lambda g, u: g * _np_sigmoid(g) * u, "softplus": lambda x: np.logaddexp(x, 0),
          "gelu": _np_gelu, "erf": _np_erf, "logsumexp": _np_logsumexp}
    lax = {"scan": _np_scan, "cond": lambda p, t, f, x: t(x) if p else f(x), "fori_loop": _np_fori_loop}
    api = _Namespace("numpy", np, {"sigmoid": _np_sigmoid, "asarray": lambda x: np.asarray(x).view(_AtArray)})
    ft = SimpleNamespace(nn=_Namespace("numpy (ft.nn)", None, nn), lax=_Namespace("numpy (ft.lax)", None, lax))
    return {"np": np, "fnp": api, "ft": ft}


def _numpy_accumulator(dtype) -> np.dtype:
    """The dtype numpy's cumsum / cumprod accumulate integers and bools in (JAX keeps int8 as
    int8; functrace follows numpy)."""
    dtype = np.dtype(dtype)
    return np.dtype(np.uint64 if dtype.kind == "u" else np.int64) if dtype.kind in "biu" else dtype


def _jax_names(jax) -> dict:
    jnn, jnp = jax.nn, jax.numpy
    nn = {"erf": jax.scipy.special.erf, "swiglu": lambda g, u: jnn.silu(g) * u, "logsumexp": jax.nn.logsumexp}
    cumulative = {name: (lambda fn: lambda a, axis=None, dtype=None: fn(
        a, axis, dtype=dtype or _numpy_accumulator(jnp.asarray(a).dtype)))(getattr(jnp, name))
        for name in ("cumsum", "cumprod")}
    api = _Namespace("jax.numpy", jnp, {"sigmoid": jnn.sigmoid, **cumulative})
    ft = SimpleNamespace(nn=_Namespace("jax.nn", jnn, nn), lax=jax.lax)
    return {"np": np, "fnp": api, "ft": ft}


def jax_incomparable(kind: str, args: list) -> str | None:
    """Why JAX's ``kind`` of a program cannot be compared on ``args`` (None: it can): JAX on CPU
    flushes subnormals to zero, so its results there are not numpy's; and its derivatives at
    zeros, infinities and NaN follow conventions of their own (``|x|``'s is 1 at 0, functrace's 0)."""
    for a in args:
        a = np.asarray(a)
        if a.dtype.kind != "f" or not a.size:
            continue
        mag = np.abs(a)
        if np.any((mag > 0) & (mag < np.finfo(a.dtype).tiny)):
            return "inputs with subnormals (XLA on CPU flushes them)"
        if kind == "grad" and not np.all(np.isfinite(a) & (a != 0)):
            return "derivatives at zeros, infinities or NaN (conventions differ)"
    return None


def oracle_function(oracle: str, prog: Program, kind: str, jax=None) -> Callable | None:
    """What ``oracle`` runs for ``kind`` of ``prog`` (the counterpart of
    :func:`check.kind_function`), or None where it runs nothing (no derivative, nothing to
    batch, a kind it does not run).  ``jax``: the module :func:`load_jax` gave."""
    if kind not in ORACLE_KINDS[oracle]:
        return None
    ns = _numpy_names() if oracle == "numpy-lib" else _jax_names(jax)
    exec(compile(prog.source(), f"<fuzz program {prog.seed}:{prog.index} on {oracle}>", "exec"), ns)
    if oracle == "numpy-lib":
        return ns["f"]
    if kind == "value":
        return jax.jit(ns["f"])
    if kind == "vmap":
        if not any(s.batched for s in prog.inputs):
            return None
        return jax.jit(jax.vmap(ns["f"], in_axes=tuple(0 if s.batched else None for s in prog.inputs)))
    if "loss" not in ns:
        return None
    return jax.jit(jax.value_and_grad(ns["loss"], argnums=tuple(prog.float_inputs)))
