"""Runs from anywhere: the configs ship inside the package and are found by name, checkpoints record absolute data
paths, `describe` and `predict` write under runs/, and the logs follow --trainer.default_root_dir."""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from kit.tiny import tiny_args

from caption.cli import main
from caption.config.packaged import (
    NAMED_RUNS,
    config_file,
    data_section,
    named_run,
    named_run_configs,
    packaged_configs,
    with_packaged_configs,
)
from caption.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_every_shipped_config_is_packaged_and_found_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty folder
    shipped = sorted(file.stem for file in (REPO / "configs").glob("*.yaml"))
    assert sorted(packaged_configs()) == shipped and "shapes" in shipped
    for name in shipped:
        assert Path(config_file(name)).read_text() == (REPO / "configs" / f"{name}.yaml").read_text()
        assert config_file(f"{name}.yaml") == config_file(name)


def test_a_named_run_stands_for_its_fragments_and_its_folder(tmp_path, monkeypatch):
    """`--config coco_soft` (or its path from before the configs were composed) is its fragments, then its run
    folder; every fragment it names is shipped; in a command that reads one file it is a one-line error."""
    monkeypatch.chdir(tmp_path)
    for name, fragments in NAMED_RUNS.items():
        *files, own = named_run_configs(name)
        assert files == [config_file(fragment) for fragment in fragments]
        assert json.loads(own)["trainer"]["default_root_dir"] == f"runs/{name}"
        for spelling in (name, f"{name}.yaml", f"configs/{name}.yaml", str(REPO / "configs" / f"{name}.yaml")):
            assert with_packaged_configs(["--config", spelling]) == [
                item for config in named_run_configs(name) for item in ("--config", config)]
    assert json.loads(named_run_configs("coco_resnet101_hard_finetune")[-1])["model"] == {
        "optimization": {"init_from": "runs/coco_resnet101_hard/checkpoints/best.ckpt"}}
    with pytest.raises(ConfigError, match=r"config coco_soft: a composed run \(paper \+ coco \+ soft\)"):
        config_file("coco_soft")
    # what `caption evaluate/describe/compare --config coco_soft` read: the `data:` of its fragments, merged in order
    printed = yaml.safe_load(subprocess.run([sys.executable, "-m", "caption.cli", "fit", "--config", "coco_soft",
                                             "--print_config"], capture_output=True, text=True, check=True).stdout)
    data = data_section("coco_soft")
    assert data["source"]["init_args"]["annotations"] == "data/coco/dataset_coco.json"
    assert all(printed["data"][key] == value for key, value in data.items() if key != "source")
    assert (data_section("shapes_soft")["batch_by_image"]
            and data_section("coco") == data_section(str(REPO / "configs" / "coco.yaml")))
    assert named_run("elsewhere/coco_soft.yaml") is None, "only the configs folder's old paths are named runs"


def test_a_file_wins_over_a_packaged_name_and_a_wrong_name_lists_the_packaged_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shapes_soft.yaml").write_text("trainer: {max_epochs: 1}\n")
    assert config_file("shapes_soft.yaml") == "shapes_soft.yaml"
    assert with_packaged_configs(["--config", "shapes_soft.yaml"]) == ["--config", "shapes_soft.yaml"]
    assert with_packaged_configs(["fit", "-c", "shapes", "--config=hard", "-c", "shapes_hard",
                                  "--model.decoding.beam_size", "2"]) == [
        "fit", "-c", config_file("shapes"), "--config=" + config_file("hard"),
        *(item for config in named_run_configs("shapes_hard") for item in ("-c", config)),
        "--model.decoding.beam_size", "2"]
    assert config_file('{"trainer": {"max_epochs": 1}}') == '{"trainer": {"max_epochs": 1}}', "inline YAML/JSON"
    with pytest.raises(ConfigError, match=r"config shapes_sfot: no such file, nor a packaged config .*shapes_soft"):
        config_file("shapes_sfot")


def test_the_wheel_carries_the_configs_and_finds_them_installed(tmp_path):
    """What `pip install .` (not editable) installs: the wheel's files, here unpacked and imported alone."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source)
    shutil.copytree(REPO / "configs", source / "configs")
    shutil.copytree(REPO / "caption", source / "caption", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True, timeout=120)
    [wheel] = (tmp_path / "dist").glob("*.whl")
    installed = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(installed)
    assert sorted(file.stem for file in (installed / "caption" / "configs").glob("*.yaml")) == sorted(
        file.stem for file in (REPO / "configs").glob("*.yaml"))
    program = "from caption.config.packaged import named_run_configs; print(*named_run_configs('shapes_soft'))"
    out = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env={"PYTHONPATH": str(installed)},
                         capture_output=True, text=True, check=True).stdout
    assert out.split()[:3] == [str(installed / "caption" / "configs" / f"{name}.yaml")
                               for name in ("shapes", "soft", "shapes_stage1")]


@pytest.mark.slow
def test_fit_and_predict_from_empty_folders(tmp_path, monkeypatch):
    """`caption fit --config shapes_soft` with a relative data root, then `caption predict` from another folder:
    the checkpoint names the data absolutely, so nothing is generated there, and everything lands under runs/."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setattr(sys, "argv", ["caption"])
    main(["fit", "--config", "shapes_soft", "--trainer.default_root_dir", "runs/tiny", "--trainer.max_epochs", "1",
          "--trainer.limit_test_batches", "0", "--trainer.enable_progress_bar", "false",
          *tiny_args(Path("data/shapes"), num_train=16, num_val=4, num_test=4)])
    assert sorted(path.name for path in here.iterdir()) == ["data", "runs"]
    run = here / "runs" / "tiny"
    assert (run / "logs" / "version_0" / "metrics.csv").is_file(), "the logs follow --trainer.default_root_dir"
    assert not (here / "runs" / "shapes_soft").exists(), "nothing in the config's own folder"
    checkpoint = run / "checkpoints" / "last.ckpt"
    data = torch.load(checkpoint, weights_only=True)["datamodule_hyper_parameters"]
    assert data["source"]["init_args"]["root"] == str(here / "data" / "shapes")

    monkeypatch.chdir(elsewhere)
    main(["predict", "--ckpt_path", str(checkpoint), "--data.predict", "test", "--trainer.enable_progress_bar",
          "false"])
    assert sorted(str(path.relative_to(elsewhere)) for path in elsewhere.rglob("*")) == [
        "runs", "runs/predict", "runs/predict/captions.csv", "runs/predict/captions.json"]
    assert len(json.loads((elsewhere / "runs" / "predict" / "captions.json").read_text())) == 4
