"""Typed settings (issue 17): each knob in one dataclass beside its module; checkpoints of the flat settings before
0.2 still load and caption as they did; old config keys are refused by name and `caption migrate-config` moves them."""

import json
from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from kit.cli import failed

from caption import Captioner
from caption.checkpoints import read_checkpoint
from caption.cli import main
from caption.errors import ConfigError
from caption.module import CaptionModule, ModuleSettings
from caption.renamed import RENAMED, grouped, migrate_yaml

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"


def test_the_module_takes_at_most_ten_arguments_and_each_setting_is_a_field_of_one_group():
    import inspect

    assert len(inspect.signature(CaptionModule.__init__).parameters) - 1 <= 10  # self left out
    groups = {field.name: field.type for field in fields(ModuleSettings)}
    names = [f"{group}.{field.name}" for group, kind in groups.items()
             for field in fields(kind.__args__[0] if hasattr(kind, "__args__") else kind)]
    assert len(names) == len(set(names))
    assert sorted(RENAMED.values()) == sorted(names), "every setting of before 0.2 has a new home, and only those"


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_a_checkpoint_written_before_the_settings_were_grouped_loads_and_captions_as_it_did(kind):
    """The checkpoints in tests/fixtures/checkpoints were written by main at fd211b7 (flat settings); the captions
    and log-probabilities beside them are what that commit's Captioner gave."""
    import matplotlib.cbook
    from PIL import Image

    path = FIXTURES / f"fd211b7_{kind}.ckpt"
    raw = __import__("torch").load(path, weights_only=True)["hyper_parameters"]
    assert "embed_dim" in raw and "decoder" not in raw  # really the old, flat form
    captioner = Captioner.from_checkpoint(path, device="cpu")
    settings = captioner.module.settings
    assert settings.attention.kind == kind and settings.decoder.embed_dim == raw["embed_dim"] == 8
    assert settings.encoder.channels == tuple(raw["encoder_channels"])
    assert (settings.hard is None) == (kind == "soft") and (settings.soft is None) == (kind == "hard")
    if kind == "hard":
        assert settings.hard.reinforce_weight == raw["reinforce_weight"]
        assert settings.hard.entropy_weight == raw["entropy_weight"]
    grace = Image.open(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)).convert("RGB")
    images = [grace, Image.new("RGB", (80, 50), (200, 30, 30))]
    captions = [captioner(image, beam_size=1) for image in images] + [captioner(image, beam_size=3) for image in images]
    expected = json.loads((FIXTURES / "fd211b7_captions.json").read_text())[kind]
    assert [caption.words for caption in captions] == [item["words"] for item in expected]
    assert [caption.log_prob for caption in captions] == pytest.approx([item["log_prob"] for item in expected],
                                                                        abs=1e-4)


def test_old_flat_hyperparameters_move_into_their_groups_and_the_unused_kind_is_dropped():
    old = {"vocabulary": ["<pad>"], "attention": "soft", "embed_dim": 8, "alpha_c": 2.0, "samples": 1,
           "reinforce_weight": 6.4, "beam_size": 5, "encoder": "small_vgg", "image_size": [64, 64]}
    assert grouped(old) == {"vocabulary": ["<pad>"], "attention": {"kind": "soft"}, "decoder": {"embed_dim": 8},
                            "soft": {"alpha_c": 2.0}, "decoding": {"beam_size": 5}, "encoder": {"name": "small_vgg"},
                            "image_size": [64, 64]}
    assert grouped(grouped(old)) == grouped(old)
    checkpoint = read_checkpoint(FIXTURES / "fd211b7_hard.ckpt")["hyper_parameters"]
    assert "soft" not in checkpoint and checkpoint["hard"]["samples"] == 1


def test_a_setting_for_the_other_attention_kind_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"model.hard only applies to model.attention.kind: hard \(this run's is soft\)"):
        CaptionModule(vocabulary=["<pad>", "<start>", "<end>", "<unk>", "a"], encoder={"name": "small_vgg",
                      "weights": "none"}, hard={"samples": 2})
    with pytest.raises(ConfigError, match=r"model.decoder has no setting embed_size"):
        CaptionModule(vocabulary=["<pad>", "<start>", "<end>", "<unk>", "a"], encoder={"name": "small_vgg",
                      "weights": "none"}, decoder={"embed_size": 2})


MIGRATED_BEFORE = """\
model:
  attention: hard            # the paper's hard attention
  embed_dim: 64
  # lambda_r: the original code's 0.1 B
  reinforce_weight: 6.4
  encoder_channels:
    - 16
    - 32
  beam_size: 3
data:
  batch_size: 64
"""
MIGRATED_AFTER = """\
model:
  attention:
    kind: hard            # the paper's hard attention
  decoder:
    embed_dim: 64
  hard:
    # lambda_r: the original code's 0.1 B
    reinforce_weight: 6.4
  encoder:
    channels:
      - 16
      - 32
  decoding:
    beam_size: 3
data:
  batch_size: 64
"""


def test_migrate_config_moves_flat_keys_into_groups_keeping_values_and_comments(tmp_path):
    assert migrate_yaml(MIGRATED_BEFORE) == MIGRATED_AFTER
    assert migrate_yaml(MIGRATED_AFTER) == MIGRATED_AFTER
    assert yaml.safe_load(MIGRATED_AFTER)["model"]["encoder"]["channels"] == [16, 32]
    config = tmp_path / "old.yaml"
    config.write_text(MIGRATED_BEFORE)
    refused = failed(["fit", "--config", str(config), "--model.gate", "false", "--print_config"])
    assert "model.gate (now model.attention.gate) on the command line" in refused
    assert f"model.embed_dim (now model.decoder.embed_dim) in {config}" in refused
    main(["migrate-config", str(config), "--in-place"])
    assert config.read_text() == MIGRATED_AFTER
