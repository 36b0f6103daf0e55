"""Lightning's lines in the console of `caption fit | validate | test | predict`: on stdout beside the command's
results, each on a line of its own, and only those the researcher needs.

`lightning_console` holds for every such command: Lightning's log lines (its own, and the project's `rank_zero_info`
lines, the example captions among them) go to stdout, through `caption.config.console.write_line`, so that a progress
bar is never glued to them and the end summary (stdout too) follows them in order; unless `caption -v`, Lightning's
warning about modules in eval mode is left out, because the only such modules are a frozen encoder's, in eval mode on
purpose (`caption.model.encoder`: its BatchNorm keeps the statistics it was trained with), and its warning that under
bf16-mixed its summary cannot size the model in MB (the one-line summary gives no size), and its line naming the mixed
precision (the project's own line names the precision, mixed or not: the model's line in `fit`, `scoring in precision
...` in `validate` and `test`); in `validate` and `test`, its warnings that no seed was given (scoring a checkpoint
draws nothing at random) and that the callbacks which wrote the checkpoint are not all there (their states matter to
resuming a fit, not to scoring). `quiet_lightning` leaves out Lightning's info lines altogether (devices, seed, tips,
restoring states) and its warnings about training-only state of the checkpoint: `caption predict` says what it wrote,
and `fit`'s test of the best checkpoint says it in the end summary.
"""

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

from caption.config.console import ConsoleHandler

PACKAGE = Path(__file__).resolve().parents[2]  # caption/
# where Lightning logs its info lines (rank_zero_info; seed_everything)
LIGHTNING_INFO_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                          "lightning.fabric.utilities.seed")
LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")  # the two Lightning gives a stream handler on import
FROZEN_IN_EVAL_MODE = r"Found \d+ module\(s\) in eval mode at the start of training"  # Lightning's words
# Lightning's words under bf16-mixed about the model size in MB, which the one-line summary does not give, and its line
# naming the precision, which the project's line names (`caption.training.progress.ParameterCount`)
SUMMARY_PRECISION = "Precision .* is not supported by the model summary"
MIXED_PRECISION_LINE = "Automatic Mixed Precision (AMP)"
# Lightning's words when validate or test score a checkpoint: no seed_everything, and a fit's callbacks not made again
SCORING_CHATTER = ("No seed found, seed set to ", "Be aware that when using `ckpt_path`, callbacks used to create")
SCORING_COMMANDS = ("validate", "test")


class WithoutPrecisionLine(logging.Filter):
    """Leaves out Lightning's line naming the mixed precision (`MIXED_PRECISION_LINE`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return MIXED_PRECISION_LINE not in record.getMessage()


class OwnLinesOnly(logging.Filter):
    """Lets through warnings and errors, and the info lines this package logs through Lightning's loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or Path(record.pathname).is_relative_to(PACKAGE)


def writes_to_a_terminal_stream(handler: logging.Handler) -> bool:
    return type(handler) is logging.StreamHandler and handler.stream in (sys.stdout, sys.stderr, sys.__stderr__)


@contextlib.contextmanager
def lightning_console(*, verbose: bool, command: str = "fit") -> Iterator[None]:
    """Lightning's log lines on stdout, each on a line of its own; unless `verbose`, its warning about the frozen
    encoder's modules in eval mode and its line naming the mixed precision left out, and in validate and test its two
    about the seed and the checkpoint's callbacks. Lightning's handlers are given back on the way out."""
    saved = {name: logging.getLogger(name).handlers[:] for name in LIGHTNING_LOGGERS}
    for name, handlers in saved.items():  # a logger without a handler of its own (propagating to the root's) is left
        for handler in filter(writes_to_a_terminal_stream, handlers):
            ours = ConsoleHandler("stdout", level=handler.level)
            ours.setFormatter(handler.formatter)
            if not verbose:  # the project's line names it (ParameterCount)
                ours.addFilter(WithoutPrecisionLine())
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).addHandler(ours)
    try:
        with warnings.catch_warnings():
            if not verbose:
                warnings.filterwarnings("ignore", message=FROZEN_IN_EVAL_MODE)
                warnings.filterwarnings("ignore", message=SUMMARY_PRECISION)
                for chatter in SCORING_CHATTER if command in SCORING_COMMANDS else ():
                    warnings.filterwarnings("ignore", message=chatter)
            yield
    finally:
        for name, handlers in saved.items():
            logging.getLogger(name).handlers = handlers


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Lightning's own notes left out (devices, seed, tips, restoring states, warnings about training-only state
    of the checkpoint); the project's own lines still pass."""
    loggers = [logging.getLogger(name) for name in LIGHTNING_INFO_LOGGERS]
    only_ours = OwnLinesOnly()
    for logger in loggers:
        logger.addFilter(only_ours)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"lightning(_fabric|_utilities)?\.")
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(only_ours)
