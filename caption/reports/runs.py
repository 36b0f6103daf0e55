"""The models `caption compare` puts side by side: each checkpoint (or run folder), its captioner, name and logs;
and, with `--against`, the groups they form (a group: the runs of one recipe, one per seed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caption.reports.logs import find_logs
from caption.errors import ConfigError
from caption.inference import Captioner, build_data
from caption.io.checkpoints import find_checkpoint
from caption.model.caption_model import ModelSettings
from caption.model.precision import PrecisionSetting


# the data settings that shape the vocabulary built from the training captions, with their defaults
VOCABULARY_SETTINGS = {"min_count": 1, "max_vocab_size": None}


@dataclass
class Model:
    """One model to compare."""

    name: str  # label in the report
    checkpoint: Path
    captioner: Captioner
    logs: Path | None  # the run's metrics.csv or TensorBoard event folder, if found (`caption.reports.logs`)

    @property
    def settings(self) -> ModelSettings:
        return self.captioner.module.settings

    def training_data(self) -> dict[str, Any] | None:
        """What defines the data it was trained on, whatever folder it was in: the source's class, its settings but
        the files and folders it names (`CaptionSource.path_arguments`), and the vocabulary built from the training
        captions, with the settings that shape it (`VOCABULARY_SETTINGS`); None if the checkpoint does not record its
        data."""
        if self.captioner.data is None:
            return None
        settings, origin = self.captioner.data
        locations = type(build_data(settings, origin).source).path_arguments
        source = settings["source"]
        return {"data.source.class_path": source.get("class_path"),
                **{f"data.source.init_args.{key}": value for key, value in sorted(source.get("init_args", {}).items())
                   if key not in locations},
                **{f"data.{key}": settings.get(key, default) for key, default in VOCABULARY_SETTINGS.items()},
                "vocabulary": list(self.captioner.module.vocabulary.itos)}


def is_vocabulary_key(key: str) -> bool:
    """Whether a key of `Model.training_data` is of the vocabulary (its words, or a setting that shapes it)."""
    return key == "vocabulary" or key.removeprefix("data.") in VOCABULARY_SETTINGS


def data_differences(first: dict[str, Any], other: dict[str, Any], *, vocabulary: bool = False) -> list[str]:
    """What differs between two `Model.training_data`: of the data, e.g. "data.source.init_args.num_train: 50 vs
    3000"; with `vocabulary`, of the vocabulary built from it, e.g. "data.max_vocab_size: 500 vs None"."""
    differences = []
    for key in dict.fromkeys([*first, *other]):
        if first.get(key) == other.get(key) or is_vocabulary_key(key) != vocabulary:
            continue
        if key == "vocabulary":
            new = [word for word in other[key] if word not in set(first[key])]
            differences.append(f"vocabulary: {len(other[key])} words vs {len(first[key])}, {len(new)} of them new"
                               + (f" ({', '.join(new[:5])}{', ...' if len(new) > 5 else ''})" if new else ""))
        else:
            differences.append(f"{key}: {other.get(key)} vs {first.get(key)}")
    return differences


def training_difference(name: str, other: dict[str, Any], *, first_name: str, first: dict[str, Any]) -> str | None:
    """How model `name` was trained otherwise than the first model, from their `Model.training_data`, as a warning:
    on other data, or on the same data with another vocabulary (a cap or a minimum count of its own); None if alike."""
    data, words = data_differences(first, other), data_differences(first, other, vocabulary=True)
    if data:
        return (f"{name} was trained on other data than {first_name} ({'; '.join(data + words)}); all are evaluated "
                "on the latter")
    if words:
        return f"{name} was trained on the same data as {first_name}, with another vocabulary ({'; '.join(words)})"
    return None


def model_names(captioners: list[Captioner], names: list[str] | None, *, each: str = "model") -> list[str]:
    """`names` if given, else the attention kind ("soft", "hard"; "soft-scst" after self-critical training), numbered
    when it repeats; `each`: what is named, "model" or "group" (named by its first model)."""
    if names is not None:
        if len(names) != len(captioners) or len(set(names)) != len(names):
            raise ConfigError(f"--names needs {len(captioners)} distinct names, one per {each}; got {names}")
        for name in names:  # each names a folder inside --predictions.out
            if name in ("", ".", "..") or any(character in name for character in "/\\\0"):
                raise ConfigError(f"--names: {name!r} is not a folder name (each {each}'s results go to a folder of "
                                  f"that name inside --predictions.out); give plain names such as soft hard")
        return names
    kinds = [captioner.module.settings.attention.kind + ("-scst" if captioner.module.settings.self_critical else "")
             for captioner in captioners]
    return [kind if kinds.count(kind) == 1 else f"{kind}-{kinds[:i].count(kind) + 1}" for i, kind in enumerate(kinds)]


def read_models(given: list[Path], *, names: list[str] | None, device: str, config: Path | None,
                decoding: dict[str, Any] | None = None, precision: PrecisionSetting = "auto") -> list[Model]:
    """A `Model` per checkpoint or run folder (a run folder stands for its newest model-selection checkpoint,
    `best-*.ckpt`, else `last.ckpt`, and its newest logs, `caption.reports.logs.find_logs`); `config`: a YAML
    whose `data:` section stands for the data settings of every checkpoint; `decoding`: decoding settings that
    replace each checkpoint's; `precision`: each captioner's."""
    paths = [find_checkpoint(path) for path in given]
    captioners = [Captioner.from_checkpoint(path, device=device, config=config, decoding=decoding, precision=precision)
                  for path in paths]
    return [Model(name, path, captioner, find_logs(folder, path))
            for name, path, captioner, folder in zip(model_names(captioners, names), paths, captioners, given)]


@dataclass
class Group:
    """The runs of one recipe, one per seed (`caption compare A... --against B...`), under one name."""

    name: str  # label in the report, and the folder DIR/<name>/ of its runs' results
    models: list[Model]  # each named "<group>/<run>" (its results in DIR/<group>/<run>/), or "<group>" when alone


def run_names(given: list[Path], checkpoints: list[Path]) -> list[str]:
    """A name per run of a group: its run folder's name (the folder given, or the one two levels above a given
    checkpoint, runs/<run>/checkpoints/best.ckpt), or its position from 1 when those repeat in the group."""
    folders = [(path if path.is_dir() else checkpoint.parent.parent).resolve().name
               for path, checkpoint in zip(given, checkpoints)]
    if len(set(folders)) == len(folders) and all(folders):
        return folders
    return [str(index) for index in range(1, len(given) + 1)]


def read_groups(given: list[list[Path]], *, names: list[str] | None, device: str, config: Path | None,
                decoding: dict[str, Any] | None = None, precision: PrecisionSetting = "auto") -> list[Group]:
    """A `Group` per list of checkpoints or run folders (`read_models`' readings), named by `names` (one per group)
    or after its first model's attention kind (`model_names`); a group of one model keeps the group's name."""
    paths = [[find_checkpoint(path) for path in group] for group in given]
    captioners = [[Captioner.from_checkpoint(path, device=device, config=config, decoding=decoding,
                                             precision=precision) for path in group] for group in paths]
    groups = []
    for name, folders, checkpoints, readers in zip(model_names([group[0] for group in captioners], names,
                                                               each="group"), given, paths, captioners):
        runs = [name] if len(folders) == 1 else [f"{name}/{run}" for run in run_names(folders, checkpoints)]
        groups.append(Group(name, [Model(run, path, captioner, find_logs(folder, path))
                                   for run, path, captioner, folder in zip(runs, checkpoints, readers, folders)]))
    return groups
