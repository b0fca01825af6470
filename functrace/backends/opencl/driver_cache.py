"""PoCL's kernel cache, checked before PoCL reads it.

On PoCL functrace relies on the driver's own disk cache of built programs (see ``runtime``):
one directory per program (``XX/<rest of PoCL's build hash>``) holding its LLVM bitcode
(``program.bc``) and, per kernel and launch shape, a shared object PoCL ``dlopen``s.  A truncated
file there (a process killed while writing, a full disk) aborts or crashes every later process
that builds or launches that program, inside the driver (SIGABRT in ``pocl_llvm_build.cc``,
SIGBUS in ``dlopen``), where no exception can report it.

``CacheGuard`` keeps, beside PoCL's entries (in ``functrace-checksums/``), a manifest per entry
(the size and SHA-256 of each of its files) and a map from each functrace program to its entry.
Before a program is built its entry is checked: a file that differs from its manifest, or a
file no manifest covers that is not a complete ELF object or bitcode file (e.g. one a killed
process left), gets the whole entry deleted, so PoCL rebuilds it from source.  A program
without a known entry first has every entry no manifest covers checked that way; its entry is
then found as the one its build created or touched.  Files made after a build (shared objects at
first launches) are added to the manifest at exit (a process killed before that leaves them to
the structural check).  Manifests are written atomically with a checksum
(``disk_cache.write_entry``).
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import struct
import sys
import threading
import time

from .disk_cache import read_entry, write_entry

MANIFESTS = "functrace-checksums"  # a name PoCL's two-letter hash directories never take
# files PoCL rewrites or appends to (never loaded as code): not recorded
_MUTABLE = ("last_accessed", "build.log")


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


class CacheGuard:
    """Checks and records the entries of the PoCL kernel cache in ``root``."""

    def __init__(self, root: str):
        self.root = root
        self.manifests = os.path.join(root, MANIFESTS)
        self._lock = threading.RLock()
        self._files: dict = {}  # entry -> its manifest ({file: [size, sha256]}) as this process knows it
        self._checked: dict = {}  # entry -> how it was checked in this process ("full" or "sizes")
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

    def _store(self, path: str, key: str, value) -> None:
        try:
            write_entry(path, key, json.dumps(value, sort_keys=True).encode())
        except OSError:
            pass  # not recorded: a later process checks the files by their structure

    def _manifest(self, entry: str) -> dict:
        if entry not in self._files:
            record = self._load(self._entry_record(entry), "pocl-entry|" + entry)
            files = record.get("files") if isinstance(record, dict) else None
            self._files[entry] = dict(files) if isinstance(files, dict) else {}
            if files is None:
                self._dirty.add(entry)
        return self._files[entry]

    def _flush(self, entry: str) -> None:
        if entry in self._dirty and entry in self._files:
            self._store(self._entry_record(entry), "pocl-entry|" + entry, {"files": self._files[entry]})
            self._dirty.discard(entry)

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
                if name not in _MUTABLE:
                    full = os.path.join(parent, name)
                    yield os.path.relpath(full, base).replace(os.sep, "/"), full

    def _check(self, entry: str, how: str) -> bool:
        """Does ``entry`` agree with its manifest -- by content (``how`` "full"), by file sizes
        ("sizes"), or not asked ("new") -- and is every file the manifest lacks whole by its
        structure?  Such files join the manifest; files gone leave it."""
        files = self._manifest(entry)
        seen = set()
        for rel, full in self._walk(entry):
            known = files.get(rel)
            if known is not None:
                seen.add(rel)
                if how == "sizes":
                    try:
                        if os.stat(full).st_size != known[0]:
                            return False
                    except OSError:
                        seen.discard(rel)
                    continue
                if how == "new":
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
        for rel in [r for r in files if r not in seen]:
            del files[rel]
            self._dirty.add(entry)
        return True

    def _verify(self, entry: str, how: str) -> None:
        """Check ``entry`` (once per process, or once more by content after a check of sizes) and
        delete it when it fails: PoCL builds it again from source."""
        if self._checked.get(entry) in (how, "full"):
            return
        if self._check(entry, how):
            self._checked[entry] = how
            return
        shutil.rmtree(os.path.join(self.root, entry), ignore_errors=True)
        for path in (self._entry_record(entry),):
            try:
                os.unlink(path)
            except OSError:
                pass
        self._files.pop(entry, None)
        self._checked.pop(entry, None)
        self._dirty.discard(entry)

    # ------------------------------------------------------------------ around a build

    def before(self, key: str):
        """Check the cache entry of the program ``key`` before PoCL reads it (when that entry is
        not known: every entry no manifest covers, by its structure); what ``after`` needs."""
        with self._lock:
            entry = self._load(self._program_record(key), "pocl-program|" + key)
            if isinstance(entry, str) and os.path.isdir(os.path.join(self.root, entry)):
                self._verify(entry, "full")
                return entry, self._stamp(entry), None
            try:
                recorded = set(os.listdir(self.manifests))
            except OSError:
                recorded = set()
            for e in self._entries():
                if os.path.basename(self._entry_record(e)) not in recorded:
                    self._verify(e, "sizes")  # (no manifest: by structure alone)
                    self._flush(e)  # (it has a manifest now)
            return None, time.time_ns(), self._entries()

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
                self._store(self._program_record(key), "pocl-program|" + key, entry)
            self._built.add(entry)
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
        data = _read(os.path.join(self.root, entry, "program.bc")) or b""
        return all(n.encode() in data for n in names)

    def record(self) -> None:
        """Add the files made since (a kernel's shared object at its first launch in a new shape)
        to the manifests of the entries of the programs this process built (at exit)."""
        with self._lock:
            for entry in sorted(self._built):
                if os.path.isdir(os.path.join(self.root, entry)) and self._check(entry, "new"):
                    self._flush(entry)

    def build(self, key: str, program, options: str = ""):
        """``program.build(options=options)``, its cache entry checked before and recorded after."""
        seen = self.before(key)
        program.build(options=options)
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
