"""File names that are not UTF-8, and the bounds of a search, as a careless user or an attacker meets them: a name
is carried as it is through captions.json, captions.csv, the figures and the console, with nothing lost; a beam
is bounded by the captions the search can hold and by the memory free, each bound named in one line; the API's
decoding arguments are checked by type; an image file's bytes are an image; a command given no image file says so
in one line; `describe` writes its captions before its figures."""

import csv
import json
import os
from pathlib import Path

import pytest
import torch
from kit.cli import caption, failed
from kit.data import write_image
from kit.search import all_hypotheses
from kit.serving import VOCABULARY, tiny_captioner

import caption.inference.captioner as captioner_module
import caption.inference.describe_images as describe_module
from caption.data.sources.image_files import BadImageError, image_files
from caption.errors import ConfigError
from caption.evaluation.results import result, write_results
from caption.inference import describe
from caption.model import decoding, search
from caption.model.captions import Caption

LATIN = b"latin\xe9"  # é in Latin-1: not UTF-8
SHOWN = "latin\\xe9"  # how figure titles, captions.csv and the console write it


@pytest.fixture
def latin_folder(tmp_path) -> Path:
    """A folder holding one image whose file name is not UTF-8 (b"latin\\xe9.png"), and one whose name is."""
    folder = tmp_path / "photos"
    folder.mkdir()
    try:
        write_image(Path(os.fsdecode(os.fsencode(folder) + b"/" + LATIN + b".png")), size=(40, 30))
    except (OSError, UnicodeError):
        pytest.skip("this file system takes only UTF-8 file names")
    write_image(folder / "plain.png", size=(40, 30), seed=1)
    return folder


def made(text: str) -> Caption:
    words = text.split()
    return Caption(text, words, torch.full((len(words), 4), 0.25), torch.ones(len(words)), None, -1.0)


def test_results_carry_a_file_name_that_is_not_utf8(tmp_path):
    name = os.fsdecode(b"/photos/" + LATIN + b".png")
    json_path, csv_path = write_results([result(0, name, [made("a red circle")], [os.fsdecode(LATIN + b".png")])],
                                        tmp_path)
    entry = json.loads(json_path.read_bytes().decode("utf-8"))[0]  # UTF-8, as every JSON reader wants
    assert os.fsencode(entry["file_name"]) == b"/photos/" + LATIN + b".png", "the file's own bytes, read back"
    assert os.fsencode(entry["figure"]) == LATIN + b".png"
    with open(csv_path, newline="", encoding="utf-8") as file:
        (row,) = csv.DictReader(file)
    assert (row["file_name"], row["figure"]) == (f"/photos/{SHOWN}.png", f"{SHOWN}.png")


def test_describe_carries_a_file_name_that_is_not_utf8_to_its_results_figures_and_console(
        latin_folder, tmp_path, capsys):
    captioner = tiny_captioner("soft", None, seed=1)
    out = tmp_path / "described"
    described = describe(captioner, image_files([latin_folder]), out=out, say=print)
    assert len(described) == 2
    entries = {os.fsencode(entry["file_name"]): entry for entry in json.loads((out / "captions.json").read_text())}
    latin = entries[os.fsencode(latin_folder) + b"/" + LATIN + b".png"]
    assert os.fsencode(latin["figure"]) == os.fsencode(out) + b"/" + LATIN + b".png"
    assert (os.fsencode(out) + b"/" + LATIN + b".png") in [os.fsencode(path) for path in out.iterdir()]
    assert f"{SHOWN}.png: {latin['caption']}" in capsys.readouterr().out
    figure = captioner.plot(Path(latin["file_name"]))  # its title: the name's bytes as \xNN
    assert figure.axes[0].get_title() == f"{SHOWN}.png"


@pytest.mark.slow
def test_predict_carries_a_file_name_that_is_not_utf8(tiny_runs, latin_folder, tmp_path):
    done = caption("predict", "--ckpt_path", str(tiny_runs["soft"] / "checkpoints" / "last.ckpt"),
                   "--data.predict", str(latin_folder), "--predictions.out", str(tmp_path / "predicted"),
                   "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    names = {os.fsencode(entry["file_name"]) for entry in json.loads((tmp_path / "predicted" / "captions.json")
                                                                     .read_text())}
    assert names == {os.fsencode(latin_folder) + b"/" + LATIN + b".png", os.fsencode(latin_folder / "plain.png")}


def test_describe_writes_the_captions_before_it_draws_a_figure(latin_folder, tmp_path, monkeypatch):
    out, seen = tmp_path / "described", []

    def save(figure, path):
        seen.append([len(entry["n_best"]) for entry in json.loads((out / "captions.json").read_text())])

    monkeypatch.setattr(describe_module, "save_figure", save)
    describe(tiny_captioner("soft", None, seed=1), image_files([latin_folder]), out=out, num_captions=3)
    assert seen == [[3, 3]] * 6, "both images' three captions are written before the first of their six figures"


def test_the_search_holds_as_many_captions_as_exhaustive_enumeration_counts():
    for max_length in range(1, 5):  # kit.search: 6 tokens, 4 of which can be generated
        assert decoding.distinct_captions(6, max_length) == len(list(all_hypotheses(max_length)))
    assert decoding.distinct_captions(3, 30) == 1, "only <end>"
    assert decoding.distinct_captions(4, 30) == 31, "<end> and one word: 0 to 30 of it"
    assert decoding.distinct_captions(10_000, 30) == decoding.COUNTED_UP_TO


def test_a_beam_wider_than_the_captions_the_search_holds_is_refused_naming_the_bound(tmp_path):
    captioner = tiny_captioner("soft", None, seed=1)
    image = write_image(tmp_path / "photo.png")
    most = decoding.distinct_captions(len(VOCABULARY), 6)  # 9 words to choose from, at most 6 a caption: 299,593
    for call in (lambda: captioner(image, beam_size=10**6), lambda: captioner.plot(image, beam_size=most + 1),
                 lambda: captioner(image, beam_size=most + 1, num_captions=2)):
        with pytest.raises(ConfigError, match=f"^decoding.beam_size is [0-9]+, but this model's search holds at most "
                                              f"{most} distinct captions .*give at most {most}$"):
            call()
    assert len(captioner(image, beam_size=3, num_captions=3)) == 3


def test_a_beam_larger_than_the_memory_free_is_refused_naming_the_widest_that_fits(tmp_path, monkeypatch):
    captioner = tiny_captioner("soft", None, seed=1)
    image = write_image(tmp_path / "photo.png")
    needed = {beam: search.search_bytes(images=1, beam_size=beam, locations=32 * 32, attention_dim=8,
                                 vocabulary_size=len(VOCABULARY), max_length=6) for beam in (2, 3)}
    monkeypatch.setattr(captioner_module, "free_memory", lambda device: needed[3] - 1)
    with pytest.raises(ConfigError, match=r"a beam of 3 over 1 images needs about .* more than the .* free on cpu: "
                                          r"use a beam of at most 2 \(decoding.beam_size, num_captions\)"):
        captioner(image, beam_size=3)
    with pytest.raises(ConfigError, match="a beam of 4 over 1 images"):
        captioner(image, num_captions=4)
    assert len(captioner(image, beam_size=2, num_captions=2)) == 2, "the widest that fits runs"


@pytest.mark.parametrize(("argument", "value"), [("beam_size", "three"), ("beam_size", 2.5), ("beam_size", True),
                                                 ("beam_size", 0), ("max_length", "10"), ("max_length", -1),
                                                 ("num_captions", "2")])
def test_a_decoding_argument_of_the_wrong_type_is_named_in_one_line(tmp_path, argument, value):
    captioner = tiny_captioner("soft", None, seed=1)
    image = write_image(tmp_path / "photo.png")
    for call in (captioner.__call__, captioner.plot):
        with pytest.raises(ValueError, match=rf"^{argument} must be an integer >= 1 \(or None: .*\), got {value!r}$"):
            call(image, **{argument: value})
    assert captioner(image, beam_size=torch.tensor(2).item(), max_length=3).text is not None


def test_an_image_files_bytes_are_an_image(tmp_path):
    captioner = tiny_captioner("soft", None, seed=1)
    path = write_image(tmp_path / "photo.png", size=(50, 40))
    expected = captioner(path).text
    data = path.read_bytes()
    assert [captioner(given).text for given in (data, bytearray(data), memoryview(data))] == [expected] * 3
    assert [caption.text for caption in captioner([data, str(path)])] == [expected] * 2, "one image, not many ints"
    assert captioner.plot(data).axes[0].get_title() == "input"
    with pytest.raises(BadImageError, match=r"^an image file's bytes \(7 bytes\): not an image file Pillow can read"):
        captioner(b"\x89PNG...")


def test_no_image_file_is_one_error_line_and_nothing_before_it(tmp_path, recwarn):
    empty = tmp_path / "empty"
    (empty / "nested").mkdir(parents=True)
    with pytest.raises(ConfigError, match=f"^data.predict: {empty} holds no image files .*; folder {empty}: its 1 "
                                          r"subfolders are not searched \(nested\)"):
        image_files([empty], required="data.predict")
    assert not recwarn.list
    with pytest.warns(UserWarning, match=f"folder {empty} holds no image files"):  # beside images: said, not fatal
        assert len(image_files([empty, write_image(tmp_path / "photo.png")])) == 1
    recwarn.clear()
    line = failed(["describe", "--ckpt_path", str(tmp_path / "never-read.ckpt"), str(empty), "--predictions.out",
                   str(tmp_path / "out")])
    assert line == (f"caption: error: caption describe: {empty} holds no image files (of the kinds Pillow reads: "
                    f".png, .jpg, ...); folder {empty}: its 1 subfolders are not searched (nested); name each folder "
                    "of images")
    assert not [str(warning.message) for warning in recwarn], "nothing before the one line"


def test_a_non_utf8_name_in_an_error_line_is_written_as_its_bytes(tmp_path):
    try:
        missing = Path(os.fsdecode(os.fsencode(tmp_path) + b"/" + LATIN))
        missing.mkdir()
    except (OSError, UnicodeError):
        pytest.skip("this file system takes only UTF-8 file names")
    line = failed(["describe", "--ckpt_path", "x.ckpt", str(missing), "--predictions.out", str(tmp_path / "out")])
    assert line == (f"caption: error: caption describe: {tmp_path}/{SHOWN} holds no image files (of the kinds Pillow "
                    "reads: .png, .jpg, ...)")
    line.encode("utf-8")  # printable as it is


def test_a_missing_name_that_is_not_utf8_is_written_as_its_bytes(tmp_path):
    from caption.errors import ConfigError

    missing = tmp_path / os.fsdecode(b"\xff\xfe.png")
    with pytest.raises(ConfigError) as raised:
        image_files([missing])
    assert str(raised.value) == f"{tmp_path}/\\xff\\xfe.png: no such image file or folder"
