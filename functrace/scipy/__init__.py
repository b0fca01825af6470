"""``functrace.scipy``: the parts of scipy that JAX offers as ``jax.scipy`` (special functions,
linear algebra, the normal distributions), written with functrace.numpy: differentiable,
batched and jittable.  scipy itself is not needed."""
from . import linalg, special, stats

__all__ = ["linalg", "special", "stats"]
