"""Execution backends behind one interface: ``compile_for(name, closed_jaxpr)`` is a callable
executable with ``as_text()`` and ``report()``.  ``BACKENDS`` maps each name ``jit(backend=...)``
takes to its compiler; OpenCL runs on numpy (one warning) when no device is usable."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..core.config import config
from ..core.eager import EagerArray
from .numpy_backend import NumpyExecutable

# The array classes the backends return (the OpenCL runtime adds ``ft.Array``): always leaves,
# which jit keys by shape and dtype without a pytree walk
ARRAY_TYPES: set = {np.ndarray, EagerArray}


def _compile_opencl(closed):
    """The OpenCL backend, loaded at its first compile: ``import functrace`` loads neither it nor
    pyopencl (about 0.2 s), which a program that never jits for OpenCL does not need."""
    from .opencl.executable import compile_opencl
    return compile_opencl(closed)


BACKENDS: dict[str, Callable] = {  # name -> compile(closed_jaxpr) -> executable
    "numpy": NumpyExecutable,
    "opencl": _compile_opencl,
}


def compile_for(name: str | None, closed):
    """Compile ``closed`` for backend ``name`` (None: the configured default, else OpenCL, which
    runs on numpy when no OpenCL device is usable)."""
    name = name or config.default_backend or "opencl"
    compile_ = BACKENDS.get(name)
    if compile_ is None:
        raise ValueError(f"unknown backend {name!r}; available: {list(BACKENDS)}")
    return compile_(closed)


def clear_program_caches() -> None:
    """Drop the compiled programs the OpenCL runtimes keep for reuse (``ft.clear_caches``); a
    runtime not loaded yet keeps none."""
    import sys
    runtime = sys.modules.get(__name__ + ".opencl.runtime")
    if runtime is not None:
        runtime.clear_program_caches()
