"""dtypes functrace adds to numpy's, as ``jax.dtypes``: ``float0``, the dtype of the gradient of an
integer or boolean input (``ft.grad(..., allow_int=True)``): zero bytes per element, no values."""
from __future__ import annotations

import numpy as np

float0 = np.dtype([("float0", np.void, 0)])

__all__ = ["float0"]
