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
