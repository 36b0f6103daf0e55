"""Test-only callbacks for tests that run the real CLI in subprocesses: what each rank sees (`Probe`), what a
fine-tuned encoder and its optimizer hold (`EncoderProbe`), a SIGTERM before the first step, and warnings while a
progress bar is drawn (`WarnsMidEpoch`).

Add one with `--trainer.callbacks+=kit.probes.<Name>` and tests/ on PYTHONPATH (`kit.cli.environment`); the probes
append one JSON line per event to a file in $CAPTION_PROBE_DIR (Lightning's ddp launcher passes the environment on to
the other ranks).
"""

import json
import os
import signal
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from caption.errors import CaptionWarning
from caption.model.vocabulary import Vocabulary


def read_records(folder: Path, name: str) -> list[dict[str, Any]]:
    """The records in `folder`/`name`.jsonl so far (a line still being written is left out)."""
    path = folder / f"{name}.jsonl"
    lines = path.read_text().split("\n")[:-1] if path.exists() else []
    return [json.loads(line) for line in lines]


def append_record(name: str, record: dict[str, Any]) -> None:
    with open(Path(os.environ["CAPTION_PROBE_DIR"]) / f"{name}.jsonl", "a") as file:
        file.write(json.dumps(record) + "\n")


def read_probe(folder: Path, rank: int) -> list[dict[str, Any]]:
    """`Probe`'s records of one rank so far."""
    return read_records(folder, f"rank{rank}")


def steps_done(folder: Path, rank: int = 0) -> list[int]:
    """The global step after each training batch `Probe` has recorded on `rank` so far."""
    return [record["global_step"] for record in read_probe(folder, rank) if record["event"] == "batch_end"]


def checksum(tensors: Iterable[torch.Tensor]) -> float:
    """Sum of every value, in float64, in the order given."""
    return float(sum(tensor.detach().double().sum() for tensor in tensors))


def optimizer_summary(optimizer_state: dict[str, Any]) -> dict[str, float]:
    """Adam's step count and moment sums from an optimizer state_dict (live or from a checkpoint)."""
    states = list(optimizer_state["state"].values())
    return {
        "optimizer_step": float(states[0]["step"]) if states else 0.0,
        "exp_avg_sum": float(sum(state["exp_avg"].double().sum() for state in states)),
        "exp_avg_sq_sum": float(sum(state["exp_avg_sq"].double().sum() for state in states)),
    }


class Probe(Callback):
    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, event: str, **extra: Any) -> None:
        record = {
            "event": event,
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "global_step": trainer.global_step,
            "epoch": trainer.current_epoch,
            "baseline": (pl_module.objective.baseline.value.item() if pl_module.model.settings.attention.kind == "hard"
                         else 0.0),
            "parameters": checksum(pl_module.parameters()),
            **extra,
        }
        if trainer.optimizers:
            record.update(optimizer_summary(trainer.optimizers[0].state_dict()))
        append_record(f"rank{trainer.global_rank}", record)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer, pl_module, "train_start")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self._write(trainer, pl_module, "batch_end")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer, pl_module, "train_end")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
            self._write(trainer, pl_module, "validation_end", metrics=metrics)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
        self._write(trainer, pl_module, "test_end", metrics=metrics)


class SigtermInSanityCheck(Callback):
    """Sends this process SIGTERM when the sanity check starts, as a pre-empting scheduler may (before any step)."""

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


class EncoderProbe(Callback):
    """What a fine-tuned encoder and the optimizer hold, in $CAPTION_PROBE_DIR/encoder.jsonl."""

    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, event: str) -> None:
        encoder = pl_module.model.encoder
        append_record("encoder", {
            "event": event,
            "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "layer3": checksum(encoder.layer3.parameters()),
            "layer4": checksum(encoder.layer4.parameters()),
            "decoder": checksum(pl_module.model.decoder.parameters()),
            "trainable": sum(parameter.requires_grad for parameter in encoder.parameters()),
            "encoder_training": encoder.training,
            "groups": [{"name": group.get("name"), "lr": group["lr"], "size": len(group["params"])}
                       for group in trainer.optimizers[0].param_groups] if trainer.optimizers else [],
        })

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer, pl_module, "train_start")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self._write(trainer, pl_module, "batch_end")


class CaptionProbe(Callback):
    """Every training batch's captions, as [image id, token ids without padding...] rows, with its rank, epoch and step,
    in $CAPTION_PROBE_DIR/captions<rank>.jsonl."""

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           *_: Any) -> None:
        rows = [[int(image), *(int(token) for token in caption if token != Vocabulary.PAD)]
                for image, caption in zip(batch["image_id"], batch["caption"])]
        append_record(f"captions{trainer.global_rank}", {"epoch": trainer.current_epoch,
                                                          "global_step": trainer.global_step, "captions": rows})


class SigtermAtStep(Callback):
    """Sends SIGTERM to rank 0's process at the end of the training batch of optimizer step `step`, as a scheduler
    pre-empting the run does (Lightning passes it on to the other ranks)."""

    def __init__(self, step: int = 1) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if trainer.global_rank == 0 and trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


class WarnsMidEpoch(Callback):
    """Warns in the middle of the first epoch, while its progress bar is drawn: a warning of the project's and one of a
    dependency's (named by a file under site-packages), as a run's console shows them."""

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        if trainer.global_step == 1:
            warnings.warn("a warning of the project's,\n  in two lines", CaptionWarning)
            warnings.warn_explicit("a dependency's note", UserWarning, "/venv/lib/site-packages/dependency/notes.py", 7)
