"""The CNN encoder (sec. 3.1.1): an image becomes L annotation vectors a_i ∈ R^D.

The paper takes VGG's last convolutional block *before* its final max-pool: 14×14×512 at a
224×224 input, so L = 196 and D = 512, not fine-tuned. torchvision's `vgg16.features[:30]` ends at
relu5_3 and `vgg19.features[:36]` at relu5_4.

`SmallVGG` keeps the VGG pattern (3×3 convolutions and 2×2 max-pools, annotations taken before the
last pool) at a few channels, so the built-in data trains end to end on a CPU in minutes.
"""

import os
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn
from torchvision import models

from caption.errors import CaptionError, ConfigError

EncoderName = Literal["vgg16", "vgg19", "small_vgg"]

# name -> (torchvision builder, weights enum, number of `features` layers up to the last conv's ReLU,
#          torchvision's layer configuration of `features`)
TORCHVISION_VGG = {
    "vgg16": (models.vgg16, models.VGG16_Weights.IMAGENET1K_V1, 30, "D"),
    "vgg19": (models.vgg19, models.VGG19_Weights.IMAGENET1K_V1, 36, "E"),
}


class EncoderWeightsError(CaptionError):
    """The requested encoder weights cannot be found or read."""


def _imagenet_state_dict(name: str) -> dict[str, Tensor]:
    weights = TORCHVISION_VGG[name][1]
    filename = os.path.basename(weights.url)
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    try:
        return weights.get_state_dict(progress=True, check_hash=True, map_location="cpu", weights_only=True)
    except Exception as error:  # no network, bad file: tell the user where the file goes
        raise EncoderWeightsError(
            f"could not load ImageNet weights for {name} ({error.__class__.__name__}: {error}). "
            f"Download {weights.url} and put it at {folder / filename} "
            f"(the folder is $TORCH_HOME/hub/checkpoints/), or set encoder_weights to a local file."
        ) from error


def _file_state_dict(path: str) -> dict[str, Tensor]:
    if not Path(path).is_file():
        raise EncoderWeightsError(f"encoder weights file {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise EncoderWeightsError(f"cannot read encoder weights {path}: {error}") from error
    if not isinstance(state, dict) or not any(key.startswith("features.") for key in state):
        raise EncoderWeightsError(
            f"{path} is not a torchvision VGG state dict (expected keys like 'features.0.weight')"
        )
    return state


class TorchvisionVGG(nn.Module):
    """VGG16/19 from torchvision cut after the last conv block's ReLU, before the final max-pool.

    Args:
        name: "vgg16" (relu5_3) or "vgg19" (relu5_4).
        weights: "imagenet" (torchvision weights API), "none" (random init) or a path to a
            torchvision-format state dict.
        freeze: no gradients and always in eval mode (the paper does not fine-tune).
    """

    def __init__(self, *, name: Literal["vgg16", "vgg19"] = "vgg16", weights: str = "imagenet", freeze: bool = True):
        super().__init__()
        builder, _, depth, layers = TORCHVISION_VGG[name]
        if weights == "none":  # torchvision's own random initialisation
            self.features = builder(weights=None).features[:depth]
        else:  # just the layers used (the classifier's 120M parameters take seconds to build), then loaded
            self.features = models.vgg.make_layers(models.vgg.cfgs[layers])[:depth]
            state = _imagenet_state_dict(name) if weights == "imagenet" else _file_state_dict(weights)
            kept = {  # the layers before `depth`, keyed relative to `features`; the classifier is not used
                key.removeprefix("features."): value
                for key, value in state.items()
                if key.startswith("features.") and int(key.split(".")[1]) < depth
            }
            try:
                self.features.load_state_dict(kept)
            except RuntimeError as error:
                origin = f"the ImageNet weights of {name}" if weights == "imagenet" else weights
                raise EncoderWeightsError(
                    f"{origin} do not fit {name}'s layers features[:{depth}]: is it a torchvision {name} "
                    f"state dict? ({error})"
                ) from None
        self.dim = 512
        self.freeze = freeze
        if freeze:
            self.requires_grad_(False)

    def train(self, mode: bool = True):
        return super().train(mode and not self.freeze)

    def forward(self, images: Tensor) -> Tensor:
        """images (B, 3, H, W) -> annotations (B, L, D), L = H/16 · W/16."""
        features = self.features(images)  # (B, D, H/16, W/16)
        return features.flatten(2).transpose(1, 2)  # (B, L, D)


class SmallVGG(nn.Module):
    """A VGG-pattern CNN for small images: per block, conv k×k (+BN) + ReLU, then 2×2 max-pool,
    except after the last block. `channels=(16, 32, 64, 128)` on 64×64 gives 8×8×128 (L=64, D=128).

    `kernel_sizes` (one per block, default 3 everywhere) sets the receptive field of an annotation:
    3×3 in every block sees 38×38 pixels of a 64×64 image (most of the canvas); 1×1 in the last two
    blocks sees 14×14, about one object (`receptive_field`). `coordinates` adds the pixel's x and y as two
    input channels, so that an annotation that sees only its neighbourhood still says where it is.
    """

    def __init__(
        self, *, channels: tuple[int, ...] = (16, 32, 64, 128), kernel_sizes: tuple[int, ...] | None = None,
        coordinates: bool = False, batch_norm: bool = True,
    ):
        super().__init__()
        self.coordinates = coordinates
        kernel_sizes = tuple(kernel_sizes or (3,) * len(channels))
        if len(kernel_sizes) != len(channels) or any(k < 1 or k % 2 == 0 for k in kernel_sizes):
            raise ConfigError(
                f"model.encoder_kernel_sizes needs one odd size per block of model.encoder_channels "
                f"({len(channels)}), got {list(kernel_sizes)}"
            )
        layers: list[nn.Module] = []
        in_channels = 5 if coordinates else 3
        for index, (out_channels, kernel) in enumerate(zip(channels, kernel_sizes)):
            layers.append(nn.Conv2d(in_channels, out_channels, kernel, padding=kernel // 2, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm2d(out_channels))
            layers.append(nn.ReLU(inplace=True))
            if index < len(channels) - 1:
                layers.append(nn.MaxPool2d(2))
            in_channels = out_channels
        self.features = nn.Sequential(*layers)
        self.dim = channels[-1]
        self.kernel_sizes = kernel_sizes

    @property
    def receptive_field(self) -> int:
        """Side in input pixels of the window that one annotation vector sees."""
        field, jump = 1, 1
        for index, kernel in enumerate(self.kernel_sizes):
            field += (kernel - 1) * jump
            if index < len(self.kernel_sizes) - 1:  # the 2×2 max-pool
                field, jump = field + jump, jump * 2
        return field

    def forward(self, images: Tensor) -> Tensor:
        """images (B, 3, H, W) -> annotations (B, L, D)."""
        if self.coordinates:  # two more input channels, x and y in [-1, 1]: each annotation knows where it is
            B, _, H, W = images.shape
            y, x = torch.meshgrid(torch.linspace(-1, 1, H, device=images.device),
                                  torch.linspace(-1, 1, W, device=images.device), indexing="ij")
            images = torch.cat([images, torch.stack([x, y]).to(images.dtype).expand(B, -1, -1, -1)], dim=1)
        return self.features(images).flatten(2).transpose(1, 2)  # (B, L, D)


def build_encoder(
    name: EncoderName, *, weights: str = "imagenet", freeze: bool = True, channels: tuple[int, ...] = (16, 32, 64, 128),
    kernel_sizes: tuple[int, ...] | None = None, coordinates: bool = False,
) -> nn.Module:
    """The encoder named in a config; every encoder has `.dim` (D) and maps images to (B, L, D)."""
    if name == "small_vgg":
        if weights != "none" or freeze:
            raise ConfigError("encoder small_vgg trains from scratch: set encoder_weights: none and freeze_encoder: false")
        return SmallVGG(channels=channels, kernel_sizes=kernel_sizes, coordinates=coordinates)
    if name in TORCHVISION_VGG:
        return TorchvisionVGG(name=name, weights=weights, freeze=freeze)
    raise ConfigError(f"encoder must be one of vgg16, vgg19, small_vgg; got {name!r}")
