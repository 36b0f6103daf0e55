"""The one evaluation path (`caption.evaluation.scoring`): `caption test` and `caption evaluate` give the same numbers
on data whose references have capitals, punctuation, brackets and contractions; the references' PTB tokens are made
once and reused; without Java the stand-in is used, with one warning."""

import csv
import json
import shutil
import warnings
from pathlib import Path

import pytest
import yaml
from kit.data import write_image
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

from caption.cli import main
from caption.evaluation import metrics, ptb_tokenizer
from caption.evaluation.metrics import METRICS
from caption.evaluation.ptb_tokenizer import PTB_JAVA, PTB_PYTHON, PTBCache
from caption.model.vocabulary import tokenize

# what people write: capitals, commas, full stops, brackets, quotes, contractions, possessives; longer than the
# captions the tiny model may generate, so that the reference lengths (PTB keeps brackets as -lrb- -rrb-) count
TEMPLATES = [
    "A Man's dog (a {color} one), running on the grass.", "The {Color} dog (brown) isn't sitting; it's running!",
    "A DOG runs -- fast (very fast) -- on the {color} grass.", "Someone's {color} dog \"Rex\" (a puppy) on the grass.",
    "a man's {color} dog can't stop running (all day)...",
]
COLORS = ("red", "green", "blue", "white")


def references_of(image: int) -> list[str]:
    color = COLORS[image % len(COLORS)]
    return [text.format(color=color, Color=color.capitalize()) for text in TEMPLATES]


SPLITS = {"train": 8, "val": 2, "test": 3}
HAS_JAVA = shutil.which("java") is not None


def messy_dataset(root: Path) -> Path:
    """A Karpathy-format dataset (Flickr style) whose references are written as people write them."""
    entries = []
    for imgid, split in enumerate(split for split, count in SPLITS.items() for _ in range(count)):
        write_image(root / "images" / f"{imgid}.jpg", size=(40, 40), seed=imgid)
        raws = references_of(imgid)
        entries.append({"filename": f"{imgid}.jpg", "imgid": imgid, "split": split,
                        "sentences": [{"raw": raw, "tokens": raw.split()} for raw in raws]})
    path = root / "dataset_flickr8k.json"
    path.write_text(json.dumps({"images": entries, "dataset": "flickr8k"}), encoding="utf-8")
    return path


def write_config(root: Path) -> Path:
    config = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "max_epochs": 2, "limit_test_batches": 0, "enable_progress_bar": False,
                    "enable_model_summary": False, "default_root_dir": str(root / "run"),
                    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                               "init_args": {"save_dir": str(root / "run"), "name": "logs"}}},
        "model": {"encoder": {"name": "small_vgg", "weights": "none", "freeze": False, "channels": [4, 8]},
                  "decoder": {"embed_dim": 8, "hidden_dim": 16, "init_layers": 1}, "attention": {"dim": 8, "layers": 1},
                  "decoding": {"max_caption_length": 8, "beam_size": 2}, "optimization": {"learning_rate": 0.01}},
        "data": {"source": {"class_path": "caption.data.sources.karpathy.KarpathySource",
                            "init_args": {"annotations": str(messy_dataset(root)), "images": str(root / "images"),
                                          "resize_size": 36, "crop_size": 32}},
                 "batch_size": 8, "eval_batch_size": 2},
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def logged_test_scores(folder: Path) -> dict[str, float]:
    """The test/* values a `caption test` logged to its CSV file."""
    with next(folder.rglob("metrics.csv")).open(newline="") as file:
        rows = [row for row in csv.DictReader(file) if row.get("test/bleu4")]
    return {name.removeprefix("test/"): float(value) for name, value in rows[-1].items() if name.startswith("test/")}


@pytest.mark.slow
def test_caption_test_and_caption_evaluate_give_the_same_numbers(tmp_path):
    config = write_config(tmp_path)
    ptb, _ = ptb_tokenizer.ptb_tokenize({0: references_of(0)})
    assert all(ptb_words != " ".join(tokenize(raw)) for ptb_words, raw in zip(ptb[0], references_of(0)))

    main(["fit", "--config", str(config)])
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    main(["test", "--config", str(config), "--ckpt_path", str(last),
          "--trainer.limit_test_batches", "1.0", "--trainer.logger.init_args.save_dir", str(tmp_path / "test")])
    main(["evaluate", "--ckpt_path", str(last), "--split", "test", "--predictions.out", str(tmp_path / "evaluate")])

    tested = logged_test_scores(tmp_path / "test")
    evaluated = json.loads((tmp_path / "evaluate" / "metrics.json").read_text())
    assert evaluated["images"] == SPLITS["test"] and evaluated["beam_size"] == 2
    assert set(METRICS) <= set(tested) and evaluated["tokenizer"] == (PTB_JAVA if HAS_JAVA else PTB_PYTHON)
    assert {name: tested[name] for name in METRICS} == pytest.approx(
        {name: evaluated["metrics"][name] for name in METRICS}, rel=1e-6, abs=1e-9, nan_ok=True)
    assert tested["alpha_entropy"] == pytest.approx(evaluated["metrics"]["alpha_entropy"], rel=1e-6)

    # what validation and `caption test` scored before the one path: references in the project's own tokens
    captions = {entry["image_id"]: entry["caption"] for entry in json.loads((tmp_path / "evaluate" /
                                                                               "captions.json").read_text())}
    records = {entry["imgid"]: entry
               for entry in json.loads((tmp_path / "dataset_flickr8k.json").read_text())["images"]}
    own = metrics.score_captions(captions, {i: [" ".join(tokenize(s["raw"])) for s in records[i]["sentences"]]
                                            for i in captions}, metrics=["bleu1", "rouge_l", "cider"])
    assert own != {name: evaluated["metrics"][name] for name in own}, "the test tells the two scorings apart"


def counting_java(monkeypatch) -> list[int]:
    """The captions of each call of coco-caption's Java tokenizer, from now on."""
    lines: list[int] = []
    tokenize = ptb_tokenizer.java_ptb_tokenize

    def counted(captions: dict[int, list[str]], **settings) -> dict[int, list[str]]:
        lines.append(sum(len(texts) for texts in captions.values()))
        return tokenize(captions, **settings)

    monkeypatch.setattr(ptb_tokenizer, "java_ptb_tokenize", counted)
    return lines


@pytest.mark.skipif(not HAS_JAVA, reason="counts calls of coco-caption's Java tokenizer")
def test_references_are_tokenised_once_then_only_new_candidates(monkeypatch):
    lines = counting_java(monkeypatch)
    references = {i: references_of(i) for i in range(4)}
    cache = PTBCache()
    first, tokenizer = metrics.coco_scores({i: "a man 's dog" for i in references}, references, metrics=["bleu4"],
                                           cache=cache)
    assert tokenizer == PTB_JAVA and lines == [1 + 4 * len(TEMPLATES)]  # distinct texts, one call
    again, _ = metrics.coco_scores({i: "a man 's dog" for i in references}, references, metrics=["bleu4"], cache=cache)
    assert again == first and lines == [1 + 4 * len(TEMPLATES)], "nothing new: no Java at all"
    metrics.coco_scores({i: f"a dog {i}" for i in references}, references, metrics=["bleu4"], cache=cache)
    assert lines[1:] == [4], "the next epoch tokenises its new candidates only"
    official = PTBTokenizer().tokenize({i: [{"caption": text} for text in texts] for i, texts in references.items()})
    assert {i: [cache.tokens[text] for text in texts] for i, texts in references.items()} == official


def test_without_java_the_stand_in_is_used_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no `java` anywhere
    cache = PTBCache()
    with pytest.warns(UserWarning, match="pure-Python stand-in"):
        tokens = cache.tokenize(["A Man's dog, running.", *references_of(0)])
    assert cache.tokenizer == PTB_PYTHON and tokens["A Man's dog, running."] == "a man 's dog running"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the next epoch: no second warning, no second try of Java
        assert cache.tokenize(["The Dog."]) == {"The Dog.": "the dog"}
