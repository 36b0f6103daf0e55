"""Model settings as the command line spells them: nested groups flattened to dotted keys (`decoder.embed_dim`)."""

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
