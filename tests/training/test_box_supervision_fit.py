"""Attention supervised by boxes in a real fit, in process on tiny shapes data: a positive weight has the data module's
training batches carry targets on the encoder's grid and logs train/box_supervision; weight 0 builds none; data
without boxes is refused before the first step, in one line naming the weight."""

from dataclasses import replace
from pathlib import Path

import lightning as L
import pytest
from kit.models import tiny_module
from lightning.pytorch.callbacks import Callback

from caption.data.datamodule import CaptionDataModule
from caption.data.synthetic.shapes import ShapesSource
from caption.errors import ConfigError

ENCODER = {"channels": (4, 8, 8)}  # two 2×2 max-pools: a 16×16 grid on the 64×64 shapes


class Unboxed(ShapesSource):
    """The shapes without their boxes, as data without instances is."""

    def records(self):
        return [replace(record, objects=()) for record in super().records()]


class BatchKeys(Callback):
    def __init__(self):
        self.keys: list[set[str]] = []

    def on_train_batch_start(self, trainer, module, batch, batch_index):
        self.keys.append(set(batch))
        if "box_target" in batch:
            assert batch["box_target"].shape[:2] == batch["caption"][:, 1:].shape


def fit(root: Path, source_class: type, kind: str, **objective) -> tuple[CaptionDataModule, L.Trainer, BatchKeys]:
    source = source_class(root=str(root / "data"), num_train=8, num_val=2, num_test=2)
    data = CaptionDataModule(source=source, batch_size=8, eval_batch_size=2)
    module = tiny_module(data.vocabulary, kind, encoder=ENCODER, **{kind: objective})
    keys = BatchKeys()
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=root, limit_val_batches=0, max_steps=2,
                        callbacks=[keys])
    trainer.fit(module, datamodule=data)
    return data, trainer, keys


@pytest.mark.parametrize("kind, objective", [("soft", {}), ("hard", {"samples": 2})])
def test_a_positive_weight_trains_on_targets_of_the_encoders_grid_and_logs_the_term(tmp_path, kind, objective):
    data, trainer, keys = fit(tmp_path, ShapesSource, kind, box_supervision=1.0, **objective)
    assert data.box_targets is not None and data.box_targets.grid == (16, 16)
    assert keys.keys and all("box_target" in batch for batch in keys.keys)
    logged = trainer.callback_metrics["train/box_supervision"]
    assert 0 < logged.item() < 20  # −log of a mass near a uniform α's over a box of a few cells


def test_weight_zero_builds_no_targets(tmp_path):
    data, trainer, keys = fit(tmp_path, ShapesSource, "hard")
    assert data.box_targets is None
    assert keys.keys and not any("box_target" in batch for batch in keys.keys)
    assert "train/box_supervision" not in trainer.callback_metrics


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_a_positive_weight_on_data_without_boxes_is_refused_before_training(tmp_path, kind):
    with pytest.raises(ConfigError, match=rf"model\.{kind}\.box_supervision .* no boxes") as error:
        fit(tmp_path, Unboxed, kind, box_supervision=0.5)
    assert "\n" not in str(error.value)
