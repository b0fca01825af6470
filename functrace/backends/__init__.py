"""Execution backends behind one interface: ``compile(closed_jaxpr) -> Executable``."""
from __future__ import annotations

from .numpy_backend import NumpyExecutable

BACKENDS = {"numpy": NumpyExecutable}


def get_backend(name: str | None):
    """The executable class for ``name`` (None: the default backend)."""
    name = name or "numpy"
    if name == "opencl":
        raise NotImplementedError("the OpenCL backend is not implemented yet; use backend='numpy'")
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; available: {sorted(BACKENDS)}") from None
