"""``ft.tree``: the short names of ``ft.tree_util`` (as ``jax.tree``)."""
from . import tree_util as _tu

all = _tu.tree_all
flatten, unflatten, flatten_with_path = _tu.tree_flatten, _tu.tree_unflatten, _tu.tree_flatten_with_path
leaves, leaves_with_path, structure = _tu.tree_leaves, _tu.tree_leaves_with_path, _tu.tree_structure
map, map_with_path = _tu.tree_map, _tu.tree_map_with_path
reduce, transpose = _tu.tree_reduce, _tu.tree_transpose
