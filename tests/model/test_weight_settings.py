"""The settings that define a trained model's weights are the fields marked with `defines_weights`, found by walking
the model's settings groups: every key a checkpoint's settings may not be changed at."""

from dataclasses import dataclass

from caption.model.weight_settings import defines_weights, weight_defining_keys
from caption.model.caption_model import ModelSettings

# the list the checkpoint reader kept by hand before the fields were marked
WEIGHT_DEFINING = {
    "attention.kind", "attention.dim", "attention.layers", "attention.gate", "encoder.name", "encoder.grid",
    "encoder.channels", "encoder.kernel_sizes", "encoder.coordinates", "decoder.embed_dim", "decoder.hidden_dim",
    "decoder.init_layers", "decoder.prev_word_output", "decoder.context_output",
}


def test_the_marked_fields_of_the_model_settings_are_the_weight_defining_keys():
    keys = weight_defining_keys(ModelSettings)
    assert set(keys) == WEIGHT_DEFINING and len(keys) == len(WEIGHT_DEFINING)


def test_marked_fields_are_found_in_optional_groups_and_keep_their_defaults():
    @dataclass(frozen=True)
    class Group:
        size: int = defines_weights(3)
        rate: float = 0.5

    @dataclass(frozen=True)
    class Settings:
        group: Group | None = None
        depth: int = defines_weights(2)

    assert weight_defining_keys(Settings) == ("group.size", "depth")
    assert Group() == Group(size=3, rate=0.5) and Settings().depth == 2
