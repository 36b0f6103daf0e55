"""Torchvision-format ResNet state dicts with random weights, saved to a file (no download in tests)."""

from pathlib import Path

import torch
from torchvision import models

BUILDERS = {"resnet50": models.resnet50, "resnet101": models.resnet101, "resnet152": models.resnet152}


def resnet_weights(path: Path, *, name: str = "resnet50", seed: int = 0) -> Path:
    """torchvision's own random initialisation of `name`, fc included, as `torch.save(model.state_dict())` writes it.

    The BatchNorm statistics are measured on random smooth 64x64 images (like the fixtures' pictures), as
    training would measure them on its data:
    in eval mode the activations then keep a trained network's scale (with torchvision's initial statistics,
    0 and 1, they grow to hundreds by layer4, which saturates the decoder's tanh and sigmoid layers so that no
    gradient reaches the encoder). They also differ from the initial ones, so a test notices if they are not loaded.
    """
    torch.manual_seed(seed)
    resnet = BUILDERS[name]()
    for module in resnet.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None  # a cumulative average over the batches below
    smooth = torch.nn.functional.interpolate(torch.randn(16, 3, 4, 4), size=(64, 64), mode="bilinear")
    with torch.no_grad():
        resnet.train()(smooth)
    torch.save(resnet.state_dict(), path)
    return path
