"""The short help of fit, validate, test, predict and features as kept beside this module (`short_help.json`, written
by `python -m caption.cli.lightning.short_help`), read without importing Lightning: for `--help` and for "did you
mean" (the option names it lists)."""

import json
from pathlib import Path
from typing import Any

KEPT = Path(__file__).with_name("short_help.json")  # {command: its short help, as `short_help.compose` gives it}


def kept() -> dict[str, Any]:
    """The short helps kept beside this module ({command: short help})."""
    return json.loads(KEPT.read_text(encoding="utf-8"))


def option_names(command: str) -> set[str]:
    """Every option name the kept short help of `command` lists (`--model.decoder.hidden_dim`, `-c`, ...)."""
    return {name for group in kept()[command]["groups"] for names, _ in group["options"] for name in names.split(", ")}
