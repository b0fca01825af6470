"""pyopencl's own disk caches, checked before pyopencl opens them.

pyopencl keeps two caches of its own outside functrace's directory, and a damaged file in either
broke every later process (measured with pyopencl 2026.1 and pytools 2026.1):

* the *invoker cache* (the argument-setting code of each kernel signature): a pytools
  ``WriteOncePersistentDict``, one sqlite file per Python version in pytools' cache directory
  (``platformdirs.user_cache_dir("pytools")``: ``$XDG_CACHE_HOME/pytools`` or
  ``~/.cache/pytools`` on Linux), e.g. ``pdict-v5-pyopencl-invoker-cache-v42-nano-3.11.7.final.0.sqlite``
  (``pyopencl.scan`` keeps another).  pyopencl opens it when it makes its first kernel; a
  truncated file raised ``sqlite3.DatabaseError: database disk image is malformed`` there, in
  every later process.
* the *compiler cache* (``<user_cache_dir("pyopencl")>/pyopencl-compiler-cache-v2-py<version>``:
  one directory per program, its ``binary`` and a pickled ``info``, under a ``lock`` file), used
  on drivers pyopencl does not trust to cache builds themselves (not PoCL, not NVIDIA's).  A
  truncated ``binary`` crashed the process inside the driver (SIGSEGV with PoCL), an empty one,
  a truncated or garbage ``info`` or an ``info`` without its ``binary`` raised ``KeyError:
  'PYOPENCL_CACHE_FAILURE_FATAL'`` (pyopencl's handler of a cache failure fails itself), and a
  ``lock`` left by a process killed while holding it stalled every build 60 s before that error.

``check`` runs once per process before functrace imports pyopencl.  Each sqlite file gets
``PRAGMA quick_check`` (every b-tree page read and checked; ~0.3 ms for a small file, ~2 ms per
MB), unless its (size, mtime, inode) equals what functrace recorded after its last successful
check; a damaged file is deleted (with its journal) and pyopencl makes an empty one.  A file
whose owner (``pyopencl.invoker``) is already loaded in this process has its connection open:
it is not deleted, a warning names it instead.  In the compiler cache a ``lock`` older than 60 s
is removed, and each entry whose files differ from the record is checked under pyopencl's own
lock: its ``info`` must be a whole pickle, its ``binary`` present, non-empty, not written after
its ``info`` (pyopencl writes it first; a later change is damage) and, when it is an ELF object,
whole (``driver_cache.looks_complete``); an entry that fails is deleted and pyopencl builds it
again.  What this cannot see: a flipped bit inside a stored value (sqlite keeps no checksums of
its contents) or a non-ELF binary damaged before functrace first saw it without its time
changing.  ``PYOPENCL_NO_CACHE`` (pyopencl uses neither cache) skips it all.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import sqlite3
import sys
import time
import warnings

from .disk_cache import read_entry, write_entry
from .driver_cache import looks_complete

RECORD_NAME = "pyopencl-caches-checked"
_RECORD_KEY = "pyopencl-caches-checked|1"
STALE_LOCK_SECONDS = 60.0  # pyopencl's own waiters give up after 60 s: a lock older is its dead holder's
_SQLITE_TIMEOUT = 0.05  # s to wait for a writer of another process; after that: not checked this time
# the modules holding each pytools dictionary pyopencl keeps open (loaded: its file is open)
_OWNERS = {"pyopencl-invoker-cache": "pyopencl.invoker", "pyopencl-generated-scan-kernel-cache": "pyopencl.scan"}
_warned: set = set()


def _version() -> str:
    return ".".join(str(i) for i in sys.version_info)


def _user_cache_dirs(app: str) -> list:
    """Where ``platformdirs.user_cache_dir(app, app)`` points, as pytools and pyopencl ask for it
    (with their own rule on macOS: ``$XDG_CACHE_HOME/<app>`` when that is set).  platformdirs is
    not imported for it (~15 ms) unless loaded already; its rule, which changed over its versions
    for a relative ``XDG_CACHE_HOME`` (taken, then ignored), gives both candidates then."""
    found = []
    if "platformdirs" in sys.modules:
        try:
            found.append(sys.modules["platformdirs"].user_cache_dir(app, app))
        except Exception:
            pass
    xdg = os.environ.get("XDG_CACHE_HOME")
    if sys.platform == "darwin":
        found.append(os.path.join(xdg, app) if xdg is not None
                     else os.path.join(os.path.expanduser("~/Library/Caches"), app))
    elif sys.platform == "win32":
        if os.environ.get("LOCALAPPDATA"):
            found.append(os.path.join(os.environ["LOCALAPPDATA"], app, app, "Cache"))
    else:
        if xdg and xdg.strip():
            found.append(os.path.join(xdg, app))
        if not (xdg and os.path.isabs(xdg)):
            found.append(os.path.join(os.path.expanduser("~/.cache"), app))
    unique = []
    for d in found:
        d = os.path.abspath(d)
        if d not in unique:
            unique.append(d)
    return unique


def _named(dirs, keep) -> list:
    """The paths in ``dirs`` (those that can be listed) whose names ``keep`` accepts, sorted per directory."""
    found = []
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        found += [os.path.join(d, n) for n in sorted(names) if keep(n)]
    return found


def dict_files(dirs=None) -> list:
    """The pytools sqlite files of pyopencl's dictionaries this Python would open."""
    suffix = f"-{_version()}.sqlite"
    return _named(_user_cache_dirs("pytools") if dirs is None else dirs,
                  lambda n: n.startswith("pdict-") and "pyopencl" in n and n.endswith(suffix))


def compiler_dirs(bases=None) -> list:
    """pyopencl's compiler cache directories this Python would use."""
    suffix = f"-py{_version()}"
    return _named(_user_cache_dirs("pyopencl") if bases is None else bases,
                  lambda n: n.startswith("pyopencl-compiler-cache-v") and n.endswith(suffix))


def _stamp(st) -> list:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


# ---------------------------------------------------------------------- pytools' sqlite files

def sqlite_verdict(path: str):
    """(True, "") for a sound database, (False, why) for a damaged one, (None, why) when it could
    not be checked now (busy, unreadable, gone)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=_SQLITE_TIMEOUT)
    except sqlite3.Error as e:
        return None, str(e)
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as e:
        code = getattr(e, "sqlite_errorcode", None)  # (an extended code: the primary one in its low byte)
        damaged = (code & 0xFF) in (11, 26) if code is not None else not isinstance(e, sqlite3.OperationalError)
        return (False if damaged else None), str(e)  # SQLITE_CORRUPT, SQLITE_NOTADB: damaged; else not judged
    finally:
        conn.close()
    if rows == [("ok",)]:
        return True, ""
    return False, "; ".join(str(r[0]) for r in rows[:3])


def _open_in_process(path: str) -> bool:
    """Has this process loaded the pyopencl module that keeps ``path`` open?"""
    name = os.path.basename(path)
    for ident, module in _OWNERS.items():
        if f"-{ident}-" in name:
            return module in sys.modules
    return "pyopencl" in sys.modules  # an unknown dictionary: open, as far as we can tell


def _check_dict(path: str, record: dict) -> None:
    try:
        st = os.stat(path)
    except OSError:
        record.pop(path, None)
        return
    sidecars = [path + s for s in ("-journal", "-wal")]
    pending = any(os.path.exists(p) for p in sidecars)  # a writer at work, or one killed mid-write
    if not pending and record.get(path) == _stamp(st):
        return
    sound, why = sqlite_verdict(path)
    if sound:
        record[path] = _stamp(st)
        return
    record.pop(path, None)
    if sound is None:
        return  # busy or unreadable: checked again next time
    if _open_in_process(path):
        if path not in _warned:
            _warned.add(path)
            warnings.warn(
                f"pyopencl's cache file {path!r} is damaged ({why}), and pyopencl, imported before "
                f"functrace, has it open already: this process may fail when pyopencl makes a kernel. "
                f"Delete that file (pyopencl makes it again) and start the process again.",
                RuntimeWarning, stacklevel=4)
        return
    for p in [path, path + "-shm"] + sidecars:
        try:
            os.unlink(p)
        except OSError:
            pass


# ---------------------------------------------------------------------- the compiler cache

class _Anything:
    """Whatever a pickle names: the structure is checked, nothing is imported or run."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass


class _StructureOnly(pickle.Unpickler):
    def find_class(self, module, name):
        return _Anything

    def persistent_load(self, pid):
        return None


def _pickle_whole(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            _StructureOnly(f).load()
        return True
    except Exception:
        return False


def entry_sound(entry: str) -> bool | None:
    """Is the compiler cache entry ``entry`` one pyopencl can use (None: no ``info`` yet -- a
    writer at work, or one that died, which pyopencl handles itself)?"""
    info, binary = os.path.join(entry, "info"), os.path.join(entry, "binary")
    try:
        info_st = os.stat(info)
    except OSError:
        return None
    try:
        bin_st = os.stat(binary)
    except OSError:
        return False
    if bin_st.st_size == 0 or bin_st.st_mtime_ns > info_st.st_mtime_ns or not _pickle_whole(info):
        return False
    try:
        with open(binary, "rb") as f:
            head = f.read(4)
            if head == b"\x7fELF":
                f.seek(0)
                return looks_complete("binary.so", f.read())
    except OSError:
        return False
    return True


def _entry_stamp(entry: str):
    try:
        return _stamp(os.stat(os.path.join(entry, "info"))) + _stamp(os.stat(os.path.join(entry, "binary")))
    except OSError:
        return None


def _check_compiler_cache(root: str, record: dict) -> None:
    lock = os.path.join(root, "lock")
    try:
        if time.time() - os.stat(lock).st_mtime > STALE_LOCK_SECONDS:
            os.unlink(lock)  # its holder died: every pyopencl build would wait 60 s, then fail
    except OSError:
        pass
    known = record.get(root) or {}
    try:
        entries = [e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    todo = [e for e in entries if known.get(e) is None or known[e] != _entry_stamp(os.path.join(root, e))]
    fresh = {e: known[e] for e in entries if e in known and e not in todo}
    if todo:
        try:  # pyopencl's own lock: no pyopencl process reads or writes the cache meanwhile
            fd = os.open(lock, os.O_CREAT | os.O_WRONLY | os.O_EXCL)
        except OSError:
            record[root] = fresh  # busy (or not writable): checked next time
            return
        try:
            for e in todo:
                path = os.path.join(root, e)
                stamp = _entry_stamp(path)
                sound = entry_sound(path)
                if sound:
                    fresh[e] = stamp
                elif sound is False:
                    shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)
            try:
                os.unlink(lock)
            except OSError:
                pass
    record[root] = fresh


# ---------------------------------------------------------------------- the check

def _no_cache() -> bool:
    return os.environ.get("PYOPENCL_NO_CACHE", "").strip().lower() in ("1", "y", "yes", "t", "true", "on")


def check(record_path: str | None, pytools_dirs=None, pyopencl_dirs=None) -> None:
    """Check pyopencl's cache files (see the module's description) and delete the damaged ones;
    what was found sound is recorded in ``record_path`` (None: no record, everything is checked)."""
    if _no_cache():
        return
    record = {}
    if record_path:
        saved = read_entry(record_path, _RECORD_KEY)
        try:
            record = json.loads(saved) if saved is not None else {}
        except ValueError:
            record = {}
        if not isinstance(record, dict):
            record = {}
    dicts = record.get("dicts") if isinstance(record.get("dicts"), dict) else {}
    compilers = record.get("compiler") if isinstance(record.get("compiler"), dict) else {}
    before = json.dumps([dicts, compilers], sort_keys=True)
    paths, roots = dict_files(pytools_dirs), compiler_dirs(pyopencl_dirs)
    dicts = {p: s for p, s in dicts.items() if p in paths}  # (files gone leave the record)
    compilers = {r: e for r, e in compilers.items() if r in roots and isinstance(e, dict)}
    for path in paths:
        _check_dict(path, dicts)
    for root in roots:
        _check_compiler_cache(root, compilers)
    if record_path and json.dumps([dicts, compilers], sort_keys=True) != before:
        try:
            write_entry(record_path, _RECORD_KEY, json.dumps({"dicts": dicts, "compiler": compilers}).encode())
        except OSError:
            pass  # not recorded: the next process checks again
