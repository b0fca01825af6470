"""The notebooks in ``notebooks/`` run from top to bottom without an error.

Each runs in a fresh kernel of this interpreter (the ``python3`` kernel, which jupyter_client
starts with ``sys.executable`` whatever ``python`` is on PATH; the test checks the kernel's
``sys.prefix``, i.e. the same virtual environment) with the repository on ``PYTHONPATH``, so
it exercises the working tree, not an installed copy.  ``python tests/test_notebooks.py
[name ...]`` executes notebooks the same way and saves them with their outputs (they are stored
executed, so they read on a code host).
"""
import os
import pathlib
import sys
import time

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebooks need the test extra (nbformat, nbclient)")
nbclient = pytest.importorskip("nbclient", reason="the notebooks need the test extra (nbformat, nbclient)")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TIMEOUT_PER_CELL = 300  # seconds; the whole set runs in well under two minutes on 2 cores
_PROBE = "import sys\nprint(sys.prefix)"


def execute(path: pathlib.Path) -> "nbformat.NotebookNode":
    """Run the notebook at ``path`` in a fresh kernel (working directory: its folder) and return
    it with its outputs; raise ``nbclient.exceptions.CellExecutionError`` at the first failing
    cell.  Figures render headless through matplotlib's inline backend (Agg)."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(_PROBE))  # which interpreter the kernel runs
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "MPLBACKEND")}
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), saved["PYTHONPATH"]) if p)
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    try:
        client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=TIMEOUT_PER_CELL, record_timing=False,
                                         resources={"metadata": {"path": str(path.parent)}})
        client.execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    probe = nb.cells.pop(0)
    kernel_prefix = "".join(o.get("text", "") for o in probe.outputs).strip()
    assert kernel_prefix == sys.prefix, f"the kernel runs in {kernel_prefix}, not in this environment ({sys.prefix})"
    for cell in nb.cells:  # number the cells from 1, as a run without the probe would
        cell.metadata.pop("execution", None)  # timestamps: noise in a stored notebook's diff
        if cell.cell_type == "code":
            cell.execution_count -= 1
            for out in cell.outputs:
                if "execution_count" in out:
                    out.execution_count -= 1
    return nb


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 5, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    nb = execute(path)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []


def test_notebooks_are_stored_executed():
    """Every code cell of a stored notebook has been run, in order, so the file reads with its
    results on a code host."""
    for path in NOTEBOOKS:
        cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        counts = [c.execution_count for c in cells]
        assert counts == list(range(1, len(cells) + 1)), (path.name, counts)


if __name__ == "__main__":
    names = sys.argv[1:]
    for path in NOTEBOOKS:
        if names and not any(n in path.name for n in names):
            continue
        start = time.perf_counter()
        executed = execute(path)
        nbformat.write(executed, path)
        print(f"{path.name}: {time.perf_counter() - start:.1f} s")
