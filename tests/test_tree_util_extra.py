"""The rest of JAX's tree utilities (is_leaf, reduce, all, transpose, paths and keys, Partial,
register_dataclass, register_pytree_node_class, ``ft.tree``), ``ft.flatten_util.ravel_pytree``,
``ft.eval_shape`` and ``ft.disable_jit``."""
from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import tree_util as tu
from functrace.test_util import check_grads

Point = collections.namedtuple("Point", "x y")
TREE = {"a": [1.0, 2.0, (3.0,)], "b": None, "c": Point(4.0, 5.0)}


def test_paths_and_keys():
    pairs, treedef = tu.tree_flatten_with_path(TREE)
    assert treedef == tu.tree_structure(TREE)
    assert [tu.keystr(p) for p, _ in pairs] == ["['a'][0]", "['a'][1]", "['a'][2][0]", "['c'].x", "['c'].y"]
    assert [x for _, x in pairs] == tu.tree_leaves(TREE)
    assert pairs[3][0] == (tu.DictKey("c"), tu.GetAttrKey("x"))
    assert pairs[0][0] == (tu.DictKey("a"), tu.SequenceKey(0))
    doubled = tu.tree_map_with_path(lambda p, x: (tu.keystr(p), x * 2), TREE)
    assert doubled["c"].y == ("['c'].y", 10.0) and doubled["b"] is None
    assert tu.tree_leaves_with_path([7]) == [((tu.SequenceKey(0),), 7)]


def test_map_is_leaf_reduce_all_transpose():
    assert tu.tree_map(len, {"a": [1, 2], "b": [3]}, is_leaf=lambda x: isinstance(x, list)) == {"a": 2, "b": 1}
    # the other trees need the first one's structure only down to its leaves
    assert tu.tree_map(lambda x, y: (x, y), [1, 2], [[3, 4], {"q": 5}]) == [(1, [3, 4]), (2, {"q": 5})]
    with pytest.raises(ValueError, match="tree structures differ"):
        tu.tree_map(lambda x, y: x, [1, 2], (1, 2))
    with pytest.raises(ValueError, match="tree structures differ"):
        tu.tree_map(lambda x, y: x, {"a": 1}, {"b": 1})
    assert tu.tree_reduce(lambda a, b: a + b, [1, (2, 3)], 10) == 16
    assert tu.tree_reduce(max, [1, (7, 3)]) == 7
    assert tu.tree_all([True, (1, 2)]) and not tu.tree_all([True, (1, 0)])
    out = tu.tree_transpose(tu.tree_structure([0, 0]), tu.tree_structure((0, 0, 0)), [(1, 2, 3), (4, 5, 6)])
    assert out == ([1, 4], [2, 5], [3, 6])
    assert tu.tree_structure([1, 2]).unflatten([5, 6]) == [5, 6]
    assert tu.tree_structure([1, (2, 3)]).flatten_up_to([[9], (8, 7)]) == [[9], 8, 7]


def test_tree_aliases():
    assert ft.tree.map(lambda x: x + 1, [1, (2,)]) == [2, (3,)]
    leaves, treedef = ft.tree.flatten({"b": 1, "a": 2})
    assert leaves == [2, 1] and ft.tree.unflatten(treedef, [5, 6]) == {"a": 5, "b": 6}
    assert ft.tree.leaves([1, [2]]) == [1, 2] and ft.tree.structure([1]) == tu.tree_structure([0])
    assert ft.tree.reduce(lambda a, b: a * b, [2, 3]) == 6 and ft.tree.all([1, 1])
    assert ft.tree.map_with_path(lambda p, x: len(p), [[1]]) == [[2]]


def test_register_dataclass_and_node_class():
    @tu.register_dataclass
    @dataclasses.dataclass
    class Layer:
        w: object
        n: int = dataclasses.field(default=3, metadata={"static": True})

    layer = Layer(np.ones(2), 5)
    leaves, treedef = tu.tree_flatten(layer)
    assert len(leaves) == 1 and tu.tree_unflatten(treedef, [np.zeros(2)]).n == 5
    assert tu.tree_leaves_with_path(layer)[0][0] == (tu.GetAttrKey("w"),)
    g = ft.grad(lambda m: fnp.sum(m.w ** 2) * m.n)(layer)
    np.testing.assert_allclose(g.w, [10.0, 10.0])
    assert ft.jit(lambda m: m.w * m.n)(layer).tolist() == [5.0, 5.0]

    class Plain:
        def __init__(self, a, b):
            self.a, self.b = a, b
    tu.register_dataclass(Plain, data_fields=["a"], meta_fields=["b"])
    assert tu.tree_map(lambda x: x + 1, Plain(1, "s")).a == 2

    @tu.register_pytree_node_class
    class Box:
        def __init__(self, value):
            self.value = value

        def tree_flatten(self):
            return (self.value,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)
    assert ft.grad(lambda b: b.value ** 2)(Box(3.0)).value == 6.0
    assert tu.tree_leaves_with_path(Box(1.0)) == [((tu.FlattenedIndexKey(0),), 1.0)]


def test_partial_is_a_pytree():
    scale = tu.Partial(lambda a, x: a * x, np.float64(2.0))
    assert tu.tree_leaves(scale) == [2.0]
    assert float(ft.jit(lambda p, x: p(x))(scale, 3.0)) == 6.0
    g = ft.grad(lambda p: p(3.0))(scale)
    assert isinstance(g, tu.Partial) and float(g.args[0]) == 3.0
    nested = tu.Partial(tu.Partial(lambda a, b, c: a + b + c, 1.0), 2.0)
    assert nested(3.0) == 6.0 and tu.tree_leaves(nested) == [1.0, 2.0]


def test_ravel_pytree_round_trip_and_derivatives():
    tree = {"w": np.arange(4.0, dtype=np.float32).reshape(2, 2), "b": np.arange(3.0)}
    flat, unravel = ft.flatten_util.ravel_pytree(tree)
    assert flat.shape == (7,) and flat.dtype == np.float64
    back = unravel(flat)
    assert back["w"].dtype == np.float32 and back["w"].shape == (2, 2)
    np.testing.assert_array_equal(back["b"], tree["b"])
    flat64, unravel64 = ft.flatten_util.ravel_pytree({"w": tree["w"].astype(np.float64), "b": tree["b"]})
    check_grads(lambda v: fnp.sum(fnp.sin(unravel64(v)["b"])) * fnp.sum(unravel64(v)["w"] ** 2), (flat64,), order=2)
    check_grads(lambda b: ft.flatten_util.ravel_pytree({"x": b, "y": b * 2})[0], (np.arange(3.0),), order=2)
    with pytest.raises(ValueError, match="flat vector of shape"):
        unravel(np.zeros(3))
    # under jit and vmap
    np.testing.assert_allclose(ft.jit(lambda v: unravel(v)["b"])(flat), tree["b"])
    assert ft.vmap(lambda v: unravel(v)["w"])(np.stack([flat, flat])).shape == (2, 2, 2)


def test_eval_shape():
    out = ft.eval_shape(lambda x, y: {"a": x @ y, "b": fnp.sum(x)}, ft.ShapeDtypeStruct((3, 4), np.float32),
                        np.ones((4, 2), np.float32))
    assert out == {"a": ft.ShapeDtypeStruct((3, 2), np.float32), "b": ft.ShapeDtypeStruct((), np.float32)}
    calls = []
    ft.eval_shape(lambda x: calls.append(1) or x, np.ones(3))
    assert calls == [1]
    assert ft.eval_shape(lambda x: x * 2.0, 1)  == ft.ShapeDtypeStruct((), np.float64)


def test_disable_jit_runs_python():
    seen = []
    f = ft.jit(lambda x: (seen.append(type(x).__name__), x * 2)[1])
    f(np.ones(2))
    with ft.disable_jit():
        np.testing.assert_array_equal(f(np.ones(2)), [2.0, 2.0])
        with ft.disable_jit(False):
            pass
        f(np.ones(2))
    f(np.ones(2))  # cached again
    assert seen == ["StagingTracer", "ndarray", "ndarray"]


def test_dtypes():
    x32 = np.ones(3, np.float32)
    assert fnp.finfo(fnp.float32).eps == np.finfo(np.float32).eps and fnp.iinfo(fnp.int32).max == 2 ** 31 - 1
    assert fnp.result_type(x32, 2.0) == np.float32 and fnp.result_type(np.int32, np.float32) == np.float64
    assert fnp.promote_types("int8", "uint8") == np.int16
    assert fnp.issubdtype(fnp.float32, fnp.floating) and not fnp.issubdtype(np.int32, fnp.floating)
    assert fnp.can_cast(fnp.float32, fnp.float64) and not fnp.can_cast(fnp.float64, fnp.float32)
    assert fnp.bool is np.bool_ and fnp.isdtype(np.float32, "real floating")

    def f(x):
        assert fnp.finfo(x).bits == 32 and fnp.result_type(x, 1) == np.float32
        return fnp.float16(x), fnp.int32(x * 3), fnp.uint16(x), fnp.float64(x)
    for got in (f(x32), ft.jit(f, backend="numpy")(x32)):
        assert [np.asarray(g).dtype for g in got] == [np.float16, np.int32, np.uint16, np.float64]
    check_grads(lambda x: fnp.float64(x) * fnp.sin(x), (np.array([1.5, -2.0]),), order=2)
    g = ft.grad(lambda x: fnp.sum(fnp.float32(x) ** 2))(np.array([1.5, -2.0]))
    assert g.dtype == np.float64 and g.tolist() == [3.0, -4.0]  # the cast's derivative casts back


def test_float16_end_to_end():
    """float16 values keep their dtype eagerly, under jit (both backends: on OpenCL in kernels
    even without cl_khr_fp16, see tests/test_opencl_float16.py) and under grad."""
    x = np.linspace(-1, 1, 7).astype(np.float16)
    f = lambda x: fnp.sum(fnp.tanh(x) * x)  # noqa: E731
    want = np.sum(np.tanh(x) * x)
    for got in (f(x), ft.jit(f, backend="numpy")(x), ft.jit(f)(x)):
        assert np.asarray(got).dtype == np.float16
        np.testing.assert_allclose(np.float32(got), want, rtol=2e-3)
    g = ft.grad(f)(x)
    assert g.dtype == np.float16
    np.testing.assert_allclose(g.astype(np.float32), (np.tanh(x) + x * (1 - np.tanh(x) ** 2)).astype(np.float32),
                               rtol=5e-3, atol=5e-3)
