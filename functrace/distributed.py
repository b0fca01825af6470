"""Multi-process programs over MPI (mpi4py): the process group behind the axis name ``"processes"``.

Run the same script on every process (``mpiexec -n 2 python train.py``); after ``initialize()``
the collectives of ``ft.lax`` over ``"processes"`` combine the values of all processes, as they
combine the members of a batch under ``ft.vmap(f, axis_name="processes")``.  mpi4py is an optional
dependency (the ``mpi`` extra), imported only by ``initialize()``; before it (or in a program not
launched by ``mpiexec``) the group is this process alone.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable

import numpy as np

from . import tree_util
from .core.errors import user_frame_description

PROCESSES = "processes"  # the reserved axis name of the process group
# before aborting, time for mpiexec to forward the traceback (an abort at once lost it in 1 of 3 runs)
_FORWARD_SECONDS = 0.25


class _Group:
    """The communicator after ``initialize()`` (None: not initialized, a group of one)."""

    comm = None


_group = _Group()


def initialize(abort_on_exception: bool = True) -> None:
    """Join the MPI job: duplicate mpi4py's COMM_WORLD for functrace's collectives (so the user's
    own MPI traffic cannot be matched with ours), and, with ``abort_on_exception``, make an uncaught
    exception in any thread of any process abort the whole job (as ``python -m mpi4py`` does for
    the main thread) instead of leaving the others waiting in a collective forever.  Calling it
    again does nothing."""
    if _group.comm is not None:
        return
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError("ft.distributed.initialize() needs mpi4py: pip install 'functrace[mpi]' "
                          "(mpi4py and an MPI library such as the mpich wheel)") from e
    _group.comm = MPI.COMM_WORLD.Dup()
    if abort_on_exception:
        _install_abort_hook(MPI)


def _install_abort_hook(MPI) -> None:
    """sys.excepthook and threading.excepthook -> print the traceback, then MPI Abort (every process
    exits non-zero): an exception in any thread of any process ends the job."""
    previous, previous_in_thread = sys.excepthook, threading.excepthook

    def abort_job(report: Callable[[], None], kind: type, where: str) -> None:
        try:
            report()
            sys.stderr.write(f"functrace.distributed: uncaught {kind.__name__} {where}on process "
                             f"{MPI.COMM_WORLD.Get_rank()}: aborting the MPI job\n")
            sys.stderr.flush()
            time.sleep(_FORWARD_SECONDS)
        finally:
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = lambda kind, value, traceback: abort_job(lambda: previous(kind, value, traceback), kind, "")
    threading.excepthook = lambda args: abort_job(
        lambda: previous_in_thread(args), args.exc_type,
        f"in thread {args.thread.name if args.thread is not None else '?'} ")


def is_initialized() -> bool:
    """Has ``initialize()`` run in this process?"""
    return _group.comm is not None


def communicator():
    """The mpi4py communicator of functrace's collectives (None before ``initialize()``)."""
    return _group.comm


def process_index() -> int:
    """This process's rank in the group (0 before ``initialize()``)."""
    return 0 if _group.comm is None else _group.comm.Get_rank()


def process_count() -> int:
    """The number of processes in the group (1 before ``initialize()``)."""
    return 1 if _group.comm is None else _group.comm.Get_size()


def broadcast(tree: Any, root: int = 0) -> Any:
    """Every array leaf of ``tree`` as process ``root`` has it (initial parameters, a random seed's
    draw, ...); leaves are sent as one buffer per dtype.  The tree's structure, shapes and dtypes
    must be the same on every process."""
    leaves, treedef = tree_util.tree_flatten(tree)
    comm = _group.comm
    if comm is not None and comm.Get_size() > 1:
        arrays = packed_by_dtype([np.asarray(x) for x in leaves], lambda buffer: comm.Bcast(buffer, root=root))
    else:
        arrays = [np.array(x) for x in leaves]  # copies: the caller's arrays stay as they were
    return tree_util.tree_unflatten(treedef, [a if isinstance(x, np.ndarray) else a[()] for x, a in zip(leaves, arrays)])


def packed_by_dtype(arrays: list[np.ndarray], communicate: Callable[[np.ndarray], Any]) -> list[np.ndarray]:
    """``arrays`` after ``communicate(buffer)`` changed them in place, one buffer per dtype (the
    arrays of that dtype concatenated, in order): one MPI message per dtype instead of one per
    array.  The results are views of the buffers; the given arrays stay as they were."""
    by_dtype: dict = {}
    for i, a in enumerate(arrays):
        by_dtype.setdefault(a.dtype, []).append(i)
    results: list = [None] * len(arrays)
    for members in by_dtype.values():
        buffer = np.concatenate([arrays[i].reshape(-1) for i in members])
        communicate(buffer)
        offset = 0
        for i in members:
            results[i] = buffer[offset:offset + arrays[i].size].reshape(arrays[i].shape)
            offset += arrays[i].size
    return results


def shard(tree: Any, axis: int = 0) -> Any:
    """This process's contiguous share of every leaf along ``axis`` (a global batch split by
    process; the axis length must be divisible by the process count, so shards are equal and the
    mean of per-process means is the global mean)."""
    count, index = process_count(), process_index()

    def take(x):
        x = np.asarray(x)
        n = x.shape[axis]
        if n % count:
            raise ValueError(f"ft.distributed.shard: axis {axis} has length {n}, not divisible by the "
                             f"{count} processes {user_frame_description()}")
        k = n // count
        return np.take(x, np.arange(index * k, (index + 1) * k), axis=axis)

    return tree_util.tree_map(take, tree)
