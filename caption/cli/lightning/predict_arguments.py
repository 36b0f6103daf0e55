"""`caption predict`'s, `validate`'s and `test`'s arguments, completed from their checkpoint; predict's own
`predictions:` group.

`caption predict --ckpt_path CKPT` needs no config: the checkpoint's data settings are taken unless a config or
data source is given, and its vocabulary unless another is named. `caption validate` and `caption test` with
`--ckpt_path` and no config or data source take the checkpoint's data settings and vocabulary the same way, and then
log nothing unless a logger is given (they print their scores). A checkpoint is a file, or a model folder of
`caption export`. Predict's parser also has `predictions:`, the writer of its captions
(`caption.cli.lightning.prediction_writer`), and neither logs nor keeps the captions in memory.
"""

import itertools
import json

from lightning.pytorch.cli import LightningArgumentParser

from caption.cli.lightning.given import given_on_command_line
from caption.cli.lightning.prediction_writer import CaptionWriter
from caption.data.datamodule import DATA_LINKS
from caption.errors import ConfigError
from caption.inference.trained import check_source_sizes
from caption.io.checkpoints import read_checkpoint

# data settings of a checkpoint that `caption predict` does not take over: set by the CLI, or predict's own
PREDICT_OWN = ("_instantiator", *DATA_LINKS.values(), "predict", "vocabulary_from")


def predict_arguments(args: list[str]) -> list[str]:
    """`caption predict`'s arguments, completed from --ckpt_path: the checkpoint's data settings unless a config
    or data source is given, and its vocabulary (data.vocabulary_from) unless another is named."""
    if asks_for_help(args):
        return args
    ckpt_path = given_ckpt_path(args)
    if ckpt_path is None or ckpt_path == "last":
        raise ConfigError("caption predict needs --ckpt_path: the checkpoint file to caption with")
    if not gives_data(args):
        args = with_checkpoint_data(args, ckpt_path)
    if not given_on_command_line(args, "data.vocabulary_from"):
        args = [*args, "--data.vocabulary_from", ckpt_path]
    return args


def scoring_arguments(args: list[str]) -> list[str]:
    """`caption validate`'s or `caption test`'s arguments: with --ckpt_path and no config or data source, completed
    as predict's (the checkpoint's data settings and vocabulary), and with no logger unless one is given."""
    ckpt_path = given_ckpt_path(args)
    if asks_for_help(args) or ckpt_path is None or ckpt_path == "last" or gives_data(args):
        return args
    args = with_checkpoint_data(args, ckpt_path)
    if not given_on_command_line(args, "data.vocabulary_from"):
        args = [*args, "--data.vocabulary_from", ckpt_path]
    if not any(arg.startswith("--trainer.logger") for arg in args):
        args = [args[0], "--trainer.logger", "false", *args[1:]]
    return args


def asks_for_help(args: list[str]) -> bool:
    return any(arg in ("-h", "--help", "--print_config") or arg.startswith("--print_config=") for arg in args)


def given_ckpt_path(args: list[str]) -> str | None:
    """The value of `--ckpt_path X` or `--ckpt_path=X` in `args`, if given."""
    ckpt_path = next((value for flag, value in itertools.pairwise(args) if flag == "--ckpt_path"), None)
    return ckpt_path or next((arg.split("=", 1)[1] for arg in args if arg.startswith("--ckpt_path=")), None)


def gives_data(args: list[str]) -> bool:
    """Whether `args` give a config or data settings of their own."""
    return "-c" in args or any(given_on_command_line(args, key) for key in ("config", "data", "data.source"))


def with_checkpoint_data(args: list[str], ckpt_path: str) -> list[str]:
    """`args` with the data settings checkpoint `ckpt_path` records, first, so that the command line's data.* win."""
    checkpoint = read_checkpoint(ckpt_path)
    settings = checkpoint.get("datamodule_hyper_parameters")
    if not isinstance(settings, dict) or not isinstance(settings.get("source"), dict):
        raise ConfigError(f"checkpoint {ckpt_path} does not record its data settings: pass --config with the "
                          "training config, or --data.source")
    check_source_sizes(checkpoint, ckpt_path)  # before any image is resized to them
    unlinked = {key: value for key, value in settings.items() if key not in PREDICT_OWN}
    return [args[0], "--data", json.dumps(unlinked), *args[1:]]


def add_prediction_arguments(parser: LightningArgumentParser) -> None:
    """`predictions:`, the writer of the captions, on `predict`'s parser (after `Trainer.predict`'s arguments)."""
    parser.add_lightning_class_args(CaptionWriter, "predictions")
    # nothing to log, nothing to hold in memory: the writer gathers the captions into predictions.out
    parser.set_defaults({"trainer.logger": False, "return_predictions": False})
