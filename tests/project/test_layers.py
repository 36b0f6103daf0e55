"""The package's layering, checked by import-linter with the contracts in pyproject.toml: each layer imports only
the layers below it, no import cycle at any depth, each command stands alone, the built-in dataset is never
imported. `lint-imports` from the repository root runs the same check."""

import ast
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


LAYERS = next(contract for contract in CONTRACTS if contract["type"] == "layers")["layers"]
UPPER_THAN_IO = [f"caption.{name.strip()}" for layer in LAYERS[:LAYERS.index("caption.io")]
                 for name in layer.removeprefix("caption.").split(": caption.")]


def layer_of(module: str) -> int:
    """The index of `module`'s layer in the contract (0: the top, caption.cli)."""
    for index, layer in enumerate(LAYERS):
        if any(module == name or module.startswith(f"{name}.") for name in (part.strip() for part in layer.split(":"))):
            return index
    raise AssertionError(f"{module} is in no layer of the contract")


def string_imports(path: Path) -> list[str]:
    """The `caption.` modules `path` imports by name: `import_module("caption.x")` or `import_module(f"caption.x.{y}")`
    (which import-linter cannot see)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and node.args and "import_module" in ast.unparse(node.func)):
            continue
        name = node.args[0]
        text = name.values[0] if isinstance(name, ast.JoinedStr) and name.values else name
        if isinstance(text, ast.Constant) and isinstance(text.value, str) and text.value.startswith("caption."):
            found.append(text.value.rstrip("."))
    return found


def test_no_module_imports_an_upper_layer_by_name():
    upward = []
    for path in sorted((REPO / "caption").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        upward += [f"{module} -> {target}" for target in string_imports(path) if layer_of(target) < layer_of(module)]
    assert not upward, f"imports by name of an upper layer (pass what is needed in from above instead): {upward}"


def test_no_module_of_io_names_an_upper_layer():
    """caption/io reads files for every layer and knows none of them: not in code, not in a string or a comment."""
    named = [f"{path.name}:{number}: {line.strip()}" for path in sorted((REPO / "caption" / "io").rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if any(upper in line for upper in UPPER_THAN_IO)]
    assert not named, "caption/io names an upper layer:\n" + "\n".join(named)
