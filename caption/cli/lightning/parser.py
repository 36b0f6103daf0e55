"""The parser of `caption fit | validate | test | predict`: Lightning's, named `caption`, with errors in one line.

jsonargparse prints a 100-line usage before an error; here an error is one line that names the config file it is
in. `predict`'s parser also gets `predictions:`, the writer of its captions (`caption.cli.lightning.predict_arguments`).
"""

import sys
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch.cli import LightningArgumentParser

from caption.cli.lightning.predict_arguments import add_prediction_arguments
from caption.cli.lightning.kept_help import kept, option_names
from caption.cli.options import suggested
from caption.io.outputs import write_atomically


class CaptionArgumentParser(LightningArgumentParser):
    """Lightning's parser, with errors in one line (no 100-line usage first) that name the config file."""

    config_file: Any = None  # the config file being read, named in its errors (e.g. a YAML syntax error)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("prog", "caption")  # not the module's file name
        super().__init__(*args, **kwargs)

    def add_method_arguments(self, class_type: type, method_name: str, *args: Any, **kwargs: Any) -> list[str]:
        """The arguments of a Trainer method, which LightningCLI adds to each subcommand's parser (`predict`: those of
        `Trainer.predict`), then, on `predict`'s parser, `predictions:`."""
        added = super().add_method_arguments(class_type, method_name, *args, **kwargs)
        if method_name == "predict":  # after `return_predictions`, whose default it sets
            add_prediction_arguments(self)
        return added

    def parse_path(self, cfg_path: Any, *args: Any, **kwargs: Any) -> Any:
        self.config_file = cfg_path
        try:
            return super().parse_path(cfg_path, *args, **kwargs)
        finally:
            self.config_file = None

    def save(self, namespace: Any, path: Any, *args: Any, overwrite: bool = False, multifile: bool = True,
             **kwargs: Any) -> None:
        """jsonargparse's, but one local file (SaveConfigCallback's config.yaml) is written whole with
        `write_atomically`: never through a link planted at its name, never left empty or cut short."""
        if multifile or "://" in str(path):
            return super().save(namespace, path, *args, overwrite=overwrite, multifile=multifile, **kwargs)
        if not overwrite and Path(path).is_file():
            raise ValueError(f"Refusing to overwrite existing file: {path}")
        text = self.dump(namespace, *args, **kwargs)
        write_atomically(path, text.encode("utf-8"), what="the run's config")
        return None

    def error(self, message: str, ex: Exception | None = None) -> Any:
        if not self.exit_on_error:  # jsonargparse catches these itself
            return super().error(message, ex)
        where = f"config file {self.config_file}: " if self.config_file else ""
        if message.startswith("Unexpected config:") and holds_nothing(self.config_file):  # jsonargparse's words
            message = "it holds no settings (empty, or only comments): give it `key: value` lines, or leave it out"
        known = {name for command in kept() for name in option_names(command)}  # the short help's: mistyped most
        sys.exit(f"caption: error: {where}{' '.join(message.split())}{suggested(message, known)} (every setting: "
                 "`caption fit --help-all`)")


def holds_nothing(config_file: Any) -> bool:
    """Whether `config_file` is a YAML file without settings (empty, or only comments)."""
    try:
        return config_file is not None and yaml.safe_load(Path(str(config_file)).read_text(encoding="utf-8")) is None
    except (OSError, ValueError, yaml.YAMLError):
        return False
