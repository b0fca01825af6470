"""``ft.Array``: the type of every array functrace returns, as ``jax.Array`` is JAX's."""
from __future__ import annotations

import abc


class Array(abc.ABC):  # noqa: B024  (a type to register with and test against: no methods to require)
    """An array functrace returned: an eager or host result (``EagerArray``: a numpy array with
    JAX's rules) or a jitted result on an OpenCL device (``backends.opencl.runtime.Array``), each
    registered as one; numpy's own arrays are not.  ``functrace.numpy.ndarray`` is this class, as
    ``jax.numpy.ndarray`` is ``jax.Array``.  Every one pickles (loading as an ``EagerArray``,
    without OpenCL), copies, converts with ``np.asarray`` and has ``block_until_ready()``."""

    __slots__ = ()
