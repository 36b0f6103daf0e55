"""Checkpoints and configs that name a class to build ({class_path, init_args}) never run code: a genuine checkpoint
whose data source, lr_scheduler or instantiator names a foreign callable, and a config whose `data.source` does, are
refused in one line naming the file, the key and the value by the Python API and every command, before anything is
imported or called (a command that would create a marker file leaves none)."""

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from kit.cli import failed
from kit.data import write_image
from kit.models import tiny_module
from kit.planted import planted_modules
from kit.tiny import tiny_run_args

from caption.inference import Captioner
from caption.io.class_paths import ForeignClassError

MODULE = "planted_module_that_must_not_be_imported"


def touch(marker: Path) -> dict[str, Any]:
    """{class_path, init_args} that creates `marker` if it is ever built."""
    return {"class_path": "os.system", "init_args": {"command": f"touch {marker}"}}


def foreign_values(marker: Path) -> dict[str, Any]:
    """Class paths a hostile or broken file may hold, by name."""
    return {
        "os.system": touch(marker),
        "builtins.eval": {"class_path": "builtins.eval", "init_args": {"source": f"open({str(marker)!r}, 'w')"}},
        "subprocess.Popen": {"class_path": "subprocess.Popen", "init_args": {"args": ["touch", str(marker)]}},
        "a project class of another kind": {"class_path": "caption.training.module.CaptionModule", "init_args": {}},
        "a module never imported": {"class_path": f"{MODULE}.Source", "init_args": {}},
        "a path that names nothing": {"class_path": "caption.data.synthetic.shapes.NoSuchSource", "init_args": {}},
        "a non-string": {"class_path": 5, "init_args": {}},
        "a bare path": "os.system",
        "an extra key": {"class_path": "caption.data.synthetic.shapes.ShapesSource", "init_args": {},
                         "dict_kwargs": {}},
    }


# where a checkpoint written by `caption fit` names classes
STORED = {
    "source": ("datamodule_hyper_parameters", "source"),
    "lr_scheduler": ("hyper_parameters", "lr_scheduler"),
    "instantiator": ("hyper_parameters", "_instantiator"),
    "data instantiator": ("datamodule_hyper_parameters", "_instantiator"),
}


@pytest.fixture(autouse=True)
def planted_module(tmp_path, monkeypatch) -> Path:
    """A module on the import path that creates a marker file when imported; the marker path, which no test may
    leave behind."""
    with planted_modules(tmp_path, monkeypatch, [MODULE], classes=("Source",)) as marker:
        yield marker
        assert not marker.exists(), "a class named by an untrusted file was imported or run"
        assert MODULE not in sys.modules


def planted(tiny_runs, folder: Path, stored: str, value: Any) -> Path:
    """The soft tiny run's last.ckpt with the class at `stored` (a key of STORED) replaced by `value`, as
    folder/checkpoints/last.ckpt."""
    checkpoint = torch.load(tiny_runs["soft"] / "checkpoints" / "last.ckpt", weights_only=True)
    section, key = STORED[stored]
    checkpoint[section][key] = value
    path = folder / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save(checkpoint, path)
    return path


def value_text(value: Any) -> str:
    """How the message shows the refused value (its class path, else the value)."""
    return repr(value["class_path"] if isinstance(value, dict) and set(value) <= {"class_path", "init_args"}
                else value)[:40]


@pytest.mark.parametrize("stored", STORED)
@pytest.mark.parametrize("name", list(foreign_values(Path("M"))))
def test_the_python_api_refuses_a_checkpoint_that_names_a_foreign_class(tiny_runs, tmp_path, planted_module, stored,
                                                                        name):
    value = foreign_values(planted_module)[name]
    if stored.endswith("instantiator"):  # stored as a bare path
        value = value["class_path"] if isinstance(value, dict) else value
    path = planted(tiny_runs, tmp_path / "run", stored, value)
    with pytest.raises(ForeignClassError) as error:
        Captioner.from_checkpoint(path, device="cpu")
    message = str(error.value)
    assert message.startswith(f"checkpoint {path}: {'.'.join(STORED[stored])}") and "\n" not in message, message
    if not stored.endswith("instantiator"):
        assert value_text(value).strip("'") in message, message


def command_args(command: str, checkpoint: Path, tmp_path: Path) -> list[str]:
    lightning = tiny_run_args("soft", checkpoint.parent.parent, tmp_path / "data")
    images = write_image(tmp_path / "images" / "photo.png").parent
    return {
        "describe": ["describe", "--ckpt_path", str(checkpoint), str(images),
                     "--predictions.out", str(tmp_path / "out")],
        "evaluate": ["evaluate", "--ckpt_path", str(checkpoint), "--predictions.out", str(tmp_path / "out")],
        "compare": ["compare", str(checkpoint.parent.parent),  # the run folder
                    "--predictions.out", str(tmp_path / "out")],
        "predict": ["predict", "--ckpt_path", str(checkpoint), "--data.predict", str(images)],
        "test": ["test", *lightning, "--ckpt_path", str(checkpoint)],
        "validate": ["validate", *lightning, "--ckpt_path", str(checkpoint)],
        "fit --ckpt_path": ["fit", *lightning, "--ckpt_path", str(checkpoint)],
        "fit --ckpt_path last": ["fit", *lightning, "--ckpt_path", "last"],
    }[command]


COMMANDS = ["describe", "evaluate", "compare", "predict", "test", "validate", "fit --ckpt_path", "fit --ckpt_path last"]


@pytest.mark.parametrize("stored", ["source", "lr_scheduler"])
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_a_checkpoint_that_names_a_foreign_class(tiny_runs, tmp_path, planted_module, command,
                                                                       stored):
    checkpoint = planted(tiny_runs, tmp_path / "run", stored, touch(planted_module))
    line = failed(command_args(command, checkpoint, tmp_path))
    assert f"{checkpoint}: {'.'.join(STORED[stored])}.class_path is 'os.system'" in line, line


@pytest.mark.parametrize(("command", "name"), [*(("describe", name) for name in foreign_values(Path("M"))),
                                               ("evaluate", "os.system"), ("compare", "os.system")])
def test_a_config_whose_data_source_names_a_foreign_class_is_refused(tiny_runs, tmp_path, planted_module, command,
                                                                     name):
    value = foreign_values(planted_module)[name]
    config = tmp_path / "data.yaml"
    config.write_text(yaml.safe_dump({"data": {"source": value, "batch_size": 4}}))
    checkpoint = tiny_runs["soft"] / "checkpoints" / "last.ckpt"
    args = command_args(command, checkpoint, tmp_path)
    if command == "compare":
        args[1] = str(checkpoint)  # not the tiny run's folder: its logs are read, never written
    line = failed([*args, "--config", str(config)])
    assert f"config {config}: data.source" in line, line


def test_a_model_refuses_an_lr_scheduler_that_is_no_scheduler(planted_module):
    module = tiny_module(["<pad>", "<start>", "<end>", "<unk>", "a"], lr_scheduler=touch(planted_module))
    with pytest.raises(ForeignClassError, match=r"model.lr_scheduler.class_path is 'os.system'"):
        module.configure_optimizers()


def test_a_genuine_checkpoint_names_only_known_classes(tiny_runs, tmp_path):
    captioner = Captioner.from_checkpoint(tiny_runs["soft"] / "checkpoints" / "last.ckpt", device="cpu")
    assert captioner.data[0]["source"]["class_path"] == "caption.data.synthetic.shapes.ShapesSource"
    assert captioner(write_image(tmp_path / "photo.png")).text
