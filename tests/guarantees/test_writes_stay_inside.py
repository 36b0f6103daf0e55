"""The project writes only inside its output folders and never leaves a partial file: a link planted at a file it
writes (a figure, captions.json, a temporary file's name, Lightning's config.yaml, hparams.yaml and metrics.csv) is
replaced, not written through, so the file it points to outside is untouched; a figure is rendered in memory and
written atomically, so a full disk leaves none half done."""

import json
import os
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from kit.cli import failed
from kit.data import write_image
from kit.disk import disk  # noqa: F401  the fixture
from kit.tiny import fit_args

import caption.inference.describe_images as describe_images
from caption.cli import main
from caption.io.outputs import OutputError, save_figure, temporary_path, write_text

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

PRECIOUS = b"a file outside the output folder\n"


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments


def outside_link(link: Path, target: Path) -> Path:
    """A link at `link` to `target`, a file outside the output folder holding PRECIOUS."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(PRECIOUS)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return target


def test_describe_replaces_links_at_its_figure_and_captions_and_leaves_their_targets_alone(tiny_runs, tmp_path):
    images, out = write_image(tmp_path / "images" / "good.png").parent, tmp_path / "out"
    figure = outside_link(out / "good.png", tmp_path / "outside" / "figure.png")
    captions = outside_link(out / "captions.json", tmp_path / "outside" / "captions.json")
    main(["describe", "--ckpt_path", str(tiny_runs["soft"] / "checkpoints" / "last.ckpt"), str(images),
          "--predictions.out", str(out)])
    assert figure.read_bytes() == PRECIOUS and captions.read_bytes() == PRECIOUS
    assert not (out / "good.png").is_symlink() and (out / "good.png").read_bytes().startswith(b"\x89PNG")
    assert json.loads((out / "captions.json").read_text())[0]["figure"] == str(out / "good.png")


def test_a_link_planted_at_the_temporary_name_is_not_written_through(tmp_path):
    out = tmp_path / "out"
    target = outside_link(temporary_path(out / "metrics.json"), tmp_path / "outside" / "metrics.json")
    write_text(out / "metrics.json", '{"bleu4": 0.25}\n')
    assert target.read_bytes() == PRECIOUS
    assert (out / "metrics.json").read_text() == '{"bleu4": 0.25}\n'
    assert sorted(path.name for path in out.iterdir()) == ["metrics.json"]


def noisy_figure() -> Figure:
    """A figure of some tens of KB (noise does not compress), well under the small disk's 1 MiB."""
    figure = Figure(figsize=(3, 3))
    figure.add_subplot().imshow(np.random.default_rng(0).random((64, 64, 3)))
    return figure


def test_a_full_disk_leaves_the_previous_figure_and_no_partial_one(disk):
    previous = disk.folder / "previous.png"
    save_figure(noisy_figure(), previous)
    kept = previous.read_bytes()
    disk.fill(free=1000)
    with pytest.raises(OutputError, match=f"cannot write figure {disk.folder / 'new.png'}: the disk holding"):
        save_figure(noisy_figure(), disk.folder / "new.png")
    with pytest.raises(OutputError, match="kept as it was"):
        save_figure(noisy_figure(), previous)
    assert previous.read_bytes() == kept
    assert sorted(path.name for path in disk.folder.iterdir() if path.name != "filler") == ["previous.png"]


def test_describe_on_a_full_disk_says_so_in_one_line_and_leaves_no_empty_figure(tiny_runs, disk, tmp_path,
                                                                                 monkeypatch):
    images, out = write_image(tmp_path / "images" / "good.png").parent, disk.folder / "out"
    out.mkdir()
    arguments = ["describe", "--ckpt_path", str(tiny_runs["soft"] / "checkpoints" / "last.ckpt"), str(images),
                 "--predictions.out", str(out)]
    disk.fill(free=1000)
    line = failed(arguments)  # captions.json, written before the figures
    assert f"cannot write {out / 'captions.json'}" in line and "is full" in line, line
    assert list(out.iterdir()) == []
    (disk.folder / "filler").unlink(missing_ok=True)
    monkeypatch.undo()  # the simulated disk's budget, where no tmpfs could be mounted
    monkeypatch.setattr(sys, "argv", ["caption"])
    written = describe_images.write_results

    def then_full(*args, **kwargs):  # the disk fills up once the captions are written
        paths = written(*args, **kwargs)
        disk.fill(free=1000)
        return paths

    monkeypatch.setattr(describe_images, "write_results", then_full)
    line = failed(arguments)
    assert f"cannot write figure {out / 'good.png'}" in line and "is full" in line, line
    assert sorted(path.name for path in out.iterdir()) == ["captions.csv", "captions.json"], "the captions are kept"


def test_fit_replaces_links_at_its_config_and_logger_files_and_leaves_their_targets_alone(tmp_path):
    """The run's config.yaml (LightningCLI's), hparams.yaml and metrics.csv (the CSV logger's), the overlays'
    captions.csv and the TensorBoard logger's hparams.yaml, each planted as a link out of the run folder (the
    TensorBoard one dangling: Lightning writes it only when no file is there)."""
    pytest.importorskip("tensorboard")
    run, outside = tmp_path / "run", tmp_path / "outside"
    version = run / "logs" / "version_0"
    targets = [outside_link(version / name, outside / name) for name in ("config.yaml", "hparams.yaml", "metrics.csv")]
    targets.append(outside_link(version / "attention" / "captions.csv", outside / "captions.csv"))
    (run / "tb" / "version_0").mkdir(parents=True)
    (run / "tb" / "version_0" / "hparams.yaml").symlink_to(outside / "tb-hparams.yaml")
    loggers = tmp_path / "loggers.yaml"
    loggers.write_text(json.dumps({"trainer": {"logger": [
        {"class_path": "caption.training.loggers.CSVLogger",
         "init_args": {"save_dir": str(run), "name": "logs", "version": 0}},
        {"class_path": "caption.training.loggers.TensorBoardLogger",
         "init_args": {"save_dir": str(run), "name": "tb", "version": 0}},
    ]}}))
    main(["fit", *fit_args(run, "--config", str(loggers), "--trainer.limit_test_batches", "0",
                           "--trainer.callbacks+=caption.training.overlay_logging.AttentionImages",
                           "--trainer.callbacks.num_images", "1")])
    assert [target.read_bytes() for target in targets] == [PRECIOUS] * 4
    assert not (outside / "tb-hparams.yaml").exists()
    for name in ("config.yaml", "hparams.yaml", "metrics.csv", "attention/captions.csv"):
        assert not (version / name).is_symlink() and (version / name).stat().st_size > 0, name
    assert "trainer:" in (version / "config.yaml").read_text() and "val/bleu4" in (version / "metrics.csv").read_text()
    assert "vocabulary" in (run / "tb" / "version_0" / "hparams.yaml").read_text()


def test_the_fit_lock_record_replaces_a_link_planted_at_its_name_and_leaves_its_target_alone(tmp_path):
    """`caption fit` records who holds its folder in .caption-fit.json: a link planted there is replaced."""
    from caption.cli.lightning.run_folders import (RUN_HOLDER, FitFolder, claim_run_folders, lock_files,
                                                   releasing_run_folders)

    run = tmp_path / "run"
    target = outside_link(run / RUN_HOLDER, tmp_path / "outside" / "victim.txt")
    with releasing_run_folders():
        claim_run_folders([FitFolder("trainer.default_root_dir", run, lock_files(run, checkpoints=False))])
        assert target.read_bytes() == PRECIOUS
        assert not (run / RUN_HOLDER).is_symlink() and json.loads((run / RUN_HOLDER).read_text())["pid"] == os.getpid()
    assert target.read_bytes() == PRECIOUS and not (run / RUN_HOLDER).exists()


@pytest.mark.parametrize("command", ["describe", "evaluate", "compare", "predict"])
def test_a_refused_checkpoint_leaves_no_output_folder(tmp_path, command):
    checkpoint, out = tmp_path / "notes.ckpt", tmp_path / "out"
    checkpoint.write_text("not a checkpoint\n")
    images = write_image(tmp_path / "images" / "photo.png").parent
    args = {"describe": ["describe", "--ckpt_path", str(checkpoint), str(images)],
            "evaluate": ["evaluate", "--ckpt_path", str(checkpoint)],
            "compare": ["compare", str(checkpoint)],
            "predict": ["predict", "--ckpt_path", str(checkpoint), "--data.predict", str(images)]}[command]
    line = failed([*args, "--predictions.out", str(out)])
    assert f"{checkpoint}: not a PyTorch checkpoint" in line, line
    assert not out.exists(), "the output folder is created once the inputs are known good"
