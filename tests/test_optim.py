"""ft.optim: optax's optimizers and schedules, eagerly and under jit, checked against optax.

The expected parameters after 100 steps were made once with optax 0.2.8 (``_run`` with
``optax`` as the module, jitted by JAX; ``python tests/test_optim.py`` writes them again) and
are stored in tests/data/optim_optax_100_steps.npz, so CI without optax checks them too."""
import os

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp

DATA = os.path.join(os.path.dirname(__file__), "data", "optim_optax_100_steps.npz")
STEPS = 100

# name -> a function of the optimizer module (ft.optim or optax) making the optimizer
CASES = {
    "sgd": lambda m: m.sgd(0.1),
    "sgd_nesterov": lambda m: m.sgd(0.1, momentum=0.9, nesterov=True),
    "sgd_piecewise_momentum": lambda m: m.sgd(m.piecewise_constant_schedule(0.1, {20: 0.5, 50: 0.1}), momentum=0.5),
    "sgd_exponential_staircase": lambda m: m.sgd(m.exponential_decay(0.1, 10, 0.5, staircase=True)),
    "sgd_exponential_end": lambda m: m.sgd(m.exponential_decay(0.2, 7, 0.8, transition_begin=5, end_value=0.05)),
    "adam": lambda m: m.adam(1e-2),
    "adam_eps_root_linear": lambda m: m.adam(m.linear_schedule(0.1, 0.001, 50, transition_begin=10), eps_root=1e-8),
    "adamw": lambda m: m.adamw(1e-2, weight_decay=0.1),
    "adamw_masked": lambda m: m.adamw(1e-2, weight_decay=0.5, mask={"b": False, "w": True}),
    "rmsprop": lambda m: m.rmsprop(1e-3),
    "rmsprop_cosine_momentum": lambda m: m.rmsprop(m.cosine_decay_schedule(0.05, 80, alpha=0.1), momentum=0.9),
    "adagrad": lambda m: m.adagrad(0.1),
    "lion": lambda m: m.lion(1e-2),
    "clip_adam_warmup_cosine": lambda m: m.chain(m.clip_by_global_norm(1.0),
                                                 m.adam(m.warmup_cosine_decay_schedule(0.0, 0.1, 10, 100))),
}


def _initial_params():
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((3, 4)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}


def _gradients(p, k):
    """Smooth pseudo-gradients of the parameters (a chaotic map would amplify rounding differences)."""
    w, b = np.asarray(p["w"]), np.asarray(p["b"])
    return {"w": (0.5 * w + 0.1 * np.sin(w + 0.01 * k)).astype(np.float32),
            "b": (b - 1.0 + 0.1 * np.cos(b)).astype(np.float32)}


def _run(module, name, jit, apply_updates, steps=STEPS):
    """Parameters after ``steps`` updates of optimizer ``name`` from ``module``."""
    opt = CASES[name](module)
    params = _initial_params()
    state = opt.init(params)
    update = jit(opt.update)
    for k in range(steps):
        updates, state = update(_gradients(params, k), state, params)
        params = apply_updates(params, updates)
    return {k: np.asarray(v) for k, v in params.items()}, state


def _stored():
    with np.load(DATA) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_matches_stored_optax_values(name):
    params, state = _run(ft.optim, name, ft.jit(backend="numpy"), ft.optim.apply_updates)
    stored = _stored()
    for leaf in ("w", "b"):
        assert params[leaf].dtype == np.float32
        np.testing.assert_allclose(params[leaf], stored[f"{name}/{leaf}"], rtol=2e-5, atol=2e-6)
    counts = [x for x in ft.tree_util.tree_leaves(state) if np.asarray(x).dtype == np.int32]
    assert all(int(np.asarray(c)) == STEPS for c in counts)


@pytest.mark.parametrize("name", ["adam", "adamw_masked", "clip_adam_warmup_cosine", "rmsprop_cosine_momentum", "lion"])
def test_optimizer_matches_live_optax(name):
    optax = pytest.importorskip("optax", reason="optional: compares with optax itself")
    jax = pytest.importorskip("jax", reason="optional: optax runs on JAX")
    ours, _ = _run(ft.optim, name, ft.jit, ft.optim.apply_updates)
    theirs, _ = _run(optax, name, jax.jit, optax.apply_updates)
    for leaf in ("w", "b"):
        np.testing.assert_allclose(ours[leaf], theirs[leaf], rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("make", [
    lambda m: m.constant_schedule(0.3),
    lambda m: m.linear_schedule(1.0, 0.1, 30, transition_begin=5),
    lambda m: m.polynomial_schedule(1.0, 0.01, 2, 40),
    lambda m: m.cosine_decay_schedule(0.5, 40, alpha=0.2, exponent=2.0),
    lambda m: m.warmup_cosine_decay_schedule(0.0, 1.0, 10, 50, end_value=0.1),
    lambda m: m.exponential_decay(1.0, 10, 0.5, transition_begin=3),
    lambda m: m.exponential_decay(1.0, 10, 0.5, staircase=True, end_value=0.2),
    lambda m: m.piecewise_constant_schedule(2.0, {10: 0.5, 25: 0.1}),
], ids=["constant", "linear", "polynomial", "cosine", "warmup_cosine", "exponential", "exponential_staircase_end",
        "piecewise"])
def test_schedules_match_optax(make):
    optax = pytest.importorskip("optax", reason="optional: compares with optax itself")
    counts = np.array([0, 1, 4, 5, 9, 10, 11, 24, 25, 26, 39, 40, 41, 60], np.int32)
    ours = [float(np.asarray(make(ft.optim)(c))) for c in counts]
    theirs = [float(np.asarray(make(optax)(c))) for c in counts]
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    jitted = ft.jit(make(ft.optim), backend="numpy")
    np.testing.assert_allclose([float(np.asarray(jitted(c))) for c in counts], ours, rtol=1e-6, atol=1e-7)


def test_schedule_values():
    """Known values, without optax: warmup then cosine decay, and the piecewise boundaries."""
    s = ft.optim.warmup_cosine_decay_schedule(0.0, 1.0, 10, 50, end_value=0.1)
    np.testing.assert_allclose([float(s(np.int32(c))) for c in (0, 5, 10, 30, 50, 80)],
                               [0.0, 0.5, 1.0, 0.1 + 0.9 * 0.5, 0.1, 0.1], rtol=1e-6, atol=1e-7)
    p = ft.optim.piecewise_constant_schedule(2.0, {10: 0.5, 25: 0.1})
    assert [float(p(np.int32(c))) for c in (9, 10, 24, 25)] == pytest.approx([2.0, 1.0, 1.0, 0.1])


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
def test_jit_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)  # kernels, even for small programs
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 0)
    eager, eager_state = _run(ft.optim, "clip_adam_warmup_cosine", lambda f: f, ft.optim.apply_updates, steps=12)
    jitted, jit_state = _run(ft.optim, "clip_adam_warmup_cosine", ft.jit(backend=backend), ft.optim.apply_updates,
                             steps=12)
    # numpy: the same operations; OpenCL: float32 kernels' cos / pow / sqrt round differently
    tol = {"rtol": 1e-6, "atol": 1e-7} if backend == "numpy" else {"rtol": 1e-5, "atol": 1e-6}
    for leaf in ("w", "b"):
        np.testing.assert_allclose(jitted[leaf], eager[leaf], **tol)
    for a, b in zip(ft.tree_util.tree_leaves(jit_state), ft.tree_util.tree_leaves(eager_state)):
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **tol)


def test_training_loop_under_jit_converges_on_device_arrays():
    """Linear regression with adamw: the whole step (gradient, update, apply) is one jitted
    program on OpenCL, parameters and state stay device arrays, float32 throughout."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 5)).astype(np.float32)
    true_w = rng.standard_normal((5, 2)).astype(np.float32)
    y = x @ true_w + 0.5
    opt = ft.optim.adamw(ft.optim.warmup_cosine_decay_schedule(0.0, 0.1, 20, 300), weight_decay=1e-4)

    def loss(params, x, y):
        return fnp.mean((x @ params["w"] + params["b"] - y) ** 2)

    @ft.jit
    def step(params, state, x, y):
        value, grads = ft.value_and_grad(loss)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return ft.optim.apply_updates(params, updates), state, value

    params = ft.device_put({"w": np.zeros((5, 2), np.float32), "b": np.zeros(2, np.float32)})
    state = ft.device_put(opt.init(params))
    x_dev, y_dev = ft.device_put(x), ft.device_put(y)
    first = None
    for _ in range(300):
        params, state, value = step(params, state, x_dev, y_dev)
        first = float(value) if first is None else first
    assert all(leaf.dtype == np.float32 for leaf in ft.tree_util.tree_leaves(params))
    assert np.asarray(state[0].count).dtype == np.int32 and int(state[0].count) == 300
    assert float(value) < 1e-3 * first
    np.testing.assert_allclose(np.asarray(params["w"]), true_w, atol=2e-2)
    np.testing.assert_allclose(np.asarray(params["b"]), [0.5, 0.5], atol=2e-2)


def test_float64_parameters_stay_float64():
    opt = ft.optim.adam(ft.optim.cosine_decay_schedule(0.1, 10))
    params = {"w": np.ones(3)}
    updates, state = ft.jit(opt.update, backend="numpy")({"w": np.full(3, 0.5)}, opt.init(params), params)
    assert updates["w"].dtype == np.float64 and state[0].mu["w"].dtype == np.float64


def test_state_is_a_pytree_of_named_tuples():
    opt = ft.optim.adamw(1e-3)
    state = opt.init({"w": np.zeros(2, np.float32)})
    assert isinstance(state[0], ft.optim.ScaleByAdamState)
    leaves, tree = ft.tree_util.tree_flatten(state)
    assert len(leaves) == 3
    assert type(ft.tree_util.tree_unflatten(tree, leaves)[0]) is ft.optim.ScaleByAdamState


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(TypeError, match="learning_rate must be a number or a schedule"):
        ft.optim.adam("0.1")


@pytest.mark.parametrize("rate, error, message", [
    (None, TypeError, "got NoneType"), (True, TypeError, r"got bool\[\]"), (np.ones(3), TypeError, r"got float64\[3\]"),
    (-1e-3, ValueError, "finite and non-negative, got -0.001"), (float("nan"), ValueError, "got nan"),
    (np.float32(np.inf), ValueError, "got inf")])
def test_a_bad_learning_rate_is_named_with_the_callers_function(rate, error, message):
    def make_optimizer():
        return ft.optim.adam(rate)
    with pytest.raises(error, match=f"ft.optim.adam: learning_rate .*{message}.* in function `make_optimizer`"):
        make_optimizer()


def test_a_traced_or_device_scalar_learning_rate_is_accepted():
    params = {"w": np.ones(2, np.float32)}

    def step(rate, params):
        opt = ft.optim.sgd(rate)
        return opt.update(params, opt.init(params), params)[0]
    np.testing.assert_allclose(ft.jit(step, backend="numpy")(np.float32(0.5), params)["w"], [-0.5, -0.5])
    np.testing.assert_allclose(ft.optim.adam(np.float32(0.0)).update(params, ft.optim.adam(0.0).init(params))[0]["w"], 0)
    on_device = ft.device_put(np.float32(0.5))
    opt = ft.optim.sgd(on_device)
    np.testing.assert_allclose(opt.update(params, opt.init(params))[0]["w"], [-0.5, -0.5])


def test_misused_optimizers_raise_clear_errors():
    opt = ft.optim.adamw(0.1)
    params = {"w": np.ones(2, np.float32)}
    with pytest.raises(ValueError, match="needs the parameters"):
        opt.update(params, opt.init(params))
    with pytest.raises(TypeError, match="expected GradientTransformations"):
        ft.optim.chain(ft.optim.adam(0.1), "sgd")


def test_gradients_unlike_the_parameters_are_named_at_the_update():
    params = {"w": np.ones(3, np.float32), "b": np.zeros(2, np.float32)}
    opt = ft.optim.adamw(0.1)
    state = opt.init(params)

    def train_step(grads):
        return opt.update(grads, state, params)
    with pytest.raises(ValueError, match=r"update got updates \(gradients\) with the structure .* in function `train_step`"):
        train_step({"w": np.ones(3, np.float32)})
    with pytest.raises(ValueError, match=r"leaf 1 of the updates \(gradients\) of shape \(4,\), its parameter has \(3,\)"):
        ft.jit(train_step, backend="numpy")({"w": np.ones(4, np.float32), "b": np.zeros(2, np.float32)})
    masked = ft.optim.adamw(0.1, mask={"b": False, "w": True})  # masked-out leaves: still the same structure
    masked.update(params, masked.init(params), params)
    with pytest.raises(ValueError, match=r"ft.optim.masked: the mask has the structure .* in function `make_state`"):
        def make_state():
            return ft.optim.adamw(0.1, mask={"w": True}).init(params)
        make_state()


if __name__ == "__main__":  # write the stored expected values again (needs optax)
    import jax
    import optax
    np.savez(DATA, **{f"{name}/{leaf}": value for name in CASES
                      for leaf, value in _run(optax, name, jax.jit, optax.apply_updates)[0].items()})
    print(f"wrote {DATA}")
