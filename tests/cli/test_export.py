"""`caption export`: the exported model captions as its checkpoint does, every command takes its folder, and its card
lists the run's measured figures under metadata the Hub's own parser reads."""

import csv
import hashlib
import json
import math
import shutil
import subprocess
import sys

import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from kit.cli import REPO, environment, failed
from kit.data import write_image
from kit.models import tiny_module

import caption
from caption import Captioner
from caption.cli import main
from caption.evaluation import meteor
from caption.evaluation.metrics import METRICS
from caption.evaluation.report import format_score
from caption.inference import training_data
from caption.io.provenance import SOURCE_ROOT, Provenance, device_name, source_commit
from caption.reports.model_card import CardFacts, TestFigures, model_card

pytestmark = pytest.mark.slow  # trains the tiny runs (conftest.py) once


class NoJava:
    """METEOR without Java (missing, as on a machine without it): the other figures, in a fraction of the time."""

    def __init__(self):
        raise FileNotFoundError("[Errno 2] No such file or directory: 'java'")


@pytest.fixture
def no_meteor(monkeypatch):
    monkeypatch.setattr(meteor, "Meteor", NoJava)


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_the_exported_model_captions_the_test_split_as_its_checkpoint(tiny_runs, exported, kind):
    trained = Captioner.from_checkpoint(tiny_runs[kind], device="cpu")
    shared = Captioner.from_pretrained(exported[kind], device="cpu")
    assert shared.checkpoint == str(exported[kind])
    source, theirs = shared.data[0]["source"], trained.data[0]["source"]
    assert source == {**theirs, "init_args": {key: value for key, value in theirs["init_args"].items()
                                              if key != "root"}}, "the same data, but the machine's folder"
    data = training_data(trained)
    data.setup("test")
    compared = 0
    for batch in data.test_dataloader():
        for ours, theirs in zip(trained.caption_batch(batch), shared.caption_batch(batch), strict=True):
            assert ours.words == theirs.words and ours.log_prob == theirs.log_prob
            assert torch.equal(ours.alpha, theirs.alpha) and torch.equal(ours.beta, theirs.beta)
            assert (ours.locations is None and theirs.locations is None) or torch.equal(ours.locations,
                                                                                      theirs.locations)
            compared += 1
    assert compared == len(data.usable("test")) == 8


def test_every_command_takes_the_folder_for_its_checkpoint(tiny_runs, exported, tmp_path, no_meteor, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the folder's data is at the source's default root, data/shapes: generated here
    folder = exported["soft"]
    for model, out in ((tiny_runs["soft"], tmp_path / "from_checkpoint"), (folder, tmp_path / "from_folder")):
        main(["evaluate", "--ckpt_path", str(model), "--predictions.out", str(out), "--trainer.accelerator", "cpu"])
    scored = [json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("from_checkpoint", "from_folder")]
    assert scored[1]["checkpoint"] == str(folder)
    assert {**scored[0], "checkpoint": None} == {**scored[1], "checkpoint": None}, "the same figures, to the last digit"
    captions = [json.loads((tmp_path / name / "captions.json").read_text()) for name in ("from_checkpoint",
                                                                                       "from_folder")]
    assert captions[0] == captions[1]

    image = write_image(tmp_path / "images" / "photo.png", size=(64, 64))
    main(["describe", "--ckpt_path", str(folder), str(image), "--predictions.out", str(tmp_path / "describe")])
    assert (tmp_path / "describe" / "photo.png").is_file()
    main(["predict", "--ckpt_path", str(folder), "--data.predict", str(image.parent), "--predictions.out",
          str(tmp_path / "predict"), "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false"])
    predicted = json.loads((tmp_path / "predict" / "captions.json").read_text())
    assert [entry["caption"] for entry in predicted] == [Captioner.from_pretrained(folder, device="cpu")(image).text]
    main(["compare", str(folder), str(exported["hard"]), "--predictions.out", str(tmp_path / "compare"),
          "--trainer.accelerator", "cpu", "--images", "1"])
    assert "| soft (ours) |" in (tmp_path / "compare" / "report.md").read_text()

    from caption.reports.runs import read_models  # what `caption serve` loads its models with

    assert [model.captioner(image).text for model in read_models([folder], names=None, device="cpu", config=None)] \
        == [entry["caption"] for entry in predicted]


def test_the_card_lists_the_measured_test_figures_and_its_metadata_parses(tiny_runs, tmp_path, no_meteor):
    main(["evaluate", "--ckpt_path", str(tiny_runs["hard"]), "--predictions.out", str(tmp_path / "eval"),
          "--trainer.accelerator", "cpu"])
    measured = json.loads((tmp_path / "eval" / "metrics.json").read_text())["metrics"]
    main(["export", "--ckpt_path", str(tiny_runs["hard"]), "--predictions.out", str(tmp_path / "model"), "--metrics",
          str(tmp_path / "eval" / "metrics.json"), "--model_name", "owner/shapes-hard"])
    card = ModelCard.load(tmp_path / "model" / "README.md")  # huggingface_hub's own parser of the metadata block
    assert card.data.library_name == "show-attend-tell" and card.data.license == "mit"
    assert card.data.pipeline_tag == "image-to-text" and "hard-attention" in card.data.tags
    assert card.data.language == "en"
    assert card.data.datasets is None, "the built-in data is no Hub dataset"
    results = {result.metric_name: result.metric_value for result in card.data.eval_results}
    expected = {name: round(100 * value, 2) for name, value in measured.items()
                if name in METRICS and value is not None}
    assert results == {NAMES[name]: value for name, value in expected.items()}
    assert "meteor" not in expected, "METEOR missing (no Java here) is left out, not 0"

    row = next(line for line in card.text.splitlines() if line.startswith("| this model (hard) |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")][1:]
    assert cells[:len(METRICS)] == [format_score(measured[name]) if measured[name] is not None else "–"
                                    for name in METRICS]
    assert cells[-1] == f"{measured['alpha_entropy']:.2f}"
    assert "(paper, Table 1)" not in card.text, "the paper has no figures for the built-in data"
    assert "beam 3" in card.text and "8 images" in card.text and "metrics.json of `caption evaluate`" in card.text
    assert "`caption fit --config training_config.yaml`" in card.text, "the run's saved config, in the folder"
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert all(author["family-names"] in card.text for author in cff["preferred-citation"]["authors"])
    assert cff["preferred-citation"]["url"] in card.text


def test_metrics_json_and_the_card_record_the_precision_seed_commit_and_device(tiny_runs, tmp_path, no_meteor):
    main(["evaluate", "--ckpt_path", str(tiny_runs["soft"]), "--predictions.out", str(tmp_path / "eval"),
          "--trainer.accelerator", "cpu", "--trainer.precision", "32-true"])
    made = json.loads((tmp_path / "eval" / "metrics.json").read_text())["provenance"]
    commit, modified = source_commit(root=SOURCE_ROOT)
    assert made == {"precision": "32-true", "seed": 0, "commit": commit, "modified": modified,
                    "device": device_name(device="cpu")}, "the saved config's seed_everything: 0"
    main(["export", "--ckpt_path", str(tiny_runs["soft"]), "--predictions.out", str(tmp_path / "model"),
          "--metrics", str(tmp_path / "eval" / "metrics.json")])
    card = (tmp_path / "model" / "README.md").read_text()
    assert "- training: precision auto (auto: bf16-mixed where the machine had bf16 matrix units, else 32-true), " \
           "seed 0 (from the run's saved config)" in card
    recorded = Provenance(**made)
    assert f"- test figures: {recorded.line()}" in card
    assert f"- exported with show-attend-tell {caption.__version__}, {recorded.code_line()}" in card


def test_the_folder_carries_the_runs_saved_config_under_its_checksum(tiny_runs, exported):
    folder = exported["soft"]
    saved = (tiny_runs["soft"] / "logs" / "version_0" / "config.yaml").read_bytes()
    assert (folder / "training_config.yaml").read_bytes() == saved
    checksums = json.loads((folder / "config.json").read_text())["sha256"]
    assert checksums["training_config.yaml"] == hashlib.sha256(saved).hexdigest()
    card = (folder / "README.md").read_text()
    assert "`caption fit --config training_config.yaml` trains it again" in card
    assert "`training_config.yaml` (the config the run was trained with)" in card, "listed among the files"


def test_a_run_without_its_saved_config_exports_without_one(tiny_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_runs["soft"], run)
    for saved in run.glob("**/config.yaml"):
        saved.unlink()
    main(["export", "--ckpt_path", str(run), "--predictions.out", str(tmp_path / "model")])
    assert not (tmp_path / "model" / "training_config.yaml").exists()
    assert "training_config.yaml" not in json.loads((tmp_path / "model" / "config.json").read_text())["sha256"]
    assert "the run's config was not found beside its checkpoint" in (tmp_path / "model" / "README.md").read_text()
    Captioner.from_pretrained(tmp_path / "model", device="cpu")


NAMES = {"bleu1": "BLEU-1", "bleu2": "BLEU-2", "bleu3": "BLEU-3", "bleu4": "BLEU-4", "meteor": "METEOR",
         "rouge_l": "ROUGE-L", "cider": "CIDEr"}


def test_the_card_of_a_run_folder_takes_its_last_logged_test(tiny_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_runs["soft"], run)
    metrics_csv = run / "logs" / "version_0" / "metrics.csv"
    with metrics_csv.open(newline="") as file:
        rows = list(csv.DictReader(file))
    tested = {"test/bleu1": 0.5, "test/bleu4": 0.125, "test/cider": 0.75, "test/alpha_entropy": 2.5}
    # as CSVLogger writes it once `caption fit` tests its best checkpoint
    with metrics_csv.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=[*rows[0], *tested], restval="")
        writer.writeheader()
        writer.writerows([*rows, {"epoch": "3", "step": "36", **tested}])
    main(["export", "--ckpt_path", str(run), "--predictions.out", str(tmp_path / "model")])
    card = ModelCard.load(tmp_path / "model" / "README.md")
    assert {result.metric_name: result.metric_value for result in card.data.eval_results} == {
        "BLEU-1": 50.0, "BLEU-4": 12.5, "CIDEr": 75.0}
    assert "| this model (soft) | 50.0 | – | – | 12.5 | – | – | 75.0 | – | 2.50 |" in card.text
    assert "from logs/version_0/metrics.csv of the run folder, the last test the run logged" in card.text
    assert str(tmp_path) not in card.text, "the card names no folder of this machine"

    main(["export", "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), "--predictions.out", str(tmp_path / "last")])
    assert "No test figures were recorded" in (tmp_path / "last" / "README.md").read_text(), \
        "the run tested its best checkpoint, not last.ckpt"


@pytest.mark.parametrize("dataset, paper", [
    ("coco", "| soft attention (paper, Table 1) | 70.7 | 49.2 | 34.4 | 24.3"),
    ("flickr8k", "| soft attention (paper, Table 1) | 67 | 44.8 | 29.9 | 19.5"),
])
def test_the_papers_table_1_sits_beside_the_figures_on_its_data(dataset, paper):
    module = tiny_module(["<pad>", "<start>", "<end>", "<unk>", "a"])
    data = {"source": {"class_path": "caption.data.sources.karpathy.KarpathySource",
                       "init_args": {"annotations": f"data/{dataset}/dataset_{dataset}.json"}}}
    scores = dict.fromkeys(METRICS, 0.25) | {"meteor": math.nan}
    card = model_card(CardFacts(name="owner/name", settings=module.model.settings,
                                optimization=module.optimization, vocabulary_size=5, data=data,
                                version="0", test=TestFigures(scores, origin="metrics.json", beam_size=3)))
    assert paper in card
    assert "| this model (soft) | 25.0 | 25.0 | 25.0 | 25.0 | – | 25.0 | 25.0 | – | – |" in card


def test_export_refuses_a_folder_holding_checkpoints(tiny_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_runs["soft"], run)
    line = failed(["export", "--ckpt_path", str(run), "--predictions.out", str(run)])
    assert f"{run} holds checkpoints (a run folder?): export into a folder of its own" in line
    assert not (run / "config.json").exists()


def test_fit_refuses_to_resume_from_a_model_folder(exported):
    line = failed(["fit", "--config", "shapes_soft", "--ckpt_path", str(exported["soft"])])
    assert "a model folder of `caption export` holds the weights, not a training state to resume" in line
    assert f"--model.optimization.init_from {exported['soft']}" in line


HELP = """
import sys
from caption.cli import main
try:
    main(["export", "--help"])
except SystemExit:
    pass
print(sorted(name for name in ("torch", "lightning", "safetensors", "huggingface_hub") if name in sys.modules))
"""


def test_export_help_answers_without_loading_torch():
    run = subprocess.run([sys.executable, "-c", HELP], cwd=REPO, env=environment(), capture_output=True, text=True,
                         timeout=120, check=True)
    assert "usage: caption export" in run.stdout and run.stdout.strip().splitlines()[-1] == "[]"
