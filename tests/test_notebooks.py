"""The notebooks run top to bottom, headless, so they never rot."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo.ipynb", "soft_vs_hard.ipynb"])
def test_notebook_runs_top_to_bottom(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    run_in = {"metadata": {"path": str(NOTEBOOKS)}}  # the notebooks' working directory
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources=run_in)
    client.execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    assert any("image/png" in output.get("data", {}) for output in outputs), "the figures are shown"
