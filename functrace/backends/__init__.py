"""Execution backends behind one interface: ``Backend(closed_jaxpr)`` is a callable executable
with ``as_text()``; OpenCL falls back to numpy (one warning) when no device exists."""
from __future__ import annotations

import warnings

from .numpy_backend import NumpyExecutable


def compile_for(name: str | None, closed):
    """Compile ``closed`` for backend ``name`` (None: the configured default, else OpenCL, which
    runs on numpy when no OpenCL device is usable)."""
    from ..config import BACKENDS, config
    name = name or config.default_backend or "opencl"
    if name == "numpy":
        return NumpyExecutable(closed)
    if name == "opencl":
        from ..optimize import inline_calls, optimize
        from .opencl.executable import HostExecutable, OpenCLExecutable, is_small, runs_only_on_host
        from .opencl.runtime import DeviceUnusable, forget_runtime, get_runtime
        inlined = inline_calls(closed)  # custom rules / checkpoints: their bodies become kernels
        if inlined is not closed:
            closed = optimize(inlined)[0]
        while True:
            rt = get_runtime()
            if rt is None:
                return NumpyExecutable(closed)
            if rt.policy.small_programs_on_host and is_small(closed):
                return HostExecutable(closed, rt)
            try:
                exe = OpenCLExecutable(closed, rt)
            except DeviceUnusable as e:
                if config.device not in (None, ""):
                    raise  # the device the user chose: say so rather than run elsewhere
                warnings.warn(f"functrace: {e}; trying the next OpenCL device", RuntimeWarning, stacklevel=3)
                forget_runtime()
                continue
            if runs_only_on_host(exe.plan):  # no device work: buffers would only copy in and out
                return HostExecutable(closed, rt, host_plan=exe.plan)
            return exe
    raise ValueError(f"unknown backend {name!r}; available: {list(BACKENDS)}")
