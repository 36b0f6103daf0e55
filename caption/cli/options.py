"""The parser of every command that is not Lightning's, with the same option names as `caption fit/test/predict`.

Every command parses its options with jsonargparse, the library under LightningCLI: `CommandParser` is jsonargparse's
parser with errors in one line and `--print_config`, and a knob a Lightning command has too is spelled as it spells
it, dotted name included (`--ckpt_path`, `--model.decoding.beam_size`, `--data.eval_batch_size`,
`--trainer.accelerator`, `--predictions.out` ...), and read back under that name (`args.predictions.out`). Settings
dataclasses give their options (`add_settings`: `DecodingSettings`, `PretrainingSettings`), never copied. The knobs,
command by command: docs/attention.md#one-name-per-knob.
"""

import argparse
import re
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal, NoReturn, get_args, get_origin

from jsonargparse import ArgumentParser, Namespace

from caption.config.suggestions import did_you_mean
from caption.errors import ConfigError
from caption.model.decoding import DecodingSettings
from caption.model.precision import checked_precision

ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


class CommandParser(ArgumentParser):
    """jsonargparse's parser, with errors in one line, where `--print_config` prints the options resolved (defaults
    filled in) as YAML and exits, as `caption fit`'s does. A default derived from other options (`derived_defaults`:
    dotted key -> its function of them) is filled in on parsing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no abbreviations: an option is read by its whole name only (`--model.decoding.beam` is refused, not read as
        # `--model.decoding.beam_size`); the help as argparse's (each help says its default); `--print_config` is
        # this parser's own (jsonargparse's comes with a config file of the command's options, which --config is not)
        self.option_names: set[str] = set()  # every option added, for "did you mean"
        super().__init__(*args, **{"allow_abbrev": False, "formatter_class": argparse.HelpFormatter,
                                   "print_config": None, **kwargs})
        self.derived_defaults: dict[str, Callable[[Namespace], Any]] = {}
        self.add_argument("--print_config", action="store_true",
                          help="print the options as resolved (defaults filled in) as YAML, then exit")

    def add_argument(self, *names: str, **kwargs: Any) -> Any:
        self.option_names.update(name for name in names if name.startswith("-"))
        return super().add_argument(*names, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        """One line, as the Lightning commands' errors (no usage block first), saying where the options are read, with
        a "did you mean" for a mistyped option."""
        self.exit(2, f"caption: error: {' '.join(message.split())}{suggested(message, self.option_names)} (every "
                     f"option: `{self.prog} --help`)\n")

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        parsed = super().parse_args(*args, **kwargs)
        for key, derive in self.derived_defaults.items():
            if parsed[key] is None:
                parsed[key] = derive(parsed)
        if parsed.print_config:
            import yaml

            shown = {key: value for key, value in parsed.as_dict().items() if key != "print_config"}
            sys.stdout.write(yaml.safe_dump(plain(shown), sort_keys=False, allow_unicode=True))
            self.exit()
        return parsed


def suggested(message: str, known: set[str]) -> str:
    """"; did you mean --x?" for the first unknown option an "unrecognized arguments" `message` names that is close to
    a known one, else ""."""
    if not message.lower().startswith("unrecognized arguments:"):
        return ""
    unknown = [word.split("=", 1)[0] for word in message.split(":", 1)[1].split() if word.startswith("-")]
    suggestions = [did_you_mean(option, known) for option in unknown]
    return next((f"; {suggestion}" for suggestion in suggestions if suggestion), "")


def plain(value: Any) -> Any:
    """A parsed value as YAML writes it: a file's name as its text."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return str(value) if isinstance(value, Path) else value


def add_config(parser: ArgumentParser, *, help: str, **kwargs: Any) -> None:
    """-c/--config, as `caption fit` spells it."""
    parser.add_argument("-c", "--config", help=help, **kwargs)


def path(text: str) -> Path:
    """The type of an option that names a file or folder (not `Path` itself: jsonargparse's check of a `Path` fails on a
    name that is not UTF-8, which the file system allows)."""
    return Path(text)


def positive_int(text: str) -> int:
    """The type of an option that counts: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def whole_number(text: str) -> int:
    """The type of an option that counts where 0 is off: an integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (0: off), got {value}")
    return value


def add_checkpoint(parser: ArgumentParser) -> None:
    """--ckpt_path: a checkpoint written by `caption fit`, a run folder, or a URL with its --sha256."""
    parser.add_argument("--ckpt_path", required=True, metavar="CKPT",
                        help="checkpoint written by `caption fit`, its run folder (the newest best-*.ckpt, else "
                             "last.ckpt, as `caption compare` picks it), a folder of `caption export`, a Hugging Face "
                             "Hub model owner/name[@revision], or an https URL (alias: --ckpt)")
    parser.add_argument("--sha256", default=None, help="the URL's expected SHA-256 (downloaded once, then checked)")


def add_settings(parser: ArgumentParser, settings: type, group: str, *, default: str | None = None) -> None:
    """A `--<group>.<field>` per field of the dataclass `settings`, with its docstring's line as help and the field's
    type (an int counts: >= 1, or >= 0 where its default is 0, off; a Literal's values are the choices); each
    defaults to the field's default, or with `default` (what stands instead, for --help) to None: `given` then
    collects those given."""
    helps = settings_help(settings)
    for field in fields(settings):
        choices = get_args(field.type) if get_origin(field.type) is Literal else None
        counts = positive_int if field.default != 0 else whole_number
        kind = str if choices else counts if field.type is int else field.type
        value = None if default is not None else field.default
        parser.add_argument(f"--{group}.{field.name}", type=kind, **({"choices": choices} if choices else {}),
                            default=value, metavar=field.name.upper(),
                            help=f"{helps[field.name].rstrip('.')} (default: {default or value})")


def given(args: Namespace, group: str) -> dict[str, Any]:
    """The settings of `group` (`add_settings`) given on the command line, by field name."""
    return {name: value for name, value in vars(args[group]).items() if value is not None}


def add_decoding(parser: ArgumentParser, *, default: str = "the checkpoint's") -> None:
    """`--model.decoding.<setting>` per field of `DecodingSettings`, as `caption test` takes them, each defaulting to
    the checkpoint's; `given(args, "model.decoding")` collects those given."""
    add_settings(parser, DecodingSettings, "model.decoding", default=default)


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


def one_device(text: str | int) -> int | None:
    """The type of --trainer.devices as Lightning reads it, for one device: "auto" or 1 (None: the first), or one
    GPU's index as [N] or "N," (N; an index already read is kept: jsonargparse checks a parsed value again)."""
    if isinstance(text, int):
        return text
    text = text.strip()
    if text in ("auto", "1"):
        return None
    found = re.fullmatch(r"\[\s*(\d+)\s*\]|(\d+)\s*,", text)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"this command runs on one device: 1 or auto (the first), or one GPU's index as [N] or N, (got {text})")
    return int(found.group(1) or found.group(2))


def add_device(parser: ArgumentParser) -> None:
    """--trainer.accelerator, --trainer.devices and --trainer.precision, as `caption fit` takes them, for one device
    (`device`)."""
    parser.add_argument("--trainer.accelerator", default="auto", choices=ACCELERATORS,
                        help="where to run, as for `caption fit`: auto (the GPU if there is one), cpu, gpu (= cuda), "
                             "mps (default: auto)")
    parser.add_argument("--trainer.devices", type=one_device, default=None, metavar="DEVICES",
                        help="the device, as for `caption fit` but one only: 1 or auto (the first), or a GPU's index "
                             "as [N] or N, (e.g. [1]: cuda:1) (default: auto)")
    parser.add_argument("--trainer.precision", type=precision_type, default="auto",
                        metavar="PRECISION", help="32-true, or bf16-mixed (the matrix products in bf16), as for "
                                                  "`caption fit`; auto: bf16-mixed where the device has bf16 matrix "
                                                  "units (docs/measurements.md#bf16-against-fp32) (default: auto)")


def precision_type(text: str) -> str:
    """The type of --trainer.precision (`caption.model.precision.checked_precision`)."""
    try:
        return checked_precision(text, key="--trainer.precision")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def device(args: Namespace) -> str:
    """The torch device of --trainer.accelerator and --trainer.devices: "auto" (the GPU if there is one), "cpu",
    "cuda", "cuda:1", "mps"."""
    accelerator, index = args.trainer.accelerator, args.trainer.devices
    if index is not None and accelerator in ("cpu", "mps"):
        raise ConfigError(f"--trainer.devices [{index}] is a GPU's index: use it with --trainer.accelerator gpu "
                          "(or auto)")
    if accelerator in ("cpu", "mps"):
        return accelerator
    if index is not None:
        return f"cuda:{index}"
    return "cuda" if accelerator in ("gpu", "cuda") else "auto"


def add_batch_size(parser: ArgumentParser, *, default: int | None) -> None:
    shown = default if default is not None else "the data's eval_batch_size"
    parser.add_argument("--data.eval_batch_size", type=positive_int, default=default, metavar="EVAL_BATCH_SIZE",
                        help=f"images per batch (default: {shown})")


def add_output(parser: CommandParser, *, help: str, default: str,
               derived: Callable[[Namespace], Path] | None = None) -> None:
    """--predictions.out: the folder a command writes its results to, as predict's. `derived`: the default's function
    of the other options, which `default` describes in --help."""
    parser.add_argument("--predictions.out", type=path, default=None if derived else Path(default), metavar="OUT",
                        help=f"{help} (default: {default})")
    if derived is not None:
        parser.derived_defaults["predictions.out"] = derived


def evaluation_folder(args: Namespace) -> Path:
    """eval/<run name>: the default --predictions.out of `caption evaluate`."""
    return Path("eval") / run_name(args.ckpt_path)


def run_name(ckpt_path: str) -> str:
    """The name of a checkpoint's run: its run folder's (runs/x, runs/x/checkpoints/best.ckpt: x), else the name of
    the folder or file given, without its suffix (a model folder's, a URL's file)."""
    path = Path(urllib.parse.urlparse(ckpt_path).path) if "://" in ckpt_path else Path(ckpt_path).absolute()
    if path.suffix == ".ckpt" or path.is_file():
        return path.parent.parent.name if path.parent.name == "checkpoints" else path.stem
    return path.name or "checkpoint"


def add_num_captions(parser: ArgumentParser, *, default: int | None, help: str) -> None:
    """--predictions.num_captions: each image's n best captions, as `caption predict` writes them."""
    parser.add_argument("--predictions.num_captions", type=positive_int, default=default, metavar="NUM_CAPTIONS",
                        help=help)


def add_beam_sizes(parser: ArgumentParser) -> None:
    """--beam_sizes: decode the split at each of these beam sizes too, for BLEU-4, CIDEr-D and attention accuracy
    against the beam size (`given_beam_sizes` checks them)."""
    parser.add_argument("--beam_sizes", type=int, nargs="+", default=None, metavar="BEAM_SIZE",
                        help="also decode the split at each of these beam sizes (1: greedy), reusing each batch's "
                             "encoding, and write BLEU-4, CIDEr-D and attention accuracy against the beam size: a "
                             "table, beam_sizes.png and beam_sizes.json (default: none)")


def given_beam_sizes(args: Namespace) -> tuple[int, ...]:
    """The beam sizes of --beam_sizes, ascending, each once (none without it); one below 1 is refused in one line."""
    if args.beam_sizes is None:
        return ()
    wrong = [size for size in args.beam_sizes if size < 1]
    if wrong:
        raise ConfigError(f"--beam_sizes must each be >= 1, got {' '.join(map(str, wrong))}")
    return tuple(sorted(set(args.beam_sizes)))


def add_scoring(parser: ArgumentParser) -> None:
    """--split and --meteor_timeout, for the commands that score a split."""
    parser.add_argument("--split", default="test", choices=("val", "test"), help="split to caption (default: test)")
    parser.add_argument("--meteor_timeout", type=float, default=None,
                        help="seconds before METEOR counts as missing "
                             "(default: caption.evaluation.metrics.METEOR_TIMEOUT)")


def add_split_evaluation(parser: CommandParser, *, out: str, out_default: str, data: str, decoding: str,
                         derived: Callable[[Namespace], Path] | None = None) -> None:
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
