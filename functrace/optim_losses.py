"""optax's loss functions (``ft.optim.<name>`` and ``ft.optim.losses.<name>``), with optax's
signatures and numbers.

They are written with ``functrace.numpy`` and ``functrace.nn`` only, so they differentiate (to
any order), batch with ``vmap`` and compile under ``jit`` on every backend; float32 inputs give
float32 losses (constants are Python scalars, which do not upcast).

Per-example losses are returned unreduced, as optax does: take ``.mean()`` for a batch loss.
Where optax's formula has a branch that is not taken but is still differentiated (``log`` of a
zero target in ``kl_divergence``, ``labels * log_softmax`` at ``-inf`` logits in
``safe_softmax_cross_entropy``), the branch's input is replaced by a harmless value first, so the
values are optax's and the derivatives stay finite.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Union

import numpy as np

from . import nn
from . import numpy as fnp
from .core.errors import DtypeError, ShapeError, user_frame_description

Axis = Union[int, tuple, None]

__all__ = [
    "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels", "safe_softmax_cross_entropy",
    "sigmoid_binary_cross_entropy", "hinge_loss", "kl_divergence",
    "squared_error", "l2_loss", "huber_loss", "log_cosh", "cosine_similarity", "cosine_distance",
]


# --------------------------------------------------------------------------- helpers


def _check_floating(x: Any, what: str, fn: str):
    """``x`` as an array, raising (as optax does) when it is not floating point."""
    x = fnp.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise DtypeError(f"ft.optim.{fn}: {what} must be floating point, got {x.dtype} {user_frame_description()}")
    return x


def _errors(predictions: Any, targets: Any, fn: str, same_shape: bool = False):
    """``predictions - targets`` (or ``predictions`` without targets), optax's regression input."""
    predictions = _check_floating(predictions, "predictions", fn)
    if targets is None:
        return predictions
    targets = fnp.asarray(targets)
    if same_shape and tuple(targets.shape) != tuple(predictions.shape):
        raise ShapeError(f"ft.optim.{fn}: predictions and targets must have the same shape, got "
                         f"{tuple(predictions.shape)} and {tuple(targets.shape)} {user_frame_description()}")
    return predictions - targets


def _axes(axis: Axis, ndim: int, fn: str) -> tuple:
    """``axis`` (an int, a tuple or None for all) as a tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    out = []
    for a in axes:
        a = operator.index(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"ft.optim.{fn}: axis {a} is out of bounds for an array of {ndim} dimensions "
                             f"{user_frame_description()}")
        out.append(a % ndim)
    return tuple(out)


def _mask_like(where: Any, x, axis: Axis, expand: bool = False):
    """optax's ``where`` as a boolean mask shaped like ``x``: broadcast as numpy does or, with
    ``expand`` (the cross-entropies, whose mask may be shaped like the result), given a length-1
    ``axis`` first when it has fewer dimensions than ``x``; None stays None."""
    if where is None:
        return None
    where = fnp.asarray(where)
    if expand and where.ndim != x.ndim:
        where = fnp.expand_dims(where, axis)
    return fnp.broadcast_to(where, x.shape)


def _masked_sum(x, axis: Axis, where, keepdims: bool = False):
    """``sum(x, axis, where=where)``: masked-out entries count as zero."""
    if where is not None:
        x = fnp.where(where, x, fnp.zeros_like(x))
    return fnp.sum(x, axis=axis, keepdims=keepdims)


def _kept(logits, axis: Axis, where):
    """The logits a masked normalizer runs over: -inf where masked out, but a slice with nothing
    kept keeps its logits (its result is masked out; this keeps log(0) out of it)."""
    if where is None:
        return logits
    keep = where | ~fnp.any(where, axis=axis, keepdims=True)
    return fnp.where(keep, logits, -np.inf)


def _log_softmax(logits, axis: Axis, where):
    """log_softmax over ``axis`` (an int uses the fused primitive); under ``where`` the
    normalizer runs over the kept entries and masked-out entries read 0 (they are never used)."""
    if where is None and isinstance(axis, int):
        return nn.log_softmax(logits, axis=axis)
    out = logits - nn.logsumexp(_kept(logits, axis, where), axis=axis, keepdims=True)
    return out if where is None else fnp.where(where, out, fnp.zeros_like(out))


# --------------------------------------------------------------------------- classification


def softmax_cross_entropy(logits: Any, labels: Any, axis: Axis = -1, where: Any = None) -> Any:
    """Cross-entropy of the class probabilities ``labels`` against ``softmax(logits)`` over
    ``axis`` (optax.softmax_cross_entropy): the usual multi-class classification loss."""
    logits = _check_floating(logits, "logits", "softmax_cross_entropy")
    where = _mask_like(where, logits, axis, expand=True)
    log_probs = _log_softmax(logits, axis, where)
    return -_masked_sum(labels * log_probs, axis, where)


def softmax_cross_entropy_with_integer_labels(logits: Any, labels: Any, axis: Union[int, tuple] = -1,
                                              where: Any = None) -> Any:
    """Cross-entropy of integer class ids ``labels`` against ``softmax(logits)`` over ``axis``
    (optax's): the same loss without building one-hot labels.  With a tuple of axes, a label is a
    flat index into the slice those axes span."""
    fn = "softmax_cross_entropy_with_integer_labels"
    logits = _check_floating(logits, "logits", fn)
    labels = fnp.asarray(labels)
    if not np.issubdtype(labels.dtype, np.integer):
        raise DtypeError(f"ft.optim.{fn}: labels must be integer class ids, got {labels.dtype} "
                         f"(use softmax_cross_entropy for probabilities) {user_frame_description()}")
    if axis is None or not isinstance(axis, (int, tuple, np.integer)):
        raise ValueError(f"ft.optim.{fn}: axis must be an int or a tuple of ints, got {axis!r} "
                         f"{user_frame_description()}")
    where = _mask_like(where, logits, axis, expand=True)
    if isinstance(axis, tuple):  # the class axes moved last and flattened into one
        class_axes = _axes(axis, logits.ndim, fn)
        batch_axes = tuple(a for a in range(logits.ndim) if a not in class_axes)
        order = batch_axes + class_axes
        flat = tuple(logits.shape[a] for a in batch_axes) + (-1,)
        logits = fnp.reshape(fnp.transpose(logits, order), flat)
        if where is not None:
            where = fnp.reshape(fnp.transpose(where, order), flat)
        axis = len(batch_axes)
    else:
        axis = _axes(axis, logits.ndim, fn)[0]
    if tuple(labels.shape) != tuple(logits.shape[:axis] + logits.shape[axis + 1:]):
        raise ShapeError(f"ft.optim.{fn}: labels must have the logits' shape without the class axis, "
                         f"{tuple(logits.shape[:axis] + logits.shape[axis + 1:])}, got {tuple(labels.shape)} "
                         f"{user_frame_description()}")
    label_logits = fnp.squeeze(fnp.take_along_axis(logits, fnp.expand_dims(labels, axis), axis=axis), axis=axis)
    out = nn.logsumexp(_kept(logits, axis, where), axis=axis) - label_logits
    if where is not None:
        out = fnp.where(fnp.any(where, axis=axis), out, fnp.zeros_like(out))
    return out


def safe_softmax_cross_entropy(logits: Any, labels: Any) -> Any:
    """``softmax_cross_entropy`` over the last axis that reads ``0 * log 0`` as 0, so ``-inf``
    logits with zero labels give a finite loss (optax.safe_softmax_cross_entropy)."""
    logits = _check_floating(logits, "logits", "safe_softmax_cross_entropy")
    labels = fnp.asarray(labels)
    log_probs = nn.log_softmax(logits, axis=-1)
    safe = fnp.where((labels != 0) | fnp.isfinite(log_probs), log_probs, 0.0)  # 0 * log 0 = 0
    return -fnp.sum(labels * safe, axis=-1)


def sigmoid_binary_cross_entropy(logits: Any, labels: Any) -> Any:
    """Elementwise cross-entropy of independent binary predictions ``sigmoid(logits)`` against
    ``labels`` in [0, 1] (optax's): for binary and multi-label classification."""
    logits = _check_floating(logits, "logits", "sigmoid_binary_cross_entropy")
    labels = fnp.asarray(labels, dtype=logits.dtype)
    return -labels * nn.log_sigmoid(logits) - (1.0 - labels) * nn.log_sigmoid(-logits)


def hinge_loss(predictor_outputs: Any, targets: Any) -> Any:
    """``max(0, 1 - outputs * targets)`` for targets in {-1, 1} (optax.hinge_loss): the SVM loss."""
    return fnp.maximum(0, 1 - fnp.asarray(predictor_outputs) * fnp.asarray(targets))


def kl_divergence(log_predictions: Any, targets: Any, axis: Axis = -1, where: Any = None) -> Any:
    """Kullback-Leibler divergence of the predicted distribution (given as logs) from ``targets``
    over ``axis``, with ``0 log 0 = 0`` (optax.kl_divergence)."""
    log_predictions = _check_floating(log_predictions, "log_predictions", "kl_divergence")
    targets = _check_floating(targets, "targets", "kl_divergence")
    zero = targets == 0
    log_targets = fnp.where(zero, 0.0, fnp.log(fnp.where(zero, 1.0, targets)))  # finite derivative at 0
    loss = targets * (log_targets - log_predictions)
    return _masked_sum(loss, axis, _mask_like(where, loss, axis))


# --------------------------------------------------------------------------- regression


def squared_error(predictions: Any, targets: Any = None) -> Any:
    """Elementwise ``(predictions - targets) ** 2`` (optax.squared_error; its mean is the MSE)."""
    errors = _errors(predictions, targets, "squared_error", same_shape=True)
    return errors * errors


def l2_loss(predictions: Any, targets: Any = None) -> Any:
    """Elementwise ``0.5 * (predictions - targets) ** 2`` (optax.l2_loss)."""
    return 0.5 * squared_error(predictions, targets)


def huber_loss(predictions: Any, targets: Any = None, delta: float = 1.0) -> Any:
    """Elementwise Huber loss (optax's): quadratic within ``delta`` of the target, linear beyond,
    so outliers pull with a bounded gradient."""
    abs_errors = fnp.abs(_errors(predictions, targets, "huber_loss"))
    quadratic = fnp.minimum(abs_errors, delta)
    return 0.5 * quadratic * quadratic + delta * (abs_errors - quadratic)


def log_cosh(predictions: Any, targets: Any = None) -> Any:
    """Elementwise ``log(cosh(predictions - targets))`` without overflow (optax.log_cosh): a
    smooth Huber-like loss."""
    errors = _errors(predictions, targets, "log_cosh")
    return fnp.logaddexp(errors, -errors) - math.log(2.0)


def cosine_similarity(predictions: Any, targets: Any, epsilon: float = 0.0, axis: Axis = -1,
                      where: Any = None) -> Any:
    """Cosine of the angle between predicted and target vectors over ``axis``; the squared norms
    are clipped below at ``epsilon`` (optax.cosine_similarity)."""
    a = _check_floating(predictions, "predictions", "cosine_similarity")
    b = _check_floating(targets, "targets", "cosine_similarity")
    where = _mask_like(where, a * b, axis)
    a_norm = fnp.sqrt(fnp.clip(_masked_sum(a * a, axis, where, keepdims=True), epsilon))
    b_norm = fnp.sqrt(fnp.clip(_masked_sum(b * b, axis, where, keepdims=True), epsilon))
    return _masked_sum((a / a_norm) * (b / b_norm), axis, where)


def cosine_distance(predictions: Any, targets: Any, epsilon: float = 0.0, axis: Axis = -1,
                    where: Any = None) -> Any:
    """``1 - cosine_similarity`` (optax.cosine_distance): a dissimilarity to minimize."""
    return 1.0 - cosine_similarity(predictions, targets, epsilon=epsilon, axis=axis, where=where)


def __getattr__(name: str):
    """An optax loss this module lacks raises AttributeError (so ``hasattr`` works) naming the ones
    it has."""
    if name.startswith("__"):
        raise AttributeError(f"module 'functrace.optim.losses' has no attribute {name!r}", name=name)
    raise AttributeError(f"module 'functrace.optim.losses' has no attribute {name!r}: functrace does not provide "
                         f"optax.losses.{name}; the losses are {', '.join(__all__)}; write others with "
                         "functrace.numpy and functrace.nn (they differentiate and jit like these)", name=name)
