"""Device kinds: one policy per kind says what runs where and which kernel designs the backend emits.

The OpenCL backend serves two kinds of device, and every choice that differs between them is a
field of a :class:`DevicePolicy`, chosen once per runtime by :func:`choose_policy` from the device
and the ``opencl_device_kind`` option (``"auto" | "cpu" | "gpu"``, also
``FUNCTRACE_OPENCL_DEVICE_KIND``; auto: ``cpu`` for a CPU device, ``gpu`` for any other):

* ``cpu`` (PoCL on the host's cores): small steps, small loops and small programs run on the host
  with numpy where a launch would cost more (``placement``), products may run on the host BLAS
  (``matmul``), a program near the crossover is timed both ways at its first call, buffers wrap
  page-aligned numpy memory (``USE_HOST_PTR``) on unified memory, elementwise kernels use the
  device's preferred vector width and store past the cache when their data outgrow it, and the
  sources may use OpenCL C's ``prefetch``, clang's non-temporal stores and ``native_sin``/``native_cos``
  (where the device's were measured accurate, once per device and driver, kept on disk, and only
  on arguments within the measured range): those are
  defined in ``CPU_PREFIX`` and ``NATIVE_TRIG_PREFIX``,
  the text only this kind puts before its programs (with ``FT_CPU_KIND``, for sources that need
  to test for it); the sources themselves fall back to plain forms (``executable.PREAMBLE``,
  ``matmul.cl``'s ``MM_PREFETCH``).
* ``gpu`` (any other device, or any device forced to it): every step with a lowering is a kernel,
  no host BLAS, no timed trials, buffers live on the device (copies in and out, no wrapping of
  host memory), elementwise kernels use 4 lanes, float32 sin / cos of vectors run lane by lane,
  and the sources are plain OpenCL C 1.2: no ``__builtin_*``, no ``native_*`` (NVIDIA's compiler
  rejects ``__builtin_prefetch`` on a ``__global`` pointer; its native functions drift by
  thousands of ulp).  Work-group designs: products of matrices (``matmul_tiled.cl``: tiles of both
  operands in local memory, a register block per work-item), reductions (trees in local memory),
  rms_norm and its backward pass, softmax and log_softmax (a work-group per row, several per group
  when rows are short: ``rmsnorm_rows.cl``, ``softmax_rows.cl``), attention (``attention_tiled.cl``:
  flash attention with K / V tiles in local memory); matrix-vector products, scans and sorts keep
  the CPU designs.

On both kinds float32 division and sqrt are correctly rounded, as numpy's: programs are built with
``-cl-fp32-correctly-rounded-divide-sqrt`` where the device reports
``CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT``, else fused kernels correct the driver's quotient and root
with one residual step (``FT_FDIV`` / ``FT_FSQRT``, see ``executable.PREAMBLE``).
"""
from __future__ import annotations

from dataclasses import dataclass

ROUNDING_OPTION = "-cl-fp32-correctly-rounded-divide-sqrt"

# CPU-only macros, put before every program of the cpu kind (and only there): the matmul kernels'
# prefetch hint as OpenCL C's own ``prefetch`` (clang's ``__builtin_prefetch`` becomes
# ``llvm.prefetch``, which a clang-based CPU driver other than PoCL may not implement: Oclgrind could
# not create the kernels; PoCL's ``prefetch`` does nothing, and the builtin's gain on PoCL was within
# this host's noise), and clang's non-temporal store where the compiler has it
CPU_PREFIX = """#define FT_CPU_KIND 1
#define MM_PREFETCH(p) prefetch((p), 1)
#if defined(__has_builtin)
#  if __has_builtin(__builtin_nontemporal_store)
#    define FT_STREAM_STORE(v, p) __builtin_nontemporal_store((v), (p))
#  endif
#endif
"""
# |x| up to which the driver's native sin / cos are measured (``runtime.native_trig_accurate``) and
# used: PoCL's lose every digit beyond ~1.7e6 (sin(1e8) gave -0.0), so a vector with a lane past
# the bound takes the plain form (the same constant: nothing is used where it was not measured)
NATIVE_TRIG_BOUND = 1e4
NATIVE_TRIG_ERROR = 2.4e-7  # two float32 ulps at 1.0


def _lane_by_lane(f: str, n: int) -> str:
    """``f`` of each lane of the named float<n> ``v``, as a float<n> expression."""
    lanes = ", ".join(f"{f}((v).s{'0123456789abcdef'[k]})" for k in range(n))
    return f"((float{n})({lanes}))"


def _native_where_measured(f: str, n: int) -> str:
    """``#define FT_<F>_float<n>(v)`` (n = 1: the scalar ``FT_<F>_float``): the driver's
    ``native_<f>`` when every lane of ``v`` lies within ``NATIVE_TRIG_BOUND`` (a NaN lane too: the
    native forms were measured to give NaN), else the plain form (lane by lane for a vector; inf
    gives NaN there)."""
    if n == 1:
        return f"#define FT_{f.upper()}_float(v) (fabs(v) > FT_NATIVE_TRIG_BOUND ? {f}(v) : native_{f}(v))\n"
    return (f"#define FT_{f.upper()}_float{n}(v) (any(fabs(v) > FT_NATIVE_TRIG_BOUND) ? {_lane_by_lane(f, n)} "
            f": native_{f}(v))\n")


# the driver's faster sin / cos where measured: on the cpu kind, in programs that compute sin or
# cos, where the device's own were measured accurate (``runtime.native_trig_accurate``: within
# NATIVE_TRIG_ERROR of sin / cos on |x| <= NATIVE_TRIG_BOUND, NaN for inf and NaN; at the first
# such program, once per device and driver)
NATIVE_TRIG_PREFIX = f"#define FT_NATIVE_TRIG_BOUND {NATIVE_TRIG_BOUND!r}f\n" + "".join(
    _native_where_measured(f, n) for f in ("sin", "cos") for n in (1, 2, 3, 4, 8, 16))


# the plain forms of the kind-dependent macros (``executable.PREAMBLE``, after the kind's prefix):
# sin / cos of vectors lane by lane (PoCL's float vector forms are wrong next to 0, inf or NaN; a
# GPU computes lanes one by one anyway), float32 division and sqrt as the driver rounds them
PLAIN_MACROS = ("#ifndef FT_SIN_float\n#define FT_SIN_float(v) sin(v)\n#define FT_COS_float(v) cos(v)\n"
                + "".join(f"#define FT_{f.upper()}_float{n}(v) {_lane_by_lane(f, n)}\n" for f in ("sin", "cos")
                          for n in (2, 3, 4, 8, 16)) + "#endif\n"
                "#ifndef FT_FDIV\n#define FT_FDIV(a, b) ((a) / (b))\n#define FT_FSQRT(x) sqrt(x)\n#endif\n")

# a device without correctly rounded float32 division and sqrt: one residual step on the
# driver's result (fma gives the exact residual), zeros, infinities and NaNs passed through
CORRECTED_DIVISION_PREFIX = """#define FT_FDIV(a, b) ft_fdiv_fix((a) / (b), (a), (b))
#define ft_fdiv_fix(q, a, b) (isfinite(q) && (q) != 0.0f ? (q) + fma(-(q), (b), (a)) / (b) : (q))
#define FT_FSQRT(x) ft_fsqrt_fix(sqrt(x), (x))
#define ft_fsqrt_fix(s, x) (isfinite(s) && (s) != 0.0f ? (s) + fma(-(s), (s), (x)) / (2.0f * (s)) : (s))
"""


@dataclass(frozen=True)
class DevicePolicy:
    """What runs where on one device, and which kernel designs its programs use."""

    kind: str                     # "cpu" | "gpu": what reports name
    host_steps: bool              # small steps and loops may run on the host (placement's estimate)
    host_blas: bool               # products may run on the host BLAS (the ``matmul`` option)
    timed_trials: bool            # a program may be timed against one numpy program at its first call
    small_programs_on_host: bool  # programs under ``opencl_small_program_elements`` run with numpy
    wraps_host_memory: bool       # buffers wrap numpy memory (``USE_HOST_PTR``): unified memory only
    streaming_stores: bool        # elementwise kernels past the cache store non-temporally
    one_item_work_groups: bool    # attention, lane loops: work-groups of one item (the driver balances cores)
    tiled_matmul: bool            # GEMM by work-groups sharing tiles in local memory (matmul_tiled.cl)
    tree_reductions: bool         # reductions by work-groups halving a tree in local memory
    row_work_groups: bool         # rms_norm / softmax rows by work-groups (rmsnorm_rows.cl, softmax_rows.cl)
    tiled_attention: bool         # attention by work-groups of queries (keys) sharing K/V (Q/G) tiles in local memory
    device_vector_widths: bool    # vector lanes from the device's preference (else the fixed ones)
    prefix: str                   # source text before every program of this kind
    build_options: str            # options of every program built on the device

    def program_source(self, source: str, native_trig: bool = False) -> str:
        """The text built for ``source`` on this kind: its prefix (with the driver's native sin / cos
        on the cpu kind, given ``native_trig``: they were measured accurate), then the source."""
        native = NATIVE_TRIG_PREFIX if native_trig and self.kind == "cpu" else ""
        return self.prefix + native + source

    def vector_width(self, preferred: int) -> int:
        """Lanes per work-item of an elementwise kernel: the device's ``preferred`` width rounded up
        to 4, 8 or 16 on the cpu kind (16 on AVX-512), 4 on the gpu kind (float4 loads coalesce
        on every GPU)."""
        if not self.device_vector_widths:
            return 4
        return min((w for w in (4, 8, 16) if w >= preferred), default=16)

    def attention_lanes(self, ctype: str, native: int) -> int:
        """Attention's vector lanes per work-item: the device's ``native`` width on the cpu kind
        (at least 8, 4 for double, at most 16), the design's minimum on the gpu kind."""
        if ctype == "float":
            return 16 if self.device_vector_widths and native >= 16 else 8
        return 8 if self.device_vector_widths and native >= 8 else 4


# OpenCL's bit field values (the spec's, as pyopencl's ``device_fp_config`` / ``device_type`` give
# them): the policy is chosen without loading pyopencl here
CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT = 1 << 7
CL_DEVICE_TYPE_CPU = 1 << 1


def rounds_fp32_correctly(device) -> bool:
    """Does ``device`` report CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT in its single_fp_config?"""
    try:
        return bool(device.single_fp_config & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)
    except Exception:
        return False


def device_kind(device, option: str) -> str:
    """The kind for ``device`` under the ``opencl_device_kind`` option (auto: cpu for a CPU)."""
    if option in ("cpu", "gpu"):
        return option
    return "cpu" if device.type & CL_DEVICE_TYPE_CPU else "gpu"


def choose_policy(device, option: str) -> DevicePolicy:
    """The policy of ``device`` under the ``opencl_device_kind`` option: the one place a kind is chosen."""
    return make_policy(device_kind(device, option), rounds_fp32_correctly(device), bool(device.host_unified_memory))


def make_policy(kind: str, correct_rounding: bool = True, unified: bool = True) -> DevicePolicy:
    """The policy of ``kind`` on a device that does (or not) round float32 division and sqrt
    correctly and has (or not) unified host memory (tests and the compile check use it directly)."""
    options = ROUNDING_OPTION if correct_rounding else ""
    fix = "" if correct_rounding else CORRECTED_DIVISION_PREFIX
    if kind == "cpu":
        return DevicePolicy("cpu", host_steps=True, host_blas=True, timed_trials=True,
                            small_programs_on_host=True, wraps_host_memory=unified, streaming_stores=True,
                            one_item_work_groups=True, tiled_matmul=False, tree_reductions=False,
                            row_work_groups=False, tiled_attention=False,
                            device_vector_widths=True, prefix=CPU_PREFIX + fix, build_options=options)
    return DevicePolicy("gpu", host_steps=False, host_blas=False, timed_trials=False,
                        small_programs_on_host=False, wraps_host_memory=False, streaming_stores=False,
                        one_item_work_groups=False, tiled_matmul=True, tree_reductions=True,
                        row_work_groups=True, tiled_attention=True,
                        device_vector_widths=False, prefix=fix, build_options=options)
