"""The OpenCL backend's disk cache files: where they live (``cache_dir``) and their format, one
checksummed payload per file bound to the key it was written for (``write_entry`` /
``read_entry``).  Program binaries, device verdicts, matmul choices and the PoCL cache's manifests
all go through it, so a damaged file is never handed to the driver."""
from __future__ import annotations

import hashlib
import os
import tempfile

from ...core.config import config


def cache_dir() -> str:
    """Where the OpenCL backend keeps its disk caches (under ``ft.config.cache_dir``)."""
    base = config.cache_dir or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "functrace")
    return os.path.join(base, "opencl")


# A disk-cache file: this tag (the format's version), then the SHA-256 of the entry's key and
# payload, then the payload.  The key names what the payload is for (for a program binary: the
# hash of its source, options, device and driver), so a payload written for another key does not
# verify any more than a truncated or bit-flipped one.
_ENTRY_TAG = b"ftcache1"


def _entry_digest(key: str, payload: bytes) -> bytes:
    return hashlib.sha256(key.encode() + b"\0" + payload).digest()


def write_entry(path: str, key: str, payload: bytes) -> None:
    """Write the cache file ``path`` holding ``payload`` for ``key`` (atomically: readers see the
    old file, none, or this one, never a part).  OSError when the cache is not writable."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_ENTRY_TAG + _entry_digest(key, payload) + payload)
        os.replace(tmp, path)
    except BaseException:
        discard(tmp)
        raise


def read_entry(path: str, key: str) -> bytes | None:
    """The payload ``write_entry(path, key, ...)`` wrote; None when there is none or the file does
    not verify (truncated, bit-flipped, another key's, not ours): such a file is deleted, so the
    entry the caller rebuilds replaces it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None  # absent, or not a readable file: rebuilt (and its writing may fail in turn)
    start = len(_ENTRY_TAG) + hashlib.sha256().digest_size
    payload = data[start:]
    if data[:len(_ENTRY_TAG)] == _ENTRY_TAG and data[len(_ENTRY_TAG):start] == _entry_digest(key, payload):
        return payload
    discard(path)
    return None


def discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # gone already, or not ours to delete: the next write replaces it or fails
