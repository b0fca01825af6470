"""The OpenCL backend (pyopencl; PoCL on a CPU, any vendor driver on a GPU)."""
from .runtime import Array, Runtime, devices, get_runtime
from .executable import HostExecutable, OpenCLExecutable, is_small

__all__ = ["Array", "Runtime", "devices", "get_runtime", "OpenCLExecutable", "HostExecutable", "is_small"]
