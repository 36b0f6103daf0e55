"""DDP correctness, on CPU with 2 processes (gloo), through the real CLI in a subprocess.

Lightning's `ddp` strategy starts the other rank by re-running the command line, so these tests
run `python -m caption.cli` (never pytest itself). `kit.probes.Probe` records, on
every rank, the baseline, a parameter checksum and the metrics after every step / evaluation.
"""

import json
from pathlib import Path

import pytest
import torch
from kit.cli import caption
from kit.probes import read_probe
from kit.tiny import HARD_FROM_SCRATCH, config, run_args, tiny_args

from caption.cli import main
from caption.evaluation.metrics import METRICS
from caption.evaluation.report import GREEDY_METRICS
from caption.inference import load_trained

LOCALISATION = ("attention_accuracy", "attention_other_object", "attention_background", "attention_absent",
                "attention_chance_location", "attention_chance_object", "attention_correctness",
                "attention_chance_correctness")
HALLUCINATION = ("chair_i", "chair_s")  # caption.evaluation.hallucination
HABITS = ("distinct_captions", "dangling_ending", "repeated_trigram")  # caption.evaluation.degeneration
DDP = ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]
SINGLE = ["--trainer.devices", "1", "--trainer.accelerator", "cpu"]


def tiny(root: Path) -> list[str]:
    """Hard attention (it has the baseline) at tiny sizes; 7 val/test images, so a 2-rank sampler pads."""
    return [
        *config("shapes_hard"), *HARD_FROM_SCRATCH, "--config", str(root / "scaleout.yaml"),
        "--import", "kit.probes",  # scaleout.yaml's probe: a module a config may name only once imported by name
        *run_args(root, logs=False),  # scaleout.yaml's loggers write under root
        *tiny_args(root / "data", eval_batch_size=3, num_val=7, num_test=7),
    ]


def write_extra_config(root: Path) -> None:
    """Both loggers, the learning-rate and throughput monitors, and the probe."""
    (root / "scaleout.yaml").write_text(
        f"""
trainer:
  log_every_n_steps: 2
  logger:
    - class_path: caption.training.loggers.CSVLogger
      init_args: {{save_dir: {root}, name: logs}}
    - class_path: caption.training.loggers.TensorBoardLogger
      init_args: {{save_dir: {root}, name: tensorboard}}
  callbacks:
    - class_path: lightning.pytorch.callbacks.LearningRateMonitor
    - class_path: caption.training.callbacks.TokensPerSecond
    - class_path: kit.probes.Probe
"""
    )


@pytest.fixture(scope="module")
def ddp_fit(tmp_path_factory):
    """8 steps of hard attention on 2 ranks, validating every 4 steps, then the test of the best checkpoint."""
    root = tmp_path_factory.mktemp("ddp")
    write_extra_config(root)
    result = caption(
        "fit", *tiny(root), *DDP, "--trainer.max_steps", "8", "--trainer.val_check_interval", "4",
        "--model.hard.semi_sampling", "0",  # every caption sampled: the baseline moves at every step
        probe=root / "probe",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return root


@pytest.mark.slow
def test_ddp_fit_keeps_every_rank_identical(ddp_fit):
    ranks = [read_probe(ddp_fit / "probe", rank) for rank in (0, 1)]
    assert all(record["world_size"] == 2 for records in ranks for record in records)
    steps = [[r for r in records if r["event"] == "batch_end"] for records in ranks]
    assert [r["global_step"] for r in steps[0]] == [r["global_step"] for r in steps[1]] == list(range(1, 9))
    for on_0, on_1 in zip(*steps):
        # the baseline is updated from the all-reduced reward, so ranks agree after every step
        # (from each rank's own batch they would differ here: DDP only re-broadcasts buffers at the next forward)
        assert on_0["baseline"] == on_1["baseline"], on_0["global_step"]
        assert on_0["parameters"] == on_1["parameters"]
    baselines = [r["baseline"] for r in steps[0]]
    assert baselines[0] != 0 and len(set(baselines)) == len(baselines), "the baseline moves every step"

    validations = [[r["metrics"] for r in records if r["event"] == "validation_end"] for records in ranks]
    assert len(validations[0]) == 2 and validations[0] == validations[1], "checkpointing metrics agree on all ranks"
    assert set(validations[0][0]) == {"val/bleu4", "val/cider", "val/alpha_entropy"} | {
        f"val/{name}" for name in (*LOCALISATION, *HALLUCINATION, *HABITS)  # built-in data has boxes
    }

    checkpoints = ddp_fit / "checkpoints"
    assert any(path.name.startswith("best-") for path in checkpoints.iterdir())
    saved = torch.load(checkpoints / "last.ckpt", weights_only=True)
    assert load_trained(checkpoints / "last.ckpt").module.settings.attention.kind == "hard"  # one process, no DDP setup
    final = [next(r["baseline"] for r in records if r["event"] == "train_end") for records in ranks]
    assert saved["state_dict"]["objective.baseline.value"].item() == final[0] == final[1]
    assert saved["global_step"] == 8


@pytest.mark.slow
def test_ddp_fit_logs_to_both_loggers(ddp_fit):
    header = next((ddp_fit / "logs").glob("version_*/metrics.csv")).read_text().splitlines()[0].split(",")
    for column in ("train/tokens_per_sec", "lr-Adam", "train/baseline", "train/nll", "val/bleu4", "test/cider"):
        assert column in header, column
    assert list((ddp_fit / "tensorboard").glob("version_*/events.out.tfevents.*"))


@pytest.mark.slow
def test_two_process_evaluation_equals_one_process(ddp_fit, monkeypatch):
    """`caption test` of the best checkpoint on 2 ranks (7 images: the sampler pads rank 1 with a repeat) and on
    1 process (in this process) give the same metrics, and so does the test that ended the 2-rank fit."""
    [best] = [str(path) for path in (ddp_fit / "checkpoints").iterdir() if path.name.startswith("best-")]
    two = caption("test", *tiny(ddp_fit), *DDP, "--ckpt_path", best, probe=ddp_fit / "probe_test2")
    assert two.returncode == 0, two.stderr[-4000:]
    monkeypatch.setenv("CAPTION_PROBE_DIR", str(ddp_fit / "probe_test1"))
    (ddp_fit / "probe_test1").mkdir()
    main(["test", *tiny(ddp_fit), *SINGLE, "--ckpt_path", best])

    def test_metrics(probe: str, rank: int) -> dict[str, float]:
        [metrics] = [r["metrics"] for r in read_probe(ddp_fit / probe, rank) if r["event"] == "test_end"]
        return metrics

    single = test_metrics("probe_test1", 0)
    greedy = {f"test/greedy/{name}"
              for name in (*GREEDY_METRICS, *LOCALISATION, *HALLUCINATION, *HABITS, "alpha_entropy")}
    assert set(single) == {f"test/{name}"
                           for name in (*METRICS, *LOCALISATION, *HALLUCINATION, *HABITS, "alpha_entropy")} | greedy
    for probe, rank in [("probe_test2", 0), ("probe_test2", 1), ("probe", 0), ("probe", 1)]:
        assert test_metrics(probe, rank) == single, (probe, rank)


@pytest.mark.slow
def test_two_process_predict_writes_what_one_process_writes(ddp_fit, tmp_path):
    """`caption predict` under DDP: every rank captions a share, one captions.json holds each image once."""
    checkpoint = ddp_fit / "checkpoints" / "last.ckpt"
    written = {}
    for name, devices in (("one", SINGLE), ("two", DDP)):
        result = caption("predict", "--ckpt_path", str(checkpoint), "--data.predict", "test", "--predictions.out",
                         str(tmp_path / name), "--trainer.enable_progress_bar", "false", *devices,
                         probe=tmp_path / "probe")
        assert result.returncode == 0, result.stderr[-4000:]
        written[name] = json.loads((tmp_path / name / "captions.json").read_text())
    assert len(written["one"]) == 7 and len({entry["image_id"] for entry in written["one"]}) == 7
    fields = [[(entry["image_id"], entry["caption"], entry["file_name"]) for entry in written[name]]
              for name in ("one", "two")]
    assert fields[1] == fields[0]
    assert [entry["log_prob"] for entry in written["two"]] == pytest.approx(
        [entry["log_prob"] for entry in written["one"]], abs=1e-4)
