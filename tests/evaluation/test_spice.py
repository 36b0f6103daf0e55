"""SPICE (`caption.evaluation.metrics`): scored only where Java and pycocoevalcap's jars (spice-1.0.jar, Stanford
CoreNLP 3.6.0 and its models) are installed, else absent from the scores and from metrics.json with the reason;
pycocoevalcap's download of CoreNLP (`get_stanford_models`, run by `Spice()`) is never triggered."""

import subprocess
import sys

import pytest
import torch
from pycocoevalcap.spice import get_stanford_models as stanford_models
from pycocoevalcap.spice import spice as pycocoevalcap_spice

from caption.evaluation import metrics
from caption.evaluation.metrics import METRICS, SPICE, TEST_METRICS
from caption.evaluation.report import Evaluation
from caption.evaluation.scoring import Captioned, score_split
from caption.model.captions import Caption

TOKENIZED = {1: "a red circle", 2: "a square"}
REFERENCES = {1: ["a red circle", "the circle"], 2: ["a blue square", "a square"]}
ASKED = tuple(name for name in TEST_METRICS if name != "meteor")  # METEOR's Java is slow, and not what is tested


@pytest.fixture(autouse=True)
def no_download(monkeypatch):
    """Any call of pycocoevalcap's CoreNLP download fails the test."""
    def download(*args, **kwargs):
        raise AssertionError("pycocoevalcap's get_stanford_models was called: it downloads Stanford CoreNLP")

    monkeypatch.setattr(stanford_models, "get_stanford_models", download)
    monkeypatch.setattr(pycocoevalcap_spice, "get_stanford_models", download)
    monkeypatch.setattr(stanford_models, "urlretrieve", download)


class FixedSpice:
    """A SPICE scorer that scores 0.25 without Java; made without its __init__, as pycocoevalcap's must be."""

    calls: list[tuple[dict, dict]] = []

    def __init__(self):
        raise AssertionError("Spice() was made: its __init__ downloads Stanford CoreNLP")

    def compute_score(self, gts, res):
        FixedSpice.calls.append((gts, res))
        return 0.25, [{"All": {"f": 0.25}} for _ in gts]


class FailingSpice(FixedSpice):
    """A SPICE whose Java run fails, as SPICE 1.0 does on a Java it was not built for."""

    def compute_score(self, gts, res):
        raise subprocess.CalledProcessError(1, ["java", "-jar"], b"", b"Parsing reference captions\nException in "
                                            b"thread \"main\" java.lang.ExceptionInInitializerError\n\tat edu.anu")


def test_the_files_checked_are_the_ones_pycocoevalcap_runs_and_downloads():
    spice_jar, corenlp, models = metrics.spice_files()
    assert spice_jar.name == pycocoevalcap_spice.SPICE_JAR == "spice-1.0.jar"
    assert spice_jar.parent.name == "spice" and corenlp.parent == models.parent == spice_jar.parent / "lib"
    assert (corenlp.name, models.name) == ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")
    assert SPICE not in METRICS and TEST_METRICS == (*METRICS, SPICE)


def test_without_its_jars_spice_is_absent_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(metrics.Path, "is_file", lambda path: False)  # the jar check: none installed
    monkeypatch.setattr(pycocoevalcap_spice, "Spice", FixedSpice)
    absent = {}
    scores = metrics.score_captions(TOKENIZED, REFERENCES, metrics=ASKED, absent=absent)
    assert list(scores) == [name for name in ASKED if name != SPICE], "absent, not NaN; the others scored"
    assert "stanford-corenlp-3.6.0.jar" in absent[SPICE] and "400 MB" in absent[SPICE]
    assert "docs/attention.md" in absent[SPICE]

    evaluation = Evaluation("test", 3, scores, {}, absent=absent)
    written = evaluation.metrics()
    assert SPICE not in written["metrics"] and written["absent_metrics"] == {SPICE: absent[SPICE]}
    assert "SPICE" not in evaluation.table()


def test_without_java_spice_is_absent_with_the_reason(monkeypatch):
    monkeypatch.setattr(metrics.shutil, "which", lambda name: None)
    absent = {}
    assert SPICE not in metrics.score_captions(TOKENIZED, REFERENCES, metrics=[SPICE, "bleu4"], absent=absent)
    assert absent == {SPICE: "no `java` on the PATH"}


def test_with_its_jars_spice_is_scored_by_pycocoevalcaps_scorer(monkeypatch):
    monkeypatch.setattr(metrics, "spice_missing", lambda: None)
    monkeypatch.setattr(pycocoevalcap_spice, "Spice", FixedSpice)
    FixedSpice.calls.clear()
    absent = {}
    scores = metrics.score_captions(TOKENIZED, REFERENCES, metrics=ASKED, absent=absent)
    assert list(scores) == list(ASKED) and scores[SPICE] == 0.25 and absent == {}
    assert FixedSpice.calls == [(REFERENCES, {key: [caption] for key, caption in TOKENIZED.items()})]
    evaluation = Evaluation("test", 3, scores, {})
    assert evaluation.metrics()["metrics"][SPICE] == 0.25 and evaluation.metrics()["absent_metrics"] == {}
    assert "SPICE" in evaluation.table() and evaluation.logged()[SPICE] == 0.25
    assert SPICE not in metrics.score_captions(TOKENIZED, REFERENCES, metrics=["bleu4"]), "only where asked for"


def test_a_failing_spice_run_is_absent_with_javas_error_and_a_warning(monkeypatch):
    monkeypatch.setattr(metrics, "spice_missing", lambda: None)
    monkeypatch.setattr(pycocoevalcap_spice, "Spice", FailingSpice)
    absent = {}
    with pytest.warns(UserWarning, match="SPICE is absent: its Java run failed"):
        scores = metrics.score_captions(TOKENIZED, REFERENCES, metrics=ASKED, absent=absent)
    assert list(scores) == [name for name in ASKED if name != SPICE]
    assert "java.lang.ExceptionInInitializerError" in absent[SPICE] and "Java 8" in absent[SPICE]


def test_spices_java_output_is_captured_not_printed(capfd):
    script = "import sys; print('out'); sys.stderr.write('Exception in thread main: boom\\n'); sys.exit(3)"
    with metrics.java_output_kept(), pytest.raises(subprocess.CalledProcessError) as failed:
        pycocoevalcap_spice.subprocess.check_call([sys.executable, "-c", script])
    assert metrics.java_error(failed.value.stderr) == "Exception in thread main: boom"
    assert pycocoevalcap_spice.subprocess is subprocess, "put back"
    assert capfd.readouterr() == ("", "")


def test_the_split_scoring_records_why_spice_is_absent_in_metrics_json(monkeypatch):
    monkeypatch.setattr(metrics.Path, "is_file", lambda path: False)
    captioned = [Captioned(key, Caption(text, text.split(), torch.full((len(text.split()), 4), 0.25),
                                        torch.ones(len(text.split())), None, -1.0),
                           tuple(REFERENCES[key]), (), torch.zeros(len(text.split())), 4)
                 for key, text in TOKENIZED.items()]
    evaluation = score_split(captioned, split="test", beam_size=1, image_size=None, word_labels={},
                             metrics=("bleu4", SPICE))
    assert list(evaluation.scores) == ["bleu4"] and "stanford-corenlp-3.6.0.jar" in evaluation.absent[SPICE]
    assert evaluation.metrics()["absent_metrics"] == evaluation.absent
