"""Pytrees: nested containers (tuple, list, dict, None, namedtuple, registered nodes) of leaves.

Every walk here is a loop over an explicit stack, never a recursion: a pytree nested 5,000
deep (or 10^6) flattens, unflattens, maps, compares and prints like a shallow one.
"""
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
