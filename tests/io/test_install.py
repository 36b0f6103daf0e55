"""Every line that says how to install show-attend-tell installs it from its repository (it is on no package index
yet): the Source URL of pyproject.toml, or a clone."""

import re
import tomllib
from pathlib import Path

from caption.io.install import install_line

ROOT = Path(__file__).resolve().parents[2]
# `pip install show-attend-tell`, `pip install -U "show-attend-tell[hub]"`: a name pip would look up on PyPI
FROM_AN_INDEX = re.compile(r"""pip install (?:-U )?["']?show-attend-tell(?:\[\w+\])?(?!\[| @ git\+)["']?""")


def test_the_install_lines_name_the_repository_of_pyproject_and_a_clone():
    source = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Source"]
    assert install_line(extra="hub") == (f'pip install "show-attend-tell[hub] @ git+{source}" '
                                         '(or pip install -e ".[hub]" in a clone)')
    assert install_line(upgrade=True) == (f'pip install -U "show-attend-tell @ git+{source}" '
                                          "(or git pull, then pip install -e . in a clone)")


def test_no_readme_doc_or_message_installs_the_project_from_a_package_index():
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "caption").rglob("*.py"),
             *(ROOT / "notebooks").glob("*.ipynb")]
    found = [f"{path.relative_to(ROOT)}: {match.group()}" for path in files
             for match in FROM_AN_INDEX.finditer(path.read_text(encoding="utf-8"))]
    assert not found, found
