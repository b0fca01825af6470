"""Faults of the on-disk caches (``FUNCTRACE_CACHE_DIR``, PoCL's ``POCL_CACHE_DIR``) and of
interrupts: bad entries, bad directories, concurrent writers, a writer killed mid-write, Ctrl-C
during a long OpenCL computation.  No crash, no hang, no wrong number.

The subprocess tests run the child processes against this checkout's functrace; each takes a
few seconds (mostly interpreter and pyopencl start-up)."""
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime as cl_runtime

rt = cl_runtime.get_runtime()
pytestmark = pytest.mark.skipif(rt is None, reason="no usable OpenCL device on this machine")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ft.__file__)))

# the start of every child: kernels even for small programs, binaries cached as on a driver without
# a program cache of its own, and a count of the programs made from a cached binary (``loads``)
PRELUDE = """
import os, signal, sys, time
import numpy as np, pyopencl as cl
import functrace as ft, functrace.numpy as fnp
from functrace import lax
from functrace.backends.opencl import runtime as R
ft.config.update("opencl_small_program_elements", 0)
ft.config.update("opencl_host_step_elements", 0)
R.get_runtime().driver_caches_programs = False  # binaries written at each build (PoCL: never)
loads = []

class CountingProgram(cl.Program):
    def __init__(self, *args):
        if len(args) == 3:
            loads.append(1)
        super().__init__(*args)
cl.Program = CountingProgram

def tanh_programs(constants=(2.0, 3.0)):
    '''The worst error of the programs tanh(x * c) + c over three calls each (each build
    keeps its binary in the cache).'''
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    worst = 0.0
    for c in constants:
        f = ft.jit(lambda x, c=c: fnp.tanh(x * c) + c, backend="opencl")
        for _ in range(3):
            worst = max(worst, float(np.max(np.abs(np.asarray(f(x)) - (np.tanh(x * c) + c)))))
    return worst
"""


def child(code: str, cache, env: dict | None = None, prefix: tuple = (), **popen) -> subprocess.Popen:
    """A Python child running ``PRELUDE + code`` with ``cache`` as its FUNCTRACE_CACHE_DIR."""
    full_env = dict(os.environ, FUNCTRACE_CACHE_DIR=str(cache),
                    PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    full_env.update(env or {})
    return subprocess.Popen([*prefix, sys.executable, "-c", PRELUDE + code], env=full_env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def finished(proc: subprocess.Popen, timeout: float = 120) -> str:
    """The rest of ``proc``'s stdout once it exited 0 (else a failure showing its stderr).  Not
    ``communicate()``: with two pipes it reads their descriptors directly and loses what an
    earlier ``readline()`` had buffered (the child's last line, if printed soon enough: a loaded
    machine's full-suite run got '')."""
    got: dict = {}
    readers = [threading.Thread(target=lambda k=k, f=f: got.__setitem__(k, f.read()), daemon=True)
               for k, f in (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    proc.wait(timeout=timeout)
    for r in readers:
        r.join(timeout)
    out, err = got.get("out", ""), got.get("err", "")
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{out}\n{err}"
    return out


def valid_entries(cache) -> dict:
    """{file name: payload} of the program binaries in ``cache`` that verify (all must)."""
    found = {}
    for path in sorted((cache / "opencl").glob("*.bin")):
        payload = cl_runtime.read_entry(str(path), path.stem)
        assert payload is not None, f"{path.name} does not verify"
        found[path.name] = payload
    return found


def unprivileged() -> tuple:
    """A command prefix under which file permissions bind: none for a user, ``setpriv`` without
    the capabilities that let root ignore them for root."""
    if os.geteuid() != 0:
        return ()
    prefix = ("setpriv", "--inh-caps=-dac_override,-dac_read_search",
              "--bounding-set=-dac_override,-dac_read_search")
    if shutil.which("setpriv") is None or subprocess.run([*prefix, "true"]).returncode != 0:
        pytest.skip("root without setpriv: a directory cannot be made read-only for the child")
    return prefix


# ---------------------------------------------------------------------- bad entries

SCALE = "__kernel void scale(__global float* a) {{ a[get_global_id(0)] *= {}f; }}"


@pytest.fixture
def binary_cache(tmp_path, monkeypatch):
    """A fresh disk cache written at every build (as for drivers without a cache of their own),
    an empty in-memory one, and the binaries handed to the driver (``.loaded``)."""
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(rt, "driver_caches_programs", False)
    monkeypatch.setattr(rt, "_programs", {})
    loaded = []

    class CountingProgram(rt.cl.Program):
        def __init__(self, *args):
            if len(args) == 3:
                loaded.append(bytes(args[2][0]))
            super().__init__(*args)
    monkeypatch.setattr(rt.cl, "Program", CountingProgram)
    return types.SimpleNamespace(dir=tmp_path / "opencl", loaded=loaded)


def scaled_by(source: str) -> float:
    """What ``rt.program(source)``'s kernel makes of a 1."""
    prog = rt.program(source)
    buf = rt.to_device(np.ones(4, np.float32))
    prog.scale(rt.queue, (4,), None, buf.buffer)
    out = np.asarray(buf)
    assert (out == out[0]).all()
    return float(out[0])


# (entry, another program's entry, the entry's key) -> what is on disk; an entry is 8 bytes of
# format tag, a 32-byte checksum, the payload
CORRUPTIONS = {
    "truncated payload": lambda mine, other, key: mine[:40 + (len(mine) - 40) // 2],
    "flipped payload bit": lambda mine, other, key: mine[:-100] + bytes([mine[-100] ^ 4]) + mine[-99:],
    "flipped checksum bit": lambda mine, other, key: mine[:20] + bytes([mine[20] ^ 1]) + mine[21:],
    "another program's payload": lambda mine, other, key: mine[:40] + other[40:],
    "another program's entry": lambda mine, other, key: other,
    "header only": lambda mine, other, key: mine[:40],
    "empty": lambda mine, other, key: b"",
    "older format (key header, no checksum)": lambda mine, other, key: key.encode() + mine[40:],
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_bad_program_entry_never_reaches_the_driver_and_is_rebuilt(corruption, binary_cache):
    """A truncated or bit-flipped binary crashed every later process in the driver; another
    program's binary under a valid header computed that program.  Entries now carry a checksum of
    their payload bound to their key: a bad one is deleted, the program built from source, and
    the rewritten entry loads again."""
    two, three = SCALE.format("2.0"), SCALE.format("3.0")
    assert scaled_by(two) == 2.0 and scaled_by(three) == 3.0
    entries = {p.name: p.read_bytes() for p in binary_cache.dir.glob("*.bin")}
    assert len(entries) == 2 and not binary_cache.loaded
    rt._programs.clear()
    assert scaled_by(two) == 2.0 and scaled_by(three) == 3.0  # both loaded from their binaries
    assert len(binary_cache.loaded) == 2

    for name, blob in entries.items():  # every entry corrupted, each with the other's data
        other = next(b for n, b in entries.items() if n != name)
        (binary_cache.dir / name).write_bytes(CORRUPTIONS[corruption](blob, other, name[:-len(".bin")]))
    binary_cache.loaded.clear()
    rt._programs.clear()
    assert scaled_by(two) == 2.0 and scaled_by(three) == 3.0
    assert not binary_cache.loaded  # built from source: no bad binary handed to the driver
    assert set(valid_entries(binary_cache.dir.parent)) == set(entries)  # rewritten

    rt._programs.clear()
    assert scaled_by(two) == 2.0 and scaled_by(three) == 3.0
    assert len(binary_cache.loaded) == 2


def test_a_binary_the_driver_refuses_is_replaced(binary_cache):
    """A verified binary the driver will not take (e.g. a driver update that kept its version):
    built from source and written again."""
    two = SCALE.format("2.0")
    scaled_by(two)
    (path,) = binary_cache.dir.glob("*.bin")
    cl_runtime.write_entry(str(path), path.stem, b"\x7fELF not a program")
    rt._programs.clear()
    assert scaled_by(two) == 2.0
    assert valid_entries(binary_cache.dir.parent)[path.name] != b"\x7fELF not a program"


def test_a_bad_verdict_file_is_ignored_and_rewritten(tmp_path, monkeypatch):
    """Device verdicts (the probe build passed; the 512-bit probe's outcome) that do not verify
    -- garbage, or the older plain-text format -- are not trusted: the device is probed again
    and the verdict rewritten."""
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path))
    (tmp_path / "opencl").mkdir()
    monkeypatch.setattr(cl_runtime, "_state", {})
    usable = cl_runtime._marker(rt.device, "usable")
    with open(usable, "wb") as f:
        f.write(b"ok")  # the older format
    assert cl_runtime.usable(rt.device)
    assert cl_runtime._read_verdict(rt.device, "usable") == "ok"

    probes = []
    monkeypatch.setattr(cl_runtime, "_may_crash_process", lambda device: True)
    monkeypatch.setattr(cl_runtime, "_run_wide_probe", lambda device: probes.append(device) or ("ok", True))
    with open(cl_runtime._marker(rt.device, cl_runtime._WIDE_MARKER), "wb") as f:
        f.write(b"a probe was killed by SIGABRT")  # not a verified verdict: the device is not refused
    assert cl_runtime.crash_reason(rt.device) is None and len(probes) == 1
    monkeypatch.setattr(cl_runtime, "_state", {})
    assert cl_runtime.crash_reason(rt.device) is None and len(probes) == 1  # the rewritten verdict


# ---------------------------------------------------------------------- bad directories

def _tanh_program(x):
    return fnp.tanh(x * 3.0) + 1.0


def _run_fresh(x) -> None:
    """A new jitted function with an empty in-memory program cache, three calls, each right."""
    f = ft.jit(_tanh_program, backend="opencl")
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(x)), np.tanh(x * 3.0) + 1.0, rtol=1e-6, atol=1e-6)


def test_the_binary_cache_can_be_turned_off(binary_cache, monkeypatch):
    """``opencl_binary_cache`` off: programs build from source and nothing is written."""
    monkeypatch.setattr(ft.config, "opencl_binary_cache", False)
    assert scaled_by(SCALE.format(7.0)) == 7.0
    assert not list(binary_cache.dir.glob("*.bin")) and not binary_cache.loaded


@pytest.mark.parametrize("fault", ["missing", "a file", "full of garbage"])
def test_a_bad_cache_directory_costs_only_compile_time(fault, tmp_path, monkeypatch):
    """FUNCTRACE_CACHE_DIR missing (made), a regular file (nothing can be read or written), or
    full of garbage (every entry, and a killed writer's partial temporary file)."""
    monkeypatch.setattr(rt, "driver_caches_programs", False)  # binaries written at each build
    monkeypatch.setattr(rt, "_programs", {})
    x = np.linspace(-2, 2, 3000, dtype=np.float32)
    cache = {"missing": tmp_path / "not" / "made" / "yet", "a file": tmp_path / "file",
             "full of garbage": tmp_path}[fault]
    monkeypatch.setattr(ft.config, "cache_dir", str(cache))
    if fault == "a file":
        cache.write_bytes(b"not a directory")
    if fault == "full of garbage":
        _run_fresh(x)  # the names functrace uses
        names = [p.name for p in (cache / "opencl").iterdir()]
        assert any(n.endswith(".bin") for n in names)
        names += [os.path.basename(cl_runtime._marker(rt.device, kind)) for kind in ("usable", cl_runtime._WIDE_MARKER)]
        for i, name in enumerate(names):
            (cache / "opencl" / name).write_bytes(os.urandom(64 + 1000 * i))
        (cache / "opencl" / ".tmp-killed").write_bytes(os.urandom(100))
        monkeypatch.setattr(rt, "_programs", {})
    _run_fresh(x)
    if fault == "a file":
        assert cache.read_bytes() == b"not a directory"
    else:
        assert len(valid_entries(cache)) == 1


def _entry_name_of(fun, x) -> str:
    """The name of the cache entry of ``jit(fun)(x)``'s program (stem of its ``.bin``)."""
    exe = ft.jit(fun, backend="opencl").lower(x).compile().executable
    return next(k for k, p in rt._programs.items() if p is exe.program)


def test_a_directory_where_an_entry_goes(tmp_path, monkeypatch):
    """Neither readable nor replaceable: the program is built, the entry not written."""
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(rt, "_programs", {})
    x = np.linspace(-2, 2, 3000, dtype=np.float32)
    (tmp_path / "opencl" / (_entry_name_of(_tanh_program, x) + ".bin")).mkdir(parents=True)
    monkeypatch.setattr(rt, "_programs", {})
    _run_fresh(x)
    assert (tmp_path / "opencl" / (_entry_name_of(_tanh_program, x) + ".bin")).is_dir()


def test_a_read_only_cache_directory(tmp_path):
    """A populated cache that cannot be written (a bad entry in it cannot even be deleted): its
    good entries load, the bad one is rebuilt in memory, every number is right."""
    finished(child("assert tanh_programs() < 1e-6", tmp_path))
    entries = sorted((tmp_path / "opencl").glob("*.bin"))
    assert len(entries) == 2
    entries[0].write_bytes(entries[0].read_bytes()[:-10])
    for d in (tmp_path / "opencl", tmp_path):
        d.chmod(0o555)
    try:
        out = finished(child("print(tanh_programs(), len(loads))", tmp_path, prefix=unprivileged()))
    finally:
        for d in (tmp_path, tmp_path / "opencl"):
            d.chmod(0o755)
    worst, loads = out.split()
    assert float(worst) < 1e-6 and int(loads) == 1
    assert entries[0].exists() and cl_runtime.read_entry(str(entries[0]), entries[0].stem) is None


# ---------------------------------------------------------------------- concurrent and killed writers

def test_four_processes_fill_one_fresh_cache_at_once(tmp_path):
    """Four processes compile the same programs into one empty cache (ours and PoCL's) at the
    same time: all right; a fifth loads every program from the binaries they left."""
    for attempt in range(2):
        # PoCL 3.1 itself crashed once (SIGSEGV in a child, 1 full-suite run of ~20) while four
        # processes compiled into one fresh PoCL cache: a driver race outside functrace's cache,
        # which is what this test checks. Such a crash is tried once more in fresh directories.
        root = tmp_path / f"attempt{attempt}"
        env = {"POCL_CACHE_DIR": str(root / "pocl")}
        procs = [child("print(tanh_programs([2.0]))", root / "ft", env) for _ in range(4)]
        for p in procs:
            p.wait(timeout=120)
        if attempt == 0 and any(p.returncode is not None and p.returncode < 0 for p in procs):
            continue
        for p in procs:
            assert float(finished(p)) < 1e-6
        break
    tmp_path = root
    assert len(valid_entries(tmp_path / "ft")) == 1
    assert not list((tmp_path / "ft" / "opencl").glob(".tmp-*"))
    worst, loads = finished(child("print(tanh_programs([2.0]), len(loads))", tmp_path / "ft", env)).split()
    assert float(worst) < 1e-6 and int(loads) == 1


def fail_the_first_build(monkeypatch) -> tuple:
    """(the real ``Program.build``, the failures so far): the next build fails as one that lost
    PoCL's cache race does, the ones after it build."""
    real_build = rt.cl.Program.build
    failures = []

    def racing_build(self, *args, **kwargs):
        if not failures:
            failures.append(1)
            raise RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE")
        return real_build(self, *args, **kwargs)
    monkeypatch.setattr(rt.cl.Program, "build", racing_build)
    return real_build, failures


def test_a_build_that_fails_once_is_tried_again(monkeypatch):
    """PoCL's cache races between processes building one program at once (one deletes
    ``program.bc`` as another replaces it): that build fails once with a bare
    BUILD_PROGRAM_FAILURE, and succeeds when tried again."""
    real_build, failures = fail_the_first_build(monkeypatch)
    prog = rt._build(rt.cl.Program(rt.context, SCALE.format("2.0")), "")
    monkeypatch.setattr(rt.cl.Program, "build", real_build)
    buf = rt.to_device(np.ones(4, np.float32))
    prog.scale(rt.queue, (4,), None, buf.buffer)
    assert failures and (np.asarray(buf) == 2.0).all()


def test_the_probe_build_that_fails_once_is_tried_again(monkeypatch, tmp_path):
    """The probe build that decides, after a build failed, whether the device can build at all
    races in PoCL's cache the same way: one failure must not drop the device."""
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path))  # (no verdict kept on disk)
    monkeypatch.setattr(cl_runtime, "_state", {})
    _, failures = fail_the_first_build(monkeypatch)
    assert cl_runtime.usable(rt.device) and failures


KILLED_WHILE_WRITING = """
real_replace = os.replace
def killed_mid_write(tmp, path):
    if path.endswith(".bin"):  # a program binary: half of it written, then the process dies
        with open(tmp, "r+b") as f:
            f.truncate(os.path.getsize(tmp) // 2)
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(tmp, path)
os.replace = killed_mid_write
tanh_programs()
"""


def test_a_process_killed_while_writing_the_cache(tmp_path):
    """SIGKILL in the middle of writing an entry leaves a partial temporary file, never a partial
    entry: the next process computes right and writes the entry."""
    proc = child(KILLED_WHILE_WRITING, tmp_path)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert not list((tmp_path / "opencl").glob("*.bin"))
    (partial,) = (tmp_path / "opencl").glob(".tmp-*")
    assert partial.stat().st_size > 0
    assert float(finished(child("print(tanh_programs())", tmp_path))) < 1e-6
    assert len(valid_entries(tmp_path)) == 2


# ---------------------------------------------------------------------- PoCL's cache directory

def test_an_unwritable_pocl_cache_is_named_and_leaves_no_verdict(tmp_path, monkeypatch):
    """PoCL fails every build with a bare BUILD_PROGRAM_FAILURE when it cannot write its cache:
    the error says so and how to fix it, and no verdict about any device is kept (neither the
    probe build's nor the 512-bit probe's)."""
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    monkeypatch.setenv("POCL_CACHE_DIR", str(blocker / "pocl"))
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path / "ft"))
    monkeypatch.setattr(cl_runtime, "_state", {})

    def failing_build(self, *args, **kwargs):
        raise RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE")

    def no_probe(device):
        raise AssertionError("a build failure from the environment is no reason to probe the driver")
    monkeypatch.setattr(rt.cl.Program, "build", failing_build)
    monkeypatch.setattr(cl_runtime, "usable", no_probe)
    with pytest.raises(cl_runtime.OpenCLEnvironmentError, match="(?s)PoCL's cache directory .*a-file.*"
                                                                 "Set POCL_CACHE_DIR to a writable directory"):
        rt._build(rt.cl.Program(rt.context, SCALE.format("2.0")), "")

    monkeypatch.setattr(cl_runtime, "_may_crash_process", lambda device: True)
    monkeypatch.setattr(cl_runtime, "_WIDE_PROBE_CHILD",
                        "print('ready', flush=True); raise RuntimeError('clBuildProgram failed: BUILD_PROGRAM_FAILURE')")
    with pytest.raises(cl_runtime.OpenCLEnvironmentError, match="POCL_CACHE_DIR"):
        cl_runtime.crash_reason(rt.device)
    assert not (tmp_path / "ft").exists()


def test_a_read_only_pocl_cache_end_to_end(tmp_path):
    """The real driver with a read-only POCL_CACHE_DIR: one clear error, no verdict kept."""
    (tmp_path / "pocl").mkdir()
    (tmp_path / "pocl").chmod(0o555)
    code = ("try:\n    tanh_programs()\nexcept R.OpenCLEnvironmentError as e:\n    print(e)\n")
    out = finished(child(code, tmp_path / "ft", {"POCL_CACHE_DIR": str(tmp_path / "pocl")}, prefix=unprivileged()))
    assert "is not writable" in out and "Set POCL_CACHE_DIR to a writable directory" in out, out
    assert not [p.name for p in (tmp_path / "ft").rglob("*-*") if p.name.startswith(("usable-", "wide-"))]


@pytest.mark.parametrize("env, expected", [
    ({"POCL_CACHE_DIR": "/p", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/p"),
    ({"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/pocl/kcache"),
    ({"XDG_CACHE_HOME": "", "HOME": "/h"}, "/h/.cache/pocl/kcache"),
    ({"HOME": "/h", "POCL_KERNEL_CACHE": "0"}, "/h/.cache/pocl/uncached"),
])
def test_where_pocl_keeps_its_cache(env, expected, monkeypatch):
    for name in ("POCL_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "POCL_KERNEL_CACHE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cl_runtime._pocl_cache_dir() == expected


# ---------------------------------------------------------------------- interrupts

INTERRUPTED_SCAN = """
step = lambda c: fnp.sin(c) * 0.5 + 0.25
def scan_of(n):
    return ft.jit(lambda x: lax.scan(lambda c, _: (step(c), None), x, None, length=n)[0], backend="opencl")
x = np.linspace(0, 1, 1 << 18, dtype=np.float32)
want = x
for _ in range(3):
    want = np.sin(want) * np.float32(0.5) + np.float32(0.25)
short = scan_of(3)
long = scan_of(10 ** 6).lower(x).compile()  # minutes of kernels
np.asarray(short(x))
try:  # (ready inside the try: a SIGINT that comes before the call still ends in the handler)
    print("ready", flush=True)
    np.asarray(long(x))
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
print(float(np.max(np.abs(np.asarray(short(x)) - want))), flush=True)
"""


def test_ctrl_c_during_a_long_computation_stops_it_and_jit_works_afterwards(tmp_path):
    """SIGINT during a scan of a million kernel steps (minutes of kernels): KeyboardInterrupt
    within seconds (15: a loaded CI machine may not run the child for a while; a second SIGINT
    after 5), and jitted code runs right afterwards (once the kernels already queued have run)."""
    proc = child(INTERRUPTED_SCAN, tmp_path)
    watchdog = threading.Timer(120, proc.kill)  # a child that hangs fails the test, not the suite
    watchdog.start()
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(0.5)
        sent = time.perf_counter()
        for _ in range(3):  # a SIGINT whose handler runs inside a __del__ is lost (Python ignores
            proc.send_signal(signal.SIGINT)  # what __del__ raises): a user presses Ctrl-C again
            if select.select([proc.stdout], [], [], 5.0)[0]:
                break
        line = proc.stdout.readline().strip()
        waited = time.perf_counter() - sent
        assert line == "interrupted", proc.stderr.read()
        assert waited < 15.0
        assert float(finished(proc, timeout=60)) < 1e-6
    finally:
        watchdog.cancel()
        proc.kill()


INTERRUPTED_BETWEEN_LAUNCHES = """
def f(x):  # a chain of kernels that all read x (32 MB: freed memory is unmapped)
    s = fnp.float32(0.0)
    for _ in range(4):
        s = fnp.sum(fnp.sin(fnp.exp(x + s * 1e-9)))
    return s
g = ft.jit(f, backend="opencl")
want = float(np.asarray(g(np.linspace(0, 1, 1 << 23, dtype=np.float32))))
launches = [0]
real_launch = R.Kernel.__call__
def launch(self, *args):
    real_launch(self, *args)
    launches[0] += 1
    if launches[0] == 3:
        raise KeyboardInterrupt
R.Kernel.__call__ = launch
try:
    g(np.linspace(0, 1, 1 << 23, dtype=np.float32))
except KeyboardInterrupt:
    pass
R.Kernel.__call__ = real_launch
junk = [np.full(1 << 22, i, np.float32) for i in range(8)]  # reuse the memory just freed
print(float(np.asarray(g(np.linspace(0, 1, 1 << 23, dtype=np.float32)))) == want)
"""


def test_an_interrupt_between_launches_keeps_the_queued_kernels_memory_alive(tmp_path):
    """A KeyboardInterrupt between two kernel launches of one call used to free the call's arrays
    (on a CPU device: numpy memory) while the queued kernels still read them: a segfault or
    garbage.  They are now held until the queue has run."""
    assert finished(child(INTERRUPTED_BETWEEN_LAUNCHES, tmp_path)).strip() == "True"
