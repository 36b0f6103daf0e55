"""A Hugging Face Hub model id (owner/name, owner/name@revision) names a model wherever a path does: every command
resolves it to its snapshot through `caption.io.checkpoints.local_model`, and offline or without huggingface_hub it is
one line naming the id. No network: `huggingface_hub.snapshot_download` is replaced, or asked offline."""

import json
import sys
from pathlib import Path

import huggingface_hub
import huggingface_hub.constants
import pytest
from kit.cli import failed
from kit.data import write_image

from caption import Captioner
from caption.cli import main
from caption.evaluation import meteor
from caption.io.checkpoints import find_checkpoint, local_model
from caption.io.hub import hub_reference


class NoJava:
    """METEOR without Java (missing, as on a machine without it): the other figures, in a fraction of the time."""

    def __init__(self):
        raise FileNotFoundError("[Errno 2] No such file or directory: 'java'")


@pytest.fixture
def hub_of(monkeypatch):
    """A Hub whose every repository is the given local folder: snapshot_download's calls, (repo id, revision)."""
    calls = []

    def serve(folder: Path) -> list[tuple[str, str | None]]:
        def snapshot_download(repo_id, *, revision=None, **kwargs):
            calls.append((repo_id, revision))
            return str(folder)

        monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
        return calls

    return serve


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """HF_HUB_OFFLINE=1 with an empty cache: nothing can be found or downloaded."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets on import
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))


@pytest.mark.parametrize(("name", "expected"), [
    ("owner/name", ("owner/name", None)),
    ("owner/name@v1", ("owner/name", "v1")),
    ("owner/name@refs/pr/1", ("owner/name", "refs/pr/1")),
    ("runs/best.ckpt", None), ("a/b/c", None), (".hidden/name", None), ("/abs", None), ("name", None),
    ("owner/name@", None), ("owner/with space", None),
    ("runs/shapes_sotf", None), ("exports/shapes_soft", None), ("./owner/name", None), ("owner/model.pt", None),
    ("owner/model.safetensors", None), ("owner/config.yaml", None), ("runs/x@v1", None),
])
def test_what_is_spelled_as_a_hub_model_id(name, expected):
    assert hub_reference(name) == expected


def test_a_local_path_of_that_spelling_wins_over_the_hub(tmp_path, monkeypatch, hub_of):
    calls = hub_of(tmp_path / "nowhere")
    (tmp_path / "owner" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert local_model(Path("owner/name")) == Path("owner/name") and calls == []


@pytest.mark.slow  # trains the tiny runs (conftest.py) once
def test_describe_evaluate_predict_and_serve_take_a_hub_model_id(exported, tmp_path, hub_of, monkeypatch):
    monkeypatch.setattr(meteor, "Meteor", NoJava)
    folder = exported["soft"]
    calls = hub_of(folder)
    image = write_image(tmp_path / "images" / "photo.png", size=(64, 64))
    expected = Captioner.from_pretrained(folder, device="cpu")(image).text

    main(["describe", str(image), "--ckpt_path", "owner/name", "--predictions.out", str(tmp_path / "describe")])
    assert (tmp_path / "describe" / "photo.png").is_file()
    described = json.loads((tmp_path / "describe" / "captions.json").read_text())
    assert [entry["caption"] for entry in described] == [expected]

    main(["evaluate", "--ckpt_path", "owner/name@v1", "--predictions.out", str(tmp_path / "eval"),
          "--trainer.accelerator", "cpu"])
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["checkpoint"] == str(folder)

    main(["predict", "--ckpt_path", "owner/name", "--data.predict", str(image.parent), "--predictions.out",
          str(tmp_path / "predict"), "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false"])
    predicted = json.loads((tmp_path / "predict" / "captions.json").read_text())
    assert [entry["caption"] for entry in predicted] == [expected]

    from caption.reports.runs import read_models  # what `caption serve` and `caption compare` load models with

    models = read_models([Path("owner/name")], names=None, device="cpu", config=None)
    assert [model.captioner(image).text for model in models] == [expected]
    assert calls[:2] == [("owner/name", None), ("owner/name", "v1")] and set(calls[2:]) == {("owner/name", None)}


def test_offline_a_hub_model_id_is_one_line_naming_it(tmp_path, offline):
    image = write_image(tmp_path / "photo.png", size=(64, 64))
    line = failed(["describe", str(image), "--ckpt_path", "owner/missing", "--predictions.out", str(tmp_path / "d")])
    assert "owner/missing: not in the Hugging Face cache" in line and "HF_HUB_OFFLINE is set" in line
    assert "download it once with a network, or give a local model folder" in line
    line = failed(["test", "--ckpt_path", "owner/missing@v2", "--trainer.accelerator", "cpu"])
    assert "owner/missing (revision v2): not in the Hugging Face cache" in line
    assert not (tmp_path / "d").exists()


def test_without_huggingface_hub_a_hub_model_id_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails, as when it is not installed
    line = failed(["evaluate", "--ckpt_path", "owner/name", "--predictions.out", str(tmp_path / "eval")])
    assert line.startswith("caption: error: owner/name: there is no such local path")
    assert 'needs huggingface_hub, which is not installed: pip install "show-attend-tell[hub] @ git+' in line
    assert 'pip install -e ".[hub]" in a clone' in line


def test_a_missing_path_that_is_no_hub_id_keeps_its_message(tmp_path):
    image = write_image(tmp_path / "photo.png", size=(64, 64))
    line = failed(["describe", str(image), "--ckpt_path", str(tmp_path / "runs" / "x"), "--predictions.out",
                   str(tmp_path / "d")])
    assert f"{tmp_path / 'runs' / 'x'}: no such checkpoint file or run folder" in line
    with pytest.raises(Exception, match="no such checkpoint file"):
        find_checkpoint(Path("missing/best.ckpt"))


def test_a_mistyped_local_run_folder_is_a_missing_path_at_once_with_the_nearest_run_folder(tmp_path, monkeypatch,
                                                                                           hub_of):
    calls = hub_of(tmp_path / "nowhere")
    (tmp_path / "runs" / "shapes_soft").mkdir(parents=True)
    (tmp_path / "mine" / "shapes_hard").mkdir(parents=True)
    image = write_image(tmp_path / "photo.png", size=(64, 64))
    monkeypatch.chdir(tmp_path)
    line = failed(["describe", str(image), "--ckpt_path", "runs/shapes_sotf", "--predictions.out", "d"])
    assert line == ("caption: error: runs/shapes_sotf: no such checkpoint file or run folder; did you mean "
                    "runs/shapes_soft?"), line
    line = failed(["evaluate", "--ckpt_path", "mine/shapes_hrad", "--predictions.out", "e"])  # its folder exists
    assert line == ("caption: error: mine/shapes_hrad: no such checkpoint file or run folder; did you mean "
                    "mine/shapes_hard?"), line
    with pytest.raises(Exception, match=r"^runs/shapes_sotf: no such model folder.*did you mean runs/shapes_soft\?$"):
        Captioner.from_pretrained("runs/shapes_sotf")
    line = failed(["describe", str(image), "--ckpt_path", "runs/unlike_anything", "--predictions.out", "d"])
    assert line == "caption: error: runs/unlike_anything: no such checkpoint file or run folder", line
    assert calls == [] and not (tmp_path / "d").exists() and not (tmp_path / "e").exists()


def test_a_revision_after_a_local_path_says_it_exists_locally_and_revisions_are_for_the_hub(tmp_path, monkeypatch,
                                                                                             hub_of):
    calls = hub_of(tmp_path / "nowhere")
    (tmp_path / "runs" / "tiny").mkdir(parents=True)
    image = write_image(tmp_path / "photo.png", size=(64, 64))
    monkeypatch.chdir(tmp_path)
    line = failed(["describe", str(image), "--ckpt_path", "runs/tiny@v1", "--predictions.out", str(tmp_path / "d")])
    assert line == ("caption: error: runs/tiny@v1: runs/tiny exists locally, and @v1 pins a version of Hugging Face "
                    "Hub models only (a local path wins over a Hub id of its spelling): name it without @v1"), line
    with pytest.raises(Exception, match="runs/tiny exists locally"):
        Captioner.from_pretrained("runs/tiny@v1")
    assert calls == [] and not (tmp_path / "d").exists()


def test_an_offline_cached_snapshot_missing_its_config_says_the_cache_copy_is_incomplete(tmp_path, offline):
    commit = "1" * 40
    repo = tmp_path / "hub" / "models--owner--name"  # huggingface_hub's cache layout, a download cut short
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "model.safetensors").write_bytes(b"weights")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    image = write_image(tmp_path / "photo.png", size=(64, 64))
    line = failed(["describe", str(image), "--ckpt_path", "owner/name@main", "--predictions.out", str(tmp_path / "d")])
    assert line == (f"caption: error: owner/name (revision main): the copy in the Hugging Face cache "
                    f"({repo / 'snapshots' / commit}) is incomplete (no config.json) and HF_HUB_OFFLINE is set: "
                    "download it again with a network (`hf download owner/name --revision main` with HF_HUB_OFFLINE "
                    "unset)"), line
    assert "Hub repository" not in line
