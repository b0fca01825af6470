"""The OpenCL executable: the optimized IR as a list of kernel launches and host steps.

All generated kernels of one jitted function form one OpenCL program (one compile, cached by
source hash).  Values live in device ``Array`` buffers; a buffer goes back to a pool after
its last use and is reused by later allocations of the same size.  Equations without an
OpenCL lowering run as *host steps* with their numpy implementation on the zero-copy host
view of the buffers (CPU devices) or on host copies; ``report()`` lists them.
"""
from __future__ import annotations

import functools
import hashlib
import threading
import time
import warnings

import numpy as np

from ...core import ClosedJaxpr, Literal
from ...core.config import config
from ...transforms.optimize import analyze, inline_calls, optimize, shape_size
from ..numpy_backend import NumpyExecutable
from . import replay
from .fusion import f32_helpers
from .lowerings import FP64_PRAGMA, LaunchContext
from .placement import compute_units
from .planner import HostSegment, LoweredStep, Plan, ProgramStep, plan_program
from .policy import PLAIN_MACROS
from .runtime import (
    Array,
    CompileProgress,
    DeviceUnusable,
    OpenCLEnvironmentError,
    Runtime,
    forget_runtime,
    get_runtime,
)

# Macros whose cpu-kind forms the device kind's prefix defines first (``policy``): FT_STREAM_STORE, a
# store past the caches for elementwise kernels whose data exceed them (see planner._streaming; the cpu kind:
# clang's non-temporal store); FT_SIN_* / FT_COS_* (the cpu kind: PoCL's native forms); FT_FDIV /
# FT_FSQRT, float32 division and sqrt (corrected on a device that does not round them correctly)
PREAMBLE = FP64_PRAGMA + """#ifndef FT_STREAM_STORE
#  define FT_STREAM_STORE(v, p) (*(p) = (v))
#endif
""" + PLAIN_MACROS


def work_elements(closed: ClosedJaxpr) -> int | None:
    """Elements produced by all the program's equations; None when it has sub-programs (loops may
    run them many times)."""
    total = 0
    for eqn in closed.jaxpr.eqns:
        if eqn.params and any(isinstance(v, ClosedJaxpr) for v in eqn.params.values()):
            return None
        for v in eqn.out_vars:
            total += shape_size(v.aval.shape)
    return total


def is_small(closed: ClosedJaxpr) -> bool:
    """Is the whole program's work (``work_elements``) so small that, on a CPU device, launching
    kernels (see ``placement``) costs more than running it on the host?"""
    work = work_elements(closed)
    return work is not None and work < config.opencl_small_program_elements


# A program with a kernel on a CPU device is timed both ways (``HostTrial``) at its first call when
# its work is under this many elements: each step's placement is estimated alone, and the device's
# wait moves with its state, so a program near the estimate's crossover may be faster as one numpy
# program.  The bound keeps the trial's extra runs cheap (the trial runs the program 2 + 2 x
# ``HostTrial.CALLS`` times inside its first call).  On a device handing kernels to worker threads
# the numpy program must win by ``TRIAL_MARGIN``: PoCL's kernel calls are bimodal early in a
# process, and a few calls in a slow phase must not replace a kernel that is faster once warm.
TRIAL_ELEMENTS = 1 << 22
TRIAL_MARGIN = 1.2
# the device calls at which a one-step program's launches are recorded for later calls to replay
# (``replay``): the second, its kernels declared by the first; two more where an array passed twice
# in one call left a launch argument ambiguous
RECORD_AT = (2, 3, 4)
# a program's text (its kernels' source and its IR) -> how its trial ended in this process ("" the
# device path, else the report's reason for one numpy program): a program jitted again runs as the
# first did, with its numerics, without a second trial
_TRIAL_VERDICTS: dict = {}


class HostExecutable:
    """A program run on the host with the numpy executor: a small one on a CPU device (the host
    *is* the device), or one whose plan has no kernel at all (every step a host step: writing
    its inputs to device buffers and reading them back would be the only device work).  Results
    are host-backed ``Array``s: nothing is copied, and a kernel that reads one later makes its
    buffer then (on unified memory wrapping the same host memory)."""

    backend = "opencl"
    num_kernel_launches = 0

    def __init__(self, closed: ClosedJaxpr, rt: Runtime, host_plan: Plan | None = None):
        self.closed = closed
        self.rt = rt
        self._exe = NumpyExecutable(closed)
        self.peak_bytes = analyze(closed).peak_bytes
        self.plan = host_plan  # the all-host plan this replaces (for the report), if any
        self.num_host_steps = sum(s.host_equations for s in host_plan.steps) if host_plan else 0

    def __call__(self, *args):
        if any(type(a) is Array for a in args):  # their host memory, after one wait for the queue
            self.rt.finish()  # (host arguments: no wait)
            args = [(a._host if a._host is not None else a.host_view()) if type(a) is Array else a for a in args]
        return [Array.from_host(self.rt, o) for o in self._exe.run_arrays(*args)]

    def as_text(self) -> str:
        what = "a program with only host steps" if self.plan else "a small program"
        return f"// no OpenCL kernels: {what} run on the host\n" + str(self.closed)

    def report(self) -> str:
        if self.plan is None:
            return (f"device: {self.rt.name} ({self.rt.kind} kind)\nkernel launches per call: 0 (small program: run on the host; "
                    f"fewer than {config.opencl_small_program_elements} elements of work, below a kernel launch's latency)\n"
                    f"peak live intermediate bytes: {self.peak_bytes}")
        lines = [f"device: {self.rt.name} ({self.rt.kind} kind)",
                 "kernel launches per call: 0 (every step a host step: run as one numpy program, no device buffers)",
                 f"host steps per call: {self.num_host_steps}", f"peak live intermediate bytes: {self.peak_bytes}"]
        lines += [f"  program {self.plan.note}"] if self.plan.note else []
        for step in self.plan.steps:
            lines.extend(step.describe())
        return "\n".join(lines)


class HostTrial:
    """A program's device path against the same program as one numpy program, ``CALLS`` timed
    runs each, inside the program's first call: the way with the lower median is the program's
    for its life (its numerics with it: the two round differently in the last bits, and the same
    inputs must give the same bits on every call).  In blocks, not alternating: after a numpy call
    PoCL's worker threads have gone to sleep, and waking them would charge the next kernel call.
    Three kinds of program have one
    (``why`` says which, for the report), all under ``TRIAL_ELEMENTS`` of work, on a CPU device
    whose placements are not pinned (``opencl_host_step_elements``):

    * on a device that runs kernels in the calling thread (PoCL's ``basic``, one compute unit),
      any program: kernels there win nothing from parallel workers, and every host step or
      host-BLAS product waits for the kernels before it;
    * on a device handing kernels to worker threads, a program with a kernel;
    * a program of host steps and matmuls some of which auto mode measured faster as kernels
      (``_settle``): each matmul's choice weighs the product alone, while the program pays for a
      kernel with device buffers, a wait at each host step, and launches.

    The measurements behind this: benchmarks/RESULTS.md ("Measurement notes moved from the
    OpenCL backend's docstrings")."""

    CALLS = 5

    def __init__(self, host: HostExecutable, why: str, margin: float = 1.0):
        self.host = host
        self.why = why
        self.margin = margin  # the host's median times this must be under the device path's
        self.times: dict = {False: [], True: []}  # on the host? -> seconds of each call

    def median(self, on_host: bool) -> float:
        ts = sorted(self.times[on_host])
        return ts[len(ts) // 2]

    def host_wins(self) -> bool:
        return self.median(True) * self.margin < self.median(False)


def _matmul_state(step) -> dict | None:
    """A matmul step's state (its implementation, ``impl``, decided now or by auto mode later;
    its spec), or None for any other step."""
    if isinstance(step, LoweredStep) and "impl" in step.lowered.extra:
        return step.lowered.extra
    return None


def runs_only_on_host(plan: Plan) -> bool:
    """Has ``plan`` no kernel step (no launch now, none a measurement could switch to later)?"""
    return bool(plan.steps) and all(isinstance(s, HostSegment) for s in plan.steps)


def _pooled_alloc(rt: Runtime, queue, pool: dict, shape, dtype) -> Array:
    """An array for ``shape``/``dtype``: a buffer of ``pool`` when one is free (reusing memory that
    is already mapped avoids page faults on large outputs), else a new one.  When the array
    object dies, its buffer returns to the pool (outputs the caller dropped are reused).  Pooled
    per canary mode: an unguarded array's buffer is made lazily, and in canary mode that makes a
    guarded copy of its host memory, which kernels would write while readers see the original.
    In canary mode a reused buffer is filled with canaries again (after the kernels queued before
    on ``queue``, the executable's: it is in order), so an element no kernel writes shows in this
    use too."""
    canary_mode = config.opencl_debug_canaries
    key = (tuple(shape), np.dtype(dtype), canary_mode)
    free = pool.get(key)
    if free:
        buffer, host = free.pop()
        if canary_mode:
            canaries = buffer.ft_canaries
            rt.cl.enqueue_fill_buffer(queue, buffer, np.uint8(canaries.fill), 0, buffer.size)
        arr = Array(rt, buffer, shape, dtype, host)
    else:
        arr = rt.empty(shape, dtype)
        free = pool.setdefault(key, [])
    arr._recycle = free
    return arr


class OpenCLExecutable:
    """A compiled program on an OpenCL device: ``exe(*flat_args) -> list of ft.Array``."""

    backend = "opencl"

    def __init__(self, closed: ClosedJaxpr, rt: Runtime):
        self.closed = closed
        self.rt = rt
        # one line if the build and first call take over a second (the driver compiles each
        # kernel at its first launch): a long first call should not look like a hang
        self._progress = CompileProgress(f"a program of {len(closed.jaxpr.eqns)} operations")
        self._progress.start()
        try:
            self.plan = plan_program(closed, rt)
            try:
                self._build()
            except (DeviceUnusable, OpenCLEnvironmentError):
                raise
            except Exception as e:  # a program compiled whole the driver would not build: its plan's steps
                if not isinstance(self.plan.steps[0], ProgramStep):
                    raise
                self.plan = plan_program(closed, rt, whole=False)
                self.plan.note = f"not compiled whole: the driver did not build its kernel ({str(e).strip()[:200]})"
                self._build()
        finally:
            self._progress.stop()
        self.kernels = {name: rt.kernel(self.program, name) for step in self.plan.steps
                        for name in step.kernel_names}
        self.peak_bytes = analyze(closed).peak_bytes
        self._pool: dict = {}
        # (not a bound method: no reference cycle, so a dropped executable frees its program at once)
        queue = rt.in_thread_queue if self.in_thread else rt.queue
        self._alloc = functools.partial(_pooled_alloc, rt, queue, self._pool)
        self._calls = 0
        self._replay: replay.Replay | None = None  # a steady call's launches, recorded (RECORD_AT)
        self._device_consts: list | None = None
        self._release_after = self._plan_releases()
        # each batch's private values: the in-order queue runs one call's batch after the last's
        self._scratch = {s.name: rt.empty((s.scratch,), np.uint8) for s in self.plan.steps
                         if getattr(s, "scratch", 0)}
        self._launch_ctx = LaunchContext(rt, queue, self.kernels, self._alloc, Array.recycle)
        # One call at a time launches: a cl.Kernel keeps the arguments set for its next launch
        # (another thread's arguments would interleave: wrong results, or a launch naming a freed
        # buffer, which aborts PoCL), and the pool and batch scratch serve one call's launches.
        # The in-order queue then runs calls one after another, so a buffer a call returned to the
        # pool is rewritten only after the kernels that read it.  Waiting for results is outside.
        self._lock = threading.Lock()
        self.num_host_steps = sum(s.host_equations for s in self.plan.steps)
        self._host_read_inputs = self._inputs_only_host_steps_read()
        # decided at the first call, for the program's life: the whole program as one numpy
        # program, if no step launches a kernel or if it measures faster so (see _settle)
        self._settled = False
        self._settle_lock = threading.Lock()
        self._on_host: HostExecutable | None = None
        self._on_host_why = ""
        self._placements_pinned = config.opencl_host_step_elements is not None  # (when planned)

    def _build(self) -> None:
        body = "\n".join(self.plan.sources)
        self.source = PREAMBLE + f32_helpers(body) + "\n" + body
        self.in_thread = self._runs_in_thread()
        self.program = self.rt.program(self.source, in_thread=self.in_thread) if self.plan.sources else None

    def _runs_in_thread(self) -> bool:
        """Does the program run on the runtime's in-thread device (see ``in_thread``): there is one
        (and ``config.opencl_in_thread_device``), and each launch of each step is one work-group,
        for which a worker thread's wake-up would cost more than the work's spread over cores gains."""
        launching = [s for s in self.plan.steps if s.launches]
        return (self.rt.in_thread_queue is not None and config.opencl_in_thread_device and bool(launching)
                and all(s.one_unit for s in launching))

    @property
    def num_kernel_launches(self) -> int:
        """Kernel launches per call (current: a matmul that auto mode moved to BLAS launches none,
        a program run as one numpy program none at all)."""
        return 0 if self._on_host is not None else sum(s.launches for s in self.plan.steps)

    def _plan_releases(self) -> list:
        """For each step, the values whose buffers are free after it (their last read)."""
        jaxpr = self.closed.jaxpr
        views = self.plan.views
        base_of = lambda v: views[v].base if v in views else v
        last: dict = {}
        produced: set = set()
        for i, step in enumerate(self.plan.steps):
            produced.update(step.writes)
            for b in step.reads:
                last[base_of(b)] = i
        keep = {base_of(a) for a in jaxpr.outs if type(a) is not Literal}
        release = [[] for _ in self.plan.steps]
        for v, i in last.items():
            if v in produced and v not in keep:
                release[i].append(v)
        return release

    # ------------------------------------------------------------------ buffers

    def _inputs_only_host_steps_read(self) -> set:
        """Inputs read by host steps alone (no kernel, no view, not an output): a numpy argument
        for one is used in place, not copied to a device buffer (host steps run during the call,
        so the caller cannot change it under them; e.g. the matrix of a LAPACK step)."""
        kernel_read = {v.base for v in self.plan.views.values()}
        kernel_read.update(a for a in self.closed.jaxpr.outs if type(a) is not Literal)
        for step in self.plan.steps:
            if not isinstance(step, HostSegment):
                kernel_read.update(step.reads)
        return set(self.closed.jaxpr.in_vars) - kernel_read

    def _as_device(self, v, x) -> Array:
        if isinstance(x, Array):
            return x
        x = np.asarray(x)
        if v in self._host_read_inputs and x.dtype == v.aval.dtype:
            return Array(self.rt, None, x.shape, x.dtype, x)  # (its buffer is never made)
        return self.rt.to_device(x)

    def _materialize_view(self, env, v):
        out = self._alloc(v.aval.shape, v.aval.dtype)
        self.rt.write(out, self._host_value(env, v))
        env[v] = out
        return out

    def _host_value(self, env, v) -> np.ndarray:
        """``v`` as a numpy array on the host (views of a buffer stay numpy views)."""
        if v in env:
            return env[v].host_view().reshape(v.aval.shape)
        view = self.plan.views[v]
        flat = env[view.base].host_view().reshape(-1)
        item = flat.itemsize
        return np.lib.stride_tricks.as_strided(flat[view.offset:], v.aval.shape,
                                               [st * item for st in view.strides], writeable=False)

    # ------------------------------------------------------------------ running

    def _settle(self) -> HostTrial | None:
        """At the first call, how the program runs for its life (so its numerics never change):
        a program whose steps are all host steps and host-BLAS matmuls runs as one numpy program
        (``HostExecutable``, as the numpy backend would: no buffers, pools, waits or per-step
        dispatch) -- unless it has no host step and a product auto mode has still to measure
        (the device path measures it for later processes, see ``matmul``).  Returns the
        trial to run before the first result (``HostTrial``), if any: when some of those matmuls
        were measured faster as kernels, or as ``_new_trial`` says."""
        matmuls = self._matmuls()
        host_and_matmuls = self.rt.policy.host_blas and all(isinstance(s, HostSegment) or _matmul_state(s) is not None
                                                  for s in self.plan.steps)
        if host_and_matmuls and all(m["impl"] == "blas" for m in matmuls):
            around_host = any(isinstance(s, HostSegment) for s in self.plan.steps)
            if around_host or not any(m["undecided"] for m in matmuls):
                self._on_host = HostExecutable(self.closed, self.rt, host_plan=self.plan)
                self._on_host_why = ("every matmul on the host BLAS (each line below says why): run as one "
                                     "numpy program")
                return None
        if (host_and_matmuls and any(m["impl"] == "opencl" for m in matmuls) and self._within_trial_bound()
                and all(m["impl"] == "blas" or m.get("auto") for m in matmuls)):  # (not a kernel the user forced)
            return HostTrial(HostExecutable(self.closed, self.rt, host_plan=self.plan),
                             "host steps and matmuls, some measured faster as kernels alone")
        return self._new_trial()

    def _matmuls(self) -> list:
        """The state (``lowered.extra``) of each of the program's matmul steps."""
        return [m for m in map(_matmul_state, self.plan.steps) if m is not None]

    def _within_trial_bound(self) -> bool:
        work = work_elements(self.closed)
        return work is not None and work < TRIAL_ELEMENTS

    def __call__(self, *args):
        """Run the program; any number of threads may call at once (see ``_lock``)."""
        if not self._settled:
            outs = self._first_call(args)
            if outs is not None:
                return outs
        if self._on_host is not None:
            return self._on_host(*args)
        return self._device_call(args)

    def _first_call(self, args) -> list | None:
        """Settle how the program runs (``_settle``), running its trial if it has one: then the
        winner's results of the trial's last run, else None (the caller runs the program)."""
        with self._settle_lock:
            if self._settled:  # (another thread's first call settled it meanwhile)
                return None
            trial = self._settle()
            outs = None
            if trial is not None:
                key = hashlib.sha256((self.source + str(self.closed.jaxpr)).encode()).hexdigest()
                if key not in _TRIAL_VERDICTS:
                    outs = self._run_trial(trial, args)
                    _TRIAL_VERDICTS[key] = self._on_host_why if self._on_host is not None else ""
                elif _TRIAL_VERDICTS[key]:
                    self._on_host, self._on_host_why = trial.host, _TRIAL_VERDICTS[key]
            self._settled = True
            return outs

    def _run_trial(self, trial: HostTrial, args) -> list:
        """Two device-path calls (their kernels compile, the pools fill), then ``CALLS`` timed
        calls each way in blocks; the faster way stays (see ``HostTrial``)."""
        for _ in range(2):
            outs = self._device_call(args)
        for on_host in (False, True):
            for _ in range(trial.CALLS):
                start = time.perf_counter()
                if on_host:
                    host_outs = trial.host(*args)
                else:
                    outs = self._device_call(args)
                    self.rt.finish()  # (timed to its results)
                trial.times[on_host].append(time.perf_counter() - start)
        if not trial.host_wins():
            return outs
        self._on_host = trial.host
        self._on_host_why = (f"measured faster as one numpy program: median {trial.median(True) * 1e6:.0f} "
                             f"vs {trial.median(False) * 1e6:.0f} us a call ({trial.why})")
        return host_outs

    def _device_call(self, args) -> list:
        """One call on the device path: kernels, host steps and matmuls as planned (a steady call
        of a one-step program: its recorded launches, ``replay``)."""
        env: dict = {}
        with self._lock:
            try:
                if self._replay is not None and not config.opencl_debug_canaries:
                    outs = self._replayed(env, args)
                else:
                    outs = self._launch(env, args)
            except BaseException:
                # e.g. a Ctrl-C between launches: kernels already queued still read and write the
                # memory of env's arrays (on unified memory, numpy's), which must outlive them
                self.rt.hold(self, env)
                raise
        if config.debug_nans:
            self._check_nans(args, outs)
        return outs

    def _new_trial(self) -> HostTrial | None:
        """The trial of this program as one numpy program, or None: on the cpu kind, whose
        placements are not pinned, a program under ``TRIAL_ELEMENTS`` of work: any program when
        kernels run in the calling thread, else one with a kernel."""
        if not self.rt.policy.timed_trials or self._placements_pinned or not self._within_trial_bound():
            return None
        if compute_units(self.rt) <= 1:
            return HostTrial(HostExecutable(self.closed, self.rt),
                             "a device running kernels in the calling thread between host BLAS products")
        if not any(s.launches for s in self.plan.steps):
            return None  # (no numpy program built for nothing)
        return HostTrial(HostExecutable(self.closed, self.rt),
                         f"kernels placed one step at a time, {work_elements(self.closed)} elements of work; "
                         f"the numpy program must win by {TRIAL_MARGIN:g}x", TRIAL_MARGIN)

    def _launch(self, env: dict, args) -> list:
        """Enqueue one call's kernels (and run its host steps) with their values in ``env``."""
        self._calls += 1
        if self._calls in RECORD_AT and self._replay is None and not (config.opencl_debug_canaries
                                                                     or config.debug_nans) and replay.eligible(self):
            return self._recorded(env, args)
        if self._calls > 1:
            return self._launch_steps(env, args)
        self._progress.start()
        try:
            return self._launch_steps(env, args)
        finally:
            self._progress.stop()

    def _recorded(self, env: dict, args) -> list:
        """A call whose launches are recorded, and made the replay of later calls if they can be."""
        recording = replay.Recording(self._launch_ctx)
        ctx, self._launch_ctx = self._launch_ctx, recording.ctx
        try:
            outs = self._launch_steps(env, args)
        finally:
            self._launch_ctx = ctx
        inputs = [env.get(v) for v in self.closed.jaxpr.in_vars]
        if all(isinstance(a, Array) for a in inputs):
            self._replay = recording.replay(inputs, outs)  # (None: a later call may record)
        return outs

    def _replayed(self, env: dict, args) -> list:
        """A steady call as the recorded one (``replay``), with ``_launch_steps``'s waits and holds."""
        self._before_launches()
        env["inputs"] = inputs = [self._as_device(v, x) for v, x in zip(self.closed.jaxpr.in_vars, args)]
        outs, env["made"] = self._replay.run(self._launch_ctx, inputs)
        self._after_launches(env)
        return outs

    def _before_launches(self) -> None:
        if self.in_thread:  # (its inputs may be the results of kernels still queued on the other queue)
            self.rt.queue.finish()

    def _after_launches(self, env: dict) -> None:
        if self.in_thread:  # (ran as it was enqueued: later users on the other queue need no wait)
            self._launch_ctx.queue.finish()
        else:
            self.rt.hold(self, env)  # unified memory: inputs and pools stay alive while kernels run

    def _launch_steps(self, env: dict, args) -> list:
        jaxpr = self.closed.jaxpr
        self._before_launches()
        if self._device_consts is None:
            self._device_consts = [c if isinstance(c, Array) else self.rt.to_device(np.asarray(c))
                                   for c in self.closed.consts]
        env.update(zip(jaxpr.const_vars, self._device_consts))
        for v, x in zip(jaxpr.in_vars, args):
            env[v] = self._as_device(v, x)
        views = self.plan.views

        def get(v):
            if v in env:
                return env[v]
            if v in views:
                return self._materialize_view(env, v)
            raise KeyError(v)

        for step, dead in zip(self.plan.steps, self._release_after):
            step.run(self, env, get)
            for v in dead:  # last read: a pooled buffer serves later allocations of its size
                if env[v]._recycle is not None:
                    env.pop(v).recycle()
        outs = [self.rt.to_device(np.asarray(a.val)) if type(a) is Literal else get(a) for a in jaxpr.outs]
        self._after_launches(env)
        return outs

    def _check_nans(self, args, outs) -> None:
        """``debug_nans``: kernels cannot stop at a NaN, so (as JAX) a NaN in the outputs makes the
        program run again equation by equation on the host, raising at the first one that makes
        a NaN; if that run makes none, the output is named."""
        for k, out in enumerate(outs):
            value = np.asarray(out)
            if value.dtype.kind in "fc" and np.isnan(value).any():
                with np.errstate(all="ignore"):  # the NaN is reported below, not warned about
                    NumpyExecutable(self.closed)(*[np.asarray(a) for a in args])
                raise FloatingPointError(f"NaN in output {k} of an OpenCL program (ft.config.debug_nans is "
                                         "on; the host re-run made none: a difference of the kernels)")

    # ------------------------------------------------------------------ introspection

    def as_text(self) -> str:
        return self.source

    def report(self) -> str:
        lines = [f"device: {self.rt.name} ({self.rt.kind} kind)", f"kernel launches per call: {self.num_kernel_launches}",
                 f"host steps per call: {self.num_host_steps}", f"peak live intermediate bytes: {self.peak_bytes}"]
        if self._on_host is not None:
            lines[1] += f" ({self._on_host_why})"
        lines += [f"  program {self.plan.note}"] if self.plan.note else []
        if self.in_thread and self._on_host is None:
            lines.append(f"  runs in the calling thread on {self.rt.in_thread_queue.device.name} (each launch one "
                         f"work-group: no worker thread to wake)")
        for step in self.plan.steps:
            lines.extend(step.describe())
        return "\n".join(lines)


def compile_opencl(closed: ClosedJaxpr):
    """``closed`` compiled for the OpenCL backend: an ``OpenCLExecutable`` on the configured device,
    a ``HostExecutable`` for a small program on a CPU device or a plan with no device work, or a
    ``NumpyExecutable`` when no OpenCL device is usable.  A device whose compiler proves unusable
    is dropped for the next one, unless the user chose it."""
    inlined = inline_calls(closed)  # custom rules / checkpoints: their bodies become kernels
    if inlined is not closed:
        closed = optimize(inlined)[0]
    while True:
        rt = get_runtime()
        if rt is None:
            return NumpyExecutable(closed)
        if rt.policy.small_programs_on_host and is_small(closed):
            return HostExecutable(closed, rt)
        try:
            exe = OpenCLExecutable(closed, rt)
        except DeviceUnusable as e:
            if config.device not in (None, ""):
                raise  # the device the user chose: say so rather than run elsewhere
            warnings.warn(f"functrace: {e}; trying the next OpenCL device", RuntimeWarning, stacklevel=4)
            forget_runtime()
            continue
        if runs_only_on_host(exe.plan):  # no device work: buffers would only copy in and out
            return HostExecutable(closed, rt, host_plan=exe.plan)
        return exe
