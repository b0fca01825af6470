"""Gradient-based optimizers in the style of optax: composable gradient transformations.

An optimizer is a ``GradientTransformation``: ``state = opt.init(params)``, then
``updates, state = opt.update(grads, state, params)`` and
``params = apply_updates(params, updates)``.  Optimizers are chains of small building blocks
(``scale_by_adam``, ``add_decayed_weights``, ``scale_by_learning_rate``, ...) exactly as optax
composes them, so the numbers are optax's.  A state is a pytree of NamedTuples holding arrays
(step counts are int32 scalars, moments have their parameter's dtype), so a whole ``update``
runs inside ``ft.jit`` on every backend, and float32 parameters stay float32.

Wherever a learning rate is taken, a *schedule* may be given instead: a function of the step
count (an int32 scalar, possibly traced) returning the value; ``constant_schedule``,
``linear_schedule``, ``cosine_decay_schedule``, ... build the common ones.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Union

import numpy as np

from . import numpy as fnp
from . import optim_losses as losses
from .core import Tracer
from .core.errors import user_frame_description
from .optim_losses import (  # noqa: F401  (optax's losses, as optax.<name> and optax.losses.<name>)
    cosine_distance,
    cosine_similarity,
    hinge_loss,
    huber_loss,
    kl_divergence,
    l2_loss,
    log_cosh,
    safe_softmax_cross_entropy,
    sigmoid_binary_cross_entropy,
    softmax_cross_entropy,
    softmax_cross_entropy_with_integer_labels,
    squared_error,
)
from .tree_util import tree_flatten, tree_leaves, tree_map, tree_structure, tree_unflatten

Schedule = Callable[[Any], Any]
ScalarOrSchedule = Union[float, Schedule]

__all__ = [
    "GradientTransformation", "EmptyState", "TraceState", "ScaleByAdamState", "ScaleByRmsState",
    "ScaleByRssState", "ScaleByLionState", "ScaleByScheduleState", "MaskedState",
    "apply_updates", "chain", "identity", "scale", "scale_by_schedule", "scale_by_learning_rate",
    "trace", "scale_by_adam", "scale_by_rms", "scale_by_rss", "scale_by_lion", "add_decayed_weights",
    "clip_by_global_norm", "global_norm", "masked",
    "sgd", "adam", "adamw", "rmsprop", "adagrad", "lion",
    "constant_schedule", "linear_schedule", "polynomial_schedule", "cosine_decay_schedule",
    "warmup_cosine_decay_schedule", "exponential_decay", "piecewise_constant_schedule", "join_schedules",
    "losses", *losses.__all__,
]


class GradientTransformation(NamedTuple):
    """``init(params) -> state`` and ``update(updates, state, params=None) -> (updates, state)``."""

    init: Callable
    update: Callable


class EmptyState(NamedTuple):
    """The state of a stateless transformation."""


class TraceState(NamedTuple):
    """``trace``'s state: the momentum, like the parameters."""

    trace: Any


class ScaleByAdamState(NamedTuple):
    """``scale_by_adam``'s state: the step count and the first and second moments."""

    count: Any
    mu: Any
    nu: Any


class ScaleByRmsState(NamedTuple):
    """``scale_by_rms``'s state: the moving average of squared gradients."""

    nu: Any


class ScaleByRssState(NamedTuple):
    """``scale_by_rss``'s state: the sum of all squared gradients."""

    sum_of_squares: Any


class ScaleByLionState(NamedTuple):
    """``scale_by_lion``'s state: the step count and the momentum."""

    count: Any
    mu: Any


class ScaleByScheduleState(NamedTuple):
    """``scale_by_schedule``'s state: the step count the schedule is evaluated at."""

    count: Any


class MaskedState(NamedTuple):
    """``masked``'s state: the inner transformation's, over the selected leaves."""

    inner_state: Any


# --------------------------------------------------------------------------- helpers

_INT32_MAX = np.iinfo(np.int32).max


def _zero_count():
    return np.zeros((), np.int32)


def _increment(count):
    """``count + 1``, staying at the int32 maximum instead of wrapping (as optax's)."""
    return fnp.where(count < _INT32_MAX, count + 1, count)


def _cast_like(value, like):
    """``value`` (a Python number or array) as an array of ``like``'s dtype (float32 stays float32)."""
    return fnp.asarray(value, like.dtype)


def _bias_correction(moment, decay: float, count):
    """``moment / (1 - decay**count)``, computed in each leaf's dtype."""
    return tree_map(lambda t: t / (1 - decay ** fnp.asarray(count, t.dtype)), moment)


def _check_learning_rate(learning_rate, name: str) -> None:
    """A schedule, a traced scalar, or a finite non-negative real number; else an error naming
    ``ft.optim.<name>`` and the caller (a bad rate would otherwise fail, or diverge, steps later)."""
    if callable(learning_rate):
        return
    where = user_frame_description()
    if isinstance(learning_rate, Tracer):
        if learning_rate.shape != ():
            raise TypeError(f"ft.optim.{name}: learning_rate must be a scalar, got {learning_rate.aval.str_short()} "
                            f"{where}")
        return
    numeric = isinstance(learning_rate, (int, float, np.number, np.ndarray)) or hasattr(learning_rate, "__array__")
    value = np.asarray(learning_rate) if numeric else None  # (an ft.Array on a device included)
    if value is None or isinstance(learning_rate, bool) or value.shape != () or value.dtype.kind not in "iuf":
        got = type(learning_rate).__name__ if value is None else f"{value.dtype.name}{list(value.shape)}"
        raise TypeError(f"ft.optim.{name}: learning_rate must be a number or a schedule (a function of the "
                        f"step count), got {got} {where}")
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"ft.optim.{name}: learning_rate must be finite and non-negative, got {value} {where} "
                         "(for gradient ascent, negate the loss)")


def _check_updates_match(updates, params) -> None:
    """``updates`` (the gradients) have the parameters' tree structure and leaf shapes, or a
    ValueError naming the caller (else a tree_map or numpy broadcast error from inside a rule)."""
    update_leaves, update_tree = tree_flatten(updates)
    param_leaves, param_tree = tree_flatten(params)
    if update_tree != param_tree:
        raise ValueError(f"ft.optim: update got updates (gradients) with the structure {update_tree}, the "
                         f"parameters have {param_tree} {user_frame_description()}")
    for i, (u, p) in enumerate(zip(update_leaves, param_leaves)):
        if fnp.shape(u) != fnp.shape(p):
            raise ValueError(f"ft.optim: update got leaf {i} of the updates (gradients) of shape {fnp.shape(u)}, "
                             f"its parameter has {fnp.shape(p)} {user_frame_description()}")


def apply_updates(params: Any, updates: Any) -> Any:
    """``params + updates`` leaf by leaf, each result in its parameter's dtype."""
    return tree_map(lambda p, u: fnp.asarray(p + u, p.dtype), params, updates)


def global_norm(updates: Any) -> Any:
    """The L2 norm of all leaves of ``updates`` taken together."""
    return fnp.sqrt(sum(fnp.sum(fnp.square(x)) for x in tree_leaves(updates)))


# --------------------------------------------------------------------------- building blocks


def identity() -> GradientTransformation:
    """Updates unchanged."""
    return GradientTransformation(lambda params: EmptyState(), lambda updates, state, params=None: (updates, state))


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply ``transforms`` in order; the state is the tuple of their states."""
    for t in transforms:
        if not isinstance(t, GradientTransformation):
            raise TypeError(f"ft.optim.chain: expected GradientTransformations, got {type(t).__name__} {user_frame_description()}")

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None):
        if params is not None:
            _check_updates_match(updates, params)
        if len(state) != len(transforms):
            raise ValueError(f"ft.optim.chain: the state has {len(state)} entries for {len(transforms)} "
                             f"transformations (was it made by this optimizer's init?) {user_frame_description()}")
        new_state = []
        for t, s in zip(transforms, state):
            updates, s = t.update(updates, s, params)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformation(init, update)


def scale(step_size: float) -> GradientTransformation:
    """Multiply the updates by a fixed ``step_size``."""
    def update(updates, state, params=None):
        return tree_map(lambda g: g * _cast_like(step_size, g), updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_schedule(step_size_fn: Schedule) -> GradientTransformation:
    """Multiply the updates by ``step_size_fn(count)``, ``count`` the updates made so far."""
    def update(updates, state, params=None):
        step_size = step_size_fn(state.count)
        return (tree_map(lambda g: g * _cast_like(step_size, g), updates),
                ScaleByScheduleState(_increment(state.count)))
    return GradientTransformation(lambda params: ScaleByScheduleState(_zero_count()), update)


def scale_by_learning_rate(learning_rate: ScalarOrSchedule, flip_sign: bool = True) -> GradientTransformation:
    """Multiply by ``-learning_rate`` (a number or a schedule): a descent step."""
    sign = -1 if flip_sign else 1
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


def trace(decay: float, nesterov: bool = False) -> GradientTransformation:
    """Momentum: ``t = g + decay * t``; the update is ``t`` (or ``g + decay * t`` with Nesterov)."""
    def update(updates, state, params=None):
        step = lambda g, t: g + decay * t
        new_trace = tree_map(step, updates, state.trace)
        return (tree_map(step, updates, new_trace) if nesterov else new_trace), TraceState(new_trace)
    return GradientTransformation(lambda params: TraceState(tree_map(fnp.zeros_like, params)), update)


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0) -> GradientTransformation:
    """Adam's rescaling: bias-corrected first moment over the root of the second moment."""
    def init(params):
        return ScaleByAdamState(_zero_count(), tree_map(fnp.zeros_like, params), tree_map(fnp.zeros_like, params))

    def update(updates, state, params=None):
        mu = tree_map(lambda g, m: (1 - b1) * g + b1 * m, updates, state.mu)
        nu = tree_map(lambda g, v: (1 - b2) * (g * g) + b2 * v, updates, state.nu)
        count = _increment(state.count)
        mu_hat, nu_hat = _bias_correction(mu, b1, count), _bias_correction(nu, b2, count)
        updates = tree_map(lambda m, v: m / (fnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        return updates, ScaleByAdamState(count, mu, nu)
    return GradientTransformation(init, update)


def scale_by_rms(decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0) -> GradientTransformation:
    """RMSProp's rescaling: the updates over the root of an average of squared gradients."""
    def update(updates, state, params=None):
        nu = tree_map(lambda g, v: (1 - decay) * (g * g) + decay * v, updates, state.nu)
        return tree_map(lambda g, v: g / fnp.sqrt(v + eps), updates, nu), ScaleByRmsState(nu)
    return GradientTransformation(
        lambda params: ScaleByRmsState(tree_map(lambda p: fnp.full_like(p, initial_scale), params)), update)


def scale_by_rss(initial_accumulator_value: float = 0.1, eps: float = 1e-7) -> GradientTransformation:
    """Adagrad's rescaling: the updates over the root of the sum of all squared gradients."""
    def update(updates, state, params=None):
        sums = tree_map(lambda g, s: g * g + s, updates, state.sum_of_squares)
        scaled = tree_map(lambda g, s: fnp.where(s > 0, g / fnp.sqrt(s + eps), fnp.zeros_like(g)), updates, sums)
        return scaled, ScaleByRssState(sums)
    return GradientTransformation(
        lambda params: ScaleByRssState(tree_map(lambda p: fnp.full_like(p, initial_accumulator_value), params)),
        update)


def scale_by_lion(b1: float = 0.9, b2: float = 0.99) -> GradientTransformation:
    """Lion's update direction: the sign of an interpolation of gradient and momentum."""
    def update(updates, state, params=None):
        direction = tree_map(lambda g, m: fnp.sign((1 - b1) * g + b1 * m), updates, state.mu)
        mu = tree_map(lambda g, m: (1 - b2) * g + b2 * m, updates, state.mu)
        return direction, ScaleByLionState(_increment(state.count), mu)
    return GradientTransformation(lambda params: ScaleByLionState(_zero_count(), tree_map(fnp.zeros_like, params)),
                                  update)


def masked(inner: GradientTransformation, mask: Any) -> GradientTransformation:
    """Apply ``inner`` only to the leaves where ``mask`` (a pytree of bools like the parameters,
    or a function of the parameters returning one) is True; the other updates pass unchanged."""
    def select(tree, flags):  # masked-out leaves become None: empty nodes the inner transform skips
        return tree_map(lambda x, keep: x if keep else None, tree, flags)

    def flags_for(params):
        flags = mask(params) if callable(mask) else mask
        if tree_structure(flags) != tree_structure(params):
            raise ValueError(f"ft.optim.masked: the mask has the structure {tree_structure(flags)}, the parameters "
                             f"{tree_structure(params)} {user_frame_description()}")
        return flags

    def update(updates, state, params=None):
        flags = flags_for(params if params is not None else updates)
        inner_updates, inner_state = inner.update(select(updates, flags), state.inner_state,
                                                  None if params is None else select(params, flags))
        new_leaves = tree_flatten(inner_updates, is_leaf=lambda x: x is None)[0]
        old_leaves, structure = tree_flatten(updates)
        return (tree_unflatten(structure, [old if new is None else new for old, new in zip(old_leaves, new_leaves)]),
                MaskedState(inner_state))
    return GradientTransformation(lambda params: MaskedState(inner.init(select(params, flags_for(params)))), update)


def add_decayed_weights(weight_decay: float = 0.0, mask: Any = None) -> GradientTransformation:
    """Add ``weight_decay * params`` to the updates (decoupled weight decay); ``mask`` as in
    ``masked`` limits it to some parameters."""
    def update(updates, state, params=None):
        if params is None:
            raise ValueError("ft.optim.add_decayed_weights: update needs the parameters: "
                             f"call opt.update(grads, state, params) {user_frame_description()}")
        if weight_decay == 0:
            return updates, state
        return tree_map(lambda g, p: g + _cast_like(weight_decay, g) * p, updates, params), state
    plain = GradientTransformation(lambda params: EmptyState(), update)
    return plain if mask is None else masked(plain, mask)


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Scale the updates down so that their global L2 norm is at most ``max_norm``."""
    def update(updates, state, params=None):
        norm = global_norm(updates)
        small = norm < max_norm
        return tree_map(lambda t: fnp.where(small, t, (t / fnp.asarray(norm, t.dtype)) * max_norm), updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


# --------------------------------------------------------------------------- optimizers


def sgd(learning_rate: ScalarOrSchedule, momentum: float | None = None, nesterov: bool = False) -> GradientTransformation:
    """Stochastic gradient descent, with optional (Nesterov) momentum."""
    _check_learning_rate(learning_rate, "sgd")
    return chain(trace(momentum, nesterov) if momentum is not None else identity(),
                 scale_by_learning_rate(learning_rate))


def adam(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         eps_root: float = 0.0) -> GradientTransformation:
    """Adam (Kingma & Ba, 2014)."""
    _check_learning_rate(learning_rate, "adam")
    return chain(scale_by_adam(b1, b2, eps, eps_root), scale_by_learning_rate(learning_rate))


def adamw(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          eps_root: float = 0.0, weight_decay: float = 1e-4, mask: Any = None) -> GradientTransformation:
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019)."""
    _check_learning_rate(learning_rate, "adamw")
    return chain(scale_by_adam(b1, b2, eps, eps_root), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate: ScalarOrSchedule, decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0,
            momentum: float | None = None, nesterov: bool = False) -> GradientTransformation:
    """RMSProp (Tieleman & Hinton, 2012), with optional momentum (optax's defaults)."""
    _check_learning_rate(learning_rate, "rmsprop")
    return chain(scale_by_rms(decay, eps, initial_scale), scale_by_learning_rate(learning_rate),
                 trace(momentum, nesterov) if momentum is not None else identity())


def adagrad(learning_rate: ScalarOrSchedule, initial_accumulator_value: float = 0.1,
            eps: float = 1e-7) -> GradientTransformation:
    """Adagrad (Duchi et al., 2011)."""
    _check_learning_rate(learning_rate, "adagrad")
    return chain(scale_by_rss(initial_accumulator_value, eps), scale_by_learning_rate(learning_rate))


def lion(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.99, weight_decay: float = 1e-3,
         mask: Any = None) -> GradientTransformation:
    """Lion (Chen et al., 2023): sign updates with decoupled weight decay."""
    _check_learning_rate(learning_rate, "lion")
    return chain(scale_by_lion(b1, b2), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


# --------------------------------------------------------------------------- schedules


def constant_schedule(value: float) -> Schedule:
    """``value`` at every step."""
    return lambda count: value


def polynomial_schedule(init_value: float, end_value: float, power: float, transition_steps: int,
                        transition_begin: int = 0) -> Schedule:
    """From ``init_value`` to ``end_value`` over ``transition_steps`` steps (after
    ``transition_begin``) along ``(1 - t/T)**power``."""
    if transition_steps <= 0:
        return constant_schedule(init_value)
    transition_begin = max(transition_begin, 0)

    def schedule(count):
        t = fnp.clip(count - transition_begin, 0, transition_steps)
        return (init_value - end_value) * (1 - t / transition_steps) ** power + end_value
    return schedule


def linear_schedule(init_value: float, end_value: float, transition_steps: int, transition_begin: int = 0) -> Schedule:
    """Linear interpolation from ``init_value`` to ``end_value`` over ``transition_steps`` steps."""
    return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


def cosine_decay_schedule(init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0) -> Schedule:
    """Cosine decay from ``init_value`` to ``alpha * init_value`` over ``decay_steps`` steps."""
    if decay_steps <= 0:
        raise ValueError(f"ft.optim.cosine_decay_schedule: decay_steps must be positive, got {decay_steps} {user_frame_description()}")

    def schedule(count):
        t = fnp.minimum(count, float(decay_steps))
        decayed = (1 - alpha) * (0.5 * (1 + fnp.cos(math.pi * t / decay_steps))) ** exponent + alpha
        return init_value * decayed
    return schedule


def join_schedules(schedules: list[Schedule], boundaries: list[int]) -> Schedule:
    """``schedules[i]`` from ``boundaries[i-1]`` on (its count restarting at 0 there)."""
    def schedule(count):
        out = schedules[0](count)
        for boundary, s in zip(boundaries, schedules[1:]):
            out = fnp.where(count < boundary, out, s(count - boundary))
        return out
    return schedule


def warmup_cosine_decay_schedule(init_value: float, peak_value: float, warmup_steps: int, decay_steps: int,
                                 end_value: float = 0.0, exponent: float = 1.0) -> Schedule:
    """Linear warmup from ``init_value`` to ``peak_value``, then cosine decay to ``end_value`` at
    step ``decay_steps`` (which counts the warmup)."""
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    return join_schedules([linear_schedule(init_value, peak_value, warmup_steps),
                           cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)],
                          [warmup_steps])


def exponential_decay(init_value: float, transition_steps: int, decay_rate: float, transition_begin: int = 0,
                      staircase: bool = False, end_value: float | None = None) -> Schedule:
    """``init_value * decay_rate ** ((count - transition_begin) / transition_steps)`` (floored with
    ``staircase``), bounded by ``end_value`` when given."""
    if transition_steps <= 0 or decay_rate == 0:
        return constant_schedule(init_value)
    transition_begin = max(transition_begin, 0)

    def schedule(count):
        steps = count - transition_begin
        p = steps / transition_steps
        if staircase:
            p = fnp.floor(p)
        value = fnp.where(steps <= 0, init_value, init_value * fnp.power(decay_rate, p))
        if end_value is not None:
            value = (fnp.maximum if decay_rate < 1 else fnp.minimum)(value, end_value)
        return value
    return schedule


def piecewise_constant_schedule(init_value: float, boundaries_and_scales: dict | None = None) -> Schedule:
    """``init_value`` times the product of the scales of the boundaries already passed."""
    items = sorted((boundaries_and_scales or {}).items())
    if any(s < 0 for _, s in items):
        raise ValueError(f"ft.optim.piecewise_constant_schedule: scales must be non-negative, got {dict(items)} {user_frame_description()}")

    def schedule(count):
        value = init_value
        for boundary, s in items:
            value = fnp.where(count < boundary, value, value * s)
        return value
    return schedule


# --------------------------------------------------------------------------- names optax has and functrace lacks

_OPTAX_OPTIMIZERS = {
    "adabelief", "adadelta", "adafactor", "adamax", "adamaxw", "adan", "amsgrad", "fromage", "lamb", "lars", "lbfgs",
    "nadam", "nadamw", "noisy_sgd", "novograd", "optimistic_gradient_descent", "polyak_sgd", "radam", "rprop",
    "sm3", "yogi", "sign_sgd", "muon", "schedule_free_adamw",
}
_OPTAX_LOSSES = {
    "ctc_loss", "ctc_loss_with_forward_probs", "convex_kl_divergence", "generalized_kl_divergence",
    "kl_divergence_with_log_targets", "multiclass_hinge_loss", "multiclass_perceptron_loss",
    "multiclass_sparsemax_loss", "perceptron_loss", "poly_loss_cross_entropy", "sigmoid_focal_loss",
    "smooth_labels", "sparsemax_loss", "ntxent", "triplet_margin_loss", "dice_loss", "ranking_softmax_loss",
}


def __getattr__(name: str):
    """An optax name functrace.optim lacks raises AttributeError (so ``hasattr`` works) saying
    what to use instead."""
    if name.startswith("__"):
        raise AttributeError(f"module 'functrace.optim' has no attribute {name!r}", name=name)
    if name in _OPTAX_OPTIMIZERS:
        hint = ("this optax optimizer is not provided: use sgd, adam, adamw, rmsprop, adagrad or lion, or compose "
                "it with chain(...) from the scale_by_* transformations, add_decayed_weights and "
                "scale_by_learning_rate, as optax does")
    elif name in _OPTAX_LOSSES or name.endswith("_loss"):
        hint = (f"this loss is not provided; the losses are {', '.join(losses.__all__)}; write others with "
                "functrace.numpy and functrace.nn (they differentiate and jit like these)")
    elif name.endswith("_schedule") or name.endswith("_schedules"):
        hint = ("this schedule is not provided: build it with join_schedules([...], boundaries) from "
                "constant_schedule, linear_schedule, polynomial_schedule, cosine_decay_schedule and "
                "exponential_decay, or pass any function of the step count")
    else:
        import difflib
        close = difflib.get_close_matches(name, __all__, n=3)
        hint = ((f"did you mean {' or '.join(close)}? " if close else "")
                + "functrace.optim follows optax but provides only the names in functrace.optim.__all__; a missing "
                  "transformation is GradientTransformation(init, update) written with functrace.numpy")
    raise AttributeError(f"module 'functrace.optim' has no attribute {name!r}: {hint}", name=name)
