"""The README's ``python`` blocks run as written, in order, in one fresh interpreter."""
import pathlib
import re
import subprocess
import sys


def test_readme_python_blocks_run_in_order(tmp_path):
    root = pathlib.Path(__file__).resolve().parents[1]
    blocks = re.findall(r"```python\n(.*?)```", (root / "README.md").read_text(), flags=re.S)
    assert len(blocks) >= 4
    script = tmp_path / "readme_blocks.py"
    script.write_text("\n".join(f"# --- block {i}\n{b}" for i, b in enumerate(blocks)))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=root, timeout=600,
                         env={**__import__("os").environ, "PYTHONPATH": str(root), "MPLBACKEND": "Agg"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
