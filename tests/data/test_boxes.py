"""Boxes for any dataset: boxes of image files mapped into the encoder input as torchvision resizes and crops the
image, COCO's caption words -> category map, the instances reader, attention accuracy with several boxes per label
and per label, and `caption evaluate` on a tiny COCO-format dataset with instances."""

import csv
import json
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from kit.data import coco_instances, coco_official, karpathy_dataset, write_image
from PIL import Image

from caption.cli import main
from caption.data.datamodule import CaptionDataModule
from caption.data.sources.annotation_files import DatasetFormatError
from caption.data.sources.category_words import category_word_labels, named_labels
from caption.data.sources.coco_categories import COCO_CATEGORIES, COCO_WORD_LABELS, plural
from caption.data.sources.image_source import boxes_in_input, crop_offset, image_transform
from caption.data.sources.karpathy import CocoSource, KarpathySource
from caption.data.sources.records import ImageRecord, ObjectBox
from caption.data.synthetic.shapes import ShapesSource
from caption.errors import ConfigError
from caption.evaluation.grounding import Localisation, localisation
from caption.evaluation.report import Evaluation

REPO = Path(__file__).resolve().parents[2]


def test_boxes_follow_the_resize_and_centre_crop_by_hand():
    transform = image_transform(resize_size=64, crop_size=64)  # 200x100 -> 128x64 -> columns 32..95 kept
    boxes = (ObjectBox("dog", (50, 10, 150, 90)),  # x: 32..96 -> 0..64; y: 6.4..57.6
             ObjectBox("cat", (0, 0, 100, 50)),  # partly cropped away: x 0..64 -> -32..32, cut to 0..32
             ObjectBox("cow", (0, 0, 40, 50)))  # x 0..25.6 lies wholly left of the crop: left out
    mapped = boxes_in_input(boxes, frame=(200, 100), transform=transform)
    assert [box.label for box in mapped] == ["dog", "cat"]
    assert mapped[0].box == pytest.approx((0, 6.4, 64, 57.6))
    assert mapped[1].box == pytest.approx((0, 0, 32, 32))
    # a tall image: 100x300 -> 50x150 (int(50 * 300 / 100)), crop 40 from (5, 55)
    tall = boxes_in_input((ObjectBox("person", (20, 120, 60, 180)),), frame=(100, 300),
                          transform=image_transform(resize_size=50, crop_size=40))
    assert tall[0].box == pytest.approx((10 - 5, 60 - 55, 30 - 5, 90 - 55))
    # Python's round, as torchvision
    assert (crop_offset(66, 64), crop_offset(65, 64), crop_offset(67, 64)) == (1, 0, 2)
    assert crop_offset(30, 34) == -2  # a crop larger than the image: padded, 2 columns before


@pytest.mark.parametrize(("frame", "box"), [((300, 200), (40, 50, 200, 190)), ((137, 251), (0, 30, 90, 240))])
def test_boxes_match_the_pixels_torchvision_makes(frame, box):
    """A white box on black, through the real transform: inside the mapped box white, around it black."""
    pixels = np.zeros((frame[1], frame[0], 3), dtype=np.uint8)
    pixels[box[1]:box[3], box[0]:box[2]] = 255
    transform = image_transform(resize_size=40, crop_size=32)
    red = transform(Image.fromarray(pixels))[0] > 0  # normalised: white > 0 > black
    ((x0, y0, x1, y1),) = (found.box for found in boxes_in_input((ObjectBox("x", box),), frame=frame,
                                                                  transform=transform))
    inner = red[int(y0) + 1:int(np.ceil(y1)) - 1, int(x0) + 1:int(np.ceil(x1)) - 1]
    assert inner.numel() and inner.all()
    outer = torch.ones_like(red)
    outer[max(int(y0) - 1, 0):int(np.ceil(y1)) + 1, max(int(x0) - 1, 0):int(np.ceil(x1)) + 1] = False
    assert not red[outer].any()


def test_coco_words_name_categories_in_plural_and_by_synonym():
    assert len(COCO_CATEGORIES) == len(set(COCO_CATEGORIES)) == 80
    assert all(COCO_WORD_LABELS[category] == category for category in COCO_CATEGORIES if category != "orange")
    for words, category in [
        (("man", "men", "woman", "women", "boy", "girls", "people", "person", "child", "children", "kids"), "person"),
        (("bike", "bikes", "bicycle", "bicycles"), "bicycle"), (("plane", "planes", "airplane", "jet"), "airplane"),
        (("tv", "television", "televisions"), "tv"), (("hot dog", "hot dogs", "hotdog"), "hot dog"),
        (("bus", "buses"), "bus"), (("knife", "knives"), "knife"), (("sheep",), "sheep"), (("mice",), "mouse"),
        (("puppy", "puppies", "dogs"), "dog"), (("oranges",), "orange"), (("ski", "skis"), "skis"),
    ]:
        assert {COCO_WORD_LABELS[word] for word in words} == {category}, words
    assert not {"orange", "light", "sign", "glass", "a", "the", "on"} & set(COCO_WORD_LABELS)
    assert [plural(word) for word in ("box", "lady", "toy", "teddy bear", "child")] == [
        "boxes", "ladies", "toys", "teddy bears", "children"]


def test_named_labels_reads_two_word_names_at_their_last_word():
    words = ["a", "teddy", "bear", "and", "a", "hot", "dog", "near", "a", "dog", "and", "two", "teddy"]
    assert named_labels(words, COCO_WORD_LABELS) == [
        None, None, "teddy bear", None, None, None, "hot dog", None, None, "dog", None, None, "teddy bear"]
    assert named_labels(["circle", "square"], {"circle": "circle"}) == ["circle", None]


def test_localisation_with_several_boxes_of_a_label_and_per_label():
    people = (ObjectBox("person", (0, 0, 16, 64)), ObjectBox("person", (48, 0, 64, 64)))  # left, right strips
    boxes = (*people, ObjectBox("dog", (24, 56, 40, 64)))  # centres of cells 59, 60 (x 28, 36 on the last row)
    alpha = torch.zeros(5, 64)
    alpha[0, 7] = 1  # "men": peak (60, 4) in the right person's box -> on the named label
    alpha[2, 60] = 1  # "dog": peak (36, 60) -> on the named object
    alpha[3, 0] = 1  # "puppy": peak (4, 4) in a person's box -> another object
    alpha[4, 27] = 1  # "person": peak (28, 28) -> background
    found = localisation([(["men", "and", "dog", "puppy", "person"], alpha, boxes)], image_size=(64, 64),
                         word_labels=COCO_WORD_LABELS)
    assert found.nouns == 4 and (found.accuracy, found.other_object, found.background) == (2 / 4, 1 / 4, 1 / 4)
    assert found.chance_object == pytest.approx((2 / 3 + 1 / 3 + 1 / 3 + 2 / 3) / 4)  # 2 of 3 boxes are people
    assert found.chance_location == pytest.approx((32 / 64 + 2 / 64 + 2 / 64 + 32 / 64) / 4)  # 2 strips: 32 centres
    assert set(found.by_label) == {"person", "dog"}
    assert (found.by_label["person"].nouns, found.by_label["person"].accuracy) == (2, 0.5)
    assert found.by_label["dog"].chance_location == pytest.approx(2 / 64)
    missing = localisation([(["cat"], alpha[:1], boxes)], image_size=(64, 64), word_labels=COCO_WORD_LABELS)
    assert missing.absent == 1 and missing.by_label["cat"].nouns == 1 and missing.by_label["cat"].accuracy == 0


@pytest.fixture
def coco(tmp_path):
    karpathy = karpathy_dataset(tmp_path)
    return tmp_path, karpathy, coco_instances(tmp_path, karpathy)


def test_instances_give_records_their_boxes_in_both_coco_sources(coco):
    root, karpathy, instances = coco
    source = KarpathySource(annotations=str(karpathy), images=str(root / "images"), resize_size=36, crop_size=32,
                            instances=[str(path) for path in instances])
    records = source.records()
    unannotated = records[-1]  # the last val2014 image, listed without annotations
    assert unannotated.objects == () and unannotated.frame == (48, 40)
    for record in records[:-1]:
        assert record.frame == (48, 40)
        assert record.objects == (ObjectBox("person", (0, 0, 24, 40)), ObjectBox("dog", (36, 30, 42, 35)))
        # 48x40 -> 43x36 (int(36 * 48 / 40)), crop 32 from (round(5.5) = 6, 2)
        mapped = source.input_boxes(record)
        assert mapped[0].box == pytest.approx((0, 0, 24 * 43 / 48 - 6, 32))
        assert mapped[1].box == pytest.approx((36 * 43 / 48 - 6, 30 * 0.9 - 2, 42 * 43 / 48 - 6, 35 * 0.9 - 2))
    assert source.word_labels["men"] == "person"
    plain = KarpathySource(annotations=str(karpathy), images=str(root / "images"))
    assert plain.word_labels == {} and all(not record.objects for record in plain.records())
    assert ShapesSource().word_labels == {"circle": "circle", "square": "square", "triangle": "triangle"}

    captions, folders = coco_official(root, karpathy)
    official = CocoSource(annotations=[str(a) for a in captions], images=[str(f) for f in folders],
                          splits=str(karpathy), instances=[str(path) for path in instances])
    assert {r.image_id: r.objects for r in official.records()} == {r.image_id: r.objects for r in records}


@pytest.mark.parametrize(("change", "says"), [
    (lambda data: data["annotations"][0].update(bbox=[1, 2, 3]), "annotations[0].bbox is [1, 2, 3]"),
    (lambda data: data["annotations"][0].update(bbox=[1, 2, -3, 4]), "annotations[0].bbox"),
    (lambda data: data["annotations"][0].update(bbox=[float("nan"), 2, 3, 4]), "annotations[0].bbox is [nan, 2, 3, 4]"),
    (lambda data: data["annotations"][1].update(bbox=[1, 2, float("inf"), 4]), "annotations[1].bbox is [1, 2, inf, 4]"),
    (lambda data: data["annotations"][1].update(category_id=99), "annotations[1].category_id is 99"),
    (lambda data: data["annotations"][0].update(image_id=5), "annotations[0].image_id is 5"),
    (lambda data: data["images"][0].pop("width"), "images[0] has no 'width' field"),
    (lambda data: data["images"][0].update(height=0), "images[0] is 48x0 pixels"),
    (lambda data: data["categories"][0].update(name=None), "categories[0].name is None"),
    (lambda data: data.pop("categories"), "has no 'categories' field"),
    (lambda data: [entry.update(id=entry["id"] + 10**6) for entry in data["images"] + data["annotations"]]
     and [entry.update(image_id=entry["image_id"] + 10**6) for entry in data["annotations"]], "describe none"),
])
def test_a_malformed_instances_file_is_named_in_one_line(coco, change, says):
    root, karpathy, instances = coco
    data = json.loads(instances[0].read_text())
    change(data)
    instances[0].write_text(json.dumps(data))
    source = KarpathySource(annotations=str(karpathy), images=str(root / "images"), instances=[str(instances[0])])
    with pytest.raises(DatasetFormatError) as error:
        source.records()
    message = str(error.value)
    assert str(instances[0]) in message and says in message and "\n" not in message


def test_instances_that_are_not_json_are_named(coco):
    root, karpathy, instances = coco
    instances[1].write_text("{ not json")
    source = KarpathySource(annotations=str(karpathy), images=str(root / "images"), instances=[str(instances[1])])
    with pytest.raises(DatasetFormatError, match=f"{instances[1]} is not valid UTF-8 JSON"):
        source.records()


def test_any_categories_are_named_by_their_names_and_coco_synonyms_only_for_coco_categories():
    words = category_word_labels(["Stripes", "table lamp", "dog", "box"])
    for word, label in [("stripes", "Stripes"), ("table lamp", "table lamp"), ("table lamps", "table lamp"),
                        ("boxes", "box"), ("dog", "dog"), ("puppies", "dog")]:
        assert words[word] == label, word
    assert not {"man", "person", "table", "lamp"} & set(words), "COCO's synonyms only for COCO's own categories"
    assert named_labels("two table lamps near a dog".split(), words) == [None, None, "table lamp", None, None, "dog"]
    assert category_word_labels(COCO_CATEGORIES) == COCO_WORD_LABELS, "COCO's instances files: COCO's map"
    given = category_word_labels(["stripes", "dog"], labels={"stripy": "stripes", "Pup": "stripes"})
    assert (given["stripy"], given["stripies"], given["pup"], given["pups"], given["puppy"]) == (
        "stripes", "stripes", "stripes", "stripes", "dog")


def test_a_word_map_to_a_category_the_data_lacks_or_without_boxes_is_named_in_one_line(coco):
    root, karpathy, instances = coco
    with pytest.raises(ConfigError) as error:
        KarpathySource(annotations=str(karpathy), images=str(root / "images"), instances=[str(instances[0])],
                       labels={"pup": "dgo"}).records()
    message = str(error.value)
    assert "data.source.init_args.labels maps 'pup' to 'dgo'" in message and str(instances[0]) in message
    assert "person, dog" in message and "\n" not in message
    with pytest.raises(ConfigError, match="labels .* no boxes: give the instances files too"):
        KarpathySource(annotations=str(karpathy), images=str(root / "images"), labels={"pup": "dog"})


def test_boxes_that_no_reference_caption_names_are_said_once_at_setup(coco):
    root, karpathy, instances = coco  # captions "picture k number j": they name neither person nor dog

    def data(labels):
        source = KarpathySource(annotations=str(karpathy), images=str(root / "images"),
                                instances=[str(path) for path in instances], labels=labels)
        return CaptionDataModule(source=source, batch_size=4, eval_batch_size=4)

    with pytest.warns(UserWarning, match=r"boxes of dog, person but no reference caption names one: attention "
                                         r"accuracy will not be scored; .* data\.source\.init_args\.labels"):
        data(None).records()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        data({"picture": "person"}).records()  # "picture" named as a person: nothing to say
    assert not [warning for warning in said if "no reference caption" in str(warning.message)]


def test_evaluation_table_says_in_one_line_that_no_word_names_a_label():
    nothing = Localisation(nouns=0, **dict.fromkeys(("accuracy", "other_object", "background", "absent",
                                                     "chance_location", "chance_object"), float("nan")),
                           box_labels=("stripes", "table lamp"))
    table = Evaluation("test", 3, {"bleu4": 0.5}, {}, nothing, 1.5).table()
    (line,) = [row for row in table.splitlines() if "attention accuracy" in row]
    assert "not scored: no generated word names a label of the boxes (stripes, table lamp)" in line
    assert "data.source.init_args.labels" in line and "missing" not in table


@pytest.mark.slow
@pytest.mark.parametrize(("names", "said"), [(("person", "dog"), "A man with a dog."),  # COCO's, by synonym
                                             (("table lamp", "stripes"), "Two table lamps with stripes.")])  # made up
def test_evaluate_with_an_instances_file_reports_attention_per_category(tmp_path, capsys, monkeypatch, names, said):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments
    root, karpathy = tmp_path, karpathy_dataset(tmp_path)
    instances = coco_instances(root, karpathy, names=names)
    data = json.loads(karpathy.read_text())
    for entry in data["images"]:  # one caption everywhere: a few steps teach a tiny model to say it
        entry["sentences"] = [{"raw": said}] * 5
    karpathy.write_text(json.dumps(data))
    run = root / "run"
    main([
        "fit", "--config", str(REPO / "configs" / "shapes_soft.yaml"), "--trainer.max_epochs", "30",
        "--lr_scheduler.init_args.gamma", "1.0",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.default_root_dir", str(run), "--trainer.logger.init_args.save_dir", str(run),
        "--trainer.limit_test_batches", "0",
        "--model.decoder.embed_dim", "8", "--model.decoder.hidden_dim", "16", "--model.attention.dim", "8",
        "--model.encoder.channels", "[4, 8]", "--model.encoder.kernel_sizes", "null",
        "--model.decoding.max_caption_length", "8",
        "--model.optimization.learning_rate", "0.01", "--model.encoder.coordinates", "false",
        "--model.encoder.weights", "none",
        "--data.source", "caption.data.sources.karpathy.KarpathySource",
        "--data.source.init_args.annotations", str(karpathy),
        "--data.source.init_args.images", str(root / "images"), "--data.source.init_args.resize_size", "36",
        "--data.source.init_args.crop_size", "32",
        "--data.source.init_args.instances", json.dumps([str(path) for path in instances]),
        "--data.batch_size", "5", "--data.min_count", "1",
    ])
    logged = list(csv.DictReader((run / "logs" / "version_0" / "metrics.csv").open()))
    assert any(row.get("val/attention_accuracy") for row in logged), "validation scores where the model looks"
    capsys.readouterr()
    main(["evaluate", "--ckpt", str(run / "checkpoints" / "last.ckpt"), "--predictions.out", str(root / "eval")])
    printed = capsys.readouterr().out
    report = json.loads((root / "eval" / "metrics.json").read_text())
    captions = {entry["image_id"]: entry["caption"]
                for entry in json.loads((root / "eval" / "captions.json").read_text())}
    unannotated = data["images"][-1]["cocoid"]  # its words name nothing it has boxes for: not scored
    named = [label for image_id, caption in captions.items() if image_id != unannotated
             for label in named_labels(caption.split(), category_word_labels(names)) if label is not None]
    assert report["object_words"] == len(named) > 0, captions
    assert {label: found["nouns"] for label, found in report["attention_by_label"].items()} == {
        label: named.count(label) for label in set(named)}
    for found in report["attention_by_label"].values():
        assert set(found) == {"nouns", "accuracy", "chance_location", "nouns_present", "correctness",
                              "chance_correctness"} and 0 <= found["accuracy"] <= 1
    assert {label: found["mentions"] for label, found in report["hallucination_by_label"].items()} == {
        label: named.count(label) for label in set(named)}, "CHAIR's mentions are attention accuracy's object words"
    assert 0 <= report["metrics"]["attention_accuracy"] <= 1 and "attention accuracy" in printed
    assert all(f"  {label} " in printed for label in report["attention_by_label"])


def test_a_box_reaching_outside_its_image_is_clipped_with_a_warning_naming_it(coco):
    root, karpathy, instances = coco
    data = json.loads(instances[0].read_text())
    first, second = data["annotations"][:2]
    first["bbox"] = [40, 30, 20, 20]  # 48x40 pixels: reaches 12 past the right, 10 past the bottom
    second["bbox"] = [47.5, 0, 1.2, 5]  # 0.7 past: rounding, clipped without a word
    instances[0].write_text(json.dumps(data))
    source = KarpathySource(annotations=str(karpathy), images=str(root / "images"), resize_size=48, crop_size=40,
                            instances=[str(instances[0])])
    with pytest.warns(UserWarning) as warned:
        records = {record.image_id: record for record in source.records()}
    (message,) = [str(warning.message) for warning in warned if "clipped" in str(warning.message)]
    assert message == (f"{instances[0]}: boxes reaching outside their image are clipped to it (1): annotations[0] "
                       f"(id {first['id']}, image {first['image_id']}): [40, 30, 20, 20] in 48x40")
    boxes = [obj.box for obj in records[first["image_id"]].objects]
    assert boxes == [(40, 30, 48, 40), (47.5, 0, 48, 5)]


def test_a_box_wholly_outside_its_image_is_refused_naming_the_file_and_annotation(coco):
    root, karpathy, instances = coco
    data = json.loads(instances[0].read_text())
    data["annotations"][1]["bbox"] = [100, 10, 20, 20]  # right of a 48x40 image: its object could be scored nowhere
    instances[0].write_text(json.dumps(data))
    source = KarpathySource(annotations=str(karpathy), images=str(root / "images"), instances=[str(instances[0])])
    annotation = data["annotations"][1]
    with pytest.raises(DatasetFormatError, match=re.escape(
            f"{instances[0]}: annotations[1] (id {annotation['id']}, image {annotation['image_id']}): bbox "
            "[100, 10, 20, 20] lies wholly outside its image of 48x40 pixels: fix or remove the annotation")):
        source.records()


def boxed_records(root: Path, karpathy: Path, instances: list[Path]) -> dict[int, ImageRecord]:
    """The records of the small COCO dataset with the boxes of `instances`, by image id."""
    source = KarpathySource(annotations=str(karpathy), images=str(root / "images"),
                            instances=[str(path) for path in instances])
    return {record.image_id: record for record in source.records()}


def test_boxes_of_downscaled_image_copies_are_rescaled_to_the_files_with_one_warning(tmp_path):
    karpathy = karpathy_dataset(tmp_path, size=(48, 40))  # the files: half the size the instances give
    instances = coco_instances(tmp_path, karpathy, size=(96, 80))
    with pytest.warns(UserWarning) as warned:
        records = boxed_records(tmp_path, karpathy, instances)
    said = [str(warning.message) for warning in warned if "rescaled" in str(warning.message)]
    first = tmp_path / "images" / "train2014" / "COCO_train2014_000000001000.jpg"
    assert said[0] == (f"{instances[0]}: 3 image files are copies of another size than its images[] say, of the same "
                       f"aspect ratio ({first} is 48x40 pixels, 96x80 in it and 2 more): their boxes are rescaled to "
                       "the files")
    assert len(said) == 2  # one per instances file
    for record in list(records.values())[:-1]:
        assert record.frame == (48, 40)
        assert record.objects == (ObjectBox("person", (0, 0, 24, 40)), ObjectBox("dog", (36, 30, 42, 35)))


def test_an_image_file_of_another_aspect_ratio_than_its_instances_is_refused_in_one_line(coco):
    root, karpathy, instances = coco
    first = root / "images" / "train2014" / "COCO_train2014_000000001000.jpg"
    write_image(first, size=(64, 40))
    with pytest.raises(DatasetFormatError) as error:
        boxed_records(root, karpathy, instances)
    assert str(error.value) == (
        f"{first} is 64x40 pixels, but {instances[0]} gives image 1000 as 48x40, another aspect ratio: its boxes "
        "cannot be placed on it; give the image files the instances were made for, or fix that images[] entry's "
        "width and height")


def test_each_image_header_is_read_once_for_the_boxes_and_the_header_check(coco, monkeypatch):
    root, karpathy, instances = coco
    (root / "images" / "val2014" / "COCO_val2014_000000001007.jpg").unlink()  # no size: as the instances say
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda path, *args, **kwargs: opened.append(path) or real_open(path, *args,
                                                                                                     **kwargs))
    source = KarpathySource(annotations=str(karpathy), images=str(root / "images"),
                            instances=[str(path) for path in instances])
    records = source.records()
    bad = source.check(records, decode=False)
    assert sorted(opened) == sorted(record.file for record in records if record.image_id != 1007)
    assert [(image.image_id, image.reason) for image in bad] == [(1007, "file not found")]
    assert {record.frame for record in records} == {(48, 40)}


def test_a_category_id_given_twice_is_refused_naming_it_and_both_names(coco):
    root, karpathy, instances = coco
    data = json.loads(instances[0].read_text())
    data["categories"][1]["id"] = 1  # "dog" given person's id: every person would be trained as a dog
    instances[0].write_text(json.dumps(data))
    with pytest.raises(DatasetFormatError) as error:
        boxed_records(root, karpathy, instances)
    assert str(error.value) == (f"{instances[0]}: categories[1].id is 1, the id of 'person' too (named 'dog' here): "
                                "give each category its own id")


@pytest.mark.parametrize("name", ["", "   ", "\t", "--", "dog\x1b[31m", "\ud800"])
def test_a_category_name_no_word_can_say_is_refused_naming_its_id(coco, name):
    root, karpathy, instances = coco
    data = json.loads(instances[1].read_text())
    data["categories"][1]["name"] = name
    instances[1].write_text(json.dumps(data))
    with pytest.raises(DatasetFormatError) as error:
        boxed_records(root, karpathy, instances)
    assert str(error.value) == (f"{instances[1]}: categories[1]: category 18 is named {name!r}: give it the word "
                                "captions use for it (a letter or digit, no control character)")


def test_two_categories_of_one_name_are_one_label_said_in_a_warning(coco):
    root, karpathy, instances = coco
    data = json.loads(instances[0].read_text())
    data["categories"][1]["name"] = "person"
    instances[0].write_text(json.dumps(data))
    with pytest.warns(UserWarning, match=re.escape(f"{instances[0]}: categories[1]: categories 1 and 18 are both "
                                                   "named 'person': their boxes are one label")):
        records = boxed_records(root, karpathy, instances[:1])
    assert {obj.label for record in records.values() for obj in record.objects} == {"person"}


@pytest.mark.parametrize("bbox", [[100, 10, 0, 0], [-5, 10, 0, 3], [10, 50, 4, 0]])
def test_a_box_of_no_size_outside_its_image_is_refused(coco, bbox):
    root, karpathy, instances = coco
    data = json.loads(instances[0].read_text())
    data["annotations"][1]["bbox"] = bbox
    instances[0].write_text(json.dumps(data))
    annotation = data["annotations"][1]
    with pytest.raises(DatasetFormatError, match=re.escape(
            f"{instances[0]}: annotations[1] (id {annotation['id']}, image {annotation['image_id']}): bbox "
            f"{bbox} lies wholly outside its image of 48x40 pixels")):
        boxed_records(root, karpathy, instances)


def test_a_box_of_no_size_inside_its_image_is_left_out_with_a_warning_naming_it(coco):
    root, karpathy, instances = coco
    data = json.loads(instances[0].read_text())
    annotation = data["annotations"][1]
    annotation["bbox"] = [10, 10, 0, 5]
    instances[0].write_text(json.dumps(data))
    with pytest.warns(UserWarning) as warned:
        records = boxed_records(root, karpathy, instances)
    (message,) = [str(warning.message) for warning in warned if "no width or height" in str(warning.message)]
    assert message == (f"{instances[0]}: boxes of no width or height are left out (no pixel of the image is theirs) "
                       f"(1): annotations[1] (id {annotation['id']}, image {annotation['image_id']}): [10, 10, 0, 5]")
    assert [obj.label for obj in records[annotation["image_id"]].objects] == ["person"]


def test_an_image_id_given_twice_is_refused_as_such(coco):
    root, karpathy, instances = coco
    data = json.loads(instances[0].read_text())
    data["images"][1] |= {"id": data["images"][0]["id"], "width": 10, "height": 10}
    instances[0].write_text(json.dumps(data))
    with pytest.raises(DatasetFormatError) as error:
        boxed_records(root, karpathy, instances)
    assert str(error.value) == (f"{instances[0]}: images[1].id is 1000, the id of images[0] too: give each image "
                                "one images[] entry")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{instances[1]}: image id 1003 is described by "
                                                           f"{instances[1]} too")):
        boxed_records(root, karpathy, [instances[1], instances[1]])  # one file given twice


def test_dataset_images_the_instances_do_not_list_are_said_in_a_warning(coco):
    root, karpathy, instances = coco
    with pytest.warns(UserWarning, match=re.escape(f"3 of the 9 images of {karpathy} have no images[] entry in "
                                                   f"{instances[1]} (e.g. ids [1000, 1001, 1002]), so no boxes")):
        records = boxed_records(root, karpathy, instances[1:])
    assert records[1000].frame is None and records[1004].frame == (48, 40)
