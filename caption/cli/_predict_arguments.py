"""`caption predict`'s arguments: completed from its checkpoint, and its own `predictions:` group.

`caption predict --ckpt_path CKPT` needs no config: the checkpoint's data settings are taken unless a config or
data source is given, and its vocabulary unless another is named. Its parser also has `predictions:`, the writer
of its captions (`caption.cli._prediction_writer`), and neither logs nor keeps the captions in memory.
"""

import json

from lightning.pytorch.cli import LightningArgumentParser

from caption.cli._given import given_on_command_line
from caption.cli._prediction_writer import CaptionWriter
from caption.errors import ConfigError
from caption.io.checkpoints import DATA_LINKS, read_checkpoint

# data settings of a checkpoint that `caption predict` does not take over: set by the CLI, or predict's own
PREDICT_OWN = ("_instantiator", *DATA_LINKS.values(), "predict", "vocabulary_from")


def predict_arguments(args: list[str]) -> list[str]:
    """`caption predict`'s arguments, completed from --ckpt_path: the checkpoint's data settings unless a config
    or data source is given, and its vocabulary (data.vocabulary_from) unless another is named."""
    if any(arg in ("-h", "--help", "--print_config") or arg.startswith("--print_config=") for arg in args):
        return args
    ckpt_path = next((value for flag, value in zip(args, args[1:]) if flag == "--ckpt_path"), None)
    ckpt_path = ckpt_path or next((arg.split("=", 1)[1] for arg in args if arg.startswith("--ckpt_path=")), None)
    if ckpt_path is None or ckpt_path == "last":
        raise ConfigError("caption predict needs --ckpt_path: the checkpoint file to caption with")
    if "-c" not in args and not any(given_on_command_line(args, key) for key in ("config", "data", "data.source")):
        settings = read_checkpoint(ckpt_path).get("datamodule_hyper_parameters")
        if not isinstance(settings, dict) or not isinstance(settings.get("source"), dict):
            raise ConfigError(f"checkpoint {ckpt_path} does not record its data settings: pass --config with the "
                              "training config, or --data.source")
        unlinked = {key: value for key, value in settings.items() if key not in PREDICT_OWN}
        args = [args[0], "--data", json.dumps(unlinked), *args[1:]]  # first, so that the command line's data.* win
    if not given_on_command_line(args, "data.vocabulary_from"):
        args = [*args, "--data.vocabulary_from", ckpt_path]
    return args


def add_prediction_arguments(parser: LightningArgumentParser) -> None:
    """`predictions:`, the writer of the captions, on `predict`'s parser (after `Trainer.predict`'s arguments)."""
    parser.add_lightning_class_args(CaptionWriter, "predictions")
    # nothing to log, nothing to hold in memory: the writer gathers the captions into predictions.out
    parser.set_defaults({"trainer.logger": False, "return_predictions": False})
