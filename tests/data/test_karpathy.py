"""Karpathy-format and official-COCO readers: splits, ids, files, complete references, format errors;
and the data module's text policy (empty captions, long captions, vocabulary from training only)."""

import json
import logging
import sys
from collections import Counter

import pytest
from kit.cli import failed
from kit.data import SPLIT_OF, coco_official, karpathy_dataset, with_lone_surrogates
from kit.tiny import config, run_args

from caption.data.datamodule import CaptionDataModule
from caption.data.sources.karpathy import CocoSource, DatasetFormatError, KarpathySource
from caption.errors import CaptionWarning
from caption.evaluation.metrics import coco_scores


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco")
    return root, karpathy_dataset(root)


def source(root, annotations, **kwargs):
    return KarpathySource(annotations=str(annotations), images=str(root / "images"), **kwargs)


def test_splits_ids_files_and_references(coco):
    root, path = coco
    records = source(root, path).records()
    assert Counter(record.split for record in records) == {"train": 5, "val": 2, "test": 2}  # restval joined train
    entries = json.loads(path.read_text(encoding="utf-8"))["images"]
    assert [record.image_id for record in records] == [entry["cocoid"] for entry in entries]
    for record, entry in zip(records, entries):
        assert record.file == str(root / "images" / entry["filepath"] / entry["filename"])
        assert record.references == tuple(sentence["raw"] for sentence in entry["sentences"])  # every one kept
        assert {"restval": "train"}.get(entry["split"], entry["split"]) == record.split
    dropped = source(root, path, restval="drop").records()
    assert Counter(record.split for record in dropped) == {"train": 3, "val": 2, "test": 2}


def test_flickr_style_file_uses_imgid_and_one_folder(tmp_path):
    path = karpathy_dataset(tmp_path, coco=False)
    records = source(tmp_path, path).records()
    assert [record.image_id for record in records] == list(range(sum(SPLIT_OF.values())))
    assert records[0].file == str(tmp_path / "images" / "1000.jpg")


def test_coco_sized_split_counts(tmp_path):
    """Karpathy's COCO split: 82,783 train + 30,504 restval, 5,000 val, 5,000 test -> 113,287 / 5,000 / 5,000."""
    counts = {"train": 82_783, "restval": 30_504, "val": 5_000, "test": 5_000}
    entries = [
        {"filepath": "val2014", "filename": f"{i}.jpg", "imgid": i, "cocoid": i, "split": split,
         "sentences": [{"raw": "a b", "tokens": ["a", "b"]}]}
        for i, split in enumerate(split for split, count in counts.items() for _ in range(count))
    ]
    path = tmp_path / "dataset_coco.json"
    path.write_text(json.dumps({"images": entries}))
    records = source(tmp_path, path).records()
    assert Counter(record.split for record in records) == {"train": 113_287, "val": 5_000, "test": 5_000}


def test_official_coco_annotations_with_a_karpathy_split_file(coco):
    root, path = coco
    annotations, folders = coco_official(root, path)
    official = CocoSource(annotations=[str(a) for a in annotations], images=[str(f) for f in folders], splits=str(path))

    def key(records):
        return sorted((r.image_id, r.split, r.file, r.references) for r in records)

    assert key(official.records()) == key(source(root, path).records())

    ids = {"train": [1000, 1001], "val": [1005], "test": [1007, 1008]}
    (root / "ids.json").write_text(json.dumps(ids))
    by_ids = CocoSource(annotations=[str(a) for a in annotations], images=[str(f) for f in folders],
                        splits=str(root / "ids.json")).records()
    assert {split: sorted(r.image_id for r in by_ids if r.split == split) for split in ids} == ids

    only_train = CocoSource(annotations=[str(annotations[0])], images=[str(folders[0])], splits=str(path))
    with pytest.raises(DatasetFormatError, match="captions_train2014.json and captions_val2014.json"):
        only_train.records()


def write_images(path, entries):
    path.write_text(json.dumps({"images": entries}), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "entry,message",
    [
        ({"imgid": 0, "split": "train", "sentences": [{"raw": "a"}]}, r"images\[0\] has no 'filename' field"),
        ({"filename": "a.jpg", "imgid": 0, "sentences": [{"raw": "a"}]}, r"images\[0\] has no 'split' field"),
        ({"filename": "a.jpg", "imgid": 0, "split": "dev", "sentences": []}, r"split is 'dev'; expected one of"),
        ({"filename": "a.jpg", "split": "train", "sentences": []}, r"has no 'imgid' field"),
        ({"filename": "a.jpg", "imgid": "7", "split": "train", "sentences": []}, r"imgid is '7'; expected int"),
        ({"filename": "a.jpg", "imgid": 0, "split": "train"}, r"has no 'sentences' field"),
        ({"filename": "a.jpg", "imgid": 0, "split": "train", "sentences": [{"sentid": 1}]},
         r"sentences\[0\] has no 'raw' field"),
        ({"filepath": 5, "filename": "a.jpg", "imgid": 0, "split": "train", "sentences": []},
         r"images\[0\].filepath is 5; expected str"),
        ({"filepath": None, "filename": "a.jpg", "imgid": 0, "split": "train", "sentences": []},
         r"images\[0\].filepath is None; expected str"),
    ],
)
def test_missing_or_wrong_fields_are_named(tmp_path, entry, message):
    path = write_images(tmp_path / "dataset.json", [entry])
    with pytest.raises(DatasetFormatError, match=message) as error:
        source(tmp_path, path).records()
    assert str(path) in str(error.value)


def test_a_wrong_field_stops_caption_fit_in_one_line_naming_the_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments
    annotations = karpathy_dataset(tmp_path)
    data = json.loads(annotations.read_text())
    data["images"][3]["filepath"] = 5
    annotations.write_text(json.dumps(data))
    line = failed(["fit", *config("shapes_soft"), *run_args(tmp_path / "run"),
                   "--data.source", "caption.data.sources.karpathy.KarpathySource",
                   "--data.source.init_args.annotations", str(annotations),
                   "--data.source.init_args.images", str(tmp_path / "images")])
    assert line == f"caption: error: {annotations}: images[3].filepath is 5; expected str", line


def test_a_lone_surrogate_in_a_caption_is_replaced_with_one_warning_naming_the_file_and_the_caption(tmp_path):
    annotations = karpathy_dataset(tmp_path)
    (val_entry, val_sentence, val_image), _ = with_lone_surrogates(annotations)
    with pytest.warns(CaptionWarning) as warned:
        records = source(tmp_path, annotations).records()
    (line,) = [str(warning.message) for warning in warned if "surrogate" in str(warning.message)]
    assert line.startswith(f"{annotations}: 2 captions hold a lone UTF-16 surrogate") and "\n" not in line, line
    assert f"the first at images[{val_entry}].sentences[{val_sentence}] (image {val_image})" in line, line
    assert "replaced by U+FFFD" in line, line
    scored = [record for record in records if record.split in ("val", "test")]
    for record in scored:
        for text in record.references:
            text.encode("utf-8")  # every caption is text UTF-8 can write
    assert sum("A broken \ufffd word in a" in text for record in scored for text in record.references) == 2

    references = {record.image_id: list(record.references) for record in scored}
    scores, _ = coco_scores({key: "a picture" for key in references}, references, metrics=("bleu4",))
    assert 0 <= scores["bleu4"] <= 1, "the PTB tokenizer (Java where installed) takes every reference"

    official, folders = coco_official(tmp_path, annotations)  # the same captions in COCO's own files
    with pytest.warns(CaptionWarning) as warned:
        coco = CocoSource(annotations=[str(path) for path in official], images=[str(path) for path in folders],
                          splits=str(annotations)).records()
    (line,) = [str(warning.message) for warning in warned if "surrogate" in str(warning.message)]
    assert line.startswith(f"{official[1]}: 2 captions hold a lone UTF-16 surrogate") and "(image " in line, line
    assert sorted(record.references for record in coco) == sorted(record.references for record in records)


def test_unreadable_files_and_duplicates(tmp_path):
    with pytest.raises(DatasetFormatError, match="does not exist.*data/README.md"):
        source(tmp_path, tmp_path / "absent.json").records()
    (tmp_path / "broken.json").write_text('{"images": [')
    with pytest.raises(DatasetFormatError, match="not valid UTF-8 JSON"):
        source(tmp_path, tmp_path / "broken.json").records()
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(DatasetFormatError, match="has no 'images' field"):
        source(tmp_path, tmp_path / "list.json").records()
    entry = {"filename": "a.jpg", "imgid": 3, "split": "train", "sentences": [{"tokens": ["only", "tokens"]}]}
    assert source(tmp_path, write_images(tmp_path / "t.json", [entry])).records()[0].references == ("only tokens",)
    with pytest.raises(DatasetFormatError, match="image id 3 appears more than once"):
        source(tmp_path, write_images(tmp_path / "d.json", [entry, entry])).records()


def datamodule(root, path, **kwargs):
    return CaptionDataModule(source=source(root, path), batch_size=4, eval_batch_size=4, **kwargs)


def test_empty_captions_are_dropped_and_counted(coco, caplog):
    root, path = coco
    data = datamodule(root, path)
    with pytest.warns(UserWarning, match="left out 2 captions without words"):
        records = data.records()
    first = records[0]
    assert "" not in first.references and "   " not in first.references
    assert len(first.references) == 7 and all(len(r.references) == 5 for r in records[1:])


def test_vocabulary_from_training_captions_only(coco):
    root, path = coco
    words = set(datamodule(root, path).vocabulary)
    assert {"café", "crème", "zürich", "train", "picture"} <= words  # non-ASCII kept whole
    assert "val" not in words and "test" not in words, "words of val/test captions only must be <unk>"
    assert "5" not in words  # image 5 is a validation image
    frequent = set(datamodule(root, path, min_count=5).vocabulary)
    assert "picture" in frequent and "café" not in frequent and "0" in frequent


@pytest.mark.parametrize("policy,kept,longest,touched", [
    ("truncate", 27, 12, "1 captions longer than data.max_length=10 words were truncated"),
    ("drop", 26, 9, "1 captions longer than data.max_length=10 words were left out"),
])
def test_long_caption_policy(coco, caplog, policy, kept, longest, touched):
    root, path = coco
    data = datamodule(root, path, max_length=10, long_captions=policy, check_images="decode")
    with caplog.at_level(logging.INFO):
        dataset = data.train_dataloader().dataset
    assert touched in caplog.text
    assert len(dataset) == kept  # 5 train images x 5 captions + "café" + the 30-word one (if truncated)
    assert max(dataset.lengths) == longest  # 10 words + <start> + <end>; else 7 words + 2
    assert sorted(set(dataset.lengths)) == sorted({7, 9, longest})
