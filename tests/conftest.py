"""Shared fixtures: two tiny trained runs on the built-in data (soft and hard), through the real CLI."""

import sys
from pathlib import Path
from unittest.mock import patch

import pytest

from caption.cli import main
from tiny import tiny_args

REPO = Path(__file__).resolve().parents[1]


def tiny_fit_args(kind: str, run: Path, data: Path) -> list[str]:
    """`caption fit` on 50 shapes images with tiny dims: a few dozen steps, enough for short captions."""
    return [
        "fit", "--config", str(REPO / "configs" / f"shapes_{kind}.yaml"),
        "--trainer.max_epochs", "4", "--trainer.check_val_every_n_epoch", "2", "--trainer.log_every_n_steps", "4",
        "--trainer.limit_test_batches", "0",  # no test after fit: the tests evaluate these runs themselves
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.default_root_dir", str(run), "--trainer.logger.init_args.save_dir", str(run),
        "--model.learning_rate", "0.01",
        *tiny_args(data, channels="[4, 8, 8]", batch_size=32, num_train=50),
    ]


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"soft": run folder, "hard": run folder}, each with checkpoints/ and logs/version_0/metrics.csv."""
    root = tmp_path_factory.mktemp("tiny_runs")
    runs = {}
    with patch.object(sys, "argv", ["caption"]):  # not pytest's arguments
        for kind in ("soft", "hard"):  # the two-stage recipe: hard attention on the soft run's frozen encoder
            runs[kind] = root / kind
            stage_one = ["--model.encoder_weights", str(runs["soft"])] if kind == "hard" else []
            main([*tiny_fit_args(kind, runs[kind], root / "data"), *stage_one])
    return runs
