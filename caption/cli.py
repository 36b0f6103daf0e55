"""The `caption` command.

Training and evaluation are Lightning's own subcommands, driven by YAML configs:

    caption fit --config configs/shapes_soft.yaml                  # train, then test the best checkpoint
    caption fit --config configs/shapes_soft.yaml --model.attention hard
    caption test --config configs/shapes_soft.yaml --ckpt_path runs/shapes_soft/checkpoints/last.ckpt
    caption fit --config configs/shapes_soft.yaml --print_config    # every setting, with its default

The best checkpoint is chosen on validation BLEU-4 (the paper's model selection); `last.ckpt` is
kept too. After `fit`, the best checkpoint is evaluated on the test split.
"""

import sys
from collections.abc import Callable

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from caption.data import features
from caption.data.datamodule import CaptionDataModule
from caption.errors import CaptionError
from caption.module import CaptionModule


class CaptionCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.vocabulary", "model.vocabulary", apply_on="instantiate")
        parser.link_arguments("data.image_size", "model.image_size", apply_on="instantiate")
        for key in ("encoder", "encoder_weights", "freeze_encoder"):  # the feature cache is checked against them
            parser.link_arguments(f"model.{key}", f"data.{key}")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/bleu4",
                "checkpoint.mode": "max",
                "checkpoint.save_last": True,
                "checkpoint.filename": "best-epoch{epoch}-step{step}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )

    def after_fit(self) -> None:
        """Evaluate the best checkpoint (or the final weights if none was selected) on the test split."""
        checkpoint = self.trainer.checkpoint_callback
        best = checkpoint.best_model_path if checkpoint is not None else ""
        self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best or None)


# Commands outside Lightning's fit/validate/test/predict: name -> function taking the remaining argv.
COMMANDS: dict[str, Callable[[list[str]], None]] = {
    "features": features.features_command,
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
    try:
        run(argv)
    except CaptionError as error:
        sys.exit(f"caption: error: {error}")


if __name__ == "__main__":
    main()
