"""Stopping when attention accuracy stops rising (`early_stopping:`): counted in validations, on a scripted series of
figures, so the epoch it stops at is the series' and not the machine's."""

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from caption.errors import ConfigError
from caption.training.callbacks import AttentionPatience


class Scripted(L.LightningModule):
    """Logs val/attention_accuracy from a script, one figure per validation (NaN: not measured)."""

    def __init__(self, figures: list[float]):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.figures = figures

    def training_step(self, batch, batch_index):
        return (self.weight - 1).pow(2).sum()

    def validation_step(self, batch, batch_index):
        pass

    def on_validation_epoch_end(self):
        self.log("val/attention_accuracy", self.figures[self.current_epoch])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def epochs_run(figures: list[float], patience: int | None, max_epochs: int = 8) -> int:
    loader = DataLoader(TensorDataset(torch.zeros(2, 1)), batch_size=1)
    trainer = L.Trainer(max_epochs=max_epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[AttentionPatience(patience=patience)])
    trainer.fit(Scripted(figures), train_dataloaders=loader, val_dataloaders=loader)
    return trainer.current_epoch


def test_training_stops_after_patience_validations_without_a_rise():
    figures = [0.2, 0.5, 0.4, 0.6, 0.6, 0.59, 0.9, 0.9]
    assert epochs_run(figures, patience=2) == 6  # best 0.6 at epoch 4; epochs 5 and 6 do not rise: stop
    assert epochs_run(figures, patience=1) == 3  # epoch 3 (0.4) does not rise above 0.5
    assert epochs_run(figures, patience=None) == 8  # off: trainer.max_epochs decides


def test_a_figure_not_measured_is_refused_in_one_line():
    with pytest.raises(ConfigError) as refused:
        epochs_run([float("nan")] * 8, patience=2)
    assert "early_stopping.monitor val/attention_accuracy" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="patience must be >= 1"):
        AttentionPatience(patience=0)
