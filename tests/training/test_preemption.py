"""Pre-emption that loses nothing and repeats nothing: a run stopped by SIGTERM in the middle of an epoch (what a
scheduler sends before it pre-empts a job) and continued with `--ckpt_path last` trains on the rest of that epoch's
captions, each once, in the order the uninterrupted run has; on 1 and 2 processes (DDP on CPU, gloo), with
same-length batches and with image batches. `kit.probes.CaptionProbe` records every training batch's captions."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from kit.cli import caption
from kit.tiny import HARD_FROM_SCRATCH, config, run_args, tiny_args

from caption.cli import TERMINATED

pytestmark = pytest.mark.slow

PROCESSES = {1: ["--trainer.devices", "1", "--trainer.accelerator", "cpu"],
             2: ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]}
BATCHES = {"same_length": ["--data.same_length_batches", "true", "--data.batch_by_image", "false"],
           "by_image": ["--data.same_length_batches", "false", "--data.batch_by_image", "true"]}


def fit_args(root: Path, processes: int, batches: str) -> list[str]:
    """Two epochs of a tiny hard-attention model on 30 built-in images (150 captions), no validation, no saves but
    SIGTERM's and the last; every training batch's captions recorded."""
    return [
        *config("shapes_hard"), *HARD_FROM_SCRATCH, *run_args(root),
        "--trainer.max_epochs", "2", "--trainer.limit_val_batches", "0", "--trainer.limit_test_batches", "0",
        "--periodic_checkpoint.every_n_train_steps", "0", "--trainer.callbacks+=kit.probes.CaptionProbe",
        *tiny_args(root.parent / "data", batch_size=16, num_train=30, num_val=2, num_test=2),
        *PROCESSES[processes], *BATCHES[batches],
    ]


def trained_batches(probe: Path, processes: int) -> list[list[dict]]:
    """Per rank, the training batches recorded in `probe`, in order."""
    return [[json.loads(line) for line in (probe / f"captions{rank}.jsonl").read_text().splitlines()]
            for rank in range(processes)]


def captions_of(batches: list[dict], epoch: int) -> Counter:
    """How many times each caption (image id and tokens) was trained on in `epoch`."""
    return Counter(tuple(row) for batch in batches if batch["epoch"] == epoch for row in batch["captions"])


@pytest.mark.parametrize(("processes", "batches", "stops"), [
    (1, "same_length", 2),  # stopped twice: a resumed run's place is counted on from where it resumed
    (2, "by_image", 1),  # under DDP, whole images per batch: each rank's place in its own shard
])
def test_a_run_stopped_mid_epoch_continues_the_epoch_where_it_stopped(tmp_path, processes, batches, stops):
    args = fit_args(tmp_path / "whole", processes, batches)
    whole = caption("fit", *args, probe=tmp_path / "whole_probe")
    assert whole.returncode == 0, whole.stderr[-4000:]
    expected = trained_batches(tmp_path / "whole_probe", processes)
    per_epoch = sum(batch["epoch"] == 0 for batch in expected[0])
    assert per_epoch >= 4 and len(expected[0]) == 2 * per_epoch

    # stopped in the second epoch (whose batches a resumed run's iterator must draw with that epoch's order), then
    # finished
    run = tmp_path / "stopped"
    saved_at = 0
    for number, step in enumerate([per_epoch + 1, per_epoch + 3][:stops]):
        resume = ["--ckpt_path", "last"] if number else []
        stopped = caption("fit", *fit_args(run, processes, batches), *resume,
                          "--trainer.callbacks+=kit.probes.SigtermAtStep", f"--trainer.callbacks.init_args.step={step}",
                          probe=tmp_path / "stopped_probe")
        output = stopped.stdout + stopped.stderr
        assert stopped.returncode == TERMINATED, output[-4000:]
        # after the batch it came in, or (ranks agree at batch ends) the next one
        saved = re.search(rf"SIGTERM: saved {re.escape(str(run / 'checkpoints' / 'last.ckpt'))} at global step (\d+)",
                          output)
        assert saved and step <= int(saved[1]) <= step + 1 and int(saved[1]) > saved_at, output[-4000:]
        saved_at = int(saved[1])
    assert saved_at < 2 * per_epoch, "stopped mid-epoch"
    resumed = caption("fit", *fit_args(run, processes, batches), "--ckpt_path", "last",
                      probe=tmp_path / "stopped_probe")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "not resumable" not in resumed.stderr, "Lightning finds the loader resumable"

    got = trained_batches(tmp_path / "stopped_probe", processes)
    union_expected = sum((captions_of(rank, 1) for rank in expected), Counter())
    union_got = sum((captions_of(rank, 1) for rank in got), Counter())
    assert union_got == union_expected, "no caption of the epoch seen twice, none skipped"
    for rank_got, rank_expected in zip(got, expected):
        assert [batch["global_step"] for batch in rank_got] == list(range(1, 2 * per_epoch + 1)), "no step repeated"
        assert [batch["captions"] for batch in rank_got] == [batch["captions"] for batch in rank_expected]
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2 * per_epoch
