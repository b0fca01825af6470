"""The package's structure: what ``import functrace`` loads, and where options live."""
import subprocess
import sys


def test_import_loads_no_opencl_module_and_no_pyopencl():
    """The OpenCL backend and pyopencl (about 0.2 s) load at the first OpenCL compile or the first
    use of a device name (``ft.devices``, ``ft.device_put``, ...), not at ``import functrace`` nor at
    ``ft.Array`` (the public array type: ``core/array.py``)."""
    code = ("import sys, functrace, functrace.numpy, functrace.nn, functrace.lax\n"
            "print(sorted(m for m in sys.modules if 'opencl' in m))\n"
            "import functrace as ft; ft.Array; print(sorted(m for m in sys.modules if 'opencl' in m))\n"
            "ft.devices\n"
            "print(sorted(m for m in sys.modules if m.startswith('functrace.backends.opencl')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == out[1] == "[]"
    assert "functrace.backends.opencl.runtime" in out[2] and "functrace.backends.opencl.executable" not in out[2]


def test_options_live_in_config_and_the_readme_lists_them():
    """Options are read from ``FUNCTRACE_*`` variables in one place (``config.py``), and each one
    is documented in the README's table."""
    import pathlib
    import re

    import functrace as ft
    root = pathlib.Path(__file__).resolve().parents[1]
    readers = [str(p.relative_to(root)) for p in (root / "functrace").rglob("*.py")
               if p.name != "config.py" and re.search(r"environ[^\n]*FUNCTRACE_|getenv\([\"']FUNCTRACE_", p.read_text())]
    assert readers == []
    readme = (root / "README.md").read_text()
    assert all(f"| `{name}` |" in readme for name in ft.config._DEFAULTS), sorted(ft.config._DEFAULTS)


def test_ruff_finds_nothing():
    """The lint configured in pyproject.toml (pyflakes, import order, bugbear) over the package,
    the tests and the benchmarks; ruff comes with the ``test`` extra."""
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "functrace", "tests", "benchmarks"],
                         cwd=root, capture_output=True, text=True)
    assert "No module named ruff" not in run.stderr, "ruff is missing: pip install '.[test]'"
    assert run.returncode == 0, run.stdout + run.stderr


def test_no_module_imports_another_modules_private_names():
    """What modules share is public (``lax`` and ``custom`` share ``subprograms``; the OpenCL
    lowerings share ``lowerings``' helpers); a leading underscore means the module's own."""
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1] / "functrace"
    found = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module is not None \
                    and (node.level > 0 or node.module.startswith("functrace")):  # (submodules may be private)
                found += [f"{path.relative_to(root)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []


def test_the_wheel_ships_the_opencl_sources_and_the_package_loads_them(tmp_path):
    """``cl_kernels/`` sits at the repository's top level and is installed as the package data
    ``functrace/cl_kernels``; an installed functrace reads its kernels from there."""
    import pathlib
    import zipfile
    root = pathlib.Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(tmp_path), str(root)], check=True, capture_output=True, cwd=tmp_path)
    wheel, = tmp_path.glob("functrace-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = sorted(p.name for p in (root / "cl_kernels").glob("*.cl"))
    assert sources and all(f"functrace/cl_kernels/{name}" in names for name in sources)
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    code = ("from functrace.backends.opencl.lowerings import kernel_source, _KERNEL_DIR\n"
            f"print(_KERNEL_DIR); print(len(kernel_source({sources[0]!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={**__import__("os").environ, "PYTHONPATH": str(tmp_path / "site")}).stdout.split()
    assert out[0] == str(tmp_path / "site" / "functrace" / "cl_kernels")
    assert int(out[1]) == len((root / "cl_kernels" / sources[0]).read_text())


# Imports inside functions: only the optional OpenCL backend, loaded at its first use from the public
# API (``import functrace`` must not load pyopencl, see the first test); (importing module, imported module)
LAZY_IMPORTS = {("functrace", "functrace.backends.opencl.runtime"),  # ft.Array, ft.devices, ...
                ("functrace.backends", "functrace.backends.opencl.executable")}  # the first OpenCL compile


def _imports(root) -> tuple[dict, set]:
    """(``{module: {imported functrace modules}}`` from every import statement, the (module,
    imported module) pairs of the statements inside a function body).  Statements under
    ``if TYPE_CHECKING:`` are not run and not counted."""
    import ast
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)

    def resolve(name):  # a package means its __init__, which is the module named like the package
        return name if name in modules else None

    graph, inside_functions = {}, set()
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        imported = set()

        def visit(statements, in_function):
            for node in statements:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(node.body, True)
                    continue
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    visit(node.orelse, in_function)
                    continue
                found = set()
                if isinstance(node, ast.Import):
                    found = {resolve(a.name) for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                        base = ".".join(anchor + ([node.module] if node.module else []))
                    # `from p import m` imports the submodule m when there is one
                    found = {resolve(f"{base}.{alias.name}") or resolve(base) for alias in node.names}
                found -= {None, name}
                imported.update(found)
                if in_function:
                    inside_functions.update((name, m) for m in found)
                for field in ("body", "orelse", "finalbody", "handlers"):
                    visit(getattr(node, field, []), in_function)
        visit(ast.parse(path.read_text()).body, False)
        graph[name] = imported
    return graph, inside_functions


def _import_cycles(graph):
    """The strongly connected components of more than one module (each one holds a cycle)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def test_no_import_cycle_and_no_import_inside_a_function():
    """Modules import each other at module level without a cycle, so any module imports on its own
    and the load order is the dependency order; no import hides inside a function but the lazy
    loading of the optional OpenCL backend (``LAZY_IMPORTS``)."""
    import pathlib
    graph, inside_functions = _imports(pathlib.Path(__file__).resolve().parents[1] / "functrace")
    assert "functrace.numpy._shape" in graph["functrace.numpy"] and "functrace.core" in graph["functrace.transforms.autodiff"]
    assert inside_functions == LAZY_IMPORTS, sorted(inside_functions - LAZY_IMPORTS)
    for module, lazy in LAZY_IMPORTS:
        graph[module].discard(lazy)
    cycles = _import_cycles(graph)
    described = ["\n  ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in cycles]
    assert cycles == [], "import cycles:\n  " + "\n\n  ".join(described)


def test_functrace_numpy_exports_no_helper():
    """``functrace.numpy`` shows numpy's names only: the helpers functrace's modules share live in
    ``functrace/arrays.py``, and the modules the package is written in are not its names."""
    import functrace.numpy as fnp
    assert [name for name in dir(fnp) if name.startswith("_") and not name.startswith("__")] == []
    assert not hasattr(fnp, "to_array") and hasattr(fnp, "sum") and hasattr(fnp.linalg, "solve")
