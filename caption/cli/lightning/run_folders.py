"""Where a Lightning run writes, decided and checked before any work: checkpoints in
`<trainer.default_root_dir>/checkpoints` (so that a restarted run finds them with `--ckpt_path last`), the loggers'
`save_dir` moved along with a `--trainer.default_root_dir` given on the command line, and every such folder created
and checked writable (`caption.io.outputs.writable_folder`), and every folder a `fit` writes checkpoints to claimed
for the run's life (`claim_run_folders`): a second `fit` writing there at once would overwrite the first's last.ckpt.
"""

import contextlib
import itertools
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from filelock import FileLock, Timeout

from caption.cli.lightning.given import given_on_command_line
from caption.errors import ConfigError
from caption.io.lock_holders import holder_text
from caption.io.outputs import OutputError, writable_folder, write_json

# in a run folder: the lock of a `fit` and who holds it (a checkpoint folder's lie beside it: `lock_files`)
RUN_LOCK, RUN_HOLDER = ".caption-fit.lock", ".caption-fit.json"
LOCK_PREFIX = ".caption-fit."  # a checkpoint folder's lock file: this, its name, .lock
OPTIONS = ("trainer.default_root_dir", "checkpoint.dirpath")  # the settings a refused run can change
CLAIMED: list[FileLock] = []  # the locks this process holds, released by `releasing_run_folders`


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


def save_dir_given(command_line: list[str]) -> bool:
    """Whether the command line names a logger's `save_dir`: `--trainer.logger.init_args.save_dir DIR`, or a
    `--trainer.logger` value whose inline settings hold one."""
    flags = [arg for arg in command_line if arg.startswith("--trainer.logger")]
    values = [value for flag, value in itertools.pairwise(command_line) if flag.startswith("--trainer.logger")]
    return any("save_dir" in arg for arg in [*flags, *values])


def logs_follow_root(config: Any, *, command_line: list[str]) -> None:
    """--trainer.default_root_dir given on the command line moves the loggers' save_dir with it (a config's
    `save_dir: runs/shapes_soft` beside `default_root_dir: runs/shapes_soft`), whatever the logger (one given on the
    command line too, `--trainer.logger caption.training.loggers.TensorBoardLogger`), unless the command line names
    the logger's save_dir itself."""
    if not given_on_command_line(command_line, "trainer.default_root_dir") or save_dir_given(command_line):
        return
    loggers = config.trainer.logger if isinstance(config.trainer.logger, list) else [config.trainer.logger]
    for logger in loggers:
        settings = getattr(logger, "init_args", None)
        if settings is not None and "save_dir" in settings:
            settings.save_dir = config.trainer.default_root_dir


def check_output_folders(config: Any, *, checkpoints: bool = True) -> None:
    """Create every folder the run writes to and check it is writable, before any work starts (the checkpoints'
    with `checkpoints`: validate and test write none)."""
    writable_folder(config.trainer.default_root_dir or os.getcwd(), what="trainer.default_root_dir")
    if checkpoints:
        writable_folder(config.checkpoint.dirpath, what="checkpoint.dirpath")
    for folder in logger_save_dirs(config.trainer.logger):
        writable_folder(folder, what="trainer.logger's save_dir")


class FitFolder(NamedTuple):
    """A folder a `fit` writes to, claimed for the run's life (`claim_run_folders`)."""

    what: str  # the setting that names it, for messages: "checkpoint.dirpath"
    folder: Path  # as the setting gives it
    locks: tuple[Path, ...]  # where its lock file may lie, the first that can hold a file (`lock_files`)


def lock_files(folder: str | Path, *, checkpoints: bool) -> tuple[Path, ...]:
    """Where the lock of `folder` lies: a run folder's inside it (RUN_LOCK); a checkpoint folder's (`checkpoints`)
    beside it in its parent, named after it (runs/x/.caption-fit.checkpoints.lock for runs/x/checkpoints), so that
    a new run's checkpoint folder holds nothing (Lightning warns of one that is not empty), or inside it where the
    parent cannot take the file (a parent this user cannot write, a name too long)."""
    inside = Path(folder) / RUN_LOCK
    real = Path(os.path.realpath(folder))
    return (real.parent / f"{LOCK_PREFIX}{real.name}.lock", inside) if checkpoints and real.name else (inside,)


def holder_file(lock: Path) -> Path:
    """The record of who holds `lock`, beside it: .caption-fit.json for .caption-fit.lock."""
    return lock.with_suffix(".json")


def fit_folders(config: Any, *, trainer: Any) -> list[FitFolder]:
    """Every folder a `fit` writes checkpoints to, each with the setting that names it: the run folder
    (`trainer.default_root_dir`), `checkpoint.dirpath` (wherever it lies: another run's checkpoint folder may be
    given as this one's) and the `dirpath` of any other ModelCheckpoint among the trainer's callbacks; each once."""
    named = [("checkpoint.dirpath", config.checkpoint.dirpath)]
    named += [("trainer.callbacks' ModelCheckpoint dirpath", callback.dirpath)
              for callback in trainer.checkpoint_callbacks if getattr(callback, "dirpath", None)]
    root = config.trainer.default_root_dir or os.getcwd()
    folders = {os.path.realpath(root): FitFolder("trainer.default_root_dir", Path(root),
                                                 lock_files(root, checkpoints=False))}
    for what, folder in named:
        if folder:
            folders.setdefault(os.path.realpath(folder),
                               FitFolder(what, Path(folder), lock_files(folder, checkpoints=True)))
    return list(folders.values())


def planted_kind(place: Path) -> str | None:
    """What is at `place` if it is anything but a plain file ("a link", "not a file"); None when it holds a file,
    nothing, or cannot be asked."""
    try:
        mode = os.lstat(place).st_mode
    except OSError:
        return None
    return "a link" if stat.S_ISLNK(mode) else None if stat.S_ISREG(mode) else "not a file"


def acquired_lock(claimed: FitFolder) -> FileLock:
    """The operating-system lock (`filelock`) of the folder `claimed`, taken at the first of its places that can hold
    a file. A folder another live `caption fit` holds is a ConfigError naming it, its setting and that process; so is
    anything but a file where a lock file goes (a link planted there is never followed), and a folder where none of
    the places can hold one."""
    what, folder, places = claimed
    failure: OSError | None = None
    for place in places:
        lock = FileLock(place, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise ConfigError(f"{what} {folder} is in use by another `caption fit` ({holder_text(holder_file(place))}"
                              "): two runs in one folder overwrite each other's last.ckpt; wait for it to end, or "
                              f"give this run another {'--' if what in OPTIONS else ''}{what}") from None
        except OSError as error:
            kind = planted_kind(place)
            if kind is not None:
                raise ConfigError(f"{what} {folder}: {place} is {kind}, where `caption fit` keeps its lock file; "
                                  "remove it and run again") from None
            failure = error
        else:
            return lock
    reason = (failure.strerror or failure) if failure is not None else "no place for it"
    raise ConfigError(f"{what} {folder}: cannot lock {places[-1].name} there ({reason}): give a folder on a disk this "
                      "process can write")


def claim_run_folders(folders: list[FitFolder]) -> None:
    """Hold the lock of each of `folders` (`acquired_lock`; as `fit_folders` gives them) until
    `releasing_run_folders` ends, with a record of who holds it beside it: the system releases a lock when its process
    ends in any way, so one left by a killed run is taken over at once. Only the first process of a run claims its
    folders: the caller asks the trainer (`trainer.is_global_zero`), as Lightning decides the ranks."""
    for claimed in folders:
        lock = acquired_lock(claimed)
        CLAIMED.append(lock)
        with contextlib.suppress(OutputError):  # who holds it is for the message of a second run only
            write_json(holder_file(Path(lock.lock_file)), {"host": socket.gethostname(), "pid": os.getpid()})


@contextlib.contextmanager
def releasing_run_folders() -> Iterator[None]:
    """While inside, run folders may be claimed (`claim_run_folders`); each is released on the way out, however the
    command ends."""
    try:
        yield
    finally:
        while CLAIMED:
            lock = CLAIMED.pop()
            with contextlib.suppress(OSError):
                holder_file(Path(lock.lock_file)).unlink(missing_ok=True)
            lock.release()
