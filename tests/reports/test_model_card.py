"""The model card tells how to install show-attend-tell from where it is: its source repository, named in
pyproject.toml, until it is published on a package index; its metadata is the Hub's, read back by its parser; the
figures it reads from a metrics.json are those `caption evaluate` writes, anything else refused in one line."""

import builtins
import json
import math

import tomllib

import pytest
from kit.cli import REPO
from kit.models import tiny_module

from caption.reports import model_card as card_module
from caption.evaluation.metrics import METRICS
from caption.errors import CaptionError
from caption.io.provenance import Provenance
from caption.reports.model_card import CardFacts, evaluated, metadata, model_card


def card_text() -> str:
    module = tiny_module(["<pad>", "<start>", "<end>", "<unk>", "a"])
    return model_card(CardFacts(name="owner/name", settings=module.model.settings,
                                optimization=module.optimization, vocabulary_size=5, data=None,
                                version="0"))


def test_the_cards_install_line_names_the_source_url_and_the_name_of_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    source = project["urls"]["Source"]
    card = card_text()
    assert f'`pip install "{project["name"]}[hub] @ git+{source}"`' in card
    assert f"`git clone {source}`, then `pip install -e \".[hub]\"`" in card
    assert f'once it is published on PyPI, `pip install "{project["name"]}[hub]"`' in card
    assert "hub" in project["optional-dependencies"], "the extra the card installs"


def test_without_a_source_url_the_card_says_to_install_from_a_clone(monkeypatch):
    monkeypatch.setattr(card_module, "source_url", lambda: None)
    card = card_text()
    assert 'pip install -e ".[hub]"` in a clone' in card and "git+" not in card


@pytest.mark.parametrize("label", ["Homepage", "Source", "Issues", "Documentation"])
def test_the_project_urls_point_to_the_repository_the_citation_names(label):
    urls = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    citation = (REPO / "CITATION.cff").read_text(encoding="utf-8")
    assert urls[label].startswith(urls["Source"])
    assert f'repository-code: "{urls["Source"]}"' in citation


def coco_facts() -> CardFacts:
    module = tiny_module(["<pad>", "<start>", "<end>", "<unk>", "a"])
    data = {"source": {"class_path": "caption.data.sources.karpathy.KarpathySource",
                       "init_args": {"annotations": "data/coco/dataset_coco.json"}}}
    scores = dict.fromkeys(METRICS, 0.25) | {"meteor": math.nan, "attention_accuracy": 0.5}
    return CardFacts(name="owner/name", settings=module.model.settings,
                     optimization=module.optimization, vocabulary_size=5, data=data, version="0",
                     test=card_module.TestFigures(scores, origin="metrics.json"))


def test_the_metadata_round_trips_through_the_hubs_model_card():
    hub = pytest.importorskip("huggingface_hub")
    card = hub.ModelCard(model_card(coco_facts()))
    assert card.data.language == "en" and card.data.datasets == ["yerevann/coco-karpathy"]
    types = {result.metric_name: result.metric_type for result in card.data.eval_results}
    assert types["attention accuracy"] == "attention_accuracy", "its own metric, not the classification accuracy"
    assert types["BLEU-4"] == "bleu" and "METEOR" not in types
    assert {result.dataset_type for result in card.data.eval_results} == {"yerevann/coco-karpathy"}
    assert hub.ModelCard(str(card)).data.to_dict() == card.data.to_dict()


@pytest.mark.parametrize("source, datasets", [
    ("caption.data.synthetic.shapes.ShapesSource", None),
    ("my.own.Source", None),
])
def test_only_coco_and_flickr_name_a_hub_dataset(source, datasets):
    module = tiny_module(["<pad>", "<start>", "<end>", "<unk>", "a"])
    facts = CardFacts(name="n", settings=module.model.settings,
                      optimization=module.optimization, vocabulary_size=5, data={"source": {"class_path": source}},
                      version="0")
    assert metadata(facts).get("datasets") == datasets


def test_without_huggingface_hub_the_metadata_is_the_same(monkeypatch):
    pytest.importorskip("huggingface_hub")
    with_hub = metadata(coco_facts())
    real_import = builtins.__import__

    def no_hub(name, *args, **kwargs):
        if name.startswith("huggingface_hub"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hub)
    assert metadata(coco_facts()) == with_hub


def evaluate_report(**changes) -> dict:
    """A metrics.json as `caption evaluate` writes it (METEOR missing: null), with `changes` to its keys
    (`metrics__<name>` for a figure; None: the key deleted)."""
    report = {"split": "test", "beam_size": 3, "images": 8, "tokenizer": "ptb-java", "object_words": 4,
              "metrics": dict.fromkeys(METRICS, 0.25) | {"meteor": None, "attention_accuracy": 0.5,
                                                         "alpha_entropy": 1.5},
              "absent_metrics": {}}
    for key, value in changes.items():
        figure = key.startswith("metrics__")
        held, name = (report["metrics"], key.removeprefix("metrics__")) if figure else (report, key)
        if value is None:
            del held[name]
        else:
            held[name] = value
    return report


MADE = {"precision": "bf16-mixed", "seed": 0, "commit": "ab" * 20, "modified": True, "device": "cpu (AMD EPYC)"}


def test_how_the_figures_and_the_model_were_made_reach_the_card(tmp_path):
    figures = evaluated(written(tmp_path / "metrics.json", evaluate_report(provenance=MADE)))
    exported = Provenance(precision="auto", seed=7, commit="cd" * 20, modified=False, device="cpu (AMD EPYC)")
    card = model_card(CardFacts(**{**coco_facts().__dict__, "test": figures, "made": exported}))
    made = card.split("## How it was made\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert made == [
        "- training: precision auto (auto: bf16-mixed where the machine had bf16 matrix units, else 32-true), seed 7 "
        "(from the run's saved config)",
        f"- test figures: precision bf16-mixed, seed 0, commit {'ab' * 6} (modified: yes), device cpu (AMD EPYC)",
        f"- exported with show-attend-tell {coco_facts().version}, commit {'cd' * 6} (modified: no), device cpu "
        "(AMD EPYC)",
    ]
    unknown = Provenance(precision=None, seed=None, commit=None, modified=None, device="cpu (AMD EPYC)")
    card = model_card(CardFacts(**{**coco_facts().__dict__, "made": unknown}))
    assert "- training: precision unknown, seed unknown" in card
    assert "commit unknown, device cpu (AMD EPYC)" in card


def written(path, report: dict):
    path.write_text(json.dumps(report), encoding="utf-8")  # inf and NaN as JSON's Infinity and NaN, as Python reads
    return path


def test_the_figures_of_a_metrics_json_of_caption_evaluate_reach_the_card(tmp_path):
    figures = evaluated(written(tmp_path / "metrics.json", evaluate_report()))
    assert figures.scores == dict.fromkeys(METRICS, 0.25) | {"meteor": None, "attention_accuracy": 0.5,
                                                             "alpha_entropy": 1.5}
    assert (figures.split, figures.beam_size, figures.images, figures.tokenizer) == ("test", 3, 8, "ptb-java")
    facts = coco_facts()
    card = model_card(CardFacts(**{**facts.__dict__, "test": figures}))
    assert "Measured on the test split, 8 images, beam 3, tokenizer ptb-java; from metrics.json" in card


@pytest.mark.parametrize("changes, key, shown", [
    ({"metrics__bleu4": math.inf}, "metrics.bleu4", "inf"),
    ({"metrics__cider": -math.inf}, "metrics.cider", "-inf"),
    ({"metrics__cider": math.nan}, "metrics.cider", "nan"),
    ({"metrics__bleu1": "0.3"}, "metrics.bleu1", "'0.3'"),
    ({"metrics__rouge_l": -0.5}, "metrics.rouge_l", "-0.5"),
    ({"metrics__attention_accuracy": True}, "metrics.attention_accuracy", "True"),
    ({"metrics__alpha_entropy": [1.5]}, "metrics.alpha_entropy", "[1.5]"),
    ({"metrics__bleu2": 10 ** 400}, "metrics.bleu2", "1000"),
    ({"split": None}, "split", "None"),
    ({"split": "train"}, "split", "'train'"),
    ({"split": "None"}, "split", "'None'"),
    ({"images": -5}, "images", "-5"),
    ({"images": 2.5}, "images", "2.5"),
    ({"images": "8"}, "images", "'8'"),
    ({"images": True}, "images", "True"),
    ({"beam_size": "x"}, "beam_size", "'x'"),
    ({"beam_size": 0}, "beam_size", "0"),
    ({"tokenizer": "\x1b[2Jcleared"}, "tokenizer", "'\\x1b[2Jcleared'"),
    ({"provenance": "cpu"}, "provenance", "'cpu'"),
    ({"provenance": {**MADE, "device": "\x1b[2Jcpu"}}, "provenance.device", "'\\x1b[2Jcpu'"),
    ({"provenance": {**MADE, "seed": "0"}}, "provenance.seed", "'0'"),
    ({"provenance": {**MADE, "commit": "$(reboot)"}}, "provenance.commit", "'$(reboot)'"),
    ({"provenance": {**MADE, "precision": "fp8"}}, "provenance.precision", "'fp8'"),
])
def test_a_metrics_json_figure_or_field_evaluate_never_writes_is_refused_naming_the_file_and_key(tmp_path, changes,
                                                                                                 key, shown):
    path = written(tmp_path / "metrics.json", evaluate_report(**changes))
    with pytest.raises(CaptionError) as refused:
        evaluated(path)
    message = str(refused.value)
    assert message.startswith(f"--metrics {path}: {key} is {shown}") and "\n" not in message, message
    assert "`caption evaluate`" in message and len(message) < 300, message
