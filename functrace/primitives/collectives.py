"""The collective primitives over named axes: ``psum``, ``pmax``, ``pmin``, ``all_gather``,
``psum_scatter``, ``ppermute``, ``all_to_all``, ``axis_index`` (``ft.lax``'s functions of
``functrace/collectives.py`` bind them), with their rules and their MPI implementations.

A name is bound by ``ft.vmap(f, axis_name=name)`` -- the members of the batch: a collective's
``batch_named_axis`` rule combines them -- or is the reserved ``"processes"``: the MPI processes
of ``ft.distributed``, where its implementation runs one MPI call (a group of one process: the
named-axis rule on one member).

Derivatives, as JAX defines them for ``pmap``/``vmap`` (each member's cotangent is its own; the
derivative of the whole batch is the sum over members):

* every collective but ``pmax``/``pmin`` is linear: its tangent is the collective of the tangent;
* transposes: ``psum`` -> ``psum`` (so ``grad`` of a loss summed with ``psum`` on every member counts
  each member's seed: divide by ``axis_size`` or take the ``pmean`` of local gradients instead, as
  data-parallel training does); ``all_gather`` <-> ``psum_scatter`` (same axis, same ``tiled``);
  ``ppermute`` -> ``ppermute`` by the inverse permutation; ``all_to_all`` -> ``all_to_all`` with
  ``split_axis`` and ``concat_axis`` swapped;
* ``pmax``/``pmin``: the derivative flows to the members holding the extremum, split equally
  among ties (as ``reduce_max``);
* ``axis_index`` is an integer: no derivative.

Collectives are ``effectful`` primitives: inside ``jit`` they keep their program order and are
never removed or folded; on OpenCL they run as host steps.  ``psum`` of a pytree is one equation,
so its leaves under 64 KB travel in one MPI message per dtype; ``jit`` joins consecutive ``psum``
equations into one (``merge_psums``, ``psum_p.merges_consecutive``), so separate calls (a loss and
its gradients) share it too.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable, Hashable

import numpy as np

from .. import distributed
from ..core import Primitive, ShapedArray, Tracer, trace_stack
from ..core.eager import EagerArray
from ..core.errors import user_frame_description
from ..distributed import PROCESSES
from ..transforms.batching import BatchTrace
from ..transforms.staging import StagingTrace
from . import basic as P

# --------------------------------------------------------------------------- the axis environment


def bound_axis(name: Hashable, what: str):
    """(size, the vmap's MainTrace) of the innermost binding of ``name``; the main is None for the
    process group."""
    for main in reversed(trace_stack()):
        frame = main.global_data if main.trace_type is BatchTrace else None
        if frame is not None and frame.name == name:
            return frame.size, main
    if name == PROCESSES:
        return distributed.process_count(), None
    raise NameError(f"{what}: unbound axis name {name!r} {user_frame_description()}: bind it with "
                    f"ft.vmap(f, axis_name={name!r}), or use {PROCESSES!r} (the MPI processes)")


class CollectivePrimitive(Primitive):
    """A primitive over the named axis ``params["axis_name"]``.  Bound with operands that no
    transformation at or inside the vmap binding the name traces (constants, ``axis_index``'s no
    operands), it goes to that vmap, which combines the members -- or to a ``jit`` tracing inside
    it, which stages it: a collective is never computed once at trace time."""

    effectful = True

    def bind(self, *args, **params):
        _, main = bound_axis(params["axis_name"], self.name)
        floor = -1 if main is None else main.level
        target = next((m for m in reversed(trace_stack()) if m.level > floor and m.trace_type is StagingTrace), main)
        top = max((x._trace.level for x in args if isinstance(x, Tracer)), default=-1)
        if target is not None and top < target.level:
            trace = target.trace
            return trace.process_primitive(self, [trace.full_raise(x, self) for x in args], params)
        return super().bind(*args, **params)


def _collective(name: str, multiple_results: bool = False) -> CollectivePrimitive:
    p = CollectivePrimitive(name, multiple_results)
    P.registry[name] = p
    return p


def _process_group(prim: str, axis_name):
    """The communicator a collective's implementation runs on (None: a group of one process)."""
    if axis_name != PROCESSES:
        raise NameError(f"'{prim}' over axis {axis_name!r} reached execution outside the ft.vmap binding "
                        "it: in a cond/scan/while_loop whose operands are all constants (pass one in as an "
                        "argument of the vmapped function), or in a jitted function traced inside the vmap "
                        "and called outside it")
    comm = distributed.communicator()
    return comm if comm is not None and comm.Get_size() > 1 else None


def _one_member(prim: CollectivePrimitive, x, params: dict) -> np.ndarray:
    """The collective on a group of one: its named-axis rule on a batch of one member."""
    out, dim = prim.batch_named_axis([np.asarray(x)[None]], [0], 1, **params)
    return np.asarray(out if dim is None else np.take(out, 0, axis=dim))


def _process_impl(prim: CollectivePrimitive, over_mpi: Callable) -> Callable:
    """``prim``'s implementation: ``over_mpi(comm, x, **params)`` across several MPI processes,
    its named-axis rule on one member in a group of one."""
    def impl(x, **params):
        comm = _process_group(prim.name, params["axis_name"])
        return _one_member(prim, x, params) if comm is None else over_mpi(comm, x, **params)
    return impl


def _member_sum(v, dim, n: int):
    """The sum over the members of a batch (``n`` times an unbatched value)."""
    return P.mul(v, P.scalar_like(v, n)) if dim is None else P.reduce_sum(v, (dim,))


def _stacked(v, dim, n: int):
    """The batch as an array with the members along axis 0 (an unbatched value repeated)."""
    if dim is None:
        shape = P.shape_of(v)
        return P.broadcast_in_dim(v, (n, *shape), tuple(range(1, len(shape) + 1)))
    return P.moveaxis(v, dim, 0)


def _split_axis(x, axis: int, n: int):
    """``x`` with axis ``axis`` (of length n * k) split into (n, k)."""
    shape = P.shape_of(x)
    return P.reshape(x, shape[:axis] + (n, shape[axis] // n) + shape[axis + 1:])


def _merge_axes(x, axis: int):
    """``x`` with axes ``axis`` and ``axis + 1`` merged into one."""
    shape = P.shape_of(x)
    return P.reshape(x, shape[:axis] + (shape[axis] * shape[axis + 1],) + shape[axis + 2:])


def _mpi():
    """mpi4py's MPI module (imported by ``distributed.initialize()`` already; kept after the first call)."""
    global _MPI
    if _MPI is None:
        from mpi4py import MPI
        _MPI = MPI
    return _MPI


_MPI = None


# --------------------------------------------------------------------------- psum (a pytree: one equation)

psum_p = _collective("psum", multiple_results=True)
psum_p.abstract_eval = lambda *avals, axis_name: [ShapedArray(a.shape, a.dtype, a.weak_type) for a in avals]


def _psum_impl(*xs, axis_name, donated: tuple = ()):
    """``donated``: positions of operands whose memory the sum may take (a compiled program's
    values that die here and that nothing else views: see ``numpy_backend.in_place_operands``)."""
    comm = _process_group("psum", axis_name)
    if comm is None:  # the sum over a group of one: the operands themselves (values are never written)
        return [np.asarray(x) for x in xs]
    return _allreduce(comm, xs, _mpi().SUM, donated)


psum_p.reduces_in_place = True  # its implementation takes ``donated``


_PACK_BELOW_BYTES = 1 << 16  # smaller arrays share one message: a call costs the same at 8 B as at 64 KB
_POOLED_FROM_BYTES = 1 << 20  # larger outputs come from a pool (a fresh array's page faults, every call)
_pool: dict = {}  # (shape, dtype) -> output arrays, reused once nothing else refers to them
_pool_lock = threading.Lock()


def _output_like(x: np.ndarray) -> np.ndarray:
    """An uninitialized array like ``x`` for a collective's result.  Large ones are reused from a pool
    when no one holds them (or a view of them) any more: measured at 16 MB, an Allreduce into a new
    array ran at 33% of the bandwidth of one into a reused array."""
    if x.nbytes < _POOLED_FROM_BYTES:
        return np.empty_like(x)
    with _pool_lock:
        arrays = _pool.setdefault((x.shape, x.dtype), [])
        for out in arrays:
            if sys.getrefcount(out) == 3:  # the pool's list, this loop and getrefcount: unused
                return out
        out = EagerArray(x.shape, x.dtype)  # owns its memory, and eager results are EagerArrays (no view)
        if len(arrays) < 2:  # one the caller still holds, one being filled
            arrays.append(out)
        return out


def _allreduce(comm, xs, op, donated: tuple = ()) -> list:
    """Allreduce of ``xs``: arrays under 64 KB packed into one message per dtype, larger ones each
    reduced straight from their memory into an output array (a packing copy would cost about a
    third of the transfer), or in place for the ``donated`` positions (MPICH's out-of-place call
    first copies the operand to the output: 255 vs 192 us at 1 MB).  The path of one large array,
    a jitted step's common case, does no Python work beyond the MPI call and the output's
    allocation: at 1 MB a call costs ~250 us."""
    outs = []
    small = []
    for i, x in enumerate(xs):
        x = np.asarray(x)
        if x.nbytes < _PACK_BELOW_BYTES:
            small.append(len(outs))
            outs.append(x)
            continue
        if i in donated and x.flags.c_contiguous and x.flags.writeable:
            comm.Allreduce(_mpi().IN_PLACE, x, op=op)
            outs.append(x)
            continue
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        out = _output_like(x)
        comm.Allreduce(x, out, op=op)
        outs.append(out)
    if small:
        packed = distributed.packed_by_dtype([outs[i] for i in small],
                                             lambda buffer: comm.Allreduce(_mpi().IN_PLACE, buffer, op=op))
        for i, out in zip(small, packed):
            outs[i] = out
    return outs


def _psum_named(vals, dims, n, *, axis_name):
    return [_member_sum(v, d, n) for v, d in zip(vals, dims)], [None] * len(vals)


def _psum_nonzero(values: list, axis_name) -> list:
    """psum of the non-None entries (symbolic zeros stay None), as one equation."""
    present = [i for i, v in enumerate(values) if v is not None]
    summed = psum_p.bind(*[values[i] for i in present], axis_name=axis_name) if present else []
    out = [None] * len(values)
    for i, s in zip(present, summed):
        out[i] = s
    return out


def _psum_jvp(primals, tangents, *, axis_name):
    return psum_p.bind(*primals, axis_name=axis_name), _psum_nonzero(list(tangents), axis_name)


def _psum_vjp(primals, needs_ct, *, axis_name):
    def backward(cts):
        return _psum_nonzero([g if need else None for g, need in zip(cts, needs_ct)], axis_name)
    return psum_p.bind(*primals, axis_name=axis_name), backward


psum_p.impl = _psum_impl
psum_p.batch_named_axis = _psum_named
psum_p.batch = lambda vals, dims, *, axis_name: (psum_p.bind(*vals, axis_name=axis_name), dims)
psum_p.jvp_rule = _psum_jvp
psum_p.vjp_rule = _psum_vjp
psum_p.merges_consecutive = True  # one psum of two operand lists: one MPI message (optimize.merge_psums)


# --------------------------------------------------------------------------- pmax / pmin


def _extremum(name: str, reduce_p: Primitive, mpi_op: str) -> CollectivePrimitive:
    p = _collective(name)
    p.abstract_eval = lambda a, *, axis_name: ShapedArray(a.shape, a.dtype, a.weak_type)

    def impl(x, *, axis_name):
        comm = _process_group(name, axis_name)
        x = np.asarray(x)
        return x if comm is None else _allreduce(comm, [x], getattr(_mpi(), mpi_op))[0]

    def share(ans, x, axis_name):
        """Where each member holds the extremum (1.0) and how many do."""
        hits = P.convert_element_type(P.eq(x, ans), P.dtype_of(ans))
        return hits, psum_p.bind(hits, axis_name=axis_name)[0]

    def jvp(t, ans, x, *, axis_name):
        hits, count = share(ans, x, axis_name)
        return P.div(psum_p.bind(P.mul(t, hits), axis_name=axis_name)[0], count)

    def vjp(g, ans, x, *, axis_name):
        hits, count = share(ans, x, axis_name)
        return P.mul(psum_p.bind(g, axis_name=axis_name)[0], P.div(hits, count))

    p.impl = impl
    p.batch_named_axis = lambda vals, dims, n, *, axis_name: (
        vals[0] if dims[0] is None else reduce_p.bind(vals[0], axes=(dims[0],)), None)
    p.batch = lambda vals, dims, *, axis_name: (p.bind(vals[0], axis_name=axis_name), dims[0])
    p.jvp = [jvp]
    p.vjp = [vjp]
    return p


pmax_p = _extremum("pmax", P.reduce_max_p, "MAX")
pmin_p = _extremum("pmin", P.reduce_min_p, "MIN")

# --------------------------------------------------------------------------- all_gather / psum_scatter

all_gather_p = _collective("all_gather")
psum_scatter_p = _collective("psum_scatter")


def _all_gather_abstract(a, *, axis_name, axis_size, axis, tiled):
    shape = a.shape[:axis] + (a.shape[axis] * axis_size,) + a.shape[axis + 1:] if tiled else \
        a.shape[:axis] + (axis_size,) + a.shape[axis:]
    return ShapedArray(shape, a.dtype, a.weak_type)


def _all_gather_named(vals, dims, n, *, axis_name, axis_size, axis, tiled):
    gathered = P.moveaxis(_stacked(vals[0], dims[0], n), 0, axis)
    return (_merge_axes(gathered, axis) if tiled else gathered), None


def _all_gather_mpi(comm, x, **params):
    """Every process's ``x`` by one Allgather, placed as the named-axis rule places the members."""
    x = np.ascontiguousarray(x)
    members = np.empty((comm.Get_size(),) + x.shape, x.dtype)
    comm.Allgather(x, members)
    return np.asarray(_all_gather_named([members], [0], params["axis_size"], **params)[0])


def _psum_scatter_abstract(a, *, axis_name, axis_size, scatter_dimension, tiled):
    d = scatter_dimension
    shape = a.shape[:d] + (a.shape[d] // axis_size,) + a.shape[d + 1:] if tiled else a.shape[:d] + a.shape[d + 1:]
    return ShapedArray(shape, a.dtype, a.weak_type)


def _psum_scatter_named(vals, dims, n, *, axis_name, axis_size, scatter_dimension, tiled):
    total = _member_sum(vals[0], dims[0], n)
    return (_split_axis(total, scatter_dimension, n) if tiled else total), scatter_dimension


def _psum_scatter_mpi(comm, x, *, axis_name, axis_size, scatter_dimension, tiled):
    """This process's block of the sum, by one Reduce_scatter_block."""
    x = np.asarray(x)
    blocks = _split_axis(x, scatter_dimension, axis_size) if tiled else x
    send = np.ascontiguousarray(np.moveaxis(blocks, scatter_dimension, 0))
    mine = np.empty(send.shape[1:], x.dtype)
    comm.Reduce_scatter_block(send, mine, op=_mpi().SUM)
    return mine


all_gather_p.abstract_eval = _all_gather_abstract
all_gather_p.impl = _process_impl(all_gather_p, _all_gather_mpi)
all_gather_p.batch_named_axis = _all_gather_named
all_gather_p.batch = lambda vals, dims, *, axis, **params: (
    all_gather_p.bind(P.moveaxis(vals[0], dims[0], 0), axis=axis + 1, **params), 0)
all_gather_p.jvp = [lambda t, ans, x, **params: all_gather_p.bind(t, **params)]
all_gather_p.vjp = [lambda g, ans, x, *, axis, **params: psum_scatter_p.bind(g, scatter_dimension=axis, **params)]

psum_scatter_p.abstract_eval = _psum_scatter_abstract
psum_scatter_p.impl = _process_impl(psum_scatter_p, _psum_scatter_mpi)
psum_scatter_p.batch_named_axis = _psum_scatter_named
psum_scatter_p.batch = lambda vals, dims, *, scatter_dimension, **params: (
    psum_scatter_p.bind(P.moveaxis(vals[0], dims[0], 0), scatter_dimension=scatter_dimension + 1, **params), 0)
psum_scatter_p.jvp = [lambda t, ans, x, **params: psum_scatter_p.bind(t, **params)]
psum_scatter_p.vjp = [lambda g, ans, x, *, scatter_dimension, **params:
                      all_gather_p.bind(g, axis=scatter_dimension, **params)]

# --------------------------------------------------------------------------- ppermute

ppermute_p = _collective("ppermute")
ppermute_p.abstract_eval = lambda a, *, axis_name, perm: ShapedArray(a.shape, a.dtype, a.weak_type)


def _ppermute_named(vals, dims, n, *, axis_name, perm):
    members = _stacked(vals[0], dims[0], n)
    source = np.zeros(n, np.int64)
    received = np.zeros(n, bool)
    for src, dst in perm:
        source[dst], received[dst] = src, True
    moved = P.take(members, source, 0)
    if received.all():
        return moved, 0
    shape = P.shape_of(moved)
    mask = P.broadcast_in_dim(received, shape, (0,))
    return P.select(mask, moved, P.zeros_like(moved)), 0


def _ppermute_mpi(comm, x, *, axis_name, perm):
    """Point-to-point sends and receives of this process's pairs of ``perm`` (zeros if none)."""
    rank = comm.Get_rank()
    x = np.ascontiguousarray(x)
    out = np.zeros_like(x)
    requests = [comm.Isend(x, dest=dst, tag=7) for src, dst in perm if src == rank]
    requests += [comm.Irecv(out, source=src, tag=7) for src, dst in perm if dst == rank]
    _mpi().Request.Waitall(requests)
    return out


ppermute_p.impl = _process_impl(ppermute_p, _ppermute_mpi)
ppermute_p.batch_named_axis = _ppermute_named
ppermute_p.batch = lambda vals, dims, **params: (ppermute_p.bind(vals[0], **params), dims[0])
ppermute_p.jvp = [lambda t, ans, x, **params: ppermute_p.bind(t, **params)]
ppermute_p.vjp = [lambda g, ans, x, *, axis_name, perm:
                  ppermute_p.bind(g, axis_name=axis_name, perm=tuple((d, s) for s, d in perm))]

# --------------------------------------------------------------------------- all_to_all

all_to_all_p = _collective("all_to_all")


def _all_to_all_abstract(a, *, axis_name, axis_size, split_axis, concat_axis, tiled):
    shape = list(a.shape)
    if tiled:
        shape[split_axis] //= axis_size
        shape[concat_axis] *= axis_size
    else:
        del shape[split_axis]
        shape.insert(concat_axis, axis_size)
    return ShapedArray(tuple(shape), a.dtype, a.weak_type)


def _received_at(chunks, concat_axis: int, tiled: bool):
    """Chunks received from every member (along axis 0 of ``chunks``, batch axes before it
    excluded) placed at ``concat_axis``: a new axis, or concatenated into it when tiled."""
    placed = P.moveaxis(chunks, 0, concat_axis)
    return _merge_axes(placed, concat_axis) if tiled else placed


def _all_to_all_named(vals, dims, n, *, axis_name, axis_size, split_axis, concat_axis, tiled):
    members = _stacked(vals[0], dims[0], n)  # (sender, *x)
    if tiled:
        members = _split_axis(members, 1 + split_axis, n)
    by_receiver = P.moveaxis(members, 1 + split_axis, 0)  # (receiver, sender, *chunk)
    placed = P.moveaxis(by_receiver, 1, 1 + concat_axis)
    return (_merge_axes(placed, 1 + concat_axis) if tiled else placed), 0


def _all_to_all_mpi(comm, x, *, axis_name, axis_size, split_axis, concat_axis, tiled):
    """Block ``i`` of ``x`` to process ``i``, by one Alltoall."""
    x = np.asarray(x)
    chunks = _split_axis(x, split_axis, axis_size) if tiled else x
    send = np.ascontiguousarray(np.moveaxis(chunks, split_axis, 0))  # (receiver, *chunk)
    received = np.empty_like(send)  # (sender, *chunk)
    comm.Alltoall(send, received)
    return np.asarray(_received_at(received, concat_axis, tiled))


all_to_all_p.abstract_eval = _all_to_all_abstract
all_to_all_p.impl = _process_impl(all_to_all_p, _all_to_all_mpi)
all_to_all_p.batch_named_axis = _all_to_all_named
all_to_all_p.batch = lambda vals, dims, *, split_axis, concat_axis, **params: (all_to_all_p.bind(
    P.moveaxis(vals[0], dims[0], 0), split_axis=split_axis + 1, concat_axis=concat_axis + 1, **params), 0)
all_to_all_p.jvp = [lambda t, ans, x, **params: all_to_all_p.bind(t, **params)]
all_to_all_p.vjp = [lambda g, ans, x, *, split_axis, concat_axis, **params:
                    all_to_all_p.bind(g, split_axis=concat_axis, concat_axis=split_axis, **params)]

# --------------------------------------------------------------------------- axis_index

axis_index_p = _collective("axis_index")
# effectful too: under a vmap its value is the batch's (never folded to a constant by a jit inside it)
axis_index_p.differentiable = False
axis_index_p.abstract_eval = lambda *, axis_name: ShapedArray((), np.dtype(np.int32))
axis_index_p.impl = lambda *, axis_name: np.asarray(
    0 if _process_group("axis_index", axis_name) is None else distributed.process_index(), np.int32)
axis_index_p.batch_named_axis = lambda vals, dims, n, *, axis_name: (np.arange(n, dtype=np.int32), 0)
