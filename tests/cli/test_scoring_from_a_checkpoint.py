"""`caption validate` and `caption test` from a run folder or an exported model and nothing else: the data and the model
come from the checkpoint, as for predict, evaluate and describe, and the figures are evaluate's."""

import csv
import json
import math
import shutil

import pytest
import torch
from kit.cli import failed

from caption.cli import main
from caption.evaluation import meteor
from caption.evaluation.metrics import METRICS
from caption.io.checkpoints import find_checkpoint, read_checkpoint

pytestmark = pytest.mark.slow  # trains the tiny runs (conftest.py) once
LOGGER = ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger"]
QUIET = ["--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false"]


class NoJava:
    """METEOR without Java (missing, as on a machine without it): the other figures, in a fraction of the time."""

    def __init__(self):
        raise FileNotFoundError("[Errno 2] No such file or directory: 'java'")


def logged(folder, split: str) -> dict[str, float]:
    """The `split/*` figures a validate or test run logged to its CSV file."""
    with next(folder.rglob("metrics.csv")).open(newline="") as file:
        row = [row for row in csv.DictReader(file) if row.get(f"{split}/bleu4")][-1]
    return {name.removeprefix(f"{split}/"): None if not value or math.isnan(float(value)) else float(value)
            for name, value in row.items() if name.startswith(f"{split}/")}  # missing: null, as in metrics.json


@pytest.mark.parametrize("command, split", [("validate", "val"), ("test", "test")])
def test_validate_and_test_from_a_run_folder_or_an_export_score_as_evaluate_does(tiny_runs, tmp_path, monkeypatch,
                                                                                 command, split):
    monkeypatch.setattr(meteor, "Meteor", NoJava)
    run, exported = tiny_runs["soft"], tmp_path / "exported"
    main(["export", "--ckpt_path", str(run), "--predictions.out", str(exported)])
    main(["evaluate", "--ckpt_path", str(run), "--split", split, "--predictions.out", str(tmp_path / "evaluate"),
          *QUIET[:2]])
    evaluated = json.loads((tmp_path / "evaluate" / "metrics.json").read_text())
    assert evaluated["beam_size"] == 3 and evaluated["images"] == 8, "the checkpoint's beam, all of the split"
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    monkeypatch.chdir(workdir)  # where Lightning would put its logs and checkpoints
    for model in (run, exported):
        logs = tmp_path / "logs" / model.name
        main([command, "--ckpt_path", str(model), *QUIET, *LOGGER, "--trainer.logger.init_args.save_dir", str(logs)])
        scored = logged(logs, split)
        names = [*(name for name in METRICS if name != "meteor"), "alpha_entropy"]
        assert scored["meteor"] is None and evaluated["metrics"]["meteor"] is None, "missing in both"
        assert {name: scored[name] for name in names} == pytest.approx(
            {name: evaluated["metrics"][name] for name in names}, rel=1e-6, abs=1e-9), model  # logged as float32
        for name in ("attention_correctness", "chair_i", "chair_s"):  # missing in both without object words
            expected = evaluated["metrics"][name]
            assert scored[name] == (None if expected is None else pytest.approx(expected, rel=1e-6, abs=1e-9)), name
        if command == "test":  # the beam's test beside greedy decoding's, in the logs as in metrics.json
            greedy = ("bleu4", "cider", "attention_accuracy", "alpha_entropy")
            for name in greedy:  # attention accuracy missing in both when no word names an object
                expected = evaluated["greedy"][name]
                assert scored[f"greedy/{name}"] == (None if expected is None else pytest.approx(expected, rel=1e-6,
                                                                                                abs=1e-9)), name
    # the export names no folder of the machine that trained it: its built-in data was made again at the default root
    assert (workdir / "data" / "shapes").is_dir()
    shutil.rmtree(workdir / "data")
    main([command, "--ckpt_path", str(run), *QUIET])
    assert list(workdir.iterdir()) == [], "without a logger it writes nothing: no logs, no config, no checkpoints"


def test_without_data_in_the_checkpoint_or_a_config_it_says_to_give_one(tiny_runs, tmp_path):
    checkpoint = read_checkpoint(find_checkpoint(tiny_runs["soft"]))
    del checkpoint["datamodule_hyper_parameters"]
    bare = tmp_path / "bare.ckpt"
    torch.save(checkpoint, bare)
    line = failed(["test", "--ckpt_path", str(bare), *QUIET])
    assert f"checkpoint {bare} does not record its data settings: pass --config with the training config" in line
