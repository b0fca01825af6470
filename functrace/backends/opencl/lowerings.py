"""Hand-written kernels: the registry mapping a primitive to its OpenCL lowering.

A lowering is ``fn(eqn, runtime) -> Lowered | OnHost | None`` (None: no lowering for this
equation: the executable tries its float32 twin for float16 values, else runs it as a host step).
``Lowered.source`` is OpenCL C (kernels from the top-level ``cl_kernels/*.cl`` are read with
``kernel_source``); the executable puts the sources of all steps of a jitted function into one
program (identical sources once) and, per call, invokes ``Lowered.run(ctx, inputs)`` which
enqueues the launches and returns the output arrays.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...core import Literal

LOWERINGS: dict = {}  # Primitive -> its lowering
# Primitive -> ``touched(eqn)``, the elements a lowered equation of it reads or writes, for lowerings
# whose work is a few passes over those (data moves, a row norm, attention's logits): a small one
# runs on the host (``placement.host_reason``), as a small fused group does, rather than cost a
# launch and a wait
SMALL_ON_HOST: dict = {}
FP64_PRAGMA = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"  # first line of every program
# Before a kernel with loop hints (vectorize, unroll): clang's remark that it could not apply one is
# about speed, not a fault, and the driver's build log would reach the user as a warning
QUIET_LOOP_HINTS = '#ifdef __clang__\n#pragma clang diagnostic ignored "-Wpass-failed"\n#endif\n'

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The sources live in the repository's top-level ``cl_kernels/``; setup.py installs them as the
# package data ``functrace/cl_kernels/``.  A source checkout reads the first, an install the second.
_KERNEL_DIR = next((d for d in (os.path.join(_PACKAGE_DIR, "cl_kernels"),
                                os.path.join(os.path.dirname(_PACKAGE_DIR), "cl_kernels")) if os.path.isdir(d)),
                   os.path.join(_PACKAGE_DIR, "cl_kernels"))


def register(primitive, *, small_on_host: Callable | None = None):
    """Decorator: ``@register(P.dot_general_p) def lower(eqn, rt): ...`` (keyed by the primitive
    object itself: a lowering cannot name a primitive that does not exist).  ``small_on_host``:
    the equation's elements touched, when a small one should run on the host (``SMALL_ON_HOST``)."""
    def deco(fn):
        LOWERINGS[primitive] = fn
        if small_on_host is not None:
            SMALL_ON_HOST[primitive] = small_on_host
        return fn
    return deco


@functools.lru_cache(maxsize=None)
def kernel_source(filename: str) -> str:
    """The text of ``cl_kernels/<filename>`` (shipped in the package as ``functrace/cl_kernels``)."""
    with open(os.path.join(_KERNEL_DIR, filename)) as f:
        return f.read()


# --------------------------------------------------------------------------- helpers of lowerings

_SUFFIX = {np.dtype(np.float32): ("float", "f32"), np.dtype(np.float64): ("double", "f64")}


def real_type(dtype, rt):
    """(OpenCL C type, kernel-name suffix) for a supported float dtype on ``rt``, else None."""
    spec = _SUFFIX.get(np.dtype(dtype))
    if spec is None or (spec[0] == "double" and not rt.supports_fp64):
        return None
    return spec


def has_int64_atomics(rt) -> bool:
    """Does ``rt``'s device have 64-bit atomics (``cl_khr_int64_base_atomics``)?  The atomic updates
    of 8-byte values need them; without them such steps run on the host."""
    return rt is None or "cl_khr_int64_base_atomics" in getattr(rt.device, "extensions", "")


def specialize(filename: str, defines: dict) -> str:
    """The text of ``cl_kernels/<filename>`` between ``#define`` lines for ``defines`` and the
    matching ``#undef`` lines (only identifiers and numbers are spliced, never user strings)."""
    for k, v in defines.items():
        assert k.isidentifier() and str(v).replace("_", "").replace(".", "").isalnum(), (k, v)
    head = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    tail = "".join(f"#undef {k}\n" for k in defines)
    return f"\n/* ---- {filename} [{', '.join(f'{k}={v}' for k, v in defines.items())}] */\n" + head \
        + kernel_source(filename) + "\n" + tail


def device_inputs(eqn, ctx, inputs: list) -> list:
    """Device arrays for the equation's inputs (a literal operand is uploaded, broadcast to its
    abstract shape; the executable passes None for literals)."""
    out = []
    for a, x in zip(eqn.inputs, inputs):
        if x is None and type(a) is Literal:
            # .copy(): contiguous, and a 0-d literal stays 0-d (np.ascontiguousarray makes it 1-d)
            x = ctx.rt.to_device(np.broadcast_to(np.asarray(a.val, a.aval.dtype), a.aval.shape).copy())
            ctx.rt.hold(x)  # a temporary that the kernel reads after this returns
        out.append(x)
    return out


@dataclass
class Lowered:
    """One equation lowered to hand-written kernels."""

    source: str                 # OpenCL C defining the kernels named in ``kernel_names``
    kernel_names: list
    run: Callable               # run(ctx, inputs) -> list of output Arrays; ctx is a LaunchContext
    launches: int               # kernel launches per call
    label: str                  # for the report, e.g. "matmul (OpenCL, tiled 64x64)" or "matmul (host BLAS)"
    extra: dict = field(default_factory=dict)
    shared: dict = field(default_factory=dict)  # {name: source} of generated kernels that other
    #                                             equations may need too: in the program once per name
    one_unit: bool = False      # each launch is one work-group (one compute unit's work): as fast
    #                             on a device running kernels in the calling thread (see in_thread)
    replayable: bool = False    # every call launches the same kernels, sizes and scalars through
    #                             ``ctx.kernels``, whatever its inputs' values (see replay)


@dataclass
class OnHost:
    """A lowering's answer that its equation runs as a host step, with numpy's implementation
    (e.g. a loop whose small body costs less in numpy than driving it from the host), and why."""

    reason: str


@dataclass
class LaunchContext:
    """What ``Lowered.run`` may use: the runtime, its queue, the program's kernels by name,
    and ``alloc(shape, dtype)`` for output and scratch buffers (pooled by the executable)."""

    rt: object
    queue: object
    kernels: dict
    alloc: Callable
    release: Callable


def device_group(rt, want: int, axis: int = 0, beside: int = 1) -> int:
    """The largest power of two up to ``want`` that ``rt``'s device allows as a work-group's extent
    along ``axis`` (CL_DEVICE_MAX_WORK_ITEM_SIZES) with ``beside`` work-items along the other axes
    (CL_DEVICE_MAX_WORK_GROUP_SIZE).  OpenCL sets no minimum: a design asking 256 work-items
    failed to launch on a device allowing 128."""
    device = getattr(rt, "device", None)
    total = int(getattr(device, "max_work_group_size", 0) or want)
    extents = getattr(device, "max_work_item_sizes", None) or ()
    along = int(extents[axis]) if len(extents) > axis else total
    allowed = max(1, min(want, total // beside, along))
    return 1 << (allowed.bit_length() - 1)
