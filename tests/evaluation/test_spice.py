"""SPICE (`caption.evaluation.metrics`): scored only where Java and pycocoevalcap's jars (spice-1.0.jar, Stanford
CoreNLP 3.6.0 and its models) are installed, else absent from the scores and from metrics.json with the reason;
pycocoevalcap's download of CoreNLP (`get_stanford_models`, run by `Spice()`) is never triggered. Its jar runs as
pycocoevalcap runs it, on files in a temporary folder of our own that is always removed, within a timeout (a stand-in
`java` on the PATH plays it here)."""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil
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


class UnusedSpice:
    """pycocoevalcap's SPICE scorer, which must not be used: `Spice()` downloads Stanford CoreNLP, and its
    `compute_score` writes the captions into its package folder (and leaves them there when Java fails)."""

    def __init__(self):
        raise AssertionError("Spice() was made: its __init__ downloads Stanford CoreNLP")

    def compute_score(self, gts, res):
        raise AssertionError("pycocoevalcap's Spice.compute_score was called: it writes into its package folder")


@pytest.fixture(autouse=True)
def no_pycocoevalcap_scorer(monkeypatch):
    monkeypatch.setattr(pycocoevalcap_spice, "Spice", UnusedSpice)


SCORING_JAVA = """
args = sys.argv[1:]
captions = json.loads(open(args[3], encoding="utf-8").read())
json.dump([{"image_id": entry["image_id"], "scores": {"All": {"f": 0.25, "pr": 0.5, "re": 1 / 6, "fn": 3}}}
           for entry in captions], open(args[args.index("-out") + 1], "w"))
"""
FAILING_JAVA = """
print("Parsing reference captions")
sys.stderr.write('Parsing reference captions\\nException in thread "main" java.lang.ExceptionInInitializerError\\n'
                 '\\tat edu.anu.spice.SpiceParser.<init>(SpiceParser.java:178)\\n')
sys.exit(1)
"""
HANGING_JAVA = """
time.sleep(60)
"""


def java_on_path(tmp_path, monkeypatch, body: str) -> Path:
    """A stand-in `java` first on the PATH: a Python script that records what it was run with (its arguments, its
    working folder, its process id and the captions file's content) in the file returned, then runs `body`."""
    record = tmp_path / "java-run.json"
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text(f"""#!{sys.executable}
import json, os, sys, time
args = sys.argv[1:]
with open({str(record)!r}, "w", encoding="utf-8") as file:
    json.dump({{"args": args, "cwd": os.getcwd(), "pid": os.getpid(),
               "captions": json.loads(open(args[3], encoding="utf-8").read())}}, file)
{body}""", encoding="utf-8")
    java.chmod(0o755)
    monkeypatch.setenv("PATH", f"{java.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(metrics, "spice_missing", lambda: None)  # its jars: as if installed
    return record


def package_tmp_files() -> list[str]:
    """What pycocoevalcap's own SPICE leaves in its package folder's tmp/ (the captions of each run it made)."""
    folder = Path(pycocoevalcap_spice.__file__).parent / pycocoevalcap_spice.TEMP_DIR
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def ran(record: Path) -> dict:
    """What the stand-in `java` was run with; its temporary folder must be gone, its process ended and reaped."""
    run = json.loads(record.read_text(encoding="utf-8"))
    captions = Path(run["args"][3])
    assert not captions.parent.exists(), f"the temporary folder {captions.parent} is removed"
    assert captions.parent.parent == Path(tempfile.gettempdir()), "in the temporary folder of the system"
    assert not psutil.pid_exists(run["pid"]), "Java ended and reaped"
    return run


def test_the_files_checked_are_the_ones_pycocoevalcap_runs_and_downloads():
    spice_jar, corenlp, models = metrics.spice_files()
    assert spice_jar.name == pycocoevalcap_spice.SPICE_JAR == "spice-1.0.jar"
    assert spice_jar.parent.name == "spice" and corenlp.parent == models.parent == spice_jar.parent / "lib"
    assert (corenlp.name, models.name) == ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")
    assert SPICE not in METRICS and TEST_METRICS == (*METRICS, SPICE)


def test_without_its_jars_spice_is_absent_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(metrics.Path, "is_file", lambda path: False)  # the jar check: none installed
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


def test_with_its_jars_spice_runs_pycocoevalcaps_jar_as_it_does_on_files_of_our_own(tmp_path, monkeypatch):
    record = java_on_path(tmp_path, monkeypatch, SCORING_JAVA)
    left_before = package_tmp_files()
    absent = {}
    scores = metrics.score_captions(TOKENIZED, REFERENCES, metrics=ASKED, absent=absent)
    assert list(scores) == list(ASKED) and scores[SPICE] == 0.25 and absent == {}
    run = ran(record)
    spice_jar = metrics.spice_files()[0]
    args = run["args"]
    assert args[:3] == ["-jar", "-Xmx8G", str(spice_jar)] and args[4:] == ["-out", args[5], "-subset", "-silent"]
    assert Path(args[5]).parent == Path(args[3]).parent, "the scores beside the captions, in our temporary folder"
    assert run["cwd"] == str(spice_jar.parent), "run where pycocoevalcap runs it"
    assert run["captions"] == [{"image_id": key, "test": TOKENIZED[key], "refs": REFERENCES[key]}
                               for key in sorted(TOKENIZED)], "pycocoevalcap's input format"
    assert package_tmp_files() == left_before, "nothing in pycocoevalcap's package folder"
    evaluation = Evaluation("test", 3, scores, {})
    assert evaluation.metrics()["metrics"][SPICE] == 0.25 and evaluation.metrics()["absent_metrics"] == {}
    assert "SPICE" in evaluation.table() and evaluation.logged()[SPICE] == 0.25
    assert SPICE not in metrics.score_captions(TOKENIZED, REFERENCES, metrics=["bleu4"]), "only where asked for"


def test_a_failing_spice_run_is_missing_with_javas_error_and_a_warning_and_leaves_no_file(tmp_path, monkeypatch,
                                                                                        capfd):
    record = java_on_path(tmp_path, monkeypatch, FAILING_JAVA)
    left_before = package_tmp_files()
    absent = {}
    with pytest.warns(UserWarning, match=r"SPICE is missing \(its Java run failed \(Exception in thread"):
        scores = metrics.score_captions(TOKENIZED, REFERENCES, metrics=ASKED, absent=absent)
    assert list(scores) == [name for name in ASKED if name != SPICE]
    assert "java.lang.ExceptionInInitializerError" in absent[SPICE] and "Java 8" in absent[SPICE]
    ran(record)
    assert package_tmp_files() == left_before, "the captions of a failed run are not left in pycocoevalcap's folder"
    assert capfd.readouterr() == ("", ""), "Java's output captured, not printed"


def test_a_hanging_spice_run_is_ended_after_its_timeout_and_missing_with_a_warning(tmp_path, monkeypatch):
    record = java_on_path(tmp_path, monkeypatch, HANGING_JAVA)
    left_before = package_tmp_files()
    absent = {}
    started = time.monotonic()
    with pytest.warns(UserWarning, match=r"SPICE is missing \(its Java run gave no answer within 0.5 s\)"):
        scores = metrics.score_captions(TOKENIZED, REFERENCES, metrics=ASKED, absent=absent, spice_timeout=0.5)
    assert time.monotonic() - started < 20, "not the 60 s the stand-in sleeps"
    assert list(scores) == [name for name in ASKED if name != SPICE] and "no answer within 0.5 s" in absent[SPICE]
    ran(record)
    assert package_tmp_files() == left_before
    assert metrics.SPICE_TIMEOUT < 1800, "within the 30 minutes torch's collectives wait for rank 0's scoring"


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
