"""Which settings a user gave on purpose: on the command line (`--model.attention.kind soft`) or in a `--config` file.

A checkpoint's model settings win over the parsed config in Lightning (it reloads them from the checkpoint), so a
setting given on purpose that differs would be silently dropped; `caption.io.checkpoints.check_model_settings`
refuses it instead, naming both values and where this one was given.
"""

import itertools
from pathlib import Path
from typing import Any

import yaml

from caption.config.keys import dotted


def given_on_command_line(args: list[str], key: str) -> bool:
    """Whether `--key value` or `--key=value` is among the command-line `args`."""
    return any(arg == f"--{key}" or arg.startswith(f"--{key}=") for arg in args)


def config_files(args: list[str]) -> list[str]:
    """The files given with `--config FILE`, `--config=FILE` or `-c FILE`, in order."""
    files = [value for flag, value in itertools.pairwise(args) if flag in ("--config", "-c")]
    return files + [arg.split("=", 1)[1] for arg in args if arg.startswith("--config=")]


def section_keys(path: str, section: str) -> set[str]:
    """The keys a config file sets in `section` (in its `init_args` if it names a class_path), groups' keys dotted
    (`decoder.embed_dim`)."""
    try:
        settings = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):  # already parsed by jsonargparse, which reports its own errors
        return set()
    part = settings.get(section) if isinstance(settings, dict) else None
    if isinstance(part, dict) and isinstance(part.get("init_args"), dict):
        part = part["init_args"]
    return set(dotted(part)) if isinstance(part, dict) else set()


def given_model_settings(args: list[str], model: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """{dotted key: (parsed value, where it was given)} for each `model.` setting a config file or the command line
    sets (the command line wins over the files, a later file over an earlier one, as when parsing); `model`: the parsed
    settings, dotted (`caption.config.keys.dotted`)."""
    where: dict[str, str] = {}
    for path in config_files(args):
        where.update(dict.fromkeys(section_keys(path, "model"), f"in config file {path}"))
    where.update({key: "on the command line" for key in model if given_on_command_line(args, f"model.{key}")})
    return {key: (model[key], origin) for key, origin in where.items() if key in model}
