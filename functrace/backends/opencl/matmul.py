"""OpenCL lowering of ``dot_general``: the packed, register-tiled kernels of ``cl_kernels/matmul.cl``.

Any ``dot_general`` whose operands are, in row-major memory order, ``(batch..., M..., K...)`` or
``(batch..., K..., M...)`` for the left operand and ``(batch..., K..., N...)`` or
``(batch..., N..., K...)`` for the right one (batch dims leading and paired in order, contracting
dims contiguous and paired in order) is a batched ``op(A) . op(B)`` with transpose flags: that
covers ``x @ w``, ``x.T @ y`` / ``x @ y.T`` (what the VJP of a matmul emits), ``einsum('bij,bjk->bik')``
and matrix-vector products.  Other layouts return ``None`` (the executable runs a host step).

Which implementation runs (``ft.config.update("matmul", ...)``, or ``FUNCTRACE_MATMUL``):

* ``opencl``: always the OpenCL kernels (tests and ``benchmarks/bench_matmul.py`` force this);
* ``blas``: on the cpu device kind (``policy``), the host BLAS (numpy) on the buffers' host memory (no copies);
* ``auto`` (default): on the cpu kind, each shape runs on whichever of the two an earlier
  measurement found faster (kept per shape and dtype in memory and on disk), as it stood when the
  process first compiled the shape (``_IN_FORCE``).  A product that had none runs on the host BLAS
  in every program of the process -- the numerics of a shape are fixed for the process, so the
  same inputs give the same bits on every call, even of a function jitted again -- and from its
  ``MEASURE_AT_RUN``-th run, later processes get a verdict: that run hands
  the build of the kernels it would launch, and one launch of each (PoCL compiles a kernel's
  work-group function at its first launch), to the background (:func:`_warm_up_elsewhere`: on
  PoCL a low-priority child process, which leaves them in PoCL's disk cache); the first run after
  they are ready loads them (~0.1 s), times both on the real operands (a few interleaved runs,
  ~30 ms), keeps the faster as the shape's verdict and writes the program's own (BLAS) result.
  (The build and first launches of a shape's kernels take seconds on PoCL: done in the caller,
  they stalled one call.)  On the gpu kind always OpenCL, whatever the option.  Under MPI (more
  than one process) a shape not decided yet stays on the host BLAS, unmeasured (see ``lower_matmul``).
* the host BLAS runs on the process's own thread count (never changed here: OpenBLAS rounds
  differently at different counts).
* kernels the device cannot run (their program does not build, or the driver will not make them:
  ``_cannot_run``) give way, on either kind and in any mode, to the host BLAS; the gpu kind's
  work-group GEMM takes the largest tiles the device and the built kernel allow (work-group size,
  local memory, CL_KERNEL_WORK_GROUP_SIZE), else the packed design.  The report says why.

The kernels also have a fused epilogue (bias along N, then relu / tanh, chosen at compile time);
:func:`lower_matmul` exposes it for a matmul+bias(+activation) fusion.

Compile cost: the matmul kernels do not change with the shapes (those are kernel arguments), so
they are built once per device, dtype and epilogue as a *shared program* (``rt.program``:
cached in memory and on disk, and PoCL's own cache keeps the compiled kernels), instead of being
compiled again into every jitted function's program.  On PoCL that build (it compiles every
kernel when the binary is cached) costs seconds, which would otherwise be paid by the first
call of every new function that multiplies matrices.  The jitted program's source
(``as_text()``) carries a comment naming the matmul kernels a step launches.

The measurements behind the constants and choices here: benchmarks/RESULTS.md ("Measurement
notes moved from the OpenCL backend's docstrings").
"""
from __future__ import annotations

import ast
import atexit
import contextlib
import functools
import hashlib
import math
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ... import distributed
from ... import primitives as P
from ...core import Literal
from ...core.config import config
from . import runtime
from .disk_cache import cache_dir, read_entry, write_entry
from .fusion import View, access_for, contiguous_strides, f32_helpers
from .layout import copy_kernel
from .lowerings import FP64_PRAGMA, Lowered, kernel_source, register
from .placement import compute_units

TM = 8                      # rows per micro-tile (matmul.cl MM_TM)
VW = {np.dtype(np.float32): 16, np.dtype(np.float64): 8}   # vector width; TN = 2 * VW columns
SFX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
ACTS = {"none": 0, "relu": 1, "tanh": 2}
PKW = 64                    # k rows per packing work-item (matmul.cl MM_PKW)
# cache blocking of one work-item (see matmul.cl): rows, columns, and the K chunk per pass
BLOCK_M, BLOCK_N, BLOCK_K = 64, 256, 256
# K up to this is one chunk: every further chunk loads and stores the C tile again; longer K keeps
# BLOCK_K chunks (A read in place down long columns is slower with long chunks)
ONE_CHUNK_K = 1024
MEASURE_AT_RUN = 3          # auto mode: the run of an undecided shape that measures OpenCL vs BLAS
# the work-group GEMM's tiles (matmul_tiled.cl), largest first: (rows, columns, k) of a work-group's
# tile of C and chunk of K, and (rows, columns) of a work-item's register block; a device gets the
# first whose work-group size and local memory (two buffers of each operand's chunk) it has
TILES = ((64, 64, 16, 4, 4), (32, 32, 16, 4, 4), (16, 16, 16, 4, 4))  # 256, 64, 16 work-items

_DECISIONS: dict = {}       # (dtype, batch, M, N, K, ta, tb, epilogue) -> "opencl" | "blas"
_TIMINGS: dict = {}         # same key -> (opencl seconds, blas seconds) of the measurement
_RUNS: dict = {}            # same key -> runs so far while undecided (host BLAS meanwhile)
# same key -> the verdict in force for this process's programs, fixed when it first lowers the key
# (None: undecided, the host BLAS): a verdict measured later applies from the next process, so every
# program of a shape rounds alike for the process's life
_IN_FORCE: dict = {}
_DECIDING = threading.Lock()  # one thread at a time counts runs and measures (the dicts, the file)
# auto mode's kernel warm-ups: (runtime id, dtype, bias, act, kernel names) -> Event set when
# they are built and launched once; done by one background thread, in the calling thread when
# BACKGROUND_WARM_UP is off (tests that count runs up to the decision)
_WARM: dict = {}
BACKGROUND_WARM_UP = True


@contextlib.contextmanager
def forced_mode(m: str):
    """``with forced_mode("opencl"): ft.jit(f, backend="opencl")(...)``: the ``matmul`` option for
    programs compiled inside (compiled programs keep the choice they were lowered with)."""
    old = config.matmul
    config.update("matmul", m)
    try:
        yield
    finally:
        config.update("matmul", old)


# --------------------------------------------------------------------------- sources


_SHARED: dict = {}          # (runtime id, dtype, bias, act, tiles) -> _SharedProgram
_TILE_CHOICES: dict = {}    # (runtime id, dtype, bias, act) -> (runtime, tiles or None, why none fits)
_LAUNCH_LOCK = threading.Lock()  # shared cl.Kernel objects: set-args + enqueue must not interleave
# failures that are about the device or the environment, not about one program: never a fallback
_NOT_OURS = (runtime.DeviceUnusable, runtime.OpenCLEnvironmentError)


def _why(e: Exception) -> str:
    """One line saying what went wrong, for a report."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


@dataclass
class _SharedProgram:
    """One shared matmul program on one runtime: its kernels by name, or why it did not build, and
    what the driver said to each kernel asked for (``_cannot_run``)."""

    rt: object
    program: object        # the built program (None when it did not build)
    kernels: dict          # name -> runtime.Kernel (none when the program did not build)
    failure: str | None    # why it did not build, or why its kernels cannot launch
    refused: dict          # name -> why the driver did not make that kernel (None: it did)


def _shared(rt, dtype, bias: bool, act: str, tiles: tuple | None) -> _SharedProgram:
    """The shared matmul program of this variant on ``rt`` (built once per runtime; a failed build
    is kept, with its reason): ``matmul.cl``, with the work-group GEMM of ``tiles`` (None: none)."""
    key = (id(rt), np.dtype(dtype), bool(bias), act, tiles)  # the dtype itself: its .name is slow to get
    entry = _SHARED.get(key)
    if entry is None or entry.rt is not rt:
        sfx = SFX[np.dtype(dtype)]
        names = [f"matmul_pack_a_{sfx}", f"matmul_pack_b_{sfx}"] + [kernel_name(dtype, bias, act) + layout
                                                                   for layout in ("", "_arows", "_acols")]
        if tiles is not None:
            names.append(kernel_name(dtype, bias, act, tiled=True))
        if not bias and act == "none":
            names += [f"matmul_mv_rows_{sfx}", f"matmul_mv_cols_{sfx}"]
        try:
            prog = rt.program(FP64_PRAGMA + matmul_source(dtype, bias, act, tiles))
            entry = _SharedProgram(rt, prog, {n: rt.kernel(prog, n) for n in names}, None, {})
        except _NOT_OURS:
            raise
        except Exception as e:  # (the driver's compiler failed on it)
            entry = _SharedProgram(rt, None, {}, f"its program did not build ({_why(e)})", {})
        _SHARED[key] = entry
    return entry


def _cannot_run(rt, plan: "_Plan") -> str | None:
    """Why the kernels ``plan`` launches cannot run on ``rt``'s device (None: they can): their
    program did not build, or the driver will not make one of them (Oclgrind could not make the
    kernels that called clang's ``__builtin_prefetch``).  Each is made here, as its first launch
    would make it, once per runtime: a refusal is kept with its reason."""
    entry = _shared(rt, plan.spec.dtype, plan.bias, plan.act, plan.tiles)
    return entry.failure or next(filter(None, (_refusal(entry, name) for name in plan.kernel_names)), None)


def _refusal(entry: _SharedProgram, name: str) -> str | None:
    """Why the driver does not make kernel ``name`` of ``entry`` (None: it does), asked once."""
    if name not in entry.refused:
        try:
            entry.kernels[name].make()
            entry.refused[name] = None
        except _NOT_OURS:
            raise
        except Exception as e:
            entry.refused[name] = f"the driver did not make kernel {name} ({_why(e)})"
    return entry.refused[name]


class _WarmUpThread:
    """One daemon thread running warm-up jobs in turn (one compile at a time: the caller keeps
    the other core).  At exit it takes no more jobs: a child process warming up is killed (PoCL
    writes its cache entries atomically), a warm-up in this process is finished (a driver torn
    down under a running compile may crash the exiting process)."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.child = None  # the running warm-up process, if any
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, name="functrace-matmul-warm-up", daemon=True)
        self.thread.start()
        atexit.register(self.stop)

    def _serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            job(self)

    def stop(self) -> None:
        self.stopping = True
        self.jobs.put(None)
        child = self.child
        if child is not None:
            child.kill()
        self.thread.join()


_warm_up_thread: _WarmUpThread | None = None


def _kernels_ready(plan: "_Plan", rt) -> bool:
    """Can the kernels ``plan`` launches be timed now at the cost of their run time (built, and
    launched once)?  The first ask starts their warm-up (in the background unless turned off)."""
    global _warm_up_thread
    key = (id(rt), plan.spec.dtype, plan.bias, plan.act, tuple(plan.kernel_names))
    ready = _WARM.get(key)
    if ready is None:
        ready = _WARM[key] = threading.Event()
        if not BACKGROUND_WARM_UP:
            _warm_up(plan, rt)
            ready.set()
        else:
            if _warm_up_thread is None:
                _warm_up_thread = _WarmUpThread()
            _warm_up_thread.jobs.put(functools.partial(_warm_up_elsewhere, plan, rt, ready))
    return ready.is_set()


def _warm_up(plan: "_Plan", rt) -> None:
    """Build the shared program ``plan`` uses and launch its kernels once on scratch operands of
    the plan's shape (their values do not matter), with kernel objects of this thread's own, on
    the runtime's queue (in the caller's thread or a child process: see ``_warm_up_elsewhere``).
    Kernels that cannot run (``_cannot_run``) launch nothing; a launch that fails is kept as the
    reason, so the measuring run does not try them again."""
    entry = _shared(rt, plan.spec.dtype, plan.bias, plan.act, plan.tiles)
    if _cannot_run(rt, plan) is not None:
        return
    s = plan.spec
    kernels = {name: rt.kernel(entry.program, name) for name in plan.kernel_names}
    ctx = SimpleNamespace(rt=rt, queue=rt.queue, alloc=rt.empty, release=lambda arr: None)
    operands = [rt.empty((n,), s.dtype) for n in (s.batch * s.M * s.K, s.batch * s.K * s.N)]
    bias = rt.empty((s.N,), s.dtype) if plan.bias else None
    try:
        plan.run_opencl(ctx, *operands, rt.empty(plan.out_shape_flat, s.dtype), bias,
                        kernels=kernels, launch_lock=contextlib.nullcontext())
        rt.queue.finish()
    except _NOT_OURS:
        raise
    except Exception as e:
        entry.failure = f"its warm-up launch failed ({_why(e)})"


def _warm_up_elsewhere(plan: "_Plan", rt, ready: threading.Event, worker: _WarmUpThread) -> None:
    """``_warm_up`` off the caller's path.  On PoCL in a child process at low priority, which
    leaves the compiled program and work-group functions in PoCL's disk cache: the caller's build
    and first launch then take ~0.1 s.  Not in a thread of this process: PoCL compiles a
    kernel's work-group function at its first launch while holding the device, so every launch
    of the caller would wait for it.  Other drivers compile when they build: in this thread, the
    build and the kernels made (``_cannot_run``), no launch (the measuring run launches them
    first, in the caller's thread: Oclgrind ran a kernel for each of two threads waiting on one
    queue at once, and aborted)."""
    try:
        if worker.stopping:
            return
        if not rt.driver_caches_programs:
            _cannot_run(rt, plan)
            return
        s = plan.spec
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
        job = repr(((s.dtype.name, s.batch, s.M, s.N, s.K, s.ta, s.tb, plan.bias, plan.act),
                    runtime.devices().index(rt.device), os.path.dirname(cache_dir()), rt.kind))
        worker.child = subprocess.Popen(
            [sys.executable, "-c", f"from {__name__} import _warm_up_main; _warm_up_main(*{job})"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            worker.child.wait(timeout=600)
        except subprocess.TimeoutExpired:
            worker.child.kill()
            worker.child.wait()
        worker.child = None
    except Exception:
        pass  # a warm-up that could not run leaves the build to the measuring run (which checks the kernels)
    finally:
        ready.set()


def _warm_up_main(spec: tuple, device: int, cache_dir: str, kind: str) -> None:
    """The child process of ``_warm_up_elsewhere``: at low priority, warm up one plan on the
    parent's device (an index into ``devices()``), with its cache directory and device kind."""
    # the lowest priority: it runs on idle cores only (at any nice level it takes a share of busy
    # cores, and a waking thread of the parent can wait a time slice for it).  Linux's SCHED_IDLE
    # class yields to every normal thread at once; elsewhere nice 19.
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    elif hasattr(os, "nice"):
        os.nice(19)
    config.update("device", device)
    config.update("cache_dir", cache_dir)
    config.update("opencl_device_kind", kind)  # (the parent's kind: the same program sources)
    dtype, batch, M, N, K, ta, tb, bias, act = spec
    rt = runtime.get_runtime()
    _warm_up(_Plan(MatmulSpec(batch, M, N, K, ta, tb, np.dtype(dtype)), rt, bias, act), rt)


def kernel_name(dtype, bias: bool = False, act: str = "none", tiled: bool = False) -> str:
    dtype = np.dtype(dtype)
    return (f"matmul_{'tiled_' if tiled else ''}{SFX[dtype]}" + ("_bias" if bias else "")
            + ("" if act == "none" else f"_{act}"))


def _tile_misfit(rt, dtype, tiles: tuple, kernel=None) -> str | None:
    """Why the work-group GEMM with ``tiles`` does not fit ``rt``'s device (None: it does): its
    work-group against the device's work-group size and per-axis limits, its two buffers of each
    operand's chunk against the device's local memory; given its built ``kernel``, against that
    kernel's own limits too (CL_KERNEL_WORK_GROUP_SIZE, lower than the device's for a kernel that
    needs many registers; CL_KERNEL_LOCAL_MEM_SIZE)."""
    tsm, tsn, tsk, wptm, wptn = tiles
    shape = (tsn // wptn, tsm // wptm)
    items = shape[0] * shape[1]
    need = 2 * tsk * (tsm + tsn + 2) * np.dtype(dtype).itemsize
    device = rt.device
    most = int(getattr(device, "max_work_group_size", 256) or 256)
    per_axis = tuple(getattr(device, "max_work_item_sizes", None) or (most, most))
    local = int(getattr(device, "local_mem_size", 32768) or 32768)
    if items > most or shape[0] > per_axis[0] or shape[1] > per_axis[1]:
        return (f"{tsm}x{tsn} tiles take work-groups of {shape[0]}x{shape[1]} items, the device's of at most "
                f"{most} ({per_axis[0]}x{per_axis[1]})")
    if need > local:
        return f"{tsm}x{tsn} tiles need {need} bytes of local memory, the device has {local}"
    if kernel is not None:
        info = rt.cl.kernel_work_group_info
        allowed = kernel.get_work_group_info(info.WORK_GROUP_SIZE, device)
        if items > allowed:
            return (f"the {tsm}x{tsn} tiles' kernel takes work-groups of at most {allowed} items "
                    f"(CL_KERNEL_WORK_GROUP_SIZE), its tiles {items}")
        used = kernel.get_work_group_info(info.LOCAL_MEM_SIZE, device)
        if used > local:
            return f"the {tsm}x{tsn} tiles' kernel uses {used} bytes of local memory, the device has {local}"
    return None


def tiles_for(rt, dtype) -> tuple | None:
    """The largest of ``TILES`` whose work-group and local memory fit ``rt``'s device (None: none)."""
    return next((tiles for tiles in TILES if _tile_misfit(rt, dtype, tiles) is None), None)


def _work_group_tiles(rt, dtype, bias: bool, act: str) -> tuple:
    """(tiles, why) of this variant's work-group GEMM on ``rt`` (the gpu kind): the largest of
    ``TILES`` that fit the device and whose built kernel takes their work-group, else (None, why
    the last did not: the design without local tiles runs).  A tiled program that does not build or
    whose kernel the driver does not make is not tried smaller (the same code).  Asked once per
    runtime and variant."""
    key = (id(rt), np.dtype(dtype), bool(bias), act)
    found = _TILE_CHOICES.get(key)
    if found is None or found[0] is not rt:
        chosen, why = None, None
        for tiles in TILES:
            why = _tile_misfit(rt, dtype, tiles)
            if why is not None:
                continue
            entry = _shared(rt, dtype, bias, act, tiles)
            name = kernel_name(dtype, bias, act, tiled=True)
            why = entry.failure or _refusal(entry, name)
            if why is not None:
                break
            why = _tile_misfit(rt, dtype, tiles, entry.kernels[name].make())
            if why is None:
                chosen = tiles
                break
        found = _TILE_CHOICES[key] = (rt, chosen, why)
    return found[1:]


def matmul_source(dtype, bias: bool = False, act: str = "none", tiles: tuple | None = None) -> str:
    """``matmul.cl`` specialized for a dtype and an epilogue (one variant; several variants can
    share a program: the packing and matrix-vector kernels are emitted once per dtype), followed,
    given ``tiles``, by the work-group GEMM of ``matmul_tiled.cl`` for the same variant."""
    dtype = np.dtype(dtype)
    f32 = dtype == np.float32
    tanh = f"#define MM_TANH(v) ft_tanh_float{VW[dtype]}(v)\n#define MM_TANH1(v) ft_tanh_float(v)\n"
    tanh = f32_helpers(tanh) + "\n" + tanh if f32 and act == "tanh" else "#define MM_TANH(v) tanh(v)\n#define MM_TANH1(v) tanh(v)\n"
    head = tanh + (f"#define MM_REAL {'float' if f32 else 'double'}\n#define MM_VW {VW[dtype]}\n"
            f"#define MM_SFX {SFX[dtype]}\n#define MM_NAME {kernel_name(dtype, bias, act)}\n"
            f"#define MM_BIAS {int(bool(bias))}\n#define MM_ACT {ACTS[act]}\n"
            f"#define MM_WITH_MV {int(not bias and act == 'none')}\n")  # epilogue variants: GEMM only
    source = head + kernel_source("matmul.cl")
    if tiles is None:
        return source
    tsm, tsn, tsk, wptm, wptn = tiles
    tiled = (f"#define MT_REAL {'float' if f32 else 'double'}\n#define MT_NAME {kernel_name(dtype, bias, act, True)}\n"
             f"#define MT_BIAS {int(bool(bias))}\n#define MT_ACT {ACTS[act]}\n"
             f"#define MT_TANH(v) {'ft_tanh_float(v)' if f32 else 'tanh(v)'}\n"
             f"#define MT_TSM {tsm}\n#define MT_TSN {tsn}\n#define MT_TSK {tsk}\n#define MT_WPTM {wptm}\n"
             f"#define MT_WPTN {wptn}\n")
    return source + tiled + kernel_source("matmul_tiled.cl")


# --------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class MatmulSpec:
    """``out[b] (M x N) = op(A[b]) . op(B[b])``; A stored (M, K) or, with ``ta``, (K, M); B stored
    (K, N) or, with ``tb``, (N, K); all row-major and contiguous."""

    batch: int
    M: int
    N: int
    K: int
    ta: bool
    tb: bool
    dtype: np.dtype

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.M * self.N * self.K

    def describe(self) -> str:
        op = ("A^T" if self.ta else "A") + (" B^T" if self.tb else " B")
        b = f"{self.batch} x " if self.batch != 1 else ""
        return f"{op}, {b}{self.M}x{self.K} . {self.K}x{self.N} {self.dtype.name}"


def _consecutive(dims) -> bool:
    return all(b == a + 1 for a, b in zip(dims, dims[1:]))


def matmul_spec(lhs_shape, rhs_shape, dimension_numbers, dtype) -> MatmulSpec | None:
    """``dot_general`` as a batched matmul with transpose flags, or None when the contracting,
    batch and free dimensions are not contiguous groups in a usable order."""
    dtype = np.dtype(dtype)
    if dtype not in VW:
        return None
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = tuple(lc), tuple(rc), tuple(lb), tuple(rb)
    nb = len(lb)
    if lb != tuple(range(nb)) or rb != tuple(range(nb)):
        return None
    if not (_consecutive(lc) and _consecutive(rc)):
        return None
    lf = tuple(i for i in range(len(lhs_shape)) if i not in lc and i not in lb)
    rf = tuple(i for i in range(len(rhs_shape)) if i not in rc and i not in rb)
    lrest, rrest = tuple(range(nb, len(lhs_shape))), tuple(range(nb, len(rhs_shape)))
    if lrest == lf + lc:
        ta = False
    elif lrest == lc + lf:
        ta = True
    else:
        return None
    if rrest == rc + rf:
        tb = False
    elif rrest == rf + rc:
        tb = True
    else:
        return None
    prod = lambda shape, dims: math.prod(shape[d] for d in dims)
    return MatmulSpec(prod(lhs_shape, lb), prod(lhs_shape, lf), prod(rhs_shape, rf), prod(lhs_shape, lc),
                      ta, tb, dtype)


# --------------------------------------------------------------------------- launches


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Plan:
    """The launches of one matmul shape: precomputed grids and scalar arguments.  With ``tiles``
    (the gpu kind, where they fit: ``_work_group_tiles``) a product of matrices is one launch of
    the work-group GEMM; its kernels come from the shared program of its variant and ``tiles``."""

    def __init__(self, spec: MatmulSpec, rt, bias: bool, act: str, tiles: tuple | None = None):
        s = spec
        self.spec = s
        self.bias = bias
        self.act = act
        self.tiles = tiles
        i32, i64 = np.int32, np.int64
        sfx = SFX[s.dtype]
        tn = 2 * VW[s.dtype]
        self.out_shape_flat = (s.batch, s.M, s.N)
        # matrix-vector products waste a packed micro-tile: dedicated kernels (no epilogue there)
        self.kind = "gemm"
        if not bias and act == "none" and (s.N == 1 or s.M == 1):
            if s.N == 1 and not s.ta:        # y[m] = A[m, :] . x
                self.kind, mat, vec, rows = "mv_rows", 0, 1, s.M
            elif s.N == 1:                   # y[m] = sum_k At[k, m] x[k]
                self.kind, mat, vec, rows = "mv_cols", 0, 1, s.M
            elif not s.tb:                   # y[n] = sum_k x[k] B[k, n]
                self.kind, mat, vec, rows = "mv_cols", 1, 0, s.N
            else:                            # y[n] = Bt[n, :] . x
                self.kind, mat, vec, rows = "mv_rows", 1, 0, s.N
            self.mat, self.vec = mat, vec
            self.kernel_names = [f"matmul_{self.kind}_{sfx}"]
            grid0 = _cdiv(rows, 4) if self.kind == "mv_rows" else _cdiv(rows, tn)
            self.grid = (grid0, s.batch)
            self.args = (i32(rows), i32(s.K), i64(rows * s.K), i64(s.K), i64(rows))
            self.launches = 1
            return
        if tiles is not None:  # one work-group GEMM launch
            self.kind = "tiled"
            tsm, tsn, _, wptm, wptn = tiles
            self.local = (tsn // wptn, tsm // wptm, 1)
            self.grid = (_cdiv(s.N, tsn) * self.local[0], _cdiv(s.M, tsm) * self.local[1], s.batch)
            self.args = (i32(s.M), i32(s.N), i32(s.K), i32(int(s.ta)), i32(int(s.tb)),
                         i64(s.M * s.K), i64(s.K * s.N), i64(s.M * s.N))
            self.kernel_names = [kernel_name(s.dtype, bias, act, tiled=True)]
            self.launches = 1
            return
        mb, nbk = _cdiv(s.M, TM), _cdiv(s.N, tn)
        self.ap_size = s.batch * mb * TM * s.K
        self.bp_size = s.batch * nbk * tn * s.K
        # blocking: per work-item mcb x ncb micro-tiles (64 rows x 256 columns), K in one chunk
        # up to ONE_CHUNK_K, else chunks of BLOCK_K (the (mcb*TM) x kc block of Ap stays in L2);
        # split further when that leaves too few work-items for the device's compute units.
        mcb, ncb = max(1, BLOCK_M // TM), max(1, BLOCK_N // tn)
        kc = s.K if s.K <= ONE_CHUNK_K else BLOCK_K
        units = compute_units(rt) if rt is not None else 1
        want = 4 * units
        while s.batch * _cdiv(mb, mcb) * _cdiv(nbk, ncb) < want and (mcb > 1 or ncb > 1):
            if ncb >= mcb and ncb > 1:
                ncb //= 2
            else:
                mcb //= 2
        self.pack_a_grid = (_cdiv(s.K, PKW), mb, s.batch)
        self.pack_b_grid = (_cdiv(s.K, PKW), nbk, s.batch)
        self.pack_a_args = (i32(s.M), i32(s.K), i32(int(s.ta)), i64(s.M * s.K), i64(mb * TM * s.K))
        self.pack_b_args = (i32(s.N), i32(s.K), i32(int(s.tb)), i64(s.N * s.K), i64(nbk * tn * s.K))
        self.grid = (_cdiv(mb, mcb), _cdiv(nbk, ncb), s.batch)
        # a narrow row-major B (rows of at most 2 KB) whose width is whole panels is read in place,
        # its panel rows N apart instead of TN: no packing pass (wider rows are slower in place than
        # the packing costs)
        self.pack_b = s.tb or s.N % tn != 0 or s.N * s.dtype.itemsize > 2048
        ldb, panel_stride, sbp = (tn, tn * s.K, nbk * tn * s.K) if self.pack_b else (s.N, tn, s.N * s.K)
        # A whose rows are whole micro-tiles is read in place (no packing pass): its element
        # (m0 + i, k) is ai * i + ak * k past the tile's start, panels a_panel apart
        self.pack_a = s.M % TM != 0
        if self.pack_a:
            sap, a_panel, a_layout = mb * TM * s.K, TM * s.K, ""
        elif s.ta:
            sap, a_panel, a_layout = s.M * s.K, TM, "_acols"
        else:
            sap, a_panel, a_layout = s.M * s.K, TM * s.K, "_arows"
        self.mm_args = (i32(s.M), i32(s.N), i32(s.K), i32(mcb), i32(ncb), i32(kc),
                        i64(sap), i64(sbp), i64(s.M * s.N), i32(ldb), i64(panel_stride), i64(a_panel))
        self.blocking = (mcb * TM, ncb * tn, kc)
        self.kernel_names = ([f"matmul_pack_a_{sfx}"] * self.pack_a + [f"matmul_pack_b_{sfx}"] * self.pack_b
                             + [kernel_name(s.dtype, bias, act) + a_layout])  # in launch order
        self.launches = len(self.kernel_names)

    def epilogue(self) -> str:
        return (" + bias" if self.bias else "") + ("" if self.act == "none" else f" + {self.act}")

    def describe(self) -> str:
        if self.kind == "tiled":
            tsm, tsn, tsk, wptm, wptn = self.tiles
            return f"work-group tiles {tsm}x{tsn}, k chunks of {tsk}, {wptm}x{wptn} per work-item{self.epilogue()}"
        if self.kind != "gemm":
            return f"{self.kind} kernel"
        m, n, k = self.blocking
        packed = " and ".join(op for op, p in (("A", self.pack_a), ("B", self.pack_b)) if p)
        return (f"8x{2 * VW[self.spec.dtype]} micro-tiles ({packed + ' packed' if packed else 'read in place'}), "
                f"{m}x{n} blocks, kc {k}{self.epilogue()}")

    def run_opencl(self, ctx, a, b, out, bias=None, kernels=None, launch_lock=_LAUNCH_LOCK) -> None:
        """Enqueue the kernels (the shared program's, else ``kernels`` of this thread's own: then
        ``launch_lock`` can be a null context)."""
        q = ctx.queue
        kernels = kernels or _shared(ctx.rt, self.spec.dtype, self.bias, self.act, self.tiles).kernels
        if self.kind == "tiled":
            with launch_lock:
                kernels[self.kernel_names[0]](q, self.grid, self.local, a.buffer, b.buffer, out.buffer,
                                              (bias if bias is not None else out).buffer, *self.args)
            return
        if self.kind != "gemm":
            ops = (a, b)
            with launch_lock:
                kernels[self.kernel_names[0]](q, self.grid, (1, 1), ops[self.mat].buffer, ops[self.vec].buffer,
                                              out.buffer, *self.args)
            return
        ap = ctx.alloc((self.ap_size,), self.spec.dtype) if self.pack_a else a
        bp = ctx.alloc((self.bp_size,), self.spec.dtype) if self.pack_b else b
        launch = (kernels[n] for n in self.kernel_names)
        with launch_lock:
            if self.pack_a:
                next(launch)(q, self.pack_a_grid, (1, 1, 1), a.buffer, ap.buffer, *self.pack_a_args)
            if self.pack_b:
                next(launch)(q, self.pack_b_grid, (1, 1, 1), b.buffer, bp.buffer, *self.pack_b_args)
            next(launch)(q, self.grid, (1, 1, 1), ap.buffer, bp.buffer, out.buffer,
                         (bias if bias is not None else out).buffer, *self.mm_args)
        if self.pack_a:  # the in-order queue runs later users of these buffers after this launch
            ctx.release(ap)
        if self.pack_b:
            ctx.release(bp)

    def run_blas(self, ctx, a, b, out, bias=None) -> None:
        """numpy's BLAS writing ``out`` (CPU devices): on unified memory in the arrays' own host
        memory, elsewhere in zero-copy mappings of the buffers."""
        if ctx.rt.unified:
            self._blas_product(*ctx.rt.host_views(a, b, out, bias))
            return
        cl, q = ctx.rt.cl, ctx.queue
        maps = []

        def view(arr, flags):
            host, _ = cl.enqueue_map_buffer(q, arr.buffer, flags, 0, (arr.size,), self.spec.dtype, is_blocking=True)
            maps.append(host)
            return host

        try:
            self._blas_product(view(a, cl.map_flags.READ), view(b, cl.map_flags.READ),
                       view(out, cl.map_flags.WRITE_INVALIDATE_REGION),
                       None if bias is None else view(bias, cl.map_flags.READ))
        finally:
            for host in reversed(maps):
                host.base.release(q)

    def _blas_product(self, A, B, C, bias) -> None:
        s = self.spec
        A = A.reshape((s.batch, s.K, s.M) if s.ta else (s.batch, s.M, s.K))
        B = B.reshape((s.batch, s.N, s.K) if s.tb else (s.batch, s.K, s.N))
        C = C.reshape(s.batch, s.M, s.N)
        A = A.transpose(0, 2, 1) if s.ta else A
        B = B.transpose(0, 2, 1) if s.tb else B
        if s.batch == 1:
            np.dot(A[0], B[0], out=C[0])
        else:
            np.matmul(A, B, out=C)
        if bias is not None:
            C += bias
        if self.act == "relu":
            np.maximum(C, 0, out=C)
        elif self.act == "tanh":
            np.tanh(C, out=C)


MEASURE_SECONDS = 0.03       # auto mode: about how long the interleaved timing runs of a shape take
OPENCL_WINS_BELOW = 0.9      # auto mode: the kernels must take under this fraction of BLAS's time (_choose)


def _choose(plan: _Plan, ctx, a, b, out, bias) -> str:
    """Time the OpenCL kernels (built and launched once already: ``_kernels_ready``) and the host
    BLAS on these operands, one run each then interleaved runs filling about ``MEASURE_SECONDS``
    (at most 5 each), and return OpenCL if it ran in under ``OPENCL_WINS_BELOW`` of BLAS's time.
    The margin: a decision is made once (and kept on disk), often on a busy machine, where the
    interleaved times of a shape scatter by tens of percent; and a program whose products all run
    on BLAS settles on the host (no buffers, syncs or launches: ``OpenCLExecutable._settle``); it
    costs a few percent on shapes where the kernel is a little faster.  Not on a driver running
    kernels in the calling thread (one compute unit, PoCL's ``basic``): no settling there (its
    small steps are batched kernels), and a kernel saves the BLAS step's wait and buffer maps.
    ``out`` holds the BLAS result afterwards (the measuring program's own numerics)."""
    q = ctx.queue

    def timed(fn):
        t0 = time.perf_counter()
        fn(ctx, a, b, out, bias)
        q.finish()
        return time.perf_counter() - t0

    first = timed(plan.run_opencl) + timed(plan.run_blas)
    reps = max(1, min(5, int(MEASURE_SECONDS / first)))
    t_cl, t_blas = [], []
    for _ in range(reps):  # interleaved, so a noisy moment hits both; BLAS last: ``out`` is its result
        t_cl.append(timed(plan.run_opencl))
        t_blas.append(timed(plan.run_blas))
    _TIMINGS[_key(plan)] = (min(t_cl), min(t_blas))
    in_thread = compute_units(ctx.rt) <= 1
    return "opencl" if min(t_cl) < (1.0 if in_thread else OPENCL_WINS_BELOW) * min(t_blas) else "blas"


# the host BLAS's thread budget: decisions measured under another one do not hold
_BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS",
                          "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def _thread_budget() -> str:
    """The thread settings and the cores this process may run on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return "|".join(os.environ.get(v, "") for v in _BLAS_THREAD_VARIABLES) + f"|{cores}"


@functools.cache
def _code_version() -> str:
    """A digest of the kernels' source and of this module's launch code (read once per process)."""
    with open(__file__, encoding="utf-8") as f:
        code = f.read()
    return hashlib.sha256((kernel_source("matmul.cl") + code).encode()).hexdigest()


def _decisions_key(rt) -> str:
    """Per device, host-BLAS thread budget, and version of the kernels and of this module's launch
    code (a change to any of them is measured afresh)."""
    return rt.fingerprint + _thread_budget() + _code_version()


def _decisions_path(rt) -> str:
    digest = hashlib.sha256(_decisions_key(rt).encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"matmul-choices-{digest}.txt")


def _load_decisions(rt) -> None:
    """The per-shape OpenCL-vs-BLAS decisions measured by earlier processes on this device (so a
    warm start neither measures nor builds kernels it will not use).  Absent, or not verifying
    against its checksum (so not written by this code): ignored, measured again.  The payload is
    a Python literal (``{key: (impl, opencl s, blas s)}``), read without importing json (~1.5 ms
    of a warm first call)."""
    if rt is None or getattr(rt, "_matmul_choices_loaded", False):
        return
    rt._matmul_choices_loaded = True
    payload = read_entry(_decisions_path(rt), _decisions_key(rt))
    if payload is None:
        return
    for key, (impl, t_cl, t_blas) in ast.literal_eval(payload.decode("utf-8")).items():  # as _save_decisions wrote it
        _DECISIONS.setdefault(key, impl)
        _TIMINGS.setdefault(key, (t_cl, t_blas))


def _save_decisions(rt) -> None:
    plain = lambda v: v if isinstance(v, (str, bool)) else int(v)  # no numpy scalars in the literal
    data = {tuple(map(plain, k)): (impl, *map(float, _TIMINGS.get(k, (0.0, 0.0)))) for k, impl in list(_DECISIONS.items())}
    try:
        write_entry(_decisions_path(rt), _decisions_key(rt), repr(data).encode())
    except OSError:
        pass  # a cache we cannot write only costs a measurement


def _key(plan: _Plan):
    s = plan.spec
    return (s.dtype.name, s.batch, s.M, s.N, s.K, s.ta, s.tb, plan.bias, plan.act)


def _label(plan: _Plan, impl: str | None, how: str) -> str:
    s = plan.spec
    if impl != "opencl":
        return f"matmul (host BLAS{plan.epilogue()}{how}; {s.describe()})"
    return f"matmul (OpenCL, {plan.describe()}{how}; {s.describe()})"


def _how(plan: _Plan, impl: str | None, auto_cpu: bool) -> str:
    """Why this implementation runs, for the report label."""
    if impl is None:
        return (f", undecided when this process first compiled the shape: kept for its numerics; run "
                f"{MEASURE_AT_RUN} of the shape, or the first after its OpenCL kernels are built in the "
                "background, measures it against them for later processes")
    if not auto_cpu:
        return ""
    t = _TIMINGS.get(_key(plan))
    if t is None:
        return ", measured faster"
    return f", measured {t[0] * 1e3:.3g} ms OpenCL vs {t[1] * 1e3:.3g} ms BLAS"


def _plan(spec: MatmulSpec, rt, bias: bool, act: str) -> tuple:
    """(plan, note): the launches of this product on ``rt``, the gpu kind's work-group GEMM where
    its tiles fit the device (``_work_group_tiles``), with the report's note on why they do not."""
    if rt is None or not rt.policy.tiled_matmul:
        return _Plan(spec, rt, bias, act), ""
    tiles, why = _work_group_tiles(rt, spec.dtype, bias, act)
    plan = _Plan(spec, rt, bias, act, tiles)
    return plan, f", no work-group tiles: {why}" if plan.kind == "gemm" else ""


def lower_matmul(spec: MatmulSpec, rt, bias: bool = False, act: str = "none") -> Lowered:
    """Lowered steps for ``act(op(A) . op(B) + bias)``; ``run(ctx, [a, b] or [a, b, bias])``.  Kernels
    that cannot run on the device (``_cannot_run``) give way to the host BLAS, and the report says
    why; on the gpu kind, tiles that do not fit it to the design without local tiles."""
    if act not in ACTS:
        raise ValueError(f"matmul epilogue activation must be one of {tuple(ACTS)}, got {act!r}")
    plan, no_tiles = _plan(spec, rt, bias, act)
    m = config.matmul
    host_blas = rt is not None and rt.policy.host_blas  # (the gpu kind: kernels only)
    if not host_blas or m == "opencl":
        impl = "opencl"
    elif m == "blas":
        impl = "blas"
    else:
        _load_decisions(rt)
        impl = _IN_FORCE.setdefault(_key(plan), _DECISIONS.get(_key(plan)))  # None: undecided in this process
    # Under MPI (more than one process) an undecided product stays on the host BLAS: each process
    # would measure on its own (the measurements include waiting for the others, so processes can
    # choose differently and the slower one holds back every collective), and the background
    # compiles compete with the processes for the cores they run on.
    under_mpi = impl is None and m == "auto" and host_blas and distributed.process_count() > 1
    # undecided: the host BLAS for this process's life, measured (below) for later processes
    state = {"impl": impl or "blas", "measure": impl is None and not under_mpi}
    how = (", not measured under MPI (each process would measure on its own)" if under_mpi
           else _how(plan, impl, m == "auto" and host_blas) + no_tiles)
    # the kernels are built (or loaded) and made now, not at the first call
    cannot = _cannot_run(rt, plan) if state["impl"] == "opencl" and rt is not None else None
    if cannot is not None:
        state["impl"], how = "blas", f", its OpenCL kernels cannot run on this device: {cannot}"
    impl = state["impl"]
    stub = (f"/* dot_general -> {', '.join(plan.kernel_names)}: launched from the shared matmul program "
            f"(cl_kernels/matmul.cl, {spec.dtype.name}{', bias' if bias else ''}"
            f"{'' if act == 'none' else ', ' + act}), built once per device */\n")
    lowered = Lowered(source=stub, kernel_names=[],
                      run=None, launches=0 if impl != "opencl" else plan.launches,
                      label="", extra={"spec": spec, "plan": plan, "impl": impl, "auto": m == "auto" and host_blas,
                                                    "undecided": state["measure"]})
    lowered.label = _label(plan, impl, how)

    def measure(ctx, a, b, out, bias_arr) -> bool:
        """Auto mode, a shape undecided when this process first compiled it (so on the host BLAS
        for the process's life): count the run; at ``MEASURE_AT_RUN`` measure it for later
        processes (the measurement leaves this program's BLAS result in ``out``: True)."""
        key = _key(plan)
        with _DECIDING:
            if key in _DECISIONS:
                state["measure"] = False  # decided (by another program): nothing left to do here
                return False
            _RUNS[key] = _RUNS.get(key, 0) + 1
            if _RUNS[key] < MEASURE_AT_RUN or not _kernels_ready(plan, ctx.rt):
                return False
            cannot = _cannot_run(ctx.rt, plan)
            if cannot is not None:  # nothing to measure: the host BLAS stays (a later process asks again)
                state["measure"] = False
                lowered.label = _label(plan, "blas", f", its OpenCL kernels cannot run on this device: {cannot}")
                return False
            _DECISIONS[key] = _choose(plan, ctx, a, b, out, bias_arr)
            _save_decisions(ctx.rt)
        state["measure"] = False
        return True

    def run(ctx, inputs):
        a, b = inputs[0], inputs[1]
        bias_arr = inputs[2] if bias else None
        out = ctx.alloc(lowered.extra.get("out_shape", plan.out_shape_flat), spec.dtype)
        if spec.batch * spec.M * spec.N == 0:
            return [out]
        if state["measure"] and measure(ctx, a, b, out, bias_arr):
            return [out]
        (plan.run_opencl if state["impl"] == "opencl" else plan.run_blas)(ctx, a, b, out, bias_arr)
        return [out]

    lowered.run = run
    return lowered


def _canonical(shape: tuple, dimension_numbers, lhs: bool) -> tuple:
    """The permutation putting an operand in (batch, M, K) order (lhs) or (batch, K, N) (rhs)."""
    (lc, rc), (lb, rb) = dimension_numbers
    contract, batch = (lc, lb) if lhs else (rc, rb)
    free = tuple(d for d in range(len(shape)) if d not in contract and d not in batch)
    return tuple(batch) + (free + tuple(contract) if lhs else tuple(contract) + free)


def _matmul_layout(xs: tuple, ys: tuple, dn, dtype) -> tuple:
    """(spec, (lhs permutation or None, rhs permutation or None)): the matmul that computes this
    ``dot_general``, copying as few operands as possible into canonical order first."""
    (lc, rc), (lb, rb) = dn
    nb, nc = len(lb), len(lc)
    px, py = _canonical(xs, dn, True), _canonical(ys, dn, False)
    x_canon = (tuple(range(len(xs) - nc, len(xs))), tuple(range(nb)))  # (contracting, batch) after px
    y_canon = (tuple(range(nb, nb + nc)), tuple(range(nb)))
    for perm_x, perm_y in ((None, None), (None, py), (px, None), (px, py)):
        (cx, bx) = x_canon if perm_x else (lc, lb)
        (cy, by) = y_canon if perm_y else (rc, rb)
        spec = matmul_spec(tuple(xs[d] for d in perm_x) if perm_x else xs,
                           tuple(ys[d] for d in perm_y) if perm_y else ys, ((cx, cy), (bx, by)), dtype)
        if spec is not None:
            return spec, (perm_x, perm_y)
    return None, (None, None)


def _dot_layout(dot, rt):
    """(spec, perms) of a ``dot_general`` the matmul kernels can run, else None: operands of the
    output's dtype (float64 only where the device has it), no literal operand (``run`` receives
    None for a literal), a non-empty contraction."""
    x, y = dot.inputs
    dtype = np.dtype(dot.out_vars[0].aval.dtype)
    if type(x) is Literal or type(y) is Literal or x.aval.dtype != dtype or y.aval.dtype != dtype:
        return None
    if dtype == np.float64 and not getattr(rt, "supports_fp64", True):
        return None
    spec, perms = _matmul_layout(x.aval.shape, y.aval.shape, dot.params["dimension_numbers"], dtype)
    return None if spec is None or spec.K == 0 else (spec, perms)


def lower_with_epilogue(dot, bias, act: str, rt) -> Lowered | None:
    """``act(dot_general(x, y) + bias)`` (bias along the last output axis) as one matmul with a
    fused epilogue, when the operands are already in a matmul layout (else None: no fusion)."""
    layout = _dot_layout(dot, rt)
    if layout is None or bias.aval.dtype != layout[0].dtype:
        return None
    spec, perms = layout
    if perms != (None, None) or bias.aval.shape != (spec.N,):
        return None
    lowered = lower_matmul(spec, rt, bias=True, act=act)
    lowered.extra["out_shape"] = tuple(dot.out_vars[0].aval.shape)
    return lowered


@register(P.dot_general_p)
def lower(eqn, rt) -> Lowered | None:
    """Any ``dot_general``: operands whose layout is not a (transposed) batched matmul are first
    copied into canonical order by a permuting kernel (the output order is then already right)."""
    layout = _dot_layout(eqn, rt)
    if layout is None:
        return None
    spec, perms = layout
    out = eqn.out_vars[0]
    dtype = spec.dtype
    xs, ys = eqn.inputs[0].aval.shape, eqn.inputs[1].aval.shape
    lowered = lower_matmul(spec, rt)
    lowered.extra["out_shape"] = tuple(out.aval.shape)
    if perms == (None, None):
        return lowered
    ctype = "float" if dtype == np.float32 else "double"
    names, runs = [None, None], [1, 1]
    for i, (shape, perm, side) in enumerate(((xs, perms[0], "a"), (ys, perms[1], "b"))):
        if perm is not None:  # a dense copy of the transposed view
            digest = hashlib.sha1(repr((shape, perm)).encode()).hexdigest()[:10]
            names[i] = f"matmul_permute_{side}_{ctype}_{digest}"
            strides = contiguous_strides(shape)
            view_shape = tuple(shape[d] for d in perm)
            access = access_for(view_shape, view_shape, View(None, 0, tuple(strides[d] for d in perm)))
            lowered.shared[names[i]], runs[i] = copy_kernel(names[i], ctype, view_shape, access)
    lowered.kernel_names += [n for n in names if n]
    lowered.extra["copy_launches"] = sum(1 for n in names if n)
    lowered.launches += lowered.extra["copy_launches"]
    lowered.label += f" (operand{'s' if all(names) else ''} permuted to matmul order by a copy kernel first)"
    matmul_run = lowered.run

    def run(ctx, inputs):
        operands, copies = [], []
        for arr, name, run_ in zip(inputs, names, runs):
            if name is None:
                operands.append(arr)
                continue
            dst = ctx.alloc((arr.size,), dtype)
            if dst.size:
                items = dst.size // run_
                ctx.kernels[name](ctx.queue, (items,), None, arr.buffer, dst.buffer, np.int64(items))
            operands.append(dst)
            copies.append(dst)
        outs = matmul_run(ctx, operands)
        for c in copies:  # the in-order queue runs later users of these buffers after the matmul
            ctx.release(c)
        return outs

    lowered.run = run
    return lowered
