"""Pytrees: nested containers (tuple, list, dict, None, namedtuple, registered nodes) of leaves.

Every walk here is a loop over an explicit stack, never a recursion: a pytree nested 5,000
deep (or 10^6) flattens, unflattens, maps, compares and prints like a shallow one.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Iterable, Sequence

_registry: dict[type, tuple[Callable, Callable]] = {}


def register_pytree_node(nodetype: type, flatten_func: Callable, unflatten_func: Callable) -> None:
    """Register a container type: ``flatten_func(x) -> (children, aux)``,
    ``unflatten_func(aux, children) -> x`` (the same convention as JAX)."""
    _registry[nodetype] = (flatten_func, unflatten_func)


register_pytree_node(tuple, lambda t: (t, None), lambda _, c: tuple(c))
register_pytree_node(list, lambda l: (l, None), lambda _, c: list(c))


def _flatten_dict(d: dict) -> tuple[list, tuple]:
    keys = sorted(d)
    return [d[k] for k in keys], tuple(keys)


register_pytree_node(dict, _flatten_dict, lambda keys, c: dict(zip(keys, c)))
register_pytree_node(type(None), lambda n: ((), None), lambda _, c: None)

_LEAF = None  # a leaf's entry in a PyTreeDef's node list


class PyTreeDef:
    """The structure of a pytree: its nodes in pre-order, each ``(type, aux, number of children)``
    or ``None`` for a leaf.  A flat tuple, so hashing and comparing it (a jitted call looks its
    structure up in a cache on every call) is done by C code without recursion."""

    __slots__ = ("nodes", "num_leaves", "_hash")

    def __init__(self, nodes: tuple, num_leaves: int):
        self.nodes = nodes
        self.num_leaves = num_leaves
        self._hash = None

    def __eq__(self, other) -> bool:
        return isinstance(other, PyTreeDef) and self.nodes == other.nodes

    def __hash__(self) -> int:
        if self._hash is None:
            try:
                self._hash = hash(self.nodes)
            except TypeError:  # unhashable aux data somewhere: those by identity
                self._hash = hash(tuple(n if n is _LEAF else (n[0], _hash_or_id(n[1]), n[2])
                                        for n in self.nodes))
        return self._hash

    def __repr__(self) -> str:
        # closing parentheses are owed per open node: count each node's children down
        parts, open_counts = [], []
        for node in self.nodes:
            if open_counts:
                parts.append(", " if open_counts[-1][1] else "")
                open_counts[-1][1] += 1
            if node is _LEAF:
                parts.append("*")
            else:
                parts.append(f"PyTreeDef({node[0].__name__}[{node[1]!r}](")
                open_counts.append([node[2], 0])
            while open_counts and open_counts[-1][0] == open_counts[-1][1]:
                parts.append("))")
                open_counts.pop()
        return "".join(parts)


def _hash_or_id(aux) -> int:
    try:
        return hash(aux)
    except TypeError:
        return id(aux)


def _node_handlers(x):
    t = type(x)
    h = _registry.get(t)
    if h is None and isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        return (lambda nt: (tuple(nt), None), lambda _, c, t=t: t(*c))
    return h


def tree_flatten(tree: Any, is_leaf: Callable | None = None) -> tuple[list, PyTreeDef]:
    """(leaves in order, structure) of ``tree``; ``is_leaf(x)`` True stops the walk at ``x``."""
    leaves: list = []
    nodes: list = []
    stack = [tree]
    while stack:
        x = stack.pop()
        h = None if (is_leaf is not None and is_leaf(x)) else _node_handlers(x)
        if h is None:
            leaves.append(x)
            nodes.append(_LEAF)
            continue
        children, aux = h[0](x)
        children = children if isinstance(children, (tuple, list)) else tuple(children)
        nodes.append((type(x), aux, len(children)))
        stack.extend(reversed(children))
    return leaves, PyTreeDef(tuple(nodes), len(leaves))


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable) -> Any:
    """The pytree of structure ``treedef`` holding ``leaves`` (in order)."""
    leaves = list(leaves)
    if len(leaves) != treedef.num_leaves:
        raise ValueError(f"tree_unflatten: {treedef} has {treedef.num_leaves} leaves, got {len(leaves)}")
    # the nodes in reverse pre-order: each node's children are then the last ones built
    built: list = []
    k = len(leaves)
    for node in reversed(treedef.nodes):
        if node is _LEAF:
            k -= 1
            built.append(leaves[k])
            continue
        node_type, aux, n = node
        children = built[len(built) - n:][::-1] if n else []
        del built[len(built) - n:]
        h = _registry.get(node_type)
        built.append(h[1](aux, children) if h is not None else node_type(*children))  # else a namedtuple
    return built[0]


def tree_leaves(tree: Any, is_leaf: Callable | None = None) -> list:
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable | None = None) -> PyTreeDef:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(f: Callable, tree: Any, *rest: Any, is_leaf: Callable | None = None) -> Any:
    """``f`` applied to the leaves of ``tree`` and the matching subtrees of ``rest`` (each must have
    ``tree``'s structure down to its leaves, as in JAX)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    others = [_flatten_up_to(treedef, r, "tree_map") for r in rest]
    return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *others)])


# --------------------------------------------------------------------------- the rest of JAX's tree_util


def _flatten_up_to(treedef: PyTreeDef, tree: Any, what: str) -> list:
    """The subtrees of ``tree`` at ``treedef``'s leaves (``tree`` must match it down to them)."""
    out: list = []
    stack = [tree]
    for node in treedef.nodes:
        x = stack.pop()
        if node is _LEAF:
            out.append(x)
            continue
        node_type, aux, n = node
        h = _node_handlers(x)
        if type(x) is not node_type or h is None:
            raise ValueError(f"{what}: tree structures differ: expected a {node_type.__name__} node of {treedef}, "
                             f"got {type(x).__name__}")
        children, x_aux = h[0](x)
        children = list(children)
        if len(children) != n or (x_aux != aux if node_type is dict else False):
            raise ValueError(f"{what}: tree structures differ: {treedef} vs {tree_structure(tree)}")
        stack.extend(reversed(children))
    return out


def _treedef_unflatten(self: PyTreeDef, leaves: Iterable) -> Any:
    return tree_unflatten(self, leaves)


def _treedef_flatten_up_to(self: PyTreeDef, tree: Any) -> list:
    return _flatten_up_to(self, tree, "flatten_up_to")


PyTreeDef.unflatten = _treedef_unflatten
PyTreeDef.flatten_up_to = _treedef_flatten_up_to

_MISSING = object()


def tree_reduce(function: Callable, tree: Any, initializer: Any = _MISSING, is_leaf: Callable | None = None) -> Any:
    """``functools.reduce`` over the leaves."""
    leaves = tree_leaves(tree, is_leaf)
    return functools.reduce(function, leaves) if initializer is _MISSING else functools.reduce(function, leaves,
                                                                                              initializer)


def tree_all(tree: Any, *, is_leaf: Callable | None = None) -> bool:
    """Whether every leaf is truthy."""
    return all(tree_leaves(tree, is_leaf))


def tree_transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef, pytree_to_transpose: Any) -> Any:
    """An outer tree of inner trees, as an inner tree of outer trees."""
    inners = _flatten_up_to(outer_treedef, pytree_to_transpose, "tree_transpose")
    rows = [_flatten_up_to(inner_treedef, t, "tree_transpose") for t in inners]
    if not rows:  # an empty outer tree: each inner leaf an empty outer tree
        return tree_unflatten(inner_treedef, [tree_unflatten(outer_treedef, [])] * inner_treedef.num_leaves)
    columns = [tree_unflatten(outer_treedef, col) for col in zip(*rows)]
    return tree_unflatten(inner_treedef, columns)


def register_pytree_node_class(cls: type) -> type:
    """Class decorator: ``cls.tree_flatten(self) -> (children, aux)`` and the classmethod
    ``cls.tree_unflatten(aux, children)`` make it a pytree node."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


# --------------------------------------------------------------------------- paths (keys)


@dataclasses.dataclass(frozen=True)
class DictKey:
    """A dict entry on a path: ``['key']``."""
    key: Any

    def __str__(self) -> str:
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """A tuple or list entry on a path: ``[0]``."""
    idx: int

    def __str__(self) -> str:
        return f"[{self.idx}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """An attribute (namedtuple field, dataclass field) on a path: ``.name``."""
    name: str

    def __str__(self) -> str:
        return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    """A child of a node registered without keys, by its position: ``[<flat index 0>]``."""
    key: int

    def __str__(self) -> str:
        return f"[<flat index {self.key}>]"


# type -> keys(node) listing its children's keys in flattening order (others: FlattenedIndexKey)
_key_registry: dict[type, Callable] = {
    tuple: lambda t: [SequenceKey(i) for i in range(len(t))],
    list: lambda t: [SequenceKey(i) for i in range(len(t))],
    dict: lambda d: [DictKey(k) for k in sorted(d)],
    type(None): lambda n: [],
}


def _child_keys(x, n: int) -> list:
    keys = _key_registry.get(type(x))
    if keys is not None:
        return keys(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        return [GetAttrKey(f) for f in x._fields]
    return [FlattenedIndexKey(i) for i in range(n)]


def register_pytree_with_keys(nodetype: type, flatten_with_keys: Callable, unflatten_func: Callable,
                              flatten_func: Callable | None = None) -> None:
    """Register a node whose ``flatten_with_keys(x) -> ([(key, child), ...], aux)`` names its children."""
    def flatten(x):
        pairs, aux = flatten_with_keys(x)
        return [c for _, c in pairs], aux
    register_pytree_node(nodetype, flatten_func or flatten, unflatten_func)
    _key_registry[nodetype] = lambda x: [k for k, _ in flatten_with_keys(x)[0]]


def register_dataclass(nodetype: type | None = None, data_fields: Sequence[str] | None = None,
                       meta_fields: Sequence[str] | None = None, drop_fields: Sequence[str] = ()):
    """Register a dataclass: ``data_fields`` are children, ``meta_fields`` static (hashed) data.
    Without field lists (or used as a decorator), a field with ``metadata={"static": True}`` is
    static and the others data, as JAX."""
    if nodetype is None:
        return lambda cls: register_dataclass(cls, data_fields, meta_fields, drop_fields)
    if data_fields is None or meta_fields is None:
        if not dataclasses.is_dataclass(nodetype):
            raise TypeError(f"register_dataclass: {nodetype.__name__} is not a dataclass; pass data_fields and "
                            "meta_fields")
        fields = [f for f in dataclasses.fields(nodetype) if f.init and f.name not in drop_fields]
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    data_fields, meta_fields = tuple(data_fields), tuple(meta_fields)

    def flatten(x):
        return [getattr(x, f) for f in data_fields], tuple(getattr(x, f) for f in meta_fields)

    def unflatten(aux, children):
        return nodetype(**dict(zip(data_fields, children)), **dict(zip(meta_fields, aux)))
    register_pytree_node(nodetype, flatten, unflatten)
    _key_registry[nodetype] = lambda x: [GetAttrKey(f) for f in data_fields]
    return nodetype


def tree_flatten_with_path(tree: Any, is_leaf: Callable | None = None) -> tuple[list, PyTreeDef]:
    """([(path, leaf), ...], structure): each path a tuple of keys (DictKey, SequenceKey, ...)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    paths: list = []
    stack = [(tree, ())]
    while stack:
        x, path = stack.pop()
        h = None if (is_leaf is not None and is_leaf(x)) else _node_handlers(x)
        if h is None:
            paths.append(path)
            continue
        children = list(h[0](x)[0])
        keys = _child_keys(x, len(children))
        stack.extend(reversed([(c, path + (k,)) for k, c in zip(keys, children)]))
    return list(zip(paths, leaves)), treedef


def tree_leaves_with_path(tree: Any, is_leaf: Callable | None = None) -> list:
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_map_with_path(f: Callable, tree: Any, *rest: Any, is_leaf: Callable | None = None) -> Any:
    """``f(path, leaf, *others)`` for every leaf of ``tree`` (``rest`` as in ``tree_map``)."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf)
    others = [_flatten_up_to(treedef, r, "tree_map_with_path") for r in rest]
    return tree_unflatten(treedef, [f(p, x, *xs) for (p, x), *xs in zip(pairs, *others)])


def keystr(keys: tuple) -> str:
    """A path as text: ``['a'][0].b``."""
    return "".join(str(k) for k in keys)


class Partial(functools.partial):
    """``functools.partial`` as a pytree: the bound arguments are children, the function static
    (so a Partial passes through ``jit`` and ``grad`` as JAX's does)."""

    def __new__(cls, func, *args, **kwargs):
        if isinstance(func, functools.partial):  # flatten nested partials, keeping this class
            args, kwargs = func.args + args, {**func.keywords, **kwargs}
            func = func.func
        return super().__new__(cls, func, *args, **kwargs)


register_pytree_node(Partial, lambda p: ((p.args, p.keywords), p.func),
                     lambda func, children: Partial(func, *children[0], **children[1]))
