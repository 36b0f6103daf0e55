"""`--import MODULE`, with any command: a module of the user's own whose classes a config or checkpoint names.

`caption` takes it out of the command's arguments (`without_imports`) and imports it (`import_named`) before the
command parses anything: the user named it, so the class-path rule (`caption.io.class_paths`) lets its classes be
imported too.
"""

import importlib
import re

from caption.errors import ConfigError

IMPORT = "--import"


def without_imports(args: list[str]) -> tuple[list[str], list[str]]:
    """`args` without `--import MODULE` / `--import=A,B`, and the modules they name."""
    rest, modules = [], []
    values = iter(args)
    for arg in values:
        if arg == IMPORT:
            value = next(values, None)
            if value is None:
                raise ConfigError("--import needs a module name, e.g. --import mylab.callbacks")
        elif arg.startswith(f"{IMPORT}="):
            value = arg.partition("=")[2]
        else:
            rest.append(arg)
            continue
        modules += [module.strip() for module in value.split(",") if module.strip()]
    for module in modules:
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module):
            raise ConfigError(f"--import {module!r}: not a module name (e.g. --import mylab.callbacks)")
    return rest, modules


def import_named(modules: list[str]) -> None:
    """Import the modules given with --import (the user named them), or say in one line why one cannot be."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ConfigError(f"--import {module}: cannot import it ({error})") from None
