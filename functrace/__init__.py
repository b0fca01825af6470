"""functrace: composable function transformations (grad, jvp, vmap, ...) over numpy."""
from . import debug, distributed, flatten_util, lax, nn, numpy, optim, random, scipy, test_util, tree, tree_util
from .autodiff import grad, hessian, jacfwd, jacrev, jvp, linearize, stop_gradient, value_and_grad, vjp
from .batching import vmap
from .callback import pure_callback
from .config import config
from .core import ClosedJaxpr, Jaxpr, ShapedArray, eval_jaxpr
from .custom import checkpoint, checkpoint_policies, custom_jvp, custom_vjp, remat
from .errors import ConcretizationError, DtypeError, ShapeError, TracerArrayConversionError, UnexpectedTracerError
from .jit import disable_jit, jit
from .shapes import ShapeDtypeStruct, eval_shape
from .staging import make_jaxpr

__version__ = "0.1.0"

_DEVICE_NAMES = ("Array", "block_until_ready", "devices", "device_put")


def __getattr__(name: str):
    """The OpenCL runtime's names, imported at first use: ``import functrace`` loads neither the
    OpenCL backend nor pyopencl (about 0.2 s), which a program that never jits does not need."""
    if name in _DEVICE_NAMES:
        from .backends.opencl import runtime
        value = globals()[name] = getattr(runtime, name)  # later lookups: a plain attribute (~3 us less)
        return value
    raise AttributeError(f"module 'functrace' has no attribute {name!r}")

__all__ = ["config", "grad", "value_and_grad", "vjp", "jvp", "linearize", "jacfwd", "jacrev", "hessian",
           "stop_gradient", "vmap", "jit", "lax", "distributed", "nn", "optim", "random", "debug", "Array", "block_until_ready", "devices", "device_put", "custom_jvp", "custom_vjp", "checkpoint",
           "checkpoint_policies", "remat", "make_jaxpr", "eval_jaxpr", "tree_util", "numpy", "scipy", "test_util",
           "ClosedJaxpr", "Jaxpr", "ShapedArray", "ConcretizationError", "DtypeError", "ShapeError",
           "TracerArrayConversionError", "UnexpectedTracerError",
           "tree", "flatten_util", "pure_callback", "disable_jit", "ShapeDtypeStruct", "eval_shape"]
