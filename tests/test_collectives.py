"""Collectives over named axes (``ft.lax.psum``, ...): JAX's semantics under ``vmap(axis_name=)``,
their derivatives and batching rules, their place in jitted programs (effectful), and the
single-process group ``"processes"``.  Multi-process runs: tests/test_distributed.py."""
import pathlib

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp

P = "processes"

DATA = pathlib.Path(__file__).parent / "data" / "collectives_jax.npz"
RNG = np.random.default_rng(19)


def jax_cases(lax, axis: str = "i", n: int = 3):
    """name -> (per-member function, stacked input of ``n`` members), for ``lax`` = ``ft.lax`` or
    ``jax.lax`` (the same API); small integers in float64, so results are exact."""
    x = np.arange(n * n * 4, dtype=np.float64).reshape(n, n, 4) % 7 - 3
    x2 = np.arange(n * 2 * n * 2, dtype=np.float64).reshape(n, 2 * n, 2) % 5 - 2
    cycle = [(i, (i + 1) % n) for i in range(n)]
    reverse = [(i, n - 1 - i) for i in range(n)]
    return {
        "psum": (lambda v: lax.psum(v, axis), x),
        "psum_tree": (lambda v: lax.psum((v, v[0] * 2), axis)[1], x),
        "pmean": (lambda v: lax.pmean(v, axis), x),
        "pmax": (lambda v: lax.pmax(v, axis), x),
        "pmin": (lambda v: lax.pmin(v, axis), x),
        "all_gather0": (lambda v: lax.all_gather(v, axis), x),
        "all_gather2": (lambda v: lax.all_gather(v, axis, axis=2), x),
        "all_gather_tiled1": (lambda v: lax.all_gather(v, axis, axis=1, tiled=True), x),
        "psum_scatter0": (lambda v: lax.psum_scatter(v, axis), x),
        "psum_scatter_tiled0": (lambda v: lax.psum_scatter(v, axis, scatter_dimension=0, tiled=True), x2),
        "psum_scatter_1": (lambda v: lax.psum_scatter(v.T, axis, scatter_dimension=1), x),
        "ppermute_cycle": (lambda v: lax.ppermute(v, axis, cycle), x),
        "ppermute_reverse": (lambda v: lax.ppermute(v, axis, reverse), x),
        "all_to_all_01": (lambda v: lax.all_to_all(v, axis, 0, 1), x),
        "all_to_all_11": (lambda v: lax.all_to_all(v.T, axis, 1, 1), x),
        "all_to_all_10": (lambda v: lax.all_to_all(v.T, axis, 1, 0), x),
        "all_to_all_tiled": (lambda v: lax.all_to_all(v, axis, 0, 1, tiled=True), x2),
        "scan_psum": (lambda v: lax.scan(lambda c, _: (c * 0.5 + lax.psum(c, axis) * 0.25, None), v, None,
                                         length=3)[0], x),
        "while_psum": (lambda v: lax.while_loop(lambda c: lax.psum(c[0, 0], axis) < 40.0, lambda c: c * 2.0 + 1.0,
                                                v * v), x),
        "axis_index": (lambda v: v[0, 0] * 0 + lax.axis_index(axis), x),
        "axis_size": (lambda v: v * lax.psum(1, axis), x),
    }


@pytest.mark.parametrize("name", sorted(jax_cases(ft.lax)))
def test_matches_jax_under_vmap(name):
    """Stored JAX values (tests/data/collectives_jax.npz, generated once with JAX) and, where JAX
    is installed, JAX itself."""
    fn, x = jax_cases(ft.lax)[name]
    got = np.asarray(ft.vmap(fn, axis_name="i")(x))
    want = np.load(DATA)[name]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    jax = pytest.importorskip("jax", reason="JAX comparison (stored values checked above)")
    with jax.enable_x64(True):  # (restored: later tests compare with JAX's default float32 numbers)
        jfn, _ = jax_cases(jax.lax)[name]
        np.testing.assert_array_equal(got, np.asarray(jax.vmap(jfn, axis_name="i")(x)))


@pytest.mark.parametrize("name", sorted(jax_cases(ft.lax)))
def test_processes_axis_alone_is_a_vmap_axis_of_one(name):
    """Not under MPI, ``"processes"`` is this process alone: what ``vmap(axis_name="processes")``
    gives on a batch of one shard, eagerly and jitted on both backends."""
    fn, x = jax_cases(ft.lax, "processes", n=1)[name]
    want = np.asarray(ft.vmap(fn, axis_name="processes")(x)[0])
    for backend in (None, "numpy", "opencl"):
        got = fn(x[0]) if backend is None else ft.jit(fn, backend=backend)(x[0])
        assert np.asarray(got).shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), want)


def test_ppermute_members_receiving_nothing_get_zeros():
    """A partial permutation (JAX's vmap refuses one; its pmap gives zeros to non-receivers)."""
    x = RNG.standard_normal((4, 3))
    got = ft.vmap(lambda v: ft.lax.ppermute(v, "i", [(0, 2), (3, 1)]), axis_name="i")(x)
    np.testing.assert_array_equal(got, np.stack([np.zeros(3), x[3], x[0], np.zeros(3)]))


DIFFERENTIABLE = sorted(set(jax_cases(ft.lax)) - {"axis_index", "while_psum"})  # while_loop: forward mode only


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_grads_under_vmap_axis_name(name):
    """jvp and vjp rules (transposes as in JAX) against finite differences, order 2, float64."""
    fn, x = jax_cases(ft.lax)[name]
    x = RNG.standard_normal(x.shape)  # distinct values: pmax / pmin have no ties
    w = RNG.standard_normal(np.shape(ft.vmap(fn, axis_name="i")(x)))
    ft.test_util.check_grads(lambda v: fnp.sin(ft.vmap(fn, axis_name="i")(v)) * w, (x,), order=2, modes=("fwd", "rev"))


def test_pmax_derivative_splits_ties_equally():
    x = np.array([[1.0, 2.0], [3.0, 2.0], [3.0, 0.5]])
    g = ft.grad(lambda v: fnp.sum(ft.vmap(lambda r: ft.lax.pmax(r, "i"), axis_name="i")(v)))(x)
    # three members each see the max: d(sum of 3 copies)/dx, split among the holders
    np.testing.assert_allclose(g, [[0, 1.5], [1.5, 1.5], [1.5, 0]])


@pytest.mark.parametrize("inner_axis", [0, -1])
@pytest.mark.parametrize("name", sorted(jax_cases(ft.lax)))
def test_batching_over_another_axis_matches_a_loop(name, inner_axis):
    """A collective over "i" inside an unnamed inner vmap (its batching rule) equals a loop over
    the inner axis."""
    fn, x = jax_cases(ft.lax)[name]
    stacked = np.stack([x, x * 2 + 1], axis=1 if inner_axis == 0 else x.ndim)
    got = ft.vmap(lambda v: ft.vmap(fn, in_axes=inner_axis)(v), axis_name="i")(stacked)
    parts = [ft.vmap(fn, axis_name="i")(np.take(stacked, k, axis=1 if inner_axis == 0 else x.ndim)) for k in range(2)]
    np.testing.assert_array_equal(got, np.stack(parts, axis=1))


@pytest.mark.parametrize("name", sorted(jax_cases(ft.lax)))
def test_jit_inside_vmap_axis_name(name):
    fn, x = jax_cases(ft.lax)[name]
    np.testing.assert_array_equal(ft.vmap(ft.jit(fn), axis_name="i")(x), ft.vmap(fn, axis_name="i")(x))


def test_nested_vmaps_with_different_names():
    x = RNG.standard_normal((2, 3, 4))

    def f(v):
        return (ft.lax.psum(v, "i") * 10 + ft.lax.pmax(v, "j") + ft.lax.psum(v, ("i", "j"))
                + ft.lax.axis_index("i") * 100 + ft.lax.axis_index("j") * 1000 + ft.lax.axis_size(("i", "j")))
    got = ft.vmap(ft.vmap(f, axis_name="j"), axis_name="i")(x)
    i, j = np.arange(2)[:, None, None], np.arange(3)[None, :, None]
    want = (x.sum(0, keepdims=True) * 10 + x.max(1, keepdims=True) + x.sum((0, 1), keepdims=True)
            + i * 100 + j * 1000 + 6)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # the inner name shadows an outer one of the same name
    got = ft.vmap(ft.vmap(lambda v: ft.lax.psum(v, "i"), axis_name="i"), axis_name="i")(x)
    np.testing.assert_allclose(got, np.broadcast_to(x.sum(1, keepdims=True), x.shape), rtol=1e-12)


def test_pmean_of_local_gradients_is_the_full_batch_gradient():
    """Data parallelism under vmap: the batch split into 4 shards, pmean of per-shard gradients."""
    w, xs = RNG.standard_normal(3), RNG.standard_normal((8, 3))
    loss = lambda w, x: fnp.mean(fnp.tanh(x @ w) ** 2)
    shard_grads = ft.vmap(lambda x: ft.lax.pmean(ft.grad(loss)(w, x), "shards"), axis_name="shards")(xs.reshape(4, 2, 3))
    for g in shard_grads:
        np.testing.assert_allclose(g, ft.grad(loss)(w, xs), rtol=1e-13, atol=1e-15)


# --------------------------------------------------------------------------- inside jit: effects


def _names_of(fun, *args) -> list:
    return [e.primitive.name for e in ft.jit(fun).lower(*args).jaxpr.eqns]


def test_jit_keeps_unused_duplicate_and_constant_collectives_in_order():
    x = RNG.standard_normal(3)

    def f(v):
        ft.lax.psum(v, P)  # unused: not removed
        a = ft.lax.pmax(v, P)
        b = ft.lax.pmax(v, P)  # a duplicate: not merged
        c = ft.lax.psum(np.ones(3), P)  # of a constant: not folded
        return a + b + c
    assert [n for n in _names_of(f, x) if n in ("psum", "pmax")] == ["psum", "pmax", "pmax", "psum"]
    np.testing.assert_allclose(ft.jit(f)(x), 2 * x + 1)


def test_psum_of_a_pytree_is_one_equation():
    tree = {"w": RNG.standard_normal((2, 3)), "b": RNG.standard_normal(3), "n": np.arange(3)}
    assert _names_of(lambda t: ft.lax.psum(t, P), tree).count("psum") == 1
    out = ft.jit(lambda t: ft.lax.psum(t, P), backend="opencl")(tree)
    for k in tree:
        np.testing.assert_array_equal(np.asarray(out[k]), tree[k])


def test_opencl_runs_collectives_as_host_steps_and_says_why(monkeypatch):
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)  # not all of it on the host
    x = RNG.standard_normal(5000).astype(np.float32)
    compiled = ft.jit(lambda v: ft.lax.psum(fnp.sin(v), P) * 2, backend="opencl").lower(x).compile()
    report = compiled.report()
    assert "host    psum" in report and "effectful" in report, report
    np.testing.assert_allclose(np.asarray(compiled(x)), np.sin(x) * 2, rtol=1e-6)


# --------------------------------------------------------------------------- errors


def test_unbound_axis_name_is_an_error_naming_it():
    with pytest.raises(NameError, match="unbound axis name 'k'"):
        ft.vmap(lambda v: ft.lax.psum(v, "k"), axis_name="i")(np.ones(2))
    with pytest.raises(NameError, match="unbound axis name 'k'"):
        ft.lax.axis_index("k")


def test_bad_arguments():
    x = np.ones((3, 2))
    with pytest.raises(ft.ShapeError, match="must be equal to the size 3"):
        ft.vmap(lambda v: ft.lax.psum_scatter(v, "i"), axis_name="i")(x)
    with pytest.raises(ValueError, match="distinct members"):
        ft.vmap(lambda v: ft.lax.ppermute(v, "i", [(0, 1), (1, 1)]), axis_name="i")(x)
    with pytest.raises(ValueError, match=r"perm \[0, 1\] must be pairs"):
        ft.vmap(lambda v: ft.lax.ppermute(v, "i", [0, 1]), axis_name="i")(x)
    with pytest.raises(ft.ShapeError, match="out of range"):
        ft.vmap(lambda v: ft.lax.all_gather(v, "i", axis=3), axis_name="i")(x)
    with pytest.raises(NotImplementedError, match="once per axis name"):
        ft.vmap(lambda v: ft.lax.all_gather(v, ("i", "i")), axis_name="i")(x)


def _loop(values, step, n):
    """The reference: ``n`` steps of ``step`` over the list of members' values."""
    for _ in range(n):
        values = step(values)
    return np.stack(values)


def test_collectives_in_control_flow_bodies_under_a_named_vmap():
    x = RNG.standard_normal((3, 2))
    scan = lambda v: ft.lax.scan(lambda c, _: (fnp.sin(c) + ft.lax.psum(c, "i") * 0.1, None), v, None, length=3)[0]
    want = _loop(list(x), lambda vs: [np.sin(v) + sum(vs) * 0.1 for v in vs], 3)
    np.testing.assert_allclose(ft.vmap(scan, axis_name="i")(x), want, rtol=1e-13)
    # an unbatched carry: the collective still sees three members
    np.testing.assert_allclose(ft.vmap(lambda v, c: scan(c) + v * 0, in_axes=(0, None), axis_name="i")(x, np.ones(2)),
                               _loop([np.ones(2)] * 3, lambda vs: [np.sin(v) + sum(vs) * 0.1 for v in vs], 3))
    # a batched predicate (axis_index) choosing a branch with a collective
    cond = lambda v: ft.lax.cond(ft.lax.axis_index("i") > 0, lambda u: ft.lax.pmax(u, "i"), lambda u: u * 2, v)
    want = np.stack([x[0] * 2, x.max(0), x.max(0)])
    np.testing.assert_allclose(ft.vmap(cond, axis_name="i")(x), want, rtol=1e-13)
    # a while_loop whose condition reads a collective
    loop = lambda v: ft.lax.while_loop(lambda c: ft.lax.psum(c[0], "i") < 20.0, lambda c: c * 2.0, v)
    got = ft.vmap(loop, axis_name="i")(np.abs(x) + 1)
    total, members = (np.abs(x) + 1)[:, 0].sum(), np.abs(x) + 1
    while total < 20.0:
        members, total = members * 2, total * 2
    np.testing.assert_allclose(got, members, rtol=1e-13)
    ft.test_util.check_grads(lambda v: ft.vmap(scan, axis_name="i")(v), (x,), order=2, modes=("fwd", "rev"))


def _scan_with_psum(x):
    def body(c, xi):
        s = ft.lax.psum(xi * c, "processes")
        return c * 0.5 + fnp.sin(s), s
    c, ys = ft.lax.scan(body, 1.0, x)
    return c + ys.sum()


def _cond_with_psum(x):
    return ft.lax.cond(x.sum() > 0, lambda v: fnp.sin(ft.lax.psum(v, "processes")).sum(), lambda v: v.sum(), x)


def _fori_with_pmean(x):
    return ft.lax.fori_loop(0, 3, lambda i, v: fnp.sin(ft.lax.pmean(v, "processes")), x).sum()


@pytest.mark.parametrize("f", [_scan_with_psum, _cond_with_psum, _fori_with_pmean], ids=lambda f: f.__name__[1:])
def test_grad_through_a_loop_body_holding_a_process_collective(f):
    """Reverse mode recomputes the body's forward pass without its prints, but with its collectives
    (their values are used: dropping them left undefined variables, a KeyError)."""
    x = np.arange(3.0) / 5
    ft.test_util.check_grads(f, (x,), order=2, modes=("fwd", "rev"))
    for backend in ("numpy", "opencl"):
        np.testing.assert_allclose(ft.jit(ft.grad(f), backend=backend)(x), ft.grad(f)(x), rtol=1e-13)


def test_a_loop_of_constants_with_a_collective_under_a_named_vmap_is_a_clear_error():
    """Its operands are no values of the vmap, so it runs at once, outside it (see collectives.py)."""
    body = lambda c, _: (ft.lax.psum(c, "i"), None)
    with pytest.raises(NameError, match="operands are all constants"):
        ft.vmap(lambda x: x + ft.lax.scan(body, np.ones(3), None, length=2)[0], axis_name="i")(np.ones((2, 3)))


def test_vmap_takes_axis_name_positionally_as_jax():
    x = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(ft.vmap(lambda v: ft.lax.psum(v, "k"), 0, 0, "k")(x), np.tile(x.sum(0), (3, 1)))
