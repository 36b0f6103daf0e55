"""Where a Lightning run writes, decided and checked before any work: checkpoints in
`<trainer.default_root_dir>/checkpoints` (so that a restarted run finds them with `--ckpt_path last`), the loggers'
`save_dir` moved along with a `--trainer.default_root_dir` given on the command line, and every such folder created
and checked writable (`caption.io.outputs.writable_folder`).
"""

import os
from typing import Any

from caption.cli.lightning.given import given_on_command_line
from caption.io.outputs import writable_folder


def logger_save_dirs(logger: Any) -> list[str]:
    """The `save_dir` of each logger in the trainer's `logger:` setting (one, a list, or none)."""
    loggers = logger if isinstance(logger, list) else [logger]
    folders = [getattr(getattr(item, "init_args", None), "save_dir", None) for item in loggers]
    return [folder for folder in folders if folder]


def checkpoints_under_root(config: Any) -> None:
    """Checkpoints go to <default_root_dir>/checkpoints, not the logger's new version folder of each run, unless
    `checkpoint.dirpath` is set."""
    if config.checkpoint.dirpath is None:
        root = config.trainer.default_root_dir or os.getcwd()
        config.checkpoint.dirpath = os.path.join(root, "checkpoints")


def logs_follow_root(config: Any, *, command_line: list[str]) -> None:
    """--trainer.default_root_dir given on the command line moves the loggers' save_dir with it (a config's
    `save_dir: runs/shapes_soft` beside `default_root_dir: runs/shapes_soft`), unless a logger setting is given
    on the command line too."""
    if not given_on_command_line(command_line, "trainer.default_root_dir") or any(
        arg.startswith("--trainer.logger") for arg in command_line
    ):
        return
    loggers = config.trainer.logger if isinstance(config.trainer.logger, list) else [config.trainer.logger]
    for logger in loggers:
        if getattr(getattr(logger, "init_args", None), "save_dir", None) is not None:
            logger.init_args.save_dir = config.trainer.default_root_dir


def check_output_folders(config: Any, *, checkpoints: bool = True) -> None:
    """Create every folder the run writes to and check it is writable, before any work starts (the checkpoints'
    with `checkpoints`: validate and test write none)."""
    writable_folder(config.trainer.default_root_dir or os.getcwd(), what="trainer.default_root_dir")
    if checkpoints:
        writable_folder(config.checkpoint.dirpath, what="checkpoint.dirpath")
    for folder in logger_save_dirs(config.trainer.logger):
        writable_folder(folder, what="trainer.logger's save_dir")
