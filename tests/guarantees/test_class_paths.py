"""One rule for class paths in every command: a class a config names is resolved by importing only the project,
Lightning, torch, torchvision, or a module the user named on the command line (`--import MODULE`, or a class path
given there). A config naming a module of another installed package is refused in one line naming the file, the key
and the value, before anything is imported: the planted module, which writes a marker file when imported, never is."""

import os
import sys
from pathlib import Path

import pytest
import yaml
from kit.cli import failed
from kit.data import write_image
from kit.planted import planted_modules
from kit.tiny import config, run_args

MODULE = "planted_config_module"
THING = f"{MODULE}.Thing"


@pytest.fixture(autouse=True)
def marker(tmp_path, monkeypatch) -> Path:
    """The file the planted module (on the import path) writes when it is imported."""
    with planted_modules(tmp_path, monkeypatch, [MODULE]) as marker:
        yield marker


def refused(marker: Path) -> None:
    assert not marker.exists(), "a module named by a config was imported"
    assert MODULE not in sys.modules


# where a config names a class, and how the message spells the key
KEYS = {
    "data.source": ({"data": {"source": {"class_path": THING}}}, "data.source.class_path"),
    "trainer.callbacks": ({"trainer": {"callbacks": [{"class_path": THING}]}}, "trainer.callbacks[0].class_path"),
    "trainer.logger": ({"trainer": {"logger": {"class_path": THING, "init_args": {}}}}, "trainer.logger.class_path"),
    "lr_scheduler": ({"lr_scheduler": {"class_path": THING}}, "lr_scheduler.class_path"),
}


def command(name: str, tmp_path: Path, *configs: str) -> list[str]:
    """`caption <name>` on the shapes config, then `configs`, writing under tmp_path."""
    given = [item for file in configs for item in ("--config", file)]
    if name == "features":
        return ["features", *config("shapes_soft"), *given]
    if name == "predict":
        images = write_image(tmp_path / "images" / "photo.png").parent
        return ["predict", "--ckpt_path", str(tmp_path / "none.ckpt"), *given, "--data.predict", str(images)]
    return [name, *config("shapes_soft"), *given, *run_args(tmp_path / "run")]


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("name", ["fit", "validate", "test", "predict", "features"])
def test_a_config_naming_a_foreign_module_is_refused_before_it_is_imported(tmp_path, marker, name, key):
    settings, spelled = KEYS[key]
    file = tmp_path / "borrowed.yaml"
    file.write_text(yaml.safe_dump(settings))
    line = failed(command(name, tmp_path, str(file)))
    assert f"config {file}: {spelled} is '{THING}'" in line and f"--import {MODULE}" in line, line
    refused(marker)
    assert not (tmp_path / "out").exists() and not (tmp_path / "run").exists(), "nothing written"


@pytest.mark.parametrize("settings", [
    {"trainer": {"callbacks": [THING]}},  # a bare class path where a class is expected
    {"trainer.logger": THING},  # a dotted key
    {"fit_me": {"nested": [{"class_path": THING}]}},  # anywhere
], ids=["bare", "dotted-key", "anywhere"])
def test_every_spelling_of_a_class_path_is_refused(tmp_path, marker, settings):
    file = tmp_path / "borrowed.yaml"
    file.write_text(yaml.safe_dump(settings))
    line = failed(command("fit", tmp_path, str(file)))
    assert f"config {file}: " in line and f"is '{THING}'" in line, line
    refused(marker)


def test_a_nested_config_file_named_by_a_value_is_walked_too(tmp_path, marker):
    nested = tmp_path / "callbacks.yaml"
    nested.write_text(yaml.safe_dump([{"class_path": THING}]))
    line = failed([*command("fit", tmp_path), "--trainer.callbacks", str(nested)])
    assert f"config {nested}: trainer.callbacks[0].class_path is '{THING}'" in line, line
    refused(marker)


def test_a_module_named_on_the_command_line_may_be_imported(tmp_path, marker):
    """`--import MODULE`, or a class path given on the command line (as the suite's own probes are): the user's
    choice, so the module is imported (and here its Thing is then refused as no Callback, by jsonargparse)."""
    file = tmp_path / "borrowed.yaml"
    file.write_text(yaml.safe_dump(KEYS["trainer.callbacks"][0]))
    line = failed([*command("fit", tmp_path, str(file)), "--import", MODULE])
    assert marker.exists() and "trainer.callbacks" in line and "--import" not in line, line
    marker.unlink()
    sys.modules.pop(MODULE)
    line = failed([*command("fit", tmp_path), f"--trainer.callbacks+={THING}"])
    assert marker.exists() and "trainer.callbacks" in line, line


def test_an_import_that_fails_is_one_line(tmp_path):
    line = failed([*command("fit", tmp_path), "--import", "no_such_module_anywhere"])
    assert "--import no_such_module_anywhere: cannot import it" in line, line


@pytest.mark.parametrize("name", ["fit", "predict"])
def test_a_config_that_is_no_yaml_mapping_is_named_without_its_contents(tmp_path, name):
    secret = tmp_path / "outside" / "passwd"
    secret.parent.mkdir()
    secret.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    link = tmp_path / "config.yaml"
    link.symlink_to(secret)
    args = command(name, tmp_path, str(link))
    if name == "fit":
        args = ["fit", "--config", str(link)]
    line = failed(args)
    assert f"config file {link}: not a YAML mapping of settings" in line and "root:x" not in line, line


def test_the_other_commands_import_a_module_only_when_named_with_import(tmp_path, marker):
    """The same rule where a config's data source is looked up among the project's classes (describe, evaluate,
    compare, pretrain-encoder): the planted module is imported only with --import, and its Thing, no data source, is
    refused either way."""
    file = tmp_path / "borrowed.yaml"
    file.write_text(yaml.safe_dump({"model": {"encoder": {"name": "small_vgg"}}, **KEYS["data.source"][0]}))
    args = ["pretrain-encoder", "--config", str(file), "--trainer.default_root_dir", str(tmp_path / "encoder")]
    line = failed(args)
    assert f"data.source.class_path is '{THING}'" in line, line
    refused(marker)
    line = failed([args[0], "--import", MODULE, *args[1:]])
    assert marker.exists() and f"data.source.class_path is '{THING}': not a caption.data.sources" in line, line


def test_a_config_value_that_holds_itself_is_one_line(tmp_path):
    """A YAML alias inside its own anchor: jsonargparse would recurse into it without end."""
    file = tmp_path / "loop.yaml"
    file.write_text("trainer: &loop\n  callbacks: [*loop]\n")
    line = failed(command("fit", tmp_path, str(file)))
    assert f"config {file}: trainer.callbacks[0] holds itself (a YAML alias inside its own anchor)" in line, line


# os.system reached through modules that may be imported (and one that may not): each resolves to an object defined
# outside the project, Lightning, torch and torchvision
ALIASES = ["torch.os.system", "lightning.pytorch.os.system", "torch.serialization.os.system",
           "caption.io.outputs.os.system", "numpy.os.system"]


@pytest.fixture
def system_calls(monkeypatch) -> list[tuple]:
    """The calls os.system would have received (it is replaced: nothing is run)."""
    calls: list[tuple] = []
    monkeypatch.setattr("os.system", lambda *args: calls.append(args) or 0)
    return calls


def lambda_callback(tmp_path: Path, callable_path: str) -> str:
    """A config whose callback calls `callable_path` at fit start."""
    file = tmp_path / "borrowed.yaml"
    file.write_text(yaml.safe_dump({"trainer": {"callbacks": [{
        "class_path": "lightning.pytorch.callbacks.LambdaCallback",
        "init_args": {"on_fit_start": callable_path}}]}}))
    return str(file)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("name", ["fit", "validate", "test", "predict", "features"])
def test_a_callable_is_judged_by_where_it_is_defined_not_the_path_that_reached_it(tmp_path, system_calls, name,
                                                                                 alias):
    file = lambda_callback(tmp_path, alias)
    line = failed(command(name, tmp_path, file))
    assert file in line and alias in line, line  # refused by the walk, or (numpy's: no such attribute) by the parser
    assert not system_calls and not (tmp_path / "run").exists(), "os.system reached"


@pytest.mark.parametrize("callable_path", ["torch.os.system", "lightning.pytorch.os.system",
                                           "caption.io.outputs.os.system", "os.system", "posix.system",
                                           "builtins.eval", "subprocess.Popen"])
def test_the_refusal_of_a_standard_library_callable_suggests_importing_nothing(tmp_path, monkeypatch,
                                                                              callable_path):
    calls = []

    def system(*args):  # os.system replaced (nothing is run), named where the real one is defined
        calls.append(args)
        return 0

    system.__module__, system.__qualname__ = os.system.__module__, "system"
    monkeypatch.setattr("os.system", system)
    line = failed(command("fit", tmp_path, lambda_callback(tmp_path, callable_path)))
    assert f"on_fit_start is '{callable_path}'" in line and "of Python's standard library" in line, line
    assert "--import os" not in line and "--import posix" not in line and "add `--import" not in line, line
    assert not calls and not (tmp_path / "run").exists()


def test_a_class_path_is_judged_by_where_its_class_is_defined(tmp_path, system_calls):
    file = tmp_path / "borrowed.yaml"
    file.write_text(yaml.safe_dump({"lr_scheduler": {"class_path": "torch.optim.optimizer.torch.os.system"}}))
    line = failed(command("fit", tmp_path, str(file)))
    assert f"config {file}: lr_scheduler.class_path is 'torch.optim.optimizer.torch.os.system', which is " in line, line
    assert not system_calls


def test_the_parsed_settings_are_checked_before_anything_is_built(tmp_path, system_calls, monkeypatch):
    """Behind the walk of the configs, the parsed settings are judged by the module of what each class path names."""
    monkeypatch.setattr("caption.cli.lightning.commands.check_configs", lambda args: None)
    file = lambda_callback(tmp_path, "torch.os.system")
    line = failed([*command("fit", tmp_path, file), "--model.encoder.weights", "none"])
    assert "the settings: trainer.callbacks[0].init_args.on_fit_start is '" in line, line
    assert "defined outside the project" in line, line
    assert not system_calls and not (tmp_path / "run").exists()


def test_a_callable_of_an_allowed_module_still_passes_the_walk(tmp_path):
    from caption.cli.lightning.class_paths import check_configs

    check_configs(["fit", "--config", lambda_callback(tmp_path, "torch.manual_seed")])


def test_import_is_taken_before_the_command_too(tmp_path):
    line = failed(["--import", "no_such_module_anywhere", "describe", str(tmp_path / "photo.png")])
    assert "--import no_such_module_anywhere: cannot import it" in line and "unknown command" not in line, line


def test_the_keys_known_to_take_a_class_are_every_such_key_of_the_parsers():
    """CLASS_KEYS, against what jsonargparse says of each option of the four commands' parsers (its private
    ActionTypeHint: read here, in a test, not by the project)."""
    from jsonargparse._typehints import ActionTypeHint

    from caption.cli.lightning.class_paths import CLASS_KEYS
    from caption.cli.lightning.commands import lightning_parsers

    for name, parser in lightning_parsers().items():
        keys = {action.dest for action in parser._actions if isinstance(action, ActionTypeHint) and (
            ActionTypeHint.is_subclass_typehint(action, all_subtypes=False, also_lists=True)
            or ActionTypeHint.is_callable_typehint(action))}
        assert keys <= CLASS_KEYS, f"{name}: options that take a class missing from CLASS_KEYS: {keys - CLASS_KEYS}"
