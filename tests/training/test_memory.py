"""A vocabulary too large for the memory free is refused before training, in one line that names its size, the
estimate, the memory free and the settings that shrink it; nothing of that size is allocated to find out (the free
memory is a stand-in figure)."""

import re
import sys

import pytest
import torch
from kit.cli import failed
from kit.tiny import fit_args

from caption.errors import ConfigError, size_text
from caption.training import module
from caption.training.memory import check_training_memory, training_memory

GB = 1 << 30


def test_a_million_words_is_refused_on_a_device_with_the_memory_one_step_of_them_asks_for():
    # the paper's batch of 64 captions of up to 50 words: one float32 copy of its word scores alone is 12 GB
    words = 1_000_004
    needed = training_memory(parameters=520_000_000, trainable=515_000_000, on_device=False, optimizer="adam",
                             vocabulary_size=words, batch_size=64, steps=51)
    assert needed.step > 4 * 64 * 51 * words * 3 and needed.weights > 4 * 515_000_000 * 3
    with pytest.raises(ConfigError) as refused:
        check_training_memory(needed, vocabulary_size=words, batch_size=64, steps=51, device=torch.device("cuda"),
                              free_memory=lambda device: 16 * GB)  # a 16 GB GPU
    line = str(refused.value)
    assert line.startswith(f"a vocabulary of {words} words needs about {size_text(needed.total)} to train")
    assert "64 captions x 51 words x 1000004 words" in line, line
    assert f"more than the {size_text(16 * GB)} free on cuda" in line, line
    assert all(name in line for name in ("data.min_count", "data.max_vocab_size", "data.batch_size"))
    assert "\n" not in line


def test_a_vocabulary_that_fits_or_memory_that_cannot_be_asked_is_not_refused():
    needed = training_memory(parameters=30_000_000, trainable=20_000_000, on_device=True, optimizer="adam",
                             vocabulary_size=10_000, batch_size=64, steps=51)
    for free in (lambda device: 8 * GB, lambda device: None):
        check_training_memory(needed, vocabulary_size=10_000, batch_size=64, steps=51, device=torch.device("cpu"),
                              free_memory=free)


def test_fit_refuses_a_vocabulary_larger_than_the_memory_free_before_the_first_step(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments
    monkeypatch.setattr(module, "device_free_memory", lambda device: 1 << 10)  # a stand-in: 1 KB free
    run = tmp_path / "run"
    line = failed(["fit", *fit_args(run, "--trainer.accelerator", "cpu")])
    words = re.search(r"a vocabulary of (\d+) words needs about", line)
    assert words and int(words[1]) > 4, line  # the built-in data's words and the specials
    assert f"more than the {size_text(1 << 10)} free on cpu" in line and "16 captions x 51 words" in line, line
    assert all(name in line for name in ("data.min_count", "data.max_vocab_size", "data.batch_size")), line
    assert not list(run.rglob("*.ckpt")), "refused before any step"
