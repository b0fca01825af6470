"""ft.optim's losses against optax: stored optax values and gradients (optax 0.2.8, float32), optax
itself when installed, the signatures, jit on both backends, grad, vmap against a loop, and
check_grads (order 2, forward and reverse, float64) for each loss."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import functrace as ft
from functrace.test_util import check_grads

L = ft.optim.losses

LOGITS = [[1.2, -0.8, -0.5, 0.3], [0.9, -1.2, 1.1, 2.0], [-0.25, 0.0, 3.5, -2.75]]
PROBS = [[0.7, 0.1, 0.0, 0.2], [0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 1.0, 0.0]]
MASK_KL = [[True, False, True, True], [True, True, False, True], [True, True, True, True]]
MASK = [[True, True, False, True], [True, True, True, True], [False, True, True, False]]
LOGITS3 = [[[0.5, -1.0, 2.0, 0.25], [1.5, 0.0, -0.75, 1.0], [-2.0, 0.5, 0.5, 3.0]],
           [[0.1, 0.2, 0.3, 0.4], [-0.4, -0.3, -0.2, -0.1], [1.0, -1.0, 2.0, -2.0]]]
PRED = [[0.5, -1.5, 2.25, 0.0], [1.75, -0.3, 0.05, -3.0], [0.01, 0.02, -0.03, 0.04]]
TARG = [[0.25, -1.0, 0.0, 0.5], [-1.25, -0.2, 0.0, 4.0], [0.0, 0.01, 0.01, 0.0]]
SIGNS = [[1.0, -1.0, 1.0, -1.0], [-1.0, -1.0, 1.0, 1.0], [1.0, 1.0, -1.0, 1.0]]
# name: (loss, positional arguments (arrays as nested lists; dtypes as given), keyword arguments)
CASES = {
    "softmax_cross_entropy": ("softmax_cross_entropy", (LOGITS, PROBS), {}),
    "softmax_cross_entropy_axis0": ("softmax_cross_entropy", (LOGITS, PROBS), {"axis": 0}),
    "softmax_cross_entropy_axes": ("softmax_cross_entropy", (LOGITS, PROBS), {"axis": (0, 1)}),
    "softmax_cross_entropy_where": ("softmax_cross_entropy", (LOGITS, PROBS), {"where": MASK}),
    "softmax_cross_entropy_batch_where": ("softmax_cross_entropy", (LOGITS, PROBS), {"where": [True, False, True]}),
    "softmax_cross_entropy_with_integer_labels": ("softmax_cross_entropy_with_integer_labels",
                                                  (LOGITS, np.array([0, 3, 2], np.int32)), {}),
    "softmax_cross_entropy_with_integer_labels_axis0": ("softmax_cross_entropy_with_integer_labels",
                                                        (LOGITS, np.array([2, 0, 1, 1], np.int32)), {"axis": 0}),
    "softmax_cross_entropy_with_integer_labels_axes": ("softmax_cross_entropy_with_integer_labels",
                                                       (LOGITS3, np.array([7, 11], np.int32)), {"axis": (1, 2)}),
    "softmax_cross_entropy_with_integer_labels_where": ("softmax_cross_entropy_with_integer_labels",
                                                        (LOGITS, np.array([1, 3, 2], np.int32)), {"where": MASK}),
    "safe_softmax_cross_entropy": ("safe_softmax_cross_entropy", (LOGITS, PROBS), {}),
    "sigmoid_binary_cross_entropy": ("sigmoid_binary_cross_entropy", (LOGITS, PROBS), {}),
    "hinge_loss": ("hinge_loss", (PRED, SIGNS), {}),
    "kl_divergence": ("kl_divergence", (PRED, PROBS), {}),
    "kl_divergence_axis0": ("kl_divergence", (PRED, PROBS), {"axis": 0}),
    "kl_divergence_where": ("kl_divergence", (PRED, PROBS), {"where": MASK_KL}),
    "kl_divergence_broadcast_where": ("kl_divergence", (PRED, PROBS), {"where": [True, False, True, True]}),
    "squared_error": ("squared_error", (PRED, TARG), {}),
    "squared_error_no_targets": ("squared_error", (PRED,), {}),
    "l2_loss": ("l2_loss", (PRED, TARG), {}),
    "l2_loss_no_targets": ("l2_loss", (PRED,), {}),
    "huber_loss": ("huber_loss", (PRED, TARG), {}),
    "huber_loss_delta": ("huber_loss", (PRED, TARG), {"delta": 0.5}),
    "huber_loss_no_targets": ("huber_loss", (PRED,), {}),
    "log_cosh": ("log_cosh", (PRED, TARG), {}),
    "log_cosh_no_targets": ("log_cosh", (PRED,), {}),
    "cosine_similarity": ("cosine_similarity", (PRED, TARG), {}),
    "cosine_similarity_epsilon": ("cosine_similarity", (PRED, TARG), {"epsilon": 0.01}),
    "cosine_similarity_axis0": ("cosine_similarity", (PRED, TARG), {"axis": 0}),
    "cosine_similarity_where": ("cosine_similarity", (PRED, TARG), {"where": MASK}),
    "cosine_similarity_broadcast_where": ("cosine_similarity", (PRED, TARG), {"where": [True, True, False, True]}),
    "cosine_distance": ("cosine_distance", (PRED, TARG), {}),
    "cosine_distance_epsilon": ("cosine_distance", (PRED, TARG), {"epsilon": 0.01}),
}

# optax 0.2.8 (jax 0.10.2) in float32: name: (the loss, the gradient of its sum w.r.t. the first argument)
OPTAX = {
    'softmax_cross_entropy': ([0.92498845, 1.8767275, 0.054152507],
        [[-0.12015146, -0.021526039, 0.105928764, 0.035748817], [-0.06301509, -0.2271025, -0.021616112, 0.31173372], [0.02227807, 0.028605608, -0.05271238, 0.0018286953]]),
    'softmax_cross_entropy_axis0': ([0.7217268, 0.5759701, 0.72936124, 0.41878363],
        [[-0.21908191, -0.010161064, 0.020643692, -0.13099544], [0.10627284, -0.18977916, -0.14775114, 0.12772742], [0.11280909, 0.19994023, 0.12710738, 0.0032679825]]),
    'softmax_cross_entropy_axes': (6.937941,
        [[-0.51499414, -0.07496219, 0.033797517, -0.12478225], [-0.11294429, -0.23321664, -0.08259982, 0.16173807], [0.04339687, 0.055722687, 0.84528196, 0.0035622322]]),
    'softmax_cross_entropy_where': ([0.8130187, 1.8767275, 0.029750418],
        [[-0.051451564, -0.012228518, 0, 0.06368011], [-0.06301509, -0.2271025, -0.021616112, 0.31173372], [0, 0.02931223, -0.029312253, 0]]),
    'softmax_cross_entropy_batch_where': ([0.92498845, -0, 0.054152507],
        [[-0.12015146, -0.021526039, 0.105928764, 0.035748817], [0, 0, 0, 0], [0.02227807, 0.028605608, -0.05271238, 0.0018286953]]),
    'softmax_cross_entropy_with_integer_labels': ([0.5449884, 0.5767274, 0.05415249],
        [[-0.42015147, 0.07847396, 0.105928764, 0.23574881], [0.18698491, 0.022897502, 0.22838388, -0.43826628], [0.02227807, 0.028605608, -0.05271238, 0.0018286953]]),
    'softmax_cross_entropy_with_integer_labels_axis0': ([2.130765, 1.3599147, 2.503489, 0.17507458],
        [[0.5062296, -0.7433173, 0.016514955, 0.1533435], [0.37502405, 0.17205954, -0.9182009, -0.16060567], [-0.8812536, 0.5712578, 0.90168595, 0.007262184]]),
    'softmax_cross_entropy_with_integer_labels_axes': ([2.7584133, 4.9398766],
        [[[0.038449354, 0.008579211, 0.17231806, 0.029944386], [0.104516186, 0.023320712, 0.011015925, -0.9366077], [0.0031561153, 0.038449354, 0.038449354, 0.46840903]], [[0.05843287, 0.06457831, 0.071370065, 0.07887612], [0.03544132, 0.039168727, 0.043288134, 0.04784079], [0.14372167, 0.019450612, 0.390676, -0.9928445]]]),
    'softmax_cross_entropy_with_integer_labels_where': ([2.4330187, 0.5767274, 0.029750347],
        [[0.6485484, -0.9122285, 0, 0.2636801], [0.18698491, 0.022897502, 0.22838388, -0.43826628], [0, 0.02931223, -0.029312253, 0]]),
    'safe_softmax_cross_entropy': ([0.92498845, 1.8767275, 0.054152507],
        [[-0.12015146, -0.021526039, 0.105928764, 0.03574881], [-0.06301509, -0.2271025, -0.021616116, 0.31173372], [0.02227807, 0.028605608, -0.05271238, 0.0018286953]]),
    'sigmoid_binary_cross_entropy': ([[0.62328243, 0.45110065, 0.474077, 0.79435533], [1.0161538, 0.5632825, 1.1123353, 1.626928], [0.5759394, 0.6931472, 0.029750418, 0.06196759]],
        [[0.06852481, 0.21002553, 0.37754068, 0.37444252], [0.46094954, -0.018524796, 0.5002601, 0.6307971], [0.4378235, 0.5, -0.029312233, 0.06008665]]),
    'hinge_loss': ([[0.5, 0, 0, 1], [2.75, 0.7, 0.95, 4], [0.99, 0.98, 0.97, 0.96]],
        [[-1, 0, -0, 1], [1, 1, -1, -1], [-1, -1, 1, -1]]),
    'kl_divergence': ([-1.0018185, -1.0112944, 0.03],
        [[-0.7, -0.1, -0, -0.2], [-0.25, -0.25, -0.25, -0.25], [-0, -0, -1, -0]]),
    'kl_divergence_axis0': ([-1.3837461, -0.35183212, -0.32907358, 0.081538826],
        [[-0.7, -0.1, -0, -0.2], [-0.25, -0.25, -0.25, -0.25], [-0, -0, -1, -0]]),
    'kl_divergence_where': ([-0.92156005, -0.6522207, 0.03],
        [[-0.7, -0, -0, -0.2], [-0.25, -0.25, -0, -0.25], [-0, -0, -1, -0]]),
    'kl_divergence_broadcast_where': ([-0.92156005, -0.7397208, 0.03],
        [[-0.7, -0, -0, -0.2], [-0.25, -0, -0.25, -0.25], [-0, -0, -1, -0]]),
    'squared_error': ([[0.0625, 0.25, 5.0625, 0.25], [9, 0.010000002, 0.0025000002, 49], [0.0001, 0.0001, 0.0016, 0.0016]],
        [[0.5, -1, 4.5, -1], [6, -0.20000002, 0.1, -14], [0.02, 0.02, -0.08, 0.08]]),
    'squared_error_no_targets': ([[0.25, 2.25, 5.0625, 0], [3.0625, 0.09, 0.0025000002, 9], [0.0001, 0.0004, 0.0009, 0.0016]],
        [[1, -3, 4.5, 0], [3.5, -0.6, 0.1, -6], [0.02, 0.04, -0.06, 0.08]]),
    'l2_loss': ([[0.03125, 0.125, 2.53125, 0.125], [4.5, 0.005000001, 0.0012500001, 24.5], [0.00005, 0.00005, 0.0008, 0.0008]],
        [[0.25, -0.5, 2.25, -0.5], [3, -0.10000001, 0.05, -7], [0.01, 0.01, -0.04, 0.04]]),
    'l2_loss_no_targets': ([[0.125, 1.125, 2.53125, 0], [1.53125, 0.045, 0.0012500001, 4.5], [0.00005, 0.0002, 0.00045, 0.0008]],
        [[0.5, -1.5, 2.25, 0], [1.75, -0.3, 0.05, -3], [0.01, 0.02, -0.03, 0.04]]),
    'huber_loss': ([[0.03125, 0.125, 1.75, 0.125], [2.5, 0.005000001, 0.0012500001, 6.5], [0.00005, 0.00005, 0.0008, 0.0008]],
        [[0.25, -0.5, 1, -0.5], [1, -0.100000024, 0.050000012, -1], [0.00999999, 0.00999999, -0.04000002, 0.04000002]]),
    'huber_loss_delta': ([[0.03125, 0.125, 1, 0.125], [1.375, 0.005000001, 0.0012500001, 3.375], [0.00005, 0.00005, 0.0008, 0.0008]],
        [[0.25, -0.5, 0.5, -0.5], [0.5, -0.100000024, 0.050000012, -0.5], [0.00999999, 0.00999999, -0.03999999, 0.03999999]]),
    'huber_loss_no_targets': ([[0.125, 1, 1.75, 0], [1.25, 0.045, 0.0012500001, 2.5], [0.00005, 0.0002, 0.00045, 0.0008]],
        [[0.5, -1, 1, 0], [1, -0.3, 0.050000012, -1], [0.00999999, 0.01999998, -0.029999971, 0.04000002]]),
    'log_cosh': ([[0.030929804, 0.120114505, 1.5679007, 0.120114505], [2.3093286, 0.00499171, 0.0012494922, 6.306854], [0.000049948692, 0.000049948692, 0.0007997751, 0.0007997751]],
        [[0.24491867, -0.4621172, 0.97802603, -0.4621172], [0.99505466, -0.099668026, 0.049958378, -0.9999982], [0.009999692, 0.009999692, -0.039978713, 0.039978713]]),
    'log_cosh_no_targets': ([[0.120114505, 0.85544014, 1.5679007, 0], [1.0866033, 0.04434085, 0.0012494922, 2.3093286], [0.000049948692, 0.00019997358, 0.00044995546, 0.0007997751]],
        [[0.4621172, -0.90514827, 0.97802603, 0], [0.9413755, -0.29131255, 0.049958378, -0.99505466], [0.009999692, 0.019997329, -0.029990941, 0.039978713]]),
    'cosine_similarity': ([0.5157877, -0.9658301, -0.12909943],
        [[0.045250297, -0.21510285, -0.1534575, 0.15870392], [0.053597562, -0.037510898, 0.003972975, 0.03508249], [0.4303314, 13.770606, 11.618949, 1.7213256]]),
    'cosine_similarity_epsilon': ([0.5157877, -0.9658301, -0.009999998],
        [[0.045250297, -0.21510285, -0.1534575, 0.15870392], [0.053597562, -0.037510898, 0.003972975, 0.03508249], [0, 0.99999994, 0.99999994, 0]]),
    'cosine_similarity_axis0': ([-0.8889612, 0.99999475, -0.013328859, -0.99218965],
        [[0.24193163, -0.000027239323, 0.005919962, 0.041341234], [-0.069138706, -0.000005438924, 0.00013155471, 0.000058829784], [0.002683575, -0.0021361033, 0.44421634, 0.004408947]]),
    'cosine_similarity_where': ([0.8970852, -0.9658301, -0.19611612],
        [[-0.04140392, -0.013801336, 0, 0.27602622], [0.053597562, -0.037510898, 0.003972975, 0.03508249], [0, 22.628784, 15.085857, 0]]),
    'cosine_similarity_broadcast_where': ([0.8970852, -0.96592927, 0.43643576],
        [[-0.04140392, -0.013801336, 0, 0.27602622], [0.05363165, -0.037519656, 0, 0.0350371], [-2.0782654, 17.665258, 0, -8.313062]]),
    'cosine_distance': ([0.48421228, 1.9658301, 1.1290994],
        [[-0.045250297, 0.21510285, 0.1534575, -0.15870392], [-0.053597562, 0.037510898, -0.003972975, -0.03508249], [-0.4303314, -13.770606, -11.618949, -1.7213256]]),
    'cosine_distance_epsilon': ([0.48421228, 1.9658301, 1.01],
        [[-0.045250297, 0.21510285, 0.1534575, -0.15870392], [-0.053597562, 0.037510898, -0.003972975, -0.03508249], [-0, -0.99999994, -0.99999994, -0]]),
}


def _arrays(args, kwargs, dtype=np.float32):
    """The case's arguments as arrays: float lists in ``dtype``, booleans and integers kept."""
    def conv(a):
        if isinstance(a, (list, np.ndarray)):
            a = np.asarray(a)
            return a.astype(dtype) if a.dtype.kind == "f" else a
        return a
    return tuple(conv(a) for a in args), {k: conv(v) for k, v in kwargs.items()}


def _close(got, want, rtol=2e-6, atol=2e-7):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_stored_optax_values(name):
    fn, args, kwargs = CASES[name]
    args, kwargs = _arrays(args, kwargs)
    loss = getattr(ft.optim, fn)
    out = loss(*args, **kwargs)
    assert np.asarray(out).dtype == np.float32
    want_value, want_grad = OPTAX[name]
    _close(out, want_value)
    grad = ft.grad(lambda x: loss(x, *args[1:], **kwargs).sum())(args[0])
    assert np.asarray(grad).dtype == np.float32
    _close(grad, want_grad, atol=2e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_optax(name):
    optax = pytest.importorskip("optax", reason="optax is not installed: the stored values are checked instead")
    import jax
    fn, args, kwargs = CASES[name]
    args, kwargs = _arrays(args, kwargs)
    theirs = getattr(optax.losses, fn)
    _close(getattr(L, fn)(*args, **kwargs), theirs(*args, **kwargs))
    _close(ft.grad(lambda x: getattr(L, fn)(x, *args[1:], **kwargs).sum())(args[0]),
           jax.grad(lambda x: theirs(x, *args[1:], **kwargs).sum())(args[0]), atol=2e-6)


@pytest.mark.parametrize("backend", ["numpy", None])
@pytest.mark.parametrize("name", sorted(CASES))
def test_jit_gives_the_eager_values_on_both_backends(name, backend):
    fn, args, kwargs = CASES[name]
    args, kwargs = _arrays(args, kwargs)
    loss = getattr(ft.optim, fn)
    value_and_grad = ft.jit(ft.value_and_grad(lambda *a: loss(*a, **kwargs).sum()), backend=backend)
    value, grad = value_and_grad(*args)
    assert np.asarray(grad).dtype == np.float32
    _close(value, np.sum(np.asarray(OPTAX[name][0], np.float64)), rtol=1e-5, atol=1e-6)
    _close(grad, OPTAX[name][1], rtol=1e-5, atol=2e-6)
    out = ft.jit(lambda *a: loss(*a, **kwargs), backend=backend)(*args)
    assert np.asarray(out).dtype == np.float32
    _close(out, OPTAX[name][0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_matches_a_loop(name):
    fn, args, kwargs = CASES[name]
    args, kwargs = _arrays(args, kwargs)
    loss = getattr(ft.optim, fn)
    scales = np.array([1.0, 0.5, 2.0], np.float32)
    batches = [np.stack([a * s if a.dtype.kind == "f" else a for s in scales]) for a in args]
    got = ft.vmap(lambda *a: loss(*a, **kwargs))(*batches)
    want = np.stack([np.asarray(loss(*(b[i] for b in batches), **kwargs)) for i in range(len(scales))])
    assert np.asarray(got).dtype == np.float32
    _close(got, want, rtol=1e-5, atol=1e-6)


# for check_grads: the cases with strictly positive probabilities (kl_divergence's and the
# cross-entropies' zero targets are kinks of 0 log 0 for finite differences) and no ties
POSITIVE = [[0.6, 0.1, 0.1, 0.2], [0.25, 0.25, 0.25, 0.25], [0.05, 0.05, 0.8, 0.1]]
GRAD_CASES = {
    "softmax_cross_entropy": (lambda x, y: L.softmax_cross_entropy(x, y), (LOGITS, POSITIVE)),
    "softmax_cross_entropy_where": (lambda x, y: L.softmax_cross_entropy(x, y, where=np.array(MASK)), (LOGITS, POSITIVE)),
    "softmax_cross_entropy_with_integer_labels": (
        lambda x: L.softmax_cross_entropy_with_integer_labels(x, np.array([0, 3, 2])), (LOGITS,)),
    "safe_softmax_cross_entropy": (lambda x, y: L.safe_softmax_cross_entropy(x, y), (LOGITS, POSITIVE)),
    "sigmoid_binary_cross_entropy": (lambda x, y: L.sigmoid_binary_cross_entropy(x, y), (LOGITS, PROBS)),
    "hinge_loss": (lambda x, y: L.hinge_loss(x, y), (PRED, SIGNS)),
    "kl_divergence": (lambda x, y: L.kl_divergence(x, y), (PRED, POSITIVE)),
    "squared_error": (lambda x, y: L.squared_error(x, y), (PRED, TARG)),
    "l2_loss": (lambda x, y: L.l2_loss(x, y), (PRED, TARG)),
    "huber_loss": (lambda x, y: L.huber_loss(x, y, delta=0.7), (PRED, TARG)),
    "log_cosh": (lambda x, y: L.log_cosh(x, y), (PRED, TARG)),
    "cosine_similarity": (lambda x, y: L.cosine_similarity(x, y, epsilon=0.01), (PRED, TARG)),
    "cosine_distance": (lambda x, y: L.cosine_distance(x, y, axis=0), (PRED, TARG)),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_check_grads(name):
    f, args = GRAD_CASES[name]
    check_grads(f, [np.array(a, np.float64) for a in args], order=2, modes=("fwd", "rev"))


def test_every_loss_has_a_gradient_case_and_a_stored_optax_case():
    names = set(ft.optim.losses.__all__)
    assert names == set(GRAD_CASES) - {"softmax_cross_entropy_where"}
    assert names == {fn for fn, _, _ in CASES.values()}


# optax 0.2.8's parameters (name, default or EMPTY): ft.optim takes the same keywords
EMPTY = inspect.Parameter.empty
SIGNATURES = {
    "softmax_cross_entropy": [("logits", EMPTY), ("labels", EMPTY), ("axis", -1), ("where", None)],
    "softmax_cross_entropy_with_integer_labels": [("logits", EMPTY), ("labels", EMPTY), ("axis", -1),
                                                  ("where", None)],
    "safe_softmax_cross_entropy": [("logits", EMPTY), ("labels", EMPTY)],
    "sigmoid_binary_cross_entropy": [("logits", EMPTY), ("labels", EMPTY)],
    "hinge_loss": [("predictor_outputs", EMPTY), ("targets", EMPTY)],
    "kl_divergence": [("log_predictions", EMPTY), ("targets", EMPTY), ("axis", -1), ("where", None)],
    "squared_error": [("predictions", EMPTY), ("targets", None)],
    "l2_loss": [("predictions", EMPTY), ("targets", None)],
    "huber_loss": [("predictions", EMPTY), ("targets", None), ("delta", 1.0)],
    "log_cosh": [("predictions", EMPTY), ("targets", None)],
    "cosine_similarity": [("predictions", EMPTY), ("targets", EMPTY), ("epsilon", 0.0), ("axis", -1), ("where", None)],
    "cosine_distance": [("predictions", EMPTY), ("targets", EMPTY), ("epsilon", 0.0), ("axis", -1), ("where", None)],
}


def _parameters(fn):
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signatures_are_optax(name):
    assert _parameters(getattr(ft.optim, name)) == SIGNATURES[name]
    assert getattr(ft.optim, name) is getattr(ft.optim.losses, name)


def test_signatures_match_installed_optax():
    optax = pytest.importorskip("optax", reason="optax is not installed: the stored signatures are checked instead")
    for name in SIGNATURES:
        assert _parameters(getattr(ft.optim, name)) == _parameters(getattr(optax.losses, name)), name
        assert _parameters(getattr(ft.optim, name)) == _parameters(getattr(optax, name)), name


def test_documented_example_values():
    """optax's docstring example: [0.2761 2.9518] for both cross-entropies."""
    logits = np.array([[1.2, -0.8, -0.5], [0.9, -1.2, 1.1]], np.float32)
    _close(ft.optim.softmax_cross_entropy(logits, np.array([[1.0, 0, 0], [0, 1.0, 0]], np.float32)),
           [0.2761, 2.9518], rtol=2e-4)
    _close(ft.optim.softmax_cross_entropy_with_integer_labels(logits, np.array([0, 1])), [0.2761, 2.9518], rtol=2e-4)


def test_safe_softmax_cross_entropy_reads_zero_log_zero_as_zero():
    logits = np.array([[-np.inf, 1.0, 2.0], [0.5, -np.inf, -np.inf]], np.float32)
    labels = np.array([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], np.float32)
    out = np.asarray(ft.optim.safe_softmax_cross_entropy(logits, labels))
    want = [-(0.5 * np.log(np.exp(1) / (np.exp(1) + np.exp(2))) + 0.5 * np.log(np.exp(2) / (np.exp(1) + np.exp(2)))), 0.0]
    _close(out, want, rtol=1e-6, atol=1e-7)
    with np.errstate(invalid="ignore"):  # the plain one reads 0 * log 0 as nan, as optax's
        assert np.isnan(np.asarray(ft.optim.softmax_cross_entropy(logits, labels))).all()
    grad = ft.grad(lambda x: ft.optim.safe_softmax_cross_entropy(x, labels).sum())(logits)
    assert np.isfinite(np.asarray(grad)).all()


def test_float64_stays_float64():
    out = ft.optim.huber_loss(np.array([0.5, 3.0]), np.array([0.0, 0.0]))
    assert np.asarray(out).dtype == np.float64
    _close(out, [0.125, 2.5], rtol=1e-15, atol=0)


def test_bad_input_raises_clear_errors():
    logits = np.zeros((2, 3), np.float32)
    with pytest.raises(TypeError, match="softmax_cross_entropy: logits must be floating point"):
        ft.optim.softmax_cross_entropy(np.zeros((2, 3), np.int32), logits)
    with pytest.raises(TypeError, match="labels must be integer class ids"):
        ft.optim.softmax_cross_entropy_with_integer_labels(logits, np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="labels must have the logits' shape without the class axis"):
        ft.optim.softmax_cross_entropy_with_integer_labels(logits, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="squared_error: predictions and targets must have the same shape"):
        ft.optim.squared_error(logits, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="axis 2 is out of bounds"):
        ft.optim.softmax_cross_entropy_with_integer_labels(logits, np.array([0, 1]), axis=(0, 2))


@pytest.mark.parametrize("name, hint", [("nadam", "optimizer is not provided"), ("sigmoid_focal_loss", "loss is not provided"),
                                        ("sgdr_schedule", "join_schedules"), ("adma", "did you mean adam"),
                                        ("zzz", "provides only the names")])
def test_missing_names_raise_attribute_errors_that_say_what_to_use(name, hint):
    assert not hasattr(ft.optim, name)
    with pytest.raises(AttributeError, match=hint):
        getattr(ft.optim, name)


def test_missing_losses_module_names_raise_attribute_errors():
    assert not hasattr(ft.optim.losses, "ctc_loss")
    with pytest.raises(AttributeError, match="does not provide optax.losses.ctc_loss; the losses are softmax_cross_entropy"):
        ft.optim.losses.ctc_loss
