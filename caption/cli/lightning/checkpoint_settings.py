"""What `--ckpt_path` does to a Lightning command's settings: its checkpoint read once, its model settings against
those given on purpose, the decoding settings of the command line over its own, and `--ckpt_path last`.

Lightning rebuilds the model from the checkpoint's settings, so a model setting given on purpose that differs is
refused here (`caption.io.checkpoints.check_model_settings`) rather than silently dropped; decoding settings are the
exception: those given on the command line (`--model.decoding.beam_size 5`) win, and say so.
"""

from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from caption.cli.lightning.given import given_model_settings, given_on_command_line
from caption.config.keys import dotted
from caption.errors import CheckpointError
from caption.io.checkpoints import (
    check_model_settings,
    find_checkpoint,
    first_readable,
    local_model,
    newest_first,
    read_checkpoint,
)
from caption.io.model_folder import is_model_folder, settings_file
from caption.model.caption_model import ModelSettings, check_sizes
from caption.model.decoding import DecodingSettings
from caption.model.weight_settings import weight_defining_keys
from caption.training.callbacks import LAST

MODEL_DEFINING = weight_defining_keys(ModelSettings)  # the model settings a checkpoint's weights fit only as trained


def given_checkpoint(args: list[str], *, config: Namespace, subcommand: str | None) -> dict[str, Any] | None:
    """The checkpoint of --ckpt_path when it names a file or a model folder of `caption export` (read once,
    weights_only), with the model settings given on purpose in `args` checked against its own; None without one."""
    ckpt_path = config[subcommand].get("ckpt_path") if subcommand else None
    if subcommand == "fit" and ckpt_path and is_model_folder(ckpt_path):
        raise CheckpointError(f"--ckpt_path {ckpt_path}: a model folder of `caption export` holds the weights, not a "
                              "training state to resume: start a new run from them with --model.optimization.init_from "
                              f"{ckpt_path}")
    readable = ckpt_path and (Path(ckpt_path).is_file() or is_model_folder(ckpt_path))
    checkpoint = read_checkpoint(ckpt_path) if readable else None
    if checkpoint is not None:  # the checkpoint's model settings are taken next: refuse others given
        check_sizes(checkpoint["hyper_parameters"], checkpoint["state_dict"],
                    origin=settings_file(ckpt_path))  # before any is built
        given = given_model_settings(args, dotted(config[subcommand].model.as_dict()))
        check_model_settings(ckpt_path, checkpoint, given, defining=MODEL_DEFINING)
    return checkpoint


def checkpoint_model_settings(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The model settings a checkpoint was trained with, as `model:` of the command's config."""
    return {key: value for key, value in checkpoint["hyper_parameters"].items() if key != "_instantiator"}


def decoding_overrides(args: list[str], *, config: Namespace, subcommand: str | None) -> dict[str, Any]:
    """{decoding setting: value} of those given on the command line (`--model.decoding.beam_size 5`)."""
    return {
        key: config[subcommand].model.decoding[key] for key in DecodingSettings.__dataclass_fields__
        if subcommand and given_on_command_line(args, f"model.decoding.{key}")
    }


def apply_decoding_overrides(config: Any, *, overrides: dict[str, Any]) -> None:
    """Decoding settings given on the command line win over the checkpoint's, and say so."""
    for key, value in overrides.items():
        if config.model.decoding[key] != value:
            rank_zero_info(f"model.decoding.{key}: {value} from the command line, not the checkpoint's "
                           f"{config.model.decoding[key]}")
            config.model.decoding[key] = value


def resolve_last(config: Any, *, subcommand: str) -> dict[str, Any] | None:
    """--ckpt_path last: the checkpoint folder's last.ckpt or, if it cannot be read (cut short, corrupt), the
    newest checkpoint there that can, with a warning naming the skipped files; none at all: `fit` starts from
    scratch and says so, the other commands refuse. Sets `config.ckpt_path` and returns the checkpoint read (None
    when starting from scratch)."""
    folder = Path(config.checkpoint.dirpath)
    if not (folder / LAST).is_file():
        missing = f"--ckpt_path last: there is no {LAST} in {folder}"
        if subcommand != "fit":
            raise CheckpointError(f"{missing}: pass the checkpoint to use, or the run's trainer.default_root_dir")
        rank_zero_warn(f"{missing} yet, so this run starts from scratch")
        config.ckpt_path = None
        return None
    candidates = [folder / LAST, *newest_first(set(folder.glob("*.ckpt")) - {folder / LAST})]
    found = first_readable(candidates, where=f"--ckpt_path last: {folder}")
    if found[0] != folder / LAST:
        rank_zero_warn(f"--ckpt_path last: using {found[0]}, the newest checkpoint in {folder} that can be read")
    config.ckpt_path = str(found[0])
    model = dotted(config.model.as_dict())
    settings = {key: (model[key], "in this run's settings") for key in MODEL_DEFINING if key in model}
    # the model is built from them, then loads the checkpoint
    check_model_settings(found[0], found[1], settings, defining=MODEL_DEFINING)
    check_sizes(found[1]["hyper_parameters"], found[1]["state_dict"], origin=settings_file(found[0]))
    return found[1]


def with_run_checkpoint(args: list[str]) -> list[str]:
    """Command-line arguments with a run folder given as `--ckpt_path DIR` (or `--ckpt_path=DIR`) replaced by the
    checkpoint `find_checkpoint` picks there, and a Hugging Face Hub model id by its model folder (`local_model`);
    everything else as it is."""
    def resolved(value: str) -> str:
        path = local_model(Path(value))
        return str(find_checkpoint(path)) if path.is_dir() else value

    result = list(args)
    for index, arg in enumerate(result):
        if arg == "--ckpt_path" and index + 1 < len(result):
            result[index + 1] = resolved(result[index + 1])
        elif arg.startswith("--ckpt_path="):
            result[index] = "--ckpt_path=" + resolved(arg.partition("=")[2])
    return result
