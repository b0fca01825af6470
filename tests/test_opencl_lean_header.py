"""Programs built for PoCL with the declarations of the builtins they call (``lean_header``): what
the declarations keep and drop, that a lean build gives the same bits as a build with the whole
``opencl-c.h`` on random inputs (float32 and float64, specials included), and that a program a
lean build fails on is built in full with the same values."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import lean_header
from functrace.backends.opencl import runtime as cl_runtime

RNG = np.random.default_rng(31)

HEADER = """// a header shaped like opencl-c.h
#ifndef _OPENCL_H_
#define _OPENCL_H_
#include "opencl-c-base.h"
#define __ovld __attribute__((overloadable))
float __ovld sin(float);
#ifdef cl_khr_fp64
double __ovld sin(double);
double __ovld pow(double,
                  double);
#endif
typedef int keep_me(int);
float __ovld cos(float); /* a comment */
float8 __ovld vload8(size_t, const float*);
#endif //_OPENCL_H_
"""
BASE = "#define CL_VERSION_1_0 100\ntypedef unsigned int uint;\n"


def test_declarations_keep_the_builtins_a_program_names_with_every_preprocessor_line():
    lean = lean_header.LeanHeader(HEADER, BASE)
    got = lean.declarations("__kernel void k(__global float* a) { a[0] = sin(a[0]) + pow(1.0, 2.0); }")
    assert "float __ovld sin(float);" in got and "double __ovld sin(double);" in got
    assert "double __ovld pow(double, double);" in got  # (a declaration over two lines, kept whole)
    assert "cos(" not in got  # not named by the program
    assert "typedef int keep_me(int);" in got and "typedef unsigned int uint;" in got
    assert got.index("#ifdef cl_khr_fp64") < got.index("double __ovld sin(double);") < got.index("#endif")
    assert "_OPENCL_H_" not in got and "opencl-c-base.h" not in got  # (the guard is the build option's)
    assert lean.declarations("kernel void k() {}").count("__ovld sin") == 0
    pasted = lean.declarations("#define CAT_(a, b) a##b\n#define CAT(a, b) CAT_(a, b)\nx = CAT(co, s)(1.0f);")
    assert "cos(" not in pasted  # (a prefix of fewer than PASTED_PREFIX characters names nothing)
    assert "vload8(size_t" in lean.declarations("#define CAT(a, b) a##b\nx = CAT(vload, 8)(0, p);")
    assert "vload8(" not in lean.declarations("x = vload(0, p);")  # (without pasting: the names it spells)


def test_a_header_without_its_include_guard_is_not_used():
    with pytest.raises(ValueError, match="include guard"):
        lean_header.LeanHeader(HEADER.replace("#ifndef _OPENCL_H_\n#define _OPENCL_H_\n", ""), BASE)


def _pocl_runtime():
    rt = cl_runtime.get_runtime()
    if rt is None or rt._lean_header() is None:
        pytest.skip("no lean builds here: the device is not PoCL or its opencl-c.h was not found")
    return rt


BUILTINS_SOURCE = """
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
__kernel void builtins(__global const T* x, __global T* out, const int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const T v = x[i];
    T r[16];
    r[0] = sin(v); r[1] = cos(v); r[2] = tan(v); r[3] = exp(v); r[4] = log(fabs(v));
    r[5] = tanh(v); r[6] = pow(fabs(v), (T)0.37); r[7] = erf(v); r[8] = lgamma(v); r[9] = atan2(v, (T)0.3);
    r[10] = expm1(v); r[11] = log1p(fabs(v)); r[12] = sqrt(fabs(v)); r[13] = fma(v, v, (T)1);
    r[14] = fmax(v, (T)0.5); r[15] = cbrt(v);
    for (int k = 0; k < 16; k++) out[k * n + i] = r[k];
}
"""


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_lean_build_gives_the_bits_of_a_full_build(dtype):
    rt = _pocl_runtime()
    if dtype == np.float64 and not rt.supports_fp64:
        pytest.skip("no float64 on this device")
    ctype = "float" if dtype == np.float32 else "double"
    n = 1001
    x = np.concatenate([RNG.standard_normal(n - 7) * 30, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, 88.7]])
    x = x.astype(dtype)
    cl = rt.cl
    outs = []
    for lean in (True, False):
        ft.config.update("opencl_lean_header", lean)
        try:
            prog = rt.program(BUILTINS_SOURCE, f"-DT={ctype}")
        finally:
            ft.config.update("opencl_lean_header", True)
        xb = cl.Buffer(rt.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
        ob = cl.Buffer(rt.context, cl.mem_flags.WRITE_ONLY, 16 * x.nbytes)
        cl.Kernel(prog, "builtins")(rt.queue, (n,), None, xb, ob, np.int32(n))
        out = np.empty(16 * n, dtype)
        cl.enqueue_copy(rt.queue, out, ob)
        rt.queue.finish()
        outs.append(out)
    np.testing.assert_array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8))
    assert rt.lean_header_failure is None


def test_a_program_a_lean_build_fails_on_is_built_in_full(monkeypatch):
    rt = _pocl_runtime()
    # declarations that name no builtin: a program calling any fails to build lean
    monkeypatch.setattr(lean_header, "for_platform", lambda version: lean_header.LeanHeader(HEADER, ""))
    monkeypatch.setattr(rt, "lean_header_failure", None)
    x = RNG.standard_normal(37).astype(np.float32)
    got = np.asarray(ft.jit(lambda v: fnp.exp(fnp.tanh(v)) * 3.0 + 0.25)(x))
    assert rt.lean_header_failure is not None and "Error" in rt.lean_header_failure
    assert rt._lean_header() is None  # (no lean build is tried again)
    np.testing.assert_allclose(got, np.exp(np.tanh(x)) * 3.0 + 0.25, rtol=1e-6)


def test_programs_of_many_operations_build_lean():
    """The suite's own programs build lean too: ``conftest.lean_builds_never_fall_back`` checks
    every runtime at the end of the session; here a few of each kind, at once."""
    rt = _pocl_runtime()
    x = RNG.standard_normal((9, 13)).astype(np.float32)
    w = RNG.standard_normal((13, 5)).astype(np.float32)
    programs = [
        lambda a: fnp.sum(fnp.sin(a) ** 2 + fnp.arctan2(a, 0.5), axis=1),
        lambda a: fnp.cumsum(fnp.log1p(fnp.abs(a)), axis=0),
        lambda a: ft.nn.softmax(a @ w, axis=-1),
        lambda a: ft.lax.fori_loop(0, 7, lambda i, c: c * 0.5 + fnp.cos(c), a),
        lambda a: fnp.sort(a, axis=1),
        lambda a: fnp.where(a > 0, fnp.floor(a * 3.0), fnp.remainder(a, 0.7)).astype(np.int32),
    ]
    for f in programs:
        np.testing.assert_allclose(np.asarray(ft.jit(f)(x), np.float64),
                                   np.asarray(ft.jit(f, backend="numpy")(x), np.float64), rtol=2e-5, atol=2e-5)
    assert rt.lean_header_failure is None
