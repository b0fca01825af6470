"""``functrace.scipy``: the parts of scipy that JAX offers as ``jax.scipy`` (special functions,
linear algebra, the normal distributions, BFGS minimization), written with functrace.numpy:
differentiable, batched and jittable.  scipy itself is not needed."""
from . import linalg, optimize, special, stats

__all__ = ["linalg", "optimize", "special", "stats"]

# jax.scipy's (and scipy's) other submodules, with what to use instead
_ELSEWHERE = {
    "fft": "use functrace.numpy.fft",
    "signal": "build convolutions with functrace.numpy.convolve or functrace.lax.conv_general_dilated",
    "ndimage": "build filters with functrace.lax.conv_general_dilated or functrace.lax.reduce_window",
    "integrate": "use functrace.numpy.trapezoid, or functrace.lax.scan for an ODE stepper",
    "interpolate": "use functrace.numpy.interp",
    "sparse": "use dense functrace.numpy arrays (functrace.scipy.linalg solves them)",
    "spatial": "write the distances with functrace.numpy (they differentiate and jit)",
    "cluster": "write it with functrace.numpy",
}


def __getattr__(name: str):
    """A name functrace.scipy lacks raises AttributeError (so ``hasattr`` works) saying what to
    use instead."""
    if name.startswith("__"):
        raise AttributeError(f"module 'functrace.scipy' has no attribute {name!r}", name=name)
    hint = _ELSEWHERE.get(name, "it provides only functrace.scipy.linalg, optimize, special and stats "
                                "(jax.scipy's main parts)")
    raise AttributeError(f"module 'functrace.scipy' has no attribute {name!r}: functrace.scipy does not provide "
                         f"scipy.{name}; {hint}", name=name)
