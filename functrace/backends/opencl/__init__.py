"""The OpenCL backend (pyopencl; PoCL on a CPU, any vendor driver on a GPU).  ``runtime`` (devices,
``ft.Array``; pyopencl itself loads when a device is first needed) is all this package imports:
the compiler (``executable``, the lowerings and their kernels) loads at the first OpenCL compile."""
from .runtime import Array, Runtime, devices, get_runtime

__all__ = ["Array", "Runtime", "devices", "get_runtime"]
