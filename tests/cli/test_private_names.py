"""Every private name of a dependency the project relies on is listed here and exists in the installed release.

A private name (`_load_state`, `_ExperimentWriter`, `parser._actions`) can disappear in any release, with no
deprecation: listed, a new release that drops one fails here, naming it and where the project uses it, instead of
breaking a command. `test_every_private_name_used_is_listed` keeps the list whole: a private name of another
package read in `caption/` fails it until it is listed below.
"""

import ast
import importlib
from pathlib import Path

import pytest


PACKAGE = Path(__file__).resolve().parents[2] / "caption"

# (where it lives, the private name) -> where the project uses it
ON_MODULES_AND_CLASSES = {
    ("argparse", "_ArgumentGroup"): "cli/lightning/short_help.py: the groups of the short help (argparse has no "
                                    "public type or list of a parser's groups; read when short_help.json is composed)",
}
# private attributes of objects, checked on an object the test makes
ON_OBJECTS = {
    "_signal_connector": "training/preemption.py: Trainer()._signal_connector.received_sigterm (Lightning's SIGTERM "
                         "handler records it there; no public API says a run was pre-empted)",
    "_action_groups": "cli/lightning/short_help.py: the parser's groups (as _ArgumentGroup)",
    "_group_actions": "cli/lightning/short_help.py: a group's options (as _ArgumentGroup)",
}
MODULES: set[str] = set()  # private modules named in an import
LIMIT = 4  # at most this many private names of a dependency in caption/


def test_the_project_relies_on_few_private_names():
    listed = {name for _, name in ON_MODULES_AND_CLASSES} | set(ON_OBJECTS) | MODULES
    assert len(listed) <= LIMIT, sorted(listed)


def resolved(dotted: str):
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            value = getattr(value, part)
        return value
    raise ImportError(dotted)


@pytest.mark.parametrize(("owner", "name"), sorted(ON_MODULES_AND_CLASSES))
def test_each_private_name_of_a_module_or_class_exists(owner, name):
    assert hasattr(resolved(owner), name), f"{owner}.{name} is gone: {ON_MODULES_AND_CLASSES[owner, name]} needs it"


def test_each_private_attribute_of_an_object_exists():
    from lightning.pytorch import Trainer
    from lightning.pytorch.cli import LightningArgumentParser

    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    parser = LightningArgumentParser()
    group = parser.add_argument_group("group")
    objects = {"_signal_connector": trainer, "_action_groups": parser, "_group_actions": group}
    assert set(objects) == set(ON_OBJECTS)
    for name, owner in objects.items():
        assert hasattr(owner, name), f"{type(owner).__name__}.{name} is gone: {ON_OBJECTS[name]} needs it"


def private_names_used() -> dict[str, set[str]]:
    """Each private name of another package that a module of caption/ reads: `x._name` (not on self or cls), a
    private module or name imported, `getattr(x, "_name")`."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    names.append(node.attr)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith(("caption", "__")):
                names += [part for part in node.module.split(".") if part.startswith("_")]
                names += [alias.name for alias in node.names if alias.name.startswith("_")]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                  and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                  and str(node.args[1].value).startswith("_") and not str(node.args[1].value).startswith("__")):
                names.append(node.args[1].value)
            for name in names:
                found.setdefault(name, set()).add(str(path.relative_to(PACKAGE)))
    return found


def test_every_private_name_used_is_listed():
    listed = {name for _, name in ON_MODULES_AND_CLASSES} | set(ON_OBJECTS) | MODULES
    unlisted = {name: sorted(paths) for name, paths in private_names_used().items() if name not in listed}
    assert not unlisted, f"private names of a dependency not listed in this test (add each, with its use): {unlisted}"
