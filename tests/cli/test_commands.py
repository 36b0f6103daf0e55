"""One coherent command line: every command listed with its help, and quick to answer."""

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from caption.cli import COMMANDS, main

PACKAGE = Path(__file__).resolve().parents[2] / "caption"


def test_help_lists_every_command_with_a_line(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    for name in ("fit", "validate", "test", "predict", "features", "describe", "evaluate", "compare", "serve",
                 "pretrain-encoder", "export"):
        assert any(line.split()[:1] == [name] and len(line.split()) > 3 for line in out.splitlines()), name
    assert len(COMMANDS) == 12


def test_version(capsys):
    main(["--version"])
    assert capsys.readouterr().out.startswith("caption (show-attend-tell) ")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_has_its_own_help_without_warnings(name, capsys):
    with warnings.catch_warnings(record=True) as caught, pytest.raises(SystemExit) as exit_:
        warnings.simplefilter("always")
        main([name, "--help"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 0
    assert out.startswith("usage: caption ") and name in out.splitlines()[0], out.splitlines()[0]
    assert "--ckpt_path" in out or name in ("features", "compare", "migrate-config", "pretrain-encoder", "export"), \
        "one name for the checkpoint"
    assert not [str(w.message) for w in caught if "caption" in w.filename or "lightning" in w.filename]
    assert "warn" not in err.lower(), err
    if name == "features":
        assert len(out.splitlines()) < 30, "its own help, not every Trainer option"


def test_unknown_command_names_the_commands():
    with pytest.raises(SystemExit) as exit_:
        main(["train"])
    assert exit_.value.code.startswith("caption: error: unknown command 'train'; the commands are fit, validate")


QUICK = """
import contextlib, io, sys
from caption.cli import main
for args in (["--help"], ["--version"], ["trian"], []):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(args)
print(sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "lightning", "matplotlib", "numpy")))
"""


def test_help_version_and_a_mistyped_command_import_neither_torch_nor_lightning():
    """They answer at once: only the commands that need them import them."""
    out = subprocess.run([sys.executable, "-c", QUICK], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout
    assert out.strip() == "[]", out


def imports(path: Path) -> set[str]:
    """The caption.* modules that the file at `path` imports, anywhere in it (functions included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from caption import inference`
    return {name for name in names if name.split(".")[0] == "caption"}


def module_graph() -> dict[str, set[str]]:
    """caption module -> the caption modules it imports (only names that are modules of the package)."""
    files = {".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): path
             for path in PACKAGE.rglob("*.py")}
    return {module: {name for name in imports(path) if name in files and name != module}
            for module, path in files.items()}


def test_only_the_readers_of_old_files_import_the_compatibility_module():
    """caption.legacy.settings (files and command lines of 0.1) is a leaf used where old files are read: checkpoints,
    migrate-config, and the error path of the command line parsers, Lightning's and the other commands' (naming the
    new spelling of a refused old one)."""
    graph = module_graph()
    assert not graph["caption.legacy.settings"] - {"caption.errors", "caption.io.outputs"}
    importers = {module for module, imported in graph.items() if "caption.legacy.settings" in imported}
    assert importers == {"caption.legacy.checkpoints", "caption.legacy.config_text", "caption.cli.lightning.parser",
                         "caption.cli.options"}



def test_the_legacy_folder_is_reached_only_through_its_hooks():
    """caption.legacy (0.1's settings, the flat layout's module names) is imported only by the checkpoint reader, the
    class-path lookup and the command line: deleting it means mending those and nothing else."""
    graph = module_graph()
    importers = {module for module, imported in graph.items()
                 if not module.startswith("caption.legacy")
                 and any(name.startswith("caption.legacy") for name in imported)}
    assert importers == {"caption.io.checkpoints", "caption.io.class_paths", "caption.cli",
                         "caption.cli.migrate_config", "caption.cli.lightning.parser", "caption.cli.options"}
