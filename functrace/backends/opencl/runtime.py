"""OpenCL runtime: device choice, a context and queue, device arrays, and the program cache.

* ``devices()`` lists the OpenCL devices; ``ft.config.update("device", ...)`` or
  ``FUNCTRACE_DEVICE`` picks one (an index into that list or a substring of its name).
* ``Array`` is a device buffer with a shape and dtype; ``np.asarray`` copies it to the host.
  On the cpu device kind (``policy``) with unified host memory every array *is* a page-aligned
  numpy array and its buffer wraps that memory (``USE_HOST_PTR``): host steps, host BLAS and
  ``np.asarray`` read it after a queue ``finish()``, without copies or map calls.  The gpu kind's
  buffers live on the device.
* Programs are cached by a hash of their source, device and driver: in memory while an
  executable uses them (and the ``config.opencl_program_cache_size`` most recently asked for,
  after that), and on disk as device binaries.  Every file of the disk cache (binaries, device
  verdicts, matmul choices) is written atomically and carries a checksum of its payload bound to
  its key: a truncated, bit-flipped or foreign entry is deleted and rebuilt, never handed to the
  driver.  Not on PoCL: its own cache (``POCL_CACHE_DIR``) keeps every built program by source
  (a rebuild from it takes ~22 ms), and fetching a binary from PoCL costs far more.  That cache
  lives in ``<cache_dir()>/pocl`` unless the user set ``POCL_CACHE_DIR``, and its entry for a
  program is checked against functrace's manifests before each build (``driver_cache``): a
  truncated file there would abort the process inside the driver.
* Canary mode (``ft.config.update("opencl_debug_canaries", True)``, a test mode): every buffer
  allocated from then on lies between two guard regions, and it and they start filled with
  canary bytes (NaN for floats, a huge value for integers; a buffer an executable reuses from
  its pool is filled again), so a read outside a buffer, or of an element no kernel wrote,
  shows in the results; after every launch the guard regions of
  the kernel's buffer arguments are checked, and a write outside a buffer raises
  ``CanaryError`` naming the kernel.
"""
from __future__ import annotations

import hashlib
import html
import operator
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
import weakref
from collections import OrderedDict

import numpy as np

from ...core import HasShape, get_aval
from ...core.array import Array as PublicArray
from ...core.config import config
from ...core.eager import EagerArray, as_eager
from ...tree_util import tree_leaves, tree_map
from .. import ARRAY_TYPES
from . import driver_cache, in_thread, lean_header, pyopencl_cache
from .disk_cache import cache_dir, discard, read_entry, write_entry
from .policy import NATIVE_TRIG_BOUND, NATIVE_TRIG_ERROR, choose_policy, device_kind

_state: dict = {}
_lock = threading.Lock()


def _cl():
    if "root" not in _pocl_cache:
        _choose_pocl_cache()
        in_thread.request(driver_cache.driver_loaded())
    if not _pyopencl_caches_checked:
        _check_pyopencl_caches()
    try:
        import pyopencl as cl
    except Exception as e:  # pragma: no cover - depends on the machine
        raise RuntimeError(f"pyopencl is not usable: {e}") from e
    return cl


def devices() -> list:
    """All OpenCL devices of all platforms (empty when none is found: ``_state["no_devices"]`` then
    says why, for the warning of ``get_runtime``)."""
    try:
        cl = _cl()
    except Exception as e:
        _state["no_devices"] = f"{e} (pip install pyopencl)"
        return []
    try:
        platforms = cl.get_platforms()
    except Exception as e:
        _state["no_devices"] = (f"no OpenCL platform ({str(e).strip() or type(e).__name__}): no driver is "
                                f"registered by an ICD file in /etc/OpenCL/vendors or in a directory named by "
                                f"OCL_ICD_VENDORS")
        return []
    found = []
    for p in platforms:
        try:
            found += p.get_devices()
        except Exception:  # (pyopencl raises for a platform without devices)
            pass
    found = in_thread.listed(found)  # (PoCL's in-thread device kept aside: see in_thread)
    if not found:
        _state["no_devices"] = f"the OpenCL platforms {[p.name for p in platforms]} list no device"
    return found


_PROBE = "__kernel void probe(__global float* a) { a[get_global_id(0)] += 1.0f; }"

# A failed build is tried once more: PoCL's cache (3.1, measured) races between processes that
# build one program at once -- one deletes the program's ``program.bc`` as another replaces it,
# and that build fails with a bare BUILD_PROGRAM_FAILURE (3 of 12 starts of 8 processes on a fresh
# POCL_CACHE_DIR); the second try finds the entry the other process wrote.
_BUILD_ATTEMPTS = 2


class DeviceUnusable(RuntimeError):
    """The device's compiler fails on every program (a one-line probe kernel included), or would
    crash the process on the wide vector code functrace generates."""


class OpenCLEnvironmentError(RuntimeError):
    """The driver cannot build programs in this process's environment (e.g. PoCL's cache directory
    is not writable): a setting to fix, not a broken driver, so no verdict about it is kept."""


def _pocl_cache_dir() -> str:
    """Where PoCL writes its kernel cache and build files (its own rule: ``POCL_CACHE_DIR``, else
    the XDG cache directory)."""
    if os.environ.get("POCL_CACHE_DIR"):
        return os.environ["POCL_CACHE_DIR"]
    sub = os.path.join("pocl", "kcache" if _pocl_caches_kernels() else "uncached")
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], sub)
    if "HOME" in os.environ:
        return os.path.join(os.environ["HOME"], ".cache", sub)
    return os.path.join("/tmp", sub)


# the directory of PoCL's kernel cache in this process, once decided (None: its cache is off)
_pocl_cache: dict = {}
_pocl_cache_lock = threading.Lock()


def _pocl_caches_kernels() -> bool:
    return os.environ.get("POCL_KERNEL_CACHE", "1").lower() not in ("0", "no", "off", "false")


def _choose_pocl_cache() -> None:
    """Before PoCL loads (it reads its settings once): point its kernel cache at functrace's cache
    directory (``<cache_dir()>/pocl``, where every entry is checked before use: see
    ``driver_cache``), unless the user chose a directory (``POCL_CACHE_DIR``: kept, and checked
    the same way), turned PoCL's cache off (``POCL_KERNEL_CACHE=0``: nothing is reused), or the
    directory cannot be written (PoCL's default then).  Once PoCL is loaded the setting is
    PoCL's already: the directory it uses is checked."""
    with _pocl_cache_lock:
        if "root" in _pocl_cache:
            return
        if not _pocl_caches_kernels():
            _pocl_cache["root"] = None
            return
        if not os.environ.get("POCL_CACHE_DIR") and not driver_cache.driver_loaded():
            own = os.path.abspath(os.path.join(cache_dir(), "pocl"))
            try:
                os.makedirs(own, exist_ok=True)
                with tempfile.TemporaryFile(dir=own):
                    pass
                os.environ["POCL_CACHE_DIR"] = own
            except OSError:
                pass  # a cache directory we cannot write: PoCL's own default
        _pocl_cache["root"] = _pocl_cache_dir()


_pyopencl_caches_checked: list = []  # (not empty once done)


def _check_pyopencl_caches() -> None:
    """Once per process, before pyopencl opens them: check pyopencl's own cache files (its sqlite
    cache of kernels' argument-setting code, its compiler cache) and delete the damaged ones, which
    made every later process fail (``pyopencl_cache``).  A check that fails itself is skipped."""
    with _pocl_cache_lock:
        if _pyopencl_caches_checked:
            return
        try:
            pyopencl_cache.check(os.path.join(cache_dir(), pyopencl_cache.RECORD_NAME))
        except Exception:  # pragma: no cover - a check must never be what breaks a run
            pass
        _pyopencl_caches_checked.append(True)


def _driver_cache(device):
    """The check of PoCL's kernel cache for builds on ``device`` (None: not PoCL, or no cache)."""
    if "Portable Computing Language" not in device.platform.name:
        return None
    return driver_cache.guard(_pocl_cache.get("root"))


def _build_checked(device, program, options: str, key: str | None):
    """``program.build(options=options)`` for ``device`` alone (a context may hold two: see
    ``in_thread``); on PoCL with the program's entry in PoCL's kernel cache checked first (a
    truncated file there aborts the process) and recorded after."""
    guard = _driver_cache(device) if key is not None else None
    if guard is None:
        return program.build(options=options, devices=[device])
    return guard.build(key, program, options, device)


def _pocl_cache_problem() -> str | None:
    """Why PoCL cannot write its cache directory (None: it can), tried with a temporary file in
    that directory or, while it does not exist, in its nearest existing parent (PoCL makes it)."""
    path = _pocl_cache_dir()
    where = path
    while not os.path.isdir(where) and os.path.dirname(where) != where:
        if os.path.exists(where):
            return f"PoCL's cache directory {path!r} cannot be made: {where!r} is not a directory"
        where = os.path.dirname(where)
    try:
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as e:
        return f"PoCL's cache directory {path!r} is not writable ({e.strerror or e}: {where!r})"
    return None


def _raise_for_environment(device, failure: str) -> None:
    """Raise ``OpenCLEnvironmentError`` when ``failure`` (of a build on ``device``) comes from the
    environment rather than the driver."""
    if "Portable Computing Language" not in device.platform.name:
        return
    problem = _pocl_cache_problem()
    if problem is not None:
        raise OpenCLEnvironmentError(
            f"OpenCL device {device.name!r} cannot build programs: {problem}, and PoCL writes every "
            f"program it builds there. Set POCL_CACHE_DIR to a writable directory (one that persists "
            f"keeps the compiled kernels; `export POCL_CACHE_DIR=$(mktemp -d)` will do) or make that "
            f"one writable. (The driver said: {failure.strip().splitlines()[0][:160]})")


def _marker(device, kind: str = "usable") -> str:
    """The cache file keeping a verdict of ``kind`` about this device and driver."""
    return os.path.join(cache_dir(), f"{kind}-" + hashlib.sha256(_fingerprint(device).encode()).hexdigest()[:16])


def _read_verdict(device, kind: str) -> str | None:
    """The verdict of ``kind`` an earlier process kept about this device and driver (None: none,
    or a file that does not verify, which is deleted)."""
    saved = read_entry(_marker(device, kind), f"{kind}|{_fingerprint(device)}")
    return None if saved is None else saved.decode("utf-8", "replace")


def _keep_verdict(device, kind: str, verdict: str) -> None:
    """Keep a verdict about the driver for later processes (in a cache we cannot write: they
    probe again)."""
    try:
        write_entry(_marker(device, kind), f"{kind}|{_fingerprint(device)}", verdict.encode())
    except OSError:
        pass


# native_sin / native_cos, in 16 lanes and alone, at float32 points: a grid over |x| <=
# NATIVE_TRIG_BOUND (beyond it the cpu kind's macros do not use them), small values and multiples
# of pi / 2 near zero; then inf and NaN (which must give NaN)
# (PoCL's clang printed "6 warnings generated." to stderr at the probe, the first time a process
# built a trig kernel on a fresh cache: float16 vectors "change the ABI" without AVX-512, a remark
# about its own builtins, not a fault; silenced where the compiler is clang)
_NATIVE_TRIG_PROBE = """
#ifdef __clang__
#pragma clang diagnostic ignored "-Wpsabi"
#endif
__kernel void ft_native_trig16(__global const float* x, __global float* out, const long n) {
    const long i = get_global_id(0);
    vstore16(native_sin(vload16(i, x)), i, out);
    vstore16(native_cos(vload16(i, x)), i, out + n);
}
__kernel void ft_native_trig1(__global const float* x, __global float* out, const long n) {
    const long i = get_global_id(0);
    out[2 * n + i] = native_sin(x[i]);
    out[3 * n + i] = native_cos(x[i]);
}
"""


_USES_TRIG = re.compile(r"(?<!define )FT_(SIN|COS)_float\d*\(")  # a use of the sin / cos macros, not their definition


def _native_trig_points() -> np.ndarray:
    near = np.concatenate([np.arange(-8, 9) * (np.pi / 2), np.geomspace(1e-30, 1.0, 200)])
    grid = np.linspace(-NATIVE_TRIG_BOUND, NATIVE_TRIG_BOUND, 7664)
    x = np.concatenate([grid, near, -near, [0.0, -0.0, np.inf, -np.inf, np.nan] * 16])
    return x[:len(x) // 16 * 16].astype(np.float32)


def native_trig_accurate(rt: "Runtime", in_thread: bool = False) -> bool:
    """Are the ``native_sin`` / ``native_cos`` of ``rt``'s device (16 lanes and alone) within
    ``NATIVE_TRIG_ERROR`` of numpy's float64 sin / cos at float32 points over |x| <=
    ``NATIVE_TRIG_BOUND``, and NaN at inf and NaN?  Measured once per device and driver (a probe of a
    few ms), the verdict kept on disk; a probe that fails to build or run says no.  ``in_thread``:
    measured on the in-thread device (the same driver's builtins on the same CPU), which a process
    running only loops compiled whole then builds for alone (PoCL loads its builtins, ~700 ms, once
    per device)."""
    saved = _read_verdict(rt.device, "native-trig")
    if saved in ("accurate", "inaccurate"):
        return saved == "accurate"
    cl = _cl()
    x = _native_trig_points()
    n = len(x)
    try:
        with warnings.catch_warnings():  # (the driver's remarks on the probe are not the user's concern)
            warnings.simplefilter("ignore")
            prog = rt.program(_NATIVE_TRIG_PROBE, in_thread=in_thread)
        queue = rt.in_thread_queue if in_thread else rt.queue
        out = np.empty(4 * n, np.float32)
        flags = cl.mem_flags
        xb = cl.Buffer(rt.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x)
        ob = cl.Buffer(rt.context, flags.WRITE_ONLY, out.nbytes)
        prog.ft_native_trig16(queue, (n // 16,), None, xb, ob, np.int64(n))
        prog.ft_native_trig1(queue, (n,), None, xb, ob, np.int64(n))
        cl.enqueue_copy(queue, out, ob)
        queue.finish()
    except Exception:
        return False
    with np.errstate(invalid="ignore"):
        want = np.tile(np.concatenate([np.sin(x.astype(np.float64)), np.cos(x.astype(np.float64))]), 2)
    got = out.astype(np.float64)
    finite = np.isfinite(want)
    accurate = bool(np.isnan(got[~finite]).all() and np.all(np.abs(got[finite] - want[finite]) <= NATIVE_TRIG_ERROR))
    _keep_verdict(rt.device, "native-trig", "accurate" if accurate else "inaccurate")
    return accurate


def _mark_usable(device) -> None:
    _state[("usable", device.int_ptr)] = True
    _keep_verdict(device, "usable", "ok")


def usable(device) -> bool:
    """Can this device compile a kernel?  (Some installed drivers cannot: e.g. a PoCL built with
    an LLVM that does not know the host CPU fails every build with "unknown target CPU".)  Known
    once any build succeeded (in this process or, by a marker file, an earlier one); else a
    probe build answers."""
    key = ("usable", device.int_ptr)
    if key not in _state:
        if _read_verdict(device, "usable") == "ok":
            _state[key] = True
            return True
        for attempt in range(_BUILD_ATTEMPTS):  # (processes building at once race in PoCL's cache)
            try:
                cl = _cl()
                probe_key = hashlib.sha256(f"{_fingerprint(device)}\n\n{_PROBE}".encode()).hexdigest()
                _build_checked(device, cl.Program(cl.Context([device]), _PROBE), "", probe_key)
                break
            except Exception:
                if attempt == _BUILD_ATTEMPTS - 1:
                    _state[key] = False
                    return False
        _mark_usable(device)
    return _state[key]


# 512-bit vector math as functrace's kernels use it (float16 lanes with builtins, double8)
_WIDE_PROBE = """
__kernel void probe_f(__global float* a) {
    const size_t i = get_global_id(0);
    const float16 x = vload16(i, a);
    vstore16(native_sin(x) * x + exp(x), i, a);
}
#ifdef PROBE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void probe_d(__global double* a) {
    const size_t i = get_global_id(0);
    const double8 x = vload8(i, a);
    vstore8(x * x + 1.0, i, a);
}
#endif
"""

# run in a child process: argv = device fingerprint, probe source.  It says "ready" once it holds
# the device: a death before that is not the driver's doing.
_WIDE_PROBE_CHILD = """
import sys
import hashlib
import numpy as np, pyopencl as cl
from functrace.backends.opencl.runtime import _build_checked, _fingerprint, _supports_fp64, devices
fingerprint, source = sys.argv[1], sys.argv[2]
device = next((d for d in devices() if _fingerprint(d) == fingerprint), None)
if device is None:
    sys.exit("the device is not listed in the child process")
fp64 = _supports_fp64(device)
print("ready", flush=True)
ctx = cl.Context([device])
queue = cl.CommandQueue(ctx)
prg = cl.Program(ctx, source)
options = "-DPROBE_FP64" if fp64 else ""
key = hashlib.sha256("|".join((fingerprint, options, source)).encode()).hexdigest()
try:  # (PoCL's cache entry checked first, as for every build)
    _build_checked(device, prg, options, key)
except Exception:  # once more (_BUILD_ATTEMPTS): processes starting at once race in PoCL's cache
    _build_checked(device, prg, options, key)
for name, dtype, lanes in [("probe_f", np.float32, 16)] + ([("probe_d", np.float64, 8)] if fp64 else []):
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                    hostbuf=np.linspace(-2.0, 2.0, 256).astype(dtype))
    getattr(prg, name)(queue, (256 // lanes,), None, buf)
queue.finish()
"""
WIDE_PROBE_SECONDS = 20.0  # a broken compiler may also hang (a sound one builds the probe in ~1 s)
# the probe's verdict files: a change to the probe probes afresh
_WIDE_MARKER = "wide-" + hashlib.sha256((_WIDE_PROBE + _WIDE_PROBE_CHILD).encode()).hexdigest()[:8]
_CRASH_SIGNALS = ("SIGABRT", "SIGSEGV", "SIGILL", "SIGBUS", "SIGFPE")  # the driver's own deaths


def _may_crash_process(device) -> bool:
    """A PoCL built with LLVM 14 or older on a CPU with 512-bit vectors.  On CPUs newer than that
    LLVM such a driver aborts or crashes the whole process compiling 512-bit code (measured with
    the PoCL of pocl-binary-distribution 3.0 on AMD Zen 4: "LLVM ERROR: Cannot select" for a
    float16 ``sin``, a segfault or a hang for double8 ``x * x + 1``), which no exception can
    report; which CPUs those are cannot be told from here, so a probe decides."""
    llvm = re.search(r"LLVM (\d+)\.", device.platform.version or "")
    return ("Portable Computing Language" in device.platform.name and llvm is not None
            and int(llvm.group(1)) <= 14 and bool(device.type & _cl().device_type.CPU)
            and device.preferred_vector_width_float >= 16)


def crash_reason(device, force: bool = False) -> str | None:
    """Why functrace cannot use ``device`` without risking the process (None: it can).  Only
    drivers known to crash that way (any, with ``force``) are asked, by building and running a
    probe in a child process, once per device and driver: a verdict on the driver ("ok" or the
    reason) is kept on disk; a probe that could not run says so for this process only."""
    key = ("crash", device.int_ptr)
    if not force:
        if key in _state:
            return _state[key]
        if not _may_crash_process(device):
            _state[key] = None
            return None
    verdict = None if force else _read_verdict(device, _WIDE_MARKER)
    if verdict is None:
        verdict, about_the_driver = _run_wide_probe(device)
        if verdict != "ok":
            _raise_for_environment(device, verdict)  # e.g. PoCL's cache not writable: not the driver's doing
        if about_the_driver:
            _keep_verdict(device, _WIDE_MARKER, verdict)
    _state[key] = None if verdict == "ok" else verdict
    return _state[key]


def _run_wide_probe(device) -> tuple[str, bool]:
    """("ok" or what went wrong, whether that is the driver's doing) for a child process that
    builds and runs ``_WIDE_PROBE`` on ``device``.  The child starts in an empty temporary
    directory (not the caller's, whose modules it would import first; not the cache directory,
    which may not be writable), with the parent's module path, no stdin, and its own process
    group (a Ctrl-C for the parent does not reach it; on a timeout the whole group is killed)."""
    what = "a probe compiling 512-bit vector code in a child process"
    if getattr(sys, "frozen", False) or not sys.executable:
        return f"{what} cannot run here (no Python interpreter to start)", False
    cmd = [sys.executable, "-c", _WIDE_PROBE_CHILD, _fingerprint(device), _WIDE_PROBE]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        workdir = tempfile.TemporaryDirectory(prefix="functrace-probe-")
        child = subprocess.Popen(cmd, cwd=workdir.name, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True)
    except (OSError, ValueError) as e:
        return f"{what} could not start ({e})", False
    with workdir:
        return _wait_for_probe(what, child)


def _wait_for_probe(what: str, child) -> tuple[str, bool]:
    """``_run_wide_probe``'s verdict on its running ``child``."""
    def kill_group():
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (AttributeError, OSError):
            child.kill()
    try:
        out, err = child.communicate(timeout=WIDE_PROBE_SECONDS)
    except subprocess.TimeoutExpired:
        kill_group()
        out, err = child.communicate()
        return f"{what} did not finish in {WIDE_PROBE_SECONDS:g} s", b"ready" in out
    except BaseException:  # e.g. a Ctrl-C for the parent: no hung child left behind
        kill_group()
        raise
    ready = b"ready" in out
    if child.returncode == 0:
        return "ok", True
    lines = [line.strip() for line in err.decode(errors="replace").splitlines() if line.strip()]
    detail = next((line for line in lines if "LLVM ERROR" in line or "error" in line.lower()), lines[-1] if lines else "")
    detail = f" ({detail[:200]})" if detail else ""
    if child.returncode > 0:
        return f"{what} failed{detail}", ready
    try:
        name = signal.Signals(-child.returncode).name
    except ValueError:
        name = f"signal {-child.returncode}"
    return f"{what} was killed by {name}{detail}", ready and name in _CRASH_SIGNALS


def _supports_fp64(device) -> bool:
    return "cl_khr_fp64" in device.extensions or device.double_fp_config != 0


def _fingerprint(device) -> str:
    return f"{device.platform.name}|{device.platform.version}|{device.name}|{device.driver_version}"


def _choose(devs: list):
    want = config.device  # ft.config.update("device", ...) or FUNCTRACE_DEVICE
    if want is None or want == "":
        # GPUs first, then the listed order, without a probe build (~0.5 s on a cold PoCL
        # cache): a device whose first program fails to build is probed then, and if the probe
        # fails too it is dropped (DeviceUnusable; compile_for moves on to the next device).  A
        # driver that may crash the process instead is probed first, in a child process.
        gpu = _cl().device_type.GPU
        for d in sorted(devs, key=lambda d: not d.type & gpu):
            if _state.get(("usable", d.int_ptr)) is False:
                continue
            reason = crash_reason(d)
            if reason is None:
                return d
            warnings.warn(f"functrace: skipping OpenCL device {d.name!r} ({d.platform.version}): {reason}",
                          RuntimeWarning, stacklevel=4)
        return None
    if isinstance(want, int) or str(want).isdigit():
        i = int(want)
        if not 0 <= i < len(devs):
            raise ValueError(f"functrace device index {i} out of range; devices: {[d.name for d in devs]}")
        chosen = devs[i]
    else:
        chosen = next((d for d in devs if str(want).lower() in d.name.lower()), None)
        if chosen is None:
            raise ValueError(f"no OpenCL device matches {want!r}; devices: {[d.name for d in devs]}")
    reason = crash_reason(chosen)
    if reason is not None:
        raise DeviceUnusable(f"OpenCL device {chosen.name!r} ({chosen.platform.version}) may crash the process: "
                             f"{reason}. Use another driver for this CPU (e.g. Debian's pocl-opencl-icd, or "
                             f"PoCL 3.1 or newer with LLVM 15 or newer)")
    return chosen


class CompileProgress:
    """A note that a program is compiling, shown when a part of its compile (its build, then its
    first call, where the driver compiles each kernel at its first launch) runs over
    ``after_seconds`` (with ``config.verbose``), so a long first call does not look like a hang.
    ``start()`` / ``stop()`` around each part.  On a terminal it is one line, erased at ``stop()``;
    in a notebook an indeterminate progress bar, cleared at ``stop()``; where stderr is neither (a
    file, a CI log) a plain line that stays, printed at most once."""

    after_seconds = 1.0

    def __init__(self, what: str):
        self.what = what
        self.printed = False
        self._timer = None
        self._shown = None  # what ``stop`` clears: an erase function, or None
        self._lock = threading.Lock()  # (the timer's thread shows; the caller's stops)

    def start(self) -> None:
        if config.verbose and not self.printed:
            self._timer = threading.Timer(self.after_seconds, self._say)
            self._timer.daemon = True
            self._timer.start()

    def stop(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._shown is not None:
                self._shown()
                self._shown = None

    def _say(self) -> None:
        with self._lock:
            if self._timer is None:  # (stopped meanwhile)
                return
            message = (f"functrace: compiling {self.what} for OpenCL (once per program and shapes; "
                       f"ft.config.update('verbose', False) silences this) ...")
            self._shown = _show_transient(message)
            self.printed = self._shown is None


def _show_transient(message: str):
    """Show ``message`` until the returned function erases it: a progress bar in a Jupyter kernel,
    a line on a terminal; where stderr is neither, print it as a line and return None."""
    if type(sys.stderr).__module__.startswith("ipykernel"):
        try:
            from IPython.display import HTML, display
            handle = display(HTML(f"<progress></progress> {html.escape(message)}"), display_id=True)
            return lambda: handle.update(HTML(""))
        except Exception:  # pragma: no cover - an IPython without displays: the plain line below
            pass
    if sys.stderr.isatty():
        sys.stderr.write(message)
        sys.stderr.flush()
        return lambda: (sys.stderr.write("\r\033[K"), sys.stderr.flush())
    print(message, file=sys.stderr, flush=True)
    return None


class Runtime:
    """The chosen device with its context and in-order queue (and, beside PoCL's CPU device with
    host memory, PoCL's in-thread device in the same context with its own queue: ``in_thread``)."""

    def __init__(self, device):
        cl = _cl()
        self.cl = cl
        self.device = device
        # the device kind's choices (placement, kernel designs, build options): made here, once
        self.policy = choose_policy(device, config.opencl_device_kind)
        beside = in_thread.companion(device) if self.policy.wraps_host_memory else None
        self.context = cl.Context([device] + [beside] * (beside is not None))
        self.queue = cl.CommandQueue(self.context, device)
        self.in_thread_queue = None if beside is None else cl.CommandQueue(self.context, beside)
        self._native_trig: bool | None = None  # measured at the first cpu-kind program using sin / cos
        self.kind = self.policy.kind
        self.unified = self.policy.wraps_host_memory
        self._in_flight: list = []  # host memory that enqueued kernels may still use (see hold)
        self.name = device.name
        self.fingerprint = _fingerprint(device)
        self.supports_fp64 = _supports_fp64(device)
        # every live program by key (one build for the same source, however many executables
        # use it; freed with the last of them) and the most recently asked for, kept alive (LRU)
        self._programs = weakref.WeakValueDictionary()
        self._recent: OrderedDict = OrderedDict()
        self._key_of = weakref.WeakKeyDictionary()  # program -> its key
        self._program_lock = threading.Lock()  # one build per key, however many threads ask
        # PoCL keeps its own disk cache of built programs (keyed by source, options and device): a
        # rebuild from it takes ~22 ms.  Asking it for a binary compiles every kernel once more
        # while holding the GIL (seconds for a large program), so there no binary is fetched at all
        self.driver_caches_programs = "Portable Computing Language" in device.platform.name
        self.lean_header_failure: str | None = None  # why a lean build failed (then none is tried)

    def native_trig(self, in_thread: bool = False) -> bool:
        """Are this device's native sin / cos accurate (``native_trig_accurate``, asked once, on
        the device of the program asking: ``in_thread``)?"""
        if self._native_trig is None:
            self._native_trig = native_trig_accurate(self, in_thread)
        return self._native_trig

    # ------------------------------------------------------------------ programs

    def program(self, source: str, options: str = "", in_thread: bool = False):
        """A built program for ``source`` (with the device kind's prefix and build options): from
        memory, else from the disk cache, else compiled; for the in-thread device (its queue:
        ``in_thread_queue``) with ``in_thread``, else for the runtime's device."""
        source = self.policy.program_source(source, self.kind == "cpu" and "FT_" in source
                                            and _USES_TRIG.search(source) is not None and self.native_trig(in_thread))
        options = " ".join(filter(None, (self.policy.build_options, options)))
        device = self.in_thread_queue.device if in_thread else self.device
        lean = self._lean_header()
        if lean is None:
            return self._program(source, options, device)
        try:
            return self._program(lean.declarations(source) + source, f"{options} {lean_header.DEFINE}", device)
        except (DeviceUnusable, OpenCLEnvironmentError):
            raise
        except Exception as e:
            failure = f"{type(e).__name__}: {e}"
        prog = self._program(source, options, device)  # (a program that does not build at all raises here)
        self.lean_header_failure = failure  # (a PoCL that declares its builtins otherwise, say)
        return prog

    def _lean_header(self):
        """The declarations of PoCL's builtins for lean builds (``lean_header``; None: build in
        full: not PoCL, ``config.opencl_lean_header`` off, its header not found, or a lean
        build failed: ``lean_header_failure`` says why)."""
        if not (config.opencl_lean_header and self.driver_caches_programs) or self.lean_header_failure:
            return None
        return lean_header.for_platform(self.device.platform.version)

    def _program(self, source: str, options: str, device):
        key = hashlib.sha256(f"{_fingerprint(device)}\n{options}\n{source}".encode()).hexdigest()
        with self._program_lock:
            prog = self._programs.get(key)
            if prog is None:
                prog = self._load_or_build(key, source, options, device)
                self._programs[key] = prog
                self._key_of[prog] = key
            self._recent[key] = prog
            self._recent.move_to_end(key)
            while len(self._recent) > config.opencl_program_cache_size:
                self._recent.popitem(last=False)
        return prog

    def _load_or_build(self, key: str, source: str, options: str, device):
        cl = self.cl
        path = self._binary_path(key)
        binary = read_entry(path, key)  # verified against its checksum before the driver sees it
        if binary is not None:
            try:  # (PoCL, if it is the driver, keeps what it makes of the binary under another entry)
                return _build_checked(device, cl.Program(self.context, [device], [binary]), options,
                                      hashlib.sha256(b"binary\n" + key.encode()).hexdigest())
            except Exception as e:
                _raise_for_environment(device, str(e))  # (the entry may be sound)
                discard(path)  # a binary the driver no longer takes: rebuilt below
        prog = self._build(cl.Program(self.context, source), options, key, device)
        if config.opencl_binary_cache and not self.driver_caches_programs:  # elsewhere the binary is cheap
            self._save_binary(key, prog)
        return prog

    def _binary_path(self, key: str) -> str:
        return os.path.join(cache_dir(), key + ".bin")

    def _save_binary(self, key: str, prog) -> None:
        try:
            binary = prog.get_info(self.cl.program_info.BINARIES)[0]
            write_entry(self._binary_path(key), key, binary)
        except Exception:
            pass  # a cache we cannot write only costs compile time

    def _build(self, program, options: str, key: str | None = None, device=None):
        """Build ``program`` for ``device`` (None: the runtime's; ``key``: its key in the program
        cache, for checking PoCL's cache entry first), trying twice (``_BUILD_ATTEMPTS``); a failure caused by the
        environment is ``OpenCLEnvironmentError`` (saying what to fix), one on a device that
        cannot even build the probe kernel is ``DeviceUnusable`` (the device is dropped), any other
        failure is re-raised."""
        device = self.device if device is None else device
        for _ in range(_BUILD_ATTEMPTS):
            try:
                _build_checked(device, program, options, key)
                break
            except Exception as e:
                failure = e
        else:
            _raise_for_environment(device, str(failure))
            if not usable(device):
                raise DeviceUnusable(f"OpenCL device {device.name!r} cannot build programs (its compiler "
                                     f"fails even on a one-line probe kernel)") from None
            raise failure
        if _state.get(("usable", device.int_ptr)) is not True:
            _mark_usable(device)
        return program

    def kernel(self, program, name: str) -> "Kernel":
        return Kernel(self.cl, program, name)

    # ------------------------------------------------------------------ synchronization

    def finish(self) -> None:
        """Wait for every enqueued command; host memory held for them may then be freed (only
        what was held before the wait began: another thread may enqueue and hold meanwhile)."""
        held, self._in_flight = self._in_flight, []
        try:
            self.queue.finish()
            if self.in_thread_queue is not None:
                self.in_thread_queue.finish()
        except BaseException:  # (a Ctrl-C before the wait): the commands may still run
            self._in_flight += held
            raise

    def host_views(self, *arrays) -> list:
        """``a.host_view()`` of each array (None stays None), waiting for the queue once."""
        if self.unified:
            self.finish()
            return [None if a is None else a._host if a._host is not None else a.host_view() for a in arrays]
        return [None if a is None else a.host_view() for a in arrays]

    def hold(self, *objects) -> None:
        """Keep ``objects`` (arrays, executables with their buffer pools) alive until the queue
        has finished: on unified memory a kernel reads numpy-owned memory, which Python would
        free as soon as the last reference died.  Bounded: many held calls force a finish."""
        if self.unified:
            self._in_flight.append(objects)
            if len(self._in_flight) > 32:
                self.finish()

    # ------------------------------------------------------------------ buffers

    def empty(self, shape: tuple, dtype) -> "Array":
        dtype = np.dtype(dtype)
        if config.opencl_debug_canaries:
            return self._guarded_empty(shape, dtype)
        if self.unified:
            return Array(self, None, shape, dtype, _aligned_empty(shape, dtype))
        nbytes = max(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, 1)
        return Array(self, self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, nbytes), shape, dtype)

    def to_device(self, x) -> "Array":
        """A device copy of a host array (``Array`` inputs are returned as they are).  A copy even
        on unified memory: the caller may change its array while kernels still read it."""
        if isinstance(x, Array):
            return x
        x = np.asarray(x)
        out = self.empty(x.shape, x.dtype)
        self.write(out, x)
        return out

    def buffer_for(self, host: np.ndarray):
        """A buffer holding ``host``'s data: its own memory on unified devices when the layout
        allows (contiguous, writable, page-aligned), else a copy (OpenCL has no empty buffers:
        an empty array gets one byte)."""
        mf = self.cl.mem_flags
        if config.opencl_debug_canaries:  # a guarded copy: host memory has no guard regions
            arr = self._guarded_empty(host.shape, host.dtype)
            self.write(arr, host)
            return arr.buffer
        if not host.size:
            return self.cl.Buffer(self.context, mf.READ_WRITE, 1)
        if self.wraps_host_memory(host):
            return self.cl.Buffer(self.context, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=host)
        return self.cl.Buffer(self.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(host))

    def wraps_host_memory(self, host: np.ndarray) -> bool:
        """Does ``buffer_for(host)`` use ``host``'s own memory (which must then outlive the
        commands queued on the buffer)?"""
        return bool(self.unified and host.size and host.flags.c_contiguous and host.flags.writeable
                    and host.ctypes.data % _HOST_ALIGN == 0 and not config.opencl_debug_canaries)

    def _guarded_empty(self, shape: tuple, dtype: np.dtype) -> "Array":
        """``empty`` in canary mode: the buffer lies between two guard regions of
        ``_GUARD_BYTES``, all three filled with the dtype's canary byte (see the module's
        docstring).  On unified memory the buffer wraps the middle of one host allocation; else
        it is a sub-buffer of one device allocation (an empty array's buffer holds the first
        byte of the upper guard region: OpenCL has no empty buffers)."""
        cl, mf = self.cl, self.cl.mem_flags
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        fill = _canary_byte(dtype)
        span, data = nbytes + 2 * _GUARD_BYTES, slice(_GUARD_BYTES, _GUARD_BYTES + max(nbytes, 1))
        if self.unified:
            raw = _aligned_empty((span,), np.dtype(np.uint8))  # page-aligned, so its data is too
            raw.fill(fill)
            buffer = cl.Buffer(self.context, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=raw[data])
            buffer.ft_canaries = _Canaries(fill, nbytes, raw=raw)
            host = raw[_GUARD_BYTES:_GUARD_BYTES + nbytes].view(dtype).reshape(shape)
            return Array(self, buffer, shape, dtype, host)
        whole = cl.Buffer(self.context, mf.READ_WRITE, span)
        cl.enqueue_fill_buffer(self.queue, whole, np.uint8(fill), 0, span)
        buffer = whole.get_sub_region(data.start, data.stop - data.start)
        buffer.ft_canaries = _Canaries(fill, nbytes, whole=whole)
        return Array(self, buffer, shape, dtype)

    def write(self, out: "Array", x) -> None:
        """Copy host data into an existing device array."""
        x = np.asarray(x, dtype=out.dtype).reshape(out.shape)
        if not x.size:
            return
        if self.unified:
            np.copyto(out.host_view(), x)
        else:
            self.cl.enqueue_copy(self.queue, out.buffer, np.ascontiguousarray(x))


_HOST_ALIGN = 4096  # zero-copy host pointers: page-aligned (what strict CPU drivers require)
_GUARD_BYTES = 4096  # canary mode: guard region on each side of a buffer (a multiple of _HOST_ALIGN)


class CanaryError(RuntimeError):
    """Canary mode found a kernel that wrote outside one of its buffers."""


def _canary_byte(dtype: np.dtype) -> int:
    """The canary byte for buffers of ``dtype``: all-one bytes are NaN as float32 and float64;
    0x7f bytes are a huge integer (and a true bool)."""
    return 0xFF if dtype.kind == "f" else 0x7F


class _Canaries:
    """The guard regions around one buffer in canary mode: ``raw`` (a host allocation) or
    ``whole`` (a device buffer) holds _GUARD_BYTES of ``fill``, the buffer's ``nbytes``, then
    _GUARD_BYTES of ``fill`` again."""

    __slots__ = ("fill", "nbytes", "raw", "whole")

    def __init__(self, fill: int, nbytes: int, raw: np.ndarray | None = None, whole=None):
        self.fill, self.nbytes, self.raw, self.whole = fill, nbytes, raw, whole

    def guards(self, queue) -> np.ndarray:
        """The bytes of both guard regions as they are now (the queue has finished)."""
        g, end = _GUARD_BYTES, _GUARD_BYTES + self.nbytes
        if self.raw is not None:
            return np.concatenate([self.raw[:g], self.raw[end:]])
        out = np.empty(2 * g, np.uint8)
        cl = _cl()
        cl.enqueue_copy(queue, out[:g], self.whole, src_offset=0)
        cl.enqueue_copy(queue, out[g:], self.whole, src_offset=end)
        return out


def check_canaries(queue, kernel: str, args) -> None:
    """Canary mode, after a launch of ``kernel`` with ``args``: raise ``CanaryError`` if a guard
    region of one of its buffer arguments changed (the kernel wrote outside that buffer)."""
    guarded = [(i, getattr(a, "ft_canaries", None)) for i, a in enumerate(args)]
    guarded = [(i, c) for i, c in guarded if c is not None]
    if not guarded:
        return
    queue.finish()
    for i, c in guarded:
        bad = np.flatnonzero(c.guards(queue) != c.fill)
        if bad.size:
            first = int(bad[0])
            where = (f"{_GUARD_BYTES - first} bytes before its start" if first < _GUARD_BYTES
                     else f"{first - _GUARD_BYTES} bytes after its end")
            raise CanaryError(f"OpenCL kernel {kernel!r} wrote outside buffer argument {i} ({c.nbytes} bytes): "
                              f"{bad.size} guard byte(s) changed, the first {where} "
                              f"(ft.config.opencl_debug_canaries is on)")


def _aligned_empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on a page boundary."""
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + _HOST_ALIGN, np.uint8)
    start = (-raw.ctypes.data) % _HOST_ALIGN
    return raw[start:start + n].view(dtype).reshape(shape)


class Kernel:
    """A ``cl.Kernel`` made at its first launch (a program names more kernels than a call may run,
    and pyopencl takes 0.15-0.5 ms to make one, ~4 ms for the first in a process: it fetches each
    kernel's argument-setting code from its own on-disk cache, sqlite, and once more for declared
    types), or earlier by ``make`` (to learn whether the driver makes it at all), that declares its
    scalar argument types from the numpy scalars of its first launch: pyopencl then packs them itself.
    Undeclared, pyopencl takes ~9 us per scalar argument and launch (measured with PoCL: a
    16-argument matmul launch 104 -> 5 us).  Not for two threads at once: a launch sets the
    arguments, then enqueues (callers serialize: an executable's lock, matmul's launch lock)."""

    __slots__ = ("_cl", "_program", "_name", "_made", "_kernel")

    def __init__(self, cl, program, name: str):
        self._cl, self._program, self._name = cl, program, name
        self._made = None    # the cl.Kernel, once made
        self._kernel = None  # ... once its scalar types are declared (at the first launch)

    def make(self):
        """The ``cl.Kernel``, made now if it was not (clCreateKernel): raises where the driver
        built the program but will not make this kernel (Oclgrind, for a kernel calling a function
        it does not implement)."""
        if self._made is None:
            self._made = self._cl.Kernel(self._program, self._name)
        return self._made

    def _declare(self, args: tuple):
        kernel = self.make()
        scalar_types = [a.dtype if isinstance(a, np.generic) else None for a in args]
        if any(t is not None for t in scalar_types):  # (buffers alone: the generic code is as fast)
            kernel.set_scalar_arg_dtypes(scalar_types)
        self._kernel = kernel
        return kernel

    def __call__(self, queue, global_size, local_size, *args):
        kernel = self._kernel
        if kernel is None:
            kernel = self._declare(args)
        event = kernel(queue, global_size, local_size, *args)
        if config.opencl_debug_canaries:
            check_canaries(queue, self._name, args)
        return event


class Array(HasShape):
    """An array in device memory (what OpenCL-jitted functions return).  ``np.asarray(a)``
    copies it to the host; passing it back to a jitted function uses the buffer in place."""

    __array_priority__ = 100

    def __init__(self, runtime: Runtime, buffer, shape: tuple, dtype, host: np.ndarray | None = None):
        self.runtime = runtime
        self._buffer = buffer
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self._host = host  # host-backed (results of small programs run on a CPU device's host)

    @classmethod
    def from_host(cls, runtime: Runtime, value) -> "Array":
        """An array whose data lives in host memory (never written afterwards); its device buffer
        is made only if a kernel needs it.  Kept C-contiguous (a copy of a strided view, such as a
        host step's reshape of a slice): views of it are addressed by element offsets."""
        if type(value) is not np.ndarray:
            value = np.asarray(value)
        if not value.flags.c_contiguous:
            value = np.ascontiguousarray(value)
        return cls(runtime, None, value.shape, value.dtype, value)

    @property
    def buffer(self):
        if self._buffer is None:
            self._buffer = self.runtime.buffer_for(self._host)
        return self._buffer

    def host_view(self) -> np.ndarray:
        """The data on the host (read-only use): the array's own memory when host-backed (after
        waiting for kernels that may write it), else copied from the device once and kept
        (arrays are never written after they are produced)."""
        if self._host is None:
            self._host = self.__array__()
        elif self.runtime.unified:
            self.runtime.finish()
        return self._host

    def __array__(self, dtype=None, copy=None):
        if self._host is not None:
            out = np.array(self.host_view(), copy=True)
        else:
            out = np.empty(self.shape, self.dtype)
            if out.size:
                self.runtime.cl.enqueue_copy(self.runtime.queue, out, self._buffer)  # blocking
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        """As JAX's: ``Array([1., 2.], dtype=float32)``; the device is named only when it is not
        the current default one."""
        prefix = "Array("
        body = np.array2string(np.asarray(self), separator=", ", prefix=prefix)
        device = "" if self.runtime is _state.get("runtime") else f", device={self.runtime.name!r}"
        return f"{prefix}{body}, dtype={self.dtype.name}{device})"

    def __str__(self) -> str:
        return str(np.asarray(self))  # as numpy's (and JAX's)

    def __len__(self) -> int:
        return self.shape[0]

    def __float__(self) -> float:
        return float(np.asarray(self))

    def __int__(self) -> int:
        return int(np.asarray(self))

    def __index__(self) -> int:
        return np.asarray(self).__index__()

    def __bool__(self) -> bool:
        return bool(np.asarray(self))

    def __complex__(self) -> complex:
        return complex(np.asarray(self))

    def item(self):
        return np.asarray(self).item()

    @property
    def device(self):
        """The OpenCL device holding it (a ``pyopencl.Device``, as listed by ``ft.devices()``)."""
        return self.runtime.device

    def devices(self) -> set:
        return {self.runtime.device}

    def __reduce__(self):
        """Pickled as its values: it loads as an eager array (``EagerArray``, a host array with
        JAX's rules) in any process, one without OpenCL included; a jitted function given it puts
        it on its device again."""
        return as_eager, (np.asarray(self),)

    def __copy__(self) -> "Array":
        return Array.from_host(self.runtime, np.asarray(self))  # (a copy of the values: never shared)

    def __deepcopy__(self, memo: dict) -> "Array":
        memo[id(self)] = copied = self.__copy__()
        return copied

    @property
    def at(self):
        """JAX's functional updates (``y = a.at[i].set(v)``), computed eagerly on a host copy."""
        return as_eager(np.asarray(self)).at

    def __getattr__(self, name: str):
        """numpy's array methods and attributes (``.sum()``, ``.T``, ``.reshape``, ``.astype``,
        ``.tolist()``, ...) on a host copy, as outside jit a JAX array offers them."""
        if name.startswith("_") or not hasattr(np.ndarray, name):
            raise AttributeError(f"'ft.Array' object has no attribute {name!r}")
        return getattr(np.asarray(self), name)

    def block_until_ready(self) -> "Array":
        self.runtime.finish()
        return self

    _recycle = None  # the executable's free list this buffer returns to

    def recycle(self) -> None:
        """Give the storage back to its pool now (the array must not be used afterwards): the
        buffer, and on unified memory the host array it wraps (elsewhere ``_host`` is a copy)."""
        if self._recycle is not None and (self._buffer is not None or self.runtime.unified):
            self._recycle.append((self._buffer, self._host if self.runtime.unified else None))
        elif self._buffer is not None and self._host is not None and self.runtime.wraps_host_memory(self._host):
            # a host-backed array whose buffer wraps its memory: a kernel or copy still queued (a
            # scan's copy of a host-run body's output, say) may read it after this array is gone
            self.runtime.hold(self._host, self._buffer)
        self._buffer = self._host = None
        self._recycle = None

    def __del__(self):
        if self._buffer is None and self._recycle is None:
            return  # (a host-backed result: nothing to give back; the common case of small programs)
        try:
            self.recycle()
        except Exception:  # interpreter shutdown
            pass


def _host_op(name: str, reflected: bool = False):
    """Arithmetic on device arrays outside jit computes eagerly on a host copy (like numpy)."""
    op = getattr(operator, name)

    def method(self, other):
        a, b = np.asarray(self), np.asarray(other) if isinstance(other, Array) else other
        return op(b, a) if reflected else op(a, b)
    return method


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "lt", "le", "gt", "ge",
              "eq", "ne", "and_", "or_", "xor"):
    _dunder = _name.rstrip("_")
    setattr(Array, f"__{_dunder}__", _host_op(_name))
    if _name not in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(Array, f"__r{_dunder}__", _host_op(_name, reflected=True))
Array.__neg__ = lambda self: -np.asarray(self)
Array.__abs__ = lambda self: abs(np.asarray(self))
PublicArray.register(Array)  # (ft.Array: every array functrace returns)
Array.__getitem__ = lambda self, idx: as_eager(np.asarray(self))[idx]  # (JAX's rules: see eager.py)
Array.__iter__ = lambda self: iter(as_eager(np.asarray(self)))  # (reads clamp: no IndexError ends a loop)
Array.__setitem__ = EagerArray.__setitem__
Array.__format__ = lambda self, spec: format(as_eager(np.asarray(self)), spec)
Array.__hash__ = None
ARRAY_TYPES.add(Array)  # (jit keys it by shape and dtype, as numpy arrays)


def device_put(tree):
    """The arrays of a pytree copied to the OpenCL device as ``ft.Array`` leaves (like
    ``jax.device_put``): jitted functions then read them in place, so a training loop keeps its
    parameters there.  With no usable device, eager arrays (host ``ft.Array`` s)."""
    def put(x):
        aval = get_aval(x)  # a clear TypeError for what is not an array or a scalar
        if aval.dtype.kind not in "biuf":
            raise TypeError(f"device_put: arrays of {aval.dtype} cannot go to an OpenCL device "
                            f"(booleans, integers and floats can)")
        return as_eager(np.array(x)) if rt is None else rt.to_device(x)
    rt = get_runtime()
    return tree_map(put, tree)


def clear_program_caches() -> None:
    """Drop the programs every runtime keeps among the recently used (``Runtime.program``'s LRU);
    programs a live executable holds stay until it goes."""
    for rt in list(_state.get("runtimes", {}).values()):
        if rt is not None:
            with rt._program_lock:
                rt._recent.clear()


def block_until_ready(tree):
    """Wait until every ``ft.Array`` in ``tree`` is computed (like ``jax.block_until_ready``):
    one wait per runtime, however many arrays.  Returns ``tree``."""
    if type(tree) is Array:  # (the common case, one result: no walk)
        tree.runtime.finish()
        return tree
    for rt in {id(a.runtime): a.runtime for a in tree_leaves(tree) if isinstance(a, Array)}.values():
        rt.finish()
    return tree


def forget_runtime() -> None:
    """Choose the device again at the next ``get_runtime`` (after one proved unusable)."""
    with _lock:
        _state.pop("runtime", None)
        _state.pop("runtimes", None)


def get_runtime() -> Runtime | None:
    """The process-wide runtime for the configured device; None (with one warning) when no
    OpenCL platform or device is available."""
    want = (config.device, config.opencl_device_kind)
    with _lock:
        if _state.get("want", object()) == want and "runtime" in _state:
            return _state["runtime"]
        devs = devices()
        chosen = _choose(devs) if devs else None
        kept = _state.setdefault("runtimes", {})  # (switching kinds back and forth: one context each)
        key = None if chosen is None else (chosen.int_ptr, device_kind(chosen, want[1]))
        rt = kept.get(key)
        if rt is None and chosen is not None:
            rt = kept[key] = Runtime(chosen)
        if rt is None and not _state.get("warned"):
            problem = None if devs else _pocl_cache_problem()  # PoCL then lists no device
            hint = (f" PoCL, if installed, lists no devices: {problem}; set POCL_CACHE_DIR to a writable "
                    f"directory." if problem else "")
            why = "" if devs else f" ({_state.get('no_devices', 'no OpenCL device listed')})"
            warnings.warn(f"functrace: no usable OpenCL device found{why}; jit falls back to the numpy backend. "
                          "Install one: for the CPU, Debian's pocl-opencl-icd or `pip install "
                          "pocl-binary-distribution`; for an NVIDIA GPU, register its driver with an ICD file "
                          "(`mkdir -p /etc/OpenCL/vendors && echo libnvidia-opencl.so.1 > "
                          "/etc/OpenCL/vendors/nvidia.icd`). Or set ft.config.update('default_backend', 'numpy') "
                          "(FUNCTRACE_DEFAULT_BACKEND=numpy) to run on numpy without this warning." + hint,
                          RuntimeWarning, stacklevel=3)
            _state["warned"] = True
        _state["want"], _state["runtime"] = want, rt
        return rt
