"""Typed settings: each knob in one dataclass beside its module, in one group; a setting of the other attention kind,
or one a group does not have, is refused by name."""

from dataclasses import fields

import pytest

from caption.errors import ConfigError
from caption.training.module import CaptionModule
from caption.model.caption_model import ModelSettings
from caption.training.optimization import OptimizationSettings


def test_the_module_takes_at_most_eleven_arguments_and_each_setting_is_a_field_of_one_group():
    import inspect

    assert len(inspect.signature(CaptionModule.__init__).parameters) - 1 <= 11  # self left out
    groups = {**{field.name: field.type for field in fields(ModelSettings)}, "optimization": OptimizationSettings}
    names = [f"{group}.{field.name}" for group, kind in groups.items()
             for field in fields(kind.__args__[0] if hasattr(kind, "__args__") else kind)]
    assert len(names) == len(set(names))


def test_a_setting_for_the_other_attention_kind_is_refused_by_name():
    with pytest.raises(ConfigError,
                       match=r"model.hard only applies to model.attention.kind: hard \(this run's is soft\)"):
        CaptionModule(vocabulary=["<pad>", "<start>", "<end>", "<unk>", "a"], encoder={"name": "small_vgg",
                      "weights": "none"}, hard={"samples": 2})
    with pytest.raises(ConfigError, match=r"model.decoder has no setting embed_size"):
        CaptionModule(vocabulary=["<pad>", "<start>", "<end>", "<unk>", "a"], encoder={"name": "small_vgg",
                      "weights": "none"}, decoder={"embed_size": 2})


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_box_supervision_beside_self_critical_training_is_refused_naming_both(kind):
    with pytest.raises(ConfigError, match=rf"model.{kind}.box_supervision weighs a term of the cross-entropy "
                                          r"objective, which model.self_critical replaces"):
        ModelSettings.of(attention={"kind": kind}, **{kind: {"box_supervision": 1.0}}, self_critical={})
    assert ModelSettings.of(attention={"kind": kind}, **{kind: {"box_supervision": 0.0}}, self_critical={})
