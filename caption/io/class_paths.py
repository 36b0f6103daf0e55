"""Classes named by settings that come from a file ({class_path, init_args}), resolved without running anything foreign.

A checkpoint (shared between labs, downloaded from URLs) and a config given to `caption describe/evaluate/compare`
name classes by path: the data source (`data.source`), the learning-rate schedule (`model.lr_scheduler`). Such a
path is looked up only among the classes already imported that are subclasses of the expected base: the project's own
(a module of `caption` it names is imported first: the project's code is trusted), torch's schedulers, and a class of your own once its module is imported in
Python. Anything else (`os.system`, `builtins.eval`, a project class of another kind, a path that names nothing, a
value that is no path) is refused in one line naming the file, the key and the value, before anything is imported,
called or built.

    source = instantiate(settings["source"], base=source_base(), key="data.source", origin="config my.yaml")
    scheduler = instantiate(settings, optimizer, base=scheduler_bases(), key="model.lr_scheduler", origin=...)
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from caption.errors import CaptionError
from caption.legacy.moved import new_class_path, warn_moved

ALLOWED_KEYS = ("class_path", "init_args")  # what LightningCLI stores for a class: nothing else is read
# the instantiator Lightning records beside the hyperparameters of a model or data module built by LightningCLI
LIGHTNING_INSTANTIATOR = "lightning.pytorch.cli.instantiate_module"


class ForeignClassError(CaptionError):
    """A class path read from a file that names no class of the expected kind known to this process."""


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
    moved = new_class_path(class_path)  # a path of the flat layout's modules: read as its new one, saying so
    if moved is not None:
        warn_moved(class_path, moved, origin=origin)
        class_path = moved
    if isinstance(class_path, str):
        import_own_module(class_path)
    kind = known_classes(base).get(class_path) if isinstance(class_path, str) else None
    if kind is None:
        raise ForeignClassError(
            f"{where}.class_path is {short(class_path)}: not a {base_names(base)} known to this project, so it was "
            "refused without importing or running it. Use a file written by `caption fit` or one of the project's "
            "configs (a class of your own: import its module first, in Python)")
    if not isinstance(init_args, dict) or not all(isinstance(name, str) for name in init_args):
        raise ForeignClassError(f"{where}.init_args is {short(init_args)}, not a mapping of argument names")
    return {"class_path": full_name(kind), "init_args": dict(init_args)}


def instantiate(settings: Any, *args: Any, base: type | tuple[type, ...], key: str, origin: str) -> Any:
    """The object `settings` describes, built with `args` then its init_args, once `checked` says its class is a
    known subclass of `base`."""
    settings = checked(settings, base=base, key=key, origin=origin)
    return known_classes(base)[settings["class_path"]](*args, **settings["init_args"])


def import_own_module(class_path: str) -> None:
    """Import the module of `class_path` when it is one of this project's own (`caption.data.sources.karpathy.KarpathySource`):
    the project's code is trusted, so its classes are known to the lookup. No other module is imported."""
    module = class_path.rpartition(".")[0]
    if module.split(".")[0] != "caption":
        return
    try:
        importlib.import_module(module)
    except ImportError:  # names no module of the project: refused by the lookup, by name
        pass


def source_base() -> type:
    """What `data.source` may name: `caption.data.sources.records.CaptionSource` (looked up by name: the checkpoint reader,
    which checks a checkpoint's data source, sits below the data layer)."""
    return importlib.import_module("caption.data.sources.records").CaptionSource


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
    if model.get("lr_scheduler") is not None:
        checked(model["lr_scheduler"], base=scheduler_bases(), key="hyper_parameters.lr_scheduler", origin=origin)
    if isinstance(data, dict):
        check_instantiator(data.get("_instantiator"), key="datamodule_hyper_parameters._instantiator", origin=origin)
        if data.get("source") is not None:
            checked(data["source"], base=source_base(), key="datamodule_hyper_parameters.source", origin=origin)
    elif data is not None:
        raise ForeignClassError(f"{origin}: datamodule_hyper_parameters is {short(data)}, not a mapping of settings")


def short(value: Any, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
