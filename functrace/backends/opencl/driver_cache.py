"""PoCL's kernel cache, checked before PoCL reads it.

On PoCL functrace relies on the driver's own disk cache of built programs (see ``runtime``):
one directory per program (``XX/<rest of PoCL's build hash>``) holding its LLVM bitcode
(``program.bc``) and, per kernel and launch shape, a shared object PoCL ``dlopen``s.  A truncated
file there (a process killed while writing, a full disk) aborts or crashes every later process
that builds or launches that program, inside the driver (SIGABRT in ``pocl_llvm_build.cc``,
SIGBUS in ``dlopen``), where no exception can report it.

``CacheGuard`` keeps, beside PoCL's entries (in ``functrace-checksums/``), a manifest per entry
(the size and SHA-256 of each of its files, and the functrace programs that use it) and a record
of each program's entry, each written atomically with a checksum bound to its name
(``disk_cache.write_entry``); an entry with a manifest holds a mark (``functrace-recorded``: in
PoCL's directory, so that losing ``functrace-checksums/`` does not make it look never recorded).
Before a program is built its entry is checked: a file that differs from the manifest, a file
the manifest names that is missing, or a file it does not name that is not a complete ELF object
or bitcode file (e.g. one a killed process left) gets the whole entry deleted, so PoCL rebuilds it
from source.  A manifest that does not verify -- damaged, missing, another entry's, in another
format -- vouches for nothing: a marked entry without a valid one is deleted too.  A program
without a valid record may use any entry, so first every entry is settled: one whose manifest
names the program is its entry, checked as above; each marked entry without a valid manifest is
deleted; each unmarked one (another program's, or one whose builder died before recording it) is
adopted when its files are whole by their structure, else deleted.  Its entry is then found as
the one its build created or touched.  Files made after a build (shared objects at first
launches) are added to the manifest at exit; until then, as in an entry never recorded, only
their structure is checked (deleting one a live process is about to load would abort that
process).
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import struct
import sys
import threading
import time

from .disk_cache import read_entry, write_entry

MANIFESTS = "functrace-checksums"  # a name PoCL's two-letter hash directories never take
# in each entry functrace has written a manifest for (a name PoCL's files never take: kernel names have no "-")
MARK = "functrace-recorded"
BITCODE = "program.bc"  # what PoCL builds an entry from
# not recorded: files PoCL rewrites or appends to (never loaded as code), and the mark
_UNRECORDED = ("last_accessed", "build.log", MARK)
_ENTRY_KEY, _PROGRAM_KEY = "pocl-entry|", "pocl-program|"  # what each record's checksum is bound to, before its name
_SHA256 = re.compile("[0-9a-f]{64}")


def driver_loaded() -> bool:
    """Has this process loaded PoCL already (its settings, POCL_CACHE_DIR included, are read then)?
    Where the process's mappings cannot be read: when pyopencl has been imported."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return b"libpocl" in f.read()
    except OSError:
        return "pyopencl" in sys.modules


# ---------------------------------------------------------------------- structural checks

def _elf_complete(data: bytes) -> bool:
    """Does every segment, section and header table of the ELF object ``data`` lie inside it?"""
    if len(data) < 52 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return False
    e = "<" if data[5] == 1 else ">"
    wide = data[4] == 2
    if wide and len(data) < 64:
        return False
    phoff, shoff = struct.unpack_from(e + ("QQ" if wide else "II"), data, 32 if wide else 28)
    phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", data, 54 if wide else 42)
    size = len(data)
    if phoff + phnum * phentsize > size or shoff + shnum * shentsize > size:
        return False
    # (offset, size) fields of a program header, then of a section header
    ph = (e + "Q", 8, 32) if wide else (e + "I", 4, 16)
    sh = (e + "Q", 24, 32) if wide else (e + "I", 16, 20)
    for i in range(phnum):
        at = phoff + i * phentsize
        start = struct.unpack_from(ph[0], data, at + ph[1])[0]
        if start + struct.unpack_from(ph[0], data, at + ph[2])[0] > size:
            return False
    for i in range(shnum):
        at = shoff + i * shentsize
        if struct.unpack_from(e + "I", data, at + 4)[0] in (0, 8):  # SHT_NULL, SHT_NOBITS: no bytes
            continue
        start = struct.unpack_from(sh[0], data, at + sh[1])[0]
        if start + struct.unpack_from(sh[0], data, at + sh[2])[0] > size:
            return False
    return True


def _bitcode_complete(data: bytes) -> bool:
    """Is ``data`` an LLVM bitcode file whose top-level blocks (each with its length in words)
    fill it exactly, one of them a module?"""
    if data[:4] == b"\xde\xc0\x17\x0b":  # the wrapper header: magic, version, offset, size, cpu
        if len(data) < 20:
            return False
        offset, length = struct.unpack_from("<II", data, 8)
        if offset + length > len(data):
            return False
        data = data[offset:offset + length]
    if data[:4] != b"BC\xc0\xde" or len(data) % 4:
        return False
    total = len(data) * 8

    def bits(pos: int, n: int) -> int:  # the stream's bits are read from each byte's lowest up
        if pos + n > total:
            raise IndexError
        chunk = int.from_bytes(data[pos // 8:(pos + n + 7) // 8 + 1], "little")
        return (chunk >> (pos % 8)) & ((1 << n) - 1)

    def vbr(pos: int, n: int) -> tuple[int, int]:
        value, shift = 0, 0
        while True:
            piece = bits(pos, n)
            pos += n
            value |= (piece & ((1 << (n - 1)) - 1)) << shift
            shift += n - 1
            if not piece >> (n - 1):
                return value, pos

    pos, blocks = 32, set()
    try:
        while pos < total:
            if bits(pos, 2) != 1:  # ENTER_SUBBLOCK: all the top level holds
                return False
            block, pos = vbr(pos + 2, 8)
            _, pos = vbr(pos, 4)
            pos = (pos + 31) // 32 * 32
            pos += 32 + bits(pos, 32) * 32
            if pos > total:
                return False
            blocks.add(block)
    except IndexError:
        return False
    return 8 in blocks  # MODULE_BLOCK


def looks_complete(name: str, data: bytes) -> bool:
    """Whether a file PoCL loads as code is whole, judged by its structure (other files: True)."""
    if name.endswith(".bc"):
        return _bitcode_complete(data)
    if name.endswith((".so", ".o")):
        return _elf_complete(data)
    return True


# ---------------------------------------------------------------------- the guard

def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _is_entry(name) -> bool:
    """Is ``name`` an entry of PoCL's cache as a record may name one (``XX/<rest>``, nothing outside)?"""
    parts = name.split("/") if isinstance(name, str) else []
    return (len(parts) == 2 and len(parts[0]) == 2
            and all(p not in ("", ".", "..") and "\\" not in p for p in parts))


def _inside(rel) -> bool:
    """Is ``rel`` a path inside an entry (relative, no ``..``) naming a file functrace records?"""
    parts = rel.split("/") if isinstance(rel, str) else []
    return (bool(parts) and all(p not in ("", ".", "..") and "\\" not in p for p in parts)
            and parts[-1] not in _UNRECORDED)


def _manifest_of(record) -> dict | None:
    """The manifest a verified record holds -- ``{"files": {path: [size, sha256]}, "programs":
    [key, ...]}``, the bitcode PoCL builds the entry from among the files -- or None when it holds
    anything else (another format, paths outside the entry, no bitcode)."""
    if not isinstance(record, dict) or set(record) != {"files", "programs"}:
        return None
    files, programs = record["files"], record["programs"]
    if not isinstance(files, dict) or BITCODE not in files or not isinstance(programs, list) \
            or not all(isinstance(k, str) for k in programs):
        return None
    for rel, known in files.items():
        if not (_inside(rel) and isinstance(known, list) and len(known) == 2 and type(known[0]) is int
                and known[0] >= 0 and isinstance(known[1], str) and _SHA256.fullmatch(known[1])):
            return None
    return {"files": dict(files), "programs": list(programs)}


class CacheGuard:
    """Checks and records the entries of the PoCL kernel cache in ``root``."""

    def __init__(self, root: str):
        self.root = root
        self.manifests = os.path.join(root, MANIFESTS)
        self._lock = threading.RLock()
        self._records: dict = {}  # entry -> its manifest as this process knows it
        self._checked: set = set()  # entries checked (or recorded) in this process
        self._built: set = set()  # entries of programs this process built: manifests updated at exit
        self._dirty: set = set()  # entries whose manifest changed since it was written
        self._exit_hook = False

    # ------------------------------------------------------------------ records

    def _entry_record(self, entry: str) -> str:
        return os.path.join(self.manifests, "entry-" + entry.replace("/", "-"))

    def _program_record(self, key: str) -> str:
        return os.path.join(self.manifests, "program-" + key)

    def _load(self, path: str, key: str):
        payload = read_entry(path, key)
        if payload is None:
            return None
        try:
            return json.loads(payload)
        except ValueError:
            return None

    def _store(self, path: str, key: str, value) -> bool:
        try:
            write_entry(path, key, json.dumps(value, sort_keys=True).encode())
            return True
        except OSError:
            return False  # not recorded: a later process treats the entry as one never recorded

    def _manifest(self, entry: str) -> dict | None:
        """``entry``'s manifest (read once per process), None while it has no valid one."""
        if entry not in self._records:
            manifest = _manifest_of(self._load(self._entry_record(entry), _ENTRY_KEY + entry))
            if manifest is None:
                return None
            self._records[entry] = manifest
        return self._records[entry]

    def _flush(self, entry: str) -> None:
        """Write ``entry``'s manifest if it changed, then mark the entry as recorded."""
        if entry in self._dirty and entry in self._records:
            if self._store(self._entry_record(entry), _ENTRY_KEY + entry, self._records[entry]):
                self._dirty.discard(entry)
                try:  # (not in an entry deleted meanwhile: the directory is not made again)
                    os.close(os.open(os.path.join(self.root, entry, MARK), os.O_CREAT | os.O_WRONLY, 0o644))
                except OSError:
                    pass

    # ------------------------------------------------------------------ the cache's contents

    def _entries(self) -> set:
        """Every entry of the cache (``XX/<rest of the hash>``)."""
        found = set()
        try:
            tops = [d for d in os.scandir(self.root) if len(d.name) == 2 and d.is_dir(follow_symlinks=False)]
        except OSError:
            return found
        for top in tops:
            try:
                found.update(f"{top.name}/{d.name}" for d in os.scandir(top.path) if d.is_dir(follow_symlinks=False))
            except OSError:
                continue
        return found

    def _stamp(self, entry: str) -> int:
        """When PoCL last used ``entry`` (ns; 0: unknown)."""
        try:
            return os.stat(os.path.join(self.root, entry, "last_accessed")).st_mtime_ns
        except OSError:
            return 0

    def _walk(self, entry: str):
        """(path relative to the entry, full path) of each file of ``entry`` PoCL may load."""
        base = os.path.join(self.root, entry)
        for parent, _, names in os.walk(base):
            for name in names:
                if name not in _UNRECORDED:
                    full = os.path.join(parent, name)
                    yield os.path.relpath(full, base).replace(os.sep, "/"), full

    def _check(self, entry: str, how: str) -> bool:
        """Does ``entry`` agree with its manifest -- every file the manifest names there and alike
        (``how`` "full"; after this process's own build, "new": not asked, and files gone leave the
        manifest) -- and is every file the manifest does not name whole by its structure?  Such
        files join the manifest."""
        files = self._records[entry]["files"]
        seen = set()
        for rel, full in self._walk(entry):
            known = files.get(rel)
            if known is not None and how == "new":
                seen.add(rel)
                continue
            data = _read(full)
            if data is None:
                continue  # gone meanwhile: PoCL makes it again
            seen.add(rel)
            if known is not None:
                if known != [len(data), hashlib.sha256(data).hexdigest()]:
                    return False
            elif not looks_complete(rel, data):
                return False
            else:
                files[rel] = [len(data), hashlib.sha256(data).hexdigest()]
                self._dirty.add(entry)
        gone = [rel for rel in files if rel not in seen]
        if gone and how == "full":
            return False  # a manifest naming files the entry lacks is not the entry's
        for rel in gone:
            del files[rel]
            self._dirty.add(entry)
        return True

    def _discard(self, entry: str) -> None:
        """Delete ``entry`` and its manifest: PoCL builds it again from source."""
        shutil.rmtree(os.path.join(self.root, entry), ignore_errors=True)
        try:
            os.unlink(self._entry_record(entry))
        except OSError:
            pass
        self._records.pop(entry, None)
        self._checked.discard(entry)
        self._dirty.discard(entry)

    def _settle(self, entry: str) -> None:
        """An entry without a valid manifest: discarded when marked as recorded (its manifest was
        lost or damaged, so nothing vouches for its files); else (another program's, or one whose
        builder died before recording it) adopted when every file in it is whole by its structure
        (left as it is while it holds no bitcode: a build at work), discarded when one is not."""
        if os.path.exists(os.path.join(self.root, entry, MARK)):
            self._discard(entry)
            return
        self._records[entry] = {"files": {}, "programs": []}
        if not self._check(entry, "full"):
            self._discard(entry)
        elif BITCODE not in self._records[entry]["files"]:
            del self._records[entry]
            self._dirty.discard(entry)
        else:
            self._checked.add(entry)
            self._flush(entry)

    def _verify(self, entry: str) -> None:
        """Check the entry of the program being built (once per process) and delete it when it
        fails: PoCL builds it again from source."""
        if entry in self._checked:
            return
        if self._manifest(entry) is None:
            self._settle(entry)
        elif self._check(entry, "full"):
            self._checked.add(entry)
        else:
            self._discard(entry)

    def _survey(self, key: str) -> str | None:
        """Before building a program whose record is missing or not confirmed by its entry's
        manifest: settle every entry without a valid manifest (any might be that program's) and
        check each whose manifest names ``key``; the last of those, if any."""
        found = None
        for entry in sorted(self._entries()):
            manifest = self._manifest(entry)
            if manifest is None:
                self._settle(entry)
            elif key in manifest["programs"]:
                self._verify(entry)
                found = entry
        return found

    # ------------------------------------------------------------------ around a build

    def before(self, key: str):
        """Check the cache entry of the program ``key`` before PoCL reads it: the one its record
        names, and, unless that entry's manifest names the program too, every entry (see
        ``_survey``); what ``after`` needs."""
        with self._lock:
            recorded = self._load(self._program_record(key), _PROGRAM_KEY + key)
            if not (_is_entry(recorded) and os.path.isdir(os.path.join(self.root, recorded))):
                recorded = None
            if recorded is not None:
                self._verify(recorded)
            if recorded is not None and key in (self._manifest(recorded) or {"programs": ()})["programs"]:
                entry = recorded
            else:
                entry = self._survey(key) or recorded
            if entry is not None and os.path.isdir(os.path.join(self.root, entry)):
                if entry != recorded:
                    self._store(self._program_record(key), _PROGRAM_KEY + key, entry)
                return entry, self._stamp(entry), None
            return None, time.time_ns(), self._entries()  # (its entry deleted: found again after the build)

    def after(self, key: str, before, program=None) -> None:
        """Record the entry of the program ``key`` PoCL has just built (``before``: what
        ``before`` returned): the one it made, else the one it touched."""
        with self._lock:
            entry, stamp, listed = before
            if entry is not None:
                if self._stamp(entry) == stamp:  # a stale map (or another layout of PoCL's): learnt again
                    try:
                        os.unlink(self._program_record(key))
                    except OSError:
                        pass
                    manifest = self._manifest(entry)
                    if manifest is not None and key in manifest["programs"]:
                        manifest["programs"].remove(key)
                        self._dirty.add(entry)
                        self._flush(entry)
                    return
            else:
                now = self._entries()
                # a new entry, else one touched since (the file system's clock may lag the process's
                # by a tick) that is not another program's of this process
                candidates = now - listed or {e for e in now - self._built if self._stamp(e) >= stamp - 20_000_000}
                if len(candidates) > 1 and program is not None:  # another process built at once
                    candidates = {e for e in candidates if self._names_in(e, program)}
                if len(candidates) != 1:
                    return
                (entry,) = candidates
                self._store(self._program_record(key), _PROGRAM_KEY + key, entry)
            self._built.add(entry)
            if self._manifest(entry) is None:  # (new, or discarded before the build)
                self._records[entry] = {"files": {}, "programs": []}
            if key not in self._records[entry]["programs"]:
                self._records[entry]["programs"].append(key)
                self._dirty.add(entry)
            if self._check(entry, "new"):
                self._flush(entry)
            if not self._exit_hook:
                atexit.register(self.record)
                self._exit_hook = True

    def _names_in(self, entry: str, program) -> bool:
        """Does ``entry``'s bitcode name every kernel of ``program``?"""
        try:
            names = [n for n in program.kernel_names.split(";") if n]  # (pyopencl's KERNEL_NAMES info)
        except Exception:
            return True
        data = _read(os.path.join(self.root, entry, BITCODE)) or b""
        return all(n.encode() in data for n in names)

    def record(self) -> None:
        """Add the files made since (a kernel's shared object at its first launch in a new shape)
        to the manifests of the entries of the programs this process built (at exit)."""
        with self._lock:
            for entry in sorted(self._built):
                if entry in self._records and os.path.isdir(os.path.join(self.root, entry)) \
                        and self._check(entry, "new"):
                    self._flush(entry)

    def build(self, key: str, program, options: str, device):
        """``program.build(options=options)`` for ``device``, its cache entry checked before and
        recorded after."""
        seen = self.before(key)
        program.build(options=options, devices=[device])
        self.after(key, seen, program)
        return program


_guards: dict = {}
_guards_lock = threading.Lock()


def guard(root: str | None) -> CacheGuard | None:
    """The process's guard of the PoCL cache in ``root`` (None: no cache to guard)."""
    if not root:
        return None
    with _guards_lock:
        if root not in _guards:
            _guards[root] = CacheGuard(root)
        return _guards[root]
