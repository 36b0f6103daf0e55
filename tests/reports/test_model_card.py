"""The model card tells how to install show-attend-tell from where it is: its source repository, named in
pyproject.toml, until it is published on a package index."""

import tomllib

import pytest
from kit.cli import REPO
from kit.models import tiny_module

from caption.reports import model_card as card_module
from caption.reports.model_card import CardFacts, model_card


def card_text() -> str:
    module = tiny_module(["<pad>", "<start>", "<end>", "<unk>", "a"])
    return model_card(CardFacts(name="owner/name", settings=module.settings, vocabulary_size=5, data=None,
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
