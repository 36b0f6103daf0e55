"""Every option explained: `caption fit --help` gives a line of help for each `--model.*` and `--data.*` option,
and `--data.source.help <source>` for each data source's settings (jsonargparse reads them from the docstrings)."""

import inspect

from jsonargparse import ArgumentParser

from caption.cli.lightning.commands import lightning_parsers
from caption.data.sources.base import CaptionSource
from caption.data.sources.karpathy import CocoSource, KarpathySource
from caption.data.synthetic.shapes import ShapesSource


def fit_parser() -> ArgumentParser:
    return lightning_parsers()["fit"]


def options_without_help(parser: ArgumentParser, prefixes: tuple[str, ...]) -> list[str]:
    """Options under `prefixes` whose help is empty (jsonargparse's own `.help` actions aside)."""
    return [option for action in parser._actions for option in action.option_strings
            if option.startswith(prefixes) and not option.endswith(".help") and not (action.help or "").strip()]


def test_every_model_and_data_option_of_fit_has_help():
    parser = fit_parser()
    options = [option for action in parser._actions for option in action.option_strings]
    assert ("--model.decoder.embed_dim" in options and "--data.batch_size" in options
            and "--keep_freed_memory" in options)
    assert options_without_help(parser, ("--model.", "--data.", "--keep_freed_memory")) == []


def test_the_help_is_each_arguments_own_line():
    """A docstring jsonargparse cannot parse leaves every option of the class without help: one line each."""
    helps = {option: action.help for action in fit_parser()._actions for option in action.option_strings}
    assert helps["--model.decoder.hidden_dim"].startswith("n, the LSTM size")
    assert helps["--model.attention.gate"].startswith("use the gate β")
    assert "--data.encoder" not in helps, "linked from model.encoder.name by the CLI"


def sources() -> list[type[CaptionSource]]:
    """Every concrete data source of the package (the tests' own sources aside)."""
    found, todo = [], [CaptionSource]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if not inspect.isabstract(cls) and cls.__module__.startswith("caption."):
            found.append(cls)
    return found


def test_every_data_source_setting_has_help():
    assert {ShapesSource, KarpathySource, CocoSource} <= set(sources())
    for source in sources():
        parser = ArgumentParser()
        parser.add_class_arguments(source, "source")
        assert options_without_help(parser, ("--source.",)) == [], source.__name__
