"""Fine-tuning the torchvision encoder on a schedule, and starting a run from another run's weights.

The paper keeps its CNN fixed. With `model.encoder.freeze: false` the encoder is frozen for `frozen_epochs` epochs,
then its last `finetune_stages` stages train at `learning_rate`, in their own optimizer group "encoder":
`EncoderFinetuning` is Lightning's `BaseFinetuning`, whose state keeps that group, so `--ckpt_path last` resumes
mid-schedule. BatchNorm never trains (eval mode, ImageNet's statistics, fixed γ, β). `load_weights` starts a new run
(new optimizer, epochs and steps) from another run's checkpoint, `model.optimization.init_from`: stage 2 of the
two-stage recipe. The schedule, its memory and the recipe: docs/datasets.md#choosing-an-encoder.
"""

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import BaseFinetuning
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from caption.errors import ConfigError
from caption.io.checkpoints import found_checkpoint, read_checkpoint
from caption.model.caption_model import TRAINING_STATE, module_state
from caption.model.encoder import STAGES
from caption.model.vocabulary import check_vocabulary

GROUP = "encoder"  # the optimizer parameter group of the fine-tuned stages (LearningRateMonitor: lr-Adam/encoder)
# kept out of the trained stages (the lazy ones are no subclass of the others)
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
               nn.LazyBatchNorm1d, nn.LazyBatchNorm2d, nn.LazyBatchNorm3d)


def stage_parameters(encoder: nn.Module, stages: int | None) -> list[nn.Parameter]:
    """The parameters of the encoder's last `stages` stages (None: all), BatchNorm's left out."""
    chosen = encoder.stages[-stages:] if stages else encoder.stages
    return [
        parameter
        for stage in chosen
        for module in stage.modules()
        if not isinstance(module, BATCH_NORMS)
        for parameter in module.parameters(recurse=False)
    ]


class EncoderFinetuning(BaseFinetuning):
    """The encoder frozen for `frozen_epochs` epochs, then its last `stages` stages trained at `learning_rate`.

    Args:
        frozen_epochs: epochs before fine-tuning starts (model.encoder.frozen_epochs).
        stages: how many stages train, counted from the top (model.encoder.finetune_stages; None: all).
        learning_rate: of the "encoder" parameter group (model.encoder.learning_rate, or
            model.optimization.learning_rate).
    """

    def __init__(self, *, frozen_epochs: int, stages: int | None, learning_rate: float):
        super().__init__()
        self.frozen_epochs, self.stages, self.learning_rate = frozen_epochs, stages, learning_rate

    def freeze_before_training(self, pl_module: L.LightningModule) -> None:
        pl_module.model.encoder.requires_grad_(False)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A run resumed in the middle of an epoch gets no `on_train_epoch_start` (Lightning skips it), so its
        fine-tuned stages, frozen again by `setup`, would silently stop training: unfreeze them here."""
        if trainer.current_epoch >= self.frozen_epochs:
            self.on_train_epoch_start(trainer, pl_module)

    def finetune_function(self, pl_module: L.LightningModule, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        if epoch < self.frozen_epochs:
            return
        trained = stage_parameters(pl_module.model.encoder, self.stages)
        for parameter in trained:  # again at every start: a resumed run's `setup` froze them
            parameter.requires_grad_(True)
        in_optimizer = {id(parameter) for group in optimizer.param_groups for parameter in group["params"]}
        new = [parameter for parameter in trained if id(parameter) not in in_optimizer]
        if new:
            optimizer.add_param_group({"params": new, "lr": self.learning_rate, "name": GROUP})
            count = sum(parameter.numel() for parameter in new)
            rank_zero_info(f"Epoch {epoch}: fine-tuning the last {self.stages or STAGES} encoder stages "
                           f"({count:,} parameters) at learning rate {self.learning_rate:g}")


def load_weights(module: L.LightningModule, path: str) -> None:
    """Start `module` from the weights of checkpoint `path` (model.optimization.init_from; a run folder: the checkpoint
    `caption compare` picks there; a model folder of `caption export`), read with weights_only=True."""
    if Path(path).is_dir():  # a run folder: the checkpoint it stands for, read once; a model folder stands for itself
        found, checkpoint = found_checkpoint(Path(path))
        path = str(found)
    elif Path(path).is_file():
        checkpoint = read_checkpoint(path)
    else:
        raise ConfigError(f"model.optimization.init_from: {path} does not exist: point it at the checkpoint of the run "
                          "to start from (e.g. stage 1's checkpoints/best.ckpt)")
    vocabulary = checkpoint["hyper_parameters"]["vocabulary"]
    check_vocabulary(vocabulary, module.model.vocabulary.itos, problem=f"model.optimization.init_from: {path} was "
                     "trained on another vocabulary", fix="use the data settings of its run")
    state: dict[str, Any] = checkpoint["state_dict"]
    trained_with, attention = checkpoint["hyper_parameters"]["attention"]["kind"], module.model.settings.attention.kind
    if trained_with != attention:  # the weights fit; the objective's state (hard attention's baseline) does not
        objective = module.objective.state_dict(prefix=TRAINING_STATE[0])
        left_out = sorted(key for key in state if key.startswith(TRAINING_STATE))
        state = {**{key: value for key, value in state.items() if not key.startswith(TRAINING_STATE)}, **objective}
        parts = [f"its {', '.join(left_out)} (for {trained_with} attention only) is left out"] if left_out else []
        parts += [f"{', '.join(sorted(objective))} starts afresh"] if objective else []
        rank_zero_info(f"model.optimization.init_from: {path} was trained with {trained_with} attention, "
                       f"this run uses {attention}: its weights are used; {'; '.join(parts)}")
    try:
        module.load_state_dict(module_state(state))
    except RuntimeError as error:
        summary = " ".join(str(error).split())[:400]
        raise ConfigError(
            f"model.optimization.init_from: the weights in {path} do not fit this model ({summary}): keep its "
            "model.encoder, model.decoder and model.attention settings"
        ) from None
    rank_zero_info(f"Starting from the weights of {path} (model.optimization.init_from): "
                   "a new run, with a new optimizer")
