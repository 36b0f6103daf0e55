"""The `caption` command.

Training and evaluation are Lightning's own subcommands, driven by YAML configs:

    caption fit --config configs/shapes_soft.yaml                  # train, then test the best checkpoint
    caption fit --config configs/shapes_soft.yaml --model.attention hard
    caption test --config configs/shapes_soft.yaml --ckpt_path runs/shapes_soft/checkpoints/last.ckpt
    caption fit --config configs/shapes_soft.yaml --print_config    # every setting, with its default

The best checkpoint is chosen on validation BLEU-4 (the paper's model selection); `last.ckpt` is
kept fresh by `periodic_checkpoint:` (every N steps, after validation, at the end and on SIGTERM), both in
`<trainer.default_root_dir>/checkpoints`, so a killed or pre-empted run continues with
`caption fit ... --ckpt_path last`. After `fit`, the best checkpoint is evaluated on the test split.
Checkpoints are always loaded with weights_only=True (`caption.checkpoints`).
"""

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, LRSchedulerTypeTuple
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from caption import compare, describe, evaluate
from caption.allocator import keep_freed_memory
from caption.callbacks import PeriodicCheckpoint
from caption.checkpoints import SafeCheckpointIO, read_checkpoint
from caption.data import features
from caption.data.datamodule import CaptionDataModule
from caption.errors import CaptionError
from caption.module import CaptionModule


def scheduler_settings(scheduler: Namespace | None) -> dict[str, Any] | None:
    """`lr_scheduler:` as a plain dict {class_path, init_args}, or None for a constant learning rate."""
    return None if scheduler is None else scheduler.as_dict()


class CaptionCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.vocabulary", "model.vocabulary", apply_on="instantiate")
        parser.link_arguments("data.image_size", "model.image_size", apply_on="instantiate")
        for key in ("encoder", "encoder_weights", "freeze_encoder"):  # the feature cache is checked against them
            parser.link_arguments(f"model.{key}", f"data.{key}")
        # LightningCLI's `lr_scheduler:` group, as its add_lr_scheduler_args makes it (any torch scheduler, or
        # Lightning's ReduceLROnPlateau with a `monitor`), handed to the model as a plain dict (it goes into the
        # checkpoint's hyperparameters); the model builds it on its optimizer (`CaptionModule.configure_optimizers`).
        parser.add_subclass_arguments(
            LRSchedulerTypeTuple, "lr_scheduler", instantiate=False, fail_untyped=False, skip={"optimizer"}, required=False
        )
        parser.link_arguments("lr_scheduler", "model.lr_scheduler", compute_fn=scheduler_settings)
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(PeriodicCheckpoint, "periodic_checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/bleu4",
                "checkpoint.mode": "max",
                "checkpoint.save_last": False,  # periodic_checkpoint writes last.ckpt
                "checkpoint.filename": "best-epoch{epoch}-step{step}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then check --ckpt_path: Lightning reads its hyperparameters next, with a bare torch.load."""
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if ckpt_path and Path(ckpt_path).is_file():
            read_checkpoint(ckpt_path)

    def before_instantiate_classes(self) -> None:
        """Checkpoints go to <default_root_dir>/checkpoints, not the logger's new version folder of each
        run, so that a restarted run finds them with --ckpt_path last."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        if config.checkpoint.dirpath is None:
            root = config.trainer.default_root_dir or os.getcwd()
            config.checkpoint.dirpath = os.path.join(root, "checkpoints")

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, loading checkpoints through SafeCheckpointIO (weights_only=True, clear errors)."""
        plugins = kwargs.get("plugins") or []
        plugins = plugins if isinstance(plugins, list) else [plugins]
        if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
            kwargs["plugins"] = [*plugins, SafeCheckpointIO()]
        return super().instantiate_trainer(**kwargs)

    def after_fit(self) -> None:
        """Evaluate the best checkpoint (or the final weights if none was selected) on the test split."""
        checkpoint = self.trainer.checkpoint_callback
        best = checkpoint.best_model_path if checkpoint is not None else ""
        self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best or None)


TERMINATED = 128 + 15  # exit status of a run stopped by SIGTERM, as a shell reports a killed process

# Commands outside Lightning's fit/validate/test/predict: name -> function taking the remaining argv.
COMMANDS: dict[str, Callable[[list[str]], None]] = {
    "features": features.features_command,
    "describe": describe.main,
    "evaluate": evaluate.main,
    "compare": compare.main,
}


def run(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in COMMANDS:
        COMMANDS[args[0]](args[1:])
        return
    CaptionCLI(
        CaptionModule,
        CaptionDataModule,
        args=argv,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
    )


def main(argv: list[str] | None = None) -> None:
    keep_freed_memory()  # CPU steps reuse freed memory instead of page-faulting it again (caption.allocator)
    try:
        run(argv)
    except CaptionError as error:
        sys.exit(f"caption: error: {error}")
    except SIGTERMException:  # stopped (pre-empted) after saving last.ckpt: not finished, resumable
        sys.exit(TERMINATED)


if __name__ == "__main__":
    main()
