"""Throughput logs: tokens per second once per logged window (one all-reduce each), and MFU from the analytic
FLOP count through Lightning's ThroughputMonitor on a GPU (inert on a CPU; its GPU path forced here on a CPU)."""

import itertools
import types
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from kit.loggers import Recording
from kit.models import TINY_GROUPS, tiny_module
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import RunningStage
from torch.utils.data import DataLoader

from caption.config.keys import dotted
from caption.data.datamodule import DATA_LINKS, CaptionDataModule
from caption.data.synthetic.shapes import ShapesSource
from caption.model.flops import DecoderFlops
from caption.model.vocabulary import Vocabulary
from caption.training import callbacks
from caption.training.callbacks import ModelFlopsUtilization, TokensPerSecond

PAD = Vocabulary.PAD


class Toy(L.LightningModule):
    """One weight trained on captions of 1 to 4 words: batches whose token counts differ."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))

    def training_step(self, batch: dict[str, torch.Tensor], batch_index: int) -> torch.Tensor:
        return self.weight * batch["caption"].float().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def toy_captions(count: int) -> list[dict[str, torch.Tensor]]:
    """<start> w.. <end> <pad>..: caption i has i % 4 + 1 words, so i % 4 + 2 target tokens."""
    return [{"caption": torch.tensor([1] + [5] * (i % 4 + 1) + [2] + [PAD] * (3 - i % 4))} for i in range(count)]


def target_tokens(batch: dict[str, torch.Tensor]) -> int:
    return int((batch["caption"][:, 1:] != PAD).sum())


class ReduceSpy(Callback):
    """From the start of training, wraps `trainer.strategy.reduce` (what an all-reduce over ranks goes through) and
    records the global step of each call. The toy module reduces nothing itself."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.monkeypatch, self.steps = monkeypatch, []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        reduce = trainer.strategy.reduce

        def spy(*args: Any, **kwargs: Any) -> Any:
            self.steps.append(trainer.global_step)
            return reduce(*args, **kwargs)

        self.monkeypatch.setattr(trainer.strategy, "reduce", spy)


@pytest.mark.parametrize(
    ("accumulate", "every", "windows"), [(1, 5, [(0, 5), (5, 10)]), (2, 2, [(0, 4), (4, 8), (8, 12)])]
)
def test_tokens_per_second_is_logged_once_per_window_with_one_all_reduce(
    tmp_path, monkeypatch, accumulate, every, windows
):
    """12 batches of 2; optimizer steps of `accumulate` batches; a log every `every` optimizer steps. Each window of
    batches [start, end) is logged once, at its last step, as its tokens over its seconds (a last window shorter
    than `every` steps is not logged, as Lightning writes no step metrics then either)."""
    clock = itertools.count(start=10.0, step=0.5)  # every reading of the clock is 0.5 s after the one before
    monkeypatch.setattr(callbacks, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    data = toy_captions(24)
    batches = list(DataLoader(data, batch_size=2))
    logger, spy = Recording(), ReduceSpy(monkeypatch)
    trainer = L.Trainer(
        accelerator="cpu", max_steps=12 // accumulate, accumulate_grad_batches=accumulate, log_every_n_steps=every,
        logger=logger, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[spy, TokensPerSecond()], default_root_dir=tmp_path,
    )
    trainer.fit(Toy(), DataLoader(data, batch_size=2))

    logged_steps = [end // accumulate for _, end in windows]
    assert spy.steps == logged_steps, "one all-reduce per logged window, none on other steps"
    # two clock readings per window (its first batch starts, its last step ends): 0.5 s each
    expected = [sum(target_tokens(batch) for batch in batches[start:end]) / 0.5 for start, end in windows]
    assert logger.values("train/tokens_per_sec") == [(step - 1, value) for step, value in zip(logged_steps, expected)]




@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> CaptionDataModule:
    source = ShapesSource(root=str(tmp_path_factory.mktemp("shapes")), num_train=10, num_val=4, num_test=4)
    encoder = {data_key: dotted(TINY_GROUPS)[model_key] for model_key, data_key in DATA_LINKS.items()
               if model_key in dotted(TINY_GROUPS)}  # as the CLI links them
    return CaptionDataModule(source=source, batch_size=8, eval_batch_size=4, **encoder)  # 50 captions: 7 batches


class Batches(Callback):
    """The decoder's analytic training FLOPs of each batch, computed here from the batch itself."""

    def __init__(self):
        self.flops: list[int] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_index):
        with torch.no_grad():
            locations = module.model.annotations(batch).shape[1]
        samples = module.model.settings.hard.samples if module.model.settings.hard else 1
        counts = DecoderFlops.of(module.model.decoder, locations)
        rows, tokens = samples * len(batch["caption"]), samples * target_tokens(batch)  # Monte Carlo copies
        self.flops.append(counts.training(captions=rows, tokens=tokens))


def fit_tiny(shapes: CaptionDataModule, root: Path, monitor: ModelFlopsUtilization, kind: str = "soft",
             **groups: Any) -> Recording:
    logger, batches = Recording(), Batches()
    trainer = L.Trainer(
        accelerator="cpu", max_steps=4, log_every_n_steps=2, limit_val_batches=1, val_check_interval=2,
        num_sanity_val_steps=0, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[batches, monitor], default_root_dir=root,
    )
    module = tiny_module(shapes.vocabulary, kind, **groups)
    trainer.fit(module, datamodule=shapes)
    logger.batches, logger.module = batches, module
    return logger


def from_throughput_monitor(name: str) -> bool:
    """ThroughputMonitor's names: <stage>/time, <stage>/batches, <stage>/samples and <stage>/device/<rate>."""
    return name.split("/", 1)[-1] in {"time", "batches", "samples"} or "/device/" in name


def test_mfu_monitor_is_inert_on_a_cpu(shapes, tmp_path):
    monitor = ModelFlopsUtilization(window_size=2)
    logger = fit_tiny(shapes, tmp_path, monitor)
    assert not monitor.active
    assert not any(from_throughput_monitor(name) for _, metrics in logger.rows for name in metrics)
    assert not hasattr(logger.module, "flops_per_batch") and not logger.module.model.decoder._forward_pre_hooks


@pytest.mark.parametrize("model", [dict(kind="soft"), dict(kind="hard", hard={"samples": 2})])
def test_mfu_monitor_reports_the_analytic_flops_of_each_batch(shapes, tmp_path, monkeypatch, model):
    """The GPU path, forced on a CPU: a peak of 1 TFLOP/s stands in for the GPU's."""
    monkeypatch.setattr(ModelFlopsUtilization, "measures", staticmethod(lambda trainer: True))
    monkeypatch.setattr("lightning.pytorch.callbacks.throughput_monitor.get_available_flops", lambda *_: 10**12)
    monitor = ModelFlopsUtilization(window_size=4)
    logger = fit_tiny(shapes, tmp_path, monitor, **model)

    assert list(monitor._throughputs[RunningStage.TRAINING]._flops) == logger.batches.flops  # one process
    assert len(set(logger.batches.flops)) > 1, "batches of different caption lengths cost different FLOPs"
    [(step, metrics)] = [(step, metrics) for step, metrics in logger.rows if "train/device/mfu" in metrics]
    assert step == 3 and metrics["train/device/mfu"] == metrics["train/device/flops_per_sec"] / 10**12
    assert not any("validate/device/flops_per_sec" in metrics for _, metrics in logger.rows), "no FLOPs for decoding"
    assert logger.module.flops_per_batch is None and not logger.module.model.decoder._forward_pre_hooks
