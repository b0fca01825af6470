"""Pytrees: nested containers (tuple, list, dict, None, namedtuple, registered nodes) of leaves."""
from __future__ import annotations

from typing import Any, Callable, Iterable

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


class PyTreeDef:
    """The structure of a pytree (hashable, so it can key a compilation cache)."""

    __slots__ = ("node_type", "aux", "children", "num_leaves", "_key", "_hash")

    def __init__(self, node_type, aux, children: tuple, num_leaves: int | None = None):
        self.node_type = node_type
        self.aux = aux
        self.children = children
        self.num_leaves = num_leaves if num_leaves is not None else (
            1 if node_type is None else sum(c.num_leaves for c in children))
        # the whole structure as nested tuples: hashed and compared by C code (a jitted call
        # looks its structure up in a cache on every call)
        self._key = None if node_type is None else (node_type, aux, tuple([c._key for c in children]))
        self._hash = None

    def __eq__(self, other) -> bool:
        return isinstance(other, PyTreeDef) and self._key == other._key

    def __hash__(self) -> int:
        if self._hash is None:
            try:
                self._hash = hash(self._key)
            except TypeError:  # unhashable aux data somewhere: fall back to identities
                try:
                    aux_hash = hash(self.aux)
                except TypeError:
                    aux_hash = id(self.aux)
                self._hash = hash((self.node_type, aux_hash, self.children))
        return self._hash

    def __repr__(self) -> str:
        if self.node_type is None:
            return "*"
        inner = ", ".join(map(repr, self.children))
        return f"PyTreeDef({self.node_type.__name__}[{self.aux!r}]({inner}))"


_LEAF = PyTreeDef(None, None, ())


def _node_handlers(x):
    t = type(x)
    h = _registry.get(t)
    if h is None and isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        return (lambda nt: (tuple(nt), None), lambda _, c, t=t: t(*c))
    return h


def tree_flatten(tree: Any, is_leaf: Callable | None = None) -> tuple[list, PyTreeDef]:
    leaves: list = []
    treedef = _flatten_into(tree, is_leaf, leaves)
    return leaves, treedef


# The recursions are module-level functions, not closures: a closure that calls itself is a
# reference cycle, which would keep the leaves (e.g. a jitted function's output buffers, which
# go back to their pool when released) alive until Python's cycle collector runs.

def _flatten_into(x, is_leaf: Callable | None, leaves: list) -> PyTreeDef:
    h = None if (is_leaf is not None and is_leaf(x)) else _node_handlers(x)
    if h is None:
        leaves.append(x)
        return _LEAF
    node_type = type(x)
    children, aux = h[0](x)
    if node_type not in _registry:  # namedtuple: remember the handlers with the type
        aux = (node_type, aux)
    start = len(leaves)
    kids = []
    for c in children:
        if is_leaf is None and type(c) not in _registry and not isinstance(c, tuple):  # a leaf, inline
            leaves.append(c)
            kids.append(_LEAF)
        else:
            kids.append(_flatten_into(c, is_leaf, leaves))
    return PyTreeDef(node_type, aux, tuple(kids), len(leaves) - start)


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable) -> Any:
    return _unflatten_from(treedef, iter(leaves))


def _unflatten_from(td: PyTreeDef, it) -> Any:
    if td.node_type is None:
        return next(it)
    children = [_unflatten_from(c, it) for c in td.children]
    if td.node_type in _registry:
        return _registry[td.node_type][1](td.aux, children)
    return td.aux[0](*children)  # namedtuple


def tree_leaves(tree: Any) -> list:
    return tree_flatten(tree)[0]


def tree_structure(tree: Any) -> PyTreeDef:
    return tree_flatten(tree)[1]


def tree_map(f: Callable, tree: Any, *rest: Any) -> Any:
    leaves, treedef = tree_flatten(tree)
    others = []
    for r in rest:
        rl, rd = tree_flatten(r)
        if rd != treedef:
            raise ValueError(f"tree_map: tree structures differ: {treedef} vs {rd}")
        others.append(rl)
    return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *others)])
