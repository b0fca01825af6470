"""Run Python on Oclgrind's simulated OpenCL device, in a child process, and collect what it reports.

Oclgrind (``apt-get install oclgrind``) is an OpenCL driver that interprets kernels and checks
them: out-of-bounds and, with its options, racing and uninitialized accesses, API misuse.  It is a
clang-based CPU driver that is not PoCL, with device limits that can be set (work-group size,
local memory), so it also shows what a kernel design assumes about the device it runs on.

A process chooses its OpenCL drivers when pyopencl first loads them, so the code runs in a child
process whose environment (:func:`oclgrind_env`) registers Oclgrind alone as an ICD, makes it
functrace's device and sets its limits and checks.  :func:`run_python` runs a snippet there and
returns its output with Oclgrind's reports; tests that need Oclgrind carry ``requires_oclgrind``
(skipped, saying why, where it is not installed).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import pytest

# where Debian's oclgrind package puts the ICD library (the driver pyopencl's ICD loader opens)
ICD = "/usr/lib/oclgrind/liboclgrind-rt-icd.so"
requires_oclgrind = pytest.mark.skipif(not os.path.exists(ICD), reason=f"Oclgrind is not installed ({ICD} is "
                                       f"missing; `apt-get install oclgrind` installs it)")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout: functrace imported from it

# pyopencl asks every device for vendors' own attributes (NVIDIA's, AMD's, ...) when it makes a
# kernel; Oclgrind's API check reports each refusal, which is not the program's doing
_PYOPENCL_PROBE = ("Function: clGetDeviceInfo", "CL_INVALID_VALUE", "param_name")


def oclgrind_env(workdir: str, kind: str = "gpu", max_work_group_size: int | None = None,
                 local_mem_size: int | None = None, uninitialized: bool = False) -> dict:
    """The environment of a child process whose functrace runs on Oclgrind's device: Oclgrind the
    only ICD (its file in ``workdir``), functrace's device kind ``kind`` ("gpu", "cpu" or "auto":
    Oclgrind's device type includes CPU) with a fresh cache in ``workdir``, the device's maximum
    work-group size and local memory (bytes) where given, Oclgrind's API and data-race checks on
    (``uninitialized``: its uninitialized-value check too, with kernels built -cl-opt-disable: its
    plugin aborts on LLVM's ``freeze`` at -O2) and its kernel reports written to
    ``workdir/oclgrind.log``.  Programs are built from source (Oclgrind's reports then quote it)."""
    icd_dir = os.path.join(workdir, "icd")
    os.makedirs(icd_dir, exist_ok=True)
    with open(os.path.join(icd_dir, "oclgrind.icd"), "w") as f:
        f.write(ICD + "\n")
    env = dict(os.environ, OCL_ICD_VENDORS=icd_dir, PYOPENCL_NO_CACHE="1", OCLGRIND_CHECK_API="1",
               OCLGRIND_DATA_RACES="1", OCLGRIND_LOG=os.path.join(workdir, "oclgrind.log"),
               FUNCTRACE_DEVICE="Oclgrind", FUNCTRACE_OPENCL_DEVICE_KIND=kind,
               FUNCTRACE_CACHE_DIR=os.path.join(workdir, "cache"), FUNCTRACE_OPENCL_BINARY_CACHE="0",
               FUNCTRACE_VERBOSE="0", PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    for name in ("OCLGRIND_MAX_WGSIZE", "OCLGRIND_LOCAL_MEM_SIZE", "OCLGRIND_UNINITIALIZED", "OCLGRIND_BUILD_OPTIONS",
                 "POCL_CACHE_DIR", "FUNCTRACE_MATMUL"):
        env.pop(name, None)  # (the caller's own settings would change what runs)
    if max_work_group_size is not None:
        env["OCLGRIND_MAX_WGSIZE"] = str(max_work_group_size)
    if local_mem_size is not None:
        env["OCLGRIND_LOCAL_MEM_SIZE"] = str(local_mem_size)
    if uninitialized:
        env.update(OCLGRIND_UNINITIALIZED="1", OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    return env


@dataclass
class OclgrindRun:
    """What a child process on Oclgrind did."""

    returncode: int  # negative: killed by that signal (an Oclgrind assertion aborts: -6)
    stdout: str
    stderr: str
    reports: list    # Oclgrind's reports, one string each: its log's (kernels' invalid accesses, races,
    #                  uninitialized values) and its stderr's (API errors, fatal errors)


def _reports(log: str, stderr: str) -> list:
    """Oclgrind's reports: blocks of its log, and the blocks of stderr that Oclgrind opened
    (pyopencl's own device queries left out: ``_PYOPENCL_PROBE``)."""
    found = [b.strip() for b in log.split("\n\n") if b.strip()]
    for block in stderr.split("\n\n"):
        block = block.strip()
        if block.startswith(("Oclgrind - ", "OCLGRIND FATAL ERROR")) and not all(p in block for p in _PYOPENCL_PROBE):
            found.append(block)
    return found


def run_python(code: str, *args: str, timeout: float = 600, **env_options) -> OclgrindRun:
    """Run ``python -c code args...`` on Oclgrind's device (``env_options``: those of
    :func:`oclgrind_env`) in a fresh temporary directory, and return its exit status, output and
    Oclgrind's reports."""
    with tempfile.TemporaryDirectory(prefix="ft-oclgrind-") as workdir:
        env = oclgrind_env(workdir, **env_options)
        run = subprocess.run([sys.executable, "-c", code, *args], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=timeout)
        log = ""
        if os.path.exists(env["OCLGRIND_LOG"]):
            with open(env["OCLGRIND_LOG"], errors="replace") as f:
                log = f.read()
    return OclgrindRun(run.returncode, run.stdout, run.stderr, _reports(log, run.stderr))
