"""A model folder, the shape in which a trained model is shared: weights, settings and a model card, none of it code.

    model.safetensors   the model's state dict (safetensors: raw tensors behind a JSON header, nothing to unpickle)
    config.json         every setting group of the model as its checkpoint stores them, the vocabulary, the data
                        settings inference needs (the source, hence the image transform), the versions, and the
                        input's `preprocessing` for readers outside this code; no file of the machine it was trained
                        on (`portable_model`, `portable_data`: training_config.yaml keeps the run's config as it was)
    README.md           the model card `caption export` writes, with the Hub's YAML metadata on top
    training_config.yaml  the config the run was trained with (its saved config.yaml), when the run kept one

`caption export` writes one (`model_files`, then `write_model_folder`); `read_model_folder` reads one back into the
dict `caption.io.checkpoints.read_checkpoint` returns for a checkpoint file, so every reader of a checkpoint (the
commands' `--ckpt_path`, `Captioner`, the Trainers' `SafeCheckpointIO`, `model.encoder.weights`, `init_from`) takes the
folder too. A folder that is missing a file, is another library's, or is of a newer format is one error naming the
file and what is wrong; the classes config.json names are checked as a checkpoint's are (`caption.io.class_paths`).
The format: docs/sharing.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning
import numpy as np
import torch
from PIL import Image
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import Tensor

from caption.config.keys import non_finite_message
from caption.errors import CaptionWarning, CheckpointError
from caption.io.class_paths import checked, checked_if_expected, scheduler_bases
from caption.io.install import install_line
from caption.io.outputs import write_atomically, write_text

WEIGHTS, CONFIG, CARD = "model.safetensors", "config.json", "README.md"
TRAINING_CONFIG = "training_config.yaml"  # the run's saved config.yaml, for `caption fit --config` to train it again
# the files nothing reads to caption: one whose bytes changed (edited on the Hub, say) is a warning, not a refusal
NOT_READ_TO_CAPTION = (CARD, TRAINING_CONFIG)
LIBRARY = "show-attend-tell"  # config.json's "library_name": the project's distribution name, as on the Hub
FORMAT_VERSION = 1  # config.json's "format_version": raised when a reader of this version could not read the folder
# hyperparameters of a checkpoint that are no setting of the model: the vocabulary (its own key) and Lightning's
NOT_SETTINGS = ("vocabulary", "_instantiator")
# what other libraries' config.json files hold, to say whose a foreign one is
FOREIGN_MARKS = ("model_type", "_class_name", "architectures", "_name_or_path", "library_name")
# config.json's "sha256": {file: SHA-256 hex digest} of each file of the folder, config.json's own over its other keys
# (`config_digest`); a folder exported before it existed has none, and loads unchecked
CHECKSUMS = "sha256"
# model.encoder.weights that name no file (any other value is a path of the training machine: the weights are in
# model.safetensors, so an exported model's is "none")
ENCODER_WEIGHT_NAMES = ("imagenet", "none")
# data settings that name files of the training machine (the feature cache, what `caption predict` captioned, the
# checkpoint the vocabulary came from): left out of config.json, so that the data module's defaults apply
MACHINE_DATA = ("features", "predict", "vocabulary_from")
# config.json's "preprocessing": how an RGB image becomes the encoder's input (`apply_preprocessing` applies it), as
# `caption export` describes the model's transform, for readers outside this code; nothing reads it to caption
PREPROCESSING = "preprocessing"
INTERPOLATIONS = {"nearest": Image.Resampling.NEAREST, "bilinear": Image.Resampling.BILINEAR,
                  "bicubic": Image.Resampling.BICUBIC}  # PIL's filter of each interpolation torchvision names


def is_model_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder holding model.safetensors or config.json (whether it is complete and ours is for
    `read_model_folder` to say)."""
    path = Path(path)
    return path.is_dir() and ((path / WEIGHTS).is_file() or (path / CONFIG).is_file())


def left_by_a_stopped_export(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder an export stopped before it finished left: no model.safetensors or config.json yet,
    but a temporary file of one of a model folder's files (`caption.io.outputs.write_atomically`'s, `.NAME.*.tmp`) or
    its training_config.yaml."""
    path = Path(path)
    if not path.is_dir() or is_model_folder(path):
        return False
    temporaries = tuple(f".{name}." for name in (WEIGHTS, CONFIG, CARD, TRAINING_CONFIG))
    return any(name == TRAINING_CONFIG or (name.startswith(temporaries) and name.endswith(".tmp"))
               for name in os.listdir(path))


def settings_file(path: str | os.PathLike) -> str | os.PathLike:
    """The file a model's settings are read from, as messages name it: a model folder's config.json, else `path`
    itself (a checkpoint)."""
    return Path(path) / CONFIG if is_model_folder(path) else path


# ----------------------------------------------------------------------------------------------------------- writing
def model_config(checkpoint: Mapping[str, Any], *, version: str, source_paths: Mapping[str, Any] | None = None,
                 preprocessing: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """config.json of the checkpoint `read_checkpoint` read: its model settings (every group `CaptionModule` stored:
    encoder, decoder, attention, soft, hard, decoding, optimization, self_critical, lr_scheduler, image_size),
    vocabulary and data settings (without Lightning's `_instantiator`), as plain JSON values (tuples become lists),
    with no file of the training machine (`portable_model`, `portable_data`; `source_paths`: the data source's path
    arguments, each with its portable value or `DROPPED`), and the input's `preprocessing` when described."""
    hyperparameters = checkpoint["hyper_parameters"]
    data = checkpoint.get("datamodule_hyper_parameters")
    config = {
        "library_name": LIBRARY,
        "format_version": FORMAT_VERSION,
        "caption_version": version,
        "model": portable_model({key: value for key, value in hyperparameters.items() if key not in NOT_SETTINGS}),
        "vocabulary": list(hyperparameters["vocabulary"]),
        "data": None if data is None else portable_data(data, source_paths or {}),
        PREPROCESSING: None if preprocessing is None else dict(preprocessing),
    }
    return json.loads(json.dumps(config, allow_nan=False))  # plain: what a reader gets back


DROPPED = object()  # a path argument of `source_paths` left out of config.json: the source's default applies


def portable_model(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The model's settings without the training machine's files: encoder.weights "none" where it named a file or run
    (the weights are in model.safetensors), optimization.init_from null."""
    portable = dict(settings)
    encoder, optimization = portable.get("encoder"), portable.get("optimization")
    if isinstance(encoder, Mapping) and encoder.get("weights") not in (None, *ENCODER_WEIGHT_NAMES):
        portable["encoder"] = {**encoder, "weights": "none"}
    if isinstance(optimization, Mapping) and optimization.get("init_from") is not None:
        portable["optimization"] = {**optimization, "init_from": None}
    return portable


def portable_data(data: Mapping[str, Any], source_paths: Mapping[str, Any]) -> dict[str, Any]:
    """The data settings without the training machine's files: no `MACHINE_DATA`, and the source's path arguments
    replaced by their `source_paths` values (`DROPPED`: left out)."""
    portable = {key: value for key, value in data.items() if key != "_instantiator" and key not in MACHINE_DATA}
    source = portable.get("source")
    if isinstance(source, Mapping) and isinstance(source.get("init_args"), Mapping):
        init_args = {key: source_paths.get(key, value) for key, value in source["init_args"].items()}
        portable["source"] = {**source, "init_args": {key: value for key, value in init_args.items()
                                                      if value is not DROPPED}}
    return portable


def file_names(value: Any) -> Any:
    """A path's last part (a file's or folder's name, e.g. dataset_coco.json), each of a list's; None stays None."""
    if isinstance(value, (list, tuple)):
        return [file_names(item) for item in value]
    return None if value is None else Path(value).name


def apply_preprocessing(preprocessing: Mapping[str, Any], image: Image.Image) -> Tensor:
    """The (3, H, W) input config.json's `preprocessing` makes of an RGB image, as a reader outside this code would
    apply it with PIL: resized (an int size: the shorter side, the longer to int(size · long / short); [height,
    width]: exactly), centre-cropped, scaled to 0..1, normalised per channel."""
    resize, (crop_height, crop_width) = preprocessing["resize"], preprocessing["crop"]["size"]
    width, height = image.size
    if isinstance(resize["size"], int):
        short, long = resize["size"], int(resize["size"] * max(width, height) / min(width, height))
        size = (short, long) if width <= height else (long, short)
    else:
        size = (resize["size"][1], resize["size"][0])
    resized = image.convert("RGB").resize(size, INTERPOLATIONS[resize["interpolation"]])
    left, top = round((size[0] - crop_width) / 2), round((size[1] - crop_height) / 2)
    cropped = resized.crop((left, top, left + crop_width, top + crop_height))
    pixels = torch.from_numpy(np.asarray(cropped, dtype=np.uint8).copy()).permute(2, 0, 1).float() / 255.0
    mean, std = (torch.tensor(preprocessing[key]).view(-1, 1, 1) for key in ("mean", "std"))
    return (pixels - mean) / std


def weights_bytes(state_dict: Mapping[str, Tensor]) -> bytes:
    """model.safetensors of `state_dict`. safetensors refuses tensors that share memory (tied weights) and
    non-contiguous ones: those are cloned, each key keeping its own copy of the values."""
    seen: set[tuple[int, int]] = set()
    tensors = {}
    for name, tensor in state_dict.items():
        tensor = tensor.detach().cpu()
        storage = (tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())
        if storage in seen or not tensor.is_contiguous():
            tensor = tensor.clone(memory_format=torch.contiguous_format)
        seen.add(storage)
        tensors[name] = tensor
    return safetensors_bytes(tensors, metadata={"format": "pt"})  # "pt": what the Hub's readers look for


def write_model_folder(out: Path, *, weights: bytes, config: Mapping[str, Any], card: str,
                       training_config: bytes | None = None) -> None:
    """The files in `out`, each written atomically, config.json holding the SHA-256 of each (`CHECKSUMS`):
    the weights, the card, the run's saved config when given (an old one removed otherwise), then config.json.
    config.json goes last and an old one is removed first, so an interrupted export leaves a folder without
    config.json, refused in one line, and never new weights beside old settings."""
    (out / CONFIG).unlink(missing_ok=True)
    write_atomically(out / WEIGHTS, weights, what="model weights")
    write_text(out / CARD, card)
    config = {key: value for key, value in config.items() if key != CHECKSUMS}
    digests = {WEIGHTS: hashlib.sha256(weights).hexdigest(), CARD: hashlib.sha256(card.encode("utf-8")).hexdigest()}
    if training_config is None:
        (out / TRAINING_CONFIG).unlink(missing_ok=True)  # not another run's config beside this model
    else:
        write_atomically(out / TRAINING_CONFIG, training_config, what="training config")
        digests[TRAINING_CONFIG] = hashlib.sha256(training_config).hexdigest()
    write_text(out / CONFIG, json.dumps({**config, CHECKSUMS: {**digests, CONFIG: config_digest(config)}}, indent=2)
               + "\n")


def config_digest(config: Mapping[str, Any]) -> str:
    """The SHA-256 of config.json's settings: its keys but `CHECKSUMS`, as canonical JSON (sorted keys, no spaces),
    so that it holds whatever the indentation."""
    settings = {key: value for key, value in config.items() if key != CHECKSUMS}
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_digest(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


# ----------------------------------------------------------------------------------------------------------- reading
def read_model_folder(folder: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """The folder as the checkpoint dict `read_checkpoint` returns: "state_dict" from model.safetensors (loaded
    with `safetensors.torch.load_file`), "hyper_parameters" (the vocabulary and the model's settings) and
    "datamodule_hyper_parameters" (the data settings, if recorded) from config.json."""
    folder = Path(folder)
    config = read_config(folder)
    weights = folder / WEIGHTS
    if not weights.is_file():
        raise CheckpointError(f"{folder}: no {WEIGHTS} beside {CONFIG}: the model's weights are missing (copy the "
                              f"whole folder `caption export` wrote)")
    device = str(map_location) if isinstance(map_location, (str, torch.device)) else "cpu"
    try:
        state_dict = load_file(weights, device=device)
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{weights}: not a readable safetensors file (truncated or corrupt?): "
                              f"{' '.join(str(error).split())}") from None
    check_files(folder, config)  # once safetensors read it: a file cut short is named as such
    non_finite = non_finite_weights(state_dict)
    if non_finite is not None:
        raise CheckpointError(f"{weights}: {non_finite}")
    checkpoint = {
        "state_dict": state_dict,
        "hyper_parameters": {"vocabulary": config["vocabulary"], **config["model"]},
        "pytorch-lightning_version": lightning.__version__,  # as Lightning's own checkpoints: nothing to migrate
    }
    if config.get("data") is not None:
        checkpoint["datamodule_hyper_parameters"] = config["data"]
    return checkpoint


def read_config(folder: Path) -> dict[str, Any]:
    """config.json of `folder`, checked: ours, of a format this version reads, with a vocabulary, the model's
    settings (groups as in the checkpoint, sequences as tuples) and only known classes."""
    path = folder / CONFIG
    if not path.is_file():
        if not (folder / WEIGHTS).is_file():
            raise CheckpointError(f"{folder}: a folder without {WEIGHTS} or {CONFIG}: neither a model folder of "
                                  "`caption export` nor a checkpoint file")
        raise CheckpointError(f"{folder}: {WEIGHTS} but no {CONFIG} (the settings and the vocabulary): not a complete "
                              "model folder of `caption export` (one it was stopped in before it finished, or a "
                              "partial copy); export the model again, or copy the whole folder it wrote")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{path}: cannot be read as JSON ({' '.join(str(error).split())})") from None
    if not isinstance(config, dict) or config.get("library_name") != LIBRARY:
        marks = [f"{key} {config[key]!r}" for key in FOREIGN_MARKS if isinstance(config, dict) and key in config]
        whose = f"it has {', '.join(marks)}: another library's" if marks else "not a config of this project"
        raise CheckpointError(f"{path}: no \"library_name\": \"{LIBRARY}\" ({whose}): this folder holds no model of "
                              f"{LIBRARY}; use a folder written by `caption export`")
    non_finite = non_finite_message(str(path), config)
    if non_finite is not None:  # JSON's Infinity and NaN, which Python's json reads as floats
        raise CheckpointError(non_finite)
    version = config.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{path}: format_version is {version!r}, not a format version (1, 2, ...)")
    if version > FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {version} is newer than this version of {LIBRARY} reads "
                              f"({FORMAT_VERSION}; written by {config.get('caption_version', 'a newer version')}): "
                              f"upgrade it ({install_line(upgrade=True)})")
    vocabulary, model, data = config.get("vocabulary"), config.get("model"), config.get("data")
    if not isinstance(vocabulary, list) or not vocabulary:
        raise CheckpointError(f"{path}: no \"vocabulary\" (a list of the model's words): export the model again")
    not_words = [(index, word) for index, word in enumerate(vocabulary) if not isinstance(word, str)]
    if not_words:
        index, word = not_words[0]
        raise CheckpointError(f"{path}: vocabulary[{index}] is {word!r}, not a word (a string; {len(not_words)} "
                              f"such entries of {len(vocabulary)}): export the model again")
    if not isinstance(model, dict) or set(model) & set(NOT_SETTINGS) or not all(key.isidentifier() for key in model):
        raise CheckpointError(f"{path}: \"model\" must map the model's setting groups (encoder, decoder, ...) to "
                              "their settings: export the model again")
    if data is not None and not isinstance(data, dict):
        raise CheckpointError(f"{path}: \"data\" must be the data settings (a mapping) or null")
    if model.get("lr_scheduler") is not None:
        model["lr_scheduler"] = checked(model["lr_scheduler"], base=scheduler_bases(), key="model.lr_scheduler",
                                        origin=str(path))
    if data is not None and data.get("source") is not None:
        data["source"] = checked_if_expected(data["source"], key="data.source", stored_at="data.source",
                                             origin=str(path))
    config["model"] = {key: as_tuples(value) if key != "lr_scheduler" else value for key, value in model.items()}
    return config


def check_files(folder: Path, config: Mapping[str, Any]) -> None:
    """Each file's SHA-256 against config.json's `CHECKSUMS`: a CheckpointError naming config.json or the weights
    whose bytes changed since `caption export` wrote them, a warning for the model card and the training config
    (edited on the Hub, say: nothing reads them to caption). A folder without checksums (exported before they were
    written) is not checked."""
    checksums = config.get(CHECKSUMS)
    if checksums is None:
        return
    path = folder / CONFIG
    if not isinstance(checksums, dict) or not all(isinstance(value, str) for value in checksums.values()):
        raise CheckpointError(f"{path}: \"{CHECKSUMS}\" must map each file of the folder to its SHA-256 (hex): "
                              "export the model again")
    if CONFIG in checksums and checksums[CONFIG] != config_digest(config):
        raise CheckpointError(f"{path}: damaged or edited: its settings no longer match the SHA-256 written with "
                              "them by `caption export`; export the model again (or, if you edited it on purpose, "
                              f"delete its \"{CHECKSUMS}\" entry for {CONFIG})")
    for name, what in ((WEIGHTS, "the model's weights"), (CARD, "the model card"),
                       (TRAINING_CONFIG, "the run's training config")):
        file = folder / name
        if name not in checksums or not file.is_file() or file_digest(file) == checksums[name]:
            continue
        message = (f"{file}: damaged: its bytes no longer match the SHA-256 {CONFIG} records for {what}; copy the "
                   "folder again or export the model again")
        if name not in NOT_READ_TO_CAPTION:
            raise CheckpointError(message)
        warnings.warn(f"{message} (not read to caption: loaded regardless)", CaptionWarning, stacklevel=2)


def non_finite_weights(state_dict: Mapping[str, Any]) -> str | None:
    """What is wrong when a floating-point weight of `state_dict` holds NaN or infinite values (a diverged model,
    a damaged file: it would caption garbage), naming the largest such weight; None when all are finite."""
    bad = [(name, tensor) for name, tensor in state_dict.items()
           if isinstance(tensor, Tensor) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]
    if not bad:
        return None
    name, tensor = max(bad, key=lambda item: item[1].numel())
    count = int((~torch.isfinite(tensor)).sum())
    others = f" (and {len(bad) - 1} other weights)" if len(bad) > 1 else ""
    return (f"weight {name} holds {count} NaN or infinite values of {tensor.numel()}{others}: the model diverged or "
            "the file is damaged, so it cannot caption; use an earlier checkpoint, or train again")


def as_tuples(value: Any) -> Any:
    """A group's lists as tuples, the type of every sequence in the settings dataclasses (JSON has only lists)."""
    if isinstance(value, dict):
        return {key: as_tuples(item) for key, item in value.items()}
    return tuple(value) if isinstance(value, list) else value


def weights_mismatch(expected: Mapping[str, Tensor], found: Mapping[str, Tensor]) -> str | None:
    """What differs between the weights a model built from the settings has (`expected`) and those `found`: missing
    and unexpected names, and shapes; None when they fit."""
    missing = [name for name in expected if name not in found]
    unexpected = [name for name in found if name not in expected]
    shapes = [f"{name} is {tuple(found[name].shape)} there but {tuple(tensor.shape)} for the settings"
              for name, tensor in expected.items() if name in found and found[name].shape != tensor.shape]
    problems = [f"{label} {', '.join(names[:4])}{' ...' * (len(names) > 4)} ({len(names)})"
                for label, names in (("missing", missing), ("unexpected", unexpected)) if names] + shapes[:4]
    return "; ".join(problems) or None
