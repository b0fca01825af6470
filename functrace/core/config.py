"""Global options: ``ft.config.update("debug_nans", True)``; also read from FUNCTRACE_* variables."""
from __future__ import annotations

import os
from typing import Any

BACKENDS = ("numpy", "opencl")  # what ``jit(backend=...)`` and the ``default_backend`` option take
MATMUL_MODES = ("auto", "opencl", "blas")  # what the ``matmul`` option takes
# what the ``opencl_device_kind`` option takes (see backends/opencl/policy)
OPENCL_DEVICE_KINDS = ("auto", "cpu", "gpu")
# what the ``traceback_filtering`` option takes (JAX's values; see errors.hide_library_frames)
TRACEBACK_FILTERING_MODES = ("auto", "off", "tracebackhide", "remove_frames")


class Config:
    """Options that change how programs run (not what they mean)."""

    _DEFAULTS = {"debug_nans": False, "device": None, "default_backend": None,
                 # on CPU devices, programs with less work than this (elements) run on the host
                 "opencl_small_program_elements": 16384,
                 # ... and, inside larger programs, kernels over fewer elements than this (None: by
                 # a cost estimate, see backends/opencl/placement; a number also pins placements:
                 # no timed trial against one numpy program)
                 "opencl_host_step_elements": None,
                 # a test mode: every device buffer sits between guard regions of canary bytes
                 # (NaN for floats), checked after each kernel launch (see backends/opencl/runtime)
                 "opencl_debug_canaries": False,
                 # signatures each jitted function keeps traced and compiled (least recently used
                 # evicted: each may hold a compiled program, ~0.4 MB on PoCL)
                 "jit_cache_size": 64,
                 # compiled OpenCL programs kept after their last jitted function is gone (least
                 # recently used first out), so a re-created function does not rebuild its program
                 "opencl_program_cache_size": 32,
                 # keep the device binaries of programs that run twice in functrace's disk cache
                 # (off: each process rebuilds from source, through the driver's own cache if any)
                 "opencl_binary_cache": True,
                 # matrix products on OpenCL: "auto" (on CPU devices, OpenCL kernels or host BLAS,
                 # whichever measured faster per shape), "opencl" or "blas" (see backends/opencl/matmul)
                 "matmul": "auto",
                 # the OpenCL backend's device kind: its placement policy and kernel designs ("auto":
                 # "cpu" on a CPU device, "gpu" elsewhere; forcing "gpu" runs the GPU designs on PoCL)
                 "opencl_device_kind": "auto",
                 # on PoCL's CPU device, also open PoCL's ``basic`` device (hidden from ft.devices())
                 # and run programs whose launches are each one work-group (loops, programs compiled
                 # whole) on it, in the calling thread: no worker thread to wake (a launch ~3 us
                 # instead of 45-90 us).  Read when PoCL loads (the first OpenCL use) and when a
                 # program compiles (see backends/opencl/in_thread)
                 "opencl_in_thread_device": True,
                 # on PoCL: build each program with the declarations of the builtins it calls
                 # instead of the whole opencl-c.h PoCL would parse (most of a small program's
                 # build; off: every build parses it; see backends/opencl/lean_header)
                 "opencl_lean_header": True,
                 # show that a compile is still running after a second (an OpenCL program's build
                 # and first call), so a long first call does not look like a hang: gone when it
                 # returns on a terminal and in a notebook, one line where stderr is a file
                 "verbose": True,
                 # log each compile (the function, its operations, seconds) to the "functrace"
                 # logger at WARNING level, as JAX's jax_log_compiles (also by that name)
                 "log_compiles": False,
                 # errors raised through ft.grad, ft.jit, ft.vmap, ... show the user's frames only
                 # ("auto", "remove_frames"), all frames ("off"), or all frames with functrace's
                 # marked ``__tracebackhide__`` for pytest and IPython ("tracebackhide")
                 "traceback_filtering": "auto",
                 # JAX's x64 switch (also as "jax_enable_x64"): True keeps numpy's dtypes (float64
                 # inputs stay float64, Python floats are weak); False (JAX's float32 defaults) is
                 # not provided yet and raises NotImplementedError
                 "enable_x64": True,
                 # the directory of functrace's disk caches (None: $XDG_CACHE_HOME/functrace, else
                 # ~/.cache/functrace): program binaries, device verdicts, matmul choices
                 "cache_dir": None}

    def __init__(self):
        for name, default in self._DEFAULTS.items():
            env = os.environ.get("FUNCTRACE_" + name.upper())
            if env is not None and isinstance(default, bool):
                env = env.lower() in ("1", "true", "yes", "on")
            elif env is not None and (isinstance(default, int) or env.isdigit()):
                try:
                    env = int(env)
                except ValueError:
                    raise ValueError(f"FUNCTRACE_{name.upper()} must be an int, got {env!r}") from None
            if env is None:
                setattr(self, name, default)
                continue
            try:
                self.update(name, env)  # checked as a value set in code is
            except ValueError as e:
                raise ValueError(f"FUNCTRACE_{name.upper()}: {e}") from None

    def update(self, name: str, value: Any) -> None:
        """Set option ``name`` (JAX's spelling ``jax_<name>`` is accepted for the options JAX has)."""
        if name.startswith("jax_") and name[4:] in self._DEFAULTS:
            name = name[4:]
        if name not in self._DEFAULTS:
            raise KeyError(f"unknown functrace option {name!r}; options: {sorted(self._DEFAULTS)}")
        if name == "default_backend" and value is not None and value not in BACKENDS:
            raise ValueError(f"default_backend must be None or one of {list(BACKENDS)}, got {value!r}")
        if name in _CACHE_SIZES and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if name == "matmul":
            value = str(value).strip().lower()
            if value not in MATMUL_MODES:
                raise ValueError(f"matmul must be one of {list(MATMUL_MODES)}, got {value!r}")
        if name == "opencl_device_kind":
            value = str(value).strip().lower()
            if value not in OPENCL_DEVICE_KINDS:
                raise ValueError(f"opencl_device_kind must be one of {list(OPENCL_DEVICE_KINDS)}, got {value!r}")
        if name == "traceback_filtering":
            value = str(value).strip().lower()
            if value not in TRACEBACK_FILTERING_MODES:
                raise ValueError(f"traceback_filtering must be one of {list(TRACEBACK_FILTERING_MODES)}, "
                                 f"got {value!r}")
        if name == "enable_x64" and not value:
            raise NotImplementedError("enable_x64=False (JAX's float32 defaults) is not provided: functrace keeps "
                                      "numpy's dtypes, so a float32 program passes float32 arrays (float32 stays "
                                      "float32; Python scalars do not upcast arrays)")
        setattr(self, name, value)  # plain attributes: reading an option on a hot path is cheap


_CACHE_SIZES = ("jit_cache_size", "opencl_program_cache_size")

config = Config()
