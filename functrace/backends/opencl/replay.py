"""A steady call replayed: one recorded call's kernel launches, its buffers swapped for this call's.

A small loop compiled whole runs its kernel in microseconds, and the layers between a call and
that launch -- the executable's steps, the lowering's run, its launch helper, each building lists
and dictionaries -- cost more than that (docs/opencl.md, "Steady calls replayed").  A program of
ONE step whose lowering launches the same kernels with the same sizes and scalars whatever the
inputs' values (``Lowered.replayable``: a loop or program compiled whole in one launch) is
recorded at its second call: which launch argument is which input, which is an array the call
allocated (outputs, scratch) and which is the lowering's own (uploaded constants), and which
arrays are the outputs.  Later calls allocate the same arrays from the executable's pool and
launch the recorded kernels directly.  Canary mode and ``debug_nans`` take the normal path.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import Literal
from .lowerings import LaunchContext
from .planner import LoweredStep, ProgramStep

INPUT, MADE, OWN = 0, 1, 2  # where a launch argument comes from


def eligible(exe) -> bool:
    """Can ``exe``'s calls be replayed: one replayable step, and outputs that are arrays it makes?"""
    steps = exe.plan.steps
    if len(steps) != 1 or not isinstance(steps[0], (LoweredStep, ProgramStep)) or exe.plan.views:
        return False
    return steps[0].lowered.replayable and not any(type(a) is Literal for a in exe.closed.jaxpr.outs)


class _RecordingKernel:
    def __init__(self, kernel, launches: list):
        self.kernel, self.launches = kernel, launches

    def __call__(self, queue, global_size, local_size, *args):
        self.launches.append((self.kernel, queue, global_size, local_size, args))
        return self.kernel(queue, global_size, local_size, *args)

    def make(self):
        return self.kernel.make()


class Recording:
    """A ``LaunchContext`` for one call whose launches and allocations are kept."""

    def __init__(self, ctx: LaunchContext):
        self.launches: list = []
        self.made: list = []  # (array, shape, dtype) in allocation order
        self.released: list = []
        kernels = {name: _RecordingKernel(k, self.launches) for name, k in ctx.kernels.items()}
        self.ctx = LaunchContext(ctx.rt, ctx.queue, kernels, self._alloc(ctx.alloc), self._release(ctx.release))

    def _alloc(self, alloc):
        def recorded(shape, dtype):
            arr = alloc(shape, dtype)
            self.made.append((arr, tuple(shape), dtype))
            return arr
        return recorded

    def _release(self, release):
        def recorded(arr):
            self.released.append(arr)
            release(arr)
        return recorded

    def replay(self, inputs: list, outs: list) -> "Replay | None":
        """The replay of this recording, whose call took ``inputs`` (device arrays) and returned
        ``outs``; None where a launch argument or an output is none of the call's inputs, arrays
        it made, or buffers the lowering holds (then the call is not replayed)."""
        made = [a for a, _, _ in self.made]
        if len({id(a._buffer) for a in made}) != len(made):  # (a buffer released and made again)
            return None
        launches = []
        for kernel, queue, global_size, local_size, args in self.launches:
            if kernel._kernel is None:
                return None
            # (anything else -- a scalar, a buffer the lowering uploaded -- is the lowering's own)
            spec = tuple(_find(arg, inputs, made) or (OWN, arg) for arg in args)
            launches.append((kernel._kernel, queue, global_size, local_size, spec))
        out_spec = []
        for out in outs:
            k = next((k for k, a in enumerate(made) if a is out), None)
            if k is None or out in self.released:
                return None
            out_spec.append(k)
        released = [k for k, a in enumerate(made) if any(a is r for r in self.released)]
        return Replay([(shape, dtype) for _, shape, dtype in self.made], launches, out_spec, released)


def _find(arg, inputs: list, made: list):
    for k, a in enumerate(inputs):
        if a._buffer is arg:
            return (INPUT, k)
    for k, a in enumerate(made):
        if a._buffer is arg:
            return (MADE, k)
    return None


@dataclass
class Replay:
    """The recorded call: arrays to allocate, launches with each argument's source, outputs."""

    allocs: list    # (shape, dtype) of each array the call made, in order
    launches: list  # (pyopencl kernel, queue, global size, local size, ((where, what), ...))
    outs: list      # the made array each output is
    released: list  # the made arrays released within the call (scratch)

    def run(self, ctx: LaunchContext, inputs: list) -> tuple:
        """Launch the recorded kernels on ``inputs``: (the outputs, every array the call made)."""
        made = [ctx.alloc(shape, dtype) for shape, dtype in self.allocs]
        sources = (inputs, made)
        for kernel, queue, global_size, local_size, spec in self.launches:
            kernel(queue, global_size, local_size,
                   *[what if where == OWN else sources[where][what].buffer for where, what in spec])
        for k in self.released:
            ctx.release(made[k])
        return [made[k] for k in self.outs], made
