"""coco-caption's PTB tokenizer as the project runs it: what pycocoevalcap's `PTBTokenizer` gives, without writing into
its package folder or replacing anything of its module while Java runs (a stand-in `java` on the PATH plays it where
the real one is not needed)."""

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pycocoevalcap.tokenizer import ptbtokenizer

from caption.evaluation import ptb_tokenizer as tokenizer_module
from caption.evaluation.ptb_tokenizer import PTB_JAVA, PTB_PYTHON, ptb_tokenize

CAPTIONS = {1: ["A man riding a horse.", "Two dogs, playing (in the park)!"], 2: ["It's a cat's toy -- isn't it?"],
            7: ["Mr. Smith's U.S. car costs $3.50."]}
PACKAGE = Path(ptbtokenizer.__file__).parent


@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java")
def test_the_tokens_are_pycocoevalcaps_and_its_package_folder_is_left_as_it_was(caplog):
    before = sorted(PACKAGE.iterdir())
    theirs = ptbtokenizer.PTBTokenizer().tokenize({key: [{"caption": text} for text in texts]
                                                   for key, texts in CAPTIONS.items()})
    with caplog.at_level(logging.DEBUG, logger="caption.evaluation.ptb_tokenizer"):
        ours, tokenizer = ptb_tokenize(CAPTIONS)
    assert (ours, tokenizer) == (theirs, PTB_JAVA)
    assert sorted(PACKAGE.iterdir()) == before, "no file of ours left in pycocoevalcap's folder"
    assert any(record.levelno == logging.DEBUG and "PTBTokenizer tokenized" in record.getMessage()
               for record in caplog.records), "Java's note logged, not printed"


def test_nothing_of_pycocoevalcaps_module_is_replaced_while_java_runs(tmp_path, monkeypatch):
    """The stand-in `java` asks the test's own process, through a file, to look at the module while it runs."""
    asked, answered = tmp_path / "asked", tmp_path / "answered"
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text(f"""#!{sys.executable}
import pathlib, sys, time
pathlib.Path({str(asked)!r}).touch()
for _ in range(200):
    if pathlib.Path({str(answered)!r}).exists():
        break
    time.sleep(0.05)
print(pathlib.Path(sys.argv[-1]).read_text(encoding="utf-8").lower())
""", encoding="utf-8")
    java.chmod(0o755)
    monkeypatch.setenv("PATH", f"{java.parent}{os.pathsep}{os.environ['PATH']}")
    seen = []

    def look() -> None:
        deadline = time.monotonic() + 10
        while not asked.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(ptbtokenizer.subprocess is subprocess and vars(ptbtokenizer).get("PTBTokenizer") is not None)
        answered.touch()

    watcher = threading.Thread(target=look, daemon=True)
    watcher.start()
    tokens, tokenizer = ptb_tokenize({1: ["A Dog"]})
    watcher.join(timeout=10)
    assert (tokens, tokenizer) == ({1: ["a dog"]}, PTB_JAVA) and seen == [True]


def test_a_failing_java_falls_back_to_the_python_stand_in_with_a_warning(tmp_path, monkeypatch):
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write('Error: no main class\\n')\nsys.exit(1)\n",
                    encoding="utf-8")
    java.chmod(0o755)
    monkeypatch.setenv("PATH", f"{java.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.warns(UserWarning, match="exit status 1"):
        tokens, tokenizer = ptb_tokenize({1: ["A Dog."]})
    assert (tokens, tokenizer) == ({1: ["a dog"]}, PTB_PYTHON)


def test_a_hung_java_is_ended_after_the_timeout_and_the_stand_in_used(tmp_path, monkeypatch):
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n", encoding="utf-8")
    java.chmod(0o755)
    monkeypatch.setenv("PATH", f"{java.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(tokenizer_module, "PTB_TIMEOUT", 0.5)  # our own constant, read at each call
    started = time.monotonic()
    with pytest.warns(UserWarning, match="no answer within 0.5 s"):
        tokens, tokenizer = ptb_tokenize({1: ["A Dog."]})
    assert (tokens, tokenizer) == ({1: ["a dog"]}, PTB_PYTHON) and time.monotonic() - started < 30
