"""A trained model shared as a model folder, from Python or from `caption export`: the one writer of the folder.

    from caption import Captioner
    captioner = Captioner.from_checkpoint("runs/shapes_soft")
    captioner.save_pretrained("exports/shapes_soft")     # model.safetensors, config.json, README.md (the model card)
    captioner.push_to_hub("owner/shapes-soft")            # the same folder, uploaded to the Hugging Face Hub

`export_model` writes the folder of a checkpoint (a file, a run folder's chosen one, or a model folder): the weights,
config.json with the input's `preprocessing` and every file's SHA-256, the model card with the run's figures, and the
run's saved config (`caption.io.model_folder`); `caption export` and `Captioner.save_pretrained` both call it.
`Captioner` here is `caption.inference.Captioner` with `save_pretrained` and `push_to_hub` (`from caption import
Captioner` gives this one): writing a card reads the run's logs and the paper's table, which the inference layer
below does not import.
"""

from __future__ import annotations

import inspect
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caption.errors import CaptionWarning, ConfigError
from caption.inference.captioner import Captioner as PlainCaptioner
from caption.io.outputs import writable_folder

if TYPE_CHECKING:
    from PIL import Image
    from torch import Tensor

    from caption.data.sources.base import CaptionSource
    from caption.model.caption_model import CaptionModel
    from caption.reports.model_card import TestFigures

    # an input transform, its per-channel (mean, std) in 0..1 pixel units, and the (height, width) of what it gives
    Inputs = tuple[Callable[[Image.Image], Tensor], tuple[tuple[float, ...], tuple[float, ...]], tuple[int, int]]


@dataclass(frozen=True)
class ExportedModel:
    """What `export_model` wrote."""

    folder: Path  # the model folder
    checkpoint: Path  # the checkpoint it was written from
    files: tuple[str, ...]  # the files written, in the folder


class Captioner(PlainCaptioner):
    """`caption.inference.Captioner` that also writes itself as a model folder and uploads it to the Hub."""

    def save_pretrained(self, folder: str | os.PathLike, *, model_name: str | None = None, license: str = "mit",
                        metrics: str | os.PathLike | None = None) -> Path:
        """Write the model folder `from_pretrained` loads, as `caption export` writes it, into `folder`; returns it.

        Args:
            folder: the model folder to write (created if needed; it must not hold checkpoints).
            model_name: the card's title (default: the folder's name).
            license: the weights' license in the card's metadata, as the Hub spells it (default: mit, the code's).
            metrics: a metrics.json of `caption evaluate` for the card's test figures (default: the run's last
                test, from its metrics.csv).
        """
        exported = export_model(self.checkpoint_file(), Path(folder), model_name=model_name, license=license,
                                metrics=None if metrics is None else Path(metrics))
        return exported.folder

    def push_to_hub(self, repo_id: str, *, private: bool = False, license: str = "mit",
                    metrics: str | os.PathLike | None = None) -> str:
        """Upload the model folder `save_pretrained` writes to the Hugging Face Hub model repository `repo_id`
        (owner/name, created if needed; needs huggingface_hub and `hf auth login` or HF_TOKEN, checked first); the
        folder is written in a temporary folder, removed afterwards. Returns the commit's URL.

        Args:
            repo_id: the Hub model repository, owner/name; also the card's title.
            private: create the repository private.
            license: the weights' license in the card's metadata.
            metrics: a metrics.json of `caption evaluate` for the card's test figures.
        """
        from caption.io.hub import check_login, upload_model_folder

        what = f"push_to_hub({repo_id!r})"
        api = check_login(repo_id, what=what)
        with tempfile.TemporaryDirectory(prefix="caption-push-") as temporary:
            folder = self.save_pretrained(Path(temporary) / "model", model_name=repo_id, license=license,
                                          metrics=metrics)
            return upload_model_folder(folder, repo_id, api=api, private=private, what=what, kept=False)

    def checkpoint_file(self) -> Path:
        """The local checkpoint this captioner was loaded from (a file or a model folder), which is exported."""
        if self.checkpoint_path is None:
            raise ConfigError("save_pretrained: this Captioner was not loaded from a checkpoint (build it with "
                              "Captioner.from_checkpoint or from_pretrained), so there is no trained model to write")
        return self.checkpoint_path


def export_model(ckpt_path: Path, out: Path, *, metrics: Path | None = None, model_name: str | None = None,
                 license: str = "mit", what: str = "the model folder") -> ExportedModel:
    """Write the model folder of checkpoint `ckpt_path` (a file, a run folder or a model folder) into `out`: the
    weights (the model's, and the objective's for `model.optimization.init_from`), config.json, the model card and
    the run's saved config when it kept one, each written atomically (`caption.io.model_folder.write_model_folder`).

    Args:
        ckpt_path: the checkpoint, as every command's --ckpt_path names it.
        out: the model folder; one that holds checkpoints is refused.
        metrics: a metrics.json of `caption evaluate` for the card's test figures (default: the run's last test).
        model_name: the card's title (default: the name of `out`).
        license: the card's license.
        what: how messages name `out` (the command's option).
    """
    import caption
    from caption.inference.trained import build_model
    from caption.io.checkpoints import find_checkpoint, read_checkpoint
    from caption.io.model_folder import model_config, weights_bytes, write_model_folder
    from caption.model.caption_model import TRAINING_STATE
    from caption.reports.model_card import evaluated

    measured = evaluated(metrics) if metrics is not None else None  # before any work: the card's figures
    checkpoint_path = find_checkpoint(ckpt_path)
    if out.is_dir() and any(out.rglob("*.ckpt")):
        raise ConfigError(f"{what} {out} holds checkpoints (a run folder?): export into a folder of its own, so "
                          "that --ckpt_path of that run still means its checkpoints")
    writable_folder(out, what=what)
    checkpoint = read_checkpoint(checkpoint_path)
    source, inputs = model_inputs(checkpoint_path, checkpoint)  # as `Captioner` builds them
    paths = None if source is None else source_paths(source, checkpoint["datamodule_hyper_parameters"]["source"])
    config = model_config(checkpoint, version=caption.__version__,  # before building the model changes any setting
                          source_paths=paths, preprocessing=None if inputs is None else preprocessing(*inputs))
    model = build_model(checkpoint_path, checkpoint)  # the weights checked against the settings, as loading does
    training_state = {name: weight for name, weight in checkpoint["state_dict"].items()
                      if name.startswith(TRAINING_STATE)}
    run = run_folder(ckpt_path, checkpoint_path)
    saved = saved_config(run) if run is not None else None
    card = card_text(run, checkpoint_path, checkpoint, model, name=model_name or out.resolve().name,
                     license=license, saved=saved, preprocessing=config["preprocessing"], measured=measured,
                     metrics=metrics)
    write_model_folder(out, weights=weights_bytes({**model.state_dict(), **training_state}), config=config,
                       card=card, training_config=saved.read_bytes() if saved is not None else None)
    files = ("model.safetensors", "config.json", "README.md", *(("training_config.yaml",) if saved else ()))
    return ExportedModel(folder=out, checkpoint=checkpoint_path, files=files)


def card_text(run: Path | None, checkpoint_path: Path, checkpoint: dict[str, Any], model: CaptionModel, *, name: str,
              license: str, saved: Path | None, preprocessing: dict[str, Any] | None = None,
              measured: TestFigures | None = None, metrics: Path | None = None) -> str:
    """The model card of the checkpoint (of run folder `run`; None for a lone file), titled `name`, with what its run
    recorded: its saved config (`saved`) and its test figures (`measured`: those of the metrics.json `metrics`, read
    from it), and config.json's `preprocessing`."""
    import caption
    from caption.reports.logs import find_logs
    from caption.io.provenance import provenance, run_precision, run_seed
    from caption.model.caption_model import typed
    from caption.reports.model_card import CardFacts, last_test_row, model_card
    from caption.training.optimization import OptimizationSettings

    logs = find_logs(run, checkpoint_path) if run is not None else None
    metrics_csv = logs if logs is not None and logs.suffix == ".csv" else None
    if measured is not None:
        test = measured
        scored = metrics_checkpoint(metrics)
        if metrics is not None and scored is not None and Path(scored).resolve() != checkpoint_path.resolve():
            warnings.warn(f"--metrics {metrics} scored {scored}, not the exported {checkpoint_path}: the card "
                          "shows its figures all the same", CaptionWarning)
    elif metrics_csv is not None and find_checkpoint_of(run) == checkpoint_path:  # fit tests its best checkpoint
        test = last_test_row(metrics_csv, run=run)
    else:
        test = None
    hyperparameters = checkpoint["hyper_parameters"]
    return model_card(CardFacts(
        name=name, settings=model.settings,
        optimization=typed(OptimizationSettings, hyperparameters.get("optimization") or {}, "optimization"),
        vocabulary_size=len(model.vocabulary), data=checkpoint.get("datamodule_hyper_parameters"),
        version=caption.__version__, test=test, epoch=checkpoint.get("epoch"), steps=checkpoint.get("global_step"),
        config=str(saved.relative_to(run)) if saved is not None and run is not None else None,
        lr_scheduler=checkpoint["hyper_parameters"].get("lr_scheduler"), license=license,
        preprocessing=preprocessing,
        made=provenance(precision=run_precision(checkpoint_path), seed=run_seed(checkpoint_path), device="cpu"),
    ))


def model_inputs(checkpoint_path: Path, checkpoint: dict[str, Any]) -> tuple[CaptionSource | None, Inputs | None]:
    """The data source of the checkpoint (None when it records none) and the input transform `Captioner` gives its
    model, with the transform's normalization and input size (None without data, for small_vgg, which has no
    preset)."""
    from caption.data.sources.image_source import image_transform
    from caption.inference.trained import data_settings, inference_source

    encoder = checkpoint["hyper_parameters"]["encoder"]["name"]
    try:
        data = data_settings(checkpoint, checkpoint_path, None)
    except ConfigError:  # as `Captioner.from_checkpoint`: the weights' preset, if the encoder has one
        if encoder == "small_vgg":
            return None, None
        preset = image_transform(encoder=encoder)
        return None, (preset, (tuple(preset.mean), tuple(preset.std)), (preset.crop_size[0],) * 2)
    source = inference_source(data, str(checkpoint_path), encoder=encoder)
    return source, (source.inference_transform(), source.normalization, source.image_size)


def source_paths(source: CaptionSource, settings: dict[str, Any]) -> dict[str, Any]:
    """config.json's value of each path argument of the source (`CaptionSource.path_arguments`) that its `settings`
    ({class_path, init_args}) set: left out (`DROPPED`) where the source has a default path (the built-in data's
    root), so that the default applies, else the file's or folder's name alone (dataset_coco.json), so that the
    source still builds."""
    from caption.io.model_folder import DROPPED, file_names

    parameters = inspect.signature(type(source)).parameters
    return {key: DROPPED if key in parameters and isinstance(parameters[key].default, str) else file_names(value)
            for key, value in (settings.get("init_args") or {}).items() if key in type(source).path_arguments}


def preprocessing(transform: Callable[[Image.Image], Tensor], normalization: tuple[tuple[float, ...], ...],
                  size: tuple[int, int]) -> dict[str, Any] | None:
    """config.json's `preprocessing` of the model's input transform: read from a torchvision preset (the image-file
    sources'), else a plain resize to the input `size` (the built-in data's); None, with a warning, when applying it
    (`apply_preprocessing`) to a probe image does not give what the transform gives."""
    import numpy as np
    import torch
    from PIL import Image
    from caption.data.sources.image_source import ImageClassification, describe_transform  # torchvision's preset
    from caption.io.model_folder import apply_preprocessing

    mean, std = normalization
    if isinstance(transform, ImageClassification):
        settings = describe_transform(transform)
        (resize,), crop = settings["resize_size"], settings["crop_size"]
        crop = crop * 2 if len(crop) == 1 else crop  # torchvision's square crop of one side
        interpolation, antialias = settings["interpolation"], settings["antialias"]
    else:
        resize, crop, interpolation, antialias = list(size), list(size), "bilinear", True
    described = {"channel_order": "RGB", "value_range": [0.0, 1.0],
                 "resize": {"size": resize, "interpolation": interpolation, "antialias": antialias},
                 "crop": {"size": crop, "position": "center"}, "mean": list(mean), "std": list(std)}
    probe = Image.fromarray(np.random.default_rng(0).integers(0, 256, (150, 200, 3), dtype=np.uint8))
    expected, found = transform(probe), apply_preprocessing(described, probe)
    if expected.shape == found.shape and torch.allclose(expected, found, atol=1e-5):
        return described
    warnings.warn(f"the model's input transform ({type(transform).__name__}) is none config.json can describe: its "
                  "\"preprocessing\" is null (Captioner still prepares images as the model was trained)",
                  CaptionWarning)
    return None


def run_folder(given: Path, checkpoint_path: Path) -> Path | None:
    """The run folder whose logs describe the checkpoint: the folder given, or <run> of <run>/checkpoints/<file>; a
    file anywhere else stands alone."""
    if given.is_dir():
        return given
    return checkpoint_path.parent.parent if checkpoint_path.parent.name == "checkpoints" else None


def saved_config(run: Path) -> Path | None:
    """The config `caption fit` saved in the run folder (logs/version_*/config.yaml; the oldest, the run's first)."""
    saved = sorted(run.glob("**/config.yaml"), key=lambda path: path.stat().st_mtime)
    return saved[0] if saved else None


def metrics_checkpoint(path: Path) -> str | None:
    """The checkpoint a metrics.json of `caption evaluate` names, if any."""
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8")).get("checkpoint")
    except (OSError, ValueError, AttributeError):
        return None


def find_checkpoint_of(run: Path) -> Path | None:
    """The checkpoint a run folder stands for (None for a folder that holds none)."""
    from caption.errors import CheckpointError
    from caption.io.checkpoints import find_checkpoint

    try:
        return find_checkpoint(run)
    except CheckpointError:
        return None
