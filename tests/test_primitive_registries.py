"""Every table that keeps a fact about primitives is keyed by the primitive objects, names only
registered primitives, and, where it must be complete, is.  ``REGISTRIES`` lists them as
(description, table) pairs: a table of another layer joins by adding its pair (the walk of
``functrace/backends`` below fails on a primitive-keyed table of the backends missing there)."""
import ast
import importlib
import pathlib
import pkgutil

import pytest

import functrace  # noqa: F401 (declares the primitives)
import functrace.backends as backends
import functrace.backends.opencl.executable  # noqa: F401 (registers every OpenCL lowering)
import functrace.collectives  # noqa: F401
import functrace.primitives as P
from functrace.backends import numpy_backend
from functrace.backends.opencl import fusion, layout, lowerings, placement
from functrace.core import Primitive
from functrace.core.config import BACKENDS

ROOT = pathlib.Path(functrace.__file__).resolve().parent

REGISTRIES = [
    ("OpenCL lowerings (lowerings.LOWERINGS)", lowerings.LOWERINGS),
    ("lowerings placed by size (lowerings.SMALL_ON_HOST)", lowerings.SMALL_ON_HOST),
    ("fused elementwise primitives (fusion.ELEMENTWISE)", fusion.ELEMENTWISE),
    ("fused reductions (fusion.REDUCTIONS)", fusion.REDUCTIONS),
    ("strided views (fusion.VIEW_PRIMS)", fusion.VIEW_PRIMS),
    ("float16-exact results (fusion._HALF_EXACT)", fusion._HALF_EXACT),
    ("builtins emitted lane by lane (fusion._LANEWISE_TYPES)", fusion._LANEWISE_TYPES),
    ("float32 macros (fusion._F32_MACROS)", fusion._F32_MACROS),
    ("float32 policy macros (fusion._F32_POLICY_MACROS)", fusion._F32_POLICY_MACROS),
    ("functrace's float32 math (fusion._F32_OWN_MATH)", fusion._F32_OWN_MATH),
    ("layout kernels (layout.LAYOUT_PRIMS)", layout.LAYOUT_PRIMS),
    ("measured costs (placement.OP_COSTS)", placement.OP_COSTS),
    ("fresh numpy results (numpy_backend.FRESH_RESULTS)", numpy_backend.FRESH_RESULTS),
]


def _registered() -> dict:
    return dict(P.registry)


@pytest.mark.parametrize("what, table", REGISTRIES, ids=[w for w, _ in REGISTRIES])
def test_a_registry_names_registered_primitives_only(what, table):
    registered = _registered()
    strays = [k for k in table if not isinstance(k, Primitive) or registered.get(k.name) is not k]
    assert strays == [], f"{what} names what is not a registered primitive: {strays}"


def _backend_modules():
    for info in pkgutil.walk_packages([str(ROOT / "backends")], "functrace.backends."):
        yield importlib.import_module(info.name)
    yield backends


def test_every_primitive_keyed_table_of_the_backends_is_listed():
    """A module-level dict or set of a backend module with a primitive among its keys is in
    ``REGISTRIES`` (so the checks above see it)."""
    listed = {id(t) for _, t in REGISTRIES}
    found = []
    for module in _backend_modules():
        for name, value in vars(module).items():
            if isinstance(value, (dict, set, frozenset)) and any(isinstance(k, Primitive) for k in value) \
                    and id(value) not in listed:
                found.append(f"{module.__name__}.{name}")
    assert found == [], f"primitive-keyed tables missing from REGISTRIES: {found}"


def _primitive_names() -> set:
    return set(_registered())


def _names_a_primitive_by_string(node, names: set) -> bool:
    """``<...>.primitive.name`` compared or used as a key, or a dict / set literal whose keys are
    all strings naming primitives."""
    def primitive_name(n) -> bool:
        return isinstance(n, ast.Attribute) and n.attr == "name" and isinstance(n.value, ast.Attribute) \
            and n.value.attr == "primitive"
    if isinstance(node, ast.Compare):
        return any(primitive_name(n) for n in [node.left, *node.comparators])
    if isinstance(node, ast.Subscript):
        return primitive_name(node.slice)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and primitive_name(node.args[0])
    keys = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(node, ast.Set) else None
    return bool(keys) and all(isinstance(k, ast.Constant) and k.value in names for k in keys)


def test_no_backend_table_or_comparison_names_a_primitive_by_string():
    """A misspelled name would silently miss; the primitive object cannot."""
    names = _primitive_names()
    found = []
    for path in sorted((ROOT / "backends").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if _names_a_primitive_by_string(node, names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


# ------------------------------------------------------------------------ complete registries

def test_measured_costs_are_rows_of_four_positive_numbers():
    """Placement weighs a primitive by its measured row of ``OP_COSTS`` (host and kernel, float32
    and float64), any other by ``CHEAP_COSTS``: a new primitive needs no entry to run."""
    rows = list(placement.OP_COSTS.values()) + [placement.CHEAP_COSTS]
    assert all(len(row) == 4 and all(c > 0 for c in row) for row in rows)


def test_every_primitive_has_a_numpy_implementation():
    """The numpy backend runs every primitive (and the OpenCL backend's host steps with it)."""
    assert sorted(p.name for p in _registered().values() if p.impl is None) == []


def test_code_generation_tables_cover_what_they_are_asked_for():
    fused = set(fusion.ELEMENTWISE)
    for what, table in [("_LANEWISE_TYPES", fusion._LANEWISE_TYPES), ("_F32_MACROS", fusion._F32_MACROS),
                        ("_F32_POLICY_MACROS", fusion._F32_POLICY_MACROS), ("_F32_OWN_MATH", fusion._F32_OWN_MATH),
                        ("_HALF_EXACT", fusion._HALF_EXACT)]:
        assert set(table) <= fused, (what, sorted(p.name for p in set(table) - fused))
    for kind in fusion.REDUCTIONS:  # every reduction has an identity and a combine for every type
        for ct in ("float", "double", "int", "long", "uint", "ulong", "uchar"):
            fusion.reduce_init(kind, ct)
            fusion.reduce_combine(kind, ct, "acc", "v", False)
    assert all(callable(rule) for rule in fusion.VIEW_PRIMS.values())
    assert all(isinstance(rule, layout.LayoutRule) for rule in layout.LAYOUT_PRIMS.values())
    assert set(lowerings.SMALL_ON_HOST) <= set(lowerings.LOWERINGS)


def test_every_module_with_lowerings_is_imported_by_the_planner():
    """The planner imports the lowering modules by name: a new one must be listed there."""
    package = ROOT / "backends" / "opencl"
    tree = ast.parse((package / "planner.py").read_text())
    imported = {n.module if n.module else a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1
                for a in n.names}
    registering = {p.stem for p in package.glob("*.py") if "@register(" in p.read_text() and p.stem != "lowerings"}
    assert registering <= imported, sorted(registering - imported)


def test_the_backend_registry_offers_the_configurable_names():
    assert tuple(backends.BACKENDS) == tuple(BACKENDS)
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        backends.compile_for("tpu", None)


# ------------------------------------------------------------------------ one home per primitive

def _imported_names(module) -> set:
    """The module-level names ``module`` binds by import statements."""
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    return {alias.asname or alias.name.partition(".")[0] for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}


def test_every_primitive_is_declared_in_functrace_primitives_and_imported_elsewhere():
    """A primitive and all its rules have one home, a module of ``functrace/primitives/``; any other
    module that holds one imports it.  So a new primitive is one entry there (CONTRIBUTING.md)."""
    homes: dict = {}
    strays = []
    for info in pkgutil.walk_packages([str(ROOT)], "functrace."):
        if info.name.endswith("__main__") or info.name == "functrace.primitives":  # (the package re-exports basic)
            continue
        module = importlib.import_module(info.name)
        imported = _imported_names(module)
        for name, value in vars(module).items():
            if isinstance(value, Primitive) and name not in imported:
                if info.name.startswith("functrace.primitives."):
                    homes.setdefault(value, set()).add(info.name)
                else:
                    strays.append(f"{info.name}.{name}")
    assert strays == [], f"primitives declared outside functrace/primitives/: {strays}"
    registered = _registered().values()
    assert [p.name for p in registered if p not in homes] == []
    assert {p.name: sorted(m) for p, m in homes.items() if len(m) > 1} == {}
