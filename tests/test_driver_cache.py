"""PoCL's own kernel cache (``driver_cache``): a truncated or altered file in it made every later
process abort or crash inside the driver (SIGABRT in ``pocl_llvm_build.cc``, SIGBUS opening a
kernel's shared object); it is now checked against functrace's manifests, or by its structure,
before PoCL reads it, and rebuilt when it fails.  By default PoCL's cache lives in functrace's
cache directory; a ``POCL_CACHE_DIR`` the user set is kept and checked the same way.  A damaged
manifest (``shared/repros/cache_guard_bypassed_abort.py``, issue 37) vouches for nothing.

The subprocess tests run the program of ``shared/repros/pocl_cache_truncated_abort.sh`` (or two
programs like it) in child processes (a few seconds each, mostly interpreter start-up and one
compile)."""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import disk_cache, driver_cache, pyopencl_cache
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


# ---------------------------------------------------------------------- damaged manifests

# two programs (two PoCL entries, two manifests of each kind), the numbers checked
TWO_PROGRAMS = """
import numpy as np, functrace as ft, functrace.numpy as fnp
ft.config.update("opencl_small_program_elements", 0); ft.config.update("opencl_host_step_elements", 0)
x = np.linspace(-2, 2, 4096).astype(np.float32)
ok = all(np.allclose(np.asarray(ft.jit(lambda x: fnp.tanh(x * c) + c, backend="opencl")(x)), np.tanh(x * c) + c,
                     rtol=1e-5, atol=1e-5) for c in (2.0, 3.0))
print("ok" if ok else "WRONG")
"""


@pytest.fixture(scope="module")
def filled_caches(tmp_path_factory):
    """The caches (functrace's, XDG's) a process running ``TWO_PROGRAMS`` left, copied by each test."""
    base = tmp_path_factory.mktemp("filled")
    assert run(base, code=TWO_PROGRAMS) == "ok"
    return base


def _records(pocl, kind: str) -> list:
    return sorted((pocl / driver_cache.MANIFESTS).glob(kind + "-*"))


def _rewrite(path, payload) -> None:
    """Write ``payload`` into the record ``path`` with a checksum that verifies (another format)."""
    name = path.name
    key = ("pocl-entry|" + name[len("entry-"):].replace("-", "/", 1) if name.startswith("entry-")
           else "pocl-program|" + name[len("program-"):])
    disk_cache.write_entry(str(path), key, json.dumps(payload).encode())


def _damage_records(pocl, mode: str) -> None:
    entries, programs = _records(pocl, "entry"), _records(pocl, "program")
    assert len(entries) == len(programs) == 2
    if mode == "garbage":
        for p in entries + programs:
            p.write_bytes(os.urandom(p.stat().st_size))
    elif mode == "truncated":
        for p in entries + programs:
            p.write_bytes(p.read_bytes()[:p.stat().st_size // 2])
    elif mode == "missing":
        for p in entries + programs:
            p.unlink()
    elif mode == "program records missing":  # the entries' manifests intact: each names its program
        for p in programs:
            p.unlink()
    elif mode == "wrong format":
        for p in entries:  # (the files without the programs: what an older functrace wrote)
            _rewrite(p, {"files": json.loads(disk_cache.read_entry(str(p), "pocl-entry|" + p.name[6:].replace("-", "/", 1)))["files"]})
        for p in programs:
            _rewrite(p, ["not", "an", "entry"])
    elif mode == "names of files that do not exist":  # program records intact
        for p in entries:
            manifest = json.loads(disk_cache.read_entry(str(p), "pocl-entry|" + p.name[6:].replace("-", "/", 1)))
            manifest["files"] = {"elsewhere/" + rel: known for rel, known in manifest["files"].items()}
            _rewrite(p, manifest)
    elif mode == "another payload's":  # each record holds the other record's file of its kind
        for pair in (entries, programs):
            first, second = (p.read_bytes() for p in pair)
            pair[0].write_bytes(second)
            pair[1].write_bytes(first)


MANIFEST_DAMAGE = ["garbage", "truncated", "missing", "program records missing", "wrong format",
                   "names of files that do not exist", "another payload's"]


@pytest.mark.parametrize("payload", ["truncated", "bit flipped"])
@pytest.mark.parametrize("mode", MANIFEST_DAMAGE)
def test_a_manifest_that_does_not_verify_vouches_for_nothing(mode, payload, filled_caches, tmp_path):
    """shared/repros/cache_guard_bypassed_abort.py: damaged manifests turned the guard off (an entry
    whose manifest file existed was trusted unread, one without was checked by its structure only),
    and a damaged ``program.bc`` (truncated, or one byte changed, which its structure does not show)
    then aborted every later process inside PoCL (SIGABRT).  Now the next process prints the right
    numbers, the damaged file is gone or rebuilt, and the entries are recorded again: a later
    check trusts them as they are."""
    for d in ("ft", "xdg"):
        shutil.copytree(filled_caches / d, tmp_path / d, symlinks=True)
    pocl = tmp_path / "ft" / "opencl" / "pocl"
    bitcode = sorted(pocl.glob("??/*/program.bc"))
    assert len(bitcode) == 2
    _damage_records(pocl, mode)
    damaged = {}
    for p in bitcode:
        if payload == "truncated":
            truncate(p)
        else:
            data = bytearray(p.read_bytes())
            data[len(data) // 2] ^= 0x5A  # (as the repro does)
            p.write_bytes(bytes(data))
        damaged[p] = p.read_bytes()

    assert run(tmp_path, code=TWO_PROGRAMS) == "ok"
    for p, data in damaged.items():
        assert not p.exists() or (p.read_bytes() != data and driver_cache.looks_complete(p.name, p.read_bytes()))
    keys = [p.name[len("program-"):] for p in _records(pocl, "program")]
    repaired = code_files(pocl)
    guard = driver_cache.CacheGuard(str(pocl))  # a later process's check
    entries = {guard.before(key)[0] for key in keys}
    assert len(keys) == len(entries) == 2 and None not in entries
    assert code_files(pocl) == repaired  # trusted as it is: nothing deleted
    assert {p.parent for p in repaired if p.name == "program.bc"} == {pocl / e for e in entries}


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
    assert seen[0] is None and not (tmp_path / "AB" / "CDEF").exists()
    assert (tmp_path / "XY" / "ZZZZ" / "program.bc").read_bytes() == bc
    # the rebuilt entry is recorded again, and trusted by the next process
    _fake_build(tmp_path, "AB/CDEF", files)
    guard.after("program-a", seen)
    guard = driver_cache.CacheGuard(str(tmp_path))
    assert guard.before("program-a")[0] == "AB/CDEF" and victim.read_bytes() == so


def test_an_unknown_program_has_every_unrecorded_entry_checked_first(tmp_path):
    """A program whose entry is not known yet (its first build here, or its builder died before
    recording) may be any entry: before its build every entry functrace never recorded is checked
    by its structure (a whole one is adopted, one with a truncated file deleted, one without
    bitcode yet -- a build at work -- left alone); after it, the entry the build made (else
    touched) is the program's."""
    real = _pocl_files()
    bc = next(d for p, d in real.items() if p.endswith(".bc"))
    so = next(d for p, d in real.items() if p.endswith(".so"))
    _fake_build(tmp_path, "AA/WHOLE", {"program.bc": bc, "k/k.so": so}, seconds_ago=10)
    _fake_build(tmp_path, "BB/TRUNCATED", {"program.bc": bc, "k/k.so": so[:-100]}, seconds_ago=10)
    (tmp_path / "DD" / "BUILDING").mkdir(parents=True)  # (PoCL makes the directory first)
    guard = driver_cache.CacheGuard(str(tmp_path))
    seen = guard.before("program-x")
    assert seen[0] is None and sorted(seen[2]) == ["AA/WHOLE", "DD/BUILDING"]
    assert (tmp_path / driver_cache.MANIFESTS / "entry-AA-WHOLE").exists()
    assert not (tmp_path / driver_cache.MANIFESTS / "entry-DD-BUILDING").exists()
    _fake_build(tmp_path, "CC/MADE", {"program.bc": bc, "k/k.so": so})
    guard.after("program-x", seen)
    assert driver_cache.CacheGuard(str(tmp_path)).before("program-x")[0] == "CC/MADE"

    seen = guard.before("program-y")  # one PoCL finds in its cache: the entry it touches is its
    _fake_build(tmp_path, "AA/WHOLE", {})
    guard.after("program-y", seen)
    assert driver_cache.CacheGuard(str(tmp_path)).before("program-y")[0] == "AA/WHOLE"


def _recorded_cache(root, bc: bytes, so: bytes) -> dict:
    """Two programs' entries as a process leaves them after building and running them (every
    file recorded); {key: entry}."""
    guard = driver_cache.CacheGuard(str(root))
    made = {"a": "AA/ONE", "b": "BB/TWO"}
    for key, entry in made.items():
        seen = guard.before(key)
        _fake_build(root, entry, {"program.bc": bc, "k/64-1-1/k.so": so})
        guard.after(key, seen)
    guard.record()
    return made


def test_an_entry_without_a_valid_manifest_is_discarded_when_recorded_before(tmp_path):
    """The mark in each recorded entry tells an entry whose manifest was lost (deleted before its
    program is built, whole or not) from one never recorded (adopted when whole); a program whose
    record was lost finds its entry by the manifest naming it, and that entry is checked."""
    real = _pocl_files()
    bc = next(d for p, d in real.items() if p.endswith(".bc"))
    so = next(d for p, d in real.items() if p.endswith(".so"))
    made = _recorded_cache(tmp_path, bc, so)
    assert all((tmp_path / e / driver_cache.MARK).exists() for e in made.values())
    _fake_build(tmp_path, "CC/NEVER", {"program.bc": bc}, seconds_ago=10)  # another program's entry

    (tmp_path / driver_cache.MANIFESTS / "program-a").unlink()
    (tmp_path / driver_cache.MANIFESTS / "program-b").unlink()
    (tmp_path / driver_cache.MANIFESTS / "entry-BB-TWO").unlink()
    flip(tmp_path / "AA" / "ONE" / "program.bc")  # (its structure is still whole)
    guard = driver_cache.CacheGuard(str(tmp_path))
    seen = guard.before("a")
    assert seen[0] is None and not (tmp_path / "AA" / "ONE").exists()  # its manifest names it: checked
    assert not (tmp_path / "BB" / "TWO").exists()  # recorded, manifest lost: discarded though whole
    assert (tmp_path / "CC" / "NEVER" / "program.bc").read_bytes() == bc  # never recorded: adopted
    assert (tmp_path / "CC" / "NEVER" / driver_cache.MARK).exists()
    _fake_build(tmp_path, "AA/ONE", {"program.bc": bc})  # PoCL builds it again
    guard.after("a", seen)
    assert driver_cache.CacheGuard(str(tmp_path)).before("a")[0] == "AA/ONE"
    assert (tmp_path / "AA" / "ONE" / "program.bc").read_bytes() == bc


def test_the_guard_under_random_damage(tmp_path):
    """A fuzz of the guard (seeded): random damage to the records and the files PoCL loads --
    bits flipped, cut short, garbage, deleted, swapped, other formats with checksums that verify.
    After the check before its build, each program's entry is gone (PoCL builds it again) or
    every file in it is what PoCL wrote."""
    import random
    real = _pocl_files()
    bc = next(d for p, d in real.items() if p.endswith(".bc"))
    so = next(d for p, d in real.items() if p.endswith(".so"))
    pristine = tmp_path / "pristine"
    made = _recorded_cache(pristine, bc, so)
    written = {"program.bc": bc, "k/64-1-1/k.so": so}
    rnd = random.Random(37)

    def damage(path) -> None:
        data = path.read_bytes()
        how = rnd.choice(["flip", "flip", "cut", "garbage", "delete"])
        if how == "delete":
            path.unlink()
            return
        if how == "flip":
            new = bytearray(data)
            for _ in range(rnd.choice([1, 1, 3])):
                new[rnd.randrange(len(new))] ^= 1 << rnd.randrange(8)
        else:
            new = data[:rnd.randrange(len(data))] if how == "cut" else os.urandom(len(data))
        path.write_bytes(bytes(new))

    sha = {rel: [len(data), hashlib.sha256(data).hexdigest()] for rel, data in written.items()}
    formats = [[], {"files": {}}, {"files": {}, "programs": []}, {"files": {"../k.so": [1, "0" * 64]}, "programs": []},
               {"files": {"program.bc": [len(bc), "0" * 64]}, "programs": ["a", "b"]},
               {"files": {"program.bc": sha["program.bc"], "k/64-1-1/k.so.old": sha["k/64-1-1/k.so"]},
                "programs": ["a", "b"]}]  # (a file that is not there)
    for trial in range(150):
        root = tmp_path / f"t{trial}"
        shutil.copytree(pristine, root)
        records = sorted((root / driver_cache.MANIFESTS).iterdir())
        for path in records:
            if rnd.random() < 0.4 and path.exists():
                r = rnd.random()
                if r < 0.2:  # another record's file
                    path.write_bytes(rnd.choice([p for p in records if p.exists()]).read_bytes())
                elif r < 0.4:
                    _rewrite(path, rnd.choice(formats) if path.name.startswith("entry-")
                             else rnd.choice(["../..", "AA/ONE", "BB/TWO", 5]))
                else:
                    damage(path)
        for entry in made.values():
            for rel in written:
                if rnd.random() < 0.3:
                    damage(root / entry / rel)
        guard = driver_cache.CacheGuard(str(root))
        for key, entry in made.items():
            guard.before(key)
            base = root / entry
            found = {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*")
                     if p.is_file() and p.name not in ("last_accessed", driver_cache.MARK)} if base.exists() else {}
            assert all(written[rel] == data for rel, data in found.items()), (trial, key, sorted(found))
        shutil.rmtree(root)


# ---------------------------------------------------------------------- pyopencl's own caches

# The repro's program on a driver pyopencl does not trust to cache its builds (not PoCL, not
# NVIDIA's: e.g. Intel's or AMD's): pyopencl then keeps each program's binary in its own compiler
# cache (``pyopencl_cache``), which is not used on PoCL otherwise.
NO_DRIVER_CACHE = "import pyopencl.characterize as ch\nch.has_src_build_cache = lambda device: None\n"


def pyopencl_cache_files(tmp_path) -> list:
    """pyopencl's cache files under the children's XDG cache directory (its invoker cache in
    ``pytools/``, its compiler cache in ``pyopencl/``)."""
    return sorted(p for d in ("pytools", "pyopencl") for p in (tmp_path / "xdg" / d).rglob("*") if p.is_file())


def _stale_lock(tmp_path) -> None:
    """pyopencl's compiler cache lock as a process killed while holding it leaves it."""
    (lock,) = [d / "lock" for d in (tmp_path / "xdg" / "pyopencl").iterdir()]
    lock.write_bytes(b"")
    os.utime(lock, (time.time() - 120,) * 2)


# (the program's prefix, what is damaged)
PYOPENCL_SCENARIOS = {
    # the invoker cache (pytools' sqlite): "database disk image is malformed" at the first kernel
    "invoker cache truncated": ("", "every file"),
    "invoker cache truncated, pyopencl imported before functrace": (PRELOADED, "every file"),
    # the compiler cache: a truncated binary crashed the driver (SIGSEGV), a truncated info raised
    # KeyError: 'PYOPENCL_CACHE_FAILURE_FATAL'; a stale lock cost 60 s, then that KeyError
    "compiler cache and invoker cache truncated": (NO_DRIVER_CACHE, "every file"),
    "compiler cache, binaries truncated": (NO_DRIVER_CACHE, "binaries"),
    "compiler cache, a lock left by a killed process": (NO_DRIVER_CACHE, "lock"),
}


@pytest.mark.parametrize("scenario", list(PYOPENCL_SCENARIOS))
def test_a_damaged_pyopencl_cache_file_does_not_break_a_later_process(scenario, tmp_path):
    """A process fills pyopencl's caches, its files are damaged (a writer killed, a full disk),
    and every later process failed (``sqlite3.DatabaseError: database disk image is malformed``,
    a segfault, a KeyError, a 60 s stall).  Now the next processes print the right numbers:
    the damaged files were found before pyopencl opened them, deleted and made again."""
    prefix, damaged = PYOPENCL_SCENARIOS[scenario]
    code = prefix + PROGRAM
    pocl = tmp_path / "ft" / "opencl" / "pocl"
    expected = "ok None" if prefix == PRELOADED else f"ok {pocl}"
    assert run(tmp_path, code=code) == expected
    files = pyopencl_cache_files(tmp_path)
    assert any(p.suffix == ".sqlite" for p in files)
    if prefix == NO_DRIVER_CACHE:
        assert any(p.name == "binary" for p in files) and any(p.name == "info" for p in files)
    if damaged == "lock":
        _stale_lock(tmp_path)
    else:
        for p in files:
            if damaged == "every file" or p.name == "binary":
                truncate(p)
    start = time.monotonic()
    assert run(tmp_path, code=code) == expected
    assert time.monotonic() - start < 50  # (no wait on pyopencl's lock: it waits 60 s)
    assert run(tmp_path, code=code) == expected
    for p in pyopencl_cache_files(tmp_path):
        if p.suffix == ".sqlite":
            assert pyopencl_cache.sqlite_verdict(str(p))[0] is True, p
        if p.name == "info":
            assert pyopencl_cache.entry_sound(str(p.parent)) is True, p


def _pytools_file(directory, identifier: str = "pyopencl-invoker-cache-v42-nano", rows: int = 60) -> str:
    """A sqlite file as pytools writes one for pyopencl (``rows`` pickled entries: several pages)."""
    import pickle
    import sqlite3
    path = os.path.join(str(directory), f"pdict-v5-{identifier}-{pyopencl_cache._version()}.sqlite")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS dict (keyhash TEXT NOT NULL PRIMARY KEY, key_value TEXT NOT NULL)")
    for i in range(rows):
        conn.execute("INSERT INTO dict VALUES (?, ?)", (f"key{i}", pickle.dumps((i, os.urandom(700)))))
    conn.close()
    return path


def test_the_sqlite_check_tells_sound_from_damaged(tmp_path):
    """``PRAGMA quick_check``: a whole file passes, a truncated or overwritten one fails (an
    empty file is an empty database), and one another process holds locked is left alone."""
    import sqlite3
    path = _pytools_file(tmp_path)
    data = open(path, "rb").read()
    assert len(data) > 8 * 4096 and pyopencl_cache.sqlite_verdict(path) == (True, "")
    for cut in (50, 100, 4096, 5000, len(data) // 2, len(data) - 4096, len(data) - 1000):
        with open(path, "wb") as f:
            f.write(data[:cut])
        assert pyopencl_cache.sqlite_verdict(path)[0] is False, cut
    for at in (0, 4096, len(data) // 2):
        damaged = bytearray(data)
        damaged[at:at + 4096] = os.urandom(4096)
        with open(path, "wb") as f:
            f.write(bytes(damaged))
        assert pyopencl_cache.sqlite_verdict(path)[0] is False, at
    with open(path, "wb") as f:
        f.write(data)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert pyopencl_cache.sqlite_verdict(path)[0] is None  # busy: not judged
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_sound_file_is_checked_once_then_trusted_by_its_record(tmp_path, monkeypatch):
    """A file whose size, time and inode match the record of its last successful check is not
    opened again (the check of a large file costs ~2 ms per MB); one that changed is."""
    pytools = tmp_path / "pytools"
    pytools.mkdir()
    path = _pytools_file(pytools)
    record = str(tmp_path / "record")
    checked = []
    verdict = pyopencl_cache.sqlite_verdict
    monkeypatch.setattr(pyopencl_cache, "sqlite_verdict", lambda p: checked.append(p) or verdict(p))
    for _ in range(3):
        pyopencl_cache.check(record, [str(pytools)], [])
    assert checked == [path]
    os.utime(path, ns=(time.time_ns() + 10**9,) * 2)
    pyopencl_cache.check(record, [str(pytools)], [])
    assert checked == [path, path]
    truncate(pathlib.Path(path))
    for module in ("pyopencl", "pyopencl.invoker"):  # as in a process that has not opened the file yet
        monkeypatch.delitem(sys.modules, module, raising=False)
    pyopencl_cache.check(record, [str(pytools)], [])
    assert not os.path.exists(path)  # damaged: deleted (pyopencl makes an empty one)


def test_a_damaged_file_pyopencl_has_open_is_named_not_deleted(tmp_path):
    """pyopencl imported before functrace, its invoker module loaded: the invoker cache file is
    open in this process, so it is not deleted under pyopencl; a warning names it, once.  A
    dictionary whose module is not loaded yet (the scan kernels') is deleted as usual."""
    import warnings

    import pyopencl.invoker  # noqa: F401  (loaded: its file is open)
    invoker = _pytools_file(tmp_path)
    truncate(pathlib.Path(invoker))
    scan = None
    if "pyopencl.scan" not in sys.modules:
        scan = _pytools_file(tmp_path, "pyopencl-generated-scan-kernel-cache-v1")
        truncate(pathlib.Path(scan))
    pyopencl_cache._warned.discard(invoker)
    with pytest.warns(RuntimeWarning, match="delete that file|Delete that file") as caught:
        pyopencl_cache.check(None, [str(tmp_path)], [])
    assert any(invoker in str(w.message) for w in caught)
    assert os.path.exists(invoker)
    assert scan is None or not os.path.exists(scan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pyopencl_cache.check(None, [str(tmp_path)], [])  # once per process


def _compiler_entry(root, name: str, binary: bytes, info: bytes | None = None):
    """An entry of pyopencl's compiler cache as pyopencl writes one (source, binary, info)."""
    import pickle
    entry = root / name
    entry.mkdir(parents=True)
    (entry / "source.cl").write_bytes(b"__kernel void k() {}")
    (entry / "binary").write_bytes(binary)
    if info is not False:
        (entry / "info").write_bytes(pickle.dumps({"dependencies": [], "log": ""}) if info is None else info)
    return entry


def test_compiler_cache_entries_are_checked_under_pyopencl_lock(tmp_path):
    """An entry pyopencl would crash or fail on is deleted (a truncated ELF binary, an empty one,
    one written after its info, a truncated info, an info without its binary); a sound one, and
    one still without its info (pyopencl handles that itself), stay.  A lock older than 60 s is
    removed; while a live one is held nothing is checked."""
    import pickle
    so = next(d for p, d in _pocl_files().items() if p.endswith(".so"))
    root = tmp_path / "pyopencl" / f"pyopencl-compiler-cache-v2-py{pyopencl_cache._version()}"
    info = pickle.dumps({"dependencies": [], "log": ""})
    sound = [_compiler_entry(root, "elf", so), _compiler_entry(root, "other", b"not an ELF object"),
             _compiler_entry(root, "writing", so, info=False)]
    damaged = [_compiler_entry(root, "truncated-elf", so[:len(so) // 2]), _compiler_entry(root, "empty", b""),
               _compiler_entry(root, "truncated-info", so, info[:-3])]
    late = _compiler_entry(root, "binary-after-info", so)
    os.utime(late / "info", ns=(time.time_ns() - 10**9,) * 2)
    damaged.append(late)
    lonely = _compiler_entry(root, "no-binary", so)
    (lonely / "binary").unlink()
    damaged.append(lonely)

    lock = root / "lock"
    lock.write_bytes(b"")  # a live holder: nothing checked, nothing deleted
    pyopencl_cache.check(None, [], [str(tmp_path / "pyopencl")])
    assert lock.exists() and all(e.exists() for e in sound + damaged)

    os.utime(lock, (time.time() - 120,) * 2)  # its holder died
    record = str(tmp_path / "record")
    pyopencl_cache.check(record, [], [str(tmp_path / "pyopencl")])
    assert not lock.exists()
    assert all(e.exists() for e in sound) and not any(e.exists() for e in damaged)
    # the sound entries are recorded: a later change of their binary is found
    truncate(sound[0] / "binary")
    pyopencl_cache.check(record, [], [str(tmp_path / "pyopencl")])
    assert not sound[0].exists() and sound[1].exists()
