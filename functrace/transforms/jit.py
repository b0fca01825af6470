"""``jit``: trace once per signature, optimize the IR, run it on a backend.

Called on concrete arrays, a jitted function runs its cached compiled program.  Called
on tracers (inside ``grad``, ``vmap``, ``make_jaxpr``, another ``jit``, ...), it replays its
cached *optimized* IR through ``eval_jaxpr``, so the outer transformation sees the
primitives: every transformation composes with ``jit`` in both orders, and the pipeline
is optimize -> differentiate -> optimize for ``jit(grad(jit(f)))``.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import operator
import threading
import time
import weakref
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np

from .. import backends, tree_util
from .. import primitives as P
from ..core import ClosedJaxpr, Tracer, eval_jaxpr, get_aval, scalars_to_arrays
from ..core.config import config
from ..core.errors import (
    api_boundary,
    check_callable,
    hide_library_frames,
    traceback_boundary,
    user_frame_description,
)
from ..core.reports import CompiledReport, LoweredReport, title_html
from .optimize import Report, optimize
from .staging import trace_to_jaxpr

_ARRAY_TYPES = backends.ARRAY_TYPES  # always-leaf array classes: keyed by shape and dtype, no pytree walk


def _leaf_signature(x) -> tuple:
    if type(x) in _ARRAY_TYPES:
        return (x.shape, x.dtype, False)
    if type(x) is int and not _INT64.min <= x <= _INT64.max:  # a value: checked at every call
        raise OverflowError(f"the Python int {x} is out of bounds for int64")
    a = get_aval(x)
    return (a.shape, a.dtype, a.weak_type)


def _check_dtypes(signature: tuple) -> None:
    """Numeric and bool values only (a new signature is checked once, before it is traced)."""
    for _, dtype, _ in signature:
        if np.dtype(dtype).kind not in "biufc":
            raise TypeError(f"arrays of dtype {dtype} are not supported (numeric and bool arrays only)")


_INT64 = np.iinfo(np.int64)


@functools.lru_cache(maxsize=64)
def _flat_tree(n: int):
    """The tree structure of ``((leaf,) * n, {})``: positional array arguments, no keywords."""
    return tree_util.tree_structure((tuple(range(n)), {}))


def _as_tuple(v) -> tuple:
    if v is None:
        return ()
    return (v,) if isinstance(v, (int, str)) else tuple(v)


class Lowered:
    """The optimized IR of a jitted function for one signature (``jit(f).lower(*args)``)."""

    def __init__(self, jitted: "Jitted", entry: "_Entry"):
        self._jitted = jitted
        self._entry = entry
        self.jaxpr: ClosedJaxpr = entry.closed
        self.unoptimized: ClosedJaxpr = entry.raw

    def report(self) -> LoweredReport:
        """What the optimizer's passes did (text, ``counts`` per pass, buffer ``analysis``)."""
        return LoweredReport(self._entry.report)

    @traceback_boundary
    def compile(self) -> "Compiled":
        """The compiled program of this signature (compiled at the first ``compile`` or call)."""
        try:
            return Compiled(self._jitted, self._entry)
        except Exception as e:
            hide_library_frames(e)
            raise

    def as_text(self) -> str:
        return str(self.jaxpr)

    def _title(self) -> str:
        return f"`{self._jitted.__name__}` lowered for {_describe(self._entry.key)}"

    def __repr__(self) -> str:
        return f"<Lowered {self._title()}: {self.report().summary}>"

    def __str__(self) -> str:
        return f"{self._title()}\n{self.as_text()}\n{self.report()}"

    def _repr_html_(self) -> str:
        return (f"<div><p><b>{title_html(self._title())}</b></p>{self.report()._repr_html_()}"
                f"{self.jaxpr._repr_html_()}</div>")


class Compiled:
    """The compiled program of one signature (``jit(f).lower(*args).compile()``).  Called with
    arguments of that signature (checked, as in JAX: another shape would silently misread the
    buffers), it returns the function's output tree.  Introspection (``num_kernel_launches``,
    ``as_text()``, ``report()``, ...) is the backend executable's."""

    def __init__(self, jitted: "Jitted", entry: "_Entry"):
        self._jitted = jitted
        self._entry = entry
        self.executable = entry.executable()

    @traceback_boundary
    def __call__(self, *args, **kwargs):
        try:
            key, leaves, *_ = self._jitted._key(args, kwargs)
            if key != self._entry.key:
                structure = "" if key[0] == self._entry.key[0] else " (another argument structure)"
                raise TypeError(f"compiled `{self._jitted.__name__}` was lowered for arguments "
                                f"{_describe(self._entry.key)} but was called with {_describe(key)}{structure}")
            outs = self.executable(*scalars_to_arrays(leaves))
            return tree_util.tree_unflatten(self._entry.out_tree, outs)
        except Exception as e:  # (a try costs nothing until an exception passes)
            hide_library_frames(e)
            raise

    def report(self) -> CompiledReport:
        """How the program runs: backend, device, kernel launches, host steps and their reasons."""
        return CompiledReport(self.executable)

    def _title(self) -> str:
        return f"`{self._jitted.__name__}` compiled for {_describe(self._entry.key)}"

    def __repr__(self) -> str:
        return f"<Compiled {self._title()}: {self.report().summary}>"

    def __str__(self) -> str:
        return f"{self._title()}\n{self.report()}"

    def _repr_html_(self) -> str:
        return f"<div><p><b>{title_html(self._title())}</b></p>{self.report()._repr_html_()}</div>"

    def __getattr__(self, name: str):
        return getattr(self.__dict__["executable"], name)


def _narrowed_python_ints(closed: ClosedJaxpr, signature: tuple) -> list:
    """(argument index, integer dtype) for each Python int argument the program converts to a
    narrower integer dtype (``int32_array * n``): the conversion would wrap a value out of range
    silently, where numpy (and eager functrace) raise OverflowError."""
    checks = []
    for i, (v, (_, dtype, weak)) in enumerate(zip(closed.jaxpr.in_vars, signature)):
        if weak and np.dtype(dtype).kind in "iu":
            for eqn in closed.jaxpr.eqns:
                target = eqn.params.get("new_dtype") if eqn.primitive is P.convert_element_type_p else None
                if target is not None and v in eqn.inputs and np.dtype(target).kind in "iu":
                    checks.append((i, np.dtype(target)))
    return checks


def _check_fits(name: str, value, dtype: np.dtype) -> None:
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise OverflowError(f"jit of `{name}`: the Python int {value} is out of bounds for {dtype.name}, "
                            f"the dtype of the array it combines with (numpy raises the same)")


def _describe(key) -> str:
    """The leaf shapes and dtypes (and static values) of a cache key, for error messages."""
    _, signature, statics = key
    leaves = ", ".join(f"{np.dtype(dt).name}{list(shape)}" + (" (Python scalar)" if weak else "")
                       for shape, dt, weak in signature)
    return f"({leaves})" + (f" with static arguments {dict(statics)}" if statics else "")


class _Entry:
    """One cache entry: raw and optimized IR, pass report, and the compiled executable (lazy)."""

    def __init__(self, raw: ClosedJaxpr, closed: ClosedJaxpr, report: Report, out_tree, backend, key,
                 name: str = "jitted"):
        self.key = key
        self.name = name
        self.raw = raw
        self.closed = closed
        self.report = report
        self.out_tree = out_tree
        self.backend = backend
        self.closes_over_tracers = any(isinstance(c, Tracer) for c in closed.consts)
        self.int_ranges = _narrowed_python_ints(closed, key[1])
        self._exe = None
        self._compiling = threading.Lock()  # threads calling a new signature at once compile it once

    def executable(self):
        exe = self._exe
        if exe is None:
            with self._compiling:
                if self._exe is None:
                    start = time.perf_counter()
                    self._exe = backends.compile_for(self.backend, self.closed)
                    if config.log_compiles:
                        _LOG.warning("Compiled `%s` (%d operations, inputs %s) for %s in %.3f s", self.name,
                                     len(self.closed.jaxpr.eqns), _signature_text(self.closed),
                                     getattr(self._exe, "backend", self.backend), time.perf_counter() - start)
                exe = self._exe
        return exe


_LOG = logging.getLogger("functrace")


def _signature_text(closed: ClosedJaxpr) -> str:
    return "(" + ", ".join(v.aval.str_short() for v in closed.jaxpr.in_vars) + ")"


class _DisabledDepth(threading.local):
    n = 0  # the ``disable_jit`` blocks open in this thread (a class default: no failed lookup per call)


_disable_jit_depth = _DisabledDepth()


def _jit_disabled() -> bool:
    return _disable_jit_depth.n > 0


@contextlib.contextmanager
def disable_jit(disable: bool = True):
    """``with ft.disable_jit():`` jitted functions run as plain Python in this thread (prints and
    breakpoints see concrete values), as ``jax.disable_jit``; ``disable=False`` is a no-op."""
    n = _disable_jit_depth.n
    _disable_jit_depth.n = n + 1 if disable else n
    try:
        yield
    finally:
        _disable_jit_depth.n = n


class Jitted:
    """A function compiled per input signature (pytree structure, shapes, dtypes, static args).

    The signatures are an LRU cache of ``config.jit_cache_size`` entries; an entry owns its
    compiled program, so dropping the function (or evicting the signature) frees it.  Any number
    of threads may call at once: a new signature is traced and compiled once, by the first
    thread to call it, while the others wait for it."""

    def __init__(self, fun: Callable, static_argnums=(), static_argnames=(), backend: str | None = None,
                 donate_argnums=(), donate_argnames=()):
        functools.update_wrapper(self, fun, updated=())  # name and docs only: never the wrapped __dict__
        self.fun = fun
        self.backend = backend
        self.static_argnums = tuple(int(i) for i in _as_tuple(static_argnums))
        self.static_argnames = tuple(_as_tuple(static_argnames))
        self.__name__ = getattr(fun, "__name__", "jitted")
        self.donate_argnums = _donated(donate_argnums, self.static_argnums, self.__name__)
        self.donate_argnames = tuple(_as_tuple(donate_argnames))
        self._has_statics = bool(self.static_argnums or self.static_argnames)
        try:
            self._signature = inspect.signature(fun)
        except (TypeError, ValueError):
            self._signature = None
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()  # guards _cache's insertions and evictions, and _tracing
        self._tracing: dict = {}  # key -> the lock held while that signature is traced
        self._check_static_argnums()
        _JITTED.add(self)

    def _check_static_argnums(self) -> None:
        """Static positions the function cannot take would be ignored silently: refuse them."""
        if self._signature is None:
            return
        kinds = [p.kind for p in self._signature.parameters.values()]
        if inspect.Parameter.VAR_POSITIONAL in kinds:
            return
        n = sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds)
        bad = [i for i in self.static_argnums if not -n <= i < n]
        if bad:
            raise ValueError(f"jit of `{self.__name__}`: static_argnums {bad} out of range for a function of "
                             f"{n} positional parameters {user_frame_description()}")

    def _split(self, args: tuple, kwargs: dict):
        """Separate static arguments (part of the cache key) from dynamic ones (traced)."""
        n = len(args)
        static_pos = tuple(i % n if n else i for i in self.static_argnums if -n <= i < n)
        static_kw = {k: v for k, v in kwargs.items() if k in self.static_argnames}
        if self._signature is not None and self.static_argnames:
            params = list(self._signature.parameters)
            static_pos += tuple(params.index(k) for k in self.static_argnames
                                if k in params and params.index(k) < n)
        dyn_args = tuple(a for i, a in enumerate(args) if i not in static_pos)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_kw}
        statics = tuple((i, args[i]) for i in sorted(set(static_pos))) + tuple(sorted(static_kw.items()))
        return static_pos, statics, dyn_args, dyn_kwargs

    def _key(self, args: tuple, kwargs: dict):
        """(cache key: argument tree, leaf shapes/dtypes and static values; the dynamic leaves;
        the static positions and values; the argument tree) of a call."""
        if kwargs or self._has_statics:
            static_pos, statics, dyn_args, dyn_kwargs = self._split(args, kwargs)
        else:  # the common call: positional, nothing static
            static_pos, statics, dyn_args, dyn_kwargs = (), (), args, {}
        if not dyn_kwargs and all(type(a) in _ARRAY_TYPES for a in dyn_args):
            # arrays only: the tree is a flat tuple, keyed by its length (no pytree walk per call)
            leaves, in_tree = list(dyn_args), _flat_tree(len(dyn_args))
        else:
            leaves, in_tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
        try:
            signature = tuple([(x.shape, x.dtype, False) if type(x) in _ARRAY_TYPES else _leaf_signature(x)
                               for x in leaves])
        except (TypeError, OverflowError) as e:
            raise type(e)(f"jit of `{self.__name__}`: {e}") from None
        try:
            key = (in_tree, signature, statics)
            hash(key)
        except TypeError:
            raise TypeError(f"jit of `{self.__name__}`: static arguments must be hashable, got "
                            f"{[type(v).__name__ for _, v in statics]}") from None
        return key, leaves, static_pos, statics, in_tree

    def _cached(self, key) -> "_Entry | None":
        """The cached program of ``key``, made the most recently used; None if not cached."""
        entry = self._cache.get(key)
        if entry is not None:
            try:
                self._cache.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile: still valid for this call
                pass
        return entry

    def _entry(self, args: tuple, kwargs: dict):
        key, leaves, static_pos, statics, in_tree = self._key(args, kwargs)
        entry = self._cached(key)
        if entry is not None:
            return entry, leaves
        with self._lock:
            tracing = self._tracing.setdefault(key, threading.RLock())  # reentrant: a recursive trace
        try:
            with tracing:
                entry = self._cache.get(key)
                if entry is None:
                    entry = self._trace(key, args, static_pos, statics, in_tree, leaves)
        finally:
            with self._lock:
                if self._tracing.get(key) is tracing:
                    del self._tracing[key]
        return entry, leaves

    def _trace(self, key, args: tuple, static_pos: tuple, statics: tuple, in_tree, leaves: list) -> _Entry:
        """Trace and optimize a new signature, and cache it (evicting the least recently used)."""
        try:
            _check_dtypes(key[1])
        except TypeError as e:
            raise TypeError(f"jit of `{self.__name__}`: {e}") from None
        out_tree_box = []

        def flat_fun(*flat):
            dargs, dkwargs = tree_util.tree_unflatten(in_tree, flat)
            it = iter(dargs)
            full = [args[i] if i in static_pos else next(it) for i in range(len(args))]
            out = self.fun(*full, **dkwargs, **{k: v for k, v in statics if isinstance(k, str)})
            out_leaves, out_tree = tree_util.tree_flatten(out)
            out_tree_box.append(out_tree)
            return out_leaves

        raw = trace_to_jaxpr(flat_fun, [get_aval(x) for x in leaves], self.__name__)
        closed, report = optimize(raw)
        entry = _Entry(raw, closed, report, out_tree_box[0], self.backend, key, self.__name__)
        # A program that closed over tracers of an enclosing transformation is only valid
        # inside that transformation: it is used once and not cached.
        if not entry.closes_over_tracers:
            with self._lock:
                self._cache[key] = entry
                while len(self._cache) > config.jit_cache_size:
                    self._cache.popitem(last=False)
        return entry

    @traceback_boundary
    def __call__(self, *args, **kwargs):
        try:  # (an entry point: an error shows the user's frames; a try costs nothing until one)
            if _jit_disabled():  # ft.disable_jit(): run the Python function itself, as JAX
                return self.fun(*args, **kwargs)
            if not kwargs and not self._has_statics and all(type(a) in _ARRAY_TYPES for a in args):
                # the common call, positional arrays of a cached signature: its key built directly,
                # its program run as is (a cached entry closes over no tracer, takes no Python int)
                key = (_flat_tree(len(args)), tuple([(a.shape, a.dtype, False) for a in args]), ())
                entry = self._cached(key)
                if entry is not None:
                    return tree_util.tree_unflatten(entry.out_tree, entry.executable()(*args))
            entry, leaves = self._entry(args, kwargs)
            for i, dtype in entry.int_ranges:
                _check_fits(self.__name__, leaves[i], dtype)
            if entry.closes_over_tracers or any(isinstance(x, Tracer) for x in leaves):
                outs = eval_jaxpr(entry.closed.jaxpr, entry.closed.consts, *leaves)
            else:  # compiled programs take arrays; Python scalars were traced as weakly typed values
                outs = entry.executable()(*scalars_to_arrays(leaves))
            return tree_util.tree_unflatten(entry.out_tree, outs)
        except Exception as e:
            hide_library_frames(e)
            raise

    @traceback_boundary
    def lower(self, *args, **kwargs) -> Lowered:
        """The optimized IR of this function for the arguments' signature (traced if new)."""
        try:
            entry, _ = self._entry(args, kwargs)
            return Lowered(self, entry)
        except Exception as e:
            hide_library_frames(e)
            raise

    def __repr__(self) -> str:
        name = getattr(self.fun, "__qualname__", None) or getattr(self.fun, "__name__", None)
        what = f"function {name}" if name else repr(self.fun)
        return f"<jitted {what} at {hex(id(self))}>"

    def cache_size(self) -> int:
        return len(self._cache)

    def clear_cache(self) -> None:
        """Forget every traced signature and its compiled program (as ``jax.jit(f).clear_cache()``)."""
        with self._lock:
            self._cache.clear()


_JITTED: weakref.WeakSet = weakref.WeakSet()  # every live jitted function, for clear_caches


def clear_caches() -> None:
    """Forget every jitted function's traced signatures and compiled programs, and the programs
    the OpenCL runtime keeps for reuse (as ``jax.clear_caches``); the disk caches stay."""
    for jitted in list(_JITTED):
        jitted.clear_cache()
    backends.clear_program_caches()


def _donated(donate_argnums, static_argnums: tuple, name: str) -> tuple:
    """``donate_argnums`` as a tuple of ints, none of them static (JAX refuses those too)."""
    try:
        out = tuple(operator.index(i) for i in _as_tuple(donate_argnums))
    except TypeError:
        raise TypeError(f"jit of `{name}`: donate_argnums must be ints, got {donate_argnums!r}") from None
    both = sorted(set(out) & set(static_argnums))
    if both:
        raise ValueError(f"jit of `{name}`: arguments {both} are both static and donated")
    return out


@api_boundary
def jit(fun: Callable | None = None, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), backend: str | None = None,
        donate_argnums: int | Sequence[int] = (), donate_argnames: str | Sequence[str] = ()):
    """Compile ``fun``: trace once per input signature, optimize, run on ``backend``.

    Usable as ``jit(f)``, ``@jit`` or ``@jit(static_argnums=...)``.  ``donate_argnums`` /
    ``donate_argnames`` are accepted as JAX's and reuse nothing: every call writes fresh outputs
    and the donated arrays stay valid (JAX may reuse their memory; code written for it runs
    unchanged).
    """
    if fun is None:
        return lambda f: jit(f, static_argnums, static_argnames, backend, donate_argnums, donate_argnames)
    check_callable(fun, "jit")
    return Jitted(fun, static_argnums, static_argnames, backend, donate_argnums, donate_argnames)
