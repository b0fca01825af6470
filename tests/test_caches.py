"""Bounded caches: a jitted function keeps at most ``config.jit_cache_size`` signatures (least
recently used evicted), compiled OpenCL programs live as long as an executable uses them (plus
the ``config.opencl_program_cache_size`` most recent), and a dropped jitted function frees its
programs at once; identical sources still share one build."""
import weakref

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime as cl_runtime

rt = cl_runtime.get_runtime()
needs_opencl = pytest.mark.skipif(rt is None, reason="no usable OpenCL device on this machine")


@pytest.fixture
def options():
    """``set(name, value)``: a config option for this test only."""
    saved = {}

    def set_option(name, value):
        saved.setdefault(name, getattr(ft.config, name))
        ft.config.update(name, value)

    yield set_option
    for name, value in saved.items():
        ft.config.update(name, value)


@pytest.fixture
def kernels(options):
    """Small programs as OpenCL kernels (not run on the host of a CPU device)."""
    options("opencl_small_program_elements", 0)
    options("opencl_host_step_elements", 0)


def test_signature_cache_is_bounded_and_keeps_the_most_recently_used(options):
    options("jit_cache_size", 3)
    traced = []
    f = ft.jit(lambda x: traced.append(x.shape) or x * 2.0, backend="numpy")
    for n in (1, 2, 3, 1, 4):  # 1 was used again after 2 and 3: 2 is the one evicted
        f(np.ones(n))
    assert f.cache_size() == 3 and traced == [(1,), (2,), (3,), (4,)]
    f(np.ones(1)), f(np.ones(3)), f(np.ones(4))
    assert len(traced) == 4
    f(np.ones(2))
    assert len(traced) == 5 and f.cache_size() == 3


def test_cache_sizes_are_checked():
    with pytest.raises(ValueError, match="jit_cache_size must be a non-negative int"):
        ft.config.update("jit_cache_size", -1)
    with pytest.raises(ValueError, match="opencl_program_cache_size"):
        ft.config.update("opencl_program_cache_size", 2.5)


@needs_opencl
def test_dropped_jitted_functions_free_their_programs(kernels, options):
    # programs were kept by source hash forever: ~0.3-1.2 MB each, 272 MB per 1000 dropped functions
    options("opencl_program_cache_size", 1)
    x = np.ones(10, np.float32)
    exes, programs = [], []
    for i in range(3):
        # each its own source (and, by an odd constant, no other test's: a live executable of
        # another test with the same source would keep the program alive)
        f = ft.jit(lambda x: x * (2.375 + i), backend="opencl")
        np.testing.assert_array_equal(np.asarray(f(x)), x * (2.375 + i))
        exe = f.lower(x).compile().executable
        exes.append(weakref.ref(exe))
        programs.append(weakref.ref(exe.program))
        del f, exe
    rt.finish()  # (the queue holds the last executables until their kernels ran)
    assert [e() for e in exes] == [None] * 3  # freed when dropped, without waiting for the collector
    assert [p() is None for p in programs] == [True, True, False]  # the most recent one is kept


@needs_opencl
def test_identical_sources_share_one_program_while_any_uses_it(kernels, options):
    options("opencl_program_cache_size", 0)
    x = np.ones(100, np.float32)
    make = lambda: ft.jit(lambda x: fnp.cos(x) * 3.25 + 0.5, backend="opencl")
    f, g = make(), make()
    assert f.lower(x).compile().executable.program is g.lower(x).compile().executable.program
    program = weakref.ref(f.lower(x).compile().executable.program)
    del f
    assert program() is not None  # g still uses it
    np.testing.assert_allclose(np.asarray(g(x)), np.cos(x) * 3.25 + 0.5, rtol=1e-6)
    del g
    rt.finish()
    assert program() is None


@needs_opencl
def test_many_signatures_of_one_function_keep_a_bounded_number_of_programs(kernels, options):
    options("jit_cache_size", 2)
    options("opencl_program_cache_size", 0)
    f = ft.jit(lambda x: fnp.sum(x * 0.625, axis=0), backend="opencl")  # the column count is in its source
    programs = []
    for n in (10, 11, 12):
        x = np.ones((3, n), np.float32)
        np.testing.assert_array_equal(np.asarray(f(x)), np.full(n, 1.875, np.float32))
        programs.append(weakref.ref(f.lower(x).compile().executable.program))
    rt.finish()
    assert f.cache_size() == 2
    assert [p() is None for p in programs] == [True, False, False]


@pytest.mark.parametrize("value", ["-1", "many"])
def test_cache_sizes_from_the_environment_are_checked(monkeypatch, value):
    # unchecked, FUNCTRACE_JIT_CACHE_SIZE=-1 made every call of a jitted function raise KeyError
    # (evicting from an empty cache while its size exceeded -1)
    from functrace.core.config import Config
    monkeypatch.setenv("FUNCTRACE_JIT_CACHE_SIZE", value)
    with pytest.raises(ValueError, match="FUNCTRACE_JIT_CACHE_SIZE"):
        Config()
    monkeypatch.setenv("FUNCTRACE_JIT_CACHE_SIZE", "5")
    assert Config().jit_cache_size == 5
