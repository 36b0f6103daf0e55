"""Torchvision-format ResNet state dicts with random weights, saved to a file (no download in tests)."""

from pathlib import Path

import torch
from torchvision import models

BUILDERS = {"resnet50": models.resnet50, "resnet101": models.resnet101, "resnet152": models.resnet152}


def resnet_weights(path: Path, *, name: str = "resnet50", seed: int = 0) -> Path:
    """torchvision's own random initialisation of `name`, fc included, as `torch.save(model.state_dict())` writes it.

    The BatchNorm statistics get random values too, so that a test notices if they are not loaded or change.
    """
    torch.manual_seed(seed)
    resnet = BUILDERS[name]()
    for module in resnet.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.9, 1.1)
    torch.save(resnet.state_dict(), path)
    return path
