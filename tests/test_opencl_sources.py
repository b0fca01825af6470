"""Every OpenCL source each device kind emits is plain enough for GPU compilers (issue 27).

The sources are collected without building anything: ``Runtime.program`` is replaced by a recorder
while a representative set of programs compiles under each kind (forced on whatever device this
machine has), with every step a kernel (no host steps, products as kernels).  The gpu kind's
sources must not contain ``__builtin_`` (NVIDIA's compiler rejects ``__builtin_prefetch`` on a
``__global`` pointer, which clang accepts) nor ``native_`` (NVIDIA's native functions drift), and
every source of both kinds must compile with Debian's clang-16 for NVIDIA's and AMD's OpenCL
targets (``.ci/run`` installs clang-16 where it can; the test skips without it).
"""
from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import lowerings
from functrace.backends.opencl import matmul as mm
from functrace.backends.opencl import runtime as cl_runtime

pytestmark = pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")

CLANG = shutil.which("clang-16")
# NVIDIA's driver has 64-bit atomics (cl_khr_int64_base_atomics / _extended_atomics), which
# clang-16's nvptx target does not declare by itself
TARGETS = {"NVIDIA": ["-target", "nvptx64-nvidia-nvcl", "-Xclang",
                      "-cl-ext=+cl_khr_int64_base_atomics,+cl_khr_int64_extended_atomics"],
           "AMD": ["-target", "amdgcn-amd-amdhsa", "-mcpu=gfx90a", "-nogpulib"]}
RNG = np.random.default_rng(27)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _block(p, x):
    """A transformer block's loss: RMSNorm, causal attention, SwiGLU (float32 or float64)."""
    B, T, D = x.shape
    h = ft.nn.rms_norm(x, p["g"])
    split = lambda a: fnp.reshape(a, (B, T, 2, D // 2))
    att = ft.nn.attention(split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"]), causal=True)
    x = x + fnp.reshape(att, (B, T, D))
    x = x + ft.nn.swiglu(x @ p["w1"], x @ p["w3"]) @ p["w2"]
    return fnp.mean(x ** 2)


def _mlp(p, x, labels):
    h = ft.nn.relu(x @ p["w0"] + p["b0"])
    h = fnp.tanh(h @ p["w1"] + p["b1"])
    return ft.nn.cross_entropy(h @ p["w2"], labels)


def _block_params(dtype):
    D = 8
    shapes = {"g": (D,), "wq": (D, D), "wk": (D, D), "wv": (D, D), "w1": (D, 12), "w3": (D, 12), "w2": (12, D)}
    return {k: RNG.standard_normal(s).astype(dtype) for k, s in shapes.items()}


def _programs() -> list:
    """(function, arguments) pairs that together use every hand-written kernel and the forms of
    generated kernels (elementwise chains with ragged tails, float16, integers, reductions along
    either axis, layouts, gathers, scatters, sorts, scans, random bits, control flow)."""
    x, y = _f32(1000), _f32(1000) + 3.0
    m = _f32(33, 65)
    mlp = {"w0": _f32(20, 16), "b0": _f32(16), "w1": _f32(16, 16), "b1": _f32(16), "w2": _f32(16, 5)}
    mlp64 = ft.tree_util.tree_map(lambda a: a.astype(np.float64), mlp)
    img, ker = _f32(2, 3, 9, 9), _f32(4, 3, 3, 3)
    return [
        (lambda a, b: fnp.sin(a) * fnp.cos(b) + a / b + fnp.sqrt(fnp.abs(b)) + fnp.exp(-a * a) + fnp.tanh(a)
         + fnp.log1p(a * a) + a // b + a % b + fnp.where(a > b, a, b) ** 2 + fnp.tan(a) + ft.nn.gelu(a), (x, y)),
        (lambda a, b: fnp.sin(a) * b / (b + 1) + fnp.sqrt(fnp.abs(a)), (x.astype(np.float16), y.astype(np.float16))),
        (lambda a, b: (a * 3 + b) // 7 + fnp.minimum(a, b) * 2 + (a % (b + 1)), (np.arange(999, dtype=np.int32),
                                                                    np.arange(999, dtype=np.int32))),
        (lambda a: (fnp.sum(a, axis=0), fnp.max(a, axis=1), fnp.cumsum(a, axis=1), fnp.sort(a, axis=1),
                    fnp.argsort(a[0]), ft.lax.top_k(a[1], 3)), (m,)),
        (lambda a: (fnp.concatenate([a, a[:, ::-1]], axis=1), fnp.pad(a, 2), a.T @ a, a[fnp.array([3, 1, 2])],
                    a.at[fnp.array([0, 5, 5])].add(1.0)), (m,)),
        (ft.value_and_grad(_mlp), (mlp, _f32(9, 20), RNG.integers(0, 5, 9))),
        (ft.value_and_grad(_mlp), (mlp64, _f32(9, 20).astype(np.float64), RNG.integers(0, 5, 9))),
        (ft.value_and_grad(_block), (_block_params(np.float32), _f32(2, 5, 8))),
        (_block, (_block_params(np.float64), _f32(2, 5, 8).astype(np.float64))),
        (ft.grad(lambda i, k: fnp.sum(ft.nn.conv2d(i, k, stride=1, padding=1) ** 2)), (img, ker)),
        (lambda k, a: (ft.random.normal(k, (300,), np.float32) + ft.nn.softmax(a, axis=-1).sum(),
                       ft.nn.log_softmax(a), ft.nn.logsumexp(a, axis=0)), (ft.random.PRNGKey(0), m)),
        (lambda a: ft.lax.fori_loop(0, 3, lambda i, c: c * 0.5 + fnp.sin(c), a)
         + ft.lax.cond(a[0] > 0, lambda v: v * 2.0, lambda v: v - 1.0, a)
         + ft.lax.scan(lambda c, r: (c + r, c * r), fnp.zeros(1000, np.float32), fnp.stack([a, a, a]))[0], (x,)),
    ]


def _sources_of(kind: str, monkeypatch) -> list:
    """The (source, build options) of every program the representative programs ask the device for
    under ``kind``, without building any (the recorder hands back no program)."""
    recorded: list = []

    def record(self, source, options="", in_thread=False):
        recorded.append((self.policy.program_source(source),
                         " ".join(filter(None, (self.policy.build_options, options)))))

    with monkeypatch.context() as mp:
        mp.setattr(cl_runtime.Runtime, "program", record)
        mp.setattr(mm, "_SHARED", {})  # shared matmul programs asked for again
        mp.setattr(ft.config, "opencl_device_kind", kind)
        mp.setattr(ft.config, "matmul", "opencl")
        mp.setattr(ft.config, "opencl_host_step_elements", 0)  # the cpu kind: every step a kernel
        mp.setattr(ft.config, "opencl_small_program_elements", 0)
        assert cl_runtime.get_runtime().kind == kind
        for f, args in _programs():
            ft.jit(f).lower(*args).compile()
    return list(dict.fromkeys(recorded))


@pytest.fixture(scope="module")
def sources() -> dict:
    """{kind: [(source, options), ...]} for both kinds."""
    with pytest.MonkeyPatch.context() as mp:
        return {kind: _sources_of(kind, mp) for kind in ("cpu", "gpu")}


# kernel files of one kind's designs only
KIND_ONLY = {"matmul_tiled.cl": "gpu", "rmsnorm_rows.cl": "gpu", "softmax_rows.cl": "gpu", "attention_tiled.cl": "gpu",
             "rmsnorm.cl": "cpu", "softmax.cl": "cpu", "attention.cl": "cpu"}


def test_the_programs_use_every_kernel_file(sources):
    """Every ``cl_kernels/*.cl`` is in some source of each kind it serves, so the checks below
    cover it."""
    names = sorted(f for f in os.listdir(lowerings._KERNEL_DIR) if f.endswith(".cl"))
    for kind, found in sources.items():
        text = "\n".join(s for s, _ in found)
        missing = [n for n in names if KIND_ONLY.get(n, kind) == kind and lowerings.kernel_source(n) not in text]
        assert missing == [], kind


def test_gpu_kind_sources_are_plain_opencl_c(sources):
    """No compiler builtins and no native functions in what the gpu kind builds; the cpu kind keeps
    its fast paths (so the check above is not vacuous)."""
    for source, _ in sources["gpu"]:
        assert "__builtin_" not in source and "native_" not in source and "FT_CPU_KIND" not in source
    assert any("__builtin_nontemporal_store" in s for s, _ in sources["cpu"])


def test_float32_programs_carry_the_rounding_option(sources):
    """Where the device rounds float32 division and sqrt correctly, every program is built so."""
    rt = cl_runtime.get_runtime()
    want = "-cl-fp32-correctly-rounded-divide-sqrt"
    from functrace.backends.opencl.policy import rounds_fp32_correctly
    if not rounds_fp32_correctly(rt.device):
        pytest.skip("the device does not report CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT")
    for kind, found in sources.items():
        assert found and all(want in options.split() for _, options in found), kind


def _clang(source: str, options: str, target: list) -> str:
    """clang-16's complaints about ``source`` for ``target`` (empty when it compiles)."""
    with tempfile.NamedTemporaryFile("w", suffix=".cl", delete=False) as f:
        f.write(source)
    try:
        run = subprocess.run([CLANG, "-x", "cl", "-cl-std=CL1.2", *target, "-fsyntax-only", *options.split(),
                              "-Wno-everything", f.name], capture_output=True, text=True, timeout=300)
        return "" if run.returncode == 0 else run.stderr[-3000:]
    finally:
        os.unlink(f.name)


@pytest.mark.skipif(CLANG is None, reason="clang-16 is not installed (Debian: apt-get install clang-16; "
                                          ".ci/run installs it where it can)")
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_source_compiles_for_gpu_targets(sources, target):
    """Each source of each kind compiles with clang-16 for NVIDIA's / AMD's OpenCL target."""
    jobs = [(kind, s, o) for kind, found in sources.items() for s, o in found]
    with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        errors = list(pool.map(lambda job: _clang(job[1], job[2], TARGETS[target]), jobs))
    failed = [f"{kind} kind:\n{err}" for (kind, _, _), err in zip(jobs, errors) if err]
    assert not failed, "\n\n".join(failed)
