"""Files written when every module sat side by side under caption/ (0.2.0's flat layout) still work: its checkpoints
caption as they did then (the same words; the same log-probabilities and attention maps up to float rounding), its
configs train, and each old class path is read as its new one, saying so in one
line. The fixtures (tests/fixtures/flat_layout) were written by that layout: two tiny runs of the built-in data (soft,
then hard on its encoder), their captions of three images, and the soft run's saved config."""

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from caption import Captioner
from caption.cli import main
from caption.data.sources.base import CaptionSource
from caption.errors import CaptionWarning
from caption.io.checkpoints import read_checkpoint
from caption.io.class_paths import checked
from caption.legacy.moved import MOVED, moved_modules, new_class_path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flat_layout"
IMAGES = [str(FIXTURES / f"image{index}.png") for index in range(3)]
WRITTEN_UNDER = "/tmp/fx/runs"  # where the fixture runs were trained: the saved config's paths start here
# The fixtures' floats were recorded on another CPU: float32 kernels (oneDNN, MKL, their vector widths) round sums in
# another order, a few units in the last place (float32: 1.2e-7) per operation, some 1e-6 relative after a caption's
# few steps. rtol 1e-4 is a hundred times that, and far below what a real change moves (a weight, a normalisation, a
# step of the search: 1e-2 and more); atol 1e-6 for the attention weights near 0. The words are compared exactly.
RECORDED_RTOL, RECORDED_ATOL = 1e-4, 1e-6


def captions_of(captioner: Captioner, *, beam_size: int) -> list[dict]:
    return [{"text": caption.text, "log_prob": float(caption.log_prob), "alpha": caption.alpha.tolist()}
            for caption in captioner(IMAGES, beam_size=beam_size)]


def assert_as_recorded(found: list[dict], recorded: list[dict]) -> None:
    """The same words, and the same log-probabilities and attention maps within the rounding of another CPU."""
    assert [caption["text"] for caption in found] == [caption["text"] for caption in recorded]
    for ours, theirs in zip(found, recorded, strict=True):
        for key in ("log_prob", "alpha"):
            np.testing.assert_allclose(np.asarray(ours[key]), np.asarray(theirs[key]), rtol=RECORDED_RTOL,
                                       atol=RECORDED_ATOL, err_msg=f"{key} of {ours['text']!r}")


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_a_checkpoint_of_the_flat_layout_captions_as_it_did(kind):
    expected = json.loads((FIXTURES / "captions.json").read_text())
    with pytest.warns(CaptionWarning) as said:  # recorded in fp32; bf16-mixed below
        captioner = Captioner.from_checkpoint(FIXTURES / f"{kind}.ckpt", precision="32-true")
    for beam_size in (1, 3):
        assert_as_recorded(captions_of(captioner, beam_size=beam_size), expected[f"{kind} beam {beam_size}"])
    captioner.precision = "bf16-mixed"  # the same captions; log-probabilities within bf16's rounding
    for beam_size in (1, 3):
        recorded = expected[f"{kind} beam {beam_size}"]
        found = captions_of(captioner, beam_size=beam_size)
        assert [caption["text"] for caption in found] == [caption["text"] for caption in recorded]
        np.testing.assert_allclose([caption["log_prob"] for caption in found],
                                   [caption["log_prob"] for caption in recorded], rtol=0.02)
    assert [str(warning.message) for warning in said] == [
        f"checkpoint {FIXTURES / f'{kind}.ckpt'} names caption.data.shapes.ShapesSource, which is now "
        "caption.data.synthetic.shapes.ShapesSource: read as caption.data.synthetic.shapes.ShapesSource (the old name "
        "is read until caption 0.4)"]


def test_the_checkpoint_reader_hands_on_the_new_class_path():
    with pytest.warns(CaptionWarning, match="caption.data.shapes.ShapesSource, which is now"):
        checkpoint = read_checkpoint(FIXTURES / "soft.ckpt")
    source = checkpoint["datamodule_hyper_parameters"]["source"]
    assert source["class_path"] == "caption.data.synthetic.shapes.ShapesSource"


@pytest.mark.slow
def test_a_config_of_the_flat_layout_trains_and_its_run_captions(tmp_path, monkeypatch):
    config = (FIXTURES / "soft_config.yaml").read_text(encoding="utf-8")
    assert "caption.callbacks.TokensPerSecond" in config and "class_path: caption.data.shapes.ShapesSource" in config
    (tmp_path / "config.yaml").write_text(config.replace(WRITTEN_UNDER, str(tmp_path)), encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["caption"])
    with pytest.warns(CaptionWarning) as said:
        main(["fit", "--config", str(tmp_path / "config.yaml"), "--trainer.max_epochs", "1",
              "--trainer.limit_test_batches", "0", "--trainer.enable_progress_bar", "false"])
    said = [str(warning.message) for warning in said]
    for old, new in (("caption.callbacks", "caption.training.callbacks"),
                     ("caption.data.shapes", "caption.data.synthetic.shapes")):
        assert f"a config names {old}, which is now {new}: read as {new} (the old name is read until caption 0.4)" \
            in said, said
    assert (tmp_path / "soft" / "checkpoints" / "last.ckpt").is_file()
    main(["predict", "--ckpt_path", str(tmp_path / "soft"), "--data.predict", str(FIXTURES),
          "--predictions.out", str(tmp_path / "predictions"), "--trainer.enable_progress_bar", "false"])
    written = json.loads((tmp_path / "predictions" / "captions.json").read_text())
    assert sorted(Path(entry["file_name"]).name for entry in written) == ["image0.png", "image1.png", "image2.png"]


def test_every_module_of_the_flat_layout_names_a_module_of_today_with_the_same_classes():
    for old, new in MOVED.items():
        if old == "caption.evaluation":  # a package of today's: its old classes (which no config names) by path only
            assert new_class_path("caption.evaluation.EpochCaptions") == "caption.evaluation.scoring.EpochCaptions"
            continue
        with moved_modules(), warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            module = __import__(old, fromlist=["_"])
        today = sys.modules[new]
        public = {name: value for name, value in vars(today).items() if isinstance(value, type)
                  and value.__module__ == new}
        assert all(getattr(module, name) is value for name, value in public.items()), old
        lines = [str(warning.message) for warning in said if warning.category is CaptionWarning]
        assert lines[-1] == f"a config names {old}, which is now {new}: read as {new} (the old name is read until " \
            "caption 0.4)", lines  # after its old package's line, if it had one
        for name in public:
            assert new_class_path(f"{old}.{name}") == f"{new}.{name}"


def test_old_names_are_importable_only_inside_and_leave_nothing_behind():
    import caption

    finders, modules = list(sys.meta_path), set(sys.modules)
    with moved_modules(), pytest.warns(CaptionWarning):
        from caption.callbacks import TokensPerSecond  # noqa: F401  an old module name
        from caption.commands import lightning  # noqa: F401  a module of an old package
    assert sys.meta_path == finders and not {"caption.callbacks", "caption.commands"} & set(sys.modules) - modules
    assert not hasattr(caption, "callbacks") and not hasattr(caption, "commands")
    with pytest.raises(ImportError):
        __import__("caption.callbacks")
    assert new_class_path("caption.data.synthetic.shapes.ShapesSource") is None, "a path of today is left as it is"
    assert new_class_path("os.system") is None


def test_an_old_class_path_in_a_config_given_to_describe_is_looked_up_by_its_new_one():
    with pytest.warns(CaptionWarning, match="names caption.data.karpathy.KarpathySource, which is now "
                                            "caption.data.sources.karpathy.KarpathySource"):
        found = checked({"class_path": "caption.data.karpathy.KarpathySource"}, base=CaptionSource,
                        key="data.source", origin="config my.yaml")
    assert found == {"class_path": "caption.data.sources.karpathy.KarpathySource", "init_args": {}}
