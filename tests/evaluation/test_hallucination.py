"""CHAIR (Rohrbach et al., EMNLP 2018): CHAIR-i, the share of object mentions naming what the image does not hold,
and CHAIR-s, the share of captions with such a mention; by hand, on a COCO-format instances file read by the data
source (categories, synonyms, two-word names), and against a transcription of the published counting loop."""

import json
import math
import random

import pytest
import torch
from kit.data import karpathy_dataset

from caption.data.sources.coco_categories import COCO_WORD_LABELS
from caption.data.sources.karpathy import KarpathySource
from caption.data.sources.records import ObjectBox
from caption.evaluation.grounding import localisation
from caption.evaluation.hallucination import ground_truth_labels, hallucination

SHAPES = {"circle": "circle", "circles": "circle", "square": "square", "triangle": "triangle"}


def test_chair_of_three_captions_by_hand():
    captions = [
        ("a red circle and two circles".split(), {"circle", "square"}),  # circle twice: 2 mentions, none wrong
        ("a square left of a triangle".split(), {"square"}),  # the triangle is hallucinated
        ("a triangle above a triangle".split(), {"circle"}),  # both mentions hallucinated
    ]
    found = hallucination(captions, word_labels=SHAPES)
    assert (found.captions, found.mentions, found.hallucinated_mentions, found.hallucinated_captions) == (3, 6, 3, 2)
    assert found.scores() == {"chair_i": 3 / 6, "chair_s": 2 / 3}
    assert {label: (counts.mentions, counts.hallucinated) for label, counts in found.by_label.items()} == {
        "circle": (2, 0), "square": (1, 0), "triangle": (3, 3)}
    assert found.by_label["triangle"].chair_i == 1.0
    nothing = hallucination([("a shape".split(), set())], word_labels=SHAPES)
    assert math.isnan(nothing.scores()["chair_i"]) and nothing.scores()["chair_s"] == 0
    assert all(math.isnan(value) for value in hallucination([], word_labels=SHAPES).scores().values())


def test_the_ground_truth_is_the_boxes_and_what_the_references_name():
    boxes = (ObjectBox("person", (0, 0, 10, 10)),)
    references = ("A man holds an umbrella.", "Two people under umbrellas, a Dog nearby")
    truth = ground_truth_labels(boxes, references, word_labels=COCO_WORD_LABELS)
    assert truth == {"person", "umbrella", "dog"}
    found = hallucination([("a woman with an umbrella and a dog and a cat".split(), truth)],
                          word_labels=COCO_WORD_LABELS)
    assert (found.mentions, found.hallucinated_mentions) == (4, 1)
    assert (found.by_label["cat"].mentions, found.by_label["cat"].hallucinated) == (1, 1)
    assert found.by_label["umbrella"].hallucinated == 0, "named by a reference, not boxed: not hallucinated"


def coco_format_source(tmp_path) -> KarpathySource:
    """A Karpathy-format dataset whose first three train2014 images have, in instances_train2014.json: a person and
    a teddy bear; a dog; a hot dog and a person (the other images, of both instances files, nothing)."""
    karpathy = karpathy_dataset(tmp_path)
    images = json.loads(karpathy.read_text())["images"]
    categories = {"person": 1, "dog": 18, "hot dog": 58, "teddy bear": 88}
    held = [("person", "teddy bear"), ("dog",), ("hot dog", "person")]
    paths = []
    for folder in ("train2014", "val2014"):
        entries = [entry for entry in images if entry["filepath"] == folder]
        annotations = [{"id": 10 * index + k, "image_id": entries[index]["cocoid"], "category_id": categories[name],
                        "bbox": [k * 10, 0, 10, 20], "iscrowd": 0, "area": 200, "segmentation": []}
                       for index, names in enumerate(held if folder == "train2014" else [])
                       for k, name in enumerate(names)]
        paths.append(tmp_path / "annotations" / f"instances_{folder}.json")
        paths[-1].parent.mkdir(exist_ok=True)
        paths[-1].write_text(json.dumps({
            "info": {}, "licenses": [], "annotations": annotations,
            "categories": [{"id": number, "name": name, "supercategory": "thing"}
                           for name, number in categories.items()],
            "images": [{"id": entry["cocoid"], "file_name": entry["filename"], "width": 48, "height": 40}
                       for entry in entries]}))
    return KarpathySource(annotations=str(karpathy), images=str(tmp_path / "images"),
                          instances=[str(path) for path in paths])


def test_chair_on_a_coco_format_instances_file_with_synonyms_and_two_word_names(tmp_path):
    source = coco_format_source(tmp_path)
    records = [record for record in source.records() if record.objects]
    assert [sorted({box.label for box in record.objects}) for record in records] == [
        ["person", "teddy bear"], ["dog"], ["hot dog", "person"]]
    generated = ["a man holding a teddy bear next to a dog",  # person, teddy bear; the dog is hallucinated
                 "two puppies and a puppy with a man",  # dog twice; the man (person) is hallucinated
                 "a hot dog and two hot dogs near a woman"]  # hot dog twice, person: none ("dog" is the hot dog's)
    found = hallucination(((caption.split(), ground_truth_labels(record.objects, record.references,
                                                                 word_labels=source.word_labels))
                           for caption, record in zip(generated, records)), word_labels=source.word_labels)
    assert found.scores() == {"chair_i": 2 / 9, "chair_s": 2 / 3}
    assert {label: (counts.mentions, counts.hallucinated) for label, counts in found.by_label.items()} == {
        "dog": (3, 1), "hot dog": (2, 0), "person": (3, 1), "teddy bear": (1, 0)}
    other = hallucination([("a cat on a bench".split(), {"person"})], word_labels=source.word_labels)
    assert other.mentions == 0, "only the instances' categories are objects: cat and bench are none of them"


def published_chair(captions: list[tuple[list[str], set[str]]]) -> tuple[float, float]:
    """CHAIR-i and CHAIR-s as LisaAnne/Hallucination's utils/chair.py `compute_chair` counts, given each caption's
    object mentions (its node words, one per mention, in order) and its ground-truth objects."""
    num_caps = num_hallucinated_caps = hallucinated_word_count = coco_word_count = 0
    for node_words, gt_objects in captions:
        coco_word_count += len(node_words)
        hallucinated = False
        for node_word in node_words:
            if node_word not in gt_objects:
                hallucinated_word_count += 1
                hallucinated = True
        num_caps += 1
        num_hallucinated_caps += hallucinated
    return hallucinated_word_count / coco_word_count, num_hallucinated_caps / num_caps


@pytest.mark.parametrize("seed", range(5))
def test_chair_counts_as_the_published_code(seed):
    rng = random.Random(seed)
    nouns = ["man", "dog", "puppies", "bike", "teddy bear", "hot dog", "cat", "pizza"]
    captions, mentions = [], []
    for _ in range(20):
        picked = [rng.choice(nouns) for _ in range(rng.randint(0, 4))]
        words = " ".join(word for noun in picked for word in ("a", noun)).split()
        truth = set(rng.sample(["person", "dog", "bicycle", "teddy bear", "hot dog", "cat", "pizza"], 3))
        captions.append((words, truth))
        mentions.append(([COCO_WORD_LABELS[noun] for noun in picked], truth))
    if not any(node_words for node_words, _ in mentions):
        pytest.skip("no mention drawn")
    found = hallucination(captions, word_labels=COCO_WORD_LABELS).scores()
    assert (found["chair_i"], found["chair_s"]) == pytest.approx(published_chair(mentions))


def test_with_the_boxes_alone_as_ground_truth_chair_i_is_the_share_of_nouns_of_absent_objects():
    rng = random.Random(1)
    images = []
    for _ in range(30):
        boxes = tuple(ObjectBox(rng.choice(["circle", "square", "triangle"]), (0, 0, 8, 8))
                      for _ in range(rng.randint(1, 2)))
        images.append(([rng.choice(["a", "circle", "circles", "square", "triangle"]) for _ in range(4)], boxes))
    found = localisation([(words, torch.full((4, 16), 1 / 16), boxes) for words, boxes in images],
                         image_size=(32, 32), word_labels=SHAPES)
    named = hallucination([(words, ground_truth_labels(boxes, (), word_labels=SHAPES)) for words, boxes in images],
                          word_labels=SHAPES)
    assert named.mentions == found.nouns and named.scores()["chair_i"] == pytest.approx(found.absent)
