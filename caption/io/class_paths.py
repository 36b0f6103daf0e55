"""Classes named by settings that come from a file ({class_path, init_args}), resolved without running anything foreign.

A checkpoint (shared between labs, downloaded from URLs) and a config (from a paper's repository) name classes by
path: the data source (`data.source`), the learning-rate schedule (`lr_scheduler`), Lightning's callbacks and loggers.
One rule holds for every command and the Python API: a class path read from a file is resolved by importing only
modules of the project, Lightning, torch and torchvision (`TRUSTED_PACKAGES`) or modules the user named (`--import
MODULE` on the command line, `named_modules`; in Python, by importing it first); anything else is refused in one line
naming the file, the key and the value, before anything is imported (`may_import`, `not_importable`). The Lightning
commands apply it to jsonargparse's parsing too; here, a class a checkpoint or a config given
to `describe/evaluate/compare` names is moreover looked up only among the imported subclasses of the expected base,
so `os.system`, `builtins.eval` or a project class of another kind is refused before anything is called or built.

    source = instantiate(settings["source"], base=expected_base("data.source"), key="data.source", origin="my.yaml")
    scheduler = instantiate(settings, optimizer, base=scheduler_bases(), key="model.lr_scheduler", origin=...)
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from caption.errors import CaptionError

ALLOWED_KEYS = ("class_path", "init_args")  # what LightningCLI stores for a class: nothing else is read
# the instantiator Lightning records beside the hyperparameters of a model or data module built by LightningCLI
LIGHTNING_INSTANTIATOR = "lightning.pytorch.cli.instantiate_module"
# the packages whose modules a class path read from a file may import: the project's own code and what it runs on
TRUSTED_PACKAGES = ("caption", "lightning", "lightning_fabric", "pytorch_lightning", "torch", "torchvision")
NAMED: list[str] = []  # modules the user named on the command line (`--import`), while its command runs
EXPECTED_BASES: dict[str, type] = {}  # settings key -> the base its class must subclass, registered from above


class ForeignClassError(CaptionError):
    """A class path read from a file that names no class of the expected kind known to this process."""


@contextmanager
def named_modules(modules: Iterable[str]) -> Iterator[None]:
    """While inside, class paths under `modules` (named by the user with `--import`) may be imported as well."""
    added = [module for module in modules if module not in NAMED]
    NAMED.extend(added)
    try:
        yield
    finally:
        for module in added:
            NAMED.remove(module)


def may_import(class_path: str) -> bool:
    """Whether resolving `class_path` may import its module: one of TRUSTED_PACKAGES' or under a module named with
    `--import`. (The module itself is not looked up: nothing is imported to decide.)"""
    return any(class_path == module or class_path.startswith(f"{module}.") for module in (*TRUSTED_PACKAGES, *NAMED))


def defining_module(obj: Any) -> str | None:
    """The module `obj` is defined in: a module's own name, else its `__module__` (for an instance without one, its
    class's); None if it says none."""
    if inspect.ismodule(obj):
        return obj.__name__
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        module = getattr(type(obj), "__module__", None)
    return module if isinstance(module, str) else None


def resolve(path: str) -> Any:
    """The object dotted `path` names, importing only modules `may_import` allows (the longest prefix of `path`
    that is one) and following attributes from there. ImportError or AttributeError if it names nothing; a path
    `may_import` refuses imports nothing and raises ImportError."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if not may_import(module):
            break
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name is None or not f"{path}.".startswith(f"{error.name}."):
                raise  # a module it imports is missing: not an attribute path
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(f"{path} names no module that may be imported")


def is_standard_library(module: str) -> bool:
    """Whether `module` is (in) a module of Python's standard library (os, posix, subprocess, builtins, ...)."""
    return module.partition(".")[0] in sys.stdlib_module_names


# why a callable or class of Python's standard library (os.system, builtins.eval) is refused: no hint to --import it
STANDARD_LIBRARY_REFUSED = ("a file names classes and functions of the project, Lightning, torch and torchvision, or "
                            "of a module of your own given with --import, not of Python's standard library")


def outside_allowed(value: str, obj: Any, *, key: str, origin: str) -> ForeignClassError | None:
    """The one-line refusal of `value` when the object it resolved to (`obj`) is not defined in a module `may_import`
    allows, whatever path reached it (`torch.os.system` is os.system); None when it is. Its hint names `--import`
    only for a module that may be the user's own, never for one of Python's standard library."""
    module = defining_module(obj)
    if module is not None and may_import(module):
        return None
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    where = f"{origin}: {key} is {short(value)}, which is {module or 'a module'}.{name}"
    if module is not None and is_standard_library(module):
        return ForeignClassError(f"{where}, of Python's standard library (reached through a module that imports it): "
                                 f"refused before it was called or built; {STANDARD_LIBRARY_REFUSED}")
    return ForeignClassError(
        f"{where}, defined outside the project, Lightning, torch and torchvision (reached through a module that "
        "imports it): refused before it was called or built. Name a class or function by the module that defines "
        f"it; one of your own: add `--import {module or 'MODULE'}`")


def checked_resolution(value: str, *, key: str, origin: str) -> None:
    """Refuse (ForeignClassError) dotted `value` when it resolves, through modules `may_import` allows, to an object
    defined outside them; a value that names nothing is left to whoever reads it to report."""
    try:
        obj = resolve(value)
    except (ImportError, AttributeError):
        return
    error = outside_allowed(value, obj, key=key, origin=origin)
    if error is not None:
        raise error


def module_of(class_path: str) -> str:
    """The module a class path names its class in (`a.b` of `a.b.Class`)."""
    return class_path.rpartition(".")[0] or class_path


def not_importable(value: str, *, key: str, origin: str) -> ForeignClassError:
    """The one-line refusal of a class path whose module `may_import` does not allow: names the file, key, value."""
    module = module_of(value)
    if is_standard_library(module):
        return ForeignClassError(f"{origin}: {key} is {short(value)}, in module {module} of Python's standard library: "
                                 f"refused without importing it; {STANDARD_LIBRARY_REFUSED}")
    return ForeignClassError(
        f"{origin}: {key} is {short(value)}, in module {module}, which is not the project's, Lightning's, torch's or "
        f"torchvision's and was not named with --import: refused without importing it (a file alone cannot bring in "
        f"code). A class of your own: add `--import {module}` to the command line (in Python: import it first)")


def subclasses(base: type | tuple[type, ...]) -> list[type]:
    """Every class imported so far that is `base` or derives from it, not abstract."""
    found: dict[type, None] = {}
    pending = list(base) if isinstance(base, tuple) else [base]
    while pending:
        kind = pending.pop()
        if kind in found:
            continue
        found[kind] = None
        pending.extend(kind.__subclasses__())
    return [kind for kind in found if not inspect.isabstract(kind)]


def full_name(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def known_classes(base: type | tuple[type, ...]) -> dict[str, type]:
    """{class path: class} of the known subclasses of `base`, by full path and, where no two share it, by bare name
    (as LightningCLI accepts `ExponentialLR` for torch.optim.lr_scheduler.ExponentialLR)."""
    kinds = subclasses(base)
    names = [kind.__name__ for kind in kinds]
    by_name = {kind.__name__: kind for kind in kinds if names.count(kind.__name__) == 1}
    return {**by_name, **{full_name(kind): kind for kind in kinds}}


def base_names(base: type | tuple[type, ...]) -> str:
    return " or ".join(full_name(kind) for kind in (base if isinstance(base, tuple) else (base,)))


def checked(settings: Any, *, base: type | tuple[type, ...], key: str, origin: str) -> dict[str, Any]:
    """`settings` ({class_path, init_args}, or a bare class path) as {class_path: the class's full path, init_args},
    once the path is known to name a subclass of `base` already imported; else a ForeignClassError that names
    `origin` (the file), `key` and the value. Nothing is imported."""
    where = f"{origin}: {key}"
    if isinstance(settings, str):
        settings = {"class_path": settings}
    if not isinstance(settings, dict) or set(settings) - set(ALLOWED_KEYS):
        raise ForeignClassError(f"{where} is {short(settings)}, not a {{class_path, init_args}} mapping of a "
                                f"{base_names(base)}: refused, nothing was imported or run")
    class_path, init_args = settings.get("class_path"), settings.get("init_args") or {}
    if isinstance(class_path, str):
        import_allowed_module(class_path)
    kind = known_classes(base).get(class_path) if isinstance(class_path, str) else None
    if kind is None:
        raise ForeignClassError(
            f"{where}.class_path is {short(class_path)}: not a {base_names(base)} known to this project, so it was "
            "refused without importing or running it. Use a file written by `caption fit` or one of the project's "
            "configs (a class of your own: name its module with --import, or import it first in Python)")
    if not isinstance(init_args, dict) or not all(isinstance(name, str) for name in init_args):
        raise ForeignClassError(f"{where}.init_args is {short(init_args)}, not a mapping of argument names")
    return {"class_path": full_name(kind), "init_args": dict(init_args)}


def instantiate(settings: Any, *args: Any, base: type | tuple[type, ...], key: str, origin: str) -> Any:
    """The object `settings` describes, built with `args` then its init_args, once `checked` says its class is a
    known subclass of `base`."""
    settings = checked(settings, base=base, key=key, origin=origin)
    return known_classes(base)[settings["class_path"]](*args, **settings["init_args"])


def import_allowed_module(class_path: str) -> None:
    """Import the module of `class_path` when `may_import` allows it (the project's, Lightning's, torch's or one named
    with --import), so that its classes are known to the lookup. No other module is imported."""
    module = module_of(class_path)
    if not module or not may_import(class_path):
        return
    try:
        importlib.import_module(module)
    except ImportError:  # names no module: refused by the lookup, by name
        pass


def expect_base(key: str, base: type) -> None:
    """Register `base` as what a class at settings `key` must be a subclass of: called by the layer above that defines
    it (the data sources' base for "data.source"), so that this layer names none of them."""
    EXPECTED_BASES[key] = base


def expected_base(key: str) -> type:
    """The base registered for settings `key` (`expect_base`); a CaptionError if none is (the layer defining it is
    not imported: import it first)."""
    if key not in EXPECTED_BASES:
        raise CaptionError(f"no class is registered for {key}: import the module that defines its base first")
    return EXPECTED_BASES[key]


def checked_if_expected(settings: Any, *, key: str, stored_at: str, origin: str) -> Any:
    """`settings` `checked` against the base registered for `key` when one is; when none is (the layer that defines
    it is not loaded, so nothing in this process can build it), its class path is held to `may_import` alone."""
    if key in EXPECTED_BASES:
        return checked(settings, base=EXPECTED_BASES[key], key=stored_at, origin=origin)
    class_path = settings.get("class_path") if isinstance(settings, dict) else settings
    if isinstance(class_path, str) and not may_import(class_path):
        raise not_importable(class_path, key=stored_at, origin=origin)
    return settings


def scheduler_bases() -> tuple[type, ...]:
    """What `model.lr_scheduler` may name: torch's schedulers (Lightning's ReduceLROnPlateau with its `monitor` too)."""
    from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

    return LRScheduler, ReduceLROnPlateau


def check_instantiator(value: Any, *, key: str, origin: str) -> None:
    """The `_instantiator` LightningCLI records: absent or Lightning's own, else refused."""
    if value is not None and value != LIGHTNING_INSTANTIATOR:
        raise ForeignClassError(f"{origin}: {key} is {short(value)}, not {LIGHTNING_INSTANTIATOR}: refused, nothing "
                                "was imported or run")


def check_checkpoint_classes(checkpoint: dict[str, Any], *, origin: str) -> None:
    """Every class a checkpoint written by `caption fit` names (its data source, its lr_scheduler, the instantiators)
    checked with `checked` before any of it is used."""
    model = checkpoint.get("hyper_parameters") or {}
    data = checkpoint.get("datamodule_hyper_parameters")
    check_instantiator(model.get("_instantiator"), key="hyper_parameters._instantiator", origin=origin)
    if "_class_path" in model:  # Lightning's model class of a subclass-mode CLI: `caption fit` records none
        raise ForeignClassError(f"{origin}: hyper_parameters._class_path is {short(model['_class_path'])}, but "
                                "`caption fit` records no model class (its model is always the project's "
                                "CaptionModule): not a checkpoint it wrote, refused, nothing was imported or run")
    if model.get("lr_scheduler") is not None:
        checked(model["lr_scheduler"], base=scheduler_bases(), key="hyper_parameters.lr_scheduler", origin=origin)
    if isinstance(data, dict):
        check_instantiator(data.get("_instantiator"), key="datamodule_hyper_parameters._instantiator", origin=origin)
        if data.get("source") is not None:
            checked_if_expected(data["source"], key="data.source", stored_at="datamodule_hyper_parameters.source",
                                origin=origin)
    elif data is not None:
        raise ForeignClassError(f"{origin}: datamodule_hyper_parameters is {short(data)}, not a mapping of settings")


def short(value: Any, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
