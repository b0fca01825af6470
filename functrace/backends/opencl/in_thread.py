"""A device that runs kernels in the calling thread, beside PoCL's ``pthread`` device.

PoCL's ``pthread`` device hands each launch to worker threads: a worker waking for the kernel and
the caller waking when it ends cost 45-90 us a launch on a 2-core VM (bimodal), which is most of
a small loop compiled whole (its kernel runs a few microseconds).  PoCL's ``basic`` device runs a
kernel in the thread that enqueues it, before the enqueue returns (~3 us a launch).  So, before
PoCL loads (it reads ``POCL_DEVICES`` once), ``request`` asks it for both -- only where the user
set no ``POCL_DEVICES``, ``config.opencl_in_thread_device`` is on, and PoCL's installed drivers are
those two (the ``pthread`` device PoCL would list alone is the default device still: no other
PoCL driver is dropped) -- and ``listed`` restores the environment once the platforms are listed
(child processes see the user's settings).  ``basic`` is hidden from ``ft.devices()``; the runtime
puts it in the context of the ``pthread`` device of its platform, sharing its buffers (both use
host memory: no copies), and a program whose every launch is one work-group
(``Step.one_unit``: loops and programs compiled whole) builds for it and runs there.
"""
from __future__ import annotations

import glob
import os
import sysconfig

from ...core.config import config

POCL_PLATFORM = "Portable Computing Language"
DRIVERS = ("pthread", "basic")  # what ``request`` asks PoCL for: the default device first
_state: dict = {}  # "requested": True once POCL_DEVICES was set here; "companions": platform -> device


def _pocl_driver_modules() -> set | None:
    """The device drivers of an installed PoCL built with loadable drivers (Debian's: files
    ``pocl/libpocl-devices-<name>.so`` beside ``libpocl.so``), or None where none is found (e.g.
    pocl-binary-distribution, whose drivers are built in: which ones cannot be told before loading)."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    roots = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    roots += [os.path.join("/usr/lib", multiarch), "/usr/lib64", "/usr/lib", "/usr/local/lib", "/usr/local/lib64"]
    for root in roots:
        if glob.glob(os.path.join(root, "libpocl.so*")):
            found = glob.glob(os.path.join(root, "pocl", "libpocl-devices-*.so"))
            return {os.path.basename(f)[len("libpocl-devices-"):-len(".so")] for f in found} or None
    return None


def request(driver_loaded: bool) -> None:
    """Before PoCL loads: ask it for its ``basic`` device beside ``pthread`` (see the module's
    docstring for when); ``driver_loaded``: has this process loaded PoCL already (then it is too late)."""
    if "requested" in _state:
        return
    _state["requested"] = False
    if driver_loaded or "POCL_DEVICES" in os.environ or not config.opencl_in_thread_device:
        return
    if _pocl_driver_modules() != set(DRIVERS):
        return
    os.environ["POCL_DEVICES"] = " ".join(DRIVERS)
    _state["requested"] = True


def listed(found: list) -> list:
    """The devices of ``found`` (every platform's, just listed) the user sees: PoCL's ``basic``
    device, when ``request`` asked for it, is kept aside as its platform's companion.  Restores
    the user's environment (PoCL has read it)."""
    if not _state.get("requested"):
        return found
    if os.environ.get("POCL_DEVICES") == " ".join(DRIVERS):  # (what request set: PoCL has read it)
        del os.environ["POCL_DEVICES"]
    companions = _state.setdefault("companions", {})
    visible = []
    for d in found:
        if POCL_PLATFORM in d.platform.name and d.name.lower().startswith("basic"):
            companions[d.platform.int_ptr] = d
        else:
            visible.append(d)
    return visible


def companion(device):
    """PoCL's in-thread ``basic`` device beside ``device`` (its platform's ``pthread`` device), or None."""
    if POCL_PLATFORM not in device.platform.name or not device.name.lower().startswith("pthread"):
        return None
    return _state.get("companions", {}).get(device.platform.int_ptr)
