"""Typed settings: each knob in one dataclass beside its module; checkpoints of the flat settings before
0.2 still load and caption as their model did; old config keys are refused by name and `caption migrate-config` moves
them."""

from dataclasses import asdict, fields

import pytest
import torch
from kit.models import tiny_module

from caption.config.keys import dotted
from caption.errors import ConfigError
from caption.inference import load_trained
from caption.io.checkpoints import read_checkpoint
from caption.legacy.settings import RENAMED, grouped
from caption.model.objectives import HardObjectiveSettings, SoftObjectiveSettings
from caption.training.module import CaptionModule
from caption.training.module_settings import ModuleSettings


def test_the_module_takes_at_most_eleven_arguments_and_each_setting_is_a_field_of_one_group():
    import inspect

    assert len(inspect.signature(CaptionModule.__init__).parameters) - 1 <= 11  # self left out
    groups = {field.name: field.type for field in fields(ModuleSettings)}
    names = [f"{group}.{field.name}" for group, kind in groups.items()
             for field in fields(kind.__args__[0] if hasattr(kind, "__args__") else kind)]
    assert len(names) == len(set(names))
    assert set(RENAMED.values()) <= set(names), "every setting of before 0.2 has a new home"


# the hyperparameters a checkpoint of version 0.1 (before the groups) holds, every key, as it wrote them
VERSION_0_1_KEYS = {
    "_instantiator", "alpha_c", "attention", "attention_dim", "attention_layers", "baseline", "baseline_decay",
    "beam_size", "compile", "context_output", "credit", "dropout", "embed_dim", "encoder", "encoder_channels",
    "encoder_coordinates", "encoder_finetune_stages", "encoder_frozen_epochs", "encoder_grid", "encoder_kernel_sizes",
    "encoder_learning_rate", "encoder_weights", "entropy_weight", "freeze_encoder", "gate", "hard_eval_context",
    "hidden_dim", "image_size", "init_from", "init_layers", "inverse_temperature", "learning_rate", "length_penalty",
    "lr_scheduler", "max_caption_length", "on_nonfinite_loss", "optimizer", "prev_word_output", "reinforce_weight",
    "reward", "samples", "semi_sampling", "semi_sampling_final", "vocabulary",
}


def flat_checkpoint(module: CaptionModule) -> dict:
    """`module` saved as version 0.1 saved it: every setting a flat key (both attention kinds' included)."""
    unused = {"soft": asdict(SoftObjectiveSettings()), "hard": asdict(HardObjectiveSettings())}  # all at defaults
    settings = dotted(unused | {key: value for key, value in module.hparams.items() if value is not None})
    flat = {old: settings[new] for old, new in RENAMED.items()}
    flat |= {key: module.hparams[key] for key in ("vocabulary", "image_size", "lr_scheduler")}
    flat["_instantiator"] = "lightning.pytorch.cli.instantiate_module"
    return {"state_dict": module.state_dict(), "hyper_parameters": flat}


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_a_version_0_1_checkpoint_loads_into_groups_and_captions_as_it_did(kind, tmp_path):
    """A checkpoint in 0.1's form (every key 0.1 wrote) loads with every setting in its group,
    the other kind's settings left out, and captions as the model it was saved from."""
    weights = {"hard": {"reinforce_weight": 3.2, "entropy_weight": 0.01}} if kind == "hard" else {}
    module = tiny_module(["<pad>", "<start>", "<end>", "<unk>", "a", "red", "circle", "square"], kind,
                         decoder={"embed_dim": 12}, **weights).eval()
    path = tmp_path / "old.ckpt"
    torch.save(flat_checkpoint(module), path)
    raw = torch.load(path, weights_only=True)["hyper_parameters"]
    assert set(raw) == VERSION_0_1_KEYS and raw["embed_dim"] == 12  # really the old, flat form
    loaded = load_trained(path).module
    assert loaded.settings == module.settings.model, "every setting in its group, the unused kind's left out"
    assert read_checkpoint(path)["hyper_parameters"]["optimization"] == asdict(module.settings.optimization)
    annotations = torch.randn(3, 16, module.encoder.dim)
    for beam_size in (1, 3):
        old, new = (model.generate(annotations, beam_size=beam_size) for model in (module, loaded))
        assert torch.equal(old.tokens, new.tokens) and torch.allclose(old.log_prob, new.log_prob)


def test_old_flat_hyperparameters_move_into_their_groups_and_the_unused_kind_is_dropped():
    old = {"vocabulary": ["<pad>"], "attention": "soft", "embed_dim": 8, "alpha_c": 2.0, "samples": 1,
           "reinforce_weight": 6.4, "beam_size": 5, "encoder": "small_vgg", "image_size": [64, 64]}
    assert grouped(old) == {"vocabulary": ["<pad>"], "attention": {"kind": "soft"}, "decoder": {"embed_dim": 8},
                            "soft": {"alpha_c": 2.0}, "decoding": {"beam_size": 5}, "encoder": {"name": "small_vgg"},
                            "image_size": [64, 64]}
    assert grouped(grouped(old)) == grouped(old)


def test_a_setting_for_the_other_attention_kind_is_refused_by_name():
    with pytest.raises(ConfigError,
                       match=r"model.hard only applies to model.attention.kind: hard \(this run's is soft\)"):
        CaptionModule(vocabulary=["<pad>", "<start>", "<end>", "<unk>", "a"], encoder={"name": "small_vgg",
                      "weights": "none"}, hard={"samples": 2})
    with pytest.raises(ConfigError, match=r"model.decoder has no setting embed_size"):
        CaptionModule(vocabulary=["<pad>", "<start>", "<end>", "<unk>", "a"], encoder={"name": "small_vgg",
                      "weights": "none"}, decoder={"embed_size": 2})
