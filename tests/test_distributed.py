"""``ft.distributed`` over real MPI processes: tests launch ``mpiexec -n 2`` (the one beside
``sys.executable``, from the ``mpi`` extra) on tests/mpi_program.py, with a timeout."""
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import functrace as ft

TESTS = pathlib.Path(__file__).parent
REPO = TESTS.parent


def _mpiexec(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    pytest.importorskip("mpi4py", reason="multi-process tests need the mpi extra (mpi4py, mpich)")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS)]))
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)
    return proc, time.time()


def test_two_processes_match_vmap_over_stacked_shards_and_data_parallel_gradient_is_exact():
    proc, _ = _mpiexec(str(TESTS / "mpi_program.py"), "collectives")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK collectives" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("launcher, check", [([], "raise"), (["-m", "mpi4py"], "raise"), ([], "raise-in-thread")],
                         ids=["python", "python-m-mpi4py", "in-a-thread"])
def test_an_exception_on_one_process_ends_the_job_within_10_s(launcher, check):
    proc, end = _mpiexec(*launcher, str(TESTS / "mpi_program.py"), check, timeout=60)
    assert proc.returncode != 0
    assert "RuntimeError: an error on one process" in proc.stderr
    raised = float(re.search(r"RAISING AT ([0-9.]+)", proc.stderr).group(1))
    assert end - raised < 10, f"the job took {end - raised:.1f} s to end after the exception"


def test_one_process_group_without_initialize():
    assert ft.distributed.process_count() == 1 and ft.distributed.process_index() == 0
    tree = {"a": np.arange(3.0), "b": 2}
    assert ft.tree_util.tree_structure(ft.distributed.broadcast(tree)) == ft.tree_util.tree_structure(tree)
    np.testing.assert_array_equal(ft.distributed.shard(np.arange(6)), np.arange(6))


def test_import_functrace_does_not_import_mpi4py():
    code = "import sys, functrace, functrace.distributed; assert 'mpi4py' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=str(REPO)))


class _TwinComm:
    """A stand-in communicator of two processes holding the same values: records each Allreduce."""

    def __init__(self, MPI):
        self.MPI, self.calls, self.in_place = MPI, [], []

    def Get_size(self):
        return 2

    def Allreduce(self, send, recv, op):
        self.calls.append(recv.nbytes)
        self.in_place.append(send is self.MPI.IN_PLACE)
        np.asarray(recv)[...] = (recv if send is self.MPI.IN_PLACE else send) * 2  # (as MPI: through the buffer)


def test_psum_packs_small_arrays_into_one_message_and_reuses_free_large_outputs(monkeypatch):
    MPI = pytest.importorskip("mpi4py.MPI", reason="the collectives' MPI path needs mpi4py")
    comm = _TwinComm(MPI)
    monkeypatch.setattr(ft.distributed, "communicator", lambda: comm)
    tree = {"a": np.ones(3, np.float32), "b": np.arange(5.0, dtype=np.float32), "n": np.arange(2),
            "big": np.ones(2**18, np.float32)}
    out = ft.jit(lambda t: ft.lax.psum(t, "processes"), backend="numpy")(tree)
    assert sorted(comm.calls) == [16, 32, 2**20]  # the two small float32 arrays: one message
    for k in tree:
        np.testing.assert_array_equal(out[k], tree[k] * 2)
    held = out["big"]
    again = ft.lax.psum(tree["big"] + 1, "processes")
    assert again is not held and np.all(held == 2) and np.all(again == 4)  # a held result is never reused
    del held, out, again
    first = ft.lax.psum(tree["big"], "processes")
    first_id = id(first)
    del first
    assert id(ft.lax.psum(tree["big"], "processes")) == first_id  # a dropped one is


def test_a_large_psum_operand_that_dies_there_is_reduced_in_place(monkeypatch):
    """In a compiled numpy program, a large psum operand made by the program and read by nothing
    else is reduced in place; an argument, an output or a value still used later is not."""
    MPI = pytest.importorskip("mpi4py.MPI", reason="the collectives' MPI path needs mpi4py")
    comm = _TwinComm(MPI)
    monkeypatch.setattr(ft.distributed, "communicator", lambda: comm)
    big = np.arange(2.0**16, dtype=np.float32)
    kept = big.copy()
    cases = [(lambda x: ft.lax.psum(x * 2.0 + 1.0, "processes"), True, lambda x: (x * 2 + 1) * 2),
             (lambda x: ft.lax.psum(x, "processes"), False, lambda x: x * 2),  # the caller's argument
             (lambda x: (lambda h: (ft.lax.psum(h, "processes"), h))(x * 2.0), False,  # h is also returned
              lambda x: (x * 4, x * 2)),
             (lambda x: (lambda h: ft.lax.psum(h, "processes") + h)(x * 2.0), False, lambda x: x * 6)]  # used after
    for f, in_place, want in cases:
        comm.in_place.clear()
        got = ft.jit(f, backend="numpy")(big)
        assert comm.in_place == [in_place]
        for g, w in zip(got if isinstance(got, tuple) else (got,), want(kept) if isinstance(want(kept), tuple)
                        else (want(kept),)):
            np.testing.assert_array_equal(np.asarray(g), w)
        np.testing.assert_array_equal(big, kept)


def test_consecutive_psums_of_a_program_are_one_collective_unless_an_effect_or_a_use_is_between(monkeypatch):
    MPI = pytest.importorskip("mpi4py.MPI", reason="the collectives' MPI path needs mpi4py")
    comm = _TwinComm(MPI)
    monkeypatch.setattr(ft.distributed, "communicator", lambda: comm)
    x, y = np.arange(3.0, dtype=np.float32), np.ones(2, np.float32)

    def separate(x, y):  # the loss and the gradients summed apart, as user code often does
        return ft.lax.psum(x, "processes"), ft.lax.psum(y * 3, "processes")

    def used_between(x, y):
        return ft.lax.psum(ft.lax.psum(x, "processes")[:2] + y, "processes")

    def printed_between(x, y):
        total = ft.lax.psum(x, "processes")
        ft.debug.print("between {}", y)
        return total, ft.lax.psum(y, "processes")

    for f, want_messages, want in [(separate, 1, (x * 2, y * 6)), (used_between, 2, (x[:2] * 4 + y * 2,)),
                                   (printed_between, 2, (x * 2, y * 2))]:
        psums = [e for e in ft.jit(f).lower(x, y).jaxpr.jaxpr.eqns if e.primitive.name == "psum"]
        assert len(psums) == want_messages, f.__name__
        comm.calls.clear()
        got = ft.jit(f, backend="numpy")(x, y)
        assert len(comm.calls) == want_messages, f.__name__
        for g, w in zip(got if isinstance(got, tuple) else (got,), want):
            np.testing.assert_array_equal(g, w)


def test_the_example_trains_the_same_on_two_processes_as_on_one():
    example = str(REPO / "examples" / "train_data_parallel.py")
    args = ["--steps", "3", "--batch", "32"]
    proc, _ = _mpiexec(example, *args)
    assert proc.returncode == 0, proc.stderr
    one = subprocess.run([sys.executable, example, *args], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    losses = lambda out: re.findall(r"loss (\S+)", out)
    assert losses(proc.stdout) == losses(one.stdout) and len(losses(one.stdout)) == 2, (proc.stdout, one.stdout)
