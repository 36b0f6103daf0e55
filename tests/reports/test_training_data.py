"""What `caption compare` says of a run trained otherwise than the first: on other data (what defines the data
differs), or on the same data with another vocabulary (a cap or minimum count of its own), from each checkpoint's
recorded data settings and vocabulary; on untrained tiny models, no training."""

from pathlib import Path

import torch
from kit.models import tiny_module

from caption.data.synthetic.shapes import ShapesSource
from caption.inference import Captioner
from caption.reports.runs import Model, training_difference

WORDS = ["<pad>", "<start>", "<end>", "<unk>", "a", "red", "green", "blue", "circle", "square", "triangle", "above",
         "below"]


def model(name: str, *, words: list[str], root: str = "/data/shapes", num_train: int = 50, **data_settings) -> Model:
    """A tiny model of vocabulary `words` trained (as its checkpoint records) on `num_train` shapes images in `root`,
    with `data_settings`."""
    torch.manual_seed(0)
    module = tiny_module(words, "soft")
    source = {"class_path": "caption.data.synthetic.shapes.ShapesSource",
              "init_args": {"root": root, "num_train": num_train, "num_val": 2, "num_test": 3}}
    shapes = ShapesSource()
    captioner = Captioner(module.model, transform=shapes.inference_transform(), normalization=shapes.normalization,
                          data=({"source": source, **data_settings}, "the test"))
    return Model(name, Path(f"{name}.ckpt"), captioner, None)


def difference(first: Model, other: Model) -> str | None:
    return training_difference(other.name, other.training_data(), first_name=first.name, first=first.training_data())


def test_the_same_data_with_a_capped_vocabulary_is_called_another_vocabulary_not_other_data():
    full = model("full", words=WORDS, min_count=1, max_vocab_size=None)
    capped = model("capped", words=WORDS[:10], max_vocab_size=6)
    assert difference(full, capped) == ("capped was trained on the same data as full, with another vocabulary "
                                        "(data.max_vocab_size: 6 vs None; vocabulary: 10 words vs 13, 0 of them new)")


def test_other_data_is_still_called_other_data_with_the_vocabulary_beside_it():
    full = model("full", words=WORDS)
    fewer = model("fewer", words=WORDS[:10], num_train=20, max_vocab_size=6)
    assert difference(full, fewer) == ("fewer was trained on other data than full (data.source.init_args.num_train: "
                                       "20 vs 50; data.max_vocab_size: 6 vs None; vocabulary: 10 words vs 13, 0 of "
                                       "them new); all are evaluated on the latter")
    assert difference(full, model("again", words=WORDS, root="/elsewhere/shapes")) is None
