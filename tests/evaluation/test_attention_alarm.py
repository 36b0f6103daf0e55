"""Validation warns, once, when attention is not looking: α (nearly) uniform, or attention accuracy no better than a
random object of the image; the warning names the settings most likely responsible and the docs that explain them."""

import math
import warnings

import lightning as L
import pytest
import torch
from kit.models import tiny_groups

from caption.data.datamodule import CaptionDataModule
from caption.data.synthetic.shapes import ShapesSource
from caption.evaluation.grid import cell_centres, inside
from caption.evaluation.grounding import Localisation
from caption.evaluation.report import Evaluation, not_looking
from caption.model.captions import Caption
from caption.training.module import CaptionModule

LOCATIONS = 1024  # the tiny two-block encoder: a 32x32 grid on 64x64 shapes


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    source = ShapesSource(root=str(tmp_path_factory.mktemp("alarm") / "data"), num_train=4, num_val=6, num_test=2)
    return CaptionDataModule(source=source, batch_size=4, eval_batch_size=6, encoder="small_vgg",
                             encoder_weights="none")


def validated(module: CaptionModule, data: CaptionDataModule) -> list[str]:
    """What `trainer.validate` warned about attention not looking."""
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        trainer.validate(module, datamodule=data, verbose=False)
    return [str(warning.message) for warning in said if "is not looking" in str(warning.message)]


class LookingStub(CaptionModule):
    """Names each object of the image by its kind, its α all on a cell inside the object's box."""

    def _decode_batch(self, batch, beam_size):
        centres = cell_centres(LOCATIONS, (64, 64))
        captions = []
        for objects in batch["objects"]:
            words = [box["label"] for box in objects]
            alpha = torch.zeros(len(words), LOCATIONS)
            for step, box in enumerate(objects):
                alpha[step, next(i for i, centre in enumerate(centres) if inside(box["box"], centre))] = 1
            captions.append(Caption(" ".join(words), words, alpha, torch.ones(len(words)), None, 0.0))
        self._epoch_captions.add(batch, captions)


@pytest.mark.parametrize(("kind", "setting"), [("hard", "model.hard.entropy_weight"), ("soft", "model.soft.alpha_c")])
def test_validation_warns_once_when_alpha_is_uniform(data, kind, setting):
    torch.manual_seed(0)  # an untrained model whose greedy captions have words (some seeds end every caption at once)
    uniform = CaptionModule(vocabulary=data.vocabulary, image_size=(64, 64),
                            **tiny_groups(kind, attention={"inverse_temperature": 0.0}))  # scores zeroed: α uniform
    (said,) = validated(uniform, data)
    assert f"within 5% of uniform attention's {math.log(LOCATIONS):.2f}" in said
    assert setting in said and "docs/hard-attention.md" in said and "\n" not in said
    assert validated(uniform, data) == [], "said once a run"


def test_validation_is_silent_when_alpha_peaks_on_the_named_object(data):
    looking = LookingStub(vocabulary=data.vocabulary, image_size=(64, 64), **tiny_groups("hard"))
    assert validated(looking, data) == []


def located(accuracy: float, chance_object: float, absent: float = 0.0) -> Localisation:
    return Localisation(nouns=40, accuracy=accuracy, other_object=1 - accuracy - absent, background=0.0,
                        absent=absent, chance_location=0.1, chance_object=chance_object)


def test_accuracy_no_better_than_a_random_object_is_not_looking():
    barely = Evaluation("val", 1, {}, {}, located(0.662, 0.616), alpha_entropy=2.0, locations=256)
    said = not_looking(barely, kind="hard")
    assert "attention accuracy 0.662 is no better than a random object of the image (0.616" in said
    assert "α entropy" not in said and "model.hard.reinforce_weight" in said
    assert not_looking(Evaluation("val", 1, {}, {}, located(0.95, 0.5), alpha_entropy=2.0, locations=256),
                       kind="hard") is None
    no_boxes = Evaluation("val", 1, {}, {}, None, alpha_entropy=5.0, locations=256)  # 5.0 < 0.95 log 256 = 5.27
    assert not_looking(no_boxes, kind="soft") is None
    assert "α entropy 5.30" in not_looking(Evaluation("val", 1, {}, {}, None, alpha_entropy=5.3, locations=256),
                                           kind="soft")


def test_object_words_naming_what_the_image_lacks_are_said_as_the_likely_cause():
    guessing = Evaluation("val", 1, {}, {}, located(0.04, 0.28, absent=0.5), alpha_entropy=4.3, locations=256)
    said = not_looking(guessing, kind="soft")
    assert "50% of the object words name what the image does not hold" in said and "\n" not in said
    # the remedy comes first, with its command; the settings after it
    assert said.index("caption pretrain-encoder --config") < said.index("model.optimization.learning_rate")
    naming = Evaluation("val", 1, {}, {}, located(0.30, 0.28, absent=0.2), alpha_entropy=4.3, locations=256)
    assert "does not hold" not in not_looking(naming, kind="soft")
    assert "pretrain-encoder" not in not_looking(naming, kind="soft")
