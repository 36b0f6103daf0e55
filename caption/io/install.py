"""How to install show-attend-tell, for the lines that tell a user to: it is on no package index yet, so from its
repository (the Source URL of pyproject.toml, or of the installed package's metadata).

    url = source_url()                        # https://github.com/... or None
    install_line(extra="hub")                 # pip install "show-attend-tell[hub] @ git+<url>" (or ... in a clone)
    install_line(upgrade=True)                # the same, to upgrade
"""

import tomllib
from importlib.metadata import PackageNotFoundError
from importlib.metadata import metadata as package_metadata
from pathlib import Path

DISTRIBUTION = "show-attend-tell"  # [project] name of pyproject.toml
SOURCE_URL_LABEL = "Source"  # the [project.urls] entry installs are made from
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"  # in a checkout of the source (editable installs)


def source_url() -> str | None:
    """The repository show-attend-tell installs from: [project.urls] Source of the checkout's pyproject.toml (current
    even in an editable install whose metadata predates it), else of the installed package's metadata."""
    try:
        project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
        if project["name"] == DISTRIBUTION:  # not another project's file beside an installed package
            return project["urls"][SOURCE_URL_LABEL]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError):
        pass
    try:
        entries = package_metadata(DISTRIBUTION).get_all("Project-URL") or []
    except PackageNotFoundError:
        return None
    urls = dict(entry.split(", ", 1) for entry in entries if ", " in entry)
    return urls.get(SOURCE_URL_LABEL)


def install_line(*, extra: str | None = None, upgrade: bool = False) -> str:
    """The pip command that installs (upgrade: upgrades) show-attend-tell with `extra` from its repository, and the
    one for a clone of it.

    extra:    an optional dependency group of pyproject.toml ("hub", "tensorboard"), or None
    upgrade:  pip's -U, for a newer release than the one installed
    """
    extras = f"[{extra}]" if extra else ""
    clone = f'pip install -e ".{extras}" in a clone' if extras else "pip install -e . in a clone"
    if upgrade:
        clone = f"git pull, then {clone}"
    url = source_url()
    if url is None:
        return clone
    return f'pip install{" -U" if upgrade else ""} "{DISTRIBUTION}{extras} @ git+{url}" (or {clone})'
