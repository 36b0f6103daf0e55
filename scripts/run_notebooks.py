"""Run the notebooks top to bottom and save them with their outputs, as they are committed (the repository page
shows the figures); tests/project/test_notebooks.py runs them the same way.

    python scripts/run_notebooks.py                  # every notebook in notebooks/
    python scripts/run_notebooks.py demo.ipynb       # one

Each run trains its tiny models (minutes on a CPU). The notebooks print the temporary folder they write to as `$WORK`
(and this replaces any name of it left in the saved outputs); the execution counts are left unset (null, as nbformat
requires them of a result) and the timings dropped, so that a rerun changes only what the models printed and drew.
tests/project/test_notebooks.py checks that the saved notebooks are valid and name no machine's paths.
"""

import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TEMPORARY = re.compile(r"/tmp/caption-notebook-[A-Za-z0-9_]+")  # the WORK folder each notebook makes


def executed(path: Path) -> nbformat.NotebookNode:
    """The notebook at `path`, run top to bottom in its folder."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
                   ).execute()
    return notebook


def tidied(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Outputs without the temporary folder's name, execution counts or timings."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        cell.execution_count = None
        cell.metadata.pop("execution", None)
        for output in cell.outputs:
            if "execution_count" in output:  # a result's: required, null when unset
                output["execution_count"] = None
            if "text" in output:
                output["text"] = TEMPORARY.sub("$WORK", output["text"])
            for kind in ("text/plain", "text/markdown"):
                if kind in output.get("data", {}):
                    output["data"][kind] = TEMPORARY.sub("$WORK", output["data"][kind])
    notebook.metadata.pop("widgets", None)
    return notebook


def main(names: list[str]) -> None:
    paths = [NOTEBOOKS / name for name in names] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        notebook = tidied(executed(path))
        nbformat.validate(notebook)
        nbformat.write(notebook, path)
        print(f"{path}: {path.stat().st_size / 1024:.0f} KB")


if __name__ == "__main__":
    main(sys.argv[1:])
