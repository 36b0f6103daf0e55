"""The one reader of a trained checkpoint: the model, its vocabulary and its data settings from one read.

    trained = load_trained("runs/shapes_soft/checkpoints/last.ckpt")
    trained.module          # the CaptionModel in eval mode: its encoder, decoder, vocabulary and settings
    trained.vocabulary      # the words it was trained on
    trained.data            # the data settings it was trained with ({source: {class_path, init_args}, ...}), or None

The file is read once, with `caption.io.checkpoints.read_checkpoint` (weights_only=True; a checkpoint of a format
before this release is refused there). The model is built from the checkpoint's settings
(`caption.model.caption_model.ModelSettings`) and takes its weights strictly, the encoder's and the decoder's; what
else the checkpoint holds is the training's (`TRAINING_STATE`) and is left out by name. `Captioner.from_checkpoint`,
`caption evaluate`, `describe` and `compare` build on it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import Tensor

from caption.config.keys import dotted
from caption.config.packaged import data_section
from caption.data.datamodule import DATA_LINKS
from caption.data.sources.base import CaptionSource
from caption.errors import CheckpointError, ConfigError
from caption.io import encoder_weights
from caption.io.checkpoint_weights import with_checkpoint_weights, without_encoder_download
from caption.io.checkpoints import find_checkpoint, read_checkpoint
from caption.io.class_paths import ForeignClassError, checked, instantiate, known_classes
from caption.io.model_folder import is_model_folder, settings_file
from caption.model.caption_model import (
    MAX_IMAGE_SIDE,
    TRAINING_STATE,
    CaptionModel,
    ModelSettings,
    check_sizes,
    downsampling,
)
from caption.model.vocabulary import Vocabulary

Normalization = tuple[tuple[float, ...], tuple[float, ...]]  # per-channel (mean, std), 0..1 pixel units


@dataclass(frozen=True)
class TrainedModel:
    """What one read of a checkpoint written by `caption fit` gives."""

    path: Path  # the checkpoint file (a run folder's chosen one)
    module: CaptionModel  # in eval mode, on the CPU (or `map_location`)
    data: dict[str, Any] | None  # the data settings it was trained with; None when neither it nor a config has them
    data_origin: str  # where `data` comes from: the checkpoint, or the config given
    data_problem: str | None  # why `data` is None: the message to show if the data is needed

    @property
    def vocabulary(self) -> Vocabulary:
        return self.module.vocabulary


def load_trained(
    path: str | os.PathLike, *, config: str | os.PathLike | None = None, map_location: Any = "cpu",
    decoding: Mapping[str, Any] | None = None,
) -> TrainedModel:
    """The model, vocabulary and data settings of checkpoint `path` (a file; a run folder: the checkpoint
    `caption compare` picks there; or a model folder of `caption export`), read once (`config`: a YAML whose `data:`
    section replaces the checkpoint's data settings, for checkpoints that do not store them; `decoding`: decoding
    settings that replace the checkpoint's, as `caption test --model.decoding.*` does, checked as a config's are)."""
    path = find_checkpoint(Path(path))
    checkpoint = read_checkpoint(path, map_location=map_location)
    module = build_model(path, checkpoint, decoding=decoding)
    try:
        data, origin, problem = data_settings(checkpoint, path, config), str(config or path), None
    except ConfigError as error:
        if config is not None:
            raise
        data, origin, problem = None, str(path), str(error)
    return TrainedModel(path=Path(path), module=module, data=data, data_origin=origin, data_problem=problem)


def build_model(path: str | os.PathLike, checkpoint: dict[str, Any], *,
                decoding: Mapping[str, Any] | None = None) -> CaptionModel:
    """The trained CaptionModel in eval mode, from what `read_checkpoint(path)` read: every size its settings set
    checked against the weights' shapes first (`check_sizes`, so that a size no weight has is refused before anything
    of it is allocated), then built from them, with the encoder's and the decoder's weights loaded strictly
    (`TRAINING_STATE` left out). The encoder's weights are in the checkpoint, so ImageNet weights are not fetched
    only to be overwritten."""
    hyperparameters = without_encoder_download(checkpoint)
    groups = {field.name: hyperparameters[field.name] for field in fields(ModelSettings)
              if field.name in hyperparameters}
    if decoding:
        groups["decoding"] = {**(groups.get("decoding") or {}), **decoding}
    weights = {name: value for name, value in checkpoint["state_dict"].items() if not name.startswith(TRAINING_STATE)}
    check_sizes(hyperparameters, weights, origin=settings_file(path))

    def build() -> CaptionModel:
        model = CaptionModel(vocabulary=Vocabulary(hyperparameters["vocabulary"]), settings=ModelSettings.of(**groups),
                             reader=encoder_weights)
        if (hyperparameters.get("optimization") or {}).get("compile"):  # trained compiled: it decodes compiled too
            model.decoder.step = torch.compile(model.decoder.step)
        return model

    return with_checkpoint_weights(build, weights, path=path)


def data_settings(checkpoint: dict[str, Any], path: str | os.PathLike,
                  config: str | os.PathLike | None) -> dict[str, Any]:
    """The data settings ({source: {class_path, init_args}, ...}) a model was trained with: the `data:` section of
    `config` if given, else what `caption fit` stored in the checkpoint."""
    # linked from the model, as `caption fit` does: a feature cache is checked against the encoder
    model = dotted(checkpoint["hyper_parameters"])
    linked = {data_key: model[model_key] for model_key, data_key in DATA_LINKS.items() if model_key in model}
    if config is not None:
        data = data_section(str(config))  # a file, a packaged config, or a named run's fragments
        if not data:
            raise ConfigError(f"config {config} has no `data:` section (use the config the model was trained with)")
        return {**data, **linked, **checked_data_source(data, key="data.source", origin=f"config {config}")}
    settings = checkpoint.get("datamodule_hyper_parameters")
    if not isinstance(settings, dict) or not isinstance(settings.get("source"), dict):
        saved = sorted(Path(path).parent.parent.rglob("config.yaml"), key=lambda file: file.stat().st_mtime)
        raise ConfigError(
            f"checkpoint {path} does not record its data (written before data settings were stored, or "
            "outside `caption fit`): pass the training config (--config)"
            + (f", e.g. {saved[-1]} (saved by that run)" if saved else "")
        )
    check_source_sizes(checkpoint, path)
    settings = {key: value for key, value in settings.items() if key != "_instantiator"}
    return {**settings, **linked, **checked_data_source(settings, key="datamodule_hyper_parameters.source",
                                                        origin=f"checkpoint {path}")}


def check_source_sizes(checkpoint: Mapping[str, Any], path: str | os.PathLike) -> None:
    """A CheckpointError naming the file the settings of checkpoint `path` are read from (the checkpoint, a model
    folder's config.json) and the key, when a size its recorded data source sets (`CaptionSource.size_arguments`:
    image_size, resize_size, crop_size) is not a whole number of pixels from the encoder's downsampling to
    `MAX_IMAGE_SIDE`: before any image is resized to it. No recorded source, or a size left unset (None: the source's
    preset), passes."""
    data = checkpoint.get("datamodule_hyper_parameters")
    source = data.get("source") if isinstance(data, dict) else None
    if not isinstance(source, dict):
        return
    origin = str(settings_file(path))
    key = "data.source" if is_model_folder(path) else "datamodule_hyper_parameters.source"  # as the file spells it
    source = checked(source, base=CaptionSource, key=key, origin=origin)
    hyperparameters = checkpoint["hyper_parameters"]
    encoder = ModelSettings.of(**{field.name: hyperparameters[field.name] for field in fields(ModelSettings)
                                  if field.name in hyperparameters}).encoder
    least = downsampling(encoder)
    for name in known_classes(CaptionSource)[source["class_path"]].size_arguments:
        value = source["init_args"].get(name)
        if value is None or (type(value) is int and least <= value <= MAX_IMAGE_SIDE):
            continue
        raise CheckpointError(
            f"{origin}: {key}.init_args.{name} is {value!r}, but the images of encoder {encoder.name} must have whole "
            f"sides of {least} (its downsampling) to {MAX_IMAGE_SIDE} pixels: set it back to the size the model was "
            f"trained on (model.image_size {list(hyperparameters.get('image_size') or []) or 'unrecorded'}), or "
            "export the model again"
        )


def checked_data_source(data: dict[str, Any], *, key: str, origin: str) -> dict[str, Any]:
    """{"source": the data source of `data`, checked to be a known `CaptionSource`}, or {} when `data` names none
    (the data module then says what is missing)."""
    if data.get("source") is None:
        return {}
    return {"source": checked(data["source"], base=CaptionSource, key=key, origin=origin)}


def source_inputs(
    settings: dict[str, Any], origin: str, *, encoder: str
) -> tuple[Callable[[Image.Image], Tensor], Normalization]:
    """The input transform and normalization of the data source in `settings` for `encoder` (the source is built,
    not read: sources load their records lazily, so the dataset's files need not be on this machine)."""
    source = inference_source(settings, origin, encoder=encoder)
    return source.inference_transform(), source.normalization


def inference_source(settings: dict[str, Any], origin: str, *, encoder: str) -> CaptionSource:
    """The data source in `settings`, built (not read) and set up for `encoder`, as `source_inputs` takes it."""
    try:
        source = instantiate(settings.get("source"), base=CaptionSource, key="data.source", origin=origin)
    except ForeignClassError:
        raise
    except Exception as error:
        raise ConfigError(f"cannot rebuild the data source from {origin}: {error}") from error
    source.use_encoder(encoder)
    return source
