"""functrace: composable function transformations (grad, jvp, vmap, ...) over numpy."""
import warnings as _warnings
from typing import Any as _Any

import numpy as _np

from . import (
    debug,
    distributed,
    dtypes,
    flatten_util,
    lax,
    nn,
    numpy,
    optim,
    random,
    scipy,
    test_util,
    tree,
    tree_util,
    typing,
)
from .callback import pure_callback
from .core import ClosedJaxpr, Jaxpr, ShapedArray, eval_jaxpr
from .core import Tracer as _Tracer
from .core.array import Array
from .core.config import config
from .core.errors import (
    ConcretizationError,
    DtypeError,
    ShapeError,
    TracerArrayConversionError,
    UnexpectedTracerError,
)
from .transforms.autodiff import grad, hessian, jacfwd, jacrev, jvp, linearize, stop_gradient, value_and_grad, vjp
from .transforms.batching import vmap
from .transforms.custom import checkpoint, checkpoint_policies, custom_jvp, custom_vjp, remat
from .transforms.jit import clear_caches, disable_jit, jit
from .transforms.shapes import ShapeDtypeStruct, eval_shape
from .transforms.staging import make_jaxpr

__version__ = "0.1.0"

_DEVICE_NAMES = ("block_until_ready", "devices", "device_put")

# JAX's deprecated top-level pytree aliases: they work, with a DeprecationWarning (as in JAX)
_TREE_ALIASES = {"tree_map": "map", "tree_flatten": "flatten", "tree_unflatten": "unflatten",
                 "tree_leaves": "leaves", "tree_structure": "structure", "tree_transpose": "transpose"}

_SHARDING = ("functrace has no {name}: there is no sharding; use ft.vmap(..., axis_name=...) and, across processes, "
             "the 'processes' axis name with mpiexec (see README)")
_PROCESSES = "functrace has no {name}: use ft.distributed.{target}() (after ft.distributed.initialize(), under mpiexec)"
# JAX names that functrace does not have, and what to use instead
_MISSING = {
    "pmap": "functrace has no pmap: use ft.vmap(..., axis_name=...) and, across processes, the 'processes' axis "
            "name with mpiexec (see README)",
    "pjit": _SHARDING, "shard_map": _SHARDING, "sharding": _SHARDING, "make_mesh": _SHARDING,
    "device_put_sharded": _SHARDING, "device_put_replicated": _SHARDING,
    "xla_computation": "functrace has no xla_computation (there is no XLA): ft.make_jaxpr(f)(*args) gives the IR, "
                       "ft.jit(f).lower(*args).as_text() the compiled program",
    "named_call": "functrace has no named_call (its IR keeps no names for profilers): call the function itself",
    "named_scope": "functrace has no named_scope (its IR keeps no names for profilers): leave it out",
    "local_device_count": "functrace has no local_device_count: a process computes on one device (ft.devices() "
                          "lists the OpenCL ones); processes: ft.distributed.process_count()",
    "device_count": "functrace has no device_count: a process computes on one device (ft.devices() lists the "
                    "OpenCL ones); processes: ft.distributed.process_count()",
    "local_devices": "functrace has no local_devices: use ft.devices() (the OpenCL devices)",
    "process_index": _PROCESSES.replace("{target}", "process_index"),
    "process_count": _PROCESSES.replace("{target}", "process_count"),
    "host_id": _PROCESSES.replace("{target}", "process_index"),
    "host_count": _PROCESSES.replace("{target}", "process_count"),
    "default_backend": "functrace has no default_backend(): jitted functions run on OpenCL (numpy when no OpenCL "
                       "device is usable); ft.config.update('default_backend', ...) or ft.jit(f, backend=...) "
                       "chooses",
    "default_matmul_precision": "functrace has no default_matmul_precision: it computes in the operands' dtype at "
                                "full precision on every device (see ft.lax.Precision)",
    "jacobian": "functrace has no jacobian: use ft.jacrev (jax.jacobian is jax.jacrev) or ft.jacfwd",
    "profiler": "functrace has no profiler: ft.jit(f).lower(*args).compile().report() says how a program runs",
}


def device_get(tree: _Any) -> _Any:
    """The arrays of a pytree as numpy arrays (``ft.Array`` leaves read from the device), as
    ``jax.device_get``: leaves without ``__array__`` (Python scalars, ...) and traced values stay."""

    def get(x: _Any) -> _Any:
        if isinstance(x, _Tracer) or not hasattr(x, "__array__"):
            return x
        return _np.asarray(x)

    return tree_util.tree_map(get, tree)


def __getattr__(name: str) -> _Any:
    """The OpenCL runtime's names, imported at first use: ``import functrace`` loads neither the
    OpenCL backend nor pyopencl (about 0.2 s), which a program that never jits does not need.
    JAX's deprecated ``tree_*`` aliases warn; JAX names functrace lacks say what to use instead."""
    if name in _DEVICE_NAMES:
        from .backends.opencl import runtime
        value = globals()[name] = getattr(runtime, name)  # later lookups: a plain attribute (~3 us less)
        return value
    if name in _TREE_ALIASES:
        short = _TREE_ALIASES[name]
        _warnings.warn(f"ft.{name} is deprecated (as jax.{name} is): use ft.tree.{short} or ft.tree_util.{name}",
                      DeprecationWarning, stacklevel=2)
        return getattr(tree, short)
    if name in _MISSING:
        raise AttributeError(_MISSING[name].format(name=name))
    raise AttributeError(f"module 'functrace' has no attribute {name!r}")

__all__ = ["config", "grad", "value_and_grad", "vjp", "jvp", "linearize", "jacfwd", "jacrev", "hessian",
           "stop_gradient", "vmap", "jit", "clear_caches", "lax", "distributed", "nn", "optim", "random", "debug", "typing", "dtypes", "Array", "block_until_ready", "devices", "device_put", "custom_jvp", "custom_vjp", "checkpoint",
           "checkpoint_policies", "remat", "make_jaxpr", "eval_jaxpr", "tree_util", "numpy", "scipy", "test_util",
           "ClosedJaxpr", "Jaxpr", "ShapedArray", "ConcretizationError", "DtypeError", "ShapeError",
           "TracerArrayConversionError", "UnexpectedTracerError",
           "tree", "flatten_util", "pure_callback", "disable_jit", "ShapeDtypeStruct", "eval_shape", "device_get"]
