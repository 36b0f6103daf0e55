"""The configs are composed (README "Configs"), and every named run keeps its effective settings: `caption fit
<its --config arguments> --print_config` equals the print stored in tests/fixtures/print_config/<name>.yaml, made
from the single config file the name stood for before the configs were composed (a stage-2 `*_finetune` file after
its stage 1), its model settings in their groups."""

import itertools
import re
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from kit.cli import printed

from caption.model.decoding import DecodingSettings
from caption.model.objectives import HardObjectiveSettings, SoftObjectiveSettings

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "print_config"
OLD_CONFIGS = sorted(path.stem for path in FIXTURES.glob("*.yaml"))
STAGE2 = "_finetune"
MOST_SHARED_LINES = 10  # no two config files share more than this


def old_command(name: str) -> tuple[str, ...]:
    """The --config arguments a config was run with before the configs were composed: its file, a stage-2 file
    after its stage-1 file (as their headers said)."""
    names = [name.removesuffix(STAGE2), name] if name.endswith(STAGE2) else [name]
    return tuple(item for config in names for item in ("--config", str(REPO / "configs" / f"{config}.yaml")))


def normalise(config: dict) -> dict:
    """A printed config made comparable across versions; the one place for it. The configs print no absolute path
    or other machine-dependent value. The objective group of the attention kind a run uses is given its defaults
    when unset (null), the other one left out, as `CaptionModule` resolves them.
    Settings added since, off by default, are given their default where missing (the sources' `instances` and
    `labels`: no boxes; `early_stopping`: no patience; `model.self_critical`: cross-entropy; `model.decoding`'s
    searches and rules beyond the beam: plain beam search, no rule, no cut)."""
    source = config["data"]["source"]
    if source["class_path"] != "caption.data.synthetic.shapes.ShapesSource":
        source = source | {"init_args": {"instances": None, "labels": None} | source["init_args"]}
    model = {"self_critical": None} | config["model"]
    model["decoding"] = asdict(DecodingSettings()) | model.get("decoding", {})
    kind = model["attention"]["kind"]
    for group, settings in (("soft", SoftObjectiveSettings), ("hard", HardObjectiveSettings)):
        value = model.pop(group, None)
        if group == kind:
            model[group] = asdict(settings()) | (value or {})
    stopping = ({"patience": None, "monitor": "val/attention_accuracy", "min_delta": 0.0}
                | config.get("early_stopping", {}))
    return config | {"model": model, "data": config["data"] | {"source": source}, "early_stopping": stopping}


def fixture(name: str) -> dict:
    """The stored print of `name`, with the settings changed on purpose since then changed in it too."""
    config = yaml.safe_load((FIXTURES / f"{name}.yaml").read_text(encoding="utf-8"))
    if name.startswith("shapes"):  # the last epoch of a fixed schedule, no time cap (docs/measurements.md)
        config["trainer"]["max_time"] = None
        config["checkpoint"]["monitor"] = None
    if name == "shapes_soft":
        # stage 1's learning rate, at which the CNN learns the objects' kinds (docs/measurements.md)
        config["model"]["optimization"]["learning_rate"] = 0.001
        # from stage 0's classifier (docs/measurements.md)
        config["model"]["encoder"]["weights"] = "runs/shapes_encoder"
    if config["model"]["attention"]["kind"] == "hard":  # configs/hard.yaml's entropy weight (docs/hard-attention.md)
        config["model"]["hard"]["entropy_weight"] = 0.002
    return config


@pytest.mark.parametrize("name", OLD_CONFIGS)
def test_every_named_run_keeps_its_effective_settings(name):
    assert normalise(printed(*old_command(name))) == normalise(fixture(name))


def test_composing_by_hand_gives_the_named_run():
    """README "Configs": the spelled-out composition of coco_soft. Its logs follow --trainer.default_root_dir
    when the run starts (tests/config/test_run_anywhere.py), after --print_config has printed the base's save_dir."""
    by_hand = printed("--config", "paper", "--config", "coco", "--config", "soft",
                      "--trainer.default_root_dir", "runs/coco_soft")
    assert by_hand["trainer"]["logger"]["init_args"].pop("save_dir") == "runs/paper"
    named = fixture("coco_soft")
    assert named["trainer"]["logger"]["init_args"].pop("save_dir") == "runs/coco_soft"
    assert normalise(by_hand) == normalise(named)


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_the_shapes_base_composes_with_a_kind_alone(kind):
    """`--config shapes --config hard`, without a stage: every setting a run needs is set (the schedule's gamma)."""
    scheduler = printed("--config", "shapes", "--config", kind)["lr_scheduler"]
    assert scheduler["class_path"] == "torch.optim.lr_scheduler.ExponentialLR"
    assert scheduler["init_args"]["gamma"] == 0.7


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_resnet101_stages(kind):
    """Stage 1: frozen ResNet-101 from the cache; stage 2: stage 1's settings, fine-tuning layer2-4 from images,
    starting from stage 1's best.ckpt; the decoder and hard weights as coco_hard's."""
    first, second = printed("--config", f"coco_resnet101_{kind}"), printed("--config", f"coco_resnet101_{kind}{STAGE2}")
    paper = printed("--config", f"coco_{kind}")
    one, two = first["model"]["encoder"], second["model"]["encoder"]
    assert one["name"] == two["name"] == "resnet101" and one["grid"] == 14 and one["freeze"]
    assert first["data"]["features"] == "data/features/coco_resnet101_14"
    best = Path(first["trainer"]["default_root_dir"]) / "checkpoints" / f"{first['checkpoint']['filename']}.ckpt"
    assert (second["model"]["optimization"]["init_from"] == str(best)
            and not first["checkpoint"]["enable_version_counter"])
    assert second["trainer"]["default_root_dir"] != first["trainer"]["default_root_dir"]
    assert not two["freeze"] and second["data"]["features"] is None
    assert (two["finetune_stages"], two["learning_rate"]) == (3, 1e-4)
    for group in ("decoder", "attention", "soft", "hard"):  # the decoder and objective as the paper's configs
        assert first["model"][group] == second["model"][group] == paper["model"][group], group
    assert first["model"]["optimization"]["learning_rate"] == paper["model"]["optimization"]["learning_rate"]


def lines(path: Path) -> Counter[str]:
    """The lines of a file that set something, spaces collapsed (so that realigning a comment does not hide a copy);
    blank lines and bare section headers (`model:`, `encoder:`) set nothing and are left out."""
    collapsed = (" ".join(line.split()) for line in path.read_text(encoding="utf-8").splitlines())
    return Counter(line for line in collapsed if line and not re.fullmatch(r"[\w.]+:", line))


def test_no_two_configs_share_more_than_ten_lines():
    files = sorted((REPO / "configs").glob("*.yaml"))
    for first, second in itertools.combinations(files, 2):
        shared = lines(first) & lines(second)
        assert shared.total() <= MOST_SHARED_LINES, f"{first.name} and {second.name} share {shared.total()} lines: " \
                                                    f"{sorted(shared)}"
