"""Where a Lightning run writes, decided and checked before any work: checkpoints in
`<trainer.default_root_dir>/checkpoints` (so that a restarted run finds them with `--ckpt_path last`), the loggers'
`save_dir` moved along with a `--trainer.default_root_dir` given on the command line, and every such folder created
and checked writable (`caption.io.outputs.writable_folder`), and the folder of a `fit` claimed for the run's life
(`claim_run_folder`): a second `fit` into it at once would overwrite the first's last.ckpt.
"""

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from caption.cli.lightning.given import given_on_command_line
from caption.errors import ConfigError
from caption.io.outputs import writable_folder

RUN_LOCK, RUN_HOLDER = ".caption-fit.lock", ".caption-fit.json"  # in the run folder: the lock and who holds it
# the variables Lightning's launchers and SLURM set to a process's rank: only the first process claims the folder
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")
CLAIMED: list[tuple[FileLock, Path]] = []  # the run folders this process holds, released by `releasing_run_folders`


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


def is_first_process() -> bool:
    """Whether this process is rank 0 of its run (or alone): the DDP processes Lightning starts share its folder."""
    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)


def claim_run_folder(root: str | None) -> None:
    """Hold an operating-system lock on the run folder `root` (`filelock`) until `releasing_run_folders` ends: the
    system releases it when the process ends in any way, so a lock left by a killed run (its holder's process gone)
    is taken over at once. A folder another live `caption fit` holds is a ConfigError naming it and that process."""
    if not is_first_process():
        return
    folder = Path(root or os.getcwd())
    lock = FileLock(folder / RUN_LOCK, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        try:
            holder = json.loads((folder / RUN_HOLDER).read_text(encoding="utf-8"))
            who = f"process {int(holder['pid'])} on {holder['host']}"
        except (OSError, ValueError, KeyError, TypeError):
            who = "a process that is starting"
        raise ConfigError(f"trainer.default_root_dir {folder} is in use by another `caption fit` ({who}): two runs "
                          "in one folder overwrite each other's last.ckpt; wait for it to end, or give this run "
                          "another --trainer.default_root_dir") from None
    except OSError as error:
        raise ConfigError(f"trainer.default_root_dir {folder}: cannot lock {RUN_LOCK} there "
                          f"({error.strerror or error}): give a folder on a disk this process can write") from None
    CLAIMED.append((lock, folder))
    try:
        (folder / RUN_HOLDER).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}),
                                         encoding="utf-8")
    except OSError:  # who holds it is for the message of a second run only
        pass


@contextlib.contextmanager
def releasing_run_folders() -> Iterator[None]:
    """While inside, run folders may be claimed (`claim_run_folder`); each is released on the way out, however the
    command ends."""
    try:
        yield
    finally:
        while CLAIMED:
            lock, folder = CLAIMED.pop()
            with contextlib.suppress(OSError):
                (folder / RUN_HOLDER).unlink(missing_ok=True)
            lock.release()
