"""The CNN encoder (sec. 3.1.1): an image becomes L annotation vectors a_i ∈ R^D, (B, 3, H, W) -> (B, L, D).

VGG16/19: the last convolutional block *before* its final max-pool (the paper's, not fine-tuned: 14×14×512 at
224×224, L = 196, D = 512; torchvision's `vgg16.features[:30]` ends at relu5_3, `vgg19.features[:36]` at relu5_4).
ResNet-50/101/152: layer4, average-pooled adaptively to `grid` × grid (default 14, the paper's L = 196), D = 2048.
Every torchvision encoder is split into five `stages` for fine-tuning (`caption.training.finetuning`). `SmallVGG` keeps
the VGG pattern at a few channels, so the built-in data trains end to end on a CPU; its pretrained weights come from
`caption pretrain-encoder` (`model.encoder.weights: runs/shapes_encoder`, a classifier of the data's objects) or
another run's checkpoint (`runs/shapes_soft`), then frozen as the paper's VGG is. Pretrained weights (ImageNet, a
file, a run folder) are read by the `reader` an encoder is built with (`WeightsReader`: `caption.io.encoder_weights`)
and loaded here, strictly, a misfit named. Choosing one: docs/datasets.md#choosing-an-encoder.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import torch
from torch import Tensor, nn
from torchvision import models

from caption.errors import ConfigError, EncoderWeightsError, check_range
from caption.model.weight_settings import defines_weights

EncoderName = Literal["vgg16", "vgg19", "resnet50", "resnet101", "resnet152", "small_vgg"]

# name -> (torchvision builder, weights enum, number of `features` layers up to the last conv's ReLU,
#          torchvision's layer configuration of `features`)
TORCHVISION_VGG = {
    "vgg16": (models.vgg16, models.VGG16_Weights.IMAGENET1K_V1, 30, "D"),
    "vgg19": (models.vgg19, models.VGG19_Weights.IMAGENET1K_V1, 36, "E"),
}
# name -> (torchvision builder, weights enum). IMAGENET1K_V1: the weights the ResNet port's results were
# trained from (`resnet101(pretrained=True)`), and their preset (short side 256, crop 224) is the paper's.
TORCHVISION_RESNET = {
    "resnet50": (models.resnet50, models.ResNet50_Weights.IMAGENET1K_V1),
    "resnet101": (models.resnet101, models.ResNet101_Weights.IMAGENET1K_V1),
    "resnet152": (models.resnet152, models.ResNet152_Weights.IMAGENET1K_V1),
}
TORCHVISION_ENCODERS = (*TORCHVISION_VGG, *TORCHVISION_RESNET)
RESNET_GRID = 14  # the ResNets' grid when model.encoder.grid is not set: the paper's L = 196
STAGES = 5  # ResNet: stem, layer1-4; VGG: conv blocks 1-5 (`.stages` of the torchvision encoders)


@dataclass(frozen=True)
class EncoderSettings:
    """The CNN of sec. 3.1.1 (`model.encoder:` in a config).

    Args:
        name: "vgg16", "vgg19" (torchvision, paper), "resnet50", "resnet101", "resnet152" (torchvision, layer4) or
            "small_vgg" (built-in data, from scratch).
        weights: "imagenet", "none", a path to a torchvision-format state dict, the folder `caption pretrain-encoder`
            wrote (its encoder.pt), or (small_vgg) another run's checkpoint or run folder, whose encoder is taken.
        freeze: keep the CNN fixed all run (the paper); required for the feature cache. False: it trains, on the
            schedule of the three settings below (`caption.training.finetuning`).
        frozen_epochs: with freeze false: epochs the encoder stays frozen before it trains.
        finetune_stages: with freeze false: how many of the encoder's 5 stages train, from the top (ResNet: layer4
            is 1, layer2-4 is 3; VGG: conv blocks); None: all.
        learning_rate: with freeze false: the encoder's learning rate (None: the model's).
        grid: torchvision encoders: average-pool the last conv map to grid × grid, L = grid² (None: ResNets 14,
            VGG unpooled, H/16 × W/16).
        channels: small_vgg only: channels of each conv block.
        kernel_sizes: small_vgg only: convolution size of each block (None: 3 everywhere); sets how much of the
            image one annotation sees (`SmallVGG.receptive_field`).
        coordinates: small_vgg only: add x and y as input channels, so annotations know their place.
    """

    name: EncoderName = defines_weights("vgg16")    # paper: Oxford VGGnet, depth not stated (vgg19 works too)
    weights: str = "imagenet"                       # paper: pretrained on ImageNet
    freeze: bool = True                             # paper: not fine-tuned (what lets the feature cache work)
    frozen_epochs: int = 0                          # ours: fine-tuning is beyond the paper
    finetune_stages: int | None = None              # ours: all stages
    learning_rate: float | None = None              # ours: the model's
    grid: int | None = defines_weights(None)        # paper: VGG's conv5 map as it is, 14x14 (L = 196) at 224x224
    channels: tuple[int, ...] = defines_weights((16, 32, 64, 128))  # ours: small_vgg, the built-in data's CNN
    kernel_sizes: tuple[int, ...] | None = defines_weights(None)    # ours: 3x3 as VGG's
    coordinates: bool = defines_weights(False)      # ours

    def __post_init__(self) -> None:
        check_range("encoder.frozen_epochs", self.frozen_epochs, low=0)
        check_range("encoder.learning_rate", self.learning_rate, low=0, strict=True)
        check_range("encoder.grid", self.grid, low=1)
        if self.finetune_stages is not None and not 1 <= self.finetune_stages <= STAGES:
            raise ConfigError(f"model.encoder.finetune_stages must be 1..{STAGES} (the last k of the stem/first block "
                              f"and 4 more stages) or null for all, got {self.finetune_stages}")
        scheduled = [key for key, value in (("frozen_epochs", self.frozen_epochs != 0),
                                            ("finetune_stages", self.finetune_stages is not None),
                                            ("learning_rate", self.learning_rate is not None)) if value]
        named = ", ".join(f"model.encoder.{key}" for key in scheduled)
        if scheduled and self.freeze:
            raise ConfigError(f"{named} schedule the encoder's training, but model.encoder.freeze is true: set it to "
                              "false, or leave them unset")
        if scheduled and self.name not in TORCHVISION_ENCODERS:
            raise ConfigError(f"{named} fine-tune a pretrained torchvision encoder; {self.name} trains from scratch "
                              "with the decoder: leave them unset")


class WeightsReader(Protocol):
    """What reads the pretrained weights `model.encoder.weights` names, as state dicts for an encoder to load: the
    module `caption.io.encoder_weights`, passed in by what builds an encoder with weights other than "none"."""

    def torchvision_state_dict(self, weights: str, *, name: str, imagenet: models.WeightsEnum, family: str,
                               example: str) -> dict[str, Tensor]:
        """The torchvision-format state dict `weights` names: "imagenet" (`imagenet`), a file or its folder."""

    def run_state_dict(self, path: str) -> tuple[dict[str, Tensor], Path]:
        """The encoder weights of another run (`path`: its folder or file), with the file they came from."""


def needed_reader(reader: WeightsReader | None, weights: str) -> WeightsReader:
    """The `reader` that `weights` (anything but "none") are read with; a ValueError when there is none."""
    if reader is None:
        raise ValueError(f"model.encoder.weights {weights!r} are read from files: build the encoder with a reader "
                         "(caption.io.encoder_weights)")
    return reader


def load_state(module: nn.Module, state: dict[str, Tensor], *, name: str, weights: str, layers: str) -> None:
    """Load `state` into `module` strictly, naming the weights and the encoder if they do not fit."""
    try:
        module.load_state_dict(state)
    except RuntimeError as error:
        origin = f"the ImageNet weights of {name}" if weights == "imagenet" else weights
        summary = " ".join(str(error).split())[:300]
        raise EncoderWeightsError(
            f"{origin} do not fit {name}'s layers {layers}: is it a torchvision {name} state dict? ({summary})"
        ) from None


def imagenet_weights(name: str) -> models.WeightsEnum:
    """The ImageNet weights of torchvision encoder `name`: their URL names the file, their preset is the transform."""
    return TORCHVISION_VGG[name][1] if name in TORCHVISION_VGG else TORCHVISION_RESNET[name][1]


def annotation_grid(name: str, grid: int | None) -> int | None:
    """The side of the grid an encoder pools its last conv map to: `grid`, or 14 for a ResNet when None;
    None for a VGG means no pooling (its conv5 map as it is: H/16 × W/16)."""
    return RESNET_GRID if grid is None and name in TORCHVISION_RESNET else grid


def pooled_annotations(features: Tensor, pool: nn.Module) -> Tensor:
    """(B, D, h, w) conv map -> (B, L, D) annotations, L = grid² after `pool` (or h·w without one)."""
    return pool(features).flatten(2).transpose(1, 2)  # (B, L, D)


class TorchvisionVGG(nn.Module):
    """VGG16/19 from torchvision cut after the last conv block's ReLU, before the final max-pool.

    Args:
        name: "vgg16" (relu5_3) or "vgg19" (relu5_4).
        weights: "imagenet" (torchvision weights API), "none" (random init) or a path to a
            torchvision-format state dict.
        freeze: no gradients and always in eval mode (the paper does not fine-tune).
        grid: adaptively average-pool the conv5 map to grid × grid (None: keep it, H/16 × W/16).
        reader: what reads `weights` other than "none" (`WeightsReader`).
    """

    def __init__(
        self, *, name: Literal["vgg16", "vgg19"], weights: str, freeze: bool = True,
        grid: int | None = None, reader: WeightsReader | None = None,
    ):
        super().__init__()
        builder, _, depth, layers = TORCHVISION_VGG[name]
        if weights == "none":  # torchvision's own random initialisation
            self.features = builder(weights=None).features[:depth]
        else:  # just the layers used (the classifier's 120M parameters are slow to build), then loaded
            self.features = models.vgg.make_layers(models.vgg.cfgs[layers])[:depth]
            state = needed_reader(reader, weights).torchvision_state_dict(
                weights, name=name, imagenet=imagenet_weights(name), family="VGG", example="features.0.weight")
            kept = {  # the layers before `depth`, keyed relative to `features`; the classifier is not used
                key.removeprefix("features."): value
                for key, value in state.items()
                if key.startswith("features.") and int(key.split(".")[1]) < depth
            }
            load_state(self.features, kept, name=name, weights=weights, layers=f"features[:{depth}]")
        self.pool = nn.AdaptiveAvgPool2d(grid) if grid is not None else nn.Identity()
        self.dim = 512
        self.grid = grid
        self.freeze = freeze
        if freeze:
            self.requires_grad_(False)

    @property
    def stages(self) -> list[nn.Module]:
        """The five conv blocks, from the input up (each ends at its max-pool; the last at relu5_x)."""
        ends = [index + 1 for index, layer in enumerate(self.features) if isinstance(layer, nn.MaxPool2d)]
        edges = [0, *ends, len(self.features)]
        return [self.features[start:end] for start, end in zip(edges, edges[1:])]

    def train(self, mode: bool = True):
        return super().train(mode and not self.freeze)

    def forward(self, images: Tensor) -> Tensor:
        """images (B, 3, H, W) -> annotations (B, L, D), L = H/16 · W/16 (grid² when pooled)."""
        features = self.features(images)  # (B, D, H/16, W/16)
        return pooled_annotations(features, self.pool)  # (B, L, D)


class TorchvisionResNet(nn.Module):
    """ResNet-50/101/152 from torchvision up to layer4 (no average pool, no fc), average-pooled to grid × grid.

    At 224×224 layer4 is 7×7: `grid` 7 keeps it; 14 copies each cell into 2×2 (an adaptive average pool that
    enlarges repeats cells), the port's choice: L = 196 locations holding 49 distinct vectors. A 448×448
    crop gives 14×14 distinct ones. BatchNorm always runs in eval mode, frozen or fine-tuned: it keeps
    ImageNet's running statistics and normalises with them (the layers' own `train()` is ignored).

    Args:
        name: "resnet50", "resnet101" or "resnet152".
        weights: "imagenet" (torchvision weights API, IMAGENET1K_V1), "none" (torchvision's random init) or a
            path to a torchvision-format state dict (its `fc.` keys are not used).
        freeze: no gradients (the paper does not fine-tune); fine-tuning unfreezes stages
            (`caption.training.finetuning`).
        grid: side of the annotation grid, L = grid².
        reader: what reads `weights` other than "none" (`WeightsReader`).
    """

    def __init__(
        self, *, name: Literal["resnet50", "resnet101", "resnet152"], weights: str,
        freeze: bool = True, grid: int = RESNET_GRID, reader: WeightsReader | None = None,
    ):
        super().__init__()
        builder, _ = TORCHVISION_RESNET[name]
        resnet = builder(weights=None)  # torchvision's own initialisation; the fc layer is dropped below
        self.conv1, self.bn1, self.relu, self.maxpool = resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool
        self.layer1, self.layer2, self.layer3, self.layer4 = resnet.layer1, resnet.layer2, resnet.layer3, resnet.layer4
        if weights != "none":
            state = needed_reader(reader, weights).torchvision_state_dict(
                weights, name=name, imagenet=imagenet_weights(name), family="ResNet", example="layer4.0.conv1.weight")
            kept = {key: value for key, value in state.items() if not key.startswith("fc.")}
            load_state(self, kept, name=name, weights=weights, layers="conv1 ... layer4")
        self.pool = nn.AdaptiveAvgPool2d(grid)
        self.dim = 2048
        self.grid = grid
        if freeze:
            self.requires_grad_(False)
        self.eval()

    @property
    def stages(self) -> list[nn.Module]:
        """The stem (conv1, bn1) and layer1-4, from the input up."""
        return [nn.ModuleList([self.conv1, self.bn1]), self.layer1, self.layer2, self.layer3, self.layer4]

    def train(self, mode: bool = True):
        return super().train(False)  # BatchNorm keeps ImageNet's statistics; a ResNet has no dropout

    def forward(self, images: Tensor) -> Tensor:
        """images (B, 3, H, W) -> annotations (B, grid², 2048)."""
        stem = self.maxpool(self.relu(self.bn1(self.conv1(images))))  # (B, 64, H/4, W/4)
        features = self.layer4(self.layer3(self.layer2(self.layer1(stem))))  # (B, 2048, H/32, W/32)
        return pooled_annotations(features, self.pool)  # (B, L, D)


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
        coordinates: bool = False, batch_norm: bool = True, freeze: bool = False,
    ):
        super().__init__()
        self.coordinates = coordinates
        self.freeze = freeze
        kernel_sizes = tuple(kernel_sizes or (3,) * len(channels))
        if len(kernel_sizes) != len(channels) or any(k < 1 or k % 2 == 0 for k in kernel_sizes):
            raise ConfigError(
                f"model.encoder.kernel_sizes needs one odd size per block of model.encoder.channels "
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
        if freeze:  # BatchNorm keeps its running statistics, also where Lightning restores modes module by module
            self.requires_grad_(False)
            self.eval()

    def train(self, mode: bool = True):
        return super().train(mode and not self.freeze)

    def load_from_run(self, path: str, *, reader: WeightsReader) -> None:
        """Load the encoder weights of `caption pretrain-encoder` (its folder, or its encoder.pt), or of a `caption fit`
        checkpoint or run folder (its newest best checkpoint's encoder), as `reader` reads them, refusing weights of
        another shape with the settings that decide it."""
        state, checkpoint = reader.run_state_dict(path)
        if not state:
            raise EncoderWeightsError(f"model.encoder.weights: {checkpoint} holds no encoder weights")
        try:
            self.load_state_dict(state)
        except RuntimeError as error:
            summary = " ".join(str(error).split())[:300]
            raise EncoderWeightsError(
                f"model.encoder.weights: the encoder of {checkpoint} does not fit this small_vgg: use its run's "
                f"model.encoder.channels, model.encoder.kernel_sizes and model.encoder.coordinates ({summary})"
            ) from None

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


def build_encoder(settings: EncoderSettings, *, reader: WeightsReader | None = None) -> nn.Module:
    """The encoder named in a config, its weights other than "none" read by `reader`; every encoder has `.dim` (D)
    and maps images to (B, L, D); the torchvision ones also have `.grid` (see `annotation_grid`) and `.stages`."""
    name, weights, freeze, grid = settings.name, settings.weights, settings.freeze, settings.grid
    if name == "small_vgg":
        if weights == "imagenet":
            raise ConfigError("encoder small_vgg has no ImageNet weights: set model.encoder.weights to none (train "
                              "from scratch), to a `caption pretrain-encoder` folder (e.g. runs/shapes_encoder) or to "
                              "another run's checkpoint or run folder (e.g. runs/shapes_soft)")
        if grid is not None:
            raise ConfigError("model.encoder.grid applies to the torchvision encoders; small_vgg's grid follows "
                              "model.encoder.channels: leave it null")
        encoder = SmallVGG(channels=settings.channels, kernel_sizes=settings.kernel_sizes,
                           coordinates=settings.coordinates, freeze=freeze)
        if weights != "none":
            encoder.load_from_run(weights, reader=needed_reader(reader, weights))
        return encoder
    if name in TORCHVISION_VGG:
        return TorchvisionVGG(name=name, weights=weights, freeze=freeze, grid=grid, reader=reader)
    if name in TORCHVISION_RESNET:
        return TorchvisionResNet(name=name, weights=weights, freeze=freeze, grid=annotation_grid(name, grid),
                                 reader=reader)
    raise ConfigError(f"model.encoder.name must be one of {', '.join(TORCHVISION_ENCODERS)}, small_vgg; got {name!r}")


@torch.no_grad()
def annotation_shape(encoder: nn.Module, image_size: tuple[int, int]) -> tuple[int, int]:
    """(L, D) of the annotations `encoder` gives an (H, W) image: one blank image through it, in eval mode, on its
    device; its training mode is left as it was."""
    device = next(encoder.parameters(), torch.empty(0)).device  # one without parameters: the CPU
    training = encoder.training
    encoder.eval()
    _, locations, dim = encoder(torch.zeros(1, 3, *image_size, device=device)).shape  # (1, L, D)
    encoder.train(training)
    return locations, dim

