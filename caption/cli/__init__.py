"""The `caption` command: one entry point for training, captioning, scoring and comparing.

    caption --help                                          # the commands, a line each
    caption fit --config shapes_soft           # train (Lightning), then test the best checkpoint
    caption describe --ckpt_path runs/shapes_soft photo.jpg --predictions.out figures
    caption evaluate --ckpt_path runs/shapes_soft --predictions.out eval/soft
    caption compare runs/shapes_soft runs/shapes_hard --predictions.out reports/shapes
    caption predict --ckpt_path runs/shapes_soft/checkpoints/last.ckpt --data.predict photos/

Each command is a module of `caption.cli` with its own `--help` and `main(argv)` (`COMMANDS`), and every one parses
its options with jsonargparse: fit, validate, test and predict are LightningCLI's, in the wing `caption.cli.lightning`,
and `features` parses a config with the same parser; the others are small programs on the inference layer, on
jsonargparse's parser with the same option names (`caption.cli.options`). Foreseen errors print as one
`caption: error:` line (a torchvision built for another torch too, named with both builds: `caption.io.versions`);
torch and Lightning are imported only by the commands that need them (`--version` imports torch to name its build
and the precision "auto" chooses here, not torchvision); warnings print as one
line each (`caption: warning: ...`), and `caption -v <command>` also shows the dependencies' notes
(`caption.config.console`, docs/console.md).
"""

import importlib
import sys
from collections.abc import Callable

import caption
from caption.cli.imports import import_named, without_imports
from caption.cli.lightning.short_help import check_before_lightning, lightning_arguments
from caption.config.console import console
from caption.config.suggestions import did_you_mean
from caption.errors import CaptionError
from caption.io.class_paths import named_modules
from caption.io.versions import mismatched_builds_named, version_lines

VERBOSE = ("-v", "--verbose")  # before the command: the dependencies' deprecations, tips and notes too
TERMINATED = 128 + 15  # exit status of a run stopped by SIGTERM, as a shell reports a killed process
INTERRUPTED = 128 + 2  # exit status of a command stopped by Ctrl-C (SIGINT)
# fit, validate, test and predict: LightningCLI's, with their plumbing in cli/lightning/
LIGHTNING = "lightning.commands"
SHORT_HELP = ("fit", "validate", "test", "predict", "features")  # LightningCLI's parser: --help from short_help.json

# name -> (module under caption.cli with a `main(argv)`, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "fit": (LIGHTNING, "train a model from a YAML config, then score its best checkpoint on the test split"),
    "validate": (LIGHTNING, "score a checkpoint on the validation split, inside Lightning"),
    "test": (LIGHTNING, "score a checkpoint on the test split, inside Lightning (one or many GPUs, as fit)"),
    "predict": (LIGHTNING, "caption a folder of images or a split into COCO-results JSON (one or many GPUs)"),
    "pretrain-encoder": ("pretrain_encoder", "train the config's encoder as a classifier of its labelled objects, for "
                         "model.encoder.weights"),
    "features": ("features", "run the frozen CNN once over a config's images into its feature cache"),
    "describe": ("describe", "caption images and draw where the model looked for each word"),
    "evaluate": ("evaluate", "score a checkpoint on a split with the coco-caption metrics (pycocoevalcap)"),
    "compare": ("compare", "evaluate several models (soft vs hard) on one split: table, overlays, curves"),
    "export": ("export", "a model folder to share: safetensors weights, config.json, a model card "
               "(--push: to the Hub)"),
    "serve": ("serve", "a local page: drop an image, hover a word, see where the model looked (soft and hard)"),
}


def command(name: str) -> Callable[[list[str]], None]:
    """The `main(argv)` of command `name` (imported on use: `caption --help` stays fast)."""
    module_name, _ = COMMANDS[name]
    module = importlib.import_module(f"caption.cli.{module_name}")
    if module_name == LIGHTNING:
        return lambda argv: module.main([name, *argv])
    return module.main


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join([
        "usage: caption [--version] [--help] [-v] <command> [options]",
        "",
        "Show, Attend and Tell: soft and hard attention image captioning.",
        "",
        "commands:",
        *lines,
        "",
        "-v, --verbose    also show what the dependencies say: deprecation warnings, Lightning's tips, the",
        "                 tokenizer's notes (left out by default)",
        "--import MODULE  with any command: a module of your own whose classes a config or checkpoint names (a",
        "                 class is imported only from the project, Lightning, torch, torchvision or such a module)",
        "",
        "`caption <command> --help` lists a command's options. Python: `from caption import Captioner`.",
    ])


def with_ckpt_path(args: list[str]) -> list[str]:
    """`--ckpt X` and `--ckpt=X` spelled `--ckpt_path`, the one name every command takes."""
    return ["--ckpt_path" if arg == "--ckpt" else "--ckpt_path=" + arg[7:] if arg.startswith("--ckpt=") else arg
            for arg in args]


def run(args: list[str]) -> None:
    args, imports = without_imports(args)  # --import MODULE, anywhere (before the command too, as --help lists it)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return
    if args[0] == "--version":
        print("\n".join([f"caption (show-attend-tell) {caption.__version__}", *version_lines()]))
        return
    if args[0] not in COMMANDS:
        suggestion = did_you_mean(args[0], COMMANDS)
        raise CaptionError(f"unknown command {args[0]!r}; {suggestion + ' ' if suggestion else ''}the commands are "
                           f"{', '.join(COMMANDS)} (`caption --help`)")
    name, argv = args[0], with_ckpt_path(args[1:])
    if name in SHORT_HELP:  # --help answered at once, without Lightning; --help-all by LightningCLI
        argv = lightning_arguments(name, argv)
        check_before_lightning(name, argv)  # a mistyped config name or project option: said before Lightning loads
    with named_modules(imports), mismatched_builds_named():  # a torchvision of another build: one line, at start-up
        import_named(imports)
        command(name)(argv)


class NotRaised(Exception):
    """Stands for a Lightning exception while Lightning is not loaded: then nothing can have raised it."""


def lightning_exception(name: str) -> type[BaseException]:
    """Lightning's exception `name` if a command loaded Lightning, else `NotRaised` (so that `caption --help`
    does not import Lightning only to name its exceptions; `except` evaluates this only for a raised error)."""
    exceptions = sys.modules.get("lightning.pytorch.utilities.exceptions")
    return NotRaised if exceptions is None else getattr(exceptions, name)


def main(argv: list[str] | None = None) -> None:
    """`run` (with `-v` first: in a verbose console), a foreseen error printed as one `caption: error:` line and the
    exit status set."""
    args = sys.argv[1:] if argv is None else list(argv)
    verbose = bool(args) and args[0] in VERBOSE
    try:
        with console(verbose=verbose):
            run(args[1:] if verbose else args)
    except (CaptionError, lightning_exception("MisconfigurationException")) as error:  # Lightning's name the setting
        sys.exit(f"caption: error: {' '.join(str(error).split())}")
    except OSError as error:  # a write or read the project's own checks did not foresee: name the file
        if error.filename is None:
            raise
        sys.exit(f"caption: error: {error.filename}: {error.strerror or error}")
    except lightning_exception("SIGTERMException"):  # stopped (pre-empted) after saving last.ckpt: resumable
        sys.exit(TERMINATED)
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback (files are written atomically: none is left half done)
        print("caption: stopped by Ctrl-C", file=sys.stderr)
        sys.exit(INTERRUPTED)

