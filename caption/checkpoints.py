"""Loading checkpoints safely: always `weights_only=True`, and a clear message naming the file.

A Lightning checkpoint is a pickle. `torch.load(weights_only=True)` only rebuilds tensors and plain
containers, so a file whose pickle would import or call anything else (a planted `os.system`, a
foreign class) is refused instead of executed. Every path that reads a checkpoint goes through
`read_checkpoint`:

- the CLI (`caption fit/test --ckpt_path ...`): Lightning loads through `SafeCheckpointIO`, which the
  CLI installs in every Trainer;
- inference code: `load_module(path)` returns the `CaptionModule`, vocabulary and hyperparameters
  included.
"""

import pickle
import re
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from caption.errors import CaptionError, CheckpointError
from caption.module import CaptionModule


def read_checkpoint(path: _PATH, map_location: Any = "cpu") -> dict[str, Any]:
    """torch.load(path, weights_only=True), with errors that name the file and say what to do."""
    if not Path(path).is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"unsupported global[^\n]*", str(error), flags=re.IGNORECASE)
        if found is None:  # not a pickle that asks for code: random bytes, another format
            raise CheckpointError(f"{path}: not a PyTorch checkpoint (corrupt, or another kind of file)") from None
        raise CheckpointError(
            f"{path}: refused to load: its pickle asks for more than tensors and plain values "
            f"({found.group(0)}), so loading it could run code. Use a checkpoint written by `caption fit`; "
            "never load this file with weights_only=False unless you made it yourself"
        ) from None
    except (EOFError, KeyError, RuntimeError, IndexError, ValueError) as error:  # what bytes that are no pickle raise
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint (truncated or corrupt?): "
                              f"{error.__class__.__name__}: {' '.join(str(error).split())}") from None
    if not isinstance(checkpoint, dict) or "vocabulary" not in checkpoint.get("hyper_parameters", {}):
        raise CheckpointError(
            f"{path}: not a checkpoint of this project (no vocabulary in its hyperparameters): it was not written "
            "by `caption fit`, or by an old version; retrain or pick another checkpoint"
        )
    return checkpoint


def load_module(path: _PATH, checkpoint: dict[str, Any] | None = None, map_location: Any = "cpu") -> CaptionModule:
    """The trained CaptionModule in eval mode, from a checkpoint checked by `read_checkpoint`.

    `checkpoint`: what `read_checkpoint(path)` returned, if the caller has it already. The encoder's
    weights are in the checkpoint, so ImageNet weights are not fetched only to be overwritten.
    """
    checkpoint = read_checkpoint(path, map_location=map_location) if checkpoint is None else checkpoint
    has_encoder = any(key.startswith("encoder.") for key in checkpoint.get("state_dict", {}))
    overrides = {"encoder_weights": "none"} if has_encoder else {}
    try:
        module = CaptionModule.load_from_checkpoint(path, map_location=map_location, weights_only=True, **overrides)
    except CaptionError:
        raise
    except Exception as error:
        raise CheckpointError(
            f"{path}: cannot build its model ({error.__class__.__name__}: {error}); "
            "was it written by another version of this project?"
        ) from error
    return module.eval()


class SafeCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO, loading through `read_checkpoint`: weights_only=True whatever the caller asks."""

    def load_checkpoint(
        self, path: _PATH, map_location: Any = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        return read_checkpoint(path, map_location=map_location or "cpu")
