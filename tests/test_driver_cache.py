"""PoCL's own kernel cache (``driver_cache``): a truncated or altered file in it made every later
process abort or crash inside the driver (SIGABRT in ``pocl_llvm_build.cc``, SIGBUS opening a
kernel's shared object); it is now checked against functrace's manifests, or by its structure,
before PoCL reads it, and rebuilt when it fails.  By default PoCL's cache lives in functrace's
cache directory; a ``POCL_CACHE_DIR`` the user set is kept and checked the same way.

The subprocess tests run the program of ``shared/repros/pocl_cache_truncated_abort.sh`` in
child processes (a few seconds each, mostly interpreter start-up and one compile)."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import driver_cache
from functrace.backends.opencl import runtime as cl_runtime

rt = cl_runtime.get_runtime()
pytestmark = pytest.mark.skipif(rt is None or "Portable Computing Language" not in rt.device.platform.name,
                                reason="PoCL's kernel cache: needs a PoCL device")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ft.__file__)))

# the repro's program; it also prints the POCL_CACHE_DIR it ran with
PROGRAM = """
import os
import numpy as np, functrace as ft, functrace.numpy as fnp
ft.config.update("opencl_small_program_elements", 0); ft.config.update("opencl_host_step_elements", 0)
f = ft.jit(lambda x: fnp.tanh(x * 3.0) + 1.0, backend="opencl")
x = np.ones(300000, np.float32)
for _ in range(3): y = f(x)
print("ok" if np.allclose(np.asarray(y), np.tanh(3.0) + 1.0) else "WRONG", os.environ.get("POCL_CACHE_DIR"))
"""
# a process that had PoCL loaded before functrace was first asked for a device
PRELOADED = "import pyopencl as cl\ncl.get_platforms()\n"


def run(tmp_path, env: dict | None = None, code: str = PROGRAM) -> str:
    """What a child running ``code`` printed; it must exit 0 within two minutes.  Its caches are in
    ``tmp_path`` (functrace's in ``ft``, XDG's in ``xdg``); no POCL_CACHE_DIR unless ``env`` sets one."""
    full = {k: v for k, v in os.environ.items() if k not in ("POCL_CACHE_DIR", "POCL_KERNEL_CACHE")}
    full.update(FUNCTRACE_CACHE_DIR=str(tmp_path / "ft"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
                PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-c", code], env=full, cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout.strip()


def code_files(pocl) -> dict:
    """{path: (inode, mtime)} of the files PoCL loads as code (bitcode, shared objects) in ``pocl``."""
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(pocl.rglob("*"))
            if p.is_file() and p.suffix in (".bc", ".so")}


def truncate(path) -> None:
    """As the repro does: keep 64 bytes and half of the rest."""
    data = path.read_bytes()
    path.write_bytes(data[:64 + (len(data) - 64) // 2])


def flip(path) -> None:
    """One bit in the middle: the size stays."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


# (where PoCL's cache is: the user's POCL_CACHE_DIR or functrace's own, what is damaged)
SCENARIOS = {
    # shared/repros/pocl_cache_truncated_abort.sh: every file over 256 bytes truncated
    "the user's directory, every file truncated": ("user", "every file", truncate),
    "functrace's directory, every file truncated": ("own", "every file", truncate),
    "functrace's directory, PoCL's files truncated": ("own", "PoCL's files", truncate),
    "functrace's directory, a bit of each of PoCL's files flipped": ("own", "PoCL's files", flip),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_damaged_pocl_cache_file_does_not_crash_a_later_process(scenario, tmp_path):
    """The repro: a process fills PoCL's cache, its files are damaged (a writer killed, a full
    disk; "every file": functrace's manifests too, as if none had been written), and the next
    process aborted in the driver (rc 134).  Now it and the one after it print the
    right numbers; the entry is rebuilt once and then reused (the third process rewrites no file)."""
    where, damaged, damage = SCENARIOS[scenario]
    pocl = tmp_path / "pocl" if where == "user" else tmp_path / "ft" / "opencl" / "pocl"
    env = {"POCL_CACHE_DIR": str(pocl)} if where == "user" else {}
    assert run(tmp_path, env) == f"ok {pocl}"
    assert not (tmp_path / "xdg" / "pocl").exists()  # nothing in PoCL's default directory
    built = code_files(pocl)
    assert any(p.name == "program.bc" for p in built) and any(p.suffix == ".so" for p in built)

    manifests = pocl / driver_cache.MANIFESTS
    victims = [p for p in pocl.rglob("*") if p.is_file() and p.stat().st_size > 256
               and (damaged == "every file" or manifests not in p.parents)]
    assert set(built) <= set(victims)
    for p in victims:
        damage(p)
    damaged_files = {p: p.read_bytes() for p in built}

    assert run(tmp_path, env) == f"ok {pocl}"
    rebuilt = code_files(pocl)
    for p, data in damaged_files.items():  # each damaged file was removed (and made again, if needed)
        assert not p.exists() or (p.read_bytes() != data and driver_cache.looks_complete(p.name, p.read_bytes()))
    assert run(tmp_path, env) == f"ok {pocl}"
    assert code_files(pocl) == rebuilt  # checked, trusted and reused: nothing rebuilt


def test_a_sound_pocl_cache_is_reused_as_it_is(tmp_path):
    """The checks cost no rebuild: a second process takes every file PoCL wrote."""
    pocl = tmp_path / "ft" / "opencl" / "pocl"
    assert run(tmp_path) == f"ok {pocl}"
    first = code_files(pocl)
    assert run(tmp_path) == f"ok {pocl}"
    assert code_files(pocl) == first
    assert {p.name.split("-")[0] for p in (pocl / driver_cache.MANIFESTS).iterdir()} == {"entry", "program"}


def test_pocl_loaded_before_functrace_keeps_its_directory_which_is_checked(tmp_path):
    """PoCL read its settings before functrace was asked for a device: functrace does not
    pretend to move its cache (POCL_CACHE_DIR stays unset) and checks the directory PoCL uses."""
    pocl = tmp_path / "xdg" / "pocl" / "kcache"
    assert run(tmp_path, code=PRELOADED + PROGRAM) == "ok None"
    assert (pocl / driver_cache.MANIFESTS).is_dir() and not (tmp_path / "ft" / "opencl" / "pocl").exists()
    for p in code_files(pocl):
        truncate(p)
    assert run(tmp_path, code=PRELOADED + PROGRAM) == "ok None"
    assert run(tmp_path, code=PRELOADED + PROGRAM) == "ok None"


def test_the_512_bit_probe_checks_its_entry_too(tmp_path):
    """The probe that tells whether a driver crashes on wide vector code builds and runs in a child
    process: a damaged entry of its program would kill that child, and the device would then be
    skipped as a crashing driver (a verdict kept on disk)."""
    code = "from functrace.backends.opencl import runtime as R\nprint(R._run_wide_probe(R.get_runtime().device))\n"
    env = {"POCL_CACHE_DIR": str(tmp_path / "pocl")}
    assert run(tmp_path, env, code) == "('ok', True)"
    probe = code_files(tmp_path / "pocl")
    assert any(p.suffix == ".so" for p in probe)
    for p in probe:
        truncate(p)
    assert run(tmp_path, env, code) == "('ok', True)"


@pytest.mark.parametrize("case", ["PoCL's cache off", "functrace's cache directory is a file"])
def test_where_functrace_leaves_pocl_its_own_settings(case, tmp_path):
    """POCL_KERNEL_CACHE=0 (nothing reused, nothing to check) and a functrace cache directory
    that cannot hold PoCL's (PoCL's default then): POCL_CACHE_DIR stays unset and all works."""
    env = {"POCL_KERNEL_CACHE": "0"}
    if case == "functrace's cache directory is a file":
        (tmp_path / "ft").write_bytes(b"not a directory")
        env = {}
    assert run(tmp_path, env) == "ok None"
    assert (tmp_path / "xdg" / "pocl").is_dir()


# ---------------------------------------------------------------------- the checks themselves

def _pocl_files() -> dict:
    """{path: content} of bitcode and shared objects in this process's PoCL cache entries (a
    program built to have some; other processes may be adding and removing files meanwhile)."""
    f = ft.jit(lambda x: fnp.tanh(x * 5.0) - 2.0, backend="opencl")
    x = np.linspace(-1, 1, 3000, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(f(x)), np.tanh(x * 5.0) - 2.0, rtol=1e-5, atol=1e-6)
    root = cl_runtime._pocl_cache_dir()
    found = {}
    for top in sorted(os.listdir(root)):
        if len(top) != 2:  # (PoCL's temporary files lie beside the entries)
            continue
        for parent, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                if name.endswith((".bc", ".so")) and len(found) < 40:
                    try:
                        with open(os.path.join(parent, name), "rb") as file:
                            found[os.path.join(parent, name)] = file.read()
                    except OSError:
                        pass
    assert any(p.endswith(".bc") for p in found) and any(p.endswith(".so") for p in found)
    return found


def test_the_structure_tells_whole_files_from_truncated_ones():
    """Bitcode (its top-level blocks fill the file) and ELF objects (every header, segment and
    section lies inside the file): a whole file passes, any truncation or garbage fails."""
    for path, data in _pocl_files().items():
        assert driver_cache.looks_complete(path, data), path
        for cut in sorted({1, 4, 52, 64, len(data) // 3, len(data) // 2, len(data) - 4, len(data) - 1}):
            if 0 < cut < len(data):
                assert not driver_cache.looks_complete(path, data[:cut]), (path, cut)
        assert not driver_cache.looks_complete(path, b"")
        assert not driver_cache.looks_complete(path, os.urandom(len(data)))
    assert driver_cache.looks_complete("build.log", b"anything")  # not loaded as code


def _fake_build(root, entry: str, files: dict, seconds_ago: float = 0.0) -> None:
    """What PoCL leaves of a build: the entry's files and its ``last_accessed`` touched."""
    for rel, data in files.items():
        path = os.path.join(root, entry, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    stamp = os.path.join(root, entry, "last_accessed")
    open(stamp, "ab").close()
    os.utime(stamp, ns=(time.time_ns() - int(seconds_ago * 1e9),) * 2)


@pytest.mark.parametrize("damage", ["truncated", "bit flipped", "unrecorded and truncated"])
def test_the_guard_deletes_an_entry_that_does_not_verify(damage, tmp_path):
    """A program's entry whose file differs from its manifest (truncated: by its size; a flipped
    bit: by its checksum), or holds a file no manifest covers that is not whole, is deleted
    before the build; other entries stay."""
    real = _pocl_files()
    bc = next(d for p, d in real.items() if p.endswith(".bc"))
    so = next(d for p, d in real.items() if p.endswith(".so"))
    files = {"program.bc": bc, "k/64-1-1/k.so": so}
    guard = driver_cache.CacheGuard(str(tmp_path))
    seen = guard.before("program-a")
    _fake_build(tmp_path, "AB/CDEF", files)
    guard.after("program-a", seen)
    _fake_build(tmp_path, "XY/ZZZZ", files)  # another program's entry, no manifest yet
    guard.record()

    victim = tmp_path / "AB" / "CDEF" / "k" / "64-1-1" / "k.so"
    if damage == "truncated":
        truncate(victim)
    elif damage == "bit flipped":
        flip(victim)
    else:
        (tmp_path / "AB" / "CDEF" / "k" / "32-1-1").mkdir()
        (tmp_path / "AB" / "CDEF" / "k" / "32-1-1" / "k.so").write_bytes(so[:len(so) // 2])
    guard = driver_cache.CacheGuard(str(tmp_path))  # a later process
    seen = guard.before("program-a")
    assert seen[0] == "AB/CDEF"
    assert not (tmp_path / "AB" / "CDEF").exists()
    assert (tmp_path / "XY" / "ZZZZ" / "program.bc").read_bytes() == bc
    # the rebuilt entry is recorded again, and trusted by the next process
    _fake_build(tmp_path, "AB/CDEF", files)
    guard.after("program-a", seen)
    guard = driver_cache.CacheGuard(str(tmp_path))
    assert guard.before("program-a")[0] == "AB/CDEF" and victim.read_bytes() == so


def test_an_unknown_program_has_every_unrecorded_entry_checked_first(tmp_path):
    """A program whose entry is not known yet (its first build here, or its builder died before
    recording) may be any entry: before its build every entry no manifest covers is checked by
    its structure (a whole one is adopted, one with a truncated file deleted); after it, the
    entry the build made (else touched) is the program's."""
    so = next(d for p, d in _pocl_files().items() if p.endswith(".so"))
    _fake_build(tmp_path, "AA/WHOLE", {"k/k.so": so}, seconds_ago=10)
    _fake_build(tmp_path, "BB/TRUNCATED", {"k/k.so": so[:-100]}, seconds_ago=10)
    guard = driver_cache.CacheGuard(str(tmp_path))
    seen = guard.before("program-x")
    assert seen[0] is None and sorted(seen[2]) == ["AA/WHOLE"]
    assert (tmp_path / driver_cache.MANIFESTS / "entry-AA-WHOLE").exists()
    _fake_build(tmp_path, "CC/MADE", {"k/k.so": so})
    guard.after("program-x", seen)
    assert driver_cache.CacheGuard(str(tmp_path)).before("program-x")[0] == "CC/MADE"

    seen = guard.before("program-y")  # one PoCL finds in its cache: the entry it touches is its
    _fake_build(tmp_path, "AA/WHOLE", {})
    guard.after("program-y", seen)
    assert driver_cache.CacheGuard(str(tmp_path)).before("program-y")[0] == "AA/WHOLE"
