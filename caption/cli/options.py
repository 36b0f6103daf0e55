"""What the argparse commands share: the same option names as `caption fit/test/predict`, with the same checks.

A knob a Lightning command has too is spelled as it spells it, dotted name included (`--ckpt_path`,
`--model.decoding.beam_size`, `--data.eval_batch_size`, `--trainer.accelerator`, `--predictions.out` ...), so a command
line learnt in one command works in the others and every `--help` shows one name per knob. The knobs, command by
command: docs/attention.md#one-name-per-knob.
"""

import argparse
import re
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal, NoReturn, get_args, get_origin

from caption.errors import ConfigError
from caption.model.decoding import DecodingSettings
from caption.model.precision import checked_precision

ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, with errors in one line, where `--print_config` prints the options resolved (defaults filled
    in) as YAML and exits, as `caption fit`'s does. A default derived from other options (`derived_defaults`: dest ->
    its function of them) is filled in on parsing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no abbreviations: an option is read by its whole name only (`--model.decoding.beam` is refused, not read as
        # `--model.decoding.beam_size`)
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})
        self.derived_defaults: dict[str, Callable[[argparse.Namespace], Any]] = {}
        self.add_argument("--print_config", action="store_true",
                          help="print the options as resolved (defaults filled in) as YAML, then exit")

    def error(self, message: str) -> NoReturn:
        """One line, as the Lightning commands' errors (no usage block first), saying where the options are read."""
        self.exit(2, f"caption: error: {message} (every option: `{self.prog} --help`)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed = super().parse_args(args, namespace)
        for dest, derive in self.derived_defaults.items():
            if getattr(parsed, dest) is None:
                setattr(parsed, dest, derive(parsed))
        if parsed.print_config:
            sys.stdout.write(resolved_options(self, parsed))
            self.exit()
        return parsed


def resolved_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The options of a parsed command line as YAML, nested by their dotted names (`--predictions.out` under
    `predictions:`), as `caption fit --print_config` prints its own."""
    import yaml

    def plain(value: Any) -> Any:
        return [plain(item) for item in value] if isinstance(value, list) else \
            str(value) if isinstance(value, Path) else value

    options: dict[str, Any] = {}
    for action in parser._actions:
        if action.dest in (argparse.SUPPRESS, "help", "print_config"):
            continue
        name = max(action.option_strings, key=len).lstrip("-") if action.option_strings else action.dest
        *groups, key = name.split(".")
        level = options
        for group in groups:
            level = level.setdefault(group, {})
        level[key] = plain(getattr(args, action.dest))
    return yaml.safe_dump(options, sort_keys=False, allow_unicode=True)


def add_config(parser: argparse.ArgumentParser, *, help: str, **kwargs: Any) -> None:
    """-c/--config, as `caption fit` spells it."""
    parser.add_argument("-c", "--config", help=help, **kwargs)


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
                             "last.ckpt, as `caption compare` picks it), a folder of `caption export`, a Hugging Face "
                             "Hub model owner/name[@revision], or an https URL (alias: --ckpt)")
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
    parser.add_argument("--trainer.precision", dest="precision", type=precision_type, default="auto",
                        metavar="PRECISION", help="32-true, or bf16-mixed (the matrix products in bf16), as for "
                                                  "`caption fit`; auto: bf16-mixed where the device has bf16 matrix "
                                                  "units (docs/measurements.md#bf16-against-fp32) (default: auto)")


def precision_type(text: str) -> str:
    """argparse type of --trainer.precision (`caption.model.precision.checked_precision`)."""
    try:
        return checked_precision(text, key="--trainer.precision")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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


def add_output(parser: CommandParser, *, help: str, default: str,
               derived: Callable[[argparse.Namespace], Path] | None = None) -> None:
    """--predictions.out: the folder a command writes its captions (and the rest of its results) to, as predict's.
    `derived`: the default's function of the other options, which `default` describes in --help."""
    parser.add_argument("--predictions.out", dest="out", type=Path, default=None if derived else Path(default),
                        metavar="OUT", help=f"{help} (default: {default})")
    if derived is not None:
        parser.derived_defaults["out"] = derived


def evaluation_folder(args: argparse.Namespace) -> Path:
    """eval/<run name>: the default --predictions.out of `caption evaluate`."""
    return Path("eval") / run_name(args.ckpt_path)


def run_name(ckpt_path: str) -> str:
    """The name of a checkpoint's run: its run folder's (runs/x, runs/x/checkpoints/best.ckpt: x), else the name of
    the folder or file given, without its suffix (a model folder's, a URL's file)."""
    path = Path(urllib.parse.urlparse(ckpt_path).path) if "://" in ckpt_path else Path(ckpt_path).absolute()
    if path.suffix == ".ckpt" or path.is_file():
        return path.parent.parent.name if path.parent.name == "checkpoints" else path.stem
    return path.name or "checkpoint"


def add_num_captions(parser: argparse.ArgumentParser, *, default: int | None, help: str) -> None:
    """--predictions.num_captions: each image's n best captions, as `caption predict` writes them."""
    parser.add_argument("--predictions.num_captions", dest="num_captions", type=positive_int, default=default,
                        metavar="NUM_CAPTIONS", help=help)


def add_beam_sizes(parser: argparse.ArgumentParser) -> None:
    """--beam_sizes: decode the split at each of these beam sizes too, for BLEU-4, CIDEr-D and attention accuracy
    against the beam size (`given_beam_sizes` checks them)."""
    parser.add_argument("--beam_sizes", type=int, nargs="+", default=None, metavar="BEAM_SIZE",
                        help="also decode the split at each of these beam sizes (1: greedy), reusing each batch's "
                             "encoding, and write BLEU-4, CIDEr-D and attention accuracy against the beam size: a "
                             "table, beam_sizes.png and beam_sizes.json (default: none)")


def given_beam_sizes(args: argparse.Namespace) -> tuple[int, ...]:
    """The beam sizes of --beam_sizes, ascending, each once (none without it); one below 1 is refused in one line."""
    if args.beam_sizes is None:
        return ()
    wrong = [size for size in args.beam_sizes if size < 1]
    if wrong:
        raise ConfigError(f"--beam_sizes must each be >= 1, got {' '.join(map(str, wrong))}")
    return tuple(sorted(set(args.beam_sizes)))


def add_scoring(parser: argparse.ArgumentParser) -> None:
    """--split and --meteor_timeout, for the commands that score a split."""
    parser.add_argument("--split", default="test", choices=("val", "test"), help="split to caption (default: test)")
    parser.add_argument("--meteor_timeout", type=float, default=None,
                        help="seconds before METEOR counts as missing "
                             "(default: caption.evaluation.metrics.METEOR_TIMEOUT)")


def add_split_evaluation(parser: CommandParser, *, out: str, out_default: str, data: str, decoding: str,
                         derived: Callable[[argparse.Namespace], Path] | None = None) -> None:
    """The options of the commands that caption and score a split (`evaluate`, `compare`): --predictions.out (`out`:
    what the folder holds; `out_default`, `derived`: as for `add_output`), -c/--config (`data`: whose data settings
    stand when it is not given), the decoding settings (their `decoding` default), --data.eval_batch_size, the
    device, --split, --meteor_timeout and --beam_sizes."""
    add_output(parser, help=f"folder for {out}", default=out_default, derived=derived)
    add_config(parser, default=None, help=f"YAML with a `data:` section (default: {data})")
    add_decoding(parser, default=decoding)
    add_batch_size(parser, default=None)
    add_device(parser)
    add_scoring(parser)
    add_beam_sizes(parser)

