"""Test-wide settings."""
import pytest

import functrace as ft


def pytest_configure(config):
    config.addinivalue_line("markers", "no_canaries: an OpenCL test about asynchronous buffer lifetimes, "
                                       "which canary mode's wait after every launch would hide")
    config.addinivalue_line("markers", "opencl_kernels: a test outside the test_opencl modules whose small "
                                       "programs must run as OpenCL kernels too (no host shortcut)")


@pytest.fixture(autouse=True)
def opencl_kernels_for_small_programs(request):
    """OpenCL tests (and tests marked ``opencl_kernels``) use small shapes but must exercise the
    kernels: the CPU-device shortcut that runs small programs on the host is switched off for them
    (test_opencl checks it separately).
    They run in canary mode (``opencl_debug_canaries``): every buffer between guard regions, so
    a kernel reading outside a buffer gives NaN and one writing outside it raises."""
    opencl_module = request.module.__name__.startswith("test_opencl")
    if not opencl_module and request.node.get_closest_marker("opencl_kernels") is None:
        yield
        return
    settings = {"opencl_small_program_elements": 0, "opencl_host_step_elements": 0}
    if opencl_module:
        settings["opencl_debug_canaries"] = request.node.get_closest_marker("no_canaries") is None
    saved = {n: getattr(ft.config, n) for n in settings}
    for n, v in settings.items():
        ft.config.update(n, v)
    yield
    for n, v in saved.items():
        ft.config.update(n, v)


@pytest.fixture
def jax_x64():
    """jax (skipped when not installed) with float64 enabled for one test, then the previous setting:
    a global x64 switch left on changes what later tests get from JAX (jax.random's dtypes)."""
    jax = pytest.importorskip("jax", reason="optional comparison with JAX")
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield jax
    jax.config.update("jax_enable_x64", previous)


@pytest.fixture(autouse=True, scope="session")
def matmul_warm_up_in_line():
    """``matmul`` auto mode warms its kernels up in the calling thread during tests: no child
    processes, and the decision comes at a known run (test_opencl_matmul checks the background
    warm-up itself)."""
    from functrace.backends.opencl import matmul
    matmul.BACKGROUND_WARM_UP = False
    yield


@pytest.fixture(autouse=True, scope="session")
def lean_builds_never_fall_back():
    """Every program the suite builds on PoCL builds with the declarations of the builtins it
    calls (``backends/opencl/lean_header``): a lean build that failed (and was built in full) fails
    the session, saying which."""
    yield
    from functrace.backends.opencl import runtime
    failures = [f"{rt.name}: {rt.lean_header_failure}" for rt in runtime._state.get("runtimes", {}).values()
                if rt is not None and rt.lean_header_failure]
    assert not failures, f"lean builds fell back to the whole opencl-c.h: {failures}"
