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
    saved = ft.config.opencl_small_program_elements
    ft.config.update("opencl_small_program_elements", 0)
    yield
    ft.config.update("opencl_small_program_elements", saved)
