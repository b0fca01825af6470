"""Test-wide settings."""
import pytest

import functrace as ft


@pytest.fixture(autouse=True)
def opencl_kernels_for_small_programs(request):
    """OpenCL tests use small shapes but must exercise the kernels: the CPU-device shortcut that
    runs small programs on the host is switched off for them (test_opencl checks it separately)."""
    if not request.module.__name__.startswith("test_opencl"):
        yield
        return
    names = ("opencl_small_program_elements", "opencl_host_step_elements")
    saved = {n: getattr(ft.config, n) for n in names}
    for n in names:
        ft.config.update(n, 0)
    yield
    for n, v in saved.items():
        ft.config.update(n, v)
