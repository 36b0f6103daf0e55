"""The one rule for class paths (`caption.io.class_paths`) in `caption fit | validate | test | predict` and `caption
features` (which parses as `fit` does): a class a config names is resolved by importing only the project, Lightning,
torch, torchvision, or a module the user named on the command line.

jsonargparse imports a `class_path` as soon as it parses it, running the module's top-level code before it checks
what it found, so the rule is applied before the parser sees anything (through public APIs only: no function of
jsonargparse is replaced):

- `caption` itself takes `--import MODULE` out of any command's arguments and imports it (`caption.cli.imports`):
  the user named it; `named_on_command_line` collects the modules of the class paths the command
  line gives itself (`--trainer.callbacks+=mylab.Probe`): the user named those too;
- `check_configs` walks every `--config` file (and every small file a value names, which jsonargparse would read as a
  nested config: `--trainer trainer.yaml`) and refuses a class path whose module may not be imported, in one line
  naming the file, the key and the value, and one that resolves, through an allowed module, to an object defined
  outside them (`torch.os.system` is os.system: `caption.io.class_paths.outside_allowed`); a file that is no YAML
  mapping is refused in one line naming it;
- `check_parsed` checks the parsed config the same way before anything is built, for any value the walk does not
  reach (the message then names the key).
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from caption.config.keys import non_finite_message
from caption.errors import ConfigError
from caption.io.class_paths import (
    checked_resolution,
    may_import,
    module_of,
    not_importable,
    outside_allowed,
)

DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")  # a class path: identifiers joined by dots
NESTED_CONFIG_LIMIT = 1 << 20  # a file a value names is read as a nested config when no larger than this
# the keys where a class is expected (tests/guarantees/test_class_paths.py checks it against jsonargparse's parsers)
CLASS_KEYS = frozenset(("data.source", "lr_scheduler", "trainer.callbacks", "trainer.logger", "trainer.plugins",
                        "trainer.strategy", "trainer.accelerator", "trainer.profiler"))
# the endings of a file's name: a dotted value ending so is a file, not a class path (`test.json`)
FILE_EXTENSIONS = frozenset(("json", "yaml", "yml", "txt", "csv", "jpg", "jpeg", "png", "pt", "pth", "ckpt", "npy",
                             "npz", "safetensors", "tar", "zip", "gz", "bin", "h5", "pkl", "md", "log"))
NOT_CONFIGS = ("config", "ckpt_path", "data.predict", "data.vocabulary_from")  # file values never read as configs


def option_values(args: list[str]) -> Iterator[tuple[str, str]]:
    """(key, value) of each `--key value` / `--key=value` / `--key+=value` on a command line (key without `--`, `+`)."""
    for index, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        if "=" in arg:
            key, _, value = arg[2:].partition("=")
        elif index + 1 < len(args) and not args[index + 1].startswith("--"):
            key, value = arg[2:], args[index + 1]
        else:
            continue
        yield key.rstrip("+"), value


def class_paths_in(node: Any, key: str, *, origin: str, folder: Path | None,
                   seen: set[Path], inside: tuple[int, ...] = ()) -> Iterator[tuple[str, str, str]]:
    """(origin, key, class path) of every class path in settings `node` found at `key`: each `class_path`'s value,
    a dotted string where a class is expected (`CLASS_KEYS`) or that starts with a module (`names_a_module`: a callable
    given by its path, `on_fit_start: torch.os.system`), and those of a small file a string value names (a nested
    config, with that file as origin). `inside`: the ids of the mappings and lists around `node`; a YAML alias inside
    its own anchor (a value holding itself, which jsonargparse recurses into without end) is a ConfigError."""
    if isinstance(node, (dict, list)):
        if id(node) in inside:
            raise ConfigError(f"{origin}: {key} holds itself (a YAML alias inside its own anchor), which no setting "
                              "can: write the value out")
        inside = (*inside, id(node))
    if isinstance(node, dict):
        if isinstance(node.get("class_path"), str):
            yield origin, f"{key}.class_path" if key else "class_path", node["class_path"]
        for name, value in node.items():
            if name != "class_path" or not isinstance(value, str):
                yield from class_paths_in(value, f"{key}.{name}" if key else str(name), origin=origin,
                                          folder=folder, seen=seen, inside=inside)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from class_paths_in(value, f"{key}[{index}]", origin=origin, folder=folder, seen=seen,
                                      inside=inside)
    elif isinstance(node, str):
        takes_class = re.sub(r"\[\d+\]", "", key) in CLASS_KEYS
        dotted = DOTTED.fullmatch(node) is not None
        if takes_class and dotted:
            yield origin, key, node
            return
        # perhaps a callable or class given by its path, which jsonargparse imports wherever its type allows one
        if dotted and (may_import(node) or names_a_module(node)):  # (`on_fit_start: os.system`)
            yield origin, key, node
        if key not in NOT_CONFIGS:
            nested = nested_config(node, folder, any_name=takes_class)
            if nested is not None and nested not in seen:
                seen.add(nested)
                yield from class_paths_in(settings_of(nested), key, origin=f"config {nested}",
                                          folder=nested.parent, seen=seen)


def names_a_module(value: str) -> bool:
    """Whether dotted `value` starts with a top-level module this process could import (looked up, not imported), and
    is not a file's name (`test.json`, `vgg16.pth`)."""
    top, _, rest = value.partition(".")
    if rest.rpartition(".")[2].lower() in FILE_EXTENSIONS:
        return False
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def nested_config(value: str, folder: Path | None, *, any_name: bool = False) -> Path | None:
    """The file `value` names (relative to the config naming it, or to the working folder), if it is a small file
    jsonargparse could read as a nested config: a YAML file, or with `any_name` (where a class is expected) any file.
    (A dataset's JSON files are no configs; should one be read as one, jsonargparse's own import still obeys the
    rule.)"""
    if len(value) > 4096 or "\n" in value or "\0" in value:
        return None
    if not any_name and not value.lower().endswith((".yaml", ".yml")):
        return None
    for path in ([folder / value] if folder is not None else []) + [Path(value)]:
        try:
            if path.is_file() and path.stat().st_size <= NESTED_CONFIG_LIMIT:
                return path
        except (OSError, ValueError):  # a name too long, or not a path at all
            continue
    return None


def settings_of(path: Path) -> Any:
    """A config file's YAML, or None when it cannot be read as YAML (jsonargparse then says why, naming it)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return None


def named_on_command_line(args: list[str]) -> list[str]:
    """The modules of the class paths the command line itself gives (`--trainer.callbacks+=mylab.Probe`,
    `--lr_scheduler '{"class_path": ...}'`): the user named them. Files a value names are configs: not counted."""
    found: list[str] = []
    for key, value in option_values(args):
        if key in NOT_CONFIGS:
            continue
        if (key in CLASS_KEYS or key.endswith("class_path")) and DOTTED.fullmatch(value):
            found.append(value)
        elif value[:1] in "{[":  # inline YAML or JSON
            try:
                settings = yaml.safe_load(value)
            except yaml.YAMLError:
                continue
            found += [path for _, _, path in class_paths_in(settings, key, origin="the command line",
                                                            folder=None, seen=set()) if DOTTED.fullmatch(path)]
    return list(dict.fromkeys(module_of(path) for path in found))


def check_configs(args: list[str]) -> None:
    """Refuse, in one line naming the file, the key and the value, a class path in a `--config` file (or in a file a
    value names) whose module may not be imported (`caption.io.class_paths.may_import`), and a config file that is
    not a YAML mapping of settings. Call it once the modules named on the command line are registered."""
    configs = [value for key, value in option_values(args) if key == "config"]
    configs += [value for flag, value in itertools.pairwise(args) if flag == "-c"]
    seen: set[Path] = set()
    found: list[tuple[str, str, str]] = []
    for value in configs:
        path = Path(value)
        if path.is_file():
            settings = settings_of(path)
            if settings is not None and not isinstance(settings, dict):
                raise ConfigError(f"config file {value}: not a YAML mapping of settings (it reads as "
                                  f"{type(settings).__name__}): a config holds `key: value` lines")
            non_finite = non_finite_message(f"config file {value}", settings)
            if non_finite is not None:  # YAML's .inf and .nan
                raise ConfigError(non_finite)
            seen.add(path)
            found += class_paths_in(settings, "", origin=f"config {value}", folder=path.parent, seen=seen)
        elif value[:1] in "{[":  # inline YAML or JSON (a named run's own settings)
            try:
                found += class_paths_in(yaml.safe_load(value), "", origin="config given inline",
                                        folder=None, seen=seen)
            except yaml.YAMLError:
                continue
    for key, value in option_values(args):  # a file given as a value: `--trainer trainer.yaml`
        nested = None if key in NOT_CONFIGS else nested_config(value, None, any_name=key in CLASS_KEYS)
        if nested is not None and nested not in seen:
            seen.add(nested)
            found += class_paths_in(settings_of(nested), key, origin=f"config {nested}",
                                    folder=nested.parent, seen=seen)
    for origin, key, class_path in found:
        check_class_path(class_path, key=key, origin=origin)


def check_class_path(class_path: str, *, key: str, origin: str) -> None:
    """Refuse `class_path` when its module may not be imported (`may_import`), or when what it resolves to, whatever
    path reached it (`torch.os.system`), is defined outside the allowed modules (`checked_resolution`)."""
    if "." in class_path and not may_import(class_path):
        raise not_importable(class_path, key=key, origin=origin)
    if DOTTED.fullmatch(class_path):
        checked_resolution(class_path, key=key, origin=origin)


def check_parsed(settings: Any, key: str = "") -> None:
    """Refuse, in one line naming the key, what `check_configs` would refuse in the parsed settings of a command
    (`config.as_dict()`): a class path whose module may not be imported, or a class or callable (jsonargparse holds
    those resolved) defined outside the allowed modules, read from a place the walk of the files does not reach."""
    if isinstance(settings, dict):
        for name, value in settings.items():
            check_parsed(value, f"{key}.{name}" if key else str(name))
    elif isinstance(settings, list):
        for index, value in enumerate(settings):
            check_parsed(value, f"{key}[{index}]")
    elif isinstance(settings, str):
        if (key.endswith("class_path") or re.sub(r"\[\d+\]", "", key) in CLASS_KEYS) and DOTTED.fullmatch(settings):
            check_class_path(settings, key=key, origin="the settings")
    elif inspect.isroutine(settings) or inspect.isclass(settings) or inspect.ismodule(settings):
        name = getattr(settings, "__qualname__", None) or type(settings).__name__
        refused = outside_allowed(name, settings, key=key, origin="the settings")
        if refused is not None:
            raise refused
