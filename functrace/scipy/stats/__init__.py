"""``functrace.scipy.stats``: the normal distributions."""
from . import multivariate_normal, norm

__all__ = ["norm", "multivariate_normal"]
