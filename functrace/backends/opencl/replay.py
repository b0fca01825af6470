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
    def __init__(self, kernel, recording: "Recording"):
        self.kernel, self.recording = kernel, recording

    def __call__(self, queue, global_size, local_size, *args):
        self.recording.launched(self.kernel, queue, global_size, local_size, args)
        return self.kernel(queue, global_size, local_size, *args)

    def make(self):
        return self.kernel.make()


class Recording:
    """A ``LaunchContext`` for one call whose launches and allocations are kept."""

    def __init__(self, ctx: LaunchContext):
        self.launches: list = []  # (kernel, queue, global size, local size, args: a made array's index or as given)
        self.made: list = []  # (array, shape, dtype) in allocation order
        self.released: list = []
        kernels = {name: _RecordingKernel(k, self) for name, k in ctx.kernels.items()}
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

    def launched(self, kernel, queue, global_size, local_size, args: tuple) -> None:
        """Keep a launch, each buffer argument that is an array the call made named by its index:
        matched now, while it holds its buffer (a released array gives its buffer back to the
        pool, which may hand it out again in the same call)."""
        made = {id(a._buffer): k for k, (a, _, _) in enumerate(self.made) if a._buffer is not None}
        spec = tuple((MADE, made[id(arg)]) if id(arg) in made else arg for arg in args)
        self.launches.append((kernel, queue, global_size, local_size, spec))

    def replay(self, inputs: list, outs: list) -> "Replay | None":
        """The replay of this recording, whose call took ``inputs`` (device arrays) and returned
        ``outs``; None where an output is not an array the call made and kept, one array was
        passed for two arguments, or a kernel was not made yet (then the call is not replayed).
        A launch argument neither made by the call nor an input is the lowering's own (a scalar,
        a buffer it uploaded)."""
        if len({id(a._buffer) for a in inputs}) != len(inputs):
            return None
        launches = []
        for kernel, queue, global_size, local_size, args in self.launches:
            if kernel._kernel is None:
                return None
            spec = tuple(arg if type(arg) is tuple else _input(arg, inputs) or (OWN, arg) for arg in args)
            launches.append((kernel._kernel, queue, global_size, local_size, spec))
        made = [a for a, _, _ in self.made]
        # (by identity: ``==`` on device arrays compares their values)
        released = [k for k, a in enumerate(made) if any(a is r for r in self.released)]
        out_spec = [next((k for k, a in enumerate(made) if a is out), None) for out in outs]
        if any(k is None or k in released for k in out_spec):
            return None
        return Replay([(shape, dtype) for _, shape, dtype in self.made], launches, out_spec, released)


def _input(arg, inputs: list):
    return next(((INPUT, k) for k, a in enumerate(inputs) if a._buffer is arg), None)


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
