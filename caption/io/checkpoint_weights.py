"""A model built from a checkpoint's settings, then given the checkpoint's weights: what every reader of a trained
model does once the checkpoint is read, whichever module it builds.

    hyperparameters = without_encoder_download(checkpoint)      # the settings, the encoder's weights "none" if held
    model = with_checkpoint_weights(build, checkpoint["state_dict"], path=path)   # built, loaded strictly, eval mode

A failure to build or load is one CheckpointError naming the checkpoint; for a model folder of `caption export` whose
weights do not fit its config.json, it says what differs.
"""

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from torch import Tensor, nn

from caption.errors import CaptionError, CheckpointError
from caption.io.checkpoints import has_encoder
from caption.io.model_folder import CONFIG, WEIGHTS, is_model_folder, weights_mismatch

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def without_encoder_download(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's hyperparameters, its encoder's weights set to "none" when the checkpoint holds them: ImageNet's
    are then not fetched only to be overwritten (the checkpoint's own hyperparameters are changed, as the model built
    from them will show)."""
    hyperparameters = checkpoint["hyper_parameters"]
    if has_encoder(checkpoint):
        hyperparameters["encoder"] = {**hyperparameters.get("encoder", {}), "weights": "none"}
    return hyperparameters


def with_checkpoint_weights(build: Callable[[], ModuleT], weights: Mapping[str, Tensor], *,
                            path: str | os.PathLike) -> ModuleT:
    """`build()`, a model from the settings of the checkpoint `path`, with `weights` loaded strictly, in eval mode. A
    setting refused by name (a CaptionError) is raised as it is; any other failure is a CheckpointError naming
    `path`: for a model folder of `caption export` whose weights do not fit its config.json, what differs."""
    model: ModuleT | None = None
    try:
        model = build()
        model.load_state_dict(weights, strict=True)
    except CaptionError:
        raise
    except Exception as error:
        mismatch = is_model_folder(path) and model is not None and weights_mismatch(model.state_dict(), weights)
        if mismatch:  # a model folder's weights beside the config.json of another model
            raise CheckpointError(f"{Path(path) / WEIGHTS} does not fit the model {Path(path) / CONFIG} describes: "
                                  f"{mismatch}; export the model again") from None
        raise CheckpointError(
            f"{path}: cannot build its model ({error.__class__.__name__}: {error}); "
            "was it written by another version of this project?"
        ) from error
    return model.eval()
