"""The notebooks run top to bottom, headless, so they never rot; they are committed with their outputs (the figures
show on the repository page), valid for any reader of notebooks, naming no machine's paths, each small enough to open
at once."""

import ast
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# an absolute path (a folder and more below it) where a path starts in text: after a space, a quote or a bracket
ABSOLUTE_PATH = re.compile(r"(?:^|(?<=[\s'\"(\[=]))(/[\w.-]+/[\w./-]+|[A-Za-z]:\\[\w.\\-]+)")


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


def test_every_notebook_is_valid_nbformat():
    assert sorted(path.name for path in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)
    for name in NAMES:
        nbformat.validate(nbformat.read(NOTEBOOKS / name, as_version=4))  # raises naming the first fault


def output_text(output: nbformat.NotebookNode) -> str:
    data = output.get("data", {})
    return "".join([output.get("text", ""), data.get("text/plain", ""), data.get("text/markdown", ""),
                    output.get("evalue", ""), *output.get("traceback", [])])


@pytest.mark.parametrize("name", NAMES)
def test_the_outputs_name_no_path_of_the_machine_they_ran_on(name):
    """No virtual environment, home or temporary folder: the temporary folder shows as $WORK, the rest relative."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    text = "\n".join(output_text(output) for cell in notebook.cells if cell.cell_type == "code"
                     for output in cell.outputs)
    assert "$WORK/" in text, "the temporary folder shown by its name in the notebook"
    assert ABSOLUTE_PATH.findall(text) == []


@pytest.mark.parametrize("name", NAMES)
def test_the_committed_outputs_come_from_models_that_look(name):
    """`python scripts/run_notebooks.py` beside the quick start's runs (runs/shapes_soft, runs/shapes_hard): the
    figures show models that look, not a tiny model's warning that it does not."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    text = "\n".join(output_text(output) for cell in notebook.cells if cell.cell_type == "code"
                     for output in cell.outputs)
    assert "is not looking" not in text and "attention accuracy 0.000" not in text


def test_the_path_check_finds_the_paths_it_is_for():
    found = ABSOLUTE_PATH.findall("/home/me/.venv/lib/python3.11/site-packages/lightning/fit_loop.py:321: The number "
                                  "in PosixPath('/tmp/caption-notebook-x1/soft') and C:\\Users\\me\\run, not "
                                  "$WORK/soft/logs, runs/shapes_soft, 3/4 [00:02] or https://pypi.org/project/x/")
    assert found == ["/home/me/.venv/lib/python3.11/site-packages/lightning/fit_loop.py",
                     "/tmp/caption-notebook-x1/soft", "C:\\Users\\me\\run"]


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


def bound_names(source: str) -> set[str]:
    """The names a cell's code binds: assigned, loop or `with` targets, functions, classes, imports."""
    tree = ast.parse(source)
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    names |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    return names | {(alias.asname or alias.name).split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names}


@pytest.mark.parametrize("name", NAMES)
def test_no_cell_rebinds_a_helper_of_the_first_cell(name):
    """A later cell that binds `caption` (the helper that runs the command) breaks every cell run after it again."""
    code = [cell.source for cell in nbformat.read(NOTEBOOKS / name, as_version=4).cells if cell.cell_type == "code"]
    helpers = {node.name for node in ast.parse(code[0]).body if isinstance(node, ast.FunctionDef)}
    assert helpers and [(index, sorted(bound_names(source) & helpers)) for index, source in enumerate(code[1:], 1)
                        if bound_names(source) & helpers] == [], name


@pytest.mark.parametrize("name", NAMES)
def test_a_progress_bar_shows_its_last_state_once(name):
    """What a terminal shows of a bar redrawn after carriage returns: one line per bar, not each redraw."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            bars = re.findall(r"^(\w+): +\d+%\|", output.get("text", ""), flags=re.MULTILINE)
            assert len(bars) == len(set(bars)), (name, bars)
    helper = notebook.cells[1].source if notebook.cells[1].cell_type == "code" else ""
    assert 'rsplit("\\r", 1)[-1]' in helper, "the `caption` helper keeps a bar's last state only"
