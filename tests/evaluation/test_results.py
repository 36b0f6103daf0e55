"""One result format for `caption predict`, `caption evaluate` and `caption describe`: captions.json in the COCO
results format (read by pycocotools' `COCO.loadRes` and scored by pycocoevalcap), with file name, log-probability
and the n best, and captions.csv beside it."""

import csv
import json
import sys

import matplotlib.cbook
import pytest
import torch
from kit.cli import failed
from PIL import Image
from pycocotools.coco import COCO

from caption import Caption, Captioner
from caption.cli import main
from caption.evaluation.results import result, write_results

GRACE_HOPPER = matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
KEYS = {"image_id", "caption", "file_name", "log_prob"}


def made(text: str, log_prob: float) -> Caption:
    words = text.split()
    return Caption(text, words, torch.full((len(words), 4), 0.25), torch.ones(len(words)), None, log_prob)


def ground_truth(image_ids) -> COCO:
    """A tiny COCO caption ground truth holding `image_ids`, one reference each."""
    coco = COCO()
    coco.dataset = {"images": [{"id": image_id} for image_id in image_ids],
                    "annotations": [{"id": index, "image_id": image_id, "caption": "a red circle"}
                                    for index, image_id in enumerate(image_ids, start=1)]}
    coco.createIndex()
    return coco


def loaded(path, image_ids) -> COCO:
    """captions.json at `path` as pycocotools reads results: one caption per image, as pycocoevalcap scores them."""
    results = ground_truth(image_ids).loadRes(str(path))
    assert all(len(results.imgToAnns[image_id]) == 1 for image_id in results.getImgIds())
    return results


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def test_n_best_sit_in_the_one_entry_of_each_image_that_load_res_reads_and_the_csv_has_a_row_each(tmp_path):
    written = [result(3, "a/x.png", [made("a red circle", -1.5), made("a circle", -2.0)]),
               result(5, None, [made("a blue square", -0.5), made("", -4.0)])]
    json_path, csv_path = write_results(written, tmp_path)
    results = loaded(json_path, [3, 5, 9])
    assert sorted(results.getImgIds()) == [3, 5]
    entry = results.imgToAnns[3][0]
    assert (entry["caption"], entry["file_name"], entry["log_prob"]) == ("a red circle", "a/x.png", -1.5)
    assert entry["n_best"] == [{"caption": "a red circle", "log_prob": -1.5}, {"caption": "a circle", "log_prob": -2.0}]
    assert results.imgToAnns[5][0]["file_name"] is None
    rows = read_csv(csv_path)
    assert [(row["image_id"], row["rank"], row["caption"], row["file_name"]) for row in rows] == [
        ("3", "1", "a red circle", "a/x.png"), ("3", "2", "a circle", "a/x.png"), ("5", "1", "a blue square", ""),
        ("5", "2", "", "")]
    assert [float(row["log_prob"]) for row in rows] == [-1.5, -2.0, -0.5, -4.0]


def test_one_caption_per_image_has_no_n_best(tmp_path):
    json_path, csv_path = write_results([result(0, "b.jpg", made("a square", -1.0))], tmp_path)
    assert json.loads(json_path.read_text()) == [
        {"image_id": 0, "caption": "a square", "file_name": "b.jpg", "log_prob": -1.0}]
    assert list(read_csv(csv_path)[0]) == ["image_id", "file_name", "rank", "caption", "log_prob"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    Image.open(GRACE_HOPPER).save(folder / "a_grace_hopper.png")
    Image.new("RGB", (80, 50), (200, 30, 30)).save(folder / "b_red.jpg")
    return folder


def predict(*args: str) -> None:
    main(["predict", *args, "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"])


@pytest.mark.slow
def test_predict_evaluate_and_describe_write_one_schema_that_load_res_reads(tiny_runs, photos, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])
    checkpoint = tiny_runs["soft"] / "checkpoints" / "last.ckpt"
    predict("--ckpt_path", str(checkpoint), "--data.predict", str(photos), "--predictions.out", str(tmp_path / "files"),
            "--predictions.num_captions", "3")
    predict("--ckpt_path", str(checkpoint), "--data.predict", "test", "--predictions.out", str(tmp_path / "split"))
    main(["evaluate", "--ckpt_path", str(checkpoint), "--predictions.out", str(tmp_path / "evaluate")])
    main(["describe", "--ckpt_path", str(checkpoint), str(photos), "--predictions.out", str(tmp_path / "describe"),
          "--predictions.num_captions", "3"])

    test_ids = [entry["image_id"] for entry in json.loads((tmp_path / "evaluate" / "captions.json").read_text())]
    for name, image_ids in (("files", [0, 1]), ("split", test_ids), ("evaluate", test_ids), ("describe", [0, 1])):
        entries = json.loads((tmp_path / name / "captions.json").read_text())
        assert all(KEYS <= set(entry) for entry in entries), name
        assert sorted(loaded(tmp_path / name / "captions.json", image_ids).getImgIds()) == sorted(image_ids), name
        rows = read_csv(tmp_path / name / "captions.csv")
        assert [(int(row["image_id"]), row["caption"]) for row in rows if row["rank"] == "1"] == [
            (entry["image_id"], entry["caption"]) for entry in entries], name

    predicted = json.loads((tmp_path / "split" / "captions.json").read_text())
    evaluated = json.loads((tmp_path / "evaluate" / "captions.json").read_text())
    assert [(e["image_id"], e["caption"]) for e in predicted] == sorted(
        (e["image_id"], e["caption"]) for e in evaluated)
    for ours, theirs in zip(predicted, sorted(evaluated, key=lambda entry: entry["image_id"])):
        assert ours["log_prob"] == pytest.approx(theirs["log_prob"], abs=1e-4)

    captioner = Captioner.from_checkpoint(checkpoint, device="cpu")
    files = sorted(photos.iterdir())
    expected = captioner(files, num_captions=3)
    for name in ("files", "describe"):
        entries = json.loads((tmp_path / name / "captions.json").read_text())
        assert [entry["file_name"] for entry in entries] == [str(file) for file in files], name
        for entry, ranked in zip(entries, expected):
            assert [item["caption"] for item in entry["n_best"]] == [caption.text for caption in ranked], name
            assert [item["log_prob"] for item in entry["n_best"]] == pytest.approx(
                [caption.log_prob for caption in ranked], abs=1e-4)
            assert entry["caption"] == entry["n_best"][0]["caption"], name
    described = json.loads((tmp_path / "describe" / "captions.json").read_text())
    assert [item["figure"].rsplit("/", 1)[1] for item in described[0]["n_best"]] == [
        "a_grace_hopper_1.png", "a_grace_hopper_2.png", "a_grace_hopper_3.png"]


@pytest.mark.slow
def test_predict_and_describe_on_only_unreadable_files_fail_with_one_line(tiny_runs, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])
    folder = tmp_path / "unreadable"
    folder.mkdir()
    for index in range(2):
        (folder / f"._IMG_{index}.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    checkpoint = str(tiny_runs["soft"] / "checkpoints" / "last.ckpt")
    with pytest.warns(UserWarning, match="skipping"):
        failed(["predict", "--ckpt_path", checkpoint, "--data.predict", str(folder), "--predictions.out",
                str(tmp_path / "predicted"), "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"])
    assert not (tmp_path / "predicted" / "captions.json").exists()
    with pytest.warns(UserWarning, match="skipping"):
        line = failed(["describe", "--ckpt_path", checkpoint, str(folder),
                       "--predictions.out", str(tmp_path / "described")])
    assert "none of the 2 image files found could be read" in line
    assert not (tmp_path / "described" / "captions.json").exists()
