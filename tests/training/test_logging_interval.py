"""`LoggingInterval`: a run shorter than `trainer.log_every_n_steps` still logs its training figures, at its first
optimizer step and at its last, and a long run logs them at the configured interval besides."""

from typing import Any

import lightning as L
import pytest
import torch
from kit.loggers import Recording
from torch.utils.data import DataLoader

from caption.training.callbacks import LoggingInterval


class Toy(L.LightningModule):
    """One weight, its square logged as `train/nll` at every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))

    def training_step(self, batch: torch.Tensor, batch_index: int) -> torch.Tensor:
        loss = self.weight ** 2 * batch.mean()
        self.log("train/nll", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def logged_steps(*, max_steps: int, every: int, accumulate: int = 1, batches: int = 40, tmp_path: Any) -> list[int]:
    logger = Recording()
    trainer = L.Trainer(accelerator="cpu", max_steps=max_steps, log_every_n_steps=every, logger=logger,
                        accumulate_grad_batches=accumulate, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[LoggingInterval()], default_root_dir=tmp_path)
    trainer.fit(Toy(), DataLoader(torch.ones(batches, 1), batch_size=1))
    assert trainer.log_every_n_steps == min(every, batches), "the interval is left as it was set"
    return [step for step, _ in logger.values("train/nll")]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_run_shorter_than_the_interval_logs_its_first_and_last_steps(tmp_path, accumulate):
    assert logged_steps(max_steps=5, every=50, accumulate=accumulate, tmp_path=tmp_path) == [0, 4]


def test_a_longer_run_logs_at_the_interval_and_at_its_first_and_last_steps(tmp_path):
    assert logged_steps(max_steps=23, every=10, tmp_path=tmp_path) == [0, 9, 19, 22]
