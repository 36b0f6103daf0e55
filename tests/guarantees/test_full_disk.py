"""A full disk and unreadable checkpoints, through `caption fit`, `test` and `compare`.

The disk is a real one where the test may mount a small tmpfs (root in a container); elsewhere ENOSPC is
simulated by a write budget on the project's own file writes (`caption.io.outputs`), which is where checkpoints go.
"""

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from kit.cli import failed
from kit.disk import disk  # noqa: F401  the fixture
from kit.tiny import fit_args, tiny_run_args

from caption.cli import main
from caption.io.checkpoints import read_checkpoint
from caption.io.outputs import OutputError
from caption.training.loggers import CSVLogger


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments


@pytest.mark.slow
def test_a_full_disk_keeps_the_previous_checkpoint_whole_and_names_the_folder(disk):
    run, every_2 = disk.folder / "run", ["--periodic_checkpoint.every_n_train_steps", "2"]
    main(["fit", *fit_args(run, *every_2, "--trainer.limit_test_batches", "0")])
    folder = run / "checkpoints"
    last = folder / "last.ckpt"
    before = last.read_bytes()
    disk.fill(free=len(before) // 2)  # half a checkpoint

    line = failed(["fit", *fit_args(run, *every_2, "--trainer.max_epochs", "2", "--ckpt_path", "last")])
    assert f"cannot write checkpoint {folder}" in line and f"the disk holding {folder} is full" in line, line
    assert "KB needed" in line and "free" in line and "kept as it was" in line
    assert last.read_bytes() == before, "the previous last.ckpt is intact"
    assert not [p for p in folder.iterdir() if not p.name.endswith(".ckpt")], "no partial temporary file is left"
    for checkpoint in folder.glob("*.ckpt"):
        read_checkpoint(checkpoint)  # every checkpoint left is whole


def test_logs_on_a_full_disk_are_one_line_naming_their_folder(disk, tmp_path):
    if not disk.mounted:
        pytest.skip("the loggers' writes can only fail on a real full disk (mounting a tmpfs is not permitted here)")
    disk.fill(free=0)
    line = failed(["fit", *fit_args(tmp_path / "run", "--trainer.logger.init_args.save_dir", str(disk.folder))])
    assert "config.yaml" in line and str(disk.folder) in line and "is full" in line

    logger = CSVLogger(save_dir=disk.folder / "csv")
    written = f"cannot write the logged metrics {disk.folder / 'csv'}/.*metrics.csv: .* is full"
    with pytest.raises(OutputError, match=written):
        logger.log_metrics({"train/nll": 1.0}, step=0)
        logger.save()
    logger.finalize("failed")  # after a failed run: no second error on top of the first


@pytest.mark.parametrize("free", [0, 4096])
def test_logs_on_a_full_disk_leave_no_empty_or_partial_file(disk, tmp_path, free):
    """config.yaml (0 bytes free) or hparams.yaml (4 KB: config.yaml fits) cannot be written: one line naming the
    file, and every file left under the logs is whole (written atomically), none empty."""
    disk.fill(free=free)
    line = failed(["fit", *fit_args(tmp_path / "run", "--trainer.logger.init_args.save_dir", str(disk.folder))])
    name = "config.yaml" if free == 0 else "hparams.yaml"
    assert f"cannot write the {'run' if name == 'config.yaml' else 'logger'}" in line and name in line, line
    assert "is full" in line, line
    left = [path for path in (disk.folder / "logs").rglob("*") if path.is_file()]
    assert all(path.stat().st_size > 0 for path in left), left
    assert {path.name for path in left} <= {"config.yaml"}, "no partial hparams.yaml, metrics.csv or temporary file"
    for path in left:
        assert yaml.safe_load(path.read_text())["trainer"], path


@pytest.mark.parametrize("free", [0, 26_000])
def test_a_tensorboard_logger_on_a_full_disk_is_one_line_and_leaves_no_empty_event_file(disk, tmp_path, free):
    """Its writer's first event file (0 bytes free) or a later one (26 KB: config.yaml, hparams.yaml and some events
    fit) cannot be written: one line naming the logger's folder (TensorBoard's writer thread prints its own
    traceback), and no empty event file (a partial one stays: TensorBoard reads it up to its last whole record)."""
    pytest.importorskip("tensorboard")
    if not disk.mounted:
        pytest.skip("TensorBoard's own writes can only fail on a real full disk "
                    "(mounting a tmpfs is not permitted here)")
    disk.fill(free=free)
    line = failed(["fit", *fit_args(tmp_path / "run", "--trainer.logger", "caption.training.loggers.TensorBoardLogger",
                                    "--trainer.logger.init_args.save_dir", str(disk.folder))])
    assert f"cannot write the logs of TensorBoardLogger in {disk.folder / 'logs' / 'version_0'}" in line, line
    assert "is full" in line, line
    left = [path for path in (disk.folder / "logs").rglob("*") if path.is_file()]
    assert all(path.stat().st_size > 0 for path in left), left


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.slow
def test_compare_and_ckpt_path_last_skip_unreadable_checkpoints(tiny_runs, tmp_path, recwarn):
    run = tmp_path / "run"
    shutil.copytree(tiny_runs["soft"], run)
    folder = run / "checkpoints"
    (best,) = folder.glob("best-*.ckpt")
    cut = folder / "best-epoch99-step999.ckpt"  # the newest "best", cut short
    shutil.copy(best, cut)
    truncate(cut)

    main(["compare", str(run), "--predictions.out", str(tmp_path / "report"), "--images", "0"])
    assert f"skipping an unreadable checkpoint: {cut}: not a readable PyTorch checkpoint" in str(recwarn[0].message)
    assert f"`{best}`" in (tmp_path / "report" / "report.md").read_text(), "the newest readable best is compared"

    truncate(folder / "last.ckpt")
    cut.unlink()
    recwarn.clear()
    args = tiny_run_args("soft", run, tmp_path / "data")
    main(["test", *args, "--ckpt_path", "last"])
    warned = "\n".join(str(warning.message) for warning in recwarn)
    assert f"skipping an unreadable checkpoint: {folder / 'last.ckpt'}" in warned
    assert f"--ckpt_path last: using {best}" in warned

    truncate(best)
    line = failed(["fit", *args, "--ckpt_path", "last"])
    assert f"--ckpt_path last: {folder}: no checkpoint there can be read: {folder / 'last.ckpt'}: not a" in line
