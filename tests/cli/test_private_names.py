"""Every private name of a dependency the project relies on is listed here and exists in the installed release.

A private name (`_load_state`, `_ExperimentWriter`, `parser._actions`) can disappear in any release, with no
deprecation: listed, a new release that drops one fails here, naming it and where the project uses it, instead of
breaking a command. `test_every_private_name_used_is_listed` keeps the list whole: a private name of another
package read in `caption/` fails it until it is listed below.
"""

import ast
import importlib
import sys
import types
import warnings
from pathlib import Path

import pytest

from caption.errors import CaptionWarning

PACKAGE = Path(__file__).resolve().parents[2] / "caption"

# (where it lives, the private name) -> where the project uses it
ON_MODULES_AND_CLASSES = {
    ("lightning.fabric.loggers.csv_logs", "_ExperimentWriter"): "cli/lightning/run_files.py: metrics.csv written whole",
    ("lightning.fabric.loggers.csv_logs._ExperimentWriter", "_record_new_keys"): "cli/lightning/run_files.py",
    ("lightning.pytorch.cli.LightningCLI", "_parse_ckpt_path"): "cli/lightning/commands.py: overridden",
    ("jsonargparse._typehints", "ActionTypeHint"): "cli/lightning/class_paths.py: the keys that take a class",
    ("jsonargparse._typehints.ActionTypeHint", "is_subclass_typehint"): "cli/lightning/class_paths.py",
    ("jsonargparse._typehints.ActionTypeHint", "is_callable_typehint"): "cli/lightning/class_paths.py",
    ("argparse", "_ArgumentGroup"): "cli/lightning/short_help.py: the groups of the short help",
}
# private attributes of objects, checked on an object the test makes
ON_OBJECTS = {
    "_signal_connector": "training/preemption.py: Trainer()._signal_connector.received_sigterm",
    "_subcommands_action": "cli/lightning/commands.py, class_paths.py: the parser of each subcommand",
    "_name_parser_map": "cli/lightning/commands.py, class_paths.py: the parser of each subcommand",
    "_actions": "cli/lightning/class_paths.py: the parser's options; cli/options.py: those --print_config prints",
    "_action_groups": "cli/lightning/short_help.py: the parser's groups",
    "_group_actions": "cli/lightning/short_help.py: a group's options",
    "_showwarnmsg_impl": "config/console.py: Python's own printer of warnings (the console replaces only that one)",
}
MODULES = {"_typehints"}  # private modules named in an import


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
    parser.add_subcommands().add_subcommand("fit", LightningArgumentParser())
    group = parser.add_argument_group("group")
    import caption.config.console  # noqa: F401  (the module that names Python's printer)

    printer_module = next(module for name in ("warnings", "_py_warnings")
                          if hasattr(module := importlib.import_module(name), "_showwarnmsg_impl"))
    objects = {"_signal_connector": trainer, "_subcommands_action": parser, "_actions": parser,
               "_name_parser_map": parser._subcommands_action, "_action_groups": parser, "_group_actions": group,
               "_showwarnmsg_impl": printer_module}
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


def test_jsonargparse_import_object_is_guarded_or_the_fallback_says_so(monkeypatch):
    """`resolving_safely` replaces jsonargparse's one `import_object`; where a release has several (or none), it says
    so in one warning instead of running unguarded in silence."""
    import jsonargparse  # noqa: F401
    from lightning.pytorch.cli import LightningCLI  # noqa: F401  (imports the jsonargparse modules it uses)

    from caption.cli.lightning.class_paths import resolving_safely

    with warnings.catch_warnings():
        warnings.simplefilter("error", CaptionWarning)
        with resolving_safely():
            pass
    another = types.ModuleType("jsonargparse._another")  # a release whose modules hold two different import_object
    another.import_object = lambda name: None
    monkeypatch.setitem(sys.modules, "jsonargparse._another", another)
    with pytest.warns(CaptionWarning, match="class paths are checked in the configs' walk only"), resolving_safely():
        pass
