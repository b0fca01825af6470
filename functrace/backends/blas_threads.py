"""The host BLAS's thread count, per call: one budget for the process (issue 15).

numpy's BLAS (OpenBLAS) starts one thread per core.  On a quiet machine two threads are
1.3-1.9x faster for products from ~4M multiply-adds up; on a busy one a multi-threaded call waits
for its slowest thread at every product (tens of ms where one thread takes a few).  Programs
with large products (the numpy backend's, a program settled on the host, each host-BLAS matmul
of an OpenCL program) therefore choose per call between all cores and one from the times they
measure (``ThreadChoice``), through threadpoolctl, and give the process's count back after.
"""
from __future__ import annotations

import collections
import time


class _BlasThreads:
    """The host BLAS's thread count, set through threadpoolctl (None when it or a BLAS it knows is
    missing: the library then keeps its own count).  ``use(n)`` sets it only when it changes;
    ``restore()`` gives back the count the process had (the user's own numpy calls keep it)."""

    def __init__(self):
        try:
            from threadpoolctl import ThreadpoolController
            self.libraries = ThreadpoolController().select(user_api="blas").lib_controllers
        except Exception:  # not installed, or a BLAS it cannot drive
            self.libraries = []
        self.default = max((lib.num_threads or 1 for lib in self.libraries), default=1)
        self.current = self.default

    def use(self, threads: int) -> None:
        if threads != self.current and self.libraries:
            for lib in self.libraries:
                lib.set_num_threads(threads)
            self.current = threads

    def restore(self) -> None:
        self.use(self.default)


_blas_threads: _BlasThreads | None = None


def blas_threads() -> _BlasThreads:
    global _blas_threads
    if _blas_threads is None:
        _blas_threads = _BlasThreads()
    return _blas_threads


def restore_blas_threads() -> None:
    """After a program's host BLAS calls: the process's own thread count again (cheap if unchanged)."""
    if _blas_threads is not None and _blas_threads.current != _blas_threads.default:
        _blas_threads.restore()


SERIAL_BLAS_MACS = 1 << 21  # products with fewer multiply-adds run on one BLAS thread


def run_on_chosen_threads(choice, run, *args):
    """``run(*args)`` with the host BLAS on the thread count ``choice`` (a ``ThreadChoice``) picks,
    the call's time recorded for it, and the process's own count given back after."""
    threads = choice.pick()
    blas_threads().use(threads)
    start = time.perf_counter()
    try:
        result = run(*args)
    finally:
        restore_blas_threads()
    choice.record(threads, time.perf_counter() - start)
    return result


class ThreadChoice:
    """How many threads the host BLAS gets for one product shape (or one whole host program): one,
    or the library's default (all cores), whichever has run faster lately.  Measured on this
    2-core machine: on a quiet machine two threads are 1.3-1.9x faster from 4M multiply-adds up
    (128x512x512: 0.31 vs 0.48 ms), and no faster below 2M (64x128x128: 0.028 vs 0.018 ms); with
    other processes busy a multi-threaded call waits for its slowest thread: 512^3 took 55 ms
    (median) on two threads against 3.7 ms on one, 1024x256x256 20 vs 0.97 ms; the MLP step
    (784-512-512-10) at load 4: two threads min 2.5 ms but median 7-148 ms, one thread 3.6 / 3.8.
    Under load the *fastest* two-thread calls stay fast: one lucky call must not decide, and one
    slow call must not either.  So the choice compares medians: of the current count's last
    ``WINDOW`` calls, and of a trial of ``TRIAL`` calls on the other count, tried after 8 calls,
    then after twice as many each time it loses (up to 256: a loaded machine pays a trial in 256
    calls); when the current count's median grows past twice the other's last one, the other at
    once (the machine changed)."""

    WINDOW = 7
    TRIAL = 3

    def __init__(self, macs: int):
        cores = blas_threads().default
        self.counts = (cores, 1) if cores > 1 and macs >= SERIAL_BLAS_MACS else (1,)
        self.recent: dict = {n: collections.deque(maxlen=self.WINDOW) for n in self.counts}
        self.current = self.counts[0]
        self.calls, self.interval = 0, 8
        self.next_try = self.interval
        self.trial_left = 0  # calls of the running trial still to make on the other count

    def _other(self) -> int:
        return self.counts[-1] if self.current == self.counts[0] else self.counts[0]

    def pick(self) -> int:
        self.calls += 1
        if len(self.counts) > 1 and (self.trial_left or self.calls >= self.next_try):
            if not self.trial_left:
                self.trial_left = self.TRIAL
                self.recent[self._other()].clear()
            return self._other()
        return self.current

    def record(self, threads: int, seconds: float) -> None:
        self.recent[threads].append(seconds)
        if len(self.counts) == 1:
            return
        mine, theirs = self.recent[self.current], self.recent[self._other()]
        if threads == self.current:
            if len(mine) >= self.TRIAL and theirs and _median(mine) > 2 * _median(theirs):
                self._switch()  # the machine changed: back to the other
            return
        self.trial_left = max(self.trial_left - 1, 0)
        if self.trial_left:
            return
        if not mine or _median(theirs) < _median(mine):
            self._switch()
        else:
            self.interval = min(2 * self.interval, 256)
            self.next_try = self.calls + self.interval

    def _switch(self) -> None:
        self.current, self.interval = self._other(), 8
        self.trial_left = 0
        self.next_try = self.calls + self.interval


def _median(times) -> float:
    return sorted(times)[len(times) // 2]


class FixedThreads:
    """A ``ThreadChoice`` that always picks one count."""

    def __init__(self, threads: int):
        self.threads = threads

    def pick(self) -> int:
        return self.threads

    def record(self, threads: int, seconds: float) -> None:
        pass
