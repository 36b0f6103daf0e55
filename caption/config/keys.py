"""Model settings as the command line spells them: nested groups flattened to dotted keys (`decoder.embed_dim`)."""

import math
from typing import Any


def dotted(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as {"encoder.name": ..., "decoder.embed_dim": ...}; `lr_scheduler` (a class_path and its
    init_args, one setting) is kept whole."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and key != "lr_scheduler":
            flat |= dotted(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def first_non_finite(node: Any, key: str = "", seen: set[int] | None = None) -> tuple[str, float] | None:
    """(dotted key, value) of the first NaN or infinite number in settings `node` (JSON's NaN and Infinity, YAML's
    .nan and .inf, a number too large for a float), or None: no setting takes one. A mapping or list met again (a
    YAML alias inside its own anchor) is not walked twice: the config walk names that one."""
    if isinstance(node, float) and not math.isfinite(node):
        return key, node
    seen = set() if seen is None else seen
    if isinstance(node, (dict, list, tuple)):
        if id(node) in seen:
            return None
        seen.add(id(node))
    if isinstance(node, dict):
        items = ((f"{key}.{name}" if key else str(name), value) for name, value in node.items())
    elif isinstance(node, (list, tuple)):
        items = ((f"{key}[{index}]", value) for index, value in enumerate(node))
    else:
        return None
    for inner_key, value in items:
        found = first_non_finite(value, inner_key, seen)
        if found is not None:
            return found
    return None


def non_finite_message(origin: str, node: Any) -> str | None:
    """The one line refusing the first non-finite number in settings `node` read from `origin`, or None."""
    found = first_non_finite(node)
    if found is None:
        return None
    key, value = found
    return (f"{origin}: {key} is {value}, not a finite number: no setting takes NaN or an infinite value; give a "
            "finite number there (or leave the key out for its default)")
