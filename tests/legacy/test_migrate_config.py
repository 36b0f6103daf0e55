"""`caption migrate-config`: a config of 0.1 gets its flat model keys moved into their groups, values and comments
kept, whatever its YAML style; a layout it cannot edit is refused in one line naming the keys to move; a config
with no key of 0.1 is never changed. `caption fit` takes grouped configs in any YAML style and names the new key
of an old one it refuses."""

import sys
from pathlib import Path

import pytest
import torch
import yaml
from kit.cli import REPO, failed
from kit.tiny import fit_args

from caption.cli import main
from caption.legacy.settings import RENAMED

OLD = """\
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
MIGRATED = """\
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
# valid grouped configs in YAML's other styles: flow mappings, comments, anchors and aliases
GROUPED_FLOW = """\
# grouped settings, written in YAML's flow style
model:
  attention: {kind: soft, dim: 8}   # the soft model
  decoding: {beam_size: 2}
"""
GROUPED_FLOW_MODEL = "model: {attention: {kind: soft}, decoding: {beam_size: 2}}  # all in one line\n"
GROUPED_ANCHORS = """\
model:
  attention: {kind: soft, dim: &width 8}  # flow inside block
  decoder:
    embed_dim: *width
    hidden_dim: 16
  encoder: {name: small_vgg}
"""


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments


def migrate_in_place(path: Path, capsys: pytest.CaptureFixture) -> str:
    """`caption migrate-config PATH --in-place`; its report line."""
    main(["migrate-config", str(path), "--in-place"])
    return capsys.readouterr().err.strip()


def test_flat_keys_move_into_their_groups_keeping_values_and_comments(tmp_path, capsys):
    config = tmp_path / "old.yaml"
    config.write_text(OLD)
    assert migrate_in_place(config, capsys) == f"{config}: migrated"
    assert config.read_text() == MIGRATED
    assert migrate_in_place(config, capsys) == f"{config}: nothing to migrate"
    assert config.read_text() == MIGRATED


def test_without_in_place_the_migrated_config_is_printed_and_the_file_kept(tmp_path, capsys):
    config = tmp_path / "old.yaml"
    config.write_text(OLD)
    main(["migrate-config", str(config)])
    assert capsys.readouterr().out == MIGRATED
    assert config.read_text() == OLD


@pytest.mark.parametrize("group", ["decoder:\n    hidden_dim: 96\n", "decoder: {hidden_dim: 96}\n"],
                         ids=["block", "flow"])
def test_a_flat_key_beside_its_existing_group_is_merged_into_it(group, tmp_path, capsys):
    config = tmp_path / "old.yaml"
    config.write_text(f"model:\n  {group}  embed_dim: 48\n")
    migrate_in_place(config, capsys)
    assert yaml.safe_load(config.read_text()) == {"model": {"decoder": {"hidden_dim": 96, "embed_dim": 48}}}


@pytest.mark.parametrize("old, settings", [
    ("model: {attention: hard, embed_dim: 64}\n",
     {"attention": {"kind": "hard"}, "decoder": {"embed_dim": 64}}),
    ("model:\n    attention: hard\n    encoder_channels:\n        - 16\n        - 32\ndata:\n    batch_size: 2\n",
     {"attention": {"kind": "hard"}, "encoder": {"channels": [16, 32]}}),
    ("model:\n  class_path: caption.training.module.CaptionModule\n  init_args:\n    embed_dim: 64\n    beam_size: 3\n",
     {"decoder": {"embed_dim": 64}, "decoding": {"beam_size": 3}}),
    ("model: {class_path: caption.training.module.CaptionModule, init_args: {attention: hard}}\n",
     {"attention": {"kind": "hard"}}),
], ids=["flow", "four-space-indent", "class_path", "class_path-flow"])
def test_every_yaml_style_of_model_section_is_migrated(old, settings, tmp_path, capsys):
    config = tmp_path / "old.yaml"
    config.write_text(old)
    migrate_in_place(config, capsys)
    model = yaml.safe_load(config.read_text())["model"]
    assert model.get("init_args", model) == settings


def test_a_layout_it_cannot_edit_is_refused_naming_the_keys_to_move(tmp_path):
    config = tmp_path / "merged.yaml"
    text = "base: &base\n  embed_dim: 64\nmodel:\n  <<: *base\n"
    config.write_text(text)
    line = failed(["migrate-config", str(config), "--in-place"])
    assert f"{config}:" in line and "move them by hand: model.embed_dim -> model.decoder.embed_dim" in line, line
    assert config.read_text() == text


def test_a_setting_given_flat_and_in_its_group_with_two_values_is_refused(tmp_path):
    config = tmp_path / "both.yaml"
    config.write_text("model:\n  embed_dim: 4\n  decoder:\n    embed_dim: 5\n")
    line = failed(["migrate-config", str(config), "--in-place"])
    assert "model.embed_dim is 4 but model.decoder.embed_dim is 5: keep only model.decoder.embed_dim" in line, line


def test_in_place_through_a_link_migrates_the_file_it_links_to(tmp_path, capsys):
    real = tmp_path / "configs" / "old.yaml"
    real.parent.mkdir()
    real.write_text(OLD)
    link = tmp_path / "run.yaml"
    link.symlink_to(real)
    assert migrate_in_place(link, capsys) == f"{link}: migrated (the file it links to, {real.resolve()})"
    assert link.is_symlink() and real.read_text() == MIGRATED


def test_a_file_that_is_not_utf8_or_not_yaml_is_one_line(tmp_path):
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("model:\n  embed_dim: 64  # größe\n".encode("latin-1"))
    line = failed(["migrate-config", str(latin1)])
    assert line == f"caption: error: {latin1}: not UTF-8 text (byte 0xf6 at offset 28): save it as UTF-8 first", line
    broken = tmp_path / "broken.yaml"
    broken.write_text("model:\n  embed_dim: [64\n")
    assert f"{broken}: not valid YAML (" in failed(["migrate-config", str(broken)])


@pytest.mark.parametrize("text", [GROUPED_FLOW, GROUPED_FLOW_MODEL, GROUPED_ANCHORS],
                         ids=["flow-groups", "flow-model", "anchors"])
def test_a_config_with_no_old_key_is_never_changed(text, tmp_path, capsys):
    config = tmp_path / "new.yaml"
    config.write_text(text)
    assert migrate_in_place(config, capsys) == f"{config}: nothing to migrate"
    assert config.read_text() == text
    main(["migrate-config", str(config)])
    assert capsys.readouterr().out == text


def test_every_shipped_config_is_left_as_it_is(capsys):
    configs = sorted((REPO / "configs").glob("*.yaml"))
    assert configs
    main(["migrate-config", *map(str, configs)])
    assert capsys.readouterr().out == "".join(path.read_text(encoding="utf-8") for path in configs)


def test_an_old_key_is_refused_by_fit_naming_its_new_one(tmp_path):
    config = tmp_path / "old.yaml"
    config.write_text("model:\n  decoder:\n    hidden_dim: 96\n  embed_dim: 48\n")
    line = failed(["fit", "--config", "shapes_soft", "--config", str(config), "--print_config"])
    assert "model.embed_dim is now model.decoder.embed_dim" in line and "caption migrate-config" in line, line
    line = failed(["fit", "--config", "shapes_soft", "--model.attention", "hard", "--print_config"])
    assert "model.attention is now model.attention.kind" in line, line
    line = failed(["fit", "--config", "shapes_soft", "--model.gate", "false", "--print_config"])
    assert "model.gate is now model.attention.gate" in line, line


def test_a_grouped_config_in_flow_style_trains(tmp_path):
    config = tmp_path / "flow.yaml"
    config.write_text(GROUPED_FLOW)
    run = tmp_path / "run"
    args = fit_args(run, "--trainer.limit_test_batches", "0")
    main(["fit", *args[:2], "--config", str(config), *args[2:]])  # after configs/shapes_soft.yaml, before the rest
    checkpoint = torch.load(next((run / "checkpoints").glob("*.ckpt")), weights_only=True)
    assert checkpoint["hyper_parameters"]["decoding"]["beam_size"] == 2  # the flow-style file's setting


def every_flat_key() -> dict:
    """A value for every flat key of 0.1 (a string where the key is also a group's name)."""
    return {key: ("hard" if key == "attention" else "small_vgg" if key == "encoder" else [index, index + 1]
                  if index % 3 == 0 else index) for index, key in enumerate(RENAMED)}


@pytest.mark.parametrize("indent", [2, 4])
def test_every_flat_key_is_moved_in_block_and_flow_style(indent, tmp_path, capsys):
    flat = every_flat_key()
    grouped_settings: dict = {}
    for key, value in flat.items():
        group, _, name = RENAMED[key].partition(".")
        grouped_settings.setdefault(group, {})[name] = value
    block = yaml.safe_dump({"model": flat, "data": {"batch_size": 2}}, sort_keys=False, indent=indent)
    block = "\n".join(f"{line}  # line {number}" if ":" in line else line
                      for number, line in enumerate(block.splitlines())) + "\n"
    flow = yaml.safe_dump({"model": flat}, default_flow_style=True, sort_keys=False)
    for text in (block, flow):
        config = tmp_path / "old.yaml"
        config.write_text(text)
        migrate_in_place(config, capsys)
        assert yaml.safe_load(config.read_text())["model"] == grouped_settings


def test_fit_takes_a_migrated_config(tmp_path, capsys):
    config = tmp_path / "old.yaml"
    config.write_text("model:\n  attention: soft\n  embed_dim: 24  # the word vectors\n")
    migrate_in_place(config, capsys)
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", "shapes_soft", "--config", str(config), "--print_config"])
    assert not done.value.code
    assert yaml.safe_load(capsys.readouterr().out)["model"]["decoder"]["embed_dim"] == 24
