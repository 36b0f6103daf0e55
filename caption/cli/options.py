"""What the argparse commands share: the same option names as `caption fit/test/predict`, with the same checks.

A knob a Lightning command has too is spelled as it spells it, dotted name included (`--ckpt_path`,
`--model.decoding.beam_size`, `--data.eval_batch_size`, `--trainer.accelerator`, `--predictions.out` ...), so a command
line learnt in one command works in the others and every `--help` shows one name per knob; the spellings of 0.1
(`--beam_size`, `--out`, `--device` ...) are refused in one line that names the new one
(`caption.legacy.settings.RENAMED_OPTIONS`). The knobs, command by command: docs/attention.md#one-name-per-knob.
"""

import argparse
import re
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal, NoReturn, get_args, get_origin

from caption.errors import ConfigError
from caption.model.decoding import DecodingSettings

ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


class CommandParser(argparse.ArgumentParser):
    """argparse's parser; an option spelled as before its rename is refused in one line naming its new spelling."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.given = list(sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        # only a refused command line is looked up among the old names (and before a missing required option is named)
        from caption.legacy.settings import renamed_option_hint

        hint = renamed_option_hint(getattr(self, "given", []), known=self._option_string_actions)
        if not hint:
            super().error(message)
        sys.exit(f"caption: error: {self.prog}: {hint}")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_checkpoint(parser: argparse.ArgumentParser) -> None:
    """--ckpt_path: a checkpoint written by `caption fit`, a run folder, or a URL with its --sha256."""
    parser.add_argument("--ckpt_path", required=True, metavar="CKPT",
                        help="checkpoint written by `caption fit`, its run folder (the newest best-*.ckpt, else "
                             "last.ckpt, as `caption compare` picks it) or its https URL (alias: --ckpt)")
    parser.add_argument("--sha256", default=None, help="the URL's expected SHA-256 (downloaded once, then checked)")


def add_decoding(parser: argparse.ArgumentParser, *, default: str = "the checkpoint's") -> None:
    """A `--model.decoding.<setting>` per field of `DecodingSettings`, as `caption test` takes them, each defaulting to
    the checkpoint's; `given_decoding` collects those given (a new decoding setting is an option here too)."""
    helps = settings_help(DecodingSettings)
    for field in fields(DecodingSettings):
        choices = get_args(field.type) if get_origin(field.type) is Literal else None
        kind = str if choices else positive_int if field.type is int else field.type
        parser.add_argument(f"--model.decoding.{field.name}", dest=f"decoding.{field.name}", type=kind,
                            choices=choices, default=None, metavar=field.name.upper(),
                            help=f"{helps[field.name].rstrip('.')} (default: {default})")


def given_decoding(args: argparse.Namespace) -> dict[str, Any]:
    """The decoding settings given on the command line (`add_decoding`), by field name."""
    return {field.name: value for field in fields(DecodingSettings)
            if (value := getattr(args, f"decoding.{field.name}")) is not None}


def settings_help(settings: type) -> dict[str, str]:
    """Each field's line of a settings dataclass's `Args:` docstring, on one line."""
    lines = (settings.__doc__ or "").partition("Args:")[2].splitlines()
    helps: dict[str, str] = {}
    for line in lines:
        found = re.match(r"\s*(\w+): (.*)", line)
        if found and found.group(1) in settings.__dataclass_fields__:
            name, helps[found.group(1)] = found.group(1), found.group(2).strip()
        elif line.strip() and helps:
            helps[name] += " " + line.strip()
    return helps


def one_device(text: str) -> int | None:
    """argparse type of --trainer.devices as Lightning reads it, for one device: "auto" or 1 (None: the first), or one
    GPU's index as [N] or "N," (N)."""
    text = text.strip()
    if text in ("auto", "1"):
        return None
    found = re.fullmatch(r"\[\s*(\d+)\s*\]|(\d+)\s*,", text)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"this command runs on one device: 1 or auto (the first), or one GPU's index as [N] or N, (got {text})")
    return int(found.group(1) or found.group(2))


def add_device(parser: argparse.ArgumentParser) -> None:
    """--trainer.accelerator and --trainer.devices, as `caption fit` takes them, for one device (`device`)."""
    parser.add_argument("--trainer.accelerator", dest="accelerator", default="auto", choices=ACCELERATORS,
                        help="where to run, as for `caption fit`: auto (the GPU if there is one), cpu, gpu (= cuda), "
                             "mps (default: auto)")
    parser.add_argument("--trainer.devices", dest="devices", type=one_device, default=None, metavar="DEVICES",
                        help="the device, as for `caption fit` but one only: 1 or auto (the first), or a GPU's index "
                             "as [N] or N, (e.g. [1]: cuda:1) (default: auto)")


def device(args: argparse.Namespace) -> str:
    """The torch device of --trainer.accelerator and --trainer.devices: "auto" (the GPU if there is one), "cpu",
    "cuda", "cuda:1", "mps"."""
    if args.devices is not None and args.accelerator in ("cpu", "mps"):
        raise ConfigError(f"--trainer.devices [{args.devices}] is a GPU's index: use it with --trainer.accelerator gpu "
                          "(or auto)")
    if args.accelerator in ("cpu", "mps"):
        return args.accelerator
    if args.devices is not None:
        return f"cuda:{args.devices}"
    return "cuda" if args.accelerator in ("gpu", "cuda") else "auto"


def add_batch_size(parser: argparse.ArgumentParser, *, default: int | None) -> None:
    shown = default if default is not None else "the data's eval_batch_size"
    parser.add_argument("--data.eval_batch_size", dest="batch_size", type=positive_int, default=default,
                        metavar="EVAL_BATCH_SIZE", help=f"images per batch (default: {shown})")


def add_output(parser: argparse.ArgumentParser, *, help: str, default: str | None = None) -> None:
    """--predictions.out: the folder a command writes its captions (and the rest of its results) to, as predict's."""
    parser.add_argument("--predictions.out", dest="out", type=Path, required=default is None,
                        default=None if default is None else Path(default), metavar="OUT",
                        help=help + ("" if default is None else f" (default: {default})"))


def add_num_captions(parser: argparse.ArgumentParser, *, default: int | None, help: str) -> None:
    """--predictions.num_captions: each image's n best captions, as `caption predict` writes them."""
    parser.add_argument("--predictions.num_captions", dest="num_captions", type=positive_int, default=default,
                        metavar="NUM_CAPTIONS", help=help)


def add_scoring(parser: argparse.ArgumentParser) -> None:
    """--split and --meteor_timeout, for the commands that score a split."""
    parser.add_argument("--split", default="test", choices=("val", "test"), help="split to caption (default: test)")
    parser.add_argument("--meteor_timeout", type=float, default=None,
                        help="seconds before METEOR counts as missing "
                             "(default: caption.evaluation.metrics.METEOR_TIMEOUT)")


def add_split_evaluation(parser: argparse.ArgumentParser, *, out: str, data: str, decoding: str) -> None:
    """The options of the commands that caption and score a split (`evaluate`, `compare`): --predictions.out (`out`:
    what the folder holds), --config (`data`: whose data settings stand when it is not given), the decoding
    settings (their `decoding` default), --data.eval_batch_size, the device, --split and --meteor_timeout."""
    add_output(parser, help=f"folder for {out}")
    parser.add_argument("--config", default=None, help=f"YAML with a `data:` section (default: {data})")
    add_decoding(parser, default=decoding)
    add_batch_size(parser, default=None)
    add_device(parser)
    add_scoring(parser)

