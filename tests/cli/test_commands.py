"""One coherent command line: every command listed with its help, and quick to answer."""

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
    assert len(COMMANDS) == 11


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
    assert "--ckpt_path" in out or name in ("features", "compare", "pretrain-encoder"), \
        "one name for the checkpoint"
    assert not [str(w.message) for w in caught if "caption" in w.filename or "lightning" in w.filename]
    assert "warn" not in err.lower(), err
    if name == "features":  # fit's parser, without what only training reads
        assert "--data.features" in out and "--trainer.max_epochs" not in out and "\n  --ckpt_path" not in out


def test_unknown_command_names_the_commands():
    with pytest.raises(SystemExit) as exit_:
        main(["train"])
    assert exit_.value.code.startswith("caption: error: unknown command 'train'; the commands are fit, validate")


QUICK = """
import contextlib, io, sys
from caption.cli import main
for args in sys.argv[1:]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(args.split())
heavy = {"torch", "torchvision", "lightning", "matplotlib", "numpy"}
print(sorted({name.split(".")[0] for name in sys.modules} & heavy))
"""


def test_help_and_a_mistyped_command_import_neither_torch_nor_lightning():
    """They answer at once: only the commands that need them import them."""
    out = subprocess.run([sys.executable, "-c", QUICK, "--help", "trian", ""], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent).stdout
    assert out.strip() == "[]", out


def test_version_imports_torch_for_its_build_but_neither_torchvision_nor_lightning():
    """`caption --version` answers with a torchvision that cannot be imported (built for another torch)."""
    out = subprocess.run([sys.executable, "-c", QUICK, "--version"], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout
    assert out.strip() == "['numpy', 'torch']", out



EACH_HELP = """
import contextlib, io, sys
from caption.cli import COMMANDS, main
for name in COMMANDS:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main([name, "--help"])
print(sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "lightning", "matplotlib", "numpy")))
"""


def test_every_commands_help_answers_without_torch_or_lightning():
    """The Lightning commands' from short_help.json, the others' from their jsonargparse parsers: all at once."""
    out = subprocess.run([sys.executable, "-c", EACH_HELP], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout
    assert out.strip() == "[]", out
