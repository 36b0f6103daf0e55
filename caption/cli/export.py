"""`caption export`: a trained model as a folder people can share, with no code in it.

    caption export --ckpt_path runs/shapes_soft                       # exports/shapes_soft/
    caption export --ckpt_path runs/coco_soft --metrics eval/coco_soft/metrics.json --push owner/coco-soft

`--ckpt_path` is a checkpoint file or a run folder (its newest best-*.ckpt, as every command picks it:
`caption.io.checkpoints.find_checkpoint`). The folder of `--predictions.out` (default exports/<run name>) gets
model.safetensors (the weights only), config.json (the model's settings, vocabulary, data settings and the input's
preprocessing, no file of this machine), README.md (the model card, with the Hub's metadata:
`caption.reports.model_card`) and, when the run saved its config, training_config.yaml, each written atomically
(`caption.io.model_folder`). Every command's `--ckpt_path` and `Captioner.from_pretrained` load such a folder; `--push
owner/name` uploads it to the Hugging Face Hub (`caption.io.hub`, the extra `hub`). The format:
docs/sharing.md.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonargparse import Namespace

from caption.cli.options import CommandParser, add_output, path, run_name
from caption.errors import CaptionWarning, ConfigError
from caption.io.outputs import writable_folder

if TYPE_CHECKING:
    from PIL import Image
    from torch import Tensor

    from caption.data.sources.base import CaptionSource
    from caption.model.caption_model import CaptionModel
    from caption.reports.model_card import TestFigures

    # an input transform, its per-channel (mean, std) in 0..1 pixel units, and the (height, width) of what it gives
    Inputs = tuple[Callable[[Image.Image], Tensor], tuple[tuple[float, ...], tuple[float, ...]], tuple[int, int]]


def main(argv: list[str]) -> None:
    parser = CommandParser(
        prog="caption export",
        description="Write a trained model as a folder to share: model.safetensors, config.json and a model card "
                    "(README.md); --push uploads it to the Hugging Face Hub.",
    )
    parser.add_argument("--ckpt_path", type=path, required=True, metavar="CKPT",
                        help="checkpoint written by `caption fit`, or its run folder (the newest best-*.ckpt, else "
                             "last.ckpt) (alias: --ckpt)")
    add_output(parser, help="the model folder: model.safetensors, config.json, README.md", derived=export_folder,
               default="exports/<run name>: the name of the checkpoint's run folder (runs/x: exports/x)")
    parser.add_argument("--metrics", type=path, default=None,
                        help="a metrics.json of `caption evaluate` for the card's test figures (default: the run's "
                             "last test, from its metrics.csv)")
    parser.add_argument("--model_name", default=None,
                        help="the model's name in its card (default: --push's id, else the name of --predictions.out)")
    parser.add_argument("--license", default="mit", help="the weights' license in the card's metadata, as the Hub "
                                                         "spells it (default: mit, the code's)")
    parser.add_argument("--push", default=None, metavar="OWNER/NAME",
                        help="then upload the folder to this Hugging Face Hub model repository (created if needed; "
                             "needs `hf auth login` and the extra hub: pip install -e \".[hub]\" in a clone)")
    parser.add_argument("--private", action="store_true", help="with --push: create the repository private")
    args = parser.parse_args(argv)
    out = args.predictions.out
    import caption
    from caption.io.checkpoints import find_checkpoint, read_checkpoint
    from caption.io.hub import check_login, upload_model_folder
    from caption.io.model_folder import model_config, weights_bytes, write_model_folder

    api = check_login(args.push) if args.push else None  # before any work: the package, the id, the login
    from caption.reports.model_card import evaluated

    measured = evaluated(args.metrics) if args.metrics is not None else None  # and the card's figures
    checkpoint_path = find_checkpoint(args.ckpt_path)
    if out.is_dir() and any(out.rglob("*.ckpt")):
        raise ConfigError(f"--predictions.out {out} holds checkpoints (a run folder?): export into a folder of its "
                          "own, so that --ckpt_path of that run still means its checkpoints")
    writable_folder(out, what="--predictions.out")  # errors (CaptionError) are printed in one line by `caption`
    checkpoint = read_checkpoint(checkpoint_path)
    source, inputs = model_inputs(checkpoint_path, checkpoint)  # as `Captioner` builds them
    paths = None if source is None else source_paths(source, checkpoint["datamodule_hyper_parameters"]["source"])
    config = model_config(checkpoint, version=caption.__version__,  # before building the model changes any setting
                          source_paths=paths, preprocessing=None if inputs is None else preprocessing(*inputs))
    from caption.inference.trained import build_model
    from caption.model.caption_model import TRAINING_STATE

    model = build_model(checkpoint_path, checkpoint)  # the weights checked against the settings, as loading does
    training_state = {name: weight for name, weight in checkpoint["state_dict"].items()
                      if name.startswith(TRAINING_STATE)}
    run = run_folder(args.ckpt_path, checkpoint_path)
    saved = saved_config(run) if run is not None else None
    card = card_text(args, checkpoint_path, checkpoint, model, saved=saved, preprocessing=config["preprocessing"],
                     measured=measured)
    # the model's weights, and the objective's for a new run to start from (`model.optimization.init_from`)
    write_model_folder(out, weights=weights_bytes({**model.state_dict(), **training_state}), config=config,
                       card=card, training_config=saved.read_bytes() if saved is not None else None)
    files = "model.safetensors, config.json, README.md" + (" and training_config.yaml" if saved is not None else "")
    print(f"wrote {out}: {files}, from {checkpoint_path}")
    if api is not None:
        print(f"uploaded to {upload_model_folder(out, args.push, api=api, private=args.private)}")


def card_text(args: Namespace, checkpoint_path: Path, checkpoint: dict[str, Any],
              model: CaptionModel, *, saved: Path | None, preprocessing: dict[str, Any] | None = None,
              measured: TestFigures | None = None) -> str:
    """The model card of the checkpoint, with what its run recorded: its saved config (`saved`) and its test
    figures (`measured`: those of --metrics, read from it), and config.json's `preprocessing`."""
    import caption
    from caption.reports.logs import find_logs
    from caption.model.caption_model import typed
    from caption.io.provenance import provenance, run_precision, run_seed
    from caption.reports.model_card import CardFacts, last_test_row, model_card
    from caption.training.optimization import OptimizationSettings

    run = run_folder(args.ckpt_path, checkpoint_path)
    logs = find_logs(run, checkpoint_path) if run is not None else None
    metrics_csv = logs if logs is not None and logs.suffix == ".csv" else None
    if measured is not None:
        test = measured
        scored = metrics_checkpoint(args.metrics)
        if scored is not None and Path(scored).resolve() != checkpoint_path.resolve():
            warnings.warn(f"--metrics {args.metrics} scored {scored}, not the exported {checkpoint_path}: the card "
                          "shows its figures all the same", CaptionWarning)
    elif metrics_csv is not None and find_checkpoint_of(run) == checkpoint_path:  # fit tests its best checkpoint
        test = last_test_row(metrics_csv, run=run)
    else:
        test = None
    hyperparameters = checkpoint["hyper_parameters"]
    return model_card(CardFacts(
        name=args.model_name or args.push or args.predictions.out.resolve().name, settings=model.settings,
        optimization=typed(OptimizationSettings, hyperparameters.get("optimization") or {}, "optimization"),
        vocabulary_size=len(model.vocabulary), data=checkpoint.get("datamodule_hyper_parameters"),
        version=caption.__version__, test=test, epoch=checkpoint.get("epoch"), steps=checkpoint.get("global_step"),
        config=str(saved.relative_to(run)) if saved is not None and run is not None else None,
        lr_scheduler=checkpoint["hyper_parameters"].get("lr_scheduler"), license=args.license,
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


def export_folder(args: Namespace) -> Path:
    """exports/<run name>: the default --predictions.out of `caption export`."""
    return Path("exports") / run_name(str(args.ckpt_path))


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
