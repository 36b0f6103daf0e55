"""The notebooks run top to bottom, headless, so they never rot; they are committed with their outputs (the figures
show on the repository page), each small enough to open at once."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


NAMES = ["demo.ipynb", "soft_vs_hard.ipynb"]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_with_its_figures_and_under_a_megabyte(name):
    """`python scripts/run_notebooks.py` writes them so."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    shows = [cell for cell in code if any(line.startswith(("display(", "print(")) for line in cell.source.splitlines())]
    assert shows and all(cell.outputs for cell in shows), name  # each cell that shows something at its top level
    assert any("image/png" in output.get("data", {}) for cell in code for output in cell.outputs)
    assert not [output for cell in code for output in cell.outputs if output.output_type == "error"]
    assert (NOTEBOOKS / name).stat().st_size < 1_000_000


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    run_in = {"metadata": {"path": str(NOTEBOOKS)}}  # the notebooks' working directory
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources=run_in)
    client.execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    assert any("image/png" in output.get("data", {}) for output in outputs), "the figures are shown"
