"""Every config in configs/ parses through the real CLI (`caption fit --print_config`); a stage-2 file
(`*_finetune.yaml`) parses on top of its stage-1 config, as its header says to run it."""

from pathlib import Path

import pytest
import yaml

from caption.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted(path.name for path in (REPO / "configs").glob("*.yaml"))
STAGE2 = "_finetune.yaml"


def command(name: str) -> list[str]:
    """The --config arguments a config is run with: a stage-2 file comes after its stage-1 config."""
    configs = [name.replace(STAGE2, ".yaml"), name] if name.endswith(STAGE2) else [name]
    return [argument for config in configs for argument in ("--config", str(REPO / "configs" / config))]


def printed(name: str, capsys) -> dict:
    with pytest.raises(SystemExit) as done:
        main(["fit", *command(name), "--print_config"])
    assert not done.value.code
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_config_parses(name, capsys):
    config = printed(name, capsys)
    assert config["model"]["attention"] in name


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_resnet101_stages(kind, capsys):
    """Stage 1: frozen ResNet-101 from the cache; stage 2: stage 1's settings, fine-tuning layer2-4 from images,
    starting from stage 1's best.ckpt; the hard weights as configs/coco_hard.yaml's."""
    first, second = printed(f"coco_resnet101_{kind}.yaml", capsys), printed(f"coco_resnet101_{kind}{STAGE2}", capsys)
    paper = printed(f"coco_{kind}.yaml", capsys)
    assert first["model"]["encoder"] == second["model"]["encoder"] == "resnet101"
    assert first["model"]["encoder_grid"] == 14 and first["model"]["freeze_encoder"]
    assert first["data"]["features"] == "data/features/coco_resnet101_14"
    best = Path(first["trainer"]["default_root_dir"]) / "checkpoints" / f"{first['checkpoint']['filename']}.ckpt"
    assert second["model"]["init_from"] == str(best) and not first["checkpoint"]["enable_version_counter"]
    assert second["trainer"]["default_root_dir"] != first["trainer"]["default_root_dir"]
    assert not second["model"]["freeze_encoder"] and second["data"]["features"] is None
    assert (second["model"]["encoder_finetune_stages"], second["model"]["encoder_learning_rate"]) == (3, 1e-4)
    decoder = ("embed_dim", "hidden_dim", "attention_layers", "init_layers", "alpha_c", "reinforce_weight",
               "entropy_weight", "samples", "semi_sampling", "baseline_decay", "reward", "learning_rate", "dropout")
    for key in decoder:
        assert first["model"][key] == second["model"][key] == paper["model"][key], key
