"""The settings that make a trained model what it is: its weights fit only the values it was trained with.

Such a setting is a field of its group's settings dataclass marked with `defines_weights` (its metadata then holds
`DEFINES_WEIGHTS`), e.g. `embed_dim: int = defines_weights(512)` in `DecoderSettings`; `weight_defining_keys` lists
the marked fields of a settings class and of its groups as dotted keys (`decoder.embed_dim`), the ones a setting
given for a trained checkpoint may not change (`caption.io.checkpoints.check_model_settings`).
"""

import dataclasses
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")
DEFINES_WEIGHTS = "defines_weights"  # the metadata key of a field whose value the trained weights depend on


def defines_weights(default: T) -> T:
    """A settings dataclass field with `default` whose value the model's weights are shaped by: a checkpoint's weights
    fit only the value it was trained with."""
    return dataclasses.field(default=default, metadata={DEFINES_WEIGHTS: True})


def groups_of(kind: Any) -> list[type]:
    """The settings dataclasses a field of type `kind` holds: `kind` itself, or those of `X | None`."""
    members = typing.get_args(kind) if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union \
        else (kind,)
    return [member for member in members if dataclasses.is_dataclass(member) and isinstance(member, type)]


def weight_defining_keys(settings: type, prefix: str = "") -> tuple[str, ...]:
    """The dotted keys of every field marked with `defines_weights` in the settings dataclass `settings` and in the
    dataclasses of its groups (`ModelSettings`: "encoder.name", "decoder.embed_dim", ...), in the order of the
    fields."""
    hints = typing.get_type_hints(settings)
    keys: list[str] = []
    for field in dataclasses.fields(settings):
        if field.metadata.get(DEFINES_WEIGHTS):
            keys.append(f"{prefix}{field.name}")
        for group in groups_of(hints[field.name]):
            keys.extend(weight_defining_keys(group, f"{prefix}{field.name}."))
    return tuple(dict.fromkeys(keys))
