"""Programs for PoCL that declare only the OpenCL builtins they call.

PoCL has Clang parse its copy of Clang's ``opencl-c.h`` (~14,000 declarations) before every
program it builds, most of a small program's build, and again to look a program up in its own
cache (it preprocesses the source to hash it).  PoCL's ``_clang_opencl.h`` includes that header
only ``#ifndef _OPENCL_H_`` (Clang's own include guard for it), so a program built with
``-D_OPENCL_H_`` that carries the header's preprocessor lines and the declarations of the
builtins it names builds several times faster (docs/opencl.md, "Lean builds on PoCL").  The
declarations are the header's own lines, kept in order between its ``#if`` lines, so each builtin
keeps every overload and attribute it has in the full header: the same calls, the same bits.

Where PoCL's header cannot be found, or a program does not build this way (a newer PoCL that
declares builtins differently), the runtime builds the program in full (``Runtime.program``).
"""
from __future__ import annotations

import importlib.util
import mmap
import os
import re

DEFINE = "-D_OPENCL_H_"  # the build option that keeps PoCL from including the full header
HEADER = "opencl-c.h"
BASE_HEADER = "opencl-c-base.h"  # (its types and macros, included by HEADER: kept whole)
PASTED_PREFIX = 4  # (shorter identifiers of a program pasting tokens are macro parameters: a, b, x)

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_CONTINUATION = re.compile(r"\\[ \t]*\n")
_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")


class LeanHeader:
    """The declarations of one ``opencl-c.h``, indexed by the builtin each declares."""

    def __init__(self, header: str, base: str):
        self._lines = _statements(base) + [s for s in _statements(_without_guard(header))
                                           if BASE_HEADER not in s[1]]
        self._builtins = {name for name, _ in self._lines if name is not None}

    def declarations(self, source: str) -> str:
        """The header's preprocessor lines and its declarations of the builtins ``source`` names:
        where it pastes tokens (``FT_CAT(vload, 8)``), also of those whose name begins with one of
        its identifiers of ``PASTED_PREFIX`` characters or more (``vload8``, ``convert_float4``)."""
        named = set(_IDENTIFIER.findall(source))
        if "##" in source:
            named |= {b for b in self._builtins
                      if any(b[:k] in named for k in range(PASTED_PREFIX, len(b)))}
        return "\n".join(text for name, text in self._lines if name is None or name in named) + "\n"


def _without_guard(header: str) -> str:
    """``header`` without its ``#ifndef _OPENCL_H_`` include guard (``DEFINE`` defines it)."""
    guard = re.search(r"#ifndef\s+_OPENCL_H_\s*\n\s*#define\s+_OPENCL_H_\s*\n", header)
    if guard is None:
        raise ValueError(f"{HEADER} without its _OPENCL_H_ include guard")
    end = header.rindex("#endif")
    return header[:guard.start()] + header[guard.end():end]


def _statements(text: str) -> list:
    """``text``'s preprocessor lines and C statements in order, as (builtin declared or None,
    text): None for preprocessor lines and statements that declare no function (typedefs)."""
    text = _CONTINUATION.sub(" ", _COMMENT.sub(" ", text))
    out, pending = [], []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line[0] == "#":
            out.append((None, line))
            continue
        ends = line.endswith((";", "}"))
        if pending or not ends:
            pending.append(line)
            if not ends:
                continue
            line, pending = " ".join(pending), []
        paren = line.find("(")  # (a declaration's name ends where its parameters start)
        declares = paren > 0 and not line.startswith("typedef")
        out.append((line[:paren].rsplit(None, 1)[-1] if declares else None, line))
    return out


def _loaded_pocl_libraries() -> list:
    """The PoCL libraries this process has loaded (read from ``/proc/self/maps``; none elsewhere)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[-1].strip() for line in maps if "libpocl" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith("libpocl") and "devices" not in p)


def _header_dirs(version: str) -> list:
    """Directories that may hold the ``opencl-c.h`` of the PoCL whose platform version is
    ``version``: beside each loaded PoCL library (where several are loaded, first the one whose
    file holds ``version``'s "PoCL x.y" name, the smallest files searched first), then
    pocl-binary-distribution's."""
    libraries = sorted(_loaded_pocl_libraries(), key=_size)
    if len(libraries) > 1:
        name = re.search(r"PoCL \S+", version)
        holder = next((lib for lib in libraries if name and _holds(lib, name.group(0).encode())), None)
        libraries.sort(key=lambda lib: lib != holder)
    dirs = [os.path.normpath(os.path.join(os.path.dirname(lib), up, "share", "pocl", "include"))
            for lib in libraries for up in (os.pardir, os.path.join(os.pardir, os.pardir))]
    wheel = importlib.util.find_spec("pocl_binary_distribution")
    if wheel is not None and wheel.origin:
        dirs.append(os.path.join(os.path.dirname(wheel.origin), ".libs", "share", "pocl", "include"))
    return dirs


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _holds(path: str, token: bytes) -> bool:
    """Does the file at ``path`` hold ``token`` (read through a memory map: a PoCL with LLVM
    linked in is large)?"""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(token) >= 0
    except (OSError, ValueError):
        return False


_loaded: dict = {}  # platform version -> LeanHeader or None


def for_platform(version: str) -> LeanHeader | None:
    """The lean header for the PoCL platform of ``version`` (None: its ``opencl-c.h`` not found)."""
    if version not in _loaded:
        lean = None
        for where in _header_dirs(version):
            try:
                with open(os.path.join(where, HEADER)) as h, open(os.path.join(where, BASE_HEADER)) as b:
                    lean = LeanHeader(h.read(), b.read())
                break
            except (OSError, ValueError):
                continue
        _loaded[version] = lean
    return _loaded[version]
