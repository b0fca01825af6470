"""One array type that can be saved (issue 35): every kind of array functrace returns -- eager,
jitted on either backend, from grad, ft.random and device_put -- is an ``ft.Array`` (which
``fnp.ndarray`` names; numpy's arrays and scalars are not one), with JAX's methods; it pickles,
copies and deep-copies with its values, dtype and shape; a pickled device array loads in a process
that never imports OpenCL; a training run checkpointed with pickle and resumed gives the bits of
the run that went on."""
import copy
import pickle
import subprocess
import sys

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime as cl_runtime

RNG = np.random.default_rng(53)


def _arrays() -> dict:
    """One array of each kind functrace returns, over dtypes and shapes (0-d and empty included)."""
    x32 = RNG.standard_normal((3, 5)).astype(np.float32)
    x64 = RNG.standard_normal(7)
    kinds = {
        "jit float32": ft.jit(lambda a: a * 2.0 + 1.0)(x32),
        "jit float64 0-d": ft.jit(lambda a: fnp.sum(a))(x64),
        "jit int32": ft.jit(lambda a: (a * 10).astype(np.int32))(x32),
        "jit bool": ft.jit(lambda a: a > 0)(x32),
        "jit empty": ft.jit(lambda a: a[:0] * 2.0)(x32),
        "jit on numpy": ft.jit(lambda a: a - 1.0, backend="numpy")(x32),
        "eager": fnp.exp(fnp.asarray(x32)),
        "grad": ft.grad(lambda a: fnp.sum(fnp.sin(a) ** 2))(x64),
        "jitted grad": ft.jit(ft.grad(lambda a: fnp.sum(a ** 3)))(x32),
        "random": ft.random.normal(ft.random.PRNGKey(3), (4, 2)),
        "key": ft.random.PRNGKey(7),
        "device_put": ft.device_put(x32),
        "grad of a float": ft.grad(lambda a: a ** 3)(1.5),
        "jit on numpy, 0-d": ft.jit(lambda a: fnp.sum(a), backend="numpy")(x64),
        "jit of a scalar": ft.jit(lambda a: a * 2)(3.0),
        "cond of constants": ft.lax.cond(True, lambda: 1.0, lambda: 2.0),
    }
    return kinds


def _same(a, b) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))


@pytest.mark.parametrize("kind", list(_arrays()))
def test_every_kind_of_array_pickles_copies_and_deep_copies(kind, capfd):
    value = _arrays()[kind]
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        loaded = pickle.loads(pickle.dumps(value, protocol=protocol))
        _same(loaded, value)
        _same(ft.jit(lambda a: a)(loaded), value)  # (usable: a jitted function takes it)
    for copied in (copy.copy(value), copy.deepcopy(value)):
        assert copied is not value
        _same(copied, value)
    assert "Exception ignored" not in capfd.readouterr().err


def test_a_parameter_tree_deep_copies_without_noise(capfd):
    params = ft.device_put({"w": RNG.standard_normal((4, 3)).astype(np.float32), "b": [np.zeros(3, np.float32)]})
    copied = copy.deepcopy(params)
    assert copied["w"] is not params["w"]
    for a, b in zip(ft.tree_util.tree_leaves(copied), ft.tree_util.tree_leaves(params)):
        _same(a, b)
    del copied
    assert capfd.readouterr().err == ""


def test_a_pickled_device_array_loads_where_opencl_is_never_imported(tmp_path):
    value = ft.jit(lambda a: a * 3.0)(np.arange(6, dtype=np.float32).reshape(2, 3))
    if cl_runtime.get_runtime() is not None:
        assert isinstance(value, cl_runtime.Array)
    path = tmp_path / "params.pkl"
    path.write_bytes(pickle.dumps({"w": value}))
    child = ("import pickle, sys, numpy as np\n"
             f"p = pickle.loads(open({str(path)!r}, 'rb').read())\n"
             "assert 'pyopencl' not in sys.modules, 'loading imported pyopencl'\n"
             "print(type(p['w']).__name__, np.asarray(p['w']).tolist())\n")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(maxsplit=1) == ["EagerArray", "[[0.0, 3.0, 6.0], [9.0, 12.0, 15.0]]\n"]


def test_a_checkpointed_training_run_resumes_with_the_same_bits():
    """A small MLP trained by a jitted Adam step: saved with pickle after 3 steps, the run that went
    on and the one resumed from the file end with the same parameters, bit for bit."""
    x = RNG.standard_normal((32, 5)).astype(np.float32)
    y = RNG.standard_normal((32, 1)).astype(np.float32)
    params = {"w1": RNG.standard_normal((5, 8)).astype(np.float32) * 0.3, "b1": np.zeros(8, np.float32),
              "w2": RNG.standard_normal((8, 1)).astype(np.float32) * 0.3, "b2": np.zeros(1, np.float32)}
    opt = ft.optim.adam(1e-2)

    def loss(p):
        h = fnp.tanh(x @ p["w1"] + p["b1"])
        return fnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    @ft.jit
    def step(p, state):
        grads = ft.grad(loss)(p)
        updates, state = opt.update(grads, state, p)
        return ft.optim.apply_updates(p, updates), state

    state = opt.init(params)
    for _ in range(3):
        params, state = step(params, state)
    checkpoint = pickle.dumps((params, state))
    for _ in range(3):
        params, state = step(params, state)
    resumed, resumed_state = pickle.loads(checkpoint)
    for _ in range(3):
        resumed, resumed_state = step(resumed, resumed_state)
    for a, b in zip(ft.tree_util.tree_leaves((params, state)), ft.tree_util.tree_leaves((resumed, resumed_state))):
        _same(a, b)


@pytest.mark.parametrize("kind", list(_arrays()))
def test_every_kind_of_array_is_an_ft_array_with_jax_methods(kind, tmp_path):
    value = _arrays()[kind]
    assert isinstance(value, ft.Array) and isinstance(value, fnp.ndarray)
    assert value.block_until_ready() is value
    assert isinstance(value.devices(), set) and len(value.devices()) == 1
    host = np.asarray(value)
    assert type(host) is np.ndarray and host.shape == value.shape and host.dtype == value.dtype
    np.save(tmp_path / "a.npy", value)
    _same(np.load(tmp_path / "a.npy"), value)
    assert value.tolist() == host.tolist()
    assert repr(value).startswith("Array(")
    if value.size == 1:
        assert value.item() == host.item()
        assert format(value.reshape(()) if value.ndim else value, "") == format(host.reshape(()).item(), "")


def test_numpy_values_are_not_ft_arrays():
    assert fnp.ndarray is ft.Array
    for value in (np.ones(3), np.float32(1.0), np.int64(2), 1.0, [1.0]):
        assert not isinstance(value, ft.Array)


def test_device_put_without_a_device_gives_host_ft_arrays(monkeypatch):
    monkeypatch.setattr(cl_runtime, "get_runtime", lambda: None)
    host = np.arange(4.0)
    put = ft.device_put({"w": host})["w"]
    assert isinstance(put, ft.Array)
    host[0] = 7.0  # (a copy, as JAX's: the caller's array stays theirs)
    np.testing.assert_array_equal(np.asarray(put), [0.0, 1.0, 2.0, 3.0])
