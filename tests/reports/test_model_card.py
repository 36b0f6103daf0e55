"""The model card tells how to install show-attend-tell from where it is: its source repository, named in
pyproject.toml, until it is published on a package index; its metadata is the Hub's, read back by its parser."""

import builtins
import math

import tomllib

import pytest
from kit.cli import REPO
from kit.models import tiny_module

from caption.reports import model_card as card_module
from caption.evaluation.metrics import METRICS
from caption.reports.model_card import CardFacts, metadata, model_card


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
