"""`caption fit | validate | test | predict --help`: the project's own options, each in a line, at once.

    caption fit --help          # the options of the model, the data, the Trainer's basics: under 200 lines
    caption fit --help-all      # every option, Lightning's Trainer, checkpoint and scheduler ones included

The help of these commands is LightningCLI's parser, and building it imports lightning, torch and torchvision and reads
the signature of every class it configures: seconds before the first line. So the short help is composed from that
parser once (`compose`: the options of `SHORT`, grouped by part, each with the first sentence of its help and its
default) and kept as data beside this module (`short_help.json`); `caption <command> --help` renders it
(`render`, at the terminal's width) without importing Lightning. The defaults are the code's: a config's values are
what `--print_config` prints. `tests/cli/test_short_help.py` checks that the file is what the parser gives now;
`python -m caption.cli.lightning.short_help` rewrites it. `--help-all` is jsonargparse's own help, in full. Why:
docs/console.md#help.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import sys
import textwrap
from typing import Any

from caption.cli.lightning.kept_help import KEPT, kept, option_names
from caption.errors import ConfigError
from caption.model.decoding import DECODING_EXTRAS

HELP = ("-h", "--help")
FULL_HELP = "--help-all"
# the options of the short help: every option of the project's own groups, and these of Lightning's
PROJECT_GROUPS = ("--model.", "--data.", "--predictions.")
GENERAL = ("--config", "--print_config", "--seed_everything", "--ckpt_path", "--keep_freed_memory")
TRAINER_BASICS = ("accelerator", "devices", "num_nodes", "precision", "default_root_dir", "enable_progress_bar")
# fit's: how long it trains, how often it validates and logs; its checkpoints and stopping (a group of their own)
FIT_TRAINER = ("max_epochs", "max_time", "max_steps", "check_val_every_n_epoch", "val_check_interval",
               "log_every_n_steps")
RUN = ("--checkpoint.monitor", "--checkpoint.mode", "--periodic_checkpoint.every_n_train_steps",
       "--early_stopping.patience")
TRAINING = (*(f"--trainer.{name}" for name in FIT_TRAINER), *RUN)
# the splits whose batches each command runs: --trainer.limit_<split>_batches (a short run, a smoke test)
LIMITED_SPLITS = {"fit": ("train", "val", "test"), "validate": ("val",), "test": ("test",), "predict": ("predict",)}
# a data source's settings (`--data.source.help <source>`); decoding's options beyond the beam (--help-all)
LEFT_OUT = ("--data.source.init_args", *(f"--model.decoding.{name}" for name in DECODING_EXTRAS))
# jsonargparse's help of --config, as `caption` reads it (caption.config.packaged)
OWN_HELP = {"--config": "a YAML config: a file, or a packaged config or named run by name (shapes_soft, coco_hard, "
                        "...); repeat it to compose them, a later one overriding an earlier one",
            "--trainer.precision": "auto (= unset: bf16-mixed where the device has bf16 matrix units, else 32-true), "
                                   "32-true, bf16-mixed or 16-mixed (caption.training.trainer)"}
HELP_COLUMN = 40  # where an option's help starts, when its name leaves room (else on the next line)
# the end of a sentence (not of "e.g." or "i.e."), before the next one starts
SENTENCE_END = re.compile(r"(?<![ei]\.[ge]\.)(?<=[.!?])\s+(?=[A-Z`\"(])")


def first_sentence(text: str | None) -> str:
    """The first sentence of an option's help, on one line (Lightning's ``"last"`` as "last")."""
    words = " ".join((text or "").split()).replace("``", "")
    return SENTENCE_END.split(words, maxsplit=1)[0]


def shown_default(value: Any) -> str | None:
    """A default as a config writes it (true, [16, 32]); None when there is none to show (unset: its help says what
    that means)."""
    if value is None or value == argparse.SUPPRESS or isinstance(value, dict) or hasattr(value, "as_dict"):
        return None
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, tuple | list):
        return json.dumps(list(value))
    return str(value)


def in_short_help(option: str, command: str) -> bool:
    trainer = option.removeprefix("--trainer.")
    limits = {f"limit_{split}_batches" for split in LIMITED_SPLITS.get(command, ())}
    return (option in GENERAL or trainer in TRAINER_BASICS or trainer in limits
            or option in TRAINING and command == "fit"
            or option.startswith(PROJECT_GROUPS) and not option.startswith(LEFT_OUT))


def option_line(action: argparse.Action) -> list[str]:
    """[its names (not the `+` ones that append to a list), its help in a sentence with its default]."""
    invocation = ", ".join(option for option in action.option_strings if not option.endswith("+"))
    default = shown_default(action.default)
    help_text = OWN_HELP.get(long_name(action)) or first_sentence(action.help).rstrip(".")
    if default is not None:
        help_text += f" (default: {default})"
    return [invocation, help_text]


def group_title(group: argparse._ArgumentGroup, options: list[str]) -> str:
    """The group's title, led by the config key its options share (`model.encoder: the CNN (...)`)."""
    title = " ".join((group.title or "").split()).rstrip(":.")
    keys = [option.removeprefix("--").split(".")[:-1] for option in options]
    shared = [parts[0] for parts in itertools.takewhile(lambda parts: len(set(parts)) == 1, zip(*keys))]
    return f"{'.'.join(shared)}: {title}" if shared else title


def compose(parser: argparse.ArgumentParser, command: str, *, description: str) -> dict[str, Any]:
    """The short help of `command` from its parser (LightningCLI's subcommand parser): {usage, description, groups:
    [{title, options: [[name and value, help]]}]}."""
    general = [["-h, --help", "this help, the project's options (defaults as the code sets them) and exit"],
               [FULL_HELP, "every option, in full (Lightning's Trainer, checkpoint and scheduler ones too) and exit"]]
    groups: list[dict[str, Any]] = []
    trainer, run = [], []
    for group in parser._action_groups:
        actions = [action for action in group._group_actions
                   if any(in_short_help(option, command) for option in action.option_strings)
                   and not is_config_file(action)]
        for action in actions:
            name = long_name(action)
            if name in GENERAL:
                general.append(option_line(action))
            elif name.startswith("--trainer."):
                trainer.append(option_line(action))
            elif name in RUN:
                run.append(option_line(action))
        own = [action for action in actions if long_name(action).startswith(PROJECT_GROUPS)]
        if own:
            groups.append({"title": group_title(group, [long_name(action) for action in own]),
                           "options": [option_line(action) for action in own]})
    return {
        "usage": f"caption {command} [-h] [{FULL_HELP}] [-c CONFIG] [--print_config] [options]",
        "description": description,
        "groups": [{"title": "options", "options": general},
                   {"title": "trainer: the basics (every Trainer option: --help-all)", "options": trainer},
                   *groups,
                   *([{"title": "checkpoints and stopping", "options": run}] if run else [])],
    }


def long_name(action: argparse.Action) -> str:
    return next(option for option in action.option_strings if option.startswith("--"))


def is_config_file(action: argparse.Action) -> bool:
    """`--model.encoder CONFIG`: a group's own config file (a line of its own in the full help only)."""
    return long_name(action) != "--config" and (
        action.metavar == "CONFIG" or (action.help or "").startswith("Path to a configuration file"))


def render(short: dict[str, Any], *, width: int | None = None) -> str:
    """The short help as text `width` columns wide (the terminal's, as argparse takes it)."""
    width = width or max(60, shutil.get_terminal_size().columns - 2)
    lines = [f"usage: {short['usage']}", "", *textwrap.wrap(short["description"], width), ""]
    lines += textwrap.wrap(f"Each option with the first sentence of its help; every option, in full: {FULL_HELP}. "
                           "A config's values, composed: --print_config.", width)
    for group in short["groups"]:
        lines += ["", f"{group['title']}:"]
        for invocation, help_text in group["options"]:
            name = f"  {invocation}"
            if len(name) + 2 <= HELP_COLUMN:
                wrapped = textwrap.wrap(help_text, width - HELP_COLUMN) or [""]
                lines.append(name.ljust(HELP_COLUMN) + wrapped[0])
                lines += [" " * HELP_COLUMN + line for line in wrapped[1:]]
            else:
                lines.append(name)
                lines += textwrap.wrap(help_text, width, initial_indent=" " * HELP_COLUMN,
                                       subsequent_indent=" " * HELP_COLUMN)
    return "\n".join(lines) + "\n"


def lightning_arguments(command: str, argv: list[str]) -> list[str]:
    """The arguments of `caption <command>` for LightningCLI: `--help` (or -h, wherever it is among them, unless
    --help-all is too) answered here with the kept short help (exit status 0, as argparse's help); `--help-all` as
    jsonargparse's `--help`."""
    if FULL_HELP in argv:
        return ["--help" if arg == FULL_HELP else arg for arg in argv]
    if any(arg in HELP for arg in argv):
        sys.stdout.write(render(kept()[command]))
        sys.exit(0)
    return argv


def given_options(argv: list[str]) -> list[str]:
    """The option names among command-line arguments `argv` (`--x=1` as `--x`)."""
    return [arg.split("=", 1)[0] for arg in argv if arg.startswith("--")]


def unknown_project_option(option: str, known: set[str]) -> bool:
    """Whether `option` is under the project's own groups yet not one the short help lists, in a group whose options
    it lists (nor a group's own config, `--model.encoder`, nor a data source's settings or a class's `.help`; a group
    listed by its config alone, such as `--model.hard`, whose settings the short help leaves out, is left to
    LightningCLI's parser)."""
    parent = option.rsplit(".", 1)[0]
    listed_group = any(name.startswith(parent + ".") and not name.endswith(".help") for name in known)
    return (option.startswith(PROJECT_GROUPS) and not option.startswith(LEFT_OUT) and option not in known
            and not option.endswith(".help") and not any(name.startswith(option + ".") for name in known)
            and listed_group)


def check_before_lightning(command: str, argv: list[str]) -> None:
    """Refuse, before Lightning is imported, a `--config` that names no file nor packaged config, and an option of the
    project's groups that the short help does not list, each with a "did you mean" where one is close
    (a ConfigError); any other option is left to LightningCLI's parser."""
    from caption.config.packaged import config_values, configs
    from caption.config.suggestions import did_you_mean

    for value in config_values(argv):
        configs(value)
    known = option_names(command)
    for option in given_options(argv):
        if unknown_project_option(option, known):
            suggestion = did_you_mean(option, known)
            raise ConfigError(f"unrecognized arguments: {option}{'; ' + suggestion if suggestion else ''} (every "
                              f"setting: `caption {command} --help-all`)")


def composed() -> dict[str, Any]:
    """The short help of every command LightningCLI's parser reads, from the parser it builds now."""
    from caption.cli import COMMANDS, SHORT_HELP
    from caption.cli.lightning.commands import lightning_parsers

    parsers = lightning_parsers()
    return {name: compose(parsers[name], name, description=COMMANDS[name][1]) for name in SHORT_HELP}


if __name__ == "__main__":  # rewrite short_help.json from the parser
    from caption.io.outputs import write_json

    write_json(KEPT, composed())
    print(f"wrote {KEPT}")
