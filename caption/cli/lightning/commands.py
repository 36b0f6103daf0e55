"""`caption fit | validate | test | predict`: Lightning's own subcommands, driven by YAML configs.

    caption fit --config shapes_soft                  # train, then test the best checkpoint
    caption fit --config shapes_soft --model.decoding.beam_size 5
    caption test --config shapes_soft --ckpt_path runs/shapes_soft/checkpoints/last.ckpt
    caption predict --ckpt_path runs/shapes_soft/checkpoints/last.ckpt --data.predict photos/
    caption test --ckpt_path runs/shapes_soft        # no config: the checkpoint's data (or a `caption export` folder)
    caption fit --config shapes_soft --print_config    # every setting, with its default
    caption fit --config shapes_soft                               # a packaged config, by name, from any folder
    caption fit --config shapes_soft --keep_freed_memory true      # CPU runs: glibc keeps freed memory (faster)

The best checkpoint is chosen on validation BLEU-4 and tested after `fit`; `last.ckpt` is kept fresh
(`periodic_checkpoint:`), so a killed run continues with `--ckpt_path last`. Checkpoints load with weights_only=True
(`caption.io.checkpoints`); decoding settings on the command line win over a checkpoint's; `predict` writes through
`caption.cli.lightning.prediction_writer`, quietly; Lightning's lines go to stdout, on lines of their own
(`caption.cli.lightning.console`). What the console shows: docs/console.md; more: docs/distributed.md.
"""

import contextlib
import sys
from typing import Any

import torch
from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, ModelSummary
from lightning.pytorch.callbacks import ProgressBar as LightningProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, LRSchedulerTypeTuple
from lightning.pytorch.plugins.io import CheckpointIO

from caption.cli.lightning.checkpoint_settings import (
    apply_decoding_overrides,
    checkpoint_model_settings,
    decoding_overrides,
    given_checkpoint,
    resolve_last,
    with_run_checkpoint,
)
from caption.cli.lightning.class_paths import check_configs, check_parsed, named_on_command_line
from caption.cli.lightning.console import lightning_console, quiet_lightning
from caption.cli.lightning.parser import CaptionArgumentParser
from caption.cli.lightning.predict_arguments import predict_arguments, scoring_arguments
from caption.cli.lightning.run_files import SaveConfig
from caption.cli.lightning.run_folders import (
    check_output_folders,
    checkpoints_under_root,
    claim_run_folders,
    fit_folders,
    logs_follow_root,
    releasing_run_folders,
)
from caption.config.console import verbose
from caption.config.packaged import encoder_run, with_packaged_configs
from caption.data.datamodule import DATA_LINKS, CaptionDataModule
from caption.errors import CaptionError, CheckpointError, ConfigError
from caption.io.checkpoints import SafeCheckpointIO, has_encoder
from caption.io.class_paths import named_modules
from caption.io.model_folder import CONFIG, WEIGHTS, is_model_folder, weights_mismatch
from caption.model.caption_model import checkpoint_state
from caption.training.allocator import configure_allocator
from caption.training.callbacks import AttentionPatience, LoggingInterval, PeriodicCheckpoint
from caption.training.module import CaptionModule
from caption.training.progress import FitSummary, ParameterCount, ProgressBar, summary
from caption.training.trainer import CaptionTrainer


def scheduler_settings(scheduler: Namespace | None) -> dict[str, Any] | None:
    """`lr_scheduler:` as a plain dict {class_path, init_args}, or None for a constant learning rate."""
    return None if scheduler is None else scheduler.as_dict()


class CaptionCLI(LightningCLI):
    """LightningCLI with the project's links between model and data, checkpoints and `caption predict`; the class
    paths of its configs resolved under the project's one rule (`caption.cli.lightning.class_paths`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with contextlib.ExitStack() as self.command_scope:  # run included
            super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.vocabulary", "model.vocabulary", apply_on="instantiate")
        parser.link_arguments("data.image_size", "model.image_size", apply_on="instantiate")
        for model_key, data_key in DATA_LINKS.items():  # the feature cache is checked against them
            parser.link_arguments(f"model.{model_key}", f"data.{data_key}")
        # LightningCLI's `lr_scheduler:` group, as its add_lr_scheduler_args makes it (any torch scheduler, or
        # Lightning's ReduceLROnPlateau with a `monitor`), handed to the model as a plain dict (it goes into the
        # checkpoint's hyperparameters); the model builds it on its optimizer (`CaptionModule.configure_optimizers`).
        parser.add_subclass_arguments(
            LRSchedulerTypeTuple, "lr_scheduler", instantiate=False, fail_untyped=False, skip={"optimizer"},
            required=False
        )
        parser.link_arguments("lr_scheduler", "model.lr_scheduler", compute_fn=scheduler_settings)
        parser.add_argument(
            "--keep_freed_memory", type=bool, default=False,
            help="CPU runs on glibc: keep freed memory for reuse instead of handing it back to the kernel (faster "
                 "steps, but the process keeps its peak memory; caption.training.allocator)",
        )
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(PeriodicCheckpoint, "periodic_checkpoint")
        parser.add_lightning_class_args(AttentionPatience, "early_stopping")  # off unless early_stopping.patience
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
        """Parse, then check --ckpt_path's checkpoint and take its model settings (a model folder of `caption export`
        too, which Lightning does not read)."""
        args = sys.argv[1:] if args is None else list(args)  # without --import: `caption` took it (caption.cli.run)
        stage_0 = encoder_run(args)
        if stage_0 is not None:
            raise ConfigError(f"--config {stage_0} trains an encoder alone: run `caption pretrain-encoder --config "
                              f"{stage_0}`, then `caption fit` on it (README \"Quick start\")")
        args = with_packaged_configs(args)  # --config shapes_soft
        # a class a config names: imported only if the project's, Lightning's, torch's, or named on the command line
        self.command_scope.enter_context(named_modules(named_on_command_line(args)))
        check_configs(args)
        if args[:1] != ["fit"]:  # --ckpt_path runs/x: the checkpoint `caption compare` picks there (fit resumes: last)
            args = with_run_checkpoint(args)
        if args[:1] == ["predict"]:
            args = predict_arguments(args)
        elif args[:1] in (["validate"], ["test"]):  # --ckpt_path without a config: the checkpoint's data
            args = scoring_arguments(args)
        self.config = parser.parse_args(args)  # LightningCLI's own, without its warning that `caption` passes args
        self.command_line = args
        subcommand = self.config.get("subcommand")
        check_parsed((self.config[subcommand] if subcommand else self.config).as_dict())  # before anything reads it
        self.checkpoint = given_checkpoint(args, config=self.config, subcommand=subcommand)
        # the checkpoint's model settings replace the parsed ones, but the decoding ones given here win
        self.decoding_overrides = decoding_overrides(args, config=self.config, subcommand=subcommand)
        if self.checkpoint is not None:  # the model it was trained as (Lightning then reads the same from the file)
            model = checkpoint_model_settings(self.checkpoint)
            self.config = parser.parse_object({subcommand: {"model": model}}, self.config)

    def before_instantiate_classes(self) -> None:
        """Where the run writes (`caption.cli.lightning.run_folders`), then what --ckpt_path changes in its settings
        (`caption.cli.lightning.checkpoint_settings`)."""
        config = self.own_settings(self.config)
        logs_follow_root(config, command_line=self.command_line)
        checkpoints_under_root(config)
        if self.subcommand is None:
            return
        if self.subcommand == "predict":  # writes only its captions (CaptionWriter checks that folder)
            self.save_config_callback = None
        else:  # validate and test save no checkpoints, and without a logger no config either
            check_output_folders(config, checkpoints=self.subcommand == "fit")
            if self.subcommand != "fit" and config.trainer.logger is False:
                self.save_config_callback = None
        apply_decoding_overrides(config, overrides=self.decoding_overrides)
        if config.get("ckpt_path") == "last":
            self.checkpoint = resolve_last(config, subcommand=self.subcommand)
        if self.subcommand != "fit" and self.checkpoint is not None and has_encoder(self.checkpoint):
            config.model.encoder.weights = "none"  # the checkpoint has the encoder: no ImageNet download first

    def own_settings(self, config: Namespace) -> Namespace:
        """The settings of this run's subcommand in `config` (all of it when run without one)."""
        return config[self.subcommand] if self.subcommand else config

    def instantiate_classes(self) -> None:
        """Lightning's, with a settings dataclass's own error (`__post_init__`) raised as it is: jsonargparse wraps
        the one of an optional group (`model.soft`) in a ValueError listing every type it tried."""
        try:
            super().instantiate_classes()
        except ValueError as error:
            cause: BaseException | None = error
            while cause is not None and not isinstance(cause, CaptionError):
                cause = cause.__cause__ or cause.__context__
            if cause is None:
                raise
            raise cause from None
        ckpt_path = self.own_settings(self.config).get("ckpt_path") if self.subcommand else None
        if self.checkpoint is not None and ckpt_path and is_model_folder(ckpt_path):  # its config.json built the model
            mismatch = weights_mismatch(checkpoint_state(self.model.state_dict()), self.checkpoint["state_dict"])
            if mismatch:
                raise CheckpointError(f"{ckpt_path}/{WEIGHTS} does not fit the model {ckpt_path}/{CONFIG} describes: "
                                      f"{mismatch}; export the model again")

    def after_instantiate_classes(self) -> None:
        """`fit` claims every folder it writes checkpoints to (`claim_run_folders`), one run at a time in each, so its
        last.ckpt is its own: in its first process only, as the trainer ranks them (a lone process is first whatever
        rank variables, such as SLURM's, its environment holds)."""
        if self.subcommand == "fit" and self.trainer.is_global_zero:
            claim_run_folders(fit_folders(self.own_settings(self.config), trainer=self.trainer))

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, loading checkpoints through SafeCheckpointIO (weights_only=True, clear errors), with the
        project's progress bar unless another is given or none is wanted, the model summary in a line (Lightning's
        table with `caption -v`), the training figures logged in every epoch, and `fit`'s summary."""
        plugins = kwargs.get("plugins") or []
        plugins = plugins if isinstance(plugins, list) else [plugins]
        if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
            kwargs["plugins"] = [*plugins, SafeCheckpointIO()]
        settings = self.own_settings(self.config_init).get("trainer", {})
        callbacks = settings.get("callbacks") or []
        callbacks = list(callbacks) if isinstance(callbacks, list) else [callbacks]
        if settings.get("enable_progress_bar") is not False and not any(
            isinstance(callback, LightningProgressBar) for callback in callbacks
        ):
            callbacks.append(ProgressBar())
        if settings.get("enable_model_summary") is not False and not verbose() and not any(
            isinstance(callback, ModelSummary) for callback in callbacks
        ):
            callbacks.append(ParameterCount())
            kwargs["enable_model_summary"] = False  # Lightning then adds none of its own, and does not say so
        callbacks.append(LoggingInterval())
        self.fit_summary = FitSummary() if self.subcommand == "fit" else None
        kwargs["callbacks"] = callbacks + ([self.fit_summary] if self.fit_summary is not None else [])
        trainer = super().instantiate_trainer(**kwargs)
        if self.own_settings(self.config).get("keep_freed_memory", False):  # opt-in: malloc is process-wide
            configure_allocator(trainer.strategy.root_device.type)  # one log line says what it did
        return trainer

    def before_fit(self) -> None:
        """Before any step: every split the run uses (train; val and the test after training unless their batches
        are limited to none) has images with usable captions, so a run never trains for hours to fail at its test."""
        trainer = self.trainer
        for split, limit in (("train", trainer.limit_train_batches), ("val", trainer.limit_val_batches),
                             ("test", trainer.limit_test_batches)):
            if limit != 0:
                self.datamodule.split(split)  # a ConfigError naming the split if it has none

    def after_fit(self) -> None:
        """Evaluate the best checkpoint (or the final weights if none was selected) on the test split, then say which
        epoch was best, its figures and the test's, and where the checkpoints and logs are
        (`caption.training.progress`)."""
        checkpoint = self.trainer.checkpoint_callback
        best = checkpoint.best_model_path if checkpoint is not None else ""
        if isinstance(self.trainer.progress_bar_callback, ProgressBar):  # its figures are in the summary
            self.trainer.progress_bar_callback.keep_test_bar = False
        # without Lightning's lines on restoring the checkpoint the summary names (with them: caption -v)
        with contextlib.nullcontext() if verbose() else quiet_lightning():
            results = self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best or None, verbose=False)
        if self.trainer.is_global_zero:  # the command's result, on stdout as the example captions before it
            print(summary(self.trainer, self.fit_summary, results[0] if results else None), flush=True)


# how `caption` makes its LightningCLI
CLI_SETTINGS: dict[str, Any] = {"trainer_class": CaptionTrainer, "parser_class": CaptionArgumentParser,
                                "save_config_callback": SaveConfig,
                                "save_config_kwargs": {"overwrite": True}, "auto_configure_optimizers": False}


def main(argv: list[str]) -> None:
    """`caption fit|validate|test|predict ...` (argv starts with the subcommand; its `--help` is answered before
    Lightning is imported, and `--help-all` reaches here as jsonargparse's `--help`:
    `caption.cli.lightning.short_help`)."""
    with (lightning_console(verbose=verbose(), command=argv[0] if argv else "fit"),
          quiet_lightning() if argv[:1] == ["predict"] else contextlib.nullcontext(), releasing_run_folders()):
        CaptionCLI(CaptionModule, CaptionDataModule, args=argv, **CLI_SETTINGS)
    leave_process_group()


class ParserBuilt(Exception):
    """Raised by `lightning_parsers` once the CLI has built its parser: nothing is parsed or run."""


def lightning_parsers() -> dict[str, LightningArgumentParser]:
    """The parser of each subcommand (fit, validate, test, predict) as `main` builds it, and that of `caption
    features` (LightningCLI's without subcommands: `run=False`), without parsing or running: LightningCLI makes its
    main parser, then one per subcommand in the order of `subcommands()`, each by `init_parser`."""
    made: list[LightningArgumentParser] = []

    class ParserOnly(CaptionCLI):
        def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
            made.append(super().init_parser(**kwargs))
            return made[-1]

        def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
            raise ParserBuilt

    for run in (True, False):
        try:
            ParserOnly(CaptionModule, CaptionDataModule, args=[], run=run, **CLI_SETTINGS)
        except ParserBuilt:
            continue
        raise AssertionError("LightningCLI parsed without calling parse_arguments")
    return {**dict(zip(LightningCLI.subcommands(), made[1:-1], strict=True)), "features": made[-1]}


def leave_process_group() -> None:
    """Close the DDP process group once the command is done. Lightning leaves it open; a rank that exits while
    its peer's gloo threads still hold the connection can make that peer abort at exit ("terminate called
    without an active exception", 1 run in 8 of a 2-process `caption predict` here). Only after a command that
    finished: a failed rank's peers must not wait for it here."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()  # every rank is done with its collectives before any rank closes the group
        torch.distributed.destroy_process_group()
