"""Each default is stated once, by one policy: the paper's COCO model, the original code where the paper is silent,
ours where neither says. Every field of the settings dataclasses names its source on its line, every settings class
checks its own values, and no line of a shipped config restates a default."""

import dataclasses
import importlib
import inspect
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from caption.config.packaged import NAMED_RUNS
from caption.data.datamodule import CaptionDataModule
from caption.model.caption_model import ModelSettings
from caption.training.optimization import OptimizationSettings

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SOURCES = ("paper", "original code", "ours")
# the settings classes of a config's `model:` section, by group
GROUPS: dict[str, type] = {
    **{field.name: next(arg for arg in typing.get_args(kind) or (kind,) if arg is not type(None))
       for field in dataclasses.fields(ModelSettings)
       for kind in [typing.get_type_hints(ModelSettings)[field.name]]},
    "optimization": OptimizationSettings,
}
# keys a config may state at their default: a fragment that selects the attention kind names it
SELECTORS = {"model.attention.kind"}


def plain(value: Any) -> Any:
    """Tuples as lists, so that a YAML list and a dataclass default compare equal."""
    return list(value) if isinstance(value, tuple) else value


def signature_defaults(function: Any) -> dict[str, Any]:
    return {name: parameter.default for name, parameter in inspect.signature(function).parameters.items()
            if parameter.default is not inspect.Parameter.empty}


def read(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONFIGS / f"{name}.yaml").read_text(encoding="utf-8")) or {}


def settings_of(config: dict[str, Any]) -> dict[str, Any]:
    """The model and data settings of a config, by dotted key (`model.decoder.hidden_dim`, `data.batch_size`,
    `data.source.init_args.restval`, `data.source.class_path`)."""
    flat = {f"model.{group}.{key}": value for group, values in (config.get("model") or {}).items()
            for key, value in (values or {}).items()}
    data = dict(config.get("data") or {})
    source = data.pop("source", None) or {}
    flat |= {f"data.{key}": value for key, value in data.items()}
    flat |= {f"data.source.init_args.{key}": value for key, value in (source.get("init_args") or {}).items()}
    return flat | ({"data.source.class_path": source["class_path"]} if "class_path" in source else {})


def default_of(key: str, source_class: str | None) -> Any:
    """The default of a dotted key (`inspect.Parameter.empty` when it has none)."""
    parts = key.split(".")
    if parts[0] == "model":
        field = next((field for field in dataclasses.fields(GROUPS[parts[1]]) if field.name == parts[2]), None)
        return inspect.Parameter.empty if field is None else plain(field.default)
    if parts[:3] == ["data", "source", "init_args"]:
        if source_class is None:
            return inspect.Parameter.empty
        module, _, name = source_class.rpartition(".")
        defaults = signature_defaults(getattr(importlib.import_module(module), name).__init__)
        return defaults.get(parts[3], inspect.Parameter.empty)
    return signature_defaults(CaptionDataModule.__init__).get(parts[1], inspect.Parameter.empty)


def restated(config: dict[str, Any], earlier: list[dict[str, Any]] = ()) -> list[str]:
    """The `key: value` lines of `config` that state the default of their key, unless they override another value
    that a config merged before it (`earlier`, in order) sets."""
    before: dict[str, Any] = {}
    for previous in earlier:
        before |= settings_of(previous)
    settings = settings_of(config)
    source_class = settings.get("data.source.class_path", before.get("data.source.class_path"))
    return [f"{key}: {value}" for key, value in settings.items()
            if key not in SELECTORS and default_of(key, source_class) == value and before.get(key, value) == value]


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda path: path.name)
def test_no_config_line_restates_a_default(path):
    name = path.stem
    found = set(restated(read(name)))
    for fragments in NAMED_RUNS.values():  # in a named run, a line may set back what an earlier fragment changed
        if name in fragments:
            found &= set(restated(read(name), [read(fragment) for fragment in fragments[:fragments.index(name)]]))
    assert not found, f"configs/{path.name} restates defaults (leave these lines out): {sorted(found)}"


def test_a_restated_default_is_found_and_an_override_is_not():
    config = {"model": {"decoder": {"hidden_dim": 1800, "embed_dim": 64}, "attention": {"kind": "soft"},
                        "encoder": {"channels": [16, 32, 64, 128]}},
              "data": {"batch_size": 64, "num_workers": 4, "features": None,
                       "source": {"class_path": "caption.data.sources.karpathy.KarpathySource",
                                  "init_args": {"restval": "train"}}}}
    assert restated(config) == ["model.decoder.hidden_dim: 1800", "model.encoder.channels: [16, 32, 64, 128]",
                                "data.batch_size: 64", "data.features: None", "data.source.init_args.restval: train"]
    assert restated({"data": {"features": None}}, [{"data": {"features": "data/features/coco_vgg16"}}]) == []


@pytest.mark.parametrize("settings", list(GROUPS.values()), ids=lambda settings: settings.__name__)
def test_every_setting_names_the_source_of_its_default(settings):
    lines = inspect.getsource(settings).splitlines()
    unsourced = []
    for field in dataclasses.fields(settings):
        line = next(line for line in lines if re.match(rf"    {field.name}: [^#]+ = ", line))
        comment = line.partition("#")[2]
        if not any(comment.strip().startswith(source) for source in SOURCES):
            unsourced.append(field.name)
    assert not unsourced, f"{settings.__name__}: say on each field's line whose default it is {SOURCES}: {unsourced}"


@pytest.mark.parametrize("settings", list(GROUPS.values()), ids=lambda settings: settings.__name__)
def test_every_settings_class_checks_its_own_values(settings):
    assert "__post_init__" in vars(settings), f"{settings.__name__} has no range checks (__post_init__)"
