"""Where an encoder's pretrained weights come from (`model.encoder.weights`), and how they are found and read, as state
dicts for the encoder to load.

    imagenet                torchvision's weights API (`imagenet_state_dict`): the official file in
                            $TORCH_HOME/hub/checkpoints, downloaded once; without a network, the error says where
                            to put it
    a file                  a torchvision-format state dict (`file_state_dict`), read with weights_only=True once
                            its zip checksums are verified
    runs/shapes_encoder     the folder `caption pretrain-encoder` wrote, its encoder.pt (`pretrained_file`)
    runs/shapes_soft        small_vgg: another run's checkpoint or run folder, whose encoder is taken
                            (`run_state_dict`)

A checkpoint or run folder is read once, through the checkpoint reader (`caption.io.checkpoints.found_checkpoint`:
weights_only, checked). Every failure is one `EncoderWeightsError` naming the weights and what to do; an encoder not
trained yet names the command that trains it. The encoders are built without these reads and are given this module
to read with (`torchvision_state_dict`, `run_state_dict`).
"""

import os
from pathlib import Path

import torch
from torch import Tensor
from torchvision import models

from caption.errors import CheckpointError, EncoderWeightsError
from caption.io.checkpoints import found_checkpoint, zip_damage

PRETRAINED_FILE = "encoder.pt"  # what `caption pretrain-encoder` writes: the encoder's own state dict
# what to run when small_vgg's weights name a run that has not been trained yet
UNTRAINED_HINT = (". Train it first (the shapes recipe's stage 0: caption pretrain-encoder --config shapes_encoder; or "
                  "stage 1 from random weights: caption fit --config shapes_soft_scratch)")


def imagenet_state_dict(weights: models.WeightsEnum, *, name: str) -> dict[str, Tensor]:
    """The ImageNet `weights` of torchvision encoder `name`, through torchvision's weights API (hash checked); when
    they cannot be had, an error saying where to put the file."""
    filename = os.path.basename(weights.url)
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    try:
        return weights.get_state_dict(progress=True, check_hash=True, map_location="cpu", weights_only=True)
    except Exception as error:  # no network, bad file: tell the user where the file goes
        raise EncoderWeightsError(
            f"could not load ImageNet weights for {name} ({error.__class__.__name__}: {error}). "
            f"Download {weights.url} and put it at {folder / filename} "
            f"(the folder is $TORCH_HOME/hub/checkpoints/), or set model.encoder.weights to a local file."
        ) from error


def file_state_dict(path: str, *, family: str, example: str) -> dict[str, Tensor]:
    """A torchvision-format state dict read with weights_only=True; refused unless it has keys like `example`."""
    if not Path(path).is_file():
        raise EncoderWeightsError(f"encoder weights file {path} does not exist")
    try:
        damage = zip_damage(path)  # torch itself does not check the checksums of its zip records
        if damage is not None:
            raise EncoderWeightsError(f"cannot read encoder weights {path}: {damage}")
        state = torch.load(path, map_location="cpu", weights_only=True)
    except EncoderWeightsError:
        raise
    except Exception as error:
        raise EncoderWeightsError(f"cannot read encoder weights {path}: {error}") from error
    prefix = example.split(".")[0] + "."
    if not isinstance(state, dict) or not any(isinstance(key, str) and key.startswith(prefix) for key in state):
        raise EncoderWeightsError(f"{path} is not a torchvision {family} state dict (expected keys like '{example}')")
    return state


def pretrained_file(weights: str) -> str | None:
    """The file `caption pretrain-encoder` wrote, when `weights` names it or its folder; else None."""
    path = Path(weights)
    if path.is_dir() and (path / PRETRAINED_FILE).is_file():
        return str(path / PRETRAINED_FILE)
    return weights if path.name == PRETRAINED_FILE else None


def torchvision_state_dict(
    weights: str, *, name: str, imagenet: models.WeightsEnum, family: str, example: str,
) -> dict[str, Tensor]:
    """The state dict `weights` names for torchvision encoder `name`: "imagenet" (its `imagenet` weights), a
    torchvision-format file, or the folder of `caption pretrain-encoder` (its encoder.pt)."""
    if weights == "imagenet":
        return imagenet_state_dict(imagenet, name=name)
    return file_state_dict(pretrained_file(weights) or weights, family=family, example=example)


def run_state_dict(path: str) -> tuple[dict[str, Tensor], Path]:
    """The encoder weights of `caption pretrain-encoder` (its folder, or its encoder.pt), or of a `caption fit`
    checkpoint or run folder (its newest best checkpoint's encoder, the file read once), with the file they came
    from."""
    pretrained = pretrained_file(path)
    if pretrained is not None:
        return file_state_dict(pretrained, family="small_vgg", example="features.0.weight"), Path(pretrained)
    try:
        checkpoint, read = found_checkpoint(Path(path))
    except CheckpointError as error:
        untrained = not Path(path).exists() or Path(path).is_dir() and not any(Path(path).rglob("*.ckpt"))
        raise EncoderWeightsError(f"model.encoder.weights: {error}{UNTRAINED_HINT if untrained else ''}") from None
    state = {key.removeprefix("encoder."): value
             for key, value in read["state_dict"].items() if key.startswith("encoder.")}
    return state, checkpoint
