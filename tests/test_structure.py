"""The package's structure: what ``import functrace`` loads, and where options live."""
import subprocess
import sys


def test_import_loads_no_opencl_module_and_no_pyopencl():
    """The OpenCL backend and pyopencl (about 0.2 s) load at the first OpenCL compile or the first
    use of a device name (``ft.Array``, ``ft.devices``, ...), not at ``import functrace``."""
    code = ("import sys, functrace, functrace.numpy, functrace.nn, functrace.lax\n"
            "print(sorted(m for m in sys.modules if 'opencl' in m))\n"
            "import functrace as ft; ft.Array\n"
            "print(sorted(m for m in sys.modules if m.startswith('functrace.backends.opencl')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "[]"
    assert "functrace.backends.opencl.runtime" in out[1] and "functrace.backends.opencl.executable" not in out[1]


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
