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
    start = time.time()
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)
    return proc, time.time()


def test_two_processes_match_vmap_over_stacked_shards_and_data_parallel_gradient_is_exact():
    proc, _ = _mpiexec(str(TESTS / "mpi_program.py"), "collectives")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK collectives" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("launcher", [[], ["-m", "mpi4py"]], ids=["python", "python-m-mpi4py"])
def test_an_exception_on_one_process_ends_the_job_within_10_s(launcher):
    proc, end = _mpiexec(*launcher, str(TESTS / "mpi_program.py"), "raise", timeout=60)
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
