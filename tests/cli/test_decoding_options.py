"""The decoding options beyond the beam (docs/attention.md#decoding-options) from the command line, end to end: `caption
evaluate` and `caption test` on the session's tiny trained run, with diverse beam search and every blocking rule."""

import json

import pytest
from kit.cli import failed

from caption.cli import main
from caption.evaluation import meteor
from caption.model.constraints import BAD_ENDINGS

pytestmark = pytest.mark.slow  # trains the tiny runs (conftest.py) once
QUIET = ["--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false"]
RULES = ["--model.decoding.beam_size", "4", "--model.decoding.beam_groups", "2",
         "--model.decoding.diversity_strength", "0.8", "--model.decoding.no_repeat_ngram_size", "2",
         "--model.decoding.no_immediate_repeat", "true", "--model.decoding.block_bad_endings", "true",
         "--model.decoding.suppress_unknown", "true"]


class NoJava:
    """METEOR without Java: the other figures, in a fraction of the time."""

    def __init__(self):
        raise FileNotFoundError("[Errno 2] No such file or directory: 'java'")


def test_evaluate_and_test_decode_under_the_options_given(tiny_runs, tmp_path, monkeypatch):
    monkeypatch.setattr(meteor, "Meteor", NoJava)
    out = tmp_path / "eval"
    main(["evaluate", "--ckpt_path", str(tiny_runs["soft"]), "--predictions.out", str(out), *QUIET[:2], *RULES])
    captions = [entry["caption"].split() for entry in json.loads((out / "captions.json").read_text())]
    assert captions
    for words in captions:
        assert not words or words[-1] not in BAD_ENDINGS, words
        assert "<unk>" not in words and all(first != second for first, second in zip(words, words[1:])), words
        bigrams = list(zip(words, words[1:]))
        assert len(set(bigrams)) == len(bigrams), words
    assert json.loads((out / "metrics.json").read_text())["beam_size"] == 4
    # LightningCLI's parser takes them too (the sampling cuts as well: they only act where captions are sampled)
    main(["test", "--ckpt_path", str(tiny_runs["soft"]), *QUIET, *RULES, "--model.decoding.top_p", "0.9",
          "--model.decoding.temperature", "0.7", "--model.decoding.top_k", "5"])


@pytest.mark.parametrize(("flags", "named"), [
    (["--model.decoding.beam_size", "3", "--model.decoding.beam_groups", "2"], "model.decoding.beam_groups"),
    (["--model.decoding.top_p", "1.5"], "model.decoding.top_p"),
    (["--model.decoding.temperature", "0"], "model.decoding.temperature"),
])
def test_a_bad_decoding_option_is_one_line_naming_it(tiny_runs, tmp_path, flags, named):
    message = failed(["evaluate", "--ckpt_path", str(tiny_runs["soft"]), "--predictions.out", str(tmp_path / "eval"),
                      *QUIET[:2], *flags])
    assert named in message, message
