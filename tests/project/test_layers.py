"""The package's layering, checked by import-linter with the contracts in pyproject.toml: each layer imports only
the layers below it, no import cycle at any depth, each command stands alone, the built-in dataset is never
imported. `lint-imports` from the repository root runs the same check."""

import subprocess
import sys
import tomllib
from pathlib import Path

from caption.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def lint_imports() -> subprocess.CompletedProcess:
    """`lint-imports` (the test extra installs it beside this Python), without writing its cache into the repository."""
    command = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_every_import_contract_is_kept():
    result = lint_imports()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def test_every_command_is_in_the_contract_that_keeps_commands_apart():
    independent = next(contract for contract in CONTRACTS if contract["type"] == "independence")
    assert {f"caption.cli.{module}" for module, _ in COMMANDS.values()} == set(independent["modules"])
